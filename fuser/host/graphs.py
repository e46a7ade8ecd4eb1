"""Stream loops replayed from CUDA graphs.

A stream loop issues several host calls an iteration (a stream switch, an event wait, the
slices' views, a cuBLAS call, a kernel launch): tens of µs of Python and driver time each,
which can exceed the GPU work they order. At every call whose tensors sit at the same
addresses, a loop issues the same work, so the loop and its join are captured once as a
CUDA graph and replayed: one launch for the whole loop.

A loop is captured the second time its key is seen (the addresses and strides of every
tensor it reads or writes from outside, the values of the scalars it reads) and replayed
while the key repeats: a model's step meets its activations at the same addresses step
after step, as the caching allocator hands the same blocks back. Not graphed: programs that
draw random numbers (each call draws new seeds), calls made while the caller's stream is
being captured (the caller's graph records the loop), a CPU tensor among what the loop
reads (its value would be baked in), loops with index ops (their kernels check the
indices after each launch, which a replay cannot), and FUSER_DISABLE=stream_graphs. A loop whose capture
fails (an operation a graph cannot hold) runs plainly from then on.

A sharded fusion's stage loop is graphed with its NCCL collectives (torch.distributed's
stream joins the capture through the events it waits on and records): the pipelined
chunks then cost one launch instead of about 300 µs of host work each, which fell behind
the chunks' GEMMs. The ranks' agreement on the call is checked before the capture or
replay (a graph's collectives cannot be stopped once launched). gloo's collectives,
point-to-point transfers and loops running a unit through the executor run plainly (see
`LoopGraphs` and `communication.capturable`); the graphs are released before any process
group shuts down (`release_communicating`).
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Sequence

import torch

from fuser.ir import GatherOp, IndexSelectOp, ScatterOp, Val
from fuser.options import disabled

from . import copy_engine
from .ir import Communication, Evaluate, ForLoop, HostExpr, HostUnit, PostOnStream, join_end

#: graphs kept per loop (least recently used dropped first), and captures a loop may make
#: before it stops trying (its keys keep changing: the graphs would not be replayed)
MAX_GRAPHS = 4
MAX_CAPTURES = 16


def loop_regions(exprs: Sequence[HostExpr]) -> dict[int, int]:
    """Stream loops of a top-level expression list, as {position of the work loop:
    position of its join's last expression} (`join_end`)."""
    out = {}
    for k in range(len(exprs)):
        j = join_end(exprs, k)
        if j is not None:
            out[k] = j
    return out


class LoopGraphs:
    """One stream loop's captured graphs, by key."""

    def __init__(self, exprs: Sequence[HostExpr]) -> None:
        self.exprs = tuple(exprs)
        #: what the loop reads from outside it: the tensors it slices (outputs included) and
        #: the values its expressions read whole
        self.reads: tuple[Val, ...] = exprs[0].inputs
        self.graphs: OrderedDict[tuple, Any] = OrderedDict()
        self.seen: OrderedDict[tuple, None] = OrderedDict()
        self.captures = 0
        self.replays = 0
        # index ops check their indices after each launch, which a replay cannot (it would
        # stop raising on a bad index): such loops run plainly
        self.off = any(isinstance(x, _CHECKED_INDEXING) for x in _exprs_of(exprs[0]))
        #: the loop's communications (a stage loop): NCCL's collectives are captured with
        #: the loop (torch.distributed joins its stream to the capture and back); gloo's
        #: run on the host and cannot be
        self.communications: tuple[Communication, ...] = tuple(
            b for b in exprs[0].body if isinstance(b, Communication) and b.communicates)
        self.scatters = any(c.kind == "reduce_scatter" for c in self.communications)
        # a capture that fails after a collective was issued into it leaves NCCL's
        # communicator in error on this rank alone (the plain rerun and every later
        # collective then fail): a communicating loop is captured only when its work is
        # ATen's (a unit run through the executor may fall back to the reference executor,
        # whose host syncs end a capture)
        self.off = self.off or bool(self.communications) and any(isinstance(b, PostOnStream) for b in exprs[0].body)
        #: the device its graphs run on (set at the first capture)
        self.device: Any = None

    def key(self, env: dict, raw: dict, value: Callable[[Val], Any]) -> tuple | None:
        """What fixes the loop's work at this call: None where it must run plainly."""
        if self.scatters and copy_engine.active():
            # reduce-scatters that may run on the copy engines run plainly: each rank decides
            # alone whether to replay, and one rank's graph beside another's plain run of the
            # same loop took different collectives and hung both (2 x H200)
            return None
        parts: list[Any] = []
        for v in self.reads:
            x = raw.get(v)
            if x is None:
                x = env[v] if v in env else value(v)
            if isinstance(x, torch.Tensor):
                if not x.is_cuda:
                    return None
                parts.append((x.data_ptr(), x.stride()))
            elif isinstance(x, float):
                parts.append(x.hex())  # (0.0 == -0.0, but a kernel dividing by them differs)
            elif isinstance(x, complex):
                parts.append((x.real.hex(), x.imag.hex()))
            else:
                parts.append(x)
        try:
            key = tuple(parts)
            hash(key)
        except TypeError:
            return None
        return key

    def lookup(self, key: tuple) -> tuple[Any, bool]:
        """(the graph to replay, or None; whether to capture one now)."""
        g = self.graphs.get(key)
        if g is not None:
            self.graphs.move_to_end(key)
            return g, False
        if key in self.seen:
            return None, self.captures < MAX_CAPTURES
        self.seen[key] = None
        if len(self.seen) > 4 * MAX_GRAPHS:
            self.seen.popitem(last=False)
        return None, False

    def capture(self, key: tuple, run: Callable[[Any], None], device: torch.device, workers: Sequence[Any]) -> Any:
        """Capture `run(stream)` (the loop, issued with `stream` as the caller's) into a
        graph kept under `key`; None (and no more tries) where the capture fails. `workers`:
        the streams the loop may fork to (joined back before the capture ends on a failure)."""
        self.captures += 1
        self.device = device
        if self.communications:
            _pin_communicators(self)
        side = _capture_stream(device)
        caller = torch.cuda.current_stream(device)
        g = torch.cuda.CUDAGraph()
        ok = False
        with torch.cuda.stream(side):
            try:
                g.capture_begin(capture_error_mode="thread_local")
            except RuntimeError:
                self.off = True
                return None
            try:
                run(side)
                ok = True
            except Exception:  # noqa: BLE001 - what a graph cannot hold; a real error recurs in the plain run
                pass
            finally:
                if not ok:
                    _join(side, workers)
                # the capture ends on the stream it began on (a failure inside the loop left a
                # worker current): else it would stay open and take every stream it forked
                torch.cuda.set_stream(side)
                try:
                    g.capture_end()
                except RuntimeError:
                    ok = False
        torch.cuda.set_stream(caller)
        if not ok:
            self.off = True
            return None
        if len(self.graphs) >= MAX_GRAPHS:
            # the dropped graph's memory goes back to the allocator: let its last replay end first
            torch.cuda.synchronize(device)
            self.graphs.popitem(last=False)
        self.graphs[key] = g
        return g


#: loops whose graphs hold NCCL collectives: a captured collective pins its communicator
#: (NCCL's destroy waits until every graph holding one of its collectives is destroyed),
#: so these graphs go before any process group does
_PINNING: "weakref.WeakSet[LoopGraphs]" = weakref.WeakSet()
_GUARDED = False


def release_communicating() -> None:
    """Drop every graph that holds collectives (captured again at later calls while their
    groups live): run before a process group shuts down, else its destroy waits for them
    forever."""
    locks = [_LOCKS[k] for k in sorted(_LOCKS)]
    for lock in locks:  # (no capture in flight on another thread adds one meanwhile)
        lock.acquire()
    try:
        loops = list(_PINNING)
        try:
            for device in {g.device for g in loops if g.graphs and g.device is not None}:
                torch.cuda.synchronize(device)  # their last replays end first
        finally:  # (a CUDA error there must not leave the graphs pinning their groups)
            for g in loops:
                g.graphs.clear()
                g.seen.clear()
                g.captures = 0
    finally:
        for lock in reversed(locks):
            lock.release()


def _pin_communicators(g: LoopGraphs) -> None:
    """Record `g` as holding collectives (`release_communicating` drops it)."""
    _PINNING.add(g)
    guard_shutdown()


def guard_shutdown() -> None:
    """Make every process group's shutdown (`destroy_process_group` calls it, however the
    caller imported it) and the process's exit run `release_communicating` first, and
    then drop the copy-engine buffers where the group is one every rank shuts down."""
    global _GUARDED
    if _GUARDED:
        return
    _GUARDED = True
    import atexit

    from torch._C._distributed_c10d import ProcessGroup

    shutdown = ProcessGroup.shutdown

    def released_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        release_communicating()
        copy_engine.shutting_down(self)  # (the copy-engine buffers, after the graphs that hold them)
        return shutdown(self, *args, **kwargs)

    released_first.__wrapped__ = shutdown  # type: ignore[attr-defined]
    ProcessGroup.shutdown = released_first
    # (atexit runs last-registered first: before a communicator's own exit hook, made with
    # its group, and before the interpreter's teardown destroys the groups left)
    atexit.register(_release_all)


def _release_all() -> None:
    """At exit: the graphs that hold collectives, then the copy-engine buffers."""
    release_communicating()
    copy_engine.release()


def _join(side: Any, workers: Sequence[Any]) -> None:
    """Make `side` wait for each worker stream a failed capture forked to (best effort:
    an invalidated capture refuses some of these calls, and ending it ends them all)."""
    for w in workers:
        try:
            torch.cuda.set_stream(w)
            if torch.cuda.is_current_stream_capturing():
                ev = torch.cuda.Event()
                ev.record(w)
                side.wait_event(ev)
        except RuntimeError:
            pass


#: ops whose generated kernels check their index tensors' values on each launch
_CHECKED_INDEXING = (GatherOp, IndexSelectOp, ScatterOp)


def _exprs_of(loop: ForLoop) -> list:
    """The Fusion IR expressions a loop's body runs (its units' and its Evaluates')."""
    out: list = []
    for b in loop.body:
        unit = getattr(b, "unit", None)
        if isinstance(unit, HostUnit):
            out.extend(unit.fusion.exprs())
        elif isinstance(b, Evaluate):
            out.append(b.expr)
    return out


def usable(device: torch.device, rng: bool) -> bool:
    """Whether a stream loop on `device` may be replayed from a graph at this call."""
    return (device.type == "cuda" and not rng and not disabled("stream_graphs")
            and not torch.cuda.is_current_stream_capturing())


_SIDE: dict[Any, Any] = {}
_LOCKS: dict[Any, Any] = {}


def issue_lock(device: torch.device) -> Any:
    """Held while a thread issues a stream loop on `device`: the worker streams are shared,
    and a worker that joined one thread's capture would record another thread's work."""
    lock = _LOCKS.get(device.index)
    if lock is None:
        lock = _LOCKS.setdefault(device.index, threading.RLock())
    return lock


def _capture_stream(device: torch.device) -> Any:
    """The stream graphs are captured on (capture cannot use the legacy default stream)."""
    s = _SIDE.get(device.index)
    if s is None:
        s = _SIDE[device.index] = torch.cuda.Stream(device)
    return s


__all__ = ["LoopGraphs", "issue_lock", "loop_regions", "usable", "MAX_GRAPHS", "MAX_CAPTURES"]
