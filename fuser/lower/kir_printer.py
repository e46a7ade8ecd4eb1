"""FUSER_DUMP=kernel_ir: a lowered Kernel printed as readable kernel IR (not C).

The text follows nvFuser's `NVFUSER_DUMP=kernel_ir` in spirit: `%kernel name { ... }`, one
statement a line, `FOR`/`IF` blocks indented and closed by `ENDFOR`/`ENDIF`, tensors named
with their memory space (`T0_g`, `r0_l`, `smem_s`). It is a lowering-stage debugging aid:
`fuser.codegen` alone writes the C, so nothing here imports it.
"""
from __future__ import annotations

from typing import Any, Callable

from fuser.ir.domain import MemoryType, ParallelType
from fuser.ir.dtype import DataType
from fuser.ir.base import Scalar
from fuser.ir.exprs import BinaryOpType, UnaryOpType
from fuser.ir.infix import ATOM, INFIX, PREFIX
from fuser.ir.printer import constant_str, scalar_str

from . import kir

_INDENT = "  "



def _op_name(op: BinaryOpType | None) -> str:
    # None is how the reduction nodes say "combine Welford accumulators"
    return "welford" if op is None else op.value


def _dtype(dtype: DataType | None) -> str:
    return "index" if dtype is None else dtype.name


def _dim_name(ptype: ParallelType) -> str:
    # gridDim for block indices, blockDim for thread indices: the extent each index ranges over
    kind = "gridDim" if ptype.name.startswith("BID") else "blockDim"
    return f"{kind}.{ptype.name[-1]}"


class _Printer:
    """One walk over a kernel: remembers where each declared array lives, to name it."""

    def __init__(self) -> None:
        self.spaces: dict[str, MemoryType] = {}

    # --- expressions ---------------------------------------------------------------------------

    def expr(self, e: Any) -> str:
        return self._print(e)[0]

    def _print(self, e: Any) -> tuple[str, int]:
        rule = _EXPRS.get(type(e))
        if rule is None:
            raise TypeError(f"kernel_ir printer: no rule for expression node {type(e).__name__}")
        return rule(self, e)

    def operand(self, e: Any, at_least: int) -> str:
        text, prec = self._print(e)
        return text if prec >= at_least else f"({text})"

    def infix(self, op: BinaryOpType, lhs: Any, rhs: Any) -> tuple[str, int]:
        if op not in INFIX:
            return f"{op.value}({self.expr(lhs)}, {self.expr(rhs)})", ATOM
        symbol, prec = INFIX[op]
        # a right operand of equal precedence keeps its parentheses: a - (b - c)
        return f"{self.operand(lhs, prec)} {symbol} {self.operand(rhs, prec + 1)}", prec

    def name(self, name: str) -> str:
        space = self.spaces.get(name)
        return name if space is None else f"{name}_{space.value}"

    def exprs(self, es: Any) -> str:
        return ", ".join(self.expr(e) for e in es)

    # --- statements ----------------------------------------------------------------------------

    def stmts(self, stmts: list[Any], depth: int, out: list[str]) -> None:
        for s in stmts:
            rule = _STMTS.get(type(s))
            if rule is None:
                raise TypeError(f"kernel_ir printer: no rule for statement node {type(s).__name__}")
            rule(self, s, depth, out)


def _line(text: Callable[[_Printer, Any], str]) -> Callable[[_Printer, Any, int, list[str]], None]:
    """A statement rule that prints one line."""
    def rule(p: _Printer, s: Any, depth: int, out: list[str]) -> None:
        out.append(_INDENT * depth + text(p, s))
    return rule


def _decl(p: _Printer, d: kir.Decl) -> str:
    # arrays and shared values are buffers (named with their space, as tensors are); local
    # scalars are plain values
    if d.size is not None or d.space is not MemoryType.Local:
        p.spaces[d.name] = d.space
    kind = f"Welford<{_dtype(d.dtype)}>" if d.welford else _dtype(d.dtype)
    shape = f"[{d.size}]" if d.size is not None else ""
    extra = [d.space.name.lower()]
    if d.align is not None:
        extra.append(f"align={d.align}")
    if d.offset is not None:
        extra.append(f"dynamic offset={d.offset}")
    init = f" = {p.expr(d.init)}" if d.init is not None else ""
    return f"ALLOCATE {p.name(d.name)}: {kind}{shape} ({', '.join(extra)}){init}"


def _for(p: _Printer, s: kir.For, depth: int, out: list[str]) -> None:
    var = p.expr(s.var)
    notes = [] if s.dtype is None else [_dtype(s.dtype)]
    if s.unroll:
        notes.append("unroll")
    note = f" ({', '.join(notes)})" if notes else ""
    out.append(f"{_INDENT * depth}FOR {var} in 0 .. {p.expr(s.stop)}{note}:")
    p.stmts(s.body, depth + 1, out)
    out.append(f"{_INDENT * depth}ENDFOR {var}")


def _if(p: _Printer, s: kir.If, depth: int, out: list[str]) -> None:
    out.append(f"{_INDENT * depth}IF {p.expr(s.cond)}:")
    p.stmts(s.then, depth + 1, out)
    if s.orelse:
        out.append(f"{_INDENT * depth}ELSE:")
        p.stmts(s.orelse, depth + 1, out)
    out.append(f"{_INDENT * depth}ENDIF")


def _grid_item(p: _Printer, it: kir.GridItem) -> str:
    lanes = f" lanes={it.lanes}" if it.lanes > 1 else ""
    init = p.expr(it.init) if it.init is not None else "empty"
    return (f"{p.expr(it.acc)} = grid {_op_name(it.op)}<{_dtype(it.dtype)}>({p.expr(it.acc)}, init={init}) "
            f"work={p.expr(it.work)} smem={p.expr(it.smem)} slot={p.expr(it.slot)}{lanes}")


def _grid_reduce(p: _Printer, s: kir.GridReduce, depth: int, out: list[str]) -> None:
    where = "all blocks" if s.all_blocks else "last block"
    split = "row" if s.over_x else "column"
    out.append(f"{_INDENT * depth}GRID_REDUCE(semaphore={p.expr(s.semaphore)}, flag={p.expr(s.flag)}, "
               f"slots={s.slots}, writer={p.expr(s.writer)}, split by {split}, result in {where}):")
    out.extend(_INDENT * (depth + 1) + _grid_item(p, it) for it in s.items)
    out.append(f"{_INDENT * depth}ENDGRID_REDUCE")


def _block_allreduce(p: _Printer, s: kir.BlockAllReduce) -> str:
    extra = f", tile={s.tile}" if s.tile else ""
    keep = ("" if s.free_after else ", smem kept") + (", float counts" if s.float_counts else "")
    return (f"{p.expr(s.out)} = BLOCK_ALLREDUCE({_op_name(s.op)}<{_dtype(s.dtype)}>, {p.expr(s.value)}, "
            f"over={s.over.name}, smem={p.expr(s.smem)}{extra}{keep})")


def _column_partials(p: _Printer, s: kir.ColumnPartials) -> str:
    return (f"[{p.exprs(s.outs)}] = COLUMN_PARTIALS({s.op.value}<{_dtype(s.dtype)}>, init={p.expr(s.init)}, "
            f"works=[{p.exprs(s.works)}], parts={p.expr(s.parts)}, n_cols={p.expr(s.n_cols)}, "
            f"c0={p.expr(s.c0)}, width={p.expr(s.width)}, smem={p.expr(s.smem)})")


def _segment_partials(p: _Printer, s: kir.SegmentPartials) -> str:
    return (f"{p.expr(s.out)} = SEGMENT_PARTIALS({s.op.value}<{_dtype(s.dtype)}>, init={p.expr(s.init)}, "
            f"work={p.expr(s.work)}, n_cols={p.expr(s.n_cols)}, seg={p.expr(s.seg)}, col={p.expr(s.col)}, "
            f"blocks {p.expr(s.first)} .. {p.expr(s.last)})")


_STMTS: dict[type, Callable[[_Printer, Any, int, list[str]], None]] = {
    kir.Decl: _line(_decl),
    kir.Assign: _line(lambda p, s: f"{p.expr(s.lhs)} = {p.expr(s.rhs)}"),
    kir.For: _for,
    kir.If: _if,
    kir.VecLoad: _line(lambda p, s: f"{p.expr(s.dst)} = VECTOR_LOAD<{_dtype(s.dtype)}, {s.n}>({p.expr(s.src)})"
                       + (" (evict first)" if s.stream else "")),
    kir.VecStore: _line(lambda p, s: f"{p.expr(s.dst)} = VECTOR_STORE<{_dtype(s.dtype)}, {s.n}>({p.expr(s.src)})"),
    kir.Comment: _line(lambda p, s: f"# {s.text}"),
    kir.Sync: _line(lambda p, s: "BLOCK_SYNC"),
    kir.CpAsync: _line(lambda p, s: f"{p.expr(s.dst)} = CP_ASYNC<{s.bytes} bytes>({p.expr(s.src)})"),
    kir.CpAsyncCommit: _line(lambda p, s: "CP_ASYNC_COMMIT"),
    kir.CpAsyncWait: _line(lambda p, s: f"CP_ASYNC_WAIT(pending={s.pending})"),
    kir.Launder: _line(lambda p, s: f"LAUNDER({p.expr(s.var)})"),
    kir.WelfordMerge: _line(lambda p, s: f"{p.expr(s.acc)} = WELFORD_MERGE({p.expr(s.acc)}, mean={p.expr(s.mean)}, "
                                         f"m2={p.expr(s.m2)}, count={p.expr(s.count)})"),
    kir.BlockAllReduce: _line(_block_allreduce),
    kir.GridReduce: _grid_reduce,
    kir.GridSync: _line(lambda p, s: f"GRID_SYNC(semaphore={p.expr(s.semaphore)})"),
    kir.TileReduceY: _line(lambda p, s: f"{p.expr(s.array)} = TILE_REDUCE_Y({s.op.value}<{_dtype(s.dtype)}>, "
                                        f"{p.expr(s.array)}, smem={p.expr(s.smem)})"),
    kir.ColumnPartials: _line(_column_partials),
    kir.SegmentPartials: _line(_segment_partials),
}


def _param_name(prm: kir.Param) -> str:
    # a tensor parameter is a global buffer, named as nvFuser names one
    return f"{prm.name}_{MemoryType.Global.value}" if prm.kind == "tensor" else prm.name


def _unary(p: _Printer, e: kir.Unary) -> tuple[str, int]:
    if e.op is UnaryOpType.Cast:
        return f"cast<{_dtype(e.dtype)}->{_dtype(e.out)}>({p.expr(e.operand)})", ATOM
    return f"{e.op.value}({p.expr(e.operand)})", ATOM


def _random(p: _Printer, e: kir.Random) -> tuple[str, int]:
    return (f"rng_{e.op.value}<{_dtype(e.out)}>({p.exprs(e.params)}, seed={p.expr(e.seed)}, "
            f"offset={p.expr(e.offset)}, index={p.expr(e.index)}, state={e.state})"), ATOM


def _checked_index(p: _Printer, e: kir.CheckedIndex) -> tuple[str, int]:
    flag = f", flag={p.expr(e.flag)}" if e.flag is not None else ""
    wrap = ", wrap" if e.wrap else ""
    return (f"checked_index<{_dtype(e.dtype)}>({p.expr(e.value)}, extent={p.expr(e.extent)}, "
            f"check={e.check}{flag}{wrap})"), ATOM


_EXPRS: dict[type, Callable[[_Printer, Any], tuple[str, int]]] = {
    kir.Var: lambda p, e: (p.name(e.name), ATOM),
    kir.Param: lambda p, e: (_param_name(e), ATOM),
    kir.ParallelIndex: lambda p, e: (e.ptype.value, ATOM),
    kir.ParallelDim: lambda p, e: (_dim_name(e.ptype), ATOM),
    kir.ColumnWidth: lambda p, e: (f"column_width({p.expr(e.n_cols)}, {e.threads})", ATOM),
    kir.IntLit: lambda p, e: (str(e.value) if e.value >= 0 else f"({e.value})", ATOM),
    kir.Const: lambda p, e: (constant_str(e.value, e.dtype), ATOM),
    # the cast to the index type is C's concern; the reader sees the value
    kir.IndexCast: lambda p, e: p._print(e.value),
    kir.IndexBinary: lambda p, e: (
        (f"ceilDiv({p.expr(e.lhs)}, {p.expr(e.rhs)})", ATOM) if e.op is BinaryOpType.CeilDiv
        else p.infix(e.op, e.lhs, e.rhs)),
    kir.Not: lambda p, e: (f"!{p.operand(e.value, PREFIX)}", PREFIX),
    kir.Unary: _unary,
    kir.Binary: lambda p, e: p.infix(e.op, e.lhs, e.rhs),
    kir.Ternary: lambda p, e: (f"{e.op.value}({p.exprs(e.operands)})", ATOM),
    kir.ReciprocalScale: lambda p, e: (f"reciprocal_scale<{_dtype(e.out)}>({p.expr(e.value)})", ATOM),
    kir.Cast: lambda p, e: (f"cast<{_dtype(e.src)}->{_dtype(e.dst)}>({p.expr(e.value)})", ATOM),
    kir.Random: _random,
    kir.StateOr: lambda p, e: (f"state_or({p.expr(e.state)}[{e.k}], {p.expr(e.given)})", ATOM),
    kir.Element: lambda p, e: (f"{p.operand(e.base, ATOM)}[{p.expr(e.index)}]", ATOM),
    kir.AddressOf: lambda p, e: (f"&{p.operand(e.value, PREFIX)}", PREFIX),
    kir.Member: lambda p, e: (f"{p.operand(e.base, ATOM)}.{e.field}", ATOM),
    kir.CheckedIndex: _checked_index,
    kir.Lookup: lambda p, e: (f"lookup<{_dtype(e.dtype)}>({p.expr(e.base)}, offset={p.expr(e.offset)}, "
                              f"position={p.expr(e.position)}, stride={p.expr(e.stride)})", ATOM),
}


def _param_line(p: kir.Param) -> str:
    if p.pointer or p.kind in ("semaphore", "index_error"):
        base = {"semaphore": "UInt32", "index_error": "UInt64"}.get(p.kind, _dtype(p.dtype))
        kind = f"{'const ' if p.readonly else ''}{'Welford<' + base + '>' if p.welford else base}*"
    else:
        kind = _dtype(p.dtype)
    name = _param_name(p)
    src = p.source
    if p.kind == "stride":
        what = f"stride of T{src[0].name} dim {src[1]}"
    elif p.kind == "work":
        what = f"work ({src[0]} bytes a value, {src[1]} a block, {src[2]} beside)"
    elif p.kind == "tensor" and src is not None:
        what = f"tensor T{src.name}"
    elif p.kind in ("extent", "scalar") and src is not None:
        what = f"{p.kind} {scalar_str(src)}"
    else:
        what = p.kind
    return f"{name}: {kind}  [{what}]"


def _index_check_line(c: kir.IndexCheck) -> str:
    where = "device" if c.value is None else "host"
    extent = scalar_str(c.extent) if isinstance(c.extent, Scalar) else str(c.extent)
    return f"{c.op} reads {c.tensor} dim {c.dim} of extent {extent} (checked on the {where})"


def _extent(x: Any) -> str:
    return "?" if x is None else scalar_str(x) if isinstance(x, Scalar) else str(x)


def _launch_lines(k: kir.Kernel, grid: tuple[int, ...] | None, block: tuple[int, ...] | None) -> list[str]:
    # the kernel's own extents say the grid only for some schedulers; the launch plan always knows
    shape = (f"grid: {' x '.join(map(str, grid))} (this call)" if grid is not None
             else f"grid: {_extent(k.grid_extent)} x {_extent(k.grid_extent_y)}")
    threads = block if block is not None else (k.threads, k.threads_y)
    lines = [f"index type: {k.index_type}", f"block: {' x '.join(map(str, threads))}; {shape}"]
    flags = []
    if k.grid_sync:
        flags.append("grid sync" + (" (grid-strided)" if k.grid_strided else ""))
    elif k.grid_strided:  # (a row loop: its grid is capped at the resident blocks)
        flags.append("grid-strided")
    if k.min_blocks:
        flags.append(f"min blocks per SM {k.min_blocks}")
    if k.dynamic_smem:
        flags.append(f"dynamic smem {k.dynamic_smem} bytes")
    if k.waits_for_prior_grids:
        flags.append("waits for prior grids")
    if flags:
        lines.append("; ".join(flags))
    return lines


def kernel_ir_str(kernel: kir.Kernel, grid: tuple[int, ...] | None = None,
                  block: tuple[int, ...] | None = None) -> str:
    """The kernel IR of `kernel` as indented text, for FUSER_DUMP=kernel_ir (`grid`, `block`:
    a launch's shape, where one is planned)."""
    p = _Printer()
    out = [f"%kernel {kernel.name} {{"]
    out.extend(_INDENT + line for line in _launch_lines(kernel, grid, block))
    out.append(_INDENT + "params:")
    out.extend(_INDENT * 2 + _param_line(prm) for prm in kernel.params)
    if kernel.index_checks:
        out.append(_INDENT + "index checks:")
        out.extend(_INDENT * 2 + _index_check_line(c) for c in kernel.index_checks)
    out.append(_INDENT + "body:")
    p.stmts(kernel.body, 2, out)
    out.append("}")
    return "\n".join(out) + "\n"


def handled_nodes() -> frozenset[type]:
    """Every kernel IR node type this printer prints (for the test that none is missing)."""
    # Kernel, its IndexCheck entries and GridReduce's GridItem are printed by their owners
    return frozenset(_STMTS) | frozenset(_EXPRS) | {kir.Kernel, kir.IndexCheck, kir.GridItem}
