"""schemathesis against the served OpenAPI document: 0 server errors and 0 schema violations.

A real uvicorn server on 127.0.0.1 (its own thread and event loop, over an in-process runtime
on a memory store) serves the app with an API key; schemathesis reads ``/openapi.json`` from
it and sends a fixed, small number of generated requests per operation (derandomized, so every
run sends the same ones), authenticated, checking each response against the document.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from actors.local import LocalRuntime
from orchestrator.surfaces.http import create_app
from tests.unit.http_helpers import shopper

KEY = "key-fuzz"
SESSION = "s-fuzz"
"""A session the key owns (created before the run): valid requests go to it."""
EXAMPLES = 6
"""Generated requests per operation (and mode): bounded, so CI stays quick."""
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


ENDLESS = {"GET /api/sessions/{session_id}/events", "GET /api/chat/{session_id}/stream"}
"""Operations whose response is a live stream (read for a bounded time)."""


class ServerThread:
    """The app on uvicorn in a thread of its own (schemathesis calls it synchronously)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.started = threading.Event()
        self.server: uvicorn.Server | None = None
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="fuzz-server", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # surfaced by the fixture
            self.failure = error
            self.started.set()

    async def _serve(self) -> None:
        async with LocalRuntime("memory://", flush_parts=1) as rt:
            app = create_app(rt, shopper, api_keys=[KEY], max_body_bytes=20_000, heartbeat=0.2)
            config = uvicorn.Config(
                app, log_level="warning", lifespan="off", http="h11", ws="none", timeout_graceful_shutdown=1
            )
            self.server = uvicorn.Server(config)
            self.started.set()
            await self.server.serve(sockets=[self.sock])

    def __enter__(self) -> ServerThread:
        self.thread.start()
        assert self.started.wait(30), "the server did not start"
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread() as running:
        yield running


@pytest.fixture(scope="module")
def api_schema(server: ServerThread) -> Any:
    created = httpx.post(
        f"{server.url}/api/sessions", json={"id": SESSION}, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    )
    assert created.status_code == 201, created.text
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", wait_for_schema=30)


def run_operation(operation: Any, mode: GenerationMode, server: ServerThread, statuses: Counter[int]) -> list[str]:
    """Send ``EXAMPLES`` generated requests (``mode``) to one operation; the failures, described."""
    failures: list[str] = []
    # A live event stream never ends: read it for a moment (the snapshot comes first), then stop.
    timeout = 2.0 if operation.label in ENDLESS else 30.0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def send(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and case.path_parameters and "session_id" in case.path_parameters:
            # A random id is a 404 before the body is read: aim valid requests at a real session.
            case.path_parameters["session_id"] = SESSION
        try:
            response = case.call_and_validate(
                base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, checks=CHECKS, timeout=timeout
            )
            statuses[response.status_code] += 1
        except (Exception, BaseExceptionGroup) as error:  # a schemathesis failure (or a group of them)
            for failure in getattr(error, "exceptions", [error]):
                title = getattr(failure, "title", type(failure).__name__)
                message = str(getattr(failure, "message", failure))[:500]
                failures.append(f"{operation.label} [{mode}] {title}: {message}")

    send()
    return failures


@pytest.mark.slow
def test_the_served_api_conforms_to_its_openapi_document(api_schema: Any, server: ServerThread) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20  # every route is in the document
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += run_operation(operation, mode, server, statuses)
    assert not failures, "\n\n".join(failures[:20])
    assert statuses.total() >= len(operations) * EXAMPLES, statuses  # the requests were sent
    assert {200, 422} <= set(statuses), statuses  # and some got through, some were refused
    print("statuses:", dict(sorted(statuses.items())))


# -- the document itself ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def document(server: ServerThread) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    return doc


def test_session_ids_carry_their_pattern(document: dict[str, Any]) -> None:
    params = [
        p
        for operations in document["paths"].values()
        for operation in operations.values()
        for p in operation.get("parameters", [])
        if p["name"] == "session_id"
    ]
    assert len(params) >= 18
    assert all(p["schema"]["pattern"] == "^[A-Za-z0-9._:@-]{1,128}$" for p in params)
    assert document["components"]["schemas"]["CreateSession"]["properties"]["id"]["pattern"]


def test_streams_are_event_streams_and_their_errors_json(document: dict[str, Any]) -> None:
    for path, method in (("/api/sessions/{session_id}/events", "get"), ("/api/chat", "post")):
        responses = document["paths"][path][method]["responses"]
        stream = responses["200"]["content"]["text/event-stream"]["schema"]
        assert stream["type"] == "object" and set(stream["properties"]) >= {"event", "data", "id"}
        for status, response in responses.items():
            if not status.startswith("2"):
                assert list(response["content"]) == ["application/json"], (path, status)


def test_every_operation_documents_its_errors(document: dict[str, Any]) -> None:
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert "401" in codes and "422" in codes, (method, path)
            if method == "post":
                assert "413" in codes, (method, path)
            if method == "post" and path.startswith("/api/sessions/{session_id}/"):
                assert {"403", "409"} <= codes, (method, path)


def test_a_405_says_which_methods_are_allowed(server: ServerThread) -> None:
    response = httpx.delete(
        f"{server.url}/api/sessions/{SESSION}/messages", headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["message"] == "Method Not Allowed"
