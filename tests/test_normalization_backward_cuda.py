"""Backward-normalisation kernels (issue 9, item 6), on the cases of
tests/normalization_backward_cases.py: RMSNorm backward, LayerNorm backward, softmax
backward and a batch-norm-like outer persistent normalisation.

The machinery is tests/test_reduction_cuda.py's, imported (not copied): the per-test seed,
the poisoned-outputs fixture, `check_against_reference`, `ran_segments` and
`assert_kernels_ran`. Here the strict "ran as generated kernels" assertion covers every
scheduler a normalisation lands in (`NORM_KERNEL_SCHEDULERS`: reduction, inner_persistent,
outer_persistent, inner_outer_persistent); FUSER_TEST_ALLOW_REFERENCE=1 turns it into a
warning, as there.

On the GPU (`gpu`-marked, one by one; skipped without CUDA): each case runs through
fd.execute with its outputs poisoned (and every element checked written: conftest's
`kernel_writes_checked`), matches the reference executor, and again on new inputs through
the cached kernel; each RMSNorm and LayerNorm backward case is segmented as it expects
(`NormCase.expected_segments` on this device's limits: one `inner_outer_persistent` segment,
or the fallback the rule in tests/normalization_backward_cases.py names, with
inner_outer_persistent declining for the reason it names; an unexpected decline fails, it
is not skipped); a few cases match eager PyTorch's CUDA kernels; and seed 001
(fuser/examples/rmsnorm_backward.py) runs at full size against eager PyTorch in at most two
segments.

On the CPU (not gpu-marked): each small case (M * N <= 2**16) matches eager PyTorch, every
RMSNorm / LayerNorm case (at any size, on meta tensors: the same SegmentedRunner
segmentation `ran_segments` reads after an execute) is segmented as it expects on the
default planning target, and the GPU test's own path runs on CPU tensors.
"""
from __future__ import annotations

import pytest
import torch

import test_reduction_cuda as trc
from fuser import FusionDefinition
from fuser.benchmarks.fusions import reduction_tolerance
from fuser.examples.rmsnorm_backward import eager_reference, make_inputs, rmsnorm_backward
from fuser.runtime.info import runtime_info
from fuser.runtime.tolerance import assert_close
from fuser.scheduler import schedulers_for
from fuser.scheduler.runtime_info import DEFAULT_TARGET, TARGET_ENV, TARGETS, DeviceLimits

from normalization_backward_cases import (CASES, CPU_CASES, CPU_MAX_ELEMENTS, DIFFERENT_INNER_AXES, HALF_DTYPES,
                                          HALF_SHAPES, LAYOUTS, LEFT_OUT, MAX_INPUT_BYTES, NO_OUTER_REDUCTION,
                                          NORM_KERNEL_SCHEDULERS, PATTERNS, ROW_LENGTHS, ROW_TOO_LONG, ROWS, TAG,
                                          NormCase, Segmentation, make_case)

gpu = pytest.mark.gpu
check_against_reference = trc.check_against_reference
ran_segments = trc.ran_segments
assert_kernels_ran = trc.assert_kernels_ran
check_reference_path_on_cpu = trc.check_reference_path_on_cpu
# test_reduction_cuda's fixtures, used here by name: the per-test seed (autouse) and the
# poisoned kernel outputs
_seed = trc._seed
poisoned_outputs = trc.poisoned_outputs


@pytest.fixture(autouse=True)
def _norm_kernel_schedulers(monkeypatch):
    """test_reduction_cuda's strict kernel assertion, over the persistent schedulers too."""
    monkeypatch.setattr(trc, "KERNEL_SCHEDULERS", NORM_KERNEL_SCHEDULERS)


@pytest.fixture
def one_cpu_thread():
    """For the CPU tests, whose tensors are small: one intra-op thread (on a loaded 2-core
    machine the CPU suite ran 8x slower with two, waiting on the thread pool); restored
    afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ids(cases):
    return [c.name for c in cases]


# ----------------------------------------------------------------------------------------------
# segmentation: each RMSNorm / LayerNorm backward case as it expects

SEGMENTED_CASES = [c for c in CASES if c.pattern in ("rms_bwd", "ln_bwd")]


def assert_segmented_as_expected(fd, inputs, schedulers: list[str], case: NormCase, limits: DeviceLimits,
                                 what: str) -> None:
    """`schedulers` (the segmentation `fd` got for `inputs`) and inner_outer_persistent's
    answer for the whole fusion are what `case` expects on `limits`: a decline the case
    does not expect (or one for another reason) fails, as does any other segmentation."""
    want = case.expected_segments(limits)
    assert want is not None, f"{case.name}: the cases claim no segmentation for {case.pattern}"
    why = schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))["inner_outer_persistent"]
    if want.declined is None:
        assert why is None, (f"{what}: inner_outer_persistent declines the whole fusion ({why}); the case expects "
                             f"it to take it on {limits.describe()}")
    else:
        assert why is not None and want.declined in why, (
            f"{what}: inner_outer_persistent {'accepts the whole fusion' if why is None else f'declines: {why}'}; "
            f"the case expects it to decline ({want.declined!r}) on {limits.describe()}")
    assert tuple(schedulers) == want.schedulers, (
        f"{what}: segmented as {list(schedulers)}, the case expects {list(want.schedulers)} on {limits.describe()}")


def _meta(inputs):
    return [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") for x in inputs]


def _schedulers(fd, inputs) -> list[str]:
    return [str(getattr(g.scheduler, "value", g.scheduler)) for g in fd.segmented_fusion_for(inputs).groups]


@pytest.mark.usefixtures("one_cpu_thread")
@pytest.mark.parametrize("case", SEGMENTED_CASES, ids=_ids(SEGMENTED_CASES))
def test_norm_backward_is_segmented_as_expected(case, monkeypatch):
    """Every size, on meta inputs laid out as the case's (no data): the segmentation
    fd.execute would run (`segmented_fusion_for`: the SegmentedRunner whose runs
    `ran_segments` reads), on the default planning target (what a CPU or meta call plans
    for without FUSER_TARGET), is the case's expectation."""
    monkeypatch.delenv(TARGET_ENV, raising=False)
    limits = DeviceLimits.of(torch.device("meta"))
    assert limits is TARGETS[DEFAULT_TARGET]
    inputs = case.inputs("meta")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    assert_segmented_as_expected(fd, inputs, _schedulers(fd, inputs), case, limits, case.name)


@gpu
@pytest.mark.parametrize("case", SEGMENTED_CASES, ids=_ids(SEGMENTED_CASES))
def test_norm_backward_segmented_as_expected_on_gpu(case):
    """The same claim on the GPU, from the segments fd.execute ran, against the expectation
    on this device's limits (the rule depends on its register file)."""
    pytest.importorskip("pycuda")
    inputs = case.inputs("cuda")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    fd.execute(inputs)
    segs = ran_segments(fd)
    limits = DeviceLimits.of(inputs[0].device)
    assert_segmented_as_expected(fd, inputs, [s for s, _ in segs], case, limits, f"{case.name} {segs}")
    assert_kernels_ran(segs, case.name)


# ----------------------------------------------------------------------------------------------
# GPU: generated kernels against the reference executor, and against eager PyTorch


@gpu
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_norm_backward_kernel_matches_reference(case, poisoned_outputs):
    pytest.importorskip("pycuda")
    segs = check_against_reference(case, "cuda", poisoned_outputs)
    assert any(s in NORM_KERNEL_SCHEDULERS for s, _ in segs) or not case.reduces, f"{case.name}: {segs}"


EAGER_ON_GPU = ["rms_bwd_bf16_m1000_n4097", "rms_bwd_fp32_m16384_n1024", "ln_bwd_bf16_m1000_n1024",
                "ln_bwd_fp16_m16384_n4097", "softmax_bwd_bf16_m1000_n16385", "softmax_bwd_fp32_m7_n127",
                "bn_outer_fp32_m16384_n127", "bn_outer_bf16_m1000_n4097", "rms_bwd_bf16_sliced_m1000_n4097",
                "ln_bwd_fp32_expanded_params_m1000_n4097"]


@gpu
def test_norm_backward_kernels_match_eager_on_gpu():
    """A few cases against eager PyTorch's CUDA kernels too (the reference executor is the
    oracle above; this checks the oracle agrees with PyTorch)."""
    pytest.importorskip("pycuda")
    by_name = {c.name: c for c in CASES}
    for name in EAGER_ON_GPU:
        case = by_name[name]
        inputs = case.inputs("cuda")
        with FusionDefinition() as fd:
            case.build(fd, inputs)
        trc._compare(case, fd.execute(inputs), case.eager(*inputs), f"{name} vs eager on the GPU")


# ----------------------------------------------------------------------------------------------
# GPU: seed 001 (RMSNorm backward as Thunder emits it) at the report's full size

#: per output (T49, T61, T63, T67, T131; all bf16): the elements summed into it and their
#: magnitude (inputs randn). T49 = sum_1024(T3); T61 = sum_1024(T28 T3), T28 = (T6 - T4) T5
#: T0 + T1 (RMS sqrt(3)); T63 = sum_57344((1 + T2) T3) (RMS sqrt(2)); T67 =
#: sum_57344(T24 T50) (RMS 2); T131's row sums over 1024 (T18 T64, RMS 2) reach it times
#: |T5|^3 |T6 - T4| / 1024 <= 4.5^3 * 6.5 / 1024 ~ 0.6 (max |randn| over 57344 draws < 4.5),
#: so scale 1.5 > 2 * 0.6. bf16's own (rtol 1.6e-2, atol 1e-2) covers one bf16 ulp of the
#: rounded results; reduction_tolerance widens atol only for the 57344-element sums (to
#: 1.1e-2 and 1.5e-2).
SEED001_TOLERANCE = [reduction_tolerance(torch.bfloat16, n, scale)
                     for n, scale in ((1024, 1.0), (1024, 2.0), (57344, 1.5), (57344, 2.0), (1024, 1.5))]


@gpu
def test_seed001_rmsnorm_backward_full_size_on_gpu(poisoned_outputs):
    pytest.importorskip("pycuda")
    with FusionDefinition() as fd:
        rmsnorm_backward(fd)
    inputs = make_inputs("cuda")
    got = fd.execute(inputs)
    segs = ran_segments(fd)
    want = eager_reference(inputs)
    assert [tuple(o.shape) for o in got] == [(56, 1024), (56, 1024), (1024,), (1024,), (56, 1024, 1024)]
    for k, ((rtol, atol), g, w) in enumerate(zip(SEED001_TOLERANCE, got, want)):
        assert g.is_cuda and g.dtype is torch.bfloat16
        assert_close(g, w, what=f"seed 001 output {k} {segs}", rtol=rtol, atol=atol)
    # issue 3: at most two kernels, a reduction and an inner_outer_persistent one
    schedulers = [s for s, _ in segs]
    assert len(segs) <= 2 and "inner_outer_persistent" in schedulers, segs
    assert set(schedulers) <= {"reduction", "inner_outer_persistent"}, segs
    assert_kernels_ran(segs, "seed 001")


# ----------------------------------------------------------------------------------------------
# CPU: the case definitions against eager PyTorch (every execute runs the reference executor)


@pytest.mark.usefixtures("one_cpu_thread")
@pytest.mark.parametrize("case", CPU_CASES, ids=_ids(CPU_CASES))
def test_case_matches_eager_on_cpu(case):
    inputs = case.inputs("cpu")
    for x in inputs:
        assert bool((x != 0).any()), f"{case.name}: inputs must not be all zeros"
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    got = fd.execute(inputs)
    trc._compare(case, got, case.eager(*inputs), f"{case.name} vs eager")
    segs = ran_segments(fd)
    assert segs and all(not ran for _, ran in segs)  # no generated kernels on the CPU
    if case.reduces:
        assert any(s in NORM_KERNEL_SCHEDULERS for s, _ in segs), f"{case.name}: no reduction segment in {segs}"


@pytest.mark.usefixtures("one_cpu_thread")
def test_reference_check_path_on_cpu(poisoned_outputs):
    """The GPU test's own path (execute, reference, second call) on CPU tensors, where every
    segment runs on the reference executor (so no kernel assertion)."""
    names = ["rms_bwd_bf16_m7_n127", "ln_bwd_fp16_m1000_n3", "softmax_bwd_fp32_sliced_m48_n1000",
             "bn_outer_bf16_transposed_m48_n1000", "ln_bwd_fp32_expanded_grad_m48_n1000",
             "rms_bwd_fp32_expanded_params_m48_n1000", "bn_outer_fp32_m1_n127"]
    check_reference_path_on_cpu(CPU_CASES, names, poisoned_outputs)


def test_reference_comparison_can_fail():
    """A wrong dx (the rstd factor left out) fails the comparison the GPU test makes."""
    case = next(c for c in CPU_CASES if c.name == "rms_bwd_fp32_m7_n1024")
    inputs = case.inputs("cpu")
    want = case.eager(*inputs)
    wrong = [want[0] / inputs[2], want[1]]
    with pytest.raises(AssertionError, match="output 0"):
        trc._compare(case, wrong, want, "wrong")
    bf16 = next(c for c in CPU_CASES if c.name == "ln_bwd_bf16_m1000_n3")
    inputs = bf16.inputs("cpu")
    want = bf16.eager(*inputs)
    with pytest.raises(AssertionError, match="output 2"):  # dbias off by 5%
        trc._compare(bf16, [want[0], want[1], want[2] * 1.05], want, "wrong")


# ----------------------------------------------------------------------------------------------
# CPU: the cases themselves


def test_cases_cover_item_6():
    names = {c.name for c in CASES}
    left_out = set(LEFT_OUT)
    for p in PATTERNS:
        for m in ROWS:
            for n in ROW_LENGTHS:
                assert f"{p}_fp32_m{m}_n{n}" in names or (p, "fp32", m, n) in left_out, (p, m, n)
        for dt in HALF_DTYPES:
            for m, n in HALF_SHAPES:
                assert f"{p}_{TAG[dt]}_m{m}_n{n}" in names, (p, dt, m, n)
        for layout in LAYOUTS:
            assert sum(c.pattern == p and c.layout == layout for c in CASES) >= 2, (p, layout)
            assert any(c.pattern == p and c.layout == layout for c in CPU_CASES), (p, layout)
    # only the fp32 [16384, 16385] pairs are left out, for their > 1 GiB of inputs
    assert sorted(left_out) == sorted((p, "fp32", 16384, 16385) for p in PATTERNS)
    for p, _, m, n in LEFT_OUT:
        assert m * n * 4 > MAX_INPUT_BYTES
    assert all(c.shape[0] * c.shape[1] <= CPU_MAX_ELEMENTS for c in CPU_CASES)
    assert len(CPU_CASES) >= 100 and len(CASES) - len(CPU_CASES) >= 100


@pytest.mark.usefixtures("one_cpu_thread")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(layout):
    """The inputs are laid out as their layout says: sliced rows have a stride > N,
    transposed ones are column-major, expanded ones have stride-0 axes; rstd is positive
    and O(1); softmax's y is a softmax (rows sum to 1)."""
    for case in (c for c in CPU_CASES if c.layout == layout):
        m, n = case.shape
        inputs = case.inputs("cpu")
        rows = [x for x in inputs if x.shape == (m, n) and x.dtype == case.dtype]
        assert rows, case.name
        if layout == "sliced":
            assert all(x.stride() == (n + 8, 1) and x.storage_offset() == 3 for x in rows), case.name
        elif layout == "transposed":
            assert all(x.stride() == (1, m) for x in rows), case.name
        elif layout == "expanded_grad":  # grad / dy, or the batch norm's x along N
            assert 0 in inputs[0].stride() and not inputs[0].is_contiguous(), case.name
        else:  # weight / bias stride 0; rstd / mean [M, 1] expanded to [M, N]; softmax: y
            if case.pattern in ("rms_bwd", "ln_bwd", "bn_outer"):
                assert inputs[-1].stride() == (0,), case.name
            if case.pattern in ("rms_bwd", "ln_bwd"):
                assert inputs[-2].shape == (m, n) and inputs[-2].stride() == (1, 0), case.name
            if case.pattern == "softmax_bwd":
                assert inputs[1].stride() == (0, 1), case.name
        if case.pattern in ("rms_bwd", "ln_bwd"):
            rstd = inputs[-2]
            assert rstd.dtype is torch.float32 and bool(((rstd >= 0.5) & (rstd <= 1.5)).all()), case.name
        if case.pattern == "softmax_bwd":
            torch.testing.assert_close(inputs[1].float().sum(-1), torch.ones(m), rtol=0, atol=1e-2 * n**0.5)


def test_strict_assertion_covers_the_persistent_schedulers(monkeypatch):
    """Here assert_kernels_ran fails for any of the four schedulers' segments left on the
    reference executor, and FUSER_TEST_ALLOW_REFERENCE=1 makes that a warning."""
    monkeypatch.delenv("FUSER_TEST_ALLOW_REFERENCE", raising=False)
    for sched in NORM_KERNEL_SCHEDULERS:
        with pytest.raises(pytest.fail.Exception, match=f"{sched} segment"):
            assert_kernels_ran([(sched, False), ("pointwise", False)], sched)
    monkeypatch.setenv("FUSER_TEST_ALLOW_REFERENCE", "1")
    with pytest.warns(UserWarning, match="FUSER_TEST_ALLOW_REFERENCE"):
        assert_kernels_ran([("inner_outer_persistent", False)], "allowed")
    monkeypatch.setenv("FUSER_TEST_ALLOW_REFERENCE", "0")
    with pytest.raises(pytest.fail.Exception):
        assert_kernels_ran([("outer_persistent", False)], "strict again")
    assert_kernels_ran([(s, True) for s in NORM_KERNEL_SCHEDULERS] + [("pointwise", False)], "ok")


def test_segmentation_check_can_fail():
    """An unexpected decline, a decline for another reason, an expected decline that does
    not come, and another segmentation each fail the check."""
    case = next(c for c in CPU_CASES if c.name == "rms_bwd_fp32_m7_n127")
    inputs = _meta(case.inputs("cpu"))
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    limits = TARGETS[DEFAULT_TARGET]
    assert_segmented_as_expected(fd, inputs, ["inner_outer_persistent"], case, limits, case.name)
    with pytest.raises(AssertionError, match="segmented as"):
        assert_segmented_as_expected(fd, inputs, ["reduction", "reduction"], case, limits, case.name)
    # the case expecting a decline that does not come
    declining = NormCase(**{**case.__dict__, "shape": (1, 127)})
    with pytest.raises(AssertionError, match="accepts the whole fusion"):
        assert_segmented_as_expected(fd, inputs, ["inner_persistent"], declining, limits, case.name)
    # a decline the case does not expect: a fusion of one row
    one_row = next(c for c in CPU_CASES if c.name == "rms_bwd_fp32_m1_n127")
    row_inputs = _meta(one_row.inputs("cpu"))
    with FusionDefinition() as fd1:
        one_row.build(fd1, row_inputs)
    with pytest.raises(AssertionError, match="declines the whole fusion"):
        assert_segmented_as_expected(fd1, row_inputs, ["inner_persistent"], case, limits, one_row.name)
    # a decline for another reason than the expected one
    wrong = NormCase(**{**one_row.__dict__, "pattern": "ln_bwd", "layout": "expanded_grad", "shape": (7, 127)})
    assert wrong.expected_segments(limits).declined == DIFFERENT_INNER_AXES
    with pytest.raises(AssertionError, match="declines: needs both"):
        assert_segmented_as_expected(fd1, row_inputs, ["inner_persistent"], wrong, limits, one_row.name)


def test_expected_segments_rule_follows_the_register_file(monkeypatch):
    """The rule reads the target's register file: the declines it expects are the named
    ones; on a target with a quarter of the registers, RMSNorm's bf16 rows of 4000 (which
    an H100 holds whole) still take one kernel, grad and x in shared memory, and rows of
    4001 (no whole 16-byte vectors to stage) decline; the segmenter, planning for that
    target, agrees."""
    h100 = TARGETS["h100"]
    counts = {}
    for c in SEGMENTED_CASES:
        want = c.expected_segments(h100)
        counts[want.declined] = counts.get(want.declined, 0) + 1
        assert (want.declined is None) == (want.schedulers == ("inner_outer_persistent",)), c.name
    assert set(counts) == {None, NO_OUTER_REDUCTION, ROW_TOO_LONG, DIFFERENT_INNER_AXES}, counts
    small = DeviceLimits(registers_per_sm=16 * 1024, name="quarter-registers")
    monkeypatch.setitem(TARGETS, "quarter", small)
    # shapes no other test segments (runners are cached per input signature, not target)
    for n, want in ((4000, Segmentation(("inner_outer_persistent",))),
                    (4001, Segmentation(("reduction", "inner_persistent"), ROW_TOO_LONG))):
        case = make_case("rms_bwd", 999, n, torch.bfloat16)
        assert case.expected_segments(h100) == Segmentation(("inner_outer_persistent",)), case.name
        assert case.expected_segments(small) == want, case.name
        monkeypatch.setenv(TARGET_ENV, "quarter")
        assert case.expected_segments() == want  # a case's default: the planning target's
        inputs = case.inputs("meta")
        with FusionDefinition() as fd:
            case.build(fd, inputs)
        assert_segmented_as_expected(fd, inputs, _schedulers(fd, inputs), case, small, case.name)
        assert "target: quarter-registers" in str(fd.segmented_fusion_for(inputs))
        monkeypatch.delenv(TARGET_ENV)


def test_seed001_tolerances():
    """The seed 001 tolerances: bf16's, atol widened only for the 57344-element sums."""
    assert SEED001_TOLERANCE[0] == SEED001_TOLERANCE[1] == SEED001_TOLERANCE[4] == (1.6e-2, 1e-2)
    assert 1e-2 < SEED001_TOLERANCE[2][1] < SEED001_TOLERANCE[3][1] < 2e-2
