"""Host IR: the program that runs one segmented fusion for one input signature.

A `HostIrContainer` holds the fusion's inputs and outputs and a list of top-level host
expressions, run in order by `HostIrEvaluator`: launches of generated kernels
(`LaunchKernel`), segments run by fuser's executor on the current stream
(`PostOnStream`), expressions PyTorch evaluates (`Evaluate`: matmul, linear, SDPA, scans,
views; with preallocated outputs), `Allocate` / `Deallocate`, stream loops (`ForLoop` with
`GetCurrentStream`, `SetCurrentStream`, `Synchronize`, `HirAliasSelect`) and aliases (a
tensor bound to another's buffer, chains allowed). Values are the complete fusion's own
`Val`s, plus the local tensors and scalars a pass makes (the slices of a stream loop).

Passes are functions from one container to the next (`HostIrContainer.with_exprs`): the
container and its expression lists are never edited in place. `str(container)` prints
it as nvFuser's `NVFUSER_DUMP=host_ir` does (seed 004).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterator, Sequence

from fuser.ir import DataType, Expr, Fusion, MemoryType, Scalar, TensorDomain, TensorView, Val
from fuser.ir.base import fusion_guard
from fuser.ir.printer import expr_str, scalar_str, val_str
from fuser.segment import SegmentedGroup


class HostExpr:
    """A top-level host expression: what it reads (`inputs`) and binds (`outputs`)."""

    inputs: tuple[Val, ...] = ()
    outputs: tuple[Val, ...] = ()

    def text(self, indent: str) -> str:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class HostUnit:
    """One segment of the fusion: its group and the group's own fusion (inputs and outputs
    are the group's, in the same order)."""

    index: int
    group: SegmentedGroup
    fusion: Fusion
    scheduler: str
    #: what running it prepares once (PostOnStream: its executor cache entry)
    cache: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True, eq=False)
class LaunchKernel(HostExpr):
    """Run a scheduler segment as its generated kernel (prepared at its first launch; a
    segment the lowering cannot take runs on the reference executor instead)."""

    unit: HostUnit
    inputs: tuple[Val, ...]
    outputs: tuple[Val, ...]

    def text(self, indent: str) -> str:
        return (f"{indent}{_vals(self.outputs)} = LaunchKernel(HostUnit{self.unit.index} ({self.unit.scheduler}), "
                f"inputs = {_vals(self.inputs)})\n")


@dataclass(frozen=True, eq=False)
class PostOnStream(HostExpr):
    """Run a segment's fusion through fuser's executor (segmented, scheduled and compiled
    for the arguments it gets) on the current stream: a stream loop's compute."""

    unit: HostUnit
    inputs: tuple[Val, ...]
    outputs: tuple[Val, ...]
    #: inside a stream loop: per input / output, the position of the axis its slice
    #: dropped (None: not sliced); the unit runs on slices that keep it, with extent 1
    in_axes: tuple[int | None, ...] = ()
    out_axes: tuple[int | None, ...] = ()

    def text(self, indent: str) -> str:
        return (f"{indent}{_vals(self.outputs)} = PostOnStream(HostUnit{self.unit.index}, "
                f"inputs = {_vals(self.inputs)})\n")


@dataclass(frozen=True, eq=False)
class Evaluate(HostExpr):
    """A Fusion IR expression PyTorch evaluates. `inputs` / `outputs` are what it reads and
    writes here: the expression's own, or their slices inside a stream loop (`in_axes` /
    `out_axes` as PostOnStream's). An output bound already (allocated, aliased, a slice of
    one) is written in place."""

    expr: Expr
    inputs: tuple[Val, ...]
    outputs: tuple[Val, ...]
    #: the segment (HostUnit index) it is part of, for per-segment profiles
    unit: int | None = None
    in_axes: tuple[int | None, ...] = ()
    out_axes: tuple[int | None, ...] = ()
    #: whether it reads and writes the expression's own values (set from the above)
    own: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        own = not self.in_axes and self.inputs == tuple(self.expr.inputs) and self.outputs == tuple(self.expr.outputs)
        object.__setattr__(self, "own", own)

    def text(self, indent: str) -> str:
        e = self.expr
        text = expr_str(e)
        # a stream loop evaluates the expression on its slices: print those
        for old, new in zip((*e.outputs, *e.inputs), (*self.outputs, *self.inputs)):
            if old is not new:
                text = text.replace(val_str(old), val_str(new))
        # one line, as nvFuser's host IR dump prints the expressions it evaluates
        return indent + " ".join(line.strip() for line in text.strip().split("\n")) + "\n"


@dataclass(frozen=True, eq=False)
class Allocate(HostExpr):
    """A buffer for `tv` (global memory, of its logical shape), before the expressions
    that write it; bound to an input's buffer instead when `tv` aliases one."""

    tv: TensorView
    zero_init: bool = False
    #: a buffer of its own even where `tv` aliases an input (that input is read after
    #: `tv` is written: the executor copies `tv` into it at the end)
    own: bool = False

    @property
    def outputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return (self.tv,)

    def text(self, indent: str) -> str:
        size = " * ".join(scalar_str(i.extent) for i in self.tv.logical_no_reductions() if not i.is_broadcast) or "1"
        if size.count(" * ") > 0:
            size = f"( {size} )"
        z = "true" if self.zero_init else "false"
        return (f"{indent}{val_str(self.tv)} = ALLOCATE(buffer={val_str(self.tv)}, mem_type=global, "
                f"size={size}, zero_init={z}, resets_to_zero=false)\n")


@dataclass(frozen=True, eq=False)
class Deallocate(HostExpr):
    """Drop the host program's reference to `tv` after its last reader."""

    tv: TensorView

    @property
    def inputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return (self.tv,)

    def text(self, indent: str) -> str:
        return f"{indent}Deallocate {val_str(self.tv)}\n"


@dataclass(frozen=True, eq=False)
class Stream:
    """A stream the host program names: `Stream n` (a stream read from the caller with
    GetCurrentStream, or else a stream of its own, the same one on every run) or, with
    `index`, worker stream `index % number_of_streams`."""

    number: int | None = None
    index: Scalar | None = None

    def __str__(self) -> str:
        if self.index is not None:
            return f"Stream ( {_sc(self.index)} % numberOfStreams )"
        return f"Stream {self.number}"


@dataclass(frozen=True, eq=False)
class _StreamExpr(HostExpr):
    """A host expression about one stream, printed as `<verb> <stream>`."""

    stream: Stream
    verb: ClassVar[str] = ""

    def text(self, indent: str) -> str:
        return f"{indent}{self.verb} {self.stream}\n"


class GetCurrentStream(_StreamExpr):
    """Remember the current stream (the caller's) as `stream`."""

    verb = "GetCurrentStream into"


class SetCurrentStream(_StreamExpr):
    """Make `stream` current: the expressions after it run on it."""

    verb = "SetCurrentStream to"


class Synchronize(_StreamExpr):
    """The current stream waits for the work queued so far on `stream`."""

    verb = "Synchronize"


@dataclass(frozen=True, eq=False)
class HirAliasSelect(HostExpr):
    """`out` is a view of `tv` at `index` along its axis `axis` (which the view drops)."""

    tv: TensorView
    axis: int
    index: Scalar
    out: TensorView

    @property
    def inputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return (self.tv,)

    @property
    def outputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return (self.out,)

    def text(self, indent: str) -> str:
        axis = self.tv.logical_no_reductions()[self.axis]
        return (f"{indent}{val_str(self.out)} = HirAliasSelect( {val_str(self.tv)}, axis = {val_str(axis)}, "
                f"index = {_sc(self.index)} )\n")


@dataclass(frozen=True, eq=False)
class Communication(HostExpr):
    """A communication among the devices of `team` (torch.distributed ranks), started on
    the current stream and finished by a `Wait`: `kind` is allgather, allreduce,
    reduce_scatter or all_to_all (collectives), or send_recv / broadcast from device `root`
    (point to point, between meshes); `axis` the sharded axis of `inp` (allgather,
    all_to_all), `out_axis` that of `out` (reduce_scatter, all_to_all); `op` how partial
    values combine (sum, max, min). `local_slice` is no communication: each device keeps
    its own block of a replicated tensor."""

    number: int
    kind: str
    inp: TensorView
    out: TensorView
    team: tuple[int, ...]
    axis: int | None = None
    out_axis: int | None = None
    op: str | None = None
    #: the device that holds the tensor before a send/recv or a broadcast
    root: int | None = None
    #: a reduction may write its input (an intermediate nothing else reads)
    in_place: bool = False

    @property
    def inputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return (self.inp,)

    @property
    def outputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return (self.out,)

    @property
    def communicates(self) -> bool:
        """Whether devices exchange data (a local slice only keeps this device's block)."""
        return self.kind != "local_slice"

    def text(self, indent: str) -> str:
        detail = "".join(f", {k}={v}" for k, v in (("axis", self.axis), ("out_axis", self.out_axis),
                                                   ("op", self.op), ("root", self.root)) if v is not None)
        return (f"{indent}{val_str(self.out)} = Communication {self.number} (type={_KIND_NAMES[self.kind]}, "
                f"team=({' '.join(map(str, self.team))}), input={val_str(self.inp)}{detail})\n")


_KIND_NAMES = {"allgather": "Allgather", "allreduce": "Allreduce", "reduce_scatter": "ReduceScatter",
               "all_to_all": "AllToAll", "local_slice": "LocalSlice", "send_recv": "SendRecv",
               "broadcast": "Broadcast"}


@dataclass(frozen=True, eq=False)
class Wait(HostExpr):
    """The current stream waits for communication `number` (its output is ready after)."""

    number: int
    out: TensorView

    @property
    def outputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return ()

    def text(self, indent: str) -> str:
        return f"{indent}Wait Communication {self.number}\n"


@dataclass(frozen=True, eq=False)
class ForLoop(HostExpr):
    """`body` once per value of `index` in [0, `stop`) (a stream loop: `stop` is the
    extent of the stream-parallel axis `axis`)."""

    index: Scalar
    stop: Val
    body: tuple[HostExpr, ...]
    axis: Any = None

    @property
    def inputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        """What the body reads from outside it (not the slices and values it binds)."""
        inner = {v for e in self.body for v in e.outputs}
        return tuple(dict.fromkeys(v for e in self.body for v in e.inputs if v not in inner and v is not self.index))

    @property
    def outputs(self) -> tuple[Val, ...]:  # type: ignore[override]
        return tuple(v for e in self.body for v in e.outputs)

    @property
    def on_workers(self) -> bool:
        """Whether the body runs on streams other than the caller's (a stream loop's work:
        round-robin workers, or a stage loop's stage streams)."""
        return any(isinstance(b, SetCurrentStream) for b in self.body)

    @property
    def is_join(self) -> bool:
        """Whether the loop only makes the current stream wait for each worker stream it
        names by its index (a stream loop's join)."""
        return bool(self.body) and all(isinstance(b, Synchronize) and b.stream.index is self.index for b in self.body)

    def text(self, indent: str) -> str:
        over = val_str(self.axis) if self.axis is not None else _sc(self.stop)
        inner = "".join(e.text(indent + "  ") for e in self.body)
        return f"{indent}FOR {_sc(self.index)} in {over}:\n{inner}"


@dataclass(frozen=True, eq=False)
class HostIrContainer:
    """A host program: `exprs` run in order on `inputs` give `outputs`; `aliases` binds a
    tensor to another's buffer (out -> in; chains allowed)."""

    fusion: Fusion
    inputs: tuple[Val, ...]
    outputs: tuple[Val, ...]
    exprs: tuple[HostExpr, ...]
    units: tuple[HostUnit, ...] = ()
    aliases: dict[Val, Val] = field(default_factory=dict)
    #: a sharded program's tensors whose extents are bound at another scale than they
    #: hold (a whole tensor whose extent is a block's, or the reverse): tensor -> per
    #: logical axis (numerator, denominator)
    extent_scale: dict[Val, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    #: a sharded program's tensors this device does not hold (on a mesh without it): an
    #: output among them comes back empty
    absent: frozenset = frozenset()
    #: the teams smaller than the world whose collectives the program runs (every rank
    #: makes their process groups, in this order, before the program runs)
    teams: tuple = ()

    def with_exprs(self, exprs: Sequence[HostExpr]) -> "HostIrContainer":
        """The same program with other top-level expressions (what a pass returns)."""
        return replace(self, exprs=tuple(exprs))

    def alias_root(self, v: Val) -> Val:
        """The tensor whose buffer `v` is, following alias chains."""
        seen = set()
        while v in self.aliases:
            if v in seen:
                raise ValueError(f"alias cycle through {val_str(v)}")
            seen.add(v)
            v = self.aliases[v]
        return v

    def walk(self) -> Iterator[HostExpr]:
        """Every expression, loop bodies included, in program order."""
        for e in self.exprs:
            yield e
            if isinstance(e, ForLoop):
                yield from e.body

    def __str__(self) -> str:
        body = "".join(e.text("  ") for e in self.exprs)
        text = f"%HostIrContainer {{ {_vals(self.inputs)} -> {_vals(self.outputs)} :\n{body}}} // %HostIrContainer\n"
        # tensors passed between top-level expressions live in global memory (as nvFuser
        # prints segment boundaries), whatever memory the fusion's definition gave them
        shared = {str(v.name) for e in self.exprs if not isinstance(e, ForLoop)
                  for v in (*e.inputs, *e.outputs) if isinstance(v, TensorView)}
        return re.sub(r"\bT(\d+)_l_", lambda m: f"T{m[1]}_g_" if m[1] in shared else m[0], text)


def _vals(vals: Sequence[Val]) -> str:
    return "(" + ", ".join(val_str(v) for v in vals) + ")"


_local_names = itertools.count()


def local_slice(tv: TensorView, axis: int) -> TensorView:
    """A local tensor like `tv` without its axis `axis`: the view HirAliasSelect binds,
    named in `tv`'s fusion but in no graph of it (no definition, no uses)."""
    with fusion_guard(tv.fusion):
        ids = [i.clone_like() for k, i in enumerate(tv.logical_no_reductions()) if k != axis]
        return TensorView(TensorDomain(ids), tv.dtype, MemoryType.Local)


def host_index(fusion: Fusion, name: str = "StreamIdx") -> Scalar:
    """A host loop's index, printed as `name`."""
    s = Scalar(DataType.Int, fusion=fusion)
    s.host_name = name
    return s


def join_end(exprs: Sequence[HostExpr], k: int) -> int | None:
    """Where the join of stream loop `exprs[k]` ends (what `lower_streams` makes: the loop,
    `SetCurrentStream` back to the caller's stream, then the loop waiting for each worker,
    or a `Synchronize` of each stage's stream); None where `exprs[k]` is no such loop."""
    work = exprs[k]
    if not (isinstance(work, ForLoop) and work.on_workers and k + 2 < len(exprs)
            and isinstance(exprs[k + 1], SetCurrentStream)):
        return None
    if isinstance(exprs[k + 2], ForLoop) and exprs[k + 2].is_join:
        return k + 2
    stages = {b.stream.number for b in work.body if isinstance(b, SetCurrentStream)}
    j = k + 2
    while j < len(exprs) and isinstance(exprs[j], Synchronize) and exprs[j].stream.number in stages:
        j += 1
    return j - 1 if j - (k + 2) == len(stages) else None


def _sc(s: Val) -> str:
    return getattr(s, "host_name", None) or (scalar_str(s) if isinstance(s, Scalar) else val_str(s))


__all__ = [
    "Allocate", "Communication", "Deallocate", "Evaluate", "ForLoop", "GetCurrentStream", "HirAliasSelect", "HostExpr",
    "HostIrContainer", "HostUnit", "LaunchKernel", "PostOnStream", "SetCurrentStream", "Stream", "Synchronize",
    "Wait", "join_end", "local_slice", "host_index",
]
