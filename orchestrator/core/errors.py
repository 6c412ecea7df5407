"""Troupe's errors: one root, families under it.

```
TroupeError
├── UsageError              the caller's mistake; the message says how to fix it
│   ├── ParseError          a JSON/msgpack value that is not the shape it claims (names the field)
│   └── ConfigError         an agent or runtime config that cannot load (names file and key)
├── RunError                a turn could not finish
│   ├── ModelError          a model adapter failed (carries a SessionError code)
│   └── ToolError           a tool failed, timed out, or was given bad arguments (a ``code`` says which)
└── StoreError              the event store refused or failed
    ├── ConcurrencyConflict     the log moved past the index the writer expected
    └── PartialDuplicateBatch   an event id was reused with other content, type or session
```

Every exception pickles (they cross Ray): constructor arguments are positional and kept in
``self.args``; ``self.message`` is the human text.
"""

from __future__ import annotations

__all__ = [
    "ConcurrencyConflict",
    "ConfigError",
    "ModelError",
    "ParseError",
    "PartialDuplicateBatch",
    "RunError",
    "StoreError",
    "ToolError",
    "TroupeError",
    "UsageError",
]


class TroupeError(Exception):
    """The root of every error Troupe raises on purpose."""

    def __init__(self, message: str, *args: object) -> None:
        super().__init__(message, *args)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(TroupeError):
    """The caller's mistake. The message names the problem and the fix."""


class ParseError(UsageError):
    """A value (JSON, msgpack, a dict) that does not have the shape it claims.

    ``field`` is a dotted path to the offending field (``""`` for the value itself).
    """

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message, field)
        self.field = field


class ConfigError(UsageError):
    """An agent or runtime config that cannot be loaded."""


class RunError(TroupeError):
    """A turn could not finish."""


class ModelError(RunError):
    """A model adapter failed; ``code`` is a SessionError code when one applies."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message, code)
        self.code = code


class ToolError(RunError):
    """A tool failed, timed out, or was called with arguments that do not validate.

    ``code`` says which, for code that acts on it (the run loop puts it on the call's
    ``tool-error``): ``"timeout"`` (the tool ran past its ``timeout``), ``"invalid_arguments"``
    (the call never reached the function), or ``None`` (the tool's own failure). Read the code,
    never the message: the message is for the model and may say anything.
    """

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message, code)
        self.code = code


class StoreError(TroupeError):
    """The event store refused a write or could not be read."""


class ConcurrencyConflict(StoreError):
    """The session's log is not at the index the writer expected (someone else appended)."""

    def __init__(self, message: str, session_id: str = "", expected: int = -1, actual: int = -1) -> None:
        super().__init__(message, session_id, expected, actual)
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class PartialDuplicateBatch(StoreError):
    """An event id was reused with different content, type or session.

    The code ``PARTIAL_DUPLICATE_BATCH`` is what a command rejection carries for this.
    """

    code = "PARTIAL_DUPLICATE_BATCH"

    def __init__(self, message: str, event_id: str = "") -> None:
        super().__init__(message, event_id)
        self.event_id = event_id
