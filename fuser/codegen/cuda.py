"""Kernel IR -> CUDA C source."""
from __future__ import annotations

from fuser.lower.kir import Assign, Comment, Decl, For, If, Kernel, VecLoad, VecStore

from .ops import RUNTIME_HEADER_NAME

_INDEX_CTYPE = {"int32": "int", "int64": "long long"}


def kernel_source(kernel: Kernel) -> str:
    """The complete translation unit for `kernel` (it includes the runtime header)."""
    lines = [
        f'#include "{RUNTIME_HEADER_NAME}"',
        f"typedef {_INDEX_CTYPE[kernel.index_type]} nvfuser_index_t;",
        "",
        f'extern "C" __global__ void __launch_bounds__({max(kernel.threads, 1)}) {kernel.name}(',
    ]
    params = [f"    {p.ctype} {p.name}" for p in kernel.params]
    lines.append(",\n".join(params) + ") {")
    _stmts(kernel.body, lines, 1)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _stmts(stmts, out: list[str], depth: int) -> None:
    pad = "  " * depth
    for s in stmts:
        if isinstance(s, Decl):
            size = f"[{s.size}]" if s.size is not None else ""
            init = f" = {s.init}" if s.init is not None else ""
            out.append(f"{pad}{s.ctype} {s.name}{size}{init};")
        elif isinstance(s, Assign):
            out.append(f"{pad}{s.lhs} = {s.rhs};")
        elif isinstance(s, For):
            if s.unroll:
                out.append(f"{pad}#pragma unroll")
            out.append(f"{pad}for ({s.ctype} {s.var} = 0; {s.var} < {s.stop}; ++{s.var}) {{")
            _stmts(s.body, out, depth + 1)
            out.append(f"{pad}}}")
        elif isinstance(s, If):
            out.append(f"{pad}if ({s.cond}) {{")
            _stmts(s.body, out, depth + 1)
            out.append(f"{pad}}}")
        elif isinstance(s, VecLoad):
            out.append(f"{pad}fuser::load_vec<{s.ctype}, {s.n}>({s.dst}, {s.ptr});")
        elif isinstance(s, VecStore):
            out.append(f"{pad}fuser::store_vec<{s.ctype}, {s.n}>({s.ptr}, {s.src});")
        elif isinstance(s, Comment):
            out.append(f"{pad}// {s.text}")
        else:
            raise TypeError(f"no CUDA for {type(s).__name__}")
