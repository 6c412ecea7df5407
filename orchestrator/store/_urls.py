"""Store URLs as messages show them: never with a password.

Kept apart from the PostgreSQL backend so that showing a URL needs no psycopg (the CLI shows
the URLs it was given, and psycopg is an optional extra).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["describe_url"]


def describe_url(url: str) -> str:
    """The URL to show in messages: without its password (in the authority or the query)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}@{host}"
    if "password" not in parts.query:
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
