"""Index ops as generated kernels on the GPU: every case of indexing_cases runs through
fd.execute (a kernel: last_cuda_code proves it) on fresh inputs with outputs poisoned
first and matches the reference executor (run on the same inputs copied to the CPU, where
PyTorch raises instead of asserting on the device), and the cases with eager PyTorch's
outputs (broadcast, expanded, computed and floating-point indices; Thunder's
cross-entropy) match those; out-of-range indices raise an IndexError naming the op after
the launch, and the next launch still works."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.cli.bench import fuser_segments
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from indexing_cases import CASES, cross_entropy, indices, on_cpu as _cpu, rand, targets

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def poisoned_outputs(poisoned_kernel_outputs):
    """Every kernel output poisoned before the launch (conftest)."""


def _check(fd, inputs, got, what):
    want = run_reference(fd.fusion, _cpu(inputs))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.device.type == "cuda"
        assert_close(g, w, what=f"{what} output {k}")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_indexing_kernel_matches_reference(case):
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    inputs = case.inputs("cuda")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    got = fd.execute(inputs)
    if case.kernel:
        assert case.kind in fd.last_cuda_code()
    _check(fd, inputs, got, case.name)
    # a second call takes the cached kernel and gives the same results
    again = fd.execute(inputs)
    for g, a in zip(got, again):
        assert torch.equal(g, a) or (g.isnan() == a.isnan()).all()
    # fresh values of the same signature (new indices too) through the same kernel
    fresh = case.inputs("cuda")
    _check(fd, fresh, fd.execute(fresh), f"{case.name} (fresh inputs)")


def _embedding_fusion(index_dtype=DataType.Int):
    with FusionDefinition() as fd:
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=index_dtype)
        e = fd.ops.cast(fd.ops.index_select(w, i, 0), DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(e, 2.0), DataType.BFloat16))
    return fd


def test_embedding_at_model_size_is_one_kernel():
    pytest.importorskip("pycuda")
    fd = _embedding_fusion()
    w = rand(50257, 768, dtype=torch.bfloat16, device="cuda")
    i = indices(50257, (4 * 1023,), device="cuda")
    (out,) = fd.execute([w, i])
    assert fd.last_cuda_code().count("__global__") == 1
    assert torch.equal(out, (w[i].float() * 2.0).to(torch.bfloat16))


@pytest.mark.parametrize("index_dtype", [DataType.Int, DataType.Int32], ids=["int64", "int32"])
def test_out_of_range_index_select_raises_and_the_next_launch_works(index_dtype):
    pytest.importorskip("pycuda")
    fd = _embedding_fusion(index_dtype)
    tdt = index_dtype.torch
    w = rand(10, 16, dtype=torch.bfloat16, device="cuda")
    good = torch.tensor([0, 9, 3, 3, 7], dtype=tdt, device="cuda")
    for bad_value in (10, -1, 12345):
        bad = good.clone()
        bad[2] = bad_value
        with pytest.raises(IndexError, match=rf"index_select: index {bad_value} is out of bounds for dimension 0 "
                                             r".*size 10"):
            fd.execute([w, bad])
        # same signature, same kernel and flag: the error does not stick
        (out,) = fd.execute([w, good])
        assert torch.equal(out, (w[good.long()].float() * 2.0).to(torch.bfloat16))
    torch.cuda.synchronize()  # the context is intact: nothing read out of bounds


def test_out_of_range_gather_and_take_along_axis_raise():
    pytest.importorskip("pycuda")
    x = rand(4, 6, device="cuda")
    for op in ("gather", "take_along_axis"):
        with FusionDefinition() as fd:
            t = fd.from_pytorch(x)
            i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
            fd.add_output(fd.ops.exp(getattr(fd.ops, op)(t, i, 1)))
        good = indices(6, (4, 5), device="cuda")
        bad = good.clone()
        bad[3, 4] = 6
        with pytest.raises(IndexError, match=rf"{op}: index 6 is out of bounds for dimension 1 .*size 6"):
            fd.execute([x, bad])
        bad[3, 4] = -2
        with pytest.raises(IndexError, match=rf"{op}: index -2 is out of bounds"):
            fd.execute([x, bad])
        (out,) = fd.execute([x, good])
        assert_close(out, torch.exp(torch.gather(x, 1, good)), what=op)


def test_out_of_range_select_raises_before_the_launch():
    pytest.importorskip("pycuda")
    x = rand(5, 3, device="cuda")
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        k = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.select(t, k, 0))
    for bad in (5, -6):
        with pytest.raises(IndexError, match=rf"select: index {bad} is out of bounds for dimension 0"):
            fd.execute([x, bad])
    for ok in (-5, -1, 0, 4):
        (out,) = fd.execute([x, ok])
        assert torch.equal(out, x[ok])
    assert "fuser_pointwise" in fd.last_cuda_code()
    assert "index_error" not in fd.last_cuda_code()  # no flag: the host checked


def test_out_of_range_on_a_side_stream_then_the_same_stream_works():
    pytest.importorskip("pycuda")
    fd = _embedding_fusion()
    w = rand(33, 8, dtype=torch.bfloat16, device="cuda")
    good = indices(33, (40,), device="cuda")
    bad = good.clone()
    bad[-1] = 33
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(side):
        with pytest.raises(IndexError, match="index 33 is out of bounds"):
            fd.execute([w, bad])
        (out,) = fd.execute([w, good])
    side.synchronize()
    assert torch.equal(out, (w[good].float() * 2.0).to(torch.bfloat16))


def test_empty_lookup_axis_raises_for_any_index():
    pytest.importorskip("pycuda")
    fd = _embedding_fusion()
    w = torch.empty(0, 8, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(IndexError, match="index 0 is out of bounds for dimension 0 .*an empty dimension"):
        fd.execute([w, torch.zeros(3, dtype=torch.int64, device="cuda")])


def test_zero_size_index_tensors():
    pytest.importorskip("pycuda")
    x = rand(6, 5, device="cuda")
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        j = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.index_select(t, i, 0), 3.0))
        fd.add_output(fd.ops.gather(t, j, 1))
    i = torch.empty(0, dtype=torch.int64, device="cuda")
    for j in (torch.empty(0, 5, dtype=torch.int64, device="cuda"), torch.empty(6, 0, dtype=torch.int64, device="cuda")):
        a, b = fd.execute([x, i, j])
        assert a.shape == (0, 5) and b.shape == j.shape
    # a zero-size index beside a non-empty one: the kernel runs and the empty output is fine
    j = indices(5, (4, 7), device="cuda")
    a, b = fd.execute([x, i, j])
    assert a.shape == (0, 5)
    assert torch.equal(b, torch.gather(x, 1, j))


_WANT = [c for c in CASES if c.want is not None]


@pytest.mark.parametrize("case", _WANT, ids=[c.name for c in _WANT])
def test_indexing_kernels_match_torch(case):
    """Broadcast, expanded and computed indices read by ops over every row (issue 34),
    floating-point indices, Thunder's cross-entropy: every segment runs its generated
    kernel, and the outputs are eager PyTorch's on the GPU, on two sets of fresh inputs."""
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    inputs = case.inputs("cuda")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    for k, xs in enumerate((inputs, case.inputs("cuda"))):
        got = fd.execute(xs)
        segments = fuser_segments(fd)
        assert segments and all(generated for _, generated in segments), (case.name, segments)
        assert case.kind in fd.last_cuda_code()
        want = case.want(*xs)
        assert len(got) == len(want)
        for n, (g, w) in enumerate(zip(got, want)):
            assert g.device.type == "cuda"
            assert_close(g, w, what=f"{case.name} output {n} (inputs {k})")


@pytest.mark.parametrize("ignore_index", [-100, -10])
def test_cross_entropy_as_thunder_emits_it_at_model_size(ignore_index):
    """Thunder's nvFuser cross_entropy (a Float index into take_along_axis) at an LLM's
    vocabulary: generated kernels, F.cross_entropy's loss."""
    pytest.importorskip("pycuda")
    torch.manual_seed(2)
    logits = rand(2048, 32064, device="cuda")
    target = targets(32064, 2048, ignore_index, device="cuda")
    with FusionDefinition() as fd:
        for out in cross_entropy(fd, fd.from_pytorch(logits), fd.from_pytorch(target), ignore_index):
            fd.add_output(out)
    (loss,) = fd.execute([logits, target])
    assert all(generated for _, generated in fuser_segments(fd)), fuser_segments(fd)
    assert_close(loss, torch.nn.functional.cross_entropy(logits, target, ignore_index=ignore_index), what="loss")


def test_out_of_range_float_index_raises_naming_the_truncated_value():
    pytest.importorskip("pycuda")
    x = rand(4, 6, device="cuda")
    for op in ("gather", "take_along_axis"):
        with FusionDefinition() as fd:
            t = fd.from_pytorch(x)
            i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
            fd.add_output(fd.ops.exp(getattr(fd.ops, op)(t, i, 1)))
        good = indices(6, (4, 5), device="cuda").float() + 0.75
        bad = good.clone()
        bad[3, 4] = 6.25
        with pytest.raises(IndexError, match=rf"{op}: index 6 is out of bounds for dimension 1 .*size 6"):
            fd.execute([x, bad])
        (out,) = fd.execute([x, good])
        assert fuser_segments(fd) == [("pointwise", True)]
        assert_close(out, torch.exp(torch.gather(x, 1, good.long())), what=op)


def test_take_along_axis_with_unbroadcastable_expanded_index_raises_as_torch():
    pytest.importorskip("pycuda")
    x = rand(3, 5, device="cuda")
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        i = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.take_along_axis(t, i, 1), 2.0))
    with pytest.raises(RuntimeError, match="must match the size"):
        fd.execute([x, indices(5, (1, 2), device="cuda").expand(4, 2)])
    good = indices(5, (1, 2), device="cuda").expand(3, 2)
    (out,) = fd.execute([x, good])
    assert fuser_segments(fd) == [("pointwise", True)]
    assert_close(out, torch.take_along_dim(x, good, 1) * 2.0, what="take_along_axis")


def test_grid_reduction_beside_an_index_check_on_a_fresh_stream():
    # a grid reduction's partials and the index ops' error flag, made on a stream's first
    # launch: the partials were once freed before the launch, the flag took their memory,
    # and the kernel's partials overwrote it (a spurious IndexError; GPU fuzz seed 9610 case
    # 169). Each new stream makes a new flag.
    pytest.importorskip("pycuda")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 1])  # column-major
        i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int32)
        v, m = fd.ops.var_mean(fd.ops.index_select(x, i, dim=0), dims=[1], correction=0, keepdim=False)
        fd.add_output(v)
        fd.add_output(m)
    x = rand(4097, 7, device="cuda").t()
    idx = torch.randint(0, 7, (7,), device="cuda", dtype=torch.int32)
    for _ in range(4):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            var, mean = fd.execute([x, idx])
        torch.cuda.current_stream().wait_stream(s)
        assert "semaphore" in fd.last_cuda_code() and "index_error" in fd.last_cuda_code()
        sel = x[idx.long()]
        assert_close(mean, sel.mean(1), rtol=1e-5, atol=1e-5, what="mean")
        assert_close(var, sel.var(1, correction=0), rtol=1e-4, atol=1e-4, what="var")
