"""RNG ops in generated kernels on the GPU (issue 11, item 5): the kernels' Philox4x32-10
numbers against the reference executor's. Uniform agrees bit for bit in every float dtype at
odd sizes, whatever the schedule (vectorised or not, misaligned, a transpose tile, inside an
inner-persistent LayerNorm); normal to a few ulps (log, sin and cos differ by ulps). Unseeded
ops draw once per execution from PyTorch's CUDA generator: each call gives new numbers,
torch.manual_seed repeats a run, and a replay of the draw gives the reference's numbers.
Every output a kernel allocates is poisoned first, and each case checks that generated
kernels (not the reference executor) ran."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.benchmarks import by_name
from fuser.benchmarks.fusions import reduction_tolerance
from fuser.cli import bench as bench_cli
import fuser.kernel as kernels_mod
from fuser.runtime import philox
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close, tolerances

pytestmark = pytest.mark.gpu

DTYPES = [DataType.Float, DataType.Double, DataType.BFloat16, DataType.Half]
IDS = ["fp32", "fp64", "bf16", "fp16"]
SHAPES = [(1,), (3,), (1025,), (4097, 3), (64, 4096)]


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    pytest.importorskip("pycuda")
    real = kernels_mod.GeneratedKernel.allocate_outputs

    def poisoned(self):
        outs = real(self)
        for t in outs:
            if t.numel() and 0 not in t.stride():
                t.fill_(float("nan") if t.dtype.is_floating_point else (True if t.dtype is torch.bool else -7))
        return outs

    monkeypatch.setattr(kernels_mod.GeneratedKernel, "allocate_outputs", poisoned)


def _all_kernels(fd) -> None:
    segs = bench_cli.fuser_segments(fd)
    assert segs and all(ran for _, ran in segs), f"a segment ran on the reference executor: {segs}"


def _uniform_fusion(ndim: int, dtype: DataType) -> FusionDefinition:
    """uniform(-1.5, 2.5) of x's shape from (seed, offset) inputs, and x + rand_like(x) of
    stream (seed, 9)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * ndim, contiguity=[True] * ndim, dtype=dtype)
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.uniform(-1.5, 2.5, x.shape(), rng_seed=s, rng_offset=o, dtype=dtype))
        fd.add_output(fd.ops.add(x, fd.ops.rand_like(x, rng_seed=s, rng_offset=9)))
    return fd


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_uniform_kernel_matches_reference_bit_for_bit(dtype, shape):
    fd = _uniform_fusion(len(shape), dtype)
    x = torch.randn(shape, device="cuda").to(dtype.torch)
    args = [x, 1234567, 42]
    u, y = fd.execute(args)
    _all_kernels(fd)
    assert "fuser::rng_uniform_f" in fd.last_cuda_code()
    ru, ry = run_reference(fd.fusion, args)
    assert u.dtype == dtype.torch and torch.equal(u, ru), f"{(u != ru).sum().item()} of {u.numel()} differ"
    assert torch.equal(y, ry)
    assert bool((u >= -1.5).all()) and bool((u <= 2.5).all())
    # the cached kernel on a new seed: other numbers, still the reference's
    u2, _ = fd.execute([x, 7, 42])
    assert torch.equal(u2, run_reference(fd.fusion, [x, 7, 42])[0])
    assert u.numel() < 8 or not torch.equal(u, u2)


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16], ids=["fp32", "bf16"])
def test_numbers_do_not_depend_on_the_schedule(dtype):
    # one flat stream of 3 * 4096 numbers: [3, 4096] vectorised, [12288] 1D, [4096, 3] and a
    # misaligned input (no vectors): the same numbers in row-major order
    flat = []
    for shape, misaligned in (((3, 4096), False), ((12288,), False), ((4096, 3), False), ((3, 4096), True)):
        fd = _uniform_fusion(len(shape), dtype)
        if misaligned:
            x = torch.randn(3 * 4096 + 1, device="cuda").to(dtype.torch)[1:].view(shape)
        else:
            x = torch.randn(shape, device="cuda").to(dtype.torch)
        u, _ = fd.execute([x, 99, 5])
        _all_kernels(fd)
        flat.append(u.reshape(-1))
    for other in flat[1:]:
        assert torch.equal(flat[0], other)


def test_transpose_kernel_draws_the_same_numbers():
    with FusionDefinition() as fd:
        t = fd.ops.permute(fd.define_tensor(shape=[-1, -1], contiguity=[True, True]), [1, 0])
        s = fd.define_scalar(dtype=DataType.Int)
        r = fd.ops.rand_like(t, rng_seed=s, rng_offset=3)
        fd.add_output(fd.ops.where(fd.ops.lt(r, 0.5), t, 0.0))
        fd.add_output(r)
    x = torch.randn(512, 640, device="cuda")
    y, r = fd.execute([x, 77])
    assert "fuser_transpose" in fd.last_cuda_code()
    _all_kernels(fd)
    ry, rr = run_reference(fd.fusion, [x, 77])
    assert torch.equal(r, rr) and torch.equal(y, ry)
    # a pointwise kernel of the same shape and stream: the same numbers
    with FusionDefinition() as fd2:
        fd2.add_output(fd2.ops.uniform(0.0, 1.0, [640, 512], rng_seed=77, rng_offset=3))
    (p,) = fd2.execute([], device="cuda")
    assert torch.equal(p, r)


def _dropout_layernorm(dtype: DataType) -> FusionDefinition:
    """dropout (p = 0.25, seeded) + residual + LayerNorm; outputs the kept mask too."""
    with FusionDefinition() as fd:
        x0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        r0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        x, res = fd.ops.cast(x0, DataType.Float), fd.ops.cast(r0, DataType.Float)
        keep = fd.ops.lt(fd.ops.uniform(0.0, 1.0, x.shape(), rng_seed=s, rng_offset=o), 0.75)
        h = fd.ops.add(fd.ops.mul(fd.ops.where(keep, x, 0.0), 1 / 0.75), res)
        var, mean = fd.ops.var_mean(h, dims=[1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(h, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        fd.add_output(keep)
        fd.add_output(fd.ops.cast(y, dtype))
        fd.add_output(mean)
    return fd


@pytest.mark.parametrize("shape", [(7, 1025), (1000, 4096), (128, 1000)], ids=["7x1025", "1000x4096", "128x1000"])
@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float], ids=["bf16", "fp32"])
def test_dropout_inside_an_inner_persistent_kernel(dtype, shape):
    fd = _dropout_layernorm(dtype)
    args = [torch.randn(shape, device="cuda").to(dtype.torch), torch.randn(shape, device="cuda").to(dtype.torch), 5, 16]
    keep, y, mean = fd.execute(args)
    assert bench_cli.fuser_segments(fd) == [("inner_persistent", True)]
    rk, ry, rm = run_reference(fd.fusion, args)
    assert torch.equal(keep, rk)
    assert abs(keep.float().mean().item() - 0.75) < 0.1
    n = shape[1]  # tolerances as the LayerNorm benchmark's (h about 1.5 in magnitude)
    rtol, atol = reduction_tolerance(dtype.torch, n, 2.0 / n)
    assert_close(y, ry, what="y", rtol=rtol, atol=atol)
    rtol, atol = reduction_tolerance(torch.float32, n, 2.0 / n)
    assert_close(mean, rm, what="mean", rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["dropout_add_layernorm_fwd_bf16", "dropout_add_layernorm_fwd_fp32"])
def test_the_benchmark_fusion_checks_against_the_replayed_reference(name):
    f = by_name(name)
    for shape in ((2048, 4096), (128, 1000)):
        inputs = f.make_inputs("cuda", shape)
        fd = f.fusion_definition()
        state = bench_cli._generator_state(f, inputs)
        got = fd.execute(inputs)
        assert bench_cli.fuser_segments(fd) == [("inner_persistent", True)]
        ok, msg = bench_cli._check(f, got, inputs, fd, state)
        assert ok, msg


@pytest.mark.parametrize("shape", [(2048, 4096), (300, 1000)], ids=["2048x4096", "300x1000"])
def test_dropout_backward_recomputes_the_mask_in_an_inner_outer_kernel(shape):
    from test_rng import dropout_backward

    with FusionDefinition() as fd:
        dropout_backward(fd)
    args = [torch.randn(shape, device="cuda").bfloat16(), torch.randn(shape, device="cuda").bfloat16(), 3, 8]
    dx, dw = fd.execute(args)
    assert bench_cli.fuser_segments(fd) == [("inner_outer_persistent", True)]
    rdx, rdw = run_reference(fd.fusion, args)
    m, n = shape
    rtol, atol = reduction_tolerance(torch.bfloat16, n)  # dx = gd - x * (a sum of n terms about 1)
    assert_close(dx, rdx, what="dx", rtol=rtol, atol=atol * 4)
    rtol, atol = reduction_tolerance(torch.bfloat16, m, 2.0)
    assert_close(dw, rdw, what="dweight", rtol=rtol, atol=atol)
    # with x = 0, dx is the dropped-out gradient itself: zero exactly where the mask drops
    args0 = [args[0], torch.zeros_like(args[1]), 3, 8]
    dx0, _ = fd.execute(args0)
    assert torch.equal(dx0 == 0, run_reference(fd.fusion, args0)[0] == 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_normal_matches_reference_to_ulps(dtype):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        fd.add_output(fd.ops.normal(0.5, 2.0, x.shape(), rng_seed=31, rng_offset=2, dtype=dtype))
        fd.add_output(fd.ops.randn_like(x, rng_seed=31, rng_offset=3))
    x = torch.empty(257, 1031, device="cuda", dtype=dtype.torch)
    z, n = fd.execute([x])
    _all_kernels(fd)
    rz, rn = run_reference(fd.fusion, [x])
    if dtype is DataType.Float:
        rtol, atol = 1e-5, 1e-5
    elif dtype is DataType.Double:
        rtol, atol = 1e-12, 1e-12
    else:  # a float differing by an ulp may round to the neighbouring narrow value
        rtol, atol = tolerances(dtype.torch)
    assert_close(z, rz, what="normal", rtol=rtol, atol=atol * 2.0)
    assert_close(n, rn, what="randn_like", rtol=rtol, atol=atol)
    assert abs(z.double().mean().item() - 0.5) < 0.05 and abs(z.double().std().item() - 2.0) < 0.05


def test_unseeded_runs_differ_repeat_after_manual_seed_and_replay():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        a = fd.ops.segment_set(fd.ops.add(t, fd.ops.rand_like(t)))  # two segments, one draw
        fd.add_output(a)
        fd.add_output(fd.ops.mul(fd.ops.rand_like(t), a))
        fd.add_output(fd.ops.randn_like(t))
    x = torch.randn(129, 1000, device="cuda")
    gen = torch.cuda.default_generators[x.device.index or 0]
    torch.manual_seed(0)
    states = philox.generator_states([x])
    before = gen.get_offset()
    a1, b1, n1 = fd.execute([x])
    _all_kernels(fd)
    assert gen.get_offset() > before  # the generator advanced past the counters we used
    with philox.replaying(states):
        ra, rb, rn = run_reference(fd.fusion, [x])
    assert torch.equal(a1, ra) and torch.equal(b1, rb)
    assert_close(n1, rn, what="randn_like", rtol=1e-5, atol=1e-5)
    a2, b2, n2 = fd.execute([x])
    assert not torch.equal(a1, a2) and not torch.equal(n1, n2)
    assert not torch.allclose(a1 - x, b1 / a1, atol=1e-2)  # two unseeded ops: two streams
    torch.manual_seed(0)
    a3, b3, n3 = fd.execute([x])
    assert torch.equal(a1, a3) and torch.equal(b1, b3) and torch.equal(n1, n3)
    fd.validate([x])
