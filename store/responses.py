"""Replies of the Responses API, kept in the chat store under their owner (the request's login,
else its client's address) so that a later request goes on from one (``previous_response_id``),
also after a restart, and a client reads one back or deletes it. Each keeps only what it added to
the conversation (its input and its reply, as chat messages) and the one it went on from: the
conversation up to a reply is its chain's, read back from the first. Where the operator wants it,
each is shown in its owner's page as a chat too (store/responses_in_page.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from .errors import StoreError
from .quota import Quota
from .responses_in_page import ResponsesInPage
from .tables import ApiResponse

# How far back a chain is read: past it a conversation is surely past any model's context.
LONGEST_CHAIN = 10_000


class ResponseStore:
    def __init__(self, engine: Engine, quota: Quota, text_used: Callable[[Session, str], int], page: ResponsesInPage,
                 shown_in_page: bool = False) -> None:
        """``page``: where replies show in their owner's page, each kept from now on where ``shown_in_page``."""
        self.engine = engine
        self.quota = quota
        self.text_used = text_used
        self.page = page
        self.shown_in_page = shown_in_page

    def keep(self, owner: str, response_id: str, previous: str | None, messages: list[dict[str, Any]], response: dict[str, Any]) -> None:
        """Keep a reply (and show it in the page); an OverQuota (nothing kept) where its text would take the owner past their quota."""
        characters = len(json.dumps(messages, ensure_ascii=False))
        with Session(self.engine) as session, session.begin():
            row = ApiResponse(id=response_id, owner=owner, previous=previous, messages=messages, response=response,
                              characters=characters, created=time.time())
            if self.shown_in_page:
                # Before the row is added: the chat's text is checked against the quota as it is
                # written, and the row would count there too until it shows.
                self.page.show(session, row)
            session.add(row)
            session.flush()
            self.quota.check_text(self.text_used(session, owner), characters)

    def get(self, owner: str, response_id: str) -> dict[str, Any] | None:
        """The response object as returned; None where the owner has none of that id."""
        with Session(self.engine) as session:
            row = session.get(ApiResponse, response_id)
            return row.response if row is not None and row.owner == owner else None

    def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]]:
        """The chat messages of the conversation up to and with this reply; a StoreError where
        the owner has no reply of that id, or one of its chain was deleted."""
        chain: list[list[dict[str, Any]]] = []
        with Session(self.engine) as session:
            following: str | None = response_id
            while following is not None and len(chain) < LONGEST_CHAIN:
                row = session.get(ApiResponse, following)
                if row is None or row.owner != owner:
                    said = "is not" if following == response_id else f"goes on from {following}, which is not"
                    raise StoreError(f"The response {response_id} {said} kept here (never stored, stored with store: false, "
                                     "deleted, or another user's).")
                chain.append(row.messages)
                following = row.previous
        return [message for messages in reversed(chain) for message in messages]

    def delete(self, owner: str, response_id: str) -> bool:
        """Delete a reply, and take it out of the page where it shows there (whatever the setting is now)."""
        with Session(self.engine) as session, session.begin():
            row = session.get(ApiResponse, response_id)
            if row is None or row.owner != owner:
                return False
            self.page.hide(session, row)
            session.delete(row)
            return True

    def ids(self, owner: str) -> list[str]:
        with Session(self.engine) as session:
            return list(session.scalars(select(ApiResponse.id).where(ApiResponse.owner == owner).order_by(ApiResponse.created)))
