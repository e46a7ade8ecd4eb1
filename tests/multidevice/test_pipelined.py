"""Communication pipelined with compute by a stream-parallel axis (seed 004 item 4): the
host program loops over chunks, each on a worker stream, so one chunk's collective runs
while the next chunk's matmul does."""
from __future__ import annotations

import re

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


def test_column_parallel_linear_pipelines_the_allgather_of_sequence_shards(comm, mesh, seed):
    d = comm.size()
    C, S, K = 4, 2 * d, 6
    x, w = torch.randn(C, S, K, device=comm.device), torch.randn(4 * d, K, device=comm.device)
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
    (out,) = fd.execute([block(x, 1, comm), block(w, 0, comm)])
    assert_close(out, block(torch.nn.functional.linear(x, w), 2, comm))
    body = _loop_body(fd)
    # the allgather is issued on stage 0's stream, which holds no compute (the next chunk's
    # gather does not wait for this chunk's linear); the linear waits for it on stage 1's
    assert _in_order(body, "SetCurrentStream to Stream 1\n", "type=Allgather", "SetCurrentStream to Stream 2\n",
                     "Wait Communication 0\n", "linear("), body
