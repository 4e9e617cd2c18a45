"""Which requests the server takes at all: those addressed to one of its own names (the Host
header) and, when a web page sends them, those from its own page (the Origin header).

Any site open in a browser on this machine can send requests to 127.0.0.1. DNS rebinding (the
site's name made to point at 127.0.0.1, so that its pages count as the same origin as this
server) sends the site's own name as Host: only this machine's names are taken. A page of another
origin, another site or another port of this machine, sends its origin as Origin: only the
server's own is taken. Gradio's CORS middleware does neither: it only decides which origins may
read answers (and takes every origin on localhost as the page's own), while the requests
themselves are served, and /v1 is outside it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import SplitResult, urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

ANY_HOST = "*"
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def beyond_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` can be reached from other machines."""
    return host != "localhost" and not (is_ip_address(host) and ipaddress.ip_address(host).is_loopback)


class AllowedHosts:
    """The names requests may address this server by: localhost, this machine's own names and
    ``names`` (--allowed-hosts; "*" for any). IP addresses are always taken: a browser sends one
    as Host only when its address bar names that address, which no other site can arrange.

    An Origin is taken when it is the server's own (the Host's name and port), or one of
    ``names``: behind a proxy that rewrites Host, the page's origin is the proxy's name."""

    def __init__(self, names: Iterable[str] = (), bound: str = "localhost") -> None:
        """``bound``: the address or name the server listens on, a name of this machine."""
        self.given = {name.lower().rstrip(".") for name in names}
        self.names = self.given | {"localhost", bound.lower(), socket.gethostname().lower(), socket.getfqdn().lower()}

    def describe(self) -> str:
        return ", ".join(sorted(name for name in self.names - {ANY_HOST} if not is_ip_address(name))) + " and this machine's IP addresses"

    def host_problem(self, host: str | None) -> str | None:
        """Why the Host header ``host`` is refused, or None."""
        address = _authority(host)
        if address is None:
            return f"This request names no valid host ({host!r} in its Host header)."
        name = address.hostname.rstrip(".")
        if self.takes(name) or is_ip_address(name):
            return None
        return (
            f"This server does not answer to the name {name!r}: it answers to {self.describe()}. "
            f"If {name!r} is a name of this machine (on your network, or a proxy's), start the server with "
            f"--allowed-hosts {name}."
        )

    def takes(self, name: str, names: set[str] | None = None) -> bool:
        """Whether ``name`` is one of ``names`` (default: all this server answers to), "*.example.com" taking its subdomains."""
        names = self.names if names is None else names
        return ANY_HOST in names or name in names or any(pattern.startswith("*.") and name.endswith(pattern[1:]) for pattern in names)

    def origin_problem(self, origin: str, host: str, scheme: str) -> str | None:
        """Why a request with Origin ``origin``, sent to Host ``host`` over ``scheme``, is refused, or None."""
        page, own = _origin(origin), _authority(host)
        if page is not None and own is not None and (_same_authority(page, own) or self.takes(page.hostname.rstrip("."), self.given - {ANY_HOST})):
            return None
        return (
            f"This server takes requests only from its own page, and this one comes from a page of {origin}. "
            f"Open the page itself at {scheme}://{host}/. (Behind a proxy that changes the Host header, start the "
            "server with --allowed-hosts and the proxy's name.)"
        )


def _authority(host: str | None) -> SplitResult | None:
    if not host:
        return None
    return _parsed(f"//{host}")


def _origin(origin: str) -> SplitResult | None:
    parsed = _parsed(origin)
    return parsed if parsed is not None and parsed.scheme in DEFAULT_PORTS else None


def _parsed(url: str) -> SplitResult | None:
    parsed = urlsplit(url)
    try:
        parsed.port  # noqa: B018  (raises on a port that is no number)
    except ValueError:
        return None
    return parsed if parsed.hostname and not parsed.path and not parsed.username else None


def _same_authority(origin: SplitResult, host: SplitResult) -> bool:
    """Whether the page of ``origin`` is the server addressed by the Host ``host``: the same name
    and port, a Host without one counting as the default port of the page's scheme (behind a
    TLS proxy, the page is https while this server is reached over http)."""
    return origin.hostname == host.hostname and (origin.port or DEFAULT_PORTS[origin.scheme]) == (host.port or DEFAULT_PORTS[origin.scheme])


# A refusal's answer for a request's path: its status, message and code (named as OpenAI's API names them).
Refusal = Callable[[str, int, str, str], Response]


def plain_refusal(path: str, status: int, message: str, code: str) -> Response:
    """The message as it is: a browser shows it so."""
    return PlainTextResponse(message, status_code=status)


class HostAndOriginCheck:
    """ASGI middleware refusing requests whose Host is not one of ``allowed`` (400) and those a
    page of another origin sends (403), before anything else reads them, answered by ``refuse``
    (the API answers in its own error shape under its own paths). Under ``read_by_any_page``
    (path prefixes), reading (GET, HEAD) is any page's: files that hold nothing of anyone's, which
    the page's sandboxed frames (an opaque origin, sent as Origin: null) fetch."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts, refuse: Refusal = plain_refusal, read_by_any_page: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allowed = allowed
        self.refuse = refuse
        self.read_by_any_page = read_by_any_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host, origin = headers.get("host"), headers.get("origin")
        status, problem = 400, self.allowed.host_problem(host)
        read_by_any_page = scope.get("method") in ("GET", "HEAD") and scope["path"].startswith(self.read_by_any_page)
        if problem is None and origin is not None and not read_by_any_page:
            status, problem = 403, self.allowed.origin_problem(origin, host, scope["scheme"])
        if problem is None:
            await self.app(scope, receive, send)
            return
        code = "host_not_allowed" if status == 400 else "origin_not_allowed"
        await self.refuse(scope["path"], status, problem, code)(scope, receive, send)
