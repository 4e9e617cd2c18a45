"""llama.cpp as scripts/setup.sh builds it, tried against CPUs other than the one the tests run on.

setup.sh compiles llama.cpp's CPU backend with -march=native, so which of its code compiles depends
on the CPU: a unity batch that put the AMX kernels beside files declaring ggml's blocks otherwise
failed only on CPUs with AMX, and every machine the project was tried on passed. Here the backend's
sources are configured exactly as setup.sh configures them (scripts/llamacpp_build.cmake) and
compiled, compile only and unoptimised, for each family of x86 instruction sets ggml has code for.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engines.llamacpp_build import STAMP

REPO = Path(__file__).resolve().parent.parent
SDISTS = REPO / ".cache" / "llama-cpp-sdist"
# Each -march stands for a family of CPUs ggml has code paths for (names GCC 12 knows: not znver4).
TARGETS = {
    "x86-64-v2": "SSE4.2, no AVX",
    "haswell": "AVX2, FMA, F16C",
    "alderlake": "AVX-VNNI without AVX-512",
    "skylake-avx512": "AVX-512",
    "icelake-server": "AVX-512 with VBMI and VNNI",
    "sapphirerapids": "AVX-512 and AMX, which the build compiles out",
}
AMX_OFF = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
# The tile instructions: none may be in a library any process here opens (some VMs list AMX and
# fault on it).
AMX_INSTRUCTIONS = re.compile(r"\b(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilerelease|tilezero|tdpb\w+)\b")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cpu_backend_commands(tmp_path_factory) -> list[dict]:
    """The compile commands of ggml's CPU backend, configured as setup.sh's build configures it."""
    sdists = sorted(SDISTS.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        pytest.skip(f"no llama-cpp-python source package in {SDISTS} (bash scripts/setup.sh --test fetches it)")
    root = tmp_path_factory.mktemp("llama-cpp")
    with tarfile.open(sdists[-1]) as sdist:
        # Its models (vocabularies for llama.cpp's own tests) and docs are most of its size, and no build reads them.
        sdist.extractall(root, members=[member for member in sdist.getmembers()
                                        if not re.search(r"/vendor/llama\.cpp/(models|docs)/", member.name)], filter="data")
    [source] = root.iterdir()
    build = root / "build"
    subprocess.run(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                    f"-DCMAKE_PROJECT_INCLUDE={REPO / 'scripts' / 'llamacpp_build.cmake'}"],
                   check=True, capture_output=True, text=True)
    commands = [entry for entry in json.loads((build / "compile_commands.json").read_text())
                if "/ggml-cpu.dir/" in entry["command"]]
    assert commands, "the configured build has no CPU backend"
    return commands


def compiled_for(entry: dict, march: str, amx: bool) -> subprocess.CompletedProcess:
    arguments = shlex.split(entry["command"])
    arguments = [f"-march={march}" if argument == "-march=native" else argument for argument in arguments
                 if not (amx and argument in AMX_OFF)]
    arguments[arguments.index("-o") + 1] = "/dev/null"
    return subprocess.run([*arguments, "-O0"], cwd=entry["directory"], capture_output=True, text=True)


def assert_compiles(commands: list[dict], march: str, amx: bool = False) -> None:
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda entry: (entry["file"], compiled_for(entry, march, amx)), commands))
    failed = {Path(file).name: [line for line in result.stderr.splitlines() if "error" in line][:5]
              for file, result in results if result.returncode != 0}
    assert not failed, f"llama.cpp's CPU backend does not compile for -march={march}: {failed}"


def test_the_build_is_native_without_amx_and_compiles_the_amx_kernels_apart(cpu_backend_commands):
    for entry in cpu_backend_commands:
        arguments = shlex.split(entry["command"])
        assert "-march=native" in arguments and set(AMX_OFF) <= set(arguments), entry["command"][:300]
    batched = "".join(Path(entry["file"]).read_text() for entry in cpu_backend_commands if "/Unity/" in entry["file"])
    assert "amx/" not in batched, "the AMX kernels are in a unity batch again"


@pytest.mark.parametrize("march", TARGETS, ids=[f"{march} ({what})" for march, what in TARGETS.items()])
def test_the_cpu_backend_compiles_for(cpu_backend_commands, march):
    assert_compiles(cpu_backend_commands, march)


def test_the_amx_kernels_compile_where_the_build_turns_them_on(cpu_backend_commands):
    assert_compiles(cpu_backend_commands, "sapphirerapids", amx=True)


def test_the_installed_libraries_have_no_amx_instruction():
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (bash scripts/setup.sh builds it)",
                                    exc_type=ImportError)
    assert STAMP.is_file(), f"setup.sh writes {STAMP} beside the build it installs"
    libraries = sorted((Path(llama_cpp.__file__).parent / "lib").glob("lib*.so"))
    assert any(library.name == "libggml-cpu.so" for library in libraries), libraries
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils) reads the libraries' instructions"
    for library in libraries:
        disassembly = subprocess.run([objdump, "-d", "--no-show-raw-insn", library], check=True, capture_output=True, text=True).stdout
        assert "mm" in disassembly, f"{library.name}: a disassembly without one SIMD register is no disassembly"
        found = sorted(set(AMX_INSTRUCTIONS.findall(disassembly)))
        assert not found, f"{library.name} holds AMX instructions: {found}"


def test_a_failed_compile_is_said_in_a_few_lines_that_name_its_cause(tmp_path):
    """setup.sh's compile of llama.cpp, made to fail at its first file as a real compile error would."""
    sdists = sorted(SDISTS.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        pytest.skip(f"no llama-cpp-python source package in {SDISTS} (bash scripts/setup.sh --test fetches it)")
    broken = tmp_path / "broken.cmake"
    broken.write_text(f'include("{REPO / "scripts" / "llamacpp_build.cmake"}")\n'
                      f'add_compile_options(-include {tmp_path / "no-such-header.h"})\n')
    wheels, log = tmp_path / "wheels", tmp_path / "build.log"
    result = subprocess.run(["bash", REPO / "scripts" / "llamacpp_wheel.sh", sdists[-1], wheels, log, f"-DCMAKE_PROJECT_INCLUDE={broken}"],
                            capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable}, timeout=600)
    said = result.stderr.splitlines()
    assert result.returncode == 1 and not wheels.exists() and not (tmp_path / "wheels.partial").exists()
    assert len(said) <= 10 and len(log.read_text().splitlines()) > 2 * len(said), result.stderr
    assert said[0].startswith("llama.cpp did not compile")
    assert any("no-such-header.h: No such file or directory" in line for line in said), result.stderr
    assert said[-1] == f"The whole log: {log}"
