"""Four random fusions whose GPU outputs an independent fuzzer found wrong (H200, 46981ae),
and one the CPU kernel simulator found (case_sim23030_1658): slices, pads, cats and
reshapes of broadcast values, var_means, reductions of broadcast values, permuted, sliced
and expanded inputs (tests/fixtures/gpu_mismatches/, nvFuser's repro format with a header
describing each input). Their causes: a pointwise kernel with no bounds predicate over a
reference axis that a reshape's split defines (the threads past its extent wrote the next
rows), an output reached through reshapes of broadcasts written only by the threads at
index 0 of axes its indices do depend on, vectors straddling a width-1 slice's stop (the
misaligned stores that killed the context on an interleaved RoPE), and an input's
broadcast axis read at two positions, which joined the reference's 16-axis to its trailing
broadcast, so that the reference output was written only at index 0 of the 16-axis.

On the CPU every generated kernel of each case is simulated (out-of-bounds and misaligned
accesses fault, outputs start as NaN) against the reference executor; on the GPU each case
runs and matches eager PyTorch."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

CASES = sorted((Path(__file__).parent / "fixtures" / "gpu_mismatches").glob("case_*.py"))
_INPUT = re.compile(r"# input \d+: (\w+) \(([\d, ]*)\) stride \(([\d, ]*)\) torch\.(\w+)")


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def load(path: Path, device: str = "cpu", seed: int = 0) -> tuple[FusionDefinition, list[torch.Tensor]]:
    """The case's fusion and inputs laid out as its header says (random values in [-5, 5])."""
    text = path.read_text()
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, ns)  # noqa: S102 - the fixture is a repro script of ours
    (define,) = [v for k, v in ns.items() if k.startswith("nvfuser_fusion")]
    with FusionDefinition() as fd:
        define(fd)
    g = torch.Generator().manual_seed(seed)
    inputs = []
    for m in _INPUT.finditer(text):
        shape, stride, dtype = _ints(m.group(2)), _ints(m.group(3)), getattr(torch, m.group(4))
        storage = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        flat = torch.randn(storage, generator=g).clamp(-5, 5).to(dtype).to(device)
        inputs.append(flat.as_strided(shape, stride))
    assert inputs, f"{path.name}: no inputs described"
    return fd, inputs


def _tolerance(t: torch.Tensor) -> tuple[float, float]:
    # the reference and the kernels compute the same float ops; reductions sum in another
    # order (up to 4097 terms of |x| <= ~30): far below the differences found (0.1 to 5)
    if t.dtype in (torch.float16, torch.bfloat16):
        return 2e-2, 2e-2
    return 1e-3, 1e-3


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case_kernels_simulate_to_the_reference(path):
    from kernel_sim import simulate_fusion

    fd, inputs = load(path)
    report = simulate_fusion(fd, inputs, max_threads=None)  # 1.6M elements: ~10 s
    assert report.simulated > 0 and not report.skipped, report
    assert report.ok, report


@pytest.mark.gpu
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case_matches_eager_on_the_gpu(path):
    fd, inputs = load(path, "cuda")
    got = fd.execute(inputs)
    ran = [s.kernel for s in fd.last_segments() if s.generates_kernel]
    assert ran and all(ran), f"{path.name}: a segment fell back to the reference executor"
    want = run_reference(fd.fusion, inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        rtol, atol = _tolerance(w)
        assert_close(g, w, what=f"{path.stem} output {k}", rtol=rtol, atol=atol)
