"""``troupe bench http``, small: a served app (``troupe serve --local`` in a child process) under load.

No timing is asserted: the run must finish with every request answered and every SSE follower
having seen every event of its session exactly once (the same events as the session's reference
follower, whose fold equals the session's final state).
"""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.core.errors import UsageError
from orchestrator.surfaces.bench.http import _Connection, bench_http, format_http


@pytest.mark.slow
async def test_a_small_run_loses_and_repeats_no_event() -> None:
    figures = await bench_http(sessions=4, followers=20, requests=100, connections=20, local=True, limit=300)
    text = format_http(figures)
    assert figures.ok, text
    assert [p.name for p in figures.phases] == ["burst", "reads"]
    assert all(p.requests == 100 and p.errors == 0 for p in figures.phases)
    assert figures.lost == figures.duplicated == figures.mismatched == figures.unfinished == 0
    assert figures.events > 20  # every follower got the turns' events, not just a snapshot
    assert "every follower saw every event exactly once" in text
    assert all(p.client_cpu > 0 for p in figures.phases)
    assert "CPU: " in text


async def test_bad_sizes_are_refused() -> None:
    with pytest.raises(UsageError, match="--followers"):
        await bench_http(followers=0, local=True)


async def test_the_lean_client_reads_both_bodies_and_reconnects_after_close() -> None:
    # A raw server: a chunked answer, then one that closes the connection; the next request reconnects.
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            if head.startswith(b"POST"):
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
                break
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = _Connection("127.0.0.1", port)
    try:
        assert await connection.request("GET", "/a") == (200, b"abcde")
        assert await connection.request("POST", "/b", b'{"x":1}') == (201, b'{"x":1}')
        assert await connection.request("GET", "/c") == (200, b"abcde")
        assert connections == 2
    finally:
        await connection.close()
        server.close()
        await server.wait_closed()
