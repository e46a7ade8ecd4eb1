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


def _nvcc(source: str, flags: tuple[str, ...], output: str) -> tuple[str, str]:
    """Compile one fd.cuda_code_for text for sm_90 with nvcc and `flags` into `output`:
    (what nvcc wrote to stderr, the output's text where it is text, else "")."""
    import subprocess
    import tempfile
    from pathlib import Path

    from fuser.driver.nvrtc import BASE_OPTIONS, nvcc_path

    with tempfile.TemporaryDirectory(prefix="fuser-nvcc-") as tmp:
        for name, text in runtime_headers().items():
            Path(tmp, name).write_text(text)
        Path(tmp, "k.cu").write_text(_unit([source]))
        err = subprocess.run([nvcc_path(), *flags, "-arch=sm_90", *BASE_OPTIONS, "-I", tmp, "-o", output, "k.cu"],
                             cwd=tmp, check=True, capture_output=True, text=True).stderr
        return err, Path(tmp, output).read_text() if output.endswith(".ptx") else ""


def ptx_of(source: str, options: tuple[str, ...] = ()) -> str:
    """The PTX nvcc makes of one fd.cuda_code_for text (one or more kernels) for sm_90:
    what the compiler fused into FMAs shows there."""
    return _nvcc(source, ("-ptx", *options), "k.ptx")[1]


def ptxas_usage(source: str) -> list[tuple[int, int]]:
    """(registers, bytes spilled) of each kernel of one fd.cuda_code_for text, as ptxas
    reports them compiling it for sm_90."""
    out = _nvcc(source, ("-cubin", "-Xptxas", "-v"), "k.cubin")[0]
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", out)]
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", out)]
    return list(zip(registers, spills))
