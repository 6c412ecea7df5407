"""The session inspector in Chromium: the log, filtering, receipts, sub-agents, replay, live."""

from __future__ import annotations

import httpx
from playwright.async_api import expect

from tests.browser.conftest import WAIT, SiteFactory


async def test_the_inspector_shows_the_log_and_replays_to_an_earlier_index(open_site: SiteFactory) -> None:
    async with open_site() as site, httpx.AsyncClient(base_url=site.url, timeout=60) as api:
        sid = (await api.post("/api/sessions", json={"id": "inspect-1"})).json()["id"]
        for text in ("Hi! I'm looking for a gift for a coffee lover.", "Yes, please compare prices first."):
            done = (await api.post(f"/api/sessions/{sid}/prompt", json={"text": text, "wait": True})).json()
            assert done["success"] is True, done
        rejected = (await api.post(f"/api/sessions/{sid}/queue/remove", json={"inputId": "nope"})).json()
        assert rejected["outcome"] == "rejected"
        log = (await api.get(f"/api/sessions/{sid}/log")).json()
        events = log["events"]

        page = await site.page(f"/inspect/{sid}")
        rows = page.locator("#log-body tr")
        await expect(rows).to_have_count(len(events), timeout=WAIT)
        first = rows.nth(0)
        await expect(first.locator("td.index")).to_have_text("1")
        await expect(first.locator("td.type")).to_have_text("ai.input")
        assert await first.locator("details").get_attribute("open") is None  # the payload starts collapsed
        await expect(page.locator("#replay-view")).to_contain_text("best price", timeout=WAIT)  # live: at the end

        # a receipt with its reason
        decided = page.locator("#log-body tr[data-type='ai.control.decided'] summary.rejected")
        await expect(decided).to_have_text(f"{rejected['commandId']}: rejected (not-pending)")

        # filter by type
        await page.get_by_label("Type").select_option("ai.tool.finished")
        visible = page.locator("#log-body tr:visible")
        await expect(visible).to_have_count(sum(e["type"] == "ai.tool.finished" for e in events))
        await page.get_by_label("Type").select_option("")

        # replay through the index where add_to_cart finished: the conversation as it was then
        at = next(e["index"] for e in events if e["type"] == "ai.tool.finished")
        await page.locator(f"#log-body tr[data-index='{at}'] td.type").click()
        view = page.locator(f"#replay-view[data-index='{at}']")
        await expect(view).to_be_visible(timeout=WAIT)
        await expect(page.locator("#replay-index")).to_have_text(str(at))
        await expect(view).to_contain_text("I'll put two in your cart.")
        await expect(view.locator(".part.tool[data-state='done'] .tool-name")).to_have_text("add_to_cart")
        await expect(view).not_to_contain_text("Shall I compare prices")
        await expect(view).not_to_contain_text("compare prices first")
        await page.get_by_role("button", name="One event back").click()
        await expect(page.locator(f"#replay-view[data-index='{at - 1}']")).to_be_visible(timeout=WAIT)

        # live: a new turn's events appear as they are written
        before = await rows.count()
        await page.get_by_label("live").check()
        done = (await api.post(f"/api/sessions/{sid}/prompt", json={"text": "What's in my cart?", "wait": True})).json()
        assert done["success"] is True
        last = (await api.get(f"/api/sessions/{sid}/log", params={"after": before})).json()["last"]
        await expect(rows).to_have_count(last, timeout=WAIT)
        await expect(page.locator("#replay-view")).to_contain_text("Total: $9.98", timeout=WAIT)

        # the sub-agent's own session, linked
        link = page.locator("#subagents a")
        await expect(link).to_have_count(1)
        await link.click()
        await expect(page.locator("#session-name")).to_contain_text(f"{sid}/", timeout=WAIT)
        await expect(page.locator("#replay-view pre.table")).to_contain_text("Mugworks", timeout=WAIT)
        await expect(page.locator("#log-body tr").first.locator("td.type")).to_have_text("ai.input")
