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
        """a / b with a floating result: integer operands divide in Float (`div` truncates)."""
        a, b = self._operand(arg1, "truediv", "arg1"), self._operand(arg2, "truediv", "arg2")
        return self._run("truediv", lambda: irops.truediv(a.val, b.val), (a, b), ())

    def cast(self, arg: Any, dtype: DataType) -> Any:
        a = self._operand(arg, "cast")
        _check_dtype("cast", dtype)
        return self._run("cast", lambda: irops.cast(a.val, dtype), (a,), (("dtype", dtype),))

    def set(self, arg: Tensor) -> Tensor:
        a = self._operand(arg, "set")
        return self._run("set", lambda: irops.set_(a.val), (a,), ())

    def segment_set(self, arg: Tensor) -> Tensor:
        from fuser.ir import LoadStoreOpType

        a = self._operand(arg, "segment_set")
        return self._run("segment_set", lambda: irops.set_(a.val, LoadStoreOpType.SegmenterSet), (a,), ())

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        c, x, y = (self._operand(v, "where", w) for v, w in ((cond, "cond"), (a, "a"), (b, "b")))
        return self._run("where", lambda: irops.where(c.val, x.val, y.val), (c, x, y), ())

    def lerp(self, a: Any, b: Any, w: Any) -> Any:
        s, e, wt = (self._operand(v, "lerp", n) for v, n in ((a, "a"), (b, "b"), (w, "w")))
        return self._run("lerp", lambda: irops.ternary(TernaryOpType.Lerp, s.val, e.val, wt.val), (s, e, wt), ())

    def clamp(self, x: Any, min: Any, max: Any) -> Any:  # noqa: A002 - nvFuser's keyword names
        a, lo, hi = (self._operand(v, "clamp", n) for v, n in ((x, "x"), (min, "min"), (max, "max")))
        return self._run("clamp", lambda: irops.ternary(TernaryOpType.Clamp, a.val, lo.val, hi.val), (a, lo, hi), ())

    def threshold(self, x: Any, threshold: Any, value: Any) -> Any:
        a, t, v = (self._operand(u, "threshold", n) for u, n in ((x, "x"), (threshold, "threshold"), (value, "value")))
        return self._run(
            "threshold", lambda: irops.ternary(TernaryOpType.Threshold, a.val, t.val, v.val), (a, t, v), ()
        )

    def addcmul(self, a: Any, b: Any, c: Any, value: Any) -> Any:
        x, y, z, v = (self._operand(u, "addcmul", n) for u, n in ((a, "a"), (b, "b"), (c, "c"), (value, "value")))
        return self._run("addcmul", lambda: irops.addcmul(x.val, y.val, z.val, v.val), (x, y, z, v), ())

    def add_alpha(self, a: Any, b: Any, alpha: Any) -> Any:
        x, y, al = (self._operand(u, "add_alpha", n) for u, n in ((a, "a"), (b, "b"), (alpha, "alpha")))
        return self._run("add_alpha", lambda: irops.add_alpha(x.val, y.val, al.val), (x, y, al), ())

    def sub_alpha(self, a: Any, b: Any, alpha: Any) -> Any:
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
        return self._reduction("sum", arg, dims, keepdim, dtype, dim)

    def prod(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
             dim: Any = None) -> Tensor:
        return self._reduction("prod", arg, dims, keepdim, dtype, dim)

    def max(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
            dim: Any = None) -> Tensor:
        return self._reduction("max", arg, dims, keepdim, dtype, dim)

    def min(self, arg: Tensor, dims: Any = None, keepdim: bool = False, dtype: DataType = DataType.Null, *,
            dim: Any = None) -> Tensor:
        return self._reduction("min", arg, dims, keepdim, dtype, dim)

    def var(self, arg: Tensor, dims: Any = None, correction: int = 1, keepdim: bool = False, *, dim: Any = None) -> Tensor:
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
        a = self._operand(arg, "welford")
        dims = _dims("welford", dims)
        return self._run("welford", lambda: irops.welford(self._tensor(a, "welford"), dims), (a,), (("dims", dims),))

    def cumsum(self, arg: Tensor, dim: int) -> Tensor:
        a = self._operand(arg, "cumsum")
        return self._run("cumsum", lambda: irops.cumsum(self._tensor(a, "cumsum"), dim), (a,), (("dim", dim),))

    # --- shape ----------------------------------------------------------------------------
    def broadcast(self, arg: Tensor, is_broadcast_dim: Sequence[bool]) -> Tensor:
        a = self._operand(arg, "broadcast")
        flags = [bool(f) for f in is_broadcast_dim]
        return self._run(
            "broadcast",
            lambda: irops.broadcast(self._tensor(a, "broadcast"), flags),
            (a,),
            (("is_broadcast_dim", flags),),
        )

    def broadcast_in_dim(self, arg: Tensor, shape: Any, broadcast_dims: Sequence[int]) -> Tensor:
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
        a = self._operand(arg, "expand")
        vec = self._vector(shape, "expand", "shape")
        return self._run("expand", lambda: irops.expand(self._tensor(a, "expand"), vec.val), (a,), (("shape", vec),))

    def squeeze(self, arg: Tensor, dims: Any, squeeze_expanded: bool = False) -> Tensor:
        a = self._operand(arg, "squeeze")
        dims = _dims("squeeze", dims)
        return self._run(
            "squeeze",
            lambda: irops.squeeze(self._tensor(a, "squeeze"), dims, squeeze_expanded),
            (a,),
            (("dims", dims), ("squeeze_expanded", squeeze_expanded)),
        )

    def reshape(self, arg: Tensor, new_shape: Any) -> Tensor:
        a = self._operand(arg, "reshape")
        vec = self._vector(new_shape, "reshape", "new_shape")
        return self._run(
            "reshape", lambda: irops.reshape(self._tensor(a, "reshape"), vec.val), (a,), (("new_shape", vec),)
        )

    def permute(self, arg: Tensor, dims: Sequence[int]) -> Tensor:
        a = self._operand(arg, "permute")
        dims = _wrapped("permute", dims)  # nvFuser records (and prints) them normalised
        return self._run("permute", lambda: irops.permute(self._tensor(a, "permute"), dims), (a,), (("dims", dims),))

    def stride_order(self, arg: Tensor, stride_order: Sequence[int]) -> Tensor:
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
        ts = [self._operand(t, "cat", f"tensors[{k}]") for k, t in enumerate(tensors)]
        kwargs = [("dim", dim), ("manual_padding", int(bool(manual_padding)))]
        return self._run(
            "cat", lambda: irops.cat([self._tensor(t, "cat", "tensors") for t in ts], dim, bool(manual_padding)),
            (ts,), kwargs
        )

    def shape(self, arg: Tensor) -> Vector:
        a = self._operand(arg, "shape")
        tv = self._tensor(a, "shape")
        extents = [i.user_extent for i in tv.logical_no_reductions()]
        return self._fd._record_vector_result("ops.shape", (a,), (), extents)

    def size(self, arg: Tensor, dim: int) -> Scalar:
        a = self._operand(arg, "size")
        tv = self._tensor(a, "size")
        (d,) = _normalized("size", [dim], tv.ndim)
        return self._run("size", lambda: tv.logical_no_reductions()[d].user_extent, (a,), (("dim", dim),))

    def at(self, arg: Vector, index: int) -> Scalar:
        if not isinstance(arg, Vector) or arg.fd is not self._fd:
            raise DefinitionTypeError(f"fd.ops.at: arg must be a Vector of this definition, got {type(arg).__name__}")
        n = len(arg.val)
        if not -n <= index < n:
            raise DefinitionIndexError(f"fd.ops.at: index {index} is out of range for a vector of {n} entries")
        return self._run("at", lambda: arg.val[index], (arg,), (("index", index),))

    # --- indexing ---------------------------------------------------------------------------
    def select(self, arg: Tensor, index: Any, dim: int) -> Tensor:
        a, i = self._operand(arg, "select"), self._operand(index, "select", "index")
        return self._run("select", lambda: irops.select(self._tensor(a, "select"), i.val, dim), (a, i), (("dim", dim),))

    def index_select(self, arg: Tensor, index: Tensor, dim: int) -> Tensor:
        """torch.index_select; a 0-dim index selects one slice and keeps the axis (extent 1)."""
        a, i = self._operand(arg, "index_select"), self._operand(index, "index_select", "index")
        return self._run(
            "index_select",
            lambda: irops.index_select(self._tensor(a, "index_select"), i.val, dim),
            (a, i),
            (("dim", dim),),
        )

    def gather(self, arg1: Tensor, index: Tensor, dim: int) -> Tensor:
        a, i = self._operand(arg1, "gather", "arg1"), self._operand(index, "gather", "index")
        return self._run(
            "gather", lambda: irops.gather(self._tensor(a, "gather"), i.val, dim), (a, i), (("dim", dim),)
        )

    def take_along_axis(self, arg1: Tensor, index: Tensor, dim: int) -> Tensor:
        a, i = self._operand(arg1, "take_along_axis", "arg1"), self._operand(index, "take_along_axis", "index")
        return self._run(
            "take_along_axis",
            lambda: irops.gather(self._tensor(a, "take_along_axis"), i.val, dim, exact_sizes=True),
            (a, i),
            (("dim", dim),),
        )

    def scatter(self, arg1: Tensor, index: Tensor, src: Any, dim: int) -> Tensor:
        """torch.scatter; a scalar `src` writes that value at every index."""
        a = self._operand(arg1, "scatter", "arg1")
        i, s = self._operand(index, "scatter", "index"), self._operand(src, "scatter", "src")
        return self._run(
            "scatter", lambda: irops.scatter(self._tensor(a, "scatter"), i.val, s.val, dim), (a, i, s), (("dim", dim),)
        )

    # --- factories --------------------------------------------------------------------------
    def full(self, shape: Any, fill_value: Any, dtype: DataType) -> Tensor:
        f = self._operand(fill_value, "full", "fill_value")  # before the inline shape (see pad)
        vec = self._vector(shape, "full", "shape")
        _check_dtype("full", dtype)
        return self._run("full", lambda: irops.full(vec.val, f.val, dtype), (), (("shape", vec), ("fill_value", f), ("dtype", dtype)))

    def iota(self, length: Any, start: Any = None, step: Any = None, dtype: DataType = DataType.Int) -> Tensor:
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
        return self._rng("uniform", RNGOpType.Uniform, minval, maxval, shape, rng_seed, rng_offset, dtype)

    def normal(self, mean: Any, std: Any, shape: Any, rng_seed: Any = None, rng_offset: Any = None, dtype: DataType = DataType.Float) -> Tensor:
        return self._rng("normal", RNGOpType.Normal, mean, std, shape, rng_seed, rng_offset, dtype)

    def _like(self, name: str, build, arg: Tensor, rng_seed: Any, rng_offset: Any) -> Tensor:
        a = self._operand(arg, name)
        seed = self._optional(rng_seed, name, "rng_seed")
        offset = self._optional(rng_offset, name, "rng_offset")
        args = (a, seed, offset) if seed is not None else (a,)  # nvFuser prints them positionally
        seed_val, offset_val = (v.val if v is not None else None for v in (seed, offset))
        return self._run(name, lambda: build(self._tensor(a, name), seed_val, offset_val), args, ())

    def rand_like(self, arg: Tensor, rng_seed: Any = None, rng_offset: Any = None) -> Tensor:
        return self._like("rand_like", irops.rand_like, arg, rng_seed, rng_offset)

    def randn_like(self, arg: Tensor, rng_seed: Any = None, rng_offset: Any = None) -> Tensor:
        return self._like("randn_like", irops.randn_like, arg, rng_seed, rng_offset)

    def triu(self, input: Tensor, diagonal: Any = 0) -> Tensor:  # noqa: A002 - nvFuser's name
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
        a, b = self._operand(arg1, "matmul", "arg1"), self._operand(arg2, "matmul", "arg2")
        return self._run("matmul", lambda: irops.matmul(self._tensor(a, "matmul", "arg1"), self._tensor(b, "matmul", "arg2")), (a, b), ())

    def linear(self, arg1: Tensor, arg2: Tensor, bias: Tensor | None = None) -> Tensor:
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
        """Indices sorting `arg` along `dim` (torch.argsort; run by ATen)."""
        from fuser.ops import aten

        a = self._operand(arg, "argsort")
        flags = (("dim", dim), ("descending", bool(descending)), ("stable", bool(stable)))
        return self._run("argsort", lambda: aten.argsort(self._tensor(a, "argsort"), dim, descending, stable), (a,), flags)

    def topk(self, arg: Tensor, k: Any, dim: int = -1, largest: bool = True, sorted: bool = False) -> tuple[Tensor, Tensor]:  # noqa: A002
        """(values, indices) of the `k` largest (or smallest) along `dim` (torch.topk; run by ATen)."""
        from fuser.ops import aten

        a, kk = self._operand(arg, "topk"), self._operand(k, "topk", "k")
        flags = (("dim", dim), ("largest", bool(largest)), ("sorted", bool(sorted)))
        return self._run("topk", lambda: aten.topk(self._tensor(a, "topk"), kk.val, dim, largest, sorted), (a, kk), flags)

    def embedding_fwd(self, input: Tensor, weight: Tensor, padding_idx: Any = None, max_norm: Any = None,  # noqa: A002
                      norm_type: Any = None, scale_grad_by_freq: Any = None, sparse: Any = None) -> Tensor:
        """Rows of `weight` at `input`'s positions (F.embedding; run by ATen)."""
        from fuser.ops import aten

        names = ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse")
        vals = (input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
        hs = [self._optional(v, "embedding_fwd", n) for n, v in zip(names, vals)]
        return self._run("embedding_fwd", lambda: aten.embedding_fwd(*(h.val if h is not None else None for h in hs)),
                         hs, ())

    def sdpfa_fwd(self, query: Tensor, key: Tensor, value: Tensor, dropout_p: Any = None, is_causal: Any = None,
                  scale: Any = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Flash attention: (output, log_sumexp, philox_seed, philox_offset) (run by ATen)."""
        from fuser.ops import aten

        names = ("query", "key", "value", "dropout_p", "is_causal", "scale")
        hs = [self._optional(v, "sdpfa_fwd", n) for n, v in zip(names, (query, key, value, dropout_p, is_causal, scale))]
        return self._run("sdpfa_fwd", lambda: aten.sdpfa_fwd(*(h.val if h is not None else None for h in hs)), hs, ())

    def sdpfa_bwd(self, grad_output: Tensor, query: Tensor, key: Tensor, value: Tensor, output: Tensor,
                  log_sumexp: Tensor, dropout_p: Any = None, is_causal: Any = None, philox_seed: Tensor = None,
                  philox_offset: Tensor = None, scale: Any = None) -> tuple[Tensor, Tensor, Tensor]:
        """Flash attention backward: the gradients of query, key and value (run by ATen)."""
        from fuser.ops import aten

        names = ("grad_output", "query", "key", "value", "output", "log_sumexp", "dropout_p", "is_causal",
                 "philox_seed", "philox_offset", "scale")
        vals = (grad_output, query, key, value, output, log_sumexp, dropout_p, is_causal, philox_seed, philox_offset, scale)
        hs = [self._optional(v, "sdpfa_bwd", n) for n, v in zip(names, vals)]
        if hs[8] is None or hs[9] is None:
            raise DefinitionTypeError("fd.ops.sdpfa_bwd: philox_seed and philox_offset are required")
        return self._run("sdpfa_bwd", lambda: aten.sdpfa_bwd(*(h.val if h is not None else None for h in hs)), hs, ())

    def grouped_mm(self, mat1: Tensor, mat2: Tensor, offsets: Tensor) -> Tensor:
        """Matmuls of the groups `offsets` delimits (torch._grouped_mm; run by ATen)."""
        from fuser.ops import aten

        hs = [self._operand(v, "grouped_mm", n) for n, v in (("mat1", mat1), ("mat2", mat2), ("offsets", offsets))]
        return self._run("grouped_mm", lambda: aten.grouped_mm(*(h.val for h in hs)), hs, ())

    def bitcast(self, arg: Tensor, dtype: DataType) -> Tensor:
        """`arg`'s bits as `dtype` of the same size (Tensor.view(dtype); run by ATen)."""
        from fuser.ops import aten

        a = self._operand(arg, "bitcast")
        _check_dtype("bitcast", dtype)
        return self._run("bitcast", lambda: aten.bitcast(self._tensor(a, "bitcast"), dtype), (a,), (("dtype", dtype),))

    def ndtri(self, arg: Tensor) -> Tensor:
        """The inverse of the standard normal CDF (torch.special.ndtri; run by ATen)."""
        from fuser.ops import aten

        a = self._operand(arg, "ndtri")
        return self._run("ndtri", lambda: aten.ndtri(self._tensor(a, "ndtri")), (a,), ())


def _make_unary(name: str):
    def op(self: Operators, arg: Any) -> Any:
        return self._unary(name, arg)

    op.__name__ = name
    op.__doc__ = f"Elementwise {name}."
    return op


def _make_binary(name: str):
    def op(self: Operators, arg1: Any, arg2: Any) -> Any:
        return self._binary(name, arg1, arg2)

    op.__name__ = name
    op.__doc__ = f"Elementwise {name} with nvFuser's type promotion and broadcasting."
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
