"""The built-in demo tools: a shopping cart, a price lookup and a checkout that asks first.

They back the shipped configs (``configs/shop.yaml``, ``configs/openai.yaml``) and the benchmark,
so they are cheap and deterministic: each sleeps a millisecond or two, as a fast service would,
and returns a fixed answer. Configs name them by their registered names (``add_to_cart``,
``lookup_price``, ``checkout``); ``BUILTIN_TOOLS`` is what ``orchestrator.surfaces.config`` registers.

The cart lives in this process, one per session. ``add_to_cart`` is ``recovery="report"``: a
crash mid-call is reported to the model rather than rerun, because adding twice must not happen
silently. A call that does run again in this process (the same ``ToolContext.call_id``) is
recognised and adds nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from typing import Final

from tools.context import ToolContext
from tools.tool import Tool, tool

__all__ = ["BUILTIN_TOOLS", "add_to_cart", "cart", "checkout", "clear_carts", "lookup_price"]

_RECENT_CALLS: Final = 1024
"""Call ids remembered per session for idempotency: a rerun concerns a recent call, and a
long benchmark must not grow without bound."""
_RECENT_CARTS: Final = 10_000
"""Carts kept in a process (the least recently used goes first): a demo host serving session
after session must not grow without bound either."""


class _Cart:
    """One session's cart and the calls already applied to it."""

    __slots__ = ("applied", "items")

    def __init__(self) -> None:
        self.items: dict[str, int] = {}
        self.applied: OrderedDict[str, None] = OrderedDict()


_carts: OrderedDict[str, _Cart] = OrderedDict()
# Sync code never touches the carts, but Ray hosts may run event loops on several threads.
_lock = threading.Lock()


@tool(recovery="report")
async def add_to_cart(slug: str, qty: int = 1, *, ctx: ToolContext) -> str:
    """Add a product to the user's shopping cart; call it once per product (adding twice adds twice).

    Args:
        slug: The product's identifier, e.g. "mug".
        qty: How many to add (at least 1).
        ctx: The call's context (not shown to the model): the session's cart and the call's id.
    """
    if not slug.strip():
        raise ValueError("slug must name a product, e.g. 'mug'")
    if qty < 1:
        raise ValueError(f"qty must be at least 1, not {qty}")
    await asyncio.sleep(0.002)
    with _lock:
        session = _carts.get(ctx.session_id)
        if session is None:
            session = _carts[ctx.session_id] = _Cart()
            if len(_carts) > _RECENT_CARTS:
                _carts.popitem(last=False)
        else:
            _carts.move_to_end(ctx.session_id)
        if ctx.call_id not in session.applied:
            session.items[slug] = session.items.get(slug, 0) + qty
            session.applied[ctx.call_id] = None
            if len(session.applied) > _RECENT_CALLS:
                session.applied.popitem(last=False)
    return "Added."


@tool
async def lookup_price(slug: str) -> str:
    """Look up a product's current price, in US dollars.

    Args:
        slug: The product's identifier, e.g. "mug".
    """
    await asyncio.sleep(0.001)
    return PRICE


PRICE: Final = "4.99"
"""What ``lookup_price`` answers for every product (the demo's one price, in US dollars)."""


@tool(recovery="report", needs_approval=True)
async def checkout(payment: str = "card", *, ctx: ToolContext) -> str:
    """Place the order for everything in the user's cart; the user approves it first.

    Args:
        payment: How the user pays: "card" or "invoice".
        ctx: The call's context (not shown to the model): the session's cart.
    """
    if payment not in ("card", "invoice"):
        raise ValueError(f"payment must be 'card' or 'invoice', not {payment!r}")
    await asyncio.sleep(0.002)
    items = cart(ctx.session_id)
    if not items:
        return "The cart is empty: nothing was ordered."
    lines = ", ".join(f"{qty} x {slug}" for slug, qty in sorted(items.items()))
    total = sum(items.values()) * float(PRICE)
    return f"Order placed: {lines}, ${total:.2f}, paid by {payment}."


def cart(session_id: str) -> dict[str, int]:
    """A copy of a session's cart in this process: product slug -> quantity."""
    with _lock:
        session = _carts.get(session_id)
        return dict(session.items) if session is not None else {}


def clear_carts() -> None:
    """Forget every cart in this process (tests; a long-running demo host)."""
    with _lock:
        _carts.clear()


BUILTIN_TOOLS: Final[dict[str, Tool]] = {t.name: t for t in (add_to_cart, lookup_price, checkout)}
"""The built-in tools by registered name."""
