"""Inner-persistent Welford reductions (LayerNorm's) that combine each thread's own
mean and M2 over the block in one reduction (`fuser::block_welford_x`, counts in the
accumulator's float type) instead of the row's sum and then its squared deviations in two
(`reduction.WELFORD_ONE_REDUCTION_BLOCKS`): which plans take it, nvcc compiles, simulated
on the CPU against the reference executor, and on the GPU against eager PyTorch (the
runtime's merges themselves: tails with empty threads, rows far from zero)."""
from __future__ import annotations

import pytest
import torch

from cuda_units import compile_all
from fuser.ir.dtype import DataType
from fuser.lower import reduction
from fuser.scheduler import normalization
from test_row_loop import _TDT, _bench_code, _case_inputs, _layernorm, bench_case_ids, bench_case_on_gpu

ONE = "fuser::block_welford_x<"
TWO = "fuser::block_allreduce_x<"


@pytest.mark.parametrize("name,shape,blocks", [
    ("layernorm_fwd_fp32", (4096, 12288), 1),  # one block of 1024 threads an SM
    ("layernorm_fwd_fp32", (2048, 16384), 1),
    ("layernorm_fwd_bf16", (1024, 32768), 1),
    ("layernorm_fwd_bf16", (2048, 16384), 2),  # two blocks of 512
    ("layernorm_fwd_bf16", (16384, 4096), 4),  # four or more blocks an SM
    ("rmsnorm_fwd_fp32", (2048, 16384), None),  # no Welford reduction
])
def test_few_blocks_an_sm_reduce_welford_triples_once_where_the_switch_says(switches, name, shape, blocks):
    for switch in (0, 1, 2):
        switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=switch)
        src = _bench_code(name, shape)
        one = blocks is not None and blocks <= switch
        assert (src.count(ONE) == 1 and TWO not in src) == one, (switch, src)
        if not one and blocks is not None:
            assert src.count(TWO) == 2  # the row's sum, then its squared deviations


def test_the_shipped_switch_takes_one_block_plans_only():
    # H100 sweep beside the constant: one block an SM gains 4-8%, two are a toss
    assert _bench_code("layernorm_fwd_fp32", (4096, 12288)).count(ONE) == 1
    assert _bench_code("layernorm_fwd_bf16", (1024, 32768)).count(ONE) == 1
    assert ONE not in _bench_code("layernorm_fwd_bf16", (2048, 16384))


def test_float_counts_print_the_welford_helper():
    from fuser.codegen.reductions import block_allreduce
    from fuser.ir.domain import ParallelType
    from fuser.ir.exprs import BinaryOpType
    from fuser.lower.kir import BlockAllReduce, Var

    w, ws = Var("w"), Var("ws")
    assert block_allreduce(BlockAllReduce(w, w, None, DataType.Float, ws, free_after=False, bdx=128,
                                          float_counts=True)) == [
        "w = fuser::block_welford_x<false, 128>(w, ws);"]
    with pytest.raises(ValueError, match="Welford accumulators combined over threadIdx.x"):
        block_allreduce(BlockAllReduce(w, w, BinaryOpType.Add, DataType.Float, ws, float_counts=True))
    with pytest.raises(ValueError, match="Welford accumulators combined over threadIdx.x"):
        block_allreduce(BlockAllReduce(w, w, None, DataType.Float, ws, ParallelType.TIDy, float_counts=True))


def test_the_corrected_mean_keeps_its_own_reductions(switches):
    switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=64, WELFORD_CORRECTED_MEAN=True)
    assert ONE not in _bench_code("layernorm_fwd_fp32", (2048, 16384))


def test_one_reduction_kernels_compile(switches):
    switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=64)
    sources = [_bench_code(n, s) for n, s in (("layernorm_fwd_fp32", (4096, 12288)), ("layernorm_fwd_bf16", (16384, 4096)),
                                              ("layernorm_fwd_bf16", (16384, 1000)),  # threads past the row's end
                                              ("dropout_add_layernorm_fwd_bf16", (4096, 16384)))]
    assert all(s.count(ONE) == 1 for s in sources)
    # a row loop: each group of rows alternates the Welford scratch's halves
    switches(normalization, PERSISTENT_ROW_LOOP="always")
    looped = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    assert looped.count(ONE) == 1 and "for (nvfuser_index_t it = " in looped
    assert compile_all(sources + [looped])[:4] == b"\x7fELF"


# --- simulated against the reference executor ------------------------------------------------------

SIM_CASES = ("layernorm_fp32_45x64", "layernorm_fp32_2201x64", "dropout_layernorm_bf16_19x256")


def _layernorm_rows(dt: DataType, shape: tuple[int, int], offset: float = 0.0):
    """A LayerNorm definition and inputs whose rows sit `offset` from zero."""
    from fuser import FusionDefinition

    t = _TDT[dt]
    xs = [(torch.randn(shape) + offset).to(t), torch.randn(shape[1]).to(t), torch.randn(shape[1]).to(t)]
    with FusionDefinition() as fd:
        _layernorm(fd, dt)
    return fd, xs


@pytest.mark.parametrize("case", [*SIM_CASES, "fp16_7x333", "fp32_5x1000", "bf16_3x4100"])
def test_one_reduction_simulates_to_the_reference(switches, case):
    from kernel_sim import simulate_fusion

    switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=64)
    torch.manual_seed(7)
    if case in SIM_CASES:
        fd, xs = _case_inputs(case)
    else:  # rows that leave some threads' tiles partly or wholly past their end
        dt, shape = case.split("_")
        m, n = map(int, shape.split("x"))
        fd, xs = _layernorm_rows({"fp16": DataType.Half, "fp32": DataType.Float, "bf16": DataType.BFloat16}[dt], (m, n))
    assert fd.cuda_code_for([x.to("meta") for x in xs]).count(ONE) == 1
    report = simulate_fusion(fd, xs)
    assert report.ok and report.status == "ok", str(report)
    (seg,) = report.segments
    assert seg.scheduler == "inner_persistent" and seg.kernel, str(report)


def test_the_simulation_fails_without_the_block_reduction(switches, monkeypatch):
    """The check can fail: with each thread's own mean and M2 left uncombined the rows'
    statistics are wrong."""
    from kernel_sim import simulate_fusion

    switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=64)
    real = reduction.ReductionLowering._block_allreduce

    def dropped(self, acc, op, dtype, welford, *args, float_counts=False, **kw):
        got = real(self, acc, op, dtype, welford, *args, float_counts=float_counts, **kw)
        return reduction.kir.Comment("dropped") if float_counts else got

    monkeypatch.setattr(reduction.ReductionLowering, "_block_allreduce", dropped)
    torch.manual_seed(7)
    fd, xs = _layernorm_rows(DataType.Float, (5, 1000))
    report = simulate_fusion(fd, xs)
    assert not report.ok and "mismatch" in str(report), str(report)


# --- on the GPU: the runtime's merges against eager PyTorch ------------------------------------------

GPU_CASES = [("layernorm_fwd_fp32", (4096, 12288)), ("layernorm_fwd_fp32", (1001, 16384)),
             ("layernorm_fwd_bf16", (2048, 16384)), ("layernorm_fwd_bf16", (16384, 4096)),
             ("layernorm_fwd_bf16", (4096, 1000)),
             ("dropout_add_layernorm_fwd_bf16", (4096, 16384))]


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", GPU_CASES, ids=bench_case_ids(GPU_CASES))
def test_one_reduction_matches_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=64)
    fd = bench_case_on_gpu(name, shape, seed=47)
    assert fd.last_cuda_code().count(ONE) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dt,shape,offset", [
    (DataType.Float, (64, 333), 1e4),  # one element a vector, threads past the row's end
    (DataType.Float, (33, 4100), 3e3),
    (DataType.Half, (129, 1000), 50.0),
    (DataType.BFloat16, (17, 32768), 0.0),
    (DataType.Float, (2201, 64), 100.0),  # rows of 16 threads, 16 rows a block (threadIdx.y)
    (DataType.Half, (300, 96), 10.0),
])
def test_rows_far_from_zero_and_ragged_match_float64_on_the_gpu(switches, poisoned_kernel_outputs, dt, shape, offset):
    """The runtime's merges on rows whose mean dwarfs their spread (a lost deviation or a
    weight off by more than rounding shows at once) and rows whose last threads hold part
    of a vector or nothing, against LayerNorm in float64."""
    pytest.importorskip("pycuda")
    switches(reduction, WELFORD_ONE_REDUCTION_BLOCKS=64)
    torch.manual_seed(53)
    fd, xs = _layernorm_rows(dt, shape, offset)
    xs = [x.cuda() for x in xs]
    got, mean = fd.execute(xs)
    assert fd.last_cuda_code().count(ONE) == 1
    x, w, b = (t.double() for t in xs)
    want = torch.nn.functional.layer_norm(x, (shape[1],), w, b, 1e-5)
    # fp32 can hold x - mean no closer than a few ulps of the offset (over a spread of ~1)
    tol = {DataType.Float: 1e-4 + 8 * offset * 2.0 ** -23, DataType.Half: 1e-2, DataType.BFloat16: 3e-2}[dt]
    err = (got.double() - want).abs() / (1 + want.abs())
    assert bool(torch.isfinite(got).all()) and float(err.max()) < tol, float(err.max())
    mean_err = (mean.double().squeeze(1) - x.mean(1)).abs()
    assert float(mean_err.max()) < 1e-5 + 4 * offset * 2.0 ** -23, float(mean_err.max())
