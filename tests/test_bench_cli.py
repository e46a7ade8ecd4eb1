"""`python -m fuser bench` and the benchmark fusions it shares with asv, on CPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuser.benchmarks import FUSIONS, by_name, stored_bytes
from fuser.benchmarks.fusions import SMALL
from fuser.cli import main
from fuser.runtime.tolerance import assert_close

REPO = Path(__file__).resolve().parent.parent
NAMES = [f.name for f in FUSIONS]


def test_required_fusions_exist():
    assert {"gelu_tanh_bf16", "bias_relu", "cast_chain", "where3_fp16", "latency_gelu_8x8"} <= set(NAMES)
    assert by_name("gelu_tanh_bf16").shape == (16384, 8192)
    assert by_name("latency_gelu_8x8").shape == (8, 8)
    with pytest.raises(KeyError, match="known"):
        by_name("nope")


@pytest.mark.parametrize("name", NAMES)
def test_fuser_matches_eager_on_cpu(name):
    f = by_name(name)
    inputs = f.make_inputs("cpu", SMALL if f.kind == "bandwidth" else None)
    for x in inputs:
        assert x.device.type == "cpu"
        assert x.abs().sum() > 0, "inputs must not be zeros"
    fd = f.fusion_definition()
    got = fd.execute(inputs)
    want = f.eager(inputs)
    assert len(got) == len(want) == 1
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{name} output {k}")


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
        line = next(ln for ln in out.splitlines() if name in ln)
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
