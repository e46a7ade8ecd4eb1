"""Generated pointwise kernels on the GPU: each case runs through fd.execute (a kernel,
not the reference executor: last_cuda_code proves it) on fresh inputs with outputs
poisoned first, and matches the reference executor on the same inputs."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.ir import from_torch
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from pointwise_cases import CASES

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def poisoned_outputs(poisoned_kernel_outputs):
    """Every kernel output poisoned before the launch (conftest)."""


def check_against_reference(case) -> tuple[FusionDefinition, list, list]:
    """Run `case` on fresh CUDA inputs through a generated kernel (an empty output needs
    none: no_op) and compare with the reference executor; (fd, inputs, outputs)."""
    torch.manual_seed(0)
    with FusionDefinition() as fd:
        case.build(fd)
    inputs = case.inputs("cuda")
    got = fd.execute(inputs)
    if not case.name.endswith("_empty"):
        assert "fuser_pointwise" in fd.last_cuda_code()
    want = run_reference(fd.fusion, inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{case.name} output {k}")
    return fd, inputs, got


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pointwise_kernel_matches_reference(case):
    pytest.importorskip("pycuda")
    fd, inputs, got = check_against_reference(case)
    # a second call takes the cached kernel and gives the same results
    again = fd.execute(inputs)
    for g, a in zip(got, again):
        assert torch.equal(g, a) or (g.isnan() == a.isnan()).all()


def test_int64_indexing_past_2_31_elements():
    pytest.importorskip("pycuda")
    n = 2**31 + 5
    if torch.cuda.get_device_properties(0).total_memory < 8 * n:
        pytest.skip("needs 8 GB free")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Bool)
        fd.add_output(fd.ops.logical_not(x))
    x = torch.rand(n, device="cuda") > 0.5
    (out,) = fd.execute([x])
    assert "typedef long long nvfuser_index_t" in fd.last_cuda_code()
    assert torch.equal(out[-10:], ~x[-10:]) and torch.equal(out, ~x)


def test_cpu_scalar_tensor_beside_cuda_tensors():
    # a 0-dim CPU tensor (is_cpu=True) is read on the host: that segment runs on the
    # reference executor, and the result is still right
    pytest.importorskip("pycuda")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        s = fd.define_tensor(shape=[], contiguity=[], is_cpu=True)
        fd.add_output(fd.ops.mul(x, s))
    x = torch.randn(33, 65, device="cuda")
    s = torch.tensor(2.5)
    (out,) = fd.execute([x, s])
    assert out.device.type == "cuda" and torch.allclose(out, x * 2.5)


def test_new_sizes_reuse_the_loaded_kernel():
    pytest.importorskip("pycuda")
    from fuser.kernel import generated as kernels

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.exp(x))
    fd.execute([torch.randn(64, 128, device="cuda")])
    loaded = len(kernels._loaded)
    y = torch.randn(96, 256, device="cuda")
    (out,) = fd.execute([y])  # same heuristics: the same source, so the same loaded module
    assert len(kernels._loaded) == loaded
    assert torch.allclose(out, torch.exp(y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("exponent", [2.0, 3.0, 2.5, -2.0, "runtime 3"])
def test_pow_matches_eager_at_the_exponents_aten_multiplies_out(dtype, exponent):
    """pow by 2 and 3 is a product, as ATen's pow kernel computes it, when the exponent is
    a literal or a runtime scalar; other exponents go through powf. Against eager PyTorch,
    on values of both signs (negative bases to a non-integer power give NaN both ways)."""
    pytest.importorskip("pycuda")
    torch.manual_seed(3)
    runtime = isinstance(exponent, str)
    e = 3.0 if runtime else exponent
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=from_torch(dtype))
        s = fd.define_scalar(None, dtype=DataType.Double) if runtime else fd.define_scalar(e, dtype=DataType.Double)
        fd.add_output(fd.ops.pow(x, s))
    xs = (torch.randn(257, 1031, device="cuda", dtype=torch.float32) * 3).to(dtype)
    (got,) = fd.execute([xs, e] if runtime else [xs])
    assert "fuser_pointwise" in fd.last_cuda_code()
    want = torch.pow(xs, e)
    assert_close(got, want, what=f"pow {exponent}")
    assert torch.equal(got.isnan(), want.isnan())
