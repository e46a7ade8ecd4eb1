"""The user-facing frontend API (docs/API.md is the spec; nvFuser where it is silent):
FusionDefinition's members and their keywords, fd.ops, module-level names, operators on
tensors and scalars, inputs from sizes/strides and example tensors, outputs (aliased,
strided), option switches and validate. CPU only, small tensors."""
import inspect
import operator
import tempfile
import warnings

import pytest
import torch

import fuser
from fuser import DataType, FusionCache, FusionDefinition, Scalar, Tensor, Vector, clone
from fuser.frontend.ops import Operators

EMPTY = inspect.Parameter.empty
ANY = object()  # the default is not part of the contract


def _params(fn):
    return inspect.signature(fn).parameters


def _assert_signature(fn, expected):
    """`expected`: (name, default) pairs in order after self; EMPTY marks a required one."""
    params = _params(fn)
    names = [n for n in params if n != "self"]
    for pos, (name, default) in enumerate(expected):
        assert name in params, f"{fn.__qualname__} has no argument {name!r}: {names}"
        p = params[name]
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            assert names.index(name) == pos, f"{fn.__qualname__}: {name!r} is not argument {pos}: {names}"
        if default is ANY:
            continue
        if default is not EMPTY:
            assert p.default == default, f"{fn.__qualname__}({name}=...) defaults to {p.default!r}, not {default!r}"
        else:
            assert p.default is EMPTY, f"{fn.__qualname__}: {name!r} should be required"


# --- the FusionDefinition table of API.md ------------------------------------------------
FD_MEMBERS = {
    "define_tensor": [
        ("shape", ANY),
        ("contiguity", None),
        ("dtype", DataType.Float),
        ("is_cpu", False),
        ("stride_order", None),
    ],
    "from_pytorch": [("tensor", EMPTY), ("static_sizes", False)],
    "define_scalar": [("value", None), ("dtype", None)],
    "define_constant": [("value", None), ("dtype", None)],
    "define_vector": [("values", EMPTY), ("dtype", DataType.Int)],
    "add_output": [("output", EMPTY), ("alias_input", None)],
    "execute": [("inputs", EMPTY)],
    "validate": [("inputs", EMPTY), ("reference_outputs", None)],
    "segment": [("inputs", EMPTY)],
    "fusion_ir": [],
    "last_cuda_code": [("intrinsic_code", False)],
    "cuda_code_for": [("inputs", EMPTY)],
    "last_scheduled_fusion_ir": [("tensor_transforms", False)],
    "scheduled_fusion_ir_for": [("inputs", EMPTY)],
    "repro_script_for": [("inputs", None)],
    "inputs": [],
    "outputs": [],
    "id": [],
}


@pytest.mark.parametrize("name", sorted(FD_MEMBERS))
def test_fusion_definition_member_signature(name):
    fn = getattr(FusionDefinition, name, None)
    assert callable(fn), f"FusionDefinition.{name} is missing"
    _assert_signature(fn, FD_MEMBERS[name])


def test_define_tensor_size_stride_form_keywords():
    params = _params(FusionDefinition.define_tensor)
    for name, default in [("sizes", None), ("strides", None), ("static_sizes", False), ("is_cpu", False)]:
        assert name in params and params[name].default == default


def test_execute_keywords():
    params = _params(FusionDefinition.execute)
    expected = {
        "device": None,
        "override_user_schedule": False,
        "capture_debug_output": False,
        "profile": False,
        "print_repro": False,
    }
    for name, default in expected.items():
        assert name in params, f"execute has no {name}="
        assert params[name].default == default
    assert "_enable_options" in params and "_disable_options" in params
    assert list(params[k].default for k in ("_enable_options", "_disable_options")) in ([[], []], [(), ()])


def test_add_output_takes_stride_order_by_keyword_and_position():
    assert "stride_order" in _params(FusionDefinition.add_output)


def test_define_constant_is_define_scalar():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        c = fd.define_constant(3.0)
        fd.add_output(fd.ops.mul(t0, c))
    assert "fd.define_scalar(3.00000, dtype=DataType.Double)" in str(fd)
    x = torch.randn(5)
    assert torch.equal(fd.execute([x])[0], x * 3.0)


# --- fd.ops -------------------------------------------------------------------------------
UNARY = (
    "abs acos acosh asin asinh atan atanh bitwise_not ceil cos cosh exp exp2 expm1 erf erfc erfinv erfcinv "
    "floor frac imag isfinite isinf isnan isneginf isposinf isreal lgamma log log10 log1p log2 logical_not neg "
    "real reciprocal relu round rsqrt sigmoid sign signbit silu sin sinh sqrt tan tanh trunc set segment_set"
).split()
BINARY = (
    "add sub mul div truediv mod remainder fmod pow atan2 maximum minimum eq ne lt le gt ge logical_and "
    "logical_or bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift logical_right_shift "
    "gcd nextafter"
).split()
OP_SIGNATURES = {
    "add_alpha": [("a", EMPTY), ("b", EMPTY), ("alpha", EMPTY)],
    "sub_alpha": [("a", EMPTY), ("b", EMPTY), ("alpha", EMPTY)],
    "where": [("cond", EMPTY), ("a", EMPTY), ("b", EMPTY)],
    "lerp": [("a", EMPTY), ("b", EMPTY), ("w", EMPTY)],
    "addcmul": [("a", EMPTY), ("b", EMPTY), ("c", EMPTY), ("value", EMPTY)],
    "clamp": [("x", EMPTY), ("min", EMPTY), ("max", EMPTY)],
    "threshold": [("x", EMPTY), ("threshold", EMPTY), ("value", EMPTY)],
    "cast": [("arg", EMPTY), ("dtype", EMPTY)],
    "sum": [("arg", EMPTY), ("dims", None), ("keepdim", False), ("dtype", DataType.Null)],
    "prod": [("arg", EMPTY), ("dims", None), ("keepdim", False), ("dtype", DataType.Null)],
    "max": [("arg", EMPTY), ("dims", None), ("keepdim", False), ("dtype", DataType.Null)],
    "min": [("arg", EMPTY), ("dims", None), ("keepdim", False), ("dtype", DataType.Null)],
    "var": [("arg", EMPTY), ("dims", None), ("correction", ANY), ("keepdim", False)],
    "var_mean": [("arg", EMPTY), ("dims", None), ("correction", 1), ("keepdim", False)],
    "welford": [("arg", EMPTY), ("dims", EMPTY)],
    "broadcast": [("arg", EMPTY), ("is_broadcast_dim", EMPTY)],
    "broadcast_in_dim": [("arg", EMPTY), ("shape", EMPTY), ("broadcast_dims", EMPTY)],
    "expand": [("arg", EMPTY), ("shape", EMPTY)],
    "squeeze": [("arg", EMPTY), ("dims", EMPTY), ("squeeze_expanded", False)],
    "reshape": [("arg", EMPTY), ("new_shape", EMPTY)],
    "permute": [("arg", EMPTY), ("dims", EMPTY)],
    "stride_order": [("arg", EMPTY), ("stride_order", EMPTY)],
    "slice": [
        ("arg", EMPTY),
        ("start_indices", EMPTY),
        ("end_indices", EMPTY),
        ("strides", None),
        ("manual_normalization", False),
    ],
    "pad": [("arg", EMPTY), ("pad_widths", EMPTY), ("value", None)],
    "cat": [("tensors", EMPTY), ("dim", 0), ("manual_padding", False)],
    "shape": [("arg", EMPTY)],
    "size": [("arg", EMPTY), ("dim", EMPTY)],
    "at": [("arg", EMPTY), ("index", EMPTY)],
    "select": [("arg", EMPTY), ("index", EMPTY), ("dim", EMPTY)],
    "index_select": [("arg", EMPTY), ("index", EMPTY), ("dim", EMPTY)],
    "gather": [("arg1", EMPTY), ("index", EMPTY), ("dim", EMPTY)],
    "take_along_axis": [("arg1", EMPTY), ("index", EMPTY), ("dim", EMPTY)],
    "scatter": [("arg1", EMPTY), ("index", EMPTY), ("src", EMPTY), ("dim", EMPTY)],
    "full": [("shape", EMPTY), ("fill_value", EMPTY), ("dtype", EMPTY)],
    "iota": [("length", EMPTY), ("start", ANY), ("step", ANY), ("dtype", DataType.Int)],
    "uniform": [
        ("minval", EMPTY),
        ("maxval", EMPTY),
        ("shape", EMPTY),
        ("rng_seed", None),
        ("rng_offset", None),
        ("dtype", DataType.Float),
    ],
    "normal": [
        ("mean", EMPTY),
        ("std", EMPTY),
        ("shape", EMPTY),
        ("rng_seed", None),
        ("rng_offset", None),
        ("dtype", DataType.Float),
    ],
    "rand_like": [("arg", EMPTY)],
    "randn_like": [("arg", EMPTY)],
    "matmul": [("arg1", EMPTY), ("arg2", EMPTY)],
    "linear": [("arg1", EMPTY), ("arg2", EMPTY), ("bias", None)],
    "cumsum": [("arg", EMPTY), ("dim", EMPTY)],
    "triu": [("input", EMPTY), ("diagonal", 0)],
}


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_elementwise_op_exists(name):
    fn = getattr(Operators, name, None)
    assert callable(fn), f"fd.ops.{name} is missing"
    n_args = len([p for p in _params(fn) if p != "self"])
    assert n_args == (1 if name in UNARY else 2), f"fd.ops.{name}{inspect.signature(fn)}"


@pytest.mark.parametrize("name", sorted(OP_SIGNATURES))
def test_op_signature(name):
    fn = getattr(Operators, name, None)
    assert callable(fn), f"fd.ops.{name} is missing"
    _assert_signature(fn, OP_SIGNATURES[name])


def test_var_takes_correction_and_keepdim_by_name():
    params = _params(Operators.var)
    assert list(params)[1:4] == ["arg", "dims", "correction"] and params["keepdim"].default is False


def test_ops_namespace_is_per_definition():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.neg(t0))
    assert isinstance(fd.ops, Operators)


# --- module level -------------------------------------------------------------------------
def test_module_level_names():
    for name in ["FusionDefinition", "FusionCache", "DataType", "Tensor", "Scalar", "Vector", "clone", "version",
                 "compute_contiguity", "compute_tensor_descriptor", "pytorch_utils"]:
        assert hasattr(fuser, name), f"fuser.{name} is missing"
    assert isinstance(fuser.version(), str) and fuser.version()
    assert fuser.version() == fuser.__version__


def test_datatype_members():
    names = "Double Float Half BFloat16 Int Int32 Bool ComplexFloat ComplexDouble Float8_e4m3fn Float8_e5m2 Null"
    for name in names.split():
        assert isinstance(getattr(DataType, name), DataType)


@pytest.mark.parametrize(
    "torch_dtype, dtype",
    [
        (torch.float32, DataType.Float),
        (torch.float64, DataType.Double),
        (torch.float16, DataType.Half),
        (torch.bfloat16, DataType.BFloat16),
        (torch.int64, DataType.Int),
        (torch.int32, DataType.Int32),
        (torch.bool, DataType.Bool),
        (torch.complex64, DataType.ComplexFloat),
        (torch.complex128, DataType.ComplexDouble),
    ],
)
def test_torch_dtype_to_nvfuser_dtype(torch_dtype, dtype):
    from fuser.pytorch_utils import torch_dtype_to_nvfuser_dtype

    assert fuser.pytorch_utils.torch_dtype_to_nvfuser_dtype(torch_dtype) is dtype
    assert torch_dtype_to_nvfuser_dtype(torch_dtype) is dtype


@pytest.fixture
def restore_cache():
    """reset() empties the process-wide cache; put the old one back for the other tests."""
    saved = FusionCache._instance
    yield
    FusionCache._instance = saved


def test_fusion_cache_get_num_fusions_reset(restore_cache):
    cache = FusionCache.get()
    assert FusionCache.get() is cache  # a process-wide singleton
    assert isinstance(cache.num_fusions(), int)
    FusionCache.reset()
    assert FusionCache.get().num_fusions() == 0
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.exp(t0))
    assert FusionCache.get().num_fusions() == 1
    assert fd.id() == 0
    x = torch.randn(3)
    assert torch.equal(fd.execute([x])[0], torch.exp(x))
    with FusionDefinition() as fd2:
        t0 = fd2.define_tensor(shape=[-1], contiguity=[True])
        fd2.add_output(fd2.ops.exp(t0))
    assert fd2.id() == 0 and FusionCache.get().num_fusions() == 1


@pytest.mark.parametrize(
    "sizes, strides, contiguity",
    [
        ([2, 3], [3, 1], [True, True]),
        ([2, 3], [6, 2], [True, False]),
        ([2, 3], [7, 2], [False, False]),
        ([2, 3], [6, 1], [False, True]),
        ([2, 1, 3], [3, 3, 1], [True, None, True]),
        ([4, 3], [0, 1], [None, True]),
        ([], [], []),
    ],
)
def test_compute_contiguity(sizes, strides, contiguity):
    assert fuser.compute_contiguity(sizes, strides) == contiguity


@pytest.mark.parametrize(
    "sizes, strides, contiguity, stride_order",
    [
        ([2, 2, 2, 2], [8, 4, 2, 1], [True, True, True, True], [3, 2, 1, 0]),  # row major
        ([2, 3], [1, 2], [True, True], [0, 1]),  # column major
        ([5, 3, 4], [1, 40, 10], [True, False, True], [0, 2, 1]),  # permuted slice
        # nvFuser's examples: explicit broadcasts take part in the order; stride-0 dims keep their place
        ([2, 1, 3, 1, 4], [24, 4, 8, 4, 2], [True, True, None, None, False], [4, 2, 3, 1, 0]),
        ([2, 2, 2, 2], [8, 4, 0, 2], [True, True, None, False], [3, 2, 1, 0]),
    ],
)
def test_compute_tensor_descriptor(sizes, strides, contiguity, stride_order):
    assert fuser.compute_tensor_descriptor(sizes, strides) == (contiguity, stride_order)


def test_handle_classes():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        s0 = fd.define_scalar(2.0)
        v0 = fd.define_vector([2, 3])
        fd.add_output(fd.ops.mul(t0, s0))
    assert isinstance(t0, Tensor) and isinstance(s0, Scalar) and isinstance(v0, Vector)
    assert fuser.Tensor is Tensor and fuser.Scalar is Scalar and fuser.Vector is Vector
    assert v0.size == 2 and len(v0) == 2


def test_clone_copies_a_definition():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t1 = fd.ops.sum(fd.ops.mul(t0, 2.0), dims=[1])
        fd.add_output(t1)
    fd2 = FusionDefinition()
    clone(fd, fd2)
    assert fd2.id() == fd.id()
    assert str(fd2) == str(fd)
    x = torch.randn(3, 5)
    torch.testing.assert_close(fd2.execute([x])[0], (x * 2.0).sum(1))


# --- the subclass pattern -------------------------------------------------------------------
class _Softplusish(FusionDefinition):
    def definition(self):
        t0 = self.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s0 = self.define_scalar(dtype=DataType.Double)
        t1 = self.ops.log1p(self.ops.exp(t0))
        self.add_output(self.ops.mul(t1, s0))


def test_subclass_definition_runs_on_first_execute():
    x = torch.randn(3, 4)
    (out,) = _Softplusish().execute([x, 0.5])
    torch.testing.assert_close(out, torch.log1p(torch.exp(x)) * 0.5)


def test_subclass_instances_share_a_cache_entry():
    a, b = _Softplusish(), _Softplusish()
    before = None
    a.execute([torch.randn(2, 2), 1.0])
    before = FusionCache.get().num_fusions()
    b.execute([torch.randn(2, 2), 1.0])
    assert a.id() == b.id() and FusionCache.get().num_fusions() == before
    assert "T3 = fd.ops.log1p(T2)" in str(b)


def test_base_class_without_definition_cannot_execute():
    with pytest.raises(RuntimeError, match="definition"):
        FusionDefinition().execute([torch.randn(2)])


# --- Python operators -----------------------------------------------------------------------
def _binary_fusion(op, dtype, lhs_const=None, rhs_const=None):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        fd.add_output(op(a, b))
        fd.add_output(op(a, rhs_const))
        fd.add_output(op(lhs_const, b))
    return fd


FLOAT_OPERATORS = [
    operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.mod,
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
]


@pytest.mark.parametrize("op", FLOAT_OPERATORS, ids=lambda o: o.__name__)
def test_tensor_operators_float(op):
    torch.manual_seed(0)
    x = torch.rand(3, 4) * 4 + 0.5  # positive: pow stays real
    y = (torch.rand(3, 4) - 0.5) * 6
    y[y.abs() < 0.1] = 1.0  # nonzero divisors, both signs (mod follows the divisor's sign)
    fd = _binary_fusion(op, DataType.Float, lhs_const=2.0, rhs_const=1.5)
    got = fd.execute([x, y])
    ref = torch.fmod if op is operator.mod else op  # nvFuser's % is mod: C's fmod
    want = [ref(x, y), ref(x, torch.tensor(1.5)), ref(torch.tensor(2.0), y)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("op", [operator.and_, operator.or_, operator.xor], ids=lambda o: o.__name__)
def test_tensor_operators_bitwise(op):
    x = torch.tensor([[0, 1, 5, 12], [7, -3, 9, 2]])
    y = torch.tensor([[3, 3, 6, 10], [1, 5, -8, 2]])
    fd = _binary_fusion(op, DataType.Int, lhs_const=6, rhs_const=6)
    got = fd.execute([x, y])
    for g, w in zip(got, [op(x, y), op(x, 6), op(6, y)]):
        assert g.dtype == torch.int64 and torch.equal(g, w)


def test_lower_rank_operands_broadcast_from_the_left():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        b = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        fd.add_output(fd.ops.add(a, b))
        fd.add_output(b - a)
        fd.add_output(fd.ops.where(fd.ops.gt(a, 0.0), b, a))
    x, y = torch.randn(3, 4), torch.randn(2, 3, 4)
    s, d, w = fd.execute([x, y])
    assert torch.equal(s, x + y) and torch.equal(d, y - x) and torch.equal(w, torch.where(x > 0, y, x))


def test_bitwise_operators_on_bool():
    x = torch.tensor([True, False, True, False])
    y = torch.tensor([True, True, False, False])
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool)
        for out in (a & b, a | b, a ^ b, ~a):
            fd.add_output(out)
    got = fd.execute([x, y])
    for g, w in zip(got, [x & y, x | y, x ^ y, ~x]):
        assert g.dtype == torch.bool and torch.equal(g, w)


def test_unary_operators():
    x = torch.tensor([[1, -2, 3], [0, 5, -7]])
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(-a)
        fd.add_output(~a)
        fd.add_output(abs(a))
    neg, inv, ab = fd.execute([x])
    assert torch.equal(neg, -x) and torch.equal(inv, ~x) and torch.equal(ab, x.abs())
    text = str(fd)
    assert "fd.ops.neg(T0)" in text and "fd.ops.bitwise_not(T0)" in text


def test_operators_record_the_ops():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        b = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(a + b)
        fd.add_output(2.0 * a)
        fd.add_output(a / b)
    text = str(fd)
    assert "    T2 = fd.ops.add(T0, T1)\n" in text
    assert "    S3 = fd.define_scalar(2.00000, dtype=DataType.Double)\n    T4 = fd.ops.mul(S3, T0)\n" in text
    assert "    T5 = fd.ops.div(T0, T1)\n" in text


def test_scalar_operators_with_input_scalars():
    with FusionDefinition() as fd:
        s = fd.define_scalar(dtype=DataType.Double)
        i = fd.define_scalar(dtype=DataType.Int)
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        r = (s * 2 + i ** 2 - 1 / s) % 5
        fd.add_output(t * r)
        fd.add_output(r)
        fd.add_output(-s)
    assert s.dtype is DataType.Double and i.dtype is DataType.Int and r.dtype is DataType.Double
    x = torch.randn(4)
    out, r_val, neg = fd.execute([1.5, 3, x])
    expected = (1.5 * 2 + 3 ** 2 - 1 / 1.5) % 5
    assert float(r_val) == pytest.approx(expected)
    assert float(neg) == -1.5
    torch.testing.assert_close(out, x * expected)


def test_tensor_properties_and_shape_queries():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Half)
        assert a.ndim == 3 and a.dtype is DataType.Half
        shp = a.shape()
        assert isinstance(shp, Vector) and shp.size == 3
        s1 = a.size(1)
        assert isinstance(s1, Scalar) and s1.dtype is DataType.Int
        neg = a.size(-1)
        # reshape to [size(0) * size(1), size(2)] using the queried sizes
        flat = fd.ops.reshape(a, [fd.ops.mul(a.size(0), s1), neg])
        fd.add_output(flat)
        fd.add_output(fd.ops.mul(s1, 10))
        fd.add_output(fd.ops.at(shp, 2))
    text = str(fd)
    assert "fd.ops.shape(T0)" in text and "fd.ops.size(T0, dim=1)" in text
    x = torch.randn(2, 3, 5, dtype=torch.float16)
    flat, ten_s1, last = fd.execute([x])
    assert torch.equal(flat, x.reshape(6, 5))
    assert int(ten_s1) == 30 and int(last) == 5


def test_reduction_result_rank_and_dtype():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        s = fd.ops.sum(a, dims=[1])
        k = fd.ops.sum(a, dims=[1], keepdim=True)
        assert s.ndim == 1 and k.ndim == 2
        c = fd.ops.cast(s, DataType.Float)
        assert c.dtype is DataType.Float
        fd.add_output(c)
    x = torch.randn(3, 4, dtype=torch.bfloat16)
    torch.testing.assert_close(fd.execute([x])[0], x.float().sum(1), rtol=2e-2, atol=2e-2)


# --- inputs: sizes/strides, from_pytorch --------------------------------------------------------
def _define_from_pytorch(x, **kw):
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x, **kw)
        fd.add_output(fd.ops.mul(t, 3.0))
    return fd


def _example_tensors():
    torch.manual_seed(0)
    return {
        "contiguous": torch.randn(3, 4),
        "transposed": torch.randn(4, 3).t(),
        "permuted3d": torch.randn(2, 3, 4).permute(1, 2, 0),
        "permuted_slice": torch.randn(3, 4, 10)[:, :, :5].permute(2, 0, 1),
        "sliced_rows": torch.randn(6, 8)[::2, 1:5],
        "sliced_inner": torch.randn(3, 8)[:, ::2],
        "expanded": torch.randn(4).expand(3, 4),
        "expanded_middle": torch.randn(3, 1, 5).expand(3, 4, 5),
        "size_one": torch.randn(3, 1, 4),
        "scalar": torch.tensor(2.5),
        "channels_last": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "permuted_size_one": torch.randn(3, 1, 4).permute(2, 1, 0),
        "expanded_transposed": torch.randn(4, 1).expand(4, 3).t(),
        "expanded_permuted": torch.randn(3, 4).unsqueeze(1).expand(3, 5, 4).permute(2, 1, 0),
        "sliced_permuted_strided": torch.randn(4, 6, 8)[:, ::2, 1:7].permute(1, 2, 0),
    }


@pytest.mark.parametrize("name", list(_example_tensors()))
def test_from_pytorch_infers_layout_and_executes(name):
    x = _example_tensors()[name]
    fd = _define_from_pytorch(x)
    contiguity, stride_order = fuser.compute_tensor_descriptor(list(x.shape), list(x.stride()))
    line = str(fd).splitlines()[2]  # a leading newline, then the def line, as nvFuser prints
    assert f"contiguity={contiguity}" in line
    # nvFuser prints a stride_order only when there is one (not for a 0-dim tensor)
    assert (f"stride_order={stride_order}" in line) if stride_order else ("stride_order" not in line)
    assert f"is_cpu={x.ndim == 0}" in line
    (out,) = fd.execute([x])
    assert out.shape == x.shape and torch.equal(out, x * 3.0)


def test_from_pytorch_expanded_dims_are_broadcasts():
    x = torch.randn(4).expand(3, 4)
    fd = _define_from_pytorch(x)
    assert "shape=[-1, -1], contiguity=[None, True]" in str(fd)
    assert "bS0{1 ex i" in fd.fusion_ir().split("Outputs:")[0]


def test_from_pytorch_size_one_dims_are_broadcasts():
    fd = _define_from_pytorch(torch.randn(3, 1, 4))
    assert "shape=[-1, 1, -1], contiguity=[True, None, True]" in str(fd)


def test_from_pytorch_static_sizes():
    x = torch.randn(3, 4)
    fd = _define_from_pytorch(x, static_sizes=True)
    assert "shape=[3, 4]" in str(fd)
    assert torch.equal(fd.execute([x])[0], x * 3)
    with pytest.raises(Exception, match="4"):
        fd.execute([torch.randn(3, 5)])


def test_define_tensor_from_sizes_and_strides():
    with FusionDefinition() as fd:
        t = fd.define_tensor(sizes=[3, 4], strides=[1, 3], dtype=DataType.Double)
        fd.add_output(t + 1)
    assert "shape=[-1, -1], contiguity=[True, True], dtype=DataType.Double, is_cpu=False, stride_order=[0, 1]" in str(fd)
    x = torch.randn(4, 3, dtype=torch.float64).t()
    assert torch.equal(fd.execute([x])[0], x + 1)


def test_define_tensor_sizes_static():
    with FusionDefinition() as fd:
        t = fd.define_tensor(sizes=[2, 1, 3], strides=[3, 3, 1], static_sizes=True)
        fd.add_output(fd.ops.neg(t))
    assert "shape=[2, 1, 3], contiguity=[True, None, True]" in str(fd)


def test_define_tensor_contiguity_follows_stride_order():
    """contiguity lists allocation (memory) order, outermost first, as nvFuser's does."""
    x = torch.randn(3, 4, 10)[:, :, :5].permute(2, 0, 1)  # sizes (5, 3, 4), strides (1, 40, 10)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, False, True], stride_order=[0, 2, 1])
        fd.add_output(fd.ops.neg(t))
    assert torch.equal(fd.execute([x])[0], -x)


def test_define_tensor_single_bool_contiguity():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, 1, -1], contiguity=True)
        fd.add_output(fd.ops.neg(t))
    assert "contiguity=[True, None, True]" in str(fd)
    x = torch.randn(2, 1, 3)
    assert torch.equal(fd.execute([x])[0], -x)


def test_define_tensor_non_contiguous_accepts_strided_input():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[False, False])
        fd.add_output(fd.ops.mul(t, 2.0))
    x = torch.randn(6, 8)[::2, ::3]
    assert torch.equal(fd.execute([x])[0], x * 2.0)


def test_define_tensor_rejects_input_with_wrong_layout():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.neg(t))
    with pytest.raises(ValueError, match="contiguous"):
        fd.execute([torch.randn(4, 3).t()])


def test_is_cpu_scalar_tensor():
    with FusionDefinition() as fd:
        s = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)
        fd.add_output(fd.ops.mul(s, 3.0))
    assert "fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)" in str(fd)
    (out,) = fd.execute([torch.tensor(2.5)])
    assert out.shape == () and float(out) == 7.5


def test_zero_dim_tensor_broadcasts_in_binary_op():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        s = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)
        fd.add_output(fd.ops.mul(t, s))
    x = torch.randn(5)
    assert torch.equal(fd.execute([x, torch.tensor(3.0)])[0], x * 3.0)


# --- scalars and vectors ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, value",
    [(DataType.Double, 0.25), (DataType.Int, 7), (DataType.Bool, True), (DataType.Float, -1.5)],
)
def test_define_scalar_input_passed_at_execute(dtype, value):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Double)
        s = fd.define_scalar(dtype=dtype)
        fd.add_output(fd.ops.mul(t, s))
    assert f"S1 = fd.define_scalar(None, dtype=DataType.{dtype.name})" in str(fd)
    assert fd.inputs() == [0, 1]
    x = torch.randn(4, dtype=torch.float64)
    torch.testing.assert_close(fd.execute([x, value])[0], x * value)
    other = 3 if dtype is DataType.Int else (False if dtype is DataType.Bool else 2.0)
    torch.testing.assert_close(fd.execute([x, other])[0], x * other)


def test_define_scalar_default_dtypes():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        a, b, c = fd.define_scalar(2), fd.define_scalar(2.0), fd.define_scalar(True)
        d = fd.define_scalar()
        fd.add_output(fd.ops.mul(t, a))
    assert (a.dtype, b.dtype, c.dtype, d.dtype) == (DataType.Int, DataType.Double, DataType.Bool, DataType.Double)


def test_define_vector_of_constants_and_of_inputs():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        v_const = fd.define_vector([2, 6])
        v_in = fd.define_vector(2)
        fd.add_output(fd.ops.reshape(t, v_const))
        fd.add_output(fd.ops.reshape(t, v_in))
    text = str(fd)
    # the ints are defined inline, as nvFuser does: no define_scalar lines of their own
    assert "V3 = fd.define_vector([2, 6], dtype=DataType.Int)" in text
    assert "S1 = " not in text
    assert "S4 = fd.define_scalar(None, dtype=DataType.Int)" in text
    x = torch.arange(12.0)
    a, b = fd.execute([x, 4, 3])
    assert torch.equal(a, x.reshape(2, 6)) and torch.equal(b, x.reshape(4, 3))
    # nvFuser spreads a list (a vector of sizes) into the scalar inputs
    a, b = fd.execute([x, [3, 4]])
    assert torch.equal(b, x.reshape(3, 4))


def test_define_vector_from_scalars():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        n = fd.define_scalar(dtype=DataType.Int)
        v = fd.define_vector([n, t.size(0), 1])
        fd.add_output(fd.ops.broadcast_in_dim(fd.ops.sum(t, dims=[1]), shape=v, broadcast_dims=[1]))
    x = torch.randn(3, 4)
    (out,) = fd.execute([x, 2])
    torch.testing.assert_close(out, x.sum(1)[None, :, None].expand(2, 3, 1))


# --- outputs ------------------------------------------------------------------------------------
def test_add_output_alias_input_updates_in_place():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.add(a, 1.0), alias_input=a)
        fd.add_output(fd.ops.mul(a, 2.0))
    assert "fd.add_output(T2, T0)" in str(fd)  # nvFuser prints alias_input positionally
    x = torch.randn(2, 3)
    original = x.clone()
    outs = fd.execute([x])
    assert len(outs) == 1  # the aliased output is not returned
    torch.testing.assert_close(x, original + 1.0)  # written into the input
    torch.testing.assert_close(outs[0], original * 2.0)  # computed from the input as it was


def test_add_output_alias_only_output():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        b = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.mul(a, b), alias_input=b)
    x, y = torch.randn(4), torch.randn(4)
    expected = x * y
    assert fd.execute([x, y]) == []
    assert torch.equal(y, expected)


@pytest.mark.parametrize("stride_order", [[0, 2, 1], [2, 1, 0], [0, 1, 2], [1, 0, 2]])
def test_add_output_stride_order_lays_out_the_output(stride_order):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        fd.add_output(fd.ops.neg(a), stride_order=stride_order)
    assert f"fd.add_output(T1, stride_order={stride_order})" in str(fd)
    x = torch.randn(2, 3, 4)
    (out,) = fd.execute([x])
    assert torch.equal(out, -x)
    # dim d has memory rank stride_order[d], the highest outermost: strides shrink with the rank
    ranked = sorted(range(3), key=lambda d: -stride_order[d])
    expected = [0] * 3
    step = 1
    for d in reversed(ranked):
        expected[d] = step
        step *= x.shape[d]
    assert list(out.stride()) == expected


def test_add_output_stride_order_positional():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.neg(a), [0, 1])
    (out,) = fd.execute([torch.randn(3, 4)])
    assert out.stride() == (1, 3)


def test_inputs_and_outputs_indices():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        c = fd.define_scalar(2.0)  # a constant, not an input
        s = fd.define_scalar(dtype=DataType.Double)
        b = fd.define_tensor(shape=[-1], contiguity=[True])
        t = fd.ops.mul(fd.ops.add(a, b), c)
        u = fd.ops.mul(t, s)
        fd.add_output(u)
        fd.add_output(t)
    assert fd.inputs() == [a.index, s.index, b.index] == [0, 2, 3]
    assert fd.outputs() == [u.index, t.index]
    assert fd.id() == FusionCache.get().fusion(fd.id()).id


def test_outputs_in_add_output_order():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.mul(a, 3.0))
        fd.add_output(a)
        fd.add_output(fd.ops.neg(a))
    x = torch.randn(4)
    o1, o2, o3 = fd.execute([x])
    assert torch.equal(o1, x * 3.0) and torch.equal(o2, x) and torch.equal(o3, -x)


# --- execute options, validate, failures --------------------------------------------------------
def _simple():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.relu(a))
    return fd


def test_unknown_options_warn_and_are_ignored():
    fd = _simple()
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning) as record:
        (out,) = fd.execute([x], _enable_options=["no_such_option"], _disable_options=["another_unknown"])
    messages = [str(w.message) for w in record]
    assert any("no_such_option" in m for m in messages) and any("another_unknown" in m for m in messages)
    assert torch.equal(out, x.relu())


def test_known_options_do_not_warn():
    fd = _simple()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = fd.execute([x], _enable_options=["fast_math"], _disable_options=["expr_simplify"])
    assert torch.equal(out, x.relu())


def test_execute_keywords_accepted():
    fd = _simple()
    x = torch.randn(3, 4)
    (out,) = fd.execute([x], device="cpu", override_user_schedule=False, capture_debug_output=False, profile=False)
    assert torch.equal(out, x.relu())


def test_print_repro_prints_a_script(capsys):
    fd = _simple()
    fd.execute([torch.randn(3, 4)], print_repro=True)
    out = capsys.readouterr().out  # nvFuser prints it to stdout
    assert f"\ndef nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :\n" in out
    assert out.endswith("fd.execute(inputs)\n\n")  # print() adds a newline to the script's


def test_validate_passes_on_a_good_fusion():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        b = fd.ops.cast(a, DataType.Float)
        c = fd.ops.sum(fd.ops.mul(b, b), dims=[1])
        fd.add_output(fd.ops.cast(c, DataType.Half))
    x = torch.randn(3, 8, dtype=torch.float16)
    assert fd.validate([x]) is None
    assert fd.validate([x], reference_outputs=[(x.float() ** 2).sum(1).half()]) is None


def test_validate_fails_on_wrong_reference():
    fd = _simple()
    x = torch.randn(3, 4)
    with pytest.raises(AssertionError):
        fd.validate([x], reference_outputs=[x.relu() + 1])


def test_execute_failure_writes_repro_and_raises(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fd = _simple()
    with pytest.raises(ValueError, match="dtype"):
        fd.execute([torch.randn(3, 4, dtype=torch.float64)])
    err = capsys.readouterr().err
    # stderr names the file in one line; the script is in the file
    (path,) = tmp_path.glob(f"fuser_repro_{fd.id()}_*.py")
    assert err == f"fuser: executing FusionDefinition {fd.id()} failed (the error follows); a script reproducing it: {path}\n"
    script = path.read_text()
    assert f"def nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :" in script
    assert "torch.float64" in script


def test_wrong_number_of_inputs():
    fd = _simple()
    with pytest.raises(ValueError, match="1 input"):
        fd.execute([torch.randn(3, 4), torch.randn(3, 4)])


def test_executing_twice_gives_the_same_results():
    fd = _simple()
    x = torch.randn(3, 4)
    assert torch.equal(fd.execute([x])[0], fd.execute([x])[0])
    y = torch.randn(5, 2)  # other sizes, same definition
    assert torch.equal(fd.execute([y])[0], y.relu())


# --- ops taking optional handles -------------------------------------------------------------------
def test_rng_with_seed_and_offset_scalars_is_reproducible():
    with FusionDefinition() as fd:
        seed = fd.define_scalar(dtype=DataType.Int)
        offset = fd.define_scalar(dtype=DataType.Int)
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.uniform(0.0, 1.0, [2, 3], rng_seed=seed, rng_offset=offset))
        fd.add_output(fd.ops.normal(0.0, 1.0, [t0.size(0)], rng_seed=seed, rng_offset=offset))
        fd.add_output(fd.ops.rand_like(t0, rng_seed=seed, rng_offset=offset))
        fd.add_output(fd.ops.randn_like(t0, rng_seed=seed, rng_offset=offset))
    assert "fd.ops.uniform(S3, S4, shape=[2, 3], rng_seed=S0, rng_offset=S1, dtype=DataType.Float)" in str(fd)
    assert "fd.ops.rand_like(T2, S0, S1)" in str(fd)
    x = torch.randn(4, 5)
    a = fd.execute([7, 0, x])
    b = fd.execute([7, 0, x])
    c = fd.execute([8, 0, x])
    assert [o.shape for o in a] == [(2, 3), (4,), (4, 5), (4, 5)]
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert bool(((a[0] >= 0) & (a[0] < 1)).all())


def test_slice_with_strides():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.slice(t0, start_indices=[0, 1], end_indices=[3, 5], strides=[1, 1]))
        fd.add_output(fd.ops.slice(t0, [1, 0], [2, 2]))
    x = torch.randn(4, 6)
    a, b = fd.execute([x])
    assert torch.equal(a, x[0:3, 1:5]) and torch.equal(b, x[1:2, 0:2])


@pytest.mark.parametrize("cond", [True, False])
def test_where_with_a_bool_scalar_input_as_condition(cond):
    with FusionDefinition() as fd:
        s = fd.define_scalar(None, dtype=DataType.Bool)
        a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.where(s, a, b))
    x, y = torch.randn(5) + 3, torch.randn(5) - 3
    (out,) = fd.execute([cond, x, y])
    assert torch.equal(out, x if cond else y)
