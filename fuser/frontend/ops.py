"""`fd.ops`: every operation of nvFuser's frontend, recording a Record and building IR.

Names, argument positions and defaults are nvFuser's, and so is what each records (and
therefore prints): a shape given as a list is an inline vector (`shape=[2, S3]`),
reductions record the dims they reduce, `slice` always records its strides. fuser also
accepts Python numbers where nvFuser wants a Scalar: they become `define_scalar` constants.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from fuser import ops as irops
from fuser.errors import DefinitionIndexError, DefinitionTypeError, nvfuser_style
from fuser.ir import BinaryOpType, DataType, RNGOpType, TernaryOpType, UnaryOpType
from fuser.ir import Scalar as IrScalar
from fuser.ir import TensorView

from .handles import Scalar, Tensor, Vector, _State

if TYPE_CHECKING:
    from .fusion_definition import FusionDefinition

_UNARY = {t.value: t for t in UnaryOpType if t is not UnaryOpType.Cast}
_BINARY = {t.value: t for t in BinaryOpType if t is not BinaryOpType.CeilDiv}
_REDUCTIONS = {"sum": BinaryOpType.Add, "prod": BinaryOpType.Mul, "max": BinaryOpType.Max, "min": BinaryOpType.Min}


class Operators:
    """The `fd.ops` namespace of one FusionDefinition."""

    def __init__(self, fd: "FusionDefinition") -> None:
        self._fd = fd

    # --- plumbing ---------------------------------------------------------------------
    def _run(self, name: str, build: Callable[[], Any], args: Sequence[Any], kwargs: Sequence[tuple[str, Any]]):
        """Build IR for `fd.ops.<name>(*args, **kwargs)`, record it, return new handles."""
        fd = self._fd
        fd._check_open(f"fd.ops.{name}")
        try:
            with fd._fusion.guard():
                result = build()
        except (TypeError, ValueError, IndexError) as err:
            raise nvfuser_style(err, f"fd.ops.{name}: {err}") from None
        outs = result if isinstance(result, tuple) else (result,)
        handles = tuple(fd._new_state(v) for v in outs)
        fd._record(f"ops.{name}", args, kwargs, handles)
        return handles if isinstance(result, tuple) else handles[0]

    def _val(self, x: Any, name: str, what: str = "arg") -> Any:
        """The IR value behind an argument; Python numbers become constant scalars."""
        return self._fd._ir_operand(x, f"fd.ops.{name}: {what}")

    def _tensor(self, x: Any, name: str, what: str = "arg") -> TensorView:
        v = self._val(x, name, what)
        if not isinstance(v, TensorView):
            raise DefinitionTypeError(f"fd.ops.{name}: {what} must be a Tensor, got {type(x).__name__}")
        return v

    def _operand(self, x: Any, name: str, what: str = "arg") -> _State:
        """A handle for an argument, defining a constant for a Python number."""
        return self._fd._as_state(x, f"fd.ops.{name}: {what}")

    def _optional(self, x: Any, name: str, what: str) -> _State | None:
        return None if x is None else self._operand(x, name, what)

    def _vector(self, shape: Any, name: str, what: str, shape_check: bool = True) -> Vector:
        return self._fd._shape_vector(shape, f"fd.ops.{name}: {what}", shape_check)

    # --- elementwise --------------------------------------------------------------------
    def _unary(self, name: str, arg: Any) -> Any:
        a = self._operand(arg, name)
        op = _UNARY[name]
        return self._run(name, lambda: irops.unary(op, a.val), (a,), ())

    def _binary(self, name: str, arg1: Any, arg2: Any) -> Any:
        a, b = self._operand(arg1, name, "arg1"), self._operand(arg2, name, "arg2")
        op = _BINARY[name]
        return self._run(name, lambda: irops.binary(op, a.val, b.val), (a, b), ())

    def truediv(self, arg1: Any, arg2: Any) -> Any:
        """a / b with a floating result: integer and bool operands divide in Float.
        Dtypes: any; integer and bool operands give Float, floating and complex ones promote as in PyTorch.
        Differs from PyTorch: this is torch.true_divide / Python's `/`; `div` is nvFuser's truncating one."""
        a, b = self._operand(arg1, "truediv", "arg1"), self._operand(arg2, "truediv", "arg2")
        return self._run("truediv", lambda: irops.truediv(a.val, b.val), (a, b), ())

    def cast(self, arg: Any, dtype: DataType) -> Any:
        """`arg` converted elementwise to `dtype` (a cast to its own dtype is a copy).
        Dtypes: any input; any `dtype` but DataType.Null.
        Differs from PyTorch: Tensor.to(dtype) with nvFuser's name; `dtype` is a DataType."""
        a = self._operand(arg, "cast")
        _check_dtype("cast", dtype)
        return self._run("cast", lambda: irops.cast(a.val, dtype), (a,), (("dtype", dtype),))

    def set(self, arg: Tensor) -> Tensor:
        """A copy of the tensor `arg` (nvFuser's LoadStoreOp `set`).
        Dtypes: any, kept.
        Differs from PyTorch: no PyTorch counterpart; the copy is an IR value of its own."""
        a = self._operand(arg, "set")
        return self._run("set", lambda: irops.set_(a.val), (a,), ())

    def segment_set(self, arg: Tensor) -> Tensor:
        """A copy of `arg` that forces a segment (kernel) boundary between its producer and consumers.
        Dtypes: any, kept.
        Differs from PyTorch: nvFuser-specific; it changes how the fusion is split, not its values."""
        from fuser.ir import LoadStoreOpType

        a = self._operand(arg, "segment_set")
        return self._run("segment_set", lambda: irops.set_(a.val, LoadStoreOpType.SegmenterSet), (a,), ())

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """`a` where `cond` is true, else `b`, elementwise with broadcasting (torch.where).
        Dtypes: `cond` must be Bool; `a` and `b` may be any dtype and promote between themselves.
        Differs from PyTorch: only the branches promote, so where(cond, 3.0, 5.0) is Double (nvFuser's rule)."""
        c, x, y = (self._operand(v, "where", w) for v, w in ((cond, "cond"), (a, "a"), (b, "b")))
        return self._run("where", lambda: irops.where(c.val, x.val, y.val), (c, x, y), ())

    def lerp(self, a: Any, b: Any, w: Any) -> Any:
        """Linear interpolation a + w * (b - a), elementwise (torch.lerp).
        Dtypes: floating and complex; the tensors must share one dtype, which the result keeps.
        Differs from PyTorch: argument names are nvFuser's (a, b, w for start, end, weight)."""
        s, e, wt = (self._operand(v, "lerp", n) for v, n in ((a, "a"), (b, "b"), (w, "w")))
        return self._run("lerp", lambda: irops.ternary(TernaryOpType.Lerp, s.val, e.val, wt.val), (s, e, wt), ())

    def clamp(self, x: Any, min: Any, max: Any) -> Any:  # noqa: A002 - nvFuser's keyword names
        """Each element of `x` limited to [min, max] (torch.clamp).
        Dtypes: integer and floating, promoted with the bounds (a float bound on an integer tensor gives Float); bool results and complex are refused.
        Differs from PyTorch: both bounds are required."""
        a, lo, hi = (self._operand(v, "clamp", n) for v, n in ((x, "x"), (min, "min"), (max, "max")))
        return self._run("clamp", lambda: irops.ternary(TernaryOpType.Clamp, a.val, lo.val, hi.val), (a, lo, hi), ())

    def threshold(self, x: Any, threshold: Any, value: Any) -> Any:
        """`value` where x <= threshold, else x (torch.nn.functional.threshold).
        Dtypes: integer and floating `x`, whose dtype the result keeps; bool and complex are refused."""
        a, t, v = (self._operand(u, "threshold", n) for u, n in ((x, "x"), (threshold, "threshold"), (value, "value")))
        return self._run(
            "threshold", lambda: irops.ternary(TernaryOpType.Threshold, a.val, t.val, v.val), (a, t, v), ()
        )

    def addcmul(self, a: Any, b: Any, c: Any, value: Any) -> Any:
        """a + value * b * c, elementwise with broadcasting (torch.addcmul).
        Dtypes: any; operands promote as in PyTorch.
        Differs from PyTorch: `value` is required and positional (nvFuser's signature)."""
        x, y, z, v = (self._operand(u, "addcmul", n) for u, n in ((a, "a"), (b, "b"), (c, "c"), (value, "value")))
        return self._run("addcmul", lambda: irops.addcmul(x.val, y.val, z.val, v.val), (x, y, z, v), ())

    def add_alpha(self, a: Any, b: Any, alpha: Any) -> Any:
        """a + alpha * b, elementwise (torch.add with `alpha`).
        Dtypes: any operands, promoted as in PyTorch; a floating alpha needs floating or complex operands, a complex one complex operands, a bool one bool operands.
        Differs from PyTorch: `alpha` is a required positional argument of a separate op."""
        x, y, al = (self._operand(u, "add_alpha", n) for u, n in ((a, "a"), (b, "b"), (alpha, "alpha")))
        return self._run("add_alpha", lambda: irops.add_alpha(x.val, y.val, al.val), (x, y, al), ())

    def sub_alpha(self, a: Any, b: Any, alpha: Any) -> Any:
        """a - alpha * b, elementwise (torch.sub with `alpha`).
        Dtypes: integer, floating and complex operands (bool refused); alpha as in add_alpha.
        Differs from PyTorch: `alpha` is a required positional argument of a separate op."""
        x, y, al = (self._operand(u, "sub_alpha", n) for u, n in ((a, "a"), (b, "b"), (alpha, "alpha")))
        return self._run("sub_alpha", lambda: irops.sub_alpha(x.val, y.val, al.val), (x, y, al), ())

    # --- reductions ---------------------------------------------------------------------
    def _reduction(self, name: str, arg: Tensor, dims: Any, keepdim: Any, dtype: Any, dim: Any) -> Tensor:
        """nvFuser's three overloads: (arg, dtype) reduces every dim; (arg, dim: int,
        keepdim, dtype); (arg, dims: list, keepdim, dtype). `dim=` and `dims=` both work."""
        a = self._operand(arg, name)
        tv = self._tensor(a, name)
        if isinstance(dims, DataType):  # prod(t, DataType.Float): the all-dims overload
            dims, dtype = None, dims
        dims = _merge_dim(name, dims, dim)
        if dims is None:
            dims = list(range(tv.ndim))
        _check_dtype(name, dtype)
        keepdim = bool(keepdim)
        return self._run(
            name,
            lambda: irops.reduction(_REDUCTIONS[name], a.val, dims, keepdim, dtype),
            (a,),
            (("dims", dims), ("keepdim", keepdim), ("dtype", dtype)),
        )

    def sum(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
            dim: Any = None) -> Tensor:
        """Sum of `arg` over `dims` (every dim when none is given), like torch.sum.
        Dtypes: any; integer and bool inputs accumulate in Int (int64), others keep their dtype unless `dtype` is given.
        Differs from PyTorch: the dims argument is `dims` (`dim=` also works); sum(arg, dtype) reduces every dim; `dtype` is a DataType."""
        return self._reduction("sum", arg, dims, keepdim, dtype, dim)

    def prod(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
             dim: Any = None) -> Tensor:
        """Product of `arg` over `dims` (every dim when none is given), like torch.prod.
        Dtypes: any; integer and bool inputs accumulate in Int (int64), others keep their dtype unless `dtype` is given.
        Differs from PyTorch: torch.prod takes one dim; this takes several (nvFuser's `dims`)."""
        return self._reduction("prod", arg, dims, keepdim, dtype, dim)

    def max(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
            dim: Any = None) -> Tensor:
        """Largest value of `arg` over `dims` (every dim when none is given), like torch.amax.
        Dtypes: bool, integer and floating, kept (or cast to `dtype` first); complex is refused.
        Differs from PyTorch: returns values only (no indices), unlike torch.max(x, dim)."""
        return self._reduction("max", arg, dims, keepdim, dtype, dim)

    def min(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
            dim: Any = None) -> Tensor:
        """Smallest value of `arg` over `dims` (every dim when none is given), like torch.amin.
        Dtypes: bool, integer and floating, kept (or cast to `dtype` first); complex is refused.
        Differs from PyTorch: returns values only (no indices), unlike torch.min(x, dim)."""
        return self._reduction("min", arg, dims, keepdim, dtype, dim)

    def var(self, arg: Tensor, dims: Any = None, correction: int = 1, keepdim: bool = False, *, dim: Any = None) -> Tensor:
        """Variance of `arg` over `dims` with `correction` subtracted from the count (torch.var).
        Dtypes: floating (kept) and complex (a real variance); integer and bool are refused.
        Differs from PyTorch: `correction` comes before `keepdim` positionally (nvFuser's order)."""
        a = self._operand(arg, "var")
        dims = _merge_dim("var", dims, dim)
        dims = list(range(self._tensor(a, "var").ndim)) if dims is None else dims
        return self._run(
            "var",
            lambda: irops.var(self._tensor(a, "var"), dims, correction, keepdim),
            (a,),
            (("dims", dims), ("correction", correction), ("keepdim", keepdim)),
        )

    def var_mean(self, arg: Tensor, dims: Any = None, correction: int = 1, keepdim: bool = False, *,
                 dim: Any = None) -> tuple[Tensor, Tensor]:
        """(variance, mean) of `arg` over `dims` with `correction` (torch.var_mean).
        Dtypes: floating (both keep it) and complex (real variance, complex mean); integer and bool are refused.
        Differs from PyTorch: `correction` comes before `keepdim` positionally (nvFuser's order)."""
        a = self._operand(arg, "var_mean")
        dims = _merge_dim("var_mean", dims, dim)
        dims = list(range(self._tensor(a, "var_mean").ndim)) if dims is None else dims
        return self._run(
            "var_mean",
            lambda: irops.var_mean(self._tensor(a, "var_mean"), dims, correction, keepdim),
            (a,),
            (("dims", dims), ("correction", correction), ("keepdim", keepdim)),
        )

    def welford(self, arg: Tensor, dims: Any) -> tuple[Tensor, Tensor, Tensor]:
        """(mean, sum of squared deviations, count) of `arg` over `dims`, by Welford's algorithm.
        Dtypes: bool, integer and floating; integer and bool compute in Float; the count is Int; complex is refused.
        Differs from PyTorch: nvFuser-specific, no PyTorch counterpart; `dims` is required."""
        a = self._operand(arg, "welford")
        dims = _dims("welford", dims)
        return self._run("welford", lambda: irops.welford(self._tensor(a, "welford"), dims), (a,), (("dims", dims),))

    def cumsum(self, arg: Tensor, dim: int) -> Tensor:
        """Inclusive cumulative sum of `arg` along `dim` (torch.cumsum).
        Dtypes: any; integer and bool inputs accumulate in Int (int64), others keep their dtype.
        Differs from PyTorch: no `dtype` argument."""
        a = self._operand(arg, "cumsum")
        return self._run("cumsum", lambda: irops.cumsum(self._tensor(a, "cumsum"), dim), (a,), (("dim", dim),))

    # --- shape ----------------------------------------------------------------------------
    def broadcast(self, arg: Tensor, is_broadcast_dim: Sequence[bool]) -> Tensor:
        """`arg` with new size-1 broadcast axes where `is_broadcast_dim` is True.
        Dtypes: any, kept.
        Differs from PyTorch: nvFuser-specific (like repeated unsqueeze); the False entries must match arg's dims."""
        a = self._operand(arg, "broadcast")
        flags = [bool(f) for f in is_broadcast_dim]
        return self._run(
            "broadcast",
            lambda: irops.broadcast(self._tensor(a, "broadcast"), flags),
            (a,),
            (("is_broadcast_dim", flags),),
        )

    def broadcast_in_dim(self, arg: Tensor, shape: Any, broadcast_dims: Sequence[int]) -> Tensor:
        """`arg` broadcast to `shape`, input dim i becoming output dim broadcast_dims[i].
        Dtypes: any, kept.
        Differs from PyTorch: nvFuser's (and JAX's) form of broadcast_to: the other output dims are new broadcast axes."""
        a = self._operand(arg, "broadcast_in_dim")
        vec = self._vector(shape, "broadcast_in_dim", "shape")
        bdims = list(broadcast_dims)
        return self._run(
            "broadcast_in_dim",
            lambda: irops.broadcast_in_dim(self._tensor(a, "broadcast_in_dim"), vec.val, bdims),
            (a,),
            (("shape", vec), ("broadcast_dims", bdims)),
        )

    def expand(self, arg: Tensor, shape: Any) -> Tensor:
        """`arg` with its size-1 axes expanded to `shape` without copying (Tensor.expand).
        Dtypes: any, kept.
        Differs from PyTorch: `shape` must have one entry per dim of `arg` (-1 keeps a dim)."""
        a = self._operand(arg, "expand")
        vec = self._vector(shape, "expand", "shape")
        return self._run("expand", lambda: irops.expand(self._tensor(a, "expand"), vec.val), (a,), (("shape", vec),))

    def squeeze(self, arg: Tensor, dims: Any, squeeze_expanded: bool = False) -> Tensor:
        """`arg` without the size-1 axes `dims` (torch.squeeze).
        Dtypes: any, kept.
        Differs from PyTorch: `dims` is required; an expanded axis is squeezed only with squeeze_expanded=True."""
        a = self._operand(arg, "squeeze")
        dims = _dims("squeeze", dims)
        return self._run(
            "squeeze",
            lambda: irops.squeeze(self._tensor(a, "squeeze"), dims, squeeze_expanded),
            (a,),
            (("dims", dims), ("squeeze_expanded", squeeze_expanded)),
        )

    def reshape(self, arg: Tensor, new_shape: Any) -> Tensor:
        """`arg`'s elements in row-major order with shape `new_shape` (one entry may be -1), like torch.reshape.
        Dtypes: any, kept.
        Differs from PyTorch: the argument is named `new_shape`."""
        a = self._operand(arg, "reshape")
        vec = self._vector(new_shape, "reshape", "new_shape")
        return self._run(
            "reshape", lambda: irops.reshape(self._tensor(a, "reshape"), vec.val), (a,), (("new_shape", vec),)
        )

    def permute(self, arg: Tensor, dims: Sequence[int]) -> Tensor:
        """`arg` with its dims reordered: output dim i is input dim dims[i] (torch.permute).
        Dtypes: any, kept."""
        a = self._operand(arg, "permute")
        dims = _wrapped("permute", dims)  # nvFuser records (and prints) them normalised
        return self._run("permute", lambda: irops.permute(self._tensor(a, "permute"), dims), (a,), (("dims", dims),))

    def stride_order(self, arg: Tensor, stride_order: Sequence[int]) -> Tensor:
        """A copy of `arg` whose memory layout orders its dims by `stride_order` (largest value: outermost).
        Dtypes: any, kept.
        Differs from PyTorch: nvFuser-specific; values are unchanged, only the allocation order is set."""
        a = self._operand(arg, "stride_order")
        order = _wrapped("stride_order", stride_order)
        return self._run(
            "stride_order",
            lambda: irops.stride_order(self._tensor(a, "stride_order"), order),
            (a,),
            (("stride_order", order),),
        )

    def slice(
        self,
        arg: Tensor,
        start_indices: Any,
        end_indices: Any,
        strides: Any = None,
        manual_normalization: bool = False,
    ) -> Tensor:
        """arg[start:end:stride] along every dim; out-of-range bounds are clamped as in Python slicing.
        Dtypes: any, kept.
        Differs from PyTorch: one entry per dim in each list; strides must be positive constants; manual_normalization=True takes bounds as given."""
        a = self._operand(arg, "slice")
        start = self._vector(start_indices, "slice", "start_indices", shape_check=False)
        end = self._vector(end_indices, "slice", "end_indices", shape_check=False)
        if strides is not None:
            stride = self._vector(strides, "slice", "strides", shape_check=False)
        else:
            # nvFuser records default strides of 1: inline unless the bounds were Vectors
            ones = [self._fd._inline_scalar(1) for _ in range(len(start))]
            stride = self._fd._vector_of(ones, inline=not isinstance(start_indices, Vector))
        kwargs = [("start_indices", start), ("end_indices", end), ("strides", stride),
                  ("manual_normalization", int(bool(manual_normalization)))]
        return self._run(
            "slice",
            lambda: irops.slice_(self._tensor(a, "slice"), start.val, end.val, stride.val, manual_normalization),
            (a,),
            kwargs,
        )

    def pad(self, arg: Tensor, pad_widths: Any, value: Any = None) -> Tensor:
        # a number operand is defined (and printed) before the inline vector, so that the
        # printed definition, executed again, records the same calls in the same order
        """`arg` padded with `value` (default 0); pad_widths pairs run from the last dim backwards (F.pad).
        Dtypes: any; the result keeps arg's dtype.
        Differs from PyTorch: constant padding only."""
        a = self._operand(arg, "pad")
        v = self._optional(value, "pad", "value")
        widths = self._vector(pad_widths, "pad", "pad_widths", shape_check=False)
        return self._run(
            "pad",
            lambda: irops.pad(self._tensor(a, "pad"), widths.val, v.val if v is not None else None),
            (a, widths, v),
            (),
        )

    def cat(self, tensors: Sequence[Tensor], dim: int = 0, manual_padding: bool = False) -> Tensor:
        """The tensors concatenated along `dim` (torch.cat).
        Dtypes: any; mixed dtypes promote as in PyTorch.
        Differs from PyTorch: manual_padding=True (nvFuser's) takes tensors that are already pads' results."""
        ts = [self._operand(t, "cat", f"tensors[{k}]") for k, t in enumerate(tensors)]
        kwargs = [("dim", dim), ("manual_padding", int(bool(manual_padding)))]
        return self._run(
            "cat", lambda: irops.cat([self._tensor(t, "cat", "tensors") for t in ts], dim, bool(manual_padding)),
            (ts,), kwargs
        )

    def shape(self, arg: Tensor) -> Vector:
        """The extents of `arg`'s dims, as a Vector of Int scalars (Tensor.shape).
        Dtypes: any tensor.
        Differs from PyTorch: the result is a Vector usable as a shape argument, not a torch.Size."""
        a = self._operand(arg, "shape")
        tv = self._tensor(a, "shape")
        extents = [i.user_extent for i in tv.logical_no_reductions()]
        return self._fd._record_vector_result("ops.shape", (a,), (), extents)

    def size(self, arg: Tensor, dim: int) -> Scalar:
        """The extent of `arg`'s dim `dim`, as an Int scalar (Tensor.size(dim)).
        Dtypes: any tensor."""
        a = self._operand(arg, "size")
        tv = self._tensor(a, "size")
        (d,) = _normalized("size", [dim], tv.ndim)
        return self._run("size", lambda: tv.logical_no_reductions()[d].user_extent, (a,), (("dim", dim),))

    def at(self, arg: Vector, index: int) -> Scalar:
        """Entry `index` of the Vector `arg` (e.g. of fd.ops.shape), as a Scalar.
        Dtypes: a Vector of this definition; the entry keeps its dtype (Int for extents).
        Differs from PyTorch: nvFuser-specific."""
        if not isinstance(arg, Vector) or arg.fd is not self._fd:
            raise DefinitionTypeError(f"fd.ops.at: arg must be a Vector of this definition, got {type(arg).__name__}")
        n = len(arg.val)
        if not -n <= index < n:
            raise DefinitionIndexError(f"fd.ops.at: index {index} is out of range for a vector of {n} entries")
        return self._run("at", lambda: arg.val[index], (arg,), (("index", index),))

    # --- indexing ---------------------------------------------------------------------------
    def select(self, arg: Tensor, index: Any, dim: int) -> Tensor:
        """`arg` indexed at `index` along `dim`, dropping that dim (Tensor.select).
        Dtypes: any `arg`, kept; `index` must be an integer Scalar or Python int.
        Differs from PyTorch: argument order is (arg, index, dim)."""
        a, i = self._operand(arg, "select"), self._operand(index, "select", "index")
        return self._run("select", lambda: irops.select(self._tensor(a, "select"), i.val, dim), (a, i), (("dim", dim),))

    def index_select(self, arg: Tensor, index: Tensor, dim: int) -> Tensor:
        """`arg` with dim `dim` replaced by the positions in the 1-D `index` (torch.index_select).
        Dtypes: any `arg`, kept; `index` integer or floating (truncated); bool and complex indices are refused.
        Differs from PyTorch: argument order (arg, index, dim); a 0-dim index keeps the dim with extent 1; float indices are accepted."""
        a, i = self._operand(arg, "index_select"), self._operand(index, "index_select", "index")
        return self._run(
            "index_select",
            lambda: irops.index_select(self._tensor(a, "index_select"), i.val, dim),
            (a, i),
            (("dim", dim),),
        )

    def gather(self, arg1: Tensor, index: Tensor, dim: int) -> Tensor:
        """Values of `arg1` along `dim` at the positions in `index`, shaped like `index` (torch.gather).
        Dtypes: any `arg1`, kept; `index` integer or floating (truncated); bool and complex indices are refused.
        Differs from PyTorch: argument order (arg1, index, dim); float indices are accepted."""
        a, i = self._operand(arg1, "gather", "arg1"), self._operand(index, "gather", "index")
        return self._run(
            "gather", lambda: irops.gather(self._tensor(a, "gather"), i.val, dim), (a, i), (("dim", dim),)
        )

    def take_along_axis(self, arg1: Tensor, index: Tensor, dim: int) -> Tensor:
        """Values of `arg1` along `dim` at the positions in `index` (torch.take_along_dim with a dim).
        Dtypes: any `arg1`, kept; `index` integer or floating (truncated); bool and complex indices are refused.
        Differs from PyTorch: the other dims must match exactly (or broadcast); float indices are accepted."""
        a, i = self._operand(arg1, "take_along_axis", "arg1"), self._operand(index, "take_along_axis", "index")
        return self._run(
            "take_along_axis",
            lambda: irops.gather(self._tensor(a, "take_along_axis"), i.val, dim, exact_sizes=True),
            (a, i),
            (("dim", dim),),
        )

    def scatter(self, arg1: Tensor, index: Tensor, src: Any, dim: int) -> Tensor:
        """A copy of `arg1` with `src` written along `dim` at the positions in `index` (torch.scatter).
        Dtypes: any `arg1`, kept; a tensor `src` must have arg1's dtype (a scalar is cast); `index` integer or floating.
        Differs from PyTorch: argument order (arg1, index, src, dim); no `reduce` argument."""
        a = self._operand(arg1, "scatter", "arg1")
        i, s = self._operand(index, "scatter", "index"), self._operand(src, "scatter", "src")
        return self._run(
            "scatter", lambda: irops.scatter(self._tensor(a, "scatter"), i.val, s.val, dim), (a, i, s), (("dim", dim),)
        )

    # --- factories --------------------------------------------------------------------------
    def full(self, shape: Any, fill_value: Any, dtype: DataType) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (torch.full).
        Dtypes: any `dtype` but DataType.Null; `fill_value` is cast to it.
        Differs from PyTorch: `dtype` is required."""
        f = self._operand(fill_value, "full", "fill_value")  # before the inline shape (see pad)
        vec = self._vector(shape, "full", "shape")
        _check_dtype("full", dtype)
        return self._run("full", lambda: irops.full(vec.val, f.val, dtype), (), (("shape", vec), ("fill_value", f), ("dtype", dtype)))

    def iota(self, length: Any, start: Any = None, step: Any = None, dtype: DataType = DataType.Int) -> Tensor:
        """[start, start + step, ...] of `length` entries (torch.arange by count; start 0, step 1 by default).
        Dtypes: `dtype` integer or floating (default Int); bool and complex are refused.
        Differs from PyTorch: nvFuser-specific signature: a length instead of an end value."""
        _check_dtype("iota", dtype)
        n = self._operand(length, "iota", "length")
        s0, st = self._optional(start, "iota", "start"), self._optional(step, "iota", "step")

        def build():
            zero, one = (IrScalar(dtype, v) for v in (0, 1))
            return irops.iota(n.val, s0.val if s0 is not None else zero, st.val if st is not None else one, dtype)

        return self._run("iota", build, (n, s0, st), (("dtype", dtype),))

    def _rng(self, name: str, kind: RNGOpType, p1: Any, p2: Any, shape: Any, rng_seed: Any, rng_offset: Any, dtype: DataType):
        a, b = self._operand(p1, name, "arg1"), self._operand(p2, name, "arg2")
        seed = self._optional(rng_seed, name, "rng_seed")  # numbers before the inline shape (see pad)
        offset = self._optional(rng_offset, name, "rng_offset")
        vec = self._vector(shape, name, "shape")
        _check_dtype(name, dtype)
        kwargs: list[tuple[str, Any]] = [("shape", vec)]
        if seed is not None:
            kwargs += [("rng_seed", seed), ("rng_offset", offset)]
        kwargs.append(("dtype", dtype))
        seed_val, offset_val = (v.val if v is not None else None for v in (seed, offset))
        return self._run(
            name,
            lambda: irops.rng(kind, a.val, b.val, vec.val, seed_val, offset_val, dtype),
            (a, b),
            kwargs,
        )

    def uniform(self, minval: Any, maxval: Any, shape: Any, rng_seed: Any = None, rng_offset: Any = None, dtype: DataType = DataType.Float) -> Tensor:
        """Random numbers of `shape` drawn uniformly from [minval, maxval) (torch.rand scaled).
        Dtypes: `dtype` floating (default Float); bool, integer and complex are refused.
        Differs from PyTorch: nvFuser's `rng_seed`/`rng_offset` (given together) pick the Philox stream; the numbers are not torch.rand's."""
        return self._rng("uniform", RNGOpType.Uniform, minval, maxval, shape, rng_seed, rng_offset, dtype)

    def normal(self, mean: Any, std: Any, shape: Any, rng_seed: Any = None, rng_offset: Any = None, dtype: DataType = DataType.Float) -> Tensor:
        """Random numbers of `shape` from a normal distribution of `mean` and `std` (torch.normal).
        Dtypes: `dtype` floating (default Float); bool, integer and complex are refused.
        Differs from PyTorch: nvFuser's `rng_seed`/`rng_offset` (given together) pick the Philox stream; the numbers are not torch.randn's."""
        return self._rng("normal", RNGOpType.Normal, mean, std, shape, rng_seed, rng_offset, dtype)

    def _like(self, name: str, build, arg: Tensor, rng_seed: Any, rng_offset: Any) -> Tensor:
        a = self._operand(arg, name)
        seed = self._optional(rng_seed, name, "rng_seed")
        offset = self._optional(rng_offset, name, "rng_offset")
        args = (a, seed, offset) if seed is not None else (a,)  # nvFuser prints them positionally
        seed_val, offset_val = (v.val if v is not None else None for v in (seed, offset))
        return self._run(name, lambda: build(self._tensor(a, name), seed_val, offset_val), args, ())

    def rand_like(self, arg: Tensor, rng_seed: Any = None, rng_offset: Any = None) -> Tensor:
        """Uniform random numbers in [0, 1) with `arg`'s shape and dtype (torch.rand_like).
        Dtypes: floating `arg`; bool, integer and complex are refused.
        Differs from PyTorch: nvFuser's optional `rng_seed`/`rng_offset` (given together)."""
        return self._like("rand_like", irops.rand_like, arg, rng_seed, rng_offset)

    def randn_like(self, arg: Tensor, rng_seed: Any = None, rng_offset: Any = None) -> Tensor:
        """Standard normal random numbers with `arg`'s shape and dtype (torch.randn_like).
        Dtypes: floating `arg`; bool, integer and complex are refused.
        Differs from PyTorch: nvFuser's optional `rng_seed`/`rng_offset` (given together)."""
        return self._like("randn_like", irops.randn_like, arg, rng_seed, rng_offset)

    def triu(self, input: Tensor, diagonal: Any = 0) -> Tensor:  # noqa: A002 - nvFuser's name
        """`input` with the elements below its `diagonal`-th diagonal zeroed, over the last two dims (torch.triu).
        Dtypes: any, kept.
        Differs from PyTorch: `diagonal` may also be an Int Scalar of the definition."""
        a = self._operand(input, "triu", "input")
        if not isinstance(diagonal, int) or isinstance(diagonal, bool):
            d = self._operand(diagonal, "triu", "diagonal")
            return self._run("triu", lambda: irops.triu(self._tensor(a, "triu", "input"), d.val), (a, d), ())
        # nvFuser defines the int inline, after the output: `T1 = fd.ops.triu(T0, 1)` keeps the
        # output's index below the constant's
        fd = self._fd
        fd._check_open("fd.ops.triu")
        try:
            with fd._fusion.guard():
                diag = IrScalar(DataType.Int, diagonal)
                out = irops.triu(self._tensor(a, "triu", "input"), diag)
        except (TypeError, ValueError, IndexError) as err:
            raise nvfuser_style(err, f"fd.ops.triu: {err}") from None
        handle = fd._new_state(out)
        d = fd._new_state(diag)
        fd._record("define_scalar", (diagonal,), (("dtype", DataType.Int),), (d,), inline=True)
        fd._record("ops.triu", (a, d), (), (handle,))
        return handle

    # --- ATen-backed ------------------------------------------------------------------------
    def matmul(self, arg1: Tensor, arg2: Tensor) -> Tensor:
        """Matrix product of arg1 and arg2 with torch.matmul's 1-D and batch broadcasting rules.
        Dtypes: floating and complex; both operands must share one dtype, which the result keeps.
        Differs from PyTorch: integer and bool operands are refused; run by ATen (no generated kernel)."""
        a, b = self._operand(arg1, "matmul", "arg1"), self._operand(arg2, "matmul", "arg2")
        return self._run("matmul", lambda: irops.matmul(self._tensor(a, "matmul", "arg1"), self._tensor(b, "matmul", "arg2")), (a, b), ())

    def linear(self, arg1: Tensor, arg2: Tensor, bias: Tensor | None = None) -> Tensor:
        """arg1 @ arg2.T + bias (torch.nn.functional.linear).
        Dtypes: floating and complex; all operands must share one dtype, which the result keeps.
        Differs from PyTorch: integer and bool operands are refused; run by ATen (no generated kernel)."""
        a, w = self._operand(arg1, "linear", "arg1"), self._operand(arg2, "linear", "arg2")
        b = self._optional(bias, "linear", "bias")
        return self._run(
            "linear",
            lambda: irops.linear(
                self._tensor(a, "linear", "arg1"),
                self._tensor(w, "linear", "arg2"),
                self._tensor(b, "linear", "bias") if b is not None else None,
            ),
            (a, w) if b is None else (a, w, b),
            (),
        )

    def argsort(self, arg: Tensor, dim: int, descending: bool = False, stable: bool = False) -> Tensor:
        """Indices that sort `arg` along `dim` (torch.argsort).
        Dtypes: any `arg`; the result is Int.
        Differs from PyTorch: `dim` is required; run by ATen."""
        from fuser.ops import aten

        a = self._operand(arg, "argsort")
        flags = (("dim", dim), ("descending", bool(descending)), ("stable", bool(stable)))
        return self._run("argsort", lambda: aten.argsort(self._tensor(a, "argsort"), dim, descending, stable), (a,), flags)

    def topk(self, arg: Tensor, k: Any, dim: int = -1, largest: bool = True, sorted: bool = False) -> tuple[Tensor, Tensor]:  # noqa: A002
        """(values, indices) of the `k` largest (or smallest) entries of `arg` along `dim` (torch.topk).
        Dtypes: any `arg`, whose dtype the values keep; indices are Int; `k` must be an integer.
        Differs from PyTorch: `sorted` defaults to False; run by ATen."""
        from fuser.ops import aten

        a, kk = self._operand(arg, "topk"), self._operand(k, "topk", "k")
        flags = (("dim", dim), ("largest", bool(largest)), ("sorted", bool(sorted)))
        return self._run("topk", lambda: aten.topk(self._tensor(a, "topk"), kk.val, dim, largest, sorted), (a, kk), flags)

    def embedding_fwd(self, input: Tensor, weight: Tensor, padding_idx: Any = None, max_norm: Any = None,  # noqa: A002
                      norm_type: Any = None, scale_grad_by_freq: Any = None, sparse: Any = None) -> Tensor:
        """Rows of `weight` at the positions in `input` (torch.nn.functional.embedding).
        Dtypes: `input` integer; `weight` any 2-D tensor, whose dtype the result keeps.
        Differs from PyTorch: every option is a positional Scalar or None; run by ATen."""
        from fuser.ops import aten

        names = ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
        vals = (input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
        hs = [self._optional(v, "embedding_fwd", n) for n, v in zip(names, vals)]
        return self._run("embedding_fwd", lambda: aten.embedding_fwd(*(h.val if h is not None else None for h in hs)),
                         hs, ())

    def sdpfa_fwd(self, query: Tensor, key: Tensor, value: Tensor, dropout_p: Any = None, is_causal: Any = None,
                  scale: Any = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Flash attention forward: (output, log_sumexp, philox_seed, philox_offset) of 4-D q, k, v.
        Dtypes: floating query, key and value; output keeps query's dtype, log_sumexp is Float.
        Differs from PyTorch: the outputs of aten._scaled_dot_product_flash_attention; run by ATen."""
        from fuser.ops import aten

        names = ("query", "key", "value", "dropout_p", "is_causal", "scale")
        hs = [self._optional(v, "sdpfa_fwd", n) for n, v in zip(names, (query, key, value, dropout_p, is_causal, scale))]
        return self._run("sdpfa_fwd", lambda: aten.sdpfa_fwd(*(h.val if h is not None else None for h in hs)), hs, ())

    def sdpfa_bwd(self, grad_output: Tensor, query: Tensor, key: Tensor, value: Tensor, output: Tensor,
                  log_sumexp: Tensor, dropout_p: Any = None, is_causal: Any = None, philox_seed: Tensor = None,
                  philox_offset: Tensor = None, scale: Any = None) -> tuple[Tensor, Tensor, Tensor]:
        """Flash attention backward: the gradients of query, key and value.
        Dtypes: floating query, key and value; each gradient keeps its operand's dtype.
        Differs from PyTorch: aten._scaled_dot_product_flash_attention_backward's inputs; philox tensors are required; run by ATen."""
        from fuser.ops import aten

        names = ("grad_output", "query", "key", "value", "output", "log_sumexp", "dropout_p", "is_causal",
                 "philox_seed", "philox_offset", "scale")
        vals = (grad_output, query, key, value, output, log_sumexp, dropout_p, is_causal, philox_seed, philox_offset, scale)
        hs = [self._optional(v, "sdpfa_bwd", n) for n, v in zip(names, vals)]
        if hs[8] is None or hs[9] is None:
            raise DefinitionTypeError("fd.ops.sdpfa_bwd: philox_seed and philox_offset are required")
        return self._run("sdpfa_bwd", lambda: aten.sdpfa_bwd(*(h.val if h is not None else None for h in hs)), hs, ())

    def grouped_mm(self, mat1: Tensor, mat2: Tensor, offsets: Tensor) -> Tensor:
        """Matrix products of the groups that the 1-D `offsets` delimits (torch._grouped_mm).
        Dtypes: `offsets` integer; mat1 and mat2 are not checked at definition time (the result has their promoted dtype).
        Differs from PyTorch: run by ATen, falling back to a loop of matmuls where torch._grouped_mm cannot run."""
        from fuser.ops import aten

        hs = [self._operand(v, "grouped_mm", n) for n, v in (("mat1", mat1), ("mat2", mat2), ("offsets", offsets))]
        return self._run("grouped_mm", lambda: aten.grouped_mm(*(h.val for h in hs)), hs, ())

    def bitcast(self, arg: Tensor, dtype: DataType) -> Tensor:
        """`arg`'s bits reinterpreted as `dtype`, which must have the same size (Tensor.view(dtype)).
        Dtypes: any pair of dtypes of equal size (e.g. Float <-> Int32).
        Differs from PyTorch: dtypes of different sizes are refused; run by ATen."""
        from fuser.ops import aten

        a = self._operand(arg, "bitcast")
        _check_dtype("bitcast", dtype)
        return self._run("bitcast", lambda: aten.bitcast(self._tensor(a, "bitcast"), dtype), (a,), (("dtype", dtype),))

    def ndtri(self, arg: Tensor) -> Tensor:
        """Inverse of the standard normal CDF of each element (torch.special.ndtri).
        Dtypes: bool, integer and floating; integer and bool give Float; complex is refused.
        Differs from PyTorch: run by ATen."""
        from fuser.ops import aten

        a = self._operand(arg, "ndtri")
        return self._run("ndtri", lambda: aten.ndtri(self._tensor(a, "ndtri")), (a,), ())


# Dtype rules shared by several generated ops (each op's docstring is its own entry below).
_TO_FLOAT = ("Dtypes: any; floating and complex inputs keep their dtype, integer and bool inputs "
             "give Float (as in PyTorch).")
_TO_FLOAT_REAL = ("Dtypes: bool, integer and floating; integer and bool inputs give Float, floating ones "
                  "keep their dtype; complex is refused.")
_ROUNDING = "Dtypes: integer and floating, kept (integers pass through unchanged); bool and complex are refused."
_PREDICATE = "Dtypes: any; the result is Bool."
_PREDICATE_REAL = "Dtypes: bool, integer and floating; the result is Bool; complex is refused."
_PROMOTE = ("Dtypes: any; operands promote as in PyTorch (a Tensor with dimensions outranks a 0-dim one, "
            "which outranks a Scalar or Python number).")
_COMPARE = "Dtypes: any; operands are compared in their promoted type; the result is Bool."
_COMPARE_REAL = "Dtypes: bool, integer and floating (complex is refused); the result is Bool."
_BITWISE = "Dtypes: integer and bool operands only; the result has their promoted dtype."
_SHIFT = ("Dtypes: integer operands (a bool beside an integer is accepted, two bools are refused); "
          "the result has their promoted dtype.")
_NUMBERS = ("Differs from PyTorch: Python numbers are accepted for either operand; two Scalars of one "
            "dtype keep it (two Double Scalars give Double).")

#: fd.ops' elementwise unary ops, made in a loop below: each op's docstring
_UNARY_DOCS: dict[str, str] = {
    "abs": "Absolute value of each element (the magnitude for complex).\n"
           "Dtypes: integer, floating and complex; complex gives its real counterpart (ComplexFloat -> Float); "
           "bool is refused.",
    "acos": f"Arccosine of each element, in radians.\n{_TO_FLOAT}",
    "acosh": f"Inverse hyperbolic cosine of each element.\n{_TO_FLOAT}",
    "asin": f"Arcsine of each element, in radians.\n{_TO_FLOAT}",
    "asinh": f"Inverse hyperbolic sine of each element.\n{_TO_FLOAT}",
    "atan": f"Arctangent of each element, in radians.\n{_TO_FLOAT}",
    "atanh": f"Inverse hyperbolic tangent of each element.\n{_TO_FLOAT}",
    "bitwise_not": "Bitwise complement of each element (logical negation for bool).\n"
                   "Dtypes: integer and bool, kept; floating and complex are refused.",
    "ceil": f"Smallest integral value not below each element.\n{_ROUNDING}",
    "cos": f"Cosine of each element (radians).\n{_TO_FLOAT}",
    "cosh": f"Hyperbolic cosine of each element.\n{_TO_FLOAT}",
    "exp": f"e raised to each element.\n{_TO_FLOAT}",
    "exp2": f"2 raised to each element.\n{_TO_FLOAT}",
    "expm1": f"exp(x) - 1 of each element, accurate near zero.\n{_TO_FLOAT}",
    "erf": f"Gauss error function of each element.\n{_TO_FLOAT_REAL}",
    "erfc": f"Complementary error function, 1 - erf(x), of each element.\n{_TO_FLOAT_REAL}",
    "erfinv": f"Inverse error function of each element.\n{_TO_FLOAT_REAL}",
    "erfcinv": "Inverse complementary error function of each element: y with erfc(y) = x.\n"
               "Dtypes: floating only, kept; bool, integer and complex are refused.\n"
               "Differs from PyTorch: PyTorch has no erfcinv (it equals torch.erfinv(1 - x)).",
    "floor": f"Largest integral value not above each element.\n{_ROUNDING}",
    "frac": "Fractional part of each element, x - trunc(x).\n"
            "Dtypes: floating only, kept; bool, integer and complex are refused.",
    "imag": "Imaginary part of each element of a complex tensor.\n"
            "Dtypes: complex only; the result is the real counterpart (ComplexFloat -> Float).",
    "isfinite": f"Whether each element is finite (neither infinite nor NaN).\n{_PREDICATE}",
    "isinf": f"Whether each element is positive or negative infinity.\n{_PREDICATE}",
    "isnan": f"Whether each element is NaN.\n{_PREDICATE}",
    "isneginf": f"Whether each element is negative infinity.\n{_PREDICATE_REAL}",
    "isposinf": f"Whether each element is positive infinity.\n{_PREDICATE_REAL}",
    "isreal": f"Whether each element has a zero imaginary part (always true for non-complex).\n{_PREDICATE}",
    "lgamma": f"Natural log of the absolute value of the gamma function of each element.\n{_TO_FLOAT_REAL}",
    "log": f"Natural logarithm of each element.\n{_TO_FLOAT}",
    "log10": f"Base-10 logarithm of each element.\n{_TO_FLOAT}",
    "log1p": f"log(1 + x) of each element, accurate near zero.\n{_TO_FLOAT}",
    "log2": f"Base-2 logarithm of each element.\n{_TO_FLOAT}",
    "logical_not": f"True where an element is zero (false), False elsewhere.\n{_PREDICATE}",
    "neg": "Negation of each element.\n"
           "Dtypes: integer, floating and complex, kept; bool is refused (use logical_not).",
    "real": "Real part of each element; non-complex inputs are returned unchanged.\n"
            "Dtypes: any; complex gives its real counterpart (ComplexFloat -> Float), others are kept.",
    "reciprocal": f"1 / x of each element.\n{_TO_FLOAT}",
    "relu": "max(x, 0) of each element.\n"
            "Dtypes: integer and floating, kept; bool and complex are refused.",
    "round": f"Each element rounded to the nearest integral value.\n{_ROUNDING}",
    "rsqrt": f"1 / sqrt(x) of each element.\n{_TO_FLOAT}",
    "sigmoid": f"Logistic function 1 / (1 + exp(-x)) of each element.\n{_TO_FLOAT}",
    "sign": "-1, 0 or 1 according to each element's sign.\n"
            "Dtypes: bool, integer and floating, kept; complex is refused.",
    "signbit": f"Whether each element's sign bit is set (true for -0.0).\n{_PREDICATE_REAL}",
    "silu": "x * sigmoid(x) of each element (SiLU, also called swish).\n"
            "Dtypes: floating and complex, kept; bool and integer are refused (as torch.nn.functional.silu).",
    "sin": f"Sine of each element (radians).\n{_TO_FLOAT}",
    "sinh": f"Hyperbolic sine of each element.\n{_TO_FLOAT}",
    "sqrt": f"Square root of each element.\n{_TO_FLOAT}",
    "tan": f"Tangent of each element (radians).\n{_TO_FLOAT}",
    "tanh": f"Hyperbolic tangent of each element.\n{_TO_FLOAT}",
    "trunc": f"Each element rounded toward zero.\n{_ROUNDING}",
}

#: fd.ops' elementwise binary ops, made in a loop below: each op's docstring
_BINARY_DOCS: dict[str, str] = {
    "add": f"arg1 + arg2, elementwise with broadcasting.\n{_PROMOTE}\n{_NUMBERS}",
    "sub": "arg1 - arg2, elementwise with broadcasting.\n"
           "Dtypes: integer, floating and complex, promoted as in PyTorch; bool operands are refused.\n"
           f"{_NUMBERS}",
    "mul": f"arg1 * arg2, elementwise with broadcasting.\n{_PROMOTE}\n{_NUMBERS}",
    "div": "arg1 / arg2 in the promoted dtype: integer division truncates toward zero.\n"
           "Dtypes: integer, floating and complex, promoted as in PyTorch; operands that promote to bool are refused.\n"
           "Differs from PyTorch: torch.div true-divides integers into Float; here integers stay integers "
           "(nvFuser's div; use truediv for a floating quotient).",
    "mod": "Remainder of arg1 / arg2 with the sign of arg1 (C's %, as torch.fmod).\n"
           "Dtypes: integer and floating, promoted; complex operands and a bool result are refused.\n"
           "Differs from PyTorch: PyTorch has no mod; Python's % (torch.remainder) takes the sign of arg2.",
    "remainder": "Remainder of arg1 / arg2 with the sign of arg2 (Python's %, torch.remainder).\n"
                 "Dtypes: integer and floating, promoted; complex operands and a bool result are refused.",
    "fmod": "Remainder of arg1 / arg2 with the sign of arg1 (torch.fmod).\n"
            "Dtypes: integer and floating, promoted; complex operands and a bool result are refused.",
    "pow": "arg1 raised to the power arg2, elementwise.\n"
           "Dtypes: integer, floating and complex, promoted as in PyTorch; a bool result (two bools) is refused.",
    "atan2": "Arctangent of arg1 / arg2 using both signs to pick the quadrant, elementwise.\n"
             "Dtypes: bool, integer and floating; integer and bool operands give Float; complex is refused.",
    "maximum": "Elementwise larger of arg1 and arg2.\n"
               "Dtypes: bool, integer and floating, promoted as in PyTorch; complex is refused.\n"
               "Differs from PyTorch: a Python number or Scalar operand is accepted.",
    "minimum": "Elementwise smaller of arg1 and arg2.\n"
               "Dtypes: bool, integer and floating, promoted as in PyTorch; complex is refused.\n"
               "Differs from PyTorch: a Python number or Scalar operand is accepted.",
    "eq": f"arg1 == arg2, elementwise.\n{_COMPARE}",
    "ne": f"arg1 != arg2, elementwise.\n{_COMPARE}",
    "lt": f"arg1 < arg2, elementwise.\n{_COMPARE_REAL}",
    "le": f"arg1 <= arg2, elementwise.\n{_COMPARE_REAL}",
    "gt": f"arg1 > arg2, elementwise.\n{_COMPARE_REAL}",
    "ge": f"arg1 >= arg2, elementwise.\n{_COMPARE_REAL}",
    "logical_and": "True where both elements are nonzero, elementwise.\nDtypes: any (nonzero is true); the result is Bool.",
    "logical_or": "True where either element is nonzero, elementwise.\nDtypes: any (nonzero is true); the result is Bool.",
    "bitwise_and": f"Bitwise AND of arg1 and arg2 (logical AND for bool).\n{_BITWISE}",
    "bitwise_or": f"Bitwise OR of arg1 and arg2 (logical OR for bool).\n{_BITWISE}",
    "bitwise_xor": f"Bitwise exclusive OR of arg1 and arg2 (logical XOR for bool).\n{_BITWISE}",
    "bitwise_left_shift": f"arg1 shifted left by arg2 bits, elementwise.\n{_SHIFT}",
    "bitwise_right_shift": f"arg1 shifted right by arg2 bits, copying the sign bit for signed types.\n{_SHIFT}",
    "logical_right_shift": "arg1 shifted right by arg2 bits, filling with zeros (also for negative values).\n"
                           f"{_SHIFT}\n"
                           "Differs from PyTorch: PyTorch has no such op (nvFuser's; torch's >> is arithmetic).",
    "gcd": "Greatest common divisor of arg1 and arg2, elementwise.\n" + _SHIFT,
    "nextafter": "The next representable value after arg1 in the direction of arg2, elementwise.\n"
                 "Dtypes: operands that promote to a floating dtype (kept); complex is refused.",
}


def _make_unary(name: str):
    def op(self: Operators, arg: Any) -> Any:
        return self._unary(name, arg)

    op.__name__ = name
    op.__doc__ = _UNARY_DOCS[name]
    return op


def _make_binary(name: str):
    def op(self: Operators, arg1: Any, arg2: Any) -> Any:
        return self._binary(name, arg1, arg2)

    op.__name__ = name
    op.__doc__ = _BINARY_DOCS[name]
    return op


for _name in _UNARY:
    setattr(Operators, _name, _make_unary(_name))
for _name in _BINARY:
    setattr(Operators, _name, _make_binary(_name))


def _check_dtype(name: str, dtype: Any) -> None:
    if not isinstance(dtype, DataType):
        raise DefinitionTypeError(f"fd.ops.{name}: dtype must be a DataType, got {dtype!r}")


def _dims(name: str, dims: Any) -> list[int]:
    if isinstance(dims, int) and not isinstance(dims, bool):
        return [dims]
    try:
        out = list(dims)
    except TypeError:
        raise DefinitionTypeError(f"fd.ops.{name}: dims must be an int or a list of ints, got {dims!r}") from None
    for d in out:
        if not isinstance(d, int) or isinstance(d, bool):
            raise DefinitionTypeError(f"fd.ops.{name}: dims must be ints, got {d!r}")
    return out


def _merge_dim(name: str, dims: Any, dim: Any) -> list[int] | None:
    """`dims` and nvFuser's `dim=` (the int overload) as one list; None when neither is given."""
    if dim is not None:
        if dims is not None:
            raise DefinitionTypeError(f"fd.ops.{name}: pass dims or dim, not both")
        dims = dim
    return None if dims is None else _dims(name, dims)


def _wrapped(name: str, dims: Sequence[int]) -> list[int]:
    """Dims of a permutation-like argument with negative ones wrapped (nvFuser records them so)."""
    dims = _dims(name, dims)
    n = len(dims)
    return [d + n if -n <= d < 0 else d for d in dims]  # the builder checks the permutation


def _normalized(name: str, dims: Sequence[int], ndim: int) -> list[int]:
    try:
        return [irops.normalize_dims([d], ndim, "dim")[0] for d in dims]
    except (IndexError, TypeError, ValueError) as err:
        raise nvfuser_style(err, f"fd.ops.{name}: {err}") from None


__all__ = ["Operators", "IrScalar"]
