"""Who may change the shared model from the page, and what a load from the page may ask for.

Every load and unload from the page, through its buttons or its gradio_client endpoints, passes
here: the buttons being locked for others is only a courtesy, not the check.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
from pydantic import BaseModel, ConfigDict

from engines import ConfigError

from .languages import said

REMOTE_CODE_REFUSED = (
    "trust_remote_code cannot be asked for from the page: running code shipped with a model is the server's choice, "
    "made on its command line (start app.py with --trust-remote-code)."
)


class ModelRights(BaseModel):
    """``admins``: the users who may load and unload models, or None for a page without login
    that only this machine reaches (the one person at it is the admin). ``without_logins``: the
    page has no login and other machines reach it, so nobody is an admin. ``trust_remote_code``: the server's command-line
    choice, which every load from the page gets and none can change. ``server_settings``: the
    command line's other server-wide settings (how many requests run and wait at once), which a
    load from the page keeps unless it sets them itself."""

    model_config = ConfigDict(frozen=True)

    admins: frozenset[str] | None = None
    without_logins: bool = False
    trust_remote_code: bool = False
    server_settings: dict[str, Any] = {}

    def is_admin(self, page_request: gr.Request | None) -> bool:
        return self.admins is None or (page_request is not None and page_request.username in self.admins)

    def check_admin(self, page_request: gr.Request | None) -> None:
        if not self.is_admin(page_request):
            if self.without_logins:
                raise gr.Error(said("settings.needs_logins"), title=said("settings.not_admin"), print_exception=False)
            who = page_request.username if page_request is not None and page_request.username else said("settings.this_user")
            raise gr.Error(said("settings.user_not_admin", user=who, needs_admin=said("settings.needs_admin")), title=said("settings.not_admin"),
                           print_exception=False)

    def page_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings of a load from the page, with the server's own. (engine_args holding
        trust_remote_code are refused by ModelArgs itself, for every way a model is loaded.)"""
        if "trust_remote_code" in settings:
            raise ConfigError(REMOTE_CODE_REFUSED)
        return self.server_settings | settings | {"trust_remote_code": self.trust_remote_code}

    def note(self, page_request: gr.Request | None) -> str:
        """What the Settings tab tells a user who may not manage models (empty for an admin)."""
        if self.is_admin(page_request):
            return ""
        if self.without_logins:
            return said("settings.read_only", needs_logins=said("settings.needs_logins"))
        return said("settings.read_only_user", user=page_request.username if page_request is not None else said("settings.a_guest"),
                    needs_admin=said("settings.needs_admin"))
