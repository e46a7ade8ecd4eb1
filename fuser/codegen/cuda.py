"""Kernel IR -> CUDA C source: the kernel, its parameters and its statements."""
from __future__ import annotations

import dataclasses
from typing import Any

from fuser.ir.domain import MemoryType
from fuser.lower.kir import (
    Assign,
    BlockAllReduce,
    ColumnPartials,
    Comment,
    CpAsync,
    CpAsyncCommit,
    CpAsyncWait,
    Decl,
    For,
    GridReduce,
    GridSync,
    If,
    Kernel,
    Param,
    Random,
    Stmt,
    Sync,
    Launder,
    SegmentPartials,
    TileReduceY,
    VecLoad,
    VecStore,
    WelfordMerge,
)

from .contraction import round_shared_products
from .expr import INDEX_TYPE, expr, value_ctype
from .ops import RANDOM_HEADER_NAME, RUNTIME_HEADER_NAME, ctype
from .reductions import (block_allreduce, column_partials, grid_reduce, grid_sync, segment_partials, tile_reduce_y,
                         welford_ctype, welford_merge)

#: the block's dynamic shared memory, which arrays with a Decl.offset point into
DYNAMIC_SMEM = "fuser_dynamic_smem"
_INDEX_CTYPE = {"int32": "int", "int64": "long long"}
#: statements printed as calls of the reduction helpers, by kind
_CALLS = {
    BlockAllReduce: block_allreduce,
    GridReduce: grid_reduce,
    WelfordMerge: welford_merge,
    GridSync: grid_sync,
    ColumnPartials: column_partials,
    SegmentPartials: segment_partials,
    TileReduceY: tile_reduce_y,
}


def kernel_source(kernel: Kernel) -> str:
    """The complete translation unit for `kernel` (it includes the runtime header)."""
    states = random_states(kernel.body)
    includes = [*kernel.includes, *([RANDOM_HEADER_NAME] if states and RANDOM_HEADER_NAME not in kernel.includes else [])]
    lines = [
        f'#include "{RUNTIME_HEADER_NAME}"',
        *(f'#include "{h}"' for h in includes),
        f"typedef {_INDEX_CTYPE[kernel.index_type]} {INDEX_TYPE};",
        "",
        f'extern "C" __global__ void __launch_bounds__({_launch_bounds(kernel)}) {kernel.name}(',
    ]
    lines.append(",\n".join(f"    {param_decl(p)}" for p in kernel.params) + ") {")
    # each RNG op's per-thread cache of its last Philox block, seen by every scope
    lines.extend(f"  fuser::Philox {name};" for name in states)
    if kernel.dynamic_smem:
        lines.append(f"  extern __shared__ __align__(16) unsigned char {DYNAMIC_SMEM}[];")
    if kernel.waits_for_prior_grids:
        lines.append("  fuser::wait_for_prior_grids();")
    statements(round_shared_products(kernel.body), lines, 1)
    lines.append("}")
    return "\n".join(lines) + "\n"


def random_states(stmts: list[Stmt]) -> list[str]:
    """The Philox caches (`Random.state`) the expressions of `stmts` use, in order of use."""
    found: dict[str, None] = {}

    def visit(x: Any) -> None:
        if isinstance(x, Random):
            found.setdefault(x.state, None)
        if isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif dataclasses.is_dataclass(x) and not isinstance(x, (type, Param)):
            for f in dataclasses.fields(x):
                visit(getattr(x, f.name))

    visit(stmts)
    return list(found)


def _launch_bounds(kernel: Kernel) -> str:
    threads = max(kernel.threads * kernel.threads_y, 1)
    return f"{threads}, {kernel.min_blocks}" if kernel.min_blocks else str(threads)


def param_decl(p: Param) -> str:
    """`p` as a kernel parameter declaration."""
    if p.kind == "semaphore":
        return f"unsigned int* __restrict__ {p.name}"
    if p.kind == "index_error":
        return f"unsigned long long* __restrict__ {p.name}"
    if p.pointer:
        const = "const " if p.readonly else ""
        t = welford_ctype(p.dtype) if p.welford else value_ctype(p.dtype)
        return f"{const}{t}* __restrict__ {p.name}"
    return f"{value_ctype(p.dtype)} {p.name}"


def statements(stmts: list[Stmt], out: list[str], depth: int) -> None:
    """Append the lines of `stmts`, indented `depth` levels, to `out`."""
    pad = "  " * depth
    for s in stmts:
        if isinstance(s, Decl):
            out.append(pad + _decl(s))
        elif isinstance(s, Assign):
            out.append(f"{pad}{expr(s.lhs)} = {expr(s.rhs)};")
        elif isinstance(s, For):
            if s.unroll:
                out.append(f"{pad}#pragma unroll")
            v = expr(s.var)
            out.append(f"{pad}for ({value_ctype(s.dtype)} {v} = 0; {v} < {expr(s.stop)}; ++{v}) {{")
            statements(s.body, out, depth + 1)
            out.append(f"{pad}}}")
        elif isinstance(s, If):
            out.append(f"{pad}if ({expr(s.cond)}) {{")
            statements(s.then, out, depth + 1)
            if s.orelse:
                out.append(f"{pad}}} else {{")
                statements(s.orelse, out, depth + 1)
            out.append(f"{pad}}}")
        elif isinstance(s, VecLoad):
            load = "load_vec_stream" if s.stream else "load_vec"
            out.append(f"{pad}fuser::{load}<{ctype(s.dtype)}, {s.n}>({expr(s.dst)}, {expr(s.src)});")
        elif isinstance(s, VecStore):
            store = "store_vec_stream" if s.stream else "store_vec"
            out.append(f"{pad}fuser::{store}<{ctype(s.dtype)}, {s.n}>({expr(s.dst)}, {expr(s.src)});")
        elif isinstance(s, Comment):
            out.append(f"{pad}// {s.text}")
        elif isinstance(s, CpAsync):
            out.append(f"{pad}fuser::cp_async<{s.bytes}>({expr(s.dst)}, {expr(s.src)});")
        elif isinstance(s, CpAsyncCommit):
            out.append(f"{pad}fuser::cp_async_commit();")
        elif isinstance(s, CpAsyncWait):
            out.append(f"{pad}fuser::cp_async_wait<{s.pending}>();")
        elif isinstance(s, Launder):
            out.append(f"{pad}fuser::launder({expr(s.var)});")
        elif isinstance(s, Sync):
            out.append(f"{pad}__syncthreads();")
        elif type(s) in _CALLS:
            out.extend(pad + line for line in _CALLS[type(s)](s))
        else:
            raise TypeError(f"no CUDA for {type(s).__name__}")


def _decl(d: Decl) -> str:
    size = f"[{d.size}]" if d.size is not None else ""
    t = welford_ctype(d.dtype) if d.welford else value_ctype(d.dtype)
    text = f"{t} {d.name}{size}"
    if d.welford and d.space is MemoryType.Local:
        return f"{text} = {{}};"  # an empty accumulator: zero mean, M2 and count
    if d.space is MemoryType.Shared:
        if d.init is not None:
            raise ValueError(f"shared {d.name}: shared memory cannot be initialised where it is declared")
        if d.offset is not None:
            return f"{t}* {d.name} = reinterpret_cast<{t}*>({DYNAMIC_SMEM} + {d.offset});"
        return f"__shared__ __align__({d.align}) {text};" if d.align else f"__shared__ {text};"
    if d.space is not MemoryType.Local:
        raise ValueError(f"{d.name}: a kernel declares local or shared variables, not {d.space.name}")
    return f"{text} = {expr(d.init)};" if d.init is not None else f"{text};"
