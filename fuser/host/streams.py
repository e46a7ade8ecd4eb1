"""Stream parallelism (seed 004): an axis parallelised with `ParallelType.Stream` becomes
a host loop over it whose iterations run on worker streams.

A fusion with stream-parallel axes is segmented with `should_merge` (no scheduler is
asked): a group is stream-parallel or not, and only groups of the same kind merge, so a
non-stream-parallel consumer between two stream-parallel expressions splits them. Then
`lower_streams` turns each run of consecutive stream-parallel top-level expressions into
one loop:

    ALLOCATE each tensor the loop writes (whole, once, before the loop)
    GetCurrentStream into Stream n              (the caller's stream)
    FOR StreamIdx in <the stream axis>:
      SetCurrentStream to Stream ( StreamIdx % numberOfStreams )
      Synchronize Stream n                      (the worker waits for the caller's work)
      HirAliasSelect of each input and output along its stream axis, then the expression
    SetCurrentStream to Stream n
    FOR StreamIdx in <the stream axis>:         (the join: the caller waits for each worker)
      Synchronize Stream ( StreamIdx % numberOfStreams )

Seed 004's first lowering joined inside the loop (back on the caller's stream, waiting for
the worker at the end of each iteration). The next iteration's worker then waits for the
caller, which waits for the previous worker: every iteration runs after the one before
and nothing overlaps. The join loop after it (as nvFuser's later AssignStreams pass does)
leaves the iterations free to run side by side.

A loop holding communications (a sharded fusion's pipelining) is cut into stages at each
communication instead, and each stage runs on a stream of its own for every iteration:

    FOR StreamIdx in <the stream axis>:
      SetCurrentStream to Stream n+1            (stage 0: chunk i's matmul, then its collective)
      Synchronize Stream n
      ...
      Communication k
      SetCurrentStream to Stream n+2            (stage 1: what reads the collective's result)
      Synchronize Stream n+1
      Wait Communication k
      ...
    SetCurrentStream to Stream n
    Synchronize Stream n+1
    Synchronize Stream n+2

Round-robin streams would run every chunk's matmul at once (on an H200 four chunk GEMMs
shared the GPU and ended together), so no collective could start before the last matmul
ended; a stage's stream runs its chunks in order, and chunk i's collective (on the
communicator's own stream) overlaps chunk i+1's matmul.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from fuser.ir import (
    AtenOp,
    BroadcastOp,
    ExpandOp,
    Expr,
    Fusion,
    IterDomain,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    ParallelType,
    ReshapeOp,
    ReshardOp,
    SqueezeOp,
    TensorView,
    Val,
)
from fuser.ir.mapping import ExactMap
from fuser.segment import SegmentedGroup

from .ir import (
    Allocate,
    Communication,
    Evaluate,
    ForLoop,
    GetCurrentStream,
    HirAliasSelect,
    HostExpr,
    HostIrContainer,
    PostOnStream,
    SetCurrentStream,
    Stream,
    Synchronize,
    Wait,
    host_index,
    local_slice,
)

#: expressions PyTorch runs as well as a kernel would (or better): a group of only these
#: is evaluated expression by expression, any other group runs as a unit through fuser
HOST_NATIVE = (LoadStoreOp, MatmulOp, LinearOp, AtenOp, ReshapeOp, SqueezeOp, BroadcastOp, ExpandOp, ReshardOp)


def stream_axis(tv: Val) -> int | None:
    """The position of `tv`'s stream-parallel logical axis, or None."""
    if not isinstance(tv, TensorView):
        return None
    for k, i in enumerate(tv.logical_no_reductions()):
        if i.parallel_type is ParallelType.Stream:
            return k
    return None


def has_stream_axes(fusion: Fusion) -> bool:
    """Whether any tensor of `fusion` has a stream-parallel axis (it is lowered to loops)."""
    return any(stream_axis(tv) is not None for tv in fusion.tensors())


def _group_is_stream(g: SegmentedGroup) -> bool:
    return any(stream_axis(o) is not None for e in g.exprs for o in e.outputs)


def should_merge(a: SegmentedGroup, b: SegmentedGroup) -> bool:
    """The segmenter's custom predicate for stream-parallel fusions: groups merge when
    both are stream-parallel or neither is, and neither holds an ATen-run op (matmul,
    linear, SDPA, ...), which stays a host expression of its own."""
    if _group_is_stream(a) != _group_is_stream(b):
        return False
    heavy = (MatmulOp, LinearOp, AtenOp)
    return not any(isinstance(e, heavy) for g in (a, b) for e in g.exprs)


def host_native(exprs: Sequence[Expr]) -> bool:
    """Whether a custom group of `exprs` is evaluated expression by expression."""
    return all(isinstance(e, HOST_NATIVE) for e in exprs)


def lower_streams(program: HostIrContainer) -> HostIrContainer:
    """`program` with each run of stream-parallel top-level expressions in one stream
    loop (see the module docstring); `program` itself when it has none."""
    exprs = program.exprs
    if not any(_out_axis(e) is not None for e in exprs):
        return program
    exact = ExactMap(program.fusion)
    out: list[HostExpr] = []
    run: list[HostExpr] = []
    number = 0  # the next free stream number (a loop's caller; a stage loop's stages after it)
    aliases = dict(program.aliases)
    # outputs aliased to an input (add_output(alias_input=)) that lower_segmented did not
    # allocate in it (the input is read after they are written): a loop writes its own
    in_place = {e.tv for e in program.exprs if isinstance(e, Allocate)}
    own = frozenset(v for v in program.aliases if v not in in_place)

    def flush() -> None:
        nonlocal number
        if run:
            ends = stage_ends(run)
            stages = sum(ends)
            out.extend(_loop(run, exact, program.fusion, number, own) if not stages
                       else _stage_loop(run, exact, program.fusion, number, aliases, ends, own))
            number += 2 + stages + (stages % 2)  # (even: the caller numbers of seed 004's dumps, 0, 2, ...)
            run.clear()

    for e in exprs:
        if _out_axis(e) is not None or (isinstance(e, Wait) and any(
                isinstance(c, Communication) and c.number == e.number for c in run)):
            run.append(e)  # (a communication's Wait goes in its loop: each chunk waits for its own)
        else:
            flush()
            out.append(e)
    flush()
    return replace(program.with_exprs(out), aliases=aliases)


def _out_axis(e: HostExpr) -> int | None:
    if not isinstance(e, (Evaluate, PostOnStream, Communication)):
        return None
    for o in e.outputs:
        k = stream_axis(o)
        if k is not None:
            return k
    return None


def _mapped_axis(tv: Val, axis: IterDomain, exact: ExactMap, e: HostExpr | None = None,
                 after_communication: frozenset = frozenset()) -> int | None:
    """The position of `tv`'s logical axis that is `axis`, or None (it has no such axis).
    A matmul's or linear's operands map by position (no exact mapping crosses them)."""
    if not isinstance(tv, TensorView):
        return None
    ids = tv.logical_no_reductions()
    for k, i in enumerate(ids):
        if not i.is_broadcast and exact.same(i, axis):
            return k
    if isinstance(e, Communication) or (stream_axis(tv) is not None and e is not None and tv in e.outputs
                                        and any(i in after_communication for i in e.inputs)):
        # no axis maps across a resharding: its tensors (and what they feed) say which
        # axis is the stream's
        return stream_axis(tv)
    x = e.expr if isinstance(e, Evaluate) else None
    if isinstance(x, (MatmulOp, LinearOp)) and tv in x.inputs:
        out = x.outputs[0].logical_no_reductions()
        pos = next((k for k, i in enumerate(out) if exact.same(i, axis)), None)
        if pos is None:
            return None
        from_right = len(out) - pos  # 1: N, 2: M (matmul) or the last batch-like axis
        if isinstance(x, MatmulOp):
            b = x.inputs[1]
            if tv is b:
                k = len(ids) - 1 if from_right == 1 else (len(ids) - from_right if from_right > 2 else None)
            else:
                k = len(ids) - 2 if from_right == 2 and len(ids) >= 2 else (
                    len(ids) - from_right if from_right > 2 else None)
        else:  # linear: x [..., K] @ w[N, K]^T + bias[N]
            if tv is x.inputs[0]:
                k = len(ids) - from_right if from_right > 1 else None
            else:
                k = 0 if from_right == 1 else None
        return k if k is not None and 0 <= k < len(ids) and not ids[k].is_broadcast else None
    return None


def _on_slice(c: Communication, axis: int | None, stream: int | None) -> int | None:
    """A communication's sharded axis on one stream slice (the stream axis dropped)."""
    if axis is None or stream is None:
        return axis
    if axis == stream:
        raise NotImplementedError(f"Communication {c.number} ({c.kind}) is over the stream-parallel axis: shard and "
                                  "stream over different axes")
    return axis - 1 if axis > stream else axis


def _loop(run: list[HostExpr], exact: ExactMap, fusion: Fusion, number: int, own: frozenset) -> list[HostExpr]:
    """A compute loop: iteration i on worker stream i % numberOfStreams, then the join."""
    index, axis, before = _loop_head(run, fusion, number, own)
    caller, worker = Stream(number=number), Stream(index=index)
    body = _loop_body(run, exact, axis, index, [SetCurrentStream(worker), Synchronize(caller)])
    join = ForLoop(index, axis.extent, (Synchronize(worker),), axis=axis)
    return before + [ForLoop(index, axis.extent, tuple(body), axis=axis), SetCurrentStream(caller), join]


def stage_ends(run: Sequence[HostExpr]) -> list[bool]:
    """Per expression of a loop's run: whether it ends a stage (a communication: what
    follows it runs on the next stage's stream). None ends one in a compute loop."""
    return [isinstance(e, Communication) and e.communicates for e in run]


def _stage_loop(run: list[HostExpr], exact: ExactMap, fusion: Fusion, number: int,
                aliases: dict[Val, Val], ends: Sequence[bool], own: frozenset) -> list[HostExpr]:
    """A loop cut into stages (`ends`: after which expressions): stage k runs on stream
    number+1+k for every iteration, then the caller waits for each stage. An allreduce
    that may write its input, a buffer the loop allocates, has its result there
    (`aliases`): no copy per chunk."""
    written = {o for e in run for o in e.outputs}
    for e in run:
        if (isinstance(e, Communication) and e.kind == "allreduce" and e.in_place and e.inp in written
                and e.out not in aliases):  # (an output the user aliased to an input keeps that)
            aliases[e.out] = e.inp
    index, axis, before = _loop_head(run, fusion, number, own)
    caller = Stream(number=number)
    stages = [Stream(number=number + 1 + k) for k in range(1 + sum(ends))]
    body = _loop_body(run, exact, axis, index, [SetCurrentStream(stages[0]), Synchronize(caller)], stages, ends)
    after: list[HostExpr] = [SetCurrentStream(caller)]
    after.extend(Synchronize(s) for s in stages)
    return before + [ForLoop(index, axis.extent, tuple(body), axis=axis)] + after


def _loop_head(run: list[HostExpr], fusion: Fusion, number: int, own: frozenset) -> tuple[Val, IterDomain, list[HostExpr]]:
    """A stream loop's index, its stream axis, and what precedes it: an Allocate of each
    tensor it writes (whole, once; `own`: not in the input it aliases), and
    GetCurrentStream of the caller's stream."""
    out_tv = next(o for o in run[0].outputs if stream_axis(o) is not None)
    axis = out_tv.logical_no_reductions()[stream_axis(out_tv)]
    written = [o for e in run for o in e.outputs if isinstance(o, TensorView)]
    before: list[HostExpr] = [Allocate(tv, own=tv in own) for tv in written]  # type: ignore[arg-type]
    before.append(GetCurrentStream(Stream(number=number)))
    return host_index(fusion), axis, before


def _loop_body(run: list[HostExpr], exact: ExactMap, axis: IterDomain, index: Val, body: list[HostExpr],
               stages: Sequence[Stream] = (), ends: Sequence[bool] = ()) -> list[HostExpr]:
    """One iteration: `body`'s stream set-up, then each expression of `run` on its slices
    (selected as first read); with `stages`, the next stage's stream after each
    expression `ends` marks."""
    slices: dict[Val, tuple[TensorView, int]] = {}
    stage = 0

    def sliced(v: Val) -> tuple[Val, int | None]:
        got = slices.get(v)
        if got is not None:
            return got
        k = _mapped_axis(v, axis, exact, current, after_communication)
        if k is None:
            return v, None
        s = local_slice(v, k)  # type: ignore[arg-type]
        body.append(HirAliasSelect(v, k, index, s))  # type: ignore[arg-type]
        slices[v] = (s, k)
        return s, k

    # the slices of communications' outputs (what later expressions of the loop read)
    after_communication = frozenset()
    current: HostExpr | None = None
    for n, e in enumerate(run):
        current = e
        if isinstance(e, Wait):
            body.append(Wait(e.number, sliced(e.out)[0]))  # type: ignore[arg-type]
            continue
        ins = [sliced(v) for v in e.inputs]
        outs = [sliced(v) for v in e.outputs]
        if any(k is None for _, k in outs):
            raise NotImplementedError(
                f"stream parallelism: an output of {type(e).__name__} has no axis mapped to the stream axis "
                f"{axis!r} (a reduction over the stream-parallel axis is not supported)")
        in_axes = tuple(k for _, k in ins)
        out_axes = tuple(k for _, k in outs)
        if isinstance(e, Communication):
            (s_in, k_in), (s_out, k_out) = ins[0], outs[0]
            after_communication = after_communication | {e.out}
            body.append(replace(e, inp=s_in, out=s_out, axis=_on_slice(e, e.axis, k_in),
                                out_axis=_on_slice(e, e.out_axis, k_out)))
        elif isinstance(e, Evaluate):
            body.append(Evaluate(e.expr, tuple(v for v, _ in ins), tuple(v for v, _ in outs), e.unit,
                                 in_axes=in_axes, out_axes=out_axes))
        else:
            body.append(PostOnStream(e.unit, tuple(v for v, _ in ins), tuple(v for v, _ in outs),  # type: ignore[union-attr]
                                     in_axes=in_axes, out_axes=out_axes))
        if stages and ends[n]:  # what follows waits for it on the next stage's stream
            stage += 1
            body += [SetCurrentStream(stages[stage]), Synchronize(stages[stage - 1])]
    return body
