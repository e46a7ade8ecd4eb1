"""Benchmark fusions shared by `python -m fuser bench` and asv (`asv_bench/benchmarks/kernels.py`).

Each `BenchFusion` carries its definition (FusionDefinition API), a factory of fresh random
inputs, the eager PyTorch function computing the same outputs, and the bytes a kernel must
move. Every definition uses symbolic sizes (``shape=[-1, ...]``), so one definition serves
any shape: `make_inputs(device, shape)` picks the sizes. A fusion is timed at each of its
`shapes` (`quick_shapes` for ``--quick``) and checked on CPU at `small_shape`.

The reduction and normalisation fusions (RMSNorm / LayerNorm / softmax forward, inner and
outer sums, var_mean; bf16 and fp32) follow nvFuser's Python benchmarks
(``benchmarks/python/test_{rmsnorm,layernorm,softmax}_fwd.py``, ``test_reduction.py``):
bf16 inputs are cast to float, computed in float and cast back; the norms also write the
statistics a training step saves for its backward (LayerNorm: mean and rstd; RMSNorm:
rstd), float32 of shape [M, 1], as ``aten.native_layer_norm`` / ``aten._fused_rms_norm`` do.
Beside them, a transformer block's dropout + residual add + LayerNorm forward (nvFuser's
``test_dropout_layernorm_fwd.py`` times the like): its uniform numbers are drawn per
execution, so eager PyTorch (timed) draws other ones and fuser is checked against the
reference executor replaying the same draw (`BenchFusion.random`, `BenchFusion.expected`).

The backward set (RMSNorm / LayerNorm / softmax backward and a batch-norm training forward
on channels-last [M, N] reduced over M, bf16 and fp32; seed 001's RMSNorm backward at its
real shape) is modelled on ``benchmarks/python/test_{rmsnorm,layernorm,softmax}_bwd.py``
and ``test_batchnorm_fwd.py`` the same way: computed in float; the backwards take the saved
statistics as float32 [M, 1] (computed from x, as the forward saved them) and return dx and
the parameter gradients in the input dtype; the batch norm returns y in the input dtype and
its per-column mean and invstd in float32 [N], as ``aten.native_batch_norm`` does on CUDA.

Each fusion belongs to one `GROUPS` entry ("pointwise", "reduction", "backward", "shapes"), which
`python -m fuser bench --only GROUP` selects (`select`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from fuser import DataType, FusionDefinition

__all__ = [
    "BenchFusion",
    "FUSIONS",
    "REDUCTION_SHAPES",
    "REDUCTION_QUICK_SHAPES",
    "BACKWARD_SHAPES",
    "GROUPS",
    "by_name",
    "select",
    "define",
    "stored_bytes",
    "bytes_moved",
    "reduction_tolerance",
    "SERIAL_CHAIN",
]

#: the shape of the bandwidth benchmarks (256 MiB of bf16/fp16, 512 MiB of fp32: far past L2)
LARGE = (16384, 8192)
#: the shape for `--quick` runs on a GPU (128 MiB of bf16: still past a 50 MiB L2)
QUICK = (8192, 8192)
#: the shape for CPU checks and tests
SMALL = (64, 96)
#: the shapes of the reduction / normalisation benchmarks: LLM rows (hidden 4096 with 16k
#: tokens, 8192, 16384, 1024) and a small [128, 1000] one (launch- and occupancy-bound)
REDUCTION_SHAPES = ((16384, 4096), (8192, 8192), (2048, 16384), (16384, 1024), (128, 1000))
#: their `--quick` subset: one LLM shape (128 MiB of bf16) and the small one
REDUCTION_QUICK_SHAPES = ((16384, 4096), (128, 1000))
#: the shapes of the backward normalisations (and the batch norm): the LLM rows of
#: REDUCTION_SHAPES and the small one; their `--quick` subset is REDUCTION_QUICK_SHAPES
BACKWARD_SHAPES = ((16384, 4096), (8192, 8192), (2048, 16384), (128, 1000))
#: seed 001's one shape: its definition (the report's program) hard-codes these sizes
SEED001_SHAPE = (56, 1024, 1024)

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def stored_bytes(t: torch.Tensor) -> int:
    """Bytes of the elements `t` really stores: stride-0 (broadcast / expanded) axes count once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            return 0
        if stride != 0:
            n *= size
    return n * t.element_size()


@dataclass(frozen=True)
class BenchFusion:
    """One benchmark fusion.

    name: the name the CLI and asv use.
    build: records the fusion into an open FusionDefinition (`define(fd)`).
    inputs: `(device, shape) -> list[Tensor]`, fresh random values (never all zeros).
    reference: the eager PyTorch function, `list[Tensor] -> list[Tensor]`.
    shape: the default shape (`make_inputs`' and asv's; default: the first of `shapes`);
    `quick_shape` likewise for `--quick`.
    shapes: every shape a full GPU run times (default: just `shape`); `quick_shapes` the
    ones `--quick` times (default: just `quick_shape`).
    small_shape: the shape of the CPU check (`python -m fuser bench` without CUDA, tests).
    kind: "bandwidth" (memory-bound, reported as % of copy bandwidth) or "latency"
    (host cost of a tiny launch).
    reduced: the dims of the first input that the fusion reduces over (empty: none); the
    check's tolerances grow with their extent n (`tolerance`).
    scales: n -> per output, the magnitude of the terms its reduction sums, in the output's
    units (1 for a sum of randn, 1/n for a mean, 0 where the error is relative, as for a
    softmax or a normalised row); default: 1 for every output.
    output_reduced: per output, the dims of the first input that output is reduced over,
    where outputs differ (a backward's dx over N, its dweight over M); n (for `scales` too)
    is then that output's own extent. Default: `reduced` for every output.
    group: the `GROUPS` entry the fusion belongs to ("pointwise", "reduction", "backward", "shapes").
    """

    name: str
    build: Callable[[FusionDefinition], None]
    inputs: Callable[[torch.device, tuple[int, ...]], list[torch.Tensor]]
    reference: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
    shape: tuple[int, ...] | None = None
    quick_shape: tuple[int, ...] | None = None
    kind: str = "bandwidth"
    description: str = ""
    shapes: tuple[tuple[int, ...], ...] = ()
    quick_shapes: tuple[tuple[int, ...], ...] = ()
    small_shape: tuple[int, ...] = SMALL
    reduced: tuple[int, ...] = ()
    scales: Callable[[int], Sequence[float]] | None = None
    output_reduced: tuple[tuple[int, ...], ...] = ()
    group: str = "pointwise"
    #: its outputs depend on random numbers (dropout): eager PyTorch draws other ones, so
    #: fuser is checked against the reference executor drawing the same (`expected`)
    random: bool = False

    def __post_init__(self) -> None:
        shapes = tuple(tuple(s) for s in self.shapes) or (tuple(self.shape or LARGE),)
        quick = tuple(tuple(s) for s in self.quick_shapes) or (tuple(self.quick_shape or QUICK),)
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "quick_shapes", quick)
        object.__setattr__(self, "shape", tuple(self.shape) if self.shape is not None else shapes[0])
        object.__setattr__(self, "quick_shape", tuple(self.quick_shape) if self.quick_shape is not None else quick[0])

    def define(self, fd: FusionDefinition) -> None:
        """Record this fusion into the open definition `fd`."""
        self.build(fd)

    def fusion_definition(self) -> FusionDefinition:
        """A new, finished FusionDefinition of this fusion."""
        with FusionDefinition() as fd:
            self.build(fd)
        return fd

    def make_inputs(self, device: torch.device | str = "cpu", shape: Sequence[int] | None = None) -> list[torch.Tensor]:
        """Fresh random inputs on `device`, of `shape` (default: the benchmark shape)."""
        return self.inputs(torch.device(device), tuple(shape) if shape is not None else self.shape)

    def eager(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The same outputs computed with eager PyTorch."""
        return self.reference(inputs)

    def expected(self, inputs: Sequence[torch.Tensor], fd: FusionDefinition | None = None,
                 rng_state: torch.Tensor | None = None) -> list[torch.Tensor]:
        """What fuser's outputs on `inputs` must match: the eager function's; for a `random`
        fusion, the reference executor's on `fd`'s fusion with PyTorch's generator put back
        to `rng_state` (its state before `fd.execute` ran: the reference then draws the same
        seed and offset, so the random numbers agree bit for bit and the rest to the
        tolerances). The generator is left as it was."""
        if not self.random:
            return self.eager(inputs)
        if fd is None or rng_state is None:
            raise ValueError(f"{self.name} draws random numbers: its check needs the FusionDefinition that ran "
                             f"and the generator state from before it ran")
        from fuser.runtime import philox
        from fuser.runtime.reference import run_reference

        with philox.replaying([(inputs[0].device, rng_state)]):
            return run_reference(fd.fusion, list(inputs))

    def bytes_moved(self, inputs: Sequence[torch.Tensor]) -> int:
        """Bytes of every input read plus every output written (inputs at their stored size)."""
        return bytes_moved(self, inputs)

    def tolerance(self, inputs: Sequence[torch.Tensor], want: torch.Tensor, index: int = 0) -> tuple[float, float]:
        """(rtol, atol) for comparing fuser's output `index` with the eager one `want` on
        `inputs`: `fuser.runtime.tolerance.tolerances` of its dtype, widened for a reduction
        over n elements by what float accumulation in another order may differ by
        (`reduction_tolerance`, at this output's `scales`)."""
        from fuser.runtime.tolerance import tolerances

        dims = self.output_reduced[index] if self.output_reduced else self.reduced
        if not dims or not want.dtype.is_floating_point:
            return tolerances(want.dtype)
        x = inputs[0]
        n = math.prod(x.shape[d] for d in dims)
        scale = self.scales(n)[index] if self.scales is not None else 1.0
        return reduction_tolerance(want.dtype, n, scale)


#: the longest serial (per-thread) accumulation `reduction_tolerance` allows for
SERIAL_CHAIN = 4096


def reduction_tolerance(dtype: torch.dtype, n: int, scale: float = 1.0, *,
                        relative: bool = False) -> tuple[float, float]:
    """(rtol, atol) for a result of `dtype` reduced over `n` elements, accumulated in
    float32 (float64 for double) in an order that may differ from the reference's; never
    tighter than the dtype's own (`fuser.runtime.tolerance.tolerances`).

    atol, for sums of signed terms of magnitude `scale` (in the result's units): a kernel
    accumulates serial chains of L elements per thread, then combines them in a tree; the
    result then differs from the exact sum by up to about 0.7 eps scale sqrt(n L) (measured
    on randn rows, n from 1025 to 2**20, L from 64 to n). The bound is 4 eps scale
    sqrt(n min(n, 4096)): chains up to SERIAL_CHAIN elements, with margin.

    rtol, with `relative` (products): every multiplication adds a relative error, in any
    order, about 0.29 eps sqrt(n) in all; the bound is 4 eps sqrt(n). Sums of positive terms
    (variances, softmax denominators, sums of squares) err relatively by at most about
    0.7 eps sqrt(L), within float32's own rtol for chains up to SERIAL_CHAIN."""
    from fuser.runtime.tolerance import tolerances

    rtol, atol = tolerances(dtype)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    eps = torch.finfo(acc).eps
    n = max(n, 1)
    atol = max(atol, 4.0 * eps * scale * math.sqrt(n * min(n, SERIAL_CHAIN)))
    if relative:
        rtol = max(rtol, 4.0 * eps * math.sqrt(n))
    return rtol, atol


def bytes_moved(fusion: BenchFusion, inputs: Sequence[torch.Tensor]) -> int:
    """`fusion.bytes_moved(inputs)`: outputs are sized by running the eager function on meta
    tensors shaped like `inputs`, so no data is touched."""
    read = sum(stored_bytes(x) for x in inputs)
    meta = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") for x in inputs]
    written = sum(stored_bytes(y) for y in fusion.reference(meta))
    return read + written


# ----------------------------------------------------------------------------------------------
# definitions


def _matrix(fd: FusionDefinition, dtype: DataType, ndim: int):
    return fd.define_tensor(shape=[-1] * ndim, contiguity=[True] * ndim, dtype=dtype)


def _gelu_tanh(fd: FusionDefinition, x):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) on a float tensor."""
    x3 = fd.ops.mul(fd.ops.mul(x, x), x)
    inner = fd.ops.mul(fd.ops.add(x, fd.ops.mul(x3, 0.044715)), _SQRT_2_OVER_PI)
    return fd.ops.mul(fd.ops.mul(x, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))


def _define_gelu_bf16(fd: FusionDefinition) -> None:
    t0 = _matrix(fd, DataType.BFloat16, 2)
    x = fd.ops.cast(t0, DataType.Float)
    fd.add_output(fd.ops.cast(_gelu_tanh(fd, x), DataType.BFloat16))


def _define_bias_relu(fd: FusionDefinition) -> None:
    t0 = _matrix(fd, DataType.BFloat16, 2)
    bias = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
    b = fd.ops.broadcast_in_dim(bias, shape=t0.shape(), broadcast_dims=[1])
    y = fd.ops.add(fd.ops.cast(t0, DataType.Float), fd.ops.cast(b, DataType.Float))
    fd.add_output(fd.ops.cast(fd.ops.relu(y), DataType.BFloat16))


def _define_cast_chain(fd: FusionDefinition) -> None:
    t0 = _matrix(fd, DataType.Float, 2)
    fd.add_output(fd.ops.cast(fd.ops.cast(t0, DataType.BFloat16), DataType.Float))


def _define_where3(fd: FusionDefinition) -> None:
    a = _matrix(fd, DataType.Half, 2)
    b = _matrix(fd, DataType.Half, 2)
    c = _matrix(fd, DataType.Half, 2)
    fd.add_output(fd.ops.where(fd.ops.gt(a, b), a, c))


# --- reductions and normalisations (nvFuser's benchmarks/python definitions, our code) --------

#: RMSNorm and LayerNorm epsilon (nvFuser's benchmarks and LLaMA-style models use 1e-5)
NORM_EPS = 1e-5

_TORCH_DTYPE = {DataType.BFloat16: torch.bfloat16, DataType.Float: torch.float32}


def _to_float(fd: FusionDefinition, t, dtype: DataType):
    """`t` as float: a cast for bf16/fp16 (computed in float, as PyTorch's kernels do)."""
    return fd.ops.cast(t, DataType.Float) if dtype != DataType.Float else t


def _from_float(fd: FusionDefinition, t, dtype: DataType):
    return fd.ops.cast(t, dtype) if dtype != DataType.Float else t


def _rows_keepdim(fd: FusionDefinition, x, r):
    """The per-row result `r` ([M]) as [M, 1]."""
    return fd.ops.broadcast_in_dim(r, shape=[x.size(0), 1], broadcast_dims=[0])


def _rmsnorm_fwd(dtype: DataType):
    """y = x * rsqrt(mean(x^2, -1) + eps) * weight, in float; outputs y (dtype) and rstd
    (float [M, 1]) as ``aten._fused_rms_norm`` does."""

    def build(fd: FusionDefinition) -> None:
        x0 = _matrix(fd, dtype, 2)
        w0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        x, w = _to_float(fd, x0, dtype), _to_float(fd, w0, dtype)
        ssq = fd.ops.sum(fd.ops.mul(x, x), dims=[1], keepdim=False)
        ms = fd.ops.mul(_rows_keepdim(fd, x, ssq), fd.ops.reciprocal(x.size(1)))
        rstd = fd.ops.rsqrt(fd.ops.add(ms, NORM_EPS))
        y = fd.ops.mul(x, fd.ops.broadcast_in_dim(rstd, shape=x.shape(), broadcast_dims=[0, 1]))
        y = fd.ops.mul(y, fd.ops.broadcast_in_dim(w, shape=x.shape(), broadcast_dims=[1]))
        fd.add_output(_from_float(fd, y, dtype))
        fd.add_output(rstd)

    return build


def _layernorm_fwd(dtype: DataType):
    """y = (x - mean) * rsqrt(var + eps) * weight + bias over the last dim (var_mean,
    correction 0), in float; outputs y (dtype), mean and rstd (float [M, 1]) as
    ``aten.native_layer_norm`` does."""

    def build(fd: FusionDefinition) -> None:
        x0 = _matrix(fd, dtype, 2)
        w0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        b0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        x, w, b = (_to_float(fd, t, dtype) for t in (x0, w0, b0))
        var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=False)
        mean = _rows_keepdim(fd, x, mean)
        rstd = fd.ops.rsqrt(fd.ops.add(_rows_keepdim(fd, x, var), NORM_EPS))
        shape = x.shape()
        xhat = fd.ops.mul(
            fd.ops.sub(x, fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 1])),
            fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1]),
        )
        y = fd.ops.add(
            fd.ops.mul(xhat, fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1])),
            fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[1]),
        )
        fd.add_output(_from_float(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(rstd)

    return build


#: the dropout probability of the dropout + residual + LayerNorm benchmark
DROPOUT_P = 0.1


def _dropout_add_layernorm_fwd(dtype: DataType):
    """A transformer block's dropout + residual add + LayerNorm forward, in float:
    h = dropout(x, p) + residual (uniform numbers drawn per execution: keep where u < 1 - p,
    scaled by 1 / (1 - p)), then LayerNorm of h over the last dim as `_layernorm_fwd`;
    outputs y and h (dtype: the normalised value and the new residual stream), mean and rstd
    (float [M, 1])."""

    def build(fd: FusionDefinition) -> None:
        x0, r0 = _matrix(fd, dtype, 2), _matrix(fd, dtype, 2)
        w0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        b0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        x, res, w, b = (_to_float(fd, t, dtype) for t in (x0, r0, w0, b0))
        u = fd.ops.uniform(0.0, 1.0, x.shape(), dtype=DataType.Float)
        kept = fd.ops.where(fd.ops.lt(u, 1.0 - DROPOUT_P), x, 0.0)
        h = fd.ops.add(fd.ops.mul(kept, 1.0 / (1.0 - DROPOUT_P)), res)
        var, mean = fd.ops.var_mean(h, dims=[1], correction=0, keepdim=False)
        mean = _rows_keepdim(fd, h, mean)
        rstd = fd.ops.rsqrt(fd.ops.add(_rows_keepdim(fd, h, var), NORM_EPS))
        shape = h.shape()
        hhat = fd.ops.mul(
            fd.ops.sub(h, fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 1])),
            fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1]),
        )
        y = fd.ops.add(
            fd.ops.mul(hhat, fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1])),
            fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[1]),
        )
        fd.add_output(_from_float(fd, y, dtype))
        fd.add_output(_from_float(fd, h, dtype))
        fd.add_output(mean)
        fd.add_output(rstd)

    return build


def _softmax_fwd(dtype: DataType):
    """softmax over the last dim: exp(x - max) / sum(exp(x - max)), in float."""

    def build(fd: FusionDefinition) -> None:
        x = _to_float(fd, _matrix(fd, dtype, 2), dtype)
        shape = x.shape()
        m = _rows_keepdim(fd, x, fd.ops.max(x, dims=[1], keepdim=False))
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.broadcast_in_dim(m, shape=shape, broadcast_dims=[0, 1])))
        s = _rows_keepdim(fd, x, fd.ops.sum(e, dims=[1], keepdim=False))
        y = fd.ops.mul(e, fd.ops.reciprocal(fd.ops.broadcast_in_dim(s, shape=shape, broadcast_dims=[0, 1])))
        fd.add_output(_from_float(fd, y, dtype))

    return build


def _sum_fwd(dtype: DataType, dim: int):
    """sum over `dim` (1: inner, 0: outer), accumulated in float, result in dtype."""

    def build(fd: FusionDefinition) -> None:
        x = _to_float(fd, _matrix(fd, dtype, 2), dtype)
        fd.add_output(_from_float(fd, fd.ops.sum(x, dims=[dim], keepdim=False), dtype))

    return build


#: var_mean's correction in the benchmark: 0, as nvFuser's LayerNorm benchmark (its one
#: var_mean) and every normalisation's statistics use it
VAR_MEAN_CORRECTION = 0


def _var_mean_fwd(dtype: DataType):
    """var_mean over the last dim (correction 0) in float; var and mean in dtype."""

    def build(fd: FusionDefinition) -> None:
        x = _to_float(fd, _matrix(fd, dtype, 2), dtype)
        var, mean = fd.ops.var_mean(x, dims=[1], correction=VAR_MEAN_CORRECTION, keepdim=False)
        fd.add_output(_from_float(fd, var, dtype))
        fd.add_output(_from_float(fd, mean, dtype))

    return build


# --- backward normalisations (nvFuser's benchmarks/python/test_*_bwd.py, our code) ------------


def _stat(fd: FusionDefinition):
    """A saved per-row statistic: float32 [M, 1] (what the forward wrote)."""
    return fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)


def _vector(fd: FusionDefinition, dtype: DataType):
    """A per-column parameter [N] (weight, bias)."""
    return fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)


def _rmsnorm_bwd(dtype: DataType):
    """RMSNorm backward from grad, x [M, N], rstd (float [M, 1]), weight [N], in float:
    x_hat = x rstd, gw = grad w, dx = rstd (gw - x_hat mean(gw x_hat, -1)) and
    dweight = sum(grad x_hat, 0), both in dtype (``aten._fused_rms_norm_backward``)."""

    def build(fd: FusionDefinition) -> None:
        g0, x0 = _matrix(fd, dtype, 2), _matrix(fd, dtype, 2)
        rstd = _stat(fd)
        w0 = _vector(fd, dtype)
        g, x, w = (_to_float(fd, t, dtype) for t in (g0, x0, w0))
        shape = x.shape()
        r = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
        xhat = fd.ops.mul(x, r)
        gw = fd.ops.mul(g, fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1]))
        dot = _rows_keepdim(fd, x, fd.ops.sum(fd.ops.mul(gw, xhat), dims=[1], keepdim=False))
        mean = fd.ops.mul(dot, fd.ops.reciprocal(x.size(1)))
        proj = fd.ops.mul(xhat, fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 1]))
        dx = fd.ops.mul(r, fd.ops.sub(gw, proj))
        dw = fd.ops.sum(fd.ops.mul(g, xhat), dims=[0], keepdim=False)
        fd.add_output(_from_float(fd, dx, dtype))
        fd.add_output(_from_float(fd, dw, dtype))

    return build


def _layernorm_bwd(dtype: DataType):
    """LayerNorm backward from grad, x [M, N], mean, rstd (float [M, 1]), weight [N], in
    float: x_hat = (x - mean) rstd, gw = grad w, dx = rstd (gw - mean(gw) - x_hat
    mean(gw x_hat)) over N, dweight = sum(grad x_hat, 0), dbias = sum(grad, 0); all in dtype
    (``aten.native_layer_norm_backward``)."""

    def build(fd: FusionDefinition) -> None:
        g0, x0 = _matrix(fd, dtype, 2), _matrix(fd, dtype, 2)
        mean0, rstd0 = _stat(fd), _stat(fd)
        w0 = _vector(fd, dtype)
        g, x, w = (_to_float(fd, t, dtype) for t in (g0, x0, w0))
        shape = x.shape()
        mean = fd.ops.broadcast_in_dim(mean0, shape=shape, broadcast_dims=[0, 1])
        r = fd.ops.broadcast_in_dim(rstd0, shape=shape, broadcast_dims=[0, 1])
        xhat = fd.ops.mul(fd.ops.sub(x, mean), r)
        gw = fd.ops.mul(g, fd.ops.broadcast_in_dim(w, shape=shape, broadcast_dims=[1]))
        inv_n = fd.ops.reciprocal(x.size(1))

        def row_mean(t):
            """mean(t, -1) broadcast back to [M, N]."""
            m = fd.ops.mul(_rows_keepdim(fd, x, fd.ops.sum(t, dims=[1], keepdim=False)), inv_n)
            return fd.ops.broadcast_in_dim(m, shape=shape, broadcast_dims=[0, 1])

        inner = fd.ops.sub(fd.ops.sub(gw, row_mean(gw)), fd.ops.mul(xhat, row_mean(fd.ops.mul(gw, xhat))))
        dx = fd.ops.mul(r, inner)
        dw = fd.ops.sum(fd.ops.mul(g, xhat), dims=[0], keepdim=False)
        db = fd.ops.sum(g, dims=[0], keepdim=False)
        for t in (dx, dw, db):
            fd.add_output(_from_float(fd, t, dtype))

    return build


def _softmax_bwd(dtype: DataType):
    """softmax backward over the last dim from dy and y (the softmax output), in float:
    dx = y (dy - sum(dy y, -1)) (``aten._softmax_backward_data``)."""

    def build(fd: FusionDefinition) -> None:
        dy0, y0 = _matrix(fd, dtype, 2), _matrix(fd, dtype, 2)
        dy, y = _to_float(fd, dy0, dtype), _to_float(fd, y0, dtype)
        dot = _rows_keepdim(fd, y, fd.ops.sum(fd.ops.mul(dy, y), dims=[1], keepdim=False))
        dx = fd.ops.mul(y, fd.ops.sub(dy, fd.ops.broadcast_in_dim(dot, shape=y.shape(), broadcast_dims=[0, 1])))
        fd.add_output(_from_float(fd, dx, dtype))

    return build


def _batchnorm_fwd(dtype: DataType):
    """Batch-norm training forward on channels-last [M, N] (M = batch x spatial, N =
    channels): mean and biased variance of each column over M (outer reduction), reused
    by every element of the column: y = (x - mean) rsqrt(var + eps) weight + bias in dtype;
    the saved mean and invstd float [N] (``aten.native_batch_norm`` on CUDA)."""

    def build(fd: FusionDefinition) -> None:
        x0 = _matrix(fd, dtype, 2)
        w0, b0 = _vector(fd, dtype), _vector(fd, dtype)
        x, w, b = (_to_float(fd, t, dtype) for t in (x0, w0, b0))
        shape = x.shape()
        var, mean = fd.ops.var_mean(x, dims=[0], correction=0, keepdim=False)
        invstd = fd.ops.rsqrt(fd.ops.add(var, NORM_EPS))

        def cols(t):
            """A per-column [N] value broadcast to [M, N]."""
            return fd.ops.broadcast_in_dim(t, shape=shape, broadcast_dims=[1])

        xhat = fd.ops.mul(fd.ops.sub(x, cols(mean)), cols(invstd))
        y = fd.ops.add(fd.ops.mul(xhat, cols(w)), cols(b))
        fd.add_output(_from_float(fd, y, dtype))
        fd.add_output(mean)
        fd.add_output(invstd)

    return build


# ----------------------------------------------------------------------------------------------
# inputs (random normal: never all zeros; sign changes exercise relu / where / tanh)


def _randn(shape, dtype, device, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(shape, dtype=torch.float32, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype)


def _one(dtype: torch.dtype, scale: float = 1.0):
    return lambda device, shape: [_randn(shape, dtype, device, scale)]


def _norm_inputs(dtype: torch.dtype, n_params: int):
    """x [M, N] and `n_params` per-column parameters [N] (weight, bias)."""

    def make(device, shape):
        return [_randn(shape, dtype, device), *(_randn(shape[-1:], dtype, device) for _ in range(n_params))]

    return make


def _dropout_add_layernorm_inputs(dtype: torch.dtype):
    """x and the residual [M, N], weight and bias [N]."""

    def make(device, shape):
        return [_randn(shape, dtype, device), _randn(shape, dtype, device),
                *(_randn(shape[-1:], dtype, device) for _ in range(2))]

    return make


def _bias_inputs(device, shape):
    return [_randn(shape, torch.bfloat16, device), _randn(shape[-1:], torch.bfloat16, device)]


def _where3_inputs(device, shape):
    return [_randn(shape, torch.float16, device) for _ in range(3)]


def _row_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, rstd of LayerNorm, rstd of RMSNorm) of each row of `x`, float32 [M, 1]: what
    the forwards saved, so that the backwards see realistic statistics."""
    xf = x.float()
    var, mean = torch.var_mean(xf, dim=-1, correction=0, keepdim=True)
    return mean, torch.rsqrt(var + NORM_EPS), torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)


def _rmsnorm_bwd_inputs(dtype: torch.dtype):
    """grad, x [M, N], rstd (float [M, 1], from x), weight [N]."""

    def make(device, shape):
        g, x = _randn(shape, dtype, device), _randn(shape, dtype, device)
        return [g, x, _row_stats(x)[2], _randn(shape[-1:], dtype, device)]

    return make


def _layernorm_bwd_inputs(dtype: torch.dtype):
    """grad, x [M, N], mean and rstd (float [M, 1], from x), weight [N]."""

    def make(device, shape):
        g, x = _randn(shape, dtype, device), _randn(shape, dtype, device)
        mean, rstd, _ = _row_stats(x)
        return [g, x, mean, rstd, _randn(shape[-1:], dtype, device)]

    return make


def _softmax_bwd_inputs(dtype: torch.dtype):
    """dy [M, N] and y = softmax of random logits [M, N] (rows that sum to 1, as a softmax
    output does)."""

    def make(device, shape):
        y = torch.softmax(torch.randn(shape, dtype=torch.float32, device=device), dim=-1).to(dtype)
        return [_randn(shape, dtype, device), y]

    return make


def _seed001_inputs(device, shape):
    """Seed 001's seven inputs, laid out as in the report (expanded and strided ones)."""
    from fuser.examples.rmsnorm_backward import make_inputs

    if tuple(shape) != SEED001_SHAPE:
        raise ValueError(f"seed 001's definition hard-codes its sizes {list(SEED001_SHAPE)}; got {list(shape)}")
    return make_inputs(device)


# ----------------------------------------------------------------------------------------------
# eager references


def _eager_gelu(inputs):
    return [torch.nn.functional.gelu(inputs[0], approximate="tanh")]


def _eager_bias_relu(inputs):
    x, bias = inputs
    return [torch.relu(x + bias)]


def _eager_cast_chain(inputs):
    return [inputs[0].to(torch.bfloat16).to(torch.float32)]


def _eager_where3(inputs):
    a, b, c = inputs
    return [torch.where(a > b, a, c)]


def _eager_rmsnorm(inputs):
    """``aten._fused_rms_norm`` (what F.rms_norm runs; (y, rstd [M, 1] float)), or the same
    arithmetic in PyTorch ops where this torch lacks it."""
    x, w = inputs
    fused = getattr(torch.ops.aten, "_fused_rms_norm", None)
    if fused is not None:
        y, rstd = fused(x, [x.shape[-1]], w, NORM_EPS)
        return [y, rstd]
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    return [(xf * rstd * w).to(x.dtype), rstd]


def _eager_layernorm(inputs):
    """``aten.native_layer_norm``: (y, mean [M, 1], rstd [M, 1]), statistics in float.
    PyTorch's CPU kernel keeps bf16 statistics for bf16 inputs (CUDA's and meta's are
    float): on CPU it runs on float copies and y is cast back, the same arithmetic."""
    x, w, b = inputs
    if x.device.type == "cpu" and x.dtype != torch.float32:
        y, mean, rstd = torch.ops.aten.native_layer_norm(x.float(), [x.shape[-1]], w.float(), b.float(), NORM_EPS)
        return [y.to(x.dtype), mean, rstd]
    return list(torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, NORM_EPS))


def _eager_dropout_add_layernorm(inputs):
    """What a PyTorch user writes: F.dropout(x) + residual in the input dtype, then
    ``aten.native_layer_norm`` (as `_eager_layernorm`): (y, h, mean, rstd). Its random numbers
    are PyTorch's own, so it is timed, never compared (see BenchFusion.random)."""
    x, res, w, b = inputs
    h = torch.nn.functional.dropout(x, p=DROPOUT_P, training=True) + res
    y, mean, rstd = _eager_layernorm([h, w, b])
    return [y, h, mean, rstd]


def _eager_softmax(inputs):
    return [torch.softmax(inputs[0], dim=-1)]


def _eager_sum_inner(inputs):
    return [torch.sum(inputs[0], dim=-1)]


def _eager_sum_outer(inputs):
    return [torch.sum(inputs[0], dim=0)]


def _eager_var_mean(inputs):
    return list(torch.var_mean(inputs[0], dim=-1, correction=VAR_MEAN_CORRECTION))


def _on_cpu_in_float(x: torch.Tensor) -> bool:
    """Whether an eager reference must run on float copies: for bf16 data PyTorch's CPU
    kernels refuse float statistics (layer-norm backward) or return bf16 ones (batch norm),
    where CUDA's and meta's compute and keep them in float; float copies, cast back, are
    CUDA's arithmetic."""
    return x.device.type == "cpu" and x.dtype != torch.float32


def _eager_rmsnorm_bwd(inputs):
    """``aten._fused_rms_norm_backward`` (what autograd of F.rms_norm runs: (dx, dweight)),
    or the same arithmetic in float PyTorch ops where it has no kernel (CPU) or this torch
    lacks it."""
    g, x, rstd, w = inputs
    fused = getattr(torch.ops.aten, "_fused_rms_norm_backward", None)
    if fused is not None and x.device.type != "cpu":
        return list(fused(g, x, [x.shape[-1]], rstd, w, [True, True]))
    gf, xf, wf = g.float(), x.float(), w.float()
    xhat = xf * rstd
    gw = gf * wf
    dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    return [dx.to(x.dtype), (gf * xhat).sum(0).to(w.dtype)]


def _eager_layernorm_bwd(inputs):
    """``aten.native_layer_norm_backward``: (dx, dweight, dbias). Its `bias` argument only
    gives dbias its shape and dtype (its values are never read), so the weight stands in."""
    g, x, mean, rstd, w = inputs
    if _on_cpu_in_float(x):
        gf, xf, wf = g.float(), x.float(), w.float()
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            gf, xf, [x.shape[-1]], mean, rstd, wf, wf, [True, True, True])
        return [dx.to(x.dtype), dw.to(w.dtype), db.to(w.dtype)]
    return list(torch.ops.aten.native_layer_norm_backward(g, x, [x.shape[-1]], mean, rstd, w, w, [True, True, True]))


def _eager_softmax_bwd(inputs):
    """``aten._softmax_backward_data`` (what autograd of softmax runs) over the last dim."""
    dy, y = inputs
    if _on_cpu_in_float(y):
        return [torch.ops.aten._softmax_backward_data(dy.float(), y.float(), -1, torch.float32).to(y.dtype)]
    return [torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype)]


def _eager_batchnorm(inputs):
    """``aten.native_batch_norm`` in training mode without running stats on [M, N] (N the
    channels): (y, save_mean [N], save_invstd [N]), the statistics in float."""
    x, w, b = inputs
    if _on_cpu_in_float(x):
        y, mean, invstd = torch.ops.aten.native_batch_norm(x.float(), w.float(), b.float(), None, None, True, 0.1, NORM_EPS)
        return [y.to(x.dtype), mean, invstd]
    return list(torch.ops.aten.native_batch_norm(x, w, b, None, None, True, 0.1, NORM_EPS))


def _eager_seed001(inputs):
    """Seed 001's eager reference (float math, bf16 outputs), from fuser/examples."""
    from fuser.examples.rmsnorm_backward import eager_reference

    return eager_reference(list(inputs))


def _define_seed001(fd: FusionDefinition) -> None:
    """Seed 001's definition: the report's program verbatim (fuser/examples)."""
    from fuser.examples.rmsnorm_backward import rmsnorm_backward

    rmsnorm_backward(fd)


def _reduction_fusions() -> tuple[BenchFusion, ...]:
    """RMSNorm / LayerNorm / softmax forward, inner and outer sum, var_mean; bf16 and fp32;
    each at every shape of REDUCTION_SHAPES (the sums also at LARGE, [16384, 8192])."""
    out = []
    for dt, tdt, tag in ((DataType.BFloat16, torch.bfloat16, "bf16"), (DataType.Float, torch.float32, "fp32")):
        common = dict(shapes=REDUCTION_SHAPES, quick_shapes=REDUCTION_QUICK_SHAPES, group="reduction")
        sums = dict(shapes=REDUCTION_SHAPES + (LARGE,), quick_shapes=REDUCTION_QUICK_SHAPES, group="reduction")
        out += [
            BenchFusion(
                f"rmsnorm_fwd_{tag}", _rmsnorm_fwd(dt), _norm_inputs(tdt, 1), _eager_rmsnorm, reduced=(1,),
                scales=lambda n: (0.0, 0.0),
                description=f"{tag} x [M, N], weight [N]: RMSNorm over N in float; y ({tag}) and rstd (float [M, 1])",
                **common,
            ),
            BenchFusion(
                f"layernorm_fwd_{tag}", _layernorm_fwd(dt), _norm_inputs(tdt, 2), _eager_layernorm, reduced=(1,),
                scales=lambda n: (1.0 / n, 1.0 / n, 0.0),
                description=f"{tag} x [M, N], weight, bias [N]: LayerNorm over N (var_mean) in float; "
                            f"y ({tag}), mean and rstd (float [M, 1])",
                **common,
            ),
            # h sums nothing; y errs relatively (a normalised row), mean sums h / N
            BenchFusion(
                f"dropout_add_layernorm_fwd_{tag}", _dropout_add_layernorm_fwd(dt),
                _dropout_add_layernorm_inputs(tdt), _eager_dropout_add_layernorm, reduced=(1,),
                output_reduced=((1,), (), (1,), (1,)), scales=lambda n: (1.0 / n, 1.0, 1.0 / n, 0.0),
                shapes=((16384, 4096), (128, 1000)), quick_shapes=((16384, 4096), (128, 1000)), group="reduction",
                random=True,
                description=f"{tag} x, residual [M, N], weight, bias [N]: dropout(x, p={DROPOUT_P}) + residual, "
                            f"LayerNorm over N, in float (one inner-persistent kernel); y and h ({tag}), mean "
                            f"and rstd (float [M, 1]); checked against the reference executor drawing the same "
                            f"numbers",
            ),
            BenchFusion(
                f"softmax_fwd_{tag}", _softmax_fwd(dt), _one(tdt), _eager_softmax, reduced=(1,),
                scales=lambda n: (0.0,),
                description=f"{tag} [M, N]: softmax over N in float",
                **common,
            ),
            BenchFusion(
                f"sum_inner_{tag}", _sum_fwd(dt, 1), _one(tdt), _eager_sum_inner, reduced=(1,),
                description=f"{tag} [M, N] -> [M]: sum over the last dim, accumulated in float",
                **sums,
            ),
            BenchFusion(
                f"sum_outer_{tag}", _sum_fwd(dt, 0), _one(tdt), _eager_sum_outer, reduced=(0,),
                description=f"{tag} [M, N] -> [N]: sum over dim 0, accumulated in float",
                **sums,
            ),
            BenchFusion(
                f"var_mean_{tag}", _var_mean_fwd(dt), _one(tdt), _eager_var_mean, reduced=(1,),
                scales=lambda n: (0.0, 1.0 / n),
                description=f"{tag} [M, N] -> var, mean [M] over the last dim (correction "
                            f"{VAR_MEAN_CORRECTION}), in float",
                **common,
            ),
        ]
    return tuple(out)


def _backward_fusions() -> tuple[BenchFusion, ...]:
    """RMSNorm / LayerNorm / softmax backward and the outer-persistent batch norm, bf16 and
    fp32, each at every shape of BACKWARD_SHAPES; then seed 001 at its one shape (bf16)."""
    out = []
    for dt, tdt, tag in ((DataType.BFloat16, torch.bfloat16, "bf16"), (DataType.Float, torch.float32, "fp32")):
        common = dict(shapes=BACKWARD_SHAPES, quick_shapes=REDUCTION_QUICK_SHAPES, group="backward")
        out += [
            # dx sums N terms gw x_hat / N per row; dweight sums M terms grad x_hat per column
            BenchFusion(
                f"rmsnorm_bwd_{tag}", _rmsnorm_bwd(dt), _rmsnorm_bwd_inputs(tdt), _eager_rmsnorm_bwd,
                reduced=(0, 1), output_reduced=((1,), (0,)), scales=lambda n: (1.0 / n, 1.0),
                description=f"{tag} grad, x [M, N], rstd (float [M, 1]), weight [N]: RMSNorm backward in "
                            f"float; dx [M, N] and dweight [N] ({tag})",
                **common,
            ),
            BenchFusion(
                f"layernorm_bwd_{tag}", _layernorm_bwd(dt), _layernorm_bwd_inputs(tdt), _eager_layernorm_bwd,
                reduced=(0, 1), output_reduced=((1,), (0,), (0,)), scales=lambda n: (1.0 / n, 1.0, 1.0),
                description=f"{tag} grad, x [M, N], mean, rstd (float [M, 1]), weight [N]: LayerNorm backward "
                            f"in float; dx [M, N], dweight and dbias [N] ({tag})",
                **common,
            ),
            # dx = y (dy - s): s sums N terms dy y of about 1/N each, and y <= 1
            BenchFusion(
                f"softmax_bwd_{tag}", _softmax_bwd(dt), _softmax_bwd_inputs(tdt), _eager_softmax_bwd,
                reduced=(1,), scales=lambda n: (1.0 / n,),
                description=f"{tag} dy, y [M, N]: softmax backward over N in float; dx [M, N] ({tag})",
                **common,
            ),
            # as LayerNorm forward, along the other axis: mean sums x / M, invstd errs relatively
            BenchFusion(
                f"batchnorm_fwd_{tag}", _batchnorm_fwd(dt), _norm_inputs(tdt, 2), _eager_batchnorm,
                reduced=(0,), scales=lambda n: (1.0 / n, 1.0 / n, 0.0),
                description=f"{tag} x [M, N], weight, bias [N]: batch-norm training forward, statistics over "
                            f"M per column (outer persistent); y ({tag}), mean and invstd (float [N])",
                **common,
            ),
        ]
    out.append(BenchFusion(
        "seed001_rmsnorm_bwd_bf16", _define_seed001, _seed001_inputs, _eager_seed001,
        shapes=(SEED001_SHAPE,), quick_shapes=(SEED001_SHAPE,), small_shape=SEED001_SHAPE,
        # per output, the dims of T0 [56, 1024, 1024] it sums over: T49 and T61 over dim 1,
        # T63 and T67 over dims 0 and 1, dx (T131) over dim 2
        reduced=(0, 1, 2), output_reduced=((1,), (1,), (0, 1), (0, 1), (2,)), group="backward",
        description="seed 001 (nvFuser issue 2473): Thunder's RMSNorm backward, bf16 [56, 1024, 1024] with "
                    "expanded inputs, sizes fixed by its definition; four bf16 reductions and dx (bf16)",
    ))
    return tuple(out)


def _permuted(dims: Sequence[int], dtype: DataType):
    """x permuted by `dims`, added to itself: the output contiguous in the new order, so the
    kernel reads along one innermost axis and writes along another (a transpose) unless the
    permutation keeps the innermost axis (then a pointwise copy)."""

    def build(fd: FusionDefinition) -> None:
        x = _matrix(fd, dtype, len(dims))
        y = fd.ops.permute(x, dims=list(dims))
        fd.add_output(fd.ops.add(y, y))

    return build


def _eager_permuted(dims: Sequence[int]):
    def eager(inputs):
        y = inputs[0].permute(*dims)
        return [(y + y).contiguous()]

    return eager


#: how far `cat_of_slices` rolls the columns
ROLL = 64
#: seed 002's RoPE shape [B, n_head, T, head_size]: its definitions hard-code it, as Thunder's do
ROPE_SHAPE = (1, 32, 8192, 128)


def _define_cat_of_slices(fd: FusionDefinition) -> None:
    """cat(x[:, ROLL:], x[:, :ROLL]) along the columns (a roll), x bf16 [M, N] of any size:
    the open end of x[:, ROLL:] is a bound past any extent, clamped as Python's slices are."""
    x = _matrix(fd, DataType.BFloat16, 2)
    big = 1 << 62
    tail = fd.ops.slice(x, start_indices=[0, ROLL], end_indices=[big, big], strides=[1, 1])
    head = fd.ops.slice(x, start_indices=[0, 0], end_indices=[big, ROLL], strides=[1, 1])
    fd.add_output(fd.ops.cat([tail, head], dim=1))


def _eager_cat_of_slices(inputs):
    (x,) = inputs
    return [torch.cat([x[:, ROLL:], x[:, :ROLL]], dim=1)]


def _rope(kind: str):
    """Seed 002's RoPE forward or backward (fuser/examples/rope.py) at ROPE_SHAPE."""
    from fuser.examples import rope

    build = rope.rope_forward if kind == "fwd" else rope.rope_backward
    make = rope.make_forward_inputs if kind == "fwd" else rope.make_backward_inputs
    eager = rope.eager_forward if kind == "fwd" else rope.eager_backward

    def inputs(device, shape):
        if tuple(shape) != ROPE_SHAPE:
            raise ValueError(f"the RoPE definitions hard-code seed 002's sizes {list(ROPE_SHAPE)}; got {list(shape)}")
        return make(device, shape)

    return (lambda fd: build(fd, ROPE_SHAPE)), inputs, eager


def _shape_fusions() -> tuple[BenchFusion, ...]:
    """Transposes (2D, and attention's [B, S, H, D] -> [B, H, S, D]), as nvFuser's
    benchmarks/python/test_transpose.py times them; a cat of slices (a roll of the
    columns) and seed 002's RoPE forward and backward (LitGPT's Llama-3 through Thunder)."""
    out = []
    for dt, tdt, tag in ((DataType.Float, torch.float32, "fp32"), (DataType.BFloat16, torch.bfloat16, "bf16")):
        out.append(BenchFusion(
            f"transpose_{tag}", _permuted((1, 0), dt), _one(tdt), _eager_permuted((1, 0)),
            shape=(8192, 8192), quick_shape=(8192, 8192), group="shapes",
            description=f"{tag} [M, N] -> x.T + x.T, [N, M] contiguous (a tiled transpose)"))
        out.append(BenchFusion(
            f"attention_permute_{tag}", _permuted((0, 2, 1, 3), dt), _one(tdt), _eager_permuted((0, 2, 1, 3)),
            shape=(8, 4096, 32, 128), quick_shape=(8, 4096, 32, 128), small_shape=(2, 24, 4, 16), group="shapes",
            description=f"{tag} [B, S, H, D] -> [B, H, S, D] (+ itself), contiguous: the innermost axis stays"))
    out.append(BenchFusion(
        "cat_of_slices_bf16", _define_cat_of_slices, _one(torch.bfloat16), _eager_cat_of_slices,
        shape=LARGE, quick_shape=QUICK, small_shape=(64, 200), group="shapes",
        description=f"bf16 [M, N]: cat(x[:, {ROLL}:], x[:, :{ROLL}]) along N (slices and a cat in one kernel)"))
    for kind, what in (("fwd", "q, k [1, 32, 8192, 128] and cos, sin [1, 8192, 128] -> q, k rotated "
                               "(slices, neg, cat, the empty tail's cat)"),
                       ("bwd", "cos, dq, dk, sin -> dq and dk as [1, 8, 4, 8192, 128] (slices, pads, the "
                               "shared `full`, a reshape)")):
        build, make, eager = _rope(kind)
        out.append(BenchFusion(
            f"rope_{kind}_bf16", build, make, eager, shapes=(ROPE_SHAPE,), quick_shapes=(ROPE_SHAPE,),
            small_shape=ROPE_SHAPE, group="shapes",
            description=f"seed 002's RoPE {'forward' if kind == 'fwd' else 'backward'} (LitGPT Llama-3 through "
                        f"Thunder), bf16: {what}"))
    return tuple(out)


FUSIONS: tuple[BenchFusion, ...] = (
    BenchFusion(
        "gelu_tanh_bf16", _define_gelu_bf16, _one(torch.bfloat16, 3.0), _eager_gelu,
        description="bf16 -> float, GELU (tanh approximation), -> bf16",
    ),
    BenchFusion(
        "bias_relu", _define_bias_relu, _bias_inputs, _eager_bias_relu,
        description="bf16 [M, N] + broadcast bf16 bias [N], relu, -> bf16",
    ),
    BenchFusion(
        "cast_chain", _define_cast_chain, _one(torch.float32), _eager_cast_chain,
        description="fp32 -> bf16 -> fp32",
    ),
    BenchFusion(
        "where3_fp16", _define_where3, _where3_inputs, _eager_where3,
        description="fp16 a, b, c: where(a > b, a, c)",
    ),
    BenchFusion(
        "latency_gelu_8x8", _define_gelu_bf16, _one(torch.bfloat16, 3.0), _eager_gelu,
        shape=(8, 8), quick_shape=(8, 8), kind="latency",
        description="the GELU fusion on [8, 8]: host cost of one launch",
    ),
) + _reduction_fusions() + _backward_fusions() + _shape_fusions()

_BY_NAME = {f.name: f for f in FUSIONS}

#: group name -> the names of its fusions, in FUSIONS order: "pointwise" (the memory-bound
#: elementwise fusions and the launch-latency one), "reduction" (the forward reductions and
#: normalisations), "backward" (the backward normalisations, the batch norm, seed 001),
#: "shapes" (transposes, permutes, slices/cats and RoPE)
GROUPS: dict[str, tuple[str, ...]] = {
    g: tuple(f.name for f in FUSIONS if f.group == g) for g in dict.fromkeys(f.group for f in FUSIONS)
}
assert not set(GROUPS) & set(_BY_NAME), "a group may not be named like a fusion"


def by_name(name: str) -> BenchFusion:
    """The benchmark fusion called `name` (KeyError listing the names otherwise)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no benchmark fusion {name!r}; known: {', '.join(_BY_NAME)}") from None


def select(names: Sequence[str] | None) -> list[BenchFusion]:
    """The fusions named by `names`, each a fusion or a `GROUPS` name (all of its fusions),
    in the order given, each once; every fusion when `names` is empty or None. KeyError,
    listing the known names and groups, for an unknown one."""
    if not names:
        return list(FUSIONS)
    chosen: dict[str, BenchFusion] = {}
    for name in names:
        if name not in GROUPS and name not in _BY_NAME:
            raise KeyError(f"no benchmark fusion {name!r}; groups: {', '.join(GROUPS)}; "
                           f"known: {', '.join(_BY_NAME)}")
        for n in GROUPS.get(name, (name,)):
            chosen.setdefault(n, _BY_NAME[n])
    return list(chosen.values())


def define(name: str) -> FusionDefinition:
    """A new, finished FusionDefinition of the benchmark fusion `name`."""
    return by_name(name).fusion_definition()
