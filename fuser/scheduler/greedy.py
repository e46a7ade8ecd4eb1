"""greedy: a scatter (torch.scatter) with the elementwise work that produces its operands.

nvFuser schedules scatter with its greedy scheduler; here that is the scheduler of scatter
segments. A segment holds one ScatterOp and, optionally, elementwise producers of its
operands (`arg`, `index`, `src`) used nowhere else: a scalar `src` (a `full`), casts and
math on the inputs. Its kernel (fuser.lower.scatter) copies `arg` into the output, waits
for the whole grid, then writes `src` at the positions `index` gives along `dim`.
"""
from __future__ import annotations

from dataclasses import dataclass

from fuser.ir import (
    BinaryOp,
    BroadcastOp,
    ExpandOp,
    Expr,
    FullOp,
    IotaOp,
    LoadStoreOp,
    RNGOp,
    ScatterOp,
    SqueezeOp,
    TensorView,
    TernaryOp,
    UnaryOp,
)
from fuser.ir.exprs import LoadStoreOpType

from .analysis import POINTWISE, SCALAR, SCATTER, VIEW, SubFusion
from .vectorize import VECTOR_BYTES, vector_width

#: elementwise producers the kernel computes where it reads them: each operand axis is the
#: output axis at its position (broadcast axes aside), so an index map passes through
PRODUCERS = (UnaryOp, BinaryOp, TernaryOp, LoadStoreOp, BroadcastOp, SqueezeOp, ExpandOp, FullOp, IotaOp, RNGOp)
#: producers whose operands are read at the very element they compute (no axis moves):
#: a copy through them can index every tensor by the output's linear index
_SAME_ELEMENT = (UnaryOp, BinaryOp, TernaryOp, LoadStoreOp, FullOp)


def the_scatter(sub: SubFusion) -> ScatterOp | None:
    """The segment's one ScatterOp (None: none, or several)."""
    found = [e for e in sub.exprs if isinstance(e, ScatterOp)]
    return found[0] if len(found) == 1 else None


def reject_reason(sub: SubFusion) -> str | None:
    if SCATTER not in sub.kinds:
        return "has no scatter"
    e = the_scatter(sub)
    if e is None:
        return "has several scatters"
    others = sub.kinds - {SCATTER, POINTWISE, VIEW, SCALAR}
    if others:
        return f"holds {', '.join(sorted(others))} work besides the scatter"
    if sub.has_indexing:
        return "has an index op (select, index_select, gather) besides the scatter"
    out = e.outputs[0]
    if sub.outputs != [out]:
        return "a tensor besides the scatter's result leaves the segment"
    members = set(sub.expr_ids)
    if any(k in members for k in sub.a.uses.get(out, ())):
        return "the scatter's result is used inside the segment"
    for p in sub.exprs:
        if p is e:
            continue
        why = producer_reason(p)
        if why is not None:
            return why
    return None


def producer_reason(e: Expr) -> str | None:
    """Why `e` cannot be computed where the scatter kernel reads its result (None: it can;
    scalar arithmetic always can: the kernel evaluates it where it is used)."""
    if not any(isinstance(o, TensorView) for o in e.outputs):
        return None
    if not isinstance(e, PRODUCERS):
        return f"has {type(e).__name__}, which a scatter kernel does not compute"
    outs = [o for o in e.outputs if isinstance(o, TensorView)]
    if len(outs) != 1:
        return f"{type(e).__name__} has several tensor outputs"
    if isinstance(e, LoadStoreOp) and e.op_type is not LoadStoreOpType.Set:
        return f"has a {e.op_type.name} copy"
    if outs[0].domain.has_root:
        return f"{type(e).__name__} moves axes (a permute or reshape)"
    return None


# --- heuristics ----------------------------------------------------------------------------------

#: threads per block: the kernel is a grid-strided copy and a scattered write, both bound by
#: memory; 256 threads keep several blocks per SM resident for the grid barrier
THREADS = 256
#: linear indices stay this far below the int32 limit: a grid-strided loop's last round
#: computes indices up to one grid of threads past its end
_INT32_LIMIT = 2**31 - 1 - 2**24


@dataclass(frozen=True)
class ScatterParams:
    """How a scatter kernel runs: `threads` per block; the copy of `arg` into the output is
    `flat` (every tensor it reads is laid out like the output: indexed by the output's
    linear index, `vectorize` elements per access) or indexed axis by axis. Hashable: part
    of the kernel's key."""

    threads: int
    vectorize: int
    flat: bool
    index_type: str

    def __str__(self) -> str:
        return (f"ScatterParams(threads={self.threads}, vectorize={self.vectorize}, flat={self.flat}, "
                f"index_type={self.index_type})")


def copy_inputs(e: ScatterOp) -> list[TensorView] | None:
    """The segment inputs the copy of `arg` reads, when it reads each at the element it
    writes (only same-element producers on the way); None otherwise."""
    found: dict[TensorView, None] = {}
    stack = [e.inputs[0]]
    seen: set[TensorView] = set()
    while stack:
        tv = stack.pop()
        if tv in seen:
            continue
        seen.add(tv)
        d = tv.definition
        if tv.is_fusion_input or d is None:
            found[tv] = None
            continue
        if not isinstance(d, _SAME_ELEMENT):
            return None
        stack.extend(v for v in d.inputs if isinstance(v, TensorView))
    return list(found)


def _row_major(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether `strides` lay `shape` out densely in row-major order (size-1 axes aside)."""
    acc = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != acc:
            return False
        acc *= n
    return True


def heuristics(sub: SubFusion) -> ScatterParams:
    """Block size, copy layout and vector width for the call `sub.a.info` describes."""
    info = sub.a.info
    e = the_scatter(sub)
    if e is None:
        raise ValueError("the segment has no single scatter")
    out, index = e.outputs[0], e.inputs[1]
    shape = info.shape(out)
    numel = info.numel(out)
    leaves = copy_inputs(e)
    alloc = out.domain.allocation
    flat = (leaves is not None and (alloc is None or list(alloc) == list(out.logical))
            and all(info.sizes.get(tv) == shape and _row_major(shape, info.strides[tv]) for tv in leaves))
    width = vector_width(sub, [out, *leaves], numel, VECTOR_BYTES) if flat else 1
    index_type = info.index_type
    if max(numel, info.numel(index)) > _INT32_LIMIT:
        index_type = "int64"
    return ScatterParams(THREADS, width, flat, index_type)
