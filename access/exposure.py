"""What the server says at startup about who can reach it and where its secrets show."""

from __future__ import annotations

from .hosts import beyond_loopback

# Where each secret can come from instead of the command line, which every user of this machine
# can read (ps, /proc/PID/cmdline) for as long as the server runs.
SAFER_SOURCE = {
    "--auth": "passwords: put the users in a file, one USER:PASS a line, and start with --auth-file FILE",
    "--api-key": "API key: set it in the environment as ANYCHAT_API_KEY",
    "--remote-api-key": "remote server's API key: set it in the environment as ANYCHAT_REMOTE_API_KEY",
}


def exposure_warnings(host: str, port: int, logins: bool, api_key: bool, secret_flags: list[str]) -> list[str]:
    """``secret_flags``: the flags among SAFER_SOURCE's that were given on the command line."""
    warnings = [
        f"Warning: {flag} on the command line shows every user of this machine its {SAFER_SOURCE[flag]} instead."
        for flag in secret_flags
    ]
    if beyond_loopback(host) and not logins:
        api = "" if api_key else " and its API (no --api-key)"
        warnings.append(
            f"WARNING: --host {host} lets other machines reach this server, and it has no logins: anyone who can reach "
            f"port {port} may use its chat{api}. Nobody may load or unload models from the page: that takes logins "
            "(--auth-file FILE) and an admin among them (--admin NAME)."
        )
    return warnings
