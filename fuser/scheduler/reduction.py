"""reduction: reductions over the same axes, with elementwise work before and after that
does not reuse the reduced axes."""
from __future__ import annotations

from fuser.ir import ReshapeOp

from .analysis import REDUCTION, RESHAPE, RESIZE, IndexPlan, SubFusion, own_scheduler_reason


def structure_reason(sub: SubFusion) -> str | None:
    """Checks shared with the persistent schedulers: reductions present, no other kind of
    work, and the reductions' axes cover the segment."""
    if REDUCTION not in sub.kinds:
        return "has no reduction"
    why = own_scheduler_reason(sub)
    if why is not None:
        return why
    if RESIZE in sub.kinds:
        return "has slice, pad or cat"
    if sub.lookup_produced_inside():
        return "an index op's lookup tensor is computed in the segment, not read from memory"
    why = sub.index_size_reason() if sub.has_indexing else None
    if why is not None:
        return why
    covered: set[int] = set()
    for r in sub.reductions():
        covered |= r.iter_classes | r.red_classes
    if not sub.concrete_classes() <= sub.covered_by(covered):
        return "some axis is neither iterated nor reduced by the reductions"
    return reshape_reason(sub)


def index_plan(sub: SubFusion) -> IndexPlan:
    """How the reduction kernels index the segment's tensors from their reference (the first
    reduction's input) through its reshapes."""
    return sub.index_plan(sub.classes_of(sub.reductions()[0].input))


def reshape_reason(sub: SubFusion) -> str | None:
    """Why the reduction kernels cannot index this segment's reshapes (None: they can, or it
    has none). Every tensor is indexed from the reference's indices: an axis of a reference
    axis's class takes its index, the others theirs through the reshapes, which must reach
    each axis one way only (`SubFusion.index_plan`); index ops read their lookup tensors
    by the reference's axes only."""
    if RESHAPE not in sub.kinds:
        return None
    plan = index_plan(sub)
    if plan.reason is not None:
        return plan.reason
    if plan.steps and sub.has_indexing:
        return "an index op beside a reshape that derives axes (index ops read by the reference's axes only)"
    for tv in sub.tensors():
        # a tensor holding an axis beside a reshape of it ([N, 4] and its [N, 2, 2] as
        # [N, 4, 2, 2]) iterates both: positions the reference's axes fix would fix one by
        # the other, leaving most of its elements unwritten
        classes = sub.classes_of(tv)
        for k, c in enumerate(classes):
            others = classes[:k] + classes[k + 1:]
            if c not in others and c in sub.reshape_closure(others):
                return f"T{tv.name} holds an axis beside a reshape of it (both iterated)"
    ref = sub.reductions()[0].input
    for out in sub.outputs:
        # the kernels write every output from the reference's loop nest (the first
        # reduction's input): an output whose axes a reshape ties to each other there
        # (T[4, 8] beside a [4, 32] -> [8, 16] view) would be written in part
        if not sub.written_whole(ref, out):
            return f"T{out.name} is not written whole from the loop nest of T{ref.name} (a reshape ties its axes)"
    for r in sub.reductions():
        if sub.reshape_closure(r.iter_classes) & r.red_classes:
            return "a reshape relates a kept axis to a reduced one"
        # the kernels hold a reshape's output and input at the same positions: both span
        # the reduced axes (hold a tile of values) or neither does (a value per row)
        cols = sub.column_classes(r)
        for e in sub.exprs:
            if isinstance(e, ReshapeOp) and (bool(cols.intersection(sub.classes_of(e.inputs[0])))
                                             != bool(cols.intersection(sub.classes_of(e.outputs[0])))):
                return "a reshape between a tensor spanning the reduced axes and one that does not"
    return None


def reject_reason(sub: SubFusion) -> str | None:
    why = structure_reason(sub)
    if why is not None:
        return why
    if sub.reductions_in_series():
        return "a reduction reads another reduction's result"
    reds = sub.reductions()
    if any(not r.same_axes(reds[0]) for r in reds[1:]):
        return "reductions over different axes"
    if sub.post_reduction_broadcast_resolved():
        return "a reduction's result is broadcast back over its reduced axes (persistent)"
    return None


# --- geometry, heuristics and schedule -------------------------------------------------------

from dataclasses import dataclass  # noqa: E402

from fuser.ir import Fusion, IterDomain, TensorView, WelfordOp  # noqa: E402

from . import vectorize  # noqa: E402
from .vectorize import VECTOR_BYTES  # noqa: E402

#: threads a reduction block aims for
BLOCK_THREADS = 256
#: most threads along a row (a float sum's longer rows take serial steps). `bench --sweep
#: inner_max_bdx_sum_inner_fp32`, H100, us at 512 / 256: [2048, 16384] 52.3 / 44.3,
#: [1024, 32768] 50.0 / 44.7, [4096, 16384] 100.8 / 86.5, [16384, 8192] 169.4 both
#: (torch.compile's [2048, 16384]: 44.2)
MAX_BDX = 256
#: vector loads each thread issues per step of a reduction's serial loop
UNROLL = 4
#: ... at most, in an inner reduction (a sum's row in one step; Welford over 2-byte inputs)
INNER_MAX_UNROLL = 8
#: threads a Welford inner reduction's block aims for
WELFORD_BLOCK_THREADS = 128
#: longest row a Welford inner reduction holds in registers (two passes over it instead of
#: Welford's combination), HELD_ELEMENTS of it per thread at first (bf16 [8192, 8192]: 32
#: elements a thread 94.9% of copy, 64 90.8%). `bench --sweep welford_persistent_max`, H100,
#: var_mean over 64M bf16 / 32M fp32 elements, µs Welford -> held: bf16 rows of 2048 48.0 ->
#: 44.1, 8192 45.8 -> 44.7, 8200 50.2 -> 44.9, 12288 47.6 -> 45.2, 16384 45.7 -> 45.6; fp32
#: 2048 45.1 -> 44.3, 8200 47.7 -> 44.4, 12288 50.8 -> 44.5, 16384 46.2 -> 44.9: held is as
#: fast or faster at every length swept, so rows up to 16384 are held (8192 before). H200,
#: bf16: 2048 43.8 -> 33.7, 8192 36.5 -> 34.4, 8200 40.7 -> 35.2, 12288 37.5 -> 33.7, 16384
#: 34.7 -> 34.0: held is faster there too
WELFORD_PERSISTENT_MAX = 16384
HELD_ELEMENTS = 32


@dataclass
class ReductionGeometry:
    """A reduction segment seen as a 2D problem: rows (the kept axes, merged) by columns
    (the reduced axes, merged), in the memory order of the segment's largest input."""

    ref: TensorView
    #: ref's concrete axes that are kept / reduced, outermost first in memory
    iter_axes: list[IterDomain]
    red_axes: list[IterDomain]
    #: the innermost axis in memory is reduced (rows are contiguous) or kept (columns are)
    inner: bool
    n_iter: int
    n_red: int

    @property
    def vector_axis(self) -> IterDomain | None:
        """The innermost axis in memory: vector accesses run along it."""
        axes = self.red_axes if self.inner else self.iter_axes
        return axes[-1] if axes else None


def geometry(sub: SubFusion, r0=None, *, rows: bool = False) -> ReductionGeometry:
    """The rows-by-columns view of a reduction or persistent segment (`sub` has runtime
    info): rows are the axes reduction `r0` (default: the first) keeps, columns those it
    reduces. `rows`: lay it out as an inner reduction (a row per thread group) even where
    the memory order says otherwise (an inner-persistent kernel over column-major inputs:
    correct, with strided accesses)."""
    info = sub.a.info
    if r0 is None:
        r0 = sub.reductions()[0]
    ref = r0.input
    red_classes = r0.red_classes
    find, id_of = sub.uf.find, sub.a.id_of
    # memory order: the allocation order of the input spanning the most axes (another
    # segment's output too: the segment's kernel reads it laid out dense in its logical
    # order, and judging the segment must see the layout its kernel will)
    order: list[int] = []
    best = None
    for tv in sub.inputs:
        if isinstance(tv, TensorView) and (best is None or len(sub.classes_of(tv)) > len(sub.classes_of(best))):
            best = tv
    if RESHAPE in sub.kinds and best is not None and best is not ref:
        cols = _reshaped_columns(sub, r0, best)
        if cols is not None:
            # the input that the reduction's input is a reshape of, each of its axes kept or
            # reduced alone: the kernel is laid out on it (its memory order, vector accesses
            # along its innermost axis), and the reshape indexed from it
            ref, red_classes = best, cols
    ref_axes = [i for i in ref.logical_no_reductions() if not i.is_broadcast]
    if best is not None:
        order = [find(id_of(i)) for i in best.allocation if not i.is_broadcast and not i.is_reduction]
        if RESHAPE in sub.kinds and not {find(id_of(i)) for i in ref_axes} <= set(order):
            # a reshape lies between the input and the reference: a reshape keeps row-major
            # order, so the reference's logical order is the input's memory order (when
            # that is row-major), which its own axes' order need not show
            order = []
    rank = {c: k for k, c in enumerate(order)}
    # axes the input lacks keep the reference's order, after those it orders
    keyed = sorted(enumerate(ref_axes), key=lambda p: (rank.get(find(id_of(p[1])), len(order) + p[0])))
    axes = [i for _, i in keyed]
    red = [i for i in axes if find(id_of(i)) in red_classes]
    it = [i for i in axes if find(id_of(i)) not in red_classes]
    inner = rows or (bool(axes) and axes[-1] in red)
    n_iter = 1
    for i in it:
        n_iter *= info.extent(i)
    n_red = 1
    for i in red:
        n_red *= info.extent(i)
    return ReductionGeometry(ref, it, red, inner, n_iter, n_red)


def _reshaped_columns(sub: SubFusion, r0, x: TensorView) -> frozenset[int] | None:
    """The classes of input `x`'s axes that reduction `r0` reduces, where `x` can stand for
    its input as the reduction kernels' reference (None where it cannot): each axis of `x`
    is related through the reshapes to kept axes alone or to reduced axes alone, `x` spans
    as many rows and columns as the reduction, and every axis is indexed from its own."""
    rows = sub.reshape_closure(r0.iter_classes)
    cols = sub.reshape_closure(r0.red_classes)
    xc = sub.classes_of(x)
    if len(set(xc)) != len(xc) or any((c in rows) == (c in cols) for c in xc):
        return None
    plan = sub.index_plan(xc)
    if plan.reason is not None or (plan.steps and sub.has_indexing):
        return None
    info = sub.a.info

    def count(tv: TensorView, classes) -> int:
        n = 1
        for i in tv.logical_no_reductions():
            if not i.is_broadcast and sub.uf.find(sub.a.id_of(i)) in classes:
                n *= info.extent(i)
        return n

    if count(x, rows) != count(r0.input, r0.iter_classes) or count(x, cols) != count(r0.input, r0.red_classes):
        return None
    return frozenset(c for c in xc if c in cols)


@dataclass(frozen=True)
class ReductionParams:
    """How a reduction kernel covers rows x columns. Hashable: part of the kernel's key.

    Inner (reduced axes innermost): `bdy` rows per block on threadIdx.y, a row's columns
    over `bdx` threads (threadIdx.x) in vectors of `vectorize`, `unroll` vectors per
    thread per step of the serial loop; `grid_y` blocks share a row (a grid reduction).
    Outer (kept axes innermost): `bdx` threads (threadIdx.x) each own a vector of
    `vectorize` adjacent columns, `bdy` threads (threadIdx.y) and `grid_y` blocks split
    the rows, `unroll` rows per thread per step. Persistent: a row is loaded once into
    `unroll` vectors per thread (the serial loop has one step) and reused after each
    reduction. `min_blocks`: blocks per SM the kernel is compiled to fit (its registers
    capped to match), 0 for the compiler's own choice. `row_loop` (inner persistent): the
    grid holds only the blocks the GPU holds at once, and each takes groups of rows in
    turn (loading what does not span the rows, weights, once). `late_loads` (inner
    persistent): each input is loaded at the first pass over the row that reads it (a
    norm's weights after its reductions), not all with the row. `keep_first_pass`
    (persistent): later passes read the values the first pass computed from registers
    instead of recomputing them from the loaded row. `spill_max`: bytes of local memory
    a thread may spill under `min_blocks`' register cap before the kernel is compiled with
    the compiler's own choice instead (where its grid allows: one planned from what fits).
    `stage_rows` (inner-outer): the row inputs are held in shared-memory stages, whatever
    their width, because registers would not hold them (normalization.INNER_OUTER_STAGED_FIT);
    (inner persistent, with `row_loop`) each group of rows is copied into stages one
    iteration ahead (normalization.ROW_LOOP_STAGED_FEW_BLOCKS).
    `exact` (inner persistent, no row loop): the rows fill the blocks and each thread's
    vectors the row, exactly, so the kernel checks no bounds (normalization.EXACT_TILES)."""

    inner: bool
    persistent: bool
    vectorize: int
    bdx: int
    bdy: int
    unroll: int
    grid_y: int
    index_type: str
    min_blocks: int = 0
    row_loop: bool = False
    late_loads: bool = False
    keep_first_pass: bool = False
    spill_max: int = 0
    stage_rows: bool = False
    exact: bool = False

    def __str__(self) -> str:
        # (the optional fields only where they are set)
        extra = "".join(f", {k}={v}" for k, v in (("min_blocks", self.min_blocks), ("row_loop", self.row_loop),
                                                    ("late_loads", self.late_loads),
                                                    ("keep_first_pass", self.keep_first_pass),
                                                    ("spill_max", self.spill_max),
                                                    ("stage_rows", self.stage_rows),
                                                    ("exact", self.exact)) if v)
        return (f"ReductionParams(inner={self.inner}, persistent={self.persistent}, vectorize={self.vectorize}, "
                f"bdx={self.bdx}, bdy={self.bdy}, unroll={self.unroll}, grid_y={self.grid_y}, "
                f"index_type={self.index_type}{extra})")

    @property
    def threads(self) -> int:
        return self.bdx * self.bdy


def _pow2_ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _pow2_floor(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def vectors(sub: SubFusion, geo: ReductionGeometry) -> tuple[list[TensorView], int]:
    """The tensors a reduction kernel loads in vectors along `geo.vector_axis`, and the
    width their sizes, strides and alignment allow."""
    vec = vectorize.vectorizable(sub, geo.vector_axis) if geo.vector_axis is not None else []
    return vec, vector_width(sub, geo, vec, vectorize.stride_alignment(sub, vec))


def wave_vector(columns: int, bdx: int, vectorize: int, max_blocks: int) -> int:
    """`vectorize` halved while twice the blocks of `bdx` threads over `columns` columns
    still number at most `max_blocks` (the SMs: one wave): few columns spread over more
    SMs."""
    while vectorize > 1 and 2 * -(-columns // (bdx * vectorize)) <= max_blocks:
        vectorize //= 2
    return vectorize


def vector_width(sub: SubFusion, geo: ReductionGeometry, vectorized: list[TensorView], max_vector: int) -> int:
    """Elements per vector access along the innermost axis (vectorize.vector_width)."""
    if geo.vector_axis is None:
        return 1
    return vectorize.vector_width(sub, vectorized, sub.a.info.extent(geo.vector_axis), max_vector)


#: blocks per SM an outer reduction's grid aims for (see `heuristics`). `bench --sweep
#: outer_blocks_per_sm`, H100, sum over dim 0 bf16, µs at 1 / 2 / 3 / 4 / 6: [16384, 4096]
#: 57.9 / 47.5 / 47.4 / 48.1 / 47.9; [8192, 8192] 60.2 / 181.5 / 46.5 / 47.6 / 48.6;
#: [2048, 16384] 25.2 / 24.3 / 24.3 / 25.9 / 26.4; [65536, 1024] 62.2 / 49.5 / 49.2 / 50.0 /
#: 50.1; [4096, 2048] 12.6 / 10.6 / 10.6 / 10.6 / 10.6: 3 is best or within 1% everywhere.
#: H200: 52.7 / 37.3 / 34.3 / 35.2 / 35.8; 55.3 / 35.6 / 34.2 / 34.2 / 35.3; 21.5 / 19.6 /
#: 19.6 / 19.7 / 20.3; 58.8 / 39.7 / 36.0 / 36.3 / 37.3; 11.5 / 9.4 / 9.5 / 9.5 / 9.5: the same
OUTER_BLOCKS_PER_SM = 3
#: threads across the columns of an outer reduction's block, where its columns give every SM
#: half a block of that width or fewer (see `heuristics`). `bench --sweep outer_bdx_fp32*`,
#: H100, sum over dim 0 fp32 µs at 16 / 32 / 64, right after the input's producer: [16384,
#: 8192] 180.5 / 182.3 / 183.8, [65536, 1024] 94.7 / 96.0 / 100.2, [2048, 16384] 46.5 /
#: 46.6 / 46.5; loop-timed 172.6 / 174.8 / 175.4, 88.5 / 89.2 / 94.1, 44.4 / 44.4 / 44.2
OUTER_BDX = 16
#: rows an outer reduction's thread loads per step (twice as many for narrow vectors: see
#: _narrow_rows) and threads of its block: what an SM has in flight. nvFuser's plan for the
#: anchors' outer sum (fp32 [16384, 8192]; its dump on an H100) is 16 x 64 threads loading 8
#: rows a step, one block an SM, no blocks sharing a row. `bench --sweep outer_rows_unroll_*`,
#: H100, fp32 µs at 2 / 4 / 8 after the producer: [16384, 8192] 183.4 / 180.6 / 178.7,
#: [65536, 1024] 95.6 / 94.6 / 93.8, [2048, 16384] 47.7 / 46.8 / 46.5, [16384, 4096] 95.0 /
#: 94.3 / 94.3; loop-timed 175.3 / 172.9 / 172.9, 91.0 / 88.4 / 88.7, 45.1 / 44.2 / 44.1,
#: 89.5 / 89.4 / 89.3; bf16 after the producer 95.6 / 95.6 / 96.3, 52.4 / 51.2 / 51.3, 25.3 /
#: 25.3 / 25.4, 51.7 / 50.8 / 51.4: 8 is within 1% of 4 either way on the H100.
#: `outer_block_threads_fp32*`, 256 / 512 / 1024 threads, after the producer: 180.5 / 179.7 /
#: 180.1, 94.8 / 94.5 / 97.3, 46.6 / 46.1 / 46.6, 94.5 / 95.3 / 93.5; loop-timed 172.8 /
#: 173.2 / 174.0, 88.4 / 89.4 / 91.9, 44.3 / 44.3 / 44.4, 88.7 / 90.4 / 91.3
OUTER_ROWS_UNROLL = UNROLL
OUTER_BLOCK_THREADS = BLOCK_THREADS
#: rows an outer reduction's thread loads per step double where its input vectors are
#: narrower than 16 bytes (see _narrow_rows). `bench --sweep outer_narrow_unroll_*`, H200,
#: batch norm bf16 [16384, 4096] / [8192, 8192] / [2048, 16384] / [1024, 1000]: 138.6 /
#: 132.3 / 70.1 / 22.6 -> 135.1 / 130.6 / 67.3 / 21.8 us
OUTER_NARROW_UNROLL = True
#: column blocks, as a fraction of the SMs, from which an outer reduction's blocks each take
#: their columns' whole rows (no grid split, so no partials or arrival counters) with
#: OUTER_WHOLE_BLOCK_THREADS threads loading OUTER_WHOLE_ROWS rows a step (nvFuser's plan for
#: the anchors' outer sum, fp32 [16384, 8192]: 128 blocks of 16 x 64 threads, 8 rows a step);
#: below it (and below OUTER_BLOCKS_PER_SM blocks an SM) blocks share rows. None: never.
#: `bench --sweep outer_whole_columns_fp32*`, H100, sum over dim 0 fp32 µs at None / 0.9 /
#: 0.5, loop-timed: [16384, 8192] 173.0 / 171.2 / 171.2, [4096, 8192] 46.3 / 43.9 / 43.8,
#: [32768, 8192] 340.8 / 341.0 / 340.8, [16384, 12288] (96 blocks of 32 x 4) 260.3 / 260.0 /
#: 263.9; after the producer 180.7 / 178.9 / 178.4, 48.0 / 45.9 / 45.7, 355.8 / 353.8 /
#: 354.2, 272.1 / 275.4 / 275.1. On an H200 only nvFuser's kernel of this plan was timed:
#: 124.7 us against fuser's 128.1 sharing rows (ncu, [16384, 8192])
OUTER_WHOLE_COLUMNS: float | None = 0.9
OUTER_WHOLE_BLOCK_THREADS = 1024
OUTER_WHOLE_ROWS = 8
#: threads across the columns of an outer reduction's block at least, where the columns are
#: too few to give every SM a block
FEW_COLUMNS_MIN_BDX = 4
#: threads across the columns of an outer reduction's block that takes narrow blocks rather
#: than blocks sharing rows, and the shortest vector it narrows them to for that
NARROW_BDX = 8
NARROW_MIN_VECTOR = 4
#: elements of its row a thread holds at most, and threads per row at most for that, where
#: the rows are too few to give every SM a block (see few_rows_threads). `bench --sweep
#: few_rows_elements`, H100, softmax bf16 (input sets rotated past L2), µs at 4 / 8 / 16 /
#: 32: [32 | 64 | 128, 1000] 1.4 / 1.4 / 1.7 / 1.7; [132, 2048] 2.0 each; [64, 4096] 2.1 /
#: 2.2 / 2.1 / 15.3; [128, 8192] 3.3 each: 8 is as fast as any, 16 and 32 slower. H200:
#: [32 | 64, 1000] 1.3 / 1.3 / 1.6 / 1.6, [128, 1000] 1.4 / 1.4 / 1.6 / 1.6, [132, 2048] 1.9 /
#: 1.8 / 1.8 / 1.8, [64, 4096] 1.8 each, [128, 8192] 3.0 / 3.1 / 3.0 / 3.0: 8 within 0.1 of best
FEW_ROWS_ELEMENTS = 8
FEW_ROWS_MAX_BDX = 128


def _spread(rows: int, sms: int, bdy: int) -> tuple[int, bool]:
    """Rows per block of an inner reduction, halved (down to 2) while the rows are too few
    to give every SM a block; and whether they still are (the caller then shortens each
    thread's serial chain over more threads: [128, 1000] took 2.3-2.4 us against 2.6)."""
    while bdy > 2 and -(-rows // bdy) < sms:
        bdy //= 2
    return bdy, -(-rows // bdy) < sms


def heuristics(sub: SubFusion, geo: ReductionGeometry, vectorize: int) -> ReductionParams:
    """Block shape, unroll and grid split of a reduction kernel (a Welford inner reduction
    over short rows holds them: persistent params)."""
    info = sub.a.info
    sms = info.device_limits.sm_count
    rows, cols = geo.n_iter, geo.n_red
    if geo.inner:
        vecs = -(-cols // vectorize)
        welford = any(isinstance(r.expr, WelfordOp) for r in sub.reductions())
        if welford and cols <= WELFORD_PERSISTENT_MAX:
            # the row in registers, HELD_ELEMENTS a thread: its mean, then the squared
            # deviations from it, as two float block reductions (no Welford triples to
            # combine); H100, var_mean fp32 [16384, 4096] 101.0% of copy against 99.6% at
            # best with Welford, bf16 [16384, 1024] 106.6% against 80.4%
            per = max(1, HELD_ELEMENTS // vectorize)  # vectors a thread holds
            bdx = max(32, min(256, _pow2_ceil(-(-vecs // per))))
            bdy, few = _spread(rows, sms, max(1, min(BLOCK_THREADS // bdx, _pow2_ceil(rows))))
            if few:
                # a row a block (H100, var_mean fp32 [128, 1000]: 2.75 us with 64 x 2 threads
                # a block, 2.49 with 128 x 1)
                bdy, bdx = 1, few_rows_threads(vecs, vectorize, bdx)
            return ReductionParams(True, True, vectorize, bdx, bdy, max(1, -(-vecs // bdx)), 1, info.index_type)
        if welford:
            # combining Welford triples across threads costs far more than float sums:
            # narrow rows of threads (a vector step of 256 elements) with more serial steps
            # (H100, var_mean: bf16 [8192, 8192] 90.6% of copy with 32 x 4 threads and 8
            # vectors a step, against 80.5% with 128 x 2 and 4; fp32 [2048, 16384] 92.1%
            # with 64 x 4 against 82.4% with 512 x 1)
            unroll_max = INNER_MAX_UNROLL if vectorize * 4 > VECTOR_BYTES else UNROLL
            bdx = max(32, min(_pow2_ceil(-(-vecs // unroll_max)), max(32, 256 // vectorize)))
            threads = WELFORD_BLOCK_THREADS
        else:
            # a row in one step where it fits (every load in flight at once; sum fp32
            # [16384, 4096] 101.8% of copy in one step against 100.5% in two)
            unroll_max = INNER_MAX_UNROLL
            bdx = max(32, min(MAX_BDX, _pow2_ceil(-(-vecs // unroll_max))))
            threads = BLOCK_THREADS
        unroll = max(1, min(unroll_max, _pow2_ceil(-(-vecs // bdx))))
        bdy, few = _spread(rows, sms, max(1, min(threads // bdx, _pow2_ceil(rows))))
        if few and unroll > UNROLL and bdx < MAX_BDX:
            bdx, unroll = bdx * 2, unroll // 2
        blocks = -(-rows // bdy)
        steps = -(-vecs // (bdx * unroll))
        grid_y = 1
        if blocks < 2 * sms and steps > 8:
            # too few rows to fill the GPU: split each row over blocks (a grid reduction),
            # keeping at least 4 serial steps per block
            grid_y = max(1, min(-(-2 * sms // blocks), steps // 4, 1024))
        return ReductionParams(True, False, vectorize, bdx, bdy, unroll, grid_y, info.index_type)
    width = vectorize
    col_vecs = -(-rows // vectorize)  # outer: the kept axes are the contiguous "columns"
    # 16 x 16 threads measured best on an H100 (sum over dim 0 of [16384, 4096] bf16: 81% of
    # copy against 73% with 32 x 8; fp32 [16384, 8192]: 99%); very wide ones take wider
    # blocks while they still give every SM half a block of columns (seed 001's reduction
    # over 57344 columns: 97 us with 64 x 4, 104 with 32 x 8, 122 with 16 x 16)
    narrow = bdx = min(OUTER_BDX, _pow2_ceil(col_vecs))
    while bdx < 64 and -(-col_vecs // (2 * bdx)) >= sms // 2:
        bdx *= 2
    bdy = max(1, min(OUTER_BLOCK_THREADS // bdx, _pow2_ceil(cols)))
    # the blocks sharing a row are counted as for 16-wide blocks, whatever the width (seed
    # 001: 64 x 4 threads with the 3 that gives ran in 98 us, with the 10 counted for their
    # own width in 113 us)
    n_bdy = max(1, min(OUTER_BLOCK_THREADS // narrow, _pow2_ceil(cols)))
    blocks = -(-col_vecs // narrow)
    steps = -(-cols // (n_bdy * _rows_unroll(cols, n_bdy)))
    # blocks share a row until there are about three per SM: more only add partials to
    # combine (sum over dim 0 of [16384, 4096] bf16: 82.5% of copy with 12 blocks per row,
    # 81.4% with 16, 74.8% with 33; fp32 [16384, 8192]: 99.1-99.6% from 4 to 16)
    grid_y = 1
    whole = False
    if blocks < OUTER_BLOCKS_PER_SM * sms and steps > 8:
        narrow_vec = vectorize
        while narrow_vec > NARROW_MIN_VECTOR and _outer_blocks(rows, narrow_vec) < OUTER_BLOCKS_PER_SM * sms:
            narrow_vec //= 2
        if narrow_vec >= NARROW_MIN_VECTOR and _outer_blocks(rows, narrow_vec) >= OUTER_BLOCKS_PER_SM * sms:
            # narrow blocks (and shorter vectors, down to NARROW_MIN_VECTOR: what was
            # measured) give the grid its blocks without sharing rows, so no partials to
            # combine across blocks (H100, sum over dim 0 of [2048, 16384]: bf16 28.79 ->
            # 27.43 us, fp32 50.16 -> 47.41)
            vectorize, bdx = narrow_vec, NARROW_BDX
            bdy = max(1, min(OUTER_BLOCK_THREADS // bdx, _pow2_ceil(cols)))
        elif (OUTER_WHOLE_COLUMNS is not None and -(-col_vecs // bdx) >= OUTER_WHOLE_COLUMNS * sms
              and not _short_vectors(sub, vectorize)):
            # a block an SM or near it: taller blocks loading more rows a step put as many
            # bytes in flight as blocks sharing rows would, without their partials (16-byte
            # vectors: what was measured)
            bdy = max(1, min(OUTER_WHOLE_BLOCK_THREADS // bdx, _pow2_ceil(cols)))
            whole = True
        else:
            grid_y = max(1, min(-(-OUTER_BLOCKS_PER_SM * sms // blocks), steps // 4, 1024))
    elif blocks < sms:
        # few columns and few rows: narrower blocks spread the columns over more SMs, and
        # taller ones load every row in one step (H100, sum over dim 0 of [128, 1000]: bf16
        # 3.83 -> 3.19 us with 4 x 32 threads, fp32 3.27 -> 3.01)
        while bdx > FEW_COLUMNS_MIN_BDX and -(-col_vecs // bdx) < sms:
            bdx //= 2
        # and shorter vectors while twice the blocks still fit one wave (fp32 [128, 1000]:
        # 3.09 -> 2.71 us with 2-element vectors, bf16 3.21 -> 2.72; the column allreduce
        # of a 2-element tile then goes through warp shuffles)
        vectorize = wave_vector(rows, bdx, vectorize, sms)
        bdy = max(1, min(OUTER_BLOCK_THREADS // bdx, _pow2_ceil(-(-cols // UNROLL))))
    most = OUTER_WHOLE_ROWS if whole else _narrow_rows(sub, vectorize)
    unroll = _rows_unroll(cols, bdy, most if vectorize == width else UNROLL)
    if grid_y > 1:
        # each block takes ceil(steps / grid_y) of the kernel's steps: as few blocks as that
        # needs, so none is left without rows, writing a partial the last block must still
        # read (H100, sum over dim 0 bf16 [16384, 1024]: 50 blocks a column, 7 of them
        # empty, 17.0 -> 16.6 us at 43; [32768, 1024] 28.0 -> 27.3 at 47 instead of 50)
        kernel_steps = -(-cols // (bdy * unroll))  # `steps` counted them for 16-wide blocks
        grid_y = -(-kernel_steps // -(-kernel_steps // grid_y))
    return ReductionParams(False, False, vectorize, bdx, bdy, unroll, grid_y, info.index_type)


def _short_vectors(sub: SubFusion, vectorize: int) -> bool:
    """Whether an input's vectors of `vectorize` elements are under 16 bytes (a wider tensor
    or the row's length set the width)."""
    itemsizes = [tv.dtype.itemsize for tv in sub.inputs if isinstance(tv, TensorView)]
    return bool(itemsizes) and vectorize * min(itemsizes) < VECTOR_BYTES


def _narrow_rows(sub: SubFusion, vectorize: int) -> int:
    """Most rows an outer reduction's thread loads per step: UNROLL, twice that where its
    vectors of the inputs are under 16 bytes because a wider tensor set the width (a batch
    norm's float statistics over bf16 rows), so that as many bytes are in flight
    (OUTER_NARROW_UNROLL)."""
    return 2 * OUTER_ROWS_UNROLL if OUTER_NARROW_UNROLL and _short_vectors(sub, vectorize) else OUTER_ROWS_UNROLL


def _outer_blocks(columns: int, vectorize: int) -> int:
    """Blocks of an outer reduction over `columns` kept elements with NARROW_BDX threads
    of `vectorize` elements across each block."""
    return -(-columns // (vectorize * NARROW_BDX))


def few_rows_threads(vecs: int, vectorize: int, bdx: int) -> int:
    """Threads across a row of `vecs` vectors, from `bdx` up, where the rows are too few to
    give every SM a block (one row a block): doubled up to FEW_ROWS_MAX_BDX while each
    thread would hold more than FEW_ROWS_ELEMENTS elements (latency, not bandwidth, is what
    is left: H100, [128, 1000] softmax bf16 3.47 -> 3.09 us, fp32 3.63 -> 3.09)."""
    while -(-vecs // bdx) * vectorize > FEW_ROWS_ELEMENTS and bdx < FEW_ROWS_MAX_BDX:
        bdx *= 2
    return bdx


def _rows_unroll(rows: int, bdy: int, most: int = UNROLL) -> int:
    """Rows each thread of an outer reduction loads per step: `most` at most, a power of
    two no more than its share of `rows` over `bdy` thread rows."""
    return max(1, min(most, _pow2_floor(max(1, rows // bdy))))


def schedule(fusion: Fusion, geo: ReductionGeometry) -> None:
    """Give the reference the loop domain [rows, columns]: its kept axes merged into one
    and its reduced axes into another, each innermost-first in memory order (so a run of
    contiguous axes is indexed by the merged index). Lowering splits both by the params."""
    from fuser.transform import merge, reorder

    ref = geo.ref
    loop = ref.domain.loop
    order = geo.iter_axes + geo.red_axes
    lead = [i for i in loop if i not in order]  # broadcast axes: nothing to iterate
    reorder(ref, {loop.index(i): len(lead) + k for k, i in enumerate(order)})
    n_it, n_red = len(geo.iter_axes), len(geo.red_axes)
    base = len(lead)
    for k in range(base + n_it + n_red - 2, base + n_it - 1, -1):
        merge(ref, k, k + 1)
    for k in range(base + n_it - 2, base - 1, -1):
        merge(ref, k, k + 1)
