"""``ScriptedModel``: a deterministic model that plays a script, step by step.

It keeps no counter in memory. It picks its step from the request, whose position the run loop
derives from the log: ``steps[k]`` for the k-th model step of the whole session (counting every
step that finished or failed), or with ``per_turn=True``, ``steps[k]`` for the k-th step of the
current turn. So a session recovered after a crash replays exactly what it would have played.

A step is a list of items, the same in Python and YAML::

    {"text": "Adding them now.", "chunk": 4}   # streamed as 4-character deltas (default: one delta)
    {"text": "Hello!", "chunk": 2, "pace": 0.03}  # and 30 ms apart, so a person sees it stream (demos)
    {"reasoning": "The cart is updated."}
    {"tool": "add_to_cart", "input": {"slug": "mug"}, "id": "call-1"}   # id optional
    {"error": "Couldn't reach the assistant.", "code": "network"}       # the step fails here
    {"finish": "stop"}                          # default: tool-calls after a tool item, else stop

It yields to the event loop after every chunk, as a network stream would, records the requests
it got, and reports the steps no request reached.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from orchestrator.core._json import JsonValue
from orchestrator.core.errors import ConfigError, ModelError
from orchestrator.core.state import ERROR_CODES
from orchestrator.core.stream import AgentStreamPart, Reasoning, StepFinish, TextDelta, ToolCall
from orchestrator.models.base import GUIDANCE_ID, CancelSignal, ModelRequest
from orchestrator.models.catalog import ModelLimits

__all__ = ["ScriptedModel", "check_script"]

_KEYS = {
    "text": {"text", "chunk", "pace"},
    "reasoning": {"reasoning"},
    "tool": {"tool", "input", "id"},
    "error": {"error", "code"},
    "finish": {"finish"},
}


def check_script(steps: Any, where: str = "ScriptedModel") -> list[list[dict[str, Any]]]:
    """The script, validated.

    Raises:
        ConfigError: naming the step and item that is wrong and how to write it.
    """
    if not isinstance(steps, Sequence) or isinstance(steps, str):
        raise ConfigError(f"{where}: steps must be a list of steps (each a list of items)")
    checked: list[list[dict[str, Any]]] = []
    for i, step in enumerate(steps):
        if not isinstance(step, Sequence) or isinstance(step, str):
            raise ConfigError(f"{where}: steps[{i}] must be a list of items like {{'text': 'Hello'}}")
        items: list[dict[str, Any]] = []
        for j, item in enumerate(step):
            at = f"{where}: steps[{i}][{j}]"
            if not isinstance(item, Mapping):
                raise ConfigError(f"{at} must be a mapping like {{'text': 'Hello'}}, got {item!r}")
            kinds = [k for k in _KEYS if k in item]
            if len(kinds) != 1:
                raise ConfigError(f"{at} must have exactly one of {', '.join(_KEYS)}; got keys {sorted(item)}")
            kind = kinds[0]
            extra = set(item) - _KEYS[kind]
            if extra:
                raise ConfigError(
                    f"{at}: unknown key(s) {sorted(extra)} for a {kind!r} item (allowed: {sorted(_KEYS[kind])})"
                )
            if kind == "text" and (
                not isinstance(item["text"], str)
                or not isinstance(item.get("chunk", 1), int)
                or item.get("chunk", 1) < 1
            ):
                raise ConfigError(f"{at}: 'text' must be a string and 'chunk' a positive integer")
            pace = item.get("pace", 0)
            if kind == "text" and (isinstance(pace, bool) or not isinstance(pace, int | float) or not 0 <= pace <= 5):
                raise ConfigError(f"{at}: 'pace' must be the seconds between two chunks, from 0 to 5, e.g. 0.03")
            if kind == "tool" and (not isinstance(item["tool"], str) or not item["tool"]):
                raise ConfigError(f"{at}: 'tool' must name a tool")
            if kind == "error" and item.get("code") is not None and item["code"] not in ERROR_CODES:
                raise ConfigError(f"{at}: 'code' must be one of {', '.join(sorted(ERROR_CODES))}")
            items.append(dict(item))
        checked.append(items)
    return checked


class ScriptedModel:
    """A model that plays ``steps`` (see the module docstring)."""

    def __init__(
        self,
        steps: Sequence[Sequence[Mapping[str, Any]]],
        *,
        per_turn: bool = False,
        name: str = "scripted",
        context_window: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        """Play ``steps``.

        Args:
            steps: The script (see the module docstring).
            per_turn: Pick steps by the position in the turn rather than in the session.
            name: The model's name (usage calibration and model metadata are kept per name).
            context_window: The window automatic compaction uses (it has none unless given one,
                so by default a scripted agent never compacts without ``threshold_tokens``).
            max_output_tokens: The answer limit reported with the window.
        """
        self.steps = check_script(steps)
        self.per_turn = per_turn
        self._name = name
        self._limits = None if context_window is None else ModelLimits(context_window, max_output_tokens)
        # Recent requests only (a long benchmark must not keep every prompt alive), and every
        # position ever played (for unconsumed()).
        self.requests: deque[ModelRequest] = deque(maxlen=256)
        self._reached: set[int] = set()

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    @property
    def catalog_name(self) -> str | None:
        """Never looked up in the catalog (its window is the one it was given, if any)."""
        return None

    @property
    def limits(self) -> ModelLimits | None:
        """The window it was given (``None``: no automatic compaction)."""
        return self._limits

    def position(self, request: ModelRequest) -> int:
        """Which step a request plays."""
        return request.step_index if self.per_turn else request.session_step_index

    def unconsumed(self) -> list[int]:
        """The steps no recorded request reached (recorded in this process)."""
        return [i for i in range(len(self.steps)) if i not in self._reached]

    def assert_consumed(self) -> None:
        """Raise when a step of the script was never played."""
        left = self.unconsumed()
        if left:
            raise AssertionError(f"ScriptedModel: steps {left} of {len(self.steps)} were never played")

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """The parts of the step at the request's position."""
        self.requests.append(request)
        if request.purpose == "generate":
            self._reached.add(self.position(request))
        if request.purpose == "compact":
            yield TextDelta(_summary(request))
            yield StepFinish({"inputTokens": 1, "outputTokens": 1}, "stop")
            return
        k = self.position(request)
        if k >= len(self.steps):
            where = "this turn" if self.per_turn else "this session"
            raise ModelError(
                f"ScriptedModel has no step {k} for {where}: the script has {len(self.steps)} step(s); "
                "add steps to the script or end the conversation earlier"
            )
        called_tool = False
        finish: str | None = None
        for j, item in enumerate(self.steps[k]):
            if signal.is_cancelled():
                return
            if "text" in item:
                text: str = item["text"]
                size = int(item.get("chunk") or len(text) or 1)
                pace = float(item.get("pace") or 0)
                for start in range(0, len(text), size):
                    yield TextDelta(text[start : start + size])
                    await asyncio.sleep(pace)
                    if signal.is_cancelled():
                        return
            elif "reasoning" in item:
                yield Reasoning(str(item["reasoning"]))
            elif "tool" in item:
                called_tool = True
                call_id = item.get("id") or f"call-{request.turn_index + 1}-{request.step_index + 1}-{j + 1}"
                arguments: JsonValue = item.get("input", {})
                yield ToolCall(str(call_id), str(item["tool"]), arguments)
                await asyncio.sleep(0)
            elif "error" in item:
                raise ModelError(str(item["error"]), item.get("code"))
            else:
                finish = str(item["finish"])
        yield StepFinish(None, finish or ("tool-calls" if called_tool else "stop"))


def _summary(request: ModelRequest) -> str:
    """A deterministic summary for a compaction request: who said what, in brief."""
    lines = []
    for message in request.messages:
        if message.id == GUIDANCE_ID:
            continue  # the request's own question, not part of the conversation
        text = message.text.strip()
        if text:
            lines.append(f"{message.role}: {text[:60]}")
    return "Summary of the conversation so far: " + " | ".join(lines)
