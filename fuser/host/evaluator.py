"""HostIrEvaluator: runs a host program on torch tensors, GPU or CPU.

One evaluator per input signature (made with the program): each `LaunchKernel` prepares
its segment's generated kernel at its first launch (or, where lowering cannot take the
segment, runs it on the reference executor from then on); `Evaluate`s run on the
reference executor, sharing the program's values. On a CPU every segment runs on the
reference executor, so CI runs the very programs the GPU runs. Stream expressions
become torch.cuda stream switches and waits on a GPU and do nothing on a CPU.
"""
from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple, Sequence

import torch

from fuser.ir import LinearOp, MatmulOp, Scalar, TensorView, Val
from fuser.lower.lower import NotLowerable
from fuser.runtime import philox
from fuser.runtime.binding import Binding, BindingPlan
from fuser.kernel import generates_kernel, kernels_available, prepare_kernel
from fuser.runtime.reference import ReferenceExecutor, logical_input

from .ir import (
    Allocate,
    Communication,
    Deallocate,
    Evaluate,
    ForLoop,
    GetCurrentStream,
    HirAliasSelect,
    HostExpr,
    HostIrContainer,
    HostUnit,
    LaunchKernel,
    PostOnStream,
    SetCurrentStream,
    Stream,
    Synchronize,
    Wait,
)
from . import copy_engine
from .communication import capturable, settle, start, watch_replayed
from .graphs import LoopGraphs, issue_lock, loop_regions, usable
from .lower import as_declared

#: worker streams a stream loop cycles through (FUSER_NUM_STREAMS overrides)
NUM_STREAMS = int(os.environ.get("FUSER_NUM_STREAMS", "4"))


class SegmentRun(NamedTuple):
    """How one segment ran in an evaluator's executions so far (`segment_runs`)."""

    scheduler: str
    #: whether segments of this scheduler become generated kernels (the others, expr_eval
    #: and no_op, run on the reference executor by design)
    generates_kernel: bool
    #: True: it ran its generated kernel; False: it fell back to the reference executor (the
    #: kernel was not lowerable); None: no kernel was tried (a reference-only scheduler, or
    #: kernels unavailable: a CPU device, no pycuda, FUSER_DISABLE=codegen)
    kernel: bool | None


class UnitRun:
    """One segment's state in an evaluator: its fusion, how its inputs map, its kernel."""

    __slots__ = ("unit", "group", "fusion", "inputs", "outputs", "intermediate", "kernel")

    def __init__(self, unit: HostUnit, complete_inputs: set) -> None:
        self.unit = unit
        self.group = unit.group
        self.fusion = unit.fusion
        self.inputs: list[Val] = list(unit.group.inputs)
        self.outputs: list[Val] = list(unit.group.outputs)
        #: per input: whether it is another segment's output (laid out by us, not the user)
        self.intermediate = [v not in complete_inputs for v in self.inputs]
        #: the generated kernel (None: not tried yet; False: this segment runs on the reference)
        self.kernel: Any = None

    def codegen_candidate(self) -> bool:
        return self.group.scheduler is not None and generates_kernel(self.group.scheduler)


class HostIrEvaluator:
    """Runs `program` (made for one input signature) on inputs of that signature.

    `binding` is the validated binding of the call that made it: what the signature fixes
    (extents, device) is taken from it once."""

    #: per-segment hooks (`start(k) -> token`, `stop(k, token, args, outs)`) around each
    #: segment's run, for profiling; None on the ordinary path
    observer: Any = None
    #: the PresegFusion whose fusion was segmented (its values -> the defined fusion's)
    preseg: Any = None

    def __init__(self, program: HostIrContainer, binding: Binding) -> None:
        self.program = program
        self.seg = None  # the SegmentedFusion it was lowered from, when there is one
        fusion = program.fusion
        self.extents = dict(binding.extents)
        self.device = binding.device
        self.use_kernels = kernels_available(binding.device)
        complete_inputs = set(fusion.inputs)
        self._given = frozenset(program.inputs)
        #: (position, input) of the inputs the reference executor reads in another form:
        #: added broadcast axes (seed 000), or a CPU scalar tensor beside device tensors
        self._logical = [(k, v) for k, v in enumerate(program.inputs)
                         if isinstance(v, TensorView) and (v.domain.added_broadcasts() or (
                             self.device.type != "cpu" and not v.logical_no_reductions()))]
        self.runs = [UnitRun(u, complete_inputs) for u in program.units]  # by unit index
        #: whether some output is bound before its writer runs (an alias: Allocate)
        self._preallocates = bool(program.aliases)
        #: stream numbers the unseeded RNG ops span: with some, each execution draws one
        #: seed and base offset that every segment (kernel or reference) uses
        self.rng_streams = philox.streams(fusion)
        exprs = program.exprs
        # one kernel reading the fusion's inputs in order and writing its outputs in order:
        # the cached path launches it with nothing in between
        #: whether the program makes other streams current (stream loops on a GPU)
        self._switches_streams = self.device.type == "cuda" and any(
            isinstance(e, SetCurrentStream) for e in program.walk())
        self._direct = (len(exprs) == 1 and isinstance(exprs[0], LaunchKernel)
                        and list(exprs[0].inputs) == list(program.inputs)
                        and list(exprs[0].outputs) == list(program.outputs) and not program.aliases)
        self._handlers: dict[type, Callable[[Any, Any], None]] = {
            LaunchKernel: self._launch, Evaluate: self._evaluate, PostOnStream: self._post,
            Allocate: self._allocate, Deallocate: self._deallocate, ForLoop: self._loop,
            GetCurrentStream: self._get_stream, SetCurrentStream: self._set_stream, Synchronize: self._synchronize,
            HirAliasSelect: self._select, Communication: self._communicate, Wait: self._wait,
        }
        #: inputs an output is written into (add_output(alias_input=)), and the outputs
        #: that may come out as views of them: those are copied when made, or they would
        #: show the in-place update instead of the input as it was passed in
        self._targets = [v for v in program.inputs if v in set(program.aliases.values())]
        if self._targets:
            self._viewable = frozenset(v for v in program.outputs if v not in program.aliases)
            for kind in (LaunchKernel, Evaluate, PostOnStream):
                self._handlers[kind] = self._detaching(self._handlers[kind])
        #: buffers allocated before a stream loop whose chunks the loop reduce-scatters, in
        #: program order: their chunks' reduce-scatters may take no SMs (copy_engine.py)
        self._symmetric = {tv: k for k, tv in enumerate(_scattered_buffers(program))} \
            if self.device.type == "cuda" else {}
        #: the top-level expressions as run: a stream loop with its join is one step, which
        #: a CUDA graph may replay (fuser/host/graphs.py)
        self._steps: list[tuple[Callable[[Any, Any], None], Any]] = []
        regions = loop_regions(exprs) if self.device.type == "cuda" else {}
        k = 0
        while k < len(exprs):
            if k in regions:
                self._steps.append((self._graphed_loop, LoopGraphs(exprs[k:regions[k] + 1])))
                k = regions[k] + 1
            else:
                self._steps.append((self._handlers[type(exprs[k])], exprs[k]))
                k += 1
        #: per segment index: the positions of its first and last top-level expression (observer)
        self._spans: dict[int, tuple[int, int]] = {}
        for k, e in enumerate(exprs):
            u = e.unit.index if isinstance(e, (LaunchKernel, PostOnStream)) else getattr(e, "unit", None)
            if u is not None:
                first, _ = self._spans.get(u, (k, k))
                self._spans[u] = (first, k)

    def segment_runs(self) -> list[SegmentRun]:
        """How each segment ran (read-only: for tests and tools; the run path keeps no record)."""
        return [SegmentRun(str(r.group.scheduler), r.codegen_candidate(), None if r.kernel is None else bool(r.kernel))
                for r in self.runs]

    # --- running ---------------------------------------------------------------------
    def run(self, inputs: Sequence[Any], outputs: Sequence[Any] | None = None) -> list[Any]:
        """The program's outputs for `inputs`. `outputs`: buffers a one-kernel program may
        write instead of allocating (a stream loop's slices), when laid out as it writes."""
        if self._direct and self.observer is None:
            k = self.runs[0].kernel
            if k:
                outs = outputs if outputs is not None and k.can_write_into(outputs) else k.allocate_outputs()
                k.run(inputs, outs, philox.draw(self.device, self.rng_streams) if self.rng_streams else None)
                return outs
        program = self.program
        env: dict[Any, Any] = dict(self.extents)
        env.update(zip(program.inputs, inputs))
        drawn = philox.draw(self.device, self.rng_streams) if self.rng_streams else None
        state = _State(env, ReferenceExecutor(program.fusion, self.device, drawn), drawn)
        if self._logical:
            # Evaluate reads inputs as the reference executor does; kernels get them as given
            for k, v in self._logical:
                state.raw[v] = inputs[k]
                env[v] = logical_input(v, inputs[k], self.device)
        state.ref.env = env  # Evaluate and the scalars it needs share the program's values
        caller = torch.cuda.current_stream(self.device) if self._switches_streams else None
        try:
            if self.observer is None:
                for step, e in self._steps:
                    step(e, state)
            else:
                self._run_observed(program.exprs, state)
        finally:
            if caller is not None:  # an error inside a stream loop leaves the caller's stream current
                torch.cuda.set_stream(caller)
        return [self._output(state, v) for v in program.outputs]

    def _run_observed(self, exprs: Sequence[HostExpr], state: "_State") -> None:
        starts = {first: u for u, (first, _) in self._spans.items()}
        stops = {last: u for u, (_, last) in self._spans.items()}
        token = None
        for k, e in enumerate(exprs):
            if k in starts:
                token = self.observer.start(starts[k])
            self._handlers[type(e)](e, state)
            if k in stops:
                r = self.runs[stops[k]]
                env = state.env
                self.observer.stop(stops[k], token, [env.get(v) for v in r.inputs], [env.get(v) for v in r.outputs])

    def _output(self, state: "_State", v: Val) -> Any:
        got = state.env.get(v)
        if got is not None:
            return got
        if isinstance(v, Scalar):  # host arithmetic on scalars: no segment computes it
            return state.ref.value(v)
        if v in self.program.absent:  # held by another mesh's devices
            return torch.empty(0, dtype=v.dtype.torch, device=self.device)
        raise RuntimeError(f"no segment produced the fusion output {v!r}")

    # --- expressions -----------------------------------------------------------------
    def _detaching(self, handler: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        """`handler`, then a copy of each output it bound that shares storage with an input
        an output is written into (a view of it: a no_op segment, a reference op)."""
        def run(e: Any, state: "_State") -> None:
            handler(e, state)
            env = state.env
            targets = [env[v].untyped_storage().data_ptr() for v in self._targets
                       if isinstance(env.get(v), torch.Tensor)]
            for v in e.outputs:
                t = env.get(v)
                if v in self._viewable and isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in targets:
                    env[v] = t.clone()
        return run

    def _launch(self, e: LaunchKernel, state: "_State") -> None:
        r = self.runs[e.unit.index]
        env, raw = state.env, state.raw
        args = [as_declared(env[v], v) if inter else raw.get(v, env[v]) for v, inter in zip(r.inputs, r.intermediate)]
        if self.use_kernels and r.kernel is None and r.codegen_candidate():
            try:
                r.kernel = prepare_kernel(r.group.scheduler, r.fusion, args, self.device)
            except NotLowerable:
                r.kernel = False
        k = r.kernel
        if k:
            if self._preallocates:
                preset = [env.get(v) for v in e.outputs]
                if any(p is not None for p in preset) and self._in_place(r, preset):
                    k.run(args, preset, state.drawn)  # into allocated (aliased) buffers
                    return
            outs = k.allocate_outputs()
            k.run(args, outs, state.drawn)
        else:
            outs = run_on_reference(r.fusion, args, self.device, state.drawn)
        if self._preallocates:
            _bind(env, e.outputs, outs)
        else:
            env.update(zip(e.outputs, outs))

    @staticmethod
    def _in_place(r: UnitRun, preset: list[Any]) -> bool:
        """Whether the kernel may write `preset` (buffers bound before it: an output aliased
        to an input it may read) directly: a pointwise kernel reads each input element
        at the index it writes, and the buffers are laid out as it writes them."""
        from fuser.scheduler import SchedulerType

        return (r.group.scheduler is SchedulerType.pointwise and all(p is not None for p in preset)
                and r.kernel.can_write_into(preset))

    def _post(self, e: PostOnStream, state: "_State") -> None:
        from .executor import run_unit

        args = _unsliced(state, e.inputs, e.in_axes, raw=True)
        # the unit declares its inputs' layouts: intermediates and slices are made to match
        declared = e.unit.fusion.inputs
        given = self._given
        args = [a if v in given and not (e.in_axes and e.in_axes[k] is not None) else as_declared(a, declared[k])
                for k, (a, v) in enumerate(zip(args, e.inputs))]
        env = state.env
        preset = [env.get(v) for v in e.outputs]
        if all(isinstance(p, torch.Tensor) for p in preset):
            preset = [p.unsqueeze(a) if a is not None else p for p, a in zip(preset, e.out_axes or [None] * len(preset))]
        else:
            preset = None
        outs = run_unit(e.unit, args, self.device, preset)
        if outs is not preset:  # else it wrote the slices bound already
            _bind(env, e.outputs, _resliced(outs, e.out_axes))

    def _evaluate(self, e: Evaluate, state: "_State") -> None:
        env = state.env
        x = e.expr
        native = isinstance(x, (MatmulOp, LinearOp))
        if e.own and not native:
            if not any(v in env for v in x.outputs):
                state.ref.run_expr(x)
                return
            if not any(isinstance(v, TensorView) for v in x.outputs):
                return  # scalars computed already (on demand, by an expression reading them)
        if native:
            # on a stream loop's slices as they are: dropping the same axis of an operand
            # and of the product leaves a matmul (or linear) of the slices, whose 1-D rules
            # cover a dropped row or column, so no axis needs putting back
            out = env.get(e.outputs[0])
            got = _aten(x, _unsliced(state, e.inputs, ()), out)
            if got is not None:
                if got is not out:
                    _bind(env, e.outputs, [got])
                return
        args = _unsliced(state, e.inputs, e.in_axes)
        outs = state.ref.evaluate(x, args)
        _bind(env, e.outputs, _resliced(outs, e.out_axes))

    def _allocate(self, e: Allocate, state: "_State") -> None:
        env = state.env
        root = self.program.alias_root(e.tv) if not e.own else e.tv
        if root is not e.tv and root in env:
            env[e.tv] = env[root]
            return
        shape = [int(state.ref.value(i.expanded_extent if i.has_expanded_extent else i.extent))
                 for i in e.tv.logical_no_reductions()]
        scale = self.program.extent_scale.get(e.tv)
        if scale:
            shape = [n * a // b for n, (a, b) in zip(shape, scale)]
        slot = self._symmetric.get(e.tv)
        if slot is not None and not e.zero_init:
            buf = copy_engine.allocate(slot, shape, e.tv.dtype.torch, self.device)
            if buf is not None:
                env[e.tv] = buf
                return
        make = torch.zeros if e.zero_init else torch.empty
        env[e.tv] = make(shape, dtype=e.tv.dtype.torch, device=self.device)

    def _deallocate(self, e: Deallocate, state: "_State") -> None:
        got = state.env.pop(e.tv, None)
        if e.tv in self._symmetric and got is not None:
            copy_engine.done(got)

    def _loop(self, e: ForLoop, state: "_State") -> None:
        env = state.env
        stop = int(env[e.stop] if e.stop in env else state.ref.value(e.stop))
        if e.is_join:
            # a join: worker streams repeat every NUM_STREAMS iterations, and a wait on a
            # stream covers all the work queued on it, so one wait per worker is the same
            stop = min(stop, NUM_STREAMS)
        handlers = self._handlers
        for i in range(stop):
            env[e.index] = i
            for b in e.body:
                handlers[type(b)](b, state)
        env.pop(e.index, None)

    def _graphed_loop(self, g: LoopGraphs, state: "_State") -> None:
        """A stream loop and its join: replayed from a CUDA graph where one was captured
        for this call's key, captured at the key's second sighting, else run as is."""
        with issue_lock(self.device):
            key = None
            if not g.off and usable(self.device, bool(self.rng_streams)):
                key = g.key(state.env, state.raw, state.ref.value)
            graph, capture = g.lookup(key) if key is not None else (None, False)
            if capture and g.communications and not all(capturable(c) for c in g.communications):
                g.off, capture = True, False  # (asked once: a graph exists only where it held)
            if g.communications and (graph is not None or capture):
                settle()  # the ranks agree on this call before a graph issues its collectives
            if graph is None and capture:
                caller = state.current
                number = g.exprs[1].stream.number  # the caller's stream, as the loop names it

                def issue(side: Any) -> None:
                    state.streams[number] = state.current = side
                    state.marks.clear()
                    self._run_plain(g.exprs, state)

                try:
                    graph = g.capture(key, issue, self.device, _worker_streams(self.device))
                finally:
                    state.streams[number] = state.current = caller
                    state.marks.clear()
            if graph is None:
                self._run_plain(g.exprs, state)
                return
            graph.replay()  # on the caller's stream, which the loop starts and ends on
            g.replays += 1
            if g.communications:
                watch_replayed(g.communications)
            state.marks.clear()  # the caller has new work: its mark no longer covers it

    def _run_plain(self, exprs: Sequence[HostExpr], state: "_State") -> None:
        handlers = self._handlers
        for e in exprs:
            handlers[type(e)](e, state)

    def _stream(self, s: Stream, state: "_State") -> Any:
        if s.index is not None:
            return state.worker(int(state.env[s.index]), self.device)
        got = state.streams.get(s.number)
        if got is None:  # a stream the program names but did not read from the caller: its own
            got = state.streams[s.number] = _numbered_stream(self.device, s.number)
        return got

    def _get_stream(self, e: GetCurrentStream, state: "_State") -> None:
        if self.device.type == "cuda":
            state.current = state.streams[e.stream.number] = torch.cuda.current_stream(self.device)

    def _set_stream(self, e: SetCurrentStream, state: "_State") -> None:
        if self.device.type == "cuda":
            s = self._stream(e.stream, state)
            torch.cuda.set_stream(s)
            state.current = s
            state.marks.pop(s.cuda_stream, None)  # work issued from here on is not in its mark

    def _synchronize(self, e: Synchronize, state: "_State") -> None:
        if self.device.type == "cuda":
            src = self._stream(e.stream, state)
            key = src.cuda_stream
            ev = state.marks.get(key)
            if ev is None:
                # one event per stream, recorded anew (a wait takes the event's state when it
                # is issued; creating an event per wait costs more than the wait)
                ev = _EVENTS.get(key)
                if ev is None:
                    ev = _EVENTS[key] = torch.cuda.Event()
                ev.record(src)
                # still all of src's work until src is made current again: a stream loop's
                # iterations wait on the caller's one mark instead of recording it again
                state.marks[key] = ev
            cur = state.current
            (cur if cur is not None else torch.cuda.current_stream(self.device)).wait_event(ev)

    def _communicate(self, e: Communication, state: "_State") -> None:
        env = state.env
        # a stream loop's chunk of a whole output allocated before the loop
        dest = env.get(e.out)
        pending = start(e, env.get(e.inp), dest)  # (a receiver does not hold the input)
        pending.dest = dest
        env[e.out] = pending  # until its Wait
        if not e.communicates:  # (a local slice: there is no Wait)
            self._finish(pending, e, state)

    def _wait(self, e: Wait, state: "_State") -> None:
        self._finish(state.env[e.out], e, state)

    def _finish(self, pending: Any, e: Any, state: "_State") -> None:
        # in a stage loop the Wait runs on the next stage's stream (`state.current`)
        got = pending.result(state.current)
        dest = pending.dest
        if isinstance(dest, torch.Tensor) and dest is not got and not _same_view(dest, got):
            dest.copy_(got)
            got = dest
        state.env[e.out] = got

    def _select(self, e: HirAliasSelect, state: "_State") -> None:
        env = state.env
        env[e.out] = env[e.tv].select(e.axis, int(env[e.index]))


def _scattered_buffers(program: HostIrContainer) -> list[TensorView]:
    """The intermediates allocated before a stream loop whose chunks (`HirAliasSelect`s in
    the loop) a reduce-scatter of the whole world reads, in program order."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return []
    world = tuple(range(dist.get_world_size()))
    keep = set(program.outputs) | set(program.aliases) | set(program.aliases.values())
    got: list[TensorView] = []
    for e in program.exprs:
        if not isinstance(e, ForLoop):
            continue
        chunk_of = {b.out: b.tv for b in e.body if isinstance(b, HirAliasSelect)}
        for b in e.body:
            if (isinstance(b, Communication) and b.kind == "reduce_scatter" and b.team == world
                    and b.inp in chunk_of and chunk_of[b.inp] not in keep and chunk_of[b.inp] not in got):
                got.append(chunk_of[b.inp])
    return got


class _State:
    """One execution's values, reference executor, random-number draw and streams."""

    __slots__ = ("env", "ref", "drawn", "streams", "raw", "current", "marks")

    def __init__(self, env: dict, ref: ReferenceExecutor, drawn: Any) -> None:
        self.env = env
        self.ref = ref
        self.drawn = drawn
        self.streams: dict[int, Any] = {}
        #: the stream the program made current (None: the caller's, not read yet)
        self.current: Any = None
        #: per stream handle: the event recorded on it by a Synchronize, while no work can
        #: have been issued to it since (it has not been made current again)
        self.marks: dict[int, Any] = {}
        #: inputs as given where `env` holds the reference executor's view of them
        self.raw: dict[Val, Any] = {}

    @staticmethod
    def worker(i: int, device: torch.device) -> Any:
        return _worker_streams(device)[i % NUM_STREAMS]


_WORKERS: dict[Any, list] = {}
#: per stream handle: the event Synchronize records on it
_EVENTS: dict[int, Any] = {}


_NUMBERED: dict[tuple, Any] = {}


def _numbered_stream(device: torch.device, number: int) -> Any:
    """The stream a program's `Stream number` names when the caller's was not read into it
    (a stage loop's stages: made once per device and number)."""
    key = (device.index, number)
    got = _NUMBERED.get(key)
    if got is None:
        got = _NUMBERED[key] = torch.cuda.Stream(device)
    return got


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are the same elements of the same buffer."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def _worker_streams(device: torch.device) -> list:
    """The device's worker streams (made once: creating a stream costs microseconds)."""
    got = _WORKERS.get(device.index)
    if got is None:
        got = _WORKERS[device.index] = [torch.cuda.Stream(device) for _ in range(NUM_STREAMS)]
    return got


def _bind(env: dict, vals: Sequence[Val], outs: Sequence[Any]) -> None:
    """Bind `outs` to `vals`; a value bound already (an allocated buffer, an alias, a
    slice of one) is written in place."""
    written = []
    for v, o in zip(vals, outs):
        dst = env.get(v)
        copy = isinstance(dst, torch.Tensor) and isinstance(o, torch.Tensor) and dst is not o and not _same_view(dst, o)
        written.append((v, o, dst if copy else None))
    into = {d.untyped_storage().data_ptr() for _, _, d in written if d is not None}
    for v, o, dst in written:  # first what is bound as it is: a view of a buffer written below is copied first
        if dst is None:
            if into and isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in into:
                o = o.clone()  # (an input this call updates in place, seen through a view)
            env[v] = o
    for v, o, dst in written:
        if dst is not None:
            dst.copy_(o)


def _aten(x: Any, args: Sequence[Any], out: Any) -> Any:
    """A matmul or linear as ATen runs it on its operands' own dtype (cuBLAS in bf16 for
    bf16 operands, as eager PyTorch and nvFuser's expression evaluator do), written into
    `out` when that is a tensor; None where the operands' dtypes differ from the output's
    (the reference executor's type handling decides those)."""
    dt = x.outputs[0].dtype.torch
    if not all(isinstance(a, torch.Tensor) and a.dtype == dt for a in args):
        return None
    if isinstance(x, MatmulOp):
        # (ATen's matmul into `out` reshapes `out` where an operand is 1-D: copied instead)
        if isinstance(out, torch.Tensor) and args[0].ndim > 1 and args[1].ndim > 1:
            return torch.matmul(args[0], args[1], out=out)
        return torch.matmul(args[0], args[1])
    if args[1].ndim != 2:  # a 1-D weight: the reference executor's special cases
        return None
    x, w = args[0], args[1]
    if isinstance(out, torch.Tensor) and out.is_contiguous() and x.ndim >= 2:
        # straight into `out` (a stream loop's chunk of a buffer): no product to copy in
        x2, o2 = x.reshape(-1, x.shape[-1]), out.view(-1, out.shape[-1])
        if len(args) > 2 and args[2] is not None:
            torch.addmm(args[2], x2, w.t(), out=o2)
        else:
            torch.mm(x2, w.t(), out=o2)
        return out
    got = torch.nn.functional.linear(*args)
    if isinstance(out, torch.Tensor):
        out.copy_(got)
        return out
    return got


def _unsliced(state: _State, vals: Sequence[Val], axes: Sequence[int | None], raw: bool = False) -> list[Any]:
    """The values of `vals` (`raw`: inputs as given, for kernels); a stream loop's slices
    with their dropped axis back (extent 1)."""
    env = state.env
    args = [env[v] if v in env else state.ref.value(v) for v in vals]
    if raw and state.raw:
        args = [state.raw.get(v, a) for v, a in zip(vals, args)]
    for k, a in enumerate(axes):
        if a is not None:
            args[k] = args[k].unsqueeze(a)
    return args


def _resliced(outs: Sequence[Any], axes: Sequence[int | None]) -> Sequence[Any]:
    if not axes:
        return outs
    return [o.squeeze(a) if a is not None else o for o, a in zip(outs, axes)]


def run_on_reference(fusion: Any, args: Sequence[Any], device: torch.device,
                     philox_state: tuple[int, int] | None = None) -> list[Any]:
    """A segment's fusion evaluated by the reference executor on `args`."""
    binding = BindingPlan.of(fusion).bind(args, device)
    ex = ReferenceExecutor(fusion, binding.device, philox_state)
    ex.bind(binding)
    return ex.run()
