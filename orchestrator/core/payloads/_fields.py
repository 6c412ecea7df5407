"""What every payload class shares: the config it is read with, and the field types that bring their own validator.

``commands`` and ``lifecycle`` both import this module, so neither imports the other for it.
``Parts`` and ``Actions`` hand each item to ``orchestrator.core.wire``'s readers (which name the
bad field), and ``Calls`` reads the ``[{id, name}]`` wire list into ``(id, name)`` pairs; each is
an ``Annotated`` alias, so ``PAYLOAD_ADAPTER`` runs its validator wherever a class uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, TypeAlias

from pydantic import ConfigDict, PlainValidator
from pydantic.alias_generators import to_camel

from orchestrator.core.actions import SessionAction
from orchestrator.core.stream import AgentStreamPart
from orchestrator.core.wire import parse_action, parse_part

_CONFIG: Final = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
"""How ``PAYLOAD_ADAPTER`` reads a payload: camelCase keys, and an unknown key is an error."""


def _check_parts(value: Any) -> tuple[AgentStreamPart, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("parts must be a list of stream parts")
    return tuple(parse_part(p, where=f"parts[{i}]") for i, p in enumerate(value))


def _check_actions(value: Any) -> tuple[SessionAction, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("actions must be a list of session actions")
    return tuple(parse_action(a) for a in value)


def _check_calls(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list | tuple) or not all(
        isinstance(c, Mapping) and isinstance(c.get("id"), str) and isinstance(c.get("name"), str) for c in value
    ):
        raise ValueError("toolCalls must be a list of {id, name} objects")
    return tuple((c["id"], c["name"]) for c in value)


Parts: TypeAlias = Annotated[tuple[AgentStreamPart, ...], PlainValidator(_check_parts)]
Actions: TypeAlias = Annotated[tuple[SessionAction, ...], PlainValidator(_check_actions)]
Calls: TypeAlias = Annotated[tuple[tuple[str, str], ...], PlainValidator(_check_calls)]
