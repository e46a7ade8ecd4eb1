"""`python -m fuser bench` and the benchmark fusions it shares with asv, on CPU."""
import importlib
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fuser.benchmarks import FUSIONS, by_name, stored_bytes
from fuser.benchmarks.fusions import (
    REDUCTION_QUICK_SHAPES,
    REDUCTION_SHAPES,
    SERIAL_CHAIN,
    reduction_tolerance,
)
from fuser.cli import bench as bench_cli
from fuser.cli import main
from fuser.runtime.tolerance import assert_close, tolerances

REPO = Path(__file__).resolve().parent.parent
NAMES = [f.name for f in FUSIONS]
#: the reduction / normalisation benchmarks (issue 8, item 5)
REDUCTION_NAMES = [f"{op}_{dt}" for dt in ("bf16", "fp32")
                   for op in ("rmsnorm_fwd", "layernorm_fwd", "softmax_fwd", "sum_inner", "sum_outer", "var_mean")]


def test_required_fusions_exist():
    assert {"gelu_tanh_bf16", "bias_relu", "cast_chain", "where3_fp16", "latency_gelu_8x8"} <= set(NAMES)
    assert by_name("gelu_tanh_bf16").shape == (16384, 8192)
    assert by_name("latency_gelu_8x8").shape == (8, 8)
    with pytest.raises(KeyError, match="known"):
        by_name("nope")


@pytest.mark.parametrize("name", NAMES)
def test_fuser_matches_eager_on_cpu(name):
    f = by_name(name)
    inputs = f.make_inputs("cpu", f.small_shape if f.kind == "bandwidth" else None)
    for x in inputs:
        assert x.device.type == "cpu"
        assert x.abs().sum() > 0, "inputs must not be zeros"
    matches_eager(f, inputs, name)


def matches_eager(f, inputs, what: str):
    """Run bench fusion `f` on `inputs` and compare each output with its eager function's,
    at the fusion's tolerances; returns the FusionDefinition."""
    fd = f.fusion_definition()
    state = bench_cli._generator_state(f, inputs)  # a fusion drawing random numbers replays its draw
    got = fd.execute(inputs)
    want = f.expected(inputs, fd, state)
    assert len(got) == len(want) >= 1
    for k, (g, w) in enumerate(zip(got, want)):
        rtol, atol = f.tolerance(inputs, w, k)
        assert_close(g, w, what=f"{what} output {k}", rtol=rtol, atol=atol)
    return fd


def test_reduction_fusions_exist_with_their_shapes():
    assert set(REDUCTION_NAMES) <= set(NAMES)
    assert REDUCTION_SHAPES == ((16384, 4096), (8192, 8192), (2048, 16384), (16384, 1024), (128, 1000))
    for name in REDUCTION_NAMES:
        f = by_name(name)
        assert f.kind == "bandwidth" and f.reduced
        want = REDUCTION_SHAPES + (((16384, 8192),) if name.startswith("sum_") else ())
        assert f.shapes == want, name
        assert f.shape == f.shapes[0] == (16384, 4096)
        assert f.quick_shapes == REDUCTION_QUICK_SHAPES and set(f.quick_shapes) < set(f.shapes)
        assert f.quick_shape == f.quick_shapes[0]
    # single-shape fusions keep their one shape (and `shapes` says so)
    g = by_name("gelu_tanh_bf16")
    assert g.shapes == ((16384, 8192),) and g.quick_shapes == ((8192, 8192),)
    assert by_name("latency_gelu_8x8").shapes == ((8, 8),)


@pytest.mark.parametrize("name", REDUCTION_NAMES)
def test_reduction_fusions_on_cpu_at_odd_shapes(name):
    # row lengths that are neither powers of two nor multiples of a vector: [7, 1025], and the
    # small benchmark shape [128, 1000]
    f = by_name(name)
    for shape in ((7, 1025), (128, 1000)):
        inputs = f.make_inputs("cpu", shape)
        fd = f.fusion_definition()
        got = fd.execute(inputs)
        want = f.eager(inputs)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            rtol, atol = f.tolerance(inputs, w, k)
            assert_close(g, w, what=f"{name} {shape} output {k}", rtol=rtol, atol=atol)
        # the whole fusion is one segment, scheduled as a reduction kernel would be
        segs = bench_cli.fuser_segments(fd)
        assert len(segs) == 1, segs
        sched = "reduction" if name.startswith(("sum_", "var_mean")) else "inner_persistent"
        assert segs[0][0] == sched


def test_inputs_are_fresh_and_shape_overridable():
    f = by_name("where3_fp16")
    a = f.make_inputs("cpu", (3, 5))
    b = f.make_inputs("cpu", (3, 5))
    assert [x.shape for x in a] == [torch.Size([3, 5])] * 3
    assert all(x.dtype == torch.float16 for x in a)
    assert not torch.equal(a[0], b[0])
    bias = by_name("bias_relu").make_inputs("cpu", (4, 6))
    assert [tuple(x.shape) for x in bias] == [(4, 6), (6,)]
    assert [x.dtype for x in bias] == [torch.bfloat16] * 2


def test_dtypes_of_outputs():
    f32 = torch.float32
    for tag, dt in (("bf16", torch.bfloat16), ("fp32", f32)):
        outs = {
            "rmsnorm_fwd": ([dt, f32], [(4, 6), (4, 1)]),
            "layernorm_fwd": ([dt, f32, f32], [(4, 6), (4, 1), (4, 1)]),
            "softmax_fwd": ([dt], [(4, 6)]),
            "sum_inner": ([dt], [(4,)]),
            "sum_outer": ([dt], [(6,)]),
            "var_mean": ([dt, dt], [(4,), (4,)]),
        }
        for op, (dtypes, shapes) in outs.items():
            f = by_name(f"{op}_{tag}")
            x = f.make_inputs("cpu", (4, 6))
            assert x[0].dtype == dt and all(t.dtype == dt for t in x)
            for ys in (f.eager(x), f.fusion_definition().execute(x)):
                assert [y.dtype for y in ys] == dtypes, op
                assert [tuple(y.shape) for y in ys] == shapes, op
    expect = {
        "gelu_tanh_bf16": (torch.bfloat16, torch.bfloat16),
        "bias_relu": (torch.bfloat16, torch.bfloat16),
        "cast_chain": (torch.float32, torch.float32),
        "where3_fp16": (torch.float16, torch.float16),
        "latency_gelu_8x8": (torch.bfloat16, torch.bfloat16),
    }
    for name, (din, dout) in expect.items():
        f = by_name(name)
        x = f.make_inputs("cpu", (2, 3) if f.kind == "bandwidth" else None)
        assert x[0].dtype == din
        assert f.eager(x)[0].dtype == dout


def test_bytes_moved_small_cases():
    # bf16 [4, 6] read + bf16 bias [6] read at its stored size + bf16 [4, 6] written
    f = by_name("bias_relu")
    assert f.bytes_moved(f.make_inputs("cpu", (4, 6))) == 4 * 6 * 2 + 6 * 2 + 4 * 6 * 2
    # three fp16 [4, 6] read, one written
    f = by_name("where3_fp16")
    assert f.bytes_moved(f.make_inputs("cpu", (4, 6))) == 4 * 4 * 6 * 2
    # fp32 in, fp32 out
    f = by_name("cast_chain")
    assert f.bytes_moved(f.make_inputs("cpu", (4, 6))) == 2 * 4 * 6 * 4
    # bf16 in, bf16 out
    f = by_name("gelu_tanh_bf16")
    assert f.bytes_moved(f.make_inputs("cpu", (4, 6))) == 2 * 4 * 6 * 2
    f = by_name("latency_gelu_8x8")
    assert f.bytes_moved(f.make_inputs("cpu")) == 2 * 8 * 8 * 2


def test_bytes_moved_reductions():
    # inputs once, outputs once; the norms' statistics are float [M, 1]
    M, N = 4, 6
    for tag, e in (("bf16", 2), ("fp32", 4)):
        cases = {
            "rmsnorm_fwd": (M * N + N) * e + M * N * e + M * 4,
            "layernorm_fwd": (M * N + 2 * N) * e + M * N * e + 2 * M * 4,
            "softmax_fwd": 2 * M * N * e,
            "sum_inner": M * N * e + M * e,
            "sum_outer": M * N * e + N * e,
            "var_mean": M * N * e + 2 * M * e,
        }
        for op, nbytes in cases.items():
            f = by_name(f"{op}_{tag}")
            assert f.bytes_moved(f.make_inputs("cpu", (M, N))) == nbytes, op
    # at the LLM shape, on meta tensors: bf16 RMSNorm [16384, 4096] moves 2 x 128 MiB + weight + rstd
    f = by_name("rmsnorm_fwd_bf16")
    x = torch.empty(16384, 4096, dtype=torch.bfloat16, device="meta")
    w = torch.empty(4096, dtype=torch.bfloat16, device="meta")
    assert f.bytes_moved([x, w]) == 2 * 16384 * 4096 * 2 + 4096 * 2 + 16384 * 4
    f = by_name("sum_outer_fp32")
    assert f.bytes_moved([torch.empty(16384, 8192, device="meta")]) == (16384 + 1) * 8192 * 4


def test_reduction_tolerances_grow_with_the_reduced_extent():
    # never tighter than the dtype's; atol wider for long rows (float accumulation in serial
    # chains of up to SERIAL_CHAIN elements, then a tree); rtol only for products
    eps = torch.finfo(torch.float32).eps
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        r0, a0 = tolerances(dt)
        assert reduction_tolerance(dt, 1) == (r0, a0)
        r, a = reduction_tolerance(dt, 2**24)
        assert r == r0 and a >= a0
        r, a = reduction_tolerance(dt, 2**24, relative=True)
        assert r >= r0
    r, a = reduction_tolerance(torch.float32, 16384)
    assert math.isclose(a, 4 * eps * math.sqrt(16384 * SERIAL_CHAIN)) and a > tolerances(torch.float32)[1]
    assert math.isclose(reduction_tolerance(torch.float32, 1000)[1], 4 * eps * 1000)  # a serial chain
    assert math.isclose(reduction_tolerance(torch.float32, 2**24, relative=True)[0], 4 * eps * 4096)
    assert math.isclose(reduction_tolerance(torch.float32, 16384, 0.5)[1], a / 2)
    # double accumulates in double: its own tolerance covers even 2**24 elements
    assert reduction_tolerance(torch.float64, 2**24) == tolerances(torch.float64)
    f = by_name("sum_inner_fp32")
    x = f.make_inputs("cpu", (2, 16384))
    assert f.tolerance(x, f.eager(x)[0]) == reduction_tolerance(torch.float32, 16384)
    f = by_name("sum_outer_fp32")
    x = f.make_inputs("cpu", (1000, 3))
    assert f.tolerance(x, f.eager(x)[0]) == reduction_tolerance(torch.float32, 1000)
    # per-output scales: var_mean's mean sums x / n, its variance errs relatively
    f = by_name("var_mean_fp32")
    x = f.make_inputs("cpu", (2, 16384))
    var, mean = f.eager(x)
    assert f.tolerance(x, var, 0) == tolerances(torch.float32)
    assert f.tolerance(x, mean, 1) == reduction_tolerance(torch.float32, 16384, 1 / 16384)
    # a pointwise fusion keeps the dtype's tolerance
    g = by_name("cast_chain")
    x = g.make_inputs("cpu", (2, 3))
    assert g.tolerance(x, g.eager(x)[0]) == tolerances(torch.float32)


def test_check_uses_the_reduction_tolerance():
    f = by_name("sum_inner_fp32")
    x = f.make_inputs("cpu", (3, 16384))
    want = f.eager(x)[0]
    _, atol = f.tolerance(x, want)
    ok, msg = bench_cli._check(f, [want + 0.5 * atol], x)
    assert ok, msg
    ok, msg = bench_cli._check(f, [want + 4 * atol + 4 * want.abs() * 1e-3], x)
    assert not ok and "sum_inner_fp32 output 0" in msg
    ok, msg = bench_cli._check(f, [want, want], x)
    assert not ok and "2 outputs, eager gives 1" in msg


def _fake_fd(*segs):
    runs = [SimpleNamespace(group=SimpleNamespace(scheduler=s), kernel=k) for s, k in segs]
    return SimpleNamespace(_entry=SimpleNamespace(last_runner=SimpleNamespace(runs=runs)))


def test_fuser_path_names_schedulers_and_executors():
    from fuser.scheduler import SchedulerType as S

    kernel = object()
    assert bench_cli._fuser_path(_fake_fd((S.inner_persistent, kernel))) == "1 kernel (inner_persistent)"
    assert bench_cli._fuser_path(_fake_fd((S.reduction, None))) == "reference (reduction)"
    assert bench_cli._fuser_path(_fake_fd((S.reduction, False))) == "reference (reduction)"
    assert (bench_cli._fuser_path(_fake_fd((S.reduction, kernel), (S.reduction, kernel), (S.expr_eval, False)))
            == "2 kernels (2x reduction) + reference (expr_eval)")
    assert (bench_cli._fuser_path(_fake_fd((S.pointwise, kernel), (S.reduction, kernel)))
            == "2 kernels (pointwise, reduction)")
    assert bench_cli._fuser_path(SimpleNamespace()) == "?"
    assert bench_cli.fuser_segments(_fake_fd((S.reduction, kernel), (S.pointwise, None))) == [
        ("reduction", True), ("pointwise", False)]
    # a real run on CPU: every segment on the reference executor, named by its scheduler
    f = by_name("layernorm_fwd_fp32")
    fd = f.fusion_definition()
    fd.execute(f.make_inputs("cpu", (4, 6)))
    assert bench_cli.fuser_segments(fd) == [("inner_persistent", False)]
    assert bench_cli._fuser_path(fd) == "reference (inner_persistent)"


def run_cuda_faked(monkeypatch, capsys, fusions, *, quick: bool, path: str,
                   producer: str | None = None) -> tuple[str, list]:
    """`bench`'s CUDA path over `fusions` with the GPU parts replaced (each row timed at
    100 us, its fuser path `path`): the output and the (fusion, shape) rows timed (with the
    producer they were given, where one was)."""
    import fuser.benchmarks as B

    timed = []

    def fake_row(f, shape, *, iters, repeats, latency_calls, l2, producer=None):
        timed.append((f.name, tuple(shape)) + ((producer,) if producer else ()))
        row = bench_cli._Row(f, tuple(shape))
        row.nbytes = f.bytes_moved(f.make_inputs("meta", shape))
        row.sets = B.rotation(row.nbytes, l2)
        t = B.KernelTime(100.0, 5.0, False, iters, repeats)
        row.times = {i: t for i in bench_cli._IMPLS}
        row.check, row.path = "ok", path
        return row

    props = SimpleNamespace(name="Fake H100", major=9, minor=0, total_memory=80 * 2**30, L2_cache_size=50 * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(B, "copy_bandwidth", lambda *a, **k: (3.0e12, B.KernelTime(700.0, 1.0, False, 20, 5)))
    monkeypatch.setattr(bench_cli, "_bench_row", fake_row)
    rc = bench_cli._run_cuda(list(fusions), quick=quick, plot=None, producer=producer)
    out = capsys.readouterr().out
    assert rc == 0, out
    return out, timed


@pytest.mark.parametrize("quick", [False, True])
def test_cuda_path_times_every_shape(monkeypatch, capsys, quick):
    # one row per (fusion, shape), the shape column
    out, timed = run_cuda_faked(monkeypatch, capsys, [by_name("sum_inner_fp32"), by_name("cast_chain")], quick=quick,
                                path="reference (reduction)")
    f = by_name("sum_inner_fp32")
    shapes = f.quick_shapes if quick else f.shapes
    assert timed == [("sum_inner_fp32", s) for s in shapes] + [
        ("cast_chain", (8192, 8192) if quick else (16384, 8192))]
    lines = [ln for ln in out.splitlines() if ln.startswith("sum_inner_fp32")]
    assert [ln.split()[1] for ln in lines] == ["x".join(map(str, s)) for s in shapes]
    assert all(ln.rstrip().endswith("reference (reduction)") for ln in lines)
    head = next(ln for ln in out.splitlines() if ln.startswith("fusion"))
    assert head.split()[:2] == ["fusion", "shape"]
    # labels with the shape where a fusion has several (the L2 note names the small one,
    # timed over rotated input sets: 0.5 MB a call against a 50 MiB L2)
    assert "sum_inner_fp32@128x1000 x64" in out and "128x1000 (x64)" in out
    assert "no row is host-bound" in out


def test_cuda_path_hands_the_producer_to_every_row_and_says_how_it_timed(monkeypatch, capsys):
    out, timed = run_cuda_faked(monkeypatch, capsys, [by_name("cast_chain"), by_name("sum_outer_bf16")], quick=True,
                                path="1 kernel (pointwise)", producer="write")
    assert timed == [("cast_chain", (8192, 8192), "write")] + [
        ("sum_outer_bf16", s, "write") for s in by_name("sum_outer_bf16").quick_shapes]
    assert "; --after-producer write" in out.splitlines()[0]
    assert "--after-producer write: each bandwidth row's call is timed alone" in out and "normal_" in out
    out, _ = run_cuda_faked(monkeypatch, capsys, [by_name("cast_chain")], quick=True, path="1 kernel (pointwise)",
                            producer="matmul")
    assert "--after-producer matmul: each bandwidth row's call is timed alone" in out and "@ [1024, columns]" in out
    out, _ = run_cuda_faked(monkeypatch, capsys, [by_name("cast_chain")], quick=True, path="1 kernel (pointwise)")
    assert "--after-producer" not in out


class _FakeTimers:
    """kernel_time and kernel_time_after_producer recording what they were asked to time."""

    def __init__(self, after_us: float | None = 42.0):
        self.loops, self.after, self.after_us = [], [], after_us

    def kernel_time(self, fn, *, iters, repeats):
        import fuser.benchmarks as B

        fn()
        self.loops.append(iters)
        return B.KernelTime(10.0, 2.0, False, iters, repeats)

    def kernel_time_after_producer(self, fn, inputs, *, producer, iters, repeats):
        fn()
        self.after.append((producer, [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)], iters))
        return self.after_us


def _row_on_cpu(monkeypatch, name, shape, producer, timers, l2=50 << 20):
    """`_bench_row` run on the CPU: inputs made on it, torch.compile and the CUDA timers faked."""
    import fuser.benchmarks as B
    from fuser.benchmarks.fusions import BenchFusion

    make = BenchFusion.make_inputs
    monkeypatch.setattr(BenchFusion, "make_inputs", lambda self, device="cpu", shape=None: make(self, "cpu", shape))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(bench_cli, "_compiled", lambda fn: fn)
    monkeypatch.setattr(B, "kernel_time", timers.kernel_time)
    monkeypatch.setattr(B, "kernel_time_after_producer", timers.kernel_time_after_producer)
    monkeypatch.setattr(B, "host_time_per_call", lambda fn, calls: 3.0)
    return bench_cli._bench_row(by_name(name), shape, iters=20, repeats=3, latency_calls=10, l2=l2, producer=producer)


@pytest.mark.parametrize("producer", ["copy", "write", "matmul"])
def test_a_bandwidth_row_after_a_producer_times_each_impl_on_its_inputs(monkeypatch, producer):
    timers = _FakeTimers()
    row = _row_on_cpu(monkeypatch, "cast_chain", (64, 96), producer, timers)
    assert row.check == "ok" and row.sets == 1  # one input set: the one the producer rewrites
    assert timers.loops == []
    assert timers.after == [(producer, [(64, 96)], 20)] * 3
    for impl in bench_cli._IMPLS:
        t = row.times[impl]
        assert t.us == 42.0 and math.isnan(t.host_us) and not t.host_bound
    table = bench_cli._table([row], 3.0e12)
    cells = table.splitlines()[2].split()
    assert cells[2:6] == ["42.0", "42.0", "42.0", "-"], table


def test_without_a_producer_rows_rotate_their_inputs_and_latency_rows_ignore_it(monkeypatch):
    timers = _FakeTimers()
    row = _row_on_cpu(monkeypatch, "cast_chain", (64, 96), None, timers)
    assert row.sets == 64 and timers.after == [] and timers.loops == [20] * 3  # 64 small sets past the L2
    assert all(row.times[i].us == 10.0 for i in bench_cli._IMPLS)
    timers = _FakeTimers()
    row = _row_on_cpu(monkeypatch, "latency_gelu_8x8", (8, 8), "copy", timers)
    assert row.sets == 1 and timers.after == [] and timers.loops == [20] * 3
    assert row.latency["fuser"] == 3.0


def test_a_row_whose_inputs_the_producer_cannot_rewrite_is_na_with_the_reason(monkeypatch):
    row = _row_on_cpu(monkeypatch, "cast_chain", (64, 96), "copy", _FakeTimers(after_us=None))
    assert all(row.times[i] is None for i in bench_cli._IMPLS)
    assert "no input the producer can rewrite" in row.errors["fuser"]
    assert bench_cli._table([row], 3.0e12).splitlines()[2].split()[2:6] == ["n/a"] * 4


def test_after_producer_is_refused_when_unknown_and_ignored_without_the_table(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--cpu", "--after-producer", "paste"])
    assert "invalid choice: 'paste'" in capsys.readouterr().err
    assert bench_cli.run_bench(cpu=True, only=["cast_chain"], after_producer="paste") == 2
    assert "--after-producer paste: one of copy, write" in capsys.readouterr().err
    assert main(["bench", "--cpu", "--only", "cast_chain", "--after-producer", "copy"]) == 0
    got = capsys.readouterr()
    assert "it times the table's kernels, which this run does not" in got.err and "cast_chain" in got.out


def test_rotation_exceeds_l2_and_host_bound_rows_are_named():
    import fuser.benchmarks as B

    assert B.rotation(10 << 20, 50 << 20) == 20  # 20 sets of 10 MiB move 4x the 50 MiB L2
    assert B.rotation(300 << 20, 50 << 20) == 1
    assert B.rotation(1000, 50 << 20) == 64  # capped
    seen = []
    fn = B.rotating(seen.append, [[1], [2], [3]])
    for _ in range(4):
        fn()
    assert seen == [[1], [2], [3], [1]]
    row = bench_cli._Row(by_name("cast_chain"), (64, 96))
    row.times = {"fuser": B.KernelTime(2.0, 9.0, True, 10, 3), "eager": B.KernelTime(3.0, 1.0, False, 10, 3)}
    (note,) = bench_cli._notes([row], 50 << 20)
    assert note.startswith("* host-bound") and note.endswith(": cast_chain@64x96 (fuser)")


def test_bytes_moved_counts_broadcast_inputs_once():
    f = by_name("bias_relu")
    x, bias = f.make_inputs("cpu", (4, 6))
    expanded = bias.expand(4, 6)  # stride 0 on the rows: stored once
    assert stored_bytes(expanded) == 6 * 2
    assert f.bytes_moved([x, expanded]) == 4 * 6 * 2 + 6 * 2 + 4 * 6 * 2


def test_large_shapes_bytes_without_allocating():
    # the benchmark shapes, on meta tensors: what the GB column reports
    f = by_name("gelu_tanh_bf16")
    x = torch.empty(f.shape, dtype=torch.bfloat16, device="meta")
    assert f.bytes_moved([x]) == 2 * 16384 * 8192 * 2
    f = by_name("where3_fp16")
    xs = [torch.empty(f.shape, dtype=torch.float16, device="meta")] * 3
    assert f.bytes_moved(xs) == 4 * 16384 * 8192 * 2


def test_bench_cpu_flag_in_process(capsys):
    assert main(["bench", "--quick", "--cpu", "--only", "cast_chain", "bias_relu"]) == 0
    out = capsys.readouterr().out
    assert "--cpu given" in out
    assert "cast_chain" in out and "bias_relu" in out and "where3_fp16" not in out
    assert out.count(" ok") >= 2
    assert "MISMATCH" not in out and "ERROR" not in out


def test_bench_cpu_reductions_in_process(capsys):
    assert main(["bench", "--cpu", "--only", *REDUCTION_NAMES]) == 0
    out = capsys.readouterr().out
    for name in REDUCTION_NAMES:
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        sched = "reduction" if name.startswith(("sum_", "var_mean")) else "inner_persistent"
        assert f"reference ({sched})" in line and line.rstrip().endswith("ok"), line
    assert f"all {len(REDUCTION_NAMES)} fusions match eager PyTorch" in out


def test_bench_unknown_fusion(capsys):
    assert main(["bench", "--cpu", "--only", "nope"]) == 2
    assert "no benchmark fusion 'nope'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path; on a GPU `bench --quick` times kernels")
def test_bench_quick_subprocess_without_gpu():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "fuser", "bench", "--quick"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "CUDA is not available" in out
    for name in NAMES:
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        assert line.rstrip().endswith("ok"), line
    assert "MISMATCH" not in out
    assert f"all {len(NAMES)} fusions match eager PyTorch" in out


@pytest.mark.gpu
def test_bench_quick_on_gpu(capsys):
    rc = main(["bench", "--quick", "--only", "cast_chain", "latency_gelu_8x8"])
    out = capsys.readouterr().out
    assert "copy bandwidth" in out and "cast_chain" in out
    assert "host latency" in out and "first-run compile time" in out
    assert rc == 0, out


@pytest.mark.gpu
@pytest.mark.parametrize("producer", ["copy", "write", "matmul"])
def test_bench_after_a_producer_on_gpu(capsys, producer):
    # each impl timed right after the producer: a time per call in each column, the host
    # column "-", the result checked and the segment a generated kernel. (How the times
    # compare with the loop-timed ones is the bench's to show, not a test's: a ratio
    # asserted here failed on a GPU shared with other test processes.)
    rc = main(["bench", "--quick", "--only", "cast_chain", "--after-producer", producer])
    out = capsys.readouterr().out
    assert rc == 0, out
    (row,) = [ln.split() for ln in out.splitlines() if ln.split()[:1] == ["cast_chain"]]
    assert all(float(c.rstrip("*")) > 0 for c in row[2:5]), row
    assert row[5] == "-" and row[-4:] == ["ok", "1", "kernel", "(pointwise)"], row


@pytest.mark.gpu
def test_bench_quick_reductions_on_gpu(capsys):
    # every quick shape of a normalisation, checked against eager, named by its scheduler; the
    # segment must be a generated kernel (FUSER_TEST_ALLOW_REFERENCE=1 accepts the reference
    # executor while the kernels land)
    rc = main(["bench", "--quick", "--only", "rmsnorm_fwd_bf16"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [ln for ln in out.splitlines() if ln.split()[:1] == ["rmsnorm_fwd_bf16"]]
    assert [ln.split()[1] for ln in rows] == ["x".join(map(str, s)) for s in REDUCTION_QUICK_SHAPES], out
    allowed = ["1 kernel (inner_persistent)"]
    if os.environ.get("FUSER_TEST_ALLOW_REFERENCE", "") not in ("", "0"):
        allowed.append("reference (inner_persistent)")
    for ln in rows:
        assert " ok " in ln and any(ln.rstrip().endswith(a) for a in allowed), ln


def test_sweeps_set_each_value_and_restore_the_constant():
    from fuser.benchmarks import sweeps as S
    from fuser.scheduler import reduction

    sw = S.by_name("outer_blocks_per_sm")
    shipped = reduction.OUTER_BLOCKS_PER_SM
    seen, resets = [], []

    def time_one(f, shape):
        seen.append((f.name, shape, reduction.OUTER_BLOCKS_PER_SM))
        return 10.0 + reduction.OUTER_BLOCKS_PER_SM if reduction.OUTER_BLOCKS_PER_SM != 6 else None

    rows = S.run(sw, time_one, lambda: resets.append(1))
    assert reduction.OUTER_BLOCKS_PER_SM == shipped
    assert seen == [("sum_outer_bf16", s, v) for s in sw.shapes for v in sw.settings]
    assert len(resets) == len(seen) + 1  # before each setting, and after the sweep
    text = S.table(sw, rows, "Fake GPU")
    lines = text.splitlines()
    assert lines[0].startswith("sweep outer_blocks_per_sm on Fake GPU")
    assert f"OUTER_BLOCKS_PER_SM={shipped} (now)" in lines[1]
    assert lines[2].split()[:3] == ["16384x4096", "11.0", "<"]  # the fastest marked
    assert lines[2].split()[-1] == "n/a"
    for sw in S.SWEEPS:  # every sweep names a real constant and fusion
        assert isinstance(sw.current, (int, float, str))
        for module, constant, value in sw.fixed:
            assert type(getattr(importlib.import_module(module), constant)) is type(value)
        by_name(sw.fusion)
    with pytest.raises(KeyError, match="no sweep 'nope'"):
        S.by_name("nope")


def test_a_sweeps_fixed_setting_holds_through_it_and_is_restored():
    from fuser.benchmarks import sweeps as S
    from fuser.lower import row_loop
    from fuser.scheduler import normalization

    sw = S.by_name("row_loop_loads_rmsnorm_fwd_bf16")
    loop, loads = normalization.PERSISTENT_ROW_LOOP, row_loop.ROW_LOOP_LOADS
    seen = []
    rows = S.run(sw, lambda f, shape: seen.append((normalization.PERSISTENT_ROW_LOOP, row_loop.ROW_LOOP_LOADS)) or 1.0,
                 lambda: None)
    assert seen == [("always", v) for _ in sw.shapes for v in sw.settings]
    assert (normalization.PERSISTENT_ROW_LOOP, row_loop.ROW_LOOP_LOADS) == (loop, loads)
    assert "PERSISTENT_ROW_LOOP='always'" in S.table(sw, rows, "Fake GPU").splitlines()[0]


def test_a_step_sweep_times_its_producer_with_each_call_and_says_so():
    from fuser.benchmarks import kernel_time_after_producer
    from fuser.benchmarks import sweeps as S

    sw = S.by_name("persistent_cache_hints_step_after_writer_layernorm_fwd_bf16")
    assert (S.timer(sw).func, S.timer(sw).keywords) == (kernel_time_after_producer, {"producer": "write", "step": True})
    copy = S.timer(S.by_name("persistent_cache_hints_step_after_producer_layernorm_fwd_bf16"))
    assert copy.keywords == {"producer": "copy", "step": True}
    alone = S.timer(S.by_name("persistent_cache_hints_after_writer_layernorm_fwd_bf16"))
    assert alone.keywords == {"producer": "write", "step": False}
    assert S.timer(S.by_name("persistent_cache_hints_sizes_rmsnorm_fwd_bf16")) is None  # rotating inputs
    rows = [((16384, 4096), {"plain": 95.0, "streaming": 96.5})]
    head = S.table(sw, rows, "Fake GPU").splitlines()[0]
    assert "µs per producer + call;" in head
    call = S.by_name("persistent_cache_hints_after_writer_layernorm_fwd_bf16")
    rows = [((16384, 4096), {v: 90.0 for v in call.settings})]
    assert "µs per call;" in S.table(call, rows, "Fake GPU").splitlines()[0]
    with pytest.raises(ValueError, match="sweep 'x': step=True .*give producer"):
        S.Sweep("x", "fuser.lower.reduction", "PERSISTENT_CACHE_HINTS", ("plain",), "rmsnorm_fwd_bf16",
                ((8, 8),), "about", step=True)
    with pytest.raises(ValueError, match="sweep 'x': producer='writer', not one of"):
        S.Sweep("x", "fuser.lower.reduction", "PERSISTENT_CACHE_HINTS", ("plain",), "rmsnorm_fwd_bf16",
                ((8, 8),), "about", producer="writer")


def test_kernel_time_after_producer_needs_an_input_it_can_rewrite_on_the_gpu():
    from fuser.benchmarks import kernel_time_after_producer

    calls = []
    x = torch.randn(4, 8)
    assert kernel_time_after_producer(lambda: calls.append(1), [x, 2.0]) is None  # on the CPU
    assert kernel_time_after_producer(lambda: calls.append(1), []) is None
    assert calls == []  # nothing timed, nothing run
    with pytest.raises(ValueError, match="producer='paste'"):
        kernel_time_after_producer(lambda: calls.append(1), [x], producer="paste")


def test_a_matmul_producer_rewrites_the_input_as_a_linear_layers_output():
    from fuser.benchmarks import MATMUL_PRODUCER_K, PRODUCERS, _rewriter

    assert "matmul" in PRODUCERS
    torch.manual_seed(3)
    x = torch.randn(2, 6, 40, dtype=torch.bfloat16)
    keep = x.clone()
    rewrite = _rewriter(x, "matmul")
    a, b = rewrite.args
    assert a.shape == (12, MATMUL_PRODUCER_K) and b.shape == (MATMUL_PRODUCER_K, 40) and a.dtype == torch.bfloat16
    rewrite()
    assert not torch.equal(x, keep)  # written in place, through the view
    torch.testing.assert_close(x.view(12, 40), (a @ b), rtol=0, atol=0)
    assert 0.5 < x.float().std().item() < 2.0  # a linear layer's scale
    with pytest.raises(ValueError, match="needs it contiguous"):
        _rewriter(torch.randn(40, 6).t(), "matmul")
    with pytest.raises(ValueError, match="with a matmul, which needs a floating-point tensor; it is torch.int32"):
        _rewriter(torch.ones(4, 4, dtype=torch.int32), "matmul")
    with pytest.raises(ValueError, match="with normal_, which needs a floating-point"):
        _rewriter(torch.ones(4, 4, dtype=torch.int32), "write")
    y = torch.randn(3, 5)
    before = y.clone()
    _rewriter(y, "write")()
    assert not torch.equal(y, before)
    z = torch.randn(3, 5)
    copy = _rewriter(z, "copy")
    z.zero_()
    copy()
    assert z.abs().sum() > 0  # the clone taken before


def test_a_copy_may_rewrite_only_a_tensor_whose_elements_are_distinct():
    from fuser.benchmarks import _elements_distinct

    x = torch.randn(4, 8)
    assert _elements_distinct(x) and _elements_distinct(x.t()) and _elements_distinct(x[:, ::2])
    assert _elements_distinct(torch.randn(1, 8).expand(1, 8))
    assert not _elements_distinct(torch.randn(1, 8).expand(3, 8))
    assert not _elements_distinct(torch.randn(8).as_strided((3, 4), (2, 1)))  # rows overlap


@pytest.mark.gpu
def test_kernel_time_after_producer_times_the_call_after_its_input_is_rewritten():
    from fuser.benchmarks import kernel_time, kernel_time_after_producer

    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(1, 4096, device="cuda").expand(4096, 4096)  # (expanded: never the one rewritten)
    before = x.clone()
    seen = []
    t = kernel_time_after_producer(lambda: seen.append(torch.neg(x)), [w, x], iters=5, repeats=2)
    assert t is not None and t > 0
    # warm-up, the host's issue-time estimate (at most 10 calls), then each timed call
    assert len(seen) == 3 + min(10, 5) + 5 * 2 and torch.equal(x, before)
    # a read and a write of 64 MB: within a factor of the same call timed over a loop
    loop = kernel_time(lambda: torch.neg(x), iters=20, repeats=3).us
    assert 0.5 * loop < t < 2.0 * loop, (t, loop)
    # a producer that only writes: fresh normal values in the input before each call
    seen.clear()
    t = kernel_time_after_producer(lambda: seen.append(x.clone()), [w, x], iters=5, repeats=2, producer="write")
    assert t is not None and t > 0 and not torch.equal(x, before)
    assert not torch.equal(seen[-1], seen[-2]) and 0.9 < seen[-1].std().item() < 1.1
    with pytest.raises(ValueError, match="floating-point.*torch.int64"):
        kernel_time_after_producer(lambda: None, [torch.arange(64, device="cuda")], producer="write")
    # step: the copy (a read and a write of 64 MB, as the call) timed with each call
    t = kernel_time_after_producer(lambda: torch.neg(x), [w, x], iters=5, repeats=2)
    both = kernel_time_after_producer(lambda: torch.neg(x), [w, x], iters=5, repeats=2, step=True)
    assert 1.5 * t < both < 3.0 * t, (t, both)


def test_overlap_table_reports_wall_time_against_the_parts():
    """bench --overlap's table: the loop's GPU time and its wall time (what a caller
    waits when the host is the slower side) are each divided by the sum of the parts."""
    from fuser.benchmarks.overlap import OverlapRow, table

    row = OverlapRow((4, 8, 16, 32), loop_us=90.0, matmul_us=80.0, pointwise_us=20.0, sequential_us=101.0,
                     loop_host_us=150.0, host_bound=True, loop_wall_us=150.0)
    text = table([row], "a GPU")
    cells = [c.strip() for c in text.splitlines()[3].strip("|").split("|")]
    assert cells[0] == "4 x 8 x 16 x 32"
    assert cells[4] == "100.0" and cells[5] == "0.90"  # GPU time / sum of parts
    assert cells[7] == "150.0 (host-bound)"
    assert cells[8] == "150.0" and cells[9] == "1.50"  # wall / sum: the host decides
