"""`repr(fd)` / `str(fd)` byte for byte as nvFuser's FusionDefinition prints them (issue 10,
item 2): a newline, `def nvfuser_fusion_idN(fd : FusionDefinition) -> None :`, one line per
record (constants nvFuser defines inline printed in place), a blank line; and
`repro_script_for` / `print_repro` in nvFuser's layout, runnable as printed."""
import inspect
import math

import torch

from fuser import DataType, FusionCache, FusionDefinition
from fuser.examples import rmsnorm_backward as seed001


def _define(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _body(text: str) -> list[str]:
    """The record lines of a printed definition."""
    assert text.startswith("\ndef nvfuser_") and text.endswith("\n\n"), repr(text[:40] + " ... " + text[-20:])
    return text.splitlines()[2:-1]


def test_layout_newline_def_line_records_blank_line():
    fd = _define(lambda fd: fd.add_output(fd.ops.relu(fd.define_tensor(shape=[-1, -1], contiguity=[True, True]))))
    expected = (
        f"\ndef nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :\n"
        "    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)\n"
        "    T1 = fd.ops.relu(T0)\n"
        "    fd.add_output(T1)\n"
        "\n"
    )
    assert str(fd) == expected and repr(fd) == expected
    # tools split a log on the def line
    assert ("log\n" + str(fd)).split("\ndef ")[1].startswith(f"nvfuser_fusion_id{fd.id()}(fd : FusionDefinition)")


def test_an_incomplete_definition_prints_as_nvfusers():
    assert repr(FusionDefinition()) == "\ndef nvfuser_incomplete_fusion(fd : FusionDefinition) -> None :\n\n"
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        assert str(fd) == ("\ndef nvfuser_incomplete_fusion(fd : FusionDefinition) -> None :\n"
                           "    T0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)\n\n")
        fd.add_output(t)


def test_seed001_definition_prints_exactly_as_nvfuser_printed_it():
    # fuser/examples/rmsnorm_backward.py is nvFuser's printout of seed 001 verbatim
    source = inspect.getsource(seed001.rmsnorm_backward).splitlines()
    fd = _define(seed001.rmsnorm_backward)
    assert _body(str(fd)) == source[1:]


def test_records_print_as_nvfuser_prints_them():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        idx = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        s = fd.define_scalar(dtype=DataType.Int)
        n0 = fd.ops.size(t0, 0)
        b = fd.ops.broadcast_in_dim(t1, shape=[n0, 4], broadcast_dims=[1])
        fd.add_output(fd.ops.reshape(fd.ops.add(t0, b), new_shape=[-1]))
        fd.add_output(fd.ops.expand(fd.ops.broadcast(t1, [True, False]), shape=[3, 4]))
        fd.add_output(fd.ops.full([n0, 2], fd.define_scalar(1.5), DataType.Float))
        fd.add_output(fd.ops.slice(t0, [0, 1], [n0, 3]))
        fd.add_output(fd.ops.pad(t1, [1, 2]))
        fd.add_output(fd.ops.pad(t1, [1, 0], fd.define_scalar(0.0)))
        fd.add_output(fd.ops.cat([t0, t0], dim=-1))
        fd.add_output(fd.ops.permute(t0, [-1, 0]))
        fd.add_output(fd.ops.triu(t0, 1))
        fd.add_output(fd.ops.iota(s, dtype=DataType.Int))
        fd.add_output(fd.ops.uniform(fd.define_scalar(0.0), fd.define_scalar(1.0), [2, s], rng_seed=s, rng_offset=s))
        fd.add_output(fd.ops.rand_like(t0, rng_seed=s, rng_offset=s))
        fd.add_output(fd.ops.sum(t0, -1))
        fd.add_output(fd.ops.max(t0, [0], True))
        fd.add_output(fd.ops.prod(t0, DataType.Double))
        fd.add_output(fd.ops.index_select(t0, idx, 0))
        fd.add_output(fd.ops.linear(t0, t0, t1))
        fd.add_output(fd.ops.mul(t0, 2), alias_input=t0)

    text = str(_define(build))
    lines = _body(text)
    assert lines == [
        "    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)",
        "    T1 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)",
        "    T2 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int, is_cpu=False)",
        "    S3 = fd.define_scalar(None, dtype=DataType.Int)",
        "    S4 = fd.ops.size(T0, dim=0)",
        # the list's 4 and the vector take S5 and V6: inline states still have indices
        "    T7 = fd.ops.broadcast_in_dim(T1, shape=[S4, 4], broadcast_dims=[1])",
        "    T8 = fd.ops.add(T0, T7)",
        "    T11 = fd.ops.reshape(T8, new_shape=[-1])",
        "    fd.add_output(T11)",
        "    T12 = fd.ops.broadcast(T1, is_broadcast_dim=[True, False])",
        "    T16 = fd.ops.expand(T12, shape=[3, 4])",
        "    fd.add_output(T16)",
        "    S17 = fd.define_scalar(1.50000, dtype=DataType.Double)",
        "    T20 = fd.ops.full(shape=[S4, 2], fill_value=S17, dtype=DataType.Float)",
        "    fd.add_output(T20)",
        # start (3 states), end (2) and the default strides (3) nvFuser adds
        "    T29 = fd.ops.slice(T0, start_indices=[0, 1], end_indices=[S4, 3], strides=[1, 1], manual_normalization=0)",
        "    fd.add_output(T29)",
        "    T33 = fd.ops.pad(T1, [1, 2], None)",
        "    fd.add_output(T33)",
        "    S34 = fd.define_scalar(0.00000, dtype=DataType.Double)",
        "    T38 = fd.ops.pad(T1, [1, 0], S34)",
        "    fd.add_output(T38)",
        "    T39 = fd.ops.cat([T0, T0], dim=-1, manual_padding=0)",
        "    fd.add_output(T39)",
        "    T40 = fd.ops.permute(T0, dims=[1, 0])",
        "    fd.add_output(T40)",
        "    T41 = fd.ops.triu(T0, 1)",  # the output first, then the inline diagonal (S42)
        "    fd.add_output(T41)",
        "    T43 = fd.ops.iota(S3, None, None, dtype=DataType.Int)",
        "    fd.add_output(T43)",
        "    S44 = fd.define_scalar(0.00000, dtype=DataType.Double)",
        "    S45 = fd.define_scalar(1.00000, dtype=DataType.Double)",
        "    T48 = fd.ops.uniform(S44, S45, shape=[2, S3], rng_seed=S3, rng_offset=S3, dtype=DataType.Float)",
        "    fd.add_output(T48)",
        "    T49 = fd.ops.rand_like(T0, S3, S3)",
        "    fd.add_output(T49)",
        "    T50 = fd.ops.sum(T0, dims=[-1], keepdim=False, dtype=DataType.Null)",
        "    fd.add_output(T50)",
        "    T51 = fd.ops.max(T0, dims=[0], keepdim=True, dtype=DataType.Null)",
        "    fd.add_output(T51)",
        "    T52 = fd.ops.prod(T0, dims=[0, 1], keepdim=False, dtype=DataType.Double)",
        "    fd.add_output(T52)",
        "    T53 = fd.ops.index_select(T0, T2, dim=0)",
        "    fd.add_output(T53)",
        "    T54 = fd.ops.linear(T0, T0, T1)",
        "    fd.add_output(T54)",
        "    S55 = fd.define_scalar(2, dtype=DataType.Int)",
        "    T56 = fd.ops.mul(T0, S55)",
        "    fd.add_output(T56, T0)",
    ]


def test_constants_print_with_nvfusers_spelling():
    def build(fd):
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Double)
        for v, dt in ((1, DataType.Double), (1024.0, None), (0.000976562, None), (-0.5, None), (float("inf"), None),
                      (float("-inf"), None), (float("nan"), None), (1e-20, None), (True, None), (7, DataType.Int32),
                      (complex(1.0, -2.0), None), (2.9, DataType.Int)):
            fd.add_output(fd.ops.add(t, fd.define_scalar(v, dtype=dt)))

    lines = [ln for ln in _body(str(_define(build))) if "define_scalar" in ln]
    assert [ln.split(" = ", 1)[1] for ln in lines] == [
        "fd.define_scalar(1.00000, dtype=DataType.Double)",  # an int value of a Double: 1.0
        "fd.define_scalar(1024.00, dtype=DataType.Double)",
        "fd.define_scalar(0.000976562, dtype=DataType.Double)",
        "fd.define_scalar(-0.500000, dtype=DataType.Double)",
        'fd.define_scalar(float("inf"), dtype=DataType.Double)',
        'fd.define_scalar(float("-inf"), dtype=DataType.Double)',
        'fd.define_scalar(float("nan"), dtype=DataType.Double)',
        "fd.define_scalar(1.00000e-20, dtype=DataType.Double)",
        "fd.define_scalar(True, dtype=DataType.Bool)",
        "fd.define_scalar(7, dtype=DataType.Int32)",
        "fd.define_scalar(1.00000+-2.00000j, dtype=DataType.ComplexDouble)",
        "fd.define_scalar(2, dtype=DataType.Int)",  # a float value of an Int: truncated
    ]


def test_define_vector_of_ints_prints_them_inline():
    def build(fd):
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        v = fd.define_vector([2, 3])
        w = fd.define_vector(2)
        fd.add_output(fd.ops.reshape(t, v))
        fd.add_output(fd.ops.reshape(t, w))

    assert _body(str(_define(build))) == [
        "    T0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)",
        "    V3 = fd.define_vector([2, 3], dtype=DataType.Int)",
        "    S4 = fd.define_scalar(None, dtype=DataType.Int)",
        "    S5 = fd.define_scalar(None, dtype=DataType.Int)",
        "    V6 = fd.define_vector([S4, S5], dtype=DataType.Int)",
        "    T7 = fd.ops.reshape(T0, new_shape=V3)",
        "    fd.add_output(T7)",
        "    T8 = fd.ops.reshape(T0, new_shape=V6)",
        "    fd.add_output(T8)",
    ]


def test_handles_repr_as_nvfusers():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        s = fd.define_scalar(2.0)
        v = fd.define_vector([1, 2, 3])
        assert (repr(t), repr(s), repr(v)) == ("Tensor(index=0, ndim=2)", "Scalar(index=1)", "Vector(index=5, size=3)")
        fd.add_output(t)


def test_printed_definition_reexecutes_to_the_same_fusion_and_results():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        n = fd.ops.size(t0, 1)
        r = fd.ops.reshape(fd.ops.slice(t0, [0, 1], [2, n]), [-1])
        fd.add_output(fd.ops.where(fd.ops.gt(r, 0.0), r, fd.ops.pad(r, [0, 0], fd.define_scalar(1.0))))
        fd.add_output(fd.ops.full([fd.ops.div(n, 2), 3], fd.define_scalar(7), DataType.Int))

    fd = _define(build)
    text = str(fd)
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    before = FusionCache.get().num_fusions()
    with FusionDefinition() as again:
        namespace[f"nvfuser_fusion_id{fd.id()}"](again)
    assert again.id() == fd.id() and FusionCache.get().num_fusions() == before
    assert str(again) == text
    x = torch.randn(3, 6)
    for a, b in zip(fd.execute([x]), again.execute([x])):
        assert torch.equal(a, b)


def test_repro_script_layout_and_it_runs():
    fd = _define(lambda fd: fd.add_output(fd.ops.mul(
        fd.define_tensor(shape=[-1, -1], contiguity=[True, True]),
        fd.define_tensor(shape=[-1, -1], contiguity=[False, False]))))
    x, y = torch.randn(2, 3), torch.randn(3, 4).t()[:2, :3]
    script = fd.repro_script_for([x, y])
    lines = script.splitlines()
    assert lines[0] == "# CUDA devices:"
    k = 1 + torch.cuda.device_count()
    assert lines[k].startswith("# torch version: ") and lines[k + 1].startswith("# cuda version: ")
    assert lines[k + 2] == "# nvfuser version: 0.2.27"
    # nvFuser's header as it is (no fuser version line), then the imports
    assert lines[k + 3:k + 5] == ["import torch", "from fuser import FusionDefinition, DataType"]
    assert script.endswith(
        f"{fd}with FusionDefinition() as fd:\n    nvfuser_fusion_id{fd.id()}(fd)\n\ninputs = [\n"
        "    torch.testing.make_tensor((2, 3), dtype=torch.float32, device='cpu'),\n"
        # storage for the strided view: 1 + (2 - 1) * 1 + (3 - 1) * 4 elements
        "    torch.randn(10, dtype=torch.float32, device='cpu').as_strided((2, 3), (1, 4)),\n"
        "]\nfd.execute(inputs)\n"
    )
    namespace = {}
    exec(script, namespace)
    assert namespace["fd"].id() == fd.id()
    got = namespace["fd"].execute(namespace["inputs"])
    assert got[0].shape == (2, 3)


def test_repro_script_spells_scalar_inputs():
    fd = _define(lambda fd: fd.add_output(fd.ops.mul(
        fd.define_tensor(shape=[-1], contiguity=[True]), fd.define_scalar(dtype=DataType.Double))))
    script = fd.repro_script_for([torch.randn(3), float("inf")])
    assert '    float("inf"),\n' in script
    namespace = {}
    exec(script, namespace)
    assert math.isinf(namespace["inputs"][1])


def test_print_repro_prints_the_script_to_stdout(capsys):
    fd = _define(lambda fd: fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1], contiguity=[True]))))
    x = torch.randn(4)
    fd.execute([x], print_repro=True)
    out = capsys.readouterr().out
    assert out == fd.repro_script_for([x]) + "\n"
