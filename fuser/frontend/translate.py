"""Fusion IR back to a FusionDefinition: nvFuser's `translateFusion`.

The segmenter hands each segment (a `Fusion` cut out with `Fusion.clone_subgraph`) back
to the user as a printable, executable definition (nvFuser's `fd.segment(inputs)`, seed
003). `definition_from_fusion` walks the fusion and re-issues one `fd.ops` call per
tensor expression:

* inputs first, in `fusion.inputs` order: tensors with `fd.define_tensor` (shape -1 for
  a symbolic extent, 1 for a broadcast, n for a constant; an expanded broadcast is -1 or
  n with contiguity None; `stride_order` when the allocation domain is not the logical
  order), scalars with `fd.define_scalar(None, dtype=...)`;
* then each tensor expression of `fusion.exprs()` in topological order;
* then `fd.add_output` per output (with `alias_input=` where the fusion aliases it).

Scalars are defined where an op first needs them: constants with `fd.define_scalar`, the
extents of input tensors with `fd.ops.size`, computed scalars (extent arithmetic of
reshape, slice, pad ...) with the scalar `fd.ops` that compute them. Integer division and
ceil-division, which `fd.ops` does not offer on integers, become a division in double
followed by trunc / ceil and a cast back.

Every op is issued in a canonical form whose IR translates back to the same calls, so
translating a translated definition's fusion prints the same definition again.
"""
from __future__ import annotations

from typing import Any, Sequence

from fuser.ir import (
    AtenOp,
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CatOp,
    DataType,
    ExpandOp,
    FullOp,
    Fusion,
    GatherOp,
    IndexSelectOp,
    IotaOp,
    LinearOp,
    LoadStoreOp,
    LoadStoreOpType,
    MatmulOp,
    PadOp,
    ReductionOp,
    ReshapeOp,
    RNGOp,
    RNGOpType,
    ScanOp,
    ScatterOp,
    SelectOp,
    SliceOp,
    SqueezeOp,
    TensorView,
    TernaryOp,
    UnaryOp,
    UnaryOpType,
    Val,
    WelfordOp,
)
from fuser.ir import Scalar as IrScalar
from fuser.ir.dispatch import ExprDispatcher

from .fusion_definition import FusionDefinition
from .handles import Scalar, Tensor, Vector, _State


class TranslationError(ValueError):
    """The fusion holds something that cannot be expressed as a FusionDefinition."""


def definition_from_fusion(fusion: Fusion) -> tuple[FusionDefinition, list[Val | None]]:
    """A closed FusionDefinition whose fusion computes what `fusion` computes, and for each
    of its state indices the Val of `fusion` that state stands for (None when none)."""
    if not isinstance(fusion, Fusion):
        raise TypeError(f"definition_from_fusion needs a Fusion, got {type(fusion).__name__}")
    fd = FusionDefinition()
    translator = _Translator(fusion, fd)
    with fd:
        translator.run()
    return fd, translator.state_map()


#: the expressions that may compute a scalar (constants' arithmetic, extent arithmetic)
_SCALAR_EXPRS = (UnaryOp, BinaryOp, TernaryOp)

_REDUCTION_NAMES = {
    BinaryOpType.Add: "sum",
    BinaryOpType.Mul: "prod",
    BinaryOpType.Max: "max",
    BinaryOpType.Min: "min",
}


class _Translator(ExprDispatcher):
    """Re-issues the IR of `fusion` as calls on the open FusionDefinition `fd`."""

    dispatch_error = TranslationError

    def __init__(self, fusion: Fusion, fd: FusionDefinition) -> None:
        self.fusion = fusion
        self.fd = fd
        self.handles: dict[Val, _State] = {}  # original Val -> handle of the new definition
        self.origin: dict[int, Val] = {}  # state index -> original Val
        # symbolic extents of the input tensors -> (handle, dim) that fd.ops.size reads
        self.extent_src: dict[IrScalar, tuple[Tensor, int]] = {}
        #: inputs whose logical domain adds broadcasts to their root, defined as the root
        self.root_inputs: list[tuple[TensorView, Tensor]] = []

    @property
    def ops(self):
        return self.fd.ops

    # --- driver ---------------------------------------------------------------------------
    def run(self) -> None:
        for v in self.fusion.inputs:
            if isinstance(v, TensorView):
                self._define_tensor(v)
            elif isinstance(v, IrScalar):
                self.bind(v, self.fd.define_scalar(None, dtype=v.dtype))
            else:
                raise TranslationError(f"fusion input {v!r} is neither a tensor nor a scalar")
        for tv, h in self.root_inputs:  # after every input, as a definition reads
            added = tv.domain.added_broadcasts()
            self.handles[tv] = self.ops.broadcast(h, [i in added for i in tv.logical_no_reductions()])
        for e in self.fusion.exprs():
            if all(isinstance(o, IrScalar) for o in e.outputs):
                continue  # scalar arithmetic: defined where an op first needs it
            if all(o in self.handles for o in e.outputs):
                continue
            self.dispatch(e)
        for v in self.fusion.outputs:
            h = self.operand(v)
            alias = self.fusion.output_aliases.get(v)
            if alias is not None:
                self.fd.add_output(h, alias_input=self.handles[alias])
            else:
                self.fd.add_output(h)

    def state_map(self) -> list[Val | None]:
        return [self.origin.get(k) for k in range(len(self.fd._state_vals))]

    # --- values -----------------------------------------------------------------------------
    def bind(self, v: Val, h: _State) -> _State:
        """Record that handle `h` stands for the original `v` (casting when dtypes differ)."""
        if isinstance(v, TensorView):
            if not isinstance(h, Tensor) or h.val.ndim != v.ndim:
                raise TranslationError(f"translating {v!r} gave {h!r} of another kind or rank")
        elif not isinstance(h, Scalar):
            raise TranslationError(f"translating {v!r} gave {h!r}, not a scalar")
        if h.dtype is not v.dtype:
            h = self.ops.cast(h, dtype=v.dtype)
        if v in self.handles:
            raise TranslationError(f"{v!r} is defined twice")
        self.handles[v] = h
        self.origin[h.index] = v
        return h

    def tensor(self, v: Val) -> Tensor:
        h = self.handles.get(v)
        if h is None:
            raise TranslationError(f"{v!r} is used before it is defined")
        return h  # type: ignore[return-value]

    def operand(self, v: Val) -> _State:
        if isinstance(v, TensorView):
            return self.tensor(v)
        if isinstance(v, IrScalar):
            return self.scalar(v)
        raise TranslationError(f"{v!r} is neither a tensor nor a scalar")

    def scalar(self, v: IrScalar) -> Scalar:
        """A handle for scalar `v`, defining it (and what it is computed from) on first use."""
        h = self.handles.get(v)
        if h is not None:
            return h  # type: ignore[return-value]
        if v.is_const:
            return self.bind(v, self.fd.define_scalar(v.value, dtype=v.dtype))
        src = self.extent_src.get(v)
        if src is not None:
            return self.bind(v, self.ops.size(src[0], dim=src[1]))
        d = v.definition
        if d is None:
            raise TranslationError(
                f"the scalar {v!r} is neither a constant, an input, an input tensor's extent, nor computed "
                "from those, so the definition cannot compute it"
            )
        if type(d) not in _SCALAR_EXPRS:
            raise TranslationError(f"no FusionDefinition op computes the scalar {v!r} ({type(d).__name__})")
        self.dispatch(d)
        return self.handles[v]  # type: ignore[return-value]

    def vector(self, scalars: Sequence[IrScalar]) -> Vector:
        handles = [self.scalar(s) for s in scalars]
        return self.fd.define_vector(handles, dtype=DataType.Int)

    # --- inputs -------------------------------------------------------------------------------
    def _define_tensor(self, tv: TensorView) -> None:
        # an input whose logical domain adds broadcasts to its root (seed 000) is passed as
        # its root: defined so, then broadcast (what the frontend can say)
        ids = tv.tensor_axes()
        added = tv.domain.added_broadcasts()
        for i in added:
            if i.has_expanded_extent:
                raise TranslationError(f"input {tv!r} adds the expanded broadcast {i!r} to its root")
        shape: list[int] = []
        for i in ids:
            if i.is_broadcast and not i.has_expanded_extent:
                shape.append(1)
            else:
                e = i.user_extent
                shape.append(int(e.value) if e.is_const else -1)
        pos = {i: d for d, i in enumerate(ids)}
        alloc = [(i, c) for i, c in zip(tv.allocation, tv.domain.contiguity) if not i.is_reduction and i not in added]
        if sorted(pos[i] for i, _ in alloc) != list(range(len(ids))):
            kind = "root" if added else "logical"
            raise TranslationError(f"the allocation domain of input {tv!r} is not a permutation of its {kind} domain")
        contiguity: list[bool | None] = []
        for i, c in alloc:
            if i.is_broadcast or shape[pos[i]] == 1:
                contiguity.append(None)
            else:
                # an intermediate made an input is a freshly allocated (contiguous) tensor
                contiguity.append(True if c is None else bool(c))
        order = [pos[i] for i, _ in alloc]
        stride_order = None
        if order != sorted(order):
            n = len(order)
            stride_order = [0] * n
            for p, d in enumerate(order):
                stride_order[d] = n - 1 - p
        h = self.fd.define_tensor(
            shape=shape,
            contiguity=contiguity,
            dtype=tv.dtype,
            is_cpu=bool(getattr(tv, "is_cpu_scalar", False)),
            stride_order=stride_order,
        )
        if added:
            self.origin[h.index] = tv  # the input the segment's caller passes
            self.root_inputs.append((tv, h))
        else:
            self.bind(tv, h)
        for d, i in enumerate(ids):
            e = i.user_extent
            if not e.is_const:
                self.extent_src.setdefault(e, (h, d))

    # --- composites --------------------------------------------------------------------------------
    def int_div(self, e: BinaryOp, ceil: bool) -> _State:
        """Integer a / b rounded up (ceilDiv, which fd.ops lacks) or truncated, through
        double: exact for the magnitudes of extents (below 2**53)."""
        a = self.ops.cast(self.operand(e.inputs[0]), dtype=DataType.Double)
        b = self.ops.cast(self.operand(e.inputs[1]), dtype=DataType.Double)
        q = self.ops.div(a, b)
        q = self.ops.ceil(q) if ceil else self.ops.trunc(q)
        return self.ops.cast(q, dtype=e.output.dtype)

    # --- expressions (fuser.ir.dispatch): each re-issued as fd.ops calls bound to its outputs
    def handle_unary(self, e: UnaryOp) -> None:
        x = self.operand(e.input)
        if e.op_type is UnaryOpType.Cast:
            h = self.ops.cast(x, dtype=e.output.dtype)
        else:
            h = getattr(self.ops, e.op_type.value)(x)
        self.bind(e.output, h)

    def handle_binary(self, e: BinaryOp) -> None:
        op = e.op_type
        if op is BinaryOpType.CeilDiv:
            self.bind(e.output, self.int_div(e, ceil=True))
            return
        a = self.operand(e.inputs[0])
        b = self.operand(e.inputs[1])
        name = op.value
        if op is BinaryOpType.Div and not e.output.dtype.is_integral and all(
            v.dtype.is_integral or v.dtype.is_boolean for v in e.inputs
        ):
            name = "truediv"  # integers divided into a float: `div` would truncate
        self.bind(e.output, getattr(self.ops, name)(a, b))

    def handle_ternary(self, e: TernaryOp) -> None:
        args = [self.operand(v) for v in e.inputs]
        self.bind(e.output, getattr(self.ops, e.op_type.value)(*args))

    def handle_reduction(self, e: ReductionOp) -> None:
        name = _REDUCTION_NAMES.get(e.op_type)
        if name is None:
            raise TranslationError(f"no FusionDefinition reduction for {e.op_type}")
        x = self.tensor(e.input)
        out = e.output
        self.bind(out, getattr(self.ops, name)(x, dims=_reduction_dims(out), keepdim=False, dtype=out.dtype))

    def handle_welford(self, e: WelfordOp) -> None:
        x = self.tensor(e.input)
        outs = self.ops.welford(x, dims=_reduction_dims(e.outputs[0]))
        for v, h in zip(e.outputs, outs):
            self.bind(v, h)

    def handle_scan(self, e: ScanOp) -> None:
        if e.op_type is not BinaryOpType.Add:
            raise TranslationError(f"no FusionDefinition scan for {e.op_type}")
        self.bind(e.output, self.ops.cumsum(self.tensor(e.input), dim=e.dim))

    def handle_broadcast(self, e: BroadcastOp) -> None:
        self.bind(e.output, self.ops.broadcast(self.tensor(e.input), is_broadcast_dim=list(e.flags)))

    def handle_squeeze(self, e: SqueezeOp) -> None:
        ids = e.input.logical_no_reductions()
        dims = [k for k, f in enumerate(e.flags) if f]
        expanded = any(ids[k].has_expanded_extent for k in dims)
        self.bind(e.output, self.ops.squeeze(self.tensor(e.input), dims=dims, squeeze_expanded=expanded))

    def handle_expand(self, e: ExpandOp) -> None:
        x = self.tensor(e.input)
        # the ExpandOp's extents: the target of each axis (an axis kept as is has its own extent)
        shape = self.vector(e.inputs[1:])
        self.bind(e.output, self.ops.expand(x, shape=shape))

    def handle_reshape(self, e: ReshapeOp) -> None:
        x = self.tensor(e.input)
        shape = self.vector([i.user_extent for i in e.output.logical_no_reductions()])
        self.bind(e.output, self.ops.reshape(x, new_shape=shape))

    def handle_slice(self, e: SliceOp) -> None:
        x = self.tensor(e.input)
        starts, stops, steps = [], [], []
        for start, stop, step in e.ranges:
            # slice stores max(stop, start) as the stop; the op computes that again
            d = stop.definition
            if isinstance(d, BinaryOp) and d.op_type is BinaryOpType.Max and d.inputs[1] is start:
                stop = d.inputs[0]
            starts.append(start)
            stops.append(stop)
            steps.append(step)
        vs = self.vector(starts)
        ve = self.vector(stops)
        kwargs: dict[str, Any] = {}
        if not all(s.is_const and s.value == 1 for s in steps):
            kwargs["strides"] = self.vector(steps)
        self.bind(e.output, self.ops.slice(x, start_indices=vs, end_indices=ve, manual_normalization=True, **kwargs))

    def handle_pad(self, e: PadOp) -> None:
        x = self.tensor(e.input)
        pairs = list(e.pad_widths)
        first = 0  # leading axes without padding need no entry
        while first < len(pairs) and all(s.is_const and s.value == 0 for s in pairs[first]):
            first += 1
        widths = []
        for left, right in reversed(pairs[first:]):
            widths += [left, right]
        vec = self.vector(widths)
        value = self.scalar(e.inputs[1])
        self.bind(e.output, self.ops.pad(x, vec, value=value))

    def handle_cat(self, e: CatOp) -> None:
        self.bind(e.output, self.ops.cat([self.tensor(v) for v in e.inputs], dim=e.dim))

    def handle_load_store(self, e: LoadStoreOp) -> None:
        x = self.tensor(e.input)
        out = e.output
        dom = out.domain
        if e.op_type is LoadStoreOpType.SegmenterSet:
            h = self.ops.segment_set(x)
        elif dom.root is not None and dom.allocation is not None:
            raise TranslationError(f"{out!r} is both permuted and laid out in another order; no single op does that")
        elif dom.root is not None:
            h = self.ops.permute(x, dims=[dom.root.index(i) for i in dom.logical])
        elif dom.allocation is not None:
            alloc = [i for i in dom.allocation if not i.is_reduction]
            n = len(alloc)
            h = self.ops.stride_order(x, stride_order=[n - 1 - alloc.index(i) for i in out.logical_no_reductions()])
        else:
            h = self.ops.set(x)
        self.bind(out, h)

    def handle_full(self, e: FullOp) -> None:
        shape = self.vector(e.inputs[:-1])
        fill = self.scalar(e.inputs[-1])
        self.bind(e.output, self.ops.full(shape=shape, fill_value=fill, dtype=e.output.dtype))

    def handle_iota(self, e: IotaOp) -> None:
        length, start, step = (self.scalar(v) for v in e.inputs)
        self.bind(e.output, self.ops.iota(length, start, step, dtype=e.output.dtype))

    def handle_rng(self, e: RNGOp) -> None:
        n = len(e.output.logical)
        p1, p2 = self.scalar(e.inputs[n]), self.scalar(e.inputs[n + 1])
        shape = self.vector(e.inputs[:n])
        seed = offset = None
        if e.has_seed:
            seed, offset = self.scalar(e.inputs[n + 2]), self.scalar(e.inputs[n + 3])
        name = "uniform" if e.rng_type is RNGOpType.Uniform else "normal"
        h = getattr(self.ops, name)(p1, p2, shape=shape, rng_seed=seed, rng_offset=offset, dtype=e.output.dtype)
        self.bind(e.output, h)

    def handle_select(self, e: SelectOp) -> None:
        x, index = self.tensor(e.inputs[0]), self.scalar(e.inputs[1])
        self.bind(e.output, self.ops.select(x, index, dim=e.dim))

    def handle_index_select(self, e: IndexSelectOp) -> None:
        x, index = self.tensor(e.inputs[0]), self.tensor(e.inputs[1])
        self.bind(e.output, self.ops.index_select(x, index, dim=e.dim))

    def handle_gather(self, e: GatherOp) -> None:
        x, index = self.tensor(e.inputs[0]), self.tensor(e.inputs[1])
        op = self.ops.take_along_axis if e.exact_sizes else self.ops.gather
        self.bind(e.output, op(x, index, dim=e.dim))

    def handle_scatter(self, e: ScatterOp) -> None:
        x, index, src = (self.tensor(v) for v in e.inputs)
        self.bind(e.output, self.ops.scatter(x, index, src, dim=e.dim))

    def handle_matmul(self, e: MatmulOp) -> None:
        a, b = (self.tensor(v) for v in e.inputs)
        self.bind(e.output, self.ops.matmul(a, b))

    def handle_linear(self, e: LinearOp) -> None:
        x, w = self.tensor(e.inputs[0]), self.tensor(e.inputs[1])
        bias = self.tensor(e.inputs[2]) if len(e.inputs) > 2 else None
        self.bind(e.output, self.ops.linear(x, w, bias=bias))

    def handle_aten(self, e: AtenOp) -> None:
        kwargs = dict(e.params)
        kwargs.update((name, self.operand(v)) for name, v in zip(e.arg_names, e.inputs))
        result = getattr(self.ops, e.name)(**kwargs)
        for v, h in zip(e.outputs, result if isinstance(result, tuple) else (result,)):
            self.bind(v, h)


def _reduction_dims(tv: TensorView) -> list[int]:
    return [k for k, i in enumerate(tv.logical) if i.is_reduction]


__all__ = ["definition_from_fusion", "TranslationError"]
