"""Reshapes inside reduction and persistent kernels on the GPU (tests/reshape_reduction_cases.py,
plus larger GPU-only shapes): each case runs through fd.execute with every output a
generated kernel allocates poisoned first (conftest's `poisoned_kernel_outputs`), matches
the reference executor on the same inputs and eager PyTorch (dtype-aware tolerances), and
every segment ran as a generated kernel (none fell back to the reference executor); then
again on new inputs through the cached kernels."""
from __future__ import annotations

import hashlib
import os

import pytest
import torch

from fuser import FusionDefinition
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from reshape_reduction_cases import CASES, LARGE_CASES

gpu = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _seed(request):
    """Fresh random inputs per test, reproducible from its id (FUSER_TEST_SEED varies them)."""
    salt = os.environ.get("FUSER_TEST_SEED", "0")
    digest = hashlib.sha256(f"{salt}:{request.node.nodeid}".encode()).digest()
    torch.manual_seed(int.from_bytes(digest[:8], "little"))


def ran_segments(fd) -> list[tuple[str, bool]]:
    """(scheduler, ran a generated kernel) for each segment of the last execute of `fd`."""
    return [(str(r.group.scheduler), bool(r.kernel)) for r in fd._entry.last_runner.runs]


def _compare(case, got, want, what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        rtol, atol = case.tolerance(k, w)
        assert_close(g, w, what=f"{what} output {k}", rtol=rtol, atol=atol)


def _check(case) -> None:
    pytest.importorskip("pycuda")
    for call in ("first call", "second call (cached kernels)"):
        inputs = case.inputs("cuda")
        with FusionDefinition() as fd:
            case.build(fd, inputs)
        got = fd.execute(inputs)
        segs = ran_segments(fd)
        what = f"{case.name} {call} {segs}"
        _compare(case, got, run_reference(fd.fusion, inputs), f"{what} vs reference")
        _compare(case, got, case.eager(*inputs), f"{what} vs eager")
        assert all(ran for _, ran in segs), f"{what}: a segment ran on the reference executor"
        assert tuple(s for s, _ in segs) == case.schedulers, what


@gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reshape_reduction_kernel_matches_reference(case, poisoned_kernel_outputs):
    _check(case)


@gpu
@pytest.mark.parametrize("case", LARGE_CASES, ids=[c.name for c in LARGE_CASES])
def test_reshape_reduction_kernel_matches_reference_large(case, poisoned_kernel_outputs):
    _check(case)
