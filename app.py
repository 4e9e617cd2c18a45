"""anychat: chat with local models in the browser, on any inference backend.

    python app.py                 # the web page on http://127.0.0.1:7860 (embedded SmolLM2)
    python app.py chat            # chat in the terminal
    python app.py api             # the OpenAI-compatible API alone, no page
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Set before torch or gradio are imported: gradio must not phone home, and torch's OpenMP
# threads must not busy-wait (on a few cores they starve the web server and the streamer).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engines import BACKEND_NAMES, ChatError  # noqa: E402
from engines.backends.registry import AUTO  # noqa: E402
from engines.model_files.model_args import MediaSettings  # noqa: E402
from limits import Limits, parse_size, size_text  # noqa: E402


DEFAULT_LIMITS = Limits().model_dump()


def size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def count(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", choices=("web", "chat", "api"), default="web")
    model = parser.add_argument_group("model")
    model.add_argument(
        "--backend", choices=(AUTO, *BACKEND_NAMES), default=AUTO,
        help="inference backend (default auto: llamacpp for a GGUF file, the embedded default included, where "
             "llama-cpp-python is installed; huggingface otherwise; the startup line says which and why)",
    )
    model.add_argument("--model", default=None, help="local HF directory, .gguf file or Hub name (default: embedded SmolLM2)")
    model.add_argument("--models-dir", default=None, metavar="DIR",
                       help="folder of GGUF files and model directories that the page's model picker lists, with the "
                            "Hugging Face cache (default: ./models where it exists)")
    model.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"))
    model.add_argument("--engine-args", default=None, help="JSON object of extra backend engine arguments")
    model.add_argument("--trust-remote-code", action="store_true",
                       help="let the models this server loads, from the page too, run code shipped with them "
                            "(only here: the page and requests cannot ask for it)")
    model.add_argument("--served-model-name", default=None, help="the model's id in the API (default: its file or directory name)")
    model.add_argument("--temperature", type=float, default=None, help="default temperature (0: greedy; default: the model's own)")
    model.add_argument("--max-new-tokens", type=int, default=None, help="default reply length limit in tokens")
    server = parser.add_argument_group("server (web, api)")
    server.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default: only this machine; beyond it without logins, nobody may manage models)")
    server.add_argument("--port", type=int, default=7860)
    server.add_argument("--allowed-hosts", action="append", metavar="NAME",
                        help="a name requests may address this server by (its Host header; repeatable; *.example.com takes "
                             "subdomains, * any), besides localhost, this machine's own names and IP addresses; pages of "
                             "these names may also send requests (behind a proxy that rewrites Host)")
    server.add_argument("--auth", action="append", metavar="USER:PASS",
                        help="a user who may open the page and use the API (repeatable; the process list shows it: prefer --auth-file)")
    server.add_argument("--auth-file", metavar="FILE", help="users who may open the page and use the API, one USER:PASS a line")
    server.add_argument("--admin", action="append", metavar="NAME",
                        help="a user of --auth who may load and unload models on the page (repeatable); other users see "
                             "the model settings read-only. Without --auth the one person on the page is the admin, if only this "
                             "machine can reach it (--host), else nobody")
    server.add_argument("--api-key", default=None,
                        help="key required on /v1 (the process list shows it: prefer the environment variable ANYCHAT_API_KEY)")
    server.add_argument("--max-concurrent", type=int, default=None,
                        help="requests the model answers at once; more wait in line (default: env MAX_CONCURRENT or 1)")
    server.add_argument("--max-waiting", type=int, default=None,
                        help="requests that may wait in line; more are refused, with 503 and Retry-After on /v1 (default: env MAX_WAITING or 32)")
    server.add_argument("--max-waiting-per-user", type=int, default=None,
                        help="places in line one user may hold (the login name with --auth, else the client's address); the line "
                             "takes users in turn (default: env MAX_WAITING_PER_USER or 16, the most replies one request may stream)")
    server.add_argument("--allowed-local-media-path", default=None, metavar="DIR",
                        help="folder whose files API requests may name as file:// URLs (default: none; remote URLs are never fetched)")
    limits = parser.add_argument_group("limits (web, api; sizes like 100mb, 512kb, 2gb)")
    for name, field in Limits.model_fields.items():
        default = DEFAULT_LIMITS[name]
        shown, kind = (size_text(default), size) if Limits.in_bytes(name) else (default, count)
        limits.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, metavar="SIZE" if kind is size else "N",
                            help=f"{field.description} (default {shown})")
    media = parser.add_argument_group("media (every model this server loads; per request unless said otherwise)")
    for name, field in MediaSettings.model_fields.items():
        shown = f"{field.default:,}" if field.annotation is int else f"{field.default:g}"
        media.add_argument(f"--{name.replace('_', '-')}", type=field.annotation, default=None, metavar="N",
                           help=f"{field.description} (default {shown})")
    chat = parser.add_argument_group("chat")
    chat.add_argument("--system", default=None, help="system prompt for the terminal chat")
    args = parser.parse_args(argv)
    args.secret_flags = [flag for flag, value in (("--auth", args.auth), ("--api-key", args.api_key)) if value is not None]
    if args.api_key is None:
        args.api_key = os.environ.get("ANYCHAT_API_KEY")
    if args.api_key is not None and not args.api_key.strip():
        parser.error("the API key (--api-key or ANYCHAT_API_KEY) is empty, which would let in requests that send an empty one. "
                     "Set a key, or leave ANYCHAT_API_KEY unset to serve /v1 without one.")
    if args.admin and not (args.auth or args.auth_file):
        parser.error("--admin names users of --auth, and there is no --auth: without a login page, whoever opens the page "
                     "(on this machine) is the admin already. Add --auth USER:PASS for each user, or leave out --admin.")
    return args


def model_settings(args: argparse.Namespace) -> dict:
    settings = {"infer_backend": args.backend, "model_name_or_path": args.model, "infer_dtype": args.dtype,
                "served_model_name": args.served_model_name, "trust_remote_code": args.trust_remote_code}
    for name in ("temperature", "max_new_tokens", "max_concurrent", "max_waiting", "max_waiting_per_user", *MediaSettings.model_fields):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if args.engine_args:
        try:
            settings["engine_args"] = json.loads(args.engine_args)
        except json.JSONDecodeError as error:
            raise SystemExit(f"--engine-args is not valid JSON: {error}")
    return settings


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = model_settings(args)
    try:
        if args.command == "chat":
            from terminal_chat import run_terminal_chat

            run_terminal_chat(settings, system=args.system)
        elif args.command == "api":
            from server import serve_api

            serve_api(settings, args)
        else:
            from server import serve_web

            serve_web(settings, args)
    except ChatError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
