"""What one owner may keep in the store, so that one user cannot fill the disk the store lives
on (a 100 KB archive of chats can unpack to a hundred megabytes of text): the media of their
chats, the text of their chats and presets, how many chats and how many presets.

Text is counted in characters, as the database's own ``length`` counts them: a message's text and
the rest of it as stored (files, reasoning, stats: its JSON), every version of it, and each chat's
title, system prompt, tools and settings. Each chat and preset keeps its own count
(``text_size``), changed with every write, so a check reads one number per chat, not the text.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Text, cast, func

from limits import Limits, size_text

from .errors import OverQuota
from .tables import Chat, Message, Preset


@dataclass(frozen=True)
class Quota:
    """Per owner, each None for no limit: ``media`` bytes of media files, ``text`` characters of
    chats' and presets' text, ``chats`` chats, ``presets`` presets."""

    media: int | None = None
    text: int | None = None
    chats: int | None = None
    presets: int | None = None

    @classmethod
    def of(cls, limits: Limits) -> Quota:
        return cls(limits.max_user_media_size, limits.max_user_text_size, limits.max_user_chats, limits.max_user_presets)

    def check_text(self, used: int, grown: int) -> None:
        """``used``: the owner's characters of text with a write that added ``grown`` of them."""
        if self.text is not None and used > self.text:
            raise OverQuota(f"adding {size_text(grown)} of text to the {size_text(used - grown)} your saved chats and presets hold "
                            f"would pass this server's limit of {size_text(self.text)} per user (--max-user-text-size): delete chats "
                            "or presets you no longer need (export them first to keep a copy) to make room")

    def check_media(self, used: int) -> None:
        """``used``: the bytes of media the owner's chats would keep with a new file."""
        if self.media is not None and used > self.media:
            raise OverQuota(f"your saved chats' media would take {size_text(used)}, over this server's limit of {size_text(self.media)} "
                            "per user (--max-user-media-size): delete chats whose media you no longer need to make room")

    def check_chats(self, count: int) -> None:
        if self.chats is not None and count > self.chats:
            raise OverQuota(f"you would have {count} saved chats, over this server's limit of {self.chats} per user "
                            "(--max-user-chats): delete chats you no longer need (export them first to keep a copy) to make room")

    def check_presets(self, count: int) -> None:
        if self.presets is not None and count > self.presets:
            raise OverQuota(f"you would have {count} presets, over this server's limit of {self.presets} per user "
                            "(--max-user-presets): delete one, or save under an existing name")


# The text of a message, of a chat's own fields and of a preset, as counted: in SQL, so that a
# count reads sizes where the rows are and never brings their text to Python.
def _length(column) -> ColumnElement[int]:
    return func.coalesce(func.length(cast(column, Text)), 0)


MESSAGE_SIZE = _length(Message.content) + _length(Message.data)
CHAT_FIELDS_SIZE = _length(Chat.title) + _length(Chat.system) + _length(Chat.tools) + _length(Chat.generation)
PRESET_SIZE = _length(Preset.system) + _length(Preset.generation)
