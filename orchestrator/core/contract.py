"""Contracts: an app's own events and state, folded beside the conversation.

A ``Contract`` declares app event types (each a pydantic model for its payload) and optionally a
``Reducer`` whose state is merged with ``AIState`` (``state.plan``). The reducer's ``name`` is its
snapshot identity: rename it whenever ``fold`` changes, and every snapshot is rebuilt from the
log. Server-side appends are trusted; client pushes pass the ``authorize`` hook, and a client can
never push a built-in ``ai.*`` event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.core._json import JsonObject
from orchestrator.core.aistate import AI_STATE_KEYS
from orchestrator.core.errors import ParseError, UsageError
from orchestrator.core.events import BUILTIN_PREFIX, Event

__all__ = ["Contract", "Operation", "Reducer"]

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Reducer(Generic[S]):
    """A named fold over a session's events. ``fold`` must be pure: ``(state, event) -> state``."""

    name: str
    """The snapshot identity: change it when ``fold`` changes."""
    initial_state: S
    """The state before any event."""
    fold: Callable[[S, Event], S]
    """The next state after an event (it sees every event of the log, never the transcript)."""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise UsageError("a Reducer needs a non-empty name: it is the snapshot identity (e.g. 'desk.v1')")
        if not callable(self.fold):
            raise UsageError(f"Reducer {self.name!r}: fold must be a function (state, event) -> state")

    def replay(self, events: Sequence[Event], state: S | None = None) -> S:
        """Fold ``events`` from ``state`` (or the initial state)."""
        current = self.initial_state if state is None else state
        for event in events:
            current = self.fold(current, event)
        return current


@dataclass(frozen=True, slots=True)
class Operation:
    """What a client asks to do, as the ``authorize`` hook sees it."""

    type: Literal["push", "command"]
    """``push`` for app events, ``command`` for built-in commands."""
    session_id: str
    """The session."""
    events: tuple[Event, ...] = ()
    """The events a push would append."""
    command: str | None = None
    """The command name, for ``command`` operations."""


@dataclass(frozen=True, slots=True)
class Contract:
    """App event schemas, an optional merged reducer, and the client ``authorize`` hook."""

    name: str
    """The contract's name."""
    events: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    """Event type -> payload model."""
    reducer: Reducer[Mapping[str, Any]] | None = None
    """Folded into ``AIState.app`` over every event, built-in ``ai.*`` ones too (live and replayed
    alike); its initial state's keys must not shadow ``AIState``'s."""
    authorize: Callable[[Operation], bool] | None = None
    """Decides client operations (server appends skip it). ``None`` allows every app event."""

    def __post_init__(self) -> None:
        for event_type, model in self.events.items():
            if event_type.startswith(BUILTIN_PREFIX):
                raise UsageError(
                    f"contract {self.name!r}: event type {event_type!r} uses the reserved prefix "
                    f"{BUILTIN_PREFIX!r}; name app events without it (e.g. 'plan.changed')"
                )
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise UsageError(f"contract {self.name!r}: events[{event_type!r}] must be a pydantic model class")
        if self.reducer is not None:
            initial = self.reducer.initial_state
            if not isinstance(initial, Mapping):
                raise UsageError(
                    f"contract {self.name!r}: the reducer's initial_state must be a mapping of app keys "
                    "(it is merged with AIState)"
                )
            clash = sorted(set(initial) & AI_STATE_KEYS)
            if clash:
                raise UsageError(
                    f"contract {self.name!r}: app state key(s) {', '.join(map(repr, clash))} would shadow AIState; "
                    "rename them (e.g. 'app_status')"
                )

    def validate(self, event_type: str, payload: Any) -> JsonObject:
        """The payload of an app event, validated by its model and dumped as JSON.

        Raises:
            UsageError: for an unknown type; ParseError naming the bad field otherwise.
        """
        model = self.events.get(event_type)
        if model is None:
            known = ", ".join(sorted(self.events)) or "none"
            raise UsageError(f"contract {self.name!r} has no event type {event_type!r} (its types: {known})")
        try:
            parsed = model.model_validate(payload)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "payload"
            raise ParseError(f"{event_type} payload: {where}: {first['msg']}", f"payload.{where}") from None
        dumped: JsonObject = parsed.model_dump(mode="json")
        return dumped

    def allows(self, operation: Operation) -> bool:
        """Whether a client may perform ``operation`` (built-in events never)."""
        if any(e.type.startswith(BUILTIN_PREFIX) for e in operation.events):
            return False
        return True if self.authorize is None else bool(self.authorize(operation))

    def fold_app(self, app: Mapping[str, Any], event: Event) -> Mapping[str, Any]:
        """The app state after ``event`` (unchanged without a reducer)."""
        if self.reducer is None:
            return app
        return self.reducer.fold(app, event)

    @property
    def initial_app(self) -> Mapping[str, Any]:
        """The app state before any event."""
        return {} if self.reducer is None else dict(self.reducer.initial_state)
