"""Kernel IR: what one CUDA kernel does, as structured statements over expression trees.

Lowering builds it from a scheduled Fusion (loop nests from the loop domains, indices from
the transforms, predicates, vector accesses, reductions); `fuser.codegen.cuda` alone prints
it as C. Nothing here is C text.

Expressions are immutable. Index arithmetic (`IndexBinary`, built by `+ - * // %` on
expressions and the helpers below) runs in the kernel's index type over loop variables,
thread and block indices, integer literals and kernel parameters; the Fusion IR's arithmetic
(`Unary`, `Binary`, `Ternary`, `Cast`, `Const`) keeps its ops and operand/result DataTypes,
so codegen gives it PyTorch's semantics.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from fuser.ir.domain import MemoryType, ParallelType
from fuser.ir.dtype import DataType
from fuser.ir.exprs import BinaryOpType, RNGOpType, TernaryOpType, UnaryOpType

# --- expressions ---------------------------------------------------------------------------


class Expr:
    """A kernel IR expression; `+ - * // %` build index arithmetic (`//` truncates)."""

    __slots__ = ()

    def __add__(self, other: Expr | int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Add, self, as_expr(other))

    def __radd__(self, other: int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Add, as_expr(other), self)

    def __sub__(self, other: Expr | int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Sub, self, as_expr(other))

    def __rsub__(self, other: int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Sub, as_expr(other), self)

    def __mul__(self, other: Expr | int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Mul, self, as_expr(other))

    def __rmul__(self, other: int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Mul, as_expr(other), self)

    def __floordiv__(self, other: Expr | int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Div, self, as_expr(other))

    def __mod__(self, other: Expr | int) -> IndexBinary:
        return IndexBinary(BinaryOpType.Mod, self, as_expr(other))


@dataclass(frozen=True)
class Var(Expr):
    """A named variable: a loop index, a register or shared array, a scalar (see Decl, For)."""

    name: str


@dataclass(frozen=True)
class ParallelIndex(Expr):
    """The thread's index along a block or thread dimension (blockIdx.x, threadIdx.y, ...);
    unsigned: wrap it in IndexCast for index arithmetic."""

    ptype: ParallelType


@dataclass(frozen=True)
class ParallelDim(Expr):
    """The size of a block or thread dimension: gridDim for BID types, blockDim for TID ones."""

    ptype: ParallelType


#: blocks take their data from the end: the first block dispatched works on the last rows
#: (or elements) along blockIdx.x, and an outer reduction's first steps on its last reduced
#: rows (ReductionLowering._row_col). A tensor's producer writes its last part last, so that part
#: is still in L2 when the next kernel starts, and a kernel that reads it first finds it there
#: before its own traffic evicts it. Cold (L2 flushed) it changes nothing. H100, bf16, first
#: run on freshly made inputs (µs, in order / from the end): RMSNorm [16384, 4096] 90.0 / 88.3,
#: LayerNorm 90.0 / 88.2, softmax 90.7 / 88.5, GELU [16384, 8192] 177.8 / 175.8; L2 flushed
#: first: 90.2 / 90.4, 90.0 / 89.9, 91.2 / 91.4, 177.5 / 177.5. `bench --sweep
#: blocks_from_end_*` (timed after a copy rewrites the input), off / on, µs: H100 RMSNorm
#: [16384, 4096] 93.4 / 90.0, softmax 93.4 / 90.4, GELU 181.3 / 177.5, outer sum fp32
#: [16384, 8192] 186.8 / 183.1; H200 RMSNorm 69.2 / 67.6, LayerNorm 70.0 / 69.2. The GPU
#: suite, memcheck and the GPU fuzz ran with it on (H100) before it was turned on.
BLOCKS_FROM_END = True


def counted_from_end(index: Expr, count: Expr) -> Expr:
    """`index` of `count` counted from the last where BLOCKS_FROM_END holds."""
    return count - 1 - index if BLOCKS_FROM_END else index


def data_block(from_end: bool = True) -> Expr:
    """blockIdx.x as the index of the block's share of the data, counted from the end where
    `from_end` (see BLOCKS_FROM_END)."""
    index = IndexCast(ParallelIndex(ParallelType.BIDx))
    return counted_from_end(index, IndexCast(ParallelDim(ParallelType.BIDx))) if from_end else index


@dataclass(frozen=True)
class ColumnWidth(Expr):
    """Columns a block combines per step of a grid-wide column reduction (at least 8, at
    most a quarter of the block's `threads`, enough to spread `n_cols` over the grid): an
    int. Prints `fuser::column_width(n_cols, threads)`."""

    n_cols: Expr
    threads: int


@dataclass(frozen=True)
class IntLit(Expr):
    """An integer literal of index arithmetic."""

    value: int


@dataclass(frozen=True)
class Const(Expr):
    """A constant of a Fusion DataType (converted to it as PyTorch casts)."""

    value: bool | int | float | complex
    dtype: DataType


@dataclass(frozen=True, eq=False)
class Param(Expr):
    """A kernel parameter and where its value comes from at launch.

    `kind`: "tensor" (`source` is the TensorView; a pointer), "stride" (`source` is
    (TensorView, logical dim)), "extent" (`source` is the Scalar), "scalar" (a scalar input),
    "work" (a grid reduction's partials: `source` is (bytes per value, values per block, values
    beside those)),
    "semaphore" (the grid reductions' arrival counters, unsigned ints), "index_error" (the
    error flag of the index ops' device checks: unsigned long longs, see IndexCheck),
    "philox_seed" / "philox_offset" (the seed and base offset that unseeded RNG ops draw
    once per fusion execution), "philox_state" (null, or a device array holding both: what a
    launch captured in a CUDA graph reads, drawn on the device at each replay).
    `dtype` None: the kernel's index type. `fmt`: the struct format letter it is packed with.
    """

    name: str
    kind: str
    source: Any
    fmt: str
    dtype: DataType | None = None
    pointer: bool = False
    #: a pointer the kernel only reads
    readonly: bool = False
    #: a work buffer of Welford accumulators of `dtype`
    welford: bool = False


@dataclass(frozen=True)
class IndexCast(Expr):
    """`value` converted to the kernel's index type."""

    value: Expr


@dataclass(frozen=True)
class IndexBinary(Expr):
    """Index arithmetic, a comparison or a logical and/or in the kernel's index type: `op` is
    Add, Sub, Mul, Div (truncating), Mod, CeilDiv, Max, Min, Lt, Le, Gt, Ge, Eq, Ne,
    LogicalAnd or LogicalOr."""

    op: BinaryOpType
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True)
class Not(Expr):
    """The logical negation of a condition."""

    value: Expr


@dataclass(frozen=True)
class Unary(Expr):
    """A Fusion IR unary op (Cast included) on `operand` of `dtype`, giving `out`. `approx`:
    a float exp computed as ex2.approx (see `fuser.preseg.approx_exp`)."""

    op: UnaryOpType
    operand: Expr
    dtype: DataType
    out: DataType
    approx: bool = False


@dataclass(frozen=True)
class Binary(Expr):
    """A Fusion IR binary op. `common`: the type comparisons and logical ops run in (the
    operands' promoted type, which depends on which operands are tensors). `rounded`: a
    float product rounded on its own, which the compiler may not contract into a
    consumer's add (see `fuser.codegen.contraction`). `by_reciprocal`: a float division
    computed as lhs * (1 / rhs) (see `fuser.preseg.reciprocal_divisors`)."""

    op: BinaryOpType
    lhs: Expr
    rhs: Expr
    lhs_dtype: DataType
    rhs_dtype: DataType
    out: DataType
    common: DataType | None = None
    rounded: bool = False
    by_reciprocal: bool = False


@dataclass(frozen=True)
class ReciprocalScale(Expr):
    """The power of two s a divisor `value` (of `dtype`, in `out`: Float or Double) is
    scaled by before its reciprocal, so that a / b = (a (1 / (b s))) s stays finite where
    1/b would overflow: 2^64 (2^512) below the smallest normal, else 1 (a Binary with
    `by_reciprocal` computes the same inline; see `fuser.preseg.reciprocal_divisors`)."""

    value: Expr
    dtype: DataType
    out: DataType


@dataclass(frozen=True)
class Ternary(Expr):
    """A Fusion IR ternary op (where, lerp, clamp, threshold). `common`: the type threshold
    compares x and its threshold in."""

    op: TernaryOpType
    operands: tuple[Expr, Expr, Expr]
    dtypes: tuple[DataType, DataType, DataType]
    out: DataType
    common: DataType | None = None


@dataclass(frozen=True)
class Cast(Expr):
    """`value` of `src` converted to `dst` as PyTorch's `.to(dst)` does."""

    value: Expr
    src: DataType
    dst: DataType


@dataclass(frozen=True)
class Random(Expr):
    """Element `index` (its row-major linear index in the RNG op's logical shape, in the
    index type) of an RNG op's output: the Philox4x32-10 numbers of stream (`seed`, `offset`)
    (Int values) that `fuser.runtime.philox` defines, uniform in [params[0], params[1]) or
    normal (mean params[0], std params[1]), computed in double for a Double `out`, else in
    float, and rounded to `out`. `state` names the op's per-thread cache of its last Philox
    block: one per RNG op, declared once at the kernel's top (codegen declares it)."""

    op: RNGOpType
    out: DataType
    state: str
    seed: Expr
    offset: Expr
    index: Expr
    params: tuple[Expr, Expr]
    param_dtypes: tuple[DataType, DataType]


@dataclass(frozen=True)
class StateOr(Expr):
    """Element `k` of the launch's device array `state` where the launch passes one, else
    `given` (the unseeded RNG ops' seed and offset: parameters on an ordinary launch, drawn
    on the device by a launch captured in a CUDA graph, whose parameters every replay reuses)."""

    state: Expr
    k: int
    given: Expr


@dataclass(frozen=True)
class Element(Expr):
    """`base[index]`: an element of a tensor pointer or of a register/shared array."""

    base: Expr
    index: Expr


@dataclass(frozen=True)
class AddressOf(Expr):
    """The address of an element (a vector access's global side)."""

    value: Expr


@dataclass(frozen=True)
class Member(Expr):
    """A field of a Welford accumulator: `avg`, `m2` or `n`."""

    base: Expr
    field: str


@dataclass(frozen=True)
class CheckedIndex(Expr):
    """An index op's position along its lookup axis of `extent` elements: `value` (of
    integer `dtype`: an index tensor's element, or select's index) as an int64, or -1 when
    out of range (negatives count from the end with `wrap`). An out-of-range value is
    recorded as index check `check` in the kernel's error flag `flag` (None: the host
    checked it before the launch)."""

    value: Expr
    dtype: DataType
    extent: Expr
    check: int
    flag: Expr | None = None
    wrap: bool = False


@dataclass(frozen=True)
class Lookup(Expr):
    """Element `offset + position * stride` of tensor `base` (of `dtype`), `position` a
    CheckedIndex: zero, with nothing read, where the position is -1."""

    base: Expr
    offset: Expr
    position: Expr
    stride: Expr
    dtype: DataType


def value_bytes(dtype: DataType, welford: bool = False) -> int:
    """Bytes of one `dtype` value in a kernel, or with `welford` of one Welford accumulator
    of them (fuser::Welford<T>: mean and M2 of T, a 64-bit count; a multiple of 8 bytes)."""
    return -(-(2 * dtype.itemsize + 8) // 8) * 8 if welford else dtype.itemsize


def as_expr(x: Expr | int) -> Expr:
    """`x`, with a Python int made an IntLit."""
    return IntLit(x) if isinstance(x, int) else x


def lt(a: Expr, b: Expr | int) -> IndexBinary:
    """`a < b` in index arithmetic."""
    return IndexBinary(BinaryOpType.Lt, a, as_expr(b))


def eq(a: Expr, b: Expr | int) -> IndexBinary:
    """`a == b` in index arithmetic."""
    return IndexBinary(BinaryOpType.Eq, a, as_expr(b))


def all_of(conds: list[Expr]) -> Expr | None:
    """The conjunction of `conds` (None for none)."""
    out = None
    for c in conds:
        out = c if out is None else IndexBinary(BinaryOpType.LogicalAnd, out, c)
    return out


# --- statements ------------------------------------------------------------------------------


@dataclass
class Decl:
    """A variable: a scalar (`size` None) or an array, in registers or shared memory,
    optionally initialised. `dtype` None: the kernel's index type. `welford`: a Welford
    accumulator (mean and M2 of `dtype`, a 64-bit count), starting empty. `align`: bytes a
    shared array is aligned to (None: its element's). `offset`: a shared array placed in
    the block's dynamic shared memory at this byte offset (past the 48 KiB a block may
    declare statically; the kernel's `dynamic_smem` covers it)."""

    name: str
    dtype: DataType | None
    size: int | None = None
    init: Expr | None = None
    space: MemoryType = MemoryType.Local
    welford: bool = False
    align: int | None = None
    offset: int | None = None


@dataclass
class Assign:
    """`lhs = rhs`."""

    lhs: Expr
    rhs: Expr


@dataclass
class For:
    """`var` from 0 while below `stop`; `unroll` asks the compiler to unroll it. `dtype`
    None: the index type."""

    var: Var
    stop: Expr
    body: list[Stmt] = field(default_factory=list)
    unroll: bool = False
    dtype: DataType | None = None


@dataclass
class If:
    """`then` where `cond` holds, else `orelse`."""

    cond: Expr
    then: list[Stmt] = field(default_factory=list)
    orelse: list[Stmt] | None = None


@dataclass
class VecLoad:
    """`n` consecutive elements of `dtype` from address `src` to register address `dst`, in
    one access. `stream`: data the kernel reads once, loaded evict-first
    (`fuser::load_vec_stream`)."""

    dtype: DataType
    n: int
    dst: Expr
    src: Expr
    stream: bool = False


@dataclass
class VecStore:
    """`n` consecutive elements of `dtype` from register address `src` to address `dst`, in
    one access. `stream`: data the kernel writes once, stored evict-first
    (`fuser::store_vec_stream`)."""

    dtype: DataType
    n: int
    dst: Expr
    src: Expr
    stream: bool = False


@dataclass
class Comment:
    """A line of explanation in the generated code."""

    text: str


@dataclass
class Sync:
    """A barrier for the threads of the block (shared memory written before is visible after)."""


@dataclass
class CpAsync:
    """An asynchronous copy of `bytes` (4, 8 or 16) from global address `src` to shared
    address `dst` (both aligned to it), completed by a later CpAsyncWait; the thread that
    issues it is the one that reads the copy. Prints `fuser::cp_async<bytes>(dst, src);`."""

    dst: Expr
    src: Expr
    bytes: int


@dataclass
class CpAsyncCommit:
    """Closes the group of the thread's CpAsyncs issued since the last one."""


@dataclass
class CpAsyncWait:
    """Waits until at most `pending` of the thread's committed groups of CpAsyncs (the
    newest) have not landed in shared memory."""

    pending: int = 0


@dataclass
class Launder:
    """Makes the compiler forget what register array `var` holds (no instruction): values it
    derived from the array before are recomputed after, not kept live in more registers.
    Prints `fuser::launder(var);`."""

    var: Var


@dataclass
class WelfordMerge:
    """Merge `count` values of mean `mean` and sum of squared deviations `m2` (all of
    `dtype`, a thread's tile) into its Welford accumulator `acc` (a Decl with
    welford=True). Prints `fuser::welford_merge(acc, mean, m2, count);`."""

    acc: Expr
    mean: Expr
    m2: Expr
    count: Expr


@dataclass
class BlockAllReduce:
    """`out` = `value` combined over the threads of the block along `over` (TIDx: the
    threads of a row; TIDy: of a column), every one of them getting the result. `op`: the
    Fusion IR's combining op on `dtype` values, or None to combine Welford accumulators.
    `smem`: a shared array of blockDim.x * blockDim.y values. Every thread of the block runs
    it (it synchronises). Prints `out = fuser::block_allreduce_x(value, op, smem);`.
    With `tile` > 0 (over TIDy only), `value` is a register array of `tile` values combined
    element by element in place (`out` is `value`; `smem` holds `tile` times as many):
    `fuser::block_allreduce_tile_y(value, op, smem);`."""

    out: Expr
    value: Expr
    op: BinaryOpType | None
    dtype: DataType
    smem: Expr
    over: ParallelType = ParallelType.TIDx
    #: end with a barrier so `smem` is free for the next user; False where the next block
    #: reduction uses another buffer (its own barrier then orders this one's reads before
    #: any later write here)
    free_after: bool = True
    tile: int = 0
    #: blockDim.x where the kernel's launch fixes it (the helper's loops unroll), else 0
    bdx: int = 0
    #: blockDim.y likewise, for reductions over TIDy (the helper picks its path when
    #: compiled, and its loops over rows and warps unroll), else 0
    bdy: int = 0
    #: Welford accumulators (over TIDx) whose counts the kernel knows stay exact in `dtype`
    #: (a row held in registers): merged with counts in `dtype`,
    #: `fuser::block_welford_x(value, smem)`
    float_counts: bool = False


@dataclass
class GridItem:
    """One value a GridReduce combines across blocks: the accumulator `acc` (already
    combined over the block), its op (None: Welford) and identity `init`, its global work
    buffer (a "work" Param), shared scratch and the block's output slot it holds. With
    `lanes` > 1, `acc` is a register array whose values hold slots `slot` .. `slot + lanes
    - 1` (a column reduction's vector lanes), combined together."""

    acc: Expr
    op: BinaryOpType | None
    dtype: DataType
    init: Expr | None
    work: Expr
    smem: Expr
    slot: Expr
    lanes: int = 1


@dataclass
class GridReduce:
    """Combine `items` across the blocks of a grid column (along gridDim.y) in one kernel:
    each block's `writer` threads store its partials (`slots` per block), the block counts
    itself in `semaphore`, every block but the last returns, and the last combines every
    partial (the threads sharing a slot split them: a row with `over_x`, else a column).
    `flag` is a shared int. Prints calls of fuser::grid_write, grid_arrive, grid_finish."""

    items: list[GridItem]
    semaphore: Expr
    flag: Expr
    slots: int
    writer: Expr
    over_x: bool
    #: every block gets the totals (an allreduce across the grid: the blocks synchronise,
    #: all must be resident) rather than only the last to arrive
    all_blocks: bool = False


@dataclass
class GridSync:
    """A barrier for every block of the grid (all resident: see Kernel.grid_sync). `semaphore` holds two zeroed counters. Prints `fuser::grid_sync(sem);`."""

    semaphore: Expr


@dataclass
class TileReduceY:
    """Register array `array` (of `dtype`) combined element by element over the threads of
    each column of the block (same threadIdx.x) by `op`; the results are in the threads
    with threadIdx.y == 0. Every thread runs it; `smem` holds blockDim.x * blockDim.y
    values. Prints `fuser::block_reduce_tile_y(array, op, smem);`."""

    array: Expr
    op: BinaryOpType
    dtype: DataType
    smem: Expr


@dataclass
class ColumnPartials:
    """`outs[k]` = column `c0 + t` of the `parts` x `n_cols` partials in `works[k]`
    combined by `op` from `init`, in thread t < `width` of the block (a fixed order:
    deterministic), for every buffer k together; every thread runs it (it synchronises);
    `smem` holds len(works) * blockDim.x * blockDim.y values. Prints
    `fuser::column_partials<K>(outs, op, init, works, parts, n_cols, c0, width, smem);`."""

    outs: list[Expr]
    op: BinaryOpType
    dtype: DataType
    init: Expr
    works: list[Expr]
    parts: Expr
    n_cols: Expr
    c0: Expr
    smem: Expr
    width: Expr


@dataclass
class SegmentPartials:
    """`out` = the partials of column `col` of row segment `seg` combined by `op` from
    `init`: those of blocks `first` .. `last`, block b's at row `b + seg` of `work`
    (`n_cols` per row; blocks and segments both take consecutive rows, so b + seg numbers
    the pairs uniquely). Prints `out = fuser::segment_partials(op, init, work, n_cols,
    seg, col, first, last);`."""

    out: Expr
    op: BinaryOpType
    dtype: DataType
    init: Expr
    work: Expr
    n_cols: Expr
    seg: Expr
    col: Expr
    first: Expr
    last: Expr


Stmt = Union[Decl, Assign, For, If, VecLoad, VecStore, Comment, Sync, WelfordMerge, BlockAllReduce, GridReduce,
             GridSync, ColumnPartials, TileReduceY, CpAsync, CpAsyncCommit, CpAsyncWait,
             SegmentPartials]


@dataclass(frozen=True)
class IndexCheck:
    """A bounds check of an index op, for the error the runtime raises: op `op` reads
    `tensor` (its name) along `dim`, of `extent` (a Fusion Scalar) elements. `value` None:
    the kernel checks index tensor values (CheckedIndex.check is this check's position in
    Kernel.index_checks); a Scalar: the host checks it before the launch, a position (select's
    index; `wrap`: -extent.. accepted) or, with `size`, an index tensor's extent along
    `dim`, which may not exceed `extent` (gather, scatter)."""

    op: str
    dim: int
    tensor: str
    extent: Any
    value: Any = None
    wrap: bool = False
    size: bool = False


@dataclass
class Kernel:
    """One kernel: name, parameters, body, and how to launch it."""

    name: str
    params: list[Param]
    body: list[Stmt]
    #: "int32" or "int64": the type index arithmetic runs in
    index_type: str
    threads: int = 1
    #: the extents (Scalars) of the loop axes bound to blockIdx.x and blockIdx.y: the grid
    grid_extent: Any = None
    grid_extent_y: Any = None
    threads_y: int = 1
    #: runtime headers besides the main one (block and grid reductions)
    includes: tuple[str, ...] = ()
    #: the kernel synchronises its whole grid (GridSync): every block must be resident.
    #: With `grid_strided` its blocks stride over the work (the launch caps the grid at the
    #: blocks the GPU holds); without, its grid is fixed and `min_blocks` per SM (the
    #: compiler keeps registers low enough) guarantees the residency
    grid_sync: bool = False
    grid_strided: bool = False
    #: blocks per SM the compiler must make room for (__launch_bounds__'s second argument)
    min_blocks: int = 0
    #: bytes a thread may spill under that register cap; past them the kernel is compiled
    #: with the compiler's own register choice (where its grid is planned from what fits)
    spill_max: int = 0
    #: the index ops' bounds checks (see IndexCheck); with a device check among them the
    #: kernel has an "index_error" parameter the runtime reads after each launch
    index_checks: tuple[IndexCheck, ...] = ()
    #: bytes of dynamic shared memory each block is launched with (Decl.offset arrays)
    dynamic_smem: int = 0
    #: the kernel waits for the grids before it in the stream before touching global memory,
    #: so the runtime may launch it as their programmatic dependent (its blocks start while
    #: theirs exit, on GPUs from sm_90)
    waits_for_prior_grids: bool = True



def walk(stmts: list) -> Iterator[Any]:
    """Every statement in `stmts`, those inside loops and conditions included."""
    for x in stmts:
        yield x
        if isinstance(x, For):
            yield from walk(x.body)
        elif isinstance(x, If):
            yield from walk(x.then)
            yield from walk(x.orelse or [])


def nodes(x: Any) -> Iterator[Any]:
    """Every statement and expression under `x` (a list of statements, a statement or an
    expression), `x` first: what a search of the kernel IR for one kind of node walks."""
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from nodes(y)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        yield x
        for f in dataclasses.fields(x):
            yield from nodes(getattr(x, f.name))


def substitute(e: Expr, repl: dict[Expr, Expr]) -> Expr:
    """`e` with every sub-expression found in `repl` replaced."""
    got = repl.get(e) if not isinstance(e, Param) else None
    if got is not None:
        return got
    if not dataclasses.is_dataclass(e) or isinstance(e, Param):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr):
            nv = substitute(v, repl)
        elif isinstance(v, tuple) and any(isinstance(x, Expr) for x in v):
            nv = tuple(substitute(x, repl) if isinstance(x, Expr) else x for x in v)
        else:
            continue
        if nv is not v:
            changes[f.name] = nv
    return dataclasses.replace(e, **changes) if changes else e


def substitute_stmt(s: Any, repl: dict[Expr, Expr]) -> Any:
    """A copy of statement `s` (and the statements inside it) with `repl` applied to its
    expressions."""
    changes = {}
    for f in dataclasses.fields(s):
        v = getattr(s, f.name)
        if isinstance(v, Expr):
            changes[f.name] = substitute(v, repl)
        elif isinstance(v, list):
            changes[f.name] = [substitute_stmt(x, repl) if dataclasses.is_dataclass(x) else x for x in v]
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes[f.name] = substitute_stmt(v, repl)
    return dataclasses.replace(s, **changes)
