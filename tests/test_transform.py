"""Loop-domain transforms and replay: split (divisible or not), merge, reorder,
parallelize, and replaying a reference's schedule onto tensors with fewer or broadcast axes."""
import pytest

from fuser import DataType, FusionDefinition
from fuser.ir import ParallelType, transforms_str
from fuser.transform import ReplayError, inline_most, merge, merge_all, parallelize, replay_loop, reorder, split


class _Fresh:
    """A private copy of the definition's fusion: the structural cache shares fusions,
    and these tests transform them."""

    def __init__(self, fd):
        self.fusion, _ = fd.fusion.clone()


def _fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        b = fd.define_tensor(shape=[-1], contiguity=[True])
        bb = fd.ops.broadcast(b, [True, True, False])
        fd.add_output(fd.ops.add(x, bb))
    return _Fresh(fd)


def _extents(tv):
    return [str(i.extent) if not i.extent.is_const else i.extent.value for i in tv.domain.loop]


def test_split_merge_reorder_parallelize():
    fd = _fd()
    f = fd.fusion
    out = f.outputs[0]
    merge(out, 0)  # [i0*i1, i2]
    assert len(out.domain.loop) == 2
    split(out, 1, 4)  # [i0*i1, ceil(i2/4), 4]
    assert out.domain.loop[2].extent.value == 4
    split(out, 0, 3, inner_split=False)  # outer split: the outer extent is 3
    assert out.domain.loop[0].extent.value == 3
    reorder(out, {0: 3, 3: 0})
    assert out.domain.loop[3].extent.value == 3 and out.domain.loop[0].extent.value == 4
    parallelize(out, 0, ParallelType.TIDx)
    assert out.domain.loop[0].parallel_type is ParallelType.TIDx
    text = transforms_str(out)
    assert "Merge:" in text and "inner split" in text and "outer split" in text
    with pytest.raises(IndexError):
        split(out, 7, 2)
    with pytest.raises(ValueError):
        split(out, 0, 0)


def test_replay_through_broadcast_and_missing_axes():
    fd = _fd()
    f = fd.fusion
    x, b = f.inputs
    out = f.outputs[0]
    for k in range(1, -1, -1):
        merge(out, k, k + 1)
    split(out, 0, 4)
    split(out, 0, 128)
    parallelize(out, 0, ParallelType.BIDx)
    parallelize(out, 1, ParallelType.TIDx)
    parallelize(out, 2, ParallelType.Vectorize)
    ref = out.domain.logical
    # x has every axis; b only the innermost: the others get broadcast stand-ins
    replay_loop(out, x, dict(zip(ref, x.domain.logical)))
    replay_loop(out, b, {ref[2]: b.domain.logical[0]})
    for tv in (x, b):
        assert [i.parallel_type for i in tv.domain.loop] == [ParallelType.BIDx, ParallelType.TIDx, ParallelType.Vectorize]
        assert tv.domain.loop[2].extent.value == 4 and tv.domain.loop[1].extent.value == 128
    assert "Merge: bS" in transforms_str(b)  # the stand-in merged with b's own axis
    inline_most([out, x, b])
    assert out.compute_at_pos == 3 and b.compute_at_pos == 3


def test_replay_refuses_an_axis_without_counterpart():
    fd = _fd()
    f = fd.fusion
    x = f.inputs[0]
    out = f.outputs[0]
    merge_all(out)
    with pytest.raises(ReplayError, match="no counterpart"):
        replay_loop(out, x, {})  # x's concrete axes mapped to nothing


def test_merge_all_of_a_0d_tensor_keeps_no_axes():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(t))
    out = _Fresh(fd).fusion.outputs[0]
    merge_all(out)
    assert out.domain.loop == []
