"""pointwise: elementwise work over one iteration space, which one output spans."""
from __future__ import annotations

from .analysis import ATEN, REDUCTION, RESIZE, FusionAnalysis, SubFusion


def structure_reason(sub: SubFusion) -> str | None:
    """Why the sub-fusion is not an elementwise one (shared by transpose and resize)."""
    if "pointwise" not in sub.memo:
        sub.memo["pointwise"] = _structure_reason(sub)
    return sub.memo["pointwise"]


def _structure_reason(sub: SubFusion) -> str | None:
    if REDUCTION in sub.kinds:
        return "has a reduction"
    if ATEN in sub.kinds:
        return "has an ATen-only op"
    if sub.lookup_produced_inside():
        return "an index op's lookup tensor is computed in the segment, not read from memory"
    if not sub.outputs:
        return "has no outputs"
    if sub.reference(sub.outputs, sub.concrete_classes()) is None:
        return "no output spans every axis the segment iterates over"
    return None


def reject_reason(sub: SubFusion) -> str | None:
    if RESIZE in sub.kinds:
        return "has slice, pad or cat (the resize scheduler's)"
    return structure_reason(sub)


# --- heuristics and schedule -----------------------------------------------------------------

from dataclasses import dataclass  # noqa: E402

from fuser.ir import Fusion, ParallelType, TensorView  # noqa: E402

#: threads per block for small iteration spaces (more blocks to spread over the SMs)
THREADS = 128
#: threads per block once there are several waves of blocks
BIG_BLOCK = 512
#: bytes one vector access moves (LDG.128)
VECTOR_BYTES = 16


@dataclass(frozen=True)
class PointwiseParams:
    """How a pointwise kernel covers its iteration space: the reference's axes merged
    into one, split into vectors of `vectorize` elements, `threads` per block and
    `unroll` vectors per thread; blocks cover the rest. Hashable: part of the kernel's key."""

    vectorize: int
    unroll: int
    threads: int
    index_type: str

    def __str__(self) -> str:
        return (f"PointwiseParams(vectorize={self.vectorize}, unroll={self.unroll}, threads={self.threads}, "
                f"index_type={self.index_type})")


def reference_tensor(sub: SubFusion) -> TensorView:
    """The output whose axes span the segment's iteration space."""
    ref = sub.reference(sub.outputs, sub.concrete_classes())
    if ref is None:
        raise ValueError("no output spans the segment's iteration space")
    return ref


def heuristics(sub: SubFusion, vectorizable: list[TensorView], inner_extent: int, total: int) -> PointwiseParams:
    """Vector width, unroll and block size for `total` elements whose innermost reference
    axis has `inner_extent` elements; `vectorizable` are the tensors read or written with
    vector accesses (their alignment and element sizes bound the width)."""
    info = sub.a.info
    width = 1
    if vectorizable:
        itemsize = max(tv.dtype.itemsize for tv in vectorizable)
        width = max(1, VECTOR_BYTES // itemsize)
        for tv in vectorizable:
            align = info.alignment.get(tv)
            if align is not None:
                width = min(width, max(1, align // tv.dtype.itemsize))
        while width > 1 and inner_extent % width:
            width //= 2
    sms = info.device_limits.sm_count
    # Measured on an H100 (GELU, casts, where, bias add at 134M elements): one vector per
    # thread beats unrolling 2-8 vectors (1-4% slower each step), and 512 threads per block
    # edge out 128 once there are several waves of blocks; small tensors keep 128 threads
    # so that more SMs get a block.
    threads = BIG_BLOCK if total // width >= sms * BIG_BLOCK * 4 else THREADS
    return PointwiseParams(width, 1, threads, info.index_type)


def schedule(fusion: Fusion, ref: TensorView, params: PointwiseParams) -> None:
    """Schedule the reference: merge all axes innermost-first (so every suffix of axes is
    one merged axis: contiguous tensors index it directly), then split into
    [blocks, unroll, threads, vector] and bind them."""
    from fuser.transform import merge, parallelize, split

    n = len(ref.domain.loop)
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
    _propagate(fusion, ref)


def _propagate(fusion: Fusion, ref: TensorView) -> None:
    """Give every other tensor the reference's loop structure (axes paired through the
    segment's axis classes) and inline everything into the one loop nest."""
    from fuser.transform import ReplayError, inline_most, propagate

    sub = FusionAnalysis(fusion).whole()
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
