"""The reference executor: evaluates any Fusion with PyTorch ops, on the inputs' device.

Numerics are a fusion compiler's: half, bfloat16 and fp8 arithmetic happens in float32 and
is rounded once at the end of each op; reductions accumulate in float32 (float64 for
double, int64 for integers). It is the test oracle, the CPU path, and the executor of
`expr_eval` segments.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from fuser.ir import (
    AtenOp,
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CatOp,
    DataType,
    ExpandOp,
    Expr,
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
    Scalar,
    ScanOp,
    ScatterOp,
    SelectOp,
    SliceOp,
    SqueezeOp,
    TensorView,
    TernaryOp,
    TernaryOpType,
    UnaryOp,
    UnaryOpType,
    Val,
    WelfordOp,
)
from fuser.ir.dispatch import ExprDispatcher

from . import philox
from .binding import Binding, bind_inputs


class EvaluationError(RuntimeError):
    """An expression could not be evaluated on the given inputs."""


def _erfcinv(x: torch.Tensor) -> torch.Tensor:
    return torch.erfinv(1 - x)


_UNARY: dict[UnaryOpType, Callable[[torch.Tensor], torch.Tensor]] = {
    UnaryOpType.Abs: torch.abs,
    UnaryOpType.Acos: torch.acos,
    UnaryOpType.Acosh: torch.acosh,
    UnaryOpType.Asin: torch.asin,
    UnaryOpType.Asinh: torch.asinh,
    UnaryOpType.Atan: torch.atan,
    UnaryOpType.Atanh: torch.atanh,
    UnaryOpType.BitwiseNot: torch.bitwise_not,
    UnaryOpType.Ceil: torch.ceil,
    UnaryOpType.Cos: torch.cos,
    UnaryOpType.Cosh: torch.cosh,
    UnaryOpType.Exp: torch.exp,
    UnaryOpType.Exp2: torch.exp2,
    UnaryOpType.Expm1: torch.expm1,
    UnaryOpType.Erf: torch.erf,
    UnaryOpType.Erfc: torch.erfc,
    UnaryOpType.Erfinv: torch.erfinv,
    UnaryOpType.Erfcinv: _erfcinv,
    UnaryOpType.Floor: torch.floor,
    UnaryOpType.Frac: torch.frac,
    UnaryOpType.Imag: torch.imag,
    UnaryOpType.IsFinite: torch.isfinite,
    UnaryOpType.IsInf: torch.isinf,
    UnaryOpType.IsNan: torch.isnan,
    UnaryOpType.IsNegInf: torch.isneginf,
    UnaryOpType.IsPosInf: torch.isposinf,
    UnaryOpType.IsReal: torch.isreal,
    UnaryOpType.Lgamma: torch.lgamma,
    UnaryOpType.Log: torch.log,
    UnaryOpType.Log10: torch.log10,
    UnaryOpType.Log1p: torch.log1p,
    UnaryOpType.Log2: torch.log2,
    UnaryOpType.LogicalNot: torch.logical_not,
    UnaryOpType.Neg: torch.neg,
    UnaryOpType.Real: torch.real,
    UnaryOpType.Reciprocal: torch.reciprocal,
    UnaryOpType.Relu: torch.relu,
    UnaryOpType.Round: torch.round,
    UnaryOpType.Rsqrt: torch.rsqrt,
    UnaryOpType.Sigmoid: torch.sigmoid,
    UnaryOpType.Sign: torch.sign,
    UnaryOpType.Signbit: torch.signbit,
    UnaryOpType.Silu: F.silu,
    UnaryOpType.Sin: torch.sin,
    UnaryOpType.Sinh: torch.sinh,
    UnaryOpType.Sqrt: torch.sqrt,
    UnaryOpType.Tan: torch.tan,
    UnaryOpType.Tanh: torch.tanh,
    UnaryOpType.Trunc: torch.trunc,
}


def _logical_rshift(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # shift in the promoted type: an int32 beside an int64 is sign-extended first
    dt = torch.result_type(a, b)
    a = torch.as_tensor(a, device=b.device if isinstance(b, torch.Tensor) else None).to(dt)
    b = torch.as_tensor(b, device=a.device).to(dt)
    a, b = torch.broadcast_tensors(a, b)
    bits = torch.iinfo(dt).bits
    safe = torch.clamp(b, 1, bits - 1)
    mask = (torch.ones_like(a) << (bits - safe)) - 1  # wraps to all-ones below the shifted-in zeros
    shifted = (a >> safe) & mask
    return torch.where(b <= 0, a, torch.where(b >= bits, torch.zeros_like(a), shifted))


def _maximum(a, b):
    return torch.maximum(*_as_tensors(a, b))


def _minimum(a, b):
    return torch.minimum(*_as_tensors(a, b))


def _as_tensors(a, b):
    if not isinstance(a, torch.Tensor):
        a = _filled(a, b.device, b.dtype if _same_kind(a, b) else None)
    if not isinstance(b, torch.Tensor):
        b = _filled(b, a.device, a.dtype if _same_kind(b, a) else None)
    return a, b


def _filled(x: Any, device: torch.device, dtype: torch.dtype | None) -> torch.Tensor:
    """A 0-dim tensor of the Python number `x` on `device`, made by a fill kernel there: a
    host-to-device copy (torch.tensor(x, device=...)) is not allowed in CUDA graph capture."""
    if dtype is None:
        return torch.full((), x, device=device)
    return torch.full((), x, dtype=dtype, device=device)


def _same_kind(x: Any, t: torch.Tensor) -> bool:
    """Whether the Python number `x` is of `t`'s category or lower (so it adopts t's dtype)."""
    return _category(type(x)) <= _category(t.dtype)


def _category(t: Any) -> int:
    if t in (bool, torch.bool):
        return 0
    if t is int or (isinstance(t, torch.dtype) and not t.is_floating_point and not t.is_complex):
        return 1
    if t is float or (isinstance(t, torch.dtype) and t.is_floating_point):
        return 2
    return 3


_BINARY: dict[BinaryOpType, Callable[[Any, Any], torch.Tensor]] = {
    BinaryOpType.Add: torch.add,
    BinaryOpType.Sub: torch.sub,
    BinaryOpType.Mul: torch.mul,
    BinaryOpType.Div: torch.true_divide,
    BinaryOpType.Mod: torch.fmod,
    BinaryOpType.Remainder: torch.remainder,
    BinaryOpType.Fmod: torch.fmod,
    BinaryOpType.Pow: torch.pow,
    BinaryOpType.Atan2: lambda a, b: torch.atan2(*_as_tensors(a, b)),
    BinaryOpType.Max: _maximum,
    BinaryOpType.Min: _minimum,
    BinaryOpType.Eq: torch.eq,
    BinaryOpType.Ne: torch.ne,
    BinaryOpType.Lt: torch.lt,
    BinaryOpType.Le: torch.le,
    BinaryOpType.Gt: torch.gt,
    BinaryOpType.Ge: torch.ge,
    BinaryOpType.LogicalAnd: lambda a, b: torch.logical_and(*_as_tensors(a, b)),
    BinaryOpType.LogicalOr: lambda a, b: torch.logical_or(*_as_tensors(a, b)),
    BinaryOpType.BitwiseAnd: torch.bitwise_and,
    BinaryOpType.BitwiseOr: torch.bitwise_or,
    BinaryOpType.BitwiseXor: torch.bitwise_xor,
    BinaryOpType.Lshift: torch.bitwise_left_shift,
    BinaryOpType.Rshift: torch.bitwise_right_shift,
    BinaryOpType.LogicalRshift: _logical_rshift,
    BinaryOpType.Gcd: lambda a, b: torch.gcd(*_as_tensors(a, b)),
    BinaryOpType.Nextafter: lambda a, b: torch.nextafter(*_as_tensors(a, b)),
    BinaryOpType.CeilDiv: lambda a, b: -((-a) // b),
}


class ReferenceExecutor(ExprDispatcher):
    """Evaluates one Fusion on concrete inputs; values live in `env` keyed by IR Val."""

    dispatch_error = EvaluationError

    def __init__(self, fusion: Fusion, device: torch.device, philox_state: tuple[int, int] | None = None) -> None:
        self.fusion = fusion
        self.device = device
        self.env: dict[Val, Any] = {}
        #: the execution's (seed, base offset) of unseeded RNG ops: given by the runner of a
        #: segmented execution (its kernels use the same), else drawn at the first such op
        self.philox_state = philox_state

    def unseeded_philox(self) -> tuple[int, int]:
        """(seed, base offset) of this execution's unseeded RNG ops, drawn once."""
        if self.philox_state is None:
            self.philox_state = philox.draw(self.device, philox.streams(self.fusion))
        if isinstance(self.philox_state, torch.Tensor):
            raise EvaluationError("random numbers on the reference executor cannot be captured in a CUDA graph: its "
                                  "Philox reads the seed on the host (run the RNG op in a generated kernel, or "
                                  "execute outside the capture)")
        return self.philox_state

    # --- values -------------------------------------------------------------------------
    def bind(self, binding: Binding) -> None:
        """Bind the fusion's inputs and their symbolic extents from a validated Binding."""
        device = self.device
        self.env.update((v, logical_input(v, x, device)) for v, x in zip(self.fusion.inputs, binding.tensors))
        self.env.update(binding.extents)

    def value(self, v: Val) -> Any:
        """The value of `v`: bound, constant, or computed from its definition (extents)."""
        got = self.env.get(v, _MISSING)
        if got is not _MISSING:
            return got
        if isinstance(v, Scalar):
            if v.is_const:
                return v.value
            if v.definition is not None:
                self.run_expr(v.definition)
                return self.env[v]
        raise EvaluationError(f"{v!r} has no value: it is neither an input, a constant, nor computed")

    def run(self) -> list[Any]:
        exprs, dead_after = _free_plan(self.fusion)
        for k, e in enumerate(exprs):
            self.run_expr(e)
            # free intermediates after their last use: full-size fusions would not fit otherwise
            for v in dead_after.get(k, ()):
                self.env.pop(v, None)
        return [self.value(v) for v in self.fusion.outputs]

    def run_expr(self, e: Expr) -> None:
        handler = self.handler_for(e)
        args = [self.value(v) for v in e.inputs]
        if all(isinstance(v, Scalar) for v in e.outputs) and not any(isinstance(v, TensorView) for v in e.inputs):
            # scalar arithmetic goes through the same tensor code on 0-dim tensors
            args = [torch.tensor(a, dtype=v.dtype.torch) if not isinstance(a, torch.Tensor) else a for a, v in zip(args, e.inputs)]
            outs = handler(self, e, args)
            for v, o in zip(e.outputs, outs):
                self.env[v] = o.to(v.dtype.torch).item() if isinstance(o, torch.Tensor) else o
            return
        outs = handler(self, e, args)
        for v, o in zip(e.outputs, outs):
            self.env[v] = o

    def evaluate(self, e: Expr, args: list) -> list:
        """`e`'s outputs for the input values `args` (which may be other than its own
        inputs' values: a stream loop's slices), without binding them."""
        return self.handler_for(e)(self, e, args)

    # --- expressions (fuser.ir.dispatch): the expr and its inputs' values -> its outputs' values
    def handle_unary(self, e: UnaryOp, args: list) -> list:
        (x,) = args
        out = e.output.dtype
        if e.op_type is UnaryOpType.Cast:
            return [_to(x, out)]
        x = _compute(x)
        if out.is_floating and not (x.dtype.is_floating_point or x.dtype.is_complex):
            x = x.to(torch.float32 if out.is_reduced_float else out.torch)
        return [_to(_UNARY[e.op_type](x), out)]

    def handle_binary(self, e: BinaryOp, args: list) -> list:
        a, b = args
        out = e.output.dtype
        if e.op_type is BinaryOpType.Nextafter:  # the next representable value of the actual type
            return [_to(_BINARY[e.op_type](*_as_tensors(a, b)), out)]
        a, b = _compute(a), _compute(b)
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            # a Python number beside a tensor: many torch functions take it only second
            a, b = _as_tensors(a, b)
        if e.op_type is BinaryOpType.Div and (out.is_integral or out.is_boolean):
            # nvFuser's integer div (`div`, extent arithmetic): C's truncation toward zero
            return [_to(torch.div(a, b, rounding_mode="trunc"), out)]
        if e.op_type is BinaryOpType.Div and out.is_floating and not out.is_reduced_float:
            a, b = _as_float(a, out), _as_float(b, out)
        return [_to(_BINARY[e.op_type](a, b), out)]

    def handle_ternary(self, e: TernaryOp, args: list) -> list:
        out = e.output.dtype
        a, b, c = (_compute(x) for x in args)
        ref = next(x for x in (a, b, c) if isinstance(x, torch.Tensor))
        if e.op_type is TernaryOpType.Where:
            cdt = torch.float32 if out.is_reduced_float else out.torch
            b = b.to(cdt) if isinstance(b, torch.Tensor) else _filled(b, ref.device, cdt)
            c = c.to(cdt) if isinstance(c, torch.Tensor) else _filled(c, ref.device, cdt)
            # a scalar condition (a Bool input) picks one operand everywhere
            r = torch.where(a if isinstance(a, torch.Tensor) else torch.tensor(bool(a), device=ref.device), b, c)
        elif e.op_type is TernaryOpType.Lerp:
            cdt = torch.float32 if out.is_reduced_float else out.torch
            a, b = (torch.as_tensor(x, device=ref.device).to(cdt) for x in (a, b))
            a, b = torch.broadcast_tensors(a, b)
            w = c.to(cdt) if isinstance(c, torch.Tensor) else c
            r = torch.lerp(a, b, w)
        elif e.op_type is TernaryOpType.Clamp:
            cdt = torch.float32 if out.is_reduced_float else out.torch
            a, b, c = (torch.as_tensor(x, device=ref.device).to(cdt) for x in (a, b, c))
            r = torch.minimum(torch.maximum(a, b), c)
            r = torch.where(torch.isnan(a), a, r) if r.dtype.is_floating_point else r
        else:  # threshold: x if x > threshold else value
            r = torch.where(a > b, a, torch.as_tensor(c, device=ref.device).to(a.dtype))
        return [_to(r, out)]

    def handle_reduction(self, e: ReductionOp, args: list) -> list:
        (x,) = args
        out = e.output.dtype
        dims = _reduced_dims(e.output)
        if not dims:
            return [x.to(out.torch).clone()]
        acc = _acc_dtype(out)
        if e.op_type is BinaryOpType.Add:
            r = torch.sum(x.to(acc), dims)
        elif e.op_type is BinaryOpType.Mul:
            r = x.to(acc)
            for d in reversed(dims):
                r = torch.prod(r, d)
        else:
            kept = [s for k, s in enumerate(x.shape) if k not in dims]
            if any(x.shape[d] == 0 for d in dims):
                r = torch.full(kept, e.init.value, dtype=out.torch, device=x.device)
            else:
                fn = torch.amax if e.op_type is BinaryOpType.Max else torch.amin
                r = fn(x.to(acc) if x.dtype is torch.bool else x, dims)
        return [r.to(out.torch)]

    def handle_welford(self, e: WelfordOp, args: list) -> list:
        (x,) = args
        dims = _reduced_dims(e.outputs[0])
        acc = _acc_dtype(e.outputs[0].dtype)
        xf = x.to(acc)
        n = math.prod(x.shape[d] for d in dims)
        if dims and xf.numel():
            # torch.var_mean, not a mean then squares about it: a mean a few ulps off adds its
            # error squared to each term (float [2^20] of ~4.2e5, variance 0.24: 1.9% high)
            var, mean = torch.var_mean(xf, dims, correction=0)
            var_sum = var * n
        elif dims:
            mean = xf.mean(dims, keepdim=True)
            var_sum = ((xf - mean) ** 2).sum(dims)
            mean = mean.squeeze(dims) if hasattr(mean, "squeeze") else mean
            mean = mean.reshape(var_sum.shape)
        else:
            mean, var_sum = xf.clone(), torch.zeros_like(xf)
        count = torch.full(var_sum.shape, n, dtype=torch.int64, device=x.device)
        return [mean.to(e.outputs[0].dtype.torch), var_sum.to(e.outputs[1].dtype.torch), count]

    def handle_scan(self, e: ScanOp, args: list) -> list:
        (x,) = args
        out = e.output.dtype
        return [torch.cumsum(x.to(_acc_dtype(out)), e.dim).to(out.torch)]

    def handle_broadcast(self, e: BroadcastOp, args: list) -> list:
        (x,) = args
        shape, it = [], iter(x.shape)
        for f in e.flags:
            shape.append(1 if f else next(it))
        return [x.reshape(shape) if x.is_contiguous() else _unsqueeze_all(x, e.flags)]

    def handle_squeeze(self, e: SqueezeOp, args: list) -> list:
        (x,) = args
        index = []
        ids = e.input.logical_no_reductions()
        for k, f in enumerate(e.flags):
            # an expanded axis holds copies of one value, whether or not this tensor stores them
            if f and x.shape[k] != 1 and x.stride(k) != 0 and not ids[k].has_expanded_extent:
                raise EvaluationError(f"squeeze of dimension {k} of {e.input!r}, whose size is {x.shape[k]}, not 1")
            index.append(0 if f else slice(None))
        if any(f and x.shape[k] == 0 for k, f in enumerate(e.flags)):
            # no copy to take: any value will do (a reduction over the axis scales it by 0)
            return [x.new_zeros([n for n, f in zip(x.shape, e.flags) if not f])]
        return [x[tuple(index)]]

    def handle_expand(self, e: ExpandOp, args: list) -> list:
        x = args[0]
        sizes = [int(s) if i.is_broadcast else -1 for s, i in zip(args[1:], e.output.logical)]
        return [x.expand(sizes)]

    def handle_reshape(self, e: ReshapeOp, args: list) -> list:
        x = args[0]
        shape = [int(self.value(i.user_extent)) for i in e.output.logical]
        return [x.reshape(shape)]

    def handle_slice(self, e: SliceOp, args: list) -> list:
        x = args[0]
        index = tuple(slice(int(self.value(a)), int(self.value(b)), int(self.value(c))) for a, b, c in e.ranges)
        return [x[index]]

    def handle_pad(self, e: PadOp, args: list) -> list:
        x, value = args[0], args[1]
        widths = [(int(self.value(a)), int(self.value(b))) for a, b in e.pad_widths]
        out_shape = [s + a + b for s, (a, b) in zip(x.shape, widths)]
        if any(s < 0 for s in out_shape):
            raise EvaluationError(f"pad of {e.input!r} gives a negative extent: {out_shape}")
        out = torch.full(out_shape, value, dtype=x.dtype, device=x.device)
        src, dst = [], []
        for size, osize, (left, _) in zip(x.shape, out_shape, widths):
            s0, d0 = max(-left, 0), max(left, 0)
            n = max(min(size - s0, osize - d0), 0)
            src.append(slice(s0, s0 + n))
            dst.append(slice(d0, d0 + n))
        out[tuple(dst)] = x[tuple(src)]
        return [out]

    def handle_cat(self, e: CatOp, args: list) -> list:
        return [torch.cat(args, e.dim)]

    def handle_load_store(self, e: LoadStoreOp, args: list) -> list:
        (x,) = args
        if e.op_type is LoadStoreOpType.SegmenterSet:
            return [x]
        dom = e.output.domain
        if dom.root is not None:
            x = x.permute([dom.root.index(i) for i in dom.logical])
            if dom.allocation is None:
                return [x]  # a permute is a view (nvFuser returns it aliasing its input)
        if dom.allocation is not None:
            order = [dom.logical.index(i) for i in dom.allocation]
            inverse = [order.index(k) for k in range(len(order))]
            return [x.permute(order).contiguous().permute(inverse)]
        # a copy only where the result escapes: an output must not alias an input
        return [x.clone() if e.output.is_fusion_output else x]

    def handle_full(self, e: FullOp, args: list) -> list:
        shape = [int(s) for s in args[:-1]]
        return [torch.full(shape, args[-1], dtype=e.output.dtype.torch, device=self.device)]

    def handle_iota(self, e: IotaOp, args: list) -> list:
        length, start, step = args
        dt = e.output.dtype.torch
        return [torch.arange(int(length), dtype=dt, device=self.device) * step + start]

    def handle_rng(self, e: RNGOp, args: list) -> list:
        """Philox4x32-10 numbers (`fuser.runtime.philox`): those of the op's own seed and offset,
        or of the execution's drawn seed and base offset plus the op's stream."""
        ndim = len(e.output.logical)
        shape = [int(s) for s in args[:ndim]]
        p1, p2 = float(args[ndim]), float(args[ndim + 1])
        if e.has_seed:
            seed, offset = int(args[ndim + 2]), int(args[ndim + 3])
        else:
            seed, base = self.unseeded_philox()
            offset = base + e.stream
        double = e.output.dtype is DataType.Double
        normal = e.rng_type is RNGOpType.Normal
        numel = math.prod(shape)
        z = philox.standard(normal, double, seed, offset, numel, self.device).reshape(shape)
        r = philox.normal(z, p1, p2) if normal else philox.uniform(z, p1, p2)
        return [r.to(e.output.dtype.torch)]

    def handle_select(self, e: SelectOp, args: list) -> list:
        x, index = args
        return [x.select(e.dim, int(index))]

    def handle_index_select(self, e: IndexSelectOp, args: list) -> list:
        x, index = args
        return [torch.index_select(x, e.dim, _as_index(index))]

    def handle_gather(self, e: GatherOp, args: list) -> list:
        x, index = args
        if e.exact_sizes:  # take_along_dim takes int64 indices only; the op takes int32 too
            return [torch.take_along_dim(x, index.long(), e.dim)]
        return [torch.gather(x, e.dim, _as_index(index))]

    def handle_scatter(self, e: ScatterOp, args: list) -> list:
        x, index, src = args
        return [torch.scatter(x, e.dim, _as_index(index), src)]

    def handle_matmul(self, e: MatmulOp, args: list) -> list:
        a, b = (_compute(x) for x in args)
        return [torch.matmul(a, b).to(e.output.dtype.torch)]

    def handle_linear(self, e: LinearOp, args: list) -> list:
        x, w, *bias = (_compute(a) for a in args)
        if w.ndim == 1 and bias:
            # F.linear takes a 1-D weight with a 0-dim bias, except for a 2-D input (its addmm
            # path wants a matrix): add the bias separately, as F.linear does for other ranks
            return [(F.linear(x, w) + bias[0]).to(e.output.dtype.torch)]
        return [F.linear(x, w, *bias).to(e.output.dtype.torch)]

    def handle_aten(self, e: AtenOp, args: list) -> list:
        """Ops only ATen runs: each by its fd.ops name, with named tensor/scalar arguments."""
        kw = dict(e.params)
        kw.update(zip(e.arg_names, args))
        outs = _ATEN[e.name](self, e, kw)
        return [o.to(v.dtype.torch) if isinstance(o, torch.Tensor) and o.dtype != v.dtype.torch and e.name != "bitcast" else o
                for o, v in zip(outs, e.outputs)]


_MISSING = object()


def logical_input(v: Val, x: Any, device: torch.device) -> Any:
    """A fusion input's value as the reference executor reads it: with the broadcast axes
    its logical domain adds (`_as_logical`), and a CPU scalar tensor beside device tensors
    moved to the device. `x` itself when neither applies."""
    if isinstance(x, torch.Tensor) and device.type != "cpu" and x.dim() == 0 and x.device.type == "cpu":
        # a CPU scalar tensor (is_cpu=True) beside device tensors: some torch ops (where,
        # clamp, ...) refuse to mix devices, so it joins the device as a 0-dim tensor
        x = x.to(device)
    return _as_logical(v, x)


def _as_logical(v: Val, x: Any) -> Any:
    """An input tensor seen with its logical shape: a view with a size-1 dim at each
    broadcast the logical domain adds to the root the tensor holds (seed 000)."""
    if not isinstance(v, TensorView) or not isinstance(x, torch.Tensor):
        return x
    added = v.domain.added_broadcasts()
    if not added:
        return x
    for d, i in enumerate(v.logical_no_reductions()):
        if i in added:
            x = x.unsqueeze(d)
            if i.expanded_extent is not None and i.expanded_extent.is_const:
                x = x.expand(*x.shape[:d], int(i.expanded_extent.value), *x.shape[d + 1:])
    return x


def _free_plan(fusion: Fusion) -> tuple[list[Expr], dict[int, list[Val]]]:
    """The fusion's exprs and, per expr index, the intermediates last read there; cached on
    the fusion until its exprs change, so a repeated execute does not recompute it."""
    exprs = fusion.exprs()
    cached = fusion.__dict__.get("_reference_free_plan")
    if cached is not None and cached[0] is exprs:
        return cached
    keep = set(fusion.outputs) | set(fusion.inputs)
    last_use: dict[Val, int] = {}
    for k, e in enumerate(exprs):
        for v in e.inputs:
            if isinstance(v, TensorView):
                last_use[v] = k
    dead_after: dict[int, list[Val]] = {}
    for v, k in last_use.items():
        if v not in keep:
            dead_after.setdefault(k, []).append(v)
    fusion._reference_free_plan = (exprs, dead_after)
    return exprs, dead_after


def _compute(x: Any) -> Any:
    """Narrow floats widen to float32 for arithmetic."""
    if isinstance(x, torch.Tensor) and x.dtype in _NARROW:
        return x.float()
    return x


_NARROW = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def _to(x: Any, dt: DataType) -> torch.Tensor:
    return x.to(dt.torch) if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=dt.torch)


def _as_float(x: Any, dt: DataType) -> Any:
    if isinstance(x, torch.Tensor) and not (x.dtype.is_floating_point or x.dtype.is_complex):
        return x.to(dt.torch)
    return x


def _acc_dtype(dt: DataType) -> torch.dtype:
    if dt in (DataType.Double, DataType.ComplexDouble, DataType.ComplexFloat):
        return dt.torch
    if dt.is_floating:
        return torch.float32
    if dt.is_boolean or dt.is_integral:
        return torch.int64
    return dt.torch


def _reduced_dims(tv: TensorView) -> list[int]:
    return [k for k, i in enumerate(tv.logical) if i.is_reduction]


def _unsqueeze_all(x: torch.Tensor, flags: Sequence[bool]) -> torch.Tensor:
    for k, f in enumerate(flags):
        if f:
            x = x.unsqueeze(k)
    return x


def _as_index(index: torch.Tensor) -> torch.Tensor:
    """An index tensor as torch's indexing ops take it: int64, a floating-point one
    converted as nvFuser's kernels convert it (truncated toward zero, as `.long()` does).
    An int32 one too: PyTorch's CPU gather reads an expanded (stride 0) int32 index wrongly."""
    return index if index.dtype is torch.int64 else index.long()


def _opt(x: Any, kind: type) -> Any:
    return None if x is None else kind(x)


def _sdpfa_fwd(ex: ReferenceExecutor, e: AtenOp, kw: dict) -> list:
    q, k, v = kw["query"], kw["key"], kw["value"]
    p, causal, scale = float(kw["dropout_p"] or 0.0), bool(kw["is_causal"] or False), _opt(kw["scale"], float)
    seed_v, offset_v = e.outputs[2], e.outputs[3]
    if q.is_cuda:
        out, lse, _, _, _, _, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, p, causal, return_debug_mask=False, scale=scale)
    else:  # the CPU flash kernel draws no dropout mask: a CPU fusion with dropout is refused
        if p > 0.0:
            raise EvaluationError("sdpfa_fwd with dropout needs CUDA tensors")
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, p, causal, attn_mask=None, scale=scale)
        seed = torch.zeros([int(ex.value(i.extent)) for i in seed_v.logical], dtype=seed_v.dtype.torch)
        offset = torch.zeros([], dtype=offset_v.dtype.torch)
    return [out, lse, seed, offset]


def _sdpfa_bwd(ex: ReferenceExecutor, e: AtenOp, kw: dict) -> list:
    g, q, k, v, out, lse = (kw[n] for n in ("grad_output", "query", "key", "value", "output", "log_sumexp"))
    p, causal, scale = float(kw["dropout_p"] or 0.0), bool(kw["is_causal"] or False), _opt(kw["scale"], float)
    if q.is_cuda:
        grads = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            g, q, k, v, out, lse, None, None, q.shape[2], k.shape[2], p, causal, kw["philox_seed"], kw["philox_offset"],
            scale=scale)
    else:
        if p > 0.0:
            raise EvaluationError("sdpfa_bwd with dropout needs CUDA tensors")
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            g, q, k, v, out, lse, p, causal, attn_mask=None, scale=scale)
    return list(grads)


def _grouped_mm(ex: ReferenceExecutor, e: AtenOp, kw: dict) -> list:
    a, b, offs = kw["mat1"], kw["mat2"], kw["offsets"]
    if a.is_cuda and hasattr(torch, "_grouped_mm"):
        try:
            return [torch._grouped_mm(a, b, offs=offs)]
        except RuntimeError:  # dtypes or architectures its kernel lacks: the loop below
            pass
    ends = [int(x) for x in offs.tolist()]
    starts = [0] + ends[:-1]
    if a.ndim == 2 and b.ndim == 3:  # groups of rows of a, one matrix of b each
        out = a.new_zeros(a.shape[0], b.shape[2])
        for gi, (s, t) in enumerate(zip(starts, ends)):
            out[s:t] = a[s:t] @ b[gi]
        return [out]
    if a.ndim == 3 and b.ndim == 2:  # groups of columns of b, one matrix of a each
        out = a.new_zeros(a.shape[1], b.shape[1])
        for gi, (s, t) in enumerate(zip(starts, ends)):
            out[:, s:t] = a[gi] @ b[:, s:t]
        return [out]
    return [torch.stack([a[:, s:t] @ b[s:t] for s, t in zip(starts, ends)])]  # groups of the contraction


_ATEN: dict[str, Callable[[ReferenceExecutor, AtenOp, dict], list]] = {
    "argsort": lambda ex, e, kw: [torch.argsort(kw["arg"], dim=kw["dim"], descending=kw["descending"], stable=kw["stable"])],
    "topk": lambda ex, e, kw: list(torch.topk(kw["arg"], int(kw["k"]), dim=kw["dim"], largest=kw["largest"], sorted=kw["sorted"])),
    "embedding_fwd": lambda ex, e, kw: [F.embedding(
        kw["input"], kw["weight"], _opt(kw["padding_idx"], int), _opt(kw["max_norm"], float),
        2.0 if kw["norm_type"] is None else float(kw["norm_type"]), bool(kw["scale_grad_by_freq"] or False),
        bool(kw["sparse"] or False))],
    "sdpfa_fwd": _sdpfa_fwd,
    "sdpfa_bwd": _sdpfa_bwd,
    "grouped_mm": _grouped_mm,
    "bitcast": lambda ex, e, kw: [kw["arg"].view(kw["dtype"].torch)],
    "ndtri": lambda ex, e, kw: [torch.special.ndtri(_compute(kw["arg"]) if kw["arg"].is_floating_point() else kw["arg"].float())],
}


def run_reference(fusion: Fusion, inputs: Sequence[Any], *, binding: Binding | None = None) -> list[Any]:
    """Evaluate `fusion` on `inputs` with PyTorch; returns every output, aliased ones included.

    `binding` is the inputs' validated Binding when the caller already has one."""
    if binding is None:
        binding = bind_inputs(fusion, inputs)
    ex = ReferenceExecutor(fusion, binding.device)
    ex.bind(binding)
    return ex.run()
