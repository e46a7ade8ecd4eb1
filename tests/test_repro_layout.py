"""`fd.repro_script_for(inputs)` and `fd.print_repro` in nvFuser's layout, line for line
(issue 31, item 6).

The reference is nvFuser's `FusionDefinition.repro_script_for` of the 0.2.x frontend
(NVIDIA/Fuser, python/nvfuser/__init__.py, the release whose `save_repro_inputs` keeps fake
tensors, as fuser's does) and the C++ printer behind `str(fd)`
(csrc/python_frontend/fusion_definition.cpp `FusionDefinition::print`,
csrc/python_frontend/fusion_record.h `print` of each record). The script is:

    # CUDA devices:
    #  i: <torch.cuda.get_device_name(i)>      one line per device (none on a CPU machine)
    # torch version: <torch.__version__>
    # cuda version: <torch.version.cuda>
    # nvfuser version: <nvfuser.version()>
    import torch
    from fuser import FusionDefinition, DataType
    <str(fd): a blank line, the def line, the records, a blank line>
    with FusionDefinition() as fd:
        nvfuser_fusion_idN(fd)
    <a blank line>
    inputs = [
        <one line per input>,
    ]
    fd.execute(inputs)

The import line is the one line that differs from nvFuser's `from nvfuser import
FusionDefinition, DataType`, by choice: the script must run against fuser, and no module
named `nvfuser` exists where nvFuser is not installed (fuser's stand-in,
`fuser.compat.nvfuser`, is only importable under that name after a user registers it in
`sys.modules`). `fuser.FusionDefinition` and `fuser.DataType` are the objects the compat
module exports, so the rest of the script is nvFuser's text. The `# nvfuser version:` line
carries the frontend release fuser implements (what the compat module's `version()`
answers); fuser's own version is not written, so the header is nvFuser's exactly.

Inputs are written as nvFuser writes them: `torch.testing.make_tensor(size, dtype=...,
device='...')` for a contiguous tensor; random storage of `1 + sum((size - 1) * stride)`
elements viewed with `.as_strided(size, stride)` otherwise, `torch.randn(n, ...)` for a
floating dtype and `torch.randint(0, 10, (n,), ...)` (0, 2 for bool) for the others; any
other input as `str(x)` with inf and nan spelled `float("inf")` / `float("nan")`. Where
nvFuser's text would not run or would build another value (a str printed unquoted, a
complex with a non-finite imaginary part, numpy values, objects, complex or float8 strided
tensors, for which torch has no randint / randn), fuser keeps its own valid spelling: those
cases are covered by tests/test_call_boundary.py.
"""
import ast
import math

import pytest
import torch

import fuser.compat.nvfuser as nvfuser_compat
from fuser import DataType, FusionDefinition


def _header() -> str:
    """nvFuser's header lines and imports, computed from this machine's torch."""
    text = "# CUDA devices:\n"
    for i in range(torch.cuda.device_count()):
        text += f"#  {i}: {torch.cuda.get_device_name(i)}\n"
    text += (
        f"# torch version: {torch.__version__}\n"
        f"# cuda version: {torch.version.cuda}\n"
        f"# nvfuser version: {nvfuser_compat.version()}\n"
        "import torch\n"
        "from fuser import FusionDefinition, DataType\n"
    )
    return text


def _run_script(script: str) -> tuple[dict, list]:
    """Run a repro script as printed; returns its namespace and what its last line,
    `fd.execute(inputs)`, returned."""
    tree = ast.parse(script)
    last = tree.body[-1]
    assert isinstance(last, ast.Expr) and ast.unparse(last) == "fd.execute(inputs)"
    tree.body[-1] = ast.Assign(targets=[ast.Name("__outputs__", ast.Store())], value=last.value)
    ast.fix_missing_locations(tree)
    namespace: dict = {}
    exec(compile(tree, "<repro>", "exec"), namespace)
    return namespace, namespace["__outputs__"]


def _check_runs_like(fd: FusionDefinition, script: str, inputs: list) -> None:
    """The script runs; it defines the same fusion; its inputs have the dtypes, sizes and
    strides of `inputs` (tensors) or their values (scalars); and its result is what
    `fd.execute` gives for the script's inputs."""
    namespace, got = _run_script(script)
    assert namespace["fd"].id() == fd.id()
    made = namespace["inputs"]
    assert len(made) == len(inputs)
    for m, x in zip(made, inputs):
        if isinstance(x, torch.Tensor):
            assert (m.dtype, m.shape, m.stride(), m.device) == (x.dtype, x.shape, x.stride(), x.device)
        elif isinstance(x, float) and math.isnan(x):
            assert isinstance(m, float) and math.isnan(m)
        else:
            assert type(m) is type(x) and m == x
    want = fd.execute(made)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


# --- 1. non-contiguous and integer / bool tensors ---------------------------------------------------
def _strided_and_integer_inputs() -> list:
    x = torch.randn(3, 4)
    y = torch.randn(4, 3).t()  # strides (1, 3)
    i = torch.randint(-5, 5, (4, 3), dtype=torch.int32).t()  # strides (1, 3)
    b = torch.rand(3, 4) > 0.5
    n = torch.randint(0, 100, (3, 8))[:, ::2]  # strides (8, 2)
    return [x, y, i, b, n]


def test_strided_and_integer_inputs():
    inputs = _strided_and_integer_inputs()
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(inputs[0])
        t1 = fd.from_pytorch(inputs[1])
        t2 = fd.from_pytorch(inputs[2])
        t3 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Bool, is_cpu=False)
        t4 = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Int, is_cpu=False)
        t5 = fd.ops.relu(t0)
        t6 = fd.ops.mul(t5, t1)
        t7 = fd.ops.cast(t2, dtype=DataType.Float)
        t8 = fd.ops.where(t3, t6, t7)
        t9 = fd.ops.add(t4, t2)
        fd.add_output(t8)
        fd.add_output(t9)
    script = fd.repro_script_for(inputs)
    expected = _header() + f"""
def nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False, stride_order=[1, 0])
    T1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False, stride_order=[0, 1])
    T2 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int32, is_cpu=False, stride_order=[0, 1])
    T3 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Bool, is_cpu=False)
    T4 = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.Int, is_cpu=False)
    T5 = fd.ops.relu(T0)
    T6 = fd.ops.mul(T5, T1)
    T7 = fd.ops.cast(T2, dtype=DataType.Float)
    T8 = fd.ops.where(T3, T6, T7)
    T9 = fd.ops.add(T4, T2)
    fd.add_output(T8)
    fd.add_output(T9)

with FusionDefinition() as fd:
    nvfuser_fusion_id{fd.id()}(fd)

inputs = [
    torch.testing.make_tensor((3, 4), dtype=torch.float32, device='cpu'),
    torch.randn(12, dtype=torch.float32, device='cpu').as_strided((3, 4), (1, 3)),
    torch.randint(0, 10, (12,), dtype=torch.int32, device='cpu').as_strided((3, 4), (1, 3)),
    torch.testing.make_tensor((3, 4), dtype=torch.bool, device='cpu'),
    torch.randint(0, 10, (23,), dtype=torch.int64, device='cpu').as_strided((3, 4), (8, 2)),
]
fd.execute(inputs)
"""
    assert script.splitlines() == expected.splitlines()  # line for line first: a readable diff
    assert script == expected
    _check_runs_like(fd, script, inputs)


def test_strided_bool_input_draws_zero_or_one():
    b = (torch.rand(4, 3) > 0.5).t()
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.logical_not(fd.from_pytorch(b)))
    script = fd.repro_script_for([b])
    assert script.endswith(
        f"    nvfuser_fusion_id{fd.id()}(fd)\n\ninputs = [\n"
        "    torch.randint(0, 2, (12,), dtype=torch.bool, device='cpu').as_strided((3, 4), (1, 3)),\n"
        "]\nfd.execute(inputs)\n")
    _check_runs_like(fd, script, [b])


# --- 2. scalar inputs: inf, -inf, nan, ints, bools, complex ------------------------------------------
def test_scalar_inputs_inf_and_nan():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)
        s1 = fd.define_scalar(None, dtype=DataType.Double)
        s2 = fd.define_scalar(None, dtype=DataType.Double)
        s3 = fd.define_scalar(None, dtype=DataType.Double)
        s4 = fd.define_scalar(None, dtype=DataType.Int)
        s5 = fd.define_scalar(None, dtype=DataType.Bool)
        c6 = fd.define_scalar(0.5, dtype=DataType.Double)
        c7 = fd.define_scalar(float("inf"), dtype=DataType.Double)
        t8 = fd.ops.mul(t0, s1)
        t9 = fd.ops.add(t0, s2)
        t10 = fd.ops.maximum(t0, s3)
        t11 = fd.ops.mul(t0, s4)
        t12 = fd.ops.mul(t0, s5)
        t13 = fd.ops.add(t0, c6)
        t14 = fd.ops.minimum(t13, c7)
        for t in (t8, t9, t10, t11, t12, t14):
            fd.add_output(t)
    inputs = [torch.randn(5), float("inf"), float("nan"), float("-inf"), 3, True]
    script = fd.repro_script_for(inputs)
    expected = _header() + f"""
def nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)
    S1 = fd.define_scalar(None, dtype=DataType.Double)
    S2 = fd.define_scalar(None, dtype=DataType.Double)
    S3 = fd.define_scalar(None, dtype=DataType.Double)
    S4 = fd.define_scalar(None, dtype=DataType.Int)
    S5 = fd.define_scalar(None, dtype=DataType.Bool)
    S6 = fd.define_scalar(0.500000, dtype=DataType.Double)
    S7 = fd.define_scalar(float("inf"), dtype=DataType.Double)
    T8 = fd.ops.mul(T0, S1)
    T9 = fd.ops.add(T0, S2)
    T10 = fd.ops.maximum(T0, S3)
    T11 = fd.ops.mul(T0, S4)
    T12 = fd.ops.mul(T0, S5)
    T13 = fd.ops.add(T0, S6)
    T14 = fd.ops.minimum(T13, S7)
    fd.add_output(T8)
    fd.add_output(T9)
    fd.add_output(T10)
    fd.add_output(T11)
    fd.add_output(T12)
    fd.add_output(T14)

with FusionDefinition() as fd:
    nvfuser_fusion_id{fd.id()}(fd)

inputs = [
    torch.testing.make_tensor((5,), dtype=torch.float32, device='cpu'),
    float("inf"),
    float("nan"),
    -float("inf"),
    3,
    True,
]
fd.execute(inputs)
"""
    assert script.splitlines() == expected.splitlines()
    assert script == expected
    _check_runs_like(fd, script, inputs)


@pytest.mark.parametrize("value, text", [
    (2.5, "2.5"),
    (-0.0, "-0.0"),
    (1e-300, "1e-300"),
    (7, "7"),
    (False, "False"),
    (None, "None"),
    (complex(1, -2), "(1-2j)"),
    # nvFuser's str() with inf / nan respelled is Python here: kept as nvFuser writes it
    (complex(float("inf"), 1), '(float("inf")+1j)'),
    (complex(float("-inf"), 0.5), '(-float("inf")+0.5j)'),
    # nvFuser would write (float("nan")+nanj), no Python: fuser spells it out
    (complex(float("nan"), float("nan")), 'complex(float("nan"), float("nan"))'),
    # nvFuser would write the string unquoted
    ("inf", "'inf'"),
    (b"nan", "b'nan'"),
])
def test_scalar_input_spelling(value, text):
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1], contiguity=[True])))
    script = fd.repro_script_for([value])
    assert script.endswith(f"inputs = [\n    {text},\n]\nfd.execute(inputs)\n")
    back = eval(text, {"float": float})
    assert type(back) is type(value)
    assert str(back) == str(value)  # nan compares unequal; its text does not


# --- 3. a reduction and a reshape -------------------------------------------------------------------
def test_reduction_and_reshape():
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16, is_cpu=False)
        t1 = fd.ops.cast(t0, dtype=DataType.Float)
        t2 = fd.ops.sum(t1, dims=[1], keepdim=False, dtype=DataType.Float)
        t3 = fd.ops.reshape(t1, new_shape=[4, 3])
        t4 = fd.ops.permute(t3, dims=[1, 0])
        s5 = fd.define_scalar(2, dtype=DataType.Int)
        v6 = fd.define_vector([s5, 6], dtype=DataType.Int)
        t7 = fd.ops.reshape(t1, new_shape=v6)
        t8 = fd.ops.broadcast_in_dim(t2, shape=[3, 1], broadcast_dims=[0])
        t9 = fd.ops.cast(t8, dtype=DataType.BFloat16)
        fd.add_output(t4)
        fd.add_output(t7)
        fd.add_output(t9)
    inputs = [torch.randn(3, 4, dtype=torch.bfloat16)]
    script = fd.repro_script_for(inputs)
    # the ints of a shape list are inline records: they take state numbers, no lines
    expected = _header() + f"""
def nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16, is_cpu=False)
    T1 = fd.ops.cast(T0, dtype=DataType.Float)
    T2 = fd.ops.sum(T1, dims=[1], keepdim=False, dtype=DataType.Float)
    T6 = fd.ops.reshape(T1, new_shape=[4, 3])
    T7 = fd.ops.permute(T6, dims=[1, 0])
    S8 = fd.define_scalar(2, dtype=DataType.Int)
    V10 = fd.define_vector([S8, 6], dtype=DataType.Int)
    T11 = fd.ops.reshape(T1, new_shape=V10)
    T15 = fd.ops.broadcast_in_dim(T2, shape=[3, 1], broadcast_dims=[0])
    T16 = fd.ops.cast(T15, dtype=DataType.BFloat16)
    fd.add_output(T7)
    fd.add_output(T11)
    fd.add_output(T16)

with FusionDefinition() as fd:
    nvfuser_fusion_id{fd.id()}(fd)

inputs = [
    torch.testing.make_tensor((3, 4), dtype=torch.bfloat16, device='cpu'),
]
fd.execute(inputs)
"""
    assert script.splitlines() == expected.splitlines()
    assert script == expected
    _check_runs_like(fd, script, inputs)


# --- print_repro, no inputs, an undefined fusion -----------------------------------------------------
def test_print_repro_prints_the_script(capsys):
    inputs = _strided_and_integer_inputs()[:2]
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.mul(fd.from_pytorch(inputs[0]), fd.from_pytorch(inputs[1])))
    fd.execute(inputs, print_repro=True)
    # nvFuser's print(): the script and one newline
    assert capsys.readouterr().out == fd.repro_script_for(inputs) + "\n"


def test_without_inputs_the_script_ends_after_the_with_block():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.sin(fd.define_tensor(shape=[-1], contiguity=[True])))
    script = fd.repro_script_for()
    assert script == _header() + str(fd) + f"with FusionDefinition() as fd:\n    nvfuser_fusion_id{fd.id()}(fd)\n"
    namespace: dict = {}
    exec(script, namespace)
    assert namespace["fd"].id() == fd.id()
