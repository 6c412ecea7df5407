"""``@tool``: a Python function as a tool the model can call.

The JSON schema comes from the function's type hints and its Google-style docstring (the first
paragraph describes the tool, ``Args:`` describes each parameter), built with pydantic. Input is
validated before the function runs: invalid arguments never reach it, and the validation message
goes back to the model so it can correct the call.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from orchestrator.core._json import JsonObject, JsonValue
from orchestrator.core.errors import ToolError, UsageError
from orchestrator.models.base import CancelSignal, ToolSpec
from tools.context import ToolContext

__all__ = ["Approval", "Recovery", "Tool", "tool"]

Recovery: TypeAlias = Literal["rerun", "report"]
Approval: TypeAlias = bool | Callable[[JsonObject], bool | str]
"""``True`` always asks; a function of the input returns whether to ask, or the prompt itself."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable tool: its schema for the model, its policies, and the function behind it."""

    name: str
    """The name the model calls it by."""
    description: str
    """What it does, for the model."""
    fn: Callable[..., Any]
    """The function (sync functions run on a worker thread)."""
    input_model: type[BaseModel]
    """Validates the arguments."""
    recovery: Recovery = "rerun"
    """After a crash, a timeout, a stop or a pause now cut a call short: ``rerun`` it (a stop cancels
    it instead), or ``report`` to the model that it was interrupted and may have partly run, and never
    run it again, even on retry or resume."""
    needs_approval: Approval = False
    """Whether a call waits for the user's approval first."""
    timeout: float | None = None
    """Seconds before the call fails with a timeout (``None``: no limit)."""
    context_param: str | None = None
    """The parameter that receives the ``ToolContext``, if the function declares one."""
    parameters: JsonObject = field(default_factory=dict)
    """The input's JSON schema."""
    _fields: dict[str, tuple[Any, Any, str | None]] = field(default_factory=dict, repr=False, compare=False)
    """The resolved parameters (type, default, description), to rebuild the tool elsewhere."""

    def __reduce__(self) -> tuple[Any, ...]:
        # A decorated module-level function is importable by name (the name holds this Tool);
        # anything else is rebuilt from its function, so the generated input model never pickles.
        module = sys.modules.get(getattr(self.fn, "__module__", ""))
        qualname = getattr(self.fn, "__qualname__", "")
        # __main__ is a different module in every process: a script's tools travel by value.
        if module is not None and module.__name__ != "__main__" and "<" not in qualname:
            if _lookup(module, qualname) is self:
                return (_import_attr, (module.__name__, qualname))
        # The parameter types were resolved when the tool was built; ship them, not the hints
        # (string annotations may not resolve where the tool is unpickled).
        return (
            _assemble,
            (
                self.fn,
                self.name,
                self.description,
                self.recovery,
                self.needs_approval,
                self.timeout,
                self.context_param,
                self._fields,
            ),
        )

    @property
    def spec(self) -> ToolSpec:
        """What the model is told."""
        return ToolSpec(self.name, self.description, self.parameters)

    def approval_prompt(self, arguments: JsonValue) -> str | None:
        """The prompt to ask the user before running, or ``None`` when no approval is needed."""
        policy = self.needs_approval
        if policy is False:
            return None
        if policy is True:
            return f"Allow {self.name} with {arguments!r}?"
        answer = policy(arguments if isinstance(arguments, dict) else {})
        if isinstance(answer, str):
            return answer
        return f"Allow {self.name} with {arguments!r}?" if answer else None

    def validate(self, arguments: JsonValue) -> BaseModel:
        """The validated arguments.

        Raises:
            ToolError: with a message the model can act on (which argument, what was wrong).
        """
        if not isinstance(arguments, dict):
            raise ToolError(
                f"Invalid arguments for {self.name}: expected a JSON object, got {arguments!r}. "
                "Call it again with an object matching its schema.",
                "invalid_arguments",
            )
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in error.errors()
            )
            message = f"Invalid arguments for {self.name}: {problems}. Fix them and call again."
            raise ToolError(message, "invalid_arguments") from None

    async def invoke(
        self,
        arguments: JsonValue,
        *,
        session_id: str,
        call_id: str,
        turn_id: str,
        attempt: int = 1,
        signal: CancelSignal | None = None,
        app: Mapping[str, Any] | None = None,
        emit: Callable[[JsonValue], Awaitable[None]] | None = None,
    ) -> JsonValue:
        """Validate, run (within ``timeout``) and return JSON-able output.

        Raises:
            ToolError: invalid arguments, a timeout, or the function's own exception (its message).
        """
        context = ToolContext(
            session_id, call_id, turn_id, attempt, signal or CancelSignal(), app or {}, emit or _ignore
        )
        return await self.run(arguments, context)

    async def run(self, arguments: JsonValue, context: ToolContext) -> JsonValue:
        """``invoke`` with a ready ``ToolContext`` (handy in tests)."""
        model = self.validate(arguments)
        kwargs = {name: getattr(model, name) for name in type(model).model_fields}
        if self.context_param is not None:
            kwargs[self.context_param] = context
        try:
            if inspect.iscoroutinefunction(self.fn):
                call: Awaitable[Any] = self.fn(**kwargs)
            else:
                call = asyncio.to_thread(self.fn, **kwargs)
            result = await (asyncio.wait_for(call, self.timeout) if self.timeout is not None else call)
        except TimeoutError:
            context.signal.cancel("timeout")
            raise ToolError(f"{self.name} timed out after {self.timeout:g} s", "timeout") from None
        except ToolError:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as error:
            message = str(error) or type(error).__name__
            raise ToolError(f"{self.name} failed: {message}") from error
        if isinstance(result, BaseModel):
            dumped: JsonValue = result.model_dump(mode="json")
            return dumped
        jsonable: JsonValue = to_jsonable_python(result)
        return jsonable


async def _ignore(output: JsonValue) -> None:
    return None


def _is_context(annotation: Any) -> bool:
    """``ToolContext``, or an optional ``ToolContext``."""
    return annotation is ToolContext or ToolContext in getattr(annotation, "__args__", ())


def _lookup(module: Any, qualname: str) -> Any:
    value = module
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value


def _import_attr(module: str, qualname: str) -> Any:
    value = _lookup(importlib.import_module(module), qualname)
    if value is None:
        raise ImportError(f"cannot import {module}:{qualname}; define the tool at a module's top level")
    return value


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary and the per-argument descriptions of a Google-style docstring."""
    doc = inspect.getdoc(fn) or ""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if re.match(r"^(Args|Arguments|Parameters):$", stripped):
            section = "args"
            continue
        if re.match(r"^[A-Z][A-Za-z ]*:$", stripped):
            section = "other"
            continue
        if section == "summary":
            if not stripped and summary_lines:
                section = "body"
            elif stripped:
                summary_lines.append(stripped)
        elif section == "args" and stripped:
            match = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and line.startswith(" " * 4) and not line.startswith(" " * 8):
                current = match.group(1)
                args[current] = match.group(3)
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary_lines), args


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    recovery: Recovery,
    needs_approval: Approval,
    timeout: float | None,
) -> Tool:
    tool_name = name or fn.__name__
    if not _NAME.match(tool_name):
        raise UsageError(
            f"tool name {tool_name!r} is not valid: "
            "use letters, digits, '_' or '-' (at most 64), starting with a letter"
        )
    if recovery not in ("rerun", "report"):
        raise UsageError(f"tool {tool_name!r}: recovery must be 'rerun' or 'report', not {recovery!r}")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"tool {tool_name!r}: timeout must be a positive number of seconds")
    summary, arg_docs = _doc_parts(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as error:
        raise UsageError(
            f"tool {tool_name!r}: cannot read its type hints ({error}); annotate every parameter"
        ) from None
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if _is_context(annotation):
            context_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"tool {tool_name!r}: *args/**kwargs cannot be described to a model; list the parameters")
        if annotation is inspect.Parameter.empty:
            raise UsageError(f"tool {tool_name!r}: parameter {param.name!r} needs a type hint (it becomes the schema)")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default, arg_docs.get(param.name))
    return _assemble(
        fn, tool_name, description or summary or tool_name, recovery, needs_approval, timeout, context_param, fields
    )


def _assemble(
    fn: Callable[..., Any],
    name: str,
    description: str,
    recovery: Recovery,
    needs_approval: Approval,
    timeout: float | None,
    context_param: str | None,
    fields: dict[str, tuple[Any, Any, str | None]],
) -> Tool:
    """A ``Tool`` from resolved parameter types (also how a pickled tool is rebuilt elsewhere)."""
    spec = {n: (annotation, Field(default, description=doc)) for n, (annotation, default, doc) in fields.items()}
    model = create_model(f"{name}_input", __config__=ConfigDict(extra="forbid"), **spec)  # type: ignore[call-overload]
    schema = model.model_json_schema()
    schema.pop("title", None)
    return Tool(name, description, fn, model, recovery, needs_approval, timeout, context_param, schema, fields)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    recovery: Recovery = "rerun",
    needs_approval: Approval = False,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    recovery: Recovery = "rerun",
    needs_approval: Approval = False,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make ``fn`` a tool: ``@tool`` or ``@tool(recovery="report", needs_approval=True, timeout=5)``."""

    def wrap(function: Callable[..., Any]) -> Tool:
        return _build(
            function,
            name=name,
            description=description,
            recovery=recovery,
            needs_approval=needs_approval,
            timeout=timeout,
        )

    return wrap(fn) if fn is not None else wrap
