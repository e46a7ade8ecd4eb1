"""Whole-fusion kernel simulation on the CPU: every generated kernel of a fusion's segments,
its kernel IR interpreted for every thread of its grid (tests/test_codegen_transpose.py's
lockstep simulator, extended by tests/test_codegen_resize.py and tests/reduction_sim.py),
compared with the reference executor on the segment's actual arguments.

`simulate_fusion(fd, inputs)` segments `fd` for `inputs` as `fd.execute` would, runs the
segments in order (intermediates from the reference executor, laid out as the runtime lays
them out), and for each segment whose scheduler generates a kernel prepares that kernel and
simulates it. It returns a `SimReport`: per segment the scheduler, whether a kernel was
prepared, and "ok", "mismatch", "fault" (what a GPU would do wrong: an out-of-bounds,
misaligned or racy access, a barrier some threads skip, an output element never written,
a crash while preparing), "unsupported: <node>" (kernel IR this simulator cannot run:
counted, never passed), "not lowerable" (the runtime runs it on the reference executor),
"skipped" (over the element budget) or "reference" (no kernel).

Beyond the simulators it extends, this one models: every Fusion IR op with the semantics
`fuser.codegen.ops` prints (casts through float for narrow types, comparisons in the
promoted type, ...: it reuses that module's and the reference executor's tables, private
names included, so that the two cannot drift apart), Philox random numbers (bit-exact with
`fuser.runtime.philox`), index ops' checked lookups and their error flag (set: the
runtime's IndexError, a fault), grid barriers, column and segment partials, tile reductions
over threadIdx.y, cp.async copies (landing at their wait: touching the destination before
faults), dynamic shared memory (arrays at byte offsets alias), block reductions' scratch
and fixed block sizes, loops whose trip count differs between threads, registers and shared
memory poisoned until written (NaN, -1515870811), global memory races (a read of another
thread's write with no barrier between, two writes of different values), writes to
inputs, output elements no thread writes, int32 index overflow, and launches the GPU
refuses (threads, grid height, shared memory). Grid-strided kernels (inner-outer, scatter)
may be launched on fewer resident blocks (`resident`), as the runtime caps them.

Comparisons are tight: the simulator and the reference compute the same ops in the same
dtypes, so an elementwise segment matches within `fuser.runtime.tolerance`'s per-dtype
tolerances. Reductions combine in another order; a segment with reductions gets, on top,
the noise its outputs show when the reference runs twice more with each reduction's
result perturbed by what summing in another order may change it by (a random walk of
`fuser.benchmarks.fusions.reduction_tolerance`'s size for signed terms, plus eps per
element of a serial chain of up to 4096 for the coherent part): cancellations downstream
get the room their conditioning needs, and no more.

Run as a script for a simulated fuzz run of tests/gpu_fuzz.py's random fusions (its cases
`generate(seed, i)` for i from --start; odd cases launch grid-strided kernels on 3 resident
blocks); it prints a report and a repro script per failure (or writes them to --out), then
the summary line "sim fuzz: N cases, M mismatches, K faults, U unsupported, S skipped"::

    python tests/kernel_sim.py --cases 1000 --seed 3          # or: python -m tests.kernel_sim
    python tests/kernel_sim.py --seed 3 --start 151 --cases 1  # one case again
    python tests/kernel_sim.py --files /work/shared/cases/gpu-mismatches/*.py
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reduction_sim as rs  # noqa: E402
import test_codegen_transpose as tct  # noqa: E402
from fuser.codegen import ops as cops  # noqa: E402
from fuser.ir import DataType, MemoryType, ParallelType, ReductionOp, WelfordOp  # noqa: E402
from fuser.ir.dtype import compute_dtype, result_type, to_real  # noqa: E402
from fuser.ir.exprs import BinaryOpType, RNGOpType, TernaryOpType, UnaryOpType  # noqa: E402
from fuser.lower import kir  # noqa: E402
from fuser.runtime import philox  # noqa: E402
from fuser.runtime import reference as ref  # noqa: E402
from fuser.runtime.tolerance import tolerances  # noqa: E402

KernelFault = tct.KernelFault
#: kernel IR nodes simulated so far, by class name (what the fuzz runs exercised)
COVERAGE: collections.Counter = collections.Counter()


class Unsupported(Exception):
    """Kernel IR the simulator cannot run: reported as "unsupported: <node>", never passed."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.node = node


class OverBudget(Exception):
    """The simulation would take more than its budget of elements or steps (skipped)."""


# --- values: the semantics fuser.codegen.ops prints ------------------------------------------------


def _t(x: Any, dt: DataType) -> torch.Tensor:
    """`x` (a Python number or a tensor) as a tensor of `dt`."""
    if isinstance(x, torch.Tensor):
        return x if x.dtype == dt.torch else x.to(dt.torch)
    return torch.tensor(x, dtype=dt.torch)


def cast(x: Any, src: DataType, dst: DataType) -> torch.Tensor:
    """`x` of `src` converted to `dst` as `fuser.codegen.ops.emit_cast` does: narrow floats
    through float, anything to bool as `!= 0`, complex to real by its real part."""
    x = _t(x, src)
    if src is dst:
        return x
    if src.is_reduced_float:
        f = x.to(torch.float32)
        return f if dst is DataType.Float else cast(f, DataType.Float, dst)
    if dst.is_reduced_float:
        return cast(x, src, DataType.Float).to(dst.torch)
    if dst is DataType.Bool:
        return x != 0
    if src.is_complex:
        return x.to(dst.torch) if dst.is_complex else cast(x.real, to_real(src), dst)
    if dst.is_complex:
        return cast(x, src, to_real(dst)).to(dst.torch)
    return x.to(dst.torch)


def const(value: Any, dt: DataType) -> torch.Tensor:
    """A constant as `emit_constant` converts it (narrow floats from double through float)."""
    if dt is DataType.Bool:
        return torch.tensor(bool(value))
    if dt.is_integral:
        v = value.real if isinstance(value, complex) else value
        return torch.tensor(int(v), dtype=dt.torch)
    if dt.is_complex:
        return torch.tensor(complex(value), dtype=dt.torch)
    v = float(value.real if isinstance(value, complex) else value)
    t = torch.tensor(v, dtype=torch.float64)
    return t.to(torch.float32).to(dt.torch) if dt is not DataType.Double else t


def _safe_div(b: torch.Tensor) -> torch.Tensor:
    # integer division by zero has no value a GPU agrees on (and torch raises): a lane
    # computing one is outside the fuzzed programs, or inactive
    return torch.where(b == 0, torch.ones_like(b), b) if not (b.dtype.is_floating_point or b.dtype.is_complex) else b


def _int_kind(t: torch.Tensor) -> bool:
    return not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype is torch.bool)


def _binary_core(op: BinaryOpType, x: torch.Tensor, y: torch.Tensor, c: DataType) -> torch.Tensor:
    """`op` of two values already in its compute type `c` (the runtime helpers' meaning)."""
    boolean = c is DataType.Bool
    if op is BinaryOpType.Add:
        return x | y if boolean else x + y
    if op is BinaryOpType.Mul:
        return x & y if boolean else x * y
    if op is BinaryOpType.Sub:
        return x - y
    if op is BinaryOpType.Div:
        return torch.div(x, _safe_div(y), rounding_mode="trunc") if _int_kind(x) else x / y
    if op in (BinaryOpType.Mod, BinaryOpType.Fmod):
        return torch.fmod(x, _safe_div(y))
    if op is BinaryOpType.Remainder:
        return torch.remainder(x, _safe_div(y))
    if op is BinaryOpType.CeilDiv:
        return -torch.div(-x, _safe_div(y), rounding_mode="floor") if _int_kind(x) else torch.ceil(x / y)
    if op in (BinaryOpType.LogicalAnd, BinaryOpType.LogicalOr):
        a, b = (x != 0, y != 0) if not boolean else (x, y)
        return a & b if op is BinaryOpType.LogicalAnd else a | b
    if boolean and op is BinaryOpType.BitwiseAnd:
        return x & y
    if boolean and op is BinaryOpType.BitwiseOr:
        return x | y
    if boolean and op is BinaryOpType.BitwiseXor:
        return x != y
    if boolean and op is BinaryOpType.Max:
        return x | y
    if boolean and op is BinaryOpType.Min:
        return x & y
    fn = ref._BINARY.get(op)
    if fn is None:
        raise Unsupported(f"Binary {op.name}")
    return fn(x, y)


def binary(op: BinaryOpType, a: Any, b: Any, a_dt: DataType, b_dt: DataType, out: DataType,
           common: DataType | None = None) -> torch.Tensor:
    """`op(a, b)` of `out` as `emit_binary` computes it."""
    if op.is_comparison or op.is_logical:
        c = compute_dtype(common if common is not None else cops._promote(a_dt, b_dt))
        result = DataType.Bool
    elif op is BinaryOpType.Nextafter:
        c = result = out
    else:
        c = result = compute_dtype(out)
    table = cops._BINARY.get(op)
    if table is None or (cops._template(table, cops._kind(c)) is None
                         and not (op is BinaryOpType.Nextafter and c in cops._NEXTAFTER_NARROW)):
        raise Unsupported(f"Binary {op.name} computed in {c.name}")
    try:
        core = _binary_core(op, cast(a, a_dt, c), cast(b, b_dt, c), c)
    except RuntimeError as err:
        raise Unsupported(f"Binary {op.name} on {c.name}: {err}") from None
    return cast(core.to(result.torch), result, out)


def unary(op: UnaryOpType, x: Any, src: DataType, out: DataType) -> torch.Tensor:
    """`op(x)` of `out` as `emit_unary` computes it."""
    if op is UnaryOpType.Cast:
        return cast(x, src, out)
    spec = cops._UNARY.get(op)
    fn = ref._UNARY.get(op)
    c = cops._unary_compute(src, out)
    if spec is None or fn is None or cops._kind(c) not in spec[1]:
        raise Unsupported(f"Unary {op.name} on {src.name} -> {out.name}")
    rdt = cops._result_dtype(spec[2], c)
    try:
        r = fn(cast(x, src, c))
    except RuntimeError as err:
        raise Unsupported(f"Unary {op.name} on {c.name}: {err}") from None
    return cast(r.to(rdt.torch), rdt, out)


def ternary(op: TernaryOpType, a: Any, b: Any, c: Any, dts: Sequence[DataType], out: DataType,
            common: DataType | None = None) -> torch.Tensor:
    """lerp, clamp and threshold as `emit_ternary` computes them (where: see Simulator)."""
    a_dt, b_dt, c_dt = dts
    comp = compute_dtype(out)
    if op is TernaryOpType.Lerp and cops._kind(comp) in "fc":
        r = torch.lerp(*torch.broadcast_tensors(cast(a, a_dt, comp), cast(b, b_dt, comp)), cast(c, c_dt, comp))
    elif op is TernaryOpType.Clamp and cops._kind(comp) in "if":
        x = cast(a, a_dt, comp)
        r = torch.minimum(torch.maximum(x, cast(b, b_dt, comp)), cast(c, c_dt, comp))
        if r.dtype.is_floating_point:
            r = torch.where(torch.isnan(x), x, r)
    elif op is TernaryOpType.Threshold:
        cmp = compute_dtype(common if common is not None else
                            result_type([compute_dtype(a_dt)], [compute_dtype(b_dt)]))
        x = cast(a, a_dt, comp)
        r = torch.where(cast(x, comp, cmp) > cast(b, b_dt, cmp), x, cast(c, c_dt, comp))
    else:
        raise Unsupported(f"Ternary {op.name} of {out.name}")
    return cast(r, comp, out)


# --- memory -----------------------------------------------------------------------------------------


class Global(tct._Global):
    """A global tensor argument (its whole storage) that remembers, per element, which
    thread last wrote it and who may see that write yet: -1 everyone (before the launch,
    or after a grid barrier), t >= 0 only thread t, -2 - b the threads of block b (after
    one of its barriers). `written` marks elements written at all (outputs are checked)."""

    def __init__(self, x: torch.Tensor, name: str, readonly: bool = False) -> None:
        super().__init__(x)
        self.name = name
        self.readonly = readonly
        self.writer: torch.Tensor | None = None
        self.written: torch.Tensor | None = None


class SharedBytes:
    """A block's shared memory (a row per block), as bytes, with the last writer and reader
    of each byte since the block's last barrier, and bytes a cp.async has yet to land in."""

    def __init__(self, rows: int, nbytes: int) -> None:
        nbytes = max(16, -(-nbytes // 16) * 16)
        # uninitialised: every byte 0xFF (NaN in any float type, -1 in any integer)
        self.bytes = torch.full((rows, nbytes), 0xFF, dtype=torch.uint8)
        self.writer = torch.full((rows, nbytes), -1, dtype=torch.int32)
        self.reader = torch.full((rows, nbytes), -1, dtype=torch.int32)
        self.pending = torch.zeros((rows, nbytes), dtype=torch.bool)

    def barrier(self, rows: torch.Tensor | None) -> None:
        """Writes and reads before a barrier of blocks `rows` (None: all) are ordered."""
        if rows is None:
            self.writer.fill_(-1)
            self.reader.fill_(-1)
        else:
            self.writer[rows] = -1
            self.reader[rows] = -1


class Shared:
    """A shared array: `size` elements of `dtype` at byte `offset` of a block's shared bytes
    (dynamic shared memory arrays share one: they alias as on the GPU)."""

    shared = True

    def __init__(self, name: str, dtype: torch.dtype, size: int, buf: SharedBytes, offset: int, align: int) -> None:
        self.name = name
        self.itemsize = torch.empty(0, dtype=dtype).element_size()
        self.size = size
        self.buf = buf
        self.offset = offset
        #: bytes the array's start is aligned to
        self.align = align
        end = offset + size * self.itemsize
        if end > buf.bytes.shape[1]:
            raise KernelFault(f"shared array {name} ends at byte {end}, past the block's {buf.bytes.shape[1]}")
        raw = buf.bytes[:, offset:end]
        self.data = raw.view(dtype) if raw.shape[1] else torch.empty((raw.shape[0], 0), dtype=dtype)


# --- the simulator ------------------------------------------------------------------------------------


def _uniform(v: Any, mask: torch.Tensor, what: str) -> int:
    """A value every thread of `mask` agrees on, as an int."""
    if not isinstance(v, torch.Tensor) or v.dim() == 0:
        return int(v)
    v = v.expand(mask.shape[0])[mask]
    if v.numel() == 0:
        return 0
    if bool((v != v[0]).any()):
        raise Unsupported(f"{what} that differs between threads")
    return int(v[0])


#: pointer parameters that are not arrays of values: the index ops' error flag, the
#: grid barrier's counters, the device array of a captured launch's RNG state
_FLAGS = ("index_error", "semaphore", "philox_state")


class Simulator(rs.Simulator):
    """The reduction simulator with every kernel IR node the runtime's kernels use (see the
    module docstring); a node it lacks raises Unsupported."""

    def __init__(self, kernel: kir.Kernel, grid: tuple[int, ...], block: tuple[int, ...], values: list,
                 budget: float = float("inf"), stray_draw: float = float("nan")) -> None:
        #: what a draw at a negative index gives (see _random), and whether one was made
        self.stray_draw = stray_draw
        self.strays = False
        special = {}
        plain = list(values)
        for k, (p, v) in enumerate(zip(kernel.params, values)):
            if p.pointer and isinstance(v, torch.Tensor) and not p.welford and p.kind not in _FLAGS:
                special[p.name] = Global(v, p.name, readonly=p.readonly)
            if p.pointer and not (isinstance(v, torch.Tensor) and p.kind == "tensor"):
                # grid Welford partials (GridReduce combines directly), semaphores, flags,
                # a null RNG state: none is memory the kernel IR indexes as a tensor's
                plain[k] = None
        super().__init__(kernel, grid, block, plain)
        self.env.update(special)
        for p, v in zip(kernel.params, values):
            if p.kind == "index_error":
                self.env[p.name] = v  # an int64 tensor of 3: check + 1, value, extent
            elif p.kind == "philox_state":
                self.env[p.name] = v if isinstance(v, torch.Tensor) else None
        self.per_block = block[0] * block[1]
        self.local = torch.arange(self.n) % self.per_block
        self.int32 = kernel.index_type == "int32"
        #: the block's dynamic shared memory (arrays with a Decl.offset)
        self.dynamic = SharedBytes(self.blocks, kernel.dynamic_smem) if kernel.dynamic_smem else None
        self.shared_bufs: list[SharedBytes] = [self.dynamic] if self.dynamic is not None else []
        self.globals = [g for g in self.env.values() if isinstance(g, Global)]
        #: cp.async: per thread, groups committed so far; copies in flight
        self.commits = torch.zeros(self.n, dtype=torch.int64)
        self.copies: list[dict] = []
        #: statement-steps left: each statement costs its threads plus a Python overhead
        self.budget = budget
        #: index checks of host-checked values that failed on the device (cannot happen
        #: where the host check ran)
        self.host_check_failures: list[int] = []

    def run(self) -> None:
        """Run the kernel; outputs are written into the tensor arguments."""
        super().run()
        for c in self.copies:
            if bool(c["mask"].any()):
                raise KernelFault("cp.async copies still in flight when the kernel exits (they land in "
                                  "the shared memory of exited blocks)")

    # --- statements ------------------------------------------------------------------------------
    def stmts(self, stmts: list, mask: torch.Tensor) -> None:
        for s in stmts:
            m = mask & self.alive
            if bool(m.any()):
                self._charge(1)
                self.stmt(s, m)

    def _charge(self, steps: int) -> None:
        """Take `steps` statement-steps of the grid from the budget (OverBudget past it)."""
        self.budget -= steps * (self.n + 20000)
        if self.budget < 0:
            raise OverBudget("the simulation's step budget")

    def stmt(self, s, mask: torch.Tensor) -> None:
        t = type(s)
        COVERAGE[t.__name__] += 1
        if t is kir.Comment or t is kir.Launder:
            return
        if t is kir.Decl:
            if s.welford:
                return super().stmt(s, mask)
            return self._decl(s, mask)
        if t is kir.Assign:
            if isinstance(s.lhs, kir.Var):
                if s.lhs.name not in self.env:
                    raise KernelFault(f"assignment to undeclared {s.lhs.name}")
            return super().stmt(s, mask)
        if t is kir.For:
            return self._for(s, mask)
        if t is kir.If:
            cond = torch.as_tensor(self.value(s.cond, mask)).to(torch.bool).expand(self.n)
            self.stmts(s.then, mask & cond)
            if s.orelse:
                self.stmts(s.orelse, mask & ~cond)
            return None
        if t is kir.VecLoad or t is kir.VecStore:
            return self._vector(s, mask)
        if t is kir.Sync:
            self._check_block_uniform(mask, "__syncthreads()")
            return self._barrier(mask)
        if t is kir.BlockAllReduce:
            return self._block_allreduce_stmt(s, mask)
        if t is kir.GridReduce:
            if s.all_blocks:  # grid_sync between the partials' writes and reads
                self._check_grid_uniform(mask, "a grid allreduce")
            else:
                self._check_block_uniform(mask, "a grid reduction (its grid_arrive synchronises the block)")
            super().stmt(s, mask)
            return self._grid_barrier() if s.all_blocks else self._barrier(mask)
        if t is kir.WelfordMerge:
            return super().stmt(s, mask)
        if t is kir.GridSync:
            return self._grid_sync(mask)
        if t is kir.TileReduceY:
            return self._tile_reduce_y(s, mask)
        if t is kir.ColumnPartials:
            return self._column_partials(s, mask)
        if t is kir.SegmentPartials:
            return self._segment_partials(s, mask)
        if t is kir.CpAsync:
            return self._cp_async(s, mask)
        if t is kir.CpAsyncCommit:
            self.commits[mask] += 1
            return None
        if t is kir.CpAsyncWait:
            return self._cp_wait(s, mask)
        raise Unsupported(t.__name__)

    def _decl(self, s: kir.Decl, mask: torch.Tensor) -> None:
        dtype = torch.int64 if s.dtype is None else s.dtype.torch
        if s.size is not None and s.space is MemoryType.Shared:
            if s.name in self.env and isinstance(self.env[s.name], Shared):
                return  # declared once per block, whatever scope it is in
            itemsize = torch.empty(0, dtype=dtype).element_size()
            if s.offset is not None:
                if self.dynamic is None:
                    raise KernelFault(f"{s.name} is placed in dynamic shared memory, which the launch gives none")
                buf, offset, align = self.dynamic, s.offset, math.gcd(16, s.offset) if s.offset else 16
            else:
                buf = SharedBytes(self.blocks, s.size * itemsize)
                self.shared_bufs.append(buf)
                offset, align = 0, s.align or itemsize
            self.env[s.name] = Shared(s.name, dtype, s.size, buf, offset, align)
            return
        if s.size is not None:
            arr = tct._Array(dtype, s.size, self.n, False)
            arr.data.copy_(_poison(arr.data))
            self.env[s.name] = arr
            return
        if s.init is not None:
            init = self.value(s.init, mask)
            v = torch.as_tensor(init).to(dtype).expand(self.n).clone()
        else:
            v = _poison(torch.empty(self.n, dtype=dtype))
        old = self.env.get(s.name)
        if isinstance(old, torch.Tensor) and old.shape == v.shape and old.dtype == v.dtype:
            # threads outside `mask` keep what they had (a declaration in a branch)
            v = torch.where(mask, v, old)
        self.env[s.name] = v

    def _for(self, s: kir.For, mask: torch.Tensor) -> None:
        stop = self.value(s.stop, mask)
        if isinstance(stop, torch.Tensor) and stop.dim() > 0:
            stop = stop.expand(self.n)
            hi = int(stop[mask].max()) if bool(mask.any()) else 0
            for i in range(hi):
                self.env[s.var.name] = i
                self.stmts(s.body, mask & (stop > i))  # threads leave the loop at their own count
            return
        for i in range(int(stop)):
            self.env[s.var.name] = i
            self.stmts(s.body, mask)

    def _check_block_uniform(self, mask: torch.Tensor, what: str) -> None:
        """A barrier: every live thread of a block that reaches it, or none."""
        arrived = torch.zeros(self.blocks, dtype=torch.int64).index_add_(0, self.block, mask.long())
        live = torch.zeros(self.blocks, dtype=torch.int64).index_add_(0, self.block, self.alive.long())
        if bool(((arrived != 0) & (arrived != live)).any()):
            raise KernelFault(f"{what} that some threads of a block skip")

    def _barrier(self, mask: torch.Tensor) -> None:
        """A block barrier in the blocks of `mask`: their threads' shared and global writes
        become visible to each other."""
        blocks = torch.unique(self.block[mask])
        for buf in self.shared_bufs:
            buf.barrier(blocks if blocks.numel() < self.blocks else None)
        for g in self.globals:
            if g.writer is not None:
                w = g.writer
                own = w >= 0
                if bool(own.any()):
                    wb = w[own].long() // self.per_block
                    arrived = torch.isin(wb, blocks)
                    sel = own.nonzero()[:, 0][arrived]
                    w[sel] = (-2 - wb[arrived]).to(w.dtype)

    def _block_allreduce_stmt(self, s: kir.BlockAllReduce, mask: torch.Tensor) -> None:
        """A block allreduce: its fixed block sizes must be the launch's, and its scratch is
        used as the helper uses it (every thread writes its slot, a barrier, every thread
        reads the others', and with `free_after` a barrier): a later write to the scratch
        with no barrier after those reads is a race."""
        for fixed, p in ((s.bdx, ParallelType.TIDx), (s.bdy, ParallelType.TIDy)):
            if fixed and fixed != self.dim[p]:
                raise KernelFault(f"a block reduction compiled for {p.value} = {fixed} launched with {self.dim[p]}")
        scratch = self.env.get(s.smem.name) if isinstance(s.smem, kir.Var) else None
        if isinstance(scratch, Shared):
            self._whole_blocks(mask, "a block reduction")
            lanes = max(1, s.tile)
            if scratch.size < lanes * self.per_block:
                raise KernelFault(f"block reduction scratch {scratch.name} holds {scratch.size} values, the helper "
                                  f"uses {lanes * self.per_block}")
            slots = (self.local * lanes)[:, None] + torch.arange(lanes)
            self._scratch(scratch, slots, mask, write=True)
            self._barrier(mask)
            # every value is read by other threads: mark them read by a thread of the block
            # other than their writer (the next one), so a write before a barrier races
            other = (self.local + 1) % self.per_block + self.block * self.per_block
            self._scratch(scratch, slots, mask, write=False, who=other)
        super().stmt(s, mask)
        if s.free_after or not isinstance(scratch, Shared):
            self._barrier(mask)

    def _scratch(self, mem: "Shared", slots: torch.Tensor, mask: torch.Tensor, write: bool,
                 who: torch.Tensor | None = None) -> None:
        """Race-check and mark accesses to elements `slots` (per thread, a row of them) of a
        helper's shared scratch, as written by each thread (or read by thread `who`)."""
        rows = self.block[mask][:, None].expand(-1, slots.shape[1]).reshape(-1)
        cols = slots[mask].reshape(-1)
        me = (self.tid if who is None else who)[mask][:, None].expand(-1, slots.shape[1]).reshape(-1)
        b = self._byte_cols(mem, cols, mem.itemsize)
        r2, m2 = rows[:, None], me[:, None].to(torch.int32)
        buf = mem.buf
        w = buf.writer[r2, b]
        if bool(((w != -1) & (w != m2)).any()):
            raise KernelFault(f"shared-memory race on block reduction scratch {mem.name}: used while another "
                              f"thread's write to it is unordered")
        if write:
            r = buf.reader[r2, b]
            if bool(((r != -1) & (r != m2)).any()):
                raise KernelFault(f"shared-memory race on block reduction scratch {mem.name}: written while "
                                  f"another thread's read of it is unordered (no barrier between)")
            buf.writer[r2, b] = m2
        else:
            buf.reader[r2, b] = m2

    def _check_grid_uniform(self, mask: torch.Tensor, what: str) -> None:
        if not bool(self.alive.all()):
            raise KernelFault(f"{what} after some blocks have exited (it never returns)")
        if not bool(mask.all()):
            raise KernelFault(f"{what} that some threads of the grid skip (it never returns)")

    def _grid_sync(self, mask: torch.Tensor) -> None:
        self._check_grid_uniform(mask, "grid_sync")
        self._grid_barrier()

    def _grid_barrier(self) -> None:
        for buf in self.shared_bufs:
            buf.barrier(None)
        for g in self.globals:
            if g.writer is not None:
                g.writer.fill_(-1)

    def _whole_blocks(self, mask: torch.Tensor, what: str) -> None:
        blocks = self.block[mask].unique()
        if bool((~mask[torch.isin(self.block, blocks)]).any()):
            raise KernelFault(f"{what} that some threads of a block skip")

    # --- reductions across threads and blocks -------------------------------------------------------
    def _tile_reduce_y(self, s: kir.TileReduceY, mask: torch.Tensor) -> None:
        bdx, bdy = self.dim[ParallelType.TIDx], self.dim[ParallelType.TIDy]
        if bdy == 1:
            return  # the helper returns at once: no barrier either
        self._whole_blocks(mask, "a tile reduction over threadIdx.y")
        self._check_smem(s.smem, bdx * bdy)
        arr = self.env[s.array.name]
        keys = self.block * bdx + self.index[ParallelType.TIDx]
        top = mask & (self.index[ParallelType.TIDy] == 0)
        c = compute_dtype(s.dtype)
        for i in range(arr.data.shape[1]):
            v = cast(arr.data[:, i], s.dtype, c)
            total = self._group(v, keys, mask, s.op, c)
            arr.data[top, i] = cast(total, c, s.dtype)[top]
        self._barrier(mask)

    def _group(self, v: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor, op: BinaryOpType,
               c: DataType) -> torch.Tensor:
        """Per thread: `op` over the values of the threads of `mask` sharing its key."""
        if op in rs._REDUCE:
            return rs._group_reduce(v, keys, mask, op)
        raise Unsupported(f"a reduction across threads by {op.name}")

    def _check_smem(self, smem: kir.Expr, need: int) -> None:
        mem = self.env.get(smem.name) if isinstance(smem, kir.Var) else None
        if not isinstance(mem, Shared):
            raise KernelFault(f"{smem} is not a shared array")
        if mem.size < need:
            raise KernelFault(f"shared scratch {mem.name} holds {mem.size} values, the helper uses {need}")

    def _combine(self, op: BinaryOpType, a: torch.Tensor, b: torch.Tensor, dt: DataType) -> torch.Tensor:
        return binary(op, a, b, dt, dt, dt)

    def _column_partials(self, s: kir.ColumnPartials, mask: torch.Tensor) -> None:
        self._whole_blocks(mask, "column_partials")
        threads = self.per_block
        k = len(s.works)
        self._check_smem(s.smem, k * threads)
        w = _uniform(self.value(s.width, mask), mask, "a column width")
        if w <= 0 or w & (w - 1) or threads % w or w > threads:
            raise KernelFault(f"column_partials with width {w} for {threads} threads (a power of two dividing them)")
        parts = _uniform(self.value(s.parts, mask), mask, "a partials count")
        n_cols = _uniform(self.value(s.n_cols, mask), mask, "a column count")
        c0 = torch.as_tensor(self.value(s.c0, mask)).expand(self.n)
        c = c0 + self.local % w
        valid = mask & (c < n_cols)
        init = cast(self.value(s.init, mask), s.dtype, s.dtype).expand(self.n)
        self._charge(k * parts)  # (the helper's loop over the partials, for each work buffer)
        for out, work in zip(s.outs, s.works):
            mem = self.env[work.name]
            acc = init.clone()
            for p in range(parts):
                v = self.access(mem, p * n_cols + c, valid)
                acc = torch.where(valid, self._combine(s.op, acc, v, s.dtype), acc)
            self._assign(out, acc, mask)
        self._barrier(mask)

    def _segment_partials(self, s: kir.SegmentPartials, mask: torch.Tensor) -> None:
        first = torch.as_tensor(self.value(s.first, mask)).expand(self.n)
        last = torch.as_tensor(self.value(s.last, mask)).expand(self.n)
        seg = torch.as_tensor(self.value(s.seg, mask)).expand(self.n)
        col = torch.as_tensor(self.value(s.col, mask)).expand(self.n)
        n_cols = torch.as_tensor(self.value(s.n_cols, mask)).expand(self.n)
        acc = cast(self.value(s.init, mask), s.dtype, s.dtype).expand(self.n).clone()
        mem = self.env[s.work.name]
        if bool(mask.any()):
            lo, hi = int(first[mask].min()), int(last[mask].max())
            for b in range(lo, hi + 1):
                m = mask & (first <= b) & (b <= last)
                v = self.access(mem, (b + seg) * n_cols + col, m)
                acc = torch.where(m, self._combine(s.op, acc, v, s.dtype), acc)
        self._assign(s.out, acc, mask)

    # --- asynchronous copies ------------------------------------------------------------------------
    def _cp_async(self, s: kir.CpAsync, mask: torch.Tensor) -> None:
        (dst, dat), (src, sat) = self.address(s.dst, mask), self.address(s.src, mask)
        if not isinstance(dst, Shared) or not isinstance(src, Global):
            raise KernelFault("cp.async copies global memory to shared memory")
        if s.bytes not in (4, 8, 16) or s.bytes % src.itemsize or dst.itemsize != src.itemsize:
            raise KernelFault(f"cp.async of {s.bytes} bytes of {src.itemsize}-byte elements")
        self._check_aligned(src, sat, mask, s.bytes, "cp.async source")
        self._check_aligned(dst, dat, mask, s.bytes, "cp.async destination")
        n = s.bytes // src.itemsize
        vals = [self.access(src, sat + e, mask) for e in range(n)]
        rows, cols = self.block[mask], self._byte_cols(dst, dat[mask], n * dst.itemsize)
        if bool(dst.buf.pending[rows[:, None], cols].any()):
            raise KernelFault("cp.async into shared memory another copy has yet to land in")
        dst.buf.pending[rows[:, None], cols] = True
        self.copies.append({"mem": dst, "at": dat.clone(), "vals": vals, "mask": mask.clone(),
                            "group": self.commits.clone()})

    def _cp_wait(self, s: kir.CpAsyncWait, mask: torch.Tensor) -> None:
        left = []
        for c in self.copies:
            done = c["mask"] & mask & (c["group"] < self.commits - s.pending)
            if bool(done.any()):
                mem, at = c["mem"], c["at"]
                rows, cols = self.block[done], self._byte_cols(mem, at[done], len(c["vals"]) * mem.itemsize)
                mem.buf.pending[rows[:, None], cols] = False
                for e, v in enumerate(c["vals"]):
                    self.access(mem, at + e, done, v)
                c["mask"] = c["mask"] & ~done
            if bool(c["mask"].any()):
                left.append(c)
        self.copies = left

    # --- memory -------------------------------------------------------------------------------------
    def _byte_cols(self, mem: Shared, at: torch.Tensor, nbytes: int) -> torch.Tensor:
        return mem.offset + at[:, None] * mem.itemsize + torch.arange(nbytes)

    def _check_aligned(self, mem, at: torch.Tensor, mask: torch.Tensor, nbytes: int, what: str) -> None:
        if isinstance(mem, Global):
            byte = (mem.start + at[mask]) * mem.itemsize
            if bool((byte % nbytes != 0).any()):
                raise KernelFault(f"a misaligned {nbytes}-byte {what} (global {mem.name})")
        elif isinstance(mem, Shared):
            byte = mem.offset + at[mask] * mem.itemsize
            if mem.align % nbytes and bool(mask.any()):
                raise KernelFault(f"a {nbytes}-byte {what} in shared {mem.name}, aligned to {mem.align} bytes only")
            if bool((byte % nbytes != 0).any()):
                raise KernelFault(f"a misaligned {nbytes}-byte {what} (shared {mem.name})")

    def _vector(self, s, mask: torch.Tensor) -> None:
        (dst, dat), (src, sat) = self.address(s.dst, mask), self.address(s.src, mask)
        # the memory side (global, or shared) must be aligned to the access; registers any
        for mem, at, what in ((dst, dat, "store"), (src, sat, "load")):
            if isinstance(mem, (Global, Shared)):
                self._check_aligned(mem, at, mask, min(16, s.n * mem.itemsize), f"vector {what}")
        for e in range(s.n):
            self.access(dst, dat + e, mask, self.access(src, sat + e, mask))

    def address(self, e, mask: torch.Tensor):
        """(memory, per-thread element offset) an address expression points at."""
        if isinstance(e, kir.AddressOf):
            base = e.value.base
            mem = self._memory(base)
            return mem, torch.as_tensor(self.value(e.value.index, mask)).expand(self.n)
        if isinstance(e, kir.Var):
            return self._memory(e), torch.zeros(self.n, dtype=torch.int64)
        if isinstance(e, kir.IndexBinary) and e.op is BinaryOpType.Add and isinstance(e.lhs, kir.Var):
            return self._memory(e.lhs), torch.as_tensor(self.value(e.rhs, mask)).expand(self.n)
        raise Unsupported(f"address {type(e).__name__}")

    def _memory(self, base):
        try:
            return self.env[base.name]
        except KeyError:
            raise KernelFault(f"use of undeclared {base.name}") from None

    def access(self, mem, at, mask: torch.Tensor, value=None):
        """Read (`value` None) or write element `at` of `mem` in the threads of `mask`."""
        if isinstance(mem, tct._Array) and not mem.shared:
            return self._register(mem, at, mask, value)
        at = torch.as_tensor(at).expand(self.n)
        if isinstance(mem, Global):
            return self._global(mem, at, mask, value)
        if isinstance(mem, Shared):
            return self._shared(mem, at, mask, value)
        raise KernelFault(f"an access through {type(mem).__name__} {mem!r}, not memory")

    def _register(self, mem: tct._Array, at, mask: torch.Tensor, value):
        """A register array's element `at` (the same for every thread, mostly: unrolled)."""
        size = mem.data.shape[1]
        if not isinstance(at, torch.Tensor) or at.dim() == 0:
            k = int(at)
            if not 0 <= k < size:
                raise KernelFault(f"register array index out of bounds: {k} of {size}")
            col = mem.data[:, k]
            if value is None:
                return col.clone()
            v = torch.as_tensor(value).to(mem.data.dtype).expand(self.n)
            col.copy_(v if bool(mask.all()) else torch.where(mask, v, col))
            return None
        at = at.expand(self.n)
        bad = mask & ((at < 0) | (at >= size))
        if bool(bad.any()):
            raise KernelFault(f"register array index out of bounds: {at[bad][:4].tolist()} of {size}")
        idx = torch.where(mask, at, 0)[:, None]
        # (gather and scatter move bits: fp8 arrays through their bytes, which CPU kernels take)
        data = mem.data.view(torch.uint8) if mem.data.element_size() == 1 else mem.data
        cur = data.gather(1, idx)[:, 0]
        if value is None:
            return cur.view(mem.data.dtype)
        v = torch.as_tensor(value).to(mem.data.dtype).expand(self.n)
        if data is not mem.data:
            v = v.contiguous().view(torch.uint8)
        data.scatter_(1, idx, torch.where(mask, v, cur)[:, None])
        return None

    def _global(self, mem: Global, at: torch.Tensor, mask: torch.Tensor, value):
        pos = mem.start + at
        bad = mask & ((pos < 0) | (pos >= mem.flat.numel()))
        if bool(bad.any()):
            raise KernelFault(f"global access out of bounds in {mem.name} at {pos[bad][:4].tolist()} "
                              f"(storage {mem.flat.numel()})")
        me = self.tid[mask]
        p = pos[mask]
        if value is None:
            if mem.writer is not None:
                self._check_visible(mem, p, me, "a read of")
            if mem.flat.numel() == 0:  # (no thread of `mask` reads: it would have faulted)
                return torch.zeros(self.n, dtype=mem.flat.dtype)
            return mem.flat[torch.where(mask, pos, 0)]
        if mem.readonly:
            raise KernelFault(f"a write to input {mem.name}")
        v = torch.as_tensor(value).to(mem.flat.dtype).expand(self.n)[mask]
        if mem.writer is None:
            mem.writer = torch.full((mem.flat.numel(),), -1, dtype=torch.int32)
            mem.written = torch.zeros(mem.flat.numel(), dtype=torch.bool)
        else:
            # another thread's write not ordered before this one: a race unless it wrote the same
            w = mem.writer[p]
            unordered = self._unordered(w, me)
            if bool(unordered.any()) and not bool(_same(mem.flat[p[unordered]], v[unordered])):
                raise KernelFault(f"two threads write different values to {mem.name} at "
                                  f"{p[unordered][:4].tolist()} with no barrier between")
        if p.numel() > 1:
            order = torch.argsort(p, stable=True)
            ps, vs = p[order], v[order]
            dup = ps[1:] == ps[:-1]
            if bool(dup.any()) and not bool(_same(vs[1:][dup], vs[:-1][dup])):
                raise KernelFault(f"two threads write different values to {mem.name} at "
                                  f"{ps[1:][dup][:4].tolist()} at once")
        mem.flat[p] = v
        mem.writer[p] = me.to(torch.int32)
        mem.written[p] = True
        return None

    def _unordered(self, w: torch.Tensor, me: torch.Tensor) -> torch.Tensor:
        """Whether writes by writer codes `w` are not yet visible to threads `me`."""
        return ((w >= 0) & (w != me)) | ((w <= -2) & (w != -2 - me // self.per_block))

    def _check_visible(self, mem: Global, p: torch.Tensor, me: torch.Tensor, what: str) -> None:
        w = mem.writer[p]
        bad = self._unordered(w, me)
        if bool(bad.any()):
            raise KernelFault(f"{what} {mem.name} at {p[bad][:4].tolist()}, which another thread wrote with no "
                              f"barrier between (a race)")

    def _shared(self, mem: Shared, at: torch.Tensor, mask: torch.Tensor, value):
        bad = mask & ((at < 0) | (at >= mem.size))
        if bool(bad.any()):
            raise KernelFault(f"shared index out of bounds in {mem.name}: {at[bad][:4].tolist()} of {mem.size}")
        rows, cols, me = self.block[mask], at[mask], self.tid[mask]
        buf = mem.buf
        b = self._byte_cols(mem, cols, mem.itemsize)
        r2 = rows[:, None]
        if bool(buf.pending[r2, b].any()):
            raise KernelFault(f"an access to shared {mem.name} where a cp.async has yet to land")
        w = buf.writer[r2, b]
        if bool(((w != -1) & (w != me[:, None])).any()):
            raise KernelFault(f"shared-memory race in {mem.name}: an access after another thread's write, "
                              f"no barrier between")
        if value is None:
            buf.reader[r2, b] = me[:, None].to(torch.int32)
            out = _poison(torch.empty(self.n, dtype=mem.data.dtype))
            out[mask] = mem.data[rows, cols]
            return out
        r = buf.reader[r2, b]
        if bool(((r != -1) & (r != me[:, None])).any()):
            raise KernelFault(f"shared-memory race in {mem.name}: a write after another thread's read, "
                              f"no barrier between")
        v = torch.as_tensor(value).to(mem.data.dtype).expand(self.n)[mask]
        key = rows * mem.size + cols
        if key.numel() > 1 and torch.unique(key).numel() < key.numel():
            raise KernelFault(f"shared-memory race in {mem.name}: two threads write one element at once")
        buf.writer[r2, b] = me[:, None].to(torch.int32)
        mem.data[rows, cols] = v
        return None

    # --- expressions --------------------------------------------------------------------------------
    def value(self, e, mask: torch.Tensor):
        t = type(e)
        COVERAGE[t.__name__] += 1
        if t is kir.IntLit:
            return e.value
        if t is kir.Var or t is kir.Param:
            try:
                return self.env[e.name]
            except KeyError:
                raise KernelFault(f"use of undeclared {e.name}") from None
        if t is kir.ParallelIndex:
            if e.ptype not in self.index:
                raise Unsupported(f"ParallelIndex {e.ptype.name}")
            return self.index[e.ptype]
        if t is kir.ParallelDim:
            if e.ptype not in self.dim:
                raise Unsupported(f"ParallelDim {e.ptype.name}")
            return self.dim[e.ptype]
        if t is kir.IndexCast:
            v = self.value(e.value, mask)
            return v.to(torch.int64) if isinstance(v, torch.Tensor) else int(v)
        if t is kir.IndexBinary:
            return self._index_binary(e, mask)
        if t is kir.Not:
            return ~torch.as_tensor(self.value(e.value, mask)).to(torch.bool)
        if t is kir.Element:
            return self.access(self._memory(e.base), self.value(e.index, mask), mask)
        if t is kir.Const:
            return const(e.value, e.dtype)
        if t is kir.Cast:
            return cast(self.value(e.value, mask), e.src, e.dst)
        if t is kir.Unary:
            return unary(e.op, self.value(e.operand, mask), e.dtype, e.out)
        if t is kir.Binary:
            return binary(e.op, self.value(e.lhs, mask), self.value(e.rhs, mask), e.lhs_dtype, e.rhs_dtype, e.out,
                          e.common)
        if t is kir.ReciprocalScale:
            return rs.reciprocal_scale(torch.as_tensor(cast(self.value(e.value, mask), e.dtype, e.out)), e.out)
        if t is kir.Ternary:
            if e.op is TernaryOpType.Where:
                # C's ?: evaluates only the chosen side: a load the condition skips never faults
                a_dt, b_dt, c_dt = e.dtypes
                c = cast(self.value(e.operands[0], mask), a_dt, DataType.Bool).expand(self.n)
                a = cast(self.value(e.operands[1], mask & c), b_dt, e.out).expand(self.n)
                b = cast(self.value(e.operands[2], mask & ~c), c_dt, e.out).expand(self.n)
                return torch.where(c, a, b)
            a, b, c = (self.value(x, mask) for x in e.operands)
            return ternary(e.op, a, b, c, e.dtypes, e.out, e.common)
        if t is kir.Random:
            return self._random(e, mask)
        if t is kir.CheckedIndex:
            return self._checked_index(e, mask)
        if t is kir.Lookup:
            pos = torch.as_tensor(self.value(e.position, mask)).expand(self.n)
            ok = pos >= 0
            at = torch.as_tensor(self.value(e.offset, mask)) + torch.where(ok, pos, 0) * torch.as_tensor(
                self.value(e.stride, mask))
            got = self.access(self._memory(e.base), at, mask & ok)
            return torch.where(ok, got, torch.zeros((), dtype=got.dtype))
        if t is kir.ColumnWidth:
            n_cols = _uniform(self.value(e.n_cols, mask), mask, "a column count")
            per_block = n_cols // self.dim[ParallelType.BIDx]
            w = 8
            while w * 2 <= e.threads // 4 and w * 2 <= per_block:
                w *= 2
            return min(w, e.threads)
        if t.__name__ == "StateOr":
            state = self.env.get(e.state.name)
            if state is None:  # a null array: the parameters hold the draw
                return self.value(e.given, mask)
            if not isinstance(state, torch.Tensor) or not 0 <= e.k < state.numel():
                raise KernelFault(f"RNG state element {e.k} of {e.state.name}, which holds {state}")
            return int(state[e.k])
        if t is rs._Value or t is kir.Member:
            return super().value(e, mask)
        raise Unsupported(t.__name__)

    def _index_binary(self, e: kir.IndexBinary, mask: torch.Tensor):
        a, b = self.value(e.lhs, mask), self.value(e.rhs, mask)
        op = e.op
        scalar = not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor)
        if op in (BinaryOpType.Div, BinaryOpType.Mod, BinaryOpType.CeilDiv):
            if scalar:
                if b == 0:
                    raise KernelFault(f"index arithmetic divides by zero: {e}")
                q = int(a / b) if abs(a) < 2**52 else (abs(a) // abs(b)) * (1 if (a >= 0) == (b > 0) else -1)
                if op is BinaryOpType.Div:
                    return q
                if op is BinaryOpType.Mod:
                    return a - b * q
                return int((a + b - 1) / b) if abs(a) < 2**52 else -((-a) // b)
            a, b = torch.as_tensor(a), torch.as_tensor(b)
            zero = mask & (b == 0).expand(self.n)
            if bool(zero.any()):
                raise KernelFault(f"index arithmetic divides by zero: {e}")
            b = _safe_div(b)
            if op is BinaryOpType.CeilDiv:
                a = a + b - 1
            q = torch.div(a, b, rounding_mode="trunc")
            return a - b * q if op is BinaryOpType.Mod else q
        r = _INDEX[op](a, b) if op in _INDEX else None
        if r is None:
            raise Unsupported(f"IndexBinary {op.name}")
        if self.int32 and op in (BinaryOpType.Add, BinaryOpType.Sub, BinaryOpType.Mul):
            if isinstance(r, torch.Tensor):
                if r.dtype != torch.int64 or r.numel() == 0:
                    return r
                lo, hi = torch.aminmax(r)
                if int(lo) < -2**31 or int(hi) >= 2**31:  # (inactive lanes may hold anything)
                    over = mask & ((r < -2**31) | (r >= 2**31)).expand(self.n)
                    if bool(over.any()):
                        raise KernelFault(f"int32 index arithmetic overflows: {e}")
            elif not -2**31 <= r < 2**31:
                raise KernelFault(f"int32 index arithmetic overflows: {e}")
        return r

    def _checked_index(self, e: kir.CheckedIndex, mask: torch.Tensor) -> torch.Tensor:
        v = _t(self.value(e.value, mask), e.dtype).to(torch.int64).expand(self.n)
        n = torch.as_tensor(self.value(e.extent, mask)).to(torch.int64)
        i = torch.where(v < 0, v + n, v) if e.wrap else v
        ok = (i >= 0) & (i < n)
        bad = mask & ~ok
        if bool(bad.any()):
            if e.flag is None:
                self.host_check_failures.append(e.check)
            else:
                flag = self.env[e.flag.name]
                if int(flag[0]) == 0:  # the first thread to fail wins
                    t = int(bad.nonzero()[0, 0])
                    flag[0], flag[1], flag[2] = e.check + 1, int(v[t]), int(n.expand(self.n)[t])
        return torch.where(ok, i, torch.full((), -1, dtype=torch.int64))

    def _random(self, e: kir.Random, mask: torch.Tensor) -> torch.Tensor:
        seed = _uniform(self.value(e.seed, mask), mask, "an RNG seed")
        offset = _uniform(self.value(e.offset, mask), mask, "an RNG offset")
        idx = torch.as_tensor(self.value(e.index, mask)).to(torch.int64).expand(self.n)
        idx = torch.where(mask, idx, 0)
        # a thread may draw for a lane it then discards (a cat's other branch, at a position
        # before that branch starts): the GPU draws some number there; the simulator draws
        # `stray_draw` (simulate_kernel reruns with +inf and -inf where there were any, so a
        # stray number that reaches an output, through a comparison too, shows)
        stray = idx < 0
        self.strays = self.strays or bool(stray.any())
        idx = torch.where(stray, 0, idx)
        double = e.out is DataType.Double
        normal = e.op is RNGOpType.Normal
        per = philox.elements_per_block(double)
        q = idx // per
        s, o = seed & philox.MASK64, offset & philox.MASK64
        words = philox.philox4x32_10((o & philox.MASK32, o >> 32, q & philox.MASK32, q >> 32),
                                     (s & philox.MASK32, s >> 32))
        z = philox._standard(normal, double, words).gather(1, (idx % per)[:, None])[:, 0]
        comp = DataType.Double if double else DataType.Float
        lo, hi = (_uniform_float(cast(self.value(p, mask), dt, comp), mask)
                  for p, dt in zip(e.params, e.param_dtypes))
        r = philox.normal(z, lo, hi) if normal else philox.uniform(z, lo, hi)
        return cast(torch.where(stray, self.stray_draw, r), comp, e.out)


def _uniform_float(v: torch.Tensor, mask: torch.Tensor) -> float:
    if v.dim() == 0:
        return float(v)
    v = v.expand(mask.shape[0])[mask]
    if v.numel() and bool((v != v[0]).any()):
        raise Unsupported("RNG parameters that differ between threads")
    return float(v[0]) if v.numel() else 0.0


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Whether values agree everywhere (NaNs agreeing with NaNs; floats within 4 ulps). The
    ulps because PyTorch's CPU kernels that simulate a math function give one input different
    last bits in a SIMD lane and in the scalar tail (sigmoid: 0.26002532 and 0.26002529), so
    threads writing the same value to an expanded output seem to race (sim fuzz seed 23003
    case 6689); a GPU thread computes the same bits from the same input."""
    eq = a == b
    if a.dtype.is_floating_point:
        tol = 4 * torch.finfo(a.dtype).eps * torch.maximum(a.abs(), b.abs())
        eq = eq | (a - b).abs().le(tol) | (torch.isnan(a) & torch.isnan(b))
    elif a.dtype.is_complex:
        eq = eq | (torch.isnan(a) & torch.isnan(b))
    return eq.all()


def _poison(t: torch.Tensor) -> torch.Tensor:
    """`t` filled with what uninitialised memory reads as here: NaN, or a large odd integer."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.fill_(float("nan"))
    if t.dtype is torch.bool:
        return t.fill_(True)
    return t.fill_(-0x5A5A5A5B if t.dtype.itemsize >= 4 else -77)


def _ge(a, b):
    return a >= b


_INDEX: dict[BinaryOpType, Callable] = {
    BinaryOpType.Add: lambda a, b: a + b,
    BinaryOpType.Sub: lambda a, b: a - b,
    BinaryOpType.Mul: lambda a, b: a * b,
    BinaryOpType.Lt: lambda a, b: a < b,
    BinaryOpType.Le: lambda a, b: a <= b,
    BinaryOpType.Gt: lambda a, b: a > b,
    BinaryOpType.Ge: _ge,
    BinaryOpType.Eq: lambda a, b: a == b,
    BinaryOpType.Ne: lambda a, b: a != b,
    BinaryOpType.LogicalAnd: lambda a, b: a & b if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)
    else a and b,
    BinaryOpType.LogicalOr: lambda a, b: a | b if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)
    else a or b,
    BinaryOpType.Max: lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else max(a, b),
    BinaryOpType.Min: lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else min(a, b),
}


# --- one kernel -------------------------------------------------------------------------------------


@dataclass
class Launch:
    """How a generated kernel is launched in the simulation: its grid (capped as the runtime
    caps a grid-strided kernel's at the blocks the GPU holds: `resident`) and buffers."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    threads: int


def launch_shape(k, resident: int | None = None) -> Launch:
    """The grid `k` (a GeneratedKernel) runs with: as planned, or for a grid-strided kernel
    with at most `resident` blocks, balanced as `GeneratedKernel.load` balances them."""
    grid = k.grid
    if k.kernel.grid_strided and resident and grid[0] > 0:
        rounds = -(-grid[0] // resident)
        grid = (-(-grid[0] // rounds), 1, 1)
    return Launch(grid, k.block, grid[0] * grid[1] * k.block[0] * k.block[1])


def _simulate_once(k, args: Sequence[Any], shape, philox_state: tuple[int, int], captured: bool, budget: float,
                   stray_draw: float):
    """One simulated launch of `k` (see simulate_kernel): (outputs, the simulator, the index
    error flag or None)."""
    outs, values = tct.plan_values(k, list(args))
    for pos, which in k._philox:
        values[pos] = 0 if captured else philox.as_int64(philox_state[which])
    if captured and getattr(k, "_philox_state", None) is not None:
        values[k._philox_state] = torch.tensor([philox.as_int64(x) for x in philox_state], dtype=torch.int64)
    blocks = shape.grid[0] * shape.grid[1]
    for pos, per_block, fixed in _work_sizes(k):
        p = k.kernel.params[pos]
        if p.welford:
            continue
        # the bytes `GeneratedKernel.load` allocates for the launch's grid, uninitialised
        n = max(1, (blocks * per_block + fixed) // p.dtype.itemsize)
        values[pos] = _poison(torch.empty(n, dtype=p.dtype.torch))
    flag = None
    if k._index_error is not None:
        flag = torch.zeros(3, dtype=torch.int64)
        values[k._index_error[0]] = flag
    sim = Simulator(k.kernel, shape.grid, shape.block, values, budget=budget, stray_draw=stray_draw)
    sim.run()
    return outs, sim, flag


def simulate_kernel(k, args: Sequence[Any], *, philox_state: tuple[int, int] = (0, 0), resident: int | None = None,
                    max_threads: int | None = None, budget: float = float("inf"),
                    captured: bool = False) -> list[torch.Tensor]:
    """The outputs of generated kernel `k` simulated on CPU `args` (the segment's inputs):
    outputs poisoned first (NaN, -7, True) and every element checked written; grid
    reduction partials poisoned; `philox_state` the execution's (seed, base offset) for
    unseeded RNG ops (with `captured`, passed as a launch captured in a CUDA graph passes
    it: in a device array, the parameters zero). Raises KernelFault for what a GPU would do
    wrong (an index op's value out of range included: the runtime's IndexError),
    Unsupported, OverBudget."""
    shape = launch_shape(k, resident)
    check_launch(k.kernel, shape)
    if max_threads is not None and shape.threads > max_threads:
        raise OverBudget(f"{shape.threads} threads")
    if shape.grid[0] == 0:
        return tct.plan_values(k, list(args))[0]
    outs, sim, flag = _simulate_once(k, args, shape, philox_state, captured, budget, float("nan"))
    if sim.strays:
        # a number drawn at a negative index must not reach an output: +inf and -inf there
        # give the same outputs only if none does (a NaN could hide behind a comparison)
        hi = _simulate_once(k, args, shape, philox_state, captured, budget, float("inf"))[0]
        lo = _simulate_once(k, args, shape, philox_state, captured, budget, float("-inf"))[0]
        for j, (a, b) in enumerate(zip(hi, lo)):
            both_nan = (torch.isnan(a) & torch.isnan(b)) if a.dtype.is_floating_point else False
            if not bool(((a == b) | both_nan).all()):
                raise KernelFault(f"output {j}: a random number drawn at a negative index reaches it")
    if flag is not None and int(flag[0]):
        chk = k.kernel.index_checks[int(flag[0]) - 1]
        raise KernelFault(f"index check failed on the device: {chk.op} of {chk.tensor} along dim {chk.dim}: "
                          f"index {int(flag[1])} of extent {int(flag[2])} (the runtime raises IndexError)")
    if sim.host_check_failures:
        raise KernelFault(f"host-checked indices out of range on the device: checks {sim.host_check_failures}")
    for j, o in enumerate(outs):
        g = next((g for g in sim.globals if g.flat.data_ptr() == o.untyped_storage().data_ptr()), None)
        if o.numel() and g is not None:
            stored = _stored_positions(o, g)
            unwritten = ~g.written[stored] if g.written is not None else torch.ones_like(stored, dtype=torch.bool)
            if bool(unwritten.any()):
                raise KernelFault(f"output {j}: {int(unwritten.sum())} of {stored.numel()} elements never written")
    return outs


#: what an sm_90 launch allows: threads per block, grid y extent, shared memory per block
#: (static at most 48 KiB, with the dynamic opt-in 227 KiB in all)
MAX_BLOCK_THREADS = 1024
MAX_GRID_Y = 65535
MAX_STATIC_SMEM = 48 * 1024
MAX_SMEM = 227 * 1024


def static_smem(kernel: kir.Kernel) -> int:
    """Bytes of the kernel's statically declared shared arrays."""
    total = 0

    def visit(stmts: list) -> None:
        nonlocal total
        for s in stmts:
            if isinstance(s, kir.Decl) and s.space is MemoryType.Shared and s.offset is None:
                total += (s.size or 1) * kir.value_bytes(s.dtype or DataType.Int, s.welford)
            for f in ("body", "then", "orelse"):
                visit(getattr(s, f, None) or [])

    visit(kernel.body)
    return total


def check_launch(kernel: kir.Kernel, shape: Launch) -> None:
    """Raise KernelFault for a launch the GPU refuses: too many threads per block (or more
    than the kernel's __launch_bounds__), a grid too tall, too much shared memory."""
    threads = shape.block[0] * shape.block[1]
    bound = max(kernel.threads * kernel.threads_y, 1)
    if threads > MAX_BLOCK_THREADS or threads > bound:
        raise KernelFault(f"a launch of {shape.block[:2]} threads per block (__launch_bounds__({bound}))")
    if shape.grid[1] > MAX_GRID_Y:
        raise KernelFault(f"a launch with gridDim.y = {shape.grid[1]} (at most {MAX_GRID_Y})")
    static = static_smem(kernel)
    if static > MAX_STATIC_SMEM or static + kernel.dynamic_smem > MAX_SMEM:
        raise KernelFault(f"{static} bytes of static and {kernel.dynamic_smem} of dynamic shared memory per block")


def _work_sizes(k) -> list[tuple[int, int, int]]:
    """(param position, bytes per block, bytes beside) of the grid-reduction buffers."""
    out = []
    for pos, p in enumerate(k.kernel.params):
        if p.kind == "work":
            elem, slots, fixed = p.source
            out.append((pos, slots * elem, fixed * elem))
    return out


def _stored_positions(o: torch.Tensor, g: Global) -> torch.Tensor:
    """Flat storage positions of output `o`'s stored elements (expanded axes once)."""
    view = torch.arange(g.flat.numel(), dtype=torch.int64).as_strided(o.shape, o.stride(), o.storage_offset())
    return view.reshape(-1).unique()


# --- the reference, with reductions' reordering noise ------------------------------------------------


class _NoisyReference(ref.ReferenceExecutor):
    """The reference executor with each float reduction's result moved by a random fraction
    of what summing in another order may change it by (`noise` None: the plain reference)."""

    def __init__(self, fusion, device, philox_state, noise: torch.Generator | None) -> None:
        super().__init__(fusion, device, philox_state)
        self.noise = noise

    def run_expr(self, e) -> None:
        super().run_expr(e)
        if self.noise is None or not isinstance(e, (ReductionOp, WelfordOp)):
            return
        x = self.env.get(e.inputs[0])
        if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
            return
        dims = ref._reduced_dims(e.outputs[0])
        if not dims:
            return
        n = max(1, math.prod(x.shape[d] for d in dims))
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        eps = torch.finfo(acc).eps
        chain = math.sqrt(n * min(n, 4096))
        xd = x.double()
        rms = (xd * xd).mean(dims).sqrt() if x.numel() else torch.zeros(())
        if isinstance(e, ReductionOp):
            out = self.env[e.outputs[0]]
            if e.op_type is BinaryOpType.Add:
                # random-sign terms err as a random walk; same-sign ones coherently, up to
                # about eps per element of a thread's serial chain (of at most 4096)
                bound = 4 * eps * chain * rms + eps * min(n, 4096) * out.double().abs()
            elif e.op_type is BinaryOpType.Mul:
                bound = 4 * eps * math.sqrt(n) * out.double().abs()
            else:
                return
            self.env[e.outputs[0]] = self._jitter(out, bound)
            return
        mean, m2 = self.env[e.outputs[0]], self.env[e.outputs[1]]
        mean_bound = 4 * eps * chain * rms / n + eps * min(n, 4096) * mean.double().abs()
        self.env[e.outputs[0]] = self._jitter(mean, mean_bound)
        # a sum of squares: same-sign terms; and each term (x - mean) * (x - running mean)
        # is off by |x - mean| times the running mean's rounding (eps |mean|), which is
        # what limits a Welford far from zero (a mean 6e4 standard deviations out)
        m2d = m2.double().abs()
        std = (m2d / n).sqrt()
        bound = eps * min(n, 4096) * m2d + 4 * eps * chain * std * mean.double().abs()
        self.env[e.outputs[1]] = self._jitter(m2, bound)

    def _jitter(self, v: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
        if not v.dtype.is_floating_point or v.numel() == 0:
            return v
        u = torch.rand(v.shape, generator=self.noise, dtype=torch.float64) * 2 - 1
        return (v.double() + u * bound.expand(v.shape)).to(v.dtype)


def run_reference(fusion, args: Sequence[Any], philox_state: tuple[int, int], noise: int | None = None) -> list[Any]:
    """The segment's outputs from the reference executor with the execution's RNG state
    (`noise`: a seed for reordering noise at its reductions)."""
    from fuser.runtime.binding import BindingPlan

    binding = BindingPlan.of(fusion).bind(args, torch.device("cpu"))
    gen = torch.Generator().manual_seed(noise) if noise is not None else None
    ex = _NoisyReference(fusion, binding.device, philox_state, gen)
    ex.bind(binding)
    return ex.run()


def has_reduction(fusion) -> bool:
    return any(isinstance(e, (ReductionOp, WelfordOp)) for e in fusion.exprs())


def compare(got: Any, want: Any, noise: list[Any], what: str) -> str | None:
    """None where `got` matches `want` (dtype, shape, values within the dtype's tolerance
    plus 4x the noise runs' deviation and their largest), else what differs."""
    if not isinstance(want, torch.Tensor):
        return None if got == want or (got != got and want != want) else f"{what}: got {got!r}, expected {want!r}"
    if not isinstance(got, torch.Tensor):
        return f"{what}: got {type(got).__name__}"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{what}: {got.dtype} {tuple(got.shape)}, expected {want.dtype} {tuple(want.shape)}"
    if got.numel() == 0:
        return None
    rtol, atol = tolerances(want.dtype)
    if want.dtype.is_complex:
        g, w = torch.view_as_real(got).double(), torch.view_as_real(want).double()
        noise = [torch.view_as_real(x).double() for x in noise]
    else:
        g, w = got.double(), want.double()
        noise = [x.double() for x in noise]
    slack = torch.zeros_like(w)
    free = torch.zeros_like(w, dtype=torch.bool)
    for x in noise:
        d = (x - w).abs()
        # an element whose NaN-ness or infinity the noise changes is not determined
        free |= (torch.isnan(x) != torch.isnan(w)) | (torch.isinf(x) & (x != w))
        slack = torch.maximum(slack, torch.nan_to_num(d, nan=0.0, posinf=0.0))
    if noise:
        slack = 4 * slack + slack.max()
    both_nan = torch.isnan(g) & torch.isnan(w)
    same_inf = torch.isinf(w) & (g == w)
    close = (g - w).abs() <= atol + rtol * w.abs() + slack
    ok = close | both_nan | same_inf | free
    if bool(ok.all()):
        return None
    bad = (~ok).nonzero()
    first = tuple(bad[0].tolist())
    tol = atol + rtol * abs(w[first].item()) + float(slack[first])
    return (f"{what}: {bad.shape[0]} of {w.numel()} elements differ, e.g. at {first}: "
            f"sim {got[first].item()!r} reference {want[first].item()!r} (tolerance {tol:.3g})")


# --- the whole fusion ---------------------------------------------------------------------------------


@dataclass
class SegmentReport:
    """One segment's simulation: `status` "ok", "mismatch", "fault", "unsupported",
    "not lowerable", "skipped" or "reference" (no generated kernel); `detail` says why."""

    index: int
    scheduler: str
    kernel: bool
    status: str
    detail: str = ""
    threads: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        what = "kernel" if self.kernel else "no kernel"
        text = f"segment {self.index} ({self.scheduler}, {what}, {self.threads} threads): {self.status}"
        return text + (f": {self.detail}" if self.detail else "")


@dataclass
class SimReport:
    """A fusion's simulation, segment by segment."""

    segments: list[SegmentReport] = field(default_factory=list)
    #: a failure before any segment ran (segmentation, the reference executor)
    error: str = ""

    def count(self, status: str) -> int:
        return sum(s.status == status for s in self.segments)

    @property
    def faults(self) -> int:
        return self.count("fault") + int(bool(self.error))

    @property
    def mismatches(self) -> int:
        return self.count("mismatch")

    @property
    def unsupported(self) -> int:
        return self.count("unsupported")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def simulated(self) -> int:
        return sum(s.kernel and s.status in ("ok", "mismatch", "fault") for s in self.segments)

    @property
    def ok(self) -> bool:
        return not (self.faults or self.mismatches or self.unsupported)

    @property
    def status(self) -> str:
        """The case's worst: fault, mismatch, unsupported, skipped, ok."""
        for s in ("fault", "mismatch", "unsupported", "skipped"):
            if (self.faults if s == "fault" else self.count(s)):
                return s
        return "ok"

    def __str__(self) -> str:
        lines = [s.line() for s in self.segments]
        if self.error:
            lines.insert(0, f"error: {self.error}")
        return "\n".join(lines) or "no segments"


#: the default (seed, base offset) of unseeded RNG ops in a simulated execution
PHILOX_STATE = (0x1234_5678_9ABC, 40)


def simulate_fusion(fd, inputs: Sequence[Any], *, resident: int | None = None, max_threads: int | None = 200_000,
                    budget: float = 4e9, philox_state: tuple[int, int] = PHILOX_STATE,
                    noise_runs: int = 2) -> SimReport:
    """Every generated kernel of `fd`'s segments for `inputs` (CPU tensors and scalars)
    simulated on the arguments it gets at run time and compared with the reference
    executor; see the module docstring. `resident`: the blocks a grid-strided kernel's
    launch is capped at (None: its planned grid); kernels of more than `max_threads`
    threads, or past `budget` statement-steps, are skipped."""
    from fuser.frontend.fusion_definition import _flatten_inputs
    from fuser.lower.errors import NotLowerable
    from fuser.host.executor import segmented_runner
    from fuser.kernel import generates_kernel, prepare_kernel
    from fuser.host.lower import as_declared as _as_declared

    report = SimReport()
    inputs = _flatten_inputs(inputs)
    try:
        fd._ensure_defined()
        runner = segmented_runner(fd._entry, inputs, "cpu" if not any(isinstance(x, torch.Tensor) for x in inputs)
                                  else None)
    except Exception as err:  # noqa: BLE001
        report.error = f"segmenting: {type(err).__name__}: {err}"
        return report
    fusion = runner.seg.complete_fusion
    env: dict = dict(runner.extents)
    env.update(zip(fusion.inputs, inputs))
    for n, r in enumerate(runner.runs):
        args = [_as_declared(env[v], v) if inter else env[v] for v, inter in zip(r.inputs, r.intermediate)]
        sched = str(r.group.scheduler)
        try:
            want = run_reference(r.fusion, args, philox_state)
        except Exception as err:  # noqa: BLE001
            report.error = f"segment {n} ({sched}) on the reference executor: {type(err).__name__}: {err}"
            return report
        seg = SegmentReport(n, sched, False, "reference")
        report.segments.append(seg)
        env.update(zip(r.outputs, want))
        if not generates_kernel(r.group.scheduler):
            continue
        t0 = time.perf_counter()
        try:
            k = prepare_kernel(r.group.scheduler, r.fusion, args, torch.device("cpu"))
        except NotLowerable as err:
            seg.status, seg.detail = "not lowerable", str(err)
            continue
        except Exception as err:  # noqa: BLE001
            seg.status, seg.detail = "fault", f"preparing the kernel crashed: {type(err).__name__}: {err}"
            continue
        seg.kernel = True
        seg.threads = launch_shape(k, resident).threads
        try:
            got = simulate_kernel(k, args, philox_state=philox_state, resident=resident, max_threads=max_threads,
                                  budget=budget)
        except OverBudget as err:
            seg.status, seg.detail = "skipped", f"over budget: {err}"
            continue
        except Unsupported as err:
            seg.status, seg.detail = "unsupported", err.node
            continue
        except KernelFault as err:
            seg.status, seg.detail = "fault", str(err)
            continue
        except Exception as err:  # noqa: BLE001
            # the simulator's own limitation (counted as unsupported, never passed)
            where = traceback.extract_tb(err.__traceback__)[-1]
            seg.status = "unsupported"
            seg.detail = (f"simulator error {type(err).__name__}: {err} "
                          f"({os.path.basename(where.filename)}:{where.lineno})")
            continue
        finally:
            seg.seconds = time.perf_counter() - t0
        noise = []
        if has_reduction(r.fusion):
            noise = [run_reference(r.fusion, args, philox_state, noise=s) for s in range(noise_runs)]
        problems = [compare(g, w, [x[j] for x in noise], f"output {j}") for j, (g, w) in enumerate(zip(got, want))]
        problems = [p for p in problems if p]
        if len(got) != len(want):
            problems.append(f"{len(got)} outputs, the reference has {len(want)}")
        seg.status, seg.detail = ("mismatch", "; ".join(problems)) if problems else ("ok", "")
    return report


# --- repro files (nvFuser's format, with an input header) --------------------------------------------


def load_repro(path: str) -> tuple[Any, list[torch.Tensor]]:
    """(fd, inputs) of an nvFuser-style repro file: `def nvfuser_fusion_idN(fd)` and a header
    line per input, `# input k: kind (shape) stride (strides) torch.dtype` (random values)."""
    import re

    from fuser import DataType, FusionDefinition

    text = open(path).read()
    gen = torch.Generator().manual_seed(0)
    inputs = []
    for m in re.finditer(r"# input \d+: (\w+) \(([\d, ]*)\) stride \(([\d, ]*)\) torch\.(\w+)", text):
        shape = [int(s) for s in m.group(2).split(",") if s.strip()]
        stride = [int(s) for s in m.group(3).split(",") if s.strip()]
        n = 1 + sum((a - 1) * s for a, s in zip(shape, stride))
        flat = torch.randn(n, generator=gen).clamp(-5, 5).to(getattr(torch, m.group(4)))
        inputs.append(flat.as_strided(shape, stride))
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, ns)  # noqa: S102
    func = next(v for k, v in ns.items() if k.startswith("nvfuser_fusion"))
    with FusionDefinition() as fd:
        func(fd)
    return fd, inputs


# --- simulated fuzzing --------------------------------------------------------------------------------


@dataclass
class FuzzResult:
    """One fuzz case's simulation (`report` None: the generator's case could not run)."""

    seed: int
    index: int
    status: str
    report: SimReport | None = None
    detail: str = ""
    seconds: float = 0.0


def fuzz_case(seed: int, index: int, family: str | None = None, **kw: Any) -> FuzzResult:
    """Case `index` of gpu_fuzz's stream `seed` (of its mix, or all of one generator
    `family`), its fusion simulated on CPU inputs. A case
    whose fusion does not execute at all (segmenting or the reference executor fails, as
    `fd.execute` would: the GPU fuzzer reports those) is "error"; one the generator cannot
    build is "skipped"."""
    import gpu_fuzz

    from fuser import DataType, FusionDefinition

    t0 = time.perf_counter()
    ns = {"torch": torch, "DataType": DataType, "FusionDefinition": FusionDefinition}
    try:
        case = gpu_fuzz.generate(seed, index, family)
        exec(case.fd_source(), ns)  # noqa: S102
        inputs = gpu_fuzz.build_inputs(case, "cpu")
    except Exception as err:  # noqa: BLE001
        return FuzzResult(seed, index, "skipped", None, f"the generator's case does not run: {err}")
    report = simulate_fusion(ns["fd"], inputs, **kw)
    status = "error" if report.error else report.status
    return FuzzResult(seed, index, status, report, report.error, time.perf_counter() - t0)


def sim_repro(seed: int, index: int, report: SimReport | None = None, family: str | None = None) -> str:
    """A self-contained script that simulates fuzz case (seed, index) (of `family`, or of
    the mix): gpu_fuzz's repro (the fd program, its inputs, the eager twin) up to its
    execution, then `simulate_fusion`."""
    import gpu_fuzz

    case = gpu_fuzz.generate(seed, index, family)
    also = f" --family {family}" if family else ""
    failure = f"simulated: python tests/kernel_sim.py --seed {seed} --start {index} --cases 1{also}\n"
    failure += str(report) if report is not None else ""
    text = case.repro("cpu", failure)
    cut = text.find("\ngot = ")
    if cut >= 0:
        text = text[:cut + 1]
    tests = os.path.dirname(os.path.abspath(__file__))
    return (text + f"\nimport sys\nsys.path.insert(0, {tests!r})\nfrom kernel_sim import simulate_fusion\n\n"
            "print(simulate_fusion(fd, inputs))\n")


@dataclass
class FuzzSummary:
    """Counts of a simulated fuzz run, by case."""

    results: list[FuzzResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def segments(self, status: str) -> int:
        return sum(r.report.count(status) for r in self.results if r.report is not None)

    def line(self) -> str:
        """The summary line (errors, fusions that do not execute at all, count as skipped)."""
        skipped = self.count("skipped") + self.count("error")
        return (f"sim fuzz: {len(self.results)} cases, {self.count('mismatch')} mismatches, "
                f"{self.count('fault')} faults, {self.count('unsupported')} unsupported, {skipped} skipped")

    def kernels(self) -> dict[str, int]:
        """Kernels simulated to the reference's values, by scheduler."""
        out: collections.Counter = collections.Counter()
        for r in self.results:
            for seg in r.report.segments if r.report is not None else ():
                if seg.kernel and seg.status == "ok":
                    out[seg.scheduler] += 1
        return dict(out.most_common())

    def failures(self) -> list[FuzzResult]:
        return [r for r in self.results if r.status in ("fault", "mismatch", "unsupported")]


def fuzz(n: int, seed: int, start: int = 0, *, progress: Callable[[FuzzResult], None] | None = None,
         exclude: tuple[str, ...] = (), family: str | None = None, **kw: Any) -> FuzzSummary:
    """Cases start .. start + n - 1 of stream `seed` (all of one generator `family`, or of
    the mix but those of the families in `exclude`: left out, not counted), simulated (kw:
    simulate_fusion's). Odd cases launch grid-strided kernels on at most 3 resident blocks
    (their blocks then loop)."""
    import gpu_fuzz

    out = FuzzSummary()
    for i in range(start, start + n):
        if exclude and family is None and gpu_fuzz.case_family(seed, i) in exclude:
            continue
        r = fuzz_case(seed, i, family, resident=3 if i % 2 else None, **kw)
        out.results.append(r)
        if progress is not None:
            progress(r)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The simulated fuzz run's CLI; exit status 1 on any failure."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--max-threads", type=int, default=1_000_000, help="skip kernels of more threads")
    p.add_argument("--budget", type=float, default=4e9, help="skip kernels past this many statement-steps "
                   "(a statement costs its threads + 20000)")
    p.add_argument("--family", default=None, help="every case of this gpu_fuzz generator family (default: "
                   "the mix)")
    p.add_argument("--files", nargs="*", default=[], help="nvFuser-style repro files to simulate instead")
    p.add_argument("--out", default=None, help="write each failure's repro script into this directory")
    p.add_argument("--fuzzer", default=None, help="import gpu_fuzz from this directory (a snapshot)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.fuzzer:
        sys.path.insert(0, a.fuzzer)
    torch.set_num_threads(1)
    if a.files:
        bad = 0
        for path in a.files:
            fd, inputs = load_repro(path)
            rep = simulate_fusion(fd, inputs, max_threads=None, budget=float("inf"))
            print(f"== {path}: {rep.status}\n{rep}", flush=True)
            bad += not rep.ok
        return int(bad > 0)
    t0 = time.perf_counter()

    def progress(r: FuzzResult) -> None:
        if r.status in ("fault", "mismatch", "unsupported", "error"):
            print(f"--- seed={r.seed} index={r.index}: {r.status}\n{r.report}", flush=True)
            text = sim_repro(r.seed, r.index, r.report, a.family)
            if a.out:
                os.makedirs(a.out, exist_ok=True)
                with open(os.path.join(a.out, f"sim_{r.seed}_{r.index}.py"), "w") as f:
                    f.write(text)
            else:
                print(text, flush=True)
        elif a.verbose:
            print(f"seed={r.seed} index={r.index}: {r.status} ({r.seconds:.1f} s)", flush=True)

    s = fuzz(a.cases, a.seed, a.start, progress=progress, family=a.family, max_threads=a.max_threads,
             budget=a.budget)
    print(f"{s.segments('ok')} kernels simulated ok, {s.segments('not lowerable')} not lowerable, "
          f"{s.segments('skipped')} skipped segments, {s.count('error')} cases whose fusion does not execute "
          f"(errors, among the skipped); {time.perf_counter() - t0:.0f} s", flush=True)
    print("kernels simulated ok by scheduler:", s.kernels(), flush=True)
    if a.verbose:
        print("kernel IR nodes simulated:", dict(sorted(COVERAGE.items())), flush=True)
    print(s.line(), flush=True)
    return int(bool(s.failures()))


if __name__ == "__main__":
    sys.exit(main())
