"""The web chat (``/``) and the session inspector (``/inspect/{session}``): static files in the package.

The pages are plain JavaScript modules written for this project (``web/*.js``), served as they
are: no build step at install, no CDN, nothing fetched from outside at run time (these machines,
and many users', have no internet), and nothing to keep in sync with a bundle. They talk to the
session API like any client, with the caller's bearer token.

Every page and file goes out with a strict Content-Security-Policy: scripts, styles and
connections from this origin only, no inline script, no plugins, no framing. The pages render
model and tool text with ``textContent``, never as HTML, so the policy is the second wall, not the
first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter
from starlette.responses import FileResponse, Response

from orchestrator.surfaces.http.deps import check_session_id
from orchestrator.surfaces.http.errors import ApiError

__all__ = ["CSP", "WEB_DIR", "web_router"]

WEB_DIR: Final = Path(__file__).resolve().parent / "web"
"""The static files (package data: ``[tool.setuptools.package-data]`` in pyproject.toml)."""

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The pages' Content-Security-Policy: nothing inline, nothing from another origin."""

_TYPES: Final = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css"}
_HEADERS: Final = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _file(name: str) -> Response:
    path = WEB_DIR / name
    suffix = path.suffix
    # Only the files shipped in web/ itself: no sub-folders, no dot files, no other types.
    if "/" in name or name.startswith(".") or suffix not in _TYPES or not path.is_file():
        raise ApiError(404, f"there is no web file {name!r}")
    return FileResponse(path, media_type=_TYPES[suffix], headers=_HEADERS)


def web_router() -> APIRouter:
    """``/`` (the chat), ``/inspect/{session}`` (the inspector) and ``/web/{file}`` (their modules)."""
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def chat_page() -> Response:
        return _file("index.html")

    @router.get("/inspect/{session_id}")
    async def inspector_page(session_id: str) -> Response:
        check_session_id(session_id)
        return _file("inspect.html")

    @router.get("/web/{name}")
    async def web_file(name: str) -> Response:
        return _file(name)

    return router
