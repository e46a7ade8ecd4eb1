"""The pre-segmentation pass `reciprocal_divisors`: a division by a value the same across a
row, whose quotient is rounded to half or bfloat16, is computed as a times 1/b. CPU: which
divisions it marks and which it leaves, FUSER_DISABLE, the generated CUDA and its PTX (the
row's reciprocal, two multiplies an element, no division). GPU:
softmax as Thunder writes it, and divisors below 2^-128, against eager PyTorch."""
import pytest
import torch

from fuser import DataType
from fuser.frontend.cache import FusionCache
from fuser.ir import BinaryOp, BinaryOpType
from fuser.preseg import run_passes
from fuser.preseg.reciprocal_divisors import NAME
from fuser.runtime.tolerance import assert_close

from cuda_units import compile_all, ptx_of
from preseg_fusions import BF16, F16, F32, TORCH as _TORCH, define as _define, matrix as _matrix, meta as _meta
from preseg_fusions import ran_kernels as _ran_kernels, row as _row, softmax as softmax_div

#: the division inline (a kernel reaching the divisor per element), and the scale a
#: reduction kernel computes once ahead of its loop for a divisor the whole row shares
HELPER = "fuser::div_by_reciprocal("
HOISTED = "fuser::reciprocal_scale("


def normalize_div(dt: DataType, out: DataType):
    """x / sum(x) over each row, computed in `dt` (float or double), cast to `out`."""

    def build(fd):
        x = _matrix(fd, dt)
        fd.add_output(fd.ops.cast(fd.ops.div(x, _row(fd, fd.ops.sum(x, dims=[1]), x.shape())), out))

    return build


def _marked(fd) -> list[bool]:
    """by_reciprocal of each division of the fusion the segmenter gets."""
    return [e.by_reciprocal for e in run_passes(fd.fusion).fusion.exprs()
            if isinstance(e, BinaryOp) and e.op_type is BinaryOpType.Div]


# --- what the pass marks ----------------------------------------------------------------------


@pytest.mark.parametrize("dt,out", [(BF16, BF16), (F16, F16), (F32, BF16), (F32, F16)])
def test_a_softmax_rounded_to_a_narrow_type_divides_by_reciprocal(dt, out):
    fd = _define(softmax_div(dt, out))
    assert _marked(fd) == [True]
    src = fd.cuda_code_for([_meta((512, 4096), dt)])
    # the row's sum is a register of the kernel: its scale and reciprocal once, ahead of
    # the loop over the row's vectors
    assert src.count(HOISTED) == 1 and HELPER not in src, src
    assert not any(e.by_reciprocal for e in fd.fusion.exprs() if isinstance(e, BinaryOp))  # the user's: unchanged


def test_a_narrow_quotient_and_a_scalar_divisor_are_marked():
    def build(fd):
        x = _matrix(fd, BF16)
        s = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=BF16)
        fd.add_output(fd.ops.div(x, s))  # bf16 / bf16: computed in float, rounded to bf16
        fd.add_output(fd.ops.cast(fd.ops.div(fd.ops.cast(x, F32), fd.define_scalar(3.0)), BF16))

    fd = _define(build)
    assert _marked(fd) == [True, True]
    # a pointwise kernel loads the divisor per element: the division inline
    src = fd.cuda_code_for([_meta((512, 4096), BF16), _meta((512, 1), BF16)])
    assert HELPER in src and HOISTED not in src, src


def _float_output(fd):
    x = _matrix(fd, F32)
    fd.add_output(fd.ops.div(x, _row(fd, fd.ops.sum(x, dims=[1]), x.shape())))


def _full_divisor(fd):
    x, y = _matrix(fd, BF16), _matrix(fd, BF16)
    fd.add_output(fd.ops.div(x, y))


def _read_by_an_add(fd):
    x = _matrix(fd, F32)
    q = fd.ops.div(x, _row(fd, fd.ops.sum(x, dims=[1]), x.shape()))
    fd.add_output(fd.ops.cast(fd.ops.add(q, 1.0), BF16))


def _also_a_float_output(fd):
    x = _matrix(fd, F32)
    q = fd.ops.div(x, _row(fd, fd.ops.sum(x, dims=[1]), x.shape()))
    fd.add_output(fd.ops.cast(q, BF16))
    fd.add_output(q)


def _integers(fd):
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int32)
    s = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Int32)
    fd.add_output(fd.ops.cast(fd.ops.div(x, s), BF16))


@pytest.mark.parametrize("build", [_float_output, _full_divisor, _read_by_an_add, _also_a_float_output, _integers,
                                   normalize_div(F32, DataType.Double)])
def test_divisions_whose_rounding_would_show_or_gain_nothing_are_left(build):
    fd = _define(build)
    assert _marked(fd) in ([], [False])
    assert run_passes(fd.fusion).fusion is fd.fusion  # nothing to do: not even copied


def test_fuser_disable_names_the_pass(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", NAME)
    FusionCache.reset()
    fd = _define(softmax_div())
    assert _marked(fd) == [False]
    src = fd.cuda_code_for([_meta((512, 4096), BF16)])
    assert HELPER not in src and HOISTED not in src


def test_the_reference_executor_still_divides():
    fd = _define(normalize_div(F32, BF16))
    x = torch.rand(64, 1000) + 0.5
    (y,) = fd.execute([x])  # CPU: the reference executor runs the marked division as a / b
    assert torch.equal(y, (x / x.sum(1, keepdim=True)).to(torch.bfloat16))


# --- the generated code -----------------------------------------------------------------------


@pytest.mark.nvcc
def test_the_row_takes_one_reciprocal_and_its_elements_multiply():
    FusionCache.reset()
    marked = _define(softmax_div()).cuda_code_for([_meta((16384, 4096), BF16)])
    ptx = ptx_of(marked)
    # the row's reciprocal once, ahead of the loop over the thread's 16 elements (inline,
    # nvcc computed it once per vector), then two multiplies an element (by the reciprocal,
    # by the scale that keeps it finite for a tiny divisor); no division, so no branch
    # around an element's multiply
    assert ptx.count("rcp.rn.f32") == 1
    assert ptx.count("div.rn.f32") == 0
    assert ptx.count("mul.f32") + ptx.count("mul.rn.f32") >= 2 * 16


@pytest.mark.nvcc
def test_the_kernels_compile_for_every_quotient_type():
    FusionCache.reset()
    sources = [_define(softmax_div(dt, out)).cuda_code_for([_meta((256, 1000), dt)])
               for dt, out in ((BF16, BF16), (F16, F16), (F32, BF16))]
    sources.append(_define(normalize_div(DataType.Double, BF16)).cuda_code_for([_meta((256, 1000), DataType.Double)]))
    assert all(HOISTED in s for s in sources)
    assert compile_all(sources)[:4] == b"\x7fELF"


@pytest.mark.parametrize("dt,tiny", [(F32, 1e-42), (DataType.Double, 1e-320)])
def test_divisors_too_small_for_a_reciprocal_simulate_to_the_reference(dt, tiny):
    # the reciprocal computed ahead of the loop, scaled where 1 / sum would overflow (rows of
    # subnormals: sums below 2^-128, 2^-1024 in double), simulated on the CPU
    from kernel_sim import simulate_fusion

    FusionCache.reset()
    fd = _define(normalize_div(dt, BF16))
    torch.manual_seed(5)
    x = (torch.rand(6, 300, dtype=torch.float64) + 0.5) * tiny
    x[0] = torch.rand(300, dtype=torch.float64) + 0.5  # and a row of ordinary values
    x = x.to(_TORCH[dt])
    assert HOISTED in fd.cuda_code_for([x])
    report = simulate_fusion(fd, [x])
    assert report.ok and report.status == "ok" and report.simulated >= 1, str(report)


# --- on a GPU ---------------------------------------------------------------------------------




@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16384, 4096), (1000, 1000), (3, 77), (128, 1)])
@pytest.mark.parametrize("dt", [BF16, F16])
def test_thunders_softmax_matches_eager(poisoned_kernel_outputs, dt, shape):
    FusionCache.reset()
    fd = _define(softmax_div(dt, dt))
    x = (torch.randn(shape) * 4).to(_TORCH[dt]).cuda()
    (y,) = fd.execute([x])
    assert _ran_kernels(fd)
    assert_close(y, torch.softmax(x.float(), dim=-1).to(_TORCH[dt]))


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [F32, DataType.Double])
def test_divisors_too_small_for_a_reciprocal_divide(poisoned_kernel_outputs, dt):
    # rows of subnormals: their sums lie below 2^-128 in float (1/sum overflows there), or
    # in double, below 2^-1024. Each element / sum is about 1/1000, which a * (1/b) = a * inf
    # would make infinite
    FusionCache.reset()
    fd = _define(normalize_div(dt, BF16))
    tiny = 1e-42 if dt is F32 else 1e-320
    x = (torch.rand(64, 1000, dtype=torch.float64) + 0.5) * tiny
    x = x.to(_TORCH[dt]).cuda()
    x[0] = torch.rand(1000, dtype=x.dtype, device="cuda") + 0.5  # and a row of ordinary values
    (y,) = fd.execute([x])
    assert _ran_kernels(fd)
    want = (x.double() / x.double().sum(1, keepdim=True)).to(torch.bfloat16)
    assert torch.isfinite(y.float()).all()
    assert_close(y, want)
