"""Library logs go to stderr at WARNING for a program that has not configured structlog, and an
app's own structlog configuration is left alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from actors.local import LocalRuntime
from orchestrator.surfaces.cli.common import configure_logging


@pytest.fixture(autouse=True)
def _keep_structlog(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    saved = structlog.get_config()
    for name in ("TROUPE_LOG_LEVEL", "TROUPE_LOG_FORMAT"):  # put back as they were after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)


def test_an_unconfigured_program_gets_warnings_on_stderr_and_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert not structlog.is_configured()
    LocalRuntime()
    log = structlog.get_logger()
    log.info("runtime_started", hosts=1)
    log.warning("host_slow", host="h-1")
    out, err = capsys.readouterr()
    assert out == ""
    assert "host_slow" in err and "runtime_started" not in err


def test_an_apps_own_structlog_configuration_is_kept() -> None:
    structlog.configure(processors=[structlog.processors.JSONRenderer()], cache_logger_on_first_use=False)
    mine = structlog.get_config()
    LocalRuntime()
    assert structlog.get_config() == mine


def test_the_cli_log_level_still_wins(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", "info")
    LocalRuntime()
    structlog.get_logger().info("runtime_started")
    out, err = capsys.readouterr()
    assert out == "" and '"event": "runtime_started"' in err
