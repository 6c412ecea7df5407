"""``bench shop --chunk``: the same turns with their texts cut differently, verified the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.bench.shop import CHUNKS_PER_TURN, PROMPTS, bench_shop, chunks_per_turn, shop_agent, shop_session
from actors.local import LocalRuntime
from orchestrator.core.errors import UsageError
from orchestrator.models.scripted import ScriptedModel

TIMEOUT = 30


def test_a_turn_delivers_its_texts_in_as_many_chunks_as_the_cut_makes() -> None:
    assert chunks_per_turn() == CHUNKS_PER_TURN == 250  # the compared workload: 4 characters a chunk
    assert chunks_per_turn(8) == 125
    assert chunks_per_turn(3) == 67 + 134 + 67 + 67  # a last, shorter chunk counts as one
    assert chunks_per_turn(1000) == 4  # each text whole


@pytest.mark.parametrize("chunk", [1000, 3])
async def test_a_session_with_other_chunks_streams_the_same_texts_and_is_verified(tmp_path: Path, chunk: int) -> None:
    agent = shop_agent(chunk)
    models = [agent.model, *(sub.model for sub in agent.agents)]
    assert all(isinstance(model, ScriptedModel) for model in models)
    texts = [
        item
        for model in models
        if isinstance(model, ScriptedModel)
        for step in model.steps
        for item in step
        if "text" in item
    ]
    assert len(texts) == 4 and {item["chunk"] for item in texts} == {chunk}
    async with LocalRuntime(store=f"sqlite:///{tmp_path / 's.db'}") as rt:
        firsts: list[float] = []

        # every turn's texts are checked whole as the live view assembled them (verify_turn)
        delivered = await asyncio.wait_for(shop_session(rt.session("shop-1", agent=agent), firsts, chunk), TIMEOUT)

        assert delivered == chunks_per_turn(chunk) * len(PROMPTS)
        assert len(firsts) == len(PROMPTS)  # a first text seen in every turn


async def test_bench_shop_refuses_a_chunk_that_is_not_a_positive_number_of_characters() -> None:
    for bad in (0, -4, 2.5, True):
        with pytest.raises(UsageError, match="chunk must be a positive number of characters"):
            await bench_shop((1,), repeats=1, chunk=bad)  # type: ignore[arg-type]
