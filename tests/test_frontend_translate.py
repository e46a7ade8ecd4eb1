"""Fusion IR back to a FusionDefinition (`definition_from_fusion`, nvFuser's translateFusion).

For each definition below (every op family, several dtypes, input layouts, symbolic and
constant extents), the definition translated from `fd.fusion`:
1. executes on fresh random inputs to the original's outputs (RNG without a seed: same
   shapes and dtypes);
2. translates again to the same printed definition (and the same cached fusion);
3. maps its states back to the right Vals (inputs, outputs, every tensor).
Then the seed-003 segments: their fusions, cut with `Fusion.clone_subgraph`, translate
to the report's two definitions; and segments whose inputs are former intermediates
(reduced, expanded, laid out, reshaped, sliced) translate and execute like the segment.
"""
from __future__ import annotations

import contextlib
import io
import re
from typing import Any, Callable

import pytest
import torch

from _opcheck import _seed, rand  # noqa: F401 - _seed is an autouse fixture
from fuser import DataType, FusionDefinition
from fuser.frontend.translate import TranslationError, definition_from_fusion
from fuser.ir import TENSOR_EXPR_CLASSES, Fusion, Scalar, TensorView
from fuser.runtime.binding import bind_inputs
from fuser.runtime.reference import ReferenceExecutor, run_reference

F, H, BF, D, I, I32, B = (
    DataType.Float,
    DataType.Half,
    DataType.BFloat16,
    DataType.Double,
    DataType.Int,
    DataType.Int32,
    DataType.Bool,
)
CF = DataType.ComplexFloat


# --- cases --------------------------------------------------------------------------------------
# Each case: define(fd) builds a whole definition; inputs() makes fresh inputs for it;
# rng="unseeded" compares only shapes and dtypes.

CASES: list[Any] = []


def case(inputs: Callable[[], list], *, rng: str | None = None, params: list | None = None):
    def deco(fn):
        if params is None:
            CASES.append(pytest.param(fn, inputs, rng, id=fn.__name__))
        else:
            for p in params:
                pid = p.name if isinstance(p, DataType) else str(p)
                CASES.append(
                    pytest.param(lambda fd, _p=p: fn(fd, _p), lambda _p=p: inputs(_p), rng, id=f"{fn.__name__}[{pid}]")
                )
        return fn

    return deco


def sym(fd, n, dtype=F, contiguity=True):
    return fd.define_tensor(shape=[-1] * n, contiguity=[contiguity] * n, dtype=dtype)


def r(*shape, dtype=F, **kw):
    return rand(shape, dtype, nonzero=True, **kw)


@case(lambda dt: [r(4, 5, dtype=dt)], params=[H, BF, F, D])
def unary_chain(fd, dt):
    x = sym(fd, 2, dt)
    a = fd.ops.abs(x)
    for out in (fd.ops.exp(x), fd.ops.neg(x), fd.ops.sigmoid(x), fd.ops.tanh(x), fd.ops.sqrt(a), fd.ops.log1p(a),
                fd.ops.reciprocal(x), fd.ops.relu(x), fd.ops.floor(x), fd.ops.signbit(x), fd.ops.isfinite(x)):
        fd.add_output(out)


@case(lambda: [r(3, 4, dtype=CF)])
def complex_unary(fd):
    x = sym(fd, 2, CF)
    for out in (fd.ops.real(x), fd.ops.imag(x), fd.ops.abs(x), fd.ops.exp(x), fd.ops.mul(x, complex(0.5, -1.0))):
        fd.add_output(out)


@case(lambda: [r(3, 5, dtype=I32), r(3, 5, dtype=I), r(3, 5, dtype=I, low=0, high=4)])
def integer_binary(fd):
    a, b, s = sym(fd, 2, I32), sym(fd, 2, I), sym(fd, 2, I)
    for out in (
        fd.ops.bitwise_and(a, b), fd.ops.bitwise_or(a, b), fd.ops.bitwise_xor(a, b), fd.ops.bitwise_not(a),
        fd.ops.bitwise_left_shift(b, s), fd.ops.bitwise_right_shift(b, s), fd.ops.logical_right_shift(b, s),
        fd.ops.gcd(a, b), fd.ops.remainder(a, b), fd.ops.mod(a, b), fd.ops.fmod(b, 3), fd.ops.div(a, b),
        fd.ops.lt(a, b), fd.ops.eq(a, 2), fd.ops.logical_and(fd.ops.gt(a, 0), fd.ops.ne(b, 1)),
        fd.ops.maximum(a, b), fd.ops.minimum(a, 1), fd.ops.mul(a, 2.5), fd.ops.pow(a, 2),
    ):
        fd.add_output(out)


@case(lambda: [r(4, 6, dtype=H), r(dtype=F), 1.75, r(4, 6, dtype=B), r(6, dtype=D)])
def promotion_and_broadcasting(fd):
    x = sym(fd, 2, H)
    z = fd.define_tensor(shape=[], contiguity=[], dtype=F)
    s = fd.define_scalar(dtype=D)
    m = sym(fd, 2, B)
    v = sym(fd, 1, D)
    fd.add_output(fd.ops.add(x, z))  # a 0-dim tensor does not promote half
    fd.add_output(fd.ops.mul(x, s))
    fd.add_output(fd.ops.sub(x, v))  # rank broadcast from the right, double wins
    fd.add_output(fd.ops.atan2(x, fd.ops.add(s, 1)))
    fd.add_output(fd.ops.logical_or(m, fd.ops.logical_not(m)))
    fd.add_output(fd.ops.nextafter(fd.ops.cast(x, F), z))


@case(lambda: [r(4, 6, dtype=B), r(4, 6), r(4, 6), r(4, 6)])
def ternary_and_composites(fd):
    c, x, y, w = sym(fd, 2, B), sym(fd, 2), sym(fd, 2), sym(fd, 2)
    for out in (
        fd.ops.where(c, x, y), fd.ops.where(c, x, 0.5), fd.ops.where(c, 1, 2.5), fd.ops.lerp(x, y, 0.3),
        fd.ops.lerp(x, y, w), fd.ops.clamp(x, -0.5, 0.5), fd.ops.threshold(x, 0.1, 9.0),
        fd.ops.addcmul(x, y, w, 0.5), fd.ops.add_alpha(x, y, 2), fd.ops.sub_alpha(x, y, 0.25),
    ):
        fd.add_output(out)


@case(lambda: [r(5, 3)])
def casts(fd):
    x = sym(fd, 2)
    h = fd.ops.cast(x, dtype=H)
    i = fd.ops.cast(fd.ops.mul(x, 10.0), dtype=I32)
    fd.add_output(h)
    fd.add_output(i)
    fd.add_output(fd.ops.cast(i, dtype=B))
    fd.add_output(fd.ops.cast(h, dtype=D))
    fd.add_output(fd.ops.cast(fd.ops.cast(x, dtype=DataType.Float8_e4m3fn), dtype=F))
    fd.add_output(fd.ops.cast(x, dtype=CF))
    fd.add_output(fd.ops.cast(x, dtype=F))  # same dtype: a set


@case(lambda dt: [r(4, 5, 6, dtype=dt)], params=[BF, F, D, I32, B])
def reductions(fd, dt):
    x = sym(fd, 3, dt)
    fd.add_output(fd.ops.sum(x, dims=[0]))
    fd.add_output(fd.ops.sum(x, dims=[1, 2], keepdim=True))
    fd.add_output(fd.ops.prod(x, dims=[2], dtype=D))
    fd.add_output(fd.ops.sum(x, dims=[-1], dtype=F))
    if dt is not B:
        fd.add_output(fd.ops.max(x, dims=[0, 2]))
        fd.add_output(fd.ops.min(x, dims=[1], keepdim=True))
    fd.add_output(fd.ops.cumsum(x, dim=1))


@case(lambda dt: [r(4, 7, dtype=dt)], params=[BF, F, D, CF])
def variance_and_welford(fd, dt):
    x = sym(fd, 2, dt)
    var, mean = fd.ops.var_mean(x, dims=[1], correction=1, keepdim=True)
    fd.add_output(var)
    fd.add_output(mean)
    fd.add_output(fd.ops.var(x, dims=[0], correction=0))
    if dt is not CF:
        avg, m2, n = fd.ops.welford(x, dims=[1])
        fd.add_output(avg)
        fd.add_output(m2)
        fd.add_output(n)


@case(lambda: [r(5), r(4, 5), r(3)])
def broadcast_and_expand(fd):
    v, m, c = sym(fd, 1), sym(fd, 2), fd.define_tensor(shape=[3], contiguity=[True], dtype=F)
    b = fd.ops.broadcast(v, is_broadcast_dim=[True, False])
    e = fd.ops.expand(b, shape=[m.size(0), m.size(1)])
    fd.add_output(e)  # an expanded output
    fd.add_output(fd.ops.mul(e, m))
    fd.add_output(fd.ops.broadcast_in_dim(v, shape=fd.ops.shape(m), broadcast_dims=[1]))
    bc = fd.ops.broadcast_in_dim(c, shape=[2, 3, 3], broadcast_dims=[1])
    fd.add_output(bc)
    fd.add_output(fd.ops.sum(bc, dims=[0]))  # reducing an expanded axis
    fd.add_output(fd.ops.expand(fd.ops.broadcast(c, [False, True]), shape=[-1, m.size(0)]))


@case(lambda: [r(4, 1, 6), torch.randn(4, 1).expand(4, 5)])
def squeeze(fd):
    x = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True], dtype=F)
    e = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=F)
    fd.add_output(fd.ops.squeeze(x, dims=[1]))
    fd.add_output(fd.ops.squeeze(e, dims=[1], squeeze_expanded=True))
    fd.add_output(fd.ops.squeeze(fd.ops.sum(x, dims=[2], keepdim=True), dims=[1, 2]))


@case(lambda: [r(2, 3, 4), torch.randn(2, 1).expand(2, 6)])
def reshape_static(fd):
    x = fd.define_tensor(shape=[2, 3, 4], contiguity=[True, True, True], dtype=F)
    e = fd.define_tensor(shape=[2, 6], contiguity=[True, None], dtype=F)
    for shape in ([6, 4], [4, 1, 6], [-1], [2, 12], [2, 3, 4], [3, 2, 2, 2]):
        fd.add_output(fd.ops.reshape(x, new_shape=shape))
    fd.add_output(fd.ops.reshape(e, new_shape=[12]))  # an expanded input materializes


@case(lambda: [r(3, 8), 4, 2, 3])
def reshape_symbolic(fd):
    x = sym(fd, 2)
    s = fd.define_scalar(dtype=I)
    a, b = fd.define_scalar(dtype=I32), fd.define_scalar(dtype=I32)
    fd.add_output(fd.ops.reshape(x, new_shape=[a, b, -1]))  # Int32 extents: Int extent arithmetic
    fd.add_output(fd.ops.reshape(x, new_shape=[-1]))
    fd.add_output(fd.ops.reshape(x, new_shape=[x.size(0), -1, 2]))  # extent i0 * i1 / (i0 * 2)
    fd.add_output(fd.ops.reshape(x, new_shape=[s, -1]))
    fd.add_output(fd.ops.reshape(x, new_shape=[x.size(1), 1, x.size(0)]))


@case(lambda: [r(3, 4, 5), r(4, 3)])
def layouts_and_sets(fd):
    x, y = sym(fd, 3), sym(fd, 2)
    p = fd.ops.permute(x, dims=[2, 0, 1])
    fd.add_output(p)
    fd.add_output(fd.ops.permute(y, dims=[1, 0]))
    fd.add_output(fd.ops.stride_order(x, stride_order=[0, 2, 1]))
    fd.add_output(fd.ops.set(y))
    fd.add_output(fd.ops.segment_set(fd.ops.relu(y)))
    fd.add_output(fd.ops.exp(p), stride_order=[1, 2, 0])


@case(lambda: [r(6, 8), r(5, 7), 1, 4])
def slices(fd):
    x = fd.define_tensor(shape=[6, 8], contiguity=[True, True], dtype=F)
    y = sym(fd, 2)
    a, b = fd.define_scalar(dtype=I), fd.define_scalar(dtype=I)
    fd.add_output(fd.ops.slice(x, start_indices=[1, 0], end_indices=[5, 8]))
    fd.add_output(fd.ops.slice(x, start_indices=[0, 1], end_indices=[6, 8], strides=[2, 3]))
    fd.add_output(fd.ops.slice(y, start_indices=[1, -3], end_indices=[4, 100]))  # normalized with the extents
    fd.add_output(fd.ops.slice(y, start_indices=[a, 0], end_indices=[b, y.size(1)], manual_normalization=True))
    fd.add_output(fd.ops.slice(y, start_indices=[0, 0], end_indices=[y.size(0), y.size(1)], manual_normalization=True))


@case(lambda: [r(3, 4), r(3, 2, dtype=H), r(3, 5)])
def pad_and_cat(fd):
    x, h, y = sym(fd, 2), sym(fd, 2, H), sym(fd, 2)
    fd.add_output(fd.ops.pad(x, [1, 2]))
    fd.add_output(fd.ops.pad(x, [1, 1, 0, 2], value=1.5))
    fd.add_output(fd.ops.pad(x, [-1, 0]))
    fd.add_output(fd.ops.pad(h, [0, 0, 1, 0], fd.define_scalar(2.0, dtype=H)))
    fd.add_output(fd.ops.cat([x, y], dim=1))
    fd.add_output(fd.ops.cat([x, h, y], dim=-1))  # half promotes
    fd.add_output(fd.ops.cat([x, fd.ops.pad(y, [0, -1])], dim=0))


@case(lambda: [r(4, 3), r(4, 5)])
def factories(fd):
    x, y = sym(fd, 2), sym(fd, 2)
    fd.add_output(fd.ops.add(fd.ops.full([x.size(0), x.size(1)], 2.5, dtype=F), x))
    fd.add_output(fd.ops.full([2, 3], 7, dtype=I))
    fd.add_output(fd.ops.full([2, 1], True, dtype=B))
    fd.add_output(fd.ops.full([], 1.25, dtype=BF))
    fd.add_output(fd.ops.iota(x.size(0), 1, 2, dtype=I))
    fd.add_output(fd.ops.iota(5, 0.5, 0.25, dtype=F))
    fd.add_output(fd.ops.iota(y.size(1), dtype=I32))
    fd.add_output(fd.ops.triu(y, 1))
    fd.add_output(fd.ops.triu(fd.ops.broadcast(y, [True, False, False]), -1))


@case(lambda: [r(4, 3), 11, 3])
def rng_seeded(fd):
    x = sym(fd, 2)
    seed, offset = fd.define_scalar(dtype=I), fd.define_scalar(dtype=I)
    fd.add_output(fd.ops.uniform(0.0, 2.0, shape=[x.size(0), 6], rng_seed=seed, rng_offset=offset, dtype=F))
    fd.add_output(fd.ops.normal(1.0, 0.5, shape=[3, x.size(1)], rng_seed=seed, rng_offset=5, dtype=D))
    fd.add_output(fd.ops.rand_like(x, rng_seed=7, rng_offset=offset))
    fd.add_output(fd.ops.add(fd.ops.randn_like(x, rng_seed=seed, rng_offset=offset), x))


@case(lambda: [r(4, 3, dtype=BF)], rng="unseeded")
def rng_unseeded(fd):
    x = sym(fd, 2, BF)
    fd.add_output(fd.ops.uniform(-1.0, 1.0, shape=[x.size(0), 2], dtype=F))
    fd.add_output(fd.ops.normal(0.0, 1.0, shape=[3], dtype=BF))
    fd.add_output(fd.ops.rand_like(x))
    fd.add_output(fd.ops.mul(fd.ops.randn_like(x), x))


@case(lambda: [r(5, 6), torch.tensor([4, 0, 2]), torch.randint(0, 5, (3, 6)), torch.stack([torch.randperm(5) for _ in range(6)], 1),
               r(5, 6), 3])
def indexing(fd):
    x = sym(fd, 2)
    idx = sym(fd, 1, I)
    g = sym(fd, 2, I)
    perm = sym(fd, 2, I)
    src = sym(fd, 2)
    k = fd.define_scalar(dtype=I)
    fd.add_output(fd.ops.select(x, 2, dim=0))
    fd.add_output(fd.ops.select(x, k, dim=1))
    fd.add_output(fd.ops.index_select(x, idx, dim=0))
    fd.add_output(fd.ops.gather(x, g, dim=0))
    fd.add_output(fd.ops.take_along_axis(x, g, dim=0))
    fd.add_output(fd.ops.scatter(x, perm, src, dim=0))


@case(lambda: [r(3, 4), r(4, 5), r(2, 3, 4), r(4), r(6, 4), r(6)])
def matmul_and_linear(fd):
    a, b, c, v, w, bias = sym(fd, 2), sym(fd, 2), sym(fd, 3), sym(fd, 1), sym(fd, 2), sym(fd, 1)
    fd.add_output(fd.ops.matmul(a, b))
    fd.add_output(fd.ops.matmul(c, b))
    fd.add_output(fd.ops.matmul(v, b))
    fd.add_output(fd.ops.linear(a, w, bias))
    fd.add_output(fd.ops.linear(c, w))
    fd.add_output(fd.ops.linear(a, v))


@case(lambda: [r(3, 5), torch.randint(0, 6, (2, 3)), r(6, 4), r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8), 2])
def aten_only(fd):
    x, ids, w = sym(fd, 2), sym(fd, 2, I), sym(fd, 2)
    q, k, v = sym(fd, 4), sym(fd, 4), sym(fd, 4)
    kk = fd.define_scalar(dtype=I)
    fd.add_output(fd.ops.argsort(x, dim=1, descending=True, stable=True))
    values, indices = fd.ops.topk(x, kk, dim=1)
    fd.add_output(values)
    fd.add_output(indices)
    fd.add_output(fd.ops.embedding_fwd(ids, w))
    fd.add_output(fd.ops.ndtri(fd.ops.sigmoid(x)))
    fd.add_output(fd.ops.bitcast(x, DataType.Int32))
    out, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v, fd.define_scalar(0.0), fd.define_scalar(True), None)
    fd.add_output(out)
    gq, gk, gv = fd.ops.sdpfa_bwd(out, q, k, v, out, lse, fd.define_scalar(0.0), fd.define_scalar(True), seed, offset)
    fd.add_output(gq)
    fd.add_output(gv)


@case(lambda: [r(4, 1), torch.randn(4, 1).expand(4, 6), r(4, 10)[:, :6], r(6, 4).t(), r(dtype=D),
               torch.tensor(2.5), r(4, 6), 3, 0.5, True, complex(1.0, -2.0)])
def input_layouts(fd):
    b = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=F)
    e = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=F)
    n = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=F)
    t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F, stride_order=[0, 1])
    z = fd.define_tensor(shape=[], contiguity=[], dtype=D)
    c = fd.define_tensor(shape=[], contiguity=[], dtype=F, is_cpu=True)
    st = fd.define_tensor(shape=[4, 6], contiguity=[True, True], dtype=F)
    si, sd, sb, sc = (fd.define_scalar(dtype=dt) for dt in (I, D, B, DataType.ComplexDouble))
    out = fd.ops.add(fd.ops.add(fd.ops.add(b, e), fd.ops.mul(n, t)), st)
    out = fd.ops.mul(fd.ops.mul(out, z), c)
    fd.add_output(out)
    fd.add_output(fd.ops.where(fd.ops.bitwise_xor(fd.ops.gt(out, 0.0), sb), fd.ops.mul(out, si), fd.ops.add(out, sd)))
    fd.add_output(fd.ops.mul(e, sc))
    fd.add_output(fd.ops.add(z, 1))
    fd.add_output(e)  # an input as an output
    fd.add_output(fd.ops.size(e, 1))


_FROM_PYTORCH = [torch.randn(3, 16)[:, ::2], torch.randn(1, 5, 4).transpose(1, 2), torch.randn(5, 1).expand(5, 3)]


@case(lambda: [torch.randn(3, 16)[:, ::2], torch.randn(1, 5, 4).transpose(1, 2), torch.randn(5, 1).expand(5, 3)])
def from_pytorch_layouts(fd):
    a, b, c = (fd.from_pytorch(x) for x in _FROM_PYTORCH)
    fd.add_output(fd.ops.mul(a, 2.0))
    fd.add_output(fd.ops.sum(b, dims=[1]))
    fd.add_output(fd.ops.sub(c, 1.0))


@case(lambda: [r(4, 5), r(4, 5)])
def aliased_output(fd):
    x, y = sym(fd, 2), sym(fd, 2)
    s = fd.ops.add(x, y)
    fd.add_output(s, alias_input=x)
    fd.add_output(fd.ops.mul(s, 2.0))


@case(lambda: [r(3, 2), 3, 2.0])
def scalar_math(fd):
    x = sym(fd, 2)
    a, b = fd.define_scalar(dtype=I), fd.define_scalar(dtype=D)
    s = fd.ops.add(fd.ops.mul(a, b), 2)
    rcp = fd.ops.reciprocal(fd.define_scalar(1024.0, dtype=D))
    fd.add_output(fd.ops.mul(fd.ops.mul(x, s), rcp))
    fd.add_output(s)
    fd.add_output(fd.ops.cast(fd.ops.sqrt(b), dtype=F))
    fd.add_output(fd.ops.mul(x.size(0), x.size(1)))


@case(lambda: [r(0, 3), r(2, 0, 4)])
def empty_tensors(fd):
    x, y = sym(fd, 2), sym(fd, 3)
    fd.add_output(fd.ops.sum(x, dims=[0]))
    fd.add_output(fd.ops.exp(x))
    fd.add_output(fd.ops.reshape(y, new_shape=[y.size(0), -1]))


def _seed003_inputs():
    return [r(5, 7), r(5, 7)]


@case(_seed003_inputs)
def seed003_original(fd):
    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)
    T1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)
    T2 = fd.ops.sum(T0, dims=[1], keepdim=False, dtype=DataType.Float)
    T3 = fd.ops.broadcast(T2, is_broadcast_dim=[False, True])
    T4 = fd.ops.add(T1, T3)
    fd.add_output(T4)


def _rmsnorm_inputs():
    from fuser.examples.rmsnorm_backward import make_inputs

    return make_inputs("cpu")


def _rmsnorm(fd):
    from fuser.examples.rmsnorm_backward import rmsnorm_backward

    rmsnorm_backward(fd)


# seed 001 at its real sizes (56 x 1024 x 1024: its broadcast_in_dim shapes are constants)
RMSNORM = pytest.param(_rmsnorm, _rmsnorm_inputs, None, id="rmsnorm_backward")


# --- helpers -----------------------------------------------------------------------------------


def _define(define: Callable) -> FusionDefinition:
    with FusionDefinition() as fd:
        define(fd)
    return fd


def _clone(inputs: list) -> list:
    """Copies with the same sizes and strides (expanded ones, never written, are shared)."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and 0 not in x.stride():
            x = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype).copy_(x)
        out.append(x)
    return out


def _execute(fd: FusionDefinition, inputs: list) -> tuple[list, list]:
    """Outputs, and the inputs after the call (aliased outputs write into them)."""
    inputs = _clone(inputs)
    with contextlib.redirect_stderr(io.StringIO()):
        outs = fd.execute(inputs)
    return outs, inputs


def _same(got: Any, want: Any, rng: str | None, what: str) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), what
        assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape}/{got.dtype} vs {want.shape}/{want.dtype}"
        if rng != "unseeded":
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=what)
    else:
        assert type(got) is type(want) and got == want, f"{what}: {got!r} vs {want!r}"


def _normalise(text: str) -> str:
    text = re.sub(r"nvfuser_fusion_id\d+", "nvfuser_fusion_idN", text)
    return re.sub(r"\s+", " ", text).strip()


def _returned(fusion: Fusion) -> list:
    """The outputs a definition returns: in-place updates of inputs are not among them."""
    return [v for v in fusion.outputs if v not in fusion.output_aliases]


def _check_state_map(fusion: Fusion, new: FusionDefinition, smap: list) -> None:
    assert len(smap) == len(new._state_vals)
    assert [smap[k] for k in new.inputs()] == fusion.inputs
    assert [smap[k] for k in new.outputs()] == _returned(fusion)
    vals = set(fusion.vals())
    for k, v in enumerate(smap):
        state = new._state_vals[k]
        if v is None:
            continue
        assert v.fusion is fusion and (v in vals or isinstance(v, Scalar)), f"state {k}: {v!r}"
        assert type(state) is type(v), f"state {k}: {state!r} stands for {v!r}"
        assert state.dtype is v.dtype, f"state {k}: {state!r} stands for {v!r}"
        if isinstance(v, TensorView):
            assert state.ndim == v.ndim
            assert [i.is_broadcast for i in state.logical_no_reductions()] == [
                i.is_broadcast for i in v.logical_no_reductions()
            ], f"state {k}: {state!r} stands for {v!r}"
    # every tensor of the fusion has its state
    mapped = {v for v in smap if v is not None}
    assert all(t in mapped for t in fusion.tensors())


# --- the three properties, for every case -------------------------------------------------------


@pytest.mark.parametrize("define,make_inputs,rng", CASES + [RMSNORM])
def test_translation_executes_like_the_original(define, make_inputs, rng):
    fd = _define(define)
    new, _ = definition_from_fusion(fd.fusion)
    inputs = make_inputs()
    want, want_inputs = _execute(fd, inputs)
    got, got_inputs = _execute(new, inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        _same(g, w, rng, f"output {k}")
    for k, (g, w) in enumerate(zip(got_inputs, want_inputs)):
        _same(g, w, None, f"input {k} after execute")


@pytest.mark.parametrize("define,make_inputs,rng", CASES + [RMSNORM])
def test_translation_is_idempotent(define, make_inputs, rng):
    fd = _define(define)
    once, _ = definition_from_fusion(fd.fusion)
    twice, smap = definition_from_fusion(once.fusion)
    assert str(twice) == str(once)
    assert twice.id() == once.id()  # the same records: the cache's same fusion
    thrice, _ = definition_from_fusion(twice.fusion)
    assert str(thrice) == str(once)
    # the printed definition is a runnable program defining that same fusion
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(str(once), namespace)
    with FusionDefinition() as replayed:
        namespace[f"nvfuser_fusion_id{once.id()}"](replayed)
    assert replayed.id() == once.id()
    _check_state_map(once.fusion, twice, smap)


@pytest.mark.parametrize("define,make_inputs,rng", CASES + [RMSNORM])
def test_state_map_points_at_the_fusions_vals(define, make_inputs, rng):
    fd = _define(define)
    fusion = fd.fusion
    new, smap = definition_from_fusion(fusion)
    _check_state_map(fusion, new, smap)
    # the original's states and the translation's agree on what the inputs and outputs are
    assert [smap[k] for k in new.inputs()] == [fd._state_vals[k] for k in fd.inputs()]
    assert [smap[k] for k in new.outputs()] == _returned(fusion)


def test_cases_cover_every_expression_class():
    seen = set()
    for p in CASES + [RMSNORM]:
        define = p.values[0]
        seen |= {type(e) for e in _define(define).fusion.exprs()}
    assert set(TENSOR_EXPR_CLASSES) <= seen, sorted(c.__name__ for c in set(TENSOR_EXPR_CLASSES) - seen)


def test_canonical_definition_translates_to_itself():
    fd = _define(seed003_original)
    new, _ = definition_from_fusion(fd.fusion)
    assert str(new) == str(fd) and new.id() == fd.id()


def test_translation_prints_the_ops():
    fd = _define(lambda fd: (fd.add_output(fd.ops.slice(fd.define_tensor(shape=[-1], contiguity=[True]), [1], [3]))))
    text = str(definition_from_fusion(fd.fusion)[0])
    assert "fd.ops.size(T0, dim=0)" in text and "fd.ops.minimum(" in text and "manual_normalization=1" in text
    fd = _define(reshape_symbolic)
    text = str(definition_from_fusion(fd.fusion)[0])
    assert "fd.ops.div(" in text and "DataType.Double" not in text  # the -1 extent: integer (truncating) div
    assert "fd.define_scalar(None, dtype=DataType.Int)" in text


# --- seed 003: the segments -------------------------------------------------------------------------

# the report's texts live with the seed-003 frontend tests
from test_frontend_seed003 import FIRST_SEGMENT, ORIGINAL, SECOND_SEGMENT  # noqa: E402
from test_frontend_seed003 import _define as _define_text  # noqa: E402


def _seed003_segments():
    fd = _define_text(ORIGINAL, "nvfuser_fusion_id1")
    fusion = fd.fusion
    s, b, a = fusion.exprs()  # sum, broadcast, add
    t0, t1 = fusion.inputs
    first, m1 = fusion.clone_subgraph([s, b], [t0], [b.output])
    second, m2 = fusion.clone_subgraph([a], [t1, b.output], [a.output])
    return fd, (first, m1), (second, m2)


def test_seed003_segments_translate_to_the_report():
    fd, (first, _), (second, _) = _seed003_segments()
    one, smap1 = definition_from_fusion(first)
    two, smap2 = definition_from_fusion(second)
    assert _normalise(str(one)) == _normalise(FIRST_SEGMENT)
    assert _normalise(str(two)) == _normalise(SECOND_SEGMENT)
    _check_state_map(first, one, smap1)
    _check_state_map(second, two, smap2)


def test_seed003_segments_compose_to_the_original():
    fd, (first, m1), (second, m2) = _seed003_segments()
    one, smap1 = definition_from_fusion(first)
    two, smap2 = definition_from_fusion(second)
    t0, t1 = r(6, 9), r(6, 9)
    (mid,) = one.execute([t0])
    (out,) = two.execute([t1, mid])
    torch.testing.assert_close(out, fd.execute([t0, t1])[0], rtol=0, atol=0)
    # the state maps lead back to the original fusion through the clones
    back1 = {v: k for k, v in m1.items()}
    back2 = {v: k for k, v in m2.items()}
    orig = fd.fusion
    assert [back1[smap1[k]] for k in one.inputs()] == [orig.inputs[0]]
    assert [back2[smap2[k]] for k in two.inputs()] == [orig.inputs[1], orig.exprs()[1].output]
    assert back1[smap1[one.outputs()[0]]] is back2[smap2[two.inputs()[1]]]


# --- segments whose inputs are former intermediates -------------------------------------------------


def _intermediates(fusion: Fusion, inputs: list) -> dict:
    """Every tensor of `fusion` evaluated on `inputs` by the reference executor."""
    binding = bind_inputs(fusion, inputs)
    ex = ReferenceExecutor(fusion, binding.device)
    ex.bind(binding)
    for e in fusion.exprs():
        ex.run_expr(e)
    return ex.env


def _fresh(value: Any, tv: Any) -> Any:
    """An intermediate as a segment receives it: freshly allocated, dense in its allocation
    order, its expanded broadcast axes still of stride 0."""
    if not isinstance(tv, TensorView):
        return value
    ids = tv.logical_no_reductions()
    expanded = [i.has_expanded_extent for i in ids]
    base = value[tuple(slice(0, 1) if e else slice(None) for e in expanded)]
    strides = [0] * len(ids)
    step = 1
    for i in reversed([i for i in tv.allocation if not i.is_reduction]):
        d = ids.index(i)
        strides[d] = step
        step *= base.shape[d]
    out = torch.empty_strided(base.shape, strides, dtype=base.dtype)
    out.copy_(base)
    return out.expand(value.shape)


def _segment_check(define, inputs, cut: Callable[[list], tuple[list, list]], expect: list[str] | None = None):
    """Cut the exprs after a point into a segment fusion (cut(exprs) -> (inputs, exprs)),
    translate it, and run it on the intermediates the original computes."""
    fd = _define(define)
    fusion = fd.fusion
    exprs = fusion.exprs()
    seg_inputs, seg_exprs = cut(exprs)
    produced = {v for e in seg_exprs for v in e.outputs}
    seg_outputs = [v for v in fusion.outputs if v in produced]
    seg, memo = fusion.clone_subgraph(seg_exprs, seg_inputs, seg_outputs)
    new, smap = definition_from_fusion(seg)
    env = _intermediates(fusion, inputs)
    values = [_fresh(env[v], v) for v in seg_inputs]
    got = new.execute(values)
    want = run_reference(seg, values)
    assert len(got) == len(want) == len(seg_outputs)
    for k, (g, w, v) in enumerate(zip(got, want, seg_outputs)):
        _same(g, w, None, f"segment output {k}")
        _same(g, env[v], None, f"segment output {k} against the original")
    _check_state_map(seg, new, smap)
    again, _ = definition_from_fusion(new.fusion)
    assert str(again) == str(new)
    text = str(new)
    for line in expect or []:
        assert line in text, text
    return new


def _after(n: int):
    """The exprs from the n-th on, fed by the tensors they read that earlier exprs made."""

    def cut(exprs):
        seg = exprs[n:]
        made_inside = {v for e in seg for v in e.outputs}
        ins: list = []
        for e in seg:
            for v in e.inputs:
                if isinstance(v, TensorView) and v not in made_inside and v not in ins:
                    ins.append(v)
        return ins, seg

    return cut


def test_segment_input_reduced_and_expanded():
    def define(fd):
        x, y = sym(fd, 2), sym(fd, 2)
        s = fd.ops.sum(x, dims=[1])  # [iS, rS]
        e = fd.ops.expand(fd.ops.broadcast(s, [False, True]), shape=[x.size(0), y.size(1)])  # [iS, bS{1 ex i3}]
        fd.add_output(fd.ops.add(fd.ops.mul(e, y), fd.ops.broadcast(s, [False, True])))

    x, y = r(4, 5), r(4, 7)
    new = _segment_check(define, [x, y], _after(3), expect=[
        "T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=DataType.Float, is_cpu=False)",
        "T2 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)",
    ])
    assert new.fusion.inputs[0].logical[1].has_expanded_extent


def test_segment_input_with_stride_order_and_permute():
    def define(fd):
        x = sym(fd, 3)
        s = fd.ops.stride_order(fd.ops.exp(x), stride_order=[0, 2, 1])
        p = fd.ops.permute(fd.ops.neg(x), dims=[1, 0, 2])
        fd.add_output(fd.ops.add(s, 1.0))
        fd.add_output(fd.ops.mul(p, 2.0))

    _segment_check(define, [r(2, 3, 4)], lambda ex: ([ex[1].output], [ex[4]]), expect=["stride_order=[0, 2, 1]"])
    _segment_check(define, [r(2, 3, 4)], lambda ex: ([ex[3].output.definition.input], [ex[3], ex[5]]))


def test_segment_input_of_computed_extent():
    def define(fd):
        x = sym(fd, 2)
        p = fd.ops.pad(x, [1, 2])  # extent i1 + 3
        f = fd.ops.full(shape=[p.size(0), p.size(1)], fill_value=2.0, dtype=F)
        fd.add_output(fd.ops.mul(fd.ops.reshape(p, new_shape=[-1]), fd.ops.reshape(f, new_shape=[-1])))

    _segment_check(define, [r(3, 4)], _after(1), expect=["fd.ops.size(T0, dim=1)"])


def test_segment_input_reshaped_and_sliced():
    def define(fd):
        x = fd.define_tensor(shape=[4, 6], contiguity=[True, True], dtype=F)
        rs = fd.ops.reshape(x, new_shape=[2, 12])
        sl = fd.ops.slice(fd.ops.exp(rs), start_indices=[0, 2], end_indices=[2, 10])
        fd.add_output(fd.ops.sum(fd.ops.cat([sl, sl], dim=1), dims=[1]))

    _segment_check(define, [r(4, 6)], _after(3), expect=["T0 = fd.define_tensor(shape=[2, 8], contiguity=[True, True]"])
    _segment_check(define, [r(4, 6)], _after(1), expect=["T0 = fd.define_tensor(shape=[2, 12], contiguity=[True, True]"])


def test_segment_input_zero_dim_and_scalar():
    def define(fd):
        x = sym(fd, 2)
        s = fd.define_scalar(dtype=D)
        t = fd.ops.sum(x, dims=[0, 1])  # 0-dim, all axes reduced
        fd.add_output(fd.ops.mul(fd.ops.add(t, s), x))

    _segment_check(define, [r(3, 4), 0.5], lambda ex: ([ex[0].output, ex[1].inputs[1], ex[-1].inputs[1]], ex[1:]),
                   expect=["T0 = fd.define_tensor(shape=[], contiguity=[]"])


def test_uncomputable_extent_is_an_error():
    def define(fd):
        x = sym(fd, 2)
        p = fd.ops.pad(x, [1, 1])  # extent i1 + 2
        fd.add_output(fd.ops.add(fd.ops.sum(p, dims=[1]), fd.ops.full([x.size(1)], 1.0, dtype=F)))

    fd = _define(define)
    fusion = fd.fusion
    exprs = fusion.exprs()
    pad = next(e for e in exprs if type(e).__name__ == "PadOp")
    rest = exprs[exprs.index(pad) + 1:]
    seg, _ = fusion.clone_subgraph(rest, [pad.output], fusion.outputs)
    with pytest.raises(TranslationError, match="extent"):
        definition_from_fusion(seg)
