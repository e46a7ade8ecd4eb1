"""Mark the float exps whose values may be computed as ex2.approx(x log2 e) (opt-in).

Softmax, exp(x - max) / sum, spends more of its instructions on `expf` than on anything
else (eight an element on sm_90; the ex2.approx form takes two), and on an H200 a bf16
softmax row issues about as many instructions as its bytes take to move, so the exp decides
whether it runs at copy bandwidth. Triton lowers a float `tl.exp` this way, so
torch.compile's and Liger's softmax already compute it so.

ex2.approx(x log2 e) lies within (2 + 1.173|x|) ulp of exp(x) (CUDA's bound for __expf,
which differs only in flushing subnormals): under 1.5e-5 relatively for |x| <= 100. The
pass marks an exp only where that cannot show beyond one unit in the last place of a half
or bfloat16 result: every value computed from it reaches only casts to half / bfloat16
(never a float fusion output), through products, quotients, reciprocals, moves (broadcast,
expand, set, reshape, squeeze) and sums of non-negative terms (exps and their products and
quotients), each of which keeps a relative error relative. A difference, or a sum that may
cancel, would turn it into an absolute error the narrow rounding need not hide, so such an
exp is left.

Off until measured on an H200 (where the softmax is nearer issue-bound): `ENABLED` (the
sweeps set it), or FUSER_ENABLE=approx_exp.
The IR op stays an exp, so the reference executor and every other reader see exp(x).
"""
from __future__ import annotations

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    DataType,
    ExpandOp,
    Fusion,
    LoadStoreOp,
    ReductionOp,
    ReshapeOp,
    SqueezeOp,
    TensorView,
    UnaryOp,
    UnaryOpType,
    Val,
)
from fuser.options import enabled

from .reciprocal_divisors import NARROW  # the result types whose rounding hides a float ulp

#: the pass's FUSER_ENABLE name
NAME = "approx_exp"
#: marks exps without FUSER_ENABLE. Off until timed on an H200 too: `bench --sweep
#: approx_exp_softmax_fwd_bf16*`, H100, softmax bf16 µs off / on, loop-timed [16384, 4096]
#: 90.0 / 90.1, [8192, 8192] 91.5 / 90.5, [2048, 16384] 48.4 / 47.9, [16384, 1024] 23.9 /
#: 23.8, [65536, 1024] 89.8 / 90.0; right after the input's producer 90.0 / 89.4, 91.2 /
#: 90.1, 48.9 / 48.5, 23.6 / 22.9, 89.8 / 89.1 (the GPU tests passed with it on). Again at
#: `ad4d13e`, loop-timed: 90.1 / 90.0, 90.0 / 90.1, 48.2 / 48.0, 23.8 / 23.7, 90.0 / 90.0
ENABLED = False

#: ops whose result's relative error is the operands' (summed): a * b, a / b, 1 / a
_PRODUCTS = frozenset({BinaryOpType.Mul, BinaryOpType.Div})
#: ops that move values without changing them
_MOVES = (BroadcastOp, ExpandOp, LoadStoreOp, ReshapeOp, SqueezeOp)


def _is_exp(e) -> bool:
    return isinstance(e, UnaryOp) and e.op_type is UnaryOpType.Exp and e.output.dtype is DataType.Float


def _non_negative(v: Val, memo: dict) -> bool:
    """Whether `v` is an exp, or made from exps by products, quotients, reciprocals,
    broadcasts and sums (so a sum of it cannot cancel)."""
    if v in memo:
        return memo[v]
    memo[v] = False  # (a cycle cannot occur; the default guards the recursion)
    e = v.definition
    if _is_exp(e):
        ok = True
    elif isinstance(e, BinaryOp) and e.op_type in _PRODUCTS:
        ok = all(isinstance(x, TensorView) and _non_negative(x, memo) for x in e.inputs)
    elif isinstance(e, UnaryOp) and e.op_type is UnaryOpType.Reciprocal:
        ok = _non_negative(e.inputs[0], memo)
    elif isinstance(e, _MOVES) or (isinstance(e, ReductionOp) and e.op_type is BinaryOpType.Add):
        ok = _non_negative(e.inputs[0], memo)
    else:
        ok = False
    memo[v] = ok
    return ok


def _hidden(v: Val, outputs: set, memo: dict, signs: dict) -> bool:
    """Whether every value computed from float `v` reaches only half / bfloat16 casts
    through ops that keep a relative error relative."""
    if v in memo:
        return memo[v]
    memo[v] = False
    ok = v not in outputs and bool(v.uses)
    for u in v.uses if ok else ():
        if isinstance(u, UnaryOp) and u.op_type is UnaryOpType.Cast:
            ok = u.output.dtype in NARROW
        elif isinstance(u, UnaryOp) and u.op_type is UnaryOpType.Reciprocal:
            ok = _hidden(u.output, outputs, memo, signs)
        elif isinstance(u, BinaryOp) and u.op_type in _PRODUCTS:
            ok = u.output.dtype is DataType.Float and _hidden(u.output, outputs, memo, signs)
        elif isinstance(u, _MOVES):
            ok = _hidden(u.output, outputs, memo, signs)
        elif isinstance(u, ReductionOp) and u.op_type is BinaryOpType.Add:
            ok = _non_negative(v, signs) and _hidden(u.output, outputs, memo, signs)
        else:
            ok = False
        if not ok:
            break
    memo[v] = ok
    return ok


def _candidates(fusion: Fusion) -> list[UnaryOp]:
    outputs = set(fusion.outputs)
    memo: dict = {}
    signs: dict = {}
    return [e for e in fusion.exprs() if _is_exp(e) and not e.approx and _hidden(e.output, outputs, memo, signs)]


def switched_on() -> bool:
    """Whether the pass runs: `ENABLED`, or FUSER_ENABLE names it."""
    return ENABLED or enabled(NAME)


def applies(fusion: Fusion) -> bool:
    """Whether `fusion` has an exp to mark."""
    return bool(_candidates(fusion))


def mark_approx_exps(fusion: Fusion, original: dict[Val, Val] | None = None) -> int:
    """Mark `fusion`'s exps that may be computed approximately, in place; returns how many."""
    found = _candidates(fusion)
    for e in found:
        e.approx = True
    return len(found)


__all__ = ["ENABLED", "NAME", "applies", "mark_approx_exps", "switched_on"]
