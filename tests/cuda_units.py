"""Compiling many generated kernels at once: one translation unit (each kernel renamed, the
runtime headers and index typedef once), one nvcc call, for the CPU codegen tests."""
from __future__ import annotations

import re
from typing import Iterable

from fuser.codegen.ops import runtime_headers
from fuser.driver.nvrtc import compile_cubin_nvcc

_HEADERS = ('#include "fuser_runtime.cuh"\n', '#include "fuser_reduction.cuh"\n', '#include "fuser_indexing.cuh"\n')


def compile_all(sources: Iterable[str]) -> bytes:
    """The CUBIN of every kernel in `sources` (each a fd.cuda_code_for text, which may hold
    several kernels), compiled together for sm_90."""
    return compile_cubin_nvcc(_unit(sources), arch="sm_90", headers=runtime_headers())


def _unit(sources: Iterable[str]) -> str:
    units: list[str] = []
    for n, src in enumerate(sources):
        for k, one in enumerate(src.split(_HEADERS[0])[1:]):
            for h in _HEADERS[1:]:
                one = one.replace(h, "")
            one = one.replace("typedef", "// typedef", 1) if units else one
            units.append(re.sub(r"\bfuser_(pointwise|reduction|inner_outer|transpose|scatter)\b", f"k{n}_{k}", one))
    return "".join(_HEADERS) + "\n".join(units)


def ptx_of(source: str, options: tuple[str, ...] = ()) -> str:
    """The PTX nvcc makes of one fd.cuda_code_for text (one or more kernels) for sm_90:
    what the compiler fused into FMAs shows there."""
    import subprocess
    import tempfile
    from pathlib import Path

    from fuser.driver.nvrtc import BASE_OPTIONS, nvcc_path

    with tempfile.TemporaryDirectory(prefix="fuser-ptx-") as tmp:
        for name, text in runtime_headers().items():
            Path(tmp, name).write_text(text)
        Path(tmp, "k.cu").write_text(_unit([source]))
        subprocess.run([nvcc_path(), "-ptx", "-arch=sm_90", *BASE_OPTIONS, *options, "-I", tmp, "-o", "k.ptx", "k.cu"],
                       cwd=tmp, check=True, capture_output=True)
        return Path(tmp, "k.ptx").read_text()


def ptxas_usage(source: str) -> list[tuple[int, int]]:
    """(registers, bytes spilled) of each kernel of one fd.cuda_code_for text, as ptxas
    reports them compiling it for sm_90."""
    import subprocess
    import tempfile
    from pathlib import Path

    from fuser.driver.nvrtc import BASE_OPTIONS, nvcc_path

    with tempfile.TemporaryDirectory(prefix="fuser-ptxas-") as tmp:
        for name, text in runtime_headers().items():
            Path(tmp, name).write_text(text)
        Path(tmp, "k.cu").write_text(_unit([source]))
        out = subprocess.run([nvcc_path(), "-cubin", "-arch=sm_90", *BASE_OPTIONS, "-Xptxas", "-v", "-I", tmp,
                              "-o", "k.cubin", "k.cu"], cwd=tmp, check=True, capture_output=True, text=True).stderr
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", out)]
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", out)]
    return list(zip(registers, spills))
