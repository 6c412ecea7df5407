"""A whole config file: its agents, the main one, and its runtime section.

``parse_config`` does the work on text and an environment passed in; ``load_*`` read the file
and ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.errors import ConfigError
from orchestrator.run.agent import Agent
from orchestrator.surfaces.config.agents import Builder
from orchestrator.surfaces.config.document import Document, did_you_mean, read_config
from orchestrator.surfaces.config.runtime import RuntimeConfig, build_runtime

__all__ = ["LoadedConfig", "load_agent", "load_config", "parse_config"]


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A loaded config file: its agents, the main one, and its runtime section."""

    source: str
    """The file it came from (as given)."""
    agents: Mapping[str, Agent]
    """Every agent defined, by name, in file order."""
    main: str | None
    """The agent ``troupe run`` starts; ``None`` when the file has several roots and no ``main:``."""
    runtime: RuntimeConfig | None = None
    """The ``runtime:`` section, if the file has one."""

    def agent(self, name: str | None = None) -> Agent:
        """The agent ``name``, or the main agent.

        Raises:
            ConfigError: no such agent, or no main agent to default to.
        """
        if name is None:
            if self.main is None:
                raise ConfigError(
                    f"{self.source} defines several top-level agents ({', '.join(self.agents)}) and no main:; "
                    "add `main: <name>` to the file or ask for an agent by name"
                )
            name = self.main
        agent = self.agents.get(name)
        if agent is None:
            raise ConfigError(f"no agent {name!r} in {self.source}; {did_you_mean(name, self.agents, 'its agents')}")
        return agent


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Load a config file's agents (and its runtime section).

    Args:
        path: The YAML file.
        env: The variables ``${...}`` reads; ``os.environ`` by default.

    Raises:
        ConfigError: the file is missing, not YAML, or not a valid config (the message names the
            file, line and key, and the fix).
    """
    return parse_config(read_config(path), source=str(path), env=os.environ if env is None else env)


def load_agent(path: str | Path, name: str | None = None, *, env: Mapping[str, str] | None = None) -> Agent:
    """The agent ``name`` (default: the main agent) of a config file.

    Raises:
        ConfigError: as ``load_config``, or no such agent.
    """
    return load_config(path, env=env).agent(name)


def parse_config(text: str, *, source: str = "<config>", env: Mapping[str, str]) -> LoadedConfig:
    """``load_config`` on text already read; ``source`` names it in errors."""
    doc = Document.parse(text, source, env)
    data = doc.data
    if "agents" not in data:
        fix = "runtime-only files are read with load_runtime()" if "runtime" in data else "add an agents: section"
        doc.fail("", "no agents: section", fix)
    agents, main = Builder(doc).build(doc.interpolate(data["agents"], "agents"), data.get("main"))
    runtime = build_runtime(doc, doc.interpolate(data["runtime"], "runtime")) if "runtime" in data else None
    return LoadedConfig(source, agents, main, runtime)
