"""`communication.start` on hand-made communications against the unsharded values: an
allgather and a reduce-scatter on every axis position, leading extents of 1, more slices
than NCCL coalesces, zero-size blocks, with and without the caller's buffer. On NCCL an
inner axis runs as coalesced per-slice collectives (captured in a CUDA graph too); on gloo
it is moved to the front."""
from __future__ import annotations

import types

import pytest
import torch

from fuser.runtime.tolerance import assert_close


def block(t, axis, comm):
    return t.chunk(comm.size(), axis)[comm.rank()].contiguous()


def _comm(kind: str, axis: int, team: tuple, number: int = 0):
    return types.SimpleNamespace(kind=kind, axis=axis if kind == "allgather" else None,
                                 out_axis=axis if kind == "reduce_scatter" else None, team=team, number=number,
                                 inp=None, op="sum", in_place=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,axis", [((3, 4, 5), 1), ((2, 3, 4, 5), 2), ((2, 2, 4), 2), ((16, 2), 1),
                                        ((17, 2), 1), ((1, 4, 3), 1), ((2, 0, 3), 1), ((4, 3), 0)])
@pytest.mark.parametrize("into", [False, True])
def test_allgather_and_reduce_scatter_on_any_axis(comm, seed, dtype, shape, axis, into):
    from fuser.host import communication

    d, k, dev = comm.size(), comm.rank(), comm.device
    team = tuple(range(d))
    whole = list(shape)
    whole[axis] *= d
    full = torch.randn(whole, device=dev).to(dtype)  # (the same on every rank: one seed)
    x = block(full, axis, comm)
    dest = torch.full(whole, float("nan"), device=dev, dtype=dtype) if into else None
    got = communication.start(_comm("allgather", axis, team), x, dest).result()
    assert got.shape == full.shape
    assert_close(got, full)
    coalesced = communication._slices(x, axis, comm.backend == "gloo") > 0
    if into and coalesced:
        assert got is dest  # written in place
    partial = (full.float() * (k + 1)).to(dtype)  # rank k's partial sum
    dest = torch.full(shape, float("nan"), device=dev, dtype=dtype) if into else None
    got = communication.start(_comm("reduce_scatter", axis, team, 1), partial, dest).result()
    want = block((full.float() * sum(range(1, d + 1))).to(dtype), axis, comm)
    assert got.shape == want.shape
    assert_close(got, want)
    if into and coalesced:
        assert got is dest


def test_coalesced_collectives_replay_from_a_cuda_graph(comm, seed):
    """Captured once, replayed with new values at the same addresses."""
    if comm.backend != "nccl":
        pytest.skip("CUDA graphs hold NCCL's collectives")
    from fuser.host import communication

    d, k, dev = comm.size(), comm.rank(), comm.device
    team = tuple(range(d))
    shape, axis, whole = (3, 4, 5), 1, (3, 4 * d, 5)
    x, partial = torch.zeros(shape, device=dev), torch.zeros(whole, device=dev)
    gathered, scattered = torch.empty(whole, device=dev), torch.empty(shape, device=dev)
    ag, rs = _comm("allgather", axis, team), _comm("reduce_scatter", axis, team, 1)
    assert communication._slices(x, axis, False) == 3

    def both():
        a = communication.start(ag, x, gathered).result()
        b = communication.start(rs, partial, scattered).result()
        assert a is gathered and b is scattered

    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # (warm-up outside the capture)
        both()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        both()
    for _ in range(3):
        full = torch.randn(whole, device=dev)  # (the same on every rank: one seed)
        x.copy_(block(full, axis, comm))
        partial.copy_(full * (k + 1))
        gathered.fill_(float("nan"))
        scattered.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert_close(gathered, full)
        assert_close(scattered, block(full * sum(range(1, d + 1)), axis, comm))
