"""Who may connect to the server, and what its page may fetch: logins (page and API alike, with
failures slowed down), the Host and Origin of each request, the page's Content-Security-Policy,
and what the server says at startup about who can reach it."""

from __future__ import annotations

from fastapi import FastAPI

from .content_policy import ContentSecurityPolicy
from .exposure import exposure_warnings
from .hosts import AllowedHosts, HostAndOriginCheck, Refusal, beyond_loopback, plain_refusal
from .login_throttle import LoginThrottle, TooManyFailedLogins
from .logins import ClientAddress, Logins


def guard(app: FastAPI, allowed_hosts: AllowedHosts, refuse: Refusal = plain_refusal, read_by_any_page: tuple[str, ...] = ()) -> None:
    """Check every request to ``app``, the page mounted on it included, before anything reads it;
    ``refuse`` answers those refused; under ``read_by_any_page``, reading is any page's."""
    app.add_middleware(ClientAddress)
    app.add_middleware(ContentSecurityPolicy)
    # Added last: the outermost.
    app.add_middleware(HostAndOriginCheck, allowed=allowed_hosts, refuse=refuse, read_by_any_page=read_by_any_page)


__all__ = [
    "AllowedHosts", "ContentSecurityPolicy", "LoginThrottle", "Logins", "TooManyFailedLogins",
    "beyond_loopback", "exposure_warnings", "guard",
]
