"""The reference executor on CUDA tensors: results on the GPU match the same fusion on CPU
and eager PyTorch; inputs on mixed devices are rejected by name."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.examples.rmsnorm_backward import eager_reference, make_inputs, rmsnorm_backward
from fuser.runtime.binding import InputError
from fuser.runtime.tolerance import assert_close

pytestmark = pytest.mark.gpu


def test_seed001_on_cuda_matches_eager():
    with FusionDefinition() as fd:
        rmsnorm_backward(fd)
    inputs = make_inputs("cuda")
    outs = fd.execute(inputs)
    assert all(o.is_cuda for o in outs)
    for k, (got, want) in enumerate(zip(outs, eager_reference(inputs))):
        assert_close(got, want, what=f"output {k}")


@pytest.mark.parametrize("dtype", [DataType.Half, DataType.BFloat16, DataType.Float, DataType.Double])
def test_pointwise_and_reduction_on_cuda_match_cpu(dtype):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)
        t1 = fd.define_tensor(shape=[1, -1], contiguity=[None, True], dtype=dtype)
        y = fd.ops.tanh(fd.ops.add(t0, t1)) * 0.5
        fd.add_output(y)
        fd.add_output(fd.ops.sum(y, dims=[0]))
    x = torch.randn(127, 1025, dtype=dtype.torch)
    b = torch.randn(1, 1025, dtype=dtype.torch)
    gpu = fd.execute([x.cuda(), b.cuda()])
    cpu = fd.execute([x, b])
    for k, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.is_cuda
        assert_close(g.cpu(), c, what=f"output {k}", rtol=2e-2 if dtype.is_reduced_float else 1e-4, atol=2e-2 if dtype.is_reduced_float else 1e-4)


def test_factories_follow_the_inputs_device():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=True)
        fd.add_output(fd.ops.add(t0, fd.ops.iota(t0.size(0), dtype=DataType.Float)))
    x = torch.randn(9, device="cuda")
    (out,) = fd.execute([x])
    assert out.is_cuda
    torch.testing.assert_close(out, x + torch.arange(9, device="cuda", dtype=torch.float32))


def test_mixed_devices_are_rejected_naming_the_input():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True)
        b = fd.define_tensor(shape=[-1], contiguity=True)
        fd.add_output(fd.ops.add(a, b))
    with pytest.raises(InputError, match=r"input 1 \(T1\)"):
        fd.execute([torch.randn(4, device="cuda"), torch.randn(4)])
