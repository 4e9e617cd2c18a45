"""The server's limits: their defaults, and sizes as the flags write them ("100mb") and messages say them."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

# Powers of 1024, as Gradio counts its upload limit, so the page's own message and ours agree.
UNITS = {"b": 1, "kb": 2**10, "mb": 2**20, "gb": 2**30}


def byte_size(default: int, description: str) -> int:
    """A limit in bytes: its flag takes sizes like 100mb, and messages say them so."""
    return Field(default, gt=0, description=description, json_schema_extra={"unit": "bytes"})


def in_bytes(field: FieldInfo) -> bool:
    """Whether a setting is a size in bytes (declared with ``byte_size``, written like 100mb) rather than a count."""
    return (field.json_schema_extra or {}).get("unit") == "bytes"


class Limits(BaseModel):
    """What one request or upload may take, so that nobody can fill the server's memory, disk or queue."""

    max_upload_size: int = byte_size(100 * 2**20, "each file put on the page: attachments and conversation files")
    max_import_media_size: int = byte_size(100 * 2**20, "each image, video or audio embedded in an imported conversation")
    max_request_size: int = byte_size(50 * 2**20, "the body of one API request, as in OpenAI's API")
    # The largest the page sends is the saved chats it restores: localStorage holds about 5 million
    # characters, under 4 MB of chats once decrypted; a 60,000-character paste is a few hundred KB.
    max_page_request_size: int = byte_size(8 * 2**20, "the body of one request from the page (a message with its settings, "
                                                      "the saved chats it restores); files go by --max-upload-size")
    max_document_pages: int = Field(1000, gt=0, description="pages read from one PDF attached to a message; more is refused before any is read")
    max_document_characters: int = Field(2_000_000, gt=0, description="characters of text taken from one attached document "
                                                                      "(PDF, Word or text file); more is refused")
    max_document_page_images: int = Field(16, gt=0, description="pages of one PDF sent as page images to a model that reads images; "
                                                                 "a longer one is refused before any page is rendered")
    max_document_unpacked_size: int = byte_size(100 * 2**20, "what one attached Word file (.docx, a zip) may unpack to; "
                                                             "more is refused before it is unpacked (zip bombs)")
    max_document_seconds: int = Field(30, gt=0, description="CPU seconds reading one attached document may take (a small PDF "
                                                            "can be built to cost hours); beyond them it is refused")
    max_document_memory: int = byte_size(2**30, "memory reading one attached document may take (a small Word file can be built "
                                                "to take gigabytes); beyond it the document is refused")
    max_cache_size: int = byte_size(5 * 2**30, "all files the page keeps together (uploads, imported media, exports); "
                                               "beyond it the oldest are deleted")
    max_file_age: int = Field(24 * 3600, gt=0, description="seconds a file put on the page or exported from it is kept "
                                                           "(saved chats keep their own copies)")
    max_user_media_size: int = byte_size(2 * 2**30, "the images, video and audio kept with one user's saved chats "
                                                    "(each file once however many chats use it), and the conversation "
                                                    "files of one Export all together")
    max_user_text_size: int = byte_size(100 * 2**20, "the text kept with one user's saved chats (every version of every "
                                                     "message, system prompts, tools, settings) and presets together, a character "
                                                     "counted as a byte; a save beyond it is refused and says so")
    max_user_chats: int = Field(5000, gt=0, description="saved chats one user may keep; a new chat beyond them is not saved, and says so")
    max_user_presets: int = Field(100, gt=0, description="presets one user may keep")
    max_import_chats: int = Field(1000, gt=0, description="conversation files in one archive of chats imported at once (more is "
                                                          "refused before any is read), and chats an older version kept in the "
                                                          "browser moved in as the page opens (the newest of them)")
    max_queue_size: int = Field(64, gt=0, description="page requests waiting for their turn; more are told the server is busy")
    max_model_loads_per_user: int = Field(4, gt=0, description="models one user (the login, else the client's address) may have "
                                                                "loaded by API requests in a minute (--load-on-demand): each load "
                                                                "takes the server's cores and memory; more are refused with 429 "
                                                                "and when to try again")
    max_login_wait: int = Field(30, gt=0, description="longest wait in seconds before the next try after repeated failed logins "
                                                      "(page and API) from one address or for one user name")

def parse_size(text: str) -> int:
    """Bytes from "100mb", "512kb", "2gb" or a plain number of bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?b)?\s*", text.lower())
    if not match or int(match[1]) == 0:
        raise ValueError(f"{text!r} is not a size: write a positive number of bytes or one with a unit, like 100mb, 512kb or 2gb")
    return int(match[1]) * UNITS[match[2] or "b"]


def size_text(size: int) -> str:
    """A size as people read it: "100 MB", "1.5 GB", "900 bytes"."""
    for unit in ("gb", "mb", "kb"):
        if size >= UNITS[unit]:
            return f"{size / UNITS[unit]:.1f}".removesuffix(".0") + f" {unit.upper()}"
    return f"{size} bytes"
