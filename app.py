"""anychat: chat with local models in the browser, on any inference backend.

    python app.py                 # the web page on http://127.0.0.1:7860 (embedded SmolLM2)
    python app.py chat            # chat in the terminal
    python app.py api             # the OpenAI-compatible API alone, no page

(anychat, where the project was installed with pip, is python app.py.)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import get_origin

# Set before torch or gradio are imported: gradio must not phone home, and torch's OpenMP
# threads must not busy-wait (on a few cores they starve the web server and the streamer).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pydantic import BaseModel  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

from engines import ChatError, GenerationArgs, KeepSettings, ModelArgs  # noqa: E402
from engines.backends.base import REQUEST_LOG  # noqa: E402
from engines.context_settings import ContextSettings  # noqa: E402
from engines.model_files.model_args import MediaSettings  # noqa: E402
from engines.model_files.server_address import is_server_address  # noqa: E402
from engines.reply_traces import TraceSettings  # noqa: E402
from engines.settings import choices, field_range, value_type  # noqa: E402
from limits import Limits, in_bytes, parse_size, size_text  # noqa: E402
from store.database import StoreSettings  # noqa: E402
from tools import McpServers, ToolCatalog, ToolSettings  # noqa: E402

# Flags the command line names otherwise than their settings (each still sets its setting's name).
FLAG_NAMES = {"infer_backend": "backend", "model_name_or_path": "model", "infer_dtype": "dtype"}
MODEL_FLAGS = ("infer_backend", "model_name_or_path", "mmproj", "infer_dtype", "engine_args", "trust_remote_code", "served_model_name",
               "remote_model", "remote_api_key", "max_model_len", "convert_weights", "prompt_cache_gb", "prompt_cache_dir")
GENERATION_FLAGS = ("temperature", "max_new_tokens")
LINE_FLAGS = ("max_concurrent", "max_waiting", "max_waiting_per_user")


def size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def count(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def names(text: str) -> list[str]:
    """A comma-separated list of names."""
    return [name.strip() for name in text.split(",") if name.strip()]


def json_value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from None


def add_flags(group: argparse._ArgumentGroup, settings: type[BaseModel], names: tuple[str, ...] | None = None,
              with_defaults: bool = False, left_out: str | None = None) -> None:
    """A flag for each of ``settings``' fields ``names`` (all by default), built from the field:
    its type (sizes like 100mb for a size in bytes, JSON for a dict, a switch for a boolean), its
    choices, and its description with its default as help. A flag sets the setting's name, to None
    where it is left out, so that the settings' own default applies where they are built; or to
    the default itself ``with_defaults``. ``left_out``: what leaving a flag out means, where it is
    not the field's default."""
    for name in names or tuple(settings.model_fields):
        field = settings.model_fields[name]
        flag = f"--{FLAG_NAMES.get(name, name).replace('_', '-')}"
        default = field.default if with_defaults else None
        shown = left_out or (f"default {_shown_default(field)}" if _shown_default(field) else None)
        help = f"{field.description} ({shown})" if shown else field.description
        if value_type(field) is bool and field.default is True:
            group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, help=f"{field.description} (default on)")
        elif value_type(field) is bool:
            group.add_argument(flag, dest=name, action="store_true", help=field.description)
        elif choices(field):
            group.add_argument(flag, dest=name, choices=choices(field), default=default, help=help)
        else:
            kind, metavar = _flag_type(field)
            group.add_argument(flag, dest=name, type=kind, default=default, metavar=metavar or flag[2:].upper().replace("-", "_"), help=help)


def _flag_type(field: FieldInfo) -> tuple[object, str | None]:
    """How a flag reads its value, and what its help calls the value."""
    kind = value_type(field)
    bounds = field_range(field)
    if in_bytes(field):
        return size, "SIZE"
    if kind is int and (bounds.get("gt", -1) >= 0 or bounds.get("ge", 0) >= 1):
        return count, "N"
    if kind in (int, float):
        return kind, "N"
    if dict in (kind, get_origin(kind)):
        return json_value, "JSON"
    if get_origin(kind) is list:
        return names, "NAME,..."
    return kind, None


def _shown_default(field: FieldInfo) -> str | None:
    """A field's default as its flag's help says it (none for a default made when the settings are built)."""
    default = field.default
    if default is None or value_type(field) is bool or not isinstance(default, (int, float, str)):
        return None
    if in_bytes(field):
        return size_text(default)
    return f"{default:,}" if isinstance(default, int) else f"{default:g}" if isinstance(default, float) else default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # prog is what the user typed: app.py, or anychat where the project was installed with pip.
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", choices=("web", "chat", "api"), default="web")
    model = parser.add_argument_group("model")
    add_flags(model, ModelArgs, MODEL_FLAGS)
    model.add_argument("--models-dir", default=None, metavar="DIR",
                       help="folder of GGUF files and model directories that the page's model picker lists, with the "
                            "Hugging Face cache (default: ./models where it exists)")
    generation = parser.add_argument_group("generation (the defaults of every request)")
    add_flags(generation, GenerationArgs, GENERATION_FLAGS, left_out="default: the model's own")
    add_flags(generation, ContextSettings, left_out="default: compact on the page and in the terminal chat; the API refuses a "
                                                    "chat too long unless its request names a policy (context_policy)")
    server = parser.add_argument_group("server (web, api)")
    server.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default: only this machine; beyond it without logins, nobody may manage models)")
    server.add_argument("--port", type=int, default=7860)
    server.add_argument("--allowed-hosts", action="append", metavar="NAME",
                        help="a name requests may address this server by (its Host header; repeatable; *.example.com takes "
                             "subdomains, * any), besides localhost, this machine's own names and IP addresses; pages of "
                             "these names may also send requests (behind a proxy that rewrites Host)")
    server.add_argument("--root-path", metavar="PATH",
                        help="the path prefix under which a proxy serves the page (e.g. /chat for https://example.com/chat/, "
                             "the proxy passing requests on without it): the page's own requests go there")
    server.add_argument("--auth", action="append", metavar="USER:PASS",
                        help="a user who may open the page and use the API (repeatable; the process list shows it: prefer --auth-file)")
    server.add_argument("--auth-file", metavar="FILE", help="users who may open the page and use the API, one USER:PASS a line")
    server.add_argument("--admin", action="append", metavar="NAME",
                        help="a user of --auth who may load and unload models on the page (repeatable); other users see "
                             "the model settings read-only. Without --auth the one person on the page is the admin, if only this "
                             "machine can reach it (--host), else nobody")
    server.add_argument("--api-key", default=None,
                        help="key required on /v1 (the process list shows it: prefer the environment variable ANYCHAT_API_KEY)")
    add_flags(server, ModelArgs, LINE_FLAGS)
    add_flags(parser.add_argument_group("models kept (web, api)"), KeepSettings)
    server.add_argument("--log-requests", action="store_true",
                        help="log each request as the model reads it (its user, settings and whole prompt) on stderr, to see "
                             "what a chat template or the page sends; the log then holds the users' words")
    server.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                        help="folder whose files API requests may name as file:// URLs (default: none; remote URLs are never fetched)")
    add_flags(server, TraceSettings)
    add_flags(parser.add_argument_group("limits (web, api; sizes like 100mb, 512kb, 2gb)"), Limits, with_defaults=True)
    add_flags(parser.add_argument_group("media (every model this server loads; per request unless said otherwise)"), MediaSettings)
    add_flags(parser.add_argument_group("chats (web, api)"), StoreSettings,
              left_out="default: chats.db, an SQLite file in the data folder: ANYCHAT_DATA_DIR, else ~/.local/share/anychat")
    chat = parser.add_argument_group("chat")
    chat.add_argument("--system", default=None, help="system prompt for the terminal chat")
    chat.add_argument("--mcp-config", default=None, metavar="FILE",
                      help='MCP servers whose tools the model may call, in the JSON shape other MCP clients read: {"mcpServers": '
                           '{"name": {"command": ..., "args": [...]} or {"url": ..., "headers": {...}}}}. The page lists them and '
                           "their tools; --run-tools names a tool as name__tool")
    add_flags(chat, ToolSettings)
    args = parser.parse_args(argv)
    args.secret_flags = [flag for flag, value in (("--auth", args.auth), ("--api-key", args.api_key), ("--remote-api-key", args.remote_api_key))
                         if value is not None]
    if args.api_key is None:
        args.api_key = os.environ.get("ANYCHAT_API_KEY")
    if args.remote_api_key is None and (args.infer_backend == "remote" or is_server_address(args.model_name_or_path)):
        args.remote_api_key = os.environ.get("ANYCHAT_REMOTE_API_KEY")
    if args.api_key is not None and not args.api_key.strip():
        parser.error("the API key (--api-key or ANYCHAT_API_KEY) is empty, which would let in requests that send an empty one. "
                     "Set a key, or leave ANYCHAT_API_KEY unset to serve /v1 without one.")
    if args.admin and not (args.auth or args.auth_file):
        parser.error("--admin names users of --auth, and there is no --auth: without a login page, whoever opens the page "
                     "(on this machine) is the admin already. Add --auth USER:PASS for each user, or leave out --admin.")
    return args


def model_settings(args: argparse.Namespace) -> dict:
    """The settings of the model the command line loads: those its flags give."""
    names = (*MODEL_FLAGS, *GENERATION_FLAGS, *LINE_FLAGS, *MediaSettings.model_fields)
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def log_requests() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s request %(message)s"))
    REQUEST_LOG.addHandler(handler)
    REQUEST_LOG.setLevel(logging.INFO)
    REQUEST_LOG.propagate = False


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = model_settings(args)
    if args.log_requests:
        log_requests()
    # The tools that may run, the MCP servers' among them: the process's one catalog, handed to
    # the terminal chat or the page, and closed (the servers' processes ended) as the app ends.
    catalog = ToolCatalog()
    try:
        if args.mcp_config:
            connect_mcp_servers(catalog, args.mcp_config, wait=args.command == "chat")
        if args.command == "chat":
            from terminal_chat import run_terminal_chat

            tools = ToolSettings.build_for(catalog, **{name: getattr(args, name) for name in ToolSettings.model_fields if getattr(args, name) is not None})
            run_terminal_chat(settings, system=args.system, tools=tools, context=ContextSettings.build(context_policy=args.context_policy or "compact"),
                              catalog=catalog)
        else:
            from server import serve

            serve(settings, args, catalog)
    except ChatError as error:
        sys.exit(f"error: {error}")
    finally:
        catalog.close()


def connect_mcp_servers(catalog: ToolCatalog, config: str, wait: bool) -> None:
    """Start connecting the servers of the MCP ``config`` file to ``catalog``, their tools offered
    as each is ready; ``wait``: until each is ready or has failed (the terminal chat names its tools at once)."""
    try:
        servers = McpServers.from_file(config)
    except ValueError as error:
        sys.exit(f"error: --mcp-config: {error}")
    servers.start()
    catalog.connect(servers)
    if wait:
        servers.wait_started()
        for status in servers.statuses():
            print(f"MCP server {status.name}: {status.summary()}", file=sys.stderr)


if __name__ == "__main__":
    main()
