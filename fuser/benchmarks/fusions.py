"""Benchmark fusions shared by `python -m fuser bench` and asv (`asv_bench/benchmarks/kernels.py`).

Each `BenchFusion` carries its definition (FusionDefinition API), a factory of fresh random
inputs, the eager PyTorch function computing the same outputs, and the bytes a kernel must
move. Every definition uses symbolic sizes (``shape=[-1, ...]``), so one definition serves
any shape: `make_inputs(device, shape)` picks the sizes.
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
    "by_name",
    "define",
    "stored_bytes",
    "bytes_moved",
]

#: the shape of the bandwidth benchmarks (256 MiB of bf16/fp16, 512 MiB of fp32: far past L2)
LARGE = (16384, 8192)
#: the shape for `--quick` runs on a GPU (128 MiB of bf16: still past a 50 MiB L2)
QUICK = (8192, 8192)
#: the shape for CPU checks and tests
SMALL = (64, 96)

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
    shape: the default shape (the benchmark's); `quick_shape` for `--quick` on a GPU.
    kind: "bandwidth" (memory-bound, reported as % of copy bandwidth) or "latency"
    (host cost of a tiny launch).
    """

    name: str
    build: Callable[[FusionDefinition], None]
    inputs: Callable[[torch.device, tuple[int, ...]], list[torch.Tensor]]
    reference: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
    shape: tuple[int, ...] = LARGE
    quick_shape: tuple[int, ...] = QUICK
    kind: str = "bandwidth"
    description: str = ""

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

    def bytes_moved(self, inputs: Sequence[torch.Tensor]) -> int:
        """Bytes of every input read plus every output written (inputs at their stored size)."""
        return bytes_moved(self, inputs)


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


# ----------------------------------------------------------------------------------------------
# inputs (random normal: never all zeros; sign changes exercise relu / where / tanh)


def _randn(shape, dtype, device, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(shape, dtype=torch.float32, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype)


def _one(dtype: torch.dtype, scale: float = 1.0):
    return lambda device, shape: [_randn(shape, dtype, device, scale)]


def _bias_inputs(device, shape):
    return [_randn(shape, torch.bfloat16, device), _randn(shape[-1:], torch.bfloat16, device)]


def _where3_inputs(device, shape):
    return [_randn(shape, torch.float16, device) for _ in range(3)]


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
)

_BY_NAME = {f.name: f for f in FUSIONS}


def by_name(name: str) -> BenchFusion:
    """The benchmark fusion called `name` (KeyError listing the names otherwise)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no benchmark fusion {name!r}; known: {', '.join(_BY_NAME)}") from None


def define(name: str) -> FusionDefinition:
    """A new, finished FusionDefinition of the benchmark fusion `name`."""
    return by_name(name).fusion_definition()
