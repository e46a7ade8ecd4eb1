"""Which float products the CUDA compiler may fuse into an FMA.

nvcc contracts `a * b` into a following `+` or `-` (one rounding instead of two), even
across statements and when the product has other uses. A product read once by an add is
contracted the same way wherever the kernel computes it. A product that is also read
elsewhere (a reduction, a store, a comparison, a recomputed copy after a reduction) would
be rounded in one place and fused in another, so the same tensor would hold two values:
`t - max(t)` came out 2e-4 at the maximum instead of 0. Such products are printed as
`__fmul_rn` / `__dmul_rn`, which the compiler never contracts.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from fuser.ir.dtype import DataType
from fuser.ir.exprs import BinaryOpType
from fuser.lower.kir import Assign, Binary, Decl, Element, Expr, Param, Stmt, Var, walk

__all__ = ["FUSING", "PRODUCT_TYPES", "round_shared_products"]

#: the types whose products are printed as `*` or an `_rn` intrinsic (narrower floats are
#: rounded to their type after each op anyway)
PRODUCT_TYPES = (DataType.Float, DataType.Double)
#: the ops nvcc fuses a product into
FUSING = (BinaryOpType.Add, BinaryOpType.Sub)


def round_shared_products(body: list[Stmt]) -> list[Stmt]:
    """`body` with every float product that is read other than as one operand of an add
    or subtract of its own type marked `rounded`."""
    products = _products(body)
    if not products:
        return body
    fused_only = dict.fromkeys(products, True)
    _visit(body, None, fused_only, products)
    shared = {name for name, ok in fused_only.items() if not ok}
    return _rewrite(body, shared) if shared else body


def _is_product(e: Any) -> bool:
    return isinstance(e, Binary) and e.op is BinaryOpType.Mul and e.out in PRODUCT_TYPES and not e.rounded


def _name(target: Any) -> str | None:
    """The variable an assignment writes: `t` or `t[i]`."""
    if isinstance(target, Element):
        target = target.base
    return target.name if isinstance(target, Var) else None


def _products(body: list[Stmt]) -> dict[str, DataType]:
    """The variables the kernel assigns float products to, and the products' types."""
    found: dict[str, DataType] = {}
    for x in walk(body):
        if isinstance(x, Assign) and _is_product(x.rhs) and _name(x.lhs):
            found[_name(x.lhs)] = x.rhs.out
        elif isinstance(x, Decl) and _is_product(x.init):
            found[x.name] = x.init.out
    return found


def _visit(x: Any, fusing: DataType | None, fused_only: dict[str, bool], products: dict[str, DataType]) -> None:
    """Clear `fused_only[name]` for each read of a product that is not an operand of an add
    or subtract computing in the product's type (`fusing`: the type of the add whose
    operand `x` is, None elsewhere)."""
    if isinstance(x, (list, tuple)):
        for y in x:
            _visit(y, None, fused_only, products)
    elif isinstance(x, Var):
        if x.name in fused_only and products[x.name] is not fusing:
            fused_only[x.name] = False
    elif isinstance(x, Element):
        if isinstance(x.base, Var) and x.base.name in fused_only and products[x.base.name] is not fusing:
            fused_only[x.base.name] = False
        _visit(x.index, None, fused_only, products)
    elif isinstance(x, Decl):
        _visit(x.init, None, fused_only, products)
    elif isinstance(x, Assign):
        target = x.lhs.index if isinstance(x.lhs, Element) else None
        if target is not None:
            _visit(target, None, fused_only, products)
        elif not isinstance(x.lhs, Var):
            _visit(x.lhs, None, fused_only, products)
        _visit(x.rhs, None, fused_only, products)
    elif isinstance(x, Binary) and x.op in FUSING and x.out in PRODUCT_TYPES:
        _visit(x.lhs, x.out if x.lhs_dtype is x.out else None, fused_only, products)
        _visit(x.rhs, x.out if x.rhs_dtype is x.out else None, fused_only, products)
    elif isinstance(x, Param) or not dataclasses.is_dataclass(x) or isinstance(x, type):
        return
    else:
        for f in dataclasses.fields(x):
            _visit(getattr(x, f.name), None, fused_only, products)


def _rewrite(body: list[Stmt], shared: set[str]) -> list[Stmt]:
    """`body` with the products assigned to the variables `shared` marked `rounded` (by
    statement: an equal product assigned elsewhere keeps its own verdict)."""
    def stmt(s: Any) -> Any:
        if isinstance(s, Assign) and _is_product(s.rhs) and _name(s.lhs) in shared:
            return dataclasses.replace(s, rhs=dataclasses.replace(s.rhs, rounded=True))
        if isinstance(s, Decl) and _is_product(s.init) and s.name in shared:
            return dataclasses.replace(s, init=dataclasses.replace(s.init, rounded=True))
        if dataclasses.is_dataclass(s) and not isinstance(s, (type, Expr)):
            changes = {f.name: [stmt(y) for y in v] for f in dataclasses.fields(s)
                       if isinstance(v := getattr(s, f.name), list) and v and not isinstance(v[0], Expr)}
            return dataclasses.replace(s, **changes) if changes else s
        return s

    return [stmt(s) for s in body]
