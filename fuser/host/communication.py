"""Running a host program's communications with torch.distributed (NCCL on GPUs, gloo on
CPUs): each starts asynchronously on the current stream and is finished by its `Wait`.

Tensors are sharded in equal blocks: device k of the team holds the k-th block of the
sharded axis. A collective works on the blocks laid out along dimension 0 (what NCCL's
allgather and reduce-scatter concatenate). For a sharded axis elsewhere, NCCL runs one
collective per slice of the axes before it, coalesced into one launch, where those are
few; otherwise (and on gloo) the axis is moved to the front and back around it, a copy.
"""
from __future__ import annotations

import collections
import contextlib
import math
import os
import sys
import threading
import time
from typing import Any, Callable

import torch

from fuser.ir.printer import val_str

from . import copy_engine
from .ir import Communication

#: torch.distributed's reduce op per partial kind
_REDUCE = {"sum": "SUM", "max": "MAX", "min": "MIN"}
#: groups made for teams that are not the whole world (team -> group)
_GROUPS: dict[tuple[int, ...], tuple[Any, bool]] = {}


class _What:
    """A communication's name for messages, rendered only when one is written."""

    __slots__ = ("c",)

    def __init__(self, c: Communication) -> None:
        self.c = c

    def __str__(self) -> str:
        return f"Communication {self.c.number} ({self.c.kind} of {val_str(self.c.inp)})"


class _Replayed:
    """Communications replayed from a CUDA graph, named for messages when one is written."""

    __slots__ = ("cs",)

    def __init__(self, cs: tuple) -> None:
        self.cs = cs

    def __str__(self) -> str:
        return ", ".join(str(_What(c)) for c in self.cs) + " (replayed from a CUDA graph)"


class _All:
    """Several point-to-point works waited for as one."""

    __slots__ = ("works",)

    def __init__(self, works: list) -> None:
        self.works = works

    def wait(self) -> None:
        for w in self.works:
            w.wait()


class Pending:
    """A started communication: `result()` (after the wait) gives its output."""

    __slots__ = ("work", "finish", "what", "dest", "tensors")

    def __init__(self, work: Any, finish: Callable[[], torch.Tensor], what: Any = "",
                 tensors: tuple[torch.Tensor, ...] = ()) -> None:
        self.work = work
        self.finish = finish
        self.what = what
        #: where the result must end up (a chunk of a buffer allocated before a stream loop)
        self.dest: Any = None
        #: the tensors the collective reads and writes
        self.tensors = tensors

    def result(self, stream: Any = None) -> torch.Tensor:
        """The output, once the current stream (`stream`, when given) waits for it (gloo:
        once it is done). On another stream than the one that started it (a stage loop's
        next stage), the collective's tensors are marked as used by `stream`: their blocks,
        made on the starting stream, are not handed out again before the collective ends
        (torch's NCCL keeps them only until this wait)."""
        if self.work is not None:
            try:
                self.work.wait()
            except Exception as err:  # a timeout, or a peer that failed
                raise RuntimeError(f"{self.what} failed: {err}") from err
            if stream is not None:
                for t in self.tensors:
                    t.record_stream(stream)
            if _WATCH.on and isinstance(self.what, _What):
                _WATCH.add(self.what)
        return self.finish()


class _Watch:
    """Names a GPU communication that has not finished within FUSER_COMM_TIMEOUT.

    A NCCL collective a peer never joins does not fail in the waiting stream: NCCL's
    watchdog ends the process after the group's timeout, naming only a sequence number.
    An event is recorded after each Wait; the calling thread drops the finished ones as
    it adds more, and a thread looks every half second at the oldest, querying its event
    only once it is past its deadline (a query from another thread while the caller
    captures a CUDA graph could spoil the capture: it is kept to the hung case)."""

    def __init__(self) -> None:
        self.queue: Any = collections.deque()  # (deadline, event, what), oldest first
        self.spare: list[Any] = []  # events whose communication finished, to record again
        self.lock = threading.Lock()
        self.thread: Any = None
        self.on = False
        self.timeout_s = 300.0

    def start(self, timeout_s: float) -> None:
        """Watch the communications of a process whose collectives run on GPUs."""
        self.timeout_s = timeout_s
        self.on = True
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="fuser-communication-watch", daemon=True)
            self.thread.start()

    def add(self, what: Any) -> None:
        if torch.cuda.is_current_stream_capturing():
            return
        with self.lock:
            queue = self.queue
            while queue and queue[0][1].query():
                self.spare.append(queue.popleft()[1])
            ev = self.spare.pop() if self.spare else torch.cuda.Event()
            ev.record()
            queue.append((time.monotonic() + self.timeout_s, ev, what))

    def _run(self) -> None:
        while self.on:
            time.sleep(0.5)
            try:
                self.check(time.monotonic())
            except Exception:  # (a CUDA error: the process has worse news to give)
                self.on = False
                self.queue.clear()

    def check(self, now: float) -> None:
        """Name each communication past its deadline whose event has not completed, once
        (one that completed has its event recorded again)."""
        import torch.distributed as dist

        with self.lock:
            queue = self.queue
            while queue and now > queue[0][0]:
                _, ev, what = queue.popleft()
                if ev.query():
                    self.spare.append(ev)
                    continue
                rank = dist.get_rank() if dist.is_initialized() else 0
                print(f"fuser: rank {rank}: {what} has not finished after {self.timeout_s:.0f} s "
                      "(FUSER_COMM_TIMEOUT): a device of its team did not join it (it failed, or ran other "
                      "communications)", file=sys.stderr, flush=True)
                if isinstance(what, _Replayed):
                    # NCCL's watchdog, which ends a process whose collective hangs, does not
                    # see collectives replayed from a graph: this rank would wait forever
                    print(f"fuser: rank {rank}: ending the process (a collective replayed from a CUDA graph "
                          "cannot be cancelled)", file=sys.stderr, flush=True)
                    self.abort()

    #: how a hung replay ends the process (tests replace it)
    abort = staticmethod(os.abort)


_WATCH = _Watch()


#: the check of the ranks' agreement on the call in flight, made before its first
#: communication (the host issues the call's local work while the ranks agree)
_UNSETTLED: list[Callable[[], None]] = []


def defer_agreement(check: Callable[[], None]) -> None:
    """Run `check` (it raises where the ranks disagree) before the next communication."""
    _UNSETTLED.append(check)


def settle(stale: bool = False) -> None:
    """Check the ranks' agreement on this call, when it is still to be checked. `stale`:
    one left by a call that raised before communicating; collected (every rank posted
    it, so the ranks stay in step) but not raised: that call's error was raised already."""
    while _UNSETTLED:
        check = _UNSETTLED.pop(0)
        with contextlib.suppress(Exception) if stale else contextlib.nullcontext():
            check()


#: collectives a CUDA graph may hold with the work around them (NCCL's, captured by
#: torch.distributed); point-to-point (isend / irecv pairs) runs plainly: no test covers
#: it under capture
_CAPTURABLE = frozenset({"allreduce", "allgather", "reduce_scatter", "all_to_all"})


def capturable(c: Communication) -> bool:
    """Whether `c` may be captured in a CUDA graph: a collective of a NCCL group (gloo's
    run on the host, outside any graph) whose buffers NCCL does not register at capture.

    Each rank decides alone whether to replay a graph (its own tensors' addresses repeat),
    so at one call a rank may replay a collective another issues plainly. NCCL supports
    that mix, but registers a captured collective's buffers (NCCL_GRAPH_REGISTER), and
    registered and unregistered buffers may not meet in one collective. fuser starts its
    groups with NCCL_GRAPH_REGISTER=0; on a group started otherwise without it, loops with
    collectives run plainly."""
    return (c.kind in _CAPTURABLE and not _group(c.team)[1]
            and os.environ.get("NCCL_GRAPH_REGISTER") == "0")


def watch_replayed(cs: Any) -> None:
    """Watch communications `cs` replayed from a CUDA graph just now (their events were
    not recorded under capture): one event after the replay names them all."""
    if _WATCH.on:
        _WATCH.add(_Replayed(tuple(cs)))


def ensure_groups(teams: Any) -> None:
    """Make the process groups of `teams` (every rank calls this with the same teams, in
    the same order: torch.distributed makes a group with every rank)."""
    import torch.distributed as dist

    if not _WATCH.on and dist.get_backend() != "gloo":
        from fuser.multidevice.communicator import TIMEOUT_S

        _WATCH.start(TIMEOUT_S)
    for team in teams:
        key = tuple(sorted(team))
        if key not in _GROUPS:
            g = dist.new_group(list(key))
            _GROUPS[key] = (g, dist.get_backend(g) == "gloo")


def _group(team: tuple[int, ...]) -> tuple[Any, bool]:
    """(the process group of `team`, whether it is gloo's): the default group for the
    whole world, else the one `ensure_groups` made."""
    key = tuple(sorted(team))
    got = _GROUPS.get(key)
    if got is None:
        import torch.distributed as dist

        if list(key) != list(range(dist.get_world_size())):
            raise RuntimeError(f"no process group was made for the team {key} (ensure_groups)")
        got = _GROUPS[key] = (None, dist.get_backend() == "gloo")
    return got


def _pg(group: Any) -> Any:
    """The process group itself (`_group` gives None for the world's)."""
    import torch.distributed as dist

    return group if group is not None else dist.group.WORLD


def _c10d() -> Any:
    """c10d's bindings (some option types torch.distributed does not export)."""
    from torch._C import _distributed_c10d

    return _distributed_c10d


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _position(team: tuple[int, ...]) -> int:
    import torch.distributed as dist

    rank = dist.get_rank()
    if rank not in team:
        raise RuntimeError(f"rank {rank} is not in the team {team} of this communication")
    return team.index(rank)


#: most slices a collective on an inner axis runs as coalesced per-slice collectives
#: (each is host work at launch); more than this, the axis is moved to the front (a copy)
MAX_COALESCED_SLICES = 16


def _slices(x: torch.Tensor, axis: int, gloo: bool) -> int:
    """How many dense [axis, ...] slices a collective on `axis` of `x` runs as, coalesced:
    0 where it runs on the axis moved to the front instead. Decided from what every rank
    of the team shares (shape, axis, backend), never from this rank's layout: each rank
    must issue the same collectives, of the same sizes, in the same order."""
    if gloo or axis == 0 or x.numel() == 0:
        return 0
    p = math.prod(x.shape[:axis])
    return p if p <= MAX_COALESCED_SLICES else 0


def _per_slice(coalesced: Callable, out: torch.Tensor, x: torch.Tensor, p: int, opts: Any) -> Any:
    """One collective per leading slice of `x` into the same slice of `out` (both dense),
    issued as one coalesced launch (`coalesced`: the process group's *_coalesced call)."""
    opts.asyncOp = True
    return coalesced(list(out.view(p, -1).unbind(0)), list(x.view(p, -1).unbind(0)), opts)


def _front(x: torch.Tensor, axis: int) -> torch.Tensor:
    return (x if axis == 0 else x.movedim(axis, 0)).contiguous()


def _back(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x if axis == 0 else x.movedim(0, axis)


def _block(n: int, d: int, what: str) -> int:
    if n % d:
        raise ValueError(f"{what}: an axis of extent {n} does not split into {d} equal blocks, one per device")
    return n // d


def _scattered(x: torch.Tensor, axis: int, d: int, what: Any) -> tuple[int, ...]:
    """The shape of one device's block of `x` reduce-scattered over `d` devices on `axis`."""
    return (*x.shape[:axis], _block(x.shape[axis], d, what), *x.shape[axis + 1:])


def _into(dest: Any, shape: tuple, like: torch.Tensor) -> torch.Tensor:
    """`dest` where a collective may write it directly (dense, of the shape and dtype it
    writes), else a new buffer."""
    if (isinstance(dest, torch.Tensor) and tuple(dest.shape) == tuple(shape) and dest.dtype == like.dtype
            and dest.is_contiguous()):
        return dest
    return like.new_empty(shape)


#: the local reduction that finishes a copy-engine reduce-scatter, per partial kind
_LOCAL = {"sum": torch.sum, "max": torch.amax, "min": torch.amin}


def _by_copy_engine(c: Communication, x: torch.Tensor, dest: Any, what: Any) -> Pending | None:
    """Reduce-scatter `x` with no SM (copy_engine.py) where it lies in a symmetric buffer
    and its blocks are dense: an all-to-all on the copy engines, block j to rank j, into
    the buffer's twin, then the local reduction of the blocks received (at the Wait, on
    the stream that waits). None where it does not apply."""
    import torch.distributed as dist

    got = copy_engine.receiver(x)  # (None at once where no buffer was made)
    a, d = c.out_axis, len(c.team)
    if got is None or c.op not in _LOCAL or math.prod(x.shape[:a]) != 1 or list(c.team) != sorted(c.team):
        return None
    g, recv = got
    out = _into(dest, _scattered(x, a, d, what), x)
    work = dist.all_to_all_single(recv.view(d, -1), x.view(d, -1), group=g, async_op=True)
    reduce = _LOCAL[c.op]

    def finish() -> torch.Tensor:
        reduce(recv.view(d, -1), 0, out=out.view(-1))
        return out

    return Pending(work, finish, what, (out,))


def start(c: Communication, x: torch.Tensor | None, dest: Any = None) -> Pending:
    """Start communication `c` on its input `x` (this device's block or partial value;
    None on a device receiving a tensor it does not hold); `dest`: where its result must
    end up (written directly where the layout allows; a receiver's buffer)."""
    import torch.distributed as dist

    if _UNSETTLED:
        settle()
    team, d = c.team, len(c.team)
    what = _What(c)
    if c.kind == "local_slice":
        n = x.shape[c.out_axis]
        b = _block(n, d, what)
        got = x.narrow(c.out_axis, _position(team) * b, b)
        return Pending(None, lambda: got)
    if c.kind == "send_recv":
        src, dst = c.root, next(r for r in team if r != c.root)
        if _rank() == src:
            buf = x.contiguous()
            return Pending(dist.isend(buf, dst), lambda: None, what, (buf,))
        buf = dest if dest.is_contiguous() else torch.empty_like(dest, memory_format=torch.contiguous_format)
        return Pending(dist.irecv(buf, src), lambda: buf, what, (buf,))
    if c.kind == "broadcast":  # point to point from the one device holding it: no group to make
        if _rank() == c.root:
            buf = x.contiguous()
            works = [dist.isend(buf, r) for r in team if r != c.root]
            return Pending(_All(works), lambda: buf, what, (buf,))
        buf = dest if dest.is_contiguous() else torch.empty_like(dest, memory_format=torch.contiguous_format)
        return Pending(dist.irecv(buf, c.root), lambda: buf, what, (buf,))
    group, gloo = _group(team)
    if c.kind == "allreduce":
        buf = x.contiguous() if c.in_place else x.clone(memory_format=torch.contiguous_format)
        # the process group's own call: torch.distributed's wrapper (checks, logging) cost
        # as much host time as the collective's launch, once per chunk of a stream loop
        opts = dist.AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, _REDUCE[c.op])
        opts.asyncOp = True
        work = _pg(group).allreduce([buf], opts)
        return Pending(work, lambda: buf, what, (buf,))
    if c.kind == "allgather":
        p = _slices(x, c.axis, gloo)
        if p:  # [*lead, b, *rest] -> [*lead, b * d, *rest], one allgather per leading slice
            x = x.contiguous()  # (a copy only where this rank's block is laid out otherwise)
            shape = (*x.shape[:c.axis], x.shape[c.axis] * d, *x.shape[c.axis + 1:])
            out = _into(dest, shape, x)
            work = _per_slice(_pg(group).allgather_into_tensor_coalesced, out, x, p, _c10d().AllgatherOptions())
            return Pending(work, lambda: out, what, (x, out))
        src = _front(x, c.axis)
        out = _into(dest if c.axis == 0 else None, (src.shape[0] * d, *src.shape[1:]), src)
        if gloo:  # gloo has no allgather into one tensor
            parts = list(out.chunk(d))
            work = dist.all_gather(parts, src, group=group, async_op=True)
        else:
            work = dist.all_gather_into_tensor(out, src, group=group, async_op=True)
        return Pending(work, lambda: _back(out, c.axis), what, (src, out))
    if c.kind == "reduce_scatter":
        got = _by_copy_engine(c, x, dest, what) if not gloo and group is None else None
        if got is not None:
            return got
        p = _slices(x, c.out_axis, gloo)
        if p:  # [*lead, n, *rest] -> [*lead, n / d, *rest], one reduce-scatter per leading slice
            x = x.contiguous()
            out = _into(dest, _scattered(x, c.out_axis, d, what), x)
            opts = _c10d().ReduceScatterOptions()
            opts.reduceOp = getattr(dist.ReduceOp, _REDUCE[c.op])
            work = _per_slice(_pg(group).reduce_scatter_tensor_coalesced, out, x, p, opts)
            return Pending(work, lambda: out, what, (x, out))
        src = _front(x, c.out_axis)
        b = _block(src.shape[0], d, what)
        op = getattr(dist.ReduceOp, _REDUCE[c.op])
        if gloo and src is x and not c.in_place:
            src = x.clone()
        if gloo:  # gloo has no reduce-scatter: the whole sum, then this device's block
            work = dist.all_reduce(src, op=op, group=group, async_op=True)
            k = _position(team)
            return Pending(work, lambda: _back(src.narrow(0, k * b, b), c.out_axis), what, (src,))
        out = _into(dest if c.out_axis == 0 else None, (b, *src.shape[1:]), src)
        work = dist.reduce_scatter_tensor(out, src, op=op, group=group, async_op=True)
        return Pending(work, lambda: _back(out, c.out_axis), what, (src, out))
    if c.kind == "all_to_all":
        # sharded on axis a -> sharded on axis b: split the b axis into d blocks (block j to
        # device j), exchange, and put the received blocks of a side by side
        a, b_axis = c.axis, c.out_axis
        y = _front(x, b_axis)
        nb = _block(y.shape[0], d, what)
        src = y.reshape(d, nb, *y.shape[1:]).contiguous()
        out = torch.empty_like(src)
        pa = a + 1 if a < b_axis else a  # axis a's place in y

        def finish() -> torch.Tensor:
            return _back(torch.cat(list(out.unbind(0)), dim=pa), b_axis)

        work = dist.all_to_all_single(out, src, group=group, async_op=True)
        return Pending(work, finish, what, (src, out))
    raise NotImplementedError(f"{what}: unknown communication kind {c.kind!r}")
