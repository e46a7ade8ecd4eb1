"""What a user meets at the call boundary (issue "The first hour of a user", item 3): a
tensor or a nested list where the list of inputs belongs, a scalar where a tensor input is
defined, and the demo asked for a device it cannot run on, each answered with a sentence
that says what was expected."""
import enum
import os
import re
import subprocess
import sys
import tempfile

import numpy
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionInputError
from fuser.runtime.binding import check_one_device, device_conflict


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


# --- inputs on more than one device -----------------------------------------------------------------------

_ONE_DEVICE = r"all tensor inputs must be on one device \(a 0-dim CPU scalar tensor may join CUDA inputs\); "


def _add() -> FusionDefinition:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(a, b))
    return fd


@pytest.fixture
def repro_dir(tmp_path, monkeypatch):
    """The temp directory execute writes failed runs' repro scripts to."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("devices, says", [
    (("cpu", "meta"), "input 1 (T1) is on meta but input 0 (T0) is on cpu: "),
    (("meta", "cpu"), "input 1 (T1) is on cpu but input 0 (T0) is on meta: "),
])
def test_inputs_on_two_devices_are_refused_by_position_before_anything_runs(devices, says, monkeypatch, repro_dir):
    import fuser.host.executor as executor

    def must_not_run(*args, **kwargs):
        raise AssertionError("the fusion ran on inputs of two devices")

    monkeypatch.setattr(executor, "lower_and_prepare", must_not_run)
    inputs = [torch.zeros(3, device=d) for d in devices]
    with pytest.raises(FusionInputError, match="^" + re.escape(says) + _ONE_DEVICE + "a meta tensor holds no data"):
        _add().execute(inputs)


def test_device_conflict_names_every_stray_cuda_input():
    cuda0, cuda1, cpu = torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")
    # (position, device, ndim): tensors on two GPUs can only be described, not made, without GPUs
    got = device_conflict([(0, cuda0, 2), (1, cpu, 0), (2, cuda1, 1), (3, cuda1, 2)])
    assert got == ("input 2 is on cuda:1, input 3 is on cuda:1 but input 0 is on cuda:0: all tensor inputs must be "
                   "on one device (a 0-dim CPU scalar tensor may join CUDA inputs); move them with .to('cuda:0')")
    # a CPU tensor with dims is no CPU scalar
    assert device_conflict([(0, cuda0, 2), (1, cpu, 1)]) == (
        "input 1 is on cpu but input 0 is on cuda:0: all tensor inputs must be on one device (a 0-dim CPU scalar "
        "tensor may join CUDA inputs); move it with .to('cuda:0')")


def test_a_cpu_scalar_tensor_joins_tensors_of_another_device():
    cuda0, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert device_conflict([(0, cpu, 0), (1, cuda0, 2), (2, cuda0, 1)]) is None
    check_one_device([torch.zeros(3, device="meta"), torch.tensor(2.0), 5])  # refuses nothing
    with pytest.raises(ValueError, match="^input 1 is on meta but input 0 is on cpu: " + _ONE_DEVICE):
        check_one_device([torch.zeros(3), torch.zeros((), device="meta"), torch.tensor(2.0)])


def test_a_cpu_scalar_tensor_still_runs_beside_a_tensor():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        s = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)
        fd.add_output(fd.ops.mul(t, s))
    x = torch.randn(5)
    assert torch.equal(fd.execute([x, torch.tensor(3.0)])[0], x * 3.0)


# --- what a failed execute prints ---------------------------------------------------------------------------

_NVFUSER_SCALAR_TEXT = r"^Expected input 0, T0_g_float\[iS0\{i0\}, iS1\{i1\}\], to be an at::Tensor but got scalar 2 "


def test_a_failed_execute_says_where_the_repro_is_in_one_line(capsys, repro_dir):
    fd = _relu()
    with pytest.raises(RuntimeError, match=_NVFUSER_SCALAR_TEXT):
        fd.execute([2])
    err = capsys.readouterr().err
    path = repro_dir / f"fuser_repro_{fd.id()}_{os.getpid()}.py"
    assert err == f"fuser: executing FusionDefinition {fd.id()} failed (the error follows); a script reproducing it: {path}\n"
    script = path.read_text()
    assert script == fd.repro_script_for([2]) and script.endswith("inputs = [\n    2,\n]\nfd.execute(inputs)\n")
    compile(script, str(path), "exec")


def test_print_repro_prints_the_script_and_writes_no_file(capsys, repro_dir):
    fd = _relu()
    with pytest.raises(RuntimeError, match=_NVFUSER_SCALAR_TEXT):
        fd.execute([2], print_repro=True)
    got = capsys.readouterr()
    assert f"def nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :" in got.out
    assert got.err == "" and list(repro_dir.iterdir()) == []


def test_a_repro_that_cannot_be_written_still_lets_the_error_through(capsys, monkeypatch, tmp_path):
    missing = tmp_path / "missing"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    fd = _relu()
    with pytest.raises(FusionInputError, match=r"^input 0 \(T0\): expected dtype torch.float32 \(DataType.Float\), "
                                               r"got torch.float64$"):
        fd.execute([torch.zeros(2, 3, dtype=torch.float64)])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.fullmatch(
        rf"fuser: executing FusionDefinition {fd.id()} failed \(the error follows\); the repro script could not be "
        rf"written to {re.escape(str(missing))}/fuser_repro_{fd.id()}_{os.getpid()}\.py \(.+\): "
        r"fd\.repro_script_for\(inputs\) returns it\n", err), err


# --- repro scripts are Python for every input ---------------------------------------------------------------


class _Three(enum.IntEnum):
    """An int whose repr (<_Three.THREE: 3>) is no Python source."""

    THREE = 3


def _tensor_and_double() -> FusionDefinition:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        d = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(t, d))
    return fd


def _reproduces(fd: FusionDefinition, inputs: list) -> None:
    """The repro script compiles, and running it does what executing `inputs` did."""
    script = fd.repro_script_for(inputs)
    code = compile(script, "<repro>", "exec")
    try:
        fd.execute(inputs)
    except Exception as err:  # the script must fail the same way
        with pytest.raises(type(err), match="^" + re.escape(str(err)) + "$"):
            exec(code, {})
    else:
        exec(code, {})


@pytest.mark.parametrize("inputs", [
    [torch.ones(3), 2.5],
    [torch.ones(3), 2],
    [torch.ones(3), float("inf")],
    [torch.ones(3), -float("inf")],
    [torch.ones(3), float("nan")],
    [torch.ones(3), torch.tensor(2.0)],
    [torch.ones(3), True],
    [torch.ones(3), complex(1, 2)],
    [torch.ones(3), complex(float("inf"), float("nan"))],
    [torch.ones(3), None],
    ["a string", 1.0],
    [b"bytes", 1.0],
    [numpy.arange(6, dtype=numpy.float32).reshape(2, 3), 1.0],
    [numpy.array([1.0, float("nan")]), numpy.float64(float("inf"))],
    [torch.tensor(2.0), 1.0],
    [torch.ones(3), numpy.float64(2.5)],
    [torch.ones(3), _Three.THREE],
], ids=lambda x: type(x[0]).__name__ + "-" + type(x[1]).__name__ + "-" + str(x[1]).replace(" ", ""))
def test_the_repro_script_is_python_for_every_input_kind(inputs, repro_dir):
    _reproduces(_tensor_and_double(), inputs)


def test_a_repro_for_an_object_a_script_cannot_make_keeps_its_place(repro_dir):
    script = _tensor_and_double().repro_script_for([object(), 1.0])
    assert script.endswith("inputs = [\n    None,  # stands for a builtins.object, which a script cannot rebuild\n"
                           "    1.0,\n]\nfd.execute(inputs)\n")
    compile(script, "<repro>", "exec")


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("dtype", [d for d in DataType if d != DataType.Null], ids=str)
def test_the_repro_script_makes_tensors_of_every_dtype(dtype, contiguous, repro_dir):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[contiguous, contiguous], dtype=dtype)
        s = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float, is_cpu=True)
        fd.add_output(fd.ops.set(t))
        fd.add_output(fd.ops.mul(s, 2.0))
    x = torch.empty(4, 3, dtype=dtype.torch)
    inputs = [x if contiguous else x.t(), torch.tensor(1.5)]
    _reproduces(fd, inputs)
    # the script's own tensors have the inputs' dtype, sizes and strides
    made = {}
    exec(compile(fd.repro_script_for(inputs).replace("fd.execute(inputs)", ""), "<repro>", "exec"), made)
    assert [(y.dtype, y.shape, y.stride()) for y in made["inputs"]] == [(y.dtype, y.shape, y.stride()) for y in inputs]


# --- the fuzzer's command line -------------------------------------------------------------------------------


def test_gpu_fuzz_help_states_every_options_default():
    from tests.gpu_fuzz import build_parser

    options = [a.option_strings[-1] for a in build_parser()._actions if a.dest != "help"]
    assert "--cases" in options and "--progress" in options
    got = subprocess.run([sys.executable, "-m", "tests.gpu_fuzz", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    text = got.stdout.split("options:\n", 1)[1]
    # each option's block runs from its line to the next option's
    blocks = dict(re.findall(r"^  (--[\w-]+)(.*?)(?=^  -|\Z)", text, re.M | re.S))
    assert sorted(blocks) == sorted(options)
    for flag in options:
        assert re.search(r"\(default: [^)]", " ".join(blocks[flag].split())), f"{flag} states no default"

