"""The YAML document: its data, the line of every key path, ``${VAR}`` interpolation, typed reads.

Every read that can fail goes through ``Document.fail``, so every mistake in a config names the
file, the line, the key path (``agents.shop.tools[1]``), what is wrong and how to fix it. The
other modules of this package build agents, models and the runtime section on top of it.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, assert_never, cast

import yaml

from orchestrator.core._json import MAX_JSON_DEPTH, JsonProblem, JsonValue, json_problem
from orchestrator.core.errors import ConfigError

__all__ = ["Document", "did_you_mean", "import_attribute", "key_path", "kind_of", "read_config"]


def read_config(path: str | Path) -> str:
    """The text of a config file, or a ``ConfigError`` that says why it cannot be read."""
    file = Path(path)
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"config file not found: {path} (from {Path.cwd()}); check the path, or run from the project root"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"config path {path} is a directory; name a .yaml file in it") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text ({error.reason}); save it as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror or error}") from None


_TOP_KEYS: Final = ("agents", "main", "runtime")
_VARIABLE: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_PARENT: Final = re.compile(r"(\[\d+\]|\.[^.\[]*)$")


def key_path(path: str, key: str | int) -> str:
    """The path of ``key`` under ``path``: ``agents.shop`` + ``tools`` + ``1`` -> ``agents.shop.tools[1]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def did_you_mean(word: str, options: Iterable[str], label: str) -> str:
    """``did you mean 'x'? <label>: a, b`` (the fix part of a message about an unknown name)."""
    choices = list(options)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}{label}: {', '.join(choices) or 'none'}"


class Document:
    """A parsed file: its data, where each key path sits, and how to fail with a good message."""

    def __init__(self, data: dict[str, Any], source: str, env: Mapping[str, str], lines: dict[str, int]) -> None:
        self.data = data
        self.source = source
        self.env = env
        self.lines = lines
        self.interpolated: set[str] = set()
        """Paths whose value came from ``${...}`` text (read as the type the key needs)."""

    @classmethod
    def parse(cls, text: str, source: str, env: Mapping[str, str]) -> Document:
        """The document in ``text``: YAML parsed, key lines recorded, top-level keys checked."""
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            lines: dict[str, int] = {}
            if node is not None:
                _walk(node, "", lines, source, set())
            data = loader.construct_document(node) if node is not None else None
        except yaml.MarkedYAMLError as error:
            mark, start = error.problem_mark or error.context_mark, error.context_mark
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = ": ".join(p for p in (error.context, error.problem) if p)
            if start is not None and mark is not None and start.line != mark.line:
                problem += f" (it started at line {start.line + 1})"
            raise ConfigError(
                f"YAML syntax error in {source}{where}: {problem}; "
                "fix the YAML there (indentation, a space after ':', closing quotes and brackets)"
            ) from None
        except yaml.YAMLError as error:
            raise ConfigError(f"YAML error in {source}: {error}") from None
        finally:
            loader.dispose()
        doc = cls({}, source, env, lines)
        if not isinstance(data, dict):
            got = "nothing" if data is None else f"a {type(data).__name__}"
            doc.fail("", f"a config must be a mapping with agents: (and main:, runtime:), but the file holds {got}")
        for key in data:
            if not isinstance(key, str):
                doc.fail("", f"top-level key {key!r} is not a name", f"use {', '.join(_TOP_KEYS)}")
            if key not in _TOP_KEYS and not key.startswith("x-"):
                doc.unknown(key, "", _TOP_KEYS, "the config", "keys starting with 'x-' are ignored (anchors)")
        doc.data = data
        return doc

    def line(self, path: str) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            shorter = _PARENT.sub("", path)
            path = "" if shorter == path else shorter
        return None

    def fail(self, path: str, what: str, fix: str | None = None) -> NoReturn:
        """Raise the ``ConfigError`` ``what at path in file, line N; fix``."""
        line = self.line(path)
        where = f" at {path}" if path else ""
        location = f"{self.source}, line {line}" if line is not None else self.source
        raise ConfigError(f"{what}{where} in {location}" + (f"; {fix}" if fix else ""))

    def unknown(self, key: str, path: str, allowed: Sequence[str], what: str, extra: str = "") -> NoReturn:
        """Fail on an unknown key, suggesting the closest allowed one."""
        fix = did_you_mean(key, allowed, "allowed keys")
        self.fail(key_path(path, key), f"unknown key {key!r} in {what}", f"{fix}{'; ' + extra if extra else ''}")

    # -- interpolation --------------------------------------------------------------------

    def interpolate(self, value: Any, path: str, depth: int = 0) -> Any:
        """``value`` with ``${...}`` replaced in every string, recording which paths changed."""
        if depth > 100:
            self.fail(path, "the value nests too deeply (a recursive YAML alias?)", "remove the self-reference")
        if isinstance(value, str):
            if "${" not in value:
                return value
            result, substituted = self._substitute(value, path)
            if substituted:
                self.interpolated.add(path)
            return result
        if isinstance(value, dict):
            return {k: self.interpolate(v, key_path(path, str(k)), depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.interpolate(v, key_path(path, i), depth + 1) for i, v in enumerate(value)]
        return value

    def _substitute(self, text: str, path: str) -> tuple[str, bool]:
        out: list[str] = []
        substituted = False
        position = 0
        while True:
            start = text.find("${", position)
            if start < 0:
                out.append(text[position:])
                return "".join(out), substituted
            if start > 0 and text[start - 1] == "$":  # $${ is a literal ${
                out.append(text[position : start - 1] + "${")
                position = start + 2
                continue
            end = text.find("}", start)
            match = _VARIABLE.fullmatch(text, start + 2, end) if end >= 0 else None
            if match is None:
                shown = text[start : end + 1] if end >= 0 else text[start:]
                self.fail(
                    path, f"malformed variable {shown!r}", "write ${NAME} or ${NAME:-default} ($${ for a literal)"
                )
            name, default = match.group(1), match.group(2)
            value = self.env.get(name)
            if not value and default is not None:
                value = default
            if value is None:
                self.fail(
                    path,
                    f"environment variable {name} is not set",
                    f"set {name}, or give a default: ${{{name}:-value}}",
                )
            out.append(text[position:start] + value)
            substituted = True
            position = end + 1

    # -- typed reads -----------------------------------------------------------------------

    def mapping(self, value: Any, path: str, allowed: Sequence[str], what: str) -> dict[str, Any]:
        """``value`` as a mapping whose keys are all in ``allowed``."""
        if not isinstance(value, dict):
            self.fail(path, f"{what} must be a mapping of {', '.join(allowed)}, not {kind_of(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"key {key!r} in {what} is not a name", f"allowed keys: {', '.join(allowed)}")
            if key not in allowed:
                self.unknown(key, path, allowed, what)
        return value

    def string(self, value: Any, path: str, what: str) -> str:
        """``value`` as text."""
        if not isinstance(value, str):
            self.fail(path, f"{what} must be text, not {kind_of(value)}", "quote it if YAML read it as something else")
        return value

    def unset(self, value: Any, path: str) -> bool:
        """Whether an optional value is absent: null, or a variable that gave nothing."""
        return value is None or (value == "" and path in self.interpolated)

    def optional_string(self, value: Any, path: str, what: str) -> str | None:
        """``value`` as text, or ``None`` when it is unset."""
        return None if self.unset(value, path) else self.string(value, path, what)

    def _typed(self, value: Any, path: str) -> Any:
        return _scalar(value) if isinstance(value, str) and path in self.interpolated else value

    def integer(self, value: Any, path: str, what: str, *, minimum: int = 1) -> int:
        """``value`` as a whole number of at least ``minimum`` (interpolated text is read as one)."""
        value = self._typed(value, path)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(path, f"{what} must be a whole number of at least {minimum}, not {value!r}")
        return value

    def number(self, value: Any, path: str, what: str) -> float:
        """``value`` as a positive number of seconds (interpolated text is read as one)."""
        value = self._typed(value, path)
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            self.fail(path, f"{what} must be a positive number of seconds, not {value!r}")
        return float(value)

    def boolean(self, value: Any, path: str, what: str) -> bool:
        """``value`` as a flag (interpolated text is read as one)."""
        value = self._typed(value, path)
        if not isinstance(value, bool):
            self.fail(path, f"{what} must be true or false, not {value!r}")
        return value

    def json(self, value: Any, path: str, *, coerce: bool = True) -> JsonValue:
        """``value`` checked as JSON; with ``coerce``, interpolated text that reads as a number or flag becomes one."""
        if coerce and self.interpolated:
            value = self._coerced(value, path, 0)
        problem = json_problem(value, path)
        if problem is not None:
            self._not_json(problem)
        return cast(JsonValue, value)

    def _coerced(self, value: Any, path: str, depth: int) -> Any:
        """``value`` with each interpolated string read as the scalar it spells (``"3"`` -> ``3``)."""
        if isinstance(value, str):
            return _scalar(value) if path in self.interpolated else value
        if depth > MAX_JSON_DEPTH:
            return value  # json_problem refuses it
        if isinstance(value, dict):
            return {
                k: self._coerced(v, key_path(path, k), depth + 1) if isinstance(k, str) else v for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._coerced(v, key_path(path, i), depth + 1) for i, v in enumerate(value)]
        return value

    def _not_json(self, problem: JsonProblem) -> NoReturn:
        at, culprit = problem.path, problem.value
        match problem.fault:
            case "type":
                self.fail(at, f"{kind_of(culprit)} is not a JSON value", "quote it to make it text")
            case "key":
                self.fail(at, f"key {culprit!r} is not text (JSON keys are strings)", "quote it")
            case "integer":
                self.fail(at, f"the integer {culprit} does not fit in 64 bits", "quote it to make it text")
            case "number":
                self.fail(
                    at, f"{kind_of(culprit)} is not a JSON number", "write a finite number, or quote it to make it text"
                )
            case "depth":
                self.fail(at, "the value nests too deeply (a recursive YAML alias?)", "remove the self-reference")
            case "string":
                self.fail(at, f"the text {culprit!r} holds a lone surrogate (not valid Unicode)", "fix the text")
            case _:
                assert_never(problem.fault)


def _scalar(text: str) -> str | int | float | bool:
    """Interpolated text read as YAML reads a plain scalar, when it is a number or a flag."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, int | float | bool) else text


def kind_of(value: Any) -> str:
    """``value`` described for a message: ``a mapping``, ``int 3``, ``empty (null)``."""
    if value is None:
        return "empty (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    shown = repr(value) if isinstance(value, str | int | float) else str(value)
    return f"{type(value).__name__} {shown}"


def _walk(node: yaml.Node, path: str, lines: dict[str, int], source: str, stack: set[int]) -> None:
    """Record the line of every key path under ``node``, and refuse duplicate keys."""
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in stack:
        return  # a recursive alias: constructing it is fine, walking it again is not
    stack.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys are ours
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for item in merged:
                    _walk(item, path, lines, source, stack)
                continue
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if key in seen:
                where = f" at {path}" if path else ""
                raise ConfigError(
                    f"duplicate key {key!r}{where} in {source}, lines {seen[key]} and {line}; "
                    "YAML keeps only the last one: remove or rename one of them"
                )
            seen[key] = line
            lines[key_path(path, key)] = line
            _walk(value_node, key_path(path, key), lines, source, stack)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, key_path(path, i), lines, source, stack)
    stack.discard(id(node))


def import_attribute(doc: Document, ref: str, at: str, what: str) -> Any:
    """The attribute a ``package.module:attribute`` reference names (a tool or a model), or fail at ``at``."""
    module_name, _, attribute = ref.partition(":")
    dotted = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
    if not re.fullmatch(dotted, module_name) or not re.fullmatch(dotted, attribute):
        doc.fail(at, f"{ref!r} is not an import path", f"write 'package.module:attribute' for a {what}")
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name == error.name or module_name.startswith(error.name + ".")):
            doc.fail(
                at,
                f"cannot import {ref!r}: no module named {error.name!r}",
                "check the spelling; is the package installed, and on PYTHONPATH?",
            )
        doc.fail(at, f"importing module {module_name!r} failed: {error}", "install what it imports")
    except Exception as error:
        doc.fail(at, f"importing module {module_name!r} raised {type(error).__name__}: {error}", "fix that module")
    for part in attribute.split("."):
        if not hasattr(value, part):
            names = [n for n in dir(value) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            doc.fail(at, f"module {module_name!r} has no attribute {attribute!r}", f"{hint}check the name after ':'")
        value = getattr(value, part)
    return value
