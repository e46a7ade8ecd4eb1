"""Reduction and persistent kernels simulated on the CPU: the transpose and resize tests'
kernel-IR simulator (every thread of the grid in lockstep; out-of-bounds and misaligned
global accesses fault) extended with what these kernels use: two-dimensional blocks, block
and grid allreductions, Welford accumulators, and the blocks a grid reduction retires.

It checks indexing, predicates and the data flow between stages, not the reduction helpers'
own code (their combination order is the simulator's: results match up to float rounding).
"""
from __future__ import annotations

import dataclasses

import torch

from fuser.ir import DataType, ParallelType
from fuser.ir.dtype import compute_dtype
from fuser.ir.exprs import BinaryOpType, TernaryOpType, UnaryOpType
from fuser.lower import kir

import test_codegen_resize as tcr
import test_codegen_transpose as tct

KernelFault = tct.KernelFault

def reciprocal_scale(b: torch.Tensor, out: DataType) -> torch.Tensor:
    """kir.ReciprocalScale of divisor `b` in `out` (Float or Double): 2^64 (2^512) below the
    smallest normal, else 1 (fuser::reciprocal_scale)."""
    b = b.to(out.torch)
    tiny, big = (2.0**-126, 2.0**64) if out is DataType.Float else (2.0**-1022, 2.0**512)
    return torch.where(b.abs() < tiny, torch.tensor(big, dtype=b.dtype), torch.tensor(1.0, dtype=b.dtype))


_UNARY = {
    UnaryOpType.Exp: torch.exp, UnaryOpType.Log: torch.log, UnaryOpType.Neg: torch.neg, UnaryOpType.Abs: torch.abs,
    UnaryOpType.Rsqrt: torch.rsqrt, UnaryOpType.Sqrt: torch.sqrt, UnaryOpType.Reciprocal: torch.reciprocal,
    UnaryOpType.Relu: torch.relu, UnaryOpType.Tanh: torch.tanh, UnaryOpType.Sigmoid: torch.sigmoid,
    UnaryOpType.Sin: torch.sin, UnaryOpType.Cos: torch.cos, UnaryOpType.Log1p: torch.log1p,
    UnaryOpType.Expm1: torch.expm1, UnaryOpType.Silu: torch.nn.functional.silu, UnaryOpType.Ceil: torch.ceil,
    UnaryOpType.Floor: torch.floor, UnaryOpType.Round: torch.round, UnaryOpType.Trunc: torch.trunc,
    UnaryOpType.Signbit: torch.signbit, UnaryOpType.BitwiseNot: torch.bitwise_not,
}
_BINARY = {
    BinaryOpType.Add: torch.add, BinaryOpType.Sub: torch.sub, BinaryOpType.Mul: torch.mul, BinaryOpType.Div: torch.div,
    BinaryOpType.Max: torch.maximum, BinaryOpType.Min: torch.minimum,
    BinaryOpType.Gt: torch.gt, BinaryOpType.Lt: torch.lt, BinaryOpType.Ge: torch.ge, BinaryOpType.Le: torch.le,
    BinaryOpType.Eq: torch.eq, BinaryOpType.Ne: torch.ne, BinaryOpType.Remainder: torch.remainder,
    BinaryOpType.BitwiseAnd: torch.bitwise_and, BinaryOpType.BitwiseOr: torch.bitwise_or,
    BinaryOpType.BitwiseXor: torch.bitwise_xor, BinaryOpType.Pow: torch.pow,
}
#: a reduction's combining op as a scatter_reduce mode
_REDUCE = {BinaryOpType.Add: "sum", BinaryOpType.Mul: "prod", BinaryOpType.Max: "amax", BinaryOpType.Min: "amin"}
_FIELDS = ("avg", "m2", "n")


class Simulator(tcr.Simulator):
    """Runs a reduction kernel's IR for every thread of a grid of (bdx x bdy) blocks."""

    def __init__(self, kernel: kir.Kernel, grid: tuple[int, ...], block: tuple[int, ...], values: list) -> None:
        gx, gy = grid[0], grid[1]
        bdx, bdy = block[0], block[1]
        self.blocks = gx * gy
        per = bdx * bdy
        self.n = self.blocks * per
        t = torch.arange(self.n)
        self.tid, self.block = t, t // per
        local = t % per
        self.index = {ParallelType.TIDx: local % bdx, ParallelType.TIDy: local // bdx,
                      ParallelType.BIDx: self.block % gx, ParallelType.BIDy: self.block // gx}
        self.dim = {ParallelType.TIDx: bdx, ParallelType.TIDy: bdy, ParallelType.BIDx: gx, ParallelType.BIDy: gy}
        self.env = {}
        for p, v in zip(kernel.params, values):
            if p.pointer and v is None:  # grid-reduction buffers: the simulator combines directly
                continue
            self.env[p.name] = tct._Global(v) if p.pointer else v
        self.kernel = kernel
        #: threads still running (a grid reduction retires all but one block per column)
        self.alive = torch.ones(self.n, dtype=torch.bool)

    def stmts(self, stmts: list, mask: torch.Tensor) -> None:
        for s in stmts:
            m = mask & self.alive
            if bool(m.any()):
                self.stmt(s, m)

    # --- statements -------------------------------------------------------------------------
    def stmt(self, s, mask: torch.Tensor) -> None:
        if isinstance(s, kir.Launder):
            return
        if isinstance(s, kir.Decl) and s.welford:
            dtype = s.dtype.torch
            if s.size is None:
                self.env[s.name] = {"avg": torch.zeros(self.n, dtype=dtype), "m2": torch.zeros(self.n, dtype=dtype),
                                    "n": torch.zeros(self.n, dtype=torch.int64)}
            else:
                self.env[s.name] = {f: tct._Array(torch.int64 if f == "n" else dtype, s.size, self.n, False)
                                    for f in _FIELDS}
            return
        if isinstance(s, kir.Assign) and isinstance(s.lhs, kir.Member):
            self._set_field(s.lhs.base, s.lhs.field, self.value(s.rhs, mask), mask)
            return
        if isinstance(s, kir.BlockAllReduce):
            self._block_allreduce(s, mask)
            return
        if isinstance(s, kir.WelfordMerge):
            a = self._welford(s.acc, mask)
            b = tuple(torch.as_tensor(self.value(x, mask)).expand(self.n) for x in (s.mean, s.m2, s.count))
            self._set_welford(s.acc, _combine(a, b), mask)
            return
        if isinstance(s, kir.GridReduce):
            self._grid_reduce(s, mask)
            return
        super().stmt(s, mask)

    def _groups(self, over: ParallelType) -> torch.Tensor:
        """Per thread: the key of the threads a block reduction over `over` combines."""
        other = ParallelType.TIDy if over is ParallelType.TIDx else ParallelType.TIDx
        return self.block * self.dim[other] + self.index[other]

    def _block_allreduce(self, s: kir.BlockAllReduce, mask: torch.Tensor) -> None:
        if s.tile:  # a register array, element by element
            for lane in range(s.tile):
                at = kir.Element(s.value, kir.IntLit(lane))
                self._block_allreduce(dataclasses.replace(s, out=at, value=at, tile=0), mask)
            return
        if not bool(mask.all()):
            # every thread of a block runs it (it synchronises)
            blocks = self.block[mask].unique()
            if bool((mask[torch.isin(self.block, blocks)] == 0).any()):
                raise KernelFault("a block reduction that some threads of a block skip")
        keys = self._groups(s.over)
        if s.op is None:
            self._set_welford(s.out, _group_welford(self._welford(s.value, mask), keys, mask), mask)
            return
        v = torch.as_tensor(self.value(s.value, mask)).to(compute_dtype(s.dtype).torch).expand(self.n)
        total = _group_reduce(v, keys, mask, s.op)
        self._assign(s.out, total, mask)

    def _grid_reduce(self, s: kir.GridReduce, mask: torch.Tensor) -> None:
        bx, by = self.index[ParallelType.BIDx], self.index[ParallelType.BIDy]
        gy = self.dim[ParallelType.BIDy]
        writer = torch.as_tensor(self.value(s.writer, mask)).to(torch.bool).expand(self.n) & mask
        items = [it if it.lanes == 1 else dataclasses.replace(it, acc=kir.Element(it.acc, kir.IntLit(k)),
                                                               slot=it.slot + k, lanes=1)
                 for it in s.items for k in range(it.lanes)]
        for it in items:
            slot = torch.as_tensor(self.value(it.slot, mask)).expand(self.n)
            keys = bx * s.slots + slot
            # the writers' partials, one per (block, slot), combined over the grid column
            if bool((torch.bincount((keys * gy + by)[writer], minlength=1) > 1).any()):
                raise KernelFault("two writers of one grid-reduction slot in a block")
            if it.op is None:
                total = _group_welford(self._welford(it.acc, mask), keys, writer)
                self._set_welford(it.acc, total, mask)
            else:
                v = torch.as_tensor(self.value(it.acc, mask)).to(compute_dtype(it.dtype).torch).expand(self.n)
                self._assign(it.acc, _group_reduce(v, keys, writer, it.op), mask)
        if not s.all_blocks:  # only the last block of each column to arrive goes on
            self.alive &= by == gy - 1

    # --- values -----------------------------------------------------------------------------
    def value(self, e, mask: torch.Tensor):
        if isinstance(e, _Value):
            return e.v
        if isinstance(e, kir.ReciprocalScale):
            return reciprocal_scale(torch.as_tensor(self.value(e.value, mask)).to(e.dtype.torch), e.out)
        if isinstance(e, kir.Member):
            return self._field(e.base, e.field, mask)
        if isinstance(e, kir.Unary) and e.op in _UNARY:
            x = torch.as_tensor(self.value(e.operand, mask))
            return _UNARY[e.op](x.to(compute_dtype(e.dtype).torch)).to(e.out.torch)
        if isinstance(e, kir.Ternary) and e.op is TernaryOpType.Clamp:
            c = compute_dtype(e.out).torch
            x, lo, hi = (torch.as_tensor(self.value(v, mask)).to(c) for v in e.operands)
            return torch.minimum(torch.maximum(x, lo), hi).to(e.out.torch)
        if isinstance(e, kir.Binary) and e.op in _BINARY:
            c = compute_dtype(e.common or e.out).torch
            a, b = (torch.as_tensor(self.value(x, mask)).to(c) for x in (e.lhs, e.rhs))
            return _BINARY[e.op](a, b).to(e.out.torch)
        return super().value(e, mask)

    def _assign(self, lhs, v, mask: torch.Tensor) -> None:
        self.stmt(kir.Assign(lhs, _Value(v)), mask)

    def _field(self, base, field: str, mask: torch.Tensor):
        if isinstance(base, kir.Var):
            return self.env[base.name][field]
        return self.access(self.env[base.base.name][field], self.value(base.index, mask), mask)

    def _set_field(self, base, field: str, v, mask: torch.Tensor) -> None:
        if isinstance(base, kir.Var):
            old = self.env[base.name][field]
            self.env[base.name][field] = torch.where(mask, torch.as_tensor(v).to(old.dtype), old)
        else:
            self.access(self.env[base.base.name][field], self.value(base.index, mask), mask, v)

    def _welford(self, e, mask: torch.Tensor) -> tuple:
        return tuple(torch.as_tensor(self._field(e, f, mask)).expand(self.n) for f in _FIELDS)

    def _set_welford(self, e, triple: tuple, mask: torch.Tensor) -> None:
        for f, v in zip(_FIELDS, triple):
            self._set_field(e, f, v, mask)


class _Value(kir.Expr):
    """A value the simulator computed, as an expression to assign."""

    def __init__(self, v) -> None:
        self.v = v


def _group_reduce(v: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, op: BinaryOpType) -> torch.Tensor:
    """Per thread: `op` over the values of the threads in `mask` sharing its key."""
    mode = _REDUCE.get(op)
    if mode is None:
        raise KernelFault(f"the simulator combines no {op}")
    n = int(keys.max()) + 1
    out = torch.zeros(n, dtype=v.dtype)
    out = out.scatter_reduce(0, keys[mask], v[mask], mode, include_self=False)
    return out[keys]


def _combine(a: tuple, b: tuple) -> tuple:
    """Chan et al.'s combination of Welford triples (avg, m2, n)."""
    (ma, qa, na), (mb, qb, nb) = a, b
    na, nb = na.to(torch.float64), torch.as_tensor(nb).to(torch.float64)
    n = na + nb
    safe = torch.where(n > 0, n, torch.ones_like(n))
    delta = mb.double() - ma.double()
    avg = ma.double() + delta * nb / safe
    m2 = qa.double() + qb.double() + delta * delta * na * nb / safe
    return avg.to(ma.dtype), m2.to(qa.dtype), n.to(torch.int64)


def _group_welford(t: tuple, keys: torch.Tensor, mask: torch.Tensor) -> tuple:
    """Per thread: the Welford triples of the threads in `mask` sharing its key, combined."""
    avg, m2, cnt = (x.double() for x in t)
    k = int(keys.max()) + 1
    km = keys[mask]
    n = torch.zeros(k, dtype=torch.float64).index_add_(0, km, cnt[mask])
    s = torch.zeros(k, dtype=torch.float64).index_add_(0, km, (avg * cnt)[mask])
    mean = s / torch.where(n > 0, n, torch.ones_like(n))
    q = torch.zeros(k, dtype=torch.float64).index_add_(0, km, (m2 + cnt * (avg - mean[keys]) ** 2)[mask])
    return mean[keys].to(t[0].dtype), q[keys].to(t[1].dtype), n[keys].to(torch.int64)


def simulate(k, args: list) -> list[torch.Tensor]:
    """The outputs of generated kernel `k` (a GeneratedKernel) simulated on CPU `args`,
    poisoned first (NaN, -7, True) so that an element the kernel skips shows."""
    return tct.run_plan(k, args, Simulator)
