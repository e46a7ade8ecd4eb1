"""RNG ops as generated-kernel ops (issue 11, item 5), on CPU: the reference executor's
Philox4x32-10 against Random123's known answers and the documented stream layout; the
numbers depend on (seed, offset, linear index) alone; uniform's range, moments of both
distributions; unseeded ops draw once per execution from PyTorch's generator, every segment
uses that draw and a replay of it gives the same numbers; and the CUDA generated for
pointwise, reduction, inner-persistent (dropout + residual + LayerNorm) and transpose
kernels with RNG compiles with nvcc for sm_90."""
import math

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.benchmarks import by_name
from fuser.cli import bench as bench_cli
from fuser.codegen.ops import emit_random
from fuser.runtime import philox
from fuser.runtime.reference import run_reference

from cuda_units import compile_all

FLOATS = [DataType.Float, DataType.Double, DataType.BFloat16, DataType.Half]
M32 = 0xFFFFFFFF


# --- the generator ------------------------------------------------------------------------------

#: Random123's tests/kat_vectors, the philox4x32 10 lines: counter (4 words), key (2), result (4)
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,want", KAT, ids=["zeros", "ones", "pi"])
def test_philox_known_answers(counter, key, want):
    got = philox.philox4x32_10(counter, key)
    assert [int(w) for w in got] == list(want)
    # vectorised: the same block among others, each counter its own
    c = [torch.tensor([counter[0], 1, counter[0]]), counter[1], counter[2], counter[3]]
    many = philox.philox4x32_10(c, key)
    assert [int(w[0]) for w in many] == list(want) == [int(w[2]) for w in many]
    assert [int(w[1]) for w in many] != list(want)


def _words(seed, offset, q):
    s, o = seed & philox.MASK64, offset & philox.MASK64
    return [int(w) for w in philox.philox4x32_10((o & M32, o >> 32, q & M32, q >> 32), (s & M32, s >> 32))]


@pytest.mark.parametrize("seed,offset", [(0, 0), (7, 3), (-5, 1 << 40), ((1 << 63) + 12345, (1 << 33) + 9)])
def test_stream_layout_float_and_double(seed, offset):
    n = 11
    u = philox.standard(False, False, seed, offset, n, torch.device("cpu"))
    assert u.dtype == torch.float32 and u.shape == (n,)
    for i in range(n):
        w = _words(seed, offset, i // 4)[i % 4]
        assert u[i].item() == (w >> 8) * 2.0 ** -24
    d = philox.standard(False, True, seed, offset, n, torch.device("cpu"))
    assert d.dtype == torch.float64
    for i in range(n):
        w = _words(seed, offset, i // 2)
        a, b = w[2 * (i % 2)], w[2 * (i % 2) + 1]
        assert d[i].item() == ((a >> 5) * 2 ** 26 + (b >> 6)) * 2.0 ** -53
    # normal: Box-Muller on the words' pairs, cos then sin
    z = philox.standard(True, False, seed, offset, 8, torch.device("cpu")).double()
    for i in range(8):
        w = _words(seed, offset, i // 4)
        a, b = (w[0], w[1]) if i % 4 < 2 else (w[2], w[3])
        u1, u2 = ((a >> 8) + 1) * 2.0 ** -24, (b >> 8) * 2.0 ** -24
        r, t = math.sqrt(-2 * math.log(u1)), 2 * math.pi * u2
        assert z[i].item() == pytest.approx(r * (math.cos(t) if i % 2 == 0 else math.sin(t)), rel=1e-5, abs=1e-5)


def test_uniform_stays_below_high():
    # 1 + (1 - 2^-24) rounds to 2 in float: kept just below high
    u = torch.tensor([0.0, 0.5, 1 - 2.0 ** -24])
    v = philox.uniform(u, 1.0, 2.0)
    assert v.tolist() == [1.0, 1.5, torch.nextafter(torch.tensor(2.0), torch.tensor(1.0)).item()]
    assert philox.uniform(u, 3.0, 3.0).tolist() == [3.0, 3.0, 3.0]  # an empty range: low


# --- through fusions (the reference executor) -------------------------------------------------------------


def _seeded(kind, shape, dtype=DataType.Float, lo=0.0, hi=1.0):
    with FusionDefinition() as fd:
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(getattr(fd.ops, kind)(lo, hi, list(shape), rng_seed=s, rng_offset=o, dtype=dtype))
    return fd


@pytest.mark.parametrize("kind", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double], ids=["fp32", "fp64"])
def test_numbers_depend_on_the_linear_index_alone(kind, dtype):
    # [3, 50] and [150] have the same linear indices: the same numbers
    (a,) = _seeded(kind, (3, 50), dtype).execute([11, 5])
    (b,) = _seeded(kind, (150,), dtype).execute([11, 5])
    assert torch.equal(a.reshape(-1), b)
    (c,) = _seeded(kind, (2, 3, 25), dtype).execute([11, 5])
    assert torch.equal(c.reshape(-1), b)
    # the first elements of a longer stream are the shorter one's
    (d,) = _seeded(kind, (1000,), dtype).execute([11, 5])
    assert torch.equal(d[:150], b)


@pytest.mark.parametrize("dtype", FLOATS, ids=["fp32", "fp64", "bf16", "fp16"])
def test_seeded_uniform_is_the_stream_rounded_once(dtype):
    (got,) = _seeded("uniform", (7, 13), dtype, -1.5, 2.5).execute([123, 456])
    double = dtype is DataType.Double
    u = philox.standard(False, double, 123, 456, 91, torch.device("cpu")).reshape(7, 13)
    want = (u * 4.0 - 1.5).to(dtype.torch)  # exact in float: 4 and 1.5 are powers of two apart
    assert got.dtype == dtype.torch and torch.equal(got, want)


@pytest.mark.parametrize("dtype", FLOATS, ids=["fp32", "fp64", "bf16", "fp16"])
def test_moments_and_independence(dtype):
    n = 40000
    (u,) = _seeded("uniform", (n,), dtype, -1.0, 3.0).execute([1, 2])
    (z,) = _seeded("normal", (n,), dtype, 0.5, 2.0).execute([1, 2])
    u, z = u.double(), z.double()
    assert u.min() >= -1.0 and u.max() <= 3.0 and (u.max() < 3.0 or dtype not in (DataType.Float, DataType.Double))
    assert abs(u.mean().item() - 1.0) < 0.03 and abs(u.var().item() - 16 / 12) < 0.05
    assert abs(z.mean().item() - 0.5) < 0.05 and abs(z.std().item() - 2.0) < 0.05
    zs = (z - 0.5) / 2.0
    assert abs(zs.pow(3).mean().item()) < 0.1 and abs(zs.pow(4).mean().item() - 3) < 0.2
    # neighbours share a Philox block (and normal's cos / sin a Box-Muller pair): uncorrelated
    for x in (u, z):
        for lag in (1, 2, 3, 4):
            assert abs(torch.corrcoef(torch.stack([x[:-lag], x[lag:]]))[0, 1].item()) < 0.03


def test_offsets_and_seeds_give_other_streams():
    base = _seeded("uniform", (4096,)).execute([5, 0])[0]
    for seed, offset in ((5, 1), (6, 0), (5 + (1 << 32), 0), (5, 1 << 32), (-5, 0)):
        other = _seeded("uniform", (4096,)).execute([seed, offset])[0]
        assert (other == base).float().mean() < 0.01, (seed, offset)


# --- unseeded: one draw per execution --------------------------------------------------------------------


def _two_unseeded(split: bool):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        a = fd.ops.add(t, fd.ops.rand_like(t))
        if split:  # the second op in another segment
            a = fd.ops.segment_set(a)
        fd.add_output(a)
        fd.add_output(fd.ops.mul(a, fd.ops.randn_like(t)))
        fd.add_output(fd.ops.rand_like(t))
    return fd


@pytest.mark.parametrize("split", [False, True], ids=["one_segment", "two_segments"])
def test_unseeded_ops_share_the_execution_draw_and_replay(split):
    fd = _two_unseeded(split)
    x = torch.randn(8, 33)
    torch.manual_seed(3)
    states = philox.generator_states([x])
    a, b, c = fd.execute([x])
    if split:
        assert len(fd._entry.last_runner.runs) >= 2
    # the reference replaying the draw gives the very same numbers
    with philox.replaying(states):
        ra, rb, rc = run_reference(fd.fusion, [x])
    assert torch.equal(a, ra) and torch.equal(b, rb) and torch.equal(c, rc)
    fd.validate([x])
    # each op its own stream: rand_like twice differs
    assert not torch.equal(a - x, c)
    # manual_seed repeats the run; the next run differs
    torch.manual_seed(3)
    a2, _, c2 = fd.execute([x])
    assert torch.equal(a, a2) and torch.equal(c, c2)
    a3, _, _ = fd.execute([x])
    assert not torch.equal(a, a3)


def test_draw_advances_the_generator_by_the_streams():
    torch.manual_seed(0)
    s1, b1 = philox.draw(torch.device("cpu"), 3)
    s2, b2 = philox.draw(torch.device("cpu"), 3)
    assert b1 == b2 == 0 and s1 != s2 and 0 <= s1 < 1 << 63
    torch.manual_seed(0)
    assert philox.draw(torch.device("cpu"), 3) == (s1, b1)
    fd = _two_unseeded(False)
    ops = [e for e in fd.fusion.exprs() if type(e).__name__ == "RNGOp"]
    assert philox.streams(fd.fusion) == max(e.stream for e in ops) + 1
    assert len({e.stream for e in ops}) == 3


def test_seeded_ops_do_not_draw():
    fd = _seeded("uniform", (10,))
    assert philox.streams(fd.fusion) == 0
    torch.manual_seed(1)
    state = torch.get_rng_state()
    fd.execute([1, 2])
    assert torch.equal(torch.get_rng_state(), state)


def test_rng_is_in_one_segment_and_every_reader_sees_its_numbers():
    # the RNG output feeds two segments (a segment_set between): rematerialisation and
    # forwarding never copy the RNG op, its numbers go through memory
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        r = fd.ops.rand_like(t)
        a = fd.ops.segment_set(fd.ops.add(t, r))
        fd.add_output(fd.ops.sub(a, t))
        fd.add_output(r)
    x = torch.randn(64)
    d, r = fd.execute([x])
    assert torch.allclose(d, r, atol=1e-6)
    assert sum(any(type(e).__name__ == "RNGOp" for e in g.exprs) for g in fd._entry.last_runner.seg.groups) == 1


# --- generated CUDA (nvcc, no GPU) ----------------------------------------------------------------------


def _meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def _code(build, inputs):
    with FusionDefinition() as fd:
        build(fd)
    return fd.cuda_code_for(inputs)


def _pointwise(kind, dtype, seeded):
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        kw = {}
        if seeded:
            kw = dict(rng_seed=fd.define_scalar(dtype=DataType.Int), rng_offset=fd.define_scalar(dtype=DataType.Int))
        r = getattr(fd.ops, kind)(-1.0, 2.0, x.shape(), dtype=dtype, **kw)
        fd.add_output(fd.ops.add(x, r))
    return build


def _dropout(fd, dtype=DataType.BFloat16):
    x0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    x = fd.ops.cast(x0, DataType.Float)
    u = fd.ops.rand_like(x)
    return x0, fd.ops.mul(fd.ops.where(fd.ops.lt(u, 0.9), x, 0.0), 1 / 0.9)


def _dropout_sum(fd):
    _, d = _dropout(fd)
    fd.add_output(fd.ops.sum(d, dims=[1]))


def dropout_backward(fd):
    """A norm backward's shape with dropout's backward in front: the mask recomputed from
    (seed, offset), a sum along the rows (dx) and one across them (dweight)."""
    g = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
    gf, xf = fd.ops.cast(g, DataType.Float), fd.ops.cast(x, DataType.Float)
    keep = fd.ops.lt(fd.ops.uniform(0.0, 1.0, gf.shape(), rng_seed=s, rng_offset=o), 0.9)
    gd = fd.ops.mul(fd.ops.where(keep, gf, 0.0), 1 / 0.9)
    p = fd.ops.mul(gd, xf)
    dx = fd.ops.sub(gd, fd.ops.mul(xf, fd.ops.sum(p, dims=[1], keepdim=True)))
    fd.add_output(fd.ops.cast(dx, DataType.BFloat16))
    fd.add_output(fd.ops.cast(fd.ops.sum(p, dims=[0]), DataType.BFloat16))


def _dropout_transpose(fd):
    t = fd.ops.permute(fd.define_tensor(shape=[-1, -1], contiguity=[True, True]), [1, 0])
    s = fd.define_scalar(dtype=DataType.Int)
    fd.add_output(fd.ops.where(fd.ops.lt(fd.ops.rand_like(t, rng_seed=s, rng_offset=s), 0.5), t, 0.0))


POINTWISE = [(k, dt, seeded) for k in ("uniform", "normal") for dt in FLOATS for seeded in (False, True)]


def _pointwise_code(kind, dtype, seeded, shape=(64, 4096)):
    inputs = [_meta(shape, dtype.torch)] + ([3, 4] if seeded else [])
    return _code(_pointwise(kind, dtype, seeded), inputs)


def test_pointwise_code_draws_through_one_cache_per_op():
    src = _pointwise_code("uniform", DataType.BFloat16, False)
    assert '#include "fuser_random.cuh"' in src and src.count("fuser::Philox rng") == 1
    assert "long long philox_seed" in src and "long long philox_offset" in src
    call = src.split("fuser::rng_uniform_f32(")[1].split(";")[0]
    # the execution's base offset plus the op's stream; under graph capture both from the device
    assert "philox_state[1] : philox_offset) + " in call and "philox_state[0] : philox_seed)" in call
    assert "const long long* __restrict__ philox_state" in src or "const int64_t* __restrict__ philox_state" in src
    # a contiguous 2D fusion is one merged loop: the linear index is the loop index itself
    assert " / " not in call and " % " not in call
    assert "fuser::float_to_bfloat(fuser::rng_uniform_f32(" in src  # computed in float, rounded once
    seeded = _pointwise_code("normal", DataType.Double, True)
    assert "fuser::rng_normal_f64(" in seeded and "philox_seed" not in seeded
    two = _code(lambda fd: [fd.add_output(fd.ops.rand_like(t)) for t in [fd.define_tensor(shape=[-1], contiguity=[True])] * 2],
                [_meta((1024,))])
    assert two.count("fuser::Philox rng") == 2  # each op its own cache


def test_emit_random_converts_params_and_result():
    text = emit_random(False, DataType.Half, "rng3", "s", "o", "i", ("lo", "hi"), (DataType.Double, DataType.Double))
    assert text == "fuser::float_to_half(fuser::rng_uniform_f32(rng3, s, o, i, ((float)lo), ((float)hi)))"
    text = emit_random(True, DataType.Double, "rng3", "s", "o", "i", ("m", "sd"), (DataType.Float, DataType.Double))
    assert text == "fuser::rng_normal_f64(rng3, s, o, i, ((double)m), sd)"
    with pytest.raises(NotImplementedError):
        emit_random(False, DataType.Int, "rng3", "s", "o", "i", ("a", "b"), (DataType.Double, DataType.Double))


def test_dropout_backward_is_one_inner_outer_kernel():
    with FusionDefinition() as fd:
        dropout_backward(fd)
    inputs = [torch.randn(96, 160).bfloat16(), torch.randn(96, 160).bfloat16(), 1, 2]
    fd.validate(inputs)
    assert bench_cli.fuser_segments(fd) == [("inner_outer_persistent", False)]


def test_dropout_residual_layernorm_is_one_inner_persistent_kernel():
    f = by_name("dropout_add_layernorm_fwd_bf16")
    inputs = f.make_inputs("cpu", (64, 96))
    fd = f.fusion_definition()
    state = bench_cli._generator_state(f, inputs)
    got = fd.execute(inputs)
    assert bench_cli.fuser_segments(fd) == [("inner_persistent", False)]
    ok, msg = bench_cli._check(f, got, inputs, fd, state)
    assert ok, msg
    # a replay of another draw is caught: the check compares the random numbers exactly
    torch.manual_seed(123)
    ok, msg = bench_cli._check(f, got, inputs, fd, torch.get_rng_state())
    assert not ok and "dropout_add_layernorm_fwd_bf16 output" in msg
    src = fd.cuda_code_for([_meta((16384, 4096), torch.bfloat16), _meta((16384, 4096), torch.bfloat16),
                            _meta((4096,), torch.bfloat16), _meta((4096,), torch.bfloat16)])
    assert src.count("__global__") == 1 and "fuser::block_allreduce_x" in src
    # the numbers are drawn once per element and kept across the row's passes
    assert src.count("fuser::rng_uniform_f32(") == 1


@pytest.mark.nvcc
def test_rng_kernels_compile_for_sm90():
    sources = [_pointwise_code(k, dt, seeded) for k, dt, seeded in POINTWISE]
    sources.append(_pointwise_code("uniform", DataType.Float, True, shape=(4097, 3)))  # no vectors
    sources.append(_code(_dropout_sum, [_meta((1024, 8192), torch.bfloat16)]))  # a reduction kernel
    sources.append(_code(_dropout_sum, [_meta((16384, 1000), torch.bfloat16)]))  # inner persistent
    f = by_name("dropout_add_layernorm_fwd_fp32")
    with FusionDefinition() as fd:
        f.define(fd)
    sources.append(fd.cuda_code_for(f.make_inputs("meta", (16384, 4096))))
    bwd = _code(dropout_backward, [_meta((16384, 4096), torch.bfloat16)] * 2 + [1, 2])
    assert bwd.count("__global__") == 1 and bwd.count("fuser::rng_uniform_f32(") == 1
    sources.append(bwd)
    t = _code(_dropout_transpose, [_meta((512, 640)), 7])
    assert "fuser_transpose" in t and "fuser::rng_uniform_f32(" in t
    sources.append(t)
    for src in sources:
        assert "fuser::rng_" in src
    cubin = compile_all(sources)
    assert cubin[:4] == b"\x7fELF"


def test_a_new_seed_or_offset_per_call_reuses_the_runner():
    # Thunder's uniform_philox passes a new offset at each step: the seed and offset inputs
    # are kernel parameters, not part of the input signature
    from fuser.host.executor import value_free_inputs

    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        n = fd.define_scalar(dtype=DataType.Int)  # a size: its value stays in the signature
        fd.add_output(fd.ops.mul(t, fd.ops.rand_like(t, rng_seed=s, rng_offset=o)))
        fd.add_output(fd.ops.uniform(0.0, 1.0, [n], rng_seed=s, rng_offset=o))
    assert value_free_inputs(fd.fusion) == frozenset({1, 2})
    x = torch.rand(100) + 1
    outs = [fd.execute([x, 5, off, 7]) for off in range(4)]
    assert len(fd._entry.executors) == 1
    for off, (a, u) in enumerate(outs):
        ra, ru = run_reference(fd.fusion, [x, 5, off, 7])
        assert torch.equal(a, ra) and torch.equal(u, ru)
    assert not torch.equal(outs[0][0], outs[1][0])
    fd.execute([x, 5, 0, 9])  # another size: another runner
    assert len(fd._entry.executors) == 2
