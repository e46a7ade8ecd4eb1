"""Scatter as a generated kernel on the GPU: every case of scatter_cases runs through
fd.execute as one `greedy` segment that ran its generated kernel (not the reference), on
fresh inputs with outputs poisoned first, and matches the reference executor (torch.scatter,
run on the same inputs copied to the CPU); out-of-range indices raise an IndexError naming
scatter after the launch and the next launch still works; torch's size rule is checked
before the launch; large scatters run on a grid capped at the blocks the GPU holds."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.cli.bench import fuser_segments
from fuser.runtime.index_check import IndexOutOfRangeError
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from indexing_cases import on_cpu as _cpu, rand
from scatter_cases import CASES, any_index, unique_index

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def poisoned_outputs(poisoned_kernel_outputs):
    """Every kernel output poisoned before the launch (conftest)."""


def _check(fd, inputs, got, what):
    (want,) = run_reference(fd.fusion, _cpu(inputs))
    (g,) = got
    assert g.device.type == "cuda" and g.shape == want.shape and g.dtype == want.dtype, what
    # a scatter moves values (the producers' math is the reference's, in the same types)
    assert torch.equal(g.cpu(), want), what


def _ran_a_scatter_kernel(fd, n=1):
    assert fuser_segments(fd) == [("greedy", True)] * n
    assert fd.last_cuda_code().count("fuser_scatter(") == n


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scatter_kernel_matches_reference(case):
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    inputs = case.inputs("cuda")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    got = fd.execute(inputs)
    _ran_a_scatter_kernel(fd)
    _check(fd, inputs, got, case.name)
    # fresh values of the same signature (new indices too) through the same kernel
    fresh = case.inputs("cuda")
    _check(fd, fresh, fd.execute(fresh), f"{case.name} (fresh inputs)")
    _ran_a_scatter_kernel(fd)


def _fusion(dim=1, index_dtype=DataType.Int):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=index_dtype)
        s = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.scatter(x, i, s, dim))
    return fd


@pytest.mark.parametrize("index_dtype", [DataType.Int, DataType.Int32], ids=["int64", "int32"])
def test_out_of_range_index_raises_and_the_next_launch_works(index_dtype):
    pytest.importorskip("pycuda")
    fd = _fusion(1, index_dtype)
    x, s = rand(6, 10, device="cuda"), rand(6, 4, device="cuda")
    good = unique_index(10, (6, 4), 1, dtype=index_dtype.torch, device="cuda")
    for bad_value in (10, -1, 12345):  # torch.scatter takes no negative index
        bad = good.clone()
        bad[4, 2] = bad_value
        with pytest.raises(IndexOutOfRangeError, match=rf"scatter: index {bad_value} is out of bounds for "
                                                       r"dimension 1 .*size 10"):
            fd.execute([x, bad, s])
        (out,) = fd.execute([x, good, s])  # same kernel and flag: the error does not stick
        assert torch.equal(out, torch.scatter(x, 1, good.long(), s))
    _ran_a_scatter_kernel(fd)
    torch.cuda.synchronize()  # the context is intact: nothing written out of bounds


def test_size_rule_raises_before_the_launch():
    pytest.importorskip("pycuda")
    fd = _fusion(0)
    x = rand(8, 6, device="cuda")
    with pytest.raises(RuntimeError, match=r"scatter: the index has size 7 in dimension 1"):
        fd.execute([x, torch.zeros(2, 7, dtype=torch.int64, device="cuda"), rand(2, 7, device="cuda")])
    with pytest.raises(RuntimeError, match=r"scatter: the index has size 3 in dimension 0, larger than .*'s 2"):
        fd.execute([x, torch.zeros(3, 6, dtype=torch.int64, device="cuda"), rand(2, 6, device="cuda")])


def test_empty_scattered_axis_raises_for_any_index():
    pytest.importorskip("pycuda")
    fd = _fusion(0)
    with pytest.raises(IndexError, match=r"scatter: index 0 is out of bounds for dimension 0 .*an empty dimension"):
        fd.execute([torch.empty(0, 5, device="cuda"), torch.zeros(1, 5, dtype=torch.int64, device="cuda"),
                    rand(1, 5, device="cuda")])


def test_empty_arg_and_index():
    pytest.importorskip("pycuda")
    fd = _fusion(1)
    (out,) = fd.execute([torch.empty(0, 5, device="cuda"), torch.empty(0, 3, dtype=torch.int64, device="cuda"),
                         torch.empty(0, 3, device="cuda")])
    assert out.shape == (0, 5)


def test_large_scatters_on_a_capped_grid():
    """More elements than the resident threads: every block strides over several rounds of
    the copy and of the writes."""
    pytest.importorskip("pycuda")
    torch.manual_seed(1)
    fd = _fusion(1)
    x, s = rand(3000, 1537, device="cuda"), rand(3000, 701, device="cuda")
    i = unique_index(1537, (3000, 701), 1, device="cuda")
    (out,) = fd.execute([x, i, s])
    _ran_a_scatter_kernel(fd)
    assert torch.equal(out, torch.scatter(x, 1, i, s))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        j = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(t, j, -2.5, 0))
    x = rand(2048, 4096, dtype=torch.bfloat16, device="cuda")
    j = any_index(2048, (3000, 4096), device="cuda")  # repeats: the same value lands
    (out,) = fd.execute([x, j])
    _ran_a_scatter_kernel(fd)
    assert torch.equal(out, torch.scatter(x, 0, j, -2.5))


def test_scatter_and_its_consumer_are_two_kernels():
    pytest.importorskip("pycuda")
    x, s = rand(20, 30, device="cuda"), rand(20, 10, device="cuda")
    i = unique_index(30, (20, 10), 1, device="cuda")
    with FusionDefinition() as fd:
        tx, ti, ts = fd.from_pytorch(x), fd.from_pytorch(i), fd.from_pytorch(s)
        fd.add_output(fd.ops.relu(fd.ops.add(fd.ops.scatter(tx, ti, ts, 1), tx)))
    (out,) = fd.execute([x, i, s])
    assert fuser_segments(fd) == [("greedy", True), ("pointwise", True)]
    assert torch.equal(out, torch.relu(torch.scatter(x, 1, i, s) + x))


def test_scatter_on_a_side_stream():
    pytest.importorskip("pycuda")
    fd = _fusion(0)
    x, s = rand(50, 7, device="cuda"), rand(30, 7, device="cuda")
    i = unique_index(50, (30, 7), 0, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        (out,) = fd.execute([x, i, s])
        (again,) = fd.execute([x, i, s])
    side.synchronize()
    assert torch.equal(out, torch.scatter(x, 0, i, s)) and torch.equal(again, out)


@pytest.mark.parametrize("expanded", [True, False], ids=["expanded_input", "broadcast_in_fusion"])
def test_scatter_with_broadcast_index_then_ops_over_every_row(expanded):
    """An index broadcast along the rows (a stride-0 input, or broadcast in the fusion):
    every row writes its src at the same positions; an add of a full tensor and sums over
    and within the rows read every row of the result (generated kernels, against torch)."""
    pytest.importorskip("pycuda")
    x, src, y = rand(300, 200, device="cuda"), rand(300, 90, device="cuda"), rand(300, 200, device="cuda")
    positions = unique_index(200, (90,), 0, device="cuda")
    index = positions[None].expand(300, 90) if expanded else positions
    with FusionDefinition() as fd:
        t, i, s, u = (fd.from_pytorch(v) for v in (x, index, src, y))
        if not expanded:
            i = fd.ops.broadcast_in_dim(i, shape=[fd.ops.size(t, 0), fd.ops.size(i, 0)], broadcast_dims=[1])
        out = fd.ops.scatter(t, i, s, 1)
        for o in (fd.ops.add(out, u), fd.ops.sum(out, [0]), fd.ops.sum(out, [1])):
            fd.add_output(o)
    got = fd.execute([x, index, src, y])
    segments = fuser_segments(fd)
    assert ("greedy", True) in segments and all(generated for _, generated in segments), segments
    want = torch.scatter(x, 1, positions.expand(300, 90), src)
    for g, w, what in zip(got, (want + y, want.sum(0), want.sum(1)), ("add", "sum over rows", "row sums")):
        assert_close(g, w, what=f"scatter then {what}")


def test_float_index_out_of_range_raises_naming_the_truncated_value():
    pytest.importorskip("pycuda")
    fd = _fusion(1, DataType.Float)
    x, s = rand(6, 10, device="cuda"), rand(6, 4, device="cuda")
    good = unique_index(10, (6, 4), 1, device="cuda").float() + 0.5
    bad = good.clone()
    bad[4, 2] = 10.5
    with pytest.raises(IndexOutOfRangeError, match=r"scatter: index 10 is out of bounds for dimension 1 .*size 10"):
        fd.execute([x, bad, s])
    (out,) = fd.execute([x, good, s])
    _ran_a_scatter_kernel(fd)
    assert torch.equal(out, torch.scatter(x, 1, good.long(), s))
