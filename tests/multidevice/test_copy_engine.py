"""A stage loop's reduce-scatters on the copy engines (fuser/host/copy_engine.py): the
loop's partial sums live in a symmetric buffer, each chunk moves by a zero-SM all-to-all
into the buffer's twin and is summed locally. Results against the unsharded computation
and against NCCL's own reduce-scatter (without FUSER_ENABLE=copy_engine), plain (never
captured in a CUDA graph), on another caller stream, and after the buffers are released."""
from __future__ import annotations

import os
import types
from unittest import mock

import pytest
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.runtime.tolerance import assert_close

from .test_pipelined import _shard, block


def _row_parallel(mesh, dtype):
    """linear(x [C, T, K], w [N, K]), K sharded, the output sharded on T; over C on streams."""
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=dtype)
        wt = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=dtype)
        y = fd.ops.linear(xt, wt)
        fd.add_output(y)
        _shard(xt, mesh, 2)
        _shard(wt, mesh, 1)
        _shard(y, mesh, 1)
        y.axis(0).parallelize(ParallelType.stream)
    return fd


@pytest.fixture
def engines(comm, monkeypatch):
    """FUSER_ENABLE=copy_engine, the zero-CTA group (skips where the ranks cannot use
    copy-engine collectives), and a count of the reduce-scatters that ran on it."""
    monkeypatch.setenv("FUSER_ENABLE", "copy_engine")
    if comm.backend != "nccl":
        pytest.skip("copy-engine collectives are NCCL's")
    from fuser.host import communication, copy_engine

    if copy_engine.group() is None:
        pytest.skip(f"this rank cannot use copy-engine collectives: {copy_engine._local_reason() or 'a peer cannot'}")
    ran = []
    real = communication._by_copy_engine

    def counted(*args):
        got = real(*args)
        if got is not None:
            ran.append(args[0].kind)
        return got

    with mock.patch.object(communication, "_by_copy_engine", counted):
        yield types.SimpleNamespace(ran=ran, module=copy_engine)


def _off():
    return mock.patch.dict(os.environ, {"FUSER_ENABLE": ""})


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.BFloat16])
def test_pipelined_reduce_scatter_on_the_copy_engines_matches_nccl(comm, mesh, seed, engines, dtype):
    d = comm.size()
    C, T, K, N = 4, 8 * d, 16 * d, 24
    tdt = dtype.torch
    x = torch.randn(C, T, K, device=comm.device).to(tdt)
    w = torch.randn(N, K, device=comm.device).to(tdt)
    fd = _row_parallel(mesh, dtype)
    (got,) = fd.execute([block(x, 2, comm), block(w, 1, comm)])
    assert engines.ran.count("reduce_scatter") == C  # one per chunk
    # each rank's partial sums rounded to the dtype, then summed (what any reduce-scatter of
    # them gives up to the sum's own rounding)
    partials = [torch.nn.functional.linear(block(x, 2, types.SimpleNamespace(size=lambda: d, rank=lambda r=r: r)),
                                           block(w, 1, types.SimpleNamespace(size=lambda: d, rank=lambda r=r: r)))
                for r in range(d)]
    assert_close(got, block(torch.stack(partials).float().sum(0).to(tdt), 1, comm))
    with _off():
        (nccl,) = _row_parallel(mesh, dtype).execute([block(x, 2, comm), block(w, 1, comm)])
    assert engines.ran.count("reduce_scatter") == C  # none more
    if d == 2:  # one rounding of the same two-term sum either way
        assert torch.equal(got, nccl)
    else:
        assert_close(got, nccl)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_chunks_at_any_offset_of_a_symmetric_buffer(comm, seed, engines, op):
    """`start` on chunk views of one buffer: each chunk's blocks land in the twin at the
    chunk's own offset, and every rank gets its block of the reduction over ranks."""
    from fuser.host import communication

    d, k, dev = comm.size(), comm.rank(), comm.device
    C, n, m = 3, 2 * d, 5
    buf = engines.module.allocate(90, [C, n, m], torch.bfloat16, dev)
    again = engines.module.allocate(90, [C, n, m], torch.bfloat16, dev)
    assert buf is not None and (again.data_ptr(), again.shape) == (buf.data_ptr(), buf.shape)
    every = torch.randn(d, C, n, m, device=dev).to(torch.bfloat16)  # rank r's partials: every[r]
    buf.copy_(every[k])
    c = types.SimpleNamespace(kind="reduce_scatter", axis=None, out_axis=0, team=tuple(range(d)), number=0,
                              inp=None, op=op, in_place=False)
    pending = [communication.start(c, buf[i], None) for i in range(C)]
    got = [p.result() for p in pending]
    assert engines.ran.count("reduce_scatter") == C
    whole = {"sum": every.float().sum(0), "max": every.float().amax(0), "min": every.float().amin(0)}[op]
    for i in range(C):
        assert_close(got[i], block(whole[i].to(torch.bfloat16), 0, comm))


def _calls(comm, mesh, C=3):
    """A row-parallel fusion and a call on fresh values at fixed input addresses."""
    d = comm.size()
    T, K, N = 4 * d, 8 * d, 16
    fd = _row_parallel(mesh, DataType.Float)
    xs = torch.empty(C, T, K // d, device=comm.device)
    ws = torch.empty(N, K // d, device=comm.device)

    def call() -> None:
        x, w = torch.randn(C, T, K, device=comm.device), torch.randn(N, K, device=comm.device)
        xs.copy_(block(x, 2, comm))
        ws.copy_(block(w, 1, comm))
        (out,) = fd.execute([xs, ws])
        assert_close(out, block(torch.nn.functional.linear(x, w), 1, comm))
        out.fill_(float("nan"))  # the next call must write every element again

    return fd, call


def test_plain_on_fresh_values_and_another_stream(comm, mesh, seed, engines, fixed_addresses):
    from fuser.host.graphs import LoopGraphs, release_communicating

    release_communicating()  # (a buffer grown for this call would drop the graph and its counts)
    engines.module.release()
    C = 3
    fd, call = _calls(comm, mesh, C)
    for _ in range(4):
        call()
    (g,) = [e for _, e in fd._entry.last_runner._steps if isinstance(e, LoopGraphs)]
    assert (g.captures, g.replays) == (0, 0), (g.captures, g.replays, g.off)  # (never captured)
    assert engines.ran.count("reduce_scatter") == 4 * C
    side = torch.cuda.Stream(comm.device)
    torch.cuda._sleep(50_000_000)  # (the default stream busy: its last use of the buffers still to come)
    call()
    with torch.cuda.stream(side):  # a caller on another stream, not synchronised with the default one:
        call()                      # the buffers wait for their last use there
        call()
    torch.cuda.current_stream().wait_stream(side)
    call()


def test_buffers_grow_for_larger_calls_and_serve_smaller_ones(comm, mesh, seed, engines):
    def storage() -> set:  # (the allocator may place a grown buffer where the old one was)
        return {(got[0].untyped_storage().data_ptr(), got[0].numel()) for got in engines.module._BUFFERS.values()}

    from fuser.host.graphs import release_communicating

    release_communicating()  # (earlier tests' buffers are larger than these calls need)
    engines.module.release()
    _, small = _calls(comm, mesh, 2)
    _, large = _calls(comm, mesh, 4)
    small()
    first = storage()
    large()  # more chunks: the slot's buffer is remade larger
    assert storage() != first and len(engines.module._BUFFERS) == 1
    grown = storage()
    small()  # a view of the larger one
    assert storage() == grown
    assert engines.ran.count("reduce_scatter") == 2 + 4 + 2


def test_buffers_go_only_with_a_group_every_rank_shuts_down(comm, mesh, seed, engines):
    import torch.distributed as dist

    C = 2
    _, call = _calls(comm, mesh, C)
    call()
    sub = dist.new_group([0])  # (every rank makes it; rank 0 alone is in it)
    if comm.rank() == 0:
        dist.destroy_process_group(sub)  # shuts it down on rank 0 only
    assert engines.module._BUFFERS  # kept on every rank: a remake is collective
    engines.module.release()  # (every rank at once: what a shutdown of the world does)
    assert not engines.module._BUFFERS and not engines.module._TWINS
    call()
    call()
    assert engines.module._BUFFERS and engines.ran.count("reduce_scatter") == 3 * C


def test_not_enabled_is_nccls_reduce_scatter(comm, mesh, seed, engines):
    d = comm.size()
    x, w = torch.randn(2, 2 * d, 4 * d, device=comm.device), torch.randn(6, 4 * d, device=comm.device)
    with _off():
        (got,) = _row_parallel(mesh, DataType.Float).execute([block(x, 2, comm), block(w, 1, comm)])
    assert not engines.ran
    assert_close(got, block(torch.nn.functional.linear(x, w), 1, comm))


def test_copy_engine_loops_run_plainly_after_nccl_graphs(comm, mesh, seed, engines):
    """The bench's order: calls with copy engines off until their graph replays, then with
    them on. With copy engines on, a loop with a reduce-scatter is never captured nor
    replayed: under capture its buffer is an ordinary one (a rendezvous cannot be captured),
    so its graph holds NCCL's kernel; each rank decides alone whether to replay, and one
    rank replaying that kernel beside another running the all-to-all plainly hung both
    (the tensor-parallel bench, 2 x H200). The check fails where the NCCL graph replays."""
    from fuser.host.graphs import LoopGraphs, release_communicating

    release_communicating()  # (a buffer grown for this call would drop the graph and its counts)
    engines.module.release()
    C = 3
    fd, call = _calls(comm, mesh, C)
    with _off():
        for _ in range(3):
            call()
    (g,) = [e for _, e in fd._entry.last_runner._steps if isinstance(e, LoopGraphs)]
    captures, replays = g.captures, g.replays
    assert replays >= 1 and not engines.ran  # (the addresses repeat: NCCL's graph replays)
    for _ in range(4):
        call()
    assert (g.captures, g.replays) == (captures, replays) and engines.ran.count("reduce_scatter") == 4 * C
