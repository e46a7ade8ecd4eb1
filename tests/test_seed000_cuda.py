"""Seed 000's input layouts validated against eager PyTorch on the GPU: a broadcast of a
fusion input (through unary ops) is folded into the input by the pre-segmentation pass,
the kernel reads the user's tensor (its root) with that tensor's own strides, and the
results match eager PyTorch, and the same fusion with the pass turned off, for
contiguous, strided, column-major and tail-sized inputs in fp32, bf16 and fp16."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.frontend.cache import FusionCache
from fuser.ir import BroadcastOp
from fuser.ir.dtype import from_torch
from fuser.runtime.tolerance import assert_close

pytestmark = pytest.mark.gpu

PASS = "fold_input_broadcasts"
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
#: (rows, cols): size-1 (broadcast dims), odd tails, several blocks with a ragged end
SHAPES = [(1, 1), (7, 33), (129, 1027)]


@pytest.fixture(autouse=True)
def poisoned_outputs(poisoned_kernel_outputs):
    """Every kernel output poisoned before the launch (conftest)."""


def _rand(shape, dtype, *, column_major=False, step=1):
    """Fresh values away from zero; column-major or every `step`-th element on request."""
    n = list(shape)
    n[-1] *= step
    x = torch.randn(*(n[::-1] if column_major else n), device="cuda") + 0.5
    x = x.t() if column_major else x
    x = x[..., ::step] if step > 1 else x
    return x.to(dtype)


def _tensor(fd, x):
    """A fusion input laid out like `x` (contiguity and stride order from its strides)."""
    return fd.from_pytorch(x)


def _seed(fd, a, b):
    # the seed: tv4[i0, i1] = broadcast(neg(tv0[i0]), [False, True]) * tv1[i0, i1]
    t0, t1 = _tensor(fd, a), _tensor(fd, b)
    fd.add_output(fd.ops.mul(fd.ops.broadcast(fd.ops.neg(t0), [False, True]), t1))


def _front(fd, a, b):
    # the broadcast in front, through a cast and exp: tv0[i1] read as [b, i1]
    t0, t1 = _tensor(fd, a), _tensor(fd, b)
    e = fd.ops.exp(fd.ops.cast(t0, DataType.Float))
    out = fd.ops.add(fd.ops.broadcast(e, [True, False]), fd.ops.cast(t1, DataType.Float))
    fd.add_output(fd.ops.cast(out, from_torch(b.dtype)))


def _row_sum(fd, a, b):
    # the folded input feeds a reduction over the broadcast-to axis
    t0, t1 = _tensor(fd, a), _tensor(fd, b)
    w = fd.ops.broadcast(fd.ops.cast(t0, DataType.Float), [False, True])
    fd.add_output(fd.ops.sum(fd.ops.mul(w, fd.ops.cast(t1, DataType.Float)), [1]))


def _middle(fd, a, b):
    # a 2-D root broadcast in the middle: tv0[i0, i2] read as [i0, b, i2]
    t0, t1 = _tensor(fd, a), _tensor(fd, b)
    w = fd.ops.broadcast(fd.ops.abs(t0), [False, True, False])
    fd.add_output(fd.ops.sub(t1, w))


def _inputs(name, shape, dtype, layout):
    m, n = shape
    cm, step = layout == "column_major", (3 if layout == "strided" else 1)
    if name == "seed":
        return [_rand((m,), dtype, step=step), _rand((m, n), dtype, column_major=cm)]
    if name == "front":
        return [_rand((n,), dtype, step=step), _rand((m, n), dtype, column_major=cm)]
    if name == "row_sum":
        return [_rand((m,), dtype, step=step), _rand((m, n), dtype, column_major=cm)]
    return [_rand((m, 5), dtype, column_major=cm, step=step), _rand((m, 3, 5), dtype)]


def _eager(name, a, b):
    if name == "seed":
        return -a[:, None] * b
    if name == "front":
        return (a.float().exp()[None, :] + b.float()).to(b.dtype)
    if name == "row_sum":
        return (a.float()[:, None] * b.float()).sum(1)
    return b - a.abs()[:, None, :]


BUILDS = {"seed": _seed, "front": _front, "row_sum": _row_sum, "middle": _middle}


def _run(name, inputs, monkeypatch, disable=""):
    monkeypatch.setenv("FUSER_DISABLE", disable)
    FusionCache.reset()
    with FusionDefinition() as fd:
        BUILDS[name](fd, *inputs)
    (got,) = fd.execute(inputs)
    # a generated kernel ran (pointwise, transpose for column-major operands, reduction),
    # not the reference executor: last_cuda_code raises when none did
    assert "__global__" in fd.last_cuda_code()
    folded = fd.segmented_fusion_for(inputs).complete_fusion
    assert any(isinstance(e, BroadcastOp) for e in folded.exprs()) == bool(disable)
    return got


@pytest.mark.parametrize("layout", ["contiguous", "strided", "column_major"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(BUILDS))
def test_seed000_layouts_match_eager_pytorch(name, dtype, shape, layout, monkeypatch):
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    inputs = _inputs(name, shape, dtype, layout)
    got = _run(name, inputs, monkeypatch)
    want = _eager(name, *inputs)
    what = f"{name} {dtype} {shape} {layout}"
    if name == "row_sum":  # a float32 sum over the row: room for summation order
        assert_close(got, want, what=what, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    else:
        assert_close(got, want, what=what)
    # the pass changes no result: the unfolded fusion's kernel agrees
    assert_close(got, _run(name, inputs, monkeypatch, disable=PASS), what=what + " (pass off)")
