"""Where Troupe's logs go: stderr, warnings and worse, unless the program says otherwise.

Troupe logs with structlog (key-value events, ``log = structlog.get_logger()``). structlog's own
default prints every level to stdout, which put a ``runtime_started`` line ahead of a script's
own output. So a runtime (and every host and supervisor process) calls ``default_logging()``:
when the program has not configured structlog (``structlog.is_configured()`` is false), logs go
to stderr at level WARNING. A program that configured structlog keeps its configuration, and
one that configures it later replaces this default.

``configure(format, level)`` is what ``troupe --log-format / --log-level`` calls. It also records
the choice in ``TROUPE_LOG_FORMAT`` / ``TROUPE_LOG_LEVEL``, which ``default_logging()`` reads: the
Ray processes started from this one (hosts, supervisor) inherit the environment and log the same
way. Set those variables to change the default without code.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Literal, TypeAlias

import structlog

__all__ = ["LogFormat", "LogLevel", "configure", "default_logging"]

LogFormat: TypeAlias = Literal["console", "json"]
LogLevel: TypeAlias = Literal["debug", "info", "warning", "error"]

FORMAT_VARIABLE = "TROUPE_LOG_FORMAT"
LEVEL_VARIABLE = "TROUPE_LOG_LEVEL"


def _stderr_logger(*_: object) -> Any:
    return structlog.PrintLogger(sys.stderr)  # looked up per logger: follows a swapped sys.stderr


def configure(format: LogFormat = "console", level: LogLevel = "warning") -> None:
    """Send structlog's output to stderr: key-value lines for people, or one JSON object a line.

    Raises:
        ValueError: an unknown format or level.
    """
    if format not in ("console", "json"):
        raise ValueError(f"log format must be 'console' or 'json', not {format!r}")
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"log level must be 'debug', 'info', 'warning' or 'error', not {level!r}")
    renderer: Any
    if format == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if format == "json" else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(levels[level.upper()]),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    os.environ[FORMAT_VARIABLE] = format
    os.environ[LEVEL_VARIABLE] = level


def default_logging() -> None:
    """Configure structlog to stderr at WARNING (or ``TROUPE_LOG_*``), unless the program already has."""
    if structlog.is_configured():
        return
    format = os.environ.get(FORMAT_VARIABLE, "console")
    level = os.environ.get(LEVEL_VARIABLE, "warning").lower()
    try:
        configure(format, level)  # type: ignore[arg-type]
    except ValueError:
        configure()  # a bad variable must not stop a runtime: the plain default
