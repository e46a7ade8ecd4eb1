"""`fd.ops`: every operation of nvFuser's frontend, recording a Record and building IR."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from fuser import ops as irops
from fuser.ir import BinaryOpType, DataType, RNGOpType, TernaryOpType, UnaryOpType
from fuser.ir import Scalar as IrScalar
from fuser.ir import TensorView

from .handles import Scalar, Tensor, Vector, _State

if TYPE_CHECKING:
    from .fusion_definition import FusionDefinition

_UNARY = {t.value: t for t in UnaryOpType if t is not UnaryOpType.Cast}
_BINARY = {t.value: t for t in BinaryOpType if t is not BinaryOpType.CeilDiv}
_BINARY["truediv"] = BinaryOpType.Div
_REDUCTIONS = {"sum": BinaryOpType.Add, "prod": BinaryOpType.Mul, "max": BinaryOpType.Max, "min": BinaryOpType.Min}


class Operators:
    """The `fd.ops` namespace of one FusionDefinition."""

    def __init__(self, fd: "FusionDefinition") -> None:
        self._fd = fd

    # --- plumbing ---------------------------------------------------------------------
    def _run(self, name: str, build: Callable[[], Any], args: Sequence[Any], kwargs: Sequence[tuple[str, Any]]):
        """Build IR for `fd.ops.<name>(*args, **kwargs)`, record it, return new handles."""
        fd = self._fd
        try:
            with fd._fusion.guard():
                result = build()
        except (TypeError, ValueError, IndexError) as err:
            raise type(err)(f"fd.ops.{name}: {err}") from None
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
            raise TypeError(f"fd.ops.{name}: {what} must be a Tensor, got {type(x).__name__}")
        return v

    def _operand(self, x: Any, name: str, what: str = "arg") -> _State:
        """A handle for an argument, defining a constant for a Python number."""
        return self._fd._as_state(x, f"fd.ops.{name}: {what}")

    # --- elementwise --------------------------------------------------------------------
    def _unary(self, name: str, arg: Any) -> Any:
        a = self._operand(arg, name)
        op = _UNARY[name]
        return self._run(name, lambda: irops.unary(op, a.val), (a,), ())

    def _binary(self, name: str, arg1: Any, arg2: Any) -> Any:
        a, b = self._operand(arg1, name, "arg1"), self._operand(arg2, name, "arg2")
        op = _BINARY[name]
        return self._run(name, lambda: irops.binary(op, a.val, b.val), (a, b), ())

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
    def _reduction(self, name: str, arg: Tensor, dims: Any, keepdim: bool = False, dtype: DataType = DataType.Null):
        a = self._operand(arg, name)
        self._tensor(a, name)
        dims = _dims(name, dims)
        _check_dtype(name, dtype)
        return self._run(
            name,
            lambda: irops.reduction(_REDUCTIONS[name], a.val, dims, keepdim, dtype),
            (a,),
            (("dims", dims), ("keepdim", keepdim), ("dtype", dtype)),
        )

    def sum(self, arg: Tensor, dims: Any, keepdim: bool = False, dtype: DataType = DataType.Null) -> Tensor:
        return self._reduction("sum", arg, dims, keepdim, dtype)

    def prod(self, arg: Tensor, dims: Any, keepdim: bool = False, dtype: DataType = DataType.Null) -> Tensor:
        return self._reduction("prod", arg, dims, keepdim, dtype)

    def max(self, arg: Tensor, dims: Any, keepdim: bool = False, dtype: DataType = DataType.Null) -> Tensor:
        return self._reduction("max", arg, dims, keepdim, dtype)

    def min(self, arg: Tensor, dims: Any, keepdim: bool = False, dtype: DataType = DataType.Null) -> Tensor:
        return self._reduction("min", arg, dims, keepdim, dtype)

    def var(self, arg: Tensor, dims: Any, correction: int = 1, keepdim: bool = False) -> Tensor:
        a = self._operand(arg, "var")
        dims = _dims("var", dims)
        return self._run(
            "var",
            lambda: irops.var(self._tensor(a, "var"), dims, correction, keepdim),
            (a,),
            (("dims", dims), ("correction", correction), ("keepdim", keepdim)),
        )

    def var_mean(self, arg: Tensor, dims: Any, correction: int = 1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        a = self._operand(arg, "var_mean")
        dims = _dims("var_mean", dims)
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
        vec = self._fd._as_vector(shape, "fd.ops.broadcast_in_dim: shape")
        bdims = list(broadcast_dims)
        return self._run(
            "broadcast_in_dim",
            lambda: irops.broadcast_in_dim(self._tensor(a, "broadcast_in_dim"), vec.val, bdims),
            (a,),
            (("shape", vec), ("broadcast_dims", bdims)),
        )

    def expand(self, arg: Tensor, shape: Any) -> Tensor:
        a = self._operand(arg, "expand")
        vec = self._fd._as_vector(shape, "fd.ops.expand: shape")
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
        vec = self._fd._as_vector(new_shape, "fd.ops.reshape: new_shape")
        return self._run(
            "reshape", lambda: irops.reshape(self._tensor(a, "reshape"), vec.val), (a,), (("new_shape", vec),)
        )

    def permute(self, arg: Tensor, dims: Sequence[int]) -> Tensor:
        a = self._operand(arg, "permute")
        dims = list(dims)
        return self._run("permute", lambda: irops.permute(self._tensor(a, "permute"), dims), (a,), (("dims", dims),))

    def stride_order(self, arg: Tensor, stride_order: Sequence[int]) -> Tensor:
        a = self._operand(arg, "stride_order")
        order = list(stride_order)
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
        start = self._fd._as_vector(start_indices, "fd.ops.slice: start_indices")
        end = self._fd._as_vector(end_indices, "fd.ops.slice: end_indices")
        stride = self._fd._as_vector(strides, "fd.ops.slice: strides") if strides is not None else None
        kwargs = [("start_indices", start), ("end_indices", end)]
        if stride is not None:
            kwargs.append(("strides", stride))
        if manual_normalization:
            kwargs.append(("manual_normalization", True))
        return self._run(
            "slice",
            lambda: irops.slice_(
                self._tensor(a, "slice"), start.val, end.val, None if stride is None else stride.val, manual_normalization
            ),
            (a,),
            kwargs,
        )

    def pad(self, arg: Tensor, pad_widths: Any, value: Any = None) -> Tensor:
        a = self._operand(arg, "pad")
        widths = self._fd._as_vector(pad_widths, "fd.ops.pad: pad_widths")
        v = self._operand(value, "pad", "value") if value is not None else None
        kwargs = [("value", v)] if v is not None else []
        return self._run(
            "pad",
            lambda: irops.pad(self._tensor(a, "pad"), widths.val, v.val if v is not None else None),
            (a, widths),
            kwargs,
        )

    def cat(self, tensors: Sequence[Tensor], dim: int = 0, manual_padding: bool = False) -> Tensor:
        ts = [self._operand(t, "cat", f"tensors[{k}]") for k, t in enumerate(tensors)]
        kwargs = [("dim", dim)] + ([("manual_padding", True)] if manual_padding else [])
        return self._run(
            "cat", lambda: irops.cat([self._tensor(t, "cat", "tensors") for t in ts], dim), (ts,), kwargs
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
            raise TypeError(f"fd.ops.at: arg must be a Vector of this definition, got {type(arg).__name__}")
        n = len(arg.val)
        if not -n <= index < n:
            raise IndexError(f"fd.ops.at: index {index} is out of range for a vector of {n} entries")
        return self._run("at", lambda: arg.val[index], (arg,), (("index", index),))

    # --- indexing ---------------------------------------------------------------------------
    def select(self, arg: Tensor, index: Any, dim: int) -> Tensor:
        a, i = self._operand(arg, "select"), self._operand(index, "select", "index")
        return self._run("select", lambda: irops.select(self._tensor(a, "select"), i.val, dim), (a, i), (("dim", dim),))

    def index_select(self, arg: Tensor, index: Tensor, dim: int) -> Tensor:
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

    def scatter(self, arg1: Tensor, index: Tensor, src: Tensor, dim: int) -> Tensor:
        a = self._operand(arg1, "scatter", "arg1")
        i, s = self._operand(index, "scatter", "index"), self._operand(src, "scatter", "src")
        return self._run(
            "scatter", lambda: irops.scatter(self._tensor(a, "scatter"), i.val, s.val, dim), (a, i, s), (("dim", dim),)
        )

    # --- factories --------------------------------------------------------------------------
    def full(self, shape: Any, fill_value: Any, dtype: DataType) -> Tensor:
        vec = self._fd._as_vector(shape, "fd.ops.full: shape")
        f = self._operand(fill_value, "full", "fill_value")
        _check_dtype("full", dtype)
        return self._run("full", lambda: irops.full(vec.val, f.val, dtype), (), (("shape", vec), ("fill_value", f), ("dtype", dtype)))

    def iota(self, length: Any, start: Any = None, step: Any = None, dtype: DataType = DataType.Int) -> Tensor:
        _check_dtype("iota", dtype)
        n = self._operand(length, "iota", "length")
        s0 = self._operand(start if start is not None else 0, "iota", "start")
        st = self._operand(step if step is not None else 1, "iota", "step")
        return self._run(
            "iota", lambda: irops.iota(n.val, s0.val, st.val, dtype), (n, s0, st), (("dtype", dtype),)
        )

    def _rng(self, name: str, kind: RNGOpType, p1: Any, p2: Any, shape: Any, rng_seed: Any, rng_offset: Any, dtype: DataType):
        a, b = self._operand(p1, name, "arg1"), self._operand(p2, name, "arg2")
        vec = self._fd._as_vector(shape, f"fd.ops.{name}: shape")
        seed = self._operand(rng_seed, name, "rng_seed") if rng_seed is not None else None
        offset = self._operand(rng_offset, name, "rng_offset") if rng_offset is not None else None
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
        seed = self._operand(rng_seed, name, "rng_seed") if rng_seed is not None else None
        offset = self._operand(rng_offset, name, "rng_offset") if rng_offset is not None else None
        kwargs = [("rng_seed", seed), ("rng_offset", offset)] if seed is not None else []
        seed_val, offset_val = (v.val if v is not None else None for v in (seed, offset))
        return self._run(name, lambda: build(self._tensor(a, name), seed_val, offset_val), (a,), kwargs)

    def rand_like(self, arg: Tensor, rng_seed: Any = None, rng_offset: Any = None) -> Tensor:
        return self._like("rand_like", irops.rand_like, arg, rng_seed, rng_offset)

    def randn_like(self, arg: Tensor, rng_seed: Any = None, rng_offset: Any = None) -> Tensor:
        return self._like("randn_like", irops.randn_like, arg, rng_seed, rng_offset)

    def triu(self, input: Tensor, diagonal: Any = 0) -> Tensor:  # noqa: A002 - nvFuser's name
        a = self._operand(input, "triu", "input")
        d = self._operand(diagonal, "triu", "diagonal")
        return self._run("triu", lambda: irops.triu(self._tensor(a, "triu", "input"), d.val), (a,), (("diagonal", d),))

    # --- ATen-backed ------------------------------------------------------------------------
    def matmul(self, arg1: Tensor, arg2: Tensor) -> Tensor:
        a, b = self._operand(arg1, "matmul", "arg1"), self._operand(arg2, "matmul", "arg2")
        return self._run("matmul", lambda: irops.matmul(self._tensor(a, "matmul", "arg1"), self._tensor(b, "matmul", "arg2")), (a, b), ())

    def linear(self, arg1: Tensor, arg2: Tensor, bias: Tensor | None = None) -> Tensor:
        a, w = self._operand(arg1, "linear", "arg1"), self._operand(arg2, "linear", "arg2")
        b = self._operand(bias, "linear", "bias") if bias is not None else None
        return self._run(
            "linear",
            lambda: irops.linear(
                self._tensor(a, "linear", "arg1"),
                self._tensor(w, "linear", "arg2"),
                self._tensor(b, "linear", "bias") if b is not None else None,
            ),
            (a, w),
            (("bias", b),) if b is not None else (),
        )


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
    op.__doc__ = f"Elementwise {name} with PyTorch type promotion and broadcasting."
    return op


for _name in _UNARY:
    setattr(Operators, _name, _make_unary(_name))
for _name in _BINARY:
    setattr(Operators, _name, _make_binary(_name))


def _check_dtype(name: str, dtype: Any) -> None:
    if not isinstance(dtype, DataType):
        raise TypeError(f"fd.ops.{name}: dtype must be a DataType, got {dtype!r}")


def _dims(name: str, dims: Any) -> list[int]:
    if isinstance(dims, int):
        return [dims]
    try:
        out = list(dims)
    except TypeError:
        raise TypeError(f"fd.ops.{name}: dims must be an int or a list of ints, got {dims!r}") from None
    for d in out:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"fd.ops.{name}: dims must be ints, got {d!r}")
    return out


def _normalized(name: str, dims: Sequence[int], ndim: int) -> list[int]:
    try:
        return [irops.normalize_dims([d], ndim, "dim")[0] for d in dims]
    except (IndexError, TypeError, ValueError) as err:
        raise type(err)(f"fd.ops.{name}: {err}") from None


__all__ = ["Operators", "IrScalar"]
