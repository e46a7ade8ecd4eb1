"""The opt-in pre-segmentation pass `approx_exp`: a float exp whose values reach only half /
bfloat16 outputs through products, quotients, moves and sums of non-negative terms is
computed as ex2.approx(x log2 e). CPU: which exps it marks and which it leaves, that it is
off unless switched on (module switch or FUSER_ENABLE), the generated CUDA and its PTX.
GPU: softmax in both forms and exp's extremes against eager PyTorch."""
import pytest
import torch

from fuser import DataType
from fuser.frontend.cache import FusionCache
from fuser.ir import UnaryOp, UnaryOpType
from fuser.preseg import approx_exp, enabled_passes, run_passes
from fuser.runtime.tolerance import assert_close

from cuda_units import ptx_of
from preseg_fusions import BF16, F16, F32, TORCH as _TORCH, define as _define, matrix as _matrix, meta as _meta
from preseg_fusions import ran_kernels as _ran_kernels, softmax

HELPER = "fuser::exp_approx("


@pytest.fixture
def switched_on(monkeypatch):
    monkeypatch.setattr(approx_exp, "ENABLED", True)
    FusionCache.reset()
    yield
    FusionCache.reset()


def _exp_minus_one(fd):
    x = _matrix(fd, BF16)
    fd.add_output(fd.ops.cast(fd.ops.sub(fd.ops.exp(fd.ops.cast(x, F32)), fd.define_scalar(1.0)), BF16))


def _sum_may_cancel(fd):
    # exp(x) * y summed over a row: y's signs can make the terms cancel
    x, y = _matrix(fd, BF16), _matrix(fd, BF16)
    p = fd.ops.mul(fd.ops.exp(fd.ops.cast(x, F32)), fd.ops.cast(y, F32))
    fd.add_output(fd.ops.cast(fd.ops.sum(p, dims=[1]), BF16))


def _also_a_float_output(fd):
    x = _matrix(fd, BF16)
    e = fd.ops.exp(fd.ops.cast(x, F32))
    fd.add_output(e)
    fd.add_output(fd.ops.cast(e, BF16))


def _exp_cast(dt: DataType):
    def build(fd):
        x = _matrix(fd, F32)
        fd.add_output(fd.ops.cast(fd.ops.exp(x), dt))

    return build


def _marked(fd) -> list[bool]:
    """approx of each exp of the fusion the segmenter gets."""
    return [e.approx for e in run_passes(fd.fusion).fusion.exprs()
            if isinstance(e, UnaryOp) and e.op_type is UnaryOpType.Exp]


# --- what the pass marks ----------------------------------------------------------------------


@pytest.mark.parametrize("build", [softmax(), softmax(divide=False), softmax(F16, F16), softmax(F32, BF16),
                                   _exp_cast(BF16), _exp_cast(F16)])
def test_exps_reaching_only_narrow_outputs_through_products_and_sums_are_marked(switched_on, build):
    assert _marked(_define(build)) == [True]


@pytest.mark.parametrize("build", [softmax(out=None), softmax(F32, F32), _exp_minus_one, _sum_may_cancel,
                                   _also_a_float_output, _exp_cast(F32)])
def test_exps_whose_error_could_show_are_left(switched_on, build):
    assert _marked(_define(build)) == [False]


def test_off_unless_switched_on(monkeypatch):
    FusionCache.reset()
    assert approx_exp.ENABLED is False and approx_exp.NAME not in enabled_passes()
    fd = _define(softmax())
    assert _marked(fd) == [False]
    assert HELPER not in fd.cuda_code_for([_meta((512, 4096), BF16)])
    monkeypatch.setenv("FUSER_ENABLE", approx_exp.NAME)
    FusionCache.reset()
    assert approx_exp.NAME in enabled_passes()
    fd = _define(softmax())
    assert _marked(fd) == [True]
    assert HELPER in fd.cuda_code_for([_meta((512, 4096), BF16)])
    FusionCache.reset()


def test_the_reference_executor_still_takes_exp(switched_on):
    fd = _define(softmax())
    x = (torch.randn(64, 1000) * 4).to(torch.bfloat16)
    (y,) = fd.execute([x])  # CPU: the reference executor runs the marked exp as exp
    xf = x.float()
    e = torch.exp(xf - xf.amax(1, keepdim=True))
    assert torch.equal(y, (e / e.sum(1, keepdim=True)).to(torch.bfloat16))


# --- the generated code -----------------------------------------------------------------------


@pytest.mark.nvcc
def test_the_exps_take_ex2_approx_keeping_subnormals(switched_on, monkeypatch):
    marked = _define(softmax()).cuda_code_for([_meta((16384, 4096), BF16)])
    assert HELPER in marked
    ptx = ptx_of(marked)
    # every element's exp is one ex2.approx of x log2 e, not flushing subnormal results
    # (expf's sequence ends in ex2.approx.ftz)
    assert ptx.count("ex2.approx.f32") >= 16 and "ex2.approx.ftz.f32" not in ptx
    FusionCache.reset()
    monkeypatch.setattr(approx_exp, "ENABLED", False)
    plain = ptx_of(_define(softmax()).cuda_code_for([_meta((16384, 4096), BF16)]))
    assert "ex2.approx.ftz.f32" in plain and "ex2.approx.f32 " not in plain.replace("ex2.approx.ftz.f32", "")


# --- on a GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("divide", [True, False])
@pytest.mark.parametrize("shape", [(16384, 4096), (1000, 1000), (3, 77), (128, 1)])
@pytest.mark.parametrize("dt", [BF16, F16])
def test_softmax_matches_eager(switched_on, poisoned_kernel_outputs, dt, shape, divide):
    fd = _define(softmax(dt, dt, divide))
    x = (torch.randn(shape) * 8).to(_TORCH[dt]).cuda()
    x[0, 0] = float("-inf")
    (y,) = fd.execute([x])
    assert _ran_kernels(fd)
    assert HELPER in fd.last_cuda_code()
    assert_close(y, torch.softmax(x.float(), dim=-1).to(_TORCH[dt]))


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [BF16, F16])
def test_exp_extremes(switched_on, poisoned_kernel_outputs, dt):
    # zero, infinity and NaN as exp gives them; values whose exp is subnormal in float
    # (x < -87.3) stay nonzero where the narrow type holds them (bfloat16 down to 9.2e-41)
    fd = _define(_exp_cast(dt))
    special = torch.tensor([float("-inf"), float("inf"), float("nan"), -100.0, -92.0, -87.0, 0.0, 1.0, 11.0, 88.0,
                            89.0, -0.5], dtype=torch.float32)
    x = torch.cat([special, torch.randn(4084) * 20]).reshape(64, 64).cuda()
    (y,) = fd.execute([x])
    assert _ran_kernels(fd)
    want = torch.exp(x.double()).to(_TORCH[dt])
    assert_close(y, want)
    assert torch.equal(torch.isnan(y), torch.isnan(want)) and torch.equal(torch.isinf(y), torch.isinf(want))
    assert torch.equal(y == 0, want == 0)
