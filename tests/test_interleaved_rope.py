"""Interleaved rotary embeddings as Thunder emits them for GPT-J / NeoX-style models: a
bf16 input in a permuted layout (B, H, S, D) with the strides of a (B, S, H, D) tensor,
cast, permuted to (B, S, H, D), reshaped to (B, S, H, D/2, 2), each half of the last axis
sliced out and summed over it, multiplied by float cos / sin inputs expanded in two dims,
cast to bf16, broadcast back to (..., 1), padded to (..., 2) and added.

At (128, 6, 256, 48) this once killed the CUDA context: vectors of two were stored into the
width-1 slices (misaligned, and across the slice's stop). The kernels are simulated on the
CPU (misaligned and out-of-bounds accesses fault) and run on the GPU against eager PyTorch."""
from __future__ import annotations

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.tolerance import assert_close


def define(b: int, h: int, s: int, d: int) -> FusionDefinition:
    """The interleaved RoPE fusion for inputs of shape (b, h, s, d)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True, True, True, True], dtype=DataType.BFloat16,
                             stride_order=[3, 1, 2, 0])
        cos = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[None, True, None, True], dtype=DataType.Float)
        sin = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[None, True, None, True], dtype=DataType.Float)
        r = fd.ops.reshape(fd.ops.permute(fd.ops.cast(x, DataType.Float), [0, 2, 1, 3]), [b, s, h, d // 2, 2])
        zero = [0, 0, 0, 0]
        full = [b, s, h, d // 2]
        ones = [1, 1, 1, 1, 1]
        a = fd.ops.sum(fd.ops.slice(r, zero + [0], full + [1], ones), dims=[4])
        c = fd.ops.sum(fd.ops.slice(r, zero + [1], full + [2], ones), dims=[4])
        o1 = fd.ops.cast(fd.ops.sub(fd.ops.mul(a, cos), fd.ops.mul(c, sin)), DataType.BFloat16)
        o2 = fd.ops.cast(fd.ops.add(fd.ops.mul(a, sin), fd.ops.mul(c, cos)), DataType.BFloat16)
        o1 = fd.ops.broadcast_in_dim(o1, full + [1], [0, 1, 2, 3])
        o2 = fd.ops.broadcast_in_dim(o2, full + [1], [0, 1, 2, 3])
        z = fd.define_scalar(0.0, dtype=DataType.Double)
        fd.add_output(fd.ops.add(fd.ops.pad(o1, [0, 1], z), fd.ops.pad(o2, [1, 0], z)))
    return fd


def inputs(b: int, h: int, s: int, d: int, device: str = "cpu") -> list[torch.Tensor]:
    x = torch.randn(b, s, h, d, dtype=torch.bfloat16, device=device).permute(0, 2, 1, 3)
    cos = torch.randn(1, s, 1, d // 2, device=device).expand(b, s, h, d // 2)
    sin = torch.randn(1, s, 1, d // 2, device=device).expand(b, s, h, d // 2)
    return [x, cos, sin]


def eager(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    b, h, s, d = x.shape
    r = x.float().permute(0, 2, 1, 3).reshape(b, s, h, d // 2, 2)
    a, c = r[..., 0], r[..., 1]
    o1 = (a * cos - c * sin).bfloat16().float()
    o2 = (a * sin + c * cos).bfloat16().float()
    return torch.stack([o1, o2], -1).bfloat16()


SMALL = [(2, 6, 16, 48), (1, 3, 5, 6), (3, 2, 7, 10)]


@pytest.mark.parametrize("shape", SMALL, ids=["x".join(map(str, s)) for s in SMALL])
def test_kernels_simulate_without_faults(shape):
    from kernel_sim import simulate_fusion

    report = simulate_fusion(define(*shape), inputs(*shape))
    assert report.simulated > 0 and not report.skipped, report
    assert report.ok, report


def test_execute_matches_eager_on_cpu():
    shape = SMALL[0]
    ins = inputs(*shape)
    (got,) = define(*shape).execute(ins)
    assert_close(got, eager(*ins), what="interleaved rope")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 6, 256, 48)] + SMALL, ids=lambda s: "x".join(map(str, s)))
def test_matches_eager_on_the_gpu(shape):
    fd = define(*shape)
    for _ in range(2):
        ins = inputs(*shape, device="cuda")
        (got,) = fd.execute(ins)
        ran = [s.kernel for s in fd.last_segments() if s.generates_kernel]
        assert ran and all(ran)
        assert_close(got, eager(*ins), what=f"interleaved rope {shape}")
    torch.cuda.synchronize()  # a fault would surface here, and poison every later test
