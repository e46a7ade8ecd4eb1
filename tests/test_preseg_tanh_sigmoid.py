"""The pre-segmentation pass `tanh_to_sigmoid`: 1 ± tanh(z) becomes 2 * sigmoid(±2z) in
the copy the segmenter gets. CPU: which fusions it rewrites (GELU as fuser's benchmark and
Thunder define it), results through the reference executor against PyTorch's GELU, the
cases it leaves alone, FUSER_DISABLE, the user's fusion and segments, and the generated
kernels (compiled with nvcc for sm_90). GPU: the fast float sigmoid and silu at extremes."""
import math
import warnings

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.benchmarks.fusions import _define_gelu_bf16, _gelu_tanh
from fuser.frontend.cache import FusionCache
from fuser.ir import BinaryOp, BinaryOpType, UnaryOp, UnaryOpType
from fuser.preseg import run_passes
from fuser.preseg.tanh_sigmoid import NAME
from fuser.runtime.tolerance import assert_close

from cuda_units import compile_all

_TORCH = {DataType.Float: torch.float32, DataType.BFloat16: torch.bfloat16, DataType.Half: torch.float16}


def _define(build) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _unary_ops(fusion, op: UnaryOpType) -> int:
    return sum(isinstance(e, UnaryOp) and e.op_type is op for e in fusion.exprs())


def _matrix(fd, dt: DataType):
    return fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)


# --- the GELU definitions ---------------------------------------------------------------------


def _bench_gelu(dt: DataType):
    """fuser's benchmark GELU (`_gelu_tanh`) on a `dt` matrix, computed in float."""

    def build(fd):
        x = _matrix(fd, dt)
        xf = fd.ops.cast(x, DataType.Float) if dt is not DataType.Float else x
        y = _gelu_tanh(fd, xf)
        fd.add_output(fd.ops.cast(y, dt) if dt is not DataType.Float else y)

    return build


def _thunder_gelu(dt: DataType):
    """thunder.torch.gelu(approximate="tanh") as Thunder's nvFuser executor defines it:
    0.5 * a * (1.0 + tanh(sqrt(2/pi) * (a + 0.044715 * a^3))), the numbers Double
    scalars on the left, bf16/fp16 upcast to float and the result cast back."""

    def build(fd):
        x = _matrix(fd, dt)
        a = fd.ops.cast(x, DataType.Float) if dt is not DataType.Float else x
        a_pow_3 = fd.ops.mul(fd.ops.mul(a, a), a)
        s = {v: fd.define_scalar(v, dtype=DataType.Double) for v in (0.5, 1.0, 0.044715, math.sqrt(2.0 / math.pi))}
        inner = fd.ops.mul(s[math.sqrt(2.0 / math.pi)], fd.ops.add(a, fd.ops.mul(s[0.044715], a_pow_3)))
        y = fd.ops.mul(fd.ops.mul(s[0.5], a), fd.ops.add(s[1.0], fd.ops.tanh(inner)))
        fd.add_output(fd.ops.cast(y, dt) if dt is not DataType.Float else y)

    return build


def _eager_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh")


# --- what the pass rewrites -------------------------------------------------------------------


@pytest.mark.parametrize("build", [_define_gelu_bf16, _thunder_gelu(DataType.BFloat16)], ids=["bench", "thunder"])
def test_gelu_loses_its_tanh_for_a_sigmoid(build):
    fd = _define(build)
    before = fd.fusion_ir()
    pre = run_passes(fd.fusion)
    assert pre.applied == (NAME,)
    assert _unary_ops(pre.fusion, UnaryOpType.Tanh) == 0
    assert _unary_ops(pre.fusion, UnaryOpType.Sigmoid) == 1
    # the defined fusion is untouched (the pass rewrote a copy) and prints as before
    assert _unary_ops(fd.fusion, UnaryOpType.Tanh) == 1 and fd.fusion_ir() == before
    assert pre.to_original(pre.fusion.outputs[0]) is fd.fusion.outputs[0]
    # the sum's tensor is kept and now written by sigmoid(..) * 2.0
    sig = next(e for e in pre.fusion.exprs() if isinstance(e, UnaryOp) and e.op_type is UnaryOpType.Sigmoid)
    (last,) = sig.output.uses
    assert isinstance(last, BinaryOp) and last.op_type is BinaryOpType.Mul and last.inputs[1].value == 2.0
    assert pre.to_original(last.output).definition.op_type is BinaryOpType.Add
    first = sig.input.definition
    assert first.op_type is BinaryOpType.Mul and first.inputs[1].value == 2.0


def _one_minus_tanh(fd):
    x = _matrix(fd, DataType.Float)
    fd.add_output(fd.ops.mul(x, fd.ops.sub(1.0, fd.ops.tanh(x))))


def _int_one_plus_tanh(fd):
    x = _matrix(fd, DataType.Float)
    fd.add_output(fd.ops.add(1, fd.ops.tanh(x)))


def test_one_minus_tanh_becomes_a_sigmoid_of_minus_2z():
    pre = run_passes(_define(_one_minus_tanh).fusion)
    assert pre.applied == (NAME,)
    sig = next(e for e in pre.fusion.exprs() if isinstance(e, UnaryOp) and e.op_type is UnaryOpType.Sigmoid)
    assert sig.input.definition.inputs[1].value == -2.0
    x = torch.randn(33, 65) * 3
    assert_close(_define(_one_minus_tanh).execute([x])[0], x * (1 - torch.tanh(x)))


def test_an_integer_one_counts():
    assert run_passes(_define(_int_one_plus_tanh).fusion).applied == (NAME,)


# --- results ------------------------------------------------------------------------------------


def _inputs(kind: str, tdt: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if kind == "random":
        x = torch.randn(64, 96, generator=g) * 3
    elif kind == "zeros_free":
        x = torch.randn(64, 96, generator=g)
        x = x + 0.25 * x.sign()
    else:  # ±30 and ±100 (tanh and sigmoid saturated; x^3 far past them), among random values
        x = torch.randn(16, 64, generator=g) * 3
        x[:, :8] = torch.tensor([-100.0, -30.0, 30.0, 100.0, -100.0, -30.0, 30.0, 100.0])
    return x.to(tdt)


@pytest.mark.parametrize("kind", ["random", "zeros_free", "large"])
@pytest.mark.parametrize("dt", [DataType.Float, DataType.BFloat16, DataType.Half], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("form", [_bench_gelu, _thunder_gelu], ids=["bench", "thunder"])
def test_rewritten_gelu_matches_torch(form, dt, kind):
    fd = _define(form(dt))
    assert run_passes(fd.fusion).applied == (NAME,)
    x = _inputs(kind, _TORCH[dt])
    (got,) = fd.execute([x])
    want = _eager_gelu(x)
    assert_close(got, want, what=f"gelu {dt} {kind}")
    if kind == "large":
        # exactly: 0 (as -0.0 or 0.0) for -30 and -100, x itself for 30 and 100
        assert torch.equal(got[:, :8], want[:, :8])


@pytest.mark.parametrize("sub", [False, True], ids=["1+tanh", "1-tanh"])
def test_half_compute_is_rewritten_and_matches_torch(sub):
    # tanh, the sum and the new ops all on Half tensors (each result rounded to half)
    def build(fd):
        x = _matrix(fd, DataType.Half)
        t = fd.ops.tanh(x)
        fd.add_output(fd.ops.sub(1.0, t) if sub else fd.ops.add(t, 1.0))

    fd = _define(build)
    assert run_passes(fd.fusion).applied == (NAME,)
    x = _inputs("large", torch.float16)
    (got,) = fd.execute([x])
    assert got.dtype == torch.float16
    assert_close(got, (1 - torch.tanh(x)) if sub else (torch.tanh(x) + 1))


def test_a_broadcast_operand_keeps_its_shape():
    # tanh of a broadcast input (which fold_input_broadcasts folds first): both passes run
    def build(fd):
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        x = _matrix(fd, DataType.Float)
        bb = fd.ops.broadcast_in_dim(b, shape=x.shape(), broadcast_dims=[1])
        fd.add_output(fd.ops.mul(x, fd.ops.add(fd.ops.tanh(bb), 1.0)))

    fd = _define(build)
    assert run_passes(fd.fusion).applied == ("fold_input_broadcasts", NAME)
    b, x = torch.randn(7) * 3, torch.randn(5, 7)
    (got,) = fd.execute([b, x])
    assert_close(got, x * (1 + torch.tanh(b)))


# --- what it leaves alone -------------------------------------------------------------------------


def _tanh_read_twice(fd):
    x = _matrix(fd, DataType.Float)
    t = fd.ops.tanh(x)
    fd.add_output(fd.ops.mul(fd.ops.add(t, 1.0), t))


def _tanh_also_an_output(fd):
    x = _matrix(fd, DataType.Float)
    t = fd.ops.tanh(x)
    fd.add_output(fd.ops.add(t, 1.0))
    fd.add_output(t)


def _tanh_then(dt: DataType, op: str, c):
    """tanh of a `dt` matrix, then `op` with the constant `c`: forms the pass leaves alone."""

    def build(fd):
        fd.add_output(getattr(fd.ops, op)(fd.ops.tanh(_matrix(fd, dt)), c))

    return build


_fp64 = _tanh_then(DataType.Double, "add", 1.0)
_plus_two = _tanh_then(DataType.Float, "add", 2.0)
_times_one = _tanh_then(DataType.Float, "mul", 1.0)
_tanh_minus_one = _tanh_then(DataType.Float, "sub", 1.0)
_int_input = _tanh_then(DataType.Int, "add", 1.0)  # tanh of integers is Float: z * 2.0 is not what it read
_complex_one = _tanh_then(DataType.Float, "add", 1 + 0j)
_complex = _tanh_then(DataType.ComplexFloat, "add", 1.0)


def _one_input(fd):
    # a scalar input that happens to be 1 is no constant
    x = _matrix(fd, DataType.Float)
    fd.add_output(fd.ops.add(fd.ops.tanh(x), fd.define_scalar(DataType.Double)))


_LEFT_ALONE = [_tanh_read_twice, _tanh_also_an_output, _fp64, _plus_two, _times_one, _tanh_minus_one, _int_input,
               _complex_one, _complex, _one_input]


_NAMES = ["tanh_read_twice", "tanh_also_an_output", "fp64", "plus_two", "times_one", "tanh_minus_one", "int_input",
          "complex_one", "complex", "one_input"]


@pytest.mark.parametrize("build", _LEFT_ALONE, ids=_NAMES)
def test_other_uses_and_forms_are_left_alone(build):
    fd = _define(build)
    pre = run_passes(fd.fusion)
    assert pre.fusion is fd.fusion and pre.applied == ()
    assert _unary_ops(fd.fusion, UnaryOpType.Sigmoid) == 0


def test_a_shared_tanh_keeps_computing_it_once():
    x = torch.randn(8, 9)
    (got,) = _define(_tanh_read_twice).execute([x])
    assert_close(got, (torch.tanh(x) + 1) * torch.tanh(x))


# --- FUSER_DISABLE, the user's fusion, segments -------------------------------------------------


def _meta(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_fuser_disable_names_the_pass(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", NAME)
    FusionCache.reset()
    fd = _define(_define_gelu_bf16)
    assert run_passes(fd.fusion).fusion is fd.fusion
    x = _inputs("random", torch.bfloat16)
    assert fd.segmented_fusion_for([x]).complete_fusion is fd.fusion
    src = fd.cuda_code_for([_meta((16384, 8192), torch.bfloat16)])
    assert "fuser::tanh(" in src and "fuser::sigmoid(" not in src
    assert_close(fd.execute([x])[0], _eager_gelu(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a name execute knows: no "ignoring unknown option" warning
        fd.execute([x], _disable_options=[NAME])


@pytest.mark.parametrize("dt", [DataType.BFloat16, DataType.Half, DataType.Float], ids=["bf16", "fp16", "fp32"])
def test_the_gelu_kernel_computes_a_sigmoid_and_no_tanh(dt):
    FusionCache.reset()
    fd = _define(_bench_gelu(dt))
    src = fd.cuda_code_for([_meta((16384, 8192), _TORCH[dt])])
    assert "fuser::sigmoid(" in src and "fuser::tanh(" not in src


@pytest.mark.nvcc
def test_the_kernels_compile_with_and_without_the_pass(monkeypatch):
    sources = []
    for disable in ("", NAME):
        monkeypatch.setenv("FUSER_DISABLE", disable)
        FusionCache.reset()
        for dt in (DataType.BFloat16, DataType.Half, DataType.Float):
            sources.append(_define(_thunder_gelu(dt)).cuda_code_for([_meta((1024, 1024), _TORCH[dt])]))
    # Half compute, sigmoid and silu on narrow types: converted to float for the fast path
    for dt in (DataType.BFloat16, DataType.Half):
        def build(fd, dt=dt):
            x = _matrix(fd, dt)
            fd.add_output(fd.ops.add(fd.ops.tanh(x), 1.0))
            fd.add_output(fd.ops.sigmoid(x))
            fd.add_output(fd.ops.silu(x))

        sources.append(_define(build).cuda_code_for([_meta((256, 512), _TORCH[dt])]))
    assert all("fuser::sigmoid(" in s for s in sources[:3]) and all("fuser::tanh(" in s for s in sources[3:6])
    assert compile_all(sources)[:4] == b"\x7fELF"


def test_the_users_fusion_prints_and_segments_as_defined():
    FusionCache.reset()

    def build(fd):
        x = _matrix(fd, DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        g = _gelu_tanh(fd, xf)
        fd.add_output(fd.ops.sum(fd.ops.segment_set(g), [1]))

    fd = _define(build)
    printed, ir = str(fd), fd.fusion_ir()
    assert "fd.ops.tanh(" in printed and "sigmoid" not in printed
    x = _inputs("random", torch.bfloat16)
    first, second = fd.segment([x])
    # the segments are cut from the rewritten copy: the GELU segment computes a sigmoid,
    # and its output is the user's (the sum's input, the segment_set's)
    assert "fd.ops.sigmoid(" in str(first) and "fd.ops.tanh(" not in str(first)
    assert str(fd) == printed and fd.fusion_ir() == ir
    (out,) = fd.execute([x])  # runs the segments one after the other
    assert_close(out, _eager_gelu(x.float()).sum(1), rtol=1e-4, atol=1e-4)


# --- the fast float sigmoid and silu on a GPU ------------------------------------------------------


@pytest.mark.gpu
def test_fast_sigmoid_and_silu_at_the_extremes_match_torch():
    FusionCache.reset()

    def build(fd):
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.sigmoid(x))
        fd.add_output(fd.ops.silu(x))

    fd = _define(build)
    special = [-math.inf, -1e30, -100.0, -88.8, -88.0, -87.0, -30.0, -1.0, -0.0, 0.0, 1e-30, 1.0, 30.0, 88.8,
               100.0, 1e30, math.inf, math.nan]
    x = torch.cat([torch.tensor(special), torch.randn(1 << 16) * 10]).cuda()
    sig, silu = fd.execute([x])
    assert fd._entry.last_runner.segment_runs()[0].kernel  # the generated kernel ran
    assert_close(sig, torch.sigmoid(x))
    assert_close(silu, torch.nn.functional.silu(x))
    n = len(special)
    assert torch.equal(sig[:n].isnan(), x[:n].isnan()) and not sig[:n - 1].isnan().any()
    assert (sig[:n - 1] >= 0).all() and (sig[:n - 1] <= 1).all()
    assert sig[0] == 0 and sig[n - 2] == 1 and silu[n - 2] == math.inf
    assert torch.isfinite(silu[1:n - 2]).all()  # -1e30 through 1e30: never NaN or inf


def test_a_stream_parallel_gelu_keeps_one_stream_loop(monkeypatch):
    """The new tensors are stream-parallel as the add's output is: a serial tensor between
    two stream-parallel ones would split their loop in two (seed 004's rule)."""
    from fuser.benchmarks import overlap
    from fuser.host.ir import ForLoop

    def lowered() -> tuple[list[bool], bool]:
        FusionCache.reset()
        fd = overlap.define(True)  # gelu(x @ w) * 2, every tensor stream-parallel on axis 0
        x, w = torch.randn(4, 8, 16).bfloat16(), torch.randn(16, 12).bfloat16()
        (out,) = fd.execute([x, w])
        want = (torch.nn.functional.gelu((x.float() @ w.float()), approximate="tanh") * 2).bfloat16()
        assert_close(out, want)
        prog = fd._entry.last_runner.program
        sigmoid = any(_unary_ops(u.fusion, UnaryOpType.Sigmoid) for u in prog.units)
        return [e.is_join for e in prog.exprs if isinstance(e, ForLoop)], sigmoid

    assert lowered() == ([False, True], True)  # one loop and its join, the GELU rewritten
    monkeypatch.setenv("FUSER_DISABLE", NAME)
    assert lowered() == ([False, True], False)
