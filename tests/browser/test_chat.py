"""The web chat in Chromium: the shop demo end to end, and every control a person uses."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import unquote

import httpx
from playwright.async_api import Locator, Page, Route, expect

from orchestrator.models.scripted import ScriptedModel
from orchestrator.run.agent import Agent
from tests.browser.conftest import WAIT, SiteFactory
from tests.fixtures.agents import Counter, approving_tree
from tests.unit.http_helpers import gate, shopper
from tools import tool

T = TypeVar("T")
TOP_USER = "#transcript > article.message.user"
TOP_ASSISTANT = "#transcript > article.message.assistant"


def gate_name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def ready(page: Page) -> None:
    """The chat has loaded its session (snapshot applied)."""
    await expect(page.locator("#app")).to_be_visible(timeout=WAIT)
    await expect(page.locator("#connection")).to_have_text("live", timeout=WAIT)
    # "live" is the stream; the snapshot is drawn on a later frame, which stamps the body's index.
    await expect(page.locator("body[data-index]")).to_have_count(1, timeout=WAIT)


async def send(page: Page, text: str) -> None:
    """Type ``text`` and press Enter (the send button stays disabled while the box is empty)."""
    await page.locator("#input").fill(text)
    await page.locator("#input").press("Enter")
    await expect(page.locator("#input")).to_have_value("", timeout=WAIT)


async def turns_done(page: Page, count: int) -> None:
    """``count`` assistant replies at the top level, and no turn running."""
    await expect(page.locator(TOP_ASSISTANT)).to_have_count(count, timeout=WAIT)
    await expect(page.locator("body[data-executing=false]")).to_have_count(1, timeout=WAIT)


def session_of(page: Page) -> str:
    return unquote(page.url.split("#", 1)[1])


def tool_part(page: Page, name: str) -> Locator:
    return page.locator(".part.tool", has=page.locator(".tool-name", has_text=name)).last


async def watch(sample: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float = 30) -> list[T]:
    """Every distinct value ``sample`` returns, polled, until ``done`` holds for one."""
    seen: list[T] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await sample()
        if not seen or seen[-1] != value:
            seen.append(value)
        if done(value):
            return seen
        await asyncio.sleep(0.02)
    raise AssertionError(f"never done; saw {seen[-3:]}")


async def test_the_shop_demo_streams_nests_and_checks_out_after_approval(open_site: SiteFactory) -> None:
    async with open_site() as site:
        page = await site.page()
        await ready(page)
        await expect(page.locator("#send")).to_be_disabled()

        # 1. a prompt streams text
        await send(page, "Hi! I'm looking for a gift for a coffee lover.")
        first = page.locator(f"{TOP_ASSISTANT} .parts > .part.text").first

        async def first_text() -> str:
            return (await first.text_content(timeout=WAIT)) or ""

        texts = await watch(first_text, lambda t: t.endswith("I'll put two in your cart."))
        partial = [t for t in texts if t and not t.endswith("cart.")]
        assert len(partial) >= 2 and all(len(a) < len(b) for a, b in itertools.pairwise(partial))
        await turns_done(page, 1)
        await expect(tool_part(page, "add_to_cart")).to_have_attribute("data-state", "done")

        # 2. the researcher's text streams inside the delegate call, while the call runs
        await send(page, "Yes, please compare prices first.")
        delegate = tool_part(page, "delegate_to_researcher")
        nested = delegate.locator(".nested-run .part.text").last

        async def nested_sample() -> tuple[str, str]:
            if await delegate.count() == 0 or await nested.count() == 0:
                return ("", "")
            return ((await nested.text_content()) or "", (await delegate.get_attribute("data-state")) or "")

        samples = await watch(nested_sample, lambda s: "cheapest" in s[0])
        table = [s[0] for s in samples if "Here is what I found" in s[0] and s[1] == "running"]
        assert len(table) >= 2, samples[-5:]
        assert all(len(a) < len(b) for a, b in itertools.pairwise(table)), table
        await turns_done(page, 2)
        await expect(delegate.locator(".nested-run pre.table")).to_contain_text("Café Supply Co. | $5.75")

        # 3 and 4. the summary, then checkout: it waits, is approved from the page, then runs
        await send(page, "What's in my cart?")
        await turns_done(page, 3)
        await send(page, "Check out, please.")
        checkout = tool_part(page, "checkout")
        await expect(checkout).to_have_attribute("data-state", "awaiting-confirmation", timeout=WAIT)
        await expect(checkout.locator(".tool-state")).to_have_text("awaiting confirmation")
        await checkout.get_by_role("button", name="Approve").click()
        await expect(checkout).to_have_attribute("data-state", "done", timeout=WAIT)
        await expect(checkout.locator(".tool-output")).to_have_text(
            "Order placed: 2 x stoneware-mug, $9.98, paid by card."
        )
        await turns_done(page, 4)
        await expect(page.locator(TOP_ASSISTANT).last).to_contain_text("Your order is placed")


async def test_a_denial_keeps_its_reason_after_a_reload(open_site: SiteFactory) -> None:
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, "buy a mug")
        buy = tool_part(page, "buy")
        await expect(buy).to_have_attribute("data-state", "awaiting-confirmation", timeout=WAIT)
        await buy.get_by_label("Reason (optional)").fill("too pricey")
        await buy.get_by_role("button", name="Deny").click()
        await expect(buy.locator(".tool-error")).to_have_text(
            "The user denied this call. Reason: too pricey", timeout=WAIT
        )
        await turns_done(page, 1)
        await page.reload()
        await ready(page)
        await expect(tool_part(page, "buy").locator(".tool-error")).to_contain_text("Reason: too pricey")


async def test_a_queued_prompt_edited_and_moved_while_a_turn_runs_then_runs_in_the_new_order(
    open_site: SiteFactory,
) -> None:
    first, second = gate_name("qa"), gate_name("qb")
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, f"gate {first} {second}")
        await gate(first).reached(timeout=WAIT / 1000)
        await send(page, "prices first")
        await send(page, "count second")
        items = page.locator(".queue-item")
        await expect(items).to_have_count(2, timeout=WAIT)
        await expect(page.locator("#stop")).to_be_enabled()

        await items.nth(0).get_by_label("Queued message").fill("check edited")
        await items.nth(0).get_by_role("button", name="Save the edited message").click()
        await items.nth(1).get_by_role("button", name="Move up").click()
        session = site.runtime.session(session_of(page), agent=site.agent)

        async def queued() -> list[str]:
            return [i.text for i in (await session.state()).state.inbox.items]

        await watch(queued, lambda q: q == ["count second", "check edited"])
        await expect(items.nth(0).locator(".queue-text")).to_have_value("count second", timeout=WAIT)
        await expect(items.nth(1).locator(".queue-text")).to_have_value("check edited")

        gate(first).open()
        gate(second).open()
        await turns_done(page, 3)
        users = await page.locator(f"{TOP_USER} .part.text").all_text_contents()
        assert users == [f"gate {first} {second}", "count second", "check edited"]
        replies = await page.locator(TOP_ASSISTANT).all_text_contents()
        assert "One, two, three." in replies[1] and "Yes, $5." in replies[2]
        await expect(page.locator("#queue")).to_be_hidden()


async def test_a_rejected_queue_command_shows_its_receipt(open_site: SiteFactory) -> None:
    first, second = gate_name("ra"), gate_name("rb")
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, f"gate {first} {second}")
        await gate(first).reached(timeout=WAIT / 1000)
        await send(page, "count later")
        await expect(page.locator(".queue-item")).to_have_count(1, timeout=WAIT)
        held: list[Route] = []
        arrived = asyncio.Event()

        async def hold(route: Route) -> None:  # the remove reaches the server after the input was admitted
            held.append(route)
            arrived.set()

        await page.route("**/queue/remove", hold)
        await page.locator(".queue-item").get_by_role("button", name="Remove from the queue").click()
        await asyncio.wait_for(arrived.wait(), WAIT / 1000)
        gate(first).open()
        gate(second).open()
        await turns_done(page, 2)
        await held[0].continue_()
        await expect(page.locator("#notice")).to_have_text("Remove was rejected: not-pending", timeout=WAIT)


async def test_stop_then_retry(open_site: SiteFactory) -> None:
    name = gate_name("st")
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, f"slow {name}")
        await gate(name).reached(timeout=WAIT / 1000)
        reply = page.locator(TOP_ASSISTANT).last
        await expect(reply).to_contain_text("First, ", timeout=WAIT)
        await expect(page.locator("#stop")).to_be_enabled()
        await page.get_by_role("button", name="Stop").click()
        await expect(page.locator("#stop")).to_be_disabled(timeout=WAIT)
        await expect(page.locator("body[data-executing=false]")).to_have_count(1)
        assert "then more." not in ((await reply.text_content()) or "")

        gate(name).open()
        await expect(page.locator("#retry")).to_be_enabled()
        await page.get_by_role("button", name="Retry").click()
        await expect(page.locator(TOP_ASSISTANT).last).to_contain_text("then more.", timeout=WAIT)
        await expect(page.locator("body[data-executing=false]")).to_have_count(1, timeout=WAIT)


async def test_a_reload_and_a_dropped_stream_mid_turn_converge(open_site: SiteFactory) -> None:
    name = gate_name("rl")
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, f"slow {name}")
        await gate(name).reached(timeout=WAIT / 1000)
        await expect(page.locator(TOP_ASSISTANT)).to_contain_text("First, ", timeout=WAIT)
        await page.reload()  # mid-stream: the turn waits at the gate
        await ready(page)
        await expect(page.locator(TOP_ASSISTANT)).to_have_count(1)
        await expect(page.locator(f"{TOP_ASSISTANT} .part.text")).to_have_text("First, ")
        await expect(page.locator("#stop")).to_be_enabled()

        await page.evaluate("() => window.troupe.drop()")  # the stream drops; it resumes with Last-Event-ID
        gate(name).open()
        await turns_done(page, 1)
        await expect(page.locator(f"{TOP_ASSISTANT} .part.text")).to_have_text("First, then more.")  # no gap, no twice
        other = await site.page(f"/#{session_of(page)}")
        await ready(other)
        assert await other.locator("#transcript").inner_text() == await page.locator("#transcript").inner_text()


async def test_two_tabs_on_one_session_converge(open_site: SiteFactory) -> None:
    async with open_site() as site:
        one = await site.page()
        await ready(one)
        two = await site.page(f"/#{session_of(one)}", width=375, height=812)
        await ready(two)
        await send(one, "Hi! I'm looking for a gift for a coffee lover.")
        await send(two, "Yes, please compare prices first.")  # queued behind the first, from the other tab
        await turns_done(one, 2)
        await turns_done(two, 2)
        assert await one.locator("#transcript").inner_text() == await two.locator("#transcript").inner_text()
        await expect(two.locator(".nested-run pre.table")).to_contain_text("Mugworks")
        # at 375 px the table scrolls in its own box; nothing else is wider than the screen
        transcript = two.locator("#transcript")
        assert await transcript.evaluate("t => t.scrollWidth <= t.clientWidth"), "the conversation overflows at 375 px"
        assert await two.evaluate("() => document.scrollingElement.scrollWidth") <= 375


@tool
def leave_a_note(note: str) -> str:
    """Echo a note back (a tool whose result carries markup)."""
    return note


XSS = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
xss_agent = Agent(
    "shop",
    "Echo.",
    ScriptedModel(
        [[{"tool": "leave_a_note", "input": {"note": XSS}}], [{"text": f"Noted: {XSS} <b>bold?</b>"}]],
        per_turn=True,
    ),
    tools=[leave_a_note],
)


async def test_markup_from_a_tool_or_the_model_is_text_and_runs_nothing(open_site: SiteFactory) -> None:
    async with open_site(xss_agent) as site:
        page = await site.page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: dialogs.append(d.message))
        await ready(page)
        title = await page.title()
        await send(page, "<img src=x onerror=alert(1)>")
        await turns_done(page, 1)
        await expect(tool_part(page, "leave_a_note").locator(".tool-output")).to_have_text(XSS)
        await expect(page.locator(f"{TOP_ASSISTANT} .part.text")).to_have_text(f"Noted: {XSS} <b>bold?</b>")
        await expect(page.locator(f"{TOP_USER} .part.text")).to_have_text("<img src=x onerror=alert(1)>")
        assert await page.locator("#transcript img, #transcript script, #transcript b").count() == 0
        assert await page.title() == title and dialogs == []


async def test_a_server_with_keys_asks_for_one_and_lists_only_the_callers_sessions(open_site: SiteFactory) -> None:
    async with open_site(shopper, api_keys=["key-one", "key-two"]) as site:
        async with httpx.AsyncClient(base_url=site.url, headers={"Authorization": "Bearer key-two"}) as other:
            theirs = (await other.post("/api/sessions", json={"id": "theirs-1"})).json()["id"]
        page = await site.page()
        await expect(page.get_by_label("API key")).to_be_visible(timeout=WAIT)
        await page.get_by_label("API key").fill("wrong")
        await page.get_by_role("button", name="Use this key").click()
        await expect(page.locator("#key-error")).to_contain_text("not valid", timeout=WAIT)
        await page.get_by_label("API key").fill("key-one")
        await page.get_by_role("button", name="Use this key").click()
        await ready(page)
        assert "key-one" not in page.url
        assert await page.evaluate("() => sessionStorage.getItem('troupe.apiKey')") == "key-one"
        mine = session_of(page)
        await expect(page.locator("#session-list")).to_contain_text(mine)
        assert theirs not in ((await page.locator("#session-list").text_content()) or "")
        await send(page, "count to three")
        await turns_done(page, 1)
        await page.reload()  # the key stays for this tab
        await ready(page)
        await expect(page.locator(TOP_ASSISTANT)).to_contain_text("One, two, three.")


async def test_keyboard_labels_narrow_screens_and_switching_sessions(open_site: SiteFactory) -> None:
    async with open_site(shopper) as site:
        page = await site.page(width=375, height=800)
        await ready(page)
        box = page.get_by_label("Message", exact=True)
        await box.fill("count")
        await box.press("Shift+Enter")
        await box.press_sequentially("more")
        await expect(box).to_have_value("count\nmore")
        await expect(page.locator("#send")).to_be_enabled()
        await box.press("Enter")
        await turns_done(page, 1)
        await expect(page.locator(f"{TOP_USER} .part.text")).to_have_text("count\nmore")
        for button in await page.locator("button").all():
            name = (await button.get_attribute("aria-label")) or (await button.text_content()) or ""
            assert name.strip(), await button.evaluate("b => b.outerHTML")
        for field in await page.locator("input:visible, textarea, select").all():
            assert await field.evaluate("f => Boolean(f.labels?.length || f.getAttribute('aria-label'))")
        assert await page.evaluate("() => document.scrollingElement.scrollWidth") <= 375

        first = session_of(page)
        await page.get_by_role("button", name="New session", exact=True).click()
        await expect(page.locator(TOP_USER)).to_have_count(0, timeout=WAIT)
        assert session_of(page) != first
        await ready(page)
        await page.locator("#session-list").get_by_role("button", name=first).click()
        await expect(page.locator(f"{TOP_USER} .part.text")).to_have_text("count\nmore", timeout=WAIT)
        assert session_of(page) == first


async def test_fork_from_a_message(open_site: SiteFactory) -> None:
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, "count once")
        await turns_done(page, 1)
        await send(page, "check twice")
        await turns_done(page, 2)
        source = session_of(page)
        await (
            page.locator(TOP_USER)
            .nth(1)
            .get_by_role("button", name="Fork a new session from before this message")
            .click()
        )
        await expect(page.locator("#notice")).to_contain_text(f"Forked {source}", timeout=WAIT)
        assert session_of(page) != source
        await expect(page.locator(TOP_USER)).to_have_count(1)
        await expect(page.locator(TOP_ASSISTANT)).to_contain_text("One, two, three.")
        await expect(page.get_by_label("Message", exact=True)).to_have_value("check twice")
        await expect(page.locator("#session-list")).to_contain_text(session_of(page))


async def test_an_approval_two_sub_agents_deep_is_answered_in_place(open_site: SiteFactory) -> None:
    async with open_site(approving_tree(Counter())) as site:
        page = await site.page()
        await ready(page)
        await send(page, "a mug please")
        researcher = tool_part(page, "delegate_to_researcher")
        buyer = researcher.locator(
            ".nested-run .part.tool[data-call-id]", has=page.locator(".tool-name", has_text="delegate_to_buyer")
        )
        cart = buyer.locator(".nested-run .part.tool", has=page.locator(".tool-name", has_text="add_to_cart"))
        await expect(cart).to_have_attribute("data-state", "awaiting-confirmation", timeout=WAIT)
        await cart.get_by_role("button", name="Approve").click()
        await expect(cart).to_have_attribute("data-state", "done", timeout=WAIT)
        await expect(cart.locator(".tool-output")).to_have_text("Added.")
        await turns_done(page, 1)
        await expect(page.locator(f"{TOP_ASSISTANT} > .parts > .part.text")).to_have_text("Ok.")
        # every nested run is collapsible, and stays as the person left it
        summary = researcher.locator("summary.nested-summary").first
        await summary.click()
        await expect(researcher.locator("details.nested").first).not_to_have_attribute("open", "")


async def test_a_failed_turn_shows_one_error(open_site: SiteFactory) -> None:
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, "error please")
        await turns_done(page, 1)
        await expect(page.get_by_role("alert")).to_have_count(1, timeout=WAIT)
        await expect(page.locator(".run-error")).to_have_text("Error (rate_limited): The model is over capacity")
        await expect(page.locator("#notice")).to_have_text("")
        await expect(page.locator("#retry")).to_be_enabled()


async def test_pause_after_the_turn_holds_input_until_resume(open_site: SiteFactory) -> None:
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await page.get_by_role("button", name="Pause after turn").click()
        await expect(page.locator("#resume")).to_be_enabled(timeout=WAIT)
        await expect(page.locator("#pause-now")).to_be_disabled()
        await send(page, "count while paused")
        await expect(page.locator(".queue-item .queue-text")).to_have_value("count while paused", timeout=WAIT)
        await expect(page.locator(TOP_ASSISTANT)).to_have_count(0)
        await page.get_by_role("button", name="Resume").click()
        await turns_done(page, 1)
        await expect(page.locator(TOP_ASSISTANT)).to_contain_text("One, two, three.")
        await expect(page.locator("#resume")).to_be_disabled()


async def test_a_new_conversation_clears_the_page_and_the_session_goes_on(open_site: SiteFactory) -> None:
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, "count first")
        await turns_done(page, 1)
        sid = session_of(page)
        await page.get_by_role("button", name="New conversation").click()
        await expect(page.locator(TOP_USER)).to_have_count(0, timeout=WAIT)
        await expect(page.locator(TOP_ASSISTANT)).to_have_count(0)
        assert session_of(page) == sid
        await send(page, "check again")
        await turns_done(page, 1)
        await expect(page.locator(f"{TOP_USER} .part.text")).to_have_text("check again")
        await expect(page.locator(TOP_ASSISTANT)).to_contain_text("Yes, $5.")


async def test_steer_redirects_the_running_turn(open_site: SiteFactory) -> None:
    first, second = gate_name("sa"), gate_name("sb")
    async with open_site(shopper) as site:
        page = await site.page()
        await ready(page)
        await send(page, f"gate {first} {second}")
        await gate(first).reached(timeout=WAIT / 1000)
        await expect(page.locator("#steer")).to_be_disabled()  # nothing typed yet
        steer = f"gate {first} {second} (steered)"
        await page.get_by_label("Message", exact=True).fill(steer)
        await page.get_by_role("button", name="Steer").click()
        await expect(page.get_by_label("Message", exact=True)).to_have_value("")
        gate(first).open()
        gate(second).open()
        await expect(page.locator(f"{TOP_USER} .part.text")).to_have_text(
            [f"gate {first} {second}", steer], timeout=WAIT
        )
        await expect(page.locator("body[data-executing=false]")).to_have_count(1, timeout=WAIT)
        await expect(page.locator(TOP_ASSISTANT).last).to_contain_text("All done: four.")
        await expect(page.locator("#notice")).to_have_text("")
        session = site.runtime.session(session_of(page), agent=site.agent)
        assert len({m.id for m in (await session.messages()) if m.role == "user"}) == 2
        events = await site.runtime.store.read(session.id)
        finished = [e.payload["outcome"] for e in events if e.type == "ai.turn.finished"]
        assert finished == ["handed-off", "completed"]  # the turn handed off to its steering after its step
