"""What the ``troupe`` commands share: consoles, errors, logging, configs, stores and runtimes.

The command line is a shell around the core (like ``orchestrator.surfaces.http``): it reads files, the
clock and the environment. It still never imports ``ray`` or ``actors`` at module level — they
are imported inside the functions that start a runtime, so ``troupe --help`` stays fast and the
dependency direction of the design holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from orchestrator.core.errors import TroupeError, UsageError

if TYPE_CHECKING:
    from actors.base import BaseRuntime
    from orchestrator.run.agent import Agent
    from orchestrator.store.base import EventStore
    from orchestrator.surfaces.config import RuntimeConfig

__all__ = [
    "DEFAULT_STORE",
    "CommandFailed",
    "TroupeGroup",
    "configure_logging",
    "fail",
    "load_target",
    "open_read_store",
    "ray_temp_dir",
    "report",
    "started_runtime",
    "stderr",
    "stdout",
]

DEFAULT_STORE: Final = "sqlite:///troupe.db"
"""The embedded default: a SQLite file in the working folder."""
STORE_ENV: Final = "TROUPE_STORE"
"""The environment variable every ``--store`` option reads."""

# The options that `run`, `chat` and `serve` share.
ConfigPath = Annotated[Path, typer.Argument(help="The agent config (YAML), e.g. configs/shop.yaml.")]
StoreOption = Annotated[
    str | None,
    typer.Option(envvar=STORE_ENV, help="Event store URL. Default: the config's runtime.store, else troupe.db."),
]
LocalOption = Annotated[bool, typer.Option("--local", help="Run in this process, without Ray.")]

RAY_TEMP_ENV: Final = "TROUPE_RAY_TEMP_DIR"
"""Where a local Ray keeps its session files (default ``./.troupe/ray``)."""
_SOCKET_ROOM: Final = 40
"""Longest Ray temp dir we use as is: Ray puts Unix sockets ~66 characters below it, and a
socket path may not exceed 107 bytes."""

LogFormat = Literal["console", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]


class CommandFailed(Exception):
    """A command cannot go on: ``message`` says what and how to fix it; exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


def stdout() -> Console:
    """A console on the current ``sys.stdout`` (made per command, so tests capture it)."""
    return Console()


def stderr() -> Console:
    """A console on the current ``sys.stderr``."""
    return Console(stderr=True)


def report(message: str) -> None:
    """Print ``error: <message>`` on one line to stderr."""
    stderr().print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True, highlight=False)


def fail(message: str, code: int = 1) -> NoReturn:
    """Raise ``CommandFailed`` (the root command prints it as one line and exits with ``code``)."""
    raise CommandFailed(message, code)


class TroupeGroup(TyperGroup):
    """The root command: a user's mistake becomes one line on stderr and an exit code, never a traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer vendors click: its Context type is private
        """Run the command; ``TroupeError`` exits 2 (usage) or 1, ``CommandFailed`` its code, Ctrl-C 130."""
        try:
            return super().invoke(ctx)
        except CommandFailed as error:
            report(error.message)
            raise typer.Exit(error.code) from None
        except UsageError as error:
            report(error.message)
            raise typer.Exit(2) from None
        except TroupeError as error:
            report(error.message)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


# -- logging -----------------------------------------------------------------------------------------


def configure_logging(format: LogFormat = "console", level: LogLevel = "warning") -> None:
    """Send structlog's output to stderr: key-value lines for people, or one JSON object a line.

    The Ray processes this one starts log the same way (see ``actors.logs``).
    """
    from actors.logs import configure

    configure(format, level)


# -- configs and stores --------------------------------------------------------------------------------


def load_target(config: Path, agent: str | None = None) -> tuple[Agent, RuntimeConfig]:
    """The agent a config file runs (its main one, or ``agent``) and its runtime section.

    Raises:
        ConfigError: the file is missing or invalid (the message names the file and key).
    """
    from orchestrator.surfaces.config import RuntimeConfig, load_config

    loaded = load_config(config)
    return loaded.agent(agent), loaded.runtime or RuntimeConfig()


def _sqlite_path(url: str) -> Path | None:
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return None
    path = url[len(prefix) :].partition("?")[0]
    return Path(path) if path and path != ":memory:" else None


async def open_read_store(url: str) -> EventStore:
    """Open a store to read sessions from; a SQLite file must exist already (reading never creates one).

    Raises:
        CommandFailed: the SQLite file does not exist.
        UsageError: the URL is not a store URL.
    """
    from orchestrator.store import open_store

    path = _sqlite_path(url)
    if path is not None and not path.is_file():
        fail(
            f"no store at {path} (from {Path.cwd()}): run a session first (troupe run CONFIG), "
            f"or pass --store sqlite:///path/to/troupe.db (or set {STORE_ENV})"
        )
    return open_store(url)


# -- runtimes ------------------------------------------------------------------------------------------


def ray_temp_dir(workdir: Path) -> tuple[Path, bool]:
    """Where a local Ray keeps its files, and whether the caller must remove it afterwards.

    ``$TROUPE_RAY_TEMP_DIR``, else ``<workdir>/.troupe/ray`` — unless that path is too long for
    the Unix sockets Ray creates under it; then a fresh short directory under the system temp dir.
    """
    override = os.environ.get(RAY_TEMP_ENV)
    candidate = Path(override).resolve() if override else (workdir / ".troupe" / "ray").resolve()
    if override or len(str(candidate).encode()) <= _SOCKET_ROOM:
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            fail(f"cannot create Ray's temp dir {candidate}: {error.strerror or error}; set {RAY_TEMP_ENV} elsewhere")
        return candidate, False
    return Path(tempfile.mkdtemp(prefix="troupe-ray-")), True


@contextlib.asynccontextmanager
async def started_runtime(
    settings: RuntimeConfig,
    *,
    store: str | None = None,
    local: bool = False,
    workdir: Path | None = None,
    follow: Literal["hosts", "store"] = "hosts",
) -> AsyncIterator[BaseRuntime]:
    """A started runtime for a command: in process (``local``) or on Ray, closed on exit.

    ``store`` (the ``--store`` option) wins over the config's ``runtime.store``. A local Ray gets
    its own temp dir (see ``ray_temp_dir``) and quiet telemetry. ``follow="store"``: the Ray
    runtime's subscriptions follow the store's log when it pushes commits (PostgreSQL).

    Raises:
        UsageError: a bad store URL, or ``memory://`` on Ray.
        CommandFailed: Ray did not start (the message says what to try).
    """
    url = store or settings.store
    runtime: BaseRuntime
    cleanup: Path | None = None
    if local:
        from actors.local import LocalRuntime

        runtime = LocalRuntime(url, idle_timeout=settings.idle_timeout)
        await runtime.start()
    else:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        from actors.runtime import Runtime

        options: dict[str, Any] = {"logging_level": logging.WARNING}
        if settings.address is None:
            temp, remove = ray_temp_dir(workdir or Path.cwd())
            options["_temp_dir"] = str(temp)
            cleanup = temp if remove else None
        ray_runtime = Runtime(
            url,
            address=settings.address,
            placement=settings.placement,
            hosts_per_node=settings.hosts_per_node,
            idle_timeout=settings.idle_timeout,
            max_dedicated=settings.max_dedicated,
            dedicated_wait=settings.dedicated_wait,
            follow=follow,
            ray_options=options,
        )
        runtime = ray_runtime
        try:
            await ray_runtime.start()
        except TroupeError:
            await _close_quietly(runtime, cleanup)
            raise
        except Exception as error:
            await _close_quietly(runtime, cleanup)
            where = f"join the Ray cluster at {settings.address}" if settings.address else "start a local Ray"
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            if "AF_UNIX path length" in first:
                fix = f"set {RAY_TEMP_ENV} to a shorter directory"
            elif settings.address:
                fix = "check the address and that the cluster runs"
            else:
                fix = "or try --local (no Ray)"
            fail(f"could not {where}: {first}; {fix}")
    try:
        yield runtime
    finally:
        await runtime.close()
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)


async def _close_quietly(runtime: BaseRuntime, cleanup: Path | None) -> None:
    with contextlib.suppress(Exception):
        await runtime.close()
    if cleanup is not None:
        shutil.rmtree(cleanup, ignore_errors=True)
