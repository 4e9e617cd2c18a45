"""The benchmarks' smoke runs one after another in one interpreter, so that torch, transformers and
gradio are imported once for all of them rather than once each.

``python tests/benchmark_worker.py`` reads a request a line on stdin (a script of bench/, its
arguments, and two files for its output) and runs the script as ``python bench/X.py ARGS`` would
(as ``__main__``, with its own ``sys.argv``, environment and ``sys.path`` put back after it), with
file descriptors 1 and 2 on those files, so that what libraries and child processes write is
caught too. Then it stops whatever the script left running (an app, vLLM's engine processes,
Chromium), whether the script passed or failed, and answers the script's exit status on stdout.

BenchmarkWorker is the test's side. Where the worker does not answer in time or dies (a crash in
native code), it kills the worker and everything the worker started, and the next run starts a
fresh one.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import select
import subprocess
import sys
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False", "OMP_WAIT_POLICY": "PASSIVE"}
# In the worker's environment, so in that of everything it starts: what carries it is stopped with
# it, even where its parent died and it went to init, or it left the worker's session.
MARK = "ANYCHAT_BENCHMARK_WORKER"


@dataclass(frozen=True)
class Finished:
    """A script's exit status (None where it did not finish in time) and what it wrote."""

    returncode: int | None
    stdout: str
    stderr: str


class BenchmarkWorker:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.process: subprocess.Popen | None = None
        self.mark = uuid.uuid4().hex

    def run(self, script: str, args: list[str], folder: Path, timeout: float) -> Finished:
        if self.process is None:
            self._start()
        stdout, stderr = folder / "stdout.txt", folder / "stderr.txt"
        self.process.stdin.write(json.dumps({"script": script, "args": args, "stdout": str(stdout), "stderr": str(stderr)}) + "\n")
        self.process.stdin.flush()
        answer = self._answer(timeout)
        if answer is not None:
            returncode = answer["returncode"]
        else:
            # The worker's own exit status where it died under the script; None where it is still running it.
            returncode = self.process.poll()
            self.stop(wait=0)
        return Finished(returncode, stdout.read_text(errors="replace"), stderr.read_text(errors="replace"))

    def _start(self) -> None:
        log_path = self.folder / "worker.log"
        with open(log_path, "a") as log:
            self.process = subprocess.Popen([sys.executable, __file__], cwd=ROOT, env={**os.environ, **ENV, MARK: self.mark}, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        if self._answer(600) is None:
            self.stop(wait=0)
            raise RuntimeError(f"the benchmark worker did not start:\n{log_path.read_text(errors='replace')[-3000:]}")

    def _answer(self, timeout: float) -> dict | None:
        """The worker's next answer; None where it gives none within ``timeout`` or exits (then
        once it has exited, so that its exit status is known)."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if ready and not line:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
        return json.loads(line) if line else None

    def stop(self, wait: float = 30) -> None:
        """Ends the worker: it ends by itself at the end of its input (given ``wait`` seconds),
        else it is killed; and whatever it started is killed."""
        if self.process is None:
            return
        self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(wait)
        self.process.kill()
        self.process.wait()
        kill(marked(self.mark))
        self.process.stdout.close()
        self.process = None


def marked(mark: str) -> list[psutil.Process]:
    """Every process with ``mark`` as its MARK, but this one."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.pid != os.getpid() and process.environ().get(MARK) == mark:
                found.append(process)
    return found


def kill(processes: list[psutil.Process]) -> list[str]:
    """Kills ``processes`` (psutil refuses a pid taken since by another process); the command
    lines of those that were still running."""
    names = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                names.append(" ".join(process.cmdline())[:200])
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=30)
    return names


# ---- the worker


def serve() -> None:
    # Private copies of stdin and stdout, which nothing the benchmarks start inherits.
    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    nothing = os.open(os.devnull, os.O_RDWR)
    os.dup2(nothing, 0)
    os.dup2(2, 1)
    sys.path.insert(0, str(ROOT))  # as every script of bench/ puts it
    import webui  # noqa: F401 (first: gradio is then imported lean: webui/gradio_patches/gradio_import.py)

    import gradio  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        answers.write(json.dumps({"returncode": run(request["script"], request["args"], request["stdout"], request["stderr"])}) + "\n")
        answers.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: a thread a benchmark left behind would hold it.
    os._exit(0)


def run(script: str, args: list[str], stdout: str, stderr: str) -> int:
    path = str(ROOT / "bench" / script)
    environ, argv, sys_path = dict(os.environ), sys.argv, list(sys.path)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(stdout, "w") as out, open(stderr, "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = [path, *args]
        try:
            runpy.run_path(path, run_name="__main__")
            returncode = 0
        except SystemExit as exit_:
            returncode = exit_status(exit_.code)
        except BaseException:
            traceback.print_exc()
            returncode = 1
        finally:
            left = kill(marked(environ[MARK]))
            if left:
                print("stopped after the run, still running:", *left, sep="\n  ", file=sys.stderr)
            sys.argv, sys.path[:] = argv, sys_path
            os.environ.clear()
            os.environ.update(environ)
            # What the script left to the collector is finalized now, in its own run: a finalizer
            # that blocks (a ZeroMQ context left with open sockets) fails this script, not a later one.
            gc.collect()
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
    return returncode


def exit_status(code: object) -> int:
    """What the interpreter exits with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve()
