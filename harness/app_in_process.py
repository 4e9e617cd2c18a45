"""The real app served in the test process, for the tests that are not about the process itself:
what ``python app.py [flags]`` serves, built by server.py's own code from the flags as app.py's
parser reads them, without a process to start (importing torch, transformers and Gradio, and
loading the model afresh, is most of a start)."""

from __future__ import annotations

import os
import re
import time
from contextlib import ExitStack, redirect_stdout
from pathlib import Path

from harness.browser import free_port
from harness.running_server import QUIET, serving


class AppInProcess:
    """``python app.py --port N [extra_args]`` as AppProcess starts it (``api`` among them for the
    API alone), served on a thread of this process until stopped; ``loaded_models`` are its loaded models.

    Its environment is AppProcess's too: GRADIO_TEMP_DIR and ANYCHAT_DATA_DIR in ``temp_dir``,
    set in this process while it runs, as Gradio reads GRADIO_TEMP_DIR at each request, and
    restored when it stops. So where several run, only the one started last may be used (the
    others refuse every request), and they stop in the reverse order, as pytest's fixtures do."""

    def __init__(self, temp_dir: Path, extra_args: tuple[str, ...] = ()) -> None:
        from app import model_settings, parse_args
        from server import http_server, loaded_app, loaded_models

        self.port = free_port()
        self.log_path = temp_dir / "app.log"
        self.pid = os.getpid()  # the process whose memory is the server's
        self.loaded_models = None
        self._environment = {"GRADIO_TEMP_DIR": str(temp_dir / "gradio"), "ANYCHAT_DATA_DIR": str(temp_dir / "data")}
        self._outside = {name: os.environ.get(name) for name in self._environment}
        os.environ.update(self._environment)
        self._running = ExitStack()
        try:
            # What the app prints, as it starts, is its log: the same lines as a process's.
            with open(self.log_path, "w") as log, redirect_stdout(log):
                args = parse_args(["--port", str(self.port), *extra_args])
                self.loaded_models = loaded_models(args)
                app = self._running.enter_context(loaded_app(self.loaded_models, model_settings(args), args))
                app.add_middleware(OwnEnvironmentOnly, environment=self._environment)
                self._running.enter_context(serving(http_server(app, args, **QUIET)))
                self.url = self._wait_for_url()
        except BaseException:
            self.stop()
            raise

    def _wait_for_url(self) -> str:
        # The server says where it listens just after it starts to.
        deadline = time.monotonic() + 30
        while not (match := re.search(r"Running on local URL:\s+(\S+)|OpenAI-compatible API on (\S+)/v1", self.log())):
            assert time.monotonic() < deadline, f"the app did not say where it listens:\n{self.log()}"
            time.sleep(0.05)
        return (match.group(1) or match.group(2)).rstrip("/") + "/"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Stop serving, unload the model and restore the environment; again does nothing."""
        outside, self._outside = self._outside, None
        if outside is None:
            return
        try:
            self._running.close()
        finally:
            for name, value in outside.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


class OwnEnvironmentOnly:
    """Refuses the requests that come while another app's environment is set (one started later
    and still running), which would read and write that app's files."""

    def __init__(self, app, environment: dict[str, str]) -> None:
        self.app, self.environment = app, environment

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "lifespan" and any(os.environ.get(name) != value for name, value in self.environment.items()):
            raise RuntimeError("Another in-process app started after this one and runs: only that one may be used until it stops.")
        await self.app(scope, receive, send)
