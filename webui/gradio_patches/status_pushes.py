"""A status pushed to a component only when it changed.

Gradio 6.31's page keeps the loading status of every component that any event has had as an
input or output (about 60 of this page's 131), and on every message of every event (each update
of a streamed reply, each tick of the chat list's refresh timer, each start and end) it pushes
all of them again, changed or not: per component a search of the page's tree, a deep copy of the
component's props (for the Chatbot, every message) and the status redrawn. In Chromium beside
the model, a reply of 256 tokens took the browser 2.4 s of CPU in an empty chat, 0.9 s of it in
these pushes. The page is served with its pushes limited to the statuses that changed since the
component last got one; each component still gets every change, as before.
"""

from __future__ import annotations

import re

# Gradio 6.31's minified Blocks script: ``update_loading_stati_state`` maps every entry of the
# status store to a push. Where a later Gradio writes it otherwise nothing matches and the script
# is served as it is; tests/test_browser.py, which counts a reply's pushes, then says so.
EVERY_STATUS_PUSHED = re.compile(rb"async update_loading_stati_state\(\)\{await Promise\.all\(Object\.entries\(this\.loading_stati\.current\)\.map\(")
CHANGED_STATUSES_PUSHED = (
    b"async update_loading_stati_state(){const pushed=this._pushed_stati??=new Map;"
    b"await Promise.all(Object.entries(this.loading_stati.current)"
    b".filter(([id,status])=>{const text=JSON.stringify(status);return pushed.get(id)!==text&&pushed.set(id,text)})"
    b".map("
)
BLOCKS_SCRIPT = re.compile(r"/assets/Blocks-[\w-]+\.js$")


def is_blocks_script(path: str) -> bool:
    return BLOCKS_SCRIPT.search(path) is not None


def changed_statuses_pushed(script: bytes, content_type: str = "") -> bytes:
    return EVERY_STATUS_PUSHED.sub(lambda match: CHANGED_STATUSES_PUSHED, script, count=1)
