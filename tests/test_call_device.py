"""One device per call, from binding to launch: a segment with no tensor inputs allocates,
compiles and launches on the call's device (`execute(device=...)`, an int being a CUDA
index as in nvFuser), and a kernel refuses pointer arguments on another device."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.binding import bind_inputs
from fuser.runtime.tolerance import assert_close


def _factories(fd: FusionDefinition) -> None:
    n = fd.define_scalar(7, dtype=DataType.Int)
    i = fd.ops.iota(n, fd.define_scalar(2, dtype=DataType.Int), fd.define_scalar(3, dtype=DataType.Int), DataType.Int)
    f = fd.ops.full([5, 7], fd.define_scalar(1.5, dtype=DataType.Double), DataType.Float)
    fd.add_output(fd.ops.add(fd.ops.cast(i, DataType.Float), f))
    fd.add_output(i)


def _factory_refs(device):
    i = torch.arange(2, 2 + 3 * 7, 3, device=device)
    return [i.float() + 1.5 * torch.ones(5, 7, device=device), i]


def test_binding_device_without_tensors_follows_request():
    with FusionDefinition() as fd:
        _factories(fd)
    assert bind_inputs(fd._entry.fusion, [], device=torch.device("cpu")).device == torch.device("cpu")
    assert bind_inputs(fd._entry.fusion, [], device=torch.device("meta")).device == torch.device("meta")


def test_factory_fusion_runs_on_cpu_when_asked():
    with FusionDefinition() as fd:
        _factories(fd)
    outs = fd.execute([], device="cpu")
    for got, want in zip(outs, _factory_refs("cpu")):
        assert got.device.type == "cpu"
        assert_close(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("device", [0, "cuda", "cuda:0", torch.device("cuda", 0)])
def test_factory_only_fusion_runs_on_requested_cuda_device(device):
    pytest.importorskip("pycuda")
    with FusionDefinition() as fd:
        _factories(fd)
    outs = fd.execute([], device=device)
    torch.cuda.synchronize()
    for got, want in zip(outs, _factory_refs("cuda")):
        assert got.device == torch.device("cuda", 0)
        assert_close(got, want)
    assert fd.last_cuda_code()  # a generated kernel ran, not the reference executor


@pytest.mark.gpu
def test_factory_only_fusion_defaults_to_current_cuda_device():
    pytest.importorskip("pycuda")
    with FusionDefinition() as fd:
        _factories(fd)
    outs = fd.execute([])
    for got, want in zip(outs, _factory_refs("cuda")):
        assert got.is_cuda
        assert_close(got, want)


@pytest.mark.gpu
def test_factory_segment_beside_tensor_segment_is_on_the_tensors_device():
    """A factory cut off into its own segment (segment_set) allocates where the call runs."""
    pytest.importorskip("pycuda")
    x = torch.randn(5, 7, device="cuda")
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        f = fd.ops.full([5, 7], fd.define_scalar(2.0, dtype=DataType.Double), DataType.Float)
        g = fd.ops.segment_set(fd.ops.mul(f, f))
        fd.add_output(fd.ops.add(t0, g))
    (out,) = fd.execute([x])
    assert out.is_cuda
    assert_close(out, x + 4.0)


@pytest.mark.gpu
def test_kernel_refuses_a_pointer_on_another_device():
    pytest.importorskip("pycuda")
    from fuser.kernel import prepare_pointwise

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(t0))
    x = torch.randn(8, device="cuda")
    k = prepare_pointwise(fd._entry.fusion, [x])
    k.check_devices([x])
    with pytest.raises(RuntimeError, match=r"argument 0 .* is on cpu, but the kernel runs on cuda:0"):
        k.check_devices([x.cpu()])
