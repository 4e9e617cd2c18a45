"""An open page that waits draws no frames it does not need.

Gradio 6.31's status tracker counts the seconds an event takes in a requestAnimationFrame loop,
and the tracker of the app's first "Loading..." is taken off the page while its loop still runs:
every open page then draws 60 frames a second for as long as it stays open, on a plain Gradio app
too (5 % of a core per idle tab on this machine; 8 open tabs take 40 %). The tracker shows tenths
of a second, so its loop is run at ten frames a second: a timer shown still counts as it did, and
the loop left running costs a sixth. Any other requestAnimationFrame loop is left as it is.

The tracker keeps the requestAnimationFrame it finds as its module loads, before Gradio adds the
page's head (``head=``), so the script goes into the page's HTML, ahead of Gradio's own scripts.
"""

from __future__ import annotations

# The tracker's callback as Gradio 6.31 builds it: ()=>{set(elapsed,(performance.now()-get(start))/1e3),running&&loop()}.
# Where a later Gradio writes it otherwise nothing matches, every loop runs as before, and
# tests/test_browser.py, which counts an idle page's frames, says so.
STATUS_TIMER_AT_ITS_RESOLUTION = rb"""<script>
(() => {
    const frame = window.requestAnimationFrame.bind(window);
    const statusTimer = /^\(\)=>\{\w+\(\w+,\(performance\.now\(\)-\w+\(\w+\)\)\/1e3\),\w+&&\w+\(\)\}$/;
    window.requestAnimationFrame = (callback) => {
        if (statusTimer.test(String(callback))) {
            setTimeout(() => frame(callback), 100);
            return 0;
        }
        return frame(callback);
    };
})();
</script>"""


def with_status_timer_script(page: bytes, content_type: str) -> bytes:
    """The page (the HTML that Gradio answers ``GET /`` with) with STATUS_TIMER_AT_ITS_RESOLUTION
    first in its head."""
    if not content_type.startswith("text/html"):
        return page
    return page.replace(b"<head>", b"<head>" + STATUS_TIMER_AT_ITS_RESOLUTION, 1)
