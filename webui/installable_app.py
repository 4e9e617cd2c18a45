"""The page as an app a browser installs: its manifest and icons, and a service worker whose one
job is a page saying the server cannot be reached, where the browser would show its own error.

Every path is relative to the page, so that all of it works under a path prefix behind a proxy,
and none is behind the page's login: they hold nothing of anyone's, and a browser fetches a
manifest without the page's cookies. A service worker registers only where the page is a
secure context (https, or this machine's own address): elsewhere the page works as before.
"""

from __future__ import annotations

from pathlib import Path

from .languages.catalog import script_words
from .languages.chosen_language import LANGUAGE_SCRIPT

APP_FILES = Path(__file__).with_name("app_files")
FAVICON = APP_FILES / "favicon.png"
APP_FILES_PATH = "/app-files/"
SERVED = {
    "icon-192.png": "image/png",
    "icon-512.png": "image/png",
    "favicon.png": "image/png",
}
# In the page's language, chosen as the page chooses it (the language script first).
OFFLINE_PAGE = ((APP_FILES / "offline.html").read_text(encoding="utf-8")
                .replace("<!-- LANGUAGE -->", LANGUAGE_SCRIPT.decode())
                .replace("WORDS", script_words("offline.title", "offline.text", "offline.retry")))

# Gradio 6.31's page links "/manifest.json" from the server's root, which behind a proxy's path
# prefix is another site's; the page's own address is where this app's manifest is.
GRADIO_MANIFEST_LINK = b'<link rel="manifest" href="/manifest.json" />'
APP_LINKS = b"""<link rel="manifest" href="manifest.json" />
<meta name="theme-color" content="#4f46e5" />
<link rel="apple-touch-icon" href="app-files/icon-192.png" />
<script>
if ("serviceWorker" in navigator) {
    addEventListener("load", () => navigator.serviceWorker.register("service-worker.js").catch(() => {}));
}
</script>"""


def serve_app_files(app) -> None:
    """The manifest, the service worker and what they name, on ``app`` (before the page is
    mounted on it: the page takes every path added after it)."""
    from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse

    def served(path: Path, media_type: str, **headers: str) -> FileResponse:
        return FileResponse(path, media_type=media_type, headers={"Cache-Control": "no-cache", **headers})

    async def manifest(request):
        return served(APP_FILES / "manifest.json", "application/manifest+json")

    async def service_worker(request):
        return served(APP_FILES / "service-worker.js", "text/javascript")

    async def app_file(request):
        name = request.path_params["name"]
        if name == "offline.html":
            return HTMLResponse(OFFLINE_PAGE, headers={"Cache-Control": "no-cache"})
        if name not in SERVED:
            return PlainTextResponse("Not found", status_code=404)
        return served(APP_FILES / name, SERVED[name])

    app.add_route("/manifest.json", manifest, methods=["GET", "HEAD"])
    app.add_route("/service-worker.js", service_worker, methods=["GET", "HEAD"])
    app.add_route(APP_FILES_PATH + "{name}", app_file, methods=["GET", "HEAD"])


def with_app_links(page: bytes, content_type: str) -> bytes:
    """The page's HTML linking this app's manifest and registering its service worker."""
    if not content_type.startswith("text/html"):
        return page
    return page.replace(GRADIO_MANIFEST_LINK, APP_LINKS, 1)
