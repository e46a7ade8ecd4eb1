"""Generated resize kernels (slice, pad, cat) and reshapes inside pointwise kernels on the
GPU: each case runs through fd.execute as generated kernels only (no segment falls back to
the reference executor) on fresh inputs with outputs poisoned first, and matches the
reference executor; seed 002's RoPE forward and backward at a reduced and at the seed's
shape likewise."""
import pytest
import torch

from fuser import FusionDefinition
from fuser.examples import rope
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from resize_cases import CASES

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def poisoned_outputs(poisoned_kernel_outputs):
    """Every kernel output poisoned before the launch (conftest)."""


def _ran(fd) -> list[tuple[str, bool]]:
    """(scheduler, ran a generated kernel) for each segment of the last execute of `fd`."""
    return [(str(getattr(r.group.scheduler, "value", r.group.scheduler)), bool(r.kernel))
            for r in fd._entry.last_runner.runs]


def _check(fd, inputs, what):
    """fd's outputs against the reference executor; every segment ran a generated kernel
    (none fell back to the reference executor)."""
    got = fd.execute(inputs)
    ran = _ran(fd)
    assert ran and all(k for _, k in ran), f"{what}: a segment is not a generated kernel: {ran}"
    want = run_reference(fd.fusion, inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what} output {k}"
        assert_close(g, w, what=f"{what} output {k}")
    return got


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resize_kernel_matches_reference(case):
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    with FusionDefinition() as fd:
        case.build(fd)
    inputs = case.inputs("cuda")
    got = _check(fd, inputs, case.name)
    assert "fuser_pointwise" in fd.last_cuda_code()
    again = fd.execute(inputs)  # the cached kernels give the same results
    for g, a in zip(got, again):
        assert torch.equal(g, a)


@pytest.mark.parametrize("kind", ["fwd", "bwd"])
def test_rope_seed_shape_matches_eager(kind):
    """Seed 002's RoPE at [1, 32, 8192, 128]: generated kernels only, equal to the
    reference executor and close to LitGPT's eager math."""
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    build = rope.rope_forward if kind == "fwd" else rope.rope_backward
    make = rope.make_forward_inputs if kind == "fwd" else rope.make_backward_inputs
    eager = rope.eager_forward if kind == "fwd" else rope.eager_backward
    with FusionDefinition() as fd:
        build(fd)
    inputs = make("cuda")
    got = _check(fd, inputs, f"rope_{kind}")
    for g, w in zip(got, eager(inputs)):
        assert g.shape == w.shape
        torch.testing.assert_close(g.float(), w.float(), rtol=1.6e-2, atol=1e-2)
