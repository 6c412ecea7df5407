"""The OpenAI adapter's errors and retries.

What an HTTP status or a connection failure means for a step (a ``ModelError`` and its code), and
when a step whose response has not started yet is tried again (``RetrySchedule``).
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from orchestrator.core.errors import ModelError

if TYPE_CHECKING:
    pass

__all__ = ["DEFAULT_RETRIES", "NO_RETRIES", "RETRIED_CODES", "RetrySchedule", "model_error", "retry_after"]

RETRIED_CODES: Final = frozenset({"rate_limited", "network"})
"""The ``ModelError`` codes worth another try: a 429, a 5xx, a connection error or a timeout."""


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """How a step whose response has not started yet is tried again."""

    delays: tuple[float, ...] = (0.5, 1.0, 2.0)
    """Seconds before each retry; as many retries as delays."""
    max_retry_after: float = 8.0
    """The longest server ``Retry-After`` honoured; a longer one waits this long. A step that
    waits minutes looks hung; failing with ``rate_limited`` lets the caller decide."""
    jitter: float = 0.25
    """Each delay is shortened by up to this fraction at random, so that sessions rate-limited
    together do not all come back together (a server's ``Retry-After`` is kept as given)."""

    def delay(self, retry: int, retry_after: float | None, draw: Callable[[], float] = random.random) -> float | None:
        """Seconds to wait before retry number ``retry`` (from 0), or ``None`` when none is left.

        Args:
            retry: How many retries were made already.
            retry_after: What the server asked for (``Retry-After``), if it did.
            draw: A number in [0, 1) for the jitter.
        """
        if retry >= len(self.delays):
            return None
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.delays[retry] * (1.0 - self.jitter * draw())


DEFAULT_RETRIES: Final = RetrySchedule()
"""0.5, 1 and 2 s (less jitter), a ``Retry-After`` up to 8 s each: a passing rate limit or
restart is ridden out in a few seconds, and a lasting one fails the step soon enough to tell."""
NO_RETRIES: Final = RetrySchedule(())
"""Fail on the first error."""


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for, in seconds; ``None`` when it asks for none readable.

    ``retry-after-ms`` (OpenAI's) first, then ``retry-after`` in seconds or as an HTTP date.
    """
    if headers is None:
        return None
    for header, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) * unit
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) else None
    date = headers.get("retry-after")
    when = email.utils.parsedate_tz(date) if date else None
    return None if when is None else email.utils.mktime_tz(when) - time.time()


# --- errors -------------------------------------------------------------------------------------


def model_error(openai: Any, err: Exception, name: str, base_url: str, started: bool) -> ModelError:
    """The ``ModelError`` (message and code) for an exception the ``openai`` client raised."""
    if isinstance(err, openai.APIStatusError):
        status: int = err.status_code
        reason = getattr(err.response, "reason_phrase", "")
        status_line = f"HTTP {status} {reason}" if reason else f"HTTP {status}"
        message = f"{name}: {base_url} answered {status_line}: {_server_message(err)}"
        return ModelError(message, _status_code(status))
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None and str(cause) else err.message
        if isinstance(err, openai.APITimeoutError):
            what = f"timed out waiting for {base_url}"
        elif started:
            what = f"lost the connection to {base_url} mid-stream"
        else:
            what = f"could not reach {base_url}"
        return ModelError(f"{name}: {what} ({detail})", "network")
    if isinstance(err, openai.APIError):
        # An error event inside a 200 stream; LiteLLM-style bodies carry the upstream status.
        status_text = str(err.code) if err.code is not None else ""
        code = _status_code(int(status_text)) if status_text.isdigit() else "network"
        return ModelError(f"{name}: {base_url} reported an error mid-stream: {_server_message(err)}", code)
    return ModelError(f"{name}: {type(err).__name__}: {err}")


def _status_code(status: int) -> str:
    """The SessionError code for an HTTP status: 429 and other 4xx are final, the rest transient."""
    if status == 429:
        return "rate_limited"
    return "bad_request" if 400 <= status < 500 else "network"


def _server_message(err: Any) -> str:
    body = err.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(err.message)
