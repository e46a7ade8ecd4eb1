"""The persistent (normalisation) schedulers: a reduction whose input is read again after
it, kept in registers and shared memory between the two reads. inner_persistent reduces
innermost axes, outer_persistent outer ones, inner_outer_persistent both at once (an inner
reduction per row and an outer one across rows, as in a layer-norm backward)."""
from __future__ import annotations

import dataclasses

from fuser.ir import ReductionOp, TensorView, WelfordOp
from fuser.options import disabled

from . import reduction
from .analysis import RESHAPE, SubFusion, reduction_stages
from .runtime_info import PERSISTENT_REGISTER_FRACTION, DeviceLimits


def _common(sub: SubFusion) -> str | None:
    why = reduction.structure_reason(sub)
    if why is not None:
        return why
    if not sub.persistent_buffers():
        return "no persistent buffer: no reduction input is reused after the reduction"
    return None


def _fits(sub: SubFusion, *, shared_memory: bool = True) -> str | None:
    if sub.a.info is None:
        return None
    need = sub.persistent_buffer_bytes()
    if shared_memory:
        budget, where = sub.persistent_budget(), "registers and shared memory"
    else:
        budget, where = register_budget(sub), "registers"
    if need > budget:
        return f"persistent buffers need {need} bytes per row, more than the {budget} bytes {where} hold"
    return None


def register_budget(sub: SubFusion) -> int:
    """Bytes of a row one block can hold in registers: the generated inner-persistent
    kernel keeps rows in registers only (no shared-memory buffers yet)."""
    return int(sub.a.info.device_limits.register_file_bytes * PERSISTENT_REGISTER_FRACTION)


def _same_axes(reds) -> bool:
    return all(r.same_axes(reds[0]) for r in reds[1:])


def inner_reason(sub: SubFusion) -> str | None:
    why = _common(sub)
    if why is not None:
        return why
    reds = sub.reductions()
    if not all(r.is_inner for r in reds):
        return "not every reduction is over the innermost axes"
    if not _same_axes(reds):
        return "reductions over different axes"
    why = _fits(sub, shared_memory=False)
    if why is not None or sub.a.info is None:
        return why
    try:
        inner_persistent_plan(sub)  # what the kernel's preparation will plan
    except ValueError as err:
        return str(err)
    return None


def outer_reason(sub: SubFusion) -> str | None:
    why = _common(sub)
    if why is not None:
        return why
    reds = sub.reductions()
    if any(r.is_inner for r in reds):
        return "some reduction is over the innermost axes"
    if not _same_axes(reds):
        return "reductions over different axes"
    if sub.a.info is None:
        return None
    try:
        outer_persistent_plan(sub)
    except ValueError as err:
        return str(err)
    return None


def inner_outer_reason(sub: SubFusion) -> str | None:
    why = _common(sub)
    if why is not None:
        return why
    reds = sub.reductions()
    inner = [r for r in reds if r.is_inner]
    outer = [r for r in reds if not r.is_inner]
    if not inner or not outer:
        return "needs both inner and outer reductions"
    if not _same_axes(inner):
        return "inner reductions over different axes"
    rows, cols = inner[0].iter_classes, inner[0].red_classes
    for r in outer:
        # across all rows, or across the rows of each segment of them (a sum over the
        # sequence axis per batch beside a LayerNorm backward's sums over batch and sequence)
        if not r.red_classes <= rows or r.iter_classes != (rows - r.red_classes) | cols:
            return "the outer reductions do not reduce the axes the inner ones keep"
    if any(isinstance(r.expr, WelfordOp) for r in outer):
        return "a Welford reduction across rows (the kernel combines sums, products, max and min across blocks)"
    if _outer_result_reaches_rows(sub, outer):
        return "an outer reduction's result is used along the rows it reduced"
    late = _computed_after_outer(sub, outer)
    if late is not None:
        return (f"{late!r} is computed along the rows but read after the reductions across rows (the kernel "
                f"reads only their results and inputs there)")
    if _mixes_outer_groups(sub, outer):
        return "a tensor combines results of outer reductions over different axes"
    if RESHAPE in sub.kinds and reduction.index_plan(sub).steps:
        # the column phase indexes its tensors by the reference's axes only
        return "a reshape derives axes the reference lacks (the inner-outer kernel indexes by the reference's axes)"
    # the generated kernel holds rows in registers only
    why = _fits(sub, shared_memory=False)
    if why is not None or sub.a.info is None:
        return why
    geo = reduction.geometry(sub, inner[0], rows=True)
    try:
        row_segments(sub, geo)
    except ValueError as err:
        return str(err)
    # ... and beside them, per element of a row, its inputs along the row (weights) and a
    # float accumulator per outer reduction
    held = row_held_bytes(sub, cols, len(outer))
    n = geo.n_red
    budget = register_budget(sub)
    width = reduction.vectors(sub, geo)[1]
    overflow = INNER_OUTER_STAGED_FIT and rows_overflow_registers(sub, geo)
    staged = staged_row_bytes(sub, cols, rows, width) if overflow else 0
    limit = int(sub.a.info.device_limits.register_file_bytes * STAGED_REGISTER_FRACTION) if staged else budget
    if (held - staged) * n > limit:
        return (f"a row of {n} elements takes {(held - staged) * n} bytes of registers (inputs and column "
                f"accumulators{', beside the rows staged in shared memory' if staged else ''}), more than the "
                f"{limit} bytes registers hold")
    p = None
    if staged or INNER_OUTER_FEW_ROWS_APART:
        try:
            p = inner_outer_heuristics(sub, geo, width)
        except ValueError as err:
            return str(err)
    if staged and stage_bytes(p.bdx * p.bdy, p.unroll * p.vectorize, staged) > stage_budget(sub.a.info.device_limits):
        return (f"a row of {n} elements takes more registers than the {budget} bytes they hold, and its "
                f"{p.bdy} x {STAGES} staged rows more than the {stage_budget(sub.a.info.device_limits)} bytes "
                f"of shared memory the stages may take")
    if INNER_OUTER_FEW_ROWS_APART:
        groups = -(-geo.n_iter // p.bdy)
        sms = sub.a.info.device_limits.sm_count
        if groups < sms:
            return (f"{geo.n_iter} rows make {groups} groups of a block's rows, fewer than the {sms} SMs "
                    f"(separate kernels instead of a grid reduction across few blocks)")
    return None


def row_segments(sub: SubFusion, geo: ReductionGeometry) -> dict[frozenset[int], tuple[int, int]]:
    """Per set of row axes that some outer reductions reduce without reducing every row
    axis: (rows per segment, segments), a segment being the rows that share their other
    row axes' indices. Those must be the outer row axes, so that each segment's rows are
    consecutive; raises ValueError otherwise."""
    find, id_of = sub.uf.find, sub.a.id_of
    row_classes = [find(id_of(i)) for i in geo.iter_axes]
    extents = [sub.a.info.extent(i) for i in geo.iter_axes]
    out: dict[frozenset[int], tuple[int, int]] = {}
    for r in sub.reductions():
        if r.is_inner or r.red_classes == frozenset(row_classes) or r.red_classes in out:
            continue
        if disabled("row_segments"):
            raise ValueError("outer reductions over some of the rows' axes are disabled (FUSER_DISABLE=row_segments)")
        k = len(row_classes) - len(r.red_classes)
        if set(row_classes[k:]) != r.red_classes:
            raise ValueError("an outer reduction keeps a row axis inside the rows it reduces "
                             "(its segments of rows are not consecutive)")
        seg = 1
        for n in extents[k:]:
            seg *= n
        out[r.red_classes] = (seg, geo.n_iter // seg if seg else 0)
    return out


def _mixes_outer_groups(sub: SubFusion, outer) -> bool:
    """Whether a tensor depends on outer reductions over different axes (the kernel's final
    phase computes each set's results over its own output shape)."""
    reds = sub.reductions()
    down, _ = sub._flow(reds)
    masks: dict[frozenset[int], int] = {}
    for n, r in enumerate(reds):
        if r in outer:
            masks[r.red_classes] = masks.get(r.red_classes, 0) | (1 << n)
    if len(masks) < 2:
        return False
    return any(sum(1 for m in masks.values() if down.get(tv, 0) & m) > 1 for tv in sub.tensors())


def row_held_bytes(sub: SubFusion, red_classes, n_accumulators: int, among: set | None = None) -> int:
    """Bytes an inner-outer kernel holds per element of a row: each fusion input spanning
    the row's axes (of those `among`, where given), and a float accumulator per outer
    reduction."""
    # (every input of the segment: another segment's output is read from memory too)
    held = sum(tv.dtype.itemsize for tv in sub.inputs
               if isinstance(tv, TensorView) and set(sub.classes_of(tv)) & red_classes and (among is None or tv in among))
    return held + 4 * n_accumulators


def _outer_result_reaches_rows(sub: SubFusion, outer) -> bool:
    """Whether a tensor computed from an outer reduction's result spans the rows it reduced
    again."""
    reds = sub.reductions()
    down, _ = sub._flow(reds)
    for n, r in enumerate(reds):
        if r in outer and any(down.get(tv, 0) >> n & 1 and set(sub.classes_of(tv)) & r.red_classes
                              for tv in sub.tensors()):
            return True
    return False


def _computed_after_outer(sub: SubFusion, outer):
    """A tensor that an expression after the outer reductions reads but that is neither
    computed after them nor a segment input outside the rows they reduce (the kernel's
    column phase has nothing else: a row-spanning factory such as full() is not there);
    None when there is none."""
    reds = sub.reductions()
    down, _ = sub._flow(reds)
    bits = 0
    for n, r in enumerate(reds):
        if r in outer:
            bits |= 1 << n
    outer_exprs = {r.expr for r in outer}
    rows = set().union(*(r.red_classes for r in outer))
    inputs = set(sub.inputs)
    for e in sub.exprs:
        if e in outer_exprs or not any(isinstance(o, TensorView) and down.get(o, 0) & bits for o in e.outputs):
            continue
        for x in e.inputs:
            if not isinstance(x, TensorView) or down.get(x, 0) & bits:
                continue
            if x not in inputs or set(sub.classes_of(x)) & rows:
                return x
    return None


# --- heuristics ---------------------------------------------------------------------------------

from .reduction import BLOCK_THREADS, ReductionGeometry, ReductionParams, _pow2_ceil, few_rows_threads  # noqa: E402
from .issue import issue_share, kept_in_registers  # noqa: E402
from .runtime_info import DeviceLimits  # noqa: E402

#: elements of a row each thread holds, as aimed for and at most: on an H100, 16 per
#: thread (4096 bf16 elements over 256 threads) beat 32 (128 threads) by 6-10% for RMSNorm
#: and softmax; 64 keeps rows of up to 64K elements in 1024 threads
PERSISTENT_ELEMENTS = 16
MAX_PERSISTENT_ELEMENTS = 64
#: threads per row beyond which a thread holds more elements instead: rows of 16384 ran at
#: 75-93% of copy bandwidth with 512 threads of 32 elements, 34-86% with 1024 of 16 (H100,
#: RMSNorm / LayerNorm / softmax, bf16 and fp32): 1024-thread blocks wait long at barriers
#: and only two fit on an SM. Past 256 threads the same holds: rows of 8192 bf16 ran at
#: 96.3% (LayerNorm) and 95.6% (softmax) with 256 threads of 32 elements, against 79.0% and
#: 80.8% with 512 of 16 (RMSNorm: 96.8% and 97.1%); a 512-thread block's two barriers per
#: row stall twice as many warps. Rows holding more bytes still take more threads (below).
PREFERRED_MAX_BDX = 256
#: bytes of held inputs per thread past which a row takes more threads (up to 1024): at
#: 384 (LayerNorm fp32, row 16384, 512 threads) the kernel needed 122 registers and ran at
#: 73% of copy, against 86% with 1024 threads holding 192
MAX_HELD_BYTES = 192
#: the issue share (scheduler/issue.py: the SM's instruction slots a segment's arithmetic
#: takes at the memory's speed) above which an inner-persistent thread holds twice
#: PERSISTENT_ELEMENTS of its row: half as many threads a row, so its block reductions'
#: shuffles and barriers cost half as much per element, and more of the row is loaded at
#: once (nvcc, H200 plan: LayerNorm bf16 [16384, 4096] 63 registers, 4 blocks of two rows:
#: 8 rows an SM in flight against 6 at 40 registers; which of the two gains is not
#: measured; softmax's cap of 8 blocks spills and is dropped at load: 48 registers, 5 blocks
#: of two rows, against 8 of one). bf16 rows, 16 -> 32 elements a
#: thread (128 threads a row of 4096, two rows a block), us at [16384, 4096], [32768, 2048],
#: [65536, 1024], [16384, 1024]: an H200 (shares: LayerNorm 1.18, softmax 1.00, RMSNorm
#: 0.93) LayerNorm 68.7 -> 65.7, 68.3 -> 65.6, 68.7 -> 66.7, 19.1 -> 18.5; softmax 68.4 ->
#: 66.2, 67.4 -> 66.1, 67.0 -> 65.7, 18.9 -> 18.3; RMSNorm 65.8 -> 65.7, 66.3 -> 65.9, 66.4
#: -> 66.4, 17.2 -> 17.5. An H100 (LayerNorm 0.83, softmax 0.70, RMSNorm 0.65): LayerNorm
#: 91.2 -> 91.1, 90.8 -> 91.1, 91.0 -> 92.0, 24.3 -> 24.8; softmax level; RMSNorm level but
#: [16384, 1024] 23.9 -> 37.8. (Measured by aiming at 16 and 32; `bench --sweep persistent_wide_*`)
PERSISTENT_WIDE_ABOVE = 0.9
#: threads of an inner-persistent block (rows of fewer threads share one); nvFuser gives a
#: block one row (128 threads for a row of 32 elements a thread). `bench --sweep
#: persistent_block_threads_*`, RMSNorm and LayerNorm bf16 at NORM_SHAPES, 128 / 256 / 512:
#: within 1% on an H100; on an H200 128 and 256 level, 512 up to 4% slower: 256 kept
PERSISTENT_BLOCK_THREADS = BLOCK_THREADS
#: the most warps per SM an inner-persistent kernel's register cap aims at (0: as many as
#: its estimated registers allow); nvFuser aims at 28-32 warps and gives each thread the
#: registers that leaves (64 or 72). `bench --sweep persistent_max_warps_*` (0 / 32 / 48),
#: RMSNorm and LayerNorm bf16: within 0.5% everywhere on an H100 and an H200: off
PERSISTENT_MAX_WARPS = 0


def inner_persistent_plan(sub: SubFusion) -> tuple[ReductionGeometry, int, ReductionParams]:
    """(geometry, vector width, params) of an inner-persistent kernel over `sub` (which has
    runtime info): rows as laid out by `reduction.geometry`, held in registers. Raises
    ValueError where a row does not fit."""
    geo = reduction.geometry(sub, rows=True)
    width = reduction.vectors(sub, geo)[1]
    p = inner_persistent_heuristics(sub, geo, width, aim=persistent_elements(sub, geo))
    # (a row loop's last round of rows depends on the grid, fixed only at load)
    exact = (EXACT_TILES and not p.row_loop and geo.n_iter % p.bdy == 0
             and p.unroll * p.bdx * p.vectorize == geo.n_red)
    return geo, width, dataclasses.replace(p, exact=exact)


def persistent_elements(sub: SubFusion, geo: ReductionGeometry) -> int:
    """Elements of its row an inner-persistent thread aims to hold: PERSISTENT_ELEMENTS,
    twice that where the segment's arithmetic takes more than PERSISTENT_WIDE_ABOVE of the
    device's issue slots per element moved (its tensors spanning rows and columns)."""
    cols = geo_red_classes(sub, geo)
    rows = geo_row_classes(sub, geo)
    moved = 0
    for tv in {*sub.inputs, *sub.outputs}:
        if isinstance(tv, TensorView):
            mine = set(sub.classes_of(tv))
            if mine & cols and (mine & rows or not rows):
                moved += tv.dtype.itemsize
    share = issue_share(sub.exprs, moved, sub.a.info.device_limits)
    return 2 * PERSISTENT_ELEMENTS if share > PERSISTENT_WIDE_ABOVE else PERSISTENT_ELEMENTS


#: an inner-persistent kernel's register cap (min_blocks) counts what it keeps live across
#: each reduction (`live_row_bytes`: the inputs later passes read, the values it keeps in
#: registers) where that is more than the inputs it loads at the start. Without it
#: softmax's plans asked for more blocks than their registers allow, and the loader compiled
#: them again uncapped (`GeneratedKernel.load`): ptxas sm_90, bf16 capped at 32 registers,
#: H100 plans [8192, 8192] and [2048, 16384] spilled 120 and 112 bytes, H200 plans every
#: shape measured (104-168 bytes at rows of 1024 to 16384). The new caps give the kernels
#: the recompiles ran (SASS identical, but at [2048, 16384]: 856 instructions against 872,
#: 64 registers both): one compile fewer, the same kernel
PERSISTENT_CAP_LIVE = True


def inner_persistent_heuristics(sub: SubFusion, geo: ReductionGeometry, vectorize: int, *,
                                extra_held: int = 0, aim: int = PERSISTENT_ELEMENTS) -> ReductionParams:
    """Threads per row (a power of two, up to PREFERRED_MAX_BDX, 1024 where a row needs
    them) so that each holds about PERSISTENT_ELEMENTS of the row in registers, then more
    elements per thread; rows per block to make blocks of BLOCK_THREADS threads.
    `extra_held`: bytes per element of the row the kernel holds besides its inputs."""
    info = sub.a.info
    vecs = -(-geo.n_red // vectorize)
    bdx = min(32, _pow2_ceil(vecs))
    while -(-vecs // bdx) * vectorize > aim and bdx < PREFERRED_MAX_BDX:
        bdx *= 2
    # the kernel holds its tile of every input that spans the reduced axes (rows, weights)
    cols = geo_red_classes(sub, geo)
    held = row_held_bytes(sub, cols, 0) + extra_held
    while -(-vecs // bdx) * vectorize * held > MAX_HELD_BYTES and bdx < min(1024, vecs):  # (not idle threads)
        bdx *= 2
    while -(-vecs // bdx) * vectorize > MAX_PERSISTENT_ELEMENTS // 2 and bdx < 1024:
        bdx *= 2
    batch = max(1, -(-vecs // bdx))
    if batch * vectorize > MAX_PERSISTENT_ELEMENTS:
        raise ValueError(f"a row of {geo.n_red} elements needs {batch * vectorize} registers in each of {bdx} threads")
    bdy = max(1, min(PERSISTENT_BLOCK_THREADS // bdx, _pow2_ceil(geo.n_iter)))
    sms = info.device_limits.sm_count
    if -(-geo.n_iter // bdy) < sms:
        # too few rows to give every SM a block: a row a block, over more threads
        # (LayerNorm bf16 [128, 1000] 3.09 -> 2.90 us on an H100)
        bdy, bdx = 1, few_rows_threads(vecs, vectorize, bdx)
        batch = max(1, -(-vecs // bdx))  # (rows of no elements hold one vector, unread)
    # (what the kernel holds at once: with late loads, what its first pass reads)
    first = first_pass_bytes(sub, cols) + extra_held if PERSISTENT_LATE_LOADS else held
    late = PERSISTENT_LATE_LOADS
    if late == "kept":
        # (in a single wave of blocks a late load's latency is exposed, not hidden by others)
        few = LATE_LOADS_FEW_BLOCKS > 0 and (persistent_min_blocks(info.device_limits, bdx * bdy, batch * vectorize * held)
                                             <= LATE_LOADS_FEW_BLOCKS)
        # (loaded early, a row that one block's registers cannot hold spills, however few the rows)
        over = LATE_LOADS_OVER_REGISTERS and not fits_one_block(info.device_limits, bdx * bdy, batch * vectorize * held)
        groups_past_sms = -(-geo.n_iter // bdy) > sms
        late = first < held and (over or groups_past_sms and (few or keeps_across_reductions(sub)))

    def blocks_for(late_loads: bool) -> int:
        """Blocks an SM, as many as what a thread holds at the start or across a reduction
        (the most) allow."""
        need = first if late_loads else held
        if PERSISTENT_CAP_LIVE:
            need = max(need, live_row_bytes(sub, cols, late_loads) + extra_held)
        return persistent_min_blocks(info.device_limits, bdx * bdy, batch * vectorize * need)

    min_blocks = blocks_for(bool(late))
    waves = -(-geo.n_iter // bdy) > min_blocks * sms
    loop = _loops_rows(sub, geo, waves)
    stage = (not loop and waves and min_blocks <= ROW_LOOP_STAGED_FEW_BLOCKS
             and _stages_fit(sub, geo, bdx * bdy, batch * vectorize, vectorize))
    if stage:
        loop, late = True, False
    if loop and late:  # (a row loop loads the weights before its rows: held throughout)
        min_blocks = blocks_for(False)
    if PERSISTENT_MAX_WARPS:
        min_blocks = max(1, min(min_blocks, PERSISTENT_MAX_WARPS * info.device_limits.warp_size // (bdx * bdy)))
    return ReductionParams(True, True, vectorize, bdx, bdy, batch, 1, info.index_type, min_blocks,
                           row_loop=loop, late_loads=late, stage_rows=stage)


#: an inner-persistent kernel whose rows fill its blocks and whose threads' vectors fill
#: each row exactly (every call's sizes are known when its kernel is planned) checks no
#: bounds: each guarded vector of the row cost a compare, a convergence barrier and a
#: jump (ptxas sm_90). SASS instructions of the H200 plans (bf16 [16384, 4096], as they run,
#: uncapped), whose norms and softmax come near issue-bound: RMSNorm 200 -> 151, LayerNorm
#: 679 -> 622, Thunder's softmax 720 -> 617. Timed on the H100 only (`bench --sweep
#: persistent_exact_tiles_*`, bf16 µs off / on at `ad4d13e`, [16384, 4096], [8192, 8192],
#: [2048, 16384], [16384, 1024], [65536, 1024]): RMSNorm 90.2 / 90.6, 89.9 / 90.3, 46.3 /
#: 46.2, 23.9 / 23.8, 90.3 / 90.4; LayerNorm 90.1 / 90.6, 90.3 / 91.6, 47.5 / 47.4, 24.2 /
#: 24.1, 90.6 / 90.6; softmax 89.8 / 89.8, 90.6 / 90.2, 49.1 / 48.6, 23.8 / 23.8, 89.9 / 89.7
#: (and at `5a3ba9a` within 2.2% either way): level there; the H200, nearer issue-bound, is
#: where fewer instructions could count
EXACT_TILES = True


#: where an inner-persistent kernel loads each input at the first pass over its rows that
#: reads it (a norm's weight and bias after its reductions) rather than all with the row,
#: its occupancy target counting only the inputs its first pass reads: False, True, or
#: "kept": where the kernel also keeps a value in registers across a reduction
#: (`issue.kept_in_registers`: random numbers, exp) and some input is read only later.
#: Measured (`bench --sweep persistent_late_loads_*`, us, early -> late, at [16384, 4096],
#: [8192, 8192], [2048, 16384], [16384, 1024], [65536, 1024]): dropout + add + LayerNorm
#: bf16 (keeps its random numbers) H100 228.1 -> 216.2, 340.7 -> 242.3, 157.5 -> 154.0,
#: 59.8 -> 57.8, 223.6 -> 215.4; H200 225.6 -> 214.4, 333.0 -> 239.9, 154.4 -> 150.4, 58.4
#: -> 56.8, 220.4 -> 213.5 (nvcc: both forms spill at their caps, which are dropped at
#: load; uncapped the early one takes 80 registers, 92 at [8192, 8192], the late 63, 64).
#: Keeping nothing, late loads gained nothing: LayerNorm bf16 H100 90.8 -> 91.5 ... 91.0 ->
#: 92.0, H200 69.2 -> 68.9, 66.6 -> 68.0, 41.9 -> 37.4, 19.2 -> 20.0, 69.2 -> 68.3; RMSNorm
#: fp32 H100 179.4 -> 180.5 ... 179.6 -> 180.9 (2048 x 16384: 93.2 -> 92.4), LayerNorm and
#: RMSNorm fp32 on the H200 likewise slower but at [2048, 16384].
PERSISTENT_LATE_LOADS = "kept"
#: "kept" also loads late where loading early would leave at most this many blocks an SM
#: (0: never): with one or two rows in flight an SM, what the inputs read only after the
#: reductions hold is occupancy the rows' reductions need to hide each other's latency. The
#: lead: late loads' one gain above where nothing is kept, LayerNorm bf16 [2048, 16384] on
#: an H200 (two blocks of 512 threads early), 41.9 -> 37.4 us, and fp32 rows of 16384
#: there. Off: slower on the H100 (`bench --sweep persistent_late_loads_few_blocks_*` at
#: `ad4d13e`, LayerNorm bf16 µs 0 / 2: [2048, 16384] 47.2 / 49.3, [4096, 16384] 90.9 /
#: 92.8, [4096, 12288] 71.5 / 73.1, [8192, 8192] 91.4 / 91.4), not yet swept on an H200
LATE_LOADS_FEW_BLOCKS = 0
#: "kept" also loads late where the inputs loaded early would need more registers than
#: one block's threads can have (`fits_one_block`), however few the rows: a norm's weight
#: and bias beside fp32 rows of 32768 take 1024 threads of 32 elements, each holding 96
#: floats where 64 registers are all a thread of 1024 may take. ptxas sm_90, spill stores
#: early -> late, the same on the H100 and H200 targets (the plans it changes among the
#: fwd norms and softmax at rows of 1000 to 65536): LayerNorm fp32 [1024 | 100, 32768] 216
#: -> 0 (64 registers), [1024, 24576] 96 -> 0, RMSNorm fp32 [1024 | 100, 32768] 48 -> 0,
#: RMSNorm bf16 [128, 65536] 120 -> 0, LayerNorm bf16 [256, 49152] 144 -> 0, [128, 65536]
#: 552 -> 176; dropout + add + LayerNorm [100, 32768] bf16 528 -> 288, fp32 720 -> 504,
#: fp32 [3 | 50 | 100, 16384] 304 -> 120.
#: Early, LayerNorm fp32 [1024, 32768] ran at 185.5 us on an H100, 48% of copy (`bench
#: --sweep welford_one_reduction_layernorm_fwd_fp32` at `95fb2b6`). Late: not yet timed
#: (`bench --sweep persistent_late_loads_over_registers_*`); off until it is
LATE_LOADS_OVER_REGISTERS = False


#: an inner-persistent kernel that fits at most this many blocks an SM (0: never), over
#: rows that are more than one wave of them, takes its rows in turn, each block's next
#: group of rows copied into shared memory (cp.async, `lower.row_loop`'s stages) while
#: it reduces and writes the current one: with one block an SM nothing else keeps its
#: loads going through the reductions and stores. Slower on the H100 at every shape it
#: takes (`bench --sweep row_loop_staged_few_blocks_*` at `3c1dd65`, µs 0 / 1 for fp32, 0 / 2
#: for bf16, at [2048, 16384], [4096, 16384], [8192, 8192], [4096, 12288]): RMSNorm fp32
#: 92.5 / 98.1, 181.4 / 189.9, 177.8 / 177.6, 134.8 / 134.5; LayerNorm fp32 99.9 / 103.3,
#: 191.0 / 200.9, 177.8 / 178.2, 162.5 / 155.9; softmax fp32 91.6 / 101.7, 180.0 / 198.6,
#: 177.8 / 177.8, 134.7 / 134.8; RMSNorm bf16 46.1 / 50.5, 89.9 / 98.6, 90.6 / 90.4, 68.0 /
#: 68.0; LayerNorm bf16 47.3 / 54.5, 90.9 / 108.1, 91.3 / 91.2, 71.4 / 79.9; softmax bf16
#: 48.4 / 52.1, 92.2 / 105.0, 89.9 / 90.1, 69.3 / 69.2 (the one-block fp32 rows already at
#: 95% of copy there). Its lead is the H200, where these rows trail; not yet swept there
ROW_LOOP_STAGED_FEW_BLOCKS = 0


def _stages_fit(sub: SubFusion, geo: ReductionGeometry, threads: int, per_thread: int, vectorize: int) -> bool:
    """Whether every input spanning an inner-persistent kernel's rows and columns can be
    staged in full 16-byte copies (vectors of `vectorize`), `per_thread` elements for each
    of `threads` threads in each of STAGES stages, within the device's stage budget, by a
    row loop (`_row_loop_indexes`)."""
    if not _row_loop_indexes(sub):
        return False
    width = staged_row_bytes(sub, geo_red_classes(sub, geo), geo_row_classes(sub, geo), vectorize)
    return width > 0 and stage_bytes(threads, per_thread, width) <= stage_budget(sub.a.info.device_limits)


def keeps_across_reductions(sub: SubFusion) -> bool:
    """Whether a persistent kernel over `sub` keeps a value in registers across a
    reduction: one `issue.kept_in_registers` computes, that a value after a reduction it
    does not follow depends on (other than through that reduction)."""
    down, _ = sub._flow(sub.reductions())
    exprs = sub.exprs
    for k, e in enumerate(exprs):
        if not kept_in_registers(e):
            continue
        for t in e.outputs:
            if not isinstance(t, TensorView):
                continue
            before = down.get(t, 0)
            reach = {t}
            for f in exprs[k + 1:]:
                if isinstance(f, (ReductionOp, WelfordOp)):
                    continue  # (what a reduction reads, its first pass has)
                if any(v in reach for v in f.inputs):
                    reach.update(o for o in f.outputs if isinstance(o, TensorView))
            if any(down.get(w, 0) & ~before for w in reach):
                return True
    return False


def live_row_bytes(sub: SubFusion, red_classes: set[int], late: bool) -> int:
    """Bytes per element of a row a persistent kernel over `sub` keeps live across one of
    its reductions, at most: each input spanning `red_classes` from its load (the start,
    or with `late` loads the first pass reading it) to the last pass that uses it, and
    each value it keeps in registers (`issue.kept_in_registers`, in its compute type:
    softmax's exp as floats) from the pass computing it to the last using it. A pass is
    the work between two reductions in series (the lowering's stages); a value's use is
    any a pass makes of it or of what it recomputes from it."""
    reds = {r.expr for r in sub.reductions()}
    stage = reduction_stages(sub.exprs)
    # per tensor, the passes using it: a reduction (its input's pass), a kept value (its
    # own), an output (stored in its pass), or any use of a value recomputed from it
    uses: dict[TensorView, set[int]] = {o: {stage.get(o, 0)} for o in sub.outputs if isinstance(o, TensorView)}

    def spans_row(tv: TensorView) -> bool:
        return bool(set(sub.classes_of(tv)) & red_classes) and bool(uses.get(tv))

    spans = []  # (first pass, last pass, bytes)
    for e in reversed(sub.exprs):
        if e in reds:
            at = {stage.get(e.inputs[0], 0)}
        elif kept_in_registers(e):
            outs = [o for o in e.outputs if isinstance(o, TensorView)]
            # (walking backwards, every use of a kept value is already counted)
            spans += [(stage[o], max(uses[o]), max(4, o.dtype.itemsize)) for o in outs if spans_row(o)]
            at = {stage.get(o, 0) for o in outs}
        else:
            at = set().union(*(uses.get(o, set()) for o in e.outputs))
        for v in e.inputs:
            if isinstance(v, TensorView):
                uses.setdefault(v, set()).update(at)
    spans += [(min(uses[tv]) if late else 0, max(uses[tv]), tv.dtype.itemsize)
              for tv in sub.inputs if isinstance(tv, TensorView) and spans_row(tv)]
    last = max((b for _, b, _ in spans), default=0)
    return max((sum(n for a, b, n in spans if a <= k < b) for k in range(last)), default=0)


def first_pass_bytes(sub: SubFusion, red_classes) -> int:
    """Bytes per element of a row of the inputs spanning `red_classes` that a persistent
    kernel with late loads reads in its first pass (what feeds a reduction, or an output
    that follows none) and so holds at once; the others it reads later, a vector at a time."""
    down, up = sub._flow(sub.reductions())
    need = {o for o in sub.outputs if isinstance(o, TensorView) and not down.get(o, 0)}
    for e in reversed(sub.exprs):
        if any(o in need for o in e.outputs):
            need.update(x for x in e.inputs if isinstance(x, TensorView))
    return row_held_bytes(sub, red_classes, 0, need | {tv for tv in sub.inputs if up.get(tv, 0)})


#: where an inner-persistent kernel's blocks take groups of rows in turn (a grid of the
#: blocks the GPU holds at once) instead of a block per group: "never"; "weights", where
#: an input spans the columns but not the rows (each block then loads it once rather than
#: once per group of rows) and the groups are more than one wave of blocks; "always".
#: Slower wherever measured, so never: `bench --sweep persistent_row_loop_*`, H200, µs
#: never / weights at [16384, 4096], [8192, 8192], [2048, 16384], [16384, 1024],
#: [65536, 1024]: LayerNorm bf16 68.6 / 83.7, 66.2 / 75.3, 41.7 / 63.0, 19.1 / 23.2,
#: 68.6 / 82.2; RMSNorm bf16 65.4 / 73.8, 65.7 / 74.6, 34.6 / 37.8, 17.2 / 18.5, 66.4 /
#: 73.8; LayerNorm fp32 130.1 / 143.9 ... 33.9 / 37.5; softmax bf16 (no weight) always:
#: 68.5 / 77.9. Re-reading the weight from L2 for every row is not what limits these
#: kernels; likely (not measured) a block per row, 8 resident per SM, hides each row's
#: reduction better than a resident block looping (its loads ahead, ROW_LOOP_LOADS, win back part: LayerNorm bf16
#: staged 75.7 at [16384, 4096], 41.0 at [2048, 16384]). Not yet measured on an H100.
PERSISTENT_ROW_LOOP = "never"


def _row_loop_indexes(sub: SubFusion) -> bool:
    """Whether a row loop can tell the inputs that span the rows: by the reference's axes
    only, so not where a reshape derives axes the reference lacks."""
    return not (RESHAPE in sub.kinds and reduction.index_plan(sub).steps)


def _loops_rows(sub: SubFusion, geo: ReductionGeometry, waves: bool) -> bool:
    """Whether the inner-persistent kernel over `sub` takes rows in turn (see
    PERSISTENT_ROW_LOOP); `waves`: its groups of rows are more blocks than fit at once."""
    if not _row_loop_indexes(sub):
        return False
    if PERSISTENT_ROW_LOOP == "always":
        return True
    if PERSISTENT_ROW_LOOP != "weights" or not waves:
        return False
    rows, cols = geo_row_classes(sub, geo), geo_red_classes(sub, geo)
    return any(isinstance(tv, TensorView) and (c := set(sub.classes_of(tv))) & cols and not c & rows for tv in sub.inputs)


#: registers a persistent kernel's thread needs besides its held row: indices, the
#: reductions' accumulators, temporaries
PERSISTENT_OVERHEAD_REGISTERS = 16


def persistent_min_blocks(limits: DeviceLimits, threads: int, held_bytes: int) -> int:
    """Blocks per SM a persistent kernel is compiled to fit: as many as the registers its
    held row and PERSISTENT_OVERHEAD_REGISTERS more allow. Left to itself, the compiler
    keeps values it could recompute and lowers occupancy: LayerNorm bf16 [16384, 4096]
    took 47 registers (5 blocks of 256 threads per SM) and ran at 91% of copy on an H100;
    capped at 40 (6 blocks), 96.5%. A cap that makes the kernel spill is dropped when it
    is loaded (`GeneratedKernel.load`)."""
    regs = persistent_registers(held_bytes)
    blocks = min(limits.max_threads_per_sm // max(threads, 1), limits.registers_per_sm // (threads * regs),
                 limits.max_blocks_per_sm)
    return max(blocks, 1)


#: registers one thread may address (sm_30 onwards)
MAX_THREAD_REGISTERS = 255


def persistent_registers(held_bytes: int) -> int:
    """Registers a persistent kernel's thread takes to hold `held_bytes` of its row, with
    PERSISTENT_OVERHEAD_REGISTERS more, as they are allocated (8 at a time)."""
    return -(-(held_bytes // 4 + PERSISTENT_OVERHEAD_REGISTERS) // 8) * 8


def fits_one_block(limits: DeviceLimits, threads: int, held_bytes: int) -> bool:
    """Whether a block of `threads` threads, each holding `held_bytes` of its row, fits
    the SM's registers without spilling (`persistent_registers` a thread)."""
    regs = persistent_registers(held_bytes)
    return regs <= MAX_THREAD_REGISTERS and threads * regs <= limits.registers_per_sm


def geo_row_classes(sub: SubFusion, geo: ReductionGeometry) -> set[int]:
    """The axis classes of a geometry's rows (the axes its reductions keep)."""
    return {sub.uf.find(sub.a.id_of(i)) for i in geo.iter_axes}


def geo_red_classes(sub: SubFusion, geo: ReductionGeometry) -> set[int]:
    """The axis classes of a geometry's columns, and those reshapes derive from them (an
    input reshaped into the reference spans its row through them)."""
    cols = {sub.uf.find(sub.a.id_of(i)) for i in geo.red_axes}
    if RESHAPE in sub.kinds:
        for r in sub.reductions():
            if r.input is geo.ref and r.red_classes == cols:
                cols |= sub.column_classes(r)
    return cols


#: threads and rows per block of an inner-outer kernel (rows over threadIdx.y), at most:
#: on an H100, RMSNorm backward bf16 [16384, 4096] ran at 86% of copy with 256 x 2 threads
#: against 77% with 256 x 1 (LayerNorm backward 67% against 64%); over rows of 1024,
#: 64 x 4 threads ran at 74% against 60% with 64 x 8 and 67% with 64 x 2. nvFuser's plan for
#: RMSNorm backward (its dump, H100) is 4 blocks of 128 an SM; `bench --sweep
#: inner_outer_small_blocks_*` (compiled for 512 threads an SM), H100, µs at 128 / 256 / 512:
#: RMSNorm bf16 [16384, 4096] 147.1 / 154.8 / 141.0, [8192, 8192] 146.9 / 146.9 / 144.2,
#: [16384, 1024] 43.5 / 39.5 / 39.6; LayerNorm 173.3 / 152.8 / 147.9, 174.2 / 173.1 / 154.1,
#: 49.1 / 45.4 / 45.4
INNER_OUTER_BLOCK_THREADS = 512
INNER_OUTER_BLOCK_ROWS = 4
#: vectors of each row input a thread of an inner-outer kernel holds, over 2-byte values:
#: RMSNorm backward bf16 [16384, 4096] 89.2% of copy with 128 x 4 threads of 4 vectors,
#: against 83.9% with 256 x 2 of 2 (LayerNorm backward 72% either way)
INNER_OUTER_VECTORS = 4
#: ... with at most INNER_OUTER_WIDE_MAX_OUTER outer reductions; with more, half as many
#: threads: their column tiles take registers enough that one 512-thread block fills an
#: SM, leaving its barriers unhidden (seed 001, four outer reductions, rows of 1024: 128 x 2
#: threads 220 us against 128 x 4 234 us). `bench --sweep inner_outer_wide_max_outer`,
#: H100, µs never (0) / up to 2 / always (8): LayerNorm backward bf16 (2 outer reductions)
#: [16384, 1024] 47.3 / 46.1 / 46.2, [16384, 2048] 78.8 / 82.1 / 82.1, [16384, 4096] 146.6 /
#: 148.6 / 149.7, [8192, 8192] 161.2 / 154.9 / 155.1, [4096, 16384] 237.9 / 238.4 / 238.3;
#: RMSNorm backward (1) never / up to 2: 43.2 / 42.8, 84.8 / 85.9, 141.3 / 142.8, 141.4 /
#: 145.8 at those shapes: within 4% either way, no setting best everywhere; kept at 2.
#: H200: LayerNorm 42.4 / 39.5 / 39.5, 64.1 / 67.4 / 67.5, 127.9 / 124.9 / 124.9, 144.8 /
#: 130.6 / 130.5, 171.9 / 171.8 / 171.5 (wide wins by 10% at [8192, 8192]); RMSNorm 33.1 /
#: 33.5, 60.0 / 61.4, 105.9 / 115.5, 111.7 / 118.5: with one outer reduction "never" is 6-9%
#: faster from rows of 4096 on an H200 (3% on an H100), the lead for a rule on the count.
#: Measured again on an H100 (2026-12-07, `21babcb`), µs never / up to 2: RMSNorm 41.2 /
#: 41.1, **75.0 / 83.4**, 150.4 / 141.1, 157.0 / 143.9; LayerNorm (never / 2 / 8) 44.6 /
#: 45.0 / 45.0, **78.0 / 80.7** / 80.5, 154.7 / 146.9 / 146.1, 171.6 / 152.9 / 153.3, [4096,
#: 16384] 393.3 / 154.6 / 154.9: the wide layout now leads from rows of 4096 on the H100
#: and loses at rows of 2048 on both GPUs (INNER_OUTER_WIDE_FULL_BLOCKS)
INNER_OUTER_WIDE_MAX_OUTER = 2
#: the wide layout only where its rows fill INNER_OUTER_BLOCK_THREADS threads in
#: INNER_OUTER_BLOCK_ROWS rows; else the plain layout in blocks of half as many, as with
#: the wide one off. Rows of 2048 2-byte values in 4 vectors a thread take 64 threads, four
#: rows a block of 256; the plain layout gives them 128 threads of 2 vectors, two rows a
#: block, in RMSNorm backward (256 threads of one in LayerNorm's; the [16384, 2048] figures
#: above: "never" is the plain layout). LayerNorm's rows of
#: 1024 and 2048 also turn plain (the wide layout's 2 or 4 vectors, capped at 80 registers
#: for 3 blocks an SM, spill 68 and 620 bytes, ptxas sm_90, and load uncapped): H100 44.6 /
#: 45.0 at [16384, 1024], but an H200 at `5205fc2` had 42.4 / 39.5 there (`bench --sweep
#: inner_outer_wide_full_blocks_*` times both on each GPU). H100 at `ad4d13e`, LayerNorm
#: backward bf16 µs off / on: [16384, 1024] 44.8 / 44.6, [16384, 1536] 67.6 / 64.0, [16384,
#: 2048] 80.5 / 78.0, [32768, 2048] 153.0 / 144.2, [16384, 3072] 116.0 / 116.1
INNER_OUTER_WIDE_FULL_BLOCKS = True
#: a fusion with reductions along and across its rows whose inner-outer kernel would have
#: fewer groups of rows (blocks) than the GPU has SMs runs as separate kernels instead: the
#: few blocks spend most of their time combining partials across the grid (ncu, H100,
#: RMSNorm backward bf16 [128, 1000]: 32 blocks, SMs busy 3.1k of 17.6k cycles). `bench
#: --sweep inner_outer_few_rows_apart_*`, µs one kernel / apart at [128, 1000], [256, 4096],
#: [512, 1000], [512, 4096], [1024, 1000] (256 groups: one kernel), [2048, 4096]: H100
#: RMSNorm backward bf16 7.1 / 3.3, 11.4 / 6.6, 7.1 / 6.3, 13.5 / 10.7, 9.0, 27.5; LayerNorm
#: bf16 8.7 / 3.4, 16.1 / 7.9, 9.5 / 6.9, 18.4 / 12.0, 12.0, 32.8; fp32 9.0 / 3.9, 14.4 (one
#: kernel: rows of 4096 floats take a block each), 9.7 / 7.5, 18.0 / 17.8, 11.4, 43.6. H200:
#: 6.9 / 3.2, 11.0 / 6.3, 6.8 / 6.1, 12.7 / 9.5; 8.7 / 3.4, 15.8 / 7.5, 9.1 / 6.9, 17.7 /
#: 11.1; 8.9 / 3.9, 13.4 / 13.2, 9.1 / 6.9, 16.8 / 16.7
INNER_OUTER_FEW_ROWS_APART = True
#: registers per thread an inner-outer kernel may spend keeping its first pass's values
#: (`first_pass_frontier` per element it holds of a row) so that the pass after the row
#: reductions reads them instead of recomputing them from the loaded row: fewer
#: instructions, more registers. `bench --sweep inner_outer_keep_*`, µs recomputed / kept,
#: (registers the rule counts): H100 seed 001 173.1 / 157.2 (4 values x 8 elements),
#: LayerNorm backward bf16 [2048, 1000] 17.8 / 13.5 (3 x 16), RMSNorm backward fp32
#: [16384, 4096] 286.7 / 281.9 and [2048, 4096] 42.1 / 39.8 (3 x 8), LayerNorm fp32 286.5 /
#: 286.5 and 43.7 / 43.7; but LayerNorm bf16 [16384, 4096] (3 x 32) 148.7 / 304.9 (spilled),
#: RMSNorm bf16 142.5 / 148.3 and [2048, 4096] 27.6 / 26.8. H200: seed 001 172.2 / 140.4;
#: LayerNorm bf16 [16384, 4096] 124.8 / 269.9, [2048, 4096] 29.6 / 44.7; RMSNorm bf16
#: 115.4 / 110.2, 24.0 / 22.9 (3 x 32 each); LayerNorm fp32 203.3 / 204.1, 35.0 / 35.4
INNER_OUTER_KEEP_REGISTERS = 48
#: threads per SM an inner-outer kernel is compiled to make room for (its blocks per SM,
#: __launch_bounds__' second argument, from its block size, where that is 2 or more; 0:
#: the compiler's register choice decides), as long as the cap spills at most
#: INNER_OUTER_SPILL_MAX bytes a thread. H100, `bench --sweep inner_outer_sm_threads_*`,
#: µs 0 / 768 / 1024 (registers, bytes spilled): seed 001 (256-thread blocks, four column
#: tiles) 156.0 (112) / 142.3 (80, 32) / 264.8 (64, 120); LayerNorm backward bf16 [16384,
#: 1024] (256 threads) 45.4 (113) / 54.8 (80, 64) / 100.0; RMSNorm backward [16384, 1024]
#: 41.3 / 41.4 / 44.2; 512-thread blocks ([16384, 4096]): RMSNorm 140.8 (86) / 147.2 (96,
#: one block asked for) / 142.7 (64, 24), LayerNorm 148.0 (128) / 147.0 / 860.4 (64, 360).
#: With the spill bound (a second H100 run): seed 001 155.6 / 142.4 / 155.5 (1024 spills:
#: dropped); RMSNorm backward [16384, 1024] 41.3 / 41.4 / 44.6
INNER_OUTER_SM_THREADS = 768
INNER_OUTER_SPILL_MAX = 32
#: groups of rows a row loop holds in shared memory at once (lower.row_loop stages them
#: through cp.async): the current one and STAGES - 1 in flight (three or four stages
#: measured no faster than two with the rows read back from the stages, REREAD_STAGED)
STAGES = 2
#: the dynamic shared memory those stages may take at most, the device's per-block limit
#: permitting, and what is left beside them for the block reductions' static scratch
STAGE_MAX_BYTES = 128 * 1024
STATIC_SMEM_RESERVE = 16 * 1024
#: an inner-outer kernel whose row inputs sit in shared-memory stages, read back a vector
#: at a time in each pass (lower.row_loop.REREAD_STAGED), holds in registers only the rest
#: of a row: the weights and the column accumulators. Where the rows would overflow the
#: registers, such a plan (`ReductionParams.stage_rows`) lets rows that fit the stages run
#: as one kernel instead of a reduction across rows beside an inner-persistent kernel,
#: both reading every row: RMSNorm and LayerNorm backward over bf16 rows of 16384 (a
#: thread's share is that of rows of 4096 in blocks of four rows; H100 bench, [2048,
#: 16384]: 118 us, 56% of copy), LayerNorm backward over fp32 rows of 8192 ([8192, 8192]:
#: 371 us, 72%). `bench --sweep inner_outer_staged_fit_*`, H100, us without and with:
#: RMSNorm bf16 [2048, 16384] 122.0 / 80.4, [8192, 16384] 483.1 / 289.5; LayerNorm bf16
#: [2048, 16384] 123.2 / 90.2, [2048, 12288] 88.1 / 74.1; LayerNorm fp32 [8192, 8192]
#: 386.3 / 295.8, [16384, 7000] 660.1 / 512.0; rows that fit the registers unchanged.
INNER_OUTER_STAGED_FIT = True
#: the share of the register file such a kernel's row may take (weights and column
#: accumulators: nothing else of the row is held, so more than PERSISTENT_REGISTER_FRACTION).
#: ptxas sm_90, LayerNorm backward bf16 [2048, 16384] (10 bytes of each of 16384 elements,
#: 62% of the file) as one kernel: 128 registers, no spill; at the general half its dbias
#: sum runs as a kernel of its own, reading the gradient again.
STAGED_REGISTER_FRACTION = 0.7


def stage_budget(limits: DeviceLimits) -> int:
    """Bytes of dynamic shared memory a row loop's stages may take on `limits`' device."""
    return min(STAGE_MAX_BYTES, limits.smem_per_block - STATIC_SMEM_RESERVE)


def stage_bytes(threads: int, per_thread: int, itemsize: int) -> int:
    """Bytes of shared memory a row loop's stages of one row input take: `per_thread`
    elements of `itemsize` bytes for each of `threads` threads, in each of STAGES stages
    (a thread's whole tile: vectors past the row's end included)."""
    return STAGES * threads * per_thread * itemsize


def staged_row_bytes(sub: SubFusion, red_classes, row_classes, vectorize: int) -> int:
    """Bytes per element of a row of the inputs an inner-outer kernel with vectors of
    `vectorize` elements can hold in shared-memory stages (those spanning its rows and
    columns, where every vector of them is a full 16-byte copy: rows of 14338 bf16, in
    2-element vectors over 1024 threads, spilled 164 bytes a thread; see
    INNER_OUTER_STAGED_FIT); 0 where it can stage none."""
    rows = [tv for tv in sub.inputs if isinstance(tv, TensorView)
            and set(sub.classes_of(tv)) & red_classes and set(sub.classes_of(tv)) & row_classes]
    if any(tv.dtype.itemsize * vectorize < reduction.VECTOR_BYTES for tv in rows):
        return 0
    return sum(tv.dtype.itemsize for tv in rows)


def rows_overflow_registers(sub: SubFusion, geo: ReductionGeometry) -> bool:
    """Whether an inner-outer kernel's row (its inputs along it, weights, a float
    accumulator per outer reduction) takes more than `register_budget`."""
    n_outer = sum(1 for r in sub.reductions() if not r.is_inner)
    return row_held_bytes(sub, geo_red_classes(sub, geo), n_outer) * geo.n_red > register_budget(sub)


#: threads per block of an outer-persistent kernel, and bytes of held inputs per thread at
#: most (its blocks must all be resident: two of 256 threads per SM leave 128 registers)
OUTER_PERSISTENT_THREADS = 256
#: rows few enough for one block of OUTER_PERSISTENT_THREADS threads, FEW_COLUMNS_MIN_BDX
#: vectors wide, at UNROLL rows a thread, take one block per column group: a block reduction
#: instead of blocks sharing the rows and synchronising the grid (ncu, H200, batch norm bf16
#: [128, 1000]: most of its 22k cycles were blocks waiting at the grid barrier). `bench
#: --sweep outer_one_block_*`, H100, batch norm bf16 / fp32, us: [128, 1000] 10.8 -> 3.7 /
#: 12.3 -> 3.9, [256, 1000] 24.0 -> 5.3 / 25.3 -> 5.5, [64, 4096] 11.7 -> 3.9 / 11.8 -> 4.0,
#: [200, 333] 5.5 -> 3.1 / 5.6 -> 3.1; [1024, 1000] (a grid still) unchanged
OUTER_ONE_BLOCK = True
#: ... with shorter vectors while twice the column groups still fit one wave, as the outer
#: reduction's few-columns rule does, and put at most OUTER_ONE_BLOCK_SM_THREADS threads on
#: an SM (batch norm [128, 1000]: 63 blocks of 4-element vectors on 132 SMs, 125 of 2).
#: `bench --sweep outer_one_block_short_vectors_*`, µs off / on, bf16 then fp32: H100 [128,
#: 1000] 3.7 / 2.9, 3.9 / 3.2; [64, 1000] 4.0 / 2.4, 3.9 / 2.3; [128, 512] 3.1 / 2.3, 3.1 /
#: 2.1; H200 3.7 / 2.9, 3.6 / 3.0; 3.9 / 2.4, 3.9 / 2.3; 3.1 / 2.2, 3.1 / 2.0; [256, 1000],
#: [64, 4096], [200, 333], [128, 4096] level on both. Without the cap [256, 1000] (242
#: threads an SM) lost, H100 5.3 -> 6.2 and 5.4 -> 6.7: the half-sector loads cost more
#: than the spread gains
OUTER_ONE_BLOCK_SHORT_VECTORS = True
#: (one warp for each of an SM's four schedulers)
OUTER_ONE_BLOCK_SM_THREADS = 128
OUTER_MAX_HELD_BYTES = 192
#: blocks per SM an outer-persistent kernel is compiled to fit (__launch_bounds__)
OUTER_PERSISTENT_MIN_BLOCKS = 2


def outer_persistent_plan(sub: SubFusion) -> tuple[ReductionGeometry, int, ReductionParams]:
    """(geometry, vector width, params) of an outer-persistent kernel: a block's threads
    take `vectorize` adjacent columns each over threadIdx.x and rows over threadIdx.y, and
    hold `unroll` rows of them; `grid_y` blocks share a column group, all resident at once
    (their grid synchronises). Raises ValueError where the rows do not fit on the GPU."""
    info = sub.a.info
    geo = reduction.geometry(sub)
    if geo.inner:
        raise ValueError("the reduced axes are innermost in memory (not an outer reduction)")
    vectorize = reduction.vectors(sub, geo)[1]
    sms = info.device_limits.sm_count
    col_vecs = -(-geo.n_iter // vectorize)
    narrow = min(reduction.FEW_COLUMNS_MIN_BDX, _pow2_ceil(col_vecs))
    if OUTER_ONE_BLOCK and geo.n_red <= (OUTER_PERSISTENT_THREADS // narrow) * reduction.UNROLL:
        # every row in one block of narrow column groups: a block reduction, no grid barrier
        bdy = max(1, min(OUTER_PERSISTENT_THREADS // narrow, _pow2_ceil(-(-geo.n_red // reduction.UNROLL))))
        unroll = max(1, -(-geo.n_red // bdy))
        # (one wave, of at most OUTER_ONE_BLOCK_SM_THREADS threads an SM)
        most = min(sms, OUTER_ONE_BLOCK_SM_THREADS * sms // (narrow * bdy))
        one_vec = reduction.wave_vector(geo.n_iter, narrow, vectorize, most) if OUTER_ONE_BLOCK_SHORT_VECTORS else vectorize
        held = row_held_bytes(sub, geo_red_classes(sub, geo), 0) * unroll * one_vec
        if held <= OUTER_MAX_HELD_BYTES:
            return geo, one_vec, ReductionParams(False, True, one_vec, narrow, bdy, unroll, 1, info.index_type)
    bdx = min(32, _pow2_ceil(col_vecs))
    bdy = max(1, min(OUTER_PERSISTENT_THREADS // bdx, _pow2_ceil(geo.n_red)))
    blocks_x = max(1, -(-col_vecs // bdx))  # (no columns: an empty grid, one block planned)
    resident = OUTER_PERSISTENT_MIN_BLOCKS * info.device_limits.sm_count
    if blocks_x > resident:
        raise ValueError(f"{blocks_x} blocks of columns, more than the {resident} an outer-persistent grid holds")
    grid_y = max(1, min(resident // blocks_x, -(-geo.n_red // bdy)))
    unroll = max(1, -(-geo.n_red // (bdy * grid_y)))
    held = row_held_bytes(sub, geo_red_classes(sub, geo), 0) * unroll * vectorize
    if held > OUTER_MAX_HELD_BYTES:
        fit = bdy * grid_y * (OUTER_MAX_HELD_BYTES // max(1, held // unroll))
        raise ValueError(f"{geo.n_red} rows need {held} bytes of registers per thread (at most "
                         f"{OUTER_MAX_HELD_BYTES}: {fit} rows fit)")
    grid_y = max(1, -(-geo.n_red // (bdy * unroll)))  # no block without rows
    return geo, vectorize, ReductionParams(False, True, vectorize, bdx, bdy, unroll, grid_y, info.index_type)


def inner_outer_heuristics(sub: SubFusion, geo: ReductionGeometry, vectorize: int) -> ReductionParams:
    """The inner-persistent row layout (blocks take groups of rows in turn), counting the
    float tile of column accumulators each outer reduction keeps per thread, in blocks of
    INNER_OUTER_BLOCK_THREADS threads."""
    n_outer = sum(1 for r in sub.reductions() if not r.is_inner)
    p = inner_persistent_heuristics(sub, geo, vectorize, extra_held=4 * n_outer)
    threads = INNER_OUTER_BLOCK_THREADS if n_outer <= INNER_OUTER_WIDE_MAX_OUTER else INNER_OUTER_BLOCK_THREADS // 2
    if n_outer <= INNER_OUTER_WIDE_MAX_OUTER and vectorize * 4 > reduction.VECTOR_BYTES:
        # rows of 2-byte values: INNER_OUTER_VECTORS vectors of each input a thread, so
        # that one or two blocks per SM keep enough loads in flight; two warps a row at
        # least (rows of 1024: see INNER_OUTER_BLOCK_THREADS)
        vecs = -(-geo.n_red // vectorize)
        bdx = max(min(64, _pow2_ceil(vecs)), min(1024, _pow2_ceil(-(-vecs // INNER_OUTER_VECTORS))))
        if INNER_OUTER_WIDE_FULL_BLOCKS and bdx * INNER_OUTER_BLOCK_ROWS < threads:
            threads //= 2  # (the plain layout's blocks, as without the wide one)
        else:
            p = dataclasses.replace(p, bdx=bdx, unroll=max(1, -(-vecs // bdx)))
    bdy = max(1, min(threads // p.bdx, INNER_OUTER_BLOCK_ROWS, _pow2_ceil(geo.n_iter)))
    for seg, _ in row_segments(sub, geo).values():
        while seg % bdy:  # a block's group of rows lies in one segment
            bdy //= 2
    # (its grid is as many blocks as fit at once: the compiler's register choice decides,
    # within INNER_OUTER_SM_THREADS; the inner-outer kernel takes rows in turn whatever
    # `row_loop` says)
    # a kept value costs a register per element of the row a thread holds
    keep = first_pass_frontier(sub, geo) * p.unroll * p.vectorize <= INNER_OUTER_KEEP_REGISTERS
    min_blocks = INNER_OUTER_SM_THREADS // (p.bdx * bdy)
    if min_blocks < 2:  # (one block asked for still changes the compiler's choice)
        min_blocks = 0
    return dataclasses.replace(p, bdy=bdy, min_blocks=min_blocks, row_loop=False, late_loads=False,
                               keep_first_pass=keep, spill_max=INNER_OUTER_SPILL_MAX if min_blocks else 0,
                               stage_rows=INNER_OUTER_STAGED_FIT and rows_overflow_registers(sub, geo))


def first_pass_frontier(sub: SubFusion, geo: ReductionGeometry) -> int:
    """The number of row-spanning values computed before the reductions along the rows and
    read after them: what a persistent kernel's later pass either recomputes from the
    loaded row or keeps in registers from its first pass."""
    cols = geo_red_classes(sub, geo)
    after, _ = sub._flow([r for r in sub.reductions() if r.is_inner])  # (what depends on them)
    produced = set(sub.produced)
    frontier = {v for e in sub.exprs if any(after.get(o) for o in e.outputs) for v in e.inputs
                if isinstance(v, TensorView) and v in produced and not after.get(v) and set(sub.classes_of(v)) & cols}
    return len(frontier)
