"""All of one user's chats back from the ZIP that Export all chats writes (chat/chats_export.py):
each conversation file in it becomes a new chat of the user importing it.

The archive comes from the page, so from anyone: it is checked from its directory before a byte
is unpacked (a ZIP, its number of files, each a plain .json name, no folders or paths, none
encrypted, each and all of them together within the limits), then unpacked one file at a time
and never by the names it gives, each read no further than its limit whatever its directory
claims (zip bombs), and each read as Import reads one conversation file.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator

from engines import ChatError
from limits import Limits, size_text

from .conversation_file import Conversation, read_conversation

PLAIN_NAME = re.compile(r"[^/\\:\0]+\.json", re.IGNORECASE)
PIECE = 2**20


def chats_in_archive(path: str, limits: Limits, media_root: str) -> tuple[int, Iterator[tuple[str, Conversation | None, str]]]:
    """How many conversation files the archive holds, and (member name, conversation, problem)
    for each, read as it is asked for, the last first (Export lists the newest chat first: added
    last, it is the newest again); ``problem`` says why a file was not read (then there is no
    conversation). An archive that is not one Export writes, or over a limit, is a
    ChatError before any is read."""
    members = _checked_members(path, limits)
    return len(members), _read(path, members, limits, media_root)


def _read(path: str, members: list[zipfile.ZipInfo], limits: Limits, media_root: str) -> Iterator[tuple[str, Conversation | None, str]]:
    folder = tempfile.mkdtemp(prefix="anychat-import-chats-")
    try:
        with zipfile.ZipFile(path) as archive:
            for member in reversed(members):
                unpacked = os.path.join(folder, "chat.json")
                try:
                    _unpack(archive, member, unpacked, limits.max_upload_size)
                    conversation = read_conversation(unpacked, limits, media_root)
                except ChatError as error:
                    yield member.filename, None, str(error)
                    continue
                except (zipfile.BadZipFile, zlib.error, EOFError) as error:
                    yield member.filename, None, f"it is damaged in the archive ({error})"
                    continue
                finally:
                    if os.path.exists(unpacked):
                        os.unlink(unpacked)
                yield member.filename, conversation, ""
    except (zipfile.BadZipFile, OSError) as error:
        raise ChatError(f"The archive could not be read to its end ({error}).") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _checked_members(path: str, limits: Limits) -> list[zipfile.ZipInfo]:
    size = os.path.getsize(path)
    if size > limits.max_upload_size:
        raise ChatError(f"The archive is {size_text(size)}, over this server's limit of {size_text(limits.max_upload_size)} "
                        "for files put on the page (--max-upload-size).")
    not_an_archive = ChatError("This is not an archive of chats: Import chats takes the ZIP that Export all chats writes. "
                               "To import one conversation file (.json), use Import JSON under Conversation file.")
    # The count its end record declares, before the directory is read: a 100 MB directory of two
    # million entries would take a gigabyte to read. (zipfile's own reader of that record.)
    with open(path, "rb") as file:
        end = zipfile._EndRecData(file)
    if end is None:
        raise not_an_archive
    count = end[zipfile._ECD_ENTRIES_TOTAL]
    if count > limits.max_import_chats:
        raise ChatError(f"The archive holds {count} files, over this server's limit of {limits.max_import_chats} chats "
                        "imported at once (--max-import-chats). Import it in parts.")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError):
        raise not_an_archive from None
    if len(members) > limits.max_import_chats:  # a directory holding more entries than its end record says
        raise ChatError(f"The archive holds {len(members)} files, over this server's limit of {limits.max_import_chats} chats "
                        "imported at once (--max-import-chats). Import it in parts.")
    for member in members:
        if not PLAIN_NAME.fullmatch(member.filename) or member.filename.startswith(".") or ".." in member.filename:
            raise ChatError(f"The archive holds {member.filename[:80]!r}, which is not a conversation file of its own: an archive "
                            "of chats holds only .json files, with no folders or paths. Nothing was imported.")
        if member.flag_bits & 0x1:
            raise ChatError(f"{member.filename[:80]!r} is encrypted in the archive; nothing was imported.")
        if member.file_size > limits.max_upload_size:
            raise ChatError(f"{member.filename[:80]!r} unpacks to {size_text(member.file_size)}, over this server's limit of "
                            f"{size_text(limits.max_upload_size)} for a conversation file (--max-upload-size). Nothing was imported.")
    total = sum(member.file_size for member in members)
    if total > limits.max_user_media_size:
        raise ChatError(f"The archive unpacks to {size_text(total)}, more than the {size_text(limits.max_user_media_size)} "
                        "one user's saved chats may keep (--max-user-media-size). Nothing was imported.")
    return members


def _unpack(archive: zipfile.ZipFile, member: zipfile.ZipInfo, to: str, limit: int) -> None:
    """The member's bytes at ``to``, read no further than ``limit`` whatever its directory claims."""
    written = 0
    with archive.open(member) as source, open(to, "wb") as target:
        while piece := source.read(PIECE):
            written += len(piece)
            if written > limit:
                raise ChatError(f"unpacks to more than {size_text(limit)}, the largest conversation file this server imports "
                                "(--max-upload-size)")
            target.write(piece)
