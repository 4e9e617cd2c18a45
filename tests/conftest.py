"""Shared fixtures. Tests run offline on the real embedded model (SmolLM2-135M-Instruct)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pathlib import Path

import pytest

import webui  # noqa: F401 (first: gradio, which test modules import, is then imported lean: webui/gradio_patches/gradio_import.py)
from engines import ChatModel, LoadedModels
from engines.model_files.paths import default_gguf
from harness.browser import CHROMIUM, AppProcess, chromium, open_chat
from harness.mcp_config import write_config
from harness.postgres import postgres_bin, postgres_server
from harness.tiny_models import build_qwen2_vl
from needs import pytest_collection_modifyitems, pytest_configure  # noqa: F401
from failure_report import add_what_the_app_said
from strict_run import pytest_collectreport, refuse_skip  # noqa: F401
from tools import ToolCatalog
from workers import pytest_xdist_make_scheduler  # noqa: F401
from tests.vllm_fixtures import shared_vllm_engine, vllm_model  # noqa: F401 (one vLLM engine for the session's vLLM tests)

GREEDY = {"temperature": 0, "max_new_tokens": 24}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    refuse_skip(report)
    add_what_the_app_said(item, report)


@pytest.fixture(scope="session", autouse=True)
def data_folder(tmp_path_factory):
    """The app's data folder (the chat store), one for the whole run: never the user's own."""
    folder = tmp_path_factory.mktemp("data")
    os.environ["ANYCHAT_DATA_DIR"] = str(folder)
    os.environ.pop("ANYCHAT_DATABASE_URL", None)
    return folder


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server for the session (harness/postgres.py); its URL."""
    if postgres_bin() is None:
        pytest.fail("PostgreSQL is not installed: run scripts/setup.sh --test (apt-get install -y postgresql).")
    with postgres_server() as server:
        yield server.url


@pytest.fixture
def tool_catalog():
    """The tools that may run, as the app's catalog holds them before MCP servers connect to it
    (the built-in ones); closed after the test, with the servers a test connected."""
    catalog = ToolCatalog()
    yield catalog
    catalog.close()


@pytest.fixture(scope="session")
def chat_model():
    """The default model on the HF engine, loaded once for the session (converted on first use)."""
    with ChatModel({"infer_backend": "huggingface"}) as model:
        yield model


@pytest.fixture(scope="session")
def loaded_models(chat_model):
    """The session's default model in a LoadedModels, for the tests that chat through one and neither load
    nor unload (so one load serves them all). A module that loads, unloads or needs other settings
    has a ``loaded_models`` of its own."""
    return LoadedModels(chat_model)


@pytest.fixture(scope="module")
def llamacpp_models():
    """The default model on llama.cpp, for a module whose tests run on it beside transformers (``loaded_models``)."""
    pytest.importorskip("llama_cpp", reason="llama.cpp is not installed: bash scripts/setup.sh")
    with ChatModel({"infer_backend": "llamacpp"}) as model:
        yield LoadedModels(model)


@pytest.fixture(scope="session")
def default_model_dir(chat_model):
    """The converted safetensors directory of the embedded model."""
    return chat_model.engine.model_path


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory, default_model_dir):
    """A tiny random reward model (one-label sequence classifier) with the default model's tokenizer.
    Head size 64, as vLLM's CPU attention kernels need."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    path = tmp_path_factory.mktemp("reward")
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id, architectures=["LlamaForSequenceClassification"])
    LlamaForSequenceClassification(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def browser(request):
    """Debian's Chromium through Playwright, one for a module's tests (each opens its own contexts).
    Not one for the session: Playwright's sync API keeps an event loop running in this thread while
    it is open, and the async tests of other modules need the thread's own. Its checks wait up to
    the module's BROWSER_WAIT_MS, else two minutes (replies on a busy 2-core machine are slow)."""
    pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    with chromium(getattr(request.module, "BROWSER_WAIT_MS", 120_000)) as browser:
        yield browser


@pytest.fixture(scope="session")
def tiny_vision_model(tmp_path_factory):
    """A random-weight Qwen2-VL with its real processor (harness/tiny_models.py), built offline."""
    return build_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))


@pytest.fixture(scope="session")
def models_folder(tmp_path_factory, tiny_vision_model):
    """The app's --models-dir: the embedded GGUF under another name, and a HF model directory."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "gguf").mkdir()
    (folder / "gguf" / "SmolLM2-copy.gguf").symlink_to(default_gguf())
    (folder / "tiny-qwen2-vl").symlink_to(tiny_vision_model)
    return folder


@pytest.fixture(scope="module")
def app(request, tmp_path_factory, models_folder):
    """``python app.py`` on the default model with ``models_folder``, for one module's page tests;
    with the module's ``MCP_SERVERS`` (an mcpServers object) and ``APP_FLAGS`` where it has them."""
    folder = tmp_path_factory.mktemp("app")
    flags = ("--models-dir", str(models_folder), *getattr(request.module, "APP_FLAGS", ()))
    if servers := getattr(request.module, "MCP_SERVERS", None):
        flags += ("--mcp-config", str(write_config(folder / "mcp.json", servers)))
    process = AppProcess(folder, flags)
    yield process
    process.stop()


@pytest.fixture
def upload_folder(tmp_path, monkeypatch):
    """Gradio's own upload storage for this test (where imports must write their media)."""
    folder = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def requests_seen():
    """Every URL the module's pages asked for (to check that none leaves this machine)."""
    return []


@pytest.fixture
def open_page(app, browser, requests_seen):
    """Opens the module's app in a Chromium context of its own, ready to chat; closed after the test."""
    contexts = []

    def open_page():
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.on("request", lambda request: requests_seen.append(request.url))
        contexts.append(context)
        page = context.new_page()
        open_chat(page, app.url)
        return page

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture
def page(open_page):
    return open_page()
