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
    # nothing in the iteration reads the sum: the worker goes on, the caller waits at the join
    assert "linear(" in body and "type=Allreduce" in body and "Wait Communication 0 (at the join)" in body, body


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
    # the chunk's linear reads the gathered rows: its worker waits for them
    assert body.index("type=Allgather") < body.index("Wait Communication 0\n") < body.index("linear("), body
