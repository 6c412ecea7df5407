"""Browser tests: the web chat and inspector in Debian's Chromium, driven by Playwright.

The server is the real app (``create_app``) on uvicorn, bound to 127.0.0.1 in this event loop,
over an in-process runtime (no Ray). Playwright's own browser download does not work on these
machines, so the tests launch the ``chromium`` on PATH; without one they skip with a one-line
reason, except under ``CI=true``, where they fail (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from actors.local import LocalRuntime
from orchestrator.run.agent import Agent
from orchestrator.surfaces.config import load_agent
from orchestrator.surfaces.http import create_app
from tests.unit.http_helpers import LiveServer

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT = 30_000
"""Milliseconds a page may take to show what a test waits for (a busy 2-core machine)."""


def chromium() -> str:
    """The Chromium on PATH; skip without one (fail under CI=true, where it must be installed)."""
    path = shutil.which("chromium")
    if path is None:
        reason = "no chromium on PATH: apt-get install chromium (.ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    executable = chromium()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


def demo_agent() -> Agent:
    """The shop demo of ``troupe serve configs/shop.yaml``."""
    return load_agent(REPO / "configs" / "shop.yaml", env={})


@dataclass
class Site:
    """A running server and the browser to visit it with."""

    url: str
    runtime: LocalRuntime
    agent: Agent
    browser: Browser
    contexts: list[BrowserContext]
    errors: list[str]
    """Uncaught errors of every page (a test ends with none)."""

    async def page(self, path: str = "/", *, width: int = 1200, height: int = 900) -> Page:
        """A new tab (its own context: its own sessionStorage) at ``path``; page errors fail the test."""
        context = await self.browser.new_context(viewport={"width": width, "height": height})
        self.contexts.append(context)
        page = await context.new_page()
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        await page.goto(self.url + path)
        return page


@asynccontextmanager
async def site(browser: Browser, agent: Agent, **options: Any) -> AsyncIterator[Site]:
    """The app for ``agent`` on a live server, with the tabs a test opens closed after it."""
    async with LocalRuntime("memory://") as runtime:
        app = create_app(runtime, agent, **options)
        async with LiveServer(app) as server:
            visit = Site(server.url, runtime, agent, browser, [], [])
            try:
                yield visit
            finally:
                for context in visit.contexts:
                    await context.close()
            assert visit.errors == [], visit.errors


SiteFactory = Callable[..., Any]


@pytest.fixture
def open_site(browser: Browser) -> SiteFactory:
    """``async with open_site(agent, api_keys=[...]) as s``: a server for this test."""

    def factory(agent: Agent | None = None, **options: Any) -> Any:
        return site(browser, agent or demo_agent(), **options)

    return factory
