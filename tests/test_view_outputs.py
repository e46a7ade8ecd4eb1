"""An output that is only a view of an input (reshape, permute, slice, squeeze, expand,
broadcast, chains of them; nothing computed) is returned as a view of that input, as
nvFuser's alias analysis does: one no_op segment, no kernel, the input's storage. A `set`
output stays a copy. Each case runs on CPU and (marked gpu) on CUDA."""
from __future__ import annotations

import pytest
import torch

from fuser import DataType, FusionDefinition


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return request.param


#: name: (what the fusion does to x [2, 3, 4], what eager does)
CASES = {
    "reshape": (lambda fd, t: fd.ops.reshape(t, [6, 4]), lambda x: x.reshape(6, 4)),
    "permute": (lambda fd, t: fd.ops.permute(t, [2, 0, 1]), lambda x: x.permute(2, 0, 1)),
    "slice": (lambda fd, t: fd.ops.slice(t, [0, 1, 1], [2, 3, 4], [1, 1, 2]), lambda x: x[:, 1:3, 1:4:2]),
    "squeeze": (lambda fd, t: fd.ops.squeeze(fd.ops.slice(t, [0, 0, 0], [1, 3, 4]), [0]), lambda x: x[0]),
    "broadcast_expand": (
        lambda fd, t: fd.ops.expand(fd.ops.broadcast_in_dim(t, [1, 2, 3, 4], [1, 2, 3]), [5, 2, 3, 4]),
        lambda x: x.expand(5, 2, 3, 4)),
    "reshape_permute_slice": (
        lambda fd, t: fd.ops.slice(fd.ops.permute(fd.ops.reshape(t, [6, 4]), [1, 0]), [0, 2], [4, 6]),
        lambda x: x.reshape(6, 4).permute(1, 0)[:, 2:6]),
}


def _define(build) -> FusionDefinition:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        fd.add_output(build(fd, t))
    return fd


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("name", list(CASES))
def test_view_of_an_input_is_returned_as_a_view(device, name):
    build, eager = CASES[name]
    fd = _define(build)
    x = torch.randn(2, 3, 4, device=device)
    (out,) = fd.execute([x])
    want = eager(x)
    assert out.shape == want.shape and out.stride() == want.stride()
    assert torch.equal(out, want)
    assert _shares_storage(out, x), "a view of the input, not a copy"
    runs = fd._entry.last_runner.segment_runs()
    assert [r.scheduler for r in runs] == ["no_op"] and not any(r.kernel for r in runs), runs
    x.add_(1.0)  # the same storage: the output sees the input's change
    assert torch.equal(out, eager(x))


def test_a_set_output_is_a_copy(device):
    fd = _define(lambda fd, t: fd.ops.set(fd.ops.permute(t, [1, 0, 2])))
    x = torch.randn(2, 3, 4, device=device)
    (out,) = fd.execute([x])
    assert torch.equal(out, x.permute(1, 0, 2))
    assert not _shares_storage(out, x)


def test_a_reshape_no_view_can_express_is_copied(device):
    """A reshape merging axes a permuted input does not lay out together: PyTorch's
    reshape copies, and so does the no_op segment; the values are eager's."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 1])
        fd.add_output(fd.ops.reshape(t, [12]))
    x = torch.randn(4, 3, device=device).t()  # [3, 4], column-major
    (out,) = fd.execute([x])
    assert torch.equal(out, x.reshape(12))


@pytest.mark.parametrize("view", ["permute", "slice", "reshape"])
@pytest.mark.parametrize("alias_first", [False, True])
@pytest.mark.parametrize("separate", [False, True])
def test_a_view_of_an_input_updated_in_place_shows_the_input_as_passed(device, view, alias_first, separate):
    """An output that is a view of an input another output is written into
    (add_output(alias_input=)) holds the input's values as passed in, not the update:
    in one segment with the writer, or in a no_op segment before a matmul's writer."""
    make = {"permute": lambda fd, t: fd.ops.permute(t, [1, 0]),
            "slice": lambda fd, t: fd.ops.slice(t, [0, 1], [2, 3]),
            "reshape": lambda fd, t: fd.ops.reshape(t, [12])}[view]
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        # (w @ t: an ATen segment between the view and the kernel that writes t)
        update = fd.ops.add(t, fd.ops.matmul(w, t) if separate else fd.ops.sum(w))
        if alias_first:
            fd.add_output(update, alias_input=t)
        v = make(fd, t)
        fd.add_output(v)
        if not alias_first:
            fd.add_output(update, alias_input=t)
    x = torch.randn(4, 3, device=device)
    w = torch.eye(4, device=device) + 1.0
    before = x.clone()
    (out,) = fd.execute([x, w])
    want = {"permute": before.t(), "slice": before[0:2, 1:3], "reshape": before.reshape(12)}[view]
    assert torch.equal(out, want), "the view shows the in-place update"
    assert not torch.equal(x, before), "the input was updated in place"
