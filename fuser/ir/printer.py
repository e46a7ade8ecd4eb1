"""nvFuser's textual IR: `T12_g_float[iS35{56}, bS43{1 ex 1024}]` and the math between them."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Expr, Scalar, Val
from .domain import IterDomain, Merge, Resize, Split
from .dtype import DataType
from .exprs import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CatOp,
    ExpandOp,
    FullOp,
    GatherOp,
    IndexSelectOp,
    IotaOp,
    AtenOp,
    LinearOp,
    LoadStoreOp,
    LoadStoreOpType,
    MatmulOp,
    PadOp,
    ReductionOp,
    ReshapeOp,
    RNGOp,
    ScanOp,
    ScatterOp,
    SelectOp,
    SliceOp,
    SqueezeOp,
    TernaryOp,
    UnaryOp,
    UnaryOpType,
    WelfordOp,
)
from .tensor import TensorView

if TYPE_CHECKING:
    from .fusion import Fusion

_INFIX = {
    BinaryOpType.Add: "+",
    BinaryOpType.Sub: "-",
    BinaryOpType.Mul: "*",
    BinaryOpType.Div: "/",
    BinaryOpType.Mod: "%",
    BinaryOpType.Eq: "==",
    BinaryOpType.Ne: "!=",
    BinaryOpType.Lt: "<",
    BinaryOpType.Le: "<=",
    BinaryOpType.Gt: ">",
    BinaryOpType.Ge: ">=",
    BinaryOpType.LogicalAnd: "&&",
    BinaryOpType.LogicalOr: "||",
    BinaryOpType.BitwiseAnd: "&",
    BinaryOpType.BitwiseOr: "|",
    BinaryOpType.BitwiseXor: "^",
    BinaryOpType.Lshift: "<<",
    BinaryOpType.Rshift: ">>",
}
_REDUCTION_NAME = {
    BinaryOpType.Add: "add",
    BinaryOpType.Mul: "mul",
    BinaryOpType.Max: "max",
    BinaryOpType.Min: "min",
}
# conversions nvFuser spells as CUDA intrinsics
_CAST_INTRINSIC = {
    (DataType.Float, DataType.Half): "__float2half",
    (DataType.Half, DataType.Float): "__half2float",
    (DataType.Float, DataType.BFloat16): "__float2bfloat",
    (DataType.BFloat16, DataType.Float): "__bfloat2float",
    (DataType.Double, DataType.Half): "__double2half",
    (DataType.Half, DataType.Double): "__half2double",
    (DataType.Double, DataType.BFloat16): "__double2bfloat",
    (DataType.BFloat16, DataType.Double): "__bfloat2double",
    (DataType.Float, DataType.Float8_e4m3fn): "__float2e4m3",
    (DataType.Float8_e4m3fn, DataType.Float): "__e4m32float",
    (DataType.Float, DataType.Float8_e5m2): "__float2e5m2",
    (DataType.Float8_e5m2, DataType.Float): "__e5m22float",
}


def constant_str(value: object, dtype: DataType) -> str:
    """A constant as nvFuser prints it: `56`, `double(0.5)`, `true`, `__bfloat(0)`."""
    if dtype.is_boolean:
        return "true" if value else "false"
    if dtype.is_integral:
        return str(int(value))
    if dtype.is_complex:
        c = complex(value)
        return f"{dtype.cpp}({_float_str(c.real)}, {_float_str(c.imag)})"
    return f"{dtype.cpp}({_float_str(float(value))})"


def _float_str(x: float) -> str:
    if x != x:
        return "NAN"
    if x in (float("inf"), float("-inf")):
        return "INFINITY" if x > 0 else "-INFINITY"
    # C++ `ostream << setprecision(max_digits10)`: double(0.00097656200000000005), double(-0.5), double(1024)
    return f"{x:.17g}"


def scalar_str(s: Scalar) -> str:
    """A scalar inline: its constant, its name, or its defining arithmetic for derived extents."""
    if s.is_const:
        return constant_str(s.value, s.dtype)
    d = s.definition
    if isinstance(d, BinaryOp) and all(isinstance(v, Scalar) for v in d.inputs) and s.dtype.is_integral:
        a, b = (scalar_str(v) for v in d.inputs)
        if d.op_type in _INFIX:
            return f"( {a} {_INFIX[d.op_type]} {b} )"
        return f"{d.op_type.value}({a}, {b})"
    return f"{s.dtype.scalar_prefix}{s.name}"


def id_str(i: IterDomain) -> str:
    extent = scalar_str(i.extent)
    if i.expanded_extent is not None:
        extent = f"{extent} ex {scalar_str(i.expanded_extent)}"
    start = "" if i.start.is_const and i.start.value == 0 else f"{scalar_str(i.start)} : "
    rf = "rf" if i.is_rfactor_product else ""
    return f"{i.iter_type.value}{i.parallel_type.value}{i.name}{{{start}{extent}}}{rf}"


def tv_str(tv: TensorView) -> str:
    ids = ", ".join(id_str(i) for i in tv.loop)
    return f"T{tv.name}_{tv.memory_type.value}_{tv.dtype.cpp}[{ids}]"


def val_str(v: Val) -> str:
    if isinstance(v, TensorView):
        return tv_str(v)
    if isinstance(v, IterDomain):
        return id_str(v)
    if isinstance(v, Scalar):
        return scalar_str(v)
    return f"{type(v).__name__}{v.name}"


def _operand(v: Val) -> str:
    # constants are spelled with their type inside expressions: double(1), not 1
    if isinstance(v, Scalar) and v.is_const and v.dtype.is_integral:
        return f"{v.dtype.cpp}({v.value})"
    return val_str(v)


def _list(vals) -> str:
    return "{" + ", ".join(val_str(v) for v in vals) + "}"


def _flags(flags) -> str:
    return "{" + ", ".join("true" if f else "false" for f in flags) + "}"


def expr_str(e: Expr) -> str:
    """One expression in nvFuser's layout (multi-line for tensor ops), ending in a newline."""
    out = val_str(e.outputs[0]) if e.outputs else ""
    if isinstance(e, (Split, Merge, Resize)):
        return _id_expr_str(e)
    if isinstance(e, UnaryOp):
        x = _operand(e.input)
        if e.op_type is UnaryOpType.Cast:
            key = (e.input.dtype, e.output.dtype)
            rhs = f"{_CAST_INTRINSIC[key]}({x})" if key in _CAST_INTRINSIC else f"({e.output.dtype.cpp})({x})"
        elif e.op_type is UnaryOpType.Neg:
            rhs = f"-{x}"
        elif e.op_type is UnaryOpType.LogicalNot:
            rhs = f"!{x}"
        elif e.op_type is UnaryOpType.BitwiseNot:
            rhs = f"~{x}"
        else:
            rhs = f"{e.op_type.value}({x})"
        return _assign(e, out, rhs)
    if isinstance(e, BinaryOp):
        a, b = (_operand(v) for v in e.inputs)
        if isinstance(e.output, Scalar):
            if e.op_type in _INFIX:
                return f"{out} = {a} {_INFIX[e.op_type]} {b};\n"
            return f"{out} = {e.op_type.value}({a}, {b});\n"
        if e.op_type in _INFIX:
            return f"{out}\n   = {a}\n   {_INFIX[e.op_type]} {b};\n"
        return f"{out}\n   = {e.op_type.value}({a}\n  , {b});\n"
    if isinstance(e, TernaryOp):
        a, b, c = (_operand(v) for v in e.inputs)
        return _assign(e, out, f"{e.op_type.value}({a}\n  , {b}\n  , {c})")
    if isinstance(e, ReductionOp):
        return (
            f"{out}\n   = reduction( {val_str(e.input)}, op = {_REDUCTION_NAME[e.op_type]}, "
            f"initial value = {_operand(e.init)}, allreduce = false )\n"
        )
    if isinstance(e, WelfordOp):
        avg, var, n = (val_str(v) for v in e.outputs)
        return f"{avg}(Avg),\n{var}(Var),\n{n}(Count)\n = Welford ( {val_str(e.input)}(Avg), allreduce = false )\n"
    if isinstance(e, ScanOp):
        return f"{out}\n   = scan( {val_str(e.input)}, op = {_REDUCTION_NAME[e.op_type]}, dim = {e.dim} )\n"
    if isinstance(e, BroadcastOp):
        return f"{out}\n   = broadcast( {val_str(e.input)}, flags = {_flags(e.flags)} )\n"
    if isinstance(e, SqueezeOp):
        return f"{out}\n   = squeeze( {val_str(e.input)}, flags = {_flags(e.flags)} )\n"
    if isinstance(e, ExpandOp):
        return f"{out} = expand( {val_str(e.input)}, {_list(e.inputs[1:])} )\n"
    if isinstance(e, ReshapeOp):
        return f"{out} = view( {val_str(e.input)} )\n"
    if isinstance(e, SliceOp):
        ranges = " ".join("{" + ", ".join(val_str(x) for x in r) + "}" for r in e.ranges)
        return f"{out}\n   = slice( {val_str(e.input)}, {{ {ranges} }} )\n"
    if isinstance(e, PadOp):
        widths = ", ".join(val_str(x) for pair in e.pad_widths for x in pair)
        return f"{out}\n   = pad( {val_str(e.input)}, {{{widths}}} )\n"
    if isinstance(e, CatOp):
        args = ", ".join(val_str(v) for v in e.inputs)
        return f"{out}\n   = cat( {args}, {e.dim} )\n"
    if isinstance(e, LoadStoreOp):
        if e.op_type is LoadStoreOpType.SegmenterSet:
            return f"{out}\n   = SegmenterSet( {val_str(e.input)} )\n"
        permuted = e.output.domain.has_root
        name = "Set.Permute" if permuted else "Set"
        return f"{out}\n   = {name}( {val_str(e.input)}, cache_op={e.cache_op} )\n"
    if isinstance(e, FullOp):
        return f"{out}\n   = full({_list(e.inputs[:-1])}, {_operand(e.inputs[-1])});\n"
    if isinstance(e, IotaOp):
        args = ", ".join(_operand(v) for v in e.inputs)
        return f"{out}\n   = iota({args}, {e.output.dtype.cpp});\n"
    if isinstance(e, RNGOp):
        ndim = len(e.output.logical)
        params = ", ".join(_operand(v) for v in e.inputs[ndim:])
        return f"{out}\n   = rng_{e.rng_type.value}({_list(e.inputs[:ndim])}, {params}, {e.output.dtype.cpp});\n"
    if isinstance(e, SelectOp):
        return f"{out}\n   = select( {val_str(e.input)}, axis = {e.dim}, index = {_operand(e.inputs[1])} )\n"
    if isinstance(e, IndexSelectOp):
        return f"{out}\n   = index_select( {val_str(e.input)}, dim = {e.dim}, {val_str(e.inputs[1])} )\n"
    if isinstance(e, GatherOp):
        name = "take_along_axis" if e.exact_sizes else "gather"
        return f"{out}\n   = {name}( {val_str(e.input)}, dim = {e.dim}, {val_str(e.inputs[1])} )\n"
    if isinstance(e, ScatterOp):
        a, idx, src = (val_str(v) for v in e.inputs)
        return f"{out}\n   = scatter( {a}, dim = {e.dim}, {idx}, {src} )\n"
    if isinstance(e, AtenOp):
        args = ", ".join(val_str(v) for v in e.inputs)
        params = "".join(f", {k} = {_param(v)}" for k, v in e.params)
        outs = ",\n".join(val_str(o) for o in e.outputs)
        return f"{outs}\n   = {e.name}( {args}{params} )\n"
    if isinstance(e, MatmulOp):
        a, b = (val_str(v) for v in e.inputs)
        return f"{out}\n   = matmul({a},\n          {b})\n"
    if isinstance(e, LinearOp):
        args = ",\n          ".join(val_str(v) for v in e.inputs)
        return f"{out}\n   = linear({args})\n"
    raise TypeError(f"no printer for {type(e).__name__}")


def _param(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "none" if v is None else str(v)


def _assign(e: Expr, out: str, rhs: str) -> str:
    if isinstance(e.outputs[0], Scalar):
        return f"{out} = {rhs};\n"
    return f"{out}\n   = {rhs};\n"


def _id_expr_str(e: Expr) -> str:
    if isinstance(e, Split):
        outer, inner = e.outputs
        kind = "inner" if e.inner_split else "outer"
        return f"{kind} split: {id_str(e.input)} by factor {scalar_str(e.factor)} -> {id_str(outer)}, {id_str(inner)}\n"
    if isinstance(e, Merge):
        return f"Merge: {id_str(e.inputs[0])} and {id_str(e.inputs[1])} -> {id_str(e.output)}\n"
    return (
        f"Resize: {id_str(e.input)} by {scalar_str(e.left_expand)} and {scalar_str(e.right_expand)}"
        f" -> {id_str(e.output)}\n"
    )


def fusion_ir(fusion: "Fusion") -> str:
    """The whole fusion: inputs, outputs, then its math in topological order."""
    lines = ["Inputs:"]
    lines += [f"  {val_str(v)}{'' if isinstance(v, TensorView) else ' ' + v.dtype.cpp}" for v in fusion.inputs]
    lines.append("Outputs:")
    lines += [f"  {val_str(v)}{'' if isinstance(v, TensorView) else ' ' + v.dtype.cpp}" for v in fusion.outputs]
    body = "".join(expr_str(e) for e in fusion.exprs())
    return "\n".join(lines) + "\n\n%kernel_math {\n" + body + "} // %kernel_math \n"


def fusion_str(fusion: "Fusion", tensor_transforms: bool = True) -> str:
    """The whole fusion as nvFuser's `Fusion::print`: inputs, outputs, the math in a
    `%kernel` block and, with `tensor_transforms`, each tensor's domains after
    `TransformPrinter :` (root, logical, allocation, contiguity, loop)."""
    lines = ["Inputs:"] + [f"  {val_str(v)}" for v in fusion.inputs]
    lines += ["Outputs:"] + [f"  {val_str(v)}" for v in fusion.outputs]
    text = "\n".join(lines) + "\n\n%kernel {\n" + "".join(expr_str(e) for e in fusion.exprs())
    if tensor_transforms:
        text += "\nTransformPrinter : \n" + "".join(transforms_str(tv) + "\n" for tv in fusion.tensors())
    return text + "} // %kernel\n"


def transforms_str(tv: TensorView) -> str:
    """A tensor's root → logical → loop transforms, as nvFuser's `printTransforms`."""
    from .transforms import id_exprs_between

    dom = tv.domain
    lines = [tv_str(tv)]
    if dom.has_root:
        lines.append(" root domain : (" + ", ".join(id_str(i) for i in dom.root) + ")")
        lines += ["  " + expr_str(x).rstrip() for x in id_exprs_between(dom.root, dom.logical)]
    lines.append(" logical domain : (" + ", ".join(id_str(i) for i in dom.logical) + ")")
    if dom.allocation is not None:
        lines.append(" allocation domain : (" + ", ".join(id_str(i) for i in dom.allocation) + ")")
    lines.append(" contiguity: " + " ".join("n" if c is None else ("t" if c else "f") for c in dom.contiguity))
    lines += ["  " + expr_str(x).rstrip() for x in id_exprs_between(dom.logical, dom.loop)]
    lines.append(" loop domain : (" + ", ".join(id_str(i) for i in dom.loop) + ")")
    return "\n".join(lines)
