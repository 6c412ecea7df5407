"""The model catalog: context windows by model name, for the default compaction threshold.

Automatic compaction (an agent's default ``Compaction()``, with no ``threshold_tokens``) takes
its threshold from here: 75% of the model's context window, lowered when a step may write more
than the remaining quarter (``max_output_tokens`` / ``max_tokens`` in the agent's settings):
the threshold limits the prompt, so prompt plus answer still fit.

A model takes part when it is a ``CatalogModel``: ``OpenAIChatModel`` looks its model id up
here; the scripted and function models take part only when given a window
(``ScriptedModel(..., context_window=...)``), the way a custom generator has no window until
you say what it is. Any other adapter never compacts automatically; give it ``threshold_tokens``.

The table holds a handful of common names; ``register_model`` adds or overrides one (a
fine-tune, a local server's model id, a newer model). It is process-wide: on Ray, register in
code every worker imports (the module that defines your agents).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from orchestrator.core.errors import UsageError

__all__ = [
    "CatalogModel",
    "ModelLimits",
    "default_threshold",
    "lookup_model",
    "register_model",
    "unregister_model",
]


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """A model's limits, in tokens."""

    context_window: int
    """How many tokens the prompt and the answer may hold together."""
    max_output_tokens: int | None = None
    """The most the model writes in one response (``None``: not known)."""

    def __post_init__(self) -> None:
        if not isinstance(self.context_window, int) or self.context_window < 1:
            raise UsageError(f"ModelLimits(context_window=...) must be a positive integer, not {self.context_window!r}")
        if self.max_output_tokens is not None and (
            not isinstance(self.max_output_tokens, int) or self.max_output_tokens < 1
        ):
            raise UsageError(
                f"ModelLimits(max_output_tokens=...) must be a positive integer or None, not {self.max_output_tokens!r}"
            )


@runtime_checkable
class CatalogModel(Protocol):
    """A model adapter that takes part in automatic compaction."""

    @property
    def catalog_name(self) -> str | None:
        """The name to look up in the catalog; ``None``: no automatic compaction (and no lookup)."""
        ...

    @property
    def limits(self) -> ModelLimits | None:
        """Limits the adapter was given itself; they win over the catalog's."""
        ...


_BUILT_IN: Final[dict[str, ModelLimits]] = {
    "gpt-4o": ModelLimits(128_000, 16_384),
    "gpt-4o-mini": ModelLimits(128_000, 16_384),
    "gpt-4.1": ModelLimits(1_047_576, 32_768),
    "gpt-4.1-mini": ModelLimits(1_047_576, 32_768),
    "gpt-4.1-nano": ModelLimits(1_047_576, 32_768),
    "gpt-5": ModelLimits(400_000, 128_000),
    "gpt-5-mini": ModelLimits(400_000, 128_000),
    "o3": ModelLimits(200_000, 100_000),
    "o4-mini": ModelLimits(200_000, 100_000),
    "claude-sonnet-4": ModelLimits(200_000, 64_000),
    "claude-opus-4": ModelLimits(200_000, 32_000),
    "Qwen/Qwen3-8B": ModelLimits(32_768),
}
"""A handful of common model ids (as their providers spell them)."""

_catalog: dict[str, ModelLimits] = dict(_BUILT_IN)


def register_model(name: str, *, context_window: int, max_output_tokens: int | None = None) -> None:
    """Add ``name`` to the catalog, or override what it says about it.

    Raises:
        UsageError: ``name`` is empty, or a limit is not a positive integer.
    """
    if not isinstance(name, str) or not name:
        raise UsageError("register_model(name, ...) needs the model id the adapter looks up (e.g. 'gpt-4o')")
    _catalog[name] = ModelLimits(context_window, max_output_tokens)


def unregister_model(name: str) -> None:
    """Remove ``name`` from the catalog (a built-in name goes back to its built-in limits)."""
    _catalog.pop(name, None)
    if name in _BUILT_IN:
        _catalog[name] = _BUILT_IN[name]


def lookup_model(model: CatalogModel) -> ModelLimits | None:
    """The limits of ``model``: its own, else the catalog's for its name (``None``: unavailable)."""
    if model.limits is not None:
        return model.limits
    name = model.catalog_name
    if name is None:
        return None
    found = _catalog.get(name)
    if found is None and "/" in name and name.split("/", 1)[0] in ("openai", "anthropic"):
        found = _catalog.get(name.split("/", 1)[1])  # "openai/gpt-4o": the provider-qualified spelling
    return found


def default_threshold(context_window: int, max_output_tokens: int | None) -> int:
    """75% of ``context_window``, lowered so that ``max_output_tokens`` of answer still fit."""
    threshold = context_window * 3 // 4
    if max_output_tokens is not None and context_window - max_output_tokens < threshold:
        threshold = context_window - max_output_tokens
    return max(threshold, 1)
