"""FusionDefinition: nvFuser's Python API for describing, caching and running a fusion."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Sequence

import torch

from fuser.ir import DataType, Fusion, IterDomain, IterType, TensorDomain, TensorView
from fuser.ir import Scalar as IrScalar
from fuser.ir.dtype import from_torch, python_scalar_dtype

from fuser.options import dump, dump_enabled

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

    # --- definition lifecycle -------------------------------------------------------------
    def __enter__(self) -> "FusionDefinition":
        self._setup_definition()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._finalize_definition()
        else:
            self._open = False

    def _setup_definition(self) -> None:
        if self._entry is not None:
            raise RuntimeError("this FusionDefinition is already defined; create a new one to define another fusion")
        self._fusion = Fusion()
        self._records, self._state_vals = [], []
        self._open = True

    def _finalize_definition(self) -> None:
        self._open = False
        if not self._fusion.outputs:
            raise ValueError("the fusion definition has no outputs: call fd.add_output(...)")
        self._entry = FusionCache.get()._lookup_or_add(self._records, self._fusion, self._state_vals)
        # a cache hit shares the first definition's IR (and its compiled kernels)
        self._fusion = self._entry.fusion
        self._state_vals = self._entry.state_vals
        if dump_enabled("fusion_ir"):
            dump("fusion_ir", self.fusion_ir())

    def definition(self) -> None:
        """Subclasses override this to build the fusion with `self.ops`."""
        raise NotImplementedError("define the fusion in a `with FusionDefinition() as fd:` block or override definition()")

    def _ensure_defined(self) -> None:
        if self._entry is None:
            if self._open:
                raise RuntimeError("the fusion definition is still open: leave the `with` block before executing")
            if type(self).definition is FusionDefinition.definition:
                raise RuntimeError("this FusionDefinition has no definition yet")
            self._setup_definition()
            self.definition()
            self._finalize_definition()

    # --- states -----------------------------------------------------------------------------
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

    def _record(self, name: str, args: Sequence[Any], kwargs: Sequence[tuple[str, Any]], outputs: Sequence[_State]) -> None:
        if len(self._records) >= self._max_length:
            raise RuntimeError(f"the fusion definition exceeds max_length={self._max_length} records")
        self._records.append(
            Record(name, tuple(_to_ref(a) for a in args), tuple((k, _to_ref(v)) for k, v in kwargs), tuple(o.ref for o in outputs))
        )

    def _own(self, x: _State, what: str) -> _State:
        if x.fd is not self:
            raise ValueError(f"{what}: {x!r} belongs to another FusionDefinition")
        self._check_open(what)
        return x

    def _as_state(self, x: Any, what: str) -> _State:
        """A handle for `x`: itself if it is one of ours, a new constant for a Python number."""
        if isinstance(x, _State):
            return self._own(x, what)
        if isinstance(x, _NUMBER):
            return self.define_scalar(x)
        if isinstance(x, torch.Tensor):
            raise TypeError(f"{what} is a torch.Tensor; define fusion inputs with fd.define_tensor or fd.from_pytorch")
        raise TypeError(f"{what} must be a Tensor, Scalar or number, got {type(x).__name__}")

    def _ir_operand(self, x: Any, what: str) -> Any:
        return self._as_state(x, what).val

    def _as_vector(self, shape: Any, what: str) -> Vector:
        """A Vector handle for a shape argument: a Vector, or a list of ints and Scalars."""
        if isinstance(shape, Vector):
            return self._own(shape, what)
        if isinstance(shape, Tensor) or not isinstance(shape, (list, tuple)):
            raise TypeError(f"{what} must be a list of ints/Scalars or a Vector, got {type(shape).__name__}")
        return self.define_vector(list(shape))

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
            raise TypeError(f"fd.define_tensor: dtype must be a DataType other than Null, got {dtype!r}")
        if sizes is not None:
            if shape is not None:
                raise TypeError("fd.define_tensor: pass either shape or sizes/strides, not both")
            if strides is None or len(strides) != len(sizes):
                raise ValueError("fd.define_tensor: sizes needs strides of the same length")
            from fuser.runtime.descriptor import compute_tensor_descriptor

            contiguity, stride_order = compute_tensor_descriptor(list(sizes), list(strides))
            shape = [1 if s == 1 else (s if static_sizes else -1) for s in sizes]
        if shape is None:
            raise TypeError("fd.define_tensor: shape is required")
        shape = list(shape)
        n = len(shape)
        for k, s in enumerate(shape):
            if not isinstance(s, int) or isinstance(s, bool) or s < -1:
                raise ValueError(f"fd.define_tensor: shape[{k}] = {s!r}; entries must be -1 (symbolic) or sizes >= 0")
        if stride_order is not None:
            stride_order = list(stride_order)
            if sorted(stride_order) != list(range(n)):
                raise ValueError(f"fd.define_tensor: stride_order {stride_order} is not a permutation of 0..{n - 1}")
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
            raise ValueError(f"fd.define_tensor: contiguity has {len(contiguity)} entries for a shape of {n} dims")
        for k, c in enumerate(contiguity):
            if c not in (True, False, None):
                raise ValueError(f"fd.define_tensor: contiguity[{k}] = {c!r}; entries must be True, False or None")
        if is_cpu and n != 0:
            raise ValueError(f"fd.define_tensor: is_cpu=True is only for 0-dim scalar tensors, got {n} dims")
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
        if stride_order is not None:
            kwargs.append(("stride_order", stride_order))
        self._record("define_tensor", (), kwargs, (handle,))
        return handle

    def from_pytorch(self, tensor: torch.Tensor, static_sizes: bool = False) -> Tensor:
        """A tensor input shaped and laid out like `tensor`."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"fd.from_pytorch: expected a torch.Tensor, got {type(tensor).__name__}")
        return self.define_tensor(
            sizes=list(tensor.size()),
            strides=list(tensor.stride()),
            dtype=from_torch(tensor.dtype),
            static_sizes=static_sizes,
            is_cpu=tensor.is_cpu and tensor.ndim == 0,
        )

    def define_scalar(self, value: Any = None, dtype: DataType | None = None) -> Scalar:
        """A constant scalar when `value` is given, else a scalar input of `dtype` (default Double)."""
        self._check_open("fd.define_scalar")
        if value is not None and not isinstance(value, _NUMBER):
            raise TypeError(f"fd.define_scalar: value must be a Python number or None, got {type(value).__name__}")
        if dtype is None:
            dtype = python_scalar_dtype(value) if value is not None else DataType.Double
        if not isinstance(dtype, DataType) or dtype is DataType.Null:
            raise TypeError(f"fd.define_scalar: dtype must be a DataType other than Null, got {dtype!r}")
        try:
            with self._fusion.guard():
                s = IrScalar(dtype, value)
                if value is None:
                    self._fusion.add_input(s)
        except TypeError as err:
            raise TypeError(f"fd.define_scalar: {err}") from None
        handle = self._new_state(s)
        self._record("define_scalar", (value,), (("dtype", dtype),), (handle,))
        return handle

    define_constant = define_scalar

    def define_vector(self, values: Sequence[Any] | int, dtype: DataType = DataType.Int) -> Vector:
        """A shape vector: from a list of ints/Scalars, or `size` new scalar inputs."""
        self._check_open("fd.define_vector")
        if not isinstance(dtype, DataType) or not dtype.is_integral:
            raise TypeError(f"fd.define_vector: dtype must be an integer DataType, got {dtype!r}")
        if isinstance(values, int):
            scalars = [self.define_scalar(None, dtype) for _ in range(values)]
        else:
            scalars = []
            for k, v in enumerate(values):
                if isinstance(v, Scalar):
                    scalars.append(self._own(v, f"fd.define_vector: values[{k}]"))
                elif isinstance(v, int) and not isinstance(v, bool):
                    scalars.append(self.define_scalar(v, dtype))
                else:
                    raise TypeError(f"fd.define_vector: values[{k}] must be an int or a Scalar, got {v!r}")
            for k, s in enumerate(scalars):
                if not s.dtype.is_integral:
                    raise TypeError(f"fd.define_vector: values[{k}] has dtype {s.dtype}; a shape needs integers")
        handle = self._new_state([s.val for s in scalars])
        self._record("define_vector", ([s for s in scalars],), (("dtype", dtype),), (handle,))
        return handle

    def add_output(self, value: _State, alias_input: Any = None, *, stride_order: Sequence[int] | None = None) -> None:
        """Mark `value` as an output; `alias_input` writes it into that input instead of returning it."""
        self._check_open("fd.add_output")
        if isinstance(alias_input, (list, tuple)):  # add_output(t, stride_order) positional form
            stride_order, alias_input = list(alias_input), None
        if not isinstance(value, (Tensor, Scalar)):
            raise TypeError(f"fd.add_output: value must be a Tensor or Scalar, got {type(value).__name__}")
        self._own(value, "fd.add_output")
        kwargs: list[tuple[str, Any]] = []
        val = value.val
        if stride_order is not None:
            if not isinstance(value, Tensor):
                raise TypeError("fd.add_output: stride_order needs a Tensor output")
            from fuser import ops as irops

            try:
                with self._fusion.guard():
                    val = irops.stride_order(val, list(stride_order))
            except (TypeError, ValueError) as err:
                raise type(err)(f"fd.add_output: {err}") from None
            kwargs.append(("stride_order", list(stride_order)))
        alias_val = None
        if alias_input is not None:
            if not isinstance(alias_input, Tensor):
                raise TypeError("fd.add_output: alias_input must be an input Tensor")
            self._own(alias_input, "fd.add_output")
            alias_val = alias_input.val
            if not alias_val.is_fusion_input:
                raise ValueError(f"fd.add_output: alias_input {alias_input!r} is not a fusion input")
            kwargs.append(("alias_input", alias_input))
        self._fusion.add_output(val, alias_input=alias_val)
        self._record("add_output", (value,), kwargs, ())

    # --- introspection -------------------------------------------------------------------------
    def id(self) -> int:
        """The index of this definition's fusion in the FusionCache."""
        self._ensure_defined()
        return self._entry.id

    def inputs(self) -> list[int]:
        """State indices of the fusion inputs, in order."""
        return [r.outputs[0].index for r in self._records if r.name in ("define_tensor", "define_scalar") and r.args[:1] in ((), (None,))]

    def outputs(self) -> list[int]:
        """State indices of the outputs, in order."""
        return [r.args[0].index for r in self._records if r.name == "add_output"]

    @property
    def fusion(self) -> Fusion:
        self._ensure_defined()
        return self._fusion

    def fusion_ir(self) -> str:
        """The fusion's IR in nvFuser's textual format."""
        from fuser.ir import fusion_ir

        return fusion_ir(self.fusion)

    def __repr__(self) -> str:
        if self._entry is None and not self._records:
            return "FusionDefinition(<undefined>)"
        return definition_text(self._records, self._entry.id if self._entry else 0)

    __str__ = __repr__

    def repro_script_for(self, inputs: Sequence[Any] | None = None) -> str:
        """A runnable script that defines this fusion, builds inputs like `inputs`, and executes."""
        self._ensure_defined()
        return repro_script(self._records, self._entry.id, inputs)

    # --- execution -------------------------------------------------------------------------------
    def execute(
        self,
        inputs: Sequence[Any],
        *,
        device: Any = None,
        override_user_schedule: bool = False,
        capture_debug_output: bool = False,
        profile: bool = False,
        print_repro: bool = False,
        _enable_options: Sequence[str] = (),
        _disable_options: Sequence[str] = (),
    ) -> list[torch.Tensor]:
        """Run the fusion on `inputs`; returns the outputs in add_output order (aliased ones omitted)."""
        self._ensure_defined()
        from fuser.runtime.executor import run

        inputs = _flatten_inputs(inputs)
        if print_repro:
            print(self.repro_script_for(inputs), file=sys.stderr)
        _check_options(_enable_options, _disable_options)
        try:
            if self._segments:
                return self._execute_segments(inputs, device=device)
            return run(self._entry, inputs, device=device)
        except Exception:
            if not print_repro:
                print(
                    "fuser: execute failed; a repro script for this fusion:\n" + self.repro_script_for(inputs),
                    file=sys.stderr,
                )
            raise

    def validate(self, inputs: Sequence[Any], reference_outputs: Sequence[Any] | None = None) -> None:
        """Execute, then check the outputs against the reference executor (or `reference_outputs`)."""
        from fuser.runtime.reference import run_reference
        from fuser.runtime.tolerance import assert_close

        inputs = _flatten_inputs(inputs)
        outs = self.execute(inputs)
        if reference_outputs is None:
            reference_outputs = run_reference(self.fusion, [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
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
            raise RuntimeError("fd.last_cuda_code(): this fusion has not been executed yet")
        kernels = [r.kernel for r in runner.runs if r.kernel]
        if not kernels:
            raise RuntimeError("fd.last_cuda_code(): the last execute ran no generated kernel "
                               "(CPU inputs, or no segment a kernel is generated for yet)")
        return _with_header([k.source for k in kernels], intrinsic_code)

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
            raise RuntimeError("fd.last_scheduled_fusion_ir(): this fusion has not been executed yet")
        kernels = [r.kernel for r in runner.runs if r.kernel]
        if not kernels:
            raise RuntimeError("fd.last_scheduled_fusion_ir(): the last execute scheduled no generated kernel")
        return "\n".join(_scheduled_ir(k.fusion, tensor_transforms) for k in kernels)

    def scheduled_fusion_ir_for(self, inputs: Sequence[Any], tensor_transforms: bool = False) -> str:
        """The scheduled IR of the kernels `execute(inputs)` would generate (no GPU needed)."""
        return "\n".join(_scheduled_ir(k.fusion, tensor_transforms) for k in self._kernels_for(inputs, "scheduled_fusion_ir_for"))

    def _kernels_for(self, inputs: Sequence[Any], what: str) -> list:
        from fuser.runtime.kernels import prepare_pointwise
        from fuser.runtime.segmented import example_args
        from fuser.scheduler import SchedulerType

        inputs = _flatten_inputs(inputs)
        seg = self.segmented_fusion_for(inputs)
        kernels = [prepare_pointwise(g.fusion(), example_args(seg, g, inputs)) for g in seg.groups
                   if g.scheduler in (SchedulerType.pointwise, SchedulerType.transpose)]
        if not kernels:
            raise RuntimeError(f"fd.{what}(): no segment of this fusion becomes a generated kernel yet "
                               f"(schedulers: {', '.join(g.scheduler.value for g in seg.groups) or 'none'})")
        return kernels

    # --- segmentation ----------------------------------------------------------------------------
    def segmented_fusion_for(self, inputs: Sequence[Any]) -> "SegmentedFusion":
        """How `execute(inputs)` cuts this fusion into kernels (segmenting on first sight of
        this input signature, as execute would)."""
        self._ensure_defined()
        from fuser.runtime.executor import segmented_runner

        return segmented_runner(self._entry, _flatten_inputs(inputs)).seg

    def segment(self, inputs: Sequence[Any]) -> list["FusionDefinition"]:
        """The fusion's segments for `inputs`, each as a FusionDefinition of its own (an
        empty list when one segment runs it all). Afterwards `execute` runs the segments
        one after the other, and `segment_index_space_maps[segment]` maps each segment's
        state indices to this definition's (intermediates that are no state of this
        definition get indices past its last one)."""
        from .translate import definition_from_fusion

        seg = self.segmented_fusion_for(inputs)
        self._segments = None
        self.segment_index_space_maps = {}
        if len(seg.groups) <= 1:
            return []
        index = {id(v): k for k, v in enumerate(self._state_vals) if v is not None and not isinstance(v, list)}
        extra: dict[int, int] = {}  # id(Val) -> index past the definition's states
        #: original index -> scalar a segment reads that no segment produces (extents, size())
        self._extra_state_vals: dict[int, Any] = {}

        def original_index(v: Any) -> int:
            k = index.get(id(v))
            if k is None:
                k = extra.setdefault(id(v), len(self._state_vals) + len(extra))
            if isinstance(v, IrScalar) and not v.is_fusion_input:
                self._extra_state_vals[k] = v  # a scalar no segment outputs: evaluated per call
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
        return list(segments)

    def _execute_segments(self, inputs: Sequence[Any], *, device: Any = None) -> list[torch.Tensor]:
        """Run the segments `segment()` made, in order, passing values by this definition's
        state indices and dropping each intermediate after the last segment reading it."""
        from fuser.runtime.binding import bind_inputs
        from fuser.runtime.reference import ReferenceExecutor
        from fuser.runtime.segmented import _as_declared

        values: dict[int, Any] = dict(zip(self.inputs(), inputs))
        user_inputs = set(self.inputs())
        maps = [self.segment_index_space_maps[s] for s in self._segments]
        if self._extra_state_vals:
            # scalars a segment needs that are no state here, e.g. an extent of an input
            # the segment does not read: evaluated from this call's inputs
            binding = bind_inputs(self._fusion, inputs)
            ev = ReferenceExecutor(self._fusion, binding.device)
            ev.bind(binding)
            for k, v in self._extra_state_vals.items():
                values[k] = ev.value(v)
        last: dict[int, int] = {}
        for n, (s, m) in enumerate(zip(self._segments, maps)):
            for i in s.inputs():
                last[m[i]] = n
        keep = set(self.outputs()) | set(self.inputs())
        for n, (s, m) in enumerate(zip(self._segments, maps)):
            # intermediates laid out as the segment declares them (dense, or stride 0 where expanded)
            args = [values[m[i]] if m[i] in user_inputs else _as_declared(values[m[i]], v)
                    for i, v in zip(s.inputs(), s.fusion.inputs)]
            outs = s.execute(args, device=device)
            values.update((m[o], x) for o, x in zip(s.outputs(), outs))
            for k in [k for k, at in last.items() if at == n and k not in keep]:
                values.pop(k, None)
        return [values[o] for o in self.outputs()]


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


def _flatten_inputs(inputs: Sequence[Any]) -> list[Any]:
    """nvFuser's execute spreads a list or tuple input (a vector of sizes) into scalar inputs."""
    flat: list[Any] = []
    for x in inputs:
        if isinstance(x, (list, tuple)):
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


_KNOWN_OPTIONS = frozenset(
    {"kernel_profile", "fast_math", "id_model", "warn_register_spill", "matmul_expr_eval", "expr_simplify", "host_ir_lowering"}
)


def _check_options(enable: Sequence[str], disable: Sequence[str]) -> None:
    import warnings

    for name in (*enable, *disable):
        if name not in _KNOWN_OPTIONS:
            warnings.warn(f"fuser: ignoring unknown option {name!r}", stacklevel=3)


__all__ = ["FusionDefinition", "StateRef"]
