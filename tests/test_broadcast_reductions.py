"""Reductions over broadcast axes mean what PyTorch says: a sum over an expanded axis of
extent n multiplies by n, a product raises to the n-th power, max/min keep the value,
var_mean sees n copies of one value; a size-1 broadcast axis is a squeeze. The op
builders decide this, so the IR never holds a reduction over a broadcast axis and no
scheduler sees one. Each case runs on CPU and (marked gpu) on CUDA, through generated
kernels there: these are the programs that gave wrong results on the GPU only."""
import warnings

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.ir import ReductionOp, WelfordOp
from fuser.runtime.tolerance import assert_close


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return request.param

_TORCH = {DataType.Float: torch.float32, DataType.Half: torch.float16, DataType.BFloat16: torch.bfloat16,
          DataType.Int: torch.int64, DataType.Int32: torch.int32, DataType.Bool: torch.bool}


def _expanded_input(dtype: DataType, device: str, shape=(4, 5, 3), expand_dim: int = 0) -> torch.Tensor:
    """A tensor whose dim `expand_dim` is expanded (stride 0) from size 1; values away from 0."""
    small = list(shape)
    small[expand_dim] = 1
    td = _TORCH[dtype]
    if td is torch.bool:
        base = torch.rand(small, device=device) > 0.3
    elif not td.is_floating_point:
        base = torch.randint(-3, 4, small, device=device, dtype=td)
    else:
        base = (torch.rand(small, device=device) * 1.5 + 0.25) * torch.where(torch.rand(small, device=device) > 0.5, 1, -1)
        base = base.to(td)
    return base.expand(shape)


def _contiguity(shape, expand_dim):
    return [None if d == expand_dim else True for d in range(len(shape))]


def _torch_reduce(op: str, x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    if op == "sum":
        return x.sum(dims)
    if op == "max":
        return x.amax(dims)
    if op == "min":
        return x.amin(dims)
    out = x
    for d in sorted(dims, reverse=True):
        out = out.prod(d)
    return out


CASES = [(op, dims, dt) for op in ("sum", "prod", "max", "min") for dims in ([0], [0, 1], [1], [0, 2], [0, 1, 2])
         for dt in (DataType.Float, DataType.Half, DataType.Int, DataType.Bool)
         if not (op in ("max", "min") and dt is DataType.Bool)]


@pytest.mark.parametrize("op,dims,dtype", CASES, ids=[f"{o}-{''.join(map(str, d))}-{t.name}" for o, d, t in CASES])
def test_reduction_over_expanded_axis(device, op, dims, dtype):
    torch.manual_seed(0)
    x = _expanded_input(dtype, device)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=_contiguity(x.shape, 0), dtype=dtype)
        fd.add_output(getattr(fd.ops, op)(t0, dims=dims))
    (out,) = fd.execute([x])
    ref = _torch_reduce(op, x, dims)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert_close(out, ref)


def test_no_reduction_expr_reduces_a_broadcast_axis(device):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[None, True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[1, -1], contiguity=[None, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t0, dims=[0, 2]))
        fd.add_output(fd.ops.max(t0, dims=[0]))
        fd.add_output(fd.ops.sum(t1, dims=[0]))
        v, m = fd.ops.var_mean(t0, dims=[0, 1])
        fd.add_output(v)
        fd.add_output(m)
    fusion = fd._entry.fusion
    reds = [e for e in fusion.exprs() if isinstance(e, (ReductionOp, WelfordOp))]
    assert len(reds) == 2  # sum over dim 2, var_mean over dim 1; the max and t1's sum are squeezes
    for e in reds:
        inp, out = e.inputs[0], e.outputs[0]
        for p, c in zip(inp.logical_no_reductions(), out.root):
            assert not (c.is_reduction and p.is_broadcast), fusion
    x = _expanded_input(DataType.Float, device)
    y = torch.randn(1, 6, device=device)
    s, mx, s1, var, mean = fd.execute([x, y])
    assert_close(s, x.sum([0, 2]))
    assert_close(mx, x.amax(0))
    assert_close(s1, y.sum(0))
    rv, rm = torch.var_mean(x, [0, 1])
    assert_close(var, rv)
    assert_close(mean, rm)


@pytest.mark.parametrize("correction", [0, 1, 4, 5])
@pytest.mark.parametrize("dims", [[0], [0, 1], [1], [0, 2]])
def test_var_mean_over_expanded_axis(device, dims, correction):
    torch.manual_seed(1)
    x = _expanded_input(DataType.Float, device)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[None, True, True], dtype=DataType.Float)
        v, m = fd.ops.var_mean(t0, dims=dims, correction=correction)
        fd.add_output(v)
        fd.add_output(m)
    var, mean = fd.execute([x])
    with warnings.catch_warnings():  # PyTorch warns where the count does not exceed the correction
        warnings.simplefilter("ignore")
        rv, rm = torch.var_mean(x, dims, correction=correction)
    assert_close(var, rv)  # NaN where the count does not exceed the correction, as PyTorch
    assert_close(mean, rm)


def test_var_mean_of_repeated_non_finite_values(device):
    """PyTorch's Welford pass gives NaN for the mean and variance of repeated infinities."""
    x = torch.tensor([[1.0, float("inf"), float("nan")]], device=device).expand(3, 3)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Float)
        v, m = fd.ops.var_mean(t0, dims=[0], correction=0)
        fd.add_output(v)
        fd.add_output(m)
    var, mean = fd.execute([x])
    rv, rm = torch.var_mean(x, [0], correction=0)
    assert_close(var, rv)
    assert_close(mean, rm)


def test_issue_example_sum_over_expanded_then_broadcast_back(device):
    """x - 1025 * x: the sum over the expanded axis is 1025 copies of x."""
    x = torch.randn(33, dtype=torch.float16, device=device).expand(1025, 33)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Half, stride_order=[1, 0])
        t1 = fd.ops.cast(t0, DataType.Float)
        s = fd.ops.sum(t1, dims=[0])
        fd.add_output(fd.ops.sub(t1, fd.ops.broadcast_in_dim(s, shape=t1.shape(), broadcast_dims=[1])))
    (out,) = fd.execute([x])
    assert_close(out, x.float() - x.float().sum(0))


def test_sum_over_axis_broadcast_in_dim_made(device):
    """broadcast_in_dim to a size > 1 makes an expanded axis; summing it multiplies."""
    x = torch.randn(7, device=device)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        b = fd.ops.broadcast_in_dim(t0, shape=[5, 7], broadcast_dims=[1])
        fd.add_output(fd.ops.sum(b, dims=[0]))
        fd.add_output(fd.ops.sum(b, dims=[0, 1], keepdim=True))
    s0, s01 = fd.execute([x])
    assert_close(s0, x * 5)
    assert_close(s01, x.expand(5, 7).sum([0, 1], keepdim=True))


def test_softmax_over_an_expanded_axis(device):
    """The max over an expanded axis is the value and the sum multiplies: softmax is 1/n.
    The output is expanded along that axis, stored once: vector lanes run along the odd
    concrete axis beside it and must not cross its rows (a misaligned vector on the GPU)."""
    x = torch.randn(32, 33, 1, device=device)[::2].expand(16, 33, 8)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[False, True, None], dtype=DataType.Float)
        m = fd.ops.max(t0, dims=[2], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(t0, m))
        s = fd.ops.sum(e, dims=[2], keepdim=True)
        fd.add_output(fd.ops.cast(fd.ops.div(e, s), DataType.BFloat16))
    (out,) = fd.execute([x])
    assert_close(out, torch.softmax(x, dim=2).to(torch.bfloat16))
    meta = torch.empty_strided(x.shape, x.stride(), device="meta")
    assert "load_vec" not in fd.cuda_code_for([meta])  # 33 is odd: no vector fits a row


def test_reduction_of_a_reduction_over_no_rows(device):
    """A second reduction's input is the first's output, whose own reduction axis (over
    no rows here) must not become a loop of the second kernel."""
    x = torch.empty(0, 3, dtype=torch.int32, device=device)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int32)
        t1 = fd.ops.sum(t0, dims=[0])
        t2 = fd.ops.sum(t1, dims=[0], keepdim=True)
        fd.add_output(fd.ops.div(t1, fd.ops.add(fd.ops.abs(t2), 1.0)))
        fd.add_output(t2)
    out, total = fd.execute([x])
    assert_close(out, torch.zeros(3, device=device))
    assert_close(total, torch.zeros(1, dtype=torch.int64, device=device))


def test_output_beside_a_reduction_over_no_elements(device):
    """A segment reduces [n, 0] to a scalar and also outputs a [n] tensor of the reduced
    rows' axis: the kernel's column loop visits nothing, so that output must still be made."""
    x = torch.randn(255, device=device, dtype=torch.float16) + 3
    y = torch.randn(255, 2, device=device).narrow(1, 0, 0)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=DataType.Float)
        t2 = fd.ops.ne(t0, 0.0)
        b = fd.ops.broadcast_in_dim(t2, shape=[255, 0], broadcast_dims=[0])
        p = fd.ops.prod(fd.ops.add(fd.ops.where(b, b, t1), 1.0), dims=[0, 1], keepdim=True)
        fd.add_output(fd.ops.bitwise_and(t2, t2))
        fd.add_output(p)
    mask, prod = fd.execute([x, y])
    assert_close(mask, torch.ones(255, dtype=torch.bool, device=device))
    assert_close(prod, torch.ones(1, 1, device=device))


@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Half])
def test_narrow_sum_over_an_expanded_axis_rounds_once(device, dtype):
    """A bf16/half sum over a real and an expanded axis rounds once, as PyTorch's float
    accumulator does: the partial sum is scaled by the repeat count before the narrow cast
    (GPU fuzz seed 10102 case 213 rounded it to bf16 first, then again after x127). The
    values are multiples of 1/8 whose sums float holds exactly, so the result is bit-exact."""
    torch.manual_seed(0)
    td = _TORCH[dtype]
    base = (torch.randint(33, 72, (33, 64, 1), device=device) / 8).to(td)  # sums of 11 bits
    x = base.expand(33, 64, 127)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, None], dtype=dtype)
        fd.add_output(fd.ops.sum(t0, dims=[0, 2]))
        fd.add_output(fd.ops.sum(t0, dims=[2]))
    s02, s2 = fd.execute([x])
    assert s02.dtype == td
    # the exact sum rounded once (CUDA PyTorch's result; its CPU bf16 sum rounds twice too)
    assert torch.equal(s02, x.double().sum([0, 2]).to(td))
    assert torch.equal(s2, x.double().sum([2]).to(td))
    if device == "cuda":
        ran = [s.kernel for s in fd.last_segments() if s.generates_kernel]
        assert ran and all(ran)
