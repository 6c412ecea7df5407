"""Every kind of id Troupe builds, one function each, so no call site joins strings itself.

Ids are data in the log: their shapes are permanent (a stored log holds them), so each shape is
written once, here. The pure builders derive an id from other ids; ``new_id`` is the one source
of fresh ids, and only the shell (the engine, ``actors/``, the surfaces) calls it — ``decide`` and
``evolve`` never do: ids come into the core as data.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Final, NewType

from orchestrator.core.errors import UsageError

__all__ = [
    "RESERVED_ID_PREFIX",
    "AgentKey",
    "approval_id",
    "child_agent_key",
    "child_session_id",
    "command_id",
    "derived_event_id",
    "derived_event_position",
    "derived_event_prefix",
    "fork_event_id",
    "handler_scheduled_id",
    "idempotent_id",
    "logical_event_id",
    "new_id",
    "reply_id",
    "root_session_id",
    "row_input_id",
    "step_id",
    "task_input_id",
    "tool_call_key",
]

RESERVED_ID_PREFIX: Final = "troupe:"
"""Event ids that Troupe chooses. Caller-chosen ids may not start with it."""

CHILD_SEPARATOR: Final = "/"
"""Between a parent session's id and the delegate call id in a sub-agent's session id."""

AgentKey = NewType("AgentKey", str)
"""The registry key of an agent tree (a root agent's key, or ``<root key>#<sub-agent name>``)."""


def new_id(prefix: str = "msg") -> str:
    """A fresh, store-wide unique id: ``<prefix>-<32 hex digits>``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def command_id() -> str:
    """A fresh id for a command the server issues itself (resume, stop, pause of a child)."""
    return new_id("cmd")


def idempotent_id(*parts: str) -> str:
    """A stable id derived from ``parts`` (e.g. contract, session and a source event id).

    A retried handler that must converge on the same input derives its id this way, so the
    resubmission replays instead of adding a second message. Ids are unique across the store,
    so include the contract and the session among the parts.
    """
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise UsageError("idempotent_id() needs one or more non-empty strings")
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]
    return f"id-{digest}"


def handler_scheduled_id(event_id: str) -> str:
    """The id of the ``ai.handler.scheduled`` that follows app event ``event_id``.

    Derived from the event, so re-pushing the same batch (the event and its schedule) replays.
    """
    return f"{RESERVED_ID_PREFIX}{event_id}:handler"


def row_input_id(session_id: str) -> str:
    """The id of the one input a pipeline row sends its session (``actors.data``).

    Derived from the session id (itself from the row's key), so a rerun, or Ray Data retrying a
    batch, resubmits the same input: it replays, and never starts a second turn.
    """
    return f"row:{session_id}"


def child_session_id(parent_id: str, call_id: str) -> str:
    """The session id of the sub-agent that delegate call ``call_id`` of ``parent_id`` runs."""
    return f"{parent_id}{CHILD_SEPARATOR}{call_id}"


def root_session_id(session_id: str) -> str:
    """The root session of a sub-agent's session (``parent/call/call`` -> ``parent``); a root is its own."""
    return session_id.split(CHILD_SEPARATOR, 1)[0]


def task_input_id(child_id: str) -> str:
    """The id of the task input a sub-agent session starts with (stable: a re-attach replays it)."""
    return idempotent_id("troupe.task", child_id)


def tool_call_key(session_id: str, call_id: str) -> str:
    """The idempotency key of tool call ``call_id`` of ``session_id``: unique across the store.

    Call ids are the model's and repeat across sessions (a scripted model's ``call-1-0-0`` in
    every one; providers' ids are not promised unique either), so a side effect keyed by the call
    id alone would merge two sessions' calls. The session id makes it unique, and the same call
    keeps its key through retries, restarts and recoveries. Hashed (``idempotent_id``), so no
    choice of ids can make two pairs collide and the key is a short ``id-<24 hex>`` that fits
    any external API's idempotency-key limit.
    """
    return idempotent_id("troupe.tool-call", session_id, call_id)


def approval_id(call_id: str) -> str:
    """The interaction id of the approval that tool call ``call_id`` asks for."""
    return f"{call_id}:approval"


def reply_id(turn_id: str) -> str:
    """The id of the assistant message a turn writes (reserved, so no input id can clash)."""
    return f"{RESERVED_ID_PREFIX}{turn_id}"


def step_id(turn_id: str, turn_step: int, attempt: int) -> str:
    """A step's id: its turn and position, and the attempt when a restart replays it."""
    base = f"{turn_id}.{turn_step + 1}"
    return base if attempt == 1 else f"{base}#{attempt}"


def derived_event_prefix(session_id: str) -> str:
    """What every derived event id of ``session_id`` starts with (the store keeps only the index)."""
    return f"{RESERVED_ID_PREFIX}{session_id}#"


def derived_event_id(session_id: str, index: int) -> str:
    """The id of a server event written without one: retrying the same batch replays it."""
    return f"{derived_event_prefix(session_id)}{index}"


def derived_event_position(event_id: str) -> tuple[str, int] | None:
    """The (session, index) a derived id names (``troupe:<session>#<index>``), else ``None``.

    A store that keeps derived ids as ``NULL`` looks an id like this up by its position.
    """
    if not event_id.startswith(RESERVED_ID_PREFIX):
        return None
    session_id, sep, number = event_id[len(RESERVED_ID_PREFIX) :].rpartition("#")
    if not sep or not session_id or not number.isdigit():
        return None
    return session_id, int(number)


FORK_ID_PREFIX: Final = f"{RESERVED_ID_PREFIX}fork:"
"""What the id of an event copied into a fork starts with (see ``fork_event_id``)."""

_FORK_TAG_LENGTH: Final = 16


def fork_event_id(source: str, target: str, index: int, event_id: str) -> str:
    """The id that event ``event_id`` (at ``index`` of ``source``) has in the fork ``target``.

    Ids are unique across the store, so a fork's copy of an event needs an id of its own:

    - a derived id (``troupe:<source>#<index>``) becomes the target's derived id at the same
      index, exactly what the target would have chosen itself;
    - every other id becomes ``troupe:fork:<16 hex digits of the target>:<logical id>``, where
      the logical id is the id the event had in the session that first wrote it (a fork of a
      fork does not nest). ``logical_event_id`` gives it back, and the fold keys commands by it,
      so the references in payloads (a decision's ``commandId``, an edit's ``inputId``, the
      message ids of inputs) stay as they were and the fork folds to the same state.
    """
    if event_id == derived_event_id(source, index):
        return derived_event_id(target, index)
    tag = hashlib.sha256(target.encode()).hexdigest()[:_FORK_TAG_LENGTH]
    return f"{FORK_ID_PREFIX}{tag}:{logical_event_id(event_id)}"


def logical_event_id(event_id: str) -> str:
    """The id an event had where it was first written (``event_id`` unless a fork copied it)."""
    if event_id.startswith(FORK_ID_PREFIX):
        return event_id[len(FORK_ID_PREFIX) + _FORK_TAG_LENGTH + 1 :]
    return event_id


def child_agent_key(root_key: str, name: str) -> AgentKey:
    """The registry key of sub-agent ``name`` within the agent tree registered as ``root_key``."""
    return AgentKey(f"{root_key}#{name}")
