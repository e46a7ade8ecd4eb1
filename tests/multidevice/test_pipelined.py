"""Communication pipelined with compute by a stream-parallel axis (seed 004 item 4): the
host program loops over chunks, each on a worker stream, so one chunk's collective runs
while the next chunk's matmul does."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.runtime.tolerance import assert_close


def block(t, axis, comm):
    return t.chunk(comm.size(), axis)[comm.rank()].contiguous()


def _shard(t, mesh, axis):
    t.set_device_mesh(mesh)
    t.outer_split(axis, mesh.size)
    t.axis(axis).parallelize(ParallelType.mesh_x)


def _loop_body(fd) -> str:
    text = str(fd._entry.last_runner.program)
    body = re.search(r"FOR StreamIdx in [^\n]*\n((?:    [^\n]*\n)+)", text)
    assert body, text
    return body.group(1)


def _in_order(text: str, *parts: str) -> bool:
    """Whether each of `parts` occurs in `text`, each after the one before."""
    at = 0
    for p in parts:
        at = text.find(p, at)
        if at < 0:
            return False
        at += len(p)
    return True


def _row_parallel(mesh, out_axis=None):
    """linear(x [C, T, K], w [N, K]) with K sharded, over C on streams; the output replicated
    (an allreduce per chunk) or sharded on `out_axis` (a reduce-scatter per chunk)."""
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        wt = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.Float)
        y = fd.ops.linear(xt, wt)
        fd.add_output(y)
        _shard(xt, mesh, 2)
        _shard(wt, mesh, 1)
        if out_axis is not None:
            _shard(y, mesh, out_axis)
        y.axis(0).parallelize(ParallelType.stream)
    return fd


def test_row_parallel_linear_pipelines_each_chunk_with_its_allreduce(comm, mesh, seed):
    d = comm.size()
    C, T, K, N = 4, 3, 4 * d, 5
    x, w = torch.randn(C, T, K, device=comm.device), torch.randn(N, K, device=comm.device)
    fd = _row_parallel(mesh)
    for _ in range(2):
        (out,) = fd.execute([block(x, 2, comm), block(w, 1, comm)])
        assert_close(out, torch.nn.functional.linear(x, w))
        out.fill_(float("nan"))
    body = _loop_body(fd)
    # stage 0 (stream 1): the chunk's linear and its allreduce; stage 1 (stream 2) waits for
    # the sum, so the next chunk's linear does not: chunk i's allreduce runs beside chunk
    # i+1's linear, and the linears run in order (on round-robin streams they ran at once)
    assert _in_order(body, "SetCurrentStream to Stream 1\n", "linear(", "type=Allreduce",
                     "SetCurrentStream to Stream 2\n", "Wait Communication 0\n"), body
    program = fd._entry.last_runner.program
    # the allreduce sums each chunk where the linear wrote it: the output is that buffer
    assert program.alias_root(program.outputs[0]) is not program.outputs[0], program.aliases
    text = str(program)
    join = text[text.index("\n  SetCurrentStream to Stream 0\n"):]  # after the loop: the caller waits for each stage
    assert "Synchronize Stream 1\n" in join and "Synchronize Stream 2\n" in join, text


def test_row_parallel_linear_into_sequence_shards_pipelines_reduce_scatters(comm, mesh, seed):
    d = comm.size()
    C, T, K, N = 3, 2 * d, 2 * d, 6
    x, w = torch.randn(C, T, K, device=comm.device), torch.randn(N, K, device=comm.device)
    fd = _row_parallel(mesh, out_axis=1)
    (out,) = fd.execute([block(x, 2, comm), block(w, 1, comm)])
    assert_close(out, block(torch.nn.functional.linear(x, w), 1, comm))
    assert "type=ReduceScatter" in _loop_body(fd)


def _column_parallel(mesh):
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        wt = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.Float)
        _shard(xt, mesh, 1)
        xt.axis(0).parallelize(ParallelType.stream)
        _shard(wt, mesh, 0)
        y = fd.ops.linear(xt, wt)
        y.axis(0).parallelize(ParallelType.stream)
        _shard(y, mesh, 2)
        fd.add_output(y)
    return fd


def test_column_parallel_linear_pipelines_the_allgather_of_sequence_shards(comm, mesh, seed):
    d = comm.size()
    C, S, K = 4, 2 * d, 6
    x, w = torch.randn(C, S, K, device=comm.device), torch.randn(4 * d, K, device=comm.device)
    fd = _column_parallel(mesh)
    (out,) = fd.execute([block(x, 1, comm), block(w, 0, comm)])
    assert_close(out, block(torch.nn.functional.linear(x, w), 2, comm))
    body = _loop_body(fd)
    # the allgather is issued on stage 0's stream, which holds no compute (the next chunk's
    # gather does not wait for this chunk's linear); the linear waits for it on stage 1's
    assert _in_order(body, "SetCurrentStream to Stream 1\n", "type=Allgather", "SetCurrentStream to Stream 2\n",
                     "Wait Communication 0\n", "linear("), body


def _graphs(fd):
    from fuser.host.graphs import LoopGraphs

    return [e for _, e in fd._entry.last_runner._steps if isinstance(e, LoopGraphs)]


def test_a_stage_loop_and_its_join_are_one_graphable_region_with_its_collectives(comm, mesh, seed):
    """The stage loop, the switch back to the caller's stream and each stage's Synchronize
    are what a CUDA graph captures; its collectives are capturable on NCCL, not on gloo."""
    from fuser.host.communication import capturable
    from fuser.host.graphs import LoopGraphs, loop_regions
    from fuser.host.ir import Communication, ForLoop, Synchronize

    d = comm.size()
    fd = _row_parallel(mesh)
    fd.execute([torch.randn(2, 3, 2, device=comm.device), torch.randn(5, 2, device=comm.device)])
    exprs = fd._entry.last_runner.program.exprs
    ((k, j),) = loop_regions(exprs).items()
    assert isinstance(exprs[k], ForLoop) and all(isinstance(e, Synchronize) for e in exprs[k + 2:j + 1])
    assert j - (k + 1) == 2  # a Synchronize for each of the two stages
    assert j == len(exprs) - 1 or not isinstance(exprs[j + 1], Synchronize)
    g = LoopGraphs(exprs[k:j + 1])
    assert [c.kind for c in g.communications] == ["allreduce"] and not g.off
    assert all(isinstance(c, Communication) for c in g.communications)
    assert capturable(g.communications[0]) is (comm.backend == "nccl"), d


def test_a_stage_loop_running_a_fused_kernel_beside_its_collectives_is_not_graphed(comm, mesh, seed):
    """A unit run through the executor may fall back to the reference executor, whose host
    syncs would end a capture after a collective went into it (leaving NCCL in error on
    that rank alone): such a loop runs plainly."""
    from fuser.host.graphs import LoopGraphs, loop_regions
    from fuser.host.ir import PostOnStream

    d = comm.size()
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        wt = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.Float)
        y = fd.ops.linear(xt, wt)
        z = fd.ops.relu(y)
        fd.add_output(z)
        _shard(xt, mesh, 2)
        _shard(wt, mesh, 1)
        for t in (y, z):
            t.axis(0).parallelize(ParallelType.stream)
    x, w = torch.randn(2, 3, 2 * d, device=comm.device), torch.randn(5, 2 * d, device=comm.device)
    (out,) = fd.execute([block(x, 2, comm), block(w, 1, comm)])
    assert_close(out, torch.relu(torch.nn.functional.linear(x, w)))
    exprs = fd._entry.last_runner.program.exprs
    ((k, j),) = loop_regions(exprs).items()
    assert any(isinstance(b, PostOnStream) for b in exprs[k].body), exprs[k]
    g = LoopGraphs(exprs[k:j + 1])
    assert g.communications and g.off


@pytest.mark.parametrize("kind", ["allreduce", "reduce_scatter", "allgather"])
def test_pipelined_calls_replay_one_cuda_graph_with_their_collectives(comm, mesh, seed, kind, fixed_addresses):
    """From the second call at the same addresses, the stage loop with its NCCL
    collectives is one graph replay: each call reads the new values in place and gives
    the unsharded result's shard."""
    if comm.backend != "nccl":
        pytest.skip("CUDA graphs hold NCCL's collectives (gloo's run on the host)")
    d = comm.size()
    C, T, K, N = 4, 4 * d, 8 * d, 8 * d
    fd = {"allreduce": lambda: _row_parallel(mesh), "reduce_scatter": lambda: _row_parallel(mesh, out_axis=1),
          "allgather": lambda: _column_parallel(mesh)}[kind]()
    x_axis, w_axis = (1, 0) if kind == "allgather" else (2, 1)
    xs = torch.empty(C, T // d if kind == "allgather" else T, K // (1 if kind == "allgather" else d), device=comm.device)
    ws = torch.empty(N // d if kind == "allgather" else N, K // (1 if kind == "allgather" else d), device=comm.device)

    def call() -> None:
        x, w = torch.randn(C, T, K, device=comm.device), torch.randn(N, K, device=comm.device)
        xs.copy_(block(x, x_axis, comm))
        ws.copy_(block(w, w_axis, comm))
        (out,) = fd.execute([xs, ws])
        want = torch.nn.functional.linear(x, w)
        want = {"allreduce": want, "reduce_scatter": block(want, 1, comm), "allgather": block(want, 2, comm)}[kind]
        assert_close(out, want)
        out.fill_(float("nan"))  # the next call must write every element again

    calls = 5
    for _ in range(calls):
        call()
    (g,) = _graphs(fd)
    assert [c.kind for c in g.communications] == [kind]
    assert (g.captures, g.replays) == (1, calls - 1), (g.captures, g.replays, g.off)
    # a captured collective pins its NCCL communicator (destroying the group would wait for
    # the graph forever): a group's shutdown releases fuser's graphs first
    from fuser.host.graphs import release_communicating

    from torch._C._distributed_c10d import ProcessGroup

    assert getattr(ProcessGroup.shutdown, "__wrapped__", None) is not None  # (destroy_process_group calls it)
    release_communicating()
    assert not g.graphs and g.captures == 0  # a release starts the loop's capture budget afresh
    call()  # the addresses are new to the released loop: a plain run
    assert (g.captures, g.replays) == (0, calls - 1), (g.captures, g.replays, g.off)
    call()  # seen again: captured and replayed
    assert (g.captures, g.replays) == (1, calls), (g.captures, g.replays, g.off)


@pytest.mark.parametrize("kind", ["reduce_scatter", "allgather"])
def test_pipelined_collectives_on_an_inner_axis_replay_from_a_graph(comm, mesh, seed, kind, fixed_addresses):
    """[C, B, T, K] chunks whose collective is on an inner axis (T, or the gathered rows):
    per chunk, NCCL runs it as one coalesced collective per leading slice, writing the loop's
    output chunk in place; from the second call at the same addresses the loop replays
    from a CUDA graph. Each call gives the unsharded result's block."""
    from fuser.host import communication
    from fuser.host.graphs import LoopGraphs, loop_regions

    d = comm.size()
    C, B, T, K, N = 3, 3, 2 * d, 4 * d, 4 * d
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=DataType.Float)
        wt = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.Float)
        if kind == "reduce_scatter":  # row-parallel: K sharded, the output sharded on T
            _shard(xt, mesh, 3)
            _shard(wt, mesh, 1)
            y = fd.ops.linear(xt, wt)
            _shard(y, mesh, 2)
        else:  # column-parallel: the rows T gathered, the output sharded on N
            _shard(xt, mesh, 2)
            xt.axis(0).parallelize(ParallelType.stream)
            _shard(wt, mesh, 0)
            y = fd.ops.linear(xt, wt)
            _shard(y, mesh, 3)
        y.axis(0).parallelize(ParallelType.stream)
        fd.add_output(y)
    x_axis, w_axis, out_axis = (3, 1, 2) if kind == "reduce_scatter" else (2, 0, 3)
    xs = torch.empty_like(block(torch.empty(C, B, T, K, device=comm.device), x_axis, comm))
    ws = torch.empty_like(block(torch.empty(N, K, device=comm.device), w_axis, comm))
    calls = 5
    for _ in range(calls):
        x, w = torch.randn(C, B, T, K, device=comm.device), torch.randn(N, K, device=comm.device)
        xs.copy_(block(x, x_axis, comm))
        ws.copy_(block(w, w_axis, comm))
        (out,) = fd.execute([xs, ws])
        assert_close(out, block(torch.nn.functional.linear(x, w), out_axis, comm))
        out.fill_(float("nan"))  # the next call must write every element again
    exprs = fd._entry.last_runner.program.exprs
    ((k, j),) = loop_regions(exprs).items()  # one stage loop, its collective the graph's
    assert [c.kind for c in LoopGraphs(exprs[k:j + 1]).communications] == [kind]
    if comm.backend == "nccl":
        assert communication._slices(torch.empty(B, T, N), 1, False) == B  # (a chunk's collective is coalesced)
        (g,) = _graphs(fd)
        assert (g.captures, g.replays) == (1, calls - 1), (g.captures, g.replays, g.off)
