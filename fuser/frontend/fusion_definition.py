"""FusionDefinition: nvFuser's Python API for describing, caching and running a fusion."""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any, Sequence

import torch

from fuser.errors import DefinitionError, DefinitionTypeError, FusionInputError, nvfuser_style
from fuser.ir import DataType, Fusion, IterDomain, IterType, ParallelType, TensorDomain, TensorView
from fuser.ir import Scalar as IrScalar
from fuser.ir.dtype import from_torch, python_scalar_dtype

from fuser.options import dump, dump_enabled

from .dtensor import has_dtensors
from .cache import CachedFusion, FusionCache
from .handles import Scalar, Tensor, Vector, _State
from .ops import Operators
from .records import Record, StateRef
from .repro import definition_text, repro_script

if TYPE_CHECKING:
    from fuser.segment import SegmentedFusion

_NUMBER = (bool, int, float, complex)


class FusionDefinition:
    """Describes one fusion: `with FusionDefinition() as fd: ...`, then `fd.execute(inputs)`.

    A subclass may instead implement `definition(self)`; it runs on first use.
    """

    def __init__(self, id: int | None = None, max_length: int = 9999) -> None:  # noqa: A002 - nvFuser's signature
        self.ops = Operators(self)
        self._records: list[Record] = []
        self._state_vals: list[Any] = []
        self._fusion: Fusion | None = None
        self._entry: CachedFusion | None = None
        self._open = False
        self._max_length = max_length
        self.segment_index_space_maps: dict = {}
        self._segments: list["FusionDefinition"] | None = None
        #: per add_output call that returns a value: its IR output (an alias points at an input)
        self._visible: list[Any] = []
        #: the CUDA device factories run on when no input says (Thunder sets it before defining)
        self._selected_device: int | None = None
        self.profiled = False
        self._profile: Any = None
        self._debug_output: str | None = None
        #: fake copies of the last inputs executed with save_repro_inputs=True
        self.fake_inputs: list[Any] | None = None
        if id is not None:
            self._load_cached(id)

    def _load_cached(self, fusion_id: int) -> None:
        """Become the cached definition with id `fusion_id` (nvFuser's FusionDefinition(id))."""
        cache = FusionCache.get()
        if not isinstance(fusion_id, int) or isinstance(fusion_id, bool) or not 0 <= fusion_id < cache.num_fusions():
            raise DefinitionError(
                f"FusionDefinition(id={fusion_id!r}): no cached fusion has that id (the cache holds {cache.num_fusions()})"
            )
        self._entry = cache.fusion(fusion_id)
        self._records = list(self._entry.records)
        self._fusion = self._entry.fusion
        self._state_vals = self._entry.state_vals

    # --- definition lifecycle -------------------------------------------------------------
    def __enter__(self) -> "FusionDefinition":
        self._setup_definition()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._finalize_definition()
        else:
            self._open = False

    def _setup_definition(self) -> "FusionDefinition":
        if self._entry is not None:
            raise RuntimeError("this FusionDefinition is already defined; create a new one to define another fusion")
        self._fusion = Fusion()
        self._records, self._state_vals, self._visible = [], [], []
        self._open = True
        return self

    def _finalize_definition(self) -> None:
        self._open = False
        if not self._fusion.outputs:
            raise DefinitionError("the fusion definition has no outputs: call fd.add_output(...)")
        self._entry = FusionCache.get()._lookup_or_add(self._records, self._fusion, self._state_vals)
        if self._entry.output_plan is None:
            self._entry.output_plan = _output_plan(self._fusion, self._visible)
        # a cache hit shares the first definition's IR (and its compiled kernels)
        self._fusion = self._entry.fusion
        self._state_vals = self._entry.state_vals
        if dump_enabled("fusion_ir"):
            dump("fusion_ir", self.fusion_ir())

    def definition(self) -> None:
        """Subclasses override this to build the fusion with `self.ops` (nvFuser's hook)."""
        raise NotImplementedError("definition() should be implemented by child class!")

    def _ensure_defined(self) -> None:
        """Define a definition not defined yet by running `definition()` (NotImplementedError
        for a plain FusionDefinition that was never defined, as nvFuser raises)."""
        if self._entry is None:
            if self._open:
                raise RuntimeError("the fusion definition is still open: leave the `with` block before executing")
            self._setup_definition()
            try:
                self.definition()
            except BaseException:
                self._open = False
                raise
            self._finalize_definition()

    # --- states -----------------------------------------------------------------------------
    @property
    def sched(self) -> "Schedule":
        """nvFuser's `fd.sched`: stream parallelism in the definition; split, merge, reorder,
        parallelize, ... or an automatic scheduler by name inside a subclass's `schedule()`."""
        return Schedule(self)

    def _check_open(self, what: str) -> None:
        if not self._open:
            raise RuntimeError(f"{what}: the fusion definition is closed; define ops inside its `with` block")

    def _new_state(self, val: Any) -> _State:
        self._check_open("defining a value")
        index = len(self._state_vals)
        self._state_vals.append(val)
        if isinstance(val, TensorView):
            return Tensor(self, index)
        if isinstance(val, list):
            return Vector(self, index)
        return Scalar(self, index)

    def _record(self, name: str, args: Sequence[Any], kwargs: Sequence[tuple[str, Any]], outputs: Sequence[_State],
                inline: bool = False) -> None:
        if len(self._records) >= self._max_length:
            raise RuntimeError(f"the fusion definition exceeds max_length={self._max_length} records")
        self._records.append(
            Record(name, tuple(_to_ref(a) for a in args), tuple((k, _to_ref(v)) for k, v in kwargs),
                   tuple(o.ref for o in outputs), inline)
        )

    def _own(self, x: _State, what: str) -> _State:
        if x.fd is not self:
            raise DefinitionError(f"{what}: {x!r} belongs to another FusionDefinition")
        self._check_open(what)
        return x

    def _as_state(self, x: Any, what: str) -> _State:
        """A handle for `x`: itself if it is one of ours, a new constant for a Python number."""
        if isinstance(x, _State):
            return self._own(x, what)
        if isinstance(x, _NUMBER):
            return self.define_scalar(x)
        if isinstance(x, torch.Tensor):
            raise DefinitionTypeError(f"{what} is a torch.Tensor; define fusion inputs with fd.define_tensor or fd.from_pytorch")
        raise DefinitionTypeError(f"{what} must be a Tensor, Scalar or number, got {type(x).__name__}")

    def _ir_operand(self, x: Any, what: str) -> Any:
        return self._as_state(x, what).val

    def _shape_vector(self, shape: Any, what: str, shape_check: bool = True) -> Vector:
        """A Vector for a shape-like argument: a Vector itself, or a list/tuple of ints and
        Scalars made an inline vector (its ints inline constants), as nvFuser records it."""
        if isinstance(shape, Vector):
            return self._own(shape, what)
        if isinstance(shape, Tensor) or not isinstance(shape, (list, tuple)):
            raise DefinitionTypeError(f"{what} must be a list of ints/Scalars or a Vector, got {type(shape).__name__}")
        return self._vector_of(self._vector_items(shape, what, shape_check), inline=True)

    def _vector_items(self, values: Sequence[Any], what: str, shape_check: bool) -> list[Scalar]:
        items = []
        for k, v in enumerate(values):
            if isinstance(v, Scalar):
                self._own(v, f"{what}[{k}]")
                if not v.dtype.is_integral:
                    raise DefinitionTypeError(f"{what}[{k}] has dtype {v.dtype}; a shape needs integers")
                items.append(v)
            elif isinstance(v, int) and not isinstance(v, bool):
                if shape_check and v < -1:
                    raise DefinitionError(f"{what}[{k}] is {v}; entries must be -1 (symbolic), 0, 1 (broadcast) or sizes")
                items.append(self._inline_scalar(v))
            else:
                raise DefinitionTypeError(f"{what}[{k}] must be an int or a Scalar, got {v!r}")
        return items

    def _inline_scalar(self, value: int) -> Scalar:
        """An Int constant nvFuser defines inline: printed as its value where it is read."""
        return self._define_scalar(value, DataType.Int, inline=True)

    def _vector_of(self, scalars: Sequence[Scalar], inline: bool, dtype: DataType = DataType.Int) -> Vector:
        handle = self._new_state([s.val for s in scalars])
        self._record("define_vector", (list(scalars),), (("dtype", dtype),), (handle,), inline=inline)
        return handle

    def _record_vector_result(self, name: str, args: Sequence[Any], kwargs: Sequence, scalars: list) -> Vector:
        vec = self._new_state(list(scalars))
        self._record(name, args, kwargs, (vec,))
        return vec

    # --- inputs, constants, outputs -----------------------------------------------------------
    def define_tensor(
        self,
        shape: Sequence[int] | None = None,
        contiguity: Sequence[bool | None] | bool | None = None,
        dtype: DataType = DataType.Float,
        is_cpu: bool = False,
        stride_order: Sequence[int] | None = None,
        *,
        sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        static_sizes: bool = False,
    ) -> Tensor:
        """A tensor input. `shape`: -1 symbolic, 1 broadcast, n static. `contiguity` per
        dim (None for broadcast); `stride_order[i]` is dim i's memory rank (highest outermost)."""
        self._check_open("fd.define_tensor")
        if not isinstance(dtype, DataType) or dtype is DataType.Null:
            raise DefinitionTypeError(f"fd.define_tensor: dtype must be a DataType other than Null, got {dtype!r}")
        if sizes is not None:
            if shape is not None:
                raise DefinitionTypeError("fd.define_tensor: pass either shape or sizes/strides, not both")
            if strides is None or len(strides) != len(sizes):
                raise DefinitionError("fd.define_tensor: sizes needs strides of the same length")
            from fuser.runtime.descriptor import compute_tensor_descriptor

            contiguity, stride_order = compute_tensor_descriptor(list(sizes), list(strides))
            shape = [1 if s == 1 else (s if static_sizes else -1) for s in sizes]
        if shape is None:
            raise DefinitionTypeError("fd.define_tensor: shape is required")
        shape = list(shape)
        n = len(shape)
        for k, s in enumerate(shape):
            if not isinstance(s, int) or isinstance(s, bool) or s < -1:
                raise DefinitionError(f"fd.define_tensor: shape[{k}] = {s!r}; entries must be -1 (symbolic) or sizes >= 0")
        if stride_order is not None:
            stride_order = list(stride_order)
            if sorted(stride_order) != list(range(n)):
                raise DefinitionError(f"fd.define_tensor: stride_order {stride_order} is not a permutation of 0..{n - 1}")
        # allocation order, outermost first; contiguity is given in this order (as in nvFuser)
        order = list(range(n))
        if stride_order is not None:
            order = sorted(range(n), key=lambda d: -stride_order[d])
        if contiguity is None:
            contiguity = [None if shape[d] == 1 else False for d in order]
        elif isinstance(contiguity, bool):
            contiguity = [None if shape[d] == 1 else contiguity for d in order]
        contiguity = list(contiguity)
        if len(contiguity) != n:
            raise DefinitionError(f"fd.define_tensor: contiguity has {len(contiguity)} entries for a shape of {n} dims")
        for k, c in enumerate(contiguity):
            if c not in (True, False, None):
                raise DefinitionError(f"fd.define_tensor: contiguity[{k}] = {c!r}; entries must be True, False or None")
        if is_cpu and n != 0:
            raise DefinitionError(f"fd.define_tensor: is_cpu=True is only for 0-dim scalar tensors, got {n} dims")
        logical_contig = [None] * n
        for p, d in enumerate(order):
            logical_contig[d] = contiguity[p]

        with self._fusion.guard():
            ids = []
            for s, c in zip(shape, logical_contig):
                if s == 1:
                    ids.append(IterDomain(1, IterType.Broadcast))
                elif c is None:  # a broadcast presented at a larger size: stride 0
                    ids.append(IterDomain(1, IterType.Broadcast, expanded_extent=s if s >= 0 else IrScalar(DataType.Int)))
                else:
                    ids.append(IterDomain(s if s >= 0 else IrScalar(DataType.Int)))
            alloc = [ids[d] for d in order]
            alloc_contig = [None if ids[d].is_broadcast else contiguity[p] for p, d in enumerate(order)]
            domain = TensorDomain(ids, allocation=alloc if order != list(range(n)) else None, contiguity=alloc_contig)
            tv = TensorView(domain, dtype)
            tv.is_cpu_scalar = is_cpu
            self._fusion.add_input(tv)
        handle = self._new_state(tv)
        kwargs = [("shape", shape), ("contiguity", contiguity), ("dtype", dtype), ("is_cpu", is_cpu)]
        if stride_order:  # nvFuser prints a non-empty stride_order only
            kwargs.append(("stride_order", stride_order))
        self._record("define_tensor", (), kwargs, (handle,))
        return handle

    def from_pytorch(self, tensor: torch.Tensor, static_sizes: bool = False) -> Tensor:
        """A tensor input shaped and laid out like `tensor`."""
        if not isinstance(tensor, torch.Tensor):
            raise DefinitionTypeError(f"fd.from_pytorch: expected a torch.Tensor, got {type(tensor).__name__}")
        return self.define_tensor(
            sizes=list(tensor.size()),
            strides=list(tensor.stride()),
            dtype=from_torch(tensor.dtype),
            static_sizes=static_sizes,
            is_cpu=tensor.is_cpu and tensor.ndim == 0,
        )

    def define_scalar(self, value: Any = None, dtype: DataType | None = None) -> Scalar:
        """A constant scalar when `value` is given, else a scalar input of `dtype` (default
        Double); `define_scalar(DataType.Int)` is an Int input, as in nvFuser. A constant
        takes `dtype` (define_scalar(1, dtype=DataType.Double) is 1.0), else its Python
        type's: float -> Double, int -> Int, bool -> Bool, complex -> ComplexDouble."""
        self._check_open("fd.define_scalar")
        if isinstance(value, DataType) and dtype is None:  # nvFuser's define_scalar(dtype) overload
            value, dtype = None, value
        if value is not None and not isinstance(value, _NUMBER):
            raise DefinitionTypeError(f"fd.define_scalar: value must be a Python number or None, got {type(value).__name__}")
        if dtype is None:
            dtype = python_scalar_dtype(value) if value is not None else DataType.Double
        if not isinstance(dtype, DataType) or dtype is DataType.Null:
            raise DefinitionTypeError(f"fd.define_scalar: dtype must be a DataType other than Null, got {dtype!r}")
        return self._define_scalar(value, dtype)

    def _define_scalar(self, value: Any, dtype: DataType, inline: bool = False) -> Scalar:
        if value is not None:
            value = _cast_value(value, dtype)
        try:
            with self._fusion.guard():
                s = IrScalar(dtype, value)
                if value is None:
                    self._fusion.add_input(s)
        except (TypeError, ValueError) as err:
            raise nvfuser_style(err, f"fd.define_scalar: {err}") from None
        handle = self._new_state(s)
        self._record("define_scalar", (value,), (("dtype", dtype),), (handle,), inline=inline)
        return handle

    define_constant = define_scalar

    def define_vector(self, values: Sequence[Any] | int, dtype: DataType = DataType.Int) -> Vector:
        """A shape vector: from a list of ints/Scalars (the ints defined inline), or `size`
        new Int scalar inputs."""
        self._check_open("fd.define_vector")
        if not isinstance(dtype, DataType) or not dtype.is_integral:
            raise DefinitionTypeError(f"fd.define_vector: dtype must be an integer DataType, got {dtype!r}")
        if isinstance(values, int) and not isinstance(values, bool):
            scalars = [self._define_scalar(None, dtype) for _ in range(values)]
        elif isinstance(values, (list, tuple)):
            scalars = self._vector_items(values, "fd.define_vector: values", shape_check=True)
        else:
            raise DefinitionTypeError(f"fd.define_vector: values must be a list of ints/Scalars or a size, got {values!r}")
        return self._vector_of(scalars, inline=False, dtype=dtype)

    def add_output(self, output: _State, alias_input: Any = None, *, stride_order: Sequence[int] | None = None) -> None:
        """Mark `output` as an output. With `alias_input` it is written into that input
        and, unless also added without it, not returned (nvFuser's in-place update; added
        both ways, it is returned where its plain add_output put it, as that input)."""
        self._check_open("fd.add_output")
        if isinstance(alias_input, (list, tuple)):  # add_output(t, stride_order) positional form
            stride_order, alias_input = list(alias_input), None
        if not isinstance(output, (Tensor, Scalar)):
            kind = f"{type(output).__module__}.{type(output).__name__}"
            raise DefinitionTypeError(f"fd.add_output: output must be a Tensor or Scalar of this definition, got a {kind}")
        self._own(output, "fd.add_output")
        val = output.val
        fusion = self._fusion
        if alias_input is not None:
            if stride_order is not None:
                raise DefinitionError("fd.add_output: stride_order can't be dictated for aliased outputs")
            if not isinstance(alias_input, Tensor) or not isinstance(output, Tensor):
                raise DefinitionTypeError("fd.add_output: alias_input must be an input Tensor, aliased to a Tensor output")
            self._own(alias_input, "fd.add_output")
            alias_val = alias_input.val
            if not alias_val.is_fusion_input:
                raise DefinitionError(f"fd.add_output: alias_input {alias_input!r} is not a fusion input")
            if val in fusion._output_set:  # returned already: now also written into the input
                fusion.output_aliases[val] = alias_val
            else:
                if val.is_fusion_input:  # an input aliased to another: copied, so written
                    from fuser import ops as irops

                    with fusion.guard():
                        val = irops.set_(val)
                fusion.add_output(val, alias_input=alias_val)
            self._record("add_output", (output, alias_input), (), ())
            return
        kwargs: list[tuple[str, Any]] = []
        if stride_order is not None:
            if not isinstance(output, Tensor):
                raise DefinitionTypeError("fd.add_output: stride_order needs a Tensor output")
            from fuser import ops as irops

            try:
                with fusion.guard():
                    val = irops.stride_order(val, list(stride_order))
            except (TypeError, ValueError) as err:
                raise nvfuser_style(err, f"fd.add_output: {err}") from None
            kwargs.append(("stride_order", list(stride_order)))
        if val not in fusion.output_aliases:  # an aliased output is in the fusion's outputs already
            fusion.add_output(val)
        self._visible.append(val)
        self._record("add_output", (output,), kwargs, ())

    # --- introspection -------------------------------------------------------------------------
    def id(self) -> int | None:
        """The index of this definition's fusion in the FusionCache (None before it is
        defined; a subclass defines itself here)."""
        if self._entry is None and not self._open and type(self).definition is not FusionDefinition.definition:
            self._ensure_defined()
        return self._entry.id if self._entry is not None else None

    def inputs(self) -> list[int]:
        """State indices of the fusion inputs, in order."""
        return [r.outputs[0].index for r in self._records if r.name in ("define_tensor", "define_scalar") and r.args[:1] in ((), (None,))]

    def outputs(self) -> list[int]:
        """State indices of the returned outputs, in add_output order (in-place updates of
        an input, add_output(t, alias_input), are not among them)."""
        return [r.args[0].index for r in self._records if r.name == "add_output" and len(r.args) == 1]

    def extents(self) -> list[int]:
        """nvFuser's indices of the tensor inputs' extents: -1, -2, ... one per dimension of
        each tensor input, in input order (segments pass sizes under these indices)."""
        n = sum(len(v.logical_no_reductions()) for v in self.fusion.inputs if isinstance(v, TensorView))
        return [-k - 1 for k in range(n)]

    @property
    def fusion(self) -> Fusion:
        self._ensure_defined()
        return self._fusion

    def fusion_ir(self) -> str:
        """The fusion's IR in nvFuser's textual format."""
        from fuser.ir import fusion_ir

        return fusion_ir(self.fusion)

    def __repr__(self) -> str:
        """The definition as nvFuser prints it: a newline, then `def nvfuser_fusion_idN(fd :
        FusionDefinition) -> None :` (`nvfuser_incomplete_fusion` before it is defined)."""
        return definition_text(self._records, self._entry.id if self._entry else None)

    __str__ = __repr__

    def repro_script_for(self, inputs: Sequence[Any] | None = None) -> str:
        """A runnable script in nvFuser's layout that defines this fusion, builds inputs
        like `inputs` (sizes, strides, dtypes, devices) and executes it."""
        self.id()  # a subclass defines itself first
        return repro_script(self._records, self._entry.id if self._entry else None,
                            _flatten_inputs(inputs) if inputs is not None else None)

    def _save_repro(self, inputs: Sequence[Any]) -> str:
        """Write the repro script of a failed execute to the temp directory; returns the
        one line telling the user where it is (or why it is not there)."""
        fusion_id = self._entry.id
        path = os.path.join(tempfile.gettempdir(), f"fuser_repro_{fusion_id}_{os.getpid()}.py")
        head = f"fuser: executing FusionDefinition {fusion_id} failed (the error follows)"
        try:
            script = self.repro_script_for(inputs)
        except Exception as err:  # a broken repro must not hide the error it was meant to explain
            return f"{head}; no repro script: building it failed with {type(err).__name__}: {err}"
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(script)
        except OSError as err:
            return (f"{head}; the repro script could not be written to {path} ({err.strerror or err}): "
                    "fd.repro_script_for(inputs) returns it")
        return f"{head}; a script reproducing it: {path}"

    def last_repro_script(self) -> str:
        """The repro script for the inputs of the last execute(..., save_repro_inputs=True)."""
        if self.fake_inputs is None:
            raise DefinitionError("fd.last_repro_script(): execute(inputs, save_repro_inputs=True) was not called")
        return self.repro_script_for(self.fake_inputs)

    def debug_output(self) -> str | None:
        """What the last execute printed (FUSER_DUMP dumps included) when it was called with
        capture_debug_output=True; None otherwise."""
        return self._debug_output

    def profile(self) -> Any:
        """The FusionProfile of the last execute(..., profile=True): its segments, and per
        segment the scheduler, time, bytes and bandwidth."""
        if not self.profiled:
            raise DefinitionError("The execute() method was not previously called with profiling enabled!")
        if self._profile is None:
            raise DefinitionError("fd.profile(): the last execute recorded no profile (it failed, or ran "
                                  "the segments of fd.segment() one by one)")
        return self._profile

    # --- execution -------------------------------------------------------------------------------
    def execute(
        self,
        inputs: Sequence[Any],
        *,
        device: Any = None,
        override_user_schedule: bool = False,
        capture_debug_output: bool = False,
        print_repro: bool = False,
        profile: bool = False,
        save_repro_inputs: bool = False,
        _enable_options: Sequence[str] | None = (),
        _disable_options: Sequence[str] | None = (),
    ) -> list[torch.Tensor]:
        """Run the fusion on `inputs`; returns the outputs in add_output order (in-place
        updates of inputs omitted). nvFuser's keywords: `device` for fusions no input
        places, `print_repro` prints a repro script first, `profile` keeps a FusionProfile
        for fd.profile(), `capture_debug_output` keeps what the run printed for
        fd.debug_output(), `save_repro_inputs` keeps fake inputs for fd.last_repro_script().
        A subclass defining `schedule()` runs as one kernel it schedules (once per input
        signature); `override_user_schedule` runs the automatic schedulers instead."""
        self.profiled = bool(profile)
        self._profile = None
        self._ensure_defined()
        inputs = _flatten_inputs(inputs)
        if _enable_options or _disable_options:  # the defaults, () and (), need no checking
            _check_options(_enable_options, _disable_options)
        if _disable_options and "matmul_expr_eval" in _disable_options:
            _refuse_matmul_codegen(self.fusion)
        if save_repro_inputs:
            self.fake_inputs = _fake_inputs(inputs)
        if print_repro:
            print(self.repro_script_for(inputs))
        captured = io.StringIO() if capture_debug_output else None
        self._debug_output = None
        try:
            if captured is None:  # the cached path: no context manager to enter
                return self._run(inputs, device, profile, override_user_schedule)
            with _capturing(captured):
                return self._run(inputs, device, profile, override_user_schedule)
        except Exception as err:
            if not print_repro:  # with print_repro the script is on stdout already
                # one line, so the error below it is what the user reads first
                print(self._save_repro(inputs), file=sys.stderr)
            converted = nvfuser_style(err)
            if converted is err:
                raise
            raise converted.with_traceback(err.__traceback__) from None
        finally:
            if captured is not None:
                self._debug_output = captured.getvalue()

    def _run(self, inputs: list[Any], device: Any, profile: bool, override_user_schedule: bool = False) -> list[Any]:
        from fuser.host.executor import run, runner_for

        if self._segments:
            return self._execute_segments(inputs, device=device)
        user = not override_user_schedule and Schedule._user.has_user_schedule(self)
        if has_dtensors(inputs):
            if user:
                raise NotImplementedError("a user schedule (schedule()) with DTensor inputs is not supported")
            return self._run_dtensors(inputs, device)
        entry = self._entry
        if user:
            # schedule() runs once per input signature; its one-segment runners live apart
            # from the automatic ones, which override_user_schedule=True still runs
            entry = Schedule._user.user_entry(self, inputs, device)
        if not profile:
            outs = self._arrange(run(entry, inputs, device=device), inputs)
            if user:
                self._entry.last_runner = entry.last_runner  # what fd.last_cuda_code() & co. read
            return outs
        from .profile import build_profile, observe_segments

        runner = runner_for(entry, inputs, device)
        dev = runner.device
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        begin, host = (torch.cuda.Event(enable_timing=True) if dev.type == "cuda" else None), time.perf_counter()
        if begin is not None:
            begin.record()
        with observe_segments(runner, dev) as seen:
            outs = self._arrange(run(entry, inputs, device=device, runner=runner), inputs)
        self._entry.last_runner = entry.last_runner
        if begin is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            torch.cuda.synchronize(dev)
            host_ms = (time.perf_counter() - host) * 1e3
            total = lambda: begin.elapsed_time(end)  # noqa: E731
        else:
            host_ms = (time.perf_counter() - host) * 1e3
            total = lambda: host_ms  # noqa: E731
        self._profile = build_profile(self._entry.id, runner, seen, host_ms, total, dev, inputs, outs)
        return outs

    def _run_dtensors(self, inputs: list[Any], device: Any) -> list[Any]:
        """Run on DTensors' local blocks, sharded as their placements say; the outputs come
        back as DTensors placed as the propagation leaves them (fuser/frontend/dtensor.py)."""
        from fuser.host.executor import run

        from . import dtensor

        if any(kind != "out" for kind, _ in (self._entry.output_plan or [])):
            raise NotImplementedError("an output written into an input (alias_input) with DTensor inputs is not "
                                      "supported")
        local, placements, torch_mesh = dtensor.unwrap(inputs)
        outs = run(self._entry, local, device=device, placements=placements)
        runner = self._entry.last_runner
        return dtensor.wrap(outs, [runner.sharded.of(v) for v in runner.program.outputs], torch_mesh)

    def _arrange(self, returned: list[Any], inputs: Sequence[Any], written: dict | None = None) -> list[Any]:
        """The outputs in nvFuser's order from what the runtime returned (the fusion's
        outputs that are not in-place updates): an output that is also written into an
        input is returned as that input (`written` gives its values instead, for validate)."""
        plan = self._entry.output_plan
        if plan is None or all(kind == "out" for kind, _ in plan):
            return returned
        return [returned[k] if kind == "out" else (written[k] if written is not None else inputs[k]) for kind, k in plan]

    def validate(self, inputs: Sequence[Any], reference_outputs: Sequence[Any] | None = None) -> None:
        """Execute, then check the outputs against the reference executor (or `reference_outputs`)."""
        from fuser.runtime import philox
        from fuser.runtime.reference import run_reference
        from fuser.runtime.tolerance import assert_close

        inputs = _flatten_inputs(inputs)
        # the reference reads the inputs as they were: execute may update some in place
        originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        # unseeded random numbers: the reference replays the draw the execution made
        drawn = philox.generator_states(inputs) if reference_outputs is None and philox.streams(self.fusion) else []
        outs = self.execute(inputs)
        if reference_outputs is None:
            fusion = self.fusion
            with philox.replaying(drawn):
                refs = run_reference(fusion, originals)
            returned = [r for v, r in zip(fusion.outputs, refs) if v not in fusion.output_aliases]
            written = {fusion.inputs.index(fusion.output_aliases[v]): r for v, r in zip(fusion.outputs, refs)
                       if v in fusion.output_aliases}
            reference_outputs = self._arrange(returned, inputs, written)
        if len(outs) != len(reference_outputs):
            raise AssertionError(f"{len(outs)} outputs, {len(reference_outputs)} reference outputs")
        for k, (got, want) in enumerate(zip(outs, reference_outputs)):
            assert_close(got, want, what=f"output {k}")

    def last_cuda_code(self, intrinsic_code: bool = False) -> str:
        """CUDA source of the kernels the last `execute` ran (their runtime header too
        with `intrinsic_code`)."""
        self._ensure_defined()
        runner = self._entry.last_runner
        if runner is None:
            raise RuntimeError(f"fd.last_cuda_code(): this fusion {_NEVER_EXECUTED}")
        kernels = [r.kernel for r in runner.runs if r.kernel]
        if not kernels:
            raise RuntimeError("fd.last_cuda_code(): the last execute ran no generated kernel "
                               "(CPU inputs, or no segment a kernel is generated for yet)")
        return _with_header([k.source for k in kernels], intrinsic_code)

    def last_segments(self) -> list:
        """How each segment of the last `execute` ran: fuser.host.evaluator.SegmentRun
        (scheduler, whether it generates kernels, whether it ran its kernel or fell back)."""
        self._ensure_defined()
        runner = self._entry.last_runner
        if runner is None:
            raise RuntimeError(f"fd.last_segments(): this fusion {_NEVER_EXECUTED}")
        return runner.segment_runs()

    def cuda_code_for(self, inputs: Sequence[Any]) -> str:
        """CUDA source of the kernels `execute(inputs)` would generate. Needs no GPU:
        CPU or meta tensors describe the call."""
        return _with_header([k.source for k in self._kernels_for(inputs, "cuda_code_for")], False)

    def last_scheduled_fusion_ir(self, tensor_transforms: bool = False) -> str:
        """The scheduled IR of the kernels the last `execute` generated (each tensor's
        loop-domain transforms too with `tensor_transforms`)."""
        self._ensure_defined()
        runner = self._entry.last_runner
        if runner is None:
            raise RuntimeError(f"fd.last_scheduled_fusion_ir(): this fusion {_NEVER_EXECUTED}")
        kernels = [r.kernel for r in runner.runs if r.kernel]
        if not kernels:
            raise RuntimeError("fd.last_scheduled_fusion_ir(): the last execute scheduled no generated kernel")
        return "\n".join(_scheduled_ir(k.fusion, tensor_transforms) for k in kernels)

    def scheduled_fusion_ir_for(self, inputs: Sequence[Any], tensor_transforms: bool = False) -> str:
        """The scheduled IR of the kernels `execute(inputs)` would generate (no GPU needed)."""
        return "\n".join(_scheduled_ir(k.fusion, tensor_transforms) for k in self._kernels_for(inputs, "scheduled_fusion_ir_for"))

    def _kernels_for(self, inputs: Sequence[Any], what: str) -> list:
        from fuser.kernel import generates_kernel, prepare_kernel
        from fuser.host.lower import example_args

        inputs = _flatten_inputs(inputs)
        seg = self.segmented_fusion_for(inputs)
        kernels = [prepare_kernel(g.scheduler, g.fusion(), example_args(seg, g, inputs), seg.runtime_info.device)
                   for g in seg.groups if generates_kernel(g.scheduler)]
        if not kernels:
            raise RuntimeError(f"fd.{what}(): no segment of this fusion becomes a generated kernel yet "
                               f"(schedulers: {', '.join(g.scheduler.value for g in seg.groups) or 'none'})")
        return kernels

    # --- segmentation ----------------------------------------------------------------------------
    def segmented_fusion_for(self, inputs: Sequence[Any]) -> "SegmentedFusion":
        """How `execute(inputs)` cuts this fusion into kernels (segmenting on first sight of
        this input signature, as execute would)."""
        self._ensure_defined()
        from fuser.host.executor import segmented_runner

        inputs = _flatten_inputs(inputs)
        entry = Schedule._user.user_entry(self, inputs) if Schedule._user.has_user_schedule(self) else self._entry
        return segmented_runner(entry, inputs).seg

    def segment(self, inputs: Sequence[Any]) -> list["FusionDefinition"]:
        """The fusion's segments for `inputs`, each as a FusionDefinition of its own (an
        empty list when one segment runs it all). Afterwards `execute` runs the segments
        one after the other, and `segment_index_space_maps[segment]` maps each segment's
        state indices to this definition's (intermediates that are no state of this
        definition get indices past its last one)."""
        from .translate import definition_from_fusion

        from fuser.host.executor import segmented_runner

        self._ensure_defined()
        if self._entry.sharded:
            raise NotImplementedError("fd.segment of a sharded fusion (tensors on a DeviceMesh) is not supported: its "
                                      "segments are the work between communications, which `execute` runs")
        runner = segmented_runner(self._entry, _flatten_inputs(inputs))
        seg = runner.seg
        # the segmenter cut the pre-segmentation passes' copy: its values stand for ours
        to_original = runner.preseg.to_original if runner.preseg is not None else (lambda v: v)
        self._segments = None
        self.segment_index_space_maps = {}
        if len(seg.groups) <= 1:
            return []
        index = {id(v): k for k, v in enumerate(self._state_vals) if v is not None and not isinstance(v, list)}
        extra: dict[int, int] = {}  # id(Val) -> index past the definition's states

        def original_index(v: Any) -> int:
            v = to_original(v)
            k = index.get(id(v))
            if k is None:
                k = extra.setdefault(id(v), len(self._state_vals) + len(extra))
            return k

        segments = []
        for g in seg.groups:
            gf, memo = g.fusion_and_map()
            sfd, states = definition_from_fusion(gf)
            back = {id(memo[v]): v for v in (*g.inputs, *g.outputs)}
            mapping = {i: original_index(back[id(sv)]) for i, sv in enumerate(states) if sv is not None and id(sv) in back}
            self.segment_index_space_maps[sfd] = mapping
            segments.append(sfd)
        self._segments = segments
        self._segment_program = segments_program(seg, segments)
        return list(segments)

    def _execute_segments(self, inputs: Sequence[Any], *, device: Any = None) -> list[torch.Tensor]:
        """Run the segments `segment()` made, in order: a host program with one
        PostOnStream per segment definition (each executed as that definition is)."""
        from fuser.host.evaluator import HostIrEvaluator
        from fuser.runtime.binding import bind_inputs

        program = self._segment_program
        binding = bind_inputs(program.fusion, inputs, device=torch.device(device) if device is not None else None)
        return HostIrEvaluator(program, binding).run(inputs)


class Schedule:
    """`fd.sched`: nvFuser's schedule operations. In the definition, `parallelize(...,
    ParallelType.stream)` is recorded (part of the cache key). Inside a FusionDefinition
    subclass's `schedule()`, which execute runs once per input signature on a copy of the
    fusion, the calls schedule that copy as one kernel (fuser/frontend/user_schedule.py)."""

    from . import user_schedule as _user

    def __init__(self, fd: "FusionDefinition") -> None:
        self._fd = fd

    def _active(self, op: str) -> Any:
        return self._user.active(self._fd, f"fd.sched.{op}")

    def parallelize(self, tensor: Tensor, axis: int, parallel_type: ParallelType) -> None:
        """Bind loop axis `axis` of `tensor` to a GPU index or loop kind (inside schedule()), or,
        in the definition, its logical axis to a stream loop: `ParallelType.stream` (seed 004),
        a host loop over that axis, each iteration on a worker stream."""
        fd = self._fd
        sched = self._user.running(fd)
        if sched is not None:
            sched.parallelize(tensor, axis, parallel_type)
            return
        if parallel_type is ParallelType.DIDx:  # placement on the devices of the tensor's mesh
            from .sharding import shard

            shard(tensor, axis)
            return
        fd._own(tensor, "fd.sched.parallelize")
        if not isinstance(parallel_type, ParallelType) or parallel_type is not ParallelType.Stream:
            raise DefinitionTypeError(
                f"fd.sched.parallelize: parallel_type={parallel_type!r}: only ParallelType.stream is set in the "
                "definition; other parallel types are user schedule calls, made in a FusionDefinition subclass's "
                "schedule()")
        ids = tensor.val.logical_no_reductions()
        if not isinstance(axis, int) or not -len(ids) <= axis < len(ids):
            raise DefinitionError(f"fd.sched.parallelize: axis={axis!r} is out of range for a tensor of {len(ids)} dims")
        axis %= len(ids)
        if ids[axis].is_broadcast:
            raise DefinitionError(f"fd.sched.parallelize: axis {axis} of {tensor!r} is a broadcast; a stream loop "
                                  "needs an iterated axis")
        ids[axis].parallel_type = ParallelType.Stream
        fd._record("sched.parallelize", (tensor, axis, ParallelType.Stream), (), ())

    def _set_device_mesh(self, tensor: Tensor, mesh: Any) -> None:
        """Place `tensor` on `mesh` (nvFuser's older spelling of `tensor.set_device_mesh`)."""
        from .sharding import set_device_mesh

        set_device_mesh(tensor, mesh, "fd.sched._set_device_mesh")

    def split(self, tensor: Tensor, dim: int, factor: int, inner_split: bool = True) -> None:
        """Split loop axis `dim` into (outer, inner); `factor` is the inner extent (the outer
        one with inner_split=False). A split that does not divide is predicated."""
        self._active("split").split(tensor, dim, factor, inner_split)

    def merge(self, tensor: Tensor, dim: int) -> None:
        """Merge loop axes `dim` and `dim + 1` into one."""
        self._active("merge").merge(tensor, dim)

    def reorder(self, tensor: Tensor, old2new: dict[int, int]) -> None:
        """Move loop axes: `{old position: new position}`; the others keep their order."""
        self._active("reorder").reorder(tensor, old2new)

    def inline_most(self, selected_tensors: Sequence[Tensor] | None = None) -> None:
        """Compute the (selected) tensors inside the full loop nest (fuser's kernel always does)."""
        self._active("inline_most").inline_most(selected_tensors)

    def transform_like(self, tensor: Tensor, selected_tensors: Sequence[Tensor] | None = None) -> None:
        """Replay `tensor`'s splits, merges and reorders on every other (or each selected) tensor."""
        self._active("transform_like").transform_like(tensor, selected_tensors)

    def parallelize_like(self, tensor: Tensor, pos: int = -1, selected_tensors: Sequence[Tensor] | None = None,
                         selected_parallel_types: Any = None, propagate_padding: bool = True) -> None:
        """Bind other tensors' loop axes as `tensor`'s first `pos` axes (-1: all) are bound."""
        self._active("parallelize_like").parallelize_like(tensor, pos, selected_tensors, selected_parallel_types,
                                                          propagate_padding)

    def to_string(self, tensor: Tensor) -> str:
        """`tensor` with its loop domain as scheduled so far (nvFuser's TensorView::toString)."""
        return self._active("to_string").to_string(tensor)

    def user_schedule_ir(self) -> str:
        """The fusion being scheduled, each tensor's transforms included."""
        return self._active("user_schedule_ir").user_schedule_ir()

    def tensors(self) -> list[Tensor]:
        """Every Tensor of the definition."""
        return self._active("tensors").tensors()

    def is_reduction(self, tensor: Tensor) -> bool:
        """Whether `tensor` is a reduction's result."""
        return self._active("is_reduction").is_reduction(tensor)

    def can_schedule(self, scheduler_type: Any) -> tuple[bool, str]:
        """Whether the automatic scheduler `scheduler_type` (a SchedulerType) takes the whole
        fusion, and nvFuser's message why not."""
        return self._active("can_schedule").can_schedule(scheduler_type)

    def find_compatible_schedulers(self) -> list:
        """The automatic schedulers (SchedulerType) that take the whole fusion."""
        return self._active("find_compatible_schedulers").find_compatible_schedulers()

    def schedule(self, heuristic: Any = None) -> None:
        """Let the automatic scheduler `heuristic` (a SchedulerType; None: the first that takes
        it) schedule the whole fusion as one kernel, instead of manual calls."""
        self._active("schedule").schedule(heuristic)

    def __getattr__(self, name: str) -> Any:
        # nvFuser's other schedule operations (cache_after, rfactor, ...) raise when called
        return self._user.unsupported(name)


def segments_program(seg: Any, segments: Sequence["FusionDefinition"]) -> Any:
    """The host program running `seg`'s groups as the definitions `segments` (in order):
    each a PostOnStream of its definition's fusion, through its own executor cache."""
    from fuser.host.ir import HostIrContainer, HostUnit, PostOnStream
    from fuser.host.lower import insert_deallocations

    fusion = seg.complete_fusion
    units, exprs = [], []
    for k, (g, sfd) in enumerate(zip(seg.groups, segments)):
        unit = HostUnit(k, g, sfd._entry.fusion, str(g.scheduler.value))
        unit.cache["entry"] = sfd._entry
        units.append(unit)
        exprs.append(PostOnStream(unit, tuple(g.inputs), tuple(g.outputs)))
    return insert_deallocations(HostIrContainer(fusion, tuple(fusion.inputs), tuple(fusion.outputs), tuple(exprs),
                                                tuple(units)))


#: why introspection of the last execute has nothing to show (nvFuser's words included)
_NEVER_EXECUTED = "has never been executed (nvFuser: 'Fusion has never been executed via FusionExecutorCache')"


def _scheduled_ir(fusion: Fusion, tensor_transforms: bool) -> str:
    from fuser.ir import fusion_ir, transforms_str

    text = fusion_ir(fusion)
    if tensor_transforms:
        text += "\n" + "\n\n".join(transforms_str(tv) for tv in fusion.tensors()) + "\n"
    return text


def _with_header(sources: list[str], intrinsic_code: bool) -> str:
    text = "\n".join(sources)
    if intrinsic_code:
        from fuser.codegen.ops import runtime_headers

        text = "\n".join(runtime_headers().values()) + "\n" + text
    return text


def _output_plan(fusion: Fusion, visible: Sequence[Any]) -> list[tuple[str, int]]:
    """Per returned output, where execute finds it: ("out", k), the k-th value the runtime
    returns (the fusion's outputs that are not in-place updates), or ("input", k), the k-th
    input, which the runtime wrote it into."""
    plan, k = [], 0
    for val in visible:
        alias = fusion.output_aliases.get(val)
        if alias is None:
            plan.append(("out", k))
            k += 1
        else:
            plan.append(("input", fusion.inputs.index(alias)))
    return plan


def _cast_value(value: Any, dtype: DataType) -> Any:
    """A constant as `dtype` holds it (nvFuser's castToDtype): define_scalar(1, DataType.Double) is 1.0."""
    try:
        if dtype.is_boolean:
            return bool(value)
        if dtype.is_integral:
            return value if isinstance(value, int) and not isinstance(value, bool) else int(value)
        if dtype.is_complex:
            return complex(value)
        if dtype.is_floating:
            return float(value)
    except (TypeError, ValueError, OverflowError):
        raise DefinitionTypeError(f"fd.define_scalar: {value!r} cannot be a {dtype} constant") from None
    return value


def _fake_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Storage-free copies of the tensor inputs (PyTorch fake tensors), for repro scripts."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    return [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]


@contextlib.contextmanager
def _capturing(buffer: io.StringIO | None):
    """Route stdout and stderr (where FUSER_DUMP writes) into `buffer` while it is given."""
    if buffer is None:
        yield
        return
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        yield


def _flatten_inputs(inputs: Sequence[Any]) -> list[Any]:
    """nvFuser's execute spreads a list or tuple input (a vector of sizes) into scalar
    inputs; a tensor where the list of inputs belongs, or a list of tensors inside it, is
    refused with what was expected."""
    if isinstance(inputs, torch.Tensor):
        raise FusionInputError(
            "execute(inputs): inputs must be a list (or tuple) of the fusion's inputs, got a torch.Tensor "
            f"of shape {list(inputs.shape)}; pass [tensor] for a fusion with one input")
    if not isinstance(inputs, (list, tuple)):
        raise FusionInputError(f"execute(inputs): inputs must be a list (or tuple) of the fusion's inputs, "
                               f"got {type(inputs).__name__}")
    if not any(isinstance(x, (list, tuple)) for x in inputs):
        return inputs if isinstance(inputs, list) else list(inputs)
    flat: list[Any] = []
    for k, x in enumerate(inputs):
        if isinstance(x, (list, tuple)):
            if any(isinstance(v, (torch.Tensor, list, tuple)) for v in x):
                raise FusionInputError(
                    f"execute(inputs): input {k} is a nested list holding tensors or lists; a list inside the "
                    "inputs is a vector of scalars (sizes), spread into scalar inputs: pass tensors directly")
            flat.extend(x)
        else:
            flat.append(x)
    return flat


def _to_ref(v: Any) -> Any:
    if isinstance(v, _State):
        return v.ref
    if isinstance(v, list):
        return [_to_ref(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_to_ref(x) for x in v)
    return v


#: nvFuser's NVFUSER_ENABLE option names (accepted; fuser's runtime has no switches for them),
#: and fuser's own FUSER_ENABLE ones
KNOWN_ENABLE_OPTIONS = frozenset({
    "complex", "conv_decomposition", "fast_math", "fuse_matmul", "fuse_multiple_matmuls", "graph_op_fusion",
    "greedy_scheduler", "host_ir_lowering", "id_model", "id_model_extra_validation", "io_to_lower_precision",
    "kernel_db", "kernel_debug", "kernel_lineinfo", "kernel_profile", "linear_decomposition", "memory_promotion",
    "reuse_zeroed_memory", "static_fusion_count", "wait_debugger", "warn_register_spill", "ws_normalization",
    "copy_engine", "approx_exp",
})
#: nvFuser's NVFUSER_DISABLE option names, and fuser's own FUSER_DISABLE ones
KNOWN_DISABLE_OPTIONS = frozenset({
    "compile_to_sass", "contig_indexing", "expr_simplify", "fallback", "fma", "grouped_grid_welford_outer_opt",
    "id_model", "index_hoist", "kernel_reuse", "magic_zero", "matmul_expr_eval", "nvtx", "parallel_compile",
    "parallel_serde", "predicate_elimination", "python_inline_definitions", "resize_scheduler", "var_name_remapping",
    "welford_vectorization", "remat", "forwarding", "kernel_cache", "fold_input_broadcasts",
    "tanh_to_sigmoid", "stream_graphs", "rank_agreement", "shared_agreement", "rounded_products",
    "reciprocal_divisors",
})


def _refuse_matmul_codegen(fusion: Fusion) -> None:
    """With nvFuser's `matmul_expr_eval` disabled, matmul and linear need generated kernels;
    fuser has none, so (as nvFuser's segmenter would) no scheduler takes them."""
    from fuser.errors import FuserError
    from fuser.ir import LinearOp, MatmulOp

    ops = [e for e in fusion.exprs() if isinstance(e, (MatmulOp, LinearOp))]
    if ops:
        raise FuserError(
            f"Can not find a scheduler to schedule fusion segment: {type(ops[0]).__name__} with "
            "_disable_options=['matmul_expr_eval'] needs a generated matmul kernel, which fuser does not make"
        )


def _check_options(enable: Sequence[str] | None, disable: Sequence[str] | None) -> None:
    """Validate `_enable_options` / `_disable_options`: lists of option names; a name neither
    nvFuser nor fuser knows is ignored with a warning (it switches nothing)."""
    import warnings

    for arg, names, known in (("_enable_options", enable, KNOWN_ENABLE_OPTIONS),
                              ("_disable_options", disable, KNOWN_DISABLE_OPTIONS)):
        if names is None:
            continue
        if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
            raise DefinitionTypeError(f"execute: {arg} must be a list of option names, got {names!r}")
        for name in names:
            if not isinstance(name, str):
                raise DefinitionTypeError(f"execute: {arg} entries must be option names (str), got {name!r}")
            if name not in known:
                warnings.warn(f"fuser: ignoring unknown {arg[1:-8]} option {name!r}", stacklevel=3)


__all__ = ["FusionDefinition", "StateRef"]
