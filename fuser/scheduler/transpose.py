"""transpose: elementwise work whose inputs and outputs are laid out with different
innermost axes, staged through shared-memory tiles.

The segment's tensors fall into layout groups by the axis class of their innermost stored
axis. The two heaviest groups (bytes per element) define the tile: group 1's innermost axis
A and group 2's innermost axis B. A block takes a `tile_a` x `tile_b` tile of (A, B) at one
index of the remaining ("batch") axes. Group-1 tensors are read and written directly with
threads (and vectors) along A, which is where the elementwise work runs; group-2 tensors
spanning A go through shared memory: inputs are read with threads along B into the tile and
read back along A, outputs the reverse. Every global access is then along its tensor's
innermost axis. Tensors of neither group (or lacking A), and staged ones past what 48 KB of
shared memory holds, are accessed where the work runs.

`reject_reason` turns down what the kernel cannot compute (`lowering_reason`) and where
tiles do not pay off (one layout, nothing to stage, an innermost extent under 32). The
segmenter asks it about a segment within the complete fusion, where tensors a segment
will recompute (forwarded chains) still count among its outputs; the kernel of an accepted
segment is therefore built from `lowering_reason` and `layout(fallback=True)` alone, which
give a kernel for any elementwise segment over at least two axes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    ExpandOp,
    Fusion,
    FullOp,
    IotaOp,
    IterDomain,
    LoadStoreOp,
    ParallelType,
    ReductionOp,
    RNGOp,
    Scalar,
    SqueezeOp,
    TensorView,
    TernaryOp,
    UnaryOp,
)

from . import pointwise
from .analysis import RESHAPE, RESIZE, SubFusion, is_trivial_reduction
from .runtime_info import SchedulerRuntimeInfo
from .vectorize import stride_alignment, vector_width, vectorizable

#: both innermost extents must span at least one tile edge for tiling to pay off
MIN_TRANSPOSE_EXTENT = 32
#: statically declared shared memory a block may use (more needs dynamic shared memory)
STATIC_SMEM_BYTES = 48 * 1024
#: the tile edges the heuristics choose from, largest first
TILES = (64, 32)
#: bytes of each tensor a thread handles per tile (the tile over the block's threads), as
#: 4 to 16 elements: 16 of 4 bytes keep 64-thread blocks (32 x 32 tiles) clear of spills,
#: which 16 of 8 bytes are not (ptxas caps small blocks' registers for occupancy)
BYTES_PER_THREAD = 64
#: largest grid y dimension (the batch); more batch indices loop
MAX_GRID_Y = 65535
#: the tile edge is lowered to the smallest one while the largest gives fewer blocks than
#: this many per SM
MIN_BLOCKS_PER_SM = 4

#: integer extent arithmetic the kernel's index type does (as the indexer's)
_EXTENT_OPS = frozenset({BinaryOpType.Add, BinaryOpType.Sub, BinaryOpType.Mul, BinaryOpType.Div,
                         BinaryOpType.CeilDiv, BinaryOpType.Max, BinaryOpType.Min})
#: the expressions a transpose kernel computes on its tile (the rest it cannot lower)
_TILE_EXPRS = (UnaryOp, BinaryOp, TernaryOp, BroadcastOp, ExpandOp, SqueezeOp, LoadStoreOp, FullOp, IotaOp, RNGOp)


# --- layout groups -------------------------------------------------------------------------------


@dataclass
class Layout:
    """The segment's two layout groups and the tile they define.

    `axis_a` / `axis_b` are the reference's axes of classes A (group 1's innermost: the
    work runs with threads along it) and B (group 2's innermost); `batch` its other
    non-broadcast axes, outermost first. `staged` tensors (those of group 2 spanning A) go
    through a shared-memory tile; every other tensor is accessed where the work runs."""

    ref: TensorView
    class_a: int
    class_b: int
    axis_a: IterDomain
    axis_b: IterDomain
    batch: list[IterDomain]
    group1: list[TensorView]
    group2: list[TensorView]
    staged: list[TensorView]


def _innermost(tv: TensorView) -> IterDomain | None:
    """The innermost stored non-broadcast axis (memory order for fusion inputs and
    outputs, logical order for intermediates: the runtime lays those out densely)."""
    order = tv.allocation if tv.is_fusion_input or tv.is_fusion_output else tv.logical_no_reductions()
    ids = [i for i in order if not i.is_broadcast and not i.is_reduction]
    return ids[-1] if ids else None


def layout(sub: SubFusion, *, fallback: bool = False) -> Layout | str:
    """The layout groups of an elementwise sub-fusion, or why it has no two of them worth a
    transpose kernel. With `fallback` (the kernel of a segment the scheduler accepted),
    a layout whenever the segment iterates over two axes: the segmenter judged the segment
    within the complete fusion, where tensors a segment recomputes (forwarded chains) are
    among its outputs; as a fusion of its own its groups can weigh differently."""
    key = "transpose fallback" if fallback else "transpose"
    if key not in sub.memo:
        sub.memo[key] = _layout(sub, fallback)
    return sub.memo[key]


def _layout(sub: SubFusion, fallback: bool) -> Layout | str:
    """`layout`, uncached."""
    find, id_of = sub.uf.find, sub.a.id_of
    weight: dict[int, int] = {}
    inner: dict[TensorView, int] = {}
    # outputs first: between groups of equal weight, the first output's layout runs the work
    for tv in sub.outputs + sub.inputs:
        i = _innermost(tv)
        if i is None:
            continue
        c = inner[tv] = find(id_of(i))
        weight[c] = weight.get(c, 0) + tv.dtype.itemsize
    order = sorted(weight, key=lambda c: -weight[c])  # stable: first seen wins ties
    ref = pointwise.reference_tensor(sub)
    ref_axes = [r for r in ref.logical_no_reductions() if not r.is_broadcast]
    by_class = {find(id_of(r)): r for r in ref_axes}
    if len(order) < 2:
        if not fallback:
            return "inputs and outputs share their innermost axis: nothing to transpose"
        order += [c for c in reversed(list(by_class)) if c not in order]  # the reference's axes, innermost first
        if len(order) < 2:
            return "the segment iterates over fewer than two axes"
    if any(c not in by_class for c in order[:2]):
        return "the reference output lacks an innermost axis of the inputs and outputs"
    # the heavier group runs the work (read and written directly); the other is staged
    ca, cb = order[0], order[1]
    axis_a, axis_b = by_class[ca], by_class[cb]
    group1 = [tv for tv in inner if inner[tv] == ca]
    group2 = [tv for tv in inner if inner[tv] == cb]
    staged = [tv for tv in group2 if ca in sub.classes_of(tv)]
    if not staged and not fallback:
        return "no tensor of the second layout spans the first's innermost axis: nothing to stage (pointwise)"
    batch = [r for r in ref_axes if r is not axis_a and r is not axis_b]
    return Layout(ref, ca, cb, axis_a, axis_b, batch, group1, group2, staged)


# --- acceptance ----------------------------------------------------------------------------------


def lowering_reason(sub: SubFusion) -> str | None:
    """What in the sub-fusion a transpose kernel cannot compute (None: it can compute it
    with any choice of layout groups). The same for a segment seen within the complete
    fusion and as a fusion of its own: it depends on the expressions and inputs alone."""
    why = _structure_reason(sub)
    if why is not None:
        return why
    if sub.has_indexing:
        return "has an index op (select, index_select, gather)"
    for e in sub.exprs:
        outs = [o for o in e.outputs if isinstance(o, TensorView)]
        if not outs:
            continue
        if len(outs) != 1:
            return f"{type(e).__name__} has several tensor outputs"
        if isinstance(e, ReductionOp) and is_trivial_reduction(e):
            continue
        if not isinstance(e, _TILE_EXPRS):
            return f"has {type(e).__name__}, which a transpose kernel does not compute"
        for v in e.inputs:
            if isinstance(v, Scalar):
                why = _scalar_reason(v)
                if why is not None:
                    return why
    for tv in sub.inputs:
        if getattr(tv, "is_cpu_scalar", False):
            return f"{tv!r} is a CPU scalar tensor"
    for tv in sub.tensors():
        cls = sub.classes_of(tv)
        if len(set(cls)) != len(cls):
            return f"{tv!r} has two axes the fusion maps onto each other"
    bound = {e for tv in sub.inputs for i in tv.logical_no_reductions()
             for e in (i.extent, i.expanded_extent) if e is not None and not e.is_const}
    for r in pointwise.reference_tensor(sub).logical_no_reductions():
        if not r.is_broadcast and not _extent_ok(r.extent, bound):
            return f"the extent of {r!r} is computed by an op a kernel cannot evaluate"
    return None


def _structure_reason(sub: SubFusion) -> str | None:
    """Why the sub-fusion is no elementwise work over one reference's axes."""
    if RESIZE in sub.kinds:
        return "has slice, pad or cat"
    why = pointwise.structure_reason(sub)
    if why is not None:
        return why
    if RESHAPE in sub.kinds:  # the kernel indexes every tensor by the reference's axes
        return "has a reshape"
    return None


def _scalar_reason(s: Scalar) -> str | None:
    """Why the kernel cannot compute scalar operand `s` (constants, scalar inputs, sizes
    and elementwise arithmetic on them it can)."""
    if s.is_const:
        return None
    d = s.definition
    if d is None:
        return "has a complex scalar input" if s.dtype.is_complex else None
    if not isinstance(d, (UnaryOp, BinaryOp, TernaryOp)):
        return f"a scalar operand is computed by {type(d).__name__}"
    for v in d.inputs:
        why = _scalar_reason(v) if isinstance(v, Scalar) else "a scalar operand is computed from a tensor"
        if why is not None:
            return why
    return None


def _extent_ok(s: Scalar, bound: set) -> bool:
    """Whether index arithmetic can evaluate extent `s` (as `TensorIndexer.extent` does)."""
    if s.is_const or s in bound or s.definition is None:
        return True
    d = s.definition
    return isinstance(d, BinaryOp) and d.op_type in _EXTENT_OPS and all(
        isinstance(v, Scalar) and _extent_ok(v, bound) for v in d.inputs)


def reject_reason(sub: SubFusion) -> str | None:
    """Why the transpose scheduler does not take `sub` (None: it does, and the kernel
    lowers it): what the kernel cannot compute, and where tiles would not pay off."""
    why = _structure_reason(sub)
    if why is not None:
        return why
    lay = layout(sub)  # first: most candidate segments have one layout, and this is cheap
    if isinstance(lay, str):
        return lay
    why = lowering_reason(sub)
    if why is not None:
        return why
    info = sub.a.info
    if info is None:
        return None
    small = min(info.extent(lay.axis_a), info.extent(lay.axis_b))
    if small < MIN_TRANSPOSE_EXTENT:
        return f"a transposed innermost axis has {small} < {MIN_TRANSPOSE_EXTENT} elements"
    # the launch's own checks (`_check_covers`), for any choice of layout groups
    if any(info.extent(r) == 0 for r in lay.ref.logical_no_reductions() if not r.is_broadcast):
        for tv in sub.outputs:
            if info.numel(tv):
                return f"the tiles cover no elements but output {tv!r} has some"
    else:
        for tv in sub.inputs:
            if info.numel(tv) == 0:
                return f"input {tv!r} has no elements but the kernel would read it"
    return None


def batch_size(info: SchedulerRuntimeInfo, lay: Layout) -> int:
    """How many (A, B) tiles' worth of batch indices the reference spans."""
    n = 1
    for r in lay.batch:
        n *= info.extent(r)
    return n


# --- heuristics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransposeParams:
    """How a transpose kernel covers its tiles. Hashable: part of the kernel's key.

    A block of `threads` threads takes a `tile_a` x `tile_b` tile at one batch index
    (blockIdx.x: the tiles, blockIdx.y: the batch, looping over it with `batch_loop`).
    Direct accesses (and the work) run `vector_a` elements at a time along A, `lanes_a`
    lanes of a warp side by side along A; staged tensors' global accesses `vector_b` at a
    time along B, `lanes_b` lanes along B. The first `n_staged` of the layout's staged
    tensors go through shared memory (as many as its 48 KB hold; the rest are accessed
    where the work runs). `smem` holds, per element size of the staged tensors,
    (itemsize, b_inner, pad): the shared tile is [tile_a][tile_b + pad] (B innermost) or
    [tile_b][tile_a + pad], whichever padding gives fewest bank conflicts."""

    tile_a: int
    tile_b: int
    threads: int
    vector_a: int
    lanes_a: int
    vector_b: int
    lanes_b: int
    smem: tuple[tuple[int, bool, int], ...]
    n_staged: int
    batch_loop: bool
    index_type: str

    def __str__(self) -> str:
        """The params as FUSER_DUMP prints them."""
        return (f"TransposeParams(tile={self.tile_a}x{self.tile_b}, threads={self.threads}, "
                f"vector_a={self.vector_a}, lanes_a={self.lanes_a}, vector_b={self.vector_b}, "
                f"lanes_b={self.lanes_b}, smem={list(self.smem)}, n_staged={self.n_staged}, "
                f"batch_loop={self.batch_loop}, "
                f"index_type={self.index_type})")

    @property
    def per_thread(self) -> int:
        """Elements of each tensor a thread handles per tile."""
        return self.tile_a * self.tile_b // self.threads

    def smem_layout(self, itemsize: int) -> tuple[bool, int]:
        """(b_inner, pad) of a staged tile of `itemsize`-byte elements."""
        for size, b_inner, pad in self.smem:
            if size == itemsize:
                return b_inner, pad
        raise KeyError(f"no shared-memory layout for {itemsize}-byte elements in {self}")


def _vector_width(sub: SubFusion, tvs: list[TensorView], extent: int, limit: int) -> int:
    """Elements per vector access of `tvs` along an axis of `extent` elements: 16 bytes of
    the widest of them (each staged access is one vector), bounded by their alignment and
    strides, dividing `extent` and `limit`."""
    return vector_width(sub, tvs, extent, min(stride_alignment(sub, tvs), limit))


def vector_tensors(sub: SubFusion, lay: Layout,
                   params: TransposeParams) -> tuple[frozenset[TensorView], frozenset[TensorView]]:
    """The tensors accessed with vectors: along A (direct ones, where the work runs) and
    along B (staged ones, on their global side); empty where the width is 1."""
    staged = set(lay.staged[:params.n_staged])
    va = frozenset(tv for tv in vectorizable(sub, lay.axis_a) if tv not in staged) if params.vector_a > 1 else frozenset()
    vb = frozenset(tv for tv in vectorizable(sub, lay.axis_b) if tv in staged) if params.vector_b > 1 else frozenset()
    return va, vb


def _lanes(vector: int, itemsize: int, tile: int) -> int:
    """Lanes of a warp side by side along the contiguous axis: 128 bytes per row of lanes
    (one cache line, and every shared-memory bank once), within the tile's edge."""
    return max(1, min(32, 128 // (vector * itemsize), tile // vector))


def heuristics(sub: SubFusion, lay: Layout) -> TransposeParams:
    """Tile, block, vector widths and shared-memory padding for the call `sub` describes."""
    info = sub.a.info
    ext_a, ext_b = info.extent(lay.axis_a), info.extent(lay.axis_b)
    n_batch = batch_size(info, lay)
    sms = info.device_limits.sm_count
    tile = TILES[-1]
    for t in TILES:
        blocks = -(-ext_a // t) * -(-ext_b // t) * n_batch
        if t <= min(ext_a, ext_b) and blocks >= MIN_BLOCKS_PER_SM * sms and _smem_bytes(t, lay.staged) <= STATIC_SMEM_BYTES:
            tile = t
            break
    n_staged = len(lay.staged)
    while _smem_bytes(tile, lay.staged[:n_staged]) > STATIC_SMEM_BYTES:
        n_staged -= 1  # the rest are read or written where the work runs (correct, not coalesced)
    staged = lay.staged[:n_staged]
    vec_a = vectorizable(sub, lay.axis_a)
    vec_b = [tv for tv in vectorizable(sub, lay.axis_b) if tv in staged]
    widest = max(tv.dtype.itemsize for tv in sub.inputs + sub.outputs)
    per_thread = max(4, min(16, BYTES_PER_THREAD // widest))
    threads = tile * tile // per_thread
    va = _vector_width(sub, vec_a, ext_a, per_thread)
    vb = _vector_width(sub, vec_b, ext_b, per_thread)
    item_a = max((tv.dtype.itemsize for tv in (vec_a or lay.group1)), default=4)
    item_b = max((tv.dtype.itemsize for tv in (vec_b or staged)), default=4)
    la, lb = _lanes(va, item_a, tile), _lanes(vb, item_b, tile)
    smem = tuple(sorted({(size, *_best_smem(size, tile, tile, threads, va, la, vb, lb))
                         for size in {tv.dtype.itemsize for tv in staged}}))
    return TransposeParams(tile, tile, threads, va, la, vb, lb, smem, n_staged, n_batch > MAX_GRID_Y,
                           info.index_type)


def _smem_bytes(tile: int, staged: list[TensorView]) -> int:
    """Shared memory `staged` tensors take in `tile` x `tile` tiles with the widest padding."""
    return sum(tile * (tile + _max_pad(tv.dtype.itemsize)) * tv.dtype.itemsize for tv in staged)


# --- shared-memory bank conflicts ----------------------------------------------------------------


def _max_pad(itemsize: int) -> int:
    """The widest padding (elements) tried for a shared tile: up to one bank row."""
    return max(2, 32 // itemsize)


def tile_mapping(tx: int, ty: int, vector: int, lanes: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) tile coordinates each thread accesses, shaped [threads, passes, vector]: x
    along the contiguous axis (extent `tx`), y across it. A warp covers a tile of `lanes`
    vectors by 32 / `lanes` rows; the block's warps take such warp tiles in turn, pass
    after pass. The lowering indexes with the same formulas."""
    t = np.arange(threads)
    lane, warp = t % 32, t // 32
    rows = 32 // lanes
    per_row = tx // (vector * lanes)
    warps = threads // 32
    passes = tx * ty // (threads * vector)
    w = warp[:, None] + np.arange(passes)[None, :] * warps
    x0 = ((w % per_row) * lanes + (lane % lanes)[:, None]) * vector
    y = (w // per_row) * rows + (lane // lanes)[:, None]
    x = x0[:, :, None] + np.arange(vector)[None, None, :]
    return x, np.broadcast_to(y[:, :, None], x.shape)


def wavefronts(addresses: np.ndarray, itemsize: int) -> int:
    """Shared-memory wavefronts (cycles) the warp-wide accesses `addresses` ([n, 32]
    element offsets, one row per instruction) take: per phase of lanes (all 32 up to
    4-byte elements, 128 bytes' worth beyond), the most distinct 4-byte words any one of
    the 32 banks serves."""
    words_per = max(1, itemsize // 4)
    first = addresses.astype(np.int64) * itemsize // 4
    words = first[..., None] + np.arange(words_per)  # [n, 32, words_per]
    phase = 32 // words_per
    rows = words.reshape(-1, phase * words_per)
    rows = np.sort(rows, axis=1)
    fresh = np.ones(rows.shape, dtype=bool)
    fresh[:, 1:] = rows[:, 1:] != rows[:, :-1]
    bank = rows % 32 + 32 * np.arange(rows.shape[0])[:, None]
    counts = np.bincount(bank[fresh], minlength=32 * rows.shape[0]).reshape(rows.shape[0], 32)
    return int(counts.max(axis=1).sum())


@functools.lru_cache(maxsize=None)
def _best_smem(itemsize: int, tile_a: int, tile_b: int, threads: int, va: int, la: int, vb: int,
               lb: int) -> tuple[bool, int]:
    """(b_inner, pad) of the shared tile for `itemsize`-byte elements that makes the two
    mappings' accesses (along A where the work runs, along B where the staged tensors
    meet global memory) take the fewest wavefronts; ties go to less padding."""
    ax, ay = tile_mapping(tile_a, tile_b, va, la, threads)  # x = a, y = b
    bx, by = tile_mapping(tile_b, tile_a, vb, lb, threads)  # x = b, y = a

    def lanes_last(x: np.ndarray) -> np.ndarray:
        # [threads, passes, vector] -> one row of 32 lanes per (warp, pass, element)
        n, p, v = x.shape
        return x.reshape(n // 32, 32, p, v).transpose(0, 2, 3, 1).reshape(-1, 32)

    ax, ay, bx, by = (lanes_last(x) for x in (ax, ay, bx, by))
    best = None
    for b_inner in (True, False):
        for pad in range(_max_pad(itemsize) + 1):
            if b_inner:  # [tile_a][tile_b + pad]
                cost = wavefronts(ax * (tile_b + pad) + ay, itemsize) + wavefronts(by * (tile_b + pad) + bx, itemsize)
            else:  # [tile_b][tile_a + pad]
                cost = wavefronts(ay * (tile_a + pad) + ax, itemsize) + wavefronts(bx * (tile_a + pad) + by, itemsize)
            key = (cost, pad, not b_inner)
            if best is None or key < best[0]:
                best = (key, (b_inner, pad))
    return best[1]


# --- schedule --------------------------------------------------------------------------------


def schedule(fusion: Fusion, lay: Layout, params: TransposeParams) -> None:
    """Give the reference the loop domain [batch (blockIdx.y), tiles (blockIdx.x), B in the
    tile, A in the tile]: the batch axes merged innermost first, A and B split by the tile
    and their tile indices merged (A's fastest). Lowering maps the tile's two axes onto
    the threads in two ways (see `tile_mapping`)."""
    from fuser.transform import merge, parallelize, reorder, split

    ref = lay.ref
    loop = ref.domain.loop
    order = [*lay.batch, lay.axis_b, lay.axis_a]
    lead = [i for i in loop if i not in order]  # broadcast (and reduction) axes: nothing to iterate
    reorder(ref, {loop.index(i): len(lead) + k for k, i in enumerate(order)})
    base = len(lead)
    for k in range(base + len(lay.batch) - 2, base - 1, -1):
        merge(ref, k, k + 1)
    pos = base + (1 if lay.batch else 0)  # [lead..., batch?, B, A]
    split(ref, pos + 1, params.tile_a)  # [.., B, Ao, Ai]
    split(ref, pos, params.tile_b)  # [.., Bo, Bi, Ao, Ai]
    reorder(ref, {pos + 2: pos + 1})  # [.., Bo, Ao, Bi, Ai]
    merge(ref, pos, pos + 1)  # [.., tiles, Bi, Ai]
    if lay.batch:
        parallelize(ref, pos - 1, ParallelType.BIDy)
    parallelize(ref, pos, ParallelType.BIDx)
