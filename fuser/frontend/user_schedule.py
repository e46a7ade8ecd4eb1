"""User schedules: nvFuser's `schedule()` hook and `fd.sched` operations.

A FusionDefinition subclass that defines `schedule(self)` is scheduled by hand. On the first
execute with an input signature, the defined fusion is copied, `schedule()` runs with
`fd.sched` bound to the copy (the definition's Tensor handles stand for the copy's tensors),
and the copy becomes ONE segment: no segmentation and no heuristics. Either the user's loop
nest (split / merge / reorder / parallelize, SchedulerType.user: `fuser.kernel.prepare_user`
lowers it as written), or the automatic scheduler `fd.sched.schedule(SchedulerType.X)` picked.
`execute(..., override_user_schedule=True)` runs the automatic pipeline instead.

The kernel runs one loop nest, the reference output's, and computes every tensor inside it in
registers (as after nvFuser's inline_most); schedule operations that would need more (caches,
shared memory, rfactors, partial inlining) raise, naming what is not supported yet.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from fuser.errors import DefinitionError, DefinitionIndexError, DefinitionTypeError, FuserError
from fuser.ir import ParallelType, TensorView

from .handles import Tensor

if TYPE_CHECKING:
    from fuser.host.evaluator import HostIrEvaluator
    from fuser.host.executor import FusionEntry
    from fuser.scheduler import SchedulerType

    from .fusion_definition import FusionDefinition

#: nvFuser's Python spellings of ParallelType (`ParallelType.grid_x`), as aliases of fuser's
NVFUSER_PARALLEL_NAMES: dict[str, ParallelType] = {
    "grid_x": ParallelType.BIDx, "grid_y": ParallelType.BIDy, "grid_z": ParallelType.BIDz,
    "block_x": ParallelType.TIDx, "block_y": ParallelType.TIDy, "block_z": ParallelType.TIDz,
    "vectorize": ParallelType.Vectorize, "unroll": ParallelType.Unroll, "unswitch": ParallelType.Unswitch,
    "serial": ParallelType.Serial,
}
_PARALLEL_NAME = {member: name for name, member in NVFUSER_PARALLEL_NAMES.items()}
#: the parallel types a user-scheduled kernel binds (fuser.kernel.prepare.USER_PARALLEL_TYPES), in words
_BOUND = "grid_x, grid_y, block_x, vectorize, unroll, unswitch and serial axes"

#: what fd.sched supports inside schedule() (named in errors)
SUPPORTED = ("split", "merge", "reorder", "parallelize", "transform_like", "parallelize_like", "inline_most",
             "to_string", "user_schedule_ir", "tensors", "is_reduction", "can_schedule",
             "find_compatible_schedulers", "schedule")
#: nvFuser's other schedule operations: known, refused with a reason
UNSUPPORTED = frozenset({
    "cache_after", "cache_before", "cache_fork", "set_memory_type", "circular_buffer", "reduction_factor",
    "rfactor", "inline_at", "set_allocation_as_loop", "compute_pointwise_heuristics",
    "compute_reduction_heuristics", "compute_matmul_heuristics", "schedule_hyperparameters", "_set_device_mesh",
})


def parallel_name(pt: ParallelType) -> str:
    """`pt` as nvFuser's Python API spells it (grid_x, block_x, vectorize, ...)."""
    return _PARALLEL_NAME.get(pt, pt.name)


def has_user_schedule(fd: "FusionDefinition") -> bool:
    """Whether `fd`'s class defines nvFuser's `schedule()` hook."""
    return callable(getattr(type(fd), "schedule", None))


#: per definition: its user-schedule entry; per definition while its schedule() runs: the run
_ENTRIES: "weakref.WeakKeyDictionary[FusionDefinition, FusionEntry]" = weakref.WeakKeyDictionary()
_ACTIVE: "weakref.WeakKeyDictionary[FusionDefinition, UserSchedule]" = weakref.WeakKeyDictionary()


def user_entry(fd: "FusionDefinition", inputs: Sequence[Any], device: Any = None) -> "FusionEntry":
    """`fd`'s user-schedule entry, holding a runner for this call's input signature (made on
    first sight of it: schedule() runs, and a generated kernel is prepared and checked)."""
    from fuser.host.executor import MAX_SIGNATURES, FusionEntry, signature, value_free_inputs

    entry = _ENTRIES.get(fd)
    if entry is None:
        entry = _ENTRIES[fd] = FusionEntry(fd._entry.fusion)  # one segment per input signature
    key = signature(inputs, device, value_free_inputs(entry.fusion))
    if key not in entry.executors:
        runner = _user_runner(fd, entry.fusion, inputs, device)
        if len(entry.executors) >= MAX_SIGNATURES:
            entry.executors.pop(next(iter(entry.executors)))
        entry.executors[key] = runner
    return entry


def _user_runner(fd: "FusionDefinition", defined: Any, inputs: Sequence[Any], device: Any) -> "HostIrEvaluator":
    """Run `fd.schedule()` on a copy of `defined` for this call and lower the copy as one
    segment; errors name the fusion."""
    from fuser.host.executor import lower_and_prepare
    from fuser.host.streams import has_stream_axes
    from fuser.kernel.prepare import UserScheduleError, prepare_user
    from fuser.runtime.binding import bind_inputs, check_one_device
    from fuser.runtime.info import runtime_info
    from fuser.scheduler import SchedulerType

    fusion, memo = defined.clone()
    check_one_device(inputs, fusion)
    binding = bind_inputs(fusion, inputs, device=torch.device(device) if device is not None else None)
    try:
        if has_stream_axes(fusion):
            raise UserScheduleError("the fusion has stream-parallel axes (ParallelType.stream): user schedules "
                                    "of stream loops are not supported yet; drop schedule()")
        if any(getattr(tv, "device_mesh", None) is not None for tv in fusion.tensors()):
            raise UserScheduleError("the fusion is sharded over devices: user schedules of sharded fusions are not "
                                    "supported yet; drop schedule()")
        sched = UserSchedule(fd, fusion, memo, runtime_info(fusion, binding.tensors, binding=binding))
        _ACTIVE[fd] = sched
        try:
            fd.schedule()
        finally:
            _ACTIVE.pop(fd, None)
        seg = sched.segmented()
        runner = lower_and_prepare(fusion, seg, binding, dict(fusion.output_aliases))
        if seg.groups[0].scheduler is SchedulerType.user:
            # prepared now, also where no kernel runs (CPU): a schedule the kernel cannot
            # honour fails this execute instead of running some other way
            kernel = prepare_user(runner.runs[0].fusion, inputs, binding.device)
            if runner.use_kernels:
                runner.runs[0].kernel = kernel  # the first launch uses it
    except FuserError as err:
        # the fusion named, the error kept (its kind, its traceback into schedule())
        named = f"{type(fd).__name__}.schedule() of fusion {fd._entry.id}: {err}"
        raise type(err)(named).with_traceback(err.__traceback__) from None
    return runner


def running(fd: "FusionDefinition") -> "UserSchedule | None":
    """The schedule() run of `fd` in progress, if any."""
    return _ACTIVE.get(fd)


def active(fd: "FusionDefinition", what: str) -> "UserSchedule":
    """The schedule() run `fd.sched` calls act on; `what` (the call) raises outside one."""
    sched = _ACTIVE.get(fd)
    if sched is None:
        raise DefinitionError(
            f"{what}: schedule operations are only valid inside the schedule() of a FusionDefinition subclass, "
            "which execute() runs on a copy of the defined fusion (nvFuser: Attempting to use a SchedOperators "
            "Op prior to definition!)")
    return sched


def unsupported(name: str) -> Callable[..., Any]:
    """nvFuser's schedule operation `name`, which fuser refuses when called (AttributeError for
    a name nvFuser does not have either)."""
    if name not in UNSUPPORTED:
        raise AttributeError(f"fd.sched has no operation {name!r}; it supports {', '.join(SUPPORTED)}")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise DefinitionError(
            f"fd.sched.{name} is not supported yet: fuser's user-scheduled kernel computes every tensor inside one "
            f"loop nest, in registers (no caches, shared memory, rfactors or partial inlining); supported: "
            f"{', '.join(SUPPORTED)}")
    return refuse


_UNSET = object()


class UserSchedule:
    """One run of schedule() on a copy of the fusion, for one call's inputs: the copy the
    calls transform, and the automatic scheduler picked, if any."""

    def __init__(self, fd: "FusionDefinition", fusion: Any, memo: dict, info: Any) -> None:
        self.fd = fd
        self.fusion = fusion
        self.memo = memo  # the defined fusion's values -> the copy's
        self.info = info
        self.chosen: "SchedulerType | None" = None
        #: the manual schedule calls made (their names, for errors)
        self.calls: list[str] = []
        self._sub: Any = None
        self._why: Any = _UNSET

    # --- helpers ---------------------------------------------------------------------------
    def sub(self) -> Any:
        """The copy's analysis for this call (axis classes, scheduler verdicts)."""
        if self._sub is None:
            from fuser.scheduler import FusionAnalysis

            self._sub = FusionAnalysis(self.fusion, self.info).whole()
        return self._sub

    def _cls(self) -> Callable[[Any], int]:
        sub = self.sub()
        find, id_of = sub.uf.find, sub.a.id_of
        return lambda i: find(id_of(i))

    def tv(self, handle: Any, what: str) -> TensorView:
        """The copy's tensor for a Tensor handle of this definition."""
        if not isinstance(handle, Tensor):
            raise DefinitionTypeError(f"{what}: expected a Tensor of this definition, got {type(handle).__name__}")
        if handle.fd is not self.fd:
            raise DefinitionError(f"{what}: {handle!r} belongs to another FusionDefinition")
        tv = self.memo.get(handle.val)
        if not isinstance(tv, TensorView):
            raise DefinitionError(f"{what}: {handle!r} is not a tensor of the defined fusion")
        return tv

    def _tvs(self, handles: Any, what: str) -> list[TensorView]:
        """The tensors `selected_tensors` names (all of the copy's when empty or None)."""
        if handles is None or (isinstance(handles, (list, tuple)) and not handles):
            return self.fusion.tensors()
        if not isinstance(handles, (list, tuple)):
            raise DefinitionTypeError(f"{what}: selected_tensors must be a list of Tensors, "
                                      f"got {type(handles).__name__}")
        return [self.tv(h, f"{what}: selected_tensors[{k}]") for k, h in enumerate(handles)]

    @staticmethod
    def _axis(tv: TensorView, axis: Any, what: str, name: str) -> int:
        n = len(tv.domain.loop)
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise DefinitionTypeError(f"{what}: {name} must be an int, got {axis!r}")
        if not -n <= axis < n:
            raise DefinitionIndexError(f"{what}: {name}={axis} is out of range for T{tv.name}'s {n} loop axes "
                                       f"({_tv_str(tv)})")
        return axis % n

    def manual_reason(self) -> str | None:
        """Why the copy cannot take a manual schedule (None: it can), with what to do instead."""
        if self._why is _UNSET:
            from fuser.scheduler import SchedulerType, propose
            from fuser.scheduler import pointwise as pw
            from fuser.scheduler import resize as rs
            from fuser.scheduler.analysis import REDUCTION, RESIZE

            sub = self.sub()
            auto = propose(sub)
            instead = f"call fd.sched.schedule(SchedulerType.{auto.value}) or drop schedule()" if auto else \
                "drop schedule()"
            if REDUCTION in sub.kinds:
                if auto is None or auto in (SchedulerType.pointwise, SchedulerType.expr_eval, SchedulerType.no_op):
                    instead = "call fd.sched.schedule(SchedulerType.reduction) or drop schedule()"
                self._why = f"a reduction fusion: user schedules of reductions are not supported yet; {instead}"
            else:
                why = (rs if RESIZE in sub.kinds else pw).reject_reason(sub)
                self._why = None if why is None else (
                    f"a fusion the elementwise kernel cannot take (it {why}): user schedules of such fusions are "
                    f"not supported yet; {instead}")
        return self._why

    def manual(self, what: str) -> None:
        """Admit a manual schedule call (`what`), or say why it cannot be one."""
        if self.chosen is not None:
            raise DefinitionError(
                f"{what} after fd.sched.schedule(SchedulerType.{self.chosen.value}): the automatic scheduler "
                "schedules the whole fusion itself; use one or the other")
        why = self.manual_reason()
        if why is not None:
            raise DefinitionError(f"{what} on {why}")
        self.calls.append(what)

    # --- transforms ------------------------------------------------------------------------
    def split(self, tensor: Any, dim: Any, factor: Any, inner_split: Any = True) -> None:
        """nvFuser's split: loop axis `dim` -> (outer, inner) of inner extent `factor` (outer: inner_split=False)."""
        from fuser.transform import split

        what = "fd.sched.split"
        tv = self.tv(tensor, what)
        self.manual(what)
        d = self._axis(tv, dim, what, "dim")
        if not isinstance(factor, int) or isinstance(factor, bool):
            raise DefinitionTypeError(f"{what}: factor must be an int, got {factor!r}")
        if factor < 1:
            raise DefinitionError(f"{what}: factor={factor}; a split factor must be >= 1 (nvFuser: Invalid factor for "
                                  "split. Factor must be greater than 0)")
        if not isinstance(inner_split, bool):
            raise DefinitionTypeError(f"{what}: inner_split must be a bool, got {inner_split!r}")
        split(tv, d, factor, inner_split=inner_split)

    def merge(self, tensor: Any, dim: Any) -> None:
        """nvFuser's merge: loop axes `dim` and `dim + 1` become one."""
        from fuser.transform import merge

        what = "fd.sched.merge"
        tv = self.tv(tensor, what)
        self.manual(what)
        d = self._axis(tv, dim, what, "dim")
        n = len(tv.domain.loop)
        if d + 1 >= n:
            raise DefinitionIndexError(f"{what}: dim={dim} is the last of T{tv.name}'s {n} loop axes "
                                       f"({_tv_str(tv)}); merge(dim) merges axes dim and dim + 1")
        merge(tv, d, d + 1)

    def reorder(self, tensor: Any, old2new: Any) -> None:
        """nvFuser's reorder: `{old position: new position}`; the other axes keep their order."""
        from fuser.transform import reorder

        what = "fd.sched.reorder"
        tv = self.tv(tensor, what)
        self.manual(what)
        if not isinstance(old2new, dict):
            raise DefinitionTypeError(f"{what}: old2new must be a dict {{old position: new position}}, "
                                      f"got {type(old2new).__name__}")
        moves: dict[int, int] = {}
        for old, new in old2new.items():
            o = self._axis(tv, old, what, f"old2new key {old!r}")
            p = self._axis(tv, new, what, f"old2new[{old!r}]")
            if p in moves.values():
                raise DefinitionError(f"{what}: old2new={old2new} moves two axes to position {p}")
            moves[o] = p
        reorder(tv, moves)

    def parallelize(self, tensor: Any, axis: Any, parallel_type: Any) -> None:
        """nvFuser's parallelize: bind loop axis `axis` to a grid/block index or a loop kind."""
        from fuser.kernel.prepare import MAX_BLOCK_THREADS, USER_ONCE, USER_PARALLEL_TYPES, VECTOR_WIDTHS
        from fuser.transform import parallelize

        what = "fd.sched.parallelize"
        tv = self.tv(tensor, what)
        pt = NVFUSER_PARALLEL_NAMES.get(parallel_type) if isinstance(parallel_type, str) else parallel_type
        if not isinstance(pt, ParallelType):
            raise DefinitionTypeError(f"{what}: parallel_type={parallel_type!r} is not a ParallelType "
                                      f"(nvFuser's names: {', '.join(NVFUSER_PARALLEL_NAMES)})")
        if pt is ParallelType.Stream:
            raise DefinitionError(f"{what}: ParallelType.stream is declared in the definition (fd.sched.parallelize "
                                  "inside definition()), not in schedule()")
        if pt not in USER_PARALLEL_TYPES:  # (the ones the kernel's loop nest can bind)
            raise DefinitionError(f"{what}: ParallelType.{parallel_name(pt)} is not supported by user schedules yet; "
                                  f"they bind {_BOUND}")
        self.manual(what)
        k = self._axis(tv, axis, what, "axis")
        loop = tv.domain.loop
        ax = loop[k]
        if pt in USER_ONCE:
            other = next((j for j, i in enumerate(loop) if j != k and i.parallel_type is pt), None)
            if other is not None:
                raise DefinitionError(f"{what}: loop axis {other} of T{tv.name} ({_tv_str(tv)}) is bound to "
                                      f"{parallel_name(pt)} already; a loop nest binds it once")
        const = int(ax.extent.value) if ax.extent.is_const else None
        if pt is ParallelType.TIDx and (const is None or not 1 <= const <= MAX_BLOCK_THREADS):
            raise DefinitionError(f"{what}: block_x needs an axis of constant extent 1 to {MAX_BLOCK_THREADS}; axis "
                                  f"{k} of T{tv.name} ({_tv_str(tv)}) is not (split by the block size first)")
        if pt is ParallelType.Vectorize and const not in VECTOR_WIDTHS:
            raise DefinitionError(f"{what}: vectorize needs an axis of constant extent "
                                  f"{', '.join(map(str, VECTOR_WIDTHS))}; axis {k} of T{tv.name} ({_tv_str(tv)}) is "
                                  "not (split by the vector width first)")
        parallelize(tv, k, pt)

    def inline_most(self, selected_tensors: Any = None) -> None:
        """nvFuser's inline_most: compute the tensors inside their consumers' full loop nests
        (fuser's kernel always does; recorded for printing)."""
        from fuser.transform import inline_most

        what = "fd.sched.inline_most"
        tvs = self._tvs(selected_tensors, what)
        self.manual(what)
        inline_most(tvs)

    def transform_like(self, tensor: Any, selected_tensors: Any = None) -> None:
        """nvFuser's transform_like: replay `tensor`'s splits, merges and reorders on the other
        (or the selected) tensors, through the axes the fusion maps onto each other."""
        from fuser.transform import ReplayError, replay_loop

        what = "fd.sched.transform_like"
        ref = self.tv(tensor, what)
        targets = self._tvs(selected_tensors, what)
        self.manual(what)
        cls = self._cls()
        by_class: dict[int, Any] = {}
        for r in ref.domain.logical:
            by_class.setdefault(cls(r), r)
        for tv in targets:
            if tv is ref:
                continue
            mapping: dict[Any, Any] = {}
            for i in tv.domain.logical:
                r = by_class.get(cls(i))
                if r is not None and r not in mapping:
                    mapping[r] = i
            try:
                replay_loop(ref, tv, mapping)
            except ReplayError:
                continue  # not derived from the reference's axes: left as it is (as nvFuser's propagation)
            for i in tv.domain.loop:  # transforms only: parallelize_like propagates bindings
                i.parallel_type = ParallelType.Serial

    def parallelize_like(self, tensor: Any, pos: Any = -1, selected_tensors: Any = None,
                         selected_parallel_types: Any = None, propagate_padding: Any = True) -> None:
        """nvFuser's parallelize_like: bind the loop axes of the other (or the selected) tensors
        as `tensor`'s first `pos` axes (-1: all) are, where their loop nests are `tensor`'s."""
        from fuser.kernel.prepare import same_loop_nest

        what = "fd.sched.parallelize_like"
        ref = self.tv(tensor, what)
        targets = self._tvs(selected_tensors, what)
        self.manual(what)
        n = len(ref.domain.loop)
        if not isinstance(pos, int) or isinstance(pos, bool) or not (pos == -1 or 0 <= pos <= n):
            raise DefinitionIndexError(f"{what}: pos={pos!r} must be -1 (every axis) or 0 to {n} for T{ref.name}'s "
                                       f"{n} loop axes")
        pos = n if pos == -1 else pos
        types = set(selected_parallel_types or ())
        if not all(isinstance(p, ParallelType) for p in types):
            raise DefinitionTypeError(f"{what}: selected_parallel_types must hold ParallelTypes, got "
                                      f"{selected_parallel_types!r}")
        cls = self._cls()
        for tv in targets:
            if tv is ref or not same_loop_nest(tv, ref, cls, parallel=False):
                continue
            off = len(tv.domain.loop) - n  # the broadcast axes a replay put first
            for k in range(max(0, -off), pos):
                pt = ref.domain.loop[k].parallel_type
                if not types or pt in types:
                    tv.domain.loop[off + k].parallel_type = pt

    # --- queries ---------------------------------------------------------------------------
    def to_string(self, tensor: Any) -> str:
        """The tensor with its loop domain, as nvFuser's TensorView::toString."""
        tv = self.tv(tensor, "fd.sched.to_string")
        ca = getattr(tv, "compute_at_pos", 0)
        return _tv_str(tv) + (f" ca_pos( {ca} )" if ca else "")

    def user_schedule_ir(self) -> str:
        """The scheduled copy: its math and every tensor's transforms."""
        from fuser.ir.printer import fusion_str

        return fusion_str(self.fusion)

    def tensors(self) -> list[Tensor]:
        """Every Tensor of the definition."""
        fd = self.fd
        return [Tensor(fd, k) for k, v in enumerate(fd._state_vals) if isinstance(v, TensorView)]

    def is_reduction(self, tensor: Any) -> bool:
        """Whether `tensor` is a reduction's result."""
        tv = self.tv(tensor, "fd.sched.is_reduction")
        return not tv.is_fusion_input and any(i.is_reduction for i in tv.domain.maybe_root)

    def _scheduler(self, heuristic: Any, what: str) -> "SchedulerType":
        from fuser.scheduler import REGISTRY_ORDER, SchedulerType

        try:
            st = SchedulerType(heuristic)
        except ValueError:
            st = None
        if st not in REGISTRY_ORDER:
            raise DefinitionError(f"{what}: {heuristic!r} is not an automatic scheduler; they are "
                                  f"{', '.join(s.value for s in REGISTRY_ORDER)}")
        return st

    def can_schedule(self, scheduler_type: Any) -> tuple[bool, str]:
        """(whether the automatic scheduler accepts the whole fusion, nvFuser's message why not)."""
        from fuser.scheduler import reject_reason

        st = self._scheduler(scheduler_type, "fd.sched.can_schedule")
        why = reject_reason(self.sub(), st)
        return (True, "") if why is None else (False, f"Scheduler _{st.value}_ ***rejected*** because : {why}")

    def find_compatible_schedulers(self) -> list["SchedulerType"]:
        """The automatic schedulers that accept the whole fusion, in the registry's order."""
        from fuser.scheduler import REGISTRY_ORDER, reject_reason

        sub = self.sub()
        return [st for st in REGISTRY_ORDER if reject_reason(sub, st) is None]

    def schedule(self, heuristic: Any = None) -> None:
        """Schedule the fusion with an automatic scheduler (the registry's first taker when None)."""
        from fuser.scheduler import propose, reject_reason

        what = "fd.sched.schedule"
        if self.calls:
            raise DefinitionError(f"{what} after {self.calls[0]}: the automatic scheduler schedules the whole fusion "
                                  "itself; use one or the other")
        if self.chosen is not None:
            raise DefinitionError(f"{what}: the fusion is scheduled by {self.chosen.value} already")
        if heuristic is None:
            st = propose(self.sub())
            if st is None:
                raise DefinitionError(f"{what}(): no automatic scheduler takes the whole fusion")
        else:
            st = self._scheduler(heuristic, what)
            why = reject_reason(self.sub(), st)
            if why is not None:
                raise DefinitionError(f"{what}(SchedulerType.{st.value}): Scheduler _{st.value}_ ***rejected*** "
                                      f"because : {why}")
        self.chosen = st

    # --- the result ------------------------------------------------------------------------
    def segmented(self) -> Any:
        """The copy as one segment: the user's loop nest, or the automatic scheduler picked."""
        from fuser.scheduler import SchedulerType
        from fuser.segment import SegmentedFusion, SegmentedGroup

        fusion = self.fusion
        st = self.chosen or SchedulerType.user
        if st is SchedulerType.user:
            why = self.manual_reason()
            if why is not None:
                raise DefinitionError(f"schedule() made no schedule call, so the fusion would be one kernel as "
                                      f"defined, which fuser cannot generate for {why}")
            if any(not isinstance(v, TensorView) for v in fusion.outputs):
                raise DefinitionError("a fusion with scalar outputs cannot be user-scheduled yet; drop schedule()")
        exprs = fusion.exprs()
        if not exprs:
            raise DefinitionError("the fusion computes nothing (its outputs are its inputs): drop schedule()")
        group = SegmentedGroup(0, exprs, list(fusion.inputs), list(fusion.outputs), st, range(len(exprs)), exprs)
        return SegmentedFusion(fusion, [group], [], self.info)


def _tv_str(tv: TensorView) -> str:
    from fuser.ir.printer import tv_str

    return tv_str(tv)


__all__ = ["NVFUSER_PARALLEL_NAMES", "UserSchedule", "active", "has_user_schedule", "parallel_name",
           "running", "unsupported", "user_entry"]
