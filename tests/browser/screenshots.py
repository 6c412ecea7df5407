"""Regenerate the README's screenshots of the web chat and the inspector (docs/*.png).

    .venv/bin/python -m tests.browser.screenshots

It serves the shop demo (configs/shop.yaml) on an in-process runtime at 127.0.0.1, plays its
first two turns through the chat page in Chromium, and photographs the chat (the researcher's run
open inside its delegate call), the same at 375 px, and the inspector replaying the log to the
moment the researcher's table was streaming.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import httpx
from playwright.async_api import Page, async_playwright, expect

from actors.local import LocalRuntime
from orchestrator.surfaces.config import load_agent
from orchestrator.surfaces.http import create_app
from tests.unit.http_helpers import LiveServer

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT = 60_000
PROMPTS = ("Hi! I'm looking for a gift for a coffee lover.", "Yes, please compare prices first.")


async def _turn(page: Page, text: str, count: int) -> None:
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_label("Message", exact=True).press("Enter")
    await expect(page.locator("#transcript > article.assistant")).to_have_count(count, timeout=WAIT)
    await expect(page.locator("body[data-executing=false]")).to_have_count(1, timeout=WAIT)


async def main() -> int:
    """Write docs/chat.png, docs/chat-narrow.png and docs/inspector.png; 1 without a Chromium."""
    executable = shutil.which("chromium")
    if executable is None:
        print("no chromium on PATH: apt-get install chromium", file=sys.stderr)
        return 1
    DOCS.mkdir(exist_ok=True)
    agent = load_agent(REPO / "configs" / "shop.yaml", env={})
    async with (
        LocalRuntime("memory://") as runtime,
        LiveServer(create_app(runtime, agent)) as server,
        async_playwright() as playwright,
    ):
        async with httpx.AsyncClient(base_url=server.url) as api:
            await api.post("/api/sessions", json={"id": "shop-demo"})
        browser = await playwright.chromium.launch(executable_path=executable, args=ARGS)
        page = await browser.new_page(viewport={"width": 1280, "height": 1000})
        await page.goto(f"{server.url}/#shop-demo")
        await expect(page.locator("#connection")).to_have_text("live", timeout=WAIT)
        for count, prompt in enumerate(PROMPTS, start=1):
            await _turn(page, prompt, count)
        await page.get_by_label("Message", exact=True).fill("What's in my cart?")
        await page.locator("#transcript").evaluate("t => { t.scrollTop = t.scrollHeight; }")
        await page.screenshot(path=str(DOCS / "chat.png"))

        narrow = await browser.new_page(viewport={"width": 375, "height": 812})
        await narrow.goto(f"{server.url}/#shop-demo")
        await expect(narrow.locator("#connection")).to_have_text("live", timeout=WAIT)
        await narrow.locator(".nested-run pre.table").scroll_into_view_if_needed()
        await narrow.screenshot(path=str(DOCS / "chat-narrow.png"))

        inspector = await browser.new_page(viewport={"width": 1280, "height": 900})
        await inspector.goto(f"{server.url}/inspect/shop-demo")
        rows = inspector.locator("#log-body tr")
        await expect(rows.first).to_be_visible(timeout=WAIT)
        nested = inspector.locator("#log-body tr[data-type='ai.nested']")
        at = await nested.nth((await nested.count()) * 3 // 4).get_attribute("data-index")
        await inspector.locator(f"#log-body tr[data-index='{at}'] td.type").click()
        await expect(inspector.locator(f"#replay-view[data-index='{at}']")).to_be_visible(timeout=WAIT)
        await inspector.locator(f"#log-body tr[data-index='{at}'] summary").click()
        await inspector.locator(f"#log-body tr[data-index='{at}']").scroll_into_view_if_needed()
        await inspector.locator("#replay-view pre.table").scroll_into_view_if_needed()
        await inspector.screenshot(path=str(DOCS / "inspector.png"))
        await browser.close()
    for name in ("chat.png", "chat-narrow.png", "inspector.png"):
        print(DOCS / name)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
