"""Host IR: every fusion runs as a host program (fuser/host), printed as seed 004's dumps;
stream-parallel axes become loops over worker streams; outputs aliased to inputs are
written into the input's buffer. Each case runs on CPU and (marked gpu) on CUDA."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.frontend.cache import FusionCache
from fuser.host.evaluator import HostIrEvaluator
from fuser.host.ir import Allocate, Deallocate, Evaluate, ForLoop, LaunchKernel
from fuser.runtime.tolerance import assert_close


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    return request.param


def _rand(*shape, device="cpu"):
    x = torch.randn(shape, device=device)
    return x + 0.25 * x.sign()


def _sets(n: int, stream: tuple[bool, ...]) -> FusionDefinition:
    """Seed 004's examples: `n` chained set ops, output k stream-parallel where stream[k]."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        outs = []
        for k in range(n):
            t = fd.ops.set(t)
            outs.append(t)
        fd.add_output(t)
        for t, s in zip(outs, stream):
            if s:
                t.axis(0).parallelize(ParallelType.stream)
    return fd


def _program(fd: FusionDefinition):
    runner = fd._entry.last_runner
    assert isinstance(runner, HostIrEvaluator)
    return runner.program


def _shape(program) -> list:
    """The program's structure: top-level expression kinds, loops with their bodies."""
    def one(e):
        if isinstance(e, ForLoop):
            return ("for", [type(b).__name__ for b in e.body])
        return type(e).__name__
    return [one(e) for e in program.exprs if not isinstance(e, Deallocate)]


def _stream_loop(*body: str) -> list:
    """A stream loop as lowered: the caller's stream read, the work loop (each iteration
    on a worker stream that first waits for the caller), then the join loop."""
    return ["GetCurrentStream", ("for", ["SetCurrentStream", "Synchronize", *body]), "SetCurrentStream",
            ("for", ["Synchronize"])]


_SELECT_SET = ("HirAliasSelect", "HirAliasSelect", "Evaluate")


@pytest.mark.parametrize("case, n, stream, expected", [
    ("SingleSetOp", 1, (True,), ["Allocate", *_stream_loop(*_SELECT_SET)]),
    ("TwoSetOps", 2, (True, True),
     ["Allocate", "Allocate", *_stream_loop(*_SELECT_SET, "HirAliasSelect", "Evaluate")]),
    ("ThreeSetOpsWithDisjointsForLoops", 3, (True, False, True),
     ["Allocate", *_stream_loop(*_SELECT_SET), "Evaluate", "Allocate", *_stream_loop(*_SELECT_SET)]),
])
def test_seed_004_stream_loops(device, case, n, stream, expected):
    fd = _sets(n, stream)
    x = _rand(6, 40, device=device)
    (out,) = fd.execute([x])
    assert torch.equal(out, x)
    program = _program(fd)
    assert _shape(program) == expected, f"{case}\n{program}"
    text = str(program)
    # the dump's lines, as seed 004 prints them
    assert text.startswith("%HostIrContainer { (T0_g_float[iS0{i0}, iS1{i1}]) -> (T")
    assert "FOR StreamIdx in iStreamIdx" in text
    assert "SetCurrentStream to Stream ( StreamIdx % numberOfStreams )" in text
    assert re.search(r"= HirAliasSelect\( T0_g_float\[iS0\{i0\}, iS1\{i1\}\], axis = iS0\{i0\}, index = StreamIdx \)", text)
    assert re.search(r"T\d+_l_float\[iS\d+\{i1\}\] = Set\( T\d+_l_float\[iS\d+\{i1\}\], cache_op=Streaming \)", text)
    assert text.count("FOR StreamIdx") == (4 if case.startswith("Three") else 2)  # work and join loops
    # tensors passed between top-level expressions print as global memory, as in the seed
    assert re.search(r"T1_g_float\[iStreamIdx2\{i0\}, iS3\{i1\}\] = ALLOCATE\(", text)
    assert "_l_float" not in text.split("FOR")[0]
    assert text.rstrip().endswith("} // %HostIrContainer")


def test_stream_loop_intermediate_is_released_after_the_join():
    """A tensor only a stream loop reads is dropped after the loop that joins the worker
    streams: before it, its buffer could be reused on the caller's stream while a worker
    still reads it."""
    fd = _sets(3, (True, False, True))
    fd.execute([_rand(4, 8)])
    exprs = _program(fd).exprs
    kinds = [type(e).__name__ for e in exprs]
    for k, e in enumerate(exprs):
        if isinstance(e, Deallocate):
            prev = exprs[k - 1]
            assert not (isinstance(prev, ForLoop) and kinds[k - 2] != "SetCurrentStream"), kinds
    t1 = next(e.tv for e in exprs if isinstance(e, Allocate))
    drop = next(k for k, e in enumerate(exprs) if isinstance(e, Deallocate) and e.tv is t1)
    joins = [k for k, e in enumerate(exprs) if isinstance(e, ForLoop) and len(e.body) == 1]
    assert joins[0] < drop < joins[1], kinds


def test_stream_loop_dump_with_fuser_dump(capsys, monkeypatch):
    monkeypatch.setenv("FUSER_DUMP", "host_ir")
    fd = _sets(2, (True, True))
    fd.execute([_rand(3, 5)])
    err = capsys.readouterr()
    text = err.out + err.err
    assert "%HostIrContainer" in text and "FOR StreamIdx in iStreamIdx" in text


def test_stream_loop_of_pointwise_and_matmul_matches_eager(device):
    """A matmul (ATen) and pointwise work in one stream loop over the rows: each
    iteration's slice on a worker stream, the pointwise group compiled by fuser."""
    a = _rand(8, 32, device=device)
    b = _rand(32, 16, device=device)
    c = _rand(8, 16, device=device)
    with FusionDefinition() as fd:
        ta = fd.from_pytorch(a)
        tb = fd.from_pytorch(b)
        tc = fd.from_pytorch(c)
        m = fd.ops.matmul(ta, tb)
        r = fd.ops.relu(m)
        p = fd.ops.mul(r, tc)
        y = fd.ops.add(p, 1.0)
        fd.add_output(y)
        for t in (m, r, p, y):  # as in nvFuser, each tensor the loop computes says so
            t.axis(0).parallelize(ParallelType.stream)
    (out,) = fd.execute([a, b, c])
    want = torch.relu(a @ b) * c + 1.0
    assert_close(out, want, rtol=1e-4, atol=1e-4)
    program = _program(fd)
    loops = [e for e in program.exprs if isinstance(e, ForLoop)]
    assert len(loops) == 2, program  # the work loop and its join
    kinds = [type(b).__name__ for b in loops[0].body]
    assert "Evaluate" in kinds and "PostOnStream" in kinds, program
    assert [type(b).__name__ for b in loops[1].body] == ["Synchronize"], program


@pytest.mark.parametrize("kind, a_shape, b_shape, axis", [
    ("matmul", (6, 32), (32, 16), 0),  # rows: each slice of the left operand is 1-D
    ("matmul", (6, 32), (32, 16), 1),  # columns: the right operand's slices are 1-D
    ("matmul", (3, 6, 32), (32, 16), 0),  # a batch axis (bench --overlap's loop)
    ("linear", (6, 32), (16, 32), 0),
    ("linear", (6, 32), (16, 32), 1),  # the weight's rows: a 1-D weight slice
])
def test_stream_loop_over_each_axis_of_a_matmul(device, kind, a_shape, b_shape, axis):
    """The loop evaluates the matmul (or linear) on the slices, whatever axis of the
    product is stream-parallel: rows, columns or a batch axis."""
    a, b = _rand(*a_shape, device=device), _rand(*b_shape, device=device)
    with FusionDefinition() as fd:
        ta, tb = fd.from_pytorch(a), fd.from_pytorch(b)
        m = fd.ops.matmul(ta, tb) if kind == "matmul" else fd.ops.linear(ta, tb)
        y = fd.ops.mul(fd.ops.relu(m), 2.0)
        fd.add_output(y)
        for t in (m, y):
            t.axis(axis).parallelize(ParallelType.stream)
    (out,) = fd.execute([a, b])
    m_want = a @ b if kind == "matmul" else torch.nn.functional.linear(a, b)
    assert_close(out, torch.relu(m_want) * 2.0, rtol=1e-4, atol=1e-4)
    assert any(isinstance(e, ForLoop) for e in _program(fd).exprs)


@pytest.mark.parametrize("gather", [True, False])
def test_a_stream_loop_with_index_ops_is_never_graphed(gather):
    """Index ops check their indices after each launch, which a graph replay cannot: a
    loop holding one runs plainly (it keeps raising on a bad index)."""
    from fuser.host.graphs import LoopGraphs, loop_regions

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        y = fd.ops.take_along_axis(x, i, 1) if gather else fd.ops.mul(x, 2.0)
        z = fd.ops.add(y, 1.0)
        fd.add_output(z)
        for t in (y, z):
            t.axis(0).parallelize(ParallelType.stream)
    fd.execute([torch.randn(4, 8), torch.randint(0, 8, (4, 8))])
    exprs = _program(fd).exprs
    ((k, j),) = loop_regions(exprs).items()
    assert LoopGraphs(exprs[k:j + 1]).off is gather


@pytest.mark.gpu
def test_stream_loop_waits_for_the_caller_and_joins_back():
    """On a busy caller stream: the workers wait for the input the caller writes, and
    the caller's next work waits for the workers (else it reads unwritten slices)."""
    x = _rand(16, 1 << 16, device="cuda")
    fd = _sets(2, (True, True))
    fd.execute([x])  # compiled before the timed part of the stream's queue
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # the caller's stream is still busy when the loop is issued
        y = x * 3.0
        (out,) = fd.execute([y])
        assert torch.cuda.current_stream() == side
        got = out * 1.0  # on the caller's stream, after the join
    side.synchronize()
    assert torch.equal(got, x * 3.0)


def _loop_graphs(fd):
    from fuser.host.graphs import LoopGraphs

    return [e for _, e in fd._entry.last_runner._steps if isinstance(e, LoopGraphs)]


def _matmul_gelu_loop():
    from fuser.benchmarks import overlap

    return overlap.define(True)  # gelu(x @ w) * 2 over x's first axis on streams


def _gelu_mm(x, w):
    return (torch.nn.functional.gelu((x @ w).float(), approximate="tanh") * 2).bfloat16()


@pytest.mark.gpu
def test_stream_loop_is_replayed_from_a_cuda_graph(fixed_addresses):
    """Once a call's addresses were seen before, the loop is one graph replay: it reads
    what those addresses hold at each call (new values in place give eager's results),
    and a call with other tensors runs for its own addresses."""
    fd = _matmul_gelu_loop()
    x = torch.randn(4, 64, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, 96, device="cuda", dtype=torch.bfloat16)
    calls = 6
    for k in range(calls):
        x.copy_(torch.randn_like(x))  # new values at the same address
        (out,) = fd.execute([x, w])
        assert_close(out.float(), _gelu_mm(x, w).float(), rtol=2e-2, atol=2e-2)
        out.fill_(float("nan"))  # the next call must write every element again
    (g,) = _loop_graphs(fd)
    assert (g.captures, g.replays) == (1, calls - 1)  # seen, then captured and replayed
    x2 = torch.randn_like(x)  # another input address: run plainly
    (out,) = fd.execute([x2, w])
    assert_close(out.float(), _gelu_mm(x2, w).float(), rtol=2e-2, atol=2e-2)
    assert (g.captures, g.replays) == (1, calls - 1)


@pytest.mark.gpu
def test_a_loop_whose_capture_fails_runs_plainly_from_then_on(fixed_addresses, monkeypatch):
    """An expression a graph cannot hold (here: one that raises only while captured) ends
    the capture cleanly: the call runs plainly, the loop is not captured again, the
    caller's stream is current, and the worker streams serve the next loops."""
    post = HostIrEvaluator._post

    def fails_in_capture(self, e, state):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("cannot be captured")
        post(self, e, state)

    monkeypatch.setattr(HostIrEvaluator, "_post", fails_in_capture)
    FusionCache.reset()  # an evaluator built before the patches (another test's) would not fail
    fd = _matmul_gelu_loop()
    x = torch.randn(4, 64, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(128, 96, device="cuda", dtype=torch.bfloat16)
    before = torch.cuda.current_stream()
    for _ in range(4):
        (out,) = fd.execute([x, w])
        assert_close(out.float(), _gelu_mm(x, w).float(), rtol=2e-2, atol=2e-2)
        out.fill_(float("nan"))
    (g,) = _loop_graphs(fd)
    assert (g.off, g.captures, g.replays) == (True, 1, 0)
    assert torch.cuda.current_stream() == before and not torch.cuda.is_current_stream_capturing()
    y = _rand(8, 64, device="cuda")
    (copied,) = _sets(2, (True, True)).execute([y])
    torch.cuda.synchronize()
    assert torch.equal(copied, y)


@pytest.mark.gpu
def test_stream_loop_graphs_can_be_turned_off_and_stay_off_inside_a_users_capture(monkeypatch):
    fd = _matmul_gelu_loop()
    x = torch.randn(4, 32, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 48, device="cuda", dtype=torch.bfloat16)
    want = _gelu_mm(x, w)
    monkeypatch.setenv("FUSER_DISABLE", "stream_graphs")
    for _ in range(3):
        (out,) = fd.execute([x, w])
    (g,) = _loop_graphs(fd)
    assert not g.graphs and g.captures == 0 and g.replays == 0
    assert_close(out.float(), want.float(), rtol=2e-2, atol=2e-2)
    monkeypatch.delenv("FUSER_DISABLE")
    # inside the user's own capture the loop is recorded into the user's graph
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    user = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        fd.execute([x, w])  # warm on this stream
        side.synchronize()
        with torch.cuda.graph(user, stream=side):
            (captured,) = fd.execute([x, w])
    captured.fill_(float("nan"))
    user.replay()
    torch.cuda.synchronize()
    assert_close(captured.float(), want.float(), rtol=2e-2, atol=2e-2)
    assert not g.graphs


@pytest.mark.gpu
def test_error_inside_a_stream_loop_restores_the_callers_stream(monkeypatch):
    import fuser.host.evaluator as ev

    fd = _sets(1, (True,))
    x = _rand(4, 8, device="cuda")
    before = torch.cuda.current_stream()

    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(ev, "_bind", boom)
    with pytest.raises(RuntimeError, match="boom"):
        fd.execute([x])
    assert torch.cuda.current_stream() == before


def test_stream_axis_refuses_what_it_cannot_be(device):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        with pytest.raises(Exception, match="broadcast"):
            t0.axis(1).parallelize(ParallelType.stream)
        with pytest.raises(Exception, match="out of range"):
            t0.axis(2).parallelize(ParallelType.stream)
        with pytest.raises(Exception, match="only ParallelType.stream"):
            fd.sched.parallelize(t0, 0, ParallelType.TIDx)
        fd.add_output(fd.ops.set(t0))


def test_every_fusion_runs_as_a_host_program(device):
    """A multi-segment fusion (a reduction feeding pointwise work and a matmul):
    LaunchKernel / Evaluate expressions, intermediates deallocated after their last reader."""
    x = _rand(16, 24, device=device)
    w = _rand(24, 8, device=device)
    with FusionDefinition() as fd:
        tx = fd.from_pytorch(x)
        tw = fd.from_pytorch(w)
        # a sum of |x| keeps the divisor away from zero, where summation order would decide the result
        s = fd.ops.sum(fd.ops.abs(tx), dims=[1], keepdim=True)
        y = fd.ops.div(tx, s)
        fd.add_output(fd.ops.matmul(y, tw))
    (out,) = fd.execute([x, w])
    assert_close(out, (x / x.abs().sum(1, keepdim=True)) @ w, rtol=1e-4, atol=1e-4)
    program = _program(fd)
    kinds = {type(e) for e in program.exprs}
    assert Evaluate in kinds and Deallocate in kinds, program
    assert (LaunchKernel in kinds) == (len(program.units) > sum(
        1 for u in program.units if u.scheduler in ("expr_eval", "no_op"))), program
    # every intermediate is dropped after its last reader, and nothing else is
    dropped = [e.tv for e in program.exprs if isinstance(e, Deallocate)]
    assert dropped and not set(dropped) & (set(program.inputs) | set(program.outputs))


def test_output_aliased_to_input_is_written_in_place(device):
    """add_output(alias_input=): the input's own buffer holds the result (same data pointer)."""
    x = _rand(64, 33, device=device)
    before = x.clone()
    ptr = x.data_ptr()
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        y = fd.ops.mul(fd.ops.add(t0, 1.0), 2.0)
        fd.add_output(y, alias_input=t0)
    outs = fd.execute([x])
    assert outs == [] or all(o.data_ptr() == ptr for o in outs)
    assert x.data_ptr() == ptr
    assert_close(x, (before + 1.0) * 2.0)
    program = _program(fd)
    assert any(isinstance(e, Allocate) for e in program.exprs), program


def test_aliased_input_read_after_its_writer_is_copied_last(device):
    """The aliased input is read again after the segment writing its alias: that segment
    writes elsewhere, and the input is updated at the end (its old values stay readable)."""
    x = _rand(32, 48, device=device)
    before = x.clone()
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        y = fd.ops.add(t0, 1.0)
        m = fd.ops.max(t0, dims=[0, 1])  # reads x: a reduction segment of its own
        fd.add_output(fd.ops.add(y, m), alias_input=t0)
        fd.add_output(fd.ops.sum(t0, dims=[1]))
    (s,) = fd.execute([x])
    assert_close(x, before + 1.0 + before.max(), rtol=1e-5, atol=1e-5)
    assert_close(s, before.sum(1), rtol=1e-5, atol=1e-4)


def test_a_stream_loop_output_aliased_to_an_input_read_later_writes_its_own_buffer(device):
    """A stream-parallel output added with alias_input= of an input read after the loop:
    the loop writes a buffer of its own and the input is updated at the end (the loop's
    Allocate bound the input's buffer, so the later reader saw the new values: a review
    found it)."""
    x, o = _rand(4, 8, device=device), _rand(4, 8, device=device)
    before = o.clone()
    with FusionDefinition() as fd:
        t0, t1 = fd.from_pytorch(x), fd.from_pytorch(o)
        y = fd.ops.add(t0, 1.0)
        y.axis(0).parallelize(ParallelType.stream)
        fd.add_output(y, alias_input=t1)
        fd.add_output(fd.ops.sum(t1, dims=[1]))  # reads o after the loop wrote y
    (s,) = fd.execute([x, o])
    assert_close(o, x + 1.0)
    assert_close(s, before.sum(1), rtol=1e-5, atol=1e-4)


def test_user_segments_run_through_the_host_program(device):
    """fd.segment() then execute: the segments run as PostOnStream units of one program."""
    x = _rand(16, 64, device=device)
    w = _rand(64, 32, device=device)
    with FusionDefinition() as fd:
        tx = fd.from_pytorch(x)
        tw = fd.from_pytorch(w)
        y = fd.ops.relu(fd.ops.matmul(tx, tw))
        fd.add_output(fd.ops.sum(y, dims=[1]))
    segments = fd.segment([x, w])
    assert len(segments) >= 2
    (out,) = fd.execute([x, w])
    assert_close(out, torch.relu(x @ w).sum(1), rtol=1e-4, atol=1e-3)
    kinds = [type(e).__name__ for e in fd._segment_program.exprs]
    assert kinds.count("PostOnStream") == len(segments)
