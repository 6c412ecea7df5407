"""The typed payload of every built-in ``ai.*`` event, and its wire codec from one field table.

Where the typed value lives: beside the wire payload, as ``Event.data`` (see
``orchestrator.core.events``). An ``ai.*`` event built from a wire dict (a store row, an old log,
an engine call site not yet converted) decodes it once, with the trusted fast decoder, when the
event is made; one built from a typed payload encodes its wire dict once, when it is made. So
the fold only ever matches on typed payloads, every reader of ``Event.payload`` still sees the
permanent camelCase wire shape, and nothing is converted twice. Keeping the wire dict (rather
than typing ``Event.payload`` itself) keeps app events, the store's JSON checks, the CLI's
renderer and every subscriber unchanged.

Each payload is a frozen slotted dataclass with a ``type`` class variable (its event type). The
field table of a class is read from its dataclass fields once, at import: the wire key is the
camelCase of the attribute; ``_CODECS`` names the few fields whose value needs converting
(stream parts, nested actions, lists); a field whose default is ``None`` is left out of the wire
dict when it is ``None``, unless it is listed in ``_KEEP_NULL`` (today's logs write it as
``null``). From that table come ``payload_to_wire`` (encode), ``payload_from_wire`` (the
trusted fast decoder, for replay) and, through the one ``PAYLOAD_ADAPTER``, ``parse_payload``
(the validating decoder, for a payload from outside: it names the bad field).

Where each part lives (import every name from this package, as before; the modules are a layout):

- ``_fields``: what every class shares: the pydantic config ``_CONFIG``, and the ``Parts``,
  ``Actions`` and ``Calls`` field types with their validators.
- ``commands``: the command payloads, ``Decided`` and the ``CommandPayload`` union.
- ``lifecycle``: the payloads a session writes as it runs (turns, steps, tools, approvals,
  sub-agents, compaction, model metadata, handlers), and ``TurnPhase`` beside its event.
- ``schema``: the ``AIPayload`` union and ``PAYLOAD_CLASSES``, checked at import against
  ``event_types``.
- ``codec``: ``PAYLOAD_ADAPTER``, the field tables (``_CODECS``, ``_KEEP_NULL``, ``_TABLES``) and
  the three converters.

The table stays derived from the classes, at import, rather than written out beside them, though
the classes now sit in other modules: a type apart from its table, or from the union the fold
matches on, is how a stored shape drifts. A new field is one line in its dataclass and its wire
shape follows; ``schema`` fails the import if an event type has no payload class. The modules
import each other directly, never through this package, so the package has no import cycle.
"""

from orchestrator.core.payloads.codec import PAYLOAD_ADAPTER, parse_payload, payload_from_wire, payload_to_wire
from orchestrator.core.payloads.commands import (
    CommandPayload,
    Decided,
    Input,
    InputEdit,
    InputMove,
    InputRemove,
    InputSendNow,
    Pause,
    Respond,
    Resume,
    SessionReset,
    TurnRetry,
    TurnStop,
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
    TurnPhase,
    TurnPhaseChanged,
    TurnStarted,
)
from orchestrator.core.payloads.schema import PAYLOAD_CLASSES, AIPayload

__all__ = [
    "PAYLOAD_ADAPTER",
    "PAYLOAD_CLASSES",
    "AIPayload",
    "ChildStarted",
    "CommandPayload",
    "Compaction",
    "Decided",
    "HandlerFinished",
    "HandlerScheduled",
    "Input",
    "InputAdmitted",
    "InputEdit",
    "InputMove",
    "InputRemove",
    "InputSendNow",
    "InteractionRequested",
    "ModelMetadataRequested",
    "ModelMetadataResolved",
    "Nested",
    "Pause",
    "Respond",
    "Resume",
    "SessionReset",
    "StepFailed",
    "StepFinished",
    "StepStarted",
    "StepSuperseded",
    "Stream",
    "ToolFailed",
    "ToolFinished",
    "ToolReset",
    "ToolStarted",
    "TurnFinished",
    "TurnPhase",
    "TurnPhaseChanged",
    "TurnRetry",
    "TurnStarted",
    "TurnStop",
    "parse_payload",
    "payload_from_wire",
    "payload_to_wire",
]
