"""lower.reduction.WELFORD_CORRECTED_MEAN: var_mean's two passes (sum / n, then the squared
deviations from it) also sum the deviations and correct the mean and M2 by them. Rows of
equal values then get their value as the mean exactly, a zero variance and a normalised
x - mean of exactly 0, as PyTorch's Welford gives; without it sum / n lands ulps off the
value, which a layer norm scales by rsqrt(eps) (gpu_fuzz seed 1723 case 236: 3.8e-5 for
33 equal floats). Simulated on the CPU for the three paths that lower var_mean over a
row: a normalisation's persistent row, a held var_mean row, and a long row's tiles merged
by Welford; compiled with nvcc; run on the GPU."""
from __future__ import annotations

import pytest
import torch

from fuser import DataType, FusionDefinition

#: (row length, normalised output too, the scheduler that takes it): the persistent
#: normalisation, var_mean alone held in registers (WELFORD_PERSISTENT_MAX), var_mean
#: alone over tiles (a longer row)
PATHS = [(33, True, "inner_persistent"), (20000, True, "inner_persistent"), (5000, False, "reduction"),
         (20000, False, "reduction")]
ROWS = 12


def _fusion(normalised: bool, dtype: DataType = DataType.Float) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float) if dtype != DataType.Float else x
        var, mean = fd.ops.var_mean(xf, dims=[1], correction=0, keepdim=False)
        if normalised:
            mb = fd.ops.broadcast_in_dim(mean, shape=xf.shape(), broadcast_dims=[0])
            vb = fd.ops.broadcast_in_dim(var, shape=xf.shape(), broadcast_dims=[0])
            fd.add_output(fd.ops.mul(fd.ops.sub(xf, mb), fd.ops.rsqrt(fd.ops.add(vb, 1e-5))))
        fd.add_output(mean)
        fd.add_output(var)
    return fd


def _equal_rows(n: int, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 3) -> torch.Tensor:
    """ROWS rows of n equal values each (a different random value a row, none a power of
    two), contiguous."""
    g = torch.Generator().manual_seed(seed)
    values = (torch.rand(ROWS, 1, generator=g) * 10 - 5).to(dtype)
    return values.expand(ROWS, n).contiguous().to(device)


def _simulated(fd: FusionDefinition, x: torch.Tensor, scheduler: str) -> dict[str, torch.Tensor]:
    """The kernel's outputs by role (y, mean, var), simulated on `x`."""
    from kernel_sim import simulate_kernel

    (group,) = fd.segmented_fusion_for([x]).groups
    assert str(group.scheduler) == scheduler
    (k,) = fd._kernels_for([x], "test")
    got = dict(zip(map(str, group.outputs), simulate_kernel(k, [x])))
    names = ("y", "mean", "var") if len(fd.fusion.outputs) == 3 else ("mean", "var")
    return {role: got[str(v)] for role, v in zip(names, fd.fusion.outputs)}


@pytest.mark.parametrize("n, normalised, scheduler", PATHS, ids=lambda v: str(v))
def test_equal_values_give_their_value_as_the_mean_exactly(switches, n, normalised, scheduler):
    import fuser.lower.reduction as LR

    x = _equal_rows(n)
    value = x[:, 0]
    switches(LR, WELFORD_CORRECTED_MEAN=True)
    out = _simulated(_fusion(normalised), x, scheduler)
    assert torch.equal(out["mean"], value)
    assert torch.equal(out["var"], torch.zeros_like(value))
    if normalised:
        assert torch.equal(out["y"], torch.zeros_like(x))
    # the check can fail: uncorrected, sum / n of these rows misses some of their values
    switches(LR, WELFORD_CORRECTED_MEAN=False)
    out = _simulated(_fusion(normalised), x, scheduler)
    assert not torch.equal(out["mean"], value)


@pytest.mark.parametrize("n, normalised, scheduler", PATHS, ids=lambda v: str(v))
def test_corrected_var_mean_of_random_rows_matches_float64(switches, n, normalised, scheduler):
    import fuser.lower.reduction as LR

    switches(LR, WELFORD_CORRECTED_MEAN=True)
    x = torch.randn(ROWS, n, generator=torch.Generator().manual_seed(11)) * 3 + 1.5
    out = _simulated(_fusion(normalised), x, scheduler)
    var, mean = torch.var_mean(x.double(), dim=1, correction=0)
    # float32 sums of n terms: within a few ulps of their magnitude
    torch.testing.assert_close(out["mean"].double(), mean, rtol=0, atol=1e-6)
    torch.testing.assert_close(out["var"].double(), var, rtol=1e-5, atol=0)
    if normalised:
        y = (x.double() - mean[:, None]) * torch.rsqrt(var[:, None] + 1e-5)
        torch.testing.assert_close(out["y"].double(), y, rtol=2e-5, atol=2e-5)


@pytest.mark.nvcc
def test_corrected_kernels_compile_for_sm90(switches):
    from cuda_units import compile_all

    import fuser.lower.reduction as LR

    switches(LR, WELFORD_CORRECTED_MEAN=True)
    sources = []
    for n, normalised, _ in PATHS:
        for dtype, tdt in ((DataType.Float, torch.float32), (DataType.BFloat16, torch.bfloat16)):
            src = _fusion(normalised, dtype).cuda_code_for([_equal_rows(n, tdt).to("meta")])
            assert "wdev" in src, (n, normalised, dtype)
            sources.append(src)
    assert compile_all(sources)[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("n, normalised, scheduler", PATHS + [(4096, True, "inner_persistent")], ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_equal_rows_are_exact_on_the_gpu(switches, poisoned_kernel_outputs, n, normalised, scheduler, dtype):
    pytest.importorskip("pycuda")
    import fuser.lower.reduction as LR

    switches(LR, WELFORD_CORRECTED_MEAN=True)
    fd = _fusion(normalised, DataType.Float if dtype is torch.float32 else DataType.BFloat16)
    x = _equal_rows(n, dtype, "cuda")
    out = fd.execute([x])
    segments = fd.last_segments()
    assert [str(s.scheduler) for s in segments] == [scheduler] and all(s.kernel for s in segments), segments
    *y, mean, var = out
    value = x[:, 0].float()
    assert torch.equal(mean, value)
    assert torch.equal(var, torch.zeros_like(value))
    if normalised:
        assert torch.equal(y[0], torch.zeros(x.shape, device="cuda"))
    # random rows against eager float64
    xr = (torch.randn(ROWS, n, device="cuda") * 3 + 1.5).to(dtype)
    *y, mean, var = fd.execute([xr])
    v64, m64 = torch.var_mean(xr.double(), dim=1, correction=0)
    torch.testing.assert_close(mean.double(), m64, rtol=0, atol=1e-6)
    torch.testing.assert_close(var.double(), v64, rtol=1e-5, atol=0)
    if normalised:
        y64 = (xr.double() - m64[:, None]) * torch.rsqrt(v64[:, None] + 1e-5)
        torch.testing.assert_close(y[0].double(), y64, rtol=2e-5, atol=2e-5)
