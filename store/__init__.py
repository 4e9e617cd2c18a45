"""The chat store on the server: every user's chats and their messages, one row per message, and their presets, in
an SQLite file in the app's data folder by default or in PostgreSQL (``--database-url``).

``tables.py`` holds the schema, ``message_tree.py`` the shape of a chat's messages, ``quota.py`` what one user may keep, ``database.py`` where the database is and how it is opened (its
migrations, in ``migrations/``, run at every start), ``chats.py`` what the page asks of it, ``library.py`` each user's
library of long documents (passages, full-text index, vectors), ``responses.py`` the replies of the
Responses API kept for later requests to go on from, ``responses_in_page.py`` those replies shown
in their login's page as chats where the operator wants it (``message_changes.py``: what one save
writes into a chat).
"""

from .chats import ChatInfo, ChatStore, ListedChat, PresetInfo, StoredMessage
from .database import StoreSettings, data_dir, database_url, open_store, shown_url
from .library import DocumentLibrary, FoundPassage, LibraryEntry
from .responses import ResponseStore
from .errors import NotYours, OverQuota, StoreError, store_problem
from .message_changes import Added, MessageChanges, MessageRef
from .message_tree import MessageTree
from .quota import Quota

__all__ = ["Added", "ChatInfo", "ChatStore", "DocumentLibrary", "FoundPassage", "LibraryEntry", "ListedChat", "MessageChanges", "MessageRef", "MessageTree", "NotYours", "OverQuota", "PresetInfo", "Quota", "ResponseStore", "StoreError",
           "StoreSettings", "StoredMessage", "data_dir", "database_url", "open_store", "shown_url", "store_problem"]
