"""The schema of the log: the one union of payload types, and the payload class of each event type.

``AIPayload`` is what the fold matches on; ``PAYLOAD_CLASSES``, read off that union, is what the
codec derives its tables and its validating adapter from and what events and snapshots look a
class up in: the classes are listed once, in the union. The assert at the end runs at
import, so an event type in ``event_types`` without a payload class (or a class without an
event type) fails at once, not on the first event of that type.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias, get_args

from orchestrator.core import event_types as ai
from orchestrator.core.payloads.commands import (
    CommandPayload,
    Decided,
)
from orchestrator.core.payloads.lifecycle import (
    ChildStarted,
    Compaction,
    HandlerFinished,
    HandlerScheduled,
    InputAdmitted,
    InteractionRequested,
    ModelMetadataRequested,
    ModelMetadataResolved,
    Nested,
    StepFailed,
    StepFinished,
    StepStarted,
    StepSuperseded,
    Stream,
    ToolFailed,
    ToolFinished,
    ToolReset,
    ToolStarted,
    TurnFinished,
    TurnPhaseChanged,
    TurnStarted,
)

__all__ = ["PAYLOAD_CLASSES", "AIPayload"]

AIPayload: TypeAlias = (
    CommandPayload
    | Decided
    | InputAdmitted
    | TurnStarted
    | TurnPhaseChanged
    | TurnFinished
    | StepStarted
    | Stream
    | StepFinished
    | StepFailed
    | StepSuperseded
    | ToolStarted
    | ToolFinished
    | ToolReset
    | ToolFailed
    | InteractionRequested
    | ChildStarted
    | Nested
    | Compaction
    | ModelMetadataRequested
    | ModelMetadataResolved
    | HandlerScheduled
    | HandlerFinished
)
"""Every built-in event's payload; ``Event.data`` holds one."""

PAYLOAD_CLASSES: Final[dict[str, type[Any]]] = {cls.type: cls for cls in get_args(AIPayload)}
"""Event type -> payload class, for every built-in event type."""

assert set(PAYLOAD_CLASSES) == {getattr(ai, name) for name in ai.__all__ if name != "COMMAND_TYPES"}
