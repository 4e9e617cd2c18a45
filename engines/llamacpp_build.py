"""Which CPU the installed llama.cpp was compiled for, and whether this one can run it.

scripts/setup.sh compiles llama-cpp-python with -march=native: its kernels use every instruction
set of the CPU it was built on. Carried to an older CPU (a copied .venv, a container image built on
a newer host) it would die with 'Illegal instruction' at its first prompt. So setup.sh keys the
wheels it keeps by this CPU (``build_key``) and writes into the environment the instruction sets
the build may use (``write_stamp``); the app reads that before it loads llama.cpp
(``unfit_for_this_cpu``) and says what to run instead of crashing.

Standard library only: setup.sh runs this file as a script (``key``, ``stamp``, ``stamped``)
before the app's dependencies are installed.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

STAMP = Path(sys.prefix) / "llama-cpp-build.json"
SETUP_COMMAND = "bash scripts/setup.sh"
# The /proc/cpuinfo flags that name instruction sets a compiler may emit under -march=native.
_INSTRUCTION_SETS = re.compile(r"^(sse\d.*|ssse3|avx.*|fma|f16c|bmi\d|amx.*|gfni|vaes|vpclmulqdq|movbe|popcnt|adx|"
                               r"sha_ni|aes|pclmulqdq|abm|lzcnt)$")


def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def instruction_sets() -> frozenset[str]:
    return frozenset(flag for flag in cpu_flags() if _INSTRUCTION_SETS.match(flag))


def cpu_has_amx() -> bool:
    return "amx_tile" in cpu_flags()


def build_key(kind: str, build_files: list[Path]) -> str:
    """What a native wheel depends on: this CPU's instruction sets, the compiler, and how it is
    built (``kind``, cpu or cuda, and the files that say how). Another CPU, compiler or build gets
    a key, and so a wheel, of its own."""
    try:
        compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.partition("\n")[0]
    except OSError:  # no compiler: setup.sh says so, and a wheel built elsewhere for this CPU still fits
        compiler = ""
    parts = [" ".join(sorted(instruction_sets())), compiler, kind, *(path.read_text() for path in build_files)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def write_stamp(key: str, kind: str) -> None:
    used = instruction_sets()
    if kind == "cpu":
        # The CPU build compiles AMX out (llamacpp_build.cmake): a CPU without it runs the build.
        used = frozenset(name for name in used if not name.startswith("amx"))
    STAMP.write_text(json.dumps({"key": key, "kind": kind, "instruction_sets": sorted(used)}, indent=1) + "\n")


def _stamp() -> dict:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return {}


def unfit_for_this_cpu() -> str | None:
    """Why the installed llama.cpp cannot run on this CPU, or None. An environment setup.sh did not
    build (a llama-cpp-python the user installed) has no stamp and is taken as fit."""
    missing = frozenset(_stamp().get("instruction_sets", ())) - instruction_sets()
    if not missing:
        return None
    return (f"llama.cpp in this environment was compiled for another CPU, with {', '.join(sorted(missing))}, "
            f"which this one lacks (it would die with 'Illegal instruction'); {SETUP_COMMAND} builds it for this CPU")


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    if command == "key":
        print(build_key(arguments[0], [Path(name) for name in arguments[1:]]))
    elif command == "stamp":
        write_stamp(*arguments)
    elif command == "stamped":
        print(_stamp().get(arguments[0], ""))
    else:
        sys.exit(f"unknown command: {command}")
