"""What goes wrong in the store, each said so that the page can tell its user what to do."""

from __future__ import annotations


class StoreError(Exception):
    """The store cannot be opened or written; the message says why and what to do."""


def store_problem(error: Exception) -> str:
    """What went wrong in a store call, in a line: the database driver's own message where
    SQLAlchemy wraps one ("database or disk is full"), not SQLAlchemy's statement and link."""
    return str(getattr(error, "orig", None) or error).splitlines()[0]


class NotYours(StoreError):
    """A chat id that belongs to another owner."""


class OverQuota(StoreError):
    """A write that would take an owner past their quota (store/quota.py); nothing of it is written."""
