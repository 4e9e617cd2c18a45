"""The pinned SGLang and KTransformers wheels, downloaded but never installed.

They cannot be installed here (CUDA-only kernels, and sglang-kt would replace sglang), so tests
read their sources out of the wheel files. CI fetches them once with DOWNLOAD into WHEELS_DIR.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

PINNED = {"sglang": "0.5.23", "sglang_kt": "0.7.2", "ktransformers": "0.7.2", "kt_kernel": "0.7.2"}
WHEELS_DIR = Path(os.environ.get("ANYCHAT_RUNTIME_WHEELS") or Path(__file__).resolve().parent.parent / ".cache" / "runtime-wheels")
DOWNLOAD = (
    f"pip download --no-deps -d {WHEELS_DIR} sglang==0.5.23 sglang-kt==0.7.2 ktransformers==0.7.2 kt-kernel==0.7.2"
)


def wheel(name: str) -> zipfile.ZipFile:
    """The pinned wheel of ``name`` (its file name's first part), or a skip that says how to get it."""
    found = sorted(WHEELS_DIR.glob(f"{name}-{PINNED[name]}-*.whl"))
    if not found:
        pytest.skip(f"the {name} {PINNED[name]} wheel is not in {WHEELS_DIR}; fetch the wheels with: {DOWNLOAD}")
    return zipfile.ZipFile(found[0])


def source(name: str, path: str) -> str:
    with wheel(name) as archive:
        return archive.read(path).decode("utf-8")
