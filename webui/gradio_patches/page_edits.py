"""What the page's server changes in the files Gradio serves, applied in one place.

Gradio 6.31 gives no way to put a script ahead of its own (``head=`` is added after its scripts
have read what the page's need to change first), to link a manifest of the app's own, or to fix
what its minified scripts waste; so the answers themselves are edited on their way out
(edited_responses.py). Each edit's content lives with the feature it serves."""

from __future__ import annotations

from typing import Any

from ..colour_scheme import with_colour_scheme
from ..installable_app import with_app_links
from ..languages.chosen_language import with_language_script
from ..window_sizes import with_keyboard_resizing
from .edited_responses import EditedResponses, chained
from .idle_frames import with_status_timer_script
from .status_pushes import changed_statuses_pushed, is_blocks_script

# Each script goes ahead of Gradio's own: the language's before Gradio picks its locale, the
# colour scheme's before the page is drawn.
PAGE_HTML_EDIT = chained(with_status_timer_script, with_language_script, with_colour_scheme, with_app_links, with_keyboard_resizing)


def add_page_edits(page: Any) -> None:
    """``page``: the app Gradio's page is mounted at the root of."""
    page.add_middleware(EditedResponses, covers=lambda path: path == "/", edit=PAGE_HTML_EDIT)
    page.add_middleware(EditedResponses, covers=is_blocks_script, edit=changed_statuses_pushed)
