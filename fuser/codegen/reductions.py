"""Kernel IR reductions -> calls of fuser_reduction.cuh's block and grid reductions and
Welford helpers (the node docstrings in `fuser.lower.kir` say what each does)."""
from __future__ import annotations

from fuser.ir.domain import ParallelType
from fuser.ir.dtype import DataType
from fuser.ir.exprs import BinaryOpType
from fuser.lower.kir import (BlockAllReduce, ColumnPartials, GridReduce, GridSync, SegmentPartials, TileReduceY,
                             WelfordMerge)

from .expr import expr
from .ops import ctype, emit_binary


def welford_ctype(dtype: DataType) -> str:
    """The C++ type of a Welford accumulator of `dtype` values."""
    return f"fuser::Welford<{ctype(dtype)}>"


def combine(op: BinaryOpType | None, dtype: DataType) -> str:
    """The combining functor: a lambda applying `op` to two `dtype` values as the Fusion IR
    does, or Welford's combination."""
    if op is None:
        return "fuser::WelfordOp()"
    t = ctype(dtype)
    return f"[]({t} a, {t} b) {{ return {emit_binary(op, 'a', 'b', dtype, dtype, dtype)}; }}"


def welford_merge(s: WelfordMerge) -> list[str]:
    return [f"fuser::welford_merge({expr(s.acc)}, {expr(s.mean)}, {expr(s.m2)}, {expr(s.count)});"]


def block_allreduce(s: BlockAllReduce) -> list[str]:
    which = {ParallelType.TIDx: "x", ParallelType.TIDy: "y"}[s.over]
    if s.bdy and s.over != ParallelType.TIDy:
        raise ValueError("a block reduction over threadIdx.x takes no fixed blockDim.y")
    # template arguments: <Free> where it is false, <Free, BDX> where blockDim.x is fixed,
    # <Free, BDX, BDY> where blockDim.y is (BDX 0: read at run time)
    args = ["true" if s.free_after else "false", str(s.bdx), str(s.bdy)][:3 if s.bdy else 2 if s.bdx else 1]
    free = "" if args == ["true"] else f"<{', '.join(args)}>"
    if s.tile:
        if s.over != ParallelType.TIDy or s.out != s.value:
            raise ValueError("a tile block reduction combines a register array in place over threadIdx.y")
        return [f"fuser::block_allreduce_tile_y{free}({expr(s.value)}, {combine(s.op, s.dtype)}, {expr(s.smem)});"]
    if s.float_counts:
        if s.op is not None or s.over != ParallelType.TIDx:
            raise ValueError("float counts are for Welford accumulators combined over threadIdx.x")
        return [f"{expr(s.out)} = fuser::block_welford_x{free}({expr(s.value)}, {expr(s.smem)});"]
    return [f"{expr(s.out)} = fuser::block_allreduce_{which}{free}({expr(s.value)}, {combine(s.op, s.dtype)}, "
            f"{expr(s.smem)});"]


def grid_reduce(s: GridReduce) -> list[str]:
    lines = [f"fuser::grid_write{'_tile' if i.lanes > 1 else ''}({expr(i.acc)}, {expr(i.work)}, {expr(i.slot)}, "
             f"{s.slots}, {expr(s.writer)});" for i in s.items]
    if s.all_blocks:
        lines.append(f"fuser::grid_sync({expr(s.semaphore)});")
    else:
        lines.append(f"if (!fuser::grid_arrive({expr(s.semaphore)}, &{expr(s.flag)})) return;")
    over = "true" if s.over_x else "false"
    for i in s.items:
        init = f"{welford_ctype(i.dtype)}{{}}" if i.op is None else expr(i.init)
        if i.lanes > 1:
            if s.over_x:
                raise ValueError("a tile grid reduction combines columns (over gridDim.y and threadIdx.y)")
            lines.append(f"fuser::grid_finish_tile_y({expr(i.acc)}, {combine(i.op, i.dtype)}, {init}, {expr(i.work)}, "
                         f"{expr(i.slot)}, {s.slots}, {expr(i.smem)});")
            continue
        lines.append(f"{expr(i.acc)} = fuser::grid_finish<{over}>({combine(i.op, i.dtype)}, {init}, {expr(i.work)}, "
                     f"{expr(i.slot)}, {s.slots}, {expr(i.smem)});")
    return lines


def grid_sync(s: GridSync) -> list[str]:
    return [f"fuser::grid_sync({expr(s.semaphore)});"]


def column_partials(s: ColumnPartials) -> list[str]:
    t, k = ctype(s.dtype), len(s.works)
    return ["{",
            f"  const {t}* const cp_work[{k}] = {{{', '.join(expr(w) for w in s.works)}}};",
            f"  {t} cp_out[{k}];",
            f"  fuser::column_partials<{k}>(cp_out, {combine(s.op, s.dtype)}, {expr(s.init)}, cp_work, "
            f"{expr(s.parts)}, {expr(s.n_cols)}, {expr(s.c0)}, {expr(s.width)}, {expr(s.smem)});",
            *(f"  {expr(o)} = cp_out[{i}];" for i, o in enumerate(s.outs)),
            "}"]


def segment_partials(s: SegmentPartials) -> list[str]:
    return [f"{expr(s.out)} = fuser::segment_partials({combine(s.op, s.dtype)}, {expr(s.init)}, {expr(s.work)}, "
            f"{expr(s.n_cols)}, {expr(s.seg)}, {expr(s.col)}, {expr(s.first)}, {expr(s.last)});"]


def tile_reduce_y(s: TileReduceY) -> list[str]:
    return [f"fuser::block_reduce_tile_y({expr(s.array)}, {combine(s.op, s.dtype)}, {expr(s.smem)});"]
