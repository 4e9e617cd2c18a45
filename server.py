"""Serving the page and the OpenAI-compatible API from one process over the loaded models both share."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.model_files.backend_registry import AUTO, choose_backend
from engines.model_files.model_args import MediaSettings
from limits import Limits

if TYPE_CHECKING:
    import uvicorn

    from access import Logins
    from tools import ToolCatalog
    from webui.model_rights import ModelRights

# Model settings from the command line that belong to the server, not to the model it starts
# with, so that models loaded from the page get them too: how many requests run and wait, and
# what media a request may make it decode. (--served-model-name names the command line's model;
# another model loaded from the page is served under its own name.)
# How long a stopping server lets the replies being streamed go on before it cuts them off.
GRACEFUL_SHUTDOWN_SECONDS = 3
SERVER_WIDE = ("max_concurrent", "max_waiting", "max_waiting_per_user", *MediaSettings.model_fields)


def serve(settings: dict[str, Any], args: argparse.Namespace, catalog: ToolCatalog | None = None) -> None:
    """What ``args.command`` serves on the one loaded model, until interrupted: for web the page
    at / and the API at /v1, for api the API alone (no page, for headless use). ``catalog``: the
    tools the page's chats may run (app.py's, with the MCP servers'; without one, the built-in ones)."""
    with loaded_app(loaded_models(args), settings, args, catalog) as app:
        http_server(app, args).run()


def loaded_models(args: argparse.Namespace):
    """The app's LoadedModels, keeping models as the flags say; with --load-on-demand, a request
    naming a model the page's picker lists loads it with the server-wide settings."""
    from engines import KeepSettings, LoadedModels
    from engines.model_files.catalog import find_models
    from engines.loaded_models import ListedModel

    def listed() -> dict[str, ListedModel]:
        settings = {**server_wide(args), "trust_remote_code": args.trust_remote_code}
        return {found.name: ListedModel({**settings, "model_name_or_path": found.value or None, "served_model_name": found.name}, found.reads,
                                        found.size)
                for found in find_models(models_dir(args))}

    return LoadedModels(keep=KeepSettings.build(**{name: getattr(args, name) for name in KeepSettings.model_fields}), listed=listed)


@contextmanager
def loaded_app(loaded_models, settings: dict[str, Any], args: argparse.Namespace, catalog: ToolCatalog | None = None) -> Iterator[Any]:
    """The FastAPI app that ``args.command`` serves, not yet served, over ``loaded_models`` loaded with
    ``settings`` (the page's tools of ``catalog``); the model is unloaded after."""
    if args.command == "web":
        app = web_app(loaded_models, args, catalog)  # checks the flags before the slow load
        load_model(loaded_models, settings)
    else:
        load_model(loaded_models, settings)
        app = api_app(loaded_models, args, server_logins(page_users(args), args), store=chat_store(args))
    try:
        yield app
    finally:
        loaded_models.unload()


def web_app(loaded_models, args: argparse.Namespace, catalog: ToolCatalog | None = None):
    """The page at / and the API at /v1 over ``loaded_models``, as a FastAPI app not yet served;
    the page's chats run the tools of ``catalog`` (without one, the built-in ones)."""
    import webui  # noqa: F401 (first: gradio is then imported without what a page never uses, webui/gradio_patches/gradio_import.py)

    import gradio as gr
    from gradio.route_utils import API_PREFIX as PAGE_PREFIX
    from gradio.utils import get_upload_folder

    from access.session_owners import SessionOwnerCheck, SessionOwners, keep_sessions_to_their_logins, state_dropper
    from api.body_limit import BodyLimit, is_api_path
    from webui.file_cache import FileCache
    from webui.layout import PAGE_KWARGS, build_demo
    from webui.python_in_browser import PYODIDE_PREFIX, serve_pyodide
    from webui.installable_app import FAVICON, serve_app_files
    from webui.gradio_patches.event_inputs import refuse_events_short_of_inputs
    from webui.gradio_patches.mounted_page import finish_mount, gradio_login
    from webui.gradio_patches.page_edits import add_page_edits

    users = page_users(args)
    rights = page_rights(args, users)
    check_admins(rights, users)
    limits = limits_of(args)
    logins = server_logins(users, args)
    store = chat_store(args)
    # /v1 first: the page mounted at / takes every path added after it.
    app = api_app(loaded_models, args, logins, read_by_any_page=(PYODIDE_PREFIX,), store=store)
    serve_pyodide(app)
    serve_app_files(app)
    uploads = f"{PAGE_PREFIX}/upload"  # each file bounded by --max-upload-size instead
    app.add_middleware(BodyLimit, limit=limits.max_page_request_size, covers=lambda path: not is_api_path(path) and path != uploads,
                       flag="--max-page-request-size", advice="Send a shorter message, or ask the server's operator to raise the limit.")
    # api_open=False: a queued event run directly (POST /gradio_api/run/…) would skip the queue and its limits.
    demo = build_demo(loaded_models, rights, limits, models_dir(args), store, args.context_policy or "compact",
                      catalog).queue(max_size=limits.max_queue_size, api_open=False)
    refuse_events_short_of_inputs(demo)
    files = FileCache(Path(get_upload_folder()), limits.max_file_age, limits.max_cache_size)
    page = gr.mount_gradio_app(app, demo, path="/", auth=logins.page_login if logins else None, max_file_size=limits.max_upload_size,
                               footer_links=[], show_error=True, favicon_path=FAVICON, root_path=args.root_path, app_kwargs={"lifespan": files.kept}, **PAGE_KWARGS)
    gradio_app = finish_mount(demo, page)
    add_page_edits(page)
    if logins:
        owners = SessionOwners(end_session=state_dropper(demo))
        keep_sessions_to_their_logins(demo, owners)
        # On Gradio's own app: inside the page's body limit, which bounds the bodies the check reads.
        gradio_app.add_middleware(SessionOwnerCheck, owners=owners, login_of=lambda request: gradio_login(gradio_app, request))
    return page


def load_model(loaded_models, settings: dict[str, Any]) -> None:
    """Load the model into ``loaded_models``, with its progress in the terminal. The backend comes first:
    where llama.cpp is missing, a GGUF file runs on transformers several times slower, and the
    command that fixes it is worth reading before the load's own lines."""
    backend, why = choose_backend(settings.get("infer_backend") or AUTO, settings.get("model_name_or_path"))
    print(f"Loading {settings.get('model_name_or_path') or 'the embedded default model'} on {backend}"
          f"{f' ({why})' if why else ''}…", flush=True)
    loaded_models.load(settings, progress=lambda fraction, message: print(f"  {fraction:4.0%} {message}", flush=True))
    print(loaded_models.describe(), flush=True)


def chat_store(args: argparse.Namespace):
    """The chat store --database-url names (the page's chats, every user's library of long
    documents, the Responses API's replies), or the exit with what to do where it cannot be opened."""
    from store import Quota, StoreError, open_store, shown_url

    try:
        store = open_store(args.database_url, Quota.of(limits_of(args)), responses_in_page=args.responses_in_page)
    except StoreError as error:
        raise SystemExit(str(error)) from None
    print(f"Chats and documents kept in {shown_url(args.database_url)}", flush=True)
    return store


def api_app(loaded_models, args: argparse.Namespace, logins: Logins, read_by_any_page: tuple[str, ...] = (), store=None):
    """/v1 over ``loaded_models``, with every request to the app (the page mounted on it later included)
    checked for who sends it (any page may read under ``read_by_any_page``), documents too long
    for the context and the Responses API's replies kept in ``store``; says at startup who can reach it."""
    from fastapi import FastAPI

    from access import AllowedHosts, exposure_warnings, guard
    from api import add_api
    from api.errors import refusal
    from engines.reply_traces import TraceSettings, start_tracer, traces_wanted

    app = add_api(FastAPI(title="anychat", docs_url=None, redoc_url=None), loaded_models, args.api_key, local_media_dir(args), args.max_request_size, logins,
                  limits_of(args), args.context_policy, store,
                  tracer=start_tracer() if traces_wanted(TraceSettings(otel_traces=args.otel_traces)) else None)
    guard(app, AllowedHosts(args.allowed_hosts or (), bound=args.host), refusal, read_by_any_page)
    for warning in exposure_warnings(args.host, args.port, bool(logins), args.api_key is not None, args.secret_flags):
        print(warning, flush=True)
    return app


def http_server(app, args: argparse.Namespace, **config: Any) -> uvicorn.Server:
    """uvicorn for ``app`` on --host and --port, which says where once it listens, and stops
    within seconds of being told to (SIGTERM, Ctrl-C) however many pages and replies are open;
    ``config``: more of uvicorn's settings."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            # uvicorn waits for every open connection to end: a page's heartbeat never does until
            # Gradio is told, and a streamed reply may go on for minutes (GRACEFUL_SHUTDOWN_SECONDS).
            if stop := getattr(app.state, "page_streams_stop", None):
                stop.set()
            await super().shutdown(sockets)

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:  # listening now: say where
                url = f"http://{args.host}:{args.port}"
                if args.command == "web":
                    print(f"Running on local URL:  {url}/", flush=True)
                print(f"OpenAI-compatible API on {url}/v1 ({app.state.api_access.describe()})", flush=True)

    return Server(uvicorn.Config(app, host=args.host, port=args.port, **{"timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS, **config}))


def server_logins(users: list[tuple[str, str]] | None, args: argparse.Namespace) -> Logins:
    """``users``' logins, for the page and the API alike, failed tries slowed down."""
    from access import LoginThrottle, Logins

    return Logins(users, LoginThrottle(args.max_login_wait))


def page_users(args: argparse.Namespace) -> list[tuple[str, str]] | None:
    """The (user, password) pairs of --auth and --auth-file, or None when the page has no login."""
    entries = [(entry, "--auth") for entry in args.auth or ()]
    if args.auth_file:
        try:
            lines = Path(args.auth_file).expanduser().read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise SystemExit(f"--auth-file {args.auth_file}: {error.strerror}.")
        entries += [(line.strip(), f"--auth-file line {number}") for number, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
    users = []
    for entry, source in entries:
        user, sep, password = entry.partition(":")
        if not sep or not user or not password:
            raise SystemExit(f"{source}: write user:pass, both non-empty.")
        if user in dict(users):
            raise SystemExit(f"{source}: the user {user} is given twice.")
        users.append((user, password))
    return users or None


def page_rights(args: argparse.Namespace, users: list[tuple[str, str]] | None) -> ModelRights:
    """Who may manage models from the page, and what the command line gives every load from it."""
    from access import beyond_loopback
    from webui.model_rights import ModelRights

    # Without logins, the one person at the page is the admin, as long as only this machine reaches it; else nobody is.
    without_logins = users is None and beyond_loopback(args.host)
    admins = None if users is None and not without_logins else frozenset(args.admin or ())
    return ModelRights(admins=admins, without_logins=without_logins, trust_remote_code=args.trust_remote_code,
                       server_settings=server_wide(args))


def server_wide(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's SERVER_WIDE settings, which every model it loads gets."""
    return {name: getattr(args, name) for name in SERVER_WIDE if getattr(args, name) is not None}


def check_admins(rights: ModelRights, users: list[tuple[str, str]] | None) -> None:
    """Every --admin must be a user who can log in; say who may manage models."""
    if rights.admins is None:
        return
    if users is None:
        print("Model management on the page: nobody (no logins, and other machines can reach this server).", flush=True)
        return
    names = [user for user, _ in users]
    unknown = sorted(rights.admins - set(names))
    if unknown:
        raise SystemExit(f"--admin {', '.join(unknown)}: not among the users of --auth/--auth-file ({', '.join(names)}).")
    admins = ", ".join(sorted(rights.admins)) or "nobody (no --admin): models change only by restarting with other flags"
    print(f"Model management on the page: {admins}.", flush=True)


def limits_of(args: argparse.Namespace) -> Limits:
    return Limits(**{name: getattr(args, name) for name in Limits.model_fields})


def models_dir(args: argparse.Namespace) -> Path | None:
    """--models-dir, which must exist; else ./models where there is one."""
    if args.models_dir is None:
        return Path("models") if Path("models").is_dir() else None
    folder = Path(args.models_dir).expanduser()
    if not folder.is_dir():
        raise SystemExit(f"--models-dir {folder} is not a folder.")
    return folder


def local_media_dir(args: argparse.Namespace) -> Path | None:
    if args.allowed_local_media_path is None:
        return None
    folder = Path(args.allowed_local_media_path).expanduser()
    if not folder.is_dir():
        raise SystemExit(f"--allowed-local-media-path {folder} is not a folder.")
    return folder
