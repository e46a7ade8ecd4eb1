"""The differential fuzzer of tests/gpu_fuzz.py: random fusions against eager PyTorch.

The GPU test runs FUSER_FUZZ_CASES cases (default 300) of the stream FUSER_FUZZ_SEED on
CUDA, prints ``gpu fuzz: N cases, M mismatches, K crashes`` (appended to the file
FUSER_FUZZ_REPORT names, if any) and fails listing the first repros. For a long run, or
several in parallel on one GPU, use the script: ``python -m tests.gpu_fuzz --cases 2000
--seed S --device cuda``.

The CPU tests check the fuzzer itself: fuser's CPU path (the reference executor) is
believed right, so cases run there must all pass, a tampered case must be reported with a
runnable repro, and the generator must be reproducible and cover every op family.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gpu_fuzz
from gpu_fuzz import TwinLine, generate, run_case, run_cases

REPO = Path(__file__).resolve().parent.parent
CPU_SEED = 97


@pytest.mark.gpu
def test_gpu_fuzz(capsys):
    n = int(os.environ.get("FUSER_FUZZ_CASES", "300"))
    seed = int(os.environ.get("FUSER_FUZZ_SEED", str(gpu_fuzz.DEFAULT_SEED)))
    summary = run_cases(n, seed, "cuda")
    gpu_fuzz.write_report(summary, os.environ.get("FUSER_FUZZ_REPORT"))
    with capsys.disabled():
        print(f"\n{summary.line()}")
    if summary.failures:
        pytest.fail(f"{summary.line()}\n{summary.details(show=3)}", pytrace=False)


# --- the fuzzer on the CPU ------------------------------------------------------------------------


def test_cpu_cases_match_eager():
    summary = run_cases(30, CPU_SEED, "cpu")
    assert not summary.failures, f"{summary.line()}\n{summary.details(show=2)}"
    assert summary.line() == "cpu fuzz: 30 cases, 0 mismatches, 0 crashes"


def _first(pred, seed=CPU_SEED, limit=400):
    for i in range(limit):
        c = generate(seed, i)
        if pred(c):
            return c
    raise AssertionError("no generated case has the wanted property")


@pytest.mark.parametrize("tag", ["rng", "var_mean_c1", "reduce_expanded_axis", "softmax", "input_sliced",
                                 "no_tensor_inputs", "zero_size", "scalar_input", "int_math", "bool_math"])
def test_cpu_case_of_each_family(tag):
    case = _first(lambda c: tag in c.tags)
    r = run_case(case, "cpu")
    assert r.status == "ok", r.repro()


def test_generation_is_reproducible():
    a, b = generate(5, 17), generate(5, 17)
    assert a.repro() == b.repro()
    assert a.tags == b.tags
    assert generate(5, 18).repro() != a.repro()
    assert generate(6, 17).repro() != a.repro()


def test_families_covered():
    tags = set()
    for i in range(400):
        tags |= generate(CPU_SEED, i).tags
    want = {
        "unary", "binary", "int_math", "bool_math", "narrow_math", "float_math", "mixed_dtypes", "comparison",
        "logical", "cast", "where", "broadcast_in_dim", "broadcast", "expand", "reduce_sum", "reduce_max",
        "reduce_min", "reduce_prod", "reduce_expanded_axis", "reduce_broadcast_axis", "reduce_size1_axis",
        "keepdim", "var_mean_c0", "var_mean_c1", "normalize", "softmax", "layer_norm", "permute", "full", "iota",
        "rng", "scalar_input", "scalar_operand", "segment_set", "squeeze", "input_permuted", "input_sliced",
        "input_expanded", "input_broadcast", "input_static", "input_rank0", "odd_extent", "size1_extent",
        "zero_size", "narrow_output", "no_tensor_inputs", "symbolic_shape", "ternary", "reshape", "resize",
        "input_float32", "input_float16", "input_bfloat16", "input_int32", "input_int64", "input_bool",
    }
    assert want <= tags, f"never generated: {sorted(want - tags)}"


def test_cases_stay_small():
    for i in range(100):
        c = generate(CPU_SEED, i)
        for v in gpu_fuzz.build_inputs(c, "meta"):
            if isinstance(v, torch.Tensor):
                assert v.numel() <= gpu_fuzz.MAX_NUMEL and v.ndim <= 4
        assert len(c.fd_lines) <= 60
        assert 1 <= len(c.outputs) <= 3


# --- failures and repros --------------------------------------------------------------------------


def _exec_repro(text: str) -> dict:
    ns: dict = {"__name__": "__repro__"}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(text, "<repro>", "exec"), ns)  # noqa: S102 - our own text
    ns["__stdout__"] = out.getvalue()
    return ns


def test_repro_is_runnable():
    case = _first(lambda c: "input_expanded" in c.tags and "rng" in c.tags)
    ns = _exec_repro(case.repro("cpu"))
    assert len(ns["got"]) == len(ns["want"]) == len(case.outputs)
    assert ns["__stdout__"].count("fuser") == len(case.outputs)
    # the repro is exactly what ran: its fusion and inputs are the case's
    assert case.fd_source() in case.repro() and case.inputs_source() in case.repro()
    assert case.twin_source() in case.repro()


def test_mismatch_is_reported_with_a_runnable_repro():
    case = _first(lambda c: not c.rng_checks and "zero_size" not in c.tags and "input_as_output" not in c.tags)
    out = case.outputs[0]
    case.twin_lines.append(TwinLine(f"{out} = {out} + 1", (out,), None))  # a wrong twin
    r = run_case(case, "cpu")
    assert r.status == "mismatch"
    assert f"output 0 ({out})" in r.message
    text = r.repro()
    assert text.startswith(f"# gpu_fuzz case seed={CPU_SEED} index={case.index}")
    assert "# mismatch: output 0" in text
    ns = _exec_repro(text.replace('DEVICE = "cuda"', 'DEVICE = "cpu"'))
    assert len(ns["got"]) == len(case.outputs)


def test_crash_is_reported():
    case = _first(lambda c: True)
    case.fd_lines.insert(len(case.fd_lines) - 1, f"fd.ops.no_such_op({case.outputs[0]})")
    r = run_case(case, "cpu")
    assert r.status == "crash"
    assert "defining the fusion" in r.message and "no_such_op" in r.repro()


def test_compare_output_tolerances():
    t = torch.tensor([1.0, 2.0, float("nan"), float("inf")], dtype=torch.float64)
    got = torch.tensor([1.0, 2.0, float("nan"), float("inf")])
    assert gpu_fuzz.compare_output(0, "t", got, got, t, []) is None
    # noise measured where the value is ill-conditioned widens the tolerance there
    bad = torch.tensor([1.0, 2.01, float("nan"), float("inf")])
    assert "1 of 4" in gpu_fuzz.compare_output(0, "t", bad, got, t, [])
    noisy = t + torch.tensor([0.0, 0.005, 0.0, 0.0], dtype=torch.float64)
    assert gpu_fuzz.compare_output(0, "t", bad, got, t, [noisy]) is None
    # a perturbed run that reaches NaN where the truth is finite: too ill-conditioned to
    # judge, whatever another run measured; NaN or inf where the truth has them measures 0
    nan_run = t + torch.tensor([0.0, float("nan"), 0.0, 0.0], dtype=torch.float64)
    assert gpu_fuzz.compare_output(0, "t", bad, got, t, [torch.zeros(4, dtype=torch.float64) + t, nan_run]) is None
    assert "1 of 4" in gpu_fuzz.compare_output(0, "t", bad, got, t, [t.clone(), t.clone()])
    assert "dtype" in gpu_fuzz.compare_output(0, "t", got.half(), got, t, [])
    assert "shape" in gpu_fuzz.compare_output(0, "t", got[:2], got, t, [])
    nan_moved = torch.tensor([float("nan"), 2.0, 3.0, float("inf")])
    assert "2 of 4" in gpu_fuzz.compare_output(0, "t", nan_moved, got, t, [])
    ints = torch.tensor([1, 2, 3])
    assert gpu_fuzz.compare_output(0, "t", ints, ints, ints, []) is None
    assert "first at (1,)" in gpu_fuzz.compare_output(0, "t", torch.tensor([1, 5, 3]), ints, ints, [])


def test_rng_checks():
    check = gpu_fuzz.RngCheck("uniform", -1.0, 1.0)
    x = torch.rand(4096) * 2 - 1
    assert gpu_fuzz.check_rng(0, "t", x, x.clone(), x, check) is None
    assert "differ" in gpu_fuzz.check_rng(0, "t", x, torch.rand(4096), x, check)
    assert "within" in gpu_fuzz.check_rng(0, "t", x + 1.5, x + 1.5, x, check)
    assert "distinct" in gpu_fuzz.check_rng(0, "t", torch.zeros(4096), torch.zeros(4096), x, check)
    normal = gpu_fuzz.RngCheck("normal", 1.0, 0.5)
    y = torch.randn(4096) * 0.5 + 1.0
    assert gpu_fuzz.check_rng(0, "t", y, y.clone(), y, normal) is None
    assert "std" in gpu_fuzz.check_rng(0, "t", y * 2, y * 2, y, normal)


# --- the script -----------------------------------------------------------------------------------


def test_main_prints_the_summary_and_appends_the_report(tmp_path, capsys):
    report = tmp_path / "fuzz.txt"
    report.write_text("earlier run\n")
    rc = gpu_fuzz.main(["--cases", "3", "--seed", str(CPU_SEED), "--device", "cpu", "--report", str(report)])
    assert rc == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "cpu fuzz: 3 cases, 0 mismatches, 0 crashes"
    assert report.read_text() == "earlier run\ncpu fuzz: 3 cases, 0 mismatches, 0 crashes\n"


def test_main_print_repro(capsys):
    assert gpu_fuzz.main(["--cases", "1", "--start", "4", "--seed", "3", "--print-repro", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == generate(3, 4).repro("cpu").strip()


def test_script_runs_as_a_module():
    env = dict(os.environ, FUSER_FUZZ_REPORT="")
    p = subprocess.run([sys.executable, "-m", "tests.gpu_fuzz", "--cases", "2", "--seed", "1", "--device", "cpu"],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "cpu fuzz: 2 cases, 0 mismatches, 0 crashes"
