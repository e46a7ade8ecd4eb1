"""The backward-normalisation benchmarks (issue 9, item 5) shared by `python -m fuser bench`
and asv, on CPU: RMSNorm / LayerNorm / softmax backward and the outer-persistent batch norm
(bf16 and fp32), seed 001's RMSNorm backward, and the "backward" group that selects them.

The generic CPU check of every fusion against its eager function at `small_shape` is
`tests/test_bench_cli.py::test_fuser_matches_eager_on_cpu` (it covers these through
`FUSIONS`); here: odd shapes, the eager references against autograd, bytes moved,
tolerances, and the CLI's group selection."""
import math

import pytest
import torch
import torch.nn.functional as Fn

from fuser.benchmarks import FUSIONS, GROUPS, by_name, select
from fuser.benchmarks import fusions as BF
from fuser.benchmarks.fusions import (
    BACKWARD_SHAPES,
    NORM_EPS,
    REDUCTION_QUICK_SHAPES,
    SEED001_SHAPE,
    reduction_tolerance,
)
from fuser.cli import bench as bench_cli
from fuser.cli import main
from fuser.runtime.tolerance import assert_close
from test_bench_cli import matches_eager

#: the symbolic-size backward set, bf16 and fp32
SYMBOLIC = [f"{op}_{dt}" for dt in ("bf16", "fp32")
            for op in ("rmsnorm_bwd", "layernorm_bwd", "softmax_bwd", "batchnorm_fwd")]
SEED001 = "seed001_rmsnorm_bwd_bf16"
BACKWARD_NAMES = SYMBOLIC + [SEED001]
#: the one segment each runs as (the scheduler fuser picks for it)
SCHEDULER = {"rmsnorm_bwd": "inner_outer_persistent", "layernorm_bwd": "inner_outer_persistent",
             "softmax_bwd": "inner_persistent", "batchnorm_fwd": "outer_persistent"}


def _op(name: str) -> str:
    """"rmsnorm_bwd" of "rmsnorm_bwd_bf16"."""
    return name.rsplit("_", 1)[0]


def test_backward_fusions_exist_with_their_shapes():
    assert GROUPS["backward"] == tuple(BACKWARD_NAMES)
    assert BACKWARD_SHAPES == ((16384, 4096), (8192, 8192), (2048, 16384), (128, 1000))
    for name in SYMBOLIC:
        f = by_name(name)
        assert f.kind == "bandwidth" and f.group == "backward" and f.reduced
        assert f.shapes == BACKWARD_SHAPES and f.shape == (16384, 4096)
        assert f.quick_shapes == REDUCTION_QUICK_SHAPES and set(f.quick_shapes) < set(f.shapes)
        assert f.small_shape == (64, 96)
    s = by_name(SEED001)
    assert s.group == "backward" and s.kind == "bandwidth"
    assert s.shapes == s.quick_shapes == (SEED001_SHAPE,) and s.small_shape == SEED001_SHAPE == (56, 1024, 1024)


@pytest.mark.parametrize("name", SYMBOLIC)
def test_backward_fusions_on_cpu_at_odd_shapes(name):
    # rows neither powers of two nor multiples of a vector ([7, 1025]), the small benchmark
    # shape [128, 1000], and a tall one ([1025, 7]: the outer reductions run over 1025 rows)
    f = by_name(name)
    for shape in ((7, 1025), (128, 1000), (1025, 7)):
        inputs = f.make_inputs("cpu", shape)
        assert all(x.abs().sum() > 0 for x in inputs)
        fd = matches_eager(f, inputs, f"{name} {shape}")
        # the whole fusion is one segment, named by the scheduler a kernel would use
        segs = bench_cli.fuser_segments(fd)
        assert [s for s, _ in segs] == [SCHEDULER[_op(name)]], segs


def _fp32_inputs(name, shape=(6, 40)):
    """Seeded CPU inputs of the fusion `name` at `shape`."""
    torch.manual_seed(0)
    return by_name(name).make_inputs("cpu", shape)


def test_rmsnorm_bwd_reference_is_autograd_of_rmsnorm():
    g, x, rstd, w = _fp32_inputs("rmsnorm_bwd_fp32")
    # the saved rstd is the forward's
    assert_close(rstd, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS), what="rstd")
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    (xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + NORM_EPS) * wr).backward(g)
    dx, dw = by_name("rmsnorm_bwd_fp32").eager([g, x, rstd, w])
    assert_close(dx, xr.grad, what="dx", rtol=1e-4, atol=1e-5)
    assert_close(dw, wr.grad, what="dweight", rtol=1e-4, atol=1e-5)


def test_layernorm_bwd_reference_is_autograd_of_layer_norm():
    g, x, mean, rstd, w = _fp32_inputs("layernorm_bwd_fp32")
    var, m = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
    assert_close(mean, m, what="mean")
    assert_close(rstd, torch.rsqrt(var + NORM_EPS), what="rstd")
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    br = torch.randn_like(w).requires_grad_()
    Fn.layer_norm(xr, [x.shape[-1]], wr, br, NORM_EPS).backward(g)
    dx, dw, db = by_name("layernorm_bwd_fp32").eager([g, x, mean, rstd, w])
    for what, got, want in (("dx", dx, xr.grad), ("dweight", dw, wr.grad), ("dbias", db, br.grad)):
        assert_close(got, want, what=what, rtol=1e-4, atol=1e-5)


def test_softmax_bwd_reference_is_autograd_of_softmax():
    torch.manual_seed(0)
    logits = torch.randn(6, 40, requires_grad=True)
    y = torch.softmax(logits, -1)
    dy = torch.randn(6, 40)
    y.backward(dy)
    (dx,) = by_name("softmax_bwd_fp32").eager([dy, y.detach()])
    assert_close(dx, logits.grad, what="dx", rtol=1e-4, atol=1e-6)
    # the benchmark's y is a softmax output: rows of positive values summing to 1
    _, y = _fp32_inputs("softmax_bwd_fp32")
    assert (y > 0).all() and torch.allclose(y.sum(-1), torch.ones(6))


def test_batchnorm_reference_is_batch_norm_training_over_rows():
    x, w, b = _fp32_inputs("batchnorm_fwd_fp32", (50, 8))
    y, mean, invstd = by_name("batchnorm_fwd_fp32").eager([x, w, b])
    assert_close(y, Fn.batch_norm(x, None, None, w, b, training=True, eps=NORM_EPS), what="y", rtol=1e-4, atol=1e-5)
    var, m = torch.var_mean(x, dim=0, correction=0)
    assert_close(mean, m, what="mean")
    assert_close(invstd, torch.rsqrt(var + NORM_EPS), what="invstd")


def test_dtypes_and_shapes_of_outputs():
    f32 = torch.float32
    M, N = 4, 6
    for tag, dt in (("bf16", torch.bfloat16), ("fp32", f32)):
        outs = {
            "rmsnorm_bwd": ([dt, dt, f32, dt], [dt, dt], [(M, N), (N,)]),
            "layernorm_bwd": ([dt, dt, f32, f32, dt], [dt, dt, dt], [(M, N), (N,), (N,)]),
            "softmax_bwd": ([dt, dt], [dt], [(M, N)]),
            "batchnorm_fwd": ([dt, dt, dt], [dt, f32, f32], [(M, N), (N,), (N,)]),
        }
        for op, (din, dout, shapes) in outs.items():
            f = by_name(f"{op}_{tag}")
            x = f.make_inputs("cpu", (M, N))
            assert [t.dtype for t in x] == din, op
            meta = [torch.empty_like(t, device="meta") for t in x]
            # eager on CPU and on meta (what bytes_moved sizes outputs by), and fuser
            for ys in (f.eager(x), f.eager(meta), f.fusion_definition().execute(x)):
                assert [y.dtype for y in ys] == dout, op
                assert [tuple(y.shape) for y in ys] == shapes, op


def test_bytes_moved_backward():
    # every input read once, every output written once; statistics are float32
    M, N = 4, 6
    for tag, e in (("bf16", 2), ("fp32", 4)):
        cases = {
            "rmsnorm_bwd": (2 * M * N + N) * e + M * 4 + (M * N + N) * e,
            "layernorm_bwd": (2 * M * N + N) * e + 2 * M * 4 + (M * N + 2 * N) * e,
            "softmax_bwd": 3 * M * N * e,
            "batchnorm_fwd": (M * N + 2 * N) * e + M * N * e + 2 * N * 4,
        }
        for op, nbytes in cases.items():
            f = by_name(f"{op}_{tag}")
            assert f.bytes_moved(f.make_inputs("cpu", (M, N))) == nbytes, op
    # at the LLM shape, on meta tensors: bf16 RMSNorm backward [16384, 4096] moves 3 x 128 MiB,
    # rstd, weight and dweight
    M, N = 16384, 4096
    f = by_name("rmsnorm_bwd_bf16")
    bf = torch.bfloat16
    meta = [torch.empty(M, N, dtype=bf, device="meta"), torch.empty(M, N, dtype=bf, device="meta"),
            torch.empty(M, 1, device="meta"), torch.empty(N, dtype=bf, device="meta")]
    assert f.bytes_moved(meta) == 3 * M * N * 2 + M * 4 + 2 * N * 2


def test_seed001_inputs_and_bytes_moved():
    # the report's layout: T0 and T1 expanded from [1024] (stored once), T3 and T6 dense bf16
    s = by_name(SEED001)
    meta = s.make_inputs("meta")
    assert [tuple(x.shape) for x in meta] == [SEED001_SHAPE] * 2 + [(56, 1, 1024), SEED001_SHAPE, (56, 1024),
                                                                     (56, 1024, 1), SEED001_SHAPE]
    assert meta[0].stride() == (0, 0, 1)
    big = 56 * 1024 * 1024
    read = 2 * 1024 * 2 + 56 * 1024 * 2 + big * 2 + 2 * 56 * 1024 * 4 + big * 2
    written = 2 * 56 * 1024 * 2 + 2 * 1024 * 2 + big * 2
    assert s.bytes_moved(meta) == read + written
    with pytest.raises(ValueError, match="hard-codes"):
        s.make_inputs("meta", (64, 96))


def test_per_output_tolerances():
    # dx reduces over N (terms of 1/N), dweight and dbias over M (terms of 1): each output's
    # tolerance grows with its own extent
    M, N = 2048, 16384
    f32 = torch.float32
    x = torch.empty(M, N, device="meta")
    col = torch.empty(N, device="meta")
    f = by_name("layernorm_bwd_fp32")
    assert f.tolerance([x], x, 0) == reduction_tolerance(f32, N, 1.0 / N)
    assert f.tolerance([x], col, 1) == reduction_tolerance(f32, M)
    assert f.tolerance([x], col, 2) == reduction_tolerance(f32, M)
    f = by_name("rmsnorm_bwd_fp32")
    assert f.tolerance([x], col, 1) == reduction_tolerance(f32, M)
    assert f.tolerance([x], col, 1) != reduction_tolerance(f32, N)
    f = by_name("batchnorm_fwd_fp32")
    assert f.tolerance([x], col, 1) == reduction_tolerance(f32, M, 1.0 / M)
    s = by_name(SEED001)
    t0 = torch.empty(SEED001_SHAPE, dtype=torch.bfloat16, device="meta")
    assert s.tolerance([t0], torch.empty(1024, dtype=torch.bfloat16, device="meta"), 2) == \
        reduction_tolerance(torch.bfloat16, 56 * 1024)
    assert math.isclose(reduction_tolerance(f32, M)[1], 4 * torch.finfo(f32).eps * M)


def test_groups_and_select():
    # every fusion in exactly one group, groups in FUSIONS order
    assert list(GROUPS) == ["pointwise", "reduction", "backward", "shapes"]
    assert sorted(n for names in GROUPS.values() for n in names) == sorted(f.name for f in FUSIONS)
    assert GROUPS["reduction"] == tuple(f.name for f in FUSIONS if f.reduced and f.group == "reduction")
    assert [f.name for f in select(["backward"])] == BACKWARD_NAMES
    assert select(None) == select([]) == list(FUSIONS)
    # names and groups mix, in the order given, each fusion once
    names = [f.name for f in select(["softmax_bwd_fp32", "backward", "cast_chain", "rmsnorm_bwd_bf16"])]
    assert names == ["softmax_bwd_fp32"] + [n for n in BACKWARD_NAMES if n != "softmax_bwd_fp32"] + ["cast_chain"]
    with pytest.raises(KeyError, match="groups: pointwise, reduction, backward"):
        select(["backwards"])
    assert bench_cli._select(["backward"]) == select(["backward"])


def test_bench_help_shows_the_groups(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "pointwise, reduction, backward, shapes; e.g. --only backward" in out
    for name in BACKWARD_NAMES:
        assert name in out


def test_bench_cpu_backward_group_in_process(capsys):
    # `--only backward` runs the whole group (seed 001 at its real shape included) on CPU
    assert main(["bench", "--cpu", "--only", "backward"]) == 0
    out = capsys.readouterr().out
    for name in BACKWARD_NAMES:
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        assert line.rstrip().endswith("ok"), line
        if name in SYMBOLIC:
            assert f"reference ({SCHEDULER[_op(name)]})" in line, line
    assert "[56, 1024, 1024]" in out
    assert f"all {len(BACKWARD_NAMES)} fusions match eager PyTorch" in out


@pytest.mark.parametrize("quick", [False, True])
def test_cuda_path_times_every_backward_shape(monkeypatch, capsys, quick):
    # the CUDA path with the GPU parts replaced: one row per (fusion, shape)
    from test_bench_cli import run_cuda_faked

    out, timed = run_cuda_faked(monkeypatch, capsys, select(["backward"]), quick=quick,
                                path="1 kernel (inner_outer_persistent)")
    want = [(n, s) for n in SYMBOLIC for s in (REDUCTION_QUICK_SHAPES if quick else BACKWARD_SHAPES)]
    assert timed == want + [(SEED001, SEED001_SHAPE)]
    rows = [ln for ln in out.splitlines() if ln.split()[:1] == [SEED001]]
    assert len(rows) == 1 and rows[0].split()[1] == "56x1024x1024"
    assert "layernorm_bwd_fp32@128x1000" in out  # the L2 note names the small shape


def test_asv_benchmarks_list_the_backward_set():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "asv_bench" / "benchmarks" / "kernels.py"
    spec = importlib.util.spec_from_file_location("asv_kernels_under_test", path)
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    assert set(SYMBOLIC) <= set(kernels.KernelTimeShapes.params[0])
    assert {"x".join(map(str, s)) for s in BACKWARD_SHAPES} <= set(kernels.KernelTimeShapes.params[1])
    assert SEED001 in kernels.KernelTime.params[0]
    assert BF.FUSIONS is FUSIONS
