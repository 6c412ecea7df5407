"""Agents from YAML: the shipped configs, a turn end to end, and every way a config can be wrong."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.approvals import pending_approvals
from orchestrator.core.commands import Respond, SendInput
from orchestrator.core.errors import ConfigError, ModelError, UsageError
from orchestrator.core.parts import ToolPart
from orchestrator.models.openai import OpenAIChatModel
from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Compaction
from orchestrator.run.inprocess import LocalSessions
from orchestrator.store import open_store
from orchestrator.surfaces.config import (
    DeferredModel,
    LoadedConfig,
    RuntimeConfig,
    load_agent,
    load_config,
    load_runtime,
    register_model,
    register_tool,
    registered_tools,
    unregister_model,
    unregister_tool,
)
from orchestrator.testing import eventually
from orchestrator.testing_openai import FakeOpenAIServer, StreamReply, completion_stream, text_stream, tool_call_deltas
from tools import Tool, tool
from tools.builtin import BUILTIN_TOOLS, add_to_cart, cart, checkout, lookup_price

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SHOP = CONFIGS / "shop.yaml"
BENCH_SHOP = CONFIGS / "bench-shop.yaml"
OPENAI = CONFIGS / "openai.yaml"
RUNTIME = CONFIGS / "runtime.yaml"

MINIMAL = """
agents:
  shop:
    model: {scripted: [[{text: Hi}]]}
"""


def chunks(prefix: str, count: int) -> str:
    return "".join(f"{prefix}{i:03d}" for i in range(count))


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> LoadedConfig:
    path = tmp_path / "troupe.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return load_config(path, env=env or {})


def error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, env)
    return info.value.message


# -- the shipped configs ----------------------------------------------------------------------


def test_shop_config_has_the_demo_agents() -> None:
    config = load_config(SHOP, env={})
    assert config.main == "shop"
    assert list(config.agents) == ["shop", "researcher"]
    assert config.runtime is None
    shop = config.agent()
    assert shop.name == "shop"
    assert shop.instructions == "You help the user shop."
    assert [t.name for t in shop.tools if isinstance(t, Tool)] == ["add_to_cart", "checkout"]
    assert shop.tools == (add_to_cart, checkout)
    assert checkout.needs_approval is True
    assert [a.name for a in shop.agents] == ["researcher"]
    researcher = shop.agents[0]
    assert researcher is config.agents["researcher"]
    assert researcher.tools == (lookup_price,)
    assert researcher.description
    assert isinstance(shop.model, ScriptedModel) and isinstance(researcher.model, ScriptedModel)
    assert (len(shop.model.steps), shop.model.per_turn) == (7, False)  # one conversation, in order
    assert (len(researcher.model.steps), researcher.model.per_turn) == (2, True)  # every delegation


def test_bench_shop_config_plays_the_benchmark_workload_exactly() -> None:
    # the same steps as actors.bench.shop.shop_agent(), which troupe bench shop runs (that module needs Ray)
    shop = load_agent(BENCH_SHOP, env={})
    assert [t.name for t in shop.tools if isinstance(t, Tool)] == ["add_to_cart"]
    assert isinstance(shop.model, ScriptedModel)
    assert shop.model.steps == [
        [{"text": chunks("A", 50), "chunk": 4}, {"tool": "add_to_cart", "input": {"slug": "mug", "qty": 2}}],
        [{"tool": "delegate_to_researcher", "input": {"task": "compare mug prices"}}],
        [{"text": chunks("C", 100), "chunk": 4}, {"finish": "stop"}],
    ]
    researcher = shop.agents[0]
    assert isinstance(researcher.model, ScriptedModel)
    assert researcher.model.steps == [
        [{"text": chunks("R", 50), "chunk": 4}, {"tool": "lookup_price", "input": {"slug": "mug"}}],
        [{"text": chunks("S", 50), "chunk": 4}, {"finish": "stop"}],
    ]
    assert shop.model.per_turn and researcher.model.per_turn


async def test_bench_shop_agent_runs_a_turn_end_to_end() -> None:
    agent = load_agent(BENCH_SHOP, env={})
    sessions = LocalSessions(open_store("memory://"))
    try:
        runner = await sessions.open("s-config-1", agent)
        await runner.submit(SendInput("u-1", "two mugs"))
        outcome = await runner.wait_input("u-1", timeout=10)
        assert outcome.outcome == "completed", outcome.error
        assert outcome.text == chunks("C", 100)
        assert cart("s-config-1") == {"mug": 2}
        # per_turn: the next turn replays the script from its first step
        await runner.submit(SendInput("u-2", "two more"))
        again = await runner.wait_input("u-2", timeout=10)
        assert again.outcome == "completed"
        assert again.text == chunks("C", 100)
        assert cart("s-config-1") == {"mug": 4}
    finally:
        await sessions.close()


async def test_the_shop_demo_is_a_conversation_that_checks_out_after_approval() -> None:
    agent = load_agent(SHOP, env={})
    sessions = LocalSessions(open_store("memory://"))
    try:
        runner = await sessions.open("s-demo-1", agent)
        texts = []
        for n, prompt in enumerate(("Hi!", "Compare prices, please.", "What's in my cart?"), start=1):
            await runner.submit(SendInput(f"u-{n}", prompt))
            outcome = await runner.wait_input(f"u-{n}", timeout=20)
            assert outcome.outcome == "completed", outcome.error
            texts.append(outcome.text)
        assert "Shall I compare prices" in texts[0] and "best price" in texts[1] and "Total: $9.98" in texts[2]
        assert cart("s-demo-1") == {"stoneware-mug": 2}
        table = runner.state.messages.at(3).parts[1]  # the delegate call, with the researcher's run inside
        assert isinstance(table, ToolPart) and table.agent is not None and isinstance(table.output, str)
        assert "| Mugworks        | $6.50 | $2.00    | $8.50 |" in table.output
        await runner.submit(SendInput("u-4", "Check out, please."))
        pending = await eventually(lambda: pending_approvals(runner.state) or None, timeout=20)
        await runner.submit(Respond("r-1", pending[0].id, True))
        outcome = await runner.wait_input("u-4", timeout=20)
        assert outcome.outcome == "completed", outcome.error
        assert "Your order is placed" in outcome.text
        messages = runner.state.messages
        checkout_part = messages.at(len(messages) - 1).parts[1]
        assert isinstance(checkout_part, ToolPart) and checkout_part.output == (
            "Order placed: 2 x stoneware-mug, $9.98, paid by card."
        )
    finally:
        await sessions.close()


def test_loaded_agents_pickle() -> None:
    shop = load_agent(SHOP, env={})
    copy = pickle.loads(pickle.dumps(shop))
    assert copy.name == "shop"
    assert copy.tools[0] is add_to_cart
    assert isinstance(copy.model, ScriptedModel)
    assert copy.model.steps == shop.model.steps  # type: ignore[union-attr]


def test_openai_config_loads_without_a_key_and_says_so_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = load_config(OPENAI, env={})
    shop = config.agent()
    assert [a.name for a in shop.agents] == ["researcher"]
    assert [t.name for t in shop.tools if isinstance(t, Tool)] == ["add_to_cart"]
    assert isinstance(shop.instructions, str)
    assert "add_to_cart" in shop.instructions and "delegate_to_researcher" in shop.instructions
    model = shop.model
    assert isinstance(model, DeferredModel)
    assert model.name == "openai:gpt-4o-mini"
    copy = pickle.loads(pickle.dumps(model))
    assert isinstance(copy, DeferredModel)
    with pytest.raises(ModelError) as info:
        copy.build()
    assert "OPENAI_API_KEY" in info.value.message
    assert f"agents.shop.model.openai in {OPENAI}" in info.value.message
    assert info.value.code == "bad_request"


async def test_openai_config_without_a_key_fails_the_turn_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    sessions = LocalSessions(open_store("memory://"))
    try:
        runner = await sessions.open("s-config-2", load_agent(OPENAI, env={}))
        await runner.submit(SendInput("u-1", "two mugs"))
        outcome = await runner.wait_input("u-1", timeout=10)
        assert outcome.outcome == "failed"
        assert "OPENAI_API_KEY" in (outcome.error or "")
    finally:
        await sessions.close()


def test_openai_config_with_a_key_builds_the_model() -> None:
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_MODEL": "gpt-4.1-nano"}
    shop = load_agent(OPENAI, env=env)
    assert isinstance(shop.model, OpenAIChatModel)
    assert shop.model.model == "gpt-4.1-nano"
    assert shop.model.base_url == "https://api.openai.com/v1"
    assert shop.model.settings == {"temperature": 0.2}
    assert shop.model is not shop.agents[0].model  # one model object per agent


async def test_openai_config_runs_a_turn_against_a_local_server() -> None:
    add = completion_stream(tool_call_deltas(0, "call_1", "add_to_cart", '{"slug": "mug", ', '"qty": 2}'))
    replies = [StreamReply(add, interval=0.0), StreamReply(text_stream("Added ", "two mugs."))]
    with FakeOpenAIServer(replies) as server:
        shop = load_agent(OPENAI, env={"OPENAI_BASE_URL": server.base_url, "OPENAI_MODEL": "fake-model"})
        assert isinstance(shop.model, OpenAIChatModel)
        sessions = LocalSessions(open_store("memory://"))
        try:
            runner = await sessions.open("s-config-3", shop)
            await runner.submit(SendInput("u-1", "two mugs please"))
            outcome = await runner.wait_input("u-1", timeout=10)
        finally:
            await sessions.close()
            await shop.model.aclose()
        assert outcome.outcome == "completed", outcome.error
        assert outcome.text == "Added two mugs."
        assert cart("s-config-3") == {"mug": 2}
        first: Any = server.requests[0].body
        assert first["model"] == "fake-model"
        assert {t["function"]["name"] for t in first["tools"]} == {"add_to_cart", "delegate_to_researcher"}
        assert first["messages"][0]["role"] == "system"


def test_runtime_config() -> None:
    assert load_runtime(RUNTIME, env={}) == RuntimeConfig(
        store="sqlite:///troupe.db", placement="pooled", address=None, api_keys=(), idle_timeout=300.0
    )
    keyed = load_runtime(RUNTIME, env={"TROUPE_API_KEYS": "k-1, k-2,"})
    assert keyed.api_keys == ("k-1", "k-2")


def test_runtime_section_beside_agents_and_every_field(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        agents: {shop: {model: {scripted: [[{text: Hi}]]}}}
        runtime:
          store: ${STORE:-memory://}
          placement: dedicated
          address: auto
          api_keys: [a, " b "]
          idle_timeout: ${IDLE}
          hosts_per_node: ${HOSTS:-}
          max_dedicated: 12
          dedicated_wait: 30
        """,
        env={"IDLE": "2.5"},
    )
    assert config.runtime == RuntimeConfig("memory://", "dedicated", "auto", ("a", "b"), 2.5, None, 12, 30)


def test_orchestrator_config_does_not_import_tools_or_ray() -> None:
    code = (
        "import sys, orchestrator.surfaces.config; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tools', 'ray')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the format -------------------------------------------------------------------------------


def test_agent_list_in_any_order_with_every_key(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        agents:
          - name: boss
            instructions: |
              Lead.
            model: {scripted: {steps: [[{text: Hi}]], name: boss-script}}
            agents: [helper]
            max_steps: 7
            compaction: {threshold_tokens: 1000, instructions: Keep ids.}
            settings: {temperature: 0.5, stop: [x]}
            description: The lead.
          - name: helper
            model: {scripted: [[{text: "Yes"}]]}
        """,
    )
    boss = config.agent()
    assert config.main == "boss"
    assert boss.instructions == "Lead.\n"
    assert boss.agents[0].name == "helper"
    assert boss.max_steps == 7
    assert isinstance(boss.compaction, Compaction) and boss.compaction.threshold_tokens == 1000
    assert boss.compaction.instructions == "Keep ids."
    assert boss.settings == {"temperature": 0.5, "stop": ["x"]}
    assert boss.description == "The lead."
    assert isinstance(boss.model, ScriptedModel) and boss.model.name == "boss-script"
    assert boss.model.per_turn is False


def test_main_defaults_and_choice(tmp_path: Path) -> None:
    assert load(tmp_path, MINIMAL).main == "shop"
    two_roots = """
    agents:
      a: {model: {scripted: [[{text: Hi}]]}}
      b: {model: {scripted: [[{text: Hi}]]}}
    """
    config = load(tmp_path, two_roots)
    assert config.main is None
    assert config.agent("b").name == "b"
    with pytest.raises(ConfigError, match=r"several top-level agents \(a, b\) and no main:"):
        config.agent()
    with pytest.raises(ConfigError, match=r"no agent 'c' in .*; its agents: a, b"):
        config.agent("c")
    assert load(tmp_path, two_roots + "main: b\n").agent().name == "b"
    message = error(tmp_path, two_roots + "main: bb\n")
    assert "main names agent 'bb', which is not defined at main in" in message
    assert "did you mean 'b'?" in message


def test_environment_interpolation(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        agents:
          shop:
            instructions: "Help ${WHO:-everyone} at $${NOT_A_VAR} ${SHOP}."
            max_steps: ${STEPS:-5}
            settings: {temperature: "${TEMP}", label: "${LABEL:-}"}
            model: {scripted: {steps: [[{text: "${GREETING:-Hello}"}]], per_turn: "${PER_TURN:-true}"}}
        """,
        env={"SHOP": "Mugs & Co", "WHO": "", "TEMP": "0.3"},
    )
    shop = config.agent()
    assert shop.instructions == "Help everyone at ${NOT_A_VAR} Mugs & Co."
    assert shop.max_steps == 5
    assert shop.settings == {"temperature": 0.3, "label": ""}
    assert isinstance(shop.model, ScriptedModel)
    assert shop.model.steps == [[{"text": "Hello"}]]
    assert shop.model.per_turn is True


def test_tool_import_path_registration_and_policy_overrides(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        agents:
          shop:
            model: {scripted: [[{text: Hi}]]}
            tools:
              - tools.builtin:lookup_price
              - {tool: add_to_cart, recovery: rerun, needs_approval: true, timeout: 5}
              - tests.unit.test_config:SOURCE
        """,
    )
    tools = config.agent().tools
    assert tools[0] is lookup_price
    changed = tools[1]
    assert isinstance(changed, Tool) and changed is not add_to_cart
    assert (changed.name, changed.recovery, changed.needs_approval, changed.timeout) == (
        "add_to_cart",
        "rerun",
        True,
        5,
    )
    assert (add_to_cart.recovery, add_to_cart.needs_approval, add_to_cart.timeout) == ("report", False, None)
    assert changed.approval_prompt({"slug": "mug"}) is not None
    copy = pickle.loads(pickle.dumps(changed))
    assert (copy.name, copy.recovery, copy.needs_approval, copy.timeout) == ("add_to_cart", "rerun", True, 5)
    assert copy.fn is add_to_cart.fn
    assert tools[2] is SOURCE

    register_tool(wrap_gift)
    try:
        assert "wrap_gift" in registered_tools()
        shop = load(
            tmp_path, MINIMAL.replace("model:", "tools: [wrap_gift, {tool: lookup_price, timeout: null}]\n    model:")
        )
        assert shop.agent().tools[0] is wrap_gift
        assert shop.agent().tools[1] is not lookup_price
        with pytest.raises(UsageError, match="already registered"):
            register_tool(other_wrap_gift)
    finally:
        unregister_tool("wrap_gift")
    assert set(BUILTIN_TOOLS) <= set(registered_tools())


def test_model_import_path_and_registered_name(tmp_path: Path) -> None:
    from_path = load(tmp_path, MINIMAL.replace("{scripted: [[{text: Hi}]]}", "tests.unit.test_config:make_model"))
    built = from_path.agent().model
    assert isinstance(built, ScriptedModel) and built.name == "from-factory"
    instance = load(tmp_path, MINIMAL.replace("{scripted: [[{text: Hi}]]}", "tests.unit.test_config:MODEL"))
    assert instance.agent().model is MODEL
    register_model("echo", make_model)
    try:
        named = load(tmp_path, MINIMAL.replace("{scripted: [[{text: Hi}]]}", "echo"))
        model = named.agent().model
        assert isinstance(model, ScriptedModel) and model.name == "from-factory"
    finally:
        unregister_model("echo")


def test_yaml_anchors_and_x_keys_share_specs(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        x-script: &script {scripted: [[{text: Hi}]]}
        agents:
          a: {model: *script, agents: [b]}
          b: {model: *script}
        """,
    )
    a = config.agent()
    assert a.name == "a"
    assert a.model is not a.agents[0].model


# -- every error path -------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"config file not found: .*nope\.yaml"):
        load_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_runtime(path)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    message = error(tmp_path, "agents:\n  shop:\n    model: [unclosed\n    tools: x\n")
    assert message.startswith(f"YAML syntax error in {tmp_path / 'troupe.yaml'}, line ")
    assert "column" in message
    bad_indent = error(tmp_path, "agents:\n  shop:\n    model: x\n   tools: y\n")
    assert ", line 4, column 4:" in bad_indent


def test_not_a_mapping_or_empty(tmp_path: Path) -> None:
    assert "the file holds nothing" in error(tmp_path, "")
    assert "the file holds a list" in error(tmp_path, "- a\n")
    assert "no agents: section" in error(tmp_path, "main: shop\n")
    runtime_only = error(tmp_path, "runtime: {}\n")
    assert "no agents: section" in runtime_only and "load_runtime" in runtime_only
    assert "agents: is empty" in error(tmp_path, "agents: {}\n")


def test_unknown_top_level_key_suggests(tmp_path: Path) -> None:
    message = error(tmp_path, MINIMAL + "mian: shop\n")
    assert "unknown key 'mian' in the config at mian in" in message
    assert ", line 4;" in message
    assert "did you mean 'main'?" in message
    assert "allowed keys: agents, main, runtime" in message


def test_unknown_agent_key_suggests(tmp_path: Path) -> None:
    message = error(tmp_path, MINIMAL + "    instruction: Help.\n")
    assert "unknown key 'instruction' in agent 'shop' at agents.shop.instruction in" in message
    assert ", line 4;" in message
    assert "did you mean 'instructions'?" in message


def test_unknown_tool_lists_the_registered_ones(tmp_path: Path) -> None:
    message = error(tmp_path, MINIMAL + "    tools: [add_to_kart]\n")
    path = tmp_path / "troupe.yaml"
    assert message == (
        f"unknown tool 'add_to_kart' at agents.shop.tools[0] in {path}, line 4; did you mean 'add_to_cart'? "
        "registered tools: add_to_cart, checkout, lookup_price; or give an import path like 'mypkg.tools:add_to_kart'"
    )


def test_bad_tool_import_paths(tmp_path: Path) -> None:
    def tools_error(ref: str) -> str:
        return error(tmp_path, MINIMAL + f"    tools: [lookup_price, '{ref}']\n")

    missing_module = tools_error("no_such_pkg.tools:thing")
    assert (
        "cannot import 'no_such_pkg.tools:thing': no module named 'no_such_pkg' at agents.shop.tools[1]"
        in missing_module
    )
    missing_attribute = tools_error("tools.builtin:add_to_kart")
    assert "module 'tools.builtin' has no attribute 'add_to_kart' at agents.shop.tools[1]" in missing_attribute
    assert "did you mean 'add_to_cart'?" in missing_attribute
    plain_function = tools_error("tests.unit.test_config:plain_function")
    assert "is a plain function, not a Tool" in plain_function and "decorate it with @tool" in plain_function
    not_a_tool = tools_error("tests.unit.test_config:MINIMAL")
    assert "'tests.unit.test_config:MINIMAL' is str" in not_a_tool and "not a Tool" in not_a_tool
    assert "is not an import path" in tools_error("tools.builtin:")
    assert "a tool is named by text" in error(tmp_path, MINIMAL + "    tools: [42]\n")
    assert "tools must be a list" in error(tmp_path, MINIMAL + "    tools: add_to_cart\n")


def test_bad_tool_entries(tmp_path: Path) -> None:
    def entry_error(entry: str) -> str:
        return error(tmp_path, MINIMAL + f"    tools: [{entry}]\n")

    assert "recovery must be rerun or report, not 'retry' at agents.shop.tools[0].recovery" in entry_error(
        "{tool: add_to_cart, recovery: retry}"
    )
    assert "timeout must be a positive number of seconds, not -1 at agents.shop.tools[0].timeout" in entry_error(
        "{tool: add_to_cart, timeout: -1}"
    )
    assert "needs_approval must be true or false" in entry_error("{tool: add_to_cart, needs_approval: maybe}")
    assert "did you mean 'timeout'?" in entry_error("{tool: add_to_cart, timout: 5}")
    assert "a tool entry needs tool:" in entry_error("{recovery: report}")
    assert "policies can be set only on a single @tool" in entry_error(
        "{tool: 'tests.unit.test_config:SOURCE', timeout: 1}"
    )
    assert "is listed twice (also at agents.shop.tools[0]) at agents.shop.tools[1]" in entry_error(
        "add_to_cart, {tool: add_to_cart, timeout: 1}"
    )


def test_bad_model_specs(tmp_path: Path) -> None:
    def model_error(spec: str) -> str:
        return error(tmp_path, f"agents:\n  shop:\n    model: {spec}\n")

    kind = model_error("{scriptd: [[{text: Hi}]]}")
    assert "unknown key 'scriptd' in the model at agents.shop.model.scriptd" in kind
    assert "did you mean 'scripted'?" in kind
    assert "a model must be a mapping with one key" in model_error("42")
    assert "a model must be a mapping with one key" in model_error("{scripted: [[{text: a}]], openai: {model: m}}")
    unknown = model_error("gpt4")
    assert "unknown model 'gpt4' at agents.shop.model" in unknown and "registered models:" in unknown
    assert "needs a model" not in unknown
    assert "agent 'shop' has no model at agents.shop" in error(tmp_path, "agents:\n  shop: {instructions: Hi}\n")
    assert "agent 'shop' is empty" in error(tmp_path, "agents:\n  shop:\n")
    assert "neither a model nor a zero-argument function" in model_error("tests.unit.test_config:needs_arguments")
    assert "returned str 'not a model', not a model" in model_error("tests.unit.test_config:not_a_model")
    openai_key = model_error("{openai: {model: gpt-4o-mini, key: x}}")
    assert "unknown key 'key' in the openai model at agents.shop.model.openai.key" in openai_key
    assert "the openai model needs model:" in model_error("{openai: {base_url: 'http://localhost:1/v1'}}")
    assert "settings may not set stream" in model_error("{openai: {model: m, settings: {stream: false}}}")
    assert "is not an http(s) URL" in model_error("{openai: {model: m, base_url: localhost}}")
    assert "max_retries must be a whole number of at least 0" in model_error("{openai: {model: m, max_retries: -1}}")


def test_bad_scripted_steps_name_the_item(tmp_path: Path) -> None:
    def script_error(steps: str) -> str:
        return error(tmp_path, f"agents:\n  shop:\n    model:\n      scripted: {steps}\n")

    bad_item = script_error("[[{text: Hi}, {tool: add_to_cart, inputs: {}}]]")
    assert bad_item.startswith("bad script item: unknown key(s) ['inputs'] for a 'tool' item")
    assert "at agents.shop.model.scripted[0][1] in" in bad_item
    assert "exactly one of" in script_error("[[{text: Hi}], [{texts: Hi}]]")
    assert "at agents.shop.model.scripted[1][0]" in script_error("[[{text: Hi}], [{texts: Hi}]]")
    assert "'chunk' a positive integer" in script_error("[[{text: Hi, chunk: 0}]]")
    assert "'pace' must be the seconds between two chunks" in script_error("[[{text: Hi, pace: -1}]]")
    assert "'pace' must be the seconds between two chunks" in script_error("[[{text: Hi, pace: slow}]]")
    assert "quote the text: YAML reads yes" in script_error("[[{text: yes}]]")
    assert "'code' must be one of" in script_error("[[{error: boom, code: teapot}]]")
    assert "a step must be a list of items, not a mapping at agents.shop.model.scripted[0]" in script_error(
        "[{text: Hi}]"
    )
    assert "a script must be a non-empty list" in script_error("[]")
    in_steps = script_error("{steps: [[{txt: Hi}]], per_turn: true}")
    assert "at agents.shop.model.scripted.steps[0][0]" in in_steps
    assert "per_turn must be true or false" in script_error("{steps: [[{text: Hi}]], per_turn: sometimes}")
    assert "the scripted model needs steps:" in script_error("{per_turn: true}")
    assert "date 2024-01-01 is not a JSON value at agents.shop.model.scripted[0][0].input.when" in script_error(
        "[[{tool: t, input: {when: 2024-01-01}}]]"
    )


def test_settings_must_be_json_that_every_layer_keeps(tmp_path: Path) -> None:
    def settings_error(settings: str) -> str:
        return error(tmp_path, f"agents: {{shop: {{model: {{scripted: [[{{text: Hi}}]]}}, settings: {settings}}}}}")

    assert "float nan is not a JSON number at agents.shop.settings.temperature" in settings_error("{temperature: .nan}")
    assert "float inf is not a JSON number at agents.shop.settings.x[1]" in settings_error("{x: [1, .inf]}")
    assert f"the integer {2**64} does not fit in 64 bits at agents.shop.settings.seed" in settings_error(
        f"{{seed: {2**64}}}"
    )
    assert "key 1 is not text (JSON keys are strings) at agents.shop.settings.bias" in settings_error("{bias: {1: 5}}")
    assert "line 1" in settings_error("{temperature: .nan}")


def test_sub_agent_cycle(tmp_path: Path) -> None:
    message = error(
        tmp_path,
        """
        agents:
          a: {model: {scripted: [[{text: Hi}]]}, agents: [b]}
          b: {model: {scripted: [[{text: Hi}]]}, agents: [c]}
          c: {model: {scripted: [[{text: Hi}]]}, agents: [a]}
        """,
    )
    assert "sub-agent cycle a -> b -> c -> a at agents.c.agents[0] in" in message
    assert "remove 'a' from c's agents" in message
    itself = error(tmp_path, "agents:\n  a: {model: {scripted: [[{text: Hi}]]}, agents: [a]}\n")
    assert "sub-agent cycle a -> a at agents.a.agents[0]" in itself


def test_unknown_sub_agent(tmp_path: Path) -> None:
    message = error(
        tmp_path,
        """
        agents:
          shop: {model: {scripted: [[{text: Hi}]]}, agents: [researchr]}
          researcher: {model: {scripted: [[{text: Hi}]]}}
        """,
    )
    assert "unknown sub-agent 'researchr' at agents.shop.agents[0] in" in message
    assert "did you mean 'researcher'?" in message


def test_missing_environment_variable(tmp_path: Path) -> None:
    message = error(tmp_path, MINIMAL + "    instructions: Talk to ${WHO}.\n")
    assert "environment variable WHO is not set at agents.shop.instructions in" in message
    assert ", line 4;" in message and "${WHO:-value}" in message
    assert "malformed variable '${1X}'" in error(tmp_path, MINIMAL + "    instructions: ${1X}\n")
    assert "malformed variable '${X'" in error(tmp_path, MINIMAL + "    instructions: ${X\n")
    steps = error(tmp_path, MINIMAL + "    max_steps: ${STEPS}\n", env={"STEPS": "many"})
    assert "max_steps must be a whole number of at least 1, not 'many' at agents.shop.max_steps" in steps


def test_other_agent_errors(tmp_path: Path) -> None:
    assert "duplicate key 'shop' at agents in" in error(tmp_path, MINIMAL + "  shop:\n    model: x\n")
    listed = error(tmp_path, "agents:\n  - model: {scripted: [[{text: Hi}]]}\n")
    assert "an agent in a list needs a name: at agents[0]" in listed
    twice = (
        "agents:\n  - {name: a, model: {scripted: [[{text: Hi}]]}}\n  - {name: a, model: {scripted: [[{text: Hi}]]}}\n"
    )
    assert "two agents are named 'a'" in error(tmp_path, twice)
    assert "invalid agent 'bad name'" in error(tmp_path, "agents:\n  bad name: {model: {scripted: [[{text: Hi}]]}}\n")
    assert "max_steps must be a whole number of at least 1, not 0" in error(tmp_path, MINIMAL + "    max_steps: 0\n")
    # threshold_tokens is optional now (the default comes from the model catalog): a bad value still fails.
    assert "threshold_tokens must be a whole number of at least 1, not 0" in error(
        tmp_path, MINIMAL + "    compaction: {threshold_tokens: 0}\n"
    )
    assert "on_failure must be fail or continue, not 'ignore'" in error(
        tmp_path, MINIMAL + "    compaction: {on_failure: ignore}\n"
    )
    assert "should_compact is a function named by import path" in error(
        tmp_path, MINIMAL + "    compaction: {should_compact: 3}\n"
    )
    assert "settings must be a mapping" in error(tmp_path, MINIMAL + "    settings: [1]\n")
    assert "instructions must be text" in error(tmp_path, MINIMAL + "    instructions: [a]\n")
    clash = """
    agents:
      shop: {model: {scripted: [[{text: Hi}]]}, agents: [b], tools: ['tests.unit.test_config:delegate_to_b']}
      b: {model: {scripted: [[{text: Hi}]]}}
    """
    assert "clashes with a sub-agent's delegate tool" in error(tmp_path, clash)


def test_runtime_errors(tmp_path: Path) -> None:
    def runtime_error(body: str) -> str:
        path = tmp_path / "runtime.yaml"
        path.write_text(f"runtime:\n  {body}\n", encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_runtime(path, env={})
        return info.value.message

    assert "placement must be pooled or dedicated, not 'shared' at runtime.placement" in runtime_error(
        "placement: shared"
    )
    assert "did you mean 'idle_timeout'?" in runtime_error("idle_timout: 5")
    assert "store 'troupe.db' is not a URL" in runtime_error("store: troupe.db")
    assert "idle_timeout must be a positive number" in runtime_error("idle_timeout: 0")
    assert "hosts_per_node must be a whole number" in runtime_error("hosts_per_node: 1.5")
    assert "max_dedicated must be a whole number" in runtime_error("max_dedicated: 0")
    assert "dedicated_wait must be a positive number" in runtime_error("dedicated_wait: -1")
    assert "api_keys must be a list or comma-separated text" in runtime_error("api_keys: {a: b}")
    (tmp_path / "agents.yaml").write_text(MINIMAL, encoding="utf-8")
    with pytest.raises(ConfigError, match="no runtime: section"):
        load_runtime(tmp_path / "agents.yaml", env={})


def test_config_errors_pickle(tmp_path: Path) -> None:
    message = error(tmp_path, MINIMAL + "    tools: [add_to_kart]\n")
    copy = pickle.loads(pickle.dumps(ConfigError(message)))
    assert copy.message == message


# -- fixtures the configs above import ---------------------------------------------------------


@tool
def wrap_gift(note: str) -> str:
    """Wrap the cart as a gift.

    Args:
        note: The card's text.
    """
    return "Wrapped."


@tool(name="wrap_gift")
def other_wrap_gift(note: str) -> str:
    """Another tool by the same name."""
    return "Wrapped again."


@tool
def delegate_to_b(task: str) -> str:
    """A tool that takes a sub-agent's delegate name."""
    return task


def plain_function() -> str:
    return "not a tool"


class _Source:
    async def list_tools(self, app: object) -> list[Tool]:
        return [lookup_price]


SOURCE = _Source()
MODEL = ScriptedModel([[{"text": "instance"}]])


def make_model() -> ScriptedModel:
    return ScriptedModel([[{"text": "factory"}]], name="from-factory")


def needs_arguments(steps: list[object]) -> ScriptedModel:
    return ScriptedModel([[{"text": "x"}]])


def not_a_model() -> str:
    return "not a model"
