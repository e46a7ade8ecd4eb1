"""What a user meets at the call boundary (issue "The first hour of a user", item 3): a
tensor or a nested list where the list of inputs belongs, a scalar where a tensor input is
defined, and the demo asked for a device it cannot run on, each answered with a sentence
that says what was expected."""
import subprocess
import sys

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionInputError


def _relu() -> FusionDefinition:
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.relu(t0))
    return fd


def test_a_tensor_given_as_the_inputs_says_to_pass_a_list():
    with pytest.raises(FusionInputError, match=r"must be a list .* got a torch.Tensor of shape \[2, 3\]; pass \[tensor\]"):
        _relu().execute(torch.randn(2, 3))


def test_a_nested_list_of_tensors_is_refused_by_position():
    with pytest.raises(FusionInputError, match="input 0 is a nested list holding tensors"):
        _relu().execute([[torch.randn(2, 3)]])


def test_a_list_of_sizes_still_spreads_into_scalar_inputs():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.mul(t0, n))
    x = torch.randn(5)
    (out,) = fd.execute([x, [3]])
    assert torch.equal(out, x * 3)


def test_a_scalar_for_a_tensor_input_has_nvfusers_text():
    with pytest.raises(RuntimeError, match=r"^Expected input 0, T0_g_float\[iS0\{i0\}, iS1\{i1\}\], to be an at::Tensor "
                                           r"but got scalar 2 \(input 0 \(T0\): expected a torch.Tensor, got int 2\)"):
        _relu().execute([2])


@pytest.mark.parametrize("device, says", [("meta", "takes cpu or cuda"), ("cuda", "needs a CUDA GPU")])
def test_the_demo_refuses_a_device_it_cannot_run_on_with_a_sentence(device, says):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the demo runs there")
    got = subprocess.run([sys.executable, "-m", "fuser", "demo", "--device", device], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 2
    assert says in got.stderr and "Traceback" not in got.stderr


def test_bench_plot_says_when_it_cannot_draw(capsys, monkeypatch):
    """--plot on a path that draws nothing (no matplotlib, or a CPU run) says so first."""
    import importlib.util

    from fuser.cli import bench

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert bench.run_bench(cpu=True, plot="/tmp/never.png", only=["latency_gelu_8x8"]) == 0
    assert "needs matplotlib" in capsys.readouterr().err
    monkeypatch.setattr(importlib.util, "find_spec", real)
    if real("matplotlib") is not None:
        assert bench.run_bench(cpu=True, plot="/tmp/never.png", only=["latency_gelu_8x8"]) == 0
        assert "does not make" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["last_cuda_code", "last_scheduled_fusion_ir", "last_segments"])
def test_last_introspection_before_any_execution_says_never_executed(method):
    with pytest.raises(RuntimeError, match="never been executed"):
        getattr(_relu(), method)()
