"""All of one user's saved chats in one file: a ZIP of conversation files (chat/conversation_file.py),
one a chat with every version of its messages, each of which Import opens as it opens any conversation file."""

from __future__ import annotations

import os
import re
import tempfile
import zipfile

from engines import ChatError
from limits import size_text

from .conversation_file import write_conversation
from .saved_chats import SavedChats


def export_chats(chats: SavedChats, upload_folder: str, limit: int, total_limit: int) -> tuple[str, list[str]]:
    """The ZIP's path (written among the page's files, which are deleted after a while), and
    what was left out of it, each with the reason: a chat over ``limit`` (the largest conversation
    file an import takes), and the chats that would take the conversation files together over
    ``total_limit`` (what one user's saved media may take: each chat carries its own copy of every
    file it names, so a few files named in many messages would otherwise make an export of gigabytes)."""
    os.makedirs(upload_folder, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="anychat-export-", dir=upload_folder)
    path = os.path.join(folder, "chats.zip")
    left_out, total = [], 0
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for number, (title, chat_id) in enumerate(chats.choices(), 1):
            info = chats.find(chat_id)
            member = os.path.join(folder, "chat.json")
            try:
                write_conversation(member, chats.open(chat_id, upload_folder).tree, info.system if info else "", limit)
            except ChatError as error:
                left_out.append(f"{title}: {error}")
                continue
            size = os.path.getsize(member)
            if total + size > total_limit:
                left_out.append(f"{title}: with it the export would be over {size_text(total_limit)}, what one user's saved chats may keep "
                                "(--max-user-media-size). Export it from the chat itself (Conversation file).")
            else:
                archive.write(member, f"{number:03d} {file_name(title)}.json")
                total += size
            os.unlink(member)
    return path, left_out


def file_name(title: str) -> str:
    return re.sub(r"[^\w\- ]+", "_", title).strip()[:60] or "chat"
