"""Sharded fusions against the unsharded computation: every rank passes its blocks and
checks the block (or whole tensor) it gets back. Run in every rank of
`torchrun --nproc-per-node 2 -m pytest tests/multidevice`."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.multidevice import DeviceMesh
from fuser.runtime.tolerance import assert_close

F32 = DataType.Float


def block(t: torch.Tensor, axis: int, comm) -> torch.Tensor:
    """This rank's block of `t` along `axis` (rank k holds the k-th of size() blocks)."""
    return t.chunk(comm.size(), axis)[comm.rank()].contiguous()


def sharded_input(fd, ndim, mesh, axis, dtype=F32, split=True):
    t = fd.define_tensor(shape=[-1] * ndim, contiguity=[True] * ndim, dtype=dtype)
    t.set_device_mesh(mesh)
    if axis is not None:
        if split:  # nvFuser's way: [n] -> [d, n/d], the outer part over the mesh
            t.outer_split(axis, mesh.size)
        t.axis(axis).parallelize(ParallelType.mesh_x)
    return t


def row_parallel_scattered(mesh, ndim: int, out_axis: int) -> FusionDefinition:
    """x [..., K] x w [N, K]^T with K sharded on both, into an output sharded on
    `out_axis`: a local linear and a reduce-scatter."""
    with FusionDefinition() as fd:
        xt = sharded_input(fd, ndim, mesh, ndim - 1)
        wt = sharded_input(fd, 2, mesh, 1)
        y = fd.ops.linear(xt, wt)
        fd.add_output(y)
        y.set_device_mesh(mesh)
        y.outer_split(out_axis, mesh.size)
        y.axis(out_axis).parallelize(ParallelType.mesh_x)
    return fd


def program(fd) -> str:
    return str(fd._entry.last_runner.program)


def comms(fd) -> list[str]:
    return re.findall(r"Communication \d+ \(type=(\w+)", program(fd))


def test_pointwise_on_blocks_needs_no_communication(comm, mesh, seed):
    d = comm.size()
    full = torch.randn(4 * d, 6, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        y = fd.ops.relu(fd.ops.mul(x, 2.0))
        fd.add_output(y)
    (out,) = fd.execute([block(full, 0, comm)])
    assert_close(out, block((full * 2).relu(), 0, comm))
    assert comms(fd) == []


@pytest.mark.parametrize("op,torch_op", [("sum", torch.sum), ("max", torch.amax), ("min", torch.amin)])
def test_reduction_over_the_sharded_axis_is_a_local_reduction_and_an_allreduce(comm, mesh, seed, op, torch_op):
    d = comm.size()
    full = torch.randn(3 * d, 5, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(getattr(fd.ops, op)(fd.ops.mul(x, x), [0]))
    (out,) = fd.execute([block(full, 0, comm)])
    assert_close(out, torch_op(full * full, 0))
    assert comms(fd) == ["Allreduce"]


def test_integer_sum_over_the_sharded_axis(comm, mesh, seed):
    d = comm.size()
    full = torch.randint(-50, 50, (2 * d, 7 * d), device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 1, dtype=DataType.Int)
        fd.add_output(fd.ops.sum(x, [1]))
    (out,) = fd.execute([block(full, 1, comm)])
    assert torch.equal(out, full.sum(1))


@pytest.mark.parametrize("axis", [0, 1])
def test_a_replicated_output_of_a_sharded_tensor_is_allgathered(comm, mesh, seed, axis):
    d = comm.size()
    full = torch.randn(2 * d, 3 * d, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, axis)
        y = fd.ops.exp(x)
        fd.add_output(y)
        y.set_device_mesh(mesh)
    (out,) = fd.execute([block(full, axis, comm)])
    assert out.shape == full.shape
    assert_close(out, full.exp())
    assert comms(fd) == ["Allgather"]


def test_resharding_from_one_axis_to_another_is_an_all_to_all(comm, mesh, seed):
    d = comm.size()
    full = torch.randn(2 * d, 3 * d, 5, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 3, mesh, 0)
        y = fd.ops.neg(x)
        fd.add_output(y)
        y.set_device_mesh(mesh)
        y.outer_split(1, d)
        y.axis(1).parallelize(ParallelType.mesh_x)
    (out,) = fd.execute([block(full, 0, comm)])
    assert_close(out, block(-full, 1, comm))
    assert comms(fd) == ["AllToAll"]


def test_a_replicated_operand_of_sharded_work_is_sliced_locally(comm, mesh, seed):
    d = comm.size()
    full, bias = torch.randn(2 * d, 4, device=comm.device), torch.randn(2 * d, 4, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        b = sharded_input(fd, 2, mesh, None)
        fd.add_output(fd.ops.add(x, b))
    (out,) = fd.execute([block(full, 0, comm), bias])
    assert_close(out, block(full + bias, 0, comm))
    assert comms(fd) == ["LocalSlice"]


def test_row_parallel_linear_with_bias_adds_the_bias_once(comm, mesh, seed):
    d = comm.size()
    x, w, b = (torch.randn(5, 4 * d, device=comm.device), torch.randn(6, 4 * d, device=comm.device),
               torch.randn(6, device=comm.device))
    with FusionDefinition() as fd:
        xt = sharded_input(fd, 2, mesh, 1)
        wt = sharded_input(fd, 2, mesh, 1)
        bt = sharded_input(fd, 1, mesh, None)
        fd.add_output(fd.ops.linear(xt, wt, bt))
    (out,) = fd.execute([block(x, 1, comm), block(w, 1, comm), b])
    assert_close(out, torch.nn.functional.linear(x, w, b))
    assert comms(fd) == ["Allreduce"]


def test_row_parallel_linear_into_a_sharded_output_is_a_reduce_scatter(comm, mesh, seed):
    d = comm.size()
    x, w = torch.randn(2 * d, 4 * d, device=comm.device), torch.randn(6, 4 * d, device=comm.device)
    fd = row_parallel_scattered(mesh, 2, 0)
    (out,) = fd.execute([block(x, 1, comm), block(w, 1, comm)])
    assert_close(out, block(torch.nn.functional.linear(x, w), 0, comm))
    assert comms(fd) == ["ReduceScatter"]


@pytest.mark.parametrize("lead", [3, 20])  # coalesced per-slice collectives on NCCL; more slices than that move the axis
def test_collectives_on_an_inner_axis(comm, mesh, seed, lead):
    """An allgather and a reduce-scatter on axis 1 of a [lead, ...] tensor: on NCCL a few
    leading slices run as one coalesced collective each, writing dense outputs in place;
    many slices (and gloo) move the axis to the front."""
    from fuser.host.communication import MAX_COALESCED_SLICES

    d = comm.size()
    x, w = torch.randn(lead, 2 * d, 4 * d, device=comm.device), torch.randn(6, 4 * d, device=comm.device)
    fd = row_parallel_scattered(mesh, 3, 1)  # into an output sharded on its token axis
    (out,) = fd.execute([block(x, 2, comm), block(w, 1, comm)])
    assert comms(fd) == ["ReduceScatter"]
    assert_close(out, block(torch.nn.functional.linear(x, w), 1, comm))
    coalesced = comm.backend == "nccl" and lead <= MAX_COALESCED_SLICES
    if coalesced:  # (a moved axis comes back as a view)
        assert out.is_contiguous()
    with FusionDefinition() as fd:  # a sharded axis gathered in the middle
        xt = sharded_input(fd, 3, mesh, 1)
        y = fd.ops.exp(xt)
        fd.add_output(y)
        y.set_device_mesh(mesh)
    (out,) = fd.execute([block(x, 1, comm)])
    assert comms(fd) == ["Allgather"]
    assert out.shape == x.shape
    assert_close(out, x.exp())
    if coalesced:
        assert out.is_contiguous()


def test_coalesced_slices_write_every_block_in_place(comm, mesh, seed, monkeypatch):
    """The coalesced path's slicing on CPU (CI): one collective per leading slice, reading the
    input in place and writing a dense output. A shim gives gloo the two coalesced calls
    NCCL has, made of gloo's own collectives (NCCL runs them in test_collectives_on_an_inner_axis)."""
    if comm.backend != "gloo":
        pytest.skip("NCCL runs the coalesced path itself")
    import torch.distributed as dist

    from fuser.host import communication

    d, k = comm.size(), comm.rank()
    calls = []

    class Shim:  # the process group's coalesced calls, one gloo collective per slice
        def reduce_scatter_tensor_coalesced(self, outs, ins, opts):
            calls.append(("reduce_scatter", len(outs)))
            for o, i in zip(outs, ins):
                whole = i.clone()
                dist.all_reduce(whole)
                o.copy_(whole.view(d, -1)[k])
            return None

        def allgather_into_tensor_coalesced(self, outs, ins, opts):
            calls.append(("allgather", len(outs)))
            for o, i in zip(outs, ins):
                dist.all_gather(list(o.view(d, -1).unbind(0)), i)
            return None

    slices = communication._slices
    monkeypatch.setattr(communication, "_slices", lambda x, axis, gloo: slices(x, axis, False))
    monkeypatch.setattr(communication, "_pg", lambda group: Shim())
    lead = 3
    x, w = torch.randn(lead, 2 * d, 4 * d), torch.randn(6, 4 * d)
    fd = row_parallel_scattered(mesh, 3, 1)
    (out,) = fd.execute([block(x, 2, comm), block(w, 1, comm)])
    assert_close(out, block(torch.nn.functional.linear(x, w), 1, comm))
    assert out.is_contiguous()
    with FusionDefinition() as fd:
        xt = sharded_input(fd, 3, mesh, 1)
        y = fd.ops.exp(xt)
        fd.add_output(y)
        y.set_device_mesh(mesh)
    (out,) = fd.execute([block(x, 1, comm)])
    assert_close(out, x.exp())
    assert out.is_contiguous()
    assert calls == [("reduce_scatter", lead), ("allgather", lead)]
    # a block laid out otherwise on one rank (a definition that allows any layout): every
    # rank still runs the same per-slice collectives (the choice is never a rank's layout)
    with FusionDefinition() as fd:
        xt = fd.define_tensor(shape=[-1] * 3, contiguity=[False] * 3, dtype=F32)
        xt.set_device_mesh(mesh)
        xt.outer_split(1, d)
        xt.axis(1).parallelize(ParallelType.mesh_x)
        y = fd.ops.exp(xt)
        fd.add_output(y)
        y.set_device_mesh(mesh)
    mine = block(x, 1, comm)
    if k == 1:
        mine = mine.transpose(0, 2).contiguous().transpose(0, 2)
    (out,) = fd.execute([mine])
    assert_close(out, x.exp())
    assert calls[2:] == [("allgather", lead)]


def test_column_parallel_linear_slices_the_bias_and_keeps_the_output_sharded(comm, mesh, seed):
    d = comm.size()
    x, w, b = (torch.randn(5, 6, device=comm.device), torch.randn(4 * d, 6, device=comm.device),
               torch.randn(4 * d, device=comm.device))
    with FusionDefinition() as fd:
        xt = sharded_input(fd, 2, mesh, None)
        wt = sharded_input(fd, 2, mesh, 0)
        bt = sharded_input(fd, 1, mesh, None)
        fd.add_output(fd.ops.relu(fd.ops.linear(xt, wt, bt)))
    (out,) = fd.execute([x, block(w, 0, comm), b])
    assert_close(out, block(torch.nn.functional.linear(x, w, b).relu(), 1, comm))
    assert comms(fd) == ["LocalSlice"]


@pytest.mark.parametrize("case", ["rows", "batch", "columns"])
def test_matmul_keeps_a_sharded_row_batch_or_column_axis(comm, mesh, seed, case):
    d = comm.size()
    a, b = torch.randn(2 * d, 3 * d, 4, device=comm.device), torch.randn(2 * d, 4, 5 * d, device=comm.device)
    with FusionDefinition() as fd:
        at = sharded_input(fd, 3, mesh, {"rows": 1, "batch": 0, "columns": None}[case])
        bt = sharded_input(fd, 3, mesh, {"rows": None, "batch": 0, "columns": 2}[case])
        fd.add_output(fd.ops.matmul(at, bt))
    ins = {"rows": [block(a, 1, comm), b], "batch": [block(a, 0, comm), block(b, 0, comm)],
           "columns": [a, block(b, 2, comm)]}[case]
    (out,) = fd.execute(ins)
    axis = {"rows": 1, "batch": 0, "columns": 2}[case]
    assert_close(out, block(a @ b, axis, comm))
    assert comms(fd) == []


def test_a_tensor_placed_with_a_mesh_x_axis_of_the_mesh_size(comm, mesh, seed):
    """nvFuser's older form: the sharded axis has one entry per device (no split)."""
    d = comm.size()
    full = torch.randn(d, 3, 4, device=comm.device)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[d, 3, 4], contiguity=[True] * 3, dtype=F32)
        fd.sched._set_device_mesh(x, mesh)
        fd.sched.parallelize(x, 0, ParallelType.mesh_x)
        y = fd.ops.sum(fd.ops.add(x, x), [0])
        fd.add_output(y)
    (out,) = fd.execute([block(full, 0, comm)])
    assert_close(out, (full + full).sum(0))


def test_the_host_program_prints_its_communications(comm, mesh, seed, monkeypatch, capsys):
    d = comm.size()
    monkeypatch.setenv("FUSER_DUMP", "host_ir")
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    fd.execute([torch.randn(2, 3, device=comm.device)])
    text = capsys.readouterr().err
    team = " ".join(map(str, range(d)))
    assert re.search(rf"= Communication 0 \(type=Allreduce, team=\({team}\), input=T\d+_g_float\[rS\d+\{{i0\}}, "
                     r"iS\d+\{i1\}\], op=sum\)\n  Wait Communication 0\n", text), text


@pytest.fixture(params=["shared", "group"])
def agreement(request, monkeypatch, comm):
    """The channel the ranks agree over: shared memory (every rank on one host, as here)
    or, under FUSER_DISABLE=shared_agreement, a process group (ranks on several hosts)."""
    from fuser.host import agreement as channels

    if request.param == "group":
        monkeypatch.setenv("FUSER_DISABLE", "shared_agreement")
    yield request.param
    want = {"shared": channels._SharedChannel, "group": channels._GroupChannel}[request.param]
    assert isinstance(channels._CHANNELS[request.param], want)


def test_ranks_of_one_host_agree_through_shared_memory(comm, mesh, seed):
    """Each rank posts a word per call and reads every rank's; the calls are numbered,
    so a rank reading ahead of a slow one waits for that one's word of this call."""
    import time

    from fuser.host import agreement as channels

    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    full = torch.randn(2 * comm.size(), 3, device=comm.device)
    for k in range(4):
        if comm.rank() == 1 and k == 2:
            time.sleep(0.2)  # rank 0 reaches the agreement first and must wait for this call's word
        (out,) = fd.execute([block(full, 0, comm)])
        assert_close(out, full.sum(0))
    channel = channels._CHANNELS["shared"]
    assert isinstance(channel, channels._SharedChannel)
    n = channel.calls
    words = [channel.words[(n & 1) * comm.size() + r] for r in range(comm.size())]
    assert [w >> 33 for w in words] == [n] * comm.size()
    assert len({w & 0xFFFFFFFF for w in words}) == 1  # the same inputs' fingerprint on every rank


def test_a_shared_channel_gives_each_call_its_own_words(comm, mesh, seed):
    """A channel of its own (its own file): a rank that reads before a slow rank posts
    waits for this call's word, never taking the word two calls before in the same row;
    a rank that finds a later call's word says the ranks fell out of step."""
    import time

    import torch.distributed as dist

    from fuser.host import agreement as channels

    if not isinstance(channels._channel([]), channels._SharedChannel):  # (made here when no call made it yet)
        pytest.skip("the ranks do not share a host")
    d, k = comm.size(), comm.rank()
    store = dist.distributed_c10d._get_default_store()
    ch = channels._SharedChannel.make(store, f"fuser/test/{seed}/", d, k, 20.0)  # (the seed: one key on every rank)
    assert ch is not None
    for call in range(1, 6):
        if k == 1 and call == 3:
            time.sleep(0.2)  # rank 0 reads first: its row holds call 1's words, which it must not take
        ch.post(call % 2, 1000 + call)
        assert ch.collect() == [(call % 2, 1000 + call)] * d
    dist.barrier()
    if k == 1:
        ch.post(0, 6)
        ch.post(0, 7)  # call 7 lands in call 5's row
    dist.barrier()
    if k == 0:  # still collecting call 5 (as a rank whose earlier collect timed out would be)
        with pytest.raises(RuntimeError, match="fell out of step"):
            ch.collect()
    dist.barrier()


def test_ranks_that_want_different_agreement_channels_all_raise(comm, mesh, seed, monkeypatch):
    """FUSER_DISABLE=shared_agreement on one rank only: every rank raises at the first call
    instead of waiting, and later calls raise at once (a fresh job's channels)."""
    from fuser.host import agreement as channels

    monkeypatch.setattr(channels, "_CHANNELS", {})
    if comm.rank() == 1:
        monkeypatch.setenv("FUSER_DISABLE", "shared_agreement")
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    good = torch.randn(2, 3, device=comm.device)
    with pytest.raises(RuntimeError, match="want different agreement channels"):
        fd.execute([good])
    with pytest.raises(RuntimeError, match="could not set up their agreement"):
        fd.execute([good])


def test_every_rank_raises_when_one_rank_passes_a_bad_input(comm, mesh, seed, agreement):
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    bad = torch.randn(2, 3, 4, device=comm.device) if comm.rank() == 1 else torch.randn(2, 3, device=comm.device)
    if comm.rank() == 1:
        with pytest.raises(Exception, match=r"on rank 1; the other ranks stop too"):
            fd.execute([bad])
    else:
        with pytest.raises(RuntimeError, match=r"rank 1 failed before its communications"):
            fd.execute([bad])


def test_a_bad_input_after_cached_calls_stops_every_rank_and_the_next_call_runs(comm, mesh, seed, agreement):
    """Steady state (every rank runs a cached program, so the agreement is checked where
    the call first communicates): rank 1's bad input still stops every rank before any
    collective, and the next good call runs on every rank."""
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    good = torch.randn(2, 3, device=comm.device)  # the same block on every rank (one seed)
    for _ in range(2):
        fd.execute([good])
    if comm.rank() == 1:
        with pytest.raises(Exception, match=r"on rank 1; the other ranks stop too"):
            fd.execute([torch.randn(2, 3, 4, device=comm.device)])
    else:
        with pytest.raises(RuntimeError, match=r"rank 1 failed before its communications"):
            fd.execute([good])
    (s,) = fd.execute([good])
    assert_close(s, good.sum(0) * comm.size())


def test_a_call_that_fails_before_its_agreement_is_checked_leaves_the_ranks_in_step(comm, mesh, seed, agreement):
    """Rank 1's blocks differ from rank 0's (each valid locally), and rank 0 fails in its
    local work before its first communication, so its agreement is left unchecked: the
    next call collects it without raising it again, and every rank's later calls pair up
    (a review found rank 0 raising the stale disagreement and the ranks a call apart)."""
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    good = torch.randn(2, 3, device=comm.device)  # the same block on every rank (one seed)
    fd.execute([good])
    if comm.rank() == 0:
        def fail(*args, **kwargs):
            raise RuntimeError("a local failure before the first communication")

        runner = fd._entry.last_runner  # the cached program: its first step (the local sum) fails
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runner, "_steps", [(fail, runner._steps[0][1]), *runner._steps[1:]])
            with pytest.raises(RuntimeError, match="a local failure"):
                fd.execute([good])
    else:
        with pytest.raises(ValueError, match=r"inputs differ in shape or dtype"):
            fd.execute([torch.randn(2, 4, device=comm.device)])
    for _ in range(2):
        (s,) = fd.execute([good])
        assert_close(s, good.sum(0) * comm.size())


def test_ranks_whose_blocks_differ_in_shape_all_raise(comm, mesh, seed, agreement):
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    x = torch.randn(2 + comm.rank(), 3, device=comm.device)
    with pytest.raises(ValueError, match=r"inputs differ in shape or dtype \(rank 0 and rank 1 disagree\)"):
        fd.execute([x])


def test_placement_errors_name_the_argument(comm, mesh):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=F32)
        with pytest.raises(Exception, match="has no device mesh; call set_device_mesh"):
            x.axis(0).parallelize(ParallelType.mesh_x)
        x.set_device_mesh(mesh)
        x.inner_split(0, comm.size())
        with pytest.raises(NotImplementedError, match="cyclic sharding"):
            x.axis(1).parallelize(ParallelType.mesh_x)
        with pytest.raises(Exception, match=r"factor=0 must be a positive int"):
            x.outer_split(0, 0)
        with pytest.raises(Exception, match=r"mesh=\'x\' is not a DeviceMesh"):
            x.set_device_mesh("x")
        fd.add_output(x)
    with pytest.raises(ValueError, match=r"distinct non-negative ids"):
        DeviceMesh([0, 0])


def test_a_fixed_sharded_extent_that_the_mesh_does_not_divide_is_refused(comm, mesh):
    d = comm.size()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[2 * d + 1, 3], contiguity=[True, True], dtype=F32)
        x.set_device_mesh(mesh)
        x.axis(0).parallelize(ParallelType.mesh_x)
        fd.add_output(fd.ops.neg(x))
    with pytest.raises(ValueError, match=rf"axis 0 of extent {2 * d + 1} is sharded over {d} devices"):
        fd.execute([torch.randn(2, 3, device=comm.device)])


def test_a_collective_that_times_out_names_its_communication(comm, mesh, monkeypatch):
    """Rank 1 never joins the allreduce; rank 0's wait times out and says which
    communication of the host program it was."""
    if comm.backend != "gloo":
        pytest.skip("a short-timeout group for the test is a gloo (CPU) group")
    import datetime

    import torch.distributed as dist

    from fuser.host import communication, evaluator

    short = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=3))  # every rank makes it
    monkeypatch.setattr(communication, "_group", lambda team: (short, True))
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    x = torch.randn(2, 3)
    if comm.rank() == 1:
        monkeypatch.setattr(evaluator, "start", lambda c, t, dest=None: communication.Pending(None, lambda: t))
        fd.execute([x])
    else:
        with pytest.raises(RuntimeError, match=r"Communication 0 \(allreduce of T\d+_g_float\[.*\]\) failed"):
            fd.execute([x])
    dist.barrier()


def test_a_partial_sum_read_twice_is_summed_once(comm, mesh, seed):
    """A reduction over the sharded axis that is an output and is read again: one
    allreduce, both outputs the whole sum (a review found it summed twice)."""
    d = comm.size()
    full = torch.randn(2 * d, 5, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        s = fd.ops.sum(x, [0])
        fd.add_output(s)
        fd.add_output(fd.ops.mul(s, 2.0))
    local = block(full, 0, comm)
    kept = local.clone()
    s_out, twice = fd.execute([local])
    assert_close(s_out, full.sum(0))
    assert_close(twice, full.sum(0) * 2)
    assert torch.equal(local, kept)  # the input is not reduced in place
    assert comms(fd) == ["Allreduce"]


def test_a_broadcast_of_a_sharded_input_keeps_its_sharding(comm, mesh, seed):
    """broadcast_in_dim of a sharded input (the pre-segmentation passes, which fold such
    broadcasts into inputs, leave a sharded fusion alone)."""
    d = comm.size()
    full = torch.randn(2 * d, device=comm.device)
    with FusionDefinition() as fd:
        x = sharded_input(fd, 1, mesh, 0)
        y = fd.ops.broadcast_in_dim(fd.ops.neg(x), [3, 2 * d], [1])
        fd.add_output(y)
        y.set_device_mesh(mesh)
    (out,) = fd.execute([block(full, 0, comm)])
    assert out.shape == (3, 2 * d)
    assert_close(out, (-full).expand(3, 2 * d))


def test_a_sharded_tensor_on_a_mesh_out_of_rank_order_is_refused(comm, seed):
    d = comm.size()
    backwards = DeviceMesh(list(reversed(range(d))))
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, backwards, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    with pytest.raises(NotImplementedError, match="must list its devices in ascending order"):
        fd.execute([torch.randn(2, 3, device=comm.device)])


def test_reading_the_size_of_a_sharded_axis_is_refused(comm, mesh):
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.div(fd.ops.sum(x, [0]), fd.ops.size(x, 0)))
    with pytest.raises(NotImplementedError, match="reads the size of axis 0"):
        fd.execute([torch.randn(2, 3, device=comm.device)])


def test_segmenting_a_sharded_fusion_by_hand_is_refused(comm, mesh):
    with FusionDefinition() as fd:
        x = sharded_input(fd, 2, mesh, 0)
        fd.add_output(fd.ops.sum(x, [0]))
    with pytest.raises(NotImplementedError, match="fd.segment of a sharded fusion"):
        fd.segment([torch.randn(2, 3, device=comm.device)])
