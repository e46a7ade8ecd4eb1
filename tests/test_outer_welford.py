"""Outer Welford reductions (var_mean over rows: batch norm's statistics) with vectors of
columns: per step, each lane's tile merged with Chan's formula (the default), or each lane
updated value by value, one reciprocal of the shared count serving every lane
(lower.reduction.OUTER_WELFORD_ONLINE). Generated without a GPU, compiled with nvcc,
simulated on the CPU against the reference executor, and on the GPU against eager PyTorch."""
from __future__ import annotations

import re

import pytest
import torch

from cuda_units import compile_all
from fuser import DataType, FusionDefinition
from fuser.lower import reduction as lred
from test_row_loop import bench_case_on_gpu

@pytest.fixture
def welford(switches):
    def set_(online: bool = True) -> None:
        switches(lred, OUTER_WELFORD_ONLINE=online)

    return set_


def _var_mean_rows(dt: DataType, correction: int = 1):
    """var and mean over dim 0 of a [M, N] tensor, in float, plus x - mean (a full output)."""

    def build(fd: FusionDefinition) -> None:
        x0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        x = fd.ops.cast(x0, DataType.Float) if dt != DataType.Float else x0
        var, mean = fd.ops.var_mean(x, dims=[0], correction=correction, keepdim=False)
        fd.add_output(var)
        fd.add_output(mean)

    return build


def _batch_norm(dt: DataType):
    """Batch-norm statistics and y over a channels-last [M, N] (as the bench's)."""

    def build(fd: FusionDefinition) -> None:
        x0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        x = fd.ops.cast(x0, DataType.Float) if dt != DataType.Float else x0
        var, mean = fd.ops.var_mean(x, dims=[0], correction=0, keepdim=False)
        invstd = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5)))
        xhat = fd.ops.mul(fd.ops.sub(x, fd.ops.broadcast_in_dim(mean, x.shape(), [1])),
                          fd.ops.broadcast_in_dim(invstd, x.shape(), [1]))
        fd.add_output(fd.ops.cast(xhat, dt) if dt != DataType.Float else xhat)
        fd.add_output(mean)
        fd.add_output(invstd)

    return build


# (builder, dtype, shape): rows held by a grid (outer-persistent) and rows too many (a
# statistics kernel, then a pointwise one); row counts that leave the last step partial;
# columns that are not a whole number of vectors per block; a mean far from zero (where a
# sum of squares would cancel)
CASES = {
    "var_mean_bf16_37x40": (_var_mean_rows, DataType.BFloat16, (37, 40), 0.0),
    "var_mean_fp32_1001x24": (_var_mean_rows, DataType.Float, (1001, 24), 100.0),
    "var_mean_bf16_6007x136": (_var_mean_rows, DataType.BFloat16, (6007, 136), 3.0),
    "batch_norm_bf16_130x1000": (_batch_norm, DataType.BFloat16, (130, 1000), 0.0),
    "batch_norm_bf16_120x1000": (_batch_norm, DataType.BFloat16, (120, 1000), 0.5),
    "batch_norm_fp16_2999x72": (_batch_norm, DataType.Half, (2999, 72), 8.0),
    "batch_norm_fp32_20011x8": (_batch_norm, DataType.Float, (20011, 8), -50.0),
    # too many rows to hold: a statistics kernel (simulated), then y (too big to simulate)
    "batch_norm_bf16_150001x64": (_batch_norm, DataType.BFloat16, (150001, 64), 1.0),
}


def _case(name: str) -> tuple[FusionDefinition, list[torch.Tensor]]:
    build, dt, (m, n), offset = CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    x = (torch.randn(m, n) * 2 + offset).to(dt.torch)
    with FusionDefinition() as fd:
        build(dt)(fd)
    return fd, [x]


@pytest.mark.nvcc
def test_lanes_share_one_reciprocal_and_keep_no_tile(welford):
    welford(online=True)
    fd, xs = _case("var_mean_bf16_6007x136")
    src = fd.cuda_code_for([x.to("meta") for x in xs])
    # value by value: no per-lane tile mean, no merge of tiles in the thread's loop
    assert "welford_merge" not in src and "wmean" not in src
    assert re.search(r"\(1\.0f / \(wb\d+ \+ \(\(float\)\(u \+ 1\)\)\)\)", src)
    welford(online=False)
    chunks = fd.cuda_code_for([x.to("meta") for x in xs])
    # per step: one reciprocal of lane 0's count for every lane, one division for Chan's
    # weight, no merge call; the tile's values converted again in the second pass
    assert "welford_merge" not in chunks
    assert re.search(r"float wr\d+ = \(1\.0f / \(\(float\)wcnt\d+\[0\]\)\);", chunks), chunks
    assert len(re.findall(r"t\d+\[u \* 4 \+ v\] = fuser::bfloat_to_float", chunks)) == 2
    assert compile_all([src, chunks])[:4] == b"\x7fELF"


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("name", sorted(CASES))
def test_outer_welford_simulates_to_the_reference(welford, name, online):
    from kernel_sim import simulate_fusion

    welford(online)
    fd, xs = _case(name)
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok, str(report)
    # every kernel simulated, but the pointwise kernel of the two-kernel batch norm
    assert report.status == "ok" or str(report).count(": ok") == 1 and "(reduction, kernel" in str(report), \
        str(report)


GPU_SHAPES = ((16384, 4096), (8192, 8192), (2048, 16384), (1024, 1000), (128, 1000), (3, 8), (5000, 7))


@pytest.mark.gpu
@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("name", ["batchnorm_fwd_bf16", "batchnorm_fwd_fp32"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=["x".join(map(str, s)) for s in GPU_SHAPES])
def test_batch_norm_matches_eager_on_the_gpu(welford, poisoned_kernel_outputs, name, shape, online):
    pytest.importorskip("pycuda")
    welford(online)
    bench_case_on_gpu(name, shape, seed=5)


@pytest.mark.gpu
@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("name", sorted(CASES))
def test_outer_welford_matches_eager_on_the_gpu(welford, poisoned_kernel_outputs, name, online):
    """Against float64 eager: the statistics of M float values within a sum's float error
    (rtol 1e-4), y within its dtype's tolerance."""
    pytest.importorskip("pycuda")
    from fuser.runtime.tolerance import assert_close

    welford(online)
    fd, xs = _case(name)
    got = fd.execute([x.cuda() for x in xs])
    x = xs[0].double()
    if CASES[name][0] is _var_mean_rows:
        want = [x.var(0, correction=1), x.mean(0)]
    else:
        var, mean = x.var(0, correction=0), x.mean(0)
        invstd = torch.rsqrt(var + 1e-5)
        want = [((x - mean) * invstd).to(xs[0].dtype), mean, invstd]
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if w.dtype == torch.float64:
            assert_close(g.double(), w, what=f"output {k}", rtol=1e-4, atol=1e-4)
        else:
            assert_close(g, w, what=f"output {k}")


@pytest.mark.parametrize("name", ["batch_norm_bf16_120x1000", "batch_norm_bf16_130x1000", "var_mean_bf16_37x40",
                                  "batch_norm_fp16_2999x72"])
def test_one_block_short_vectors_simulate_to_the_reference(switches, name):
    """normalization.OUTER_ONE_BLOCK_SHORT_VECTORS (on): a one-block outer-persistent
    kernel over few columns takes shorter vectors (120 x 1000: 2 elements instead of 4,
    125 blocks of 128 threads instead of 63) while the doubled grid puts at most
    OUTER_ONE_BLOCK_SM_THREADS threads on an SM (130 x 1000: 256-thread blocks, 242 an
    SM: vectors of 4 kept), and still simulates to the reference."""
    from kernel_sim import simulate_fusion

    from fuser.scheduler import normalization as N

    fd, xs = _case(name)
    widths = []
    for on in (False, True):
        switches(N, OUTER_ONE_BLOCK_SHORT_VECTORS=on)
        fd, xs = _case(name)
        src = fd.cuda_code_for([x.to("meta") for x in xs])
        widths.append(sorted(set(re.findall(r"load_vec<[^,]+, (\d+)>", src))))
    if name == "batch_norm_bf16_120x1000":
        assert widths == [["4"], ["2"]], widths
    if name == "batch_norm_bf16_130x1000":
        assert widths == [["4"], ["4"]], widths
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["batchnorm_fwd_bf16", "batchnorm_fwd_fp32"])
@pytest.mark.parametrize("shape", [(128, 1000), (200, 333), (64, 4096), (3, 8)], ids=str)
def test_one_block_short_vectors_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from fuser.scheduler import normalization as N

    switches(N, OUTER_ONE_BLOCK_SHORT_VECTORS=True)
    bench_case_on_gpu(name, shape, seed=19)
