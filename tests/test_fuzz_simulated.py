"""Generated kernels simulated on the CPU, whole fusions at a time (tests/kernel_sim.py):
random fusions of the differential fuzzer (tests/gpu_fuzz.py), every generated-kernel
segment simulated on the arguments it gets at run time, give the reference executor's
values with no fault; a fusion of each kernel kind the runtime generates (pointwise,
resize, transpose, reduction, inner / outer / inner-outer persistent, index ops, scatter,
random numbers) is simulated with every node of its kernel IR; and the simulator catches
what the GPU would get wrong when a kernel loses a barrier, a wait, a store or a check.

Long runs: ``python tests/kernel_sim.py --cases 2000 --seed 7`` (see its docstring)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.lower import kir
from fuser.kernel import prepare_kernel
from fuser.host.lower import example_args

import kernel_sim as ks

#: the fuzz stream and the cases this suite simulates (about 16 s on an idle core)
FUZZ_SEED = 11
FUZZ_CASES = 400
#: ... and cases of the "norm_bwd" family (about 15 s)
NORM_BWD_CASES = 16
#: kernels past this many threads or statement-steps are skipped (counted: at most
#: SKIP_SHARE of the cases)
MAX_THREADS = 100_000
BUDGET = 2e9
SKIP_SHARE = 0.1


@pytest.fixture(scope="module")
def fuzz_run() -> ks.FuzzSummary:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: intra-op threads only add overhead
    try:
        # ("big" cases, 1e5 to 4M elements, are over the thread budget: only time spent;
        # "norm_bwd" cases, up to 1M elements, have a test of their own below)
        return ks.fuzz(FUZZ_CASES, FUZZ_SEED, max_threads=MAX_THREADS, budget=BUDGET, exclude=("big", "norm_bwd"))
    finally:
        torch.set_num_threads(threads)


def test_fuzzed_fusions_simulate_to_the_reference(fuzz_run):
    bad = fuzz_run.failures()
    msg = "\n\n".join(ks.sim_repro(r.seed, r.index, r.report) for r in bad[:3])
    assert not bad, f"{fuzz_run.line()}\n{msg}"
    # skipped: over the budget, the generator's case does not build, or its fusion does
    # not execute at all ("error": segmenting or binding raises, as fd.execute would)
    skipped = [r for r in fuzz_run.results if r.status in ("skipped", "error")]
    n = len(fuzz_run.results)
    assert n >= 0.85 * FUZZ_CASES  # (less the excluded families: about 10%)
    assert len(skipped) <= SKIP_SHARE * n, \
        f"{fuzz_run.line()}\n" + "\n".join(f"{r.index}: {r.detail[:200]}" for r in skipped if r.detail)
    # the cases are not vacuous: most of them simulate kernels, of several kinds
    kinds = {s.scheduler for r in fuzz_run.results if r.report
             for s in r.report.segments if s.status == "ok" and s.kernel}
    assert {"pointwise", "reduction", "inner_persistent", "resize"} <= kinds, kinds
    assert sum(r.report is not None and r.report.simulated > 0 for r in fuzz_run.results) >= 0.8 * n


def test_normalisation_backward_cases_simulate_through_inner_outer_kernels():
    """gpu_fuzz's "norm_bwd" family (sums along and across the rows of the same inputs, up
    to 1M elements) reaches the inner-outer persistent scheduler, which the mixed stream
    almost never does (2 of 12742 kernels in 8000 cases), and its kernels simulate to the
    reference."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = ks.fuzz(NORM_BWD_CASES, FUZZ_SEED, family="norm_bwd", max_threads=200_000, budget=BUDGET)
    finally:
        torch.set_num_threads(threads)
    bad = run.failures()
    msg = "\n\n".join(ks.sim_repro(r.seed, r.index, r.report, "norm_bwd") for r in bad[:3])
    assert not bad, f"{run.line()}\n{msg}"
    assert run.kernels().get("inner_outer_persistent", 0) >= 3, run.kernels()


# --- a fusion of every kernel kind ----------------------------------------------------------------------


def _rand(*shape, dtype=torch.float32):
    x = torch.randn(shape)
    return (x + 0.25 * x.sign()).to(dtype)


@dataclasses.dataclass
class Kind:
    """A fusion (`build(fd, inputs)`) whose segments are `schedulers`, and kernel IR nodes
    its kernels must use (so the simulator ran them)."""

    name: str
    build: Callable
    inputs: Callable[[], list]
    schedulers: tuple[str, ...]
    nodes: tuple[str, ...] = ()
    #: launch grid-strided kernels on this many resident blocks (their blocks loop)
    resident: int | None = None


def _pointwise(fd, xs):
    x, b = fd.from_pytorch(xs[0]), fd.from_pytorch(xs[1])
    y = fd.ops.add(fd.ops.mul(fd.ops.cast(x, DataType.Float), 2.0), fd.ops.broadcast_in_dim(b, x.shape(), [1]))
    fd.add_output(fd.ops.cast(fd.ops.tanh(y), DataType.BFloat16))


def _resize(fd, xs):
    x = fd.from_pytorch(xs[0])
    c = fd.ops.cat([x, fd.ops.neg(x)], dim=1)
    p = fd.ops.pad(c, [2, 6], 1.5)
    fd.add_output(fd.ops.slice(p, [0, 2], [8, 98]))


def _transpose_rng(fd, xs):
    t = fd.ops.permute(fd.from_pytorch(xs[0]), [1, 0])
    fd.add_output(fd.ops.add(t, fd.ops.rand_like(t)))


def _sum(dims):
    def build(fd, xs):
        fd.add_output(fd.ops.sum(fd.from_pytorch(xs[0]), dims=dims))
    return build


def _var_mean(fd, xs):
    var, mean = fd.ops.var_mean(fd.from_pytorch(xs[0]), dims=[1], correction=1)
    fd.add_output(var)
    fd.add_output(mean)


def _softmax(fd, xs):
    x = fd.from_pytorch(xs[0])
    m = fd.ops.broadcast_in_dim(fd.ops.max(x, dims=[1]), x.shape(), [0])
    e = fd.ops.exp(fd.ops.sub(x, m))
    fd.add_output(fd.ops.div(e, fd.ops.broadcast_in_dim(fd.ops.sum(e, dims=[1]), x.shape(), [0])))


def _batch_norm(fd, xs):
    x, w = fd.from_pytorch(xs[0]), fd.from_pytorch(xs[1])
    m = fd.ops.size(x, 0)
    mean = fd.ops.div(fd.ops.sum(x, dims=[0]), m)
    xc = fd.ops.sub(x, fd.ops.broadcast_in_dim(mean, x.shape(), [1]))
    var = fd.ops.div(fd.ops.sum(fd.ops.mul(xc, xc), dims=[0]), m)
    r = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
    fd.add_output(fd.ops.mul(fd.ops.mul(xc, fd.ops.broadcast_in_dim(r, x.shape(), [1])),
                             fd.ops.broadcast_in_dim(w, x.shape(), [1])))


def _layer_norm_backward(fd, xs):
    grad, x, mean, rstd, w = (fd.from_pytorch(v) for v in xs)
    dt = grad.dtype
    g, xf = fd.ops.cast(grad, DataType.Float), fd.ops.cast(x, DataType.Float)
    shape = x.shape()
    r = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
    xhat = fd.ops.mul(fd.ops.sub(xf, fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 1])), r)
    gw = fd.ops.mul(g, fd.ops.broadcast_in_dim(fd.ops.cast(w, DataType.Float), shape=shape, broadcast_dims=[1]))
    n = fd.ops.size(x, 1)
    a = fd.ops.div(fd.ops.sum(gw, dims=[1], keepdim=True), n)
    b = fd.ops.div(fd.ops.sum(fd.ops.mul(gw, xhat), dims=[1], keepdim=True), n)
    inner = fd.ops.sub(fd.ops.sub(gw, fd.ops.broadcast_in_dim(a, shape=shape, broadcast_dims=[0, 1])),
                       fd.ops.mul(xhat, fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[0, 1])))
    fd.add_output(fd.ops.cast(fd.ops.mul(r, inner), dt))
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(g, xhat), dims=[0]), dt))
    fd.add_output(fd.ops.cast(fd.ops.sum(g, dims=[0]), dt))


def _ln_inputs(m, n, dtype):
    return lambda: [_rand(m, n, dtype=dtype), _rand(m, n, dtype=dtype), _rand(m, 1), torch.rand(m, 1) + 0.5,
                    _rand(n, dtype=dtype)]


def _row_segments(fd, xs):
    """RMSNorm backward over [B, S, N] with a sum over S per batch (seed 001's shape of
    outer reductions): one inner-outer kernel combining partials per row segment."""
    g, x, r, w = (fd.from_pytorch(v) for v in xs)
    sh = x.shape()
    xhat = fd.ops.mul(x, fd.ops.broadcast_in_dim(r, shape=sh, broadcast_dims=[0, 1, 2]))
    gw = fd.ops.mul(g, fd.ops.broadcast_in_dim(w, shape=sh, broadcast_dims=[2]))
    m = fd.ops.sum(fd.ops.mul(gw, xhat), dims=[2], keepdim=True)
    fd.add_output(fd.ops.sub(gw, fd.ops.mul(xhat, fd.ops.broadcast_in_dim(m, shape=sh, broadcast_dims=[0, 1, 2]))))
    fd.add_output(fd.ops.sum(fd.ops.mul(g, xhat), dims=[0, 1]))
    fd.add_output(fd.ops.sum(g, dims=[1]))


def _index_ops(fd, xs):
    x, i, j = fd.from_pytorch(xs[0]), fd.from_pytorch(xs[1]), fd.from_pytorch(xs[2])
    s = fd.ops.index_select(x, i, dim=0)  # [7, 40]
    g = fd.ops.gather(x, j, dim=1)  # [30, 9]
    t = fd.ops.take_along_axis(x, j, dim=1)
    fd.add_output(fd.ops.mul(s, 2.0))
    fd.add_output(fd.ops.add(g, t))
    fd.add_output(fd.ops.select(x, fd.define_scalar(-3, dtype=DataType.Int), dim=0))


def _index_inputs():
    return [_rand(30, 40), torch.randint(0, 30, (7,)), torch.randint(0, 40, (30, 9))]


def _scatter(fd, xs):
    x, i, s = (fd.from_pytorch(v) for v in xs)
    fd.add_output(fd.ops.scatter(fd.ops.mul(x, 3.0), i, s, 1))


def _scatter_inputs():
    # distinct positions along dim 1 in every row: the result does not depend on the order
    idx = torch.rand(37, 65).argsort(dim=1)[:, :50].contiguous()
    return [_rand(37, 65), idx, _rand(37, 50)]


def _rng(fd, xs):
    x = fd.from_pytorch(xs[0])
    u = fd.ops.uniform(-1.0, 2.0, shape=x.shape(), rng_seed=fd.define_scalar(7, dtype=DataType.Int),
                       rng_offset=fd.define_scalar(4, dtype=DataType.Int), dtype=DataType.BFloat16)
    z = fd.ops.normal(0.5, 2.0, shape=x.shape(), dtype=DataType.Double)
    fd.add_output(fd.ops.mul(x, fd.ops.cast(u, DataType.Float)))
    fd.add_output(z)
    fd.add_output(fd.ops.add(x, fd.ops.randn_like(x)))


KINDS = [
    Kind("pointwise_bf16_bias", _pointwise, lambda: [_rand(64, 136, dtype=torch.bfloat16), _rand(136)], ("pointwise",),
         ("VecLoad", "VecStore")),
    Kind("resize_cat_pad_slice", _resize, lambda: [_rand(8, 45)], ("resize",), ("Ternary",)),
    Kind("transpose_with_rng", _transpose_rng, lambda: [_rand(65, 97)], ("transpose",), ("Sync", "Random")),
    Kind("reduction_inner", _sum([1]), lambda: [_rand(33, 1025)], ("reduction",), ("BlockAllReduce",)),
    Kind("reduction_outer", _sum([0]), lambda: [_rand(1025, 33)], ("reduction",)),
    Kind("reduction_grid_inner", _sum([1]), lambda: [_rand(1, 1 << 18)], ("reduction",), ("GridReduce",)),
    Kind("reduction_grid_outer", _sum([0]), lambda: [_rand(1 << 14, 4)], ("reduction",), ("GridReduce",)),
    Kind("reduction_welford", _var_mean, lambda: [_rand(33, 1025)], ("reduction",), ("Member",)),
    Kind("inner_persistent_softmax", _softmax, lambda: [_rand(16, 1000)], ("inner_persistent",)),
    Kind("outer_persistent_batch_norm", _batch_norm, lambda: [_rand(48, 100), _rand(100)], ("outer_persistent",)),
    Kind("inner_outer_fp32", _layer_norm_backward, _ln_inputs(64, 256, torch.float32), ("inner_outer_persistent",),
         ("GridSync", "ColumnPartials", "ColumnWidth")),
    Kind("inner_outer_bf16_staged", _layer_norm_backward, _ln_inputs(40, 512, torch.bfloat16),
         ("inner_outer_persistent",), ("CpAsync", "CpAsyncWait", "GridSync"), resident=3),
    Kind("inner_outer_row_segments", _row_segments,
         lambda: [_rand(3, 40, 96), _rand(3, 40, 96), torch.rand(3, 40, 1) + 0.5, _rand(96)],
         ("inner_outer_persistent",), ("SegmentPartials", "TileReduceY"), resident=2),
    Kind("index_ops", _index_ops, _index_inputs, ("pointwise", "pointwise"), ("CheckedIndex", "Lookup")),
    Kind("scatter", _scatter, _scatter_inputs, ("greedy",), ("GridSync", "CheckedIndex"), resident=2),
    Kind("rng_seeded_and_unseeded", _rng, lambda: [_rand(7, 130)], ("pointwise", "pointwise"), ("Random", "StateOr")),
]


def _define(kind: Kind, inputs: list) -> FusionDefinition:
    with FusionDefinition() as fd:
        kind.build(fd, inputs)
    return fd


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_kernel_kind_simulates_to_the_reference(kind):
    torch.manual_seed(0)
    inputs = kind.inputs()
    fd = _define(kind, inputs)
    before = ks.COVERAGE.copy()
    report = ks.simulate_fusion(fd, inputs, resident=kind.resident)
    assert report.ok and report.status == "ok", str(report)
    assert tuple(s.scheduler for s in report.segments) == kind.schedulers, str(report)
    assert all(s.kernel for s in report.segments), str(report)
    used = ks.COVERAGE - before
    missing = [n for n in kind.nodes if not used[n]]
    assert not missing, f"{kind.name}: the kernels used no {missing}"


# --- what simulated fuzzing found --------------------------------------------------------------------------


def _cat_strided_size1(fd, xs):
    """A cat along an axis where an operand has extent 1 and a stride other than the dense
    one (seed 3 case 151): the shift must step by the stride the merged index implies."""
    y = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[False, True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.cat([y, x], dim=1))
    fd.add_output(fd.ops.pad(x, [0, 0, 2, 1]))


def _axis_beside_its_reshape(fd, xs):
    """[N, 4] and its reshape [N, 2, 2] as separate axes of one output, beside a reduction
    (seed 3 case 544): no reduction kernel may take the reshape's axes for the other's."""
    x = fd.define_tensor(shape=[-1, 4], contiguity=[True, True], dtype=DataType.Float)
    r = fd.ops.reshape(x, new_shape=[x.size(0), 2, 2])
    fd.add_output(fd.ops.sum(r, dims=[2]))
    b = fd.ops.broadcast_in_dim(r, shape=[x.size(0), 4, 2, 2], broadcast_dims=[0, 2, 3])
    fd.add_output(fd.ops.add(b, fd.ops.broadcast_in_dim(x, shape=[x.size(0), 4, 2, 2], broadcast_dims=[0, 1])))


def _axis_beside_its_reshape_pointwise(fd, xs):
    """The same in a pointwise segment whose smaller output is the reshape (seed 42 case 134)."""
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    r = fd.ops.reshape(x, new_shape=[1, 2, 4])
    b = fd.ops.broadcast_in_dim(fd.ops.reshape(x, new_shape=[1, 2, 4]), shape=[x.size(0), 8, 2, 4],
                                broadcast_dims=[0, 2, 3])
    c = fd.ops.expand(fd.ops.broadcast(x, is_broadcast_dim=[False, False, True, True]),
                      shape=[x.size(0), x.size(1), 2, 4])
    fd.add_output(fd.ops.maximum(b, c))
    fd.add_output(r)


def _lookup_per_row(fd, xs):
    """A looked-up value per row beside row sums, rows not filling the last block (seed 8
    case 890): threads of missing rows must not check their (unloaded) index."""
    a, b, x, i = (fd.from_pytorch(v) for v in xs)
    fd.add_output(fd.ops.add(fd.ops.sum(a, dims=[1]), fd.ops.index_select(x, i, dim=0)))  # inner
    fd.add_output(fd.ops.add(fd.ops.sum(b, dims=[0]), fd.ops.index_select(x, i, dim=0)))  # outer


def _view_of_lane_invariant_input(fd, xs):
    """An output that is a view of an input broadcast along the vector axis, beside a max
    (seed 44 case 847): its store must not read vectors from the one-value-per-step registers."""
    x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[None, True, None], dtype=DataType.Float)
    v = fd.ops.reshape(fd.ops.broadcast_in_dim(x, shape=[16, 64, 3, 8], broadcast_dims=[0, 1, 2]),
                       new_shape=[16, 64, 24])
    fd.add_output(v)
    fd.add_output(fd.ops.max(v, dims=[0, 1, 2]))


def _gather_int32_expanded_index(fd, xs):
    """A gather along an int32 index broadcast along the other axes (seed 54 case 208): the
    reference executor's CPU torch.gather reads such an expanded int32 index wrongly."""
    t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    i = fd.ops.remainder(fd.ops.iota(7, 2, 5, dtype=DataType.Int32), 4)
    fd.add_output(fd.ops.gather(t0, fd.ops.broadcast_in_dim(i, shape=[7, 16, 32], broadcast_dims=[0]), dim=0))


def _axis_through_a_slice(fd, xs):
    """An output's axis the resize reference holds both sliced and padded (seed 53 case
    782): it must be indexed through the route that covers it whole."""
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    s = fd.ops.slice(x, start_indices=[0, 3], end_indices=[1, 8])
    k = fd.ops.broadcast(fd.ops.gt(fd.ops.pad(x, [4, 3], 1.5), 0.0), is_broadcast_dim=[False, True, False])
    fd.add_output(fd.ops.logical_not(x))
    fd.add_output(fd.ops.where(k, k, fd.ops.broadcast(s, is_broadcast_dim=[False, False, True])))


def _axis_beside_its_pad(fd, xs):
    """An output iterating an axis and a pad of it, beside a wider pad the resize scheduler
    takes as its reference (seed 64 case 77)."""
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    p = fd.ops.pad(x, [0, 3], 0.0)
    pe = fd.ops.expand(fd.ops.broadcast(p, is_broadcast_dim=[False, True, False]), shape=[x.size(0), 7, 10])
    fd.add_output(fd.ops.add(pe, fd.ops.broadcast_in_dim(x, shape=[x.size(0), 7, 10], broadcast_dims=[0, 1])))
    fd.add_output(fd.ops.pad(p, [1, 3], -2.0))


def _pad_inside_a_merged_inner_axis(fd, xs):
    """A pad of 3 rows, repeated 4 times by an expand and merged into one axis by a reshape
    that a permute makes the reference's innermost (GPU fuzz seed 10108 case 87): the
    vectors along that axis must not straddle the pad's edges."""
    x = fd.define_tensor(shape=[-1, 32], contiguity=[True, True], dtype=DataType.Float, stride_order=[0, 1])
    p = fd.ops.pad(x, [0, 1, 3, 2], 0.0)
    r = fd.ops.reshape(fd.ops.broadcast_in_dim(p, shape=[4, 8, 33], broadcast_dims=[1, 2]), new_shape=[32, 33])
    fd.add_output(r)
    t = fd.ops.broadcast_in_dim(fd.ops.permute(r, dims=[1, 0]), shape=[3, 33, 32], broadcast_dims=[1, 2])
    fd.add_output(fd.ops.add(t, 1.0))


def _reshape_of_an_expanded_input(fd, xs):
    """A reshape merging an axis with an expanded broadcast ([7, 1 ex 8] -> [56]) beside an
    output that never iterates the 8 (GPU fuzz seed 10305 case 350): the pointwise scheduler
    must not take an output its reference's loop nest cannot reach (it fell back)."""
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1, 33], contiguity=[True, True, None], dtype=DataType.Float, stride_order=[0, 2, 1])
    t4 = fd.ops.gt(fd.ops.min(t0, dims=[-1], keepdim=True), 0.0)
    t5 = fd.ops.broadcast_in_dim(t4, shape=[7, t1.size(1), 33, 1], broadcast_dims=[0, 3])
    t7 = fd.ops.broadcast_in_dim(t1, shape=[7, t1.size(1), t1.size(2), 1], broadcast_dims=[0, 1, 2])
    fd.add_output(fd.ops.where(t5, t5, t7))
    fd.add_output(fd.ops.reshape(t0, new_shape=[56]))


def _pad_of_an_expanded_axis_beside_a_cat(fd, xs):
    """A pad along an expanded broadcast axis ([128, 1 ex 16]) beside a cat of the same
    input along the other axis (GPU fuzz seed 10701 case 419): the cat's output, the resize
    reference, holds that axis concretely (from a slice of it), and only the cat relates
    the two; the pad's output was not reached and the segment fell back."""
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=DataType.Float)
    fd.add_output(fd.ops.pad(t0, [-1, 0], -2.0))
    t9 = fd.ops.slice(t0, start_indices=[4, 0], end_indices=[48, 16])
    fd.add_output(fd.ops.cat([t0, t9, fd.ops.abs(t0)], dim=0))


def _axes_a_reshape_ties_in_a_persistent_kernel(fd, xs):
    """An output [4, 32 (expanded), 8, 1] of an input's axis and the row axis of a [4, 32]
    -> [128] -> [8, 16] view's sum, beside that sum (GPU fuzz seed 12015 case 29): the
    persistent kernel's loop over the view's [8, 16] fixes the 4 by the 8 (row r writes
    only a = r // 2), so 24 of its 32 stored elements were never written (NaN)."""
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Float, stride_order=[0, 1])
    t3 = fd.ops.reshape(fd.ops.reshape(t1, new_shape=[128]), new_shape=[8, 16])
    t4 = fd.ops.sum(t3, dims=[1], keepdim=True)
    t6 = fd.ops.broadcast_in_dim(t1, shape=[t1.size(0), 32, 8, 1], broadcast_dims=[0, 1])
    t8 = fd.ops.expand(fd.ops.broadcast(t4, is_broadcast_dim=[True, True, False, False]),
                       shape=[t1.size(0), t1.size(1), 8, 1])
    fd.add_output(fd.ops.lerp(t6, t8, 0.5))
    fd.add_output(fd.ops.cast(fd.ops.add(t3, t4), dtype=DataType.BFloat16))


def _lookup_in_a_cat_branch(fd, xs):
    """index_select of an input feeding both branches of a cat, sliced to the second one
    (simulated fuzz seed 12003 case 530): the first branch's lookup read past the input
    (its index, unshifted, runs to the cat's width); an index op's read is guarded by the
    branch's condition as a load is."""
    t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[None, False, False], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1], contiguity=[None], dtype=DataType.Int32)
    t3 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float, stride_order=[1, 0, 2])
    t4 = fd.ops.add(fd.ops.index_select(t0, t1, dim=0), t3)
    t10 = fd.ops.cat([t4, fd.ops.neg(t4)], dim=2)
    fd.add_output(fd.ops.slice(t10, start_indices=[0, 0, 8], end_indices=[3, 3, 16]))


def _remat_takes_the_reference_output(fd, xs):
    """A resize segment (t10 = t8 - t9, a slice of t9, a view of t10) beside a reduction of
    t10 (GPU fuzz seed 13013 case 171): rematerialisation let the reduction recompute t10,
    so the resize segment lost t10 as an output, the only one from whose loop nest the slice
    is written whole; judged with t10 among its outputs, it fell back at run time."""
    t0 = fd.define_tensor(shape=[64, 1], contiguity=[None, True], dtype=DataType.Float, stride_order=[0, 1])
    fd.define_tensor(shape=[-1, 127], contiguity=[None, True], dtype=DataType.Half)  # (unused: as found)
    t2 = fd.ops.slice(t0, start_indices=[25, 0], end_indices=[26, 1])
    t3 = fd.ops.sum(t2, dims=[0], keepdim=False)
    t6 = fd.ops.add(fd.ops.abs(fd.ops.broadcast_in_dim(t3, shape=t2.shape(), broadcast_dims=[1])), 1.0)
    t8 = fd.ops.pad(fd.ops.div(t2, t6), [3, 3], 1.5)
    t9 = fd.ops.min(t8, dims=[-1], keepdim=True)
    t10 = fd.ops.sub(t8, t9)
    t11 = fd.ops.slice(t9, start_indices=[0, 0], end_indices=[1, 1])
    t13 = fd.ops.reshape(fd.ops.reshape(t10, new_shape=[7]), new_shape=[1, 7])
    fd.add_output(fd.ops.sum(t10, dims=[0, -1], keepdim=False))
    fd.add_output(t11)
    fd.add_output(t13)


def _reshape_of_an_expanded_axis_beside_its_merge(fd, xs):
    """x[:, :, None] + x.reshape(64) beside x.reshape(2, 32), x [8, 8] expanded along its
    second axis (GPU fuzz seed 19801 case 266): the first output's loop holds that axis
    once (broadcast), and the written-whole check reached it back through the other merge
    of x's axes, so the [2, 32] view was written from the first of its positions only (56
    of its 64 elements never written). Such a reference is refused; the view is not a
    kernel's output then."""
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[None, False], dtype=DataType.Half, stride_order=[0, 1])
    t3 = fd.ops.reshape(fd.ops.reshape(t0, new_shape=[64]), new_shape=[2, 32])
    t6 = fd.ops.broadcast(fd.ops.reshape(t0, new_shape=[64]), is_broadcast_dim=[True, True, False])
    fd.add_output(fd.ops.add(fd.ops.broadcast(t0, is_broadcast_dim=[False, False, True]), t6))
    fd.add_output(t3)


def _cat_a_permute_puts_innermost_under_a_cat_and_slice(fd, xs):
    """neg(permute(cat([x[4:5], x], 0))) as the second half of a cat along the innermost
    axis, sliced back out (GPU fuzz seed 22000 case 401): the inner cat's boundary (1) is
    along the vectorized axis only through the outer cat and slice, so the width (2) was
    not bounded by it and one column was read from neither input (0)."""
    t0 = fd.from_pytorch(xs[0])
    t2 = fd.ops.slice(t0, start_indices=[4, 0, 0], end_indices=[5, 8, 4])
    t7 = fd.ops.permute(fd.ops.cat([t2, t0], dim=0), dims=[1, 2, 0])
    t12 = fd.ops.cat([t7, fd.ops.neg(t7)], dim=2)
    fd.add_output(fd.ops.slice(t12, start_indices=[0, 0, 6], end_indices=[8, 4, 12]))


def _crop_of_an_expanded_axis_beside_a_pad(fd, xs):
    """pad(x, [-1, 0]) (a crop) of an expanded axis beside permute(pad(x, [1, 2, 1, 2])) as
    the reference (simulated fuzz seed 23007 case 1364): the crop's write condition bounded
    the expanded axis by its stored extent (1), so the crop was never written."""
    t0 = fd.from_pytorch(xs[0])
    fd.add_output(fd.ops.permute(fd.ops.pad(t0, [1, 2, 1, 2], 0.0), dims=[1, 0, 2]))
    fd.add_output(fd.ops.pad(t0, [-1, 0], 0.0))


def _draws_in_a_cat_branch(fd, xs):
    """A seeded uniform (and what it decides) as both branches of a cat along the columns
    (simulated fuzz seed 23008 case 2660): each thread draws for both branches, the second
    at its position minus the first's width, negative in the first half; the value is
    discarded there, and the simulator took the draw itself for a fault."""
    t0 = fd.from_pytorch(xs[0])
    t1 = fd.ops.uniform(0.0, 1.0, shape=[33, 8], rng_seed=586, rng_offset=8, dtype=DataType.BFloat16)
    t5 = fd.ops.maximum(fd.ops.mul(fd.ops.where(fd.ops.lt(t1, 0.75), t0, 0.0), 1.3333333333333333), t0)
    t6 = fd.ops.cast(t5, DataType.Half)  # (defined here, it puts the cat in a resize segment)
    t8 = fd.ops.cat([t5, fd.ops.neg(t5)], dim=1)
    fd.add_output(fd.ops.cast(fd.ops.slice(t8, start_indices=[0, 8], end_indices=[33, 16]), DataType.Half))
    fd.add_output(t6)
    fd.add_output(t1)


#: (name, build, inputs): the bug classes the simulated fuzz runs found, each fixed at its
#: cause (a wrong index, an unwritten or misread element, a spurious error)
FOUND = [
    ("cat_strided_size1", _cat_strided_size1, lambda: [_rand(2, 3, 5), _rand(2, 1, 9)[:, :, 2:7]]),
    ("axis_beside_its_reshape", _axis_beside_its_reshape, lambda: [_rand(64, 4)]),
    ("axis_beside_its_reshape_pointwise", _axis_beside_its_reshape_pointwise, lambda: [_rand(1, 8)]),
    ("lookup_per_row", _lookup_per_row,
     lambda: [_rand(3, 1000), _rand(1000, 3), _rand(128), torch.tensor([5, 0, 127])]),
    ("view_of_lane_invariant_input", _view_of_lane_invariant_input, lambda: [_rand(1, 64, 1).expand(16, 64, 3)]),
    ("gather_int32_expanded_index", _gather_int32_expanded_index, lambda: [_rand(4, 16, 32)]),
    ("axis_through_a_slice", _axis_through_a_slice, lambda: [_rand(1, 8)]),
    ("axis_beside_its_pad", _axis_beside_its_pad, lambda: [_rand(8, 7)]),
    ("reshape_of_an_expanded_input", _reshape_of_an_expanded_input,
     lambda: [_rand(7, 1).expand(7, 8), _rand(32, 33, 1).permute(2, 0, 1).expand(7, 32, 33)]),
    ("pad_inside_a_merged_inner_axis", _pad_inside_a_merged_inner_axis, lambda: [_rand(32, 3).permute(1, 0)]),
    ("pad_of_an_expanded_axis_beside_a_cat", _pad_of_an_expanded_axis_beside_a_cat,
     lambda: [_rand(128, 1).expand(128, 16)]),
    ("axes_a_reshape_ties_in_a_persistent_kernel", _axes_a_reshape_ties_in_a_persistent_kernel,
     lambda: [_rand(1, 4).permute(1, 0).expand(4, 32)]),
    ("lookup_in_a_cat_branch", _lookup_in_a_cat_branch,
     lambda: [_rand(1, 3, 17)[:, :, 1::2].expand(4097, 3, 8), torch.tensor([4000], dtype=torch.int32).expand(3),
              _rand(8, 3, 3).permute(1, 2, 0)]),
    ("remat_takes_the_reference_output", _remat_takes_the_reference_output,
     lambda: [_rand(1, 64).permute(1, 0), _rand(1, 127).half().expand(64, 127)]),
    ("reshape_of_an_expanded_axis_beside_its_merge", _reshape_of_an_expanded_axis_beside_its_merge,
     lambda: [_rand(1, 16).half().permute(1, 0)[::2, :].expand(8, 8)]),
    ("cat_a_permute_puts_innermost_under_a_cat_and_slice", _cat_a_permute_puts_innermost_under_a_cat_and_slice,
     lambda: [_rand(5, 8, 4)]),
    ("crop_of_an_expanded_axis_beside_a_pad", _crop_of_an_expanded_axis_beside_a_pad,
     lambda: [_rand(2, 8, 1).half().expand(2, 8, 64)]),
    ("draws_in_a_cat_branch", _draws_in_a_cat_branch, lambda: [_rand(1, 8).expand(33, 8)]),
]


@pytest.mark.parametrize("name, build, inputs", FOUND, ids=[f[0] for f in FOUND])
def test_bugs_fuzzing_found_stay_fixed(name, build, inputs):
    torch.manual_seed(0)
    xs = inputs()
    with FusionDefinition() as fd:
        build(fd, xs)
    report = ks.simulate_fusion(fd, xs)
    assert report.ok and report.simulated and not report.skipped, f"{name}\n{report}"
    assert not report.count("not lowerable"), f"{name}: a segment falls back to the reference executor\n{report}"


def _on(x: Any, device: str) -> Any:
    """`x` on `device` with the same sizes, strides and storage offset (expanded and sliced
    views included: their storage is copied, not the view materialised)."""
    if not isinstance(x, torch.Tensor):
        return x
    y = torch.empty(0, dtype=x.dtype, device=device)
    return y.set_(x.untyped_storage().to(device=device), x.storage_offset(), x.shape, x.stride())


@pytest.mark.gpu
@pytest.mark.parametrize("name, build, inputs", FOUND, ids=[f[0] for f in FOUND])
def test_bugs_fuzzing_found_match_the_reference_on_the_gpu(name, build, inputs):
    from fuser.runtime.reference import run_reference
    from fuser.runtime.tolerance import assert_close

    torch.manual_seed(0)
    xs = inputs()
    with FusionDefinition() as fd:
        build(fd, xs)
    got = fd.execute([_on(x, "cuda") for x in xs])
    ran = [s.kernel for s in fd.last_segments() if s.generates_kernel]
    assert ran and all(ran), f"{name}: a segment fell back to the reference executor"
    want = run_reference(fd.fusion, xs)  # on the CPU
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g.cpu(), w, what=f"{name} output {k}", rtol=1e-5, atol=1e-4)


# --- the simulator is a real check ----------------------------------------------------------------------


def _kernel(kind_name: str, segment: int = 0):
    """(the generated kernel of segment `segment` of KINDS' `kind_name`, its arguments, the Kind)."""
    kind = next(k for k in KINDS if k.name == kind_name)
    torch.manual_seed(0)
    inputs = kind.inputs()
    fd = _define(kind, inputs)
    seg = fd.segmented_fusion_for(inputs)
    group = seg.groups[segment]
    args = example_args(seg, group, inputs)
    return prepare_kernel(group.scheduler, group.fusion(), args), args, kind


def _without(stmts: list, drop: Callable[[Any], bool]) -> list:
    """`stmts` with the statements `drop` picks removed, at any depth."""
    out = []
    for s in stmts:
        if drop(s):
            continue
        if isinstance(s, kir.For):
            s = dataclasses.replace(s, body=_without(s.body, drop))
        elif isinstance(s, kir.If):
            s = dataclasses.replace(s, then=_without(s.then, drop),
                                    orelse=None if s.orelse is None else _without(s.orelse, drop))
        out.append(s)
    return out


def _mutated(kind_name: str, drop: Callable[[Any], bool]):
    k, args, kind = _kernel(kind_name)
    body = _without(k.kernel.body, drop)
    assert body != k.kernel.body
    k.kernel = dataclasses.replace(k.kernel, body=body)
    return k, args, kind


@pytest.mark.parametrize("kind_name", ["inner_outer_fp32", "scatter"])
def test_a_missing_grid_barrier_is_a_race(kind_name):
    k, args, kind = _mutated(kind_name, lambda s: isinstance(s, kir.GridSync))
    with pytest.raises(ks.KernelFault, match="barrier between"):
        ks.simulate_kernel(k, args, resident=kind.resident)


def _draws_one_short(k):
    """Kernel `k` with each random-number index one short (-1 for the first element)."""
    draws = {e for e in kir.nodes(k.kernel.body) if isinstance(e, kir.Random)}
    assert draws
    repl = {e: dataclasses.replace(e, index=e.index - 1) for e in draws}
    k.kernel = dataclasses.replace(k.kernel, body=[kir.substitute_stmt(s, repl) for s in k.kernel.body])
    return k


def test_a_draw_at_a_negative_index_that_reaches_an_output_faults():
    """A draw at a negative index may be computed for a lane that is then discarded (see
    draws_in_a_cat_branch), but not stored: directly, or through a comparison that a NaN
    would pass unseen (a dropout mask: `uniform < p` is False for NaN as for a large draw)."""
    k, args, _ = _kernel("rng_seeded_and_unseeded", 0)
    with pytest.raises(ks.KernelFault, match="drawn at a negative index reaches"):
        ks.simulate_kernel(_draws_one_short(k), args, philox_state=ks.PHILOX_STATE)

    x = torch.randn(4, 8)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        u = fd.ops.uniform(0.0, 1.0, shape=[4, 8], rng_seed=1, rng_offset=0, dtype=DataType.Float)
        fd.add_output(fd.ops.where(fd.ops.lt(u, 0.5), t, 0.0))
    (k,) = fd._kernels_for([x], "test")
    assert not torch.isnan(ks.simulate_kernel(k, [x])[0]).any()
    with pytest.raises(ks.KernelFault, match="output 0: a random number drawn at a negative index"):
        ks.simulate_kernel(_draws_one_short(k), [x])


def test_a_missing_cp_async_wait_faults():
    k, args, kind = _mutated("inner_outer_bf16_staged", lambda s: isinstance(s, kir.CpAsyncWait))
    with pytest.raises(ks.KernelFault, match="cp.async"):
        ks.simulate_kernel(k, args, resident=kind.resident)


def test_an_output_no_thread_writes_shows():
    k, args, _ = _mutated("reduction_inner", lambda s: isinstance(s, kir.Assign) and isinstance(s.lhs, kir.Element)
                          and isinstance(s.lhs.base, kir.Param) and s.lhs.base.kind == "tensor")
    with pytest.raises(ks.KernelFault, match="never written"):
        ks.simulate_kernel(k, args)


def test_an_index_out_of_range_sets_the_error_flag():
    k, args, _ = _kernel("index_ops", 1)  # the gather and take_along_axis segment
    args = list(args)
    gathered = next(j for j, a in enumerate(args) if isinstance(a, torch.Tensor) and a.shape == (30, 9))
    args[gathered] = args[gathered].clone()
    args[gathered][3, 4] = 40  # along an axis of 40
    with pytest.raises(ks.KernelFault, match="index check failed .* index 40 of extent 40"):
        ks.simulate_kernel(k, args)


@pytest.mark.parametrize("segment", [0, 1])
def test_random_numbers_are_the_reference_stream(segment):
    """The kernels' Philox numbers are the reference's bit for bit (a seeded bf16 uniform,
    unseeded float and double normals), and the unseeded ones follow the execution's draw."""
    k, args, _ = _kernel("rng_seeded_and_unseeded", segment)
    got = ks.simulate_kernel(k, args, philox_state=ks.PHILOX_STATE)
    want = ks.run_reference(k.fusion, args, ks.PHILOX_STATE)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    other = ks.simulate_kernel(k, args, philox_state=(ks.PHILOX_STATE[0] + 1, ks.PHILOX_STATE[1]))
    assert not torch.equal(other[-1], want[-1])  # the last output of each is unseeded
    if segment == 0:
        assert torch.equal(other[0], want[0])  # the seeded uniform's
    # a launch captured in a CUDA graph reads the draw from a device array instead
    captured = ks.simulate_kernel(k, args, philox_state=ks.PHILOX_STATE, captured=True)
    assert all(torch.equal(g, w) for g, w in zip(captured, want))


def test_gpu_mismatch_repros_pass(tmp_path):
    """The GPU fuzzer's four wrong results (tests/kernel_sim.py --files shows them on the
    code before their fixes: unwritten outputs, an out-of-bounds read)."""
    import glob
    import os

    where = os.environ.get("FUSER_SIM_REPROS")
    files = sorted(glob.glob(os.path.join(where, "case_*.py"))) if where else []
    if not files:
        pytest.skip("set FUSER_SIM_REPROS to a directory of gpu_fuzz repro scripts (case_*.py) to simulate them")
    for path in files:
        fd, inputs = ks.load_repro(path)
        report = ks.simulate_fusion(fd, inputs, max_threads=None, budget=float("inf"))
        assert report.ok, f"{path}\n{report}"


def test_fuzz_case_repro_is_a_script():
    text = ks.sim_repro(FUZZ_SEED, 0)
    assert "with FusionDefinition() as fd:" in text and "simulate_fusion(fd, inputs)" in text
    compile(text, "repro", "exec")


def test_writes_race_only_where_their_values_differ_past_a_few_ulps():
    """PyTorch's CPU sigmoid gives one input other last bits in a SIMD lane than in the
    scalar tail; threads writing such values to one expanded output do not race."""
    a = torch.tensor([0.26002532, -3.5, float("nan")])
    b = torch.nextafter(torch.nextafter(a, torch.tensor(1.0)), torch.tensor(1.0))
    b[2] = float("nan")
    assert bool(ks._same(a, b))
    assert not bool(ks._same(a, a + 1e-4 * a.abs()))
    assert not bool(ks._same(torch.tensor([1.0]), torch.tensor([float("nan")])))
    assert not bool(ks._same(torch.tensor([3], dtype=torch.int32), torch.tensor([4], dtype=torch.int32)))
