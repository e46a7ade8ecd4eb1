"""Shared helpers of the op-vs-PyTorch tests (tests/test_ops_*.py).

The specification is eager PyTorch: an op's output dtype must be what torch gives for
the same op on the same dtypes, its values what torch computes — in float32 for half and
bfloat16 operands, rounded once to the output type (fusion numerics). An op torch rejects
for a dtype must be rejected by fuser when it is defined, with a TypeError naming it.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
from typing import Any, Callable, Sequence

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.tolerance import assert_close

DTYPES = [
    DataType.Bool,
    DataType.Int32,
    DataType.Int,
    DataType.Half,
    DataType.BFloat16,
    DataType.Float,
    DataType.Double,
    DataType.ComplexFloat,
    DataType.ComplexDouble,
]
FLOATS = [DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double]
FP8 = [DataType.Float8_e4m3fn, DataType.Float8_e5m2]
NARROW = (torch.float16, torch.bfloat16)
#: where `rand` puts inputs: FUSER_TEST_DEVICE=cuda runs these op tests through generated
#: kernels on the GPU (the expected values then come from eager PyTorch on the GPU too)
DEVICE = os.environ.get("FUSER_TEST_DEVICE", "cpu")


@pytest.fixture(autouse=True)
def _seed(request):
    """Fresh random inputs for every test, reproducible from its id (FUSER_TEST_SEED varies them)."""
    salt = os.environ.get("FUSER_TEST_SEED", "0")
    digest = hashlib.sha256(f"{salt}:{request.node.nodeid}".encode()).digest()
    torch.manual_seed(int.from_bytes(digest[:8], "little"))


def ids(values: Any) -> Any:
    """Test ids for parametrize: `ids=ids(list)` or `ids=ids` (called per value)."""
    if isinstance(values, DataType):
        return values.name
    if isinstance(values, (list, tuple)):
        return [ids(v) for v in values]
    return None


# --- inputs ----------------------------------------------------------------------------------


def rand(shape: Sequence[int], dtype: DataType | torch.dtype, *, low: int = -5, high: int = 6,
         nonzero: bool = False, positive: bool = False) -> torch.Tensor:
    """A random tensor: bools half True, integers in [low, high), floats/complex normal."""
    t = dtype.torch if isinstance(dtype, DataType) else dtype
    shape = tuple(shape)
    if t == torch.bool:
        x = torch.rand(shape) < 0.5
        if nonzero:
            x = torch.ones(shape, dtype=torch.bool)
    elif not (t.is_floating_point or t.is_complex):
        lo = max(low, 1) if positive else low
        x = torch.randint(lo, high, shape, dtype=t)
        if nonzero:
            x = torch.where(x == 0, torch.ones((), dtype=t), x)
    elif t.is_complex:
        x = torch.randn(shape, dtype=t)
    else:
        x = torch.randn(shape, dtype=torch.float32)
        if positive:
            x = x.abs() + 0.1
        if nonzero:
            x = torch.where(x.abs() < 1e-3, torch.ones(()), x)
        x = x.to(t)
    return x.to(DEVICE) if DEVICE != "cpu" else x


def upcast(x: Any) -> Any:
    """Half/bfloat16 tensors widened to float32: how a fusion computes on them."""
    if isinstance(x, torch.Tensor) and x.dtype in NARROW:
        return x.float()
    return x


class TorchRejects(Exception):
    """Eager PyTorch refuses the op for these dtypes."""


def torch_call(fn: Callable, *args: Any, **kwargs: Any) -> torch.Tensor:
    """fn(*args); a Python number torch's binding refuses becomes a 0-dim tensor of the
    dtype torch would give it beside the tensor operands (a wrapped number)."""
    try:
        return fn(*args, **kwargs)
    except TypeError:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or len(tensors) == len(args):
            raise
        wrapped = []
        for a in args:
            if isinstance(a, torch.Tensor):
                wrapped.append(a)
            else:
                dt = torch.result_type(tensors[0], a)
                for t in tensors[1:]:
                    dt = torch.promote_types(dt, torch.result_type(t, a))
                wrapped.append(torch.tensor(a, dtype=dt, device=tensors[0].device))
        return fn(*wrapped, **kwargs)


def expect(fn: Callable, *args: Any, **kwargs: Any) -> torch.Tensor:
    """torch's result for fn(*args): its dtype from eager torch on the true dtypes, its
    values computed with half/bfloat16 widened to float32 and rounded once at the end."""
    with torch.no_grad():
        try:
            dtype_probe = torch_call(fn, *args, **kwargs)
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as err:
            raise TorchRejects(str(err).split("\n")[0]) from None
        if not isinstance(dtype_probe, torch.Tensor):
            return dtype_probe
        want = dtype_probe.dtype
        if any(isinstance(a, torch.Tensor) and a.dtype in NARROW for a in args):
            value = torch_call(fn, *[upcast(a) for a in args], **kwargs)
            return value.to(want)
        return dtype_probe


# --- fusions ---------------------------------------------------------------------------------


def fusion(build: Callable, inputs: Sequence[Any], *, define: Callable | None = None) -> list[Any]:
    """Define a fusion whose inputs are `inputs` (tensors via fd.from_pytorch, or `define`)
    and whose outputs are what `build(fd, *handles)` returns; execute it on `inputs`."""
    fd = define_fusion(build, inputs, define=define)
    return execute(fd, inputs)


def define_fusion(build: Callable, inputs: Sequence[Any], *, define: Callable | None = None) -> FusionDefinition:
    with FusionDefinition() as fd:
        if define is not None:
            handles = define(fd, inputs)
        else:
            handles = [fd.from_pytorch(x) for x in inputs]
        outs = build(fd, *handles)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for o in outs:
            fd.add_output(o)
    return fd


def execute(fd: FusionDefinition, inputs: Sequence[Any]) -> list[Any]:
    # execute prints a repro script to stderr when it fails; the failure itself is enough here
    with contextlib.redirect_stderr(io.StringIO()):
        return fd.execute(list(inputs))


def symbolic(fd: FusionDefinition, inputs: Sequence[Any]) -> list:
    """Tensor inputs with symbolic (-1) sizes, contiguous, for reuse across shapes of one rank."""
    return [
        fd.define_tensor(shape=[-1] * x.ndim, contiguity=[True] * x.ndim, dtype=_dt(x.dtype)) for x in inputs
    ]


def _dt(t: torch.dtype) -> DataType:
    from fuser.ir.dtype import from_torch

    return from_torch(t)


def assert_rejects(name: str, build: Callable, inputs: Sequence[Any]) -> None:
    """Defining the fusion fails with a TypeError that names `fd.ops.<name>`."""
    with pytest.raises(TypeError, match=rf"fd\.ops\.{name}\b"):
        define_fusion(build, inputs)


def check(got: Any, want: Any, what: str = "output", **tol: Any) -> None:
    """Same dtype as torch, then values within the dtype's tolerance."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}, expected a tensor"
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, torch gives {want.dtype}"
    assert_close(got, want, what=what, **tol)


def scalar_value(x: Any) -> Any:
    """A scalar output as a Python number (fuser may return a number or a 0-dim tensor)."""
    return x.item() if isinstance(x, torch.Tensor) else x
