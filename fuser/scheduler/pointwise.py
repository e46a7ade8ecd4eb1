"""pointwise: elementwise work over one iteration space, which one output spans."""
from __future__ import annotations

from .analysis import REDUCTION, RESIZE, FusionAnalysis, SubFusion, own_scheduler_reason


def structure_reason(sub: SubFusion) -> str | None:
    """Why the sub-fusion is not an elementwise one (shared by transpose and resize)."""
    if "pointwise" not in sub.memo:
        sub.memo["pointwise"] = _structure_reason(sub)
    return sub.memo["pointwise"]


def _structure_reason(sub: SubFusion) -> str | None:
    if REDUCTION in sub.kinds:
        return "has a reduction"
    why = own_scheduler_reason(sub)
    if why is not None:
        return why
    if sub.lookup_produced_inside():
        return "an index op's lookup tensor is computed in the segment, not read from memory"
    why = sub.index_size_reason() if sub.has_indexing else None
    if why is not None:
        return why
    if not sub.outputs:
        return "has no outputs"
    if sub.reference(sub.outputs, sub.concrete_classes()) is None:
        return "no output spans every axis the segment iterates over"
    if _reference(sub) is None:
        return "no output spans the segment such that every other output is written whole from it"
    return None


def _reference(sub: SubFusion) -> TensorView | None:
    """The first output that spans the segment and writes every other output whole (cached)."""
    if "pointwise_reference" not in sub.memo:
        need = sub.concrete_classes()
        sub.memo["pointwise_reference"] = next(
            (tv for tv in sub.outputs if need <= sub.covered_by(sub.classes_of(tv))
             and all(sub.written_whole(tv, o) for o in sub.outputs if o is not tv)), None)
    return sub.memo["pointwise_reference"]


def reject_reason(sub: SubFusion) -> str | None:
    if RESIZE in sub.kinds:
        return "has slice, pad or cat (the resize scheduler's)"
    return structure_reason(sub)


# --- heuristics and schedule -----------------------------------------------------------------

from dataclasses import dataclass  # noqa: E402

from fuser.ir import Fusion, ParallelType, TensorView  # noqa: E402

from .issue import UNROLL_ABOVE, issue_share  # noqa: E402
from .vectorize import vector_width  # noqa: E402

#: threads per block for small iteration spaces (more blocks to spread over the SMs)
THREADS = 128
#: threads per block once there are several waves of blocks
BIG_BLOCK = 512
#: rows a thread of a 2D schedule with vectors takes (see heuristics). H200, batch norm's
#: normalisation kernel, µs 1D / 2D at 1, 2, 4, 8 rows: bf16 [16384, 4096] 83.1 / 81.1,
#: 63.9, 64.2, 64.4; [8192, 8192] 82.9 / 83.1, 66.9, 64.8, 64.4; [2048, 16384] 42.0 / 42.2,
#: 33.8, 32.3, 32.6
BREAK_ROWS_UNROLL = 4
#: ... where the inputs along the rows weigh more than this many times the spanning
#: tensors' bytes per element (inf: never). `bench --sweep pointwise_rows_*`, whole batch
#: norm µs 1D / 2D: H100 bf16 (3 times) [16384, 4096] 157.6 / 151.1, [8192, 8192] 154.9 /
#: 148.2, [2048, 16384] 80.8 / 76.7, [2048, 1000] 27.8 / 26.2; fp32 (2 times) 275.9 / 279.0,
#: 275.6 / 278.0, 139.0 / 140.2 (H200: level), its 1D kernel at copy speed already
BREAK_ALONG_SHARE = 2.0


@dataclass(frozen=True)
class PointwiseParams:
    """How a pointwise kernel covers its iteration space: the reference's axes merged
    into one, split into vectors of `vectorize` elements, `threads` per block and
    `unroll` vectors per thread; blocks cover the rest. Hashable: part of the kernel's key."""

    vectorize: int
    unroll: int
    threads: int
    index_type: str
    #: 0: one merged axis over blocks (1D); k > 0: the reference's first k axes merged onto
    #: blockIdx.y and the rest onto blockIdx.x and threads (2D: a tensor broadcast along
    #: either side is indexed with no division)
    break_point: int = 0

    def __str__(self) -> str:
        return (f"PointwiseParams(vectorize={self.vectorize}, unroll={self.unroll}, threads={self.threads}, "
                f"index_type={self.index_type}, break_point={self.break_point})")


def inner_extent(info, ref: TensorView) -> int:
    """The extent of the reference's innermost non-broadcast axis: vector lanes never cross
    it (broadcast axes, expanded or not, are one element in the loop nest: an expanded
    output is stored once and expanded as a view)."""
    for i in reversed(ref.logical_no_reductions()):
        if not i.is_broadcast:
            return info.extent(i)
    return 1


def reference_tensor(sub: SubFusion) -> TensorView:
    """The output whose axes span the segment's iteration space (and from whose loop nest
    every other output is written whole)."""
    ref = _reference(sub)
    if ref is None:
        raise ValueError("no output spans the segment's iteration space and writes the others whole")
    return ref


#: largest grid y dimension
MAX_GRID_Y = 65535


def break_point(sub: SubFusion, ref: TensorView) -> int:
    """Where a 2D schedule splits the reference's axes: the innermost position k such that
    some input is broadcast on every axis before k and not after it (a bias), or the
    reverse (a per-row scale); 0 when no input has such a pattern."""
    find, id_of = sub.uf.find, sub.a.id_of
    ref_ids = ref.logical_no_reductions()
    n = len(ref_ids)
    if n < 2:
        return 0
    classes = [find(id_of(r)) if not r.is_broadcast else None for r in ref_ids]
    best = 0
    for tv in sub.inputs:
        have = {find(id_of(i)) for i in tv.logical_no_reductions() if not i.is_broadcast}
        present = [c is not None and c in have for c in classes]
        for k in range(1, n):
            outer, inner = present[:k], present[k:]
            if (not any(outer) and all(p or c is None for p, c in zip(inner, classes[k:])) and any(inner)) or \
               (not any(inner) and any(outer)):
                best = max(best, k)
    return best


def _row_bytes(sub: SubFusion, ref: TensorView, bp: int) -> tuple[int, int]:
    """(bytes per element of the inputs that vary only along the axes from `bp` on, of the
    inputs and outputs that span every axis of the reference)."""
    find, id_of = sub.uf.find, sub.a.id_of
    inner = {find(id_of(r)) for r in ref.logical_no_reductions()[bp:] if not r.is_broadcast}
    along = spanning = 0
    for tv in sub.inputs + sub.outputs:
        have = set(sub.classes_of(tv))
        if sub.spans(tv, ref):
            spanning += tv.dtype.itemsize
        elif tv in sub.inputs and have and have <= inner:
            along += tv.dtype.itemsize
    return along, spanning


def heuristics(sub: SubFusion, vectorizable: list[TensorView], inner_extent: int, total: int,
               ref: TensorView | None = None, max_vector: int = 16) -> PointwiseParams:
    """Vector width, unroll, block size and 2D break point for `total` elements whose
    innermost reference axis has `inner_extent` elements; `vectorizable` are the tensors
    read or written with vector accesses (their alignment and element sizes bound the
    width, as does `max_vector`: the elements every outer stride is a multiple of)."""
    info = sub.a.info
    width = vector_width(sub, vectorizable, inner_extent, max_vector)
    sms = info.device_limits.sm_count
    # 512 threads per block edge out 128 once there are several waves of blocks (an H100);
    # small tensors keep 128 threads so that more SMs get a block.
    threads = BIG_BLOCK if total // width >= sms * BIG_BLOCK * 4 else THREADS
    # 2D pays where 1D would index broadcast inputs element by element with a modulo; with
    # vectors the modulo is once per vector, and 1D measured faster on an H100 (bias + relu
    # on [16384, 8192] bf16: 179.1 us 1D, 179.9 us 2D) ...
    bp = break_point(sub, ref) if ref is not None else 0
    # ... except where the inputs along the rows (weights, a mean per column) weigh several
    # times the tensors spanning both axes per element: each thread takes BREAK_ROWS_UNROLL
    # rows and reads them once for all (1D reads them again with every vector: batch norm
    # bf16's normalisation ran at 76% of copy on an H200, 99% in 2D)
    rows_unroll = 1
    if bp and width > 1:
        along, spanning = _row_bytes(sub, ref, bp)
        if along > BREAK_ALONG_SHARE * spanning:
            rows_unroll = BREAK_ROWS_UNROLL
        else:
            bp = 0
    if bp:
        ids = ref.logical_no_reductions()
        inner = 1
        for i in ids[bp:]:
            inner *= info.extent(i)
        threads = THREADS if inner // width < BIG_BLOCK * 4 else threads
        # a row too short for a block of threads, or more rows than the y grid holds: 1D
        if inner < width * threads // 2 or -(-total // max(inner, 1) // rows_unroll) > MAX_GRID_Y:
            bp = 0
    return PointwiseParams(width, unroll(sub, vectorizable, total, width, threads) if not bp else rows_unroll, threads,
                           info.index_type, bp)


def unroll(sub: SubFusion, vectorizable: list[TensorView], total: int, width: int, threads: int) -> int:
    """Vectors per thread: 2 where the segment's arithmetic takes most of the issue slots
    the device's memory speed leaves per element (issue.py), and the grid still has
    several waves of blocks; else 1 (an H100 ran simple ops 1-4% slower per step above 1)."""
    limits = sub.a.info.device_limits
    if total // max(width * threads * 2, 1) < 4 * limits.sm_count:
        return 1
    moved = sum(tv.dtype.itemsize for tv in (vectorizable or sub.inputs + sub.outputs))
    return 2 if issue_share(sub.exprs, moved, limits) > UNROLL_ABOVE else 1


def schedule(fusion: Fusion, ref: TensorView, params: PointwiseParams, sub: SubFusion | None = None) -> None:
    """Schedule the reference: merge all axes innermost-first (so every suffix of axes is
    one merged axis: contiguous tensors index it directly), then split into
    [blocks, unroll, threads, vector] and bind them. `sub`: the whole fusion's analysis,
    when the caller has one."""
    from fuser.transform import merge, parallelize, split

    n = len(ref.domain.loop)
    bp = params.break_point
    if bp:
        # 2D: [outer..., inner...] -> [outer merged (BIDy), inner blocks (BIDx), threads, vector]
        for k in range(n - 2, bp - 1, -1):
            merge(ref, k, k + 1)
        for k in range(bp - 2, -1, -1):
            merge(ref, k, k + 1)
        split(ref, 1, params.vectorize)
        split(ref, 1, params.threads)
        # consecutive blocks take consecutive chunks of a row (x varies fastest), so the
        # rows' blocks stream through memory in order; rows go to y
        at = 0
        if params.unroll > 1:  # `unroll` rows a thread, reading the row-invariant inputs once
            split(ref, 0, params.unroll)
            parallelize(ref, 1, ParallelType.Unroll)
            at = 1
        parallelize(ref, 0, ParallelType.BIDy)
        parallelize(ref, at + 1, ParallelType.BIDx)
        parallelize(ref, at + 2, ParallelType.TIDx)
        parallelize(ref, at + 3, ParallelType.Vectorize)
        _propagate(fusion, ref, sub)
        return
    for k in range(n - 2, -1, -1):
        merge(ref, k, k + 1)
    if n == 0:
        return
    split(ref, 0, params.vectorize)
    split(ref, 0, params.threads)
    split(ref, 0, params.unroll)
    parallelize(ref, 0, ParallelType.BIDx)
    parallelize(ref, 1, ParallelType.Unroll)
    parallelize(ref, 2, ParallelType.TIDx)
    parallelize(ref, 3, ParallelType.Vectorize)
    _propagate(fusion, ref, sub)


def _propagate(fusion: Fusion, ref: TensorView, sub: SubFusion | None) -> None:
    """Give every other tensor the reference's loop structure (axes paired through the
    segment's axis classes) and inline everything into the one loop nest."""
    from fuser.transform import ReplayError, inline_most, propagate

    sub = sub if sub is not None else FusionAnalysis(fusion).whole()
    find, id_of = sub.uf.find, sub.a.id_of
    ref_ids = [i for i in ref.domain.logical if not i.is_reduction]
    by_class: dict[int, object] = {}
    for r in ref_ids:
        by_class.setdefault(find(id_of(r)), r)
    tvs = [tv for tv in fusion.tensors() if tv is not ref]
    mapping = {}
    for tv in tvs:
        m = {}
        for i in tv.logical_no_reductions():
            r = by_class.get(find(id_of(i)))
            if r is not None and r not in m:
                m[r] = i
        mapping[tv] = m
    try:
        propagate(ref, tvs, mapping)
    except ReplayError:
        pass  # loop domains of the others are for printing; indexing follows the reference
    inline_most([ref, *tvs])
