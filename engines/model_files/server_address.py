"""The address of a server that runs a model (the remote backend): checked, and as it is shown."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError

SCHEMES = ("http://", "https://")


def is_server_address(name: str | None) -> bool:
    return name is not None and name.strip().lower().startswith(SCHEMES)


def server_address(url: str) -> str:
    """``url`` as a remote server's base address (its API's, usually ending in /v1), or a
    ConfigError saying what is wrong with it: http or https only, with a host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"A remote server is an http:// or https:// address, like http://host:8000/v1; got {shown_address(url)!r}")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def shown_address(url: str) -> str:
    """``url`` as pages and logs show it: without a user name, password or query (which may hold keys)."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
