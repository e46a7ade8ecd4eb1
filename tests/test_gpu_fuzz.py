"""The differential fuzzer of tests/gpu_fuzz.py: random fusions against eager PyTorch.

The GPU test runs FUSER_FUZZ_CASES cases (default 300) of the stream FUSER_FUZZ_SEED on
CUDA, prints ``gpu fuzz: N cases, M mismatches, K crashes, ...`` (appended to the file
FUSER_FUZZ_REPORT names, if any) and fails listing the first repros. Every segment whose
scheduler generates kernels must have run one, and a run that cannot generate kernels (no
pycuda, FUSER_DISABLE=codegen) is refused, not passed. For a long run, or several in
parallel on one GPU, use the script: ``python -m tests.gpu_fuzz --cases 2000 --seed S
--device cuda`` (``--family NAME`` for one generator family).

The CPU tests check the fuzzer itself: fuser's CPU path (the reference executor) is
believed right, so cases run there must all pass; a wrong result, an ill-conditioned
output, an unexpected fallback and a run that tests no kernel must each fail; the
generator must be reproducible and cover every op family. The checks that must fail are
in tests/test_gpu_fuzz_checks.py.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
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
    summary = run_cases(n, seed, "cuda")  # raises GpuRunRefused where no kernel could run
    gpu_fuzz.write_report(summary, os.environ.get("FUSER_FUZZ_REPORT"))
    with capsys.disabled():
        print(f"\n{summary.line()}")
    if summary.failures:
        pytest.fail(f"{summary.line()}\n{summary.details(show=3)}", pytrace=False)
    kernels, _, _ = summary.segment_counts()
    assert kernels, f"no segment ran a generated kernel: {summary.line()}"


# --- the fuzzer on the CPU ------------------------------------------------------------------------


def test_cpu_cases_match_eager():
    summary = run_cases(30, CPU_SEED, "cpu")
    assert not summary.failures, f"{summary.line()}\n{summary.details(show=2)}"
    assert summary.line().startswith("cpu fuzz: 30 cases, 0 mismatches, 0 crashes, 0 fallbacks, 0 generator failures;")
    assert len(summary.family_counts()) >= 4  # the mix spreads over the families


@pytest.mark.parametrize("family", [f for f in gpu_fuzz.FAMILIES if f not in ("classic", "big")])
def test_cpu_family_cases_match_eager(family):
    summary = run_cases(6, CPU_SEED, "cpu", family=family)
    assert not summary.failures, f"{summary.line()}\n{summary.details(show=2)}"
    assert summary.family_counts() == {family: 6}


def test_cpu_big_case_matches_eager():
    case = generate(CPU_SEED, 0, family="big")
    numel = [v.numel() for v in gpu_fuzz.build_inputs(case, "meta") if isinstance(v, torch.Tensor)]
    assert max(numel) > 100_000
    r = run_case(case, "cpu")
    assert r.status == "ok", r.repro()


def _first(pred, seed=CPU_SEED, limit=400, family=None):
    for i in range(limit):
        c = generate(seed, i, family=family)
        if pred(c):
            return c
    raise AssertionError("no generated case has the wanted property")


@pytest.mark.parametrize("tag", ["rng", "var_mean_c1", "reduce_expanded_axis", "softmax", "input_sliced",
                                 "no_tensor_inputs", "zero_size", "scalar_input", "int_math", "bool_math"])
def test_cpu_case_of_each_classic_family(tag):
    case = _first(lambda c: tag in c.tags, family="classic")
    r = run_case(case, "cpu")
    assert r.status == "ok", r.repro()


@pytest.mark.parametrize("family, tag", [
    ("reshape", "reshape_expanded_merge"), ("reshape", "reshape_split_inner"), ("resize", "cat3"),
    ("resize", "slice_width1"), ("resize", "pad_negative"), ("layout", "input_row_stride"),
    ("index", "take_along_axis_broadcast_index"), ("index", "scatter"), ("index", "index_computed"),
    ("rotary", "rotary_gptj"), ("rotary", "rotary_neox_partial"), ("dropout", "rng_feeds_ops"),
])
def test_cpu_case_of_each_new_family(family, tag):
    case = _first(lambda c: tag in c.tags, family=family, limit=300)
    r = run_case(case, "cpu")
    assert r.status == "ok", r.repro()


def test_generation_is_reproducible():
    a, b = generate(5, 17), generate(5, 17)
    assert a.repro() == b.repro()
    assert a.tags == b.tags
    assert generate(5, 18).repro() != a.repro()
    assert generate(6, 17).repro() != a.repro()
    # a case of the mix is the same case under --family of its family
    assert generate(5, 17, family=a.family).repro() == a.repro()
    for f in gpu_fuzz.FAMILIES:
        assert generate(5, 3, family=f).repro() == generate(5, 3, family=f).repro()


def test_mix_spreads_over_every_family():
    counts: dict[str, int] = {}
    for i in range(2000):
        f = gpu_fuzz.case_family(CPU_SEED, i)
        counts[f] = counts.get(f, 0) + 1
    assert set(counts) == set(gpu_fuzz.FAMILIES)
    for f, w in gpu_fuzz.FAMILY_WEIGHTS.items():
        assert abs(counts[f] / 2000 - w / 100) < 0.03, (f, counts[f])


def test_families_covered():
    tags = set()
    for i in range(400):
        tags |= generate(CPU_SEED, i, family="classic").tags
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


NEW_FAMILY_TAGS = {
    "reshape": {"reshape_merge_inner", "reshape_merge", "reshape_split_inner", "reshape_split", "reshape_of_expanded",
                "reshape_of_broadcast", "reshape_expanded_merge", "reshape_flatten", "reduce_after_view", "softmax",
                "var_mean_c0", "input_expanded_inner", "input_expanded_multi", "input_permuted", "input_row_stride"},
    "resize": {"slice", "slice_width1", "slice_odd_offset", "slice_step", "slice_of_broadcast", "pad", "pad_negative",
               "pad_of_broadcast", "cat2", "cat3", "cat4", "cat_input", "cat_outer_axis", "reduce_after_view"},
    "layout": {"input_permuted", "input_sliced", "input_row_stride", "input_expanded_inner", "input_expanded_multi",
               "reduce_after_view", "softmax", "layer_norm"},
    "reduce_view": {"reduce_after_view", "reduce_sum", "reduce_max", "softmax", "var_mean_c1", "slice", "pad",
                    "reshape_split_inner", "reshape_merge_inner"},
    "index": {"index_select", "select", "gather", "take_along_axis", "scatter", "index_input", "index_computed",
              "index_input_expanded", "take_along_axis_broadcast_index", "index_expanded_other_axis",
              "lookup_plus_full", "lookup_then_reduce", "input_permuted"},
    "rotary": {"rotary_gptj", "rotary_neox", "rotary_neox_partial", "input_permuted", "input_expanded_multi"},
    "dropout": {"dropout", "rng_feeds_ops", "reduce_after_view"},
    "big": {"big_input", "odd_extent", "reduce_sum", "permute", "softmax"},
    "norm_bwd": {"norm_bwd", "norm_bwd_long_row", "norm_bwd_weight", "norm_bwd_rstd", "norm_bwd_bias",
                 "norm_bwd_two_row_axes",
                 "input_row_stride", "input_permuted", "odd_extent", "reduce_broadcast_axis", "narrow_output"},
}


@pytest.mark.parametrize("family", sorted(NEW_FAMILY_TAGS))
def test_new_families_covered(family):
    tags = set()
    for i in range(300):
        tags |= generate(CPU_SEED, i, family=family).tags
    want = NEW_FAMILY_TAGS[family]
    assert want <= tags, f"{family} never generated: {sorted(want - tags)}"


def test_cases_stay_small():
    for i in range(150):
        c = generate(CPU_SEED, i)
        limit = {"big": gpu_fuzz.BIG_NUMEL, "norm_bwd": gpu_fuzz.LONG_ROW_NUMEL}.get(c.family, 4 * gpu_fuzz.MAX_NUMEL)
        for v in gpu_fuzz.build_inputs(c, "meta"):
            if isinstance(v, torch.Tensor):
                assert v.numel() <= limit and v.ndim <= 5, (c.id, c.family, tuple(v.shape))
        assert len(c.fd_lines) <= 80
        assert 1 <= len(c.outputs) <= 3


# --- constant axes --------------------------------------------------------------------------------


def test_factors_of_reshaped_broadcasts():
    from gpu_fuzz import _combine_factors, _norm_factors, _range_const, _split_factors

    row = _norm_factors(((2, False), (1, True), (256, True)))  # [2, 256 expanded] merged to [512]
    assert row == ((2, False), (256, True))
    assert _split_factors(row, 2, 256) == (((2, False),), ((256, True),))  # split back: constant again
    assert _split_factors(row, 8, 64) == (((2, False), (4, True)), ((64, True),))
    assert _split_factors(((1025, True),), 41, 25) == (((41, True),), ((25, True),))
    # a split through a varying digit it does not divide: varying
    assert _split_factors(((3, False), (4, True)), 2, 6) == (((2, False),), ((6, False),))
    # a value computed from two: constant in a digit where both are
    assert _combine_factors(row, ((512, True),)) == row
    assert _combine_factors(row, ((4, True), (128, False))) == ((2, False), (2, True), (128, False))
    assert _combine_factors(row, ((512, False),)) == ((512, False),)
    # slices: one value where the positions share the varying digits
    assert _range_const(row, 256, 512, 1) and not _range_const(row, 255, 257, 1)
    assert _range_const(((256, True), (2, False)), 1, 512, 2)


def test_a_normalisation_over_constant_axes_is_scaled_until_it_cannot_be_nan():
    # seeds 9601 case 3 and 9609 case 35 (reshape): a broadcast reshaped, summed and
    # normalised over the axes it was broadcast along; its variance is 0, and a variance
    # one rounding away from 0 was below -eps at every element (all NaN: unjudgeable)
    g = gpu_fuzz._Gen(random.Random(0), "reshape")
    g.sizes, g.n_universe = [8, 2], 2
    x = g.input_var(((0, "i"), (1, "i")), torch.float32, layout="contiguous")
    lab = g.new_label(256)
    b = g.emit(f"fd.ops.broadcast_in_dim({x.name}, shape=[8, 2, 256], broadcast_dims=[0, 1])",
               f"{x.name}.unsqueeze(-1).expand([8, 2, 256])", ((0, "i"), (1, "i"), (lab, "e")), exact=True,
               bound=x.bound, perturb=None)
    big = g.emit(f"fd.ops.mul({b.name}, 4096.0)", f"torch.mul({b.name}, 4096.0)", b.axes, exact=False,
                 bound=b.bound * 4096)
    m = g.op_merge(big, 1)  # [8, 512]: varies along the 512 in blocks of 256
    assert g.factors(m, 1) == ((2, False), (256, True)) and not g.is_const(m, 1)
    y = g.op_split(m, 1)
    inner = g.shape(y.axes)[2]
    assert g.is_const(y, 2) == (256 % inner == 0)
    # normalised over the expanded axis: scaled by the largest power of two that keeps a
    # variance one rounding away from 0 above -eps
    scale = g.norm_scale(big, [2], 256)
    assert scale < 1
    assert 4 * gpu_fuzz._var_floor(256, big.bound * scale) < gpu_fuzz.LAYER_NORM_EPS
    assert 4 * gpu_fuzz._var_floor(256, big.bound * scale * 2) >= gpu_fuzz.LAYER_NORM_EPS
    # rows that vary are scaled alike (a row constant by coincidence is not told apart)
    assert g.norm_scale(big, [1, 2], 512) < 1
    assert g.norm_scale(b, [2], 256) == 1.0  # small: fine as it is
    case = _first(lambda c: "layer_norm_scaled" in c.tags, family="reshape", limit=600)
    r = run_case(case, "cpu")
    assert r.status == "ok", r.repro()


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


@pytest.mark.parametrize("family, tag", [("index", "scatter"), ("dropout", "rng_feeds_ops")])
def test_repro_of_new_families_is_runnable(family, tag):
    case = _first(lambda c: tag in c.tags, family=family, limit=300)
    ns = _exec_repro(case.repro("cpu"))
    assert len(ns["got"]) == len(ns["want"]) == len(case.outputs)


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


def test_dropout_twin_reads_fusers_random_values():
    case = _first(lambda c: bool(c.rng_feeds), family="dropout")
    inputs = gpu_fuzz.build_inputs(case, "cpu")
    with pytest.raises(ValueError, match="rng_values"):
        gpu_fuzz.run_twin(case, inputs, "cpu", torch.float32)
    # another draw of the random values gives other results downstream: the twin uses them
    r = run_case(case, "cpu")
    assert r.status == "ok", r.repro()


# --- the script -----------------------------------------------------------------------------------


def test_main_prints_the_summary_and_appends_the_report(tmp_path, capsys):
    report = tmp_path / "fuzz.txt"
    report.write_text("earlier run\n")
    rc = gpu_fuzz.main(["--cases", "3", "--seed", str(CPU_SEED), "--device", "cpu", "--report", str(report)])
    assert rc == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("cpu fuzz: 3 cases, 0 mismatches, 0 crashes, 0 fallbacks, 0 generator failures;")
    assert report.read_text() == f"earlier run\n{out[-1]}\n"


def test_main_runs_one_family(capsys):
    assert gpu_fuzz.main(["--cases", "2", "--seed", "3", "--device", "cpu", "--family", "rotary"]) == 0
    out = capsys.readouterr().out
    assert "families: rotary 2" in out


def test_main_print_repro(capsys):
    assert gpu_fuzz.main(["--cases", "1", "--start", "4", "--seed", "3", "--print-repro", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == generate(3, 4).repro("cpu").strip()


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        gpu_fuzz.main(["--help"])
    text = capsys.readouterr().out
    for flag in ("--cases", "--seed", "--start", "--device", "--family", "--report", "--show", "--print-repro",
                 "--progress"):
        assert flag in text
    assert text.count("(default:") >= 6
    for f in gpu_fuzz.FAMILIES:
        assert f in text


def test_script_runs_as_a_module():
    env = dict(os.environ, FUSER_FUZZ_REPORT="")
    p = subprocess.run([sys.executable, "-m", "tests.gpu_fuzz", "--cases", "2", "--seed", "1", "--device", "cpu"],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("cpu fuzz: 2 cases, 0 mismatches, 0 crashes,")
