"""vLLM's engine core kept on its workers' cores, on CPU.

vLLM's engine core hands each step to its worker through a shared-memory queue and waits for the
answer by spinning (the queue busy-loops for a second after each read). On CPU vLLM binds its
worker to every core but one and leaves that one to the engine core, so while a reply is written
a whole core spins: on a 2-core machine, half the machine, taken from the page, the browser, the
other users and every other process. On CPU the two take turns (vLLM schedules the next step only
once the last has come back), so on its worker's cores the engine core waits without taking
anything from them: writing 200 tokens here, the engine core's CPU went from 19.6 s to 1.0 s and
the reply's time did not change beyond noise (19.7 s, 21.8 s).

No vLLM import here: the tests and benchmarks that start `vllm serve` as a process of its own
keep its engine core beside its worker too (harness/vllm_server.py).
"""

from __future__ import annotations

import psutil

ENGINE_CORE = "VLLM::EngineCore"


def keep_beside_its_workers(engine_core_pid: int) -> None:
    """Puts the engine core on the cores its worker processes are bound to, where they are bound
    to fewer than it may use. Left as it is where it cannot be read or changed (a process that
    died, a system that forbids it): what this saves is CPU, nothing runs without it."""
    try:
        engine_core = psutil.Process(engine_core_pid)
        cores = sorted({core for worker in engine_core.children() for core in worker.cpu_affinity()})
        if cores and cores != sorted(engine_core.cpu_affinity()):
            engine_core.cpu_affinity(cores)
    except (psutil.Error, OSError, AttributeError):
        pass


def engine_cores_under(pid: int) -> list[int]:
    """The vLLM engine cores among a process's descendants (vLLM names them)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name() == ENGINE_CORE:
                found.append(child.pid)
        except psutil.Error:
            pass
    return found
