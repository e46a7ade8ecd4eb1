"""The checks of tests/gpu_fuzz.py that must fail (issue 32 items 1 and 2), on the CPU.

Tolerance: each element is bounded by its own conditioning; an element a perturbed run
cannot judge (NaN / inf where the truth is finite) is excluded by itself and counted, and
an output with too few judged elements is the generator's failure, not a pass.

Kernels: on CUDA every segment whose scheduler generates kernels must have run one; a
fallback to the reference executor the case does not expect fails the case, and a CUDA
run that cannot generate kernels at all (no pycuda, FUSER_DISABLE=codegen) is refused.
These run on the CPU by asking for the kernel check there (`require_kernels=True`) and by
making kernel preparation raise NotLowerable.
"""
from __future__ import annotations

import math

import pytest
import torch

import gpu_fuzz
from gpu_fuzz import Result, Summary, compare_output, generate, judge_output, run_case

NAN, INF = float("nan"), float("inf")
SEED = 31337  # cases no other test executes (their fusions are not in the cache yet)


def t64(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def f32(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


# --- item 1: tolerances ---------------------------------------------------------------------------


def test_a_nan_noise_run_elsewhere_does_not_accept_a_wrong_output():
    # issue 32: [100, -7] was accepted against [1, 2] once one noise run had a NaN at
    # another index (its infinite noise widened every element)
    truth = t64(1.0, 2.0, 3.0, 4.0)
    got = f32(100.0, -7.0, 3.0, 4.0)
    want = f32(1.0, 2.0, 3.0, 4.0)
    nan_elsewhere = t64(1.0, 2.0, NAN, 4.0)
    v = judge_output(0, "t", got, want, truth, [truth.clone(), nan_elsewhere])
    assert v.problem and "2 of 4 elements out of tolerance, 1 too ill-conditioned" in v.problem
    assert (v.elements, v.excluded) == (4, 1) and v.unjudged is None
    assert "2 of 4" in compare_output(0, "t", got, want, truth, [truth.clone(), nan_elsewhere])
    # the element the NaN run cannot judge is left out by itself: a wrong value there passes
    assert judge_output(0, "t", f32(1, 2, 30, 4), want, truth, [nan_elsewhere]).problem is None


def test_one_noisy_element_does_not_widen_the_others():
    # the old `+ max(noise)` term: 0.3 of noise at element 3 let element 0 be 0.3 off
    truth = t64(0.0, 0.0, 0.0, 0.0)
    noisy_elsewhere = t64(0.0, 0.0, 0.0, 0.3)
    got = f32(0.3, 0.0, 0.0, 0.0)
    v = judge_output(0, "t", got, f32(0, 0, 0, 0), truth, [noisy_elsewhere])
    assert v.problem and "1 of 4 elements out of tolerance" in v.problem and "(0,)" in v.problem
    # element 3 may be off as far as its own noise says
    assert judge_output(0, "t", f32(0, 0, 0, 0.3), f32(0, 0, 0, 0), truth, [noisy_elsewhere]).problem is None


def test_an_all_zero_truth_gets_no_room():
    truth = torch.zeros(64, dtype=torch.float64)
    got = torch.zeros(64)
    got[5] = 0.3
    assert "1 of 64" in compare_output(0, "t", got, torch.zeros(64), truth, [truth.clone(), truth.clone()])
    for dt in (torch.float16, torch.bfloat16):
        assert "1 of 64" in compare_output(0, "t", got.to(dt), torch.zeros(64, dtype=dt), truth.to(dt), [truth.clone()])


def test_the_all_zero_normalisation_is_judged_tightly():
    # (x - mean(x)) * rsqrt(var(x) + 1e-5) of a half tensor of ones is 0 in every
    # implementation; a half ulp of noise on the mean made its tolerance ~1.2 (noise 0.3)
    case = generate(1, 271, family="classic")
    assert "layer_norm" in case.tags
    inputs = gpu_fuzz.build_inputs(case, "cpu")
    truth_ns = gpu_fuzz.twin_namespace(case, inputs, "cpu", torch.float64)
    name = case.outputs[0]
    assert float(truth_ns[name].double().abs().max()) == 0.0
    noise = [gpu_fuzz.run_twin(case, inputs, "cpu", torch.float64, noise_seed=s, truth_ns=truth_ns)[0]
             for s in (1, 2, 3)]
    nz, lost = gpu_fuzz._conditioning([n.double() for n in noise], truth_ns[name].double())
    assert float(nz.max()) < 1e-3 and not bool(lost.any())
    bad = truth_ns[name].clone()
    bad.view(-1)[0] = 0.3
    want = gpu_fuzz.run_twin(case, inputs, "cpu", torch.float32)[0]
    assert "1 of" in compare_output(0, name, bad, want, truth_ns[name], noise)


def test_an_unjudgeable_output_is_the_generators_failure():
    # seed 9323 case 40 (an old stream): a variance whose perturbed runs took rsqrt of < 0
    # went NaN at every element; excluding them all must not be a pass
    truth = t64(1.0, 2.0, 3.0, 4.0)
    nan_run = t64(NAN, NAN, NAN, 4.0)
    v = judge_output(0, "t", f32(1, 2, 3, 4), f32(1, 2, 3, 4), truth, [nan_run])
    assert v.problem is None and v.excluded == 3
    assert v.unjudged and v.unjudged.startswith("[generator] output 0 (t)") and "only 1 of 4" in v.unjudged
    assert compare_output(0, "t", f32(1, 2, 3, 4), f32(1, 2, 3, 4), truth, [nan_run]).startswith("[generator]")
    # half judged is enough; an inf run where the truth is finite is unjudgeable too
    assert judge_output(0, "t", f32(1, 2, 3, 4), f32(1, 2, 3, 4), truth, [t64(NAN, INF, 3, 4)]).unjudged is None
    # torch's own float32 run counts: a NaN there where the truth is finite excludes too
    assert judge_output(0, "t", f32(1, 2, 3, 4), f32(NAN, 2, 3, 4), truth, []).excluded == 1


def test_nan_and_inf_where_the_truth_has_them_measure_nothing():
    truth = t64(1.0, NAN, INF, -INF)
    same = t64(1.0, NAN, INF, -INF)
    v = judge_output(0, "t", f32(1, NAN, INF, -INF), f32(1, NAN, INF, -INF), truth, [same])
    assert v.problem is None and v.excluded == 0
    assert "1 of 4" in judge_output(0, "t", f32(1, 5, INF, -INF), f32(1, NAN, INF, -INF), truth, [same]).problem
    assert "1 of 4" in judge_output(0, "t", f32(1, NAN, -INF, -INF), f32(1, NAN, INF, -INF), truth, [same]).problem


def test_measured_noise_widens_only_its_element():
    truth = t64(1.0, 2.0, 3.0)
    noisy = t64(1.0, 2.005, 3.0)
    assert judge_output(0, "t", f32(1.0, 2.01, 3.0), f32(1, 2, 3), truth, [noisy]).problem is None
    assert "1 of 3" in judge_output(0, "t", f32(1.01, 2.0, 3.0), f32(1, 2, 3), truth, [noisy]).problem
    assert "1 of 3" in judge_output(0, "t", f32(1.0, 2.1, 3.0), f32(1, 2, 3), truth, [noisy]).problem


def test_kind_and_integer_checks():
    t = t64(1.0, 2.0)
    got = f32(1.0, 2.0)
    assert "dtype" in compare_output(0, "t", got.half(), got, t, [])
    assert "shape" in compare_output(0, "t", got[:1], got, t, [])
    ints = torch.tensor([1, 2, 3])
    assert compare_output(0, "t", ints, ints, ints, []) is None
    assert "first at (1,)" in compare_output(0, "t", torch.tensor([1, 5, 3]), ints, ints, [])


def test_run_case_counts_excluded_elements_and_fails_unjudged_outputs(monkeypatch):
    def perturbed_float_output(c):
        line = next((t for t in c.twin_lines if c.outputs[0] in t.names), None)
        return (not c.rng_checks and "zero_size" not in c.tags and line is not None and line.perturb is not None)

    case = next(c for c in (generate(SEED, i, family="classic") for i in range(300)) if perturbed_float_output(c))
    ok = run_case(case, "cpu")
    assert ok.status == "ok" and ok.elements > 0 and ok.excluded == 0, ok.repro()

    def nan_everything(line, ns, gen, truth_ns=None, bias=0):
        for n in line.names:
            ns[n] = torch.full_like(ns[n].double(), math.nan)

    monkeypatch.setattr(gpu_fuzz, "_perturb", nan_everything)
    r = run_case(case, "cpu")
    assert r.status == "generator", r.message
    assert "[generator] output 0" in r.message and "can be judged" in r.message and r.excluded > 0
    s = Summary("cpu", SEED, [ok, r], 0.0)
    assert s.failures == [r] and s.generator_failures == [r]
    assert "1 generator failures" in s.line()
    assert f"{r.excluded} of {ok.elements + r.elements} elements excluded" in s.line()


# --- narrow rounding boundaries ------------------------------------------------------------------
# A half / bfloat16 value whose unrounded value lies within its own error bound of a
# rounding boundary may correctly round to either neighbour; the noise runs must take both
# (`_round_near`, ROUND_BIAS), and the truth is the correctly rounded float64 value
# (`_round_truth`, `_to_narrow`). Far from a boundary a 1-ulp difference must still fail.


def _var_case(rows) -> tuple:
    """A hand-made case: the variance of each row of a half tensor, rounded to half (the
    program's own rounding), cast to float (t11 of seed 9609 case 355)."""
    x = torch.tensor(rows, dtype=torch.float16)
    vm = gpu_fuzz.TwinLine("t1, t2 = torch.var_mean(t0, dim=[1], correction=1, keepdim=True)", ("t1", "t2"),
                           ("var_mean", "t0", (1,), True, x.shape[1], 1, torch.float16))
    case = gpu_fuzz.Case(0, 0, list(x.shape), [], ["t0"], [vm, gpu_fuzz.TwinLine("t3 = t1.to(F)", ("t3",))], ["t3"],
                         [], {})
    truth_ns = gpu_fuzz.twin_namespace(case, [x], "cpu", torch.float64)
    noise = [gpu_fuzz.run_twin(case, [x], "cpu", torch.float64, noise_seed=s, truth_ns=truth_ns)[0]
             for s in range(1, gpu_fuzz.NOISE_RUNS + 1)]
    return x, truth_ns["t3"], noise


#: a row of seed 9609 case 355's half input: its variance, 3.7001953664, lies 5.4e-8 above
#: the half midpoint 3.7001953125 (its float32 error bound is ~2e-5); the next row's,
#: 4.6667, lies 6.5e-4 (1/6 ulp) from the nearest one
NEAR = [0.363525390625, -1.904296875, -1.95703125, 0.66455078125, -2.8984375, 0.366943359375, -4.3828125]
FAR = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def test_to_narrow_rounds_once():
    v = 3.7001953664280123
    assert torch.tensor([v], dtype=torch.float64).half().item() == 3.69921875  # torch: through float32, twice
    assert gpu_fuzz._to_narrow(torch.tensor([v], dtype=torch.float64), torch.float16).item() == 3.701171875
    g = torch.Generator().manual_seed(0)
    for dt in (torch.float16, torch.bfloat16):
        # values within 2**-30 of a midpoint of dt, both sides, and random ones
        base = torch.randn(4096, generator=g, dtype=torch.float64) * 8
        lo = base.to(dt)
        hi = torch.nextafter(lo, torch.full_like(lo, math.inf))
        mid = (lo.double() + hi.double()) / 2
        off = (torch.rand(4096, generator=g, dtype=torch.float64) - 0.5) * 2.0**-30 * mid.abs()
        x = torch.cat([mid + off, base])
        r = gpu_fuzz._to_narrow(x, dt)
        assert r.dtype is dt
        for nb in (torch.nextafter(r, torch.full_like(r, math.inf)), torch.nextafter(r, torch.full_like(r, -math.inf))):
            assert bool(((r.double() - x).abs() <= (nb.double() - x).abs()).all())
        exact = torch.cat([mid, base.to(dt).double()])  # ties (to even) and representable values: torch's own
        assert torch.equal(gpu_fuzz._to_narrow(exact, dt), exact.to(dt))


def test_a_one_ulp_flip_at_a_boundary_within_the_error_bound_passes():
    x, truth, noise = _var_case([NEAR, FAR])
    v = x.double().var(dim=1, correction=1)
    assert abs(v[0].item() - 3.7001953125) < 1e-7
    assert truth[0, 0].item() == 3.701171875  # the correctly rounded half: the truth on any device
    # the noise runs take both neighbours, whichever side the truth is on ...
    assert {n[0, 0].item() for n in noise} == {3.69921875, 3.701171875}
    # ... and no other value far from a boundary
    assert all(n[1, 0].item() == truth[1, 0].item() for n in noise)
    got = truth.float().clone()
    for fuser in (3.69921875, 3.701171875):  # a float32 variance on either side of 3.7001953125
        got[0, 0] = fuser
        # eager's own sample equal to the truth (as on the GPU, seed 9609 case 355): the
        # room comes from the noise runs alone
        v = judge_output(0, "t3", got, truth.float(), truth, noise)
        assert v.problem is None, v.problem


def test_a_one_ulp_error_far_from_a_boundary_fails():
    x, truth, noise = _var_case([NEAR, FAR])
    assert truth[1, 0].item() == 4.66796875
    got = truth.float().clone()
    got[1, 0] = 4.6640625  # the other half neighbour of 4.6667: one ulp, but no boundary near
    v = judge_output(0, "t3", got, truth.float(), truth, noise)
    assert v.problem and "1 of 2 elements out of tolerance" in v.problem and "worst at (1, 0)" in v.problem
    # the boundary element's room is NOISE_K times its 1-ulp noise, not more
    got = truth.float().clone()
    got[0, 0] = 3.701171875 + 8 * 0.001953125
    assert "worst at (0, 0)" in judge_output(0, "t3", got, truth.float(), truth, noise).problem


def test_seed_9609_case_355_variance_on_a_half_boundary():
    # GPU, H100: t11 = cast(var(t1 half) -> Half, Float): fuser 3.69921875, torch (the old
    # truth, PyTorch CUDA's half var) 3.701171875, every noise run 3.701171875 too: the
    # old noise model's reference was the float64 variance converted to half through
    # float32, i.e. 3.69921875, so its "other side" was the truth's. Its arithmetic on
    # the CPU: the truth and noise are device independent now.
    case = generate(9609, 355)
    inputs = gpu_fuzz.build_inputs(case, "cpu")
    truth_ns = gpu_fuzz.twin_namespace(case, inputs, "cpu", torch.float64)
    k = case.outputs.index("t11")
    noise = [gpu_fuzz.run_twin(case, inputs, "cpu", torch.float64, noise_seed=s, truth_ns=truth_ns)[k]
             for s in range(1, gpu_fuzz.NOISE_RUNS + 1)]
    truth = truth_ns["t11"]
    i = (12638, 0)
    assert truth[i].item() == 3.701171875
    # fuser's float32 variance of the row, summed in another order, then rounded to half
    row = inputs[1][12638].float()
    v32 = ((row - row.mean()) ** 2).sum() / 6
    got = truth.float().clone()
    got[i] = v32.half().float()
    assert got[i].item() == 3.69921875
    assert judge_output(k, "t11", got, truth.float(), truth, noise).problem is None
    # the same 1-ulp step where the variance is far from a boundary fails
    far = next(j for j in range(truth.shape[0]) if all(n[j, 0].item() == truth[j, 0].item() for n in noise))
    got = truth.float().clone()
    up = torch.nextafter(truth[far, 0].half(), torch.tensor(math.inf, dtype=torch.float16)).float()
    got[far, 0] = up
    assert f"worst at ({far}, 0)" in judge_output(k, "t11", got, truth.float(), truth, noise).problem


def test_seed_9605_case_82_truth_is_the_correctly_rounded_rsqrt():
    # a bf16 layer norm: PyTorch's CPU bf16 rsqrt of a small tensor rounds twice
    # (rsqrt(1.0078125) = 1.0, correct 0.99609375); it was the truth, and x - mean exactly
    # on a bf16 midpoint took the other side in all three runs, where the product with
    # the correct rsqrt rounded back onto the truth: noise 0, fuser 1 ulp off
    x = torch.tensor([1.0078125, 1.453125], dtype=torch.bfloat16)
    d = torch.tensor([-1.1953125, -1.1953125], dtype=torch.bfloat16)
    m = torch.tensor([-0.326171875, -0.326171875], dtype=torch.bfloat16)
    rb = ("round", torch.bfloat16, None)
    lines = [gpu_fuzz.TwinLine("t3 = torch.sub(t0, t1)", ("t3",), rb),
             gpu_fuzz.TwinLine("t4 = torch.rsqrt(t2)", ("t4",), rb),
             gpu_fuzz.TwinLine("t5 = torch.mul(t3, t4)", ("t5",), rb),
             gpu_fuzz.TwinLine("t6 = t5.to(F)", ("t6",))]
    case = gpu_fuzz.Case(0, 0, [2], [], ["t0", "t1", "t2"], lines, ["t6"], [], {})
    inputs = [d, m, x]
    truth_ns = gpu_fuzz.twin_namespace(case, inputs, "cpu", torch.float64)
    assert truth_ns["t4"].tolist() == [0.99609375, 0.828125]  # rsqrt 0.99612, 0.82956: correctly rounded
    assert truth_ns["t3"].tolist() == [-0.8671875] * 2  # -0.869140625, a tie: to even
    noise = [gpu_fuzz.run_twin(case, inputs, "cpu", torch.float64, noise_seed=s, truth_ns=truth_ns)[0]
             for s in range(1, gpu_fuzz.NOISE_RUNS + 1)]
    fuser = torch.tensor([-0.86328125, -0.71875])  # fuser's float32 math, one rounding each
    assert truth_ns["t6"].tolist() == fuser.tolist()
    want = gpu_fuzz.run_twin(case, inputs, "cpu", torch.float32)[0]  # PyTorch's own bf16 kernels
    assert judge_output(0, "t6", fuser, want, truth_ns["t6"], noise).problem is None
    assert run_case(generate(9605, 82), "cpu").status == "ok"


# --- item 2: a kernel must have run ------------------------------------------------------------------


def _segs(*runs):
    return list(runs)


def test_check_segments():
    case = generate(SEED, 0)
    ok = _segs(("pointwise", True, True, ""), ("expr_eval", False, None, ""), ("no_op", False, None, ""))
    assert gpu_fuzz.check_segments(case, ok) == (None, 0)
    fell = _segs(("pointwise", True, True, ""), ("reduction", True, False, "a reduction kernel reuses ..."))
    msg, n = gpu_fuzz.check_segments(case, fell)
    assert n == 0 and "segment 1 (reduction) fell back to the reference executor: a reduction kernel reuses" in msg
    assert "pointwise:kernel, reduction:fallback" in msg
    unknown = _segs(("inner_persistent", True, False, ""))
    assert "reason unknown" in gpu_fuzz.check_segments(case, unknown)[0]
    untried = _segs(("pointwise", True, None, ""))
    assert "tried no kernel" in gpu_fuzz.check_segments(case, untried)[0]
    empty = _segs(("pointwise", True, False, "input T3 has no elements but the kernel would read it"))
    assert gpu_fuzz.check_segments(case, empty) == (None, 1)
    case.allowed_fallbacks = (r"is expanded but the lookup's is not",)
    allowed = _segs(("pointwise", True, False, "gather: output axis iS3 is expanded but the lookup's is not"))
    assert gpu_fuzz.check_segments(case, allowed) == (None, 1)


def test_last_segments_reports_how_each_segment_ran():
    from fuser import DataType, FusionDefinition

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.ops.sum(t0, dims=[1])
        fd.add_output(fd.ops.exp(t1))
    with pytest.raises(RuntimeError, match="never been executed"):
        fd.last_segments()
    fd.execute([torch.randn(3, 31)])
    segs = fd.last_segments()
    assert segs and all(s.kernel is None for s in segs)  # CPU: no kernel tried
    assert [s.scheduler for s in segs][0] in ("reduction", "inner_persistent")
    assert all(s.generates_kernel for s in segs)


def _fresh_cache(monkeypatch):
    from fuser.frontend.cache import FusionCache

    monkeypatch.setattr(FusionCache, "_instance", None)


def test_a_case_whose_segment_fell_back_fails(monkeypatch):
    from fuser.lower.lower import NotLowerable
    from fuser.host import evaluator

    _fresh_cache(monkeypatch)
    case = next(c for c in (generate(SEED, i, family="classic") for i in range(200))
                if "zero_size" not in c.tags and "no_tensor_inputs" not in c.tags)

    def refuse(scheduler, fusion, args, device=None):
        raise NotLowerable("test: this kernel is not lowerable")

    # the runner tries kernels (as on CUDA) and every preparation fails: each segment
    # falls back to the reference executor, whose results match eager
    monkeypatch.setattr(evaluator, "kernels_available", lambda device: True)
    monkeypatch.setattr(evaluator, "prepare_kernel", refuse)
    r = run_case(case, "cpu", require_kernels=True)
    assert r.status == "fallback", r.message
    assert "fell back to the reference executor: test: this kernel is not lowerable" in r.message
    assert Summary("cuda", SEED, [r], 0.0).line().startswith("gpu fuzz: 1 cases, 0 mismatches, 0 crashes, 1 fallbacks")
    # the same case where the fallback is for a reason every case accepts
    monkeypatch.setattr(gpu_fuzz, "EXPECTED_FALLBACKS", (r"test: this kernel",))
    r = run_case(case, "cpu", require_kernels=True)
    assert r.status == "ok" and r.expected_fallbacks == len(r.segments) > 0


def test_a_run_that_tried_no_kernel_fails():
    # what fd.execute does without pycuda or with codegen disabled: every segment on the
    # reference executor, the results equal eager's; counted as a GPU run, that fails
    for i in range(20):
        case = generate(SEED, i, family="classic")
        r = run_case(case, "cpu")
        if r.status == "ok" and any(generates for _, generates, _, _ in r.segments):
            break
    else:
        raise AssertionError("no case with a kernel segment")
    r = run_case(case, "cpu", require_kernels=True)
    assert r.status == "fallback" and "tried no kernel (kernels unavailable)" in r.message


def test_cuda_runs_are_refused_without_kernels(monkeypatch, capsys):
    monkeypatch.setenv("FUSER_DISABLE", "codegen")
    why = gpu_fuzz.gpu_refusal("cuda")
    assert why and "FUSER_DISABLE names codegen" in why and "reference executor" in why
    assert gpu_fuzz.gpu_refusal("cpu") is None
    with pytest.raises(gpu_fuzz.GpuRunRefused, match="codegen"):
        gpu_fuzz.run_cases(1, SEED, "cuda")
    with pytest.raises(gpu_fuzz.GpuRunRefused):
        run_case(generate(SEED, 0), "cuda")
    assert gpu_fuzz.main(["--cases", "1", "--seed", str(SEED), "--device", "cuda"]) == 2
    assert "refusing a cuda fuzz run" in capsys.readouterr().out


def test_cuda_runs_are_refused_without_pycuda(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.delenv("FUSER_DISABLE", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycuda" else real(name, *a))
    assert "pycuda is not importable" in gpu_fuzz.gpu_refusal("cuda:0")


def test_the_fuzzer_ignores_allow_reference(monkeypatch):
    monkeypatch.setenv("FUSER_TEST_ALLOW_REFERENCE", "1")
    case = generate(SEED, 0)
    msg, _ = gpu_fuzz.check_segments(case, [("reduction", True, False, "not lowerable")])
    assert msg and "fell back" in msg


def test_summary_counts_segments():
    case = generate(SEED, 0)
    rs = [Result(case, "ok", segments=[("pointwise", True, True, ""), ("reduction", True, True, "")]),
          Result(case, "ok", segments=[("pointwise", True, False, "x has no elements")], expected_fallbacks=1),
          Result(case, "ok", segments=[("expr_eval", False, None, "")])]
    s = Summary("cuda", SEED, rs, 0.0)
    assert s.segment_counts() == (2, 1, 1)
    assert s.line().endswith("segments: 2 kernels, 1 reference, 1 expected fallbacks")


def test_a_deadline_stops_starting_cases():
    assert len(gpu_fuzz.run_cases(5, 7, "cpu", deadline=-1.0).results) == 0
    assert len(gpu_fuzz.run_cases(2, 7, "cpu", deadline=1e9).results) == 2


def test_set_applies_module_constants_and_names_bad_ones():
    from fuser.scheduler import normalization as N

    shipped = N.PERSISTENT_LATE_LOADS
    undo = gpu_fuzz.apply_settings([f"fuser.scheduler.normalization.PERSISTENT_LATE_LOADS={not shipped}"])
    try:
        assert N.PERSISTENT_LATE_LOADS is (not shipped)
    finally:
        for mod, name, old in undo:
            setattr(mod, name, old)
    assert N.PERSISTENT_LATE_LOADS is shipped
    for bad, says in (("fuser.scheduler.normalization.NOPE=1", "has no NOPE"),
                      ("fuser.scheduler.normalization.PERSISTENT_LATE_LOADS=yes", "Python literal"),
                      ("PERSISTENT_LATE_LOADS", "MODULE.NAME=VALUE")):
        with pytest.raises(ValueError, match=says):
            gpu_fuzz.apply_settings([bad])


def test_fuzz_parallel_sums_the_summaries_and_flags_failures():
    import fuzz_parallel as FP

    line = ("gpu fuzz: {} cases, {} mismatches, 0 crashes, 0 fallbacks, 0 generator failures; 0 of 5 elements "
            "excluded; segments: 7 kernels, 0 reference, 0 expected fallbacks")
    sums, bad = FP.totals([line.format(10, 0), line.format(4, 1), "killed before its summary"])
    assert (sums["cases"], sums["mismatches"], sums["kernels"], bad) == (14, 1, 14, [1, 2])
    import argparse

    args = argparse.Namespace(seed=100, seconds=60.0, mode=["", "a.B=1,c.D='x'"])
    assert FP.command(0, args)[-2:] == ["--deadline", "60.0"]
    assert FP.command(3, args)[-4:] == ["--set", "a.B=1", "--set", "c.D='x'"]
    assert "103" in FP.command(3, args)
