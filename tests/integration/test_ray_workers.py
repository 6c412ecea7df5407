"""``Runtime`` inside Ray workers: a task, an actor, and many runtimes at once sharing one namespace.

A runtime in a worker attaches to the Ray it runs in and stops nothing on close; the hosts and
the supervisor belong to the driver's runtime that created them (or to one that asks, ``owns=True``).
"""

from __future__ import annotations

import uuid
from typing import Any

import ray

from actors.options import SUPERVISOR_NAME
from actors.runtime import Runtime, in_ray_worker
from orchestrator.run.agent import Agent
from orchestrator.testing import ScriptedModel, eventually

TIMEOUT = 60


def echo_agent() -> Agent:
    """Answers every turn with the step it is on (one step per turn)."""
    steps: list[list[dict[str, Any]]] = [[{"text": f"answer {i}"}] for i in range(8)]
    return Agent("echo", "Answer.", ScriptedModel(steps))


@ray.remote(num_cpus=0)
def ask_in_a_task(store: str, namespace: str, session_id: str, text: str) -> dict[str, Any]:
    assert in_ray_worker()
    with Runtime.sync(store, address="auto", namespace=namespace) as rt:
        result = rt.session(session_id, agent=echo_agent()).prompt(text)
        return {"text": result.text, "success": result.success, "owns": list(rt.runtime._created)}


@ray.remote(num_cpus=0)
class Chatter:
    """Holds one session across calls."""

    def __init__(self, store: str, namespace: str, session_id: str) -> None:
        self.rt = Runtime.sync(store, address="auto", namespace=namespace)
        self.session = self.rt.session(session_id, agent=echo_agent())

    def ask(self, text: str) -> str:
        return str(self.session.prompt(text).text)

    def messages(self) -> list[str]:
        return [m.text for m in self.session.state().state.messages]

    def close(self) -> None:
        self.rt.close()


async def test_a_task_prompts_a_session_and_returns_its_text(runtime: Runtime) -> None:
    sid = f"task-{uuid.uuid4().hex[:6]}"
    done = await ask_in_a_task.remote(runtime.store_url, runtime.namespace, sid, "hello")
    assert done == {"text": "answer 0", "success": True, "owns": []}  # it attached: it owns nothing
    state = (await runtime.session(sid, agent=echo_agent()).state()).state
    assert [m.text for m in state.messages] == ["hello", "answer 0"]  # the driver sees the same session
    assert (await runtime.supervisor.info.remote())["recoveries"] == []


async def test_an_actor_holds_a_session_across_calls(runtime: Runtime) -> None:
    sid = f"actor-{uuid.uuid4().hex[:6]}"
    chatter = Chatter.remote(runtime.store_url, runtime.namespace, sid)  # type: ignore[attr-defined]
    try:
        assert await chatter.ask.remote("one") == "answer 0"
        assert await chatter.ask.remote("two") == "answer 1"
        assert await chatter.messages.remote() == ["one", "answer 0", "two", "answer 1"]
        await chatter.close.remote()
    finally:
        ray.kill(chatter)


def _actors(namespace: str) -> dict[str, dict[str, Any]]:
    """What each of the namespace's hosts and its supervisor say about themselves (pid, start time)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != namespace:
            continue
        handle: Any = ray.get_actor(entry["name"], namespace=namespace)
        call = handle.info if entry["name"] == SUPERVISOR_NAME else handle.ready
        info = ray.get(call.remote(), timeout=TIMEOUT)
        found[entry["name"]] = {k: info.get(k) for k in ("pid", "started", "recoveries")}
    return found


async def test_many_runtimes_in_tasks_share_the_namespace_and_stop_nothing(store_url: str) -> None:
    """Three tasks open and close runtimes at once with no driver runtime: the first creates the
    namespace's actors; none of them kills anything on close, so the others are never cut off."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    tasks = [ask_in_a_task.remote(store_url, namespace, f"many-{i}", f"q{i}") for i in range(3)]
    results = ray.get(tasks, timeout=TIMEOUT)
    assert [r["text"] for r in results] == ["answer 0"] * 3 and all(r["success"] for r in results)
    assert all(r["owns"] == [] for r in results)  # in a worker, a runtime owns nothing
    before = _actors(namespace)
    assert SUPERVISOR_NAME in before and len(before) == 3  # two hosts (num_cpus=2) and the supervisor
    # A second wave: the same actors serve it, and nothing was killed or restarted in between.
    results = ray.get(
        [ask_in_a_task.remote(store_url, namespace, f"many-{i}", f"r{i}") for i in range(3)], timeout=TIMEOUT
    )
    assert [r["text"] for r in results] == ["answer 1"] * 3
    after = _actors(namespace)
    assert after == before
    assert after[SUPERVISOR_NAME]["recoveries"] == []  # no host died

    # The pipeline's driver asks to stop them (owns=True): only then are they gone.
    cleanup = Runtime(store_url, namespace=namespace, owns=True)
    await cleanup.start()
    assert sorted(cleanup._created) == sorted(before)
    await cleanup.close()

    def gone() -> bool:
        return not any(e["namespace"] == namespace for e in ray.util.list_named_actors(all_namespaces=True))

    await eventually(gone, TIMEOUT, what="the namespace's actors to be gone")


async def test_a_second_driver_runtime_stops_nothing_the_first_created(store_url: str) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    first = Runtime(store_url, namespace=namespace)
    await first.start()
    try:
        second = Runtime(store_url, namespace=namespace)
        await second.start()
        assert second._created == [] and SUPERVISOR_NAME in first._created
        before = _actors(namespace)
        await second.close()
        assert _actors(namespace) == before
        result = await (await first.session("s-1", agent=echo_agent()).prompt("hi")).finished
        assert result.text == "answer 0"
    finally:
        await first.close()
