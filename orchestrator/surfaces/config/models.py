"""The ``model:`` of an agent: scripted, OpenAI-compatible, registered by name, or imported.

An OpenAI model whose key only the worker's environment holds is a ``DeferredModel``: loading a
config must not need a secret that exists only where the session runs.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import Any, Final
from urllib.parse import urlsplit

from orchestrator.core.errors import ConfigError, ModelError
from orchestrator.core.stream import AgentStreamPart
from orchestrator.models.base import CancelSignal, ModelAdapter, ModelRequest
from orchestrator.models.openai import OpenAIChatModel
from orchestrator.models.scripted import ScriptedModel, check_script
from orchestrator.surfaces.config.document import Document, import_attribute, key_path, kind_of
from orchestrator.surfaces.config.registry import find_model, registered_models

__all__ = ["MODEL_EXAMPLE", "DeferredModel", "build_model"]

MODEL_EXAMPLE: Final = "e.g. model: {scripted: [[{text: Hello}]]} or model: {openai: {model: gpt-4o-mini}}"
"""The fix shown when a model is missing or malformed."""
_MODEL_KINDS: Final = ("scripted", "openai")
_SCRIPTED_KEYS: Final = ("steps", "per_turn", "name")
_OPENAI_KEYS: Final = ("model", "base_url", "api_key", "settings", "timeout", "max_retries", "name")
_OPENAI_RESERVED: Final = ("model", "messages", "stream", "tools")


def build_model(doc: Document, value: Any, at: str) -> ModelAdapter:
    """The model ``value`` describes: a registered name, an import path, ``{scripted: ...}`` or ``{openai: ...}``."""
    if isinstance(value, str):
        return _named_model(doc, value, at)
    if not isinstance(value, dict) or len(value) != 1:
        doc.fail(at, f"a model must be a mapping with one key ({', '.join(_MODEL_KINDS)}) or a name", MODEL_EXAMPLE)
    kind, body = next(iter(value.items()))
    if kind == "scripted":
        return _scripted(doc, body, key_path(at, "scripted"))
    if kind == "openai":
        return _openai(doc, body, key_path(at, "openai"))
    doc.unknown(str(kind), at, _MODEL_KINDS, "the model", "or give a registered model name or an import path")


def _named_model(doc: Document, ref: str, at: str) -> ModelAdapter:
    factory = find_model(ref)
    if factory is None:
        if ":" not in ref:
            doc.fail(
                at,
                f"unknown model {ref!r}",
                f"registered models: {', '.join(registered_models()) or 'none'}; "
                f"or give an import path like 'mypkg.models:build', or {MODEL_EXAMPLE}",
            )
        factory = import_attribute(doc, ref, at, "model")
        if isinstance(factory, ModelAdapter) and not isinstance(factory, type):
            return factory
        if not callable(factory) or _required_parameters(factory):
            doc.fail(at, f"{ref!r} is neither a model nor a zero-argument function returning one")
    try:
        model = factory()
    except Exception as error:
        doc.fail(at, f"building model {ref!r} raised {type(error).__name__}: {error}")
    if not isinstance(model, ModelAdapter):
        doc.fail(at, f"model {ref!r} returned {kind_of(model)}, not a model (it needs .name and .stream())")
    return model


def _required_parameters(function: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _scripted(doc: Document, body: Any, at: str) -> ScriptedModel:
    per_turn, name, steps_at = False, "scripted", at
    if isinstance(body, dict):
        body = doc.mapping(body, at, _SCRIPTED_KEYS, "the scripted model")
        if "steps" not in body:
            doc.fail(at, "the scripted model needs steps:", "e.g. scripted: {steps: [[{text: Hello}]], per_turn: true}")
        if "per_turn" in body:
            per_turn = doc.boolean(body["per_turn"], key_path(at, "per_turn"), "per_turn")
        if "name" in body:
            name = doc.string(body["name"], key_path(at, "name"), "name")
        steps_at = key_path(at, "steps")
        body = body["steps"]
    if not isinstance(body, list) or not body:
        doc.fail(steps_at, "a script must be a non-empty list of steps, each a list of items", MODEL_EXAMPLE)
    for i, step in enumerate(body):
        if not isinstance(step, list):
            doc.fail(
                key_path(steps_at, i), f"a step must be a list of items, not {kind_of(step)}", "e.g. - [{text: Hello}]"
            )
        for j, item in enumerate(step):
            item_at = key_path(key_path(steps_at, i), j)
            try:
                check_script([[item]], "item")
            except ConfigError as error:
                detail = error.message.removeprefix("item: steps[0][0]").lstrip(": ").strip()
                unquoted = isinstance(item, dict) and any(
                    not isinstance(item.get(key, ""), str) for key in ("text", "reasoning", "tool", "error")
                )
                fix = "quote the text: YAML reads yes, no, on, off and numbers as other types" if unquoted else None
                doc.fail(item_at, f"bad script item: {detail}", fix)
            doc.json(item, item_at, coerce=False)
    try:
        return ScriptedModel(body, per_turn=per_turn, name=name)
    except ConfigError as error:  # pragma: no cover - every item was checked above
        doc.fail(steps_at, error.message)


def _openai(doc: Document, body: Any, at: str) -> ModelAdapter:
    if isinstance(body, str):
        body = {"model": body}
    body = doc.mapping(body, at, _OPENAI_KEYS, "the openai model")
    if "model" not in body:
        doc.fail(at, "the openai model needs model:", "e.g. openai: {model: gpt-4o-mini}")
    model = doc.string(body["model"], key_path(at, "model"), "model")
    if not model:
        doc.fail(key_path(at, "model"), "model is empty", "name the model id, e.g. gpt-4o-mini")
    base_url = doc.optional_string(body.get("base_url"), key_path(at, "base_url"), "base_url")
    if base_url is not None and urlsplit(base_url).scheme not in ("http", "https"):
        doc.fail(
            key_path(at, "base_url"), f"base_url {base_url!r} is not an http(s) URL", "e.g. http://localhost:8000/v1"
        )
    options: dict[str, Any] = {
        "base_url": base_url or doc.env.get("OPENAI_BASE_URL") or None,
        "api_key": doc.optional_string(body.get("api_key"), key_path(at, "api_key"), "api_key")
        or doc.env.get("OPENAI_API_KEY")
        or None,
    }
    if body.get("settings") is not None:
        settings = doc.json(body["settings"], key_path(at, "settings"))
        if not isinstance(settings, dict):
            doc.fail(key_path(at, "settings"), "settings must be a mapping", "e.g. settings: {temperature: 0.2}")
        reserved = sorted(settings.keys() & set(_OPENAI_RESERVED))
        if reserved:
            doc.fail(key_path(at, "settings"), f"settings may not set {', '.join(reserved)}", "the adapter fills them")
        options["settings"] = settings
    if "timeout" in body:
        options["timeout"] = doc.number(body["timeout"], key_path(at, "timeout"), "timeout")
    if "max_retries" in body:
        options["max_retries"] = doc.integer(body["max_retries"], key_path(at, "max_retries"), "max_retries", minimum=0)
    if "name" in body:
        options["name"] = doc.string(body["name"], key_path(at, "name"), "name")
    if importlib.util.find_spec("openai") is None:
        doc.fail(at, "the openai model needs the openai package", "pip install 'raytroupe[openai]'")
    if options["api_key"] is None and _is_openai(options["base_url"]):
        # OpenAI itself needs a key, which may exist only where the model runs (a Ray worker).
        factory = partial(_build_openai, model, options, f"{at} in {doc.source}")
        return DeferredModel(factory, options.get("name") or f"openai:{model}")
    try:
        return _build_openai(model, options)
    except ConfigError as error:
        doc.fail(at, error.message)


def _is_openai(base_url: str | None) -> bool:
    return base_url is None or (urlsplit(base_url).hostname or "").endswith("openai.com")


def _build_openai(model: str, options: Mapping[str, Any], where: str = "") -> ModelAdapter:
    if where and options["api_key"] is None and not os.environ.get("OPENAI_API_KEY"):
        raise ModelError(
            f"{model} needs an API key: set OPENAI_API_KEY where the session runs, or set api_key at {where} "
            "(a local server needs base_url instead)",
            "bad_request",
        )
    return OpenAIChatModel(model, **options)


class DeferredModel:
    """A model built on its first step: for a config that names a key only the worker's environment has.

    Loading succeeds without the key; the first step builds the model (reading the environment
    then) and fails with a message that says what to set when it still cannot.
    """

    def __init__(self, factory: Callable[[], ModelAdapter], name: str) -> None:
        self.factory = factory
        self._name = name
        self._model: ModelAdapter | None = None

    @property
    def name(self) -> str:
        """The model's name (the one the built model will have)."""
        return self._name

    def __repr__(self) -> str:
        return f"DeferredModel(name={self._name!r}, built={self._model is not None})"

    def __getstate__(self) -> dict[str, Any]:
        return {"factory": self.factory, "_name": self._name, "_model": None}  # rebuilt where it lands

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.factory, self._name, self._model = state["factory"], state["_name"], state["_model"]

    def build(self) -> ModelAdapter:
        """The model, built now if it was not yet.

        Raises:
            ModelError: it still cannot be built (the message says what to set).
        """
        if self._model is None:
            self._model = self.factory()
        return self._model

    async def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[AgentStreamPart]:
        """The built model's parts for the step."""
        async for part in self.build().stream(request, signal):
            yield part

    async def aclose(self) -> None:
        """Close the built model's connections, if it has any."""
        close = getattr(self._model, "aclose", None)
        if close is not None:
            await close()
