"""2D pointwise schedules with vectors where inputs along the rows (per-column weights, a
mean and invstd per column: batch norm's normalisation) weigh more than
pointwise.BREAK_ALONG_SHARE times the tensors spanning both axes per element: each thread
takes pointwise.BREAK_ROWS_UNROLL rows of one vector of columns and reads the per-column
inputs once for them all. Generated without a
GPU, simulated on the CPU against the reference executor, and on the GPU against eager
PyTorch with poisoned outputs."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.scheduler import pointwise as P

_DT = {torch.bfloat16: DataType.BFloat16, torch.float16: DataType.Half, torch.float32: DataType.Float}


def _normalise(dt: torch.dtype):
    """y = ((x - mean) * invstd * w + b) in x's dtype: x [M, N], mean and invstd float [N],
    w and b [N] of x's dtype."""
    fdt = _DT[dt]

    def build(fd: FusionDefinition) -> None:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=fdt)
        mean = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        invstd = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=fdt)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=fdt)
        xf = fd.ops.cast(x, DataType.Float) if fdt != DataType.Float else x
        shape = fd.ops.shape(x)
        def col(t):
            t = fd.ops.cast(t, DataType.Float) if t.dtype != DataType.Float else t
            return fd.ops.broadcast_in_dim(t, shape=shape, broadcast_dims=[1])
        y = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.sub(xf, col(mean)), col(invstd)), col(w)), col(b))
        fd.add_output(fd.ops.cast(y, fdt) if fdt != DataType.Float else y)

    return build


def _bias_relu(dt: torch.dtype):
    """relu(x + bias): the bias [N] weighs half of x and y per element."""
    fdt = _DT[dt]

    def build(fd: FusionDefinition) -> None:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=fdt)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=fdt)
        y = fd.ops.relu(fd.ops.add(x, fd.ops.broadcast_in_dim(b, shape=fd.ops.shape(x), broadcast_dims=[1])))
        fd.add_output(fd.ops.cast(y, fdt) if fdt != DataType.Float else y)

    return build


def _inputs(dt: torch.dtype, m: int, n: int, device="cpu") -> list[torch.Tensor]:
    x = torch.randn(m, n, device=device).to(dt)
    mean = torch.randn(n, device=device)
    invstd = torch.rand(n, device=device) + 0.5
    return [x, mean, invstd, torch.randn(n, device=device).to(dt), torch.randn(n, device=device).to(dt)]


def _eager(xs: list[torch.Tensor]) -> torch.Tensor:
    x, mean, invstd, w, b = xs
    return ((x.float() - mean) * invstd * w.float() + b.float()).to(x.dtype)


def _fd(build) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _meta(xs):
    return [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") for x in xs]


def test_per_column_inputs_take_rows_per_thread_and_a_bias_does_not():
    xs = _inputs(torch.bfloat16, 256, 1024)
    src = _fd(_normalise(torch.bfloat16)).cuda_code_for(_meta(xs))
    # 2D (rows over blockIdx.y, no modulo), vectors, BREAK_ROWS_UNROLL rows a thread
    assert "blockIdx.y" in src and "%" not in src, src
    assert "fuser::load_vec<__bfloat, 4>" in src
    assert f"((nvfuser_index_t)blockIdx.y) * {P.BREAK_ROWS_UNROLL} + u1" in src
    # bf16: 12 bytes along the rows against 4 spanning; bias + relu: 2 against 4, 1D
    # (and in float, 16 against 8: 1D)
    b = [torch.randn(256, 1024).to(torch.bfloat16), torch.randn(1024).to(torch.bfloat16)]
    plain = _fd(_bias_relu(torch.bfloat16)).cuda_code_for(_meta(b))
    assert "blockIdx.y" not in plain and "fuser::load_vec<__bfloat, 8>" in plain
    xf = _inputs(torch.float32, 256, 1024)
    assert "blockIdx.y" not in _fd(_normalise(torch.float32)).cuda_code_for(_meta(xf))


def test_more_row_groups_than_the_y_grid_holds_stay_1d():
    """Rows over blockIdx.y in groups of BREAK_ROWS_UNROLL: 4 * 65535 rows fit the y grid,
    one more row does not (its group would be the 65536th)."""
    def code(rows: int) -> str:
        x = torch.empty(rows, 1024, dtype=torch.bfloat16, device="meta")
        return _fd(_normalise(torch.bfloat16)).cuda_code_for([x] + _meta(_inputs(torch.bfloat16, 1, 1024)[1:]))

    n = P.BREAK_ROWS_UNROLL * P.MAX_GRID_Y
    assert "blockIdx.y" in code(n)
    assert "blockIdx.y" not in code(n + 1)


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(37, 1000), (1, 512), (4, 520), (130, 264), (6, 4096)], ids=str)
def test_rows_per_thread_simulate_to_the_reference(dt, shape):
    """Rows not a multiple of the rows a thread takes, columns not a multiple of a block's
    vectors, one row."""
    from kernel_sim import simulate_fusion

    torch.manual_seed(3)
    xs = _inputs(dt, *shape)
    fd = _fd(_normalise(dt))
    src = fd.cuda_code_for(_meta(xs))
    assert "blockIdx.y" in src and re.search(r"load_vec<[^,]+, [248]>", src), src
    report = simulate_fusion(fd, xs)
    assert report.ok and report.status == "ok", str(report)


def test_rows_per_thread_compile_for_sm90():
    from cuda_units import compile_all

    srcs = []
    for dt in (torch.bfloat16, torch.float16):
        for shape in ((37, 1000), (4, 520), (2048, 16384)):
            srcs.append(_fd(_normalise(dt)).cuda_code_for(_meta(_inputs(dt, *shape))))
    assert compile_all(srcs)[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(37, 1000), (1, 512), (4, 520), (1027, 4096), (6, 16384)], ids=str)
def test_rows_per_thread_match_eager_on_the_gpu(poisoned_kernel_outputs, dt, shape):
    pytest.importorskip("pycuda")
    from fuser.cli.bench import fuser_segments

    torch.manual_seed(5)
    xs = _inputs(dt, *shape, device="cuda")
    fd = _fd(_normalise(dt))
    (got,) = fd.execute(xs)
    segments = fuser_segments(fd)
    assert segments and all(kernel for _, kernel in segments), segments
    want = _eager(xs)
    tol = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}[dt]
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["batchnorm_fwd_bf16"])
@pytest.mark.parametrize("shape", [(2048, 1000), (1031, 4096), (513, 16384)], ids=str)
def test_batch_norm_with_rows_per_thread_matches_eager_on_the_gpu(poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    bench_case_on_gpu(name, shape, seed=23)
