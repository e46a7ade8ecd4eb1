"""Seed 003 (nvFuser PR 3334, user-schedule segmentation): its reduction + broadcast +
pointwise example, and the two segment definitions it splits into, copied verbatim from
the report. They define and execute on CPU and match eager PyTorch; the segments, run
one after the other, compute the original fusion."""
import re

import pytest
import torch

from fuser import DataType, FusionCache, FusionDefinition

ORIGINAL = """\
def nvfuser_fusion_id1(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1],
                          contiguity=[True, True],
                          dtype=DataType.Float,
                          is_cpu=False)
    T1 = fd.define_tensor(shape=[-1, -1],
                          contiguity=[True, True],
                          dtype=DataType.Float,
                          is_cpu=False)
    T2 = fd.ops.sum(T0, dims=[1], keepdim=False, dtype=DataType.Float)
    T3 = fd.ops.broadcast(T2, is_broadcast_dim=[False, True])
    T4 = fd.ops.add(T1, T3)
    fd.add_output(T4)
"""

FIRST_SEGMENT = """\
def nvfuser_fusion_id2(fd : FusionDefinition) -> None :
   T0 = fd.define_tensor(shape=[-1, -1],
                         contiguity=[True, True],
                         dtype=DataType.Float,
                         is_cpu=False)
   T1 = fd.ops.sum(T0, dims=[1], keepdim=False, dtype=DataType.Float)
   T2 = fd.ops.broadcast(T1, is_broadcast_dim=[False, True])
   fd.add_output(T2)
"""

SECOND_SEGMENT = """\
def nvfuser_fusion_id3(fd : FusionDefinition) -> None :
   T0 = fd.define_tensor(shape=[-1, -1],
                         contiguity=[True, True],
                         dtype=DataType.Float,
                         is_cpu=False)
   T1 = fd.define_tensor(shape=[-1, 1],
                         contiguity=[True, None],
                         dtype=DataType.Float,
                         is_cpu=False)
   T2 = fd.ops.add(T0, T1)
   fd.add_output(T2)
"""


def _define(text, name):
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    with FusionDefinition() as fd:
        namespace[name](fd)
    return fd


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(3334)
    return [torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)]


def test_original_matches_eager(inputs):
    fd = _define(ORIGINAL, "nvfuser_fusion_id1")
    (out,) = fd.execute(inputs)
    t0, t1 = inputs
    expected = t1 + t0.sum(1, keepdim=True)
    assert out.shape == (5, 7) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected)


def test_original_other_sizes(inputs):
    fd = _define(ORIGINAL, "nvfuser_fusion_id1")
    t0, t1 = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(fd.execute([t0, t1])[0], t1 + t0.sum(1, keepdim=True))
    with pytest.raises(ValueError):  # T0 and T1 share their axes through the add
        fd.execute([torch.randn(2, 3), torch.randn(3, 3)])


def test_segments_compose_to_the_original(inputs):
    original = _define(ORIGINAL, "nvfuser_fusion_id1")
    first = _define(FIRST_SEGMENT, "nvfuser_fusion_id2")
    second = _define(SECOND_SEGMENT, "nvfuser_fusion_id3")
    t0, t1 = inputs
    (mid,) = first.execute([t0])
    assert mid.shape == (5, 1)
    torch.testing.assert_close(mid, t0.sum(1, keepdim=True))
    (out,) = second.execute([t1, mid])
    torch.testing.assert_close(out, original.execute(inputs)[0])


def test_segments_are_distinct_fusions():
    ids = {_define(t, n).id() for t, n in [(ORIGINAL, "nvfuser_fusion_id1"), (FIRST_SEGMENT, "nvfuser_fusion_id2"),
                                           (SECOND_SEGMENT, "nvfuser_fusion_id3")]}
    assert len(ids) == 3


def test_printed_definition_round_trips(inputs):
    fd = _define(ORIGINAL, "nvfuser_fusion_id1")
    text = str(fd)
    assert text.startswith("\ndef nvfuser_fusion_id") and text.endswith(")\n\n")  # nvFuser's layout
    assert text.splitlines()[2:-1] == [
        "    T0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)",
        "    T1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False)",
        "    T2 = fd.ops.sum(T0, dims=[1], keepdim=False, dtype=DataType.Float)",
        "    T3 = fd.ops.broadcast(T2, is_broadcast_dim=[False, True])",
        "    T4 = fd.ops.add(T1, T3)",
        "    fd.add_output(T4)",
    ]
    n = FusionCache.get().num_fusions()
    again = _define(text, f"nvfuser_fusion_id{fd.id()}")
    assert again.id() == fd.id() and FusionCache.get().num_fusions() == n
    assert torch.equal(again.execute(inputs)[0], fd.execute(inputs)[0])


def test_fusion_ir(inputs):
    ir = _define(ORIGINAL, "nvfuser_fusion_id1").fusion_ir()
    assert re.search(r"T2_l_float\[iS\d+\{i\d+\}, rS\d+\{i\d+\}\]\n   = reduction\( T0_g_float", ir)
    assert re.search(r"T3_l_float\[iS\d+\{i\d+\}, bS\d+\{1\}\]\n   = broadcast\( T2_l_float", ir)
    assert re.search(r"T4_g_float\[[^\]]*\]\n   = T1_g_float\[[^\]]*\]\n   \+ T3_l_float\[[^\]]*\];", ir)
    second = _define(SECOND_SEGMENT, "nvfuser_fusion_id3").fusion_ir()
    assert re.search(r"T1_g_float\[iS\d+\{i\d+\}, bS\d+\{1\}\]", second)
