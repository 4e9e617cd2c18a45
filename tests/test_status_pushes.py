"""The page's script served pushing only the loading statuses that changed (webui/gradio_patches/status_pushes.py),
checked on the Blocks script of the Gradio installed here. What the browser then does is counted
in tests/test_browser.py (test_a_streamed_reply_pushes_only_the_statuses_that_changed)."""

from pathlib import Path

import gradio

from webui.gradio_patches.status_pushes import CHANGED_STATUSES_PUSHED, EVERY_STATUS_PUSHED, changed_statuses_pushed, is_blocks_script

ASSETS = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"


def blocks_script() -> Path:
    [path] = ASSETS.glob("Blocks-*.js")
    return path


def test_the_installed_gradio_pushes_every_status_where_the_page_changes_it():
    script = blocks_script().read_bytes()
    assert len(EVERY_STATUS_PUSHED.findall(script)) == 1, "Gradio's update_loading_stati_state is no longer written as webui/gradio_patches/status_pushes.py expects"
    served = changed_statuses_pushed(script, "application/javascript")
    assert served.count(CHANGED_STATUSES_PUSHED) == 1
    assert not EVERY_STATUS_PUSHED.search(served)
    assert len(served) == len(script) + len(CHANGED_STATUSES_PUSHED) - len(EVERY_STATUS_PUSHED.search(script).group())


def test_only_the_blocks_script_is_edited():
    name = blocks_script().name
    assert is_blocks_script(f"/assets/{name}")
    assert not is_blocks_script(f"/assets/{name.removesuffix('.js')}.css")
    assert not is_blocks_script("/assets/index-DphvyggB.js")
    assert not is_blocks_script("/gradio_api/file=/tmp/Blocks-x.js/evil")
    assert changed_statuses_pushed(b"console.log(1)") == b"console.log(1)"


def test_an_edited_answer_is_whole_under_a_tag_of_its_own(tmp_path):
    """Before: a Range request got the file's bytes unedited, under the file's own ETag."""
    from starlette.applications import Starlette
    from starlette.staticfiles import StaticFiles
    from starlette.testclient import TestClient

    from webui.gradio_patches.edited_responses import EditedResponses

    (tmp_path / "script.js").write_text("let shown = 'as served';\n" * 100)
    app = Starlette()
    app.mount("/", StaticFiles(directory=tmp_path))
    app.add_middleware(EditedResponses, covers=lambda path: path.endswith(".js"), edit=lambda body, kind: body.replace(b"as served", b"EDITED"))
    client = TestClient(app)
    plain = client.get("/script.js", headers={"Range": "bytes=0-9"})
    assert plain.status_code == 200 and plain.text == "let shown = 'EDITED';\n" * 100 and "accept-ranges" not in plain.headers
    assert plain.headers["etag"].endswith('-edited"')
    assert client.get("/script.js", headers={"If-None-Match": plain.headers["etag"]}).status_code == 304
