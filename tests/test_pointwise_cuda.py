"""Generated pointwise kernels on the GPU: each case runs through fd.execute (a kernel,
not the reference executor: last_cuda_code proves it) on fresh inputs with outputs
poisoned first, and matches the reference executor on the same inputs."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime import kernels as kernels_mod
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from pointwise_cases import CASES

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    real = kernels_mod.PointwiseKernel.allocate_outputs

    def poisoned(self):
        outs = real(self)
        for t in outs:
            base = t if t.stride() == tuple(t.contiguous().stride()) else t
            if base.dtype.is_floating_point:
                base.fill_(float("nan")) if base.numel() and 0 not in base.stride() else None
            elif base.numel() and 0 not in base.stride():
                base.fill_(-7 if base.dtype is not torch.bool else True)
        return outs

    monkeypatch.setattr(kernels_mod.PointwiseKernel, "allocate_outputs", poisoned)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pointwise_kernel_matches_reference(case):
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    with FusionDefinition() as fd:
        case.build(fd)
    inputs = case.inputs("cuda")
    got = fd.execute(inputs)
    if not case.name.endswith("_empty"):  # an empty output needs no kernel (no_op)
        assert "fuser_pointwise" in fd.last_cuda_code()
    want = run_reference(fd.fusion, inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{case.name} output {k}")
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
