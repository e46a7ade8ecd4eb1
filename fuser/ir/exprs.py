"""The tensor and scalar operations of Fusion IR, named as nvFuser names them.

Each class only records what the operation is; building outputs (their domains and
dtypes) is `fuser.ops`' job, evaluating them is the reference executor's.
"""
from __future__ import annotations

import enum

from .base import Expr


class UnaryOpType(enum.Enum):
    Abs = "abs"
    Acos = "acos"
    Acosh = "acosh"
    Asin = "asin"
    Asinh = "asinh"
    Atan = "atan"
    Atanh = "atanh"
    BitwiseNot = "bitwise_not"
    Cast = "cast"
    Ceil = "ceil"
    Cos = "cos"
    Cosh = "cosh"
    Exp = "exp"
    Exp2 = "exp2"
    Expm1 = "expm1"
    Erf = "erf"
    Erfc = "erfc"
    Erfinv = "erfinv"
    Erfcinv = "erfcinv"
    Floor = "floor"
    Frac = "frac"
    Imag = "imag"
    IsFinite = "isfinite"
    IsInf = "isinf"
    IsNan = "isnan"
    IsNegInf = "isneginf"
    IsPosInf = "isposinf"
    IsReal = "isreal"
    Lgamma = "lgamma"
    Log = "log"
    Log10 = "log10"
    Log1p = "log1p"
    Log2 = "log2"
    LogicalNot = "logical_not"
    Neg = "neg"
    Real = "real"
    Reciprocal = "reciprocal"
    Relu = "relu"
    Round = "round"
    Rsqrt = "rsqrt"
    Sigmoid = "sigmoid"
    Sign = "sign"
    Signbit = "signbit"
    Silu = "silu"
    Sin = "sin"
    Sinh = "sinh"
    Sqrt = "sqrt"
    Tan = "tan"
    Tanh = "tanh"
    Trunc = "trunc"


class BinaryOpType(enum.Enum):
    Add = "add"
    Sub = "sub"
    Mul = "mul"
    Div = "div"
    Mod = "mod"
    Remainder = "remainder"
    Fmod = "fmod"
    Pow = "pow"
    Atan2 = "atan2"
    Max = "maximum"
    Min = "minimum"
    Eq = "eq"
    Ne = "ne"
    Lt = "lt"
    Le = "le"
    Gt = "gt"
    Ge = "ge"
    LogicalAnd = "logical_and"
    LogicalOr = "logical_or"
    BitwiseAnd = "bitwise_and"
    BitwiseOr = "bitwise_or"
    BitwiseXor = "bitwise_xor"
    Lshift = "bitwise_left_shift"
    Rshift = "bitwise_right_shift"
    LogicalRshift = "logical_right_shift"
    Gcd = "gcd"
    Nextafter = "nextafter"
    CeilDiv = "ceilDiv"

    @property
    def is_comparison(self) -> bool:
        return self in _COMPARISONS

    @property
    def is_logical(self) -> bool:
        return self in (BinaryOpType.LogicalAnd, BinaryOpType.LogicalOr)


_COMPARISONS = frozenset(
    {BinaryOpType.Eq, BinaryOpType.Ne, BinaryOpType.Lt, BinaryOpType.Le, BinaryOpType.Gt, BinaryOpType.Ge}
)


class TernaryOpType(enum.Enum):
    Where = "where"
    Lerp = "lerp"
    Clamp = "clamp"
    Threshold = "threshold"


class RNGOpType(enum.Enum):
    Uniform = "uniform"
    Normal = "normal"


class LoadStoreOpType(enum.Enum):
    Set = "Set"
    SegmenterSet = "SegmenterSet"


# --- elementwise -------------------------------------------------------------


class UnaryOp(Expr):
    """out = op(in); a Cast converts to the output's dtype."""

    attr_names = ("op_type",)
    #: a float exp generated code may compute as ex2.approx(x log2 e) (set by the opt-in
    #: preseg pass fuser.preseg.approx_exp; cloned with the expr)
    approx = False


class BinaryOp(Expr):
    """out = op(lhs, rhs), broadcasting as the operands' domains say."""

    attr_names = ("op_type",)
    #: a float product generated code must round on its own, never fuse into an add (set
    #: by the preseg pass fuser.preseg.rounded_products; cloned with the expr)
    rounded = False
    #: a float division whose quotient may be computed as lhs * (1 / rhs) (set by the preseg
    #: pass fuser.preseg.reciprocal_divisors; cloned with the expr)
    by_reciprocal = False


class TernaryOp(Expr):
    """out = op(a, b, c): where(cond, x, y), lerp(start, end, weight), clamp(x, lo, hi),
    threshold(x, threshold, value)."""

    attr_names = ("op_type",)


# --- reductions ----------------------------------------------------------------


class ReductionOp(Expr):
    """out = reduce `op_type` (add, mul, max, min) over the output's reduction axes, from `init`."""

    attr_names = ("op_type", "init")


class WelfordOp(Expr):
    """(avg, var_sum, n) of the input over the outputs' reduction axes, in one pass."""


class ScanOp(Expr):
    """Inclusive scan (cumulative `op_type`) along `dim`."""

    attr_names = ("op_type", "dim")


# --- shape -----------------------------------------------------------------------


class BroadcastOp(Expr):
    """Inserts broadcast axes where `flags` is True."""

    attr_names = ("flags",)


class SqueezeOp(Expr):
    """Removes the axes where `flags` is True (broadcast axes, or expanded ones)."""

    attr_names = ("flags",)


class ExpandOp(Expr):
    """Gives broadcast axes an expanded extent; inputs are the tensor then one extent per axis."""


class ReshapeOp(Expr):
    """View with another shape: the output's root→logical Split/Merge say how."""


class SliceOp(Expr):
    """Slice; `ranges` holds a (start, stop, step) triple of scalars per axis."""

    attr_names = ("ranges",)


class PadOp(Expr):
    """Pads with `inputs[1]`; `pad_widths` holds a (left, right) pair of scalars per axis, axis 0 first."""

    attr_names = ("pad_widths",)


class CatOp(Expr):
    """Concatenates the inputs along `dim`."""

    attr_names = ("dim",)


class LoadStoreOp(Expr):
    """A copy: `set`, a permute (root→logical reordered) or a `segment_set` boundary."""

    attr_names = ("op_type", "cache_op")


class ReshardOp(Expr):
    """Its input laid out over devices otherwise (a sharded fusion's resharding, made by
    fuser.multidevice and run by the host program as a communication). It exists only
    in a sharded fusion's propagated copy; no axis is exactly mapped across it (a block
    and the whole have different extents)."""


# --- factories -------------------------------------------------------------------


class FullOp(Expr):
    """A tensor filled with a value; inputs are the extents then the fill value."""


class IotaOp(Expr):
    """[start, start + step, ...] of a given length; inputs are length, start, step."""


class RNGOp(Expr):
    """Random numbers; inputs are the extents, the two distribution parameters, then seed
    and offset if given."""

    attr_names = ("rng_type", "has_seed")

    @property
    def stream(self) -> int:
        """An unseeded op's stream among its execution's: it uses offset base + stream of the
        seed and base offset drawn per execution. Its output's name: unique in a fusion and
        kept by the fusion's copies (segments), so every executor of one execution agrees."""
        return self.outputs[0].name


# --- indexing ----------------------------------------------------------------------


class SelectOp(Expr):
    """Picks index `inputs[1]` (a scalar) along `dim`, dropping the axis."""

    attr_names = ("dim",)


class IndexSelectOp(Expr):
    """Gathers whole slices along `dim` at the positions of a 1-D index tensor."""

    attr_names = ("dim",)


class GatherOp(Expr):
    """torch.gather along `dim`; `exact_sizes` (take_along_axis) requires equal other extents."""

    attr_names = ("dim", "exact_sizes")


class ScatterOp(Expr):
    """out = copy of self with `src` written at `index` along `dim`."""

    attr_names = ("dim",)


# --- ATen-backed -------------------------------------------------------------------


class MatmulOp(Expr):
    """torch.matmul of two tensors."""


class LinearOp(Expr):
    """torch.nn.functional.linear(input, weight, bias?)."""


class AtenOp(Expr):
    """Other work only ATen does (argsort, topk, embedding_fwd, sdpfa_fwd, sdpfa_bwd,
    grouped_mm, bitcast, ndtri): `name` is its fd.ops call, `arg_names` names the inputs
    (tensors, then scalars) in order, `params` holds its constant arguments as (name,
    value) pairs. The reference executor runs it with PyTorch (an expr_eval segment)."""

    attr_names = ("name", "arg_names", "params")

    def param(self, key: str) -> object:
        return dict(self.params)[key]


TENSOR_EXPR_CLASSES = (
    UnaryOp,
    BinaryOp,
    TernaryOp,
    ReductionOp,
    WelfordOp,
    ScanOp,
    BroadcastOp,
    SqueezeOp,
    ExpandOp,
    ReshapeOp,
    SliceOp,
    PadOp,
    CatOp,
    LoadStoreOp,
    FullOp,
    IotaOp,
    RNGOp,
    SelectOp,
    IndexSelectOp,
    GatherOp,
    ScatterOp,
    MatmulOp,
    LinearOp,
    AtenOp,
)
