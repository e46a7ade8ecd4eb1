"""Transpose kernels are generated without a GPU: each fusion's CUDA, made from meta tensors
(2D and batched transposes, casts and arithmetic on the tile, tensors of both layouts,
odd sizes, size-1 dims, expanded and non-contiguous inputs), compiles with nvcc for sm_90,
and the schedule's choices show in the code (shared tiles, padding, vector accesses). The
kernels' IR, run by a CPU simulator of the grid (which faults on out-of-bounds and
misaligned accesses and on shared-memory races), matches the reference executor.

`CASES` are shared with tests/test_transpose_cuda.py, which runs them on the GPU."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.info import runtime_info
from fuser.scheduler import FusionAnalysis
from fuser.scheduler import transpose as tr
from fuser.scheduler import pointwise as pw

from cuda_units import compile_all


@dataclass
class Case:
    """A transpose fusion: `build(fd, inputs)` defines it for `inputs` (made by
    `inputs(device)`, random and never zero); `exact`: outputs are copies (compared
    bit for bit); `scheduler`: what the segmenter should make of it."""

    name: str
    build: Callable
    inputs: Callable
    exact: bool = False
    scheduler: str = "transpose"
    #: substrings the generated code must hold
    expect: tuple[str, ...] = field(default=())
    #: too big to run on the GPU in the test suite (code generation only)
    big: bool = False


def rand(*shape, dtype=torch.float32, device="cpu"):
    """Random values away from zero (any dtype; on the meta device: no values)."""
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=torch.float32, device=device)
        return (x + 0.25 * x.sign()).to(dtype)
    if dtype is torch.bool:
        return torch.rand(*shape, device=device) > 0.5
    return torch.randint(-1000, 1000, shape, dtype=torch.int64, device=device).to(dtype)


def _dt(dtype: torch.dtype) -> DataType:
    from fuser.ir.dtype import from_torch

    return from_torch(dtype)


# --- fusions -----------------------------------------------------------------------------------


def copy_t(dims: list[int]):
    """A transposed copy: out = x.permute(dims).contiguous() (the set makes the copy: a
    permute alone is returned as a view of x, with no kernel)."""
    def build(fd, inputs):
        (x,) = inputs
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.set(fd.ops.permute(t, dims)))
    return build


def add_t(fd, inputs):  # fp32: x.T + 1
    t = fd.from_pytorch(inputs[0])
    fd.add_output(fd.ops.add(fd.ops.permute(t, [1, 0]), 1.0))


def cast_add_t(fd, inputs):  # a low-precision x.T * 0.5 + 1 computed in float
    t = fd.from_pytorch(inputs[0])
    x = fd.ops.cast(fd.ops.permute(t, [1, 0]), DataType.Float)
    fd.add_output(fd.ops.cast(fd.ops.add(fd.ops.mul(x, 0.5), 1.0), _dt(inputs[0].dtype)))


def up_cast_t(fd, inputs):  # bf16 in, fp32 out: the output (more bytes) runs the work, the input is staged
    t = fd.from_pytorch(inputs[0])
    fd.add_output(fd.ops.mul(fd.ops.cast(fd.ops.permute(t, [1, 0]), DataType.Float), 3.0))


def two_layouts(fd, inputs):
    """x [M, N] and y [N, M]: one output of each layout, each reading both inputs."""
    x, y = (fd.from_pytorch(v) for v in inputs)
    yt = fd.ops.permute(y, [1, 0])
    fd.add_output(fd.ops.add(x, fd.ops.mul(yt, 2.0)))  # [M, N]
    fd.add_output(fd.ops.sub(fd.ops.permute(x, [1, 0]), y))  # [N, M]
    fd.add_output(fd.ops.cast(fd.ops.permute(fd.ops.relu(x), [1, 0]), DataType.BFloat16))  # [N, M] bf16


def scalar_scale(fd, inputs):
    """A 3-D batched transpose scaled by a scalar input, with a second output in the input's layout."""
    x = fd.from_pytorch(inputs[0])
    s = fd.define_scalar(dtype=DataType.Double)
    y = fd.ops.mul(x, s)
    fd.add_output(fd.ops.permute(y, [0, 2, 1]))
    fd.add_output(fd.ops.neg(y))


def size_one_dims(fd, inputs):
    """[M, 1, N] with a broadcast (declared 1) dim, plus a symbolic dim of extent 1: both kinds
    of size-1 dims around a transpose."""
    x = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True], dtype=DataType.Float)
    z = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    y = fd.ops.add(fd.ops.permute(x, [2, 1, 0]), fd.ops.permute(z, [2, 1, 0]))  # z: [M, 1, N] symbolic
    fd.add_output(fd.ops.exp(y))


def expanded(fd, inputs):
    """x [M, N] transposed plus inputs expanded (stride 0) along either axis."""
    x = fd.from_pytorch(inputs[0])
    row = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Float)  # [M ex, N]
    col = fd.define_tensor(shape=[-1, -1], contiguity=[True, None], dtype=DataType.Float)  # [M, N ex]
    y = fd.ops.add(fd.ops.add(x, row), fd.ops.mul(col, x))
    fd.add_output(fd.ops.permute(y, [1, 0]))


def view_in(fd, inputs):
    """A non-contiguous input (a transposed, sliced or strided view) written contiguously."""
    x = fd.from_pytorch(inputs[0])
    fd.add_output(fd.ops.mul(fd.ops.abs(x), 2.0))


def bias_t(fd, inputs):
    """x.T + b (b along the output's innermost axis) and x.T * c (c along its outer one)."""
    x, b, c = (fd.from_pytorch(v) for v in inputs)
    xt = fd.ops.permute(x, [1, 0])
    bb = fd.ops.broadcast_in_dim(b, shape=xt.shape(), broadcast_dims=[1])
    cc = fd.ops.broadcast_in_dim(c, shape=xt.shape(), broadcast_dims=[0])
    fd.add_output(fd.ops.mul(fd.ops.add(xt, bb), cc))


def iota_t(fd, inputs):
    """Factories on the tile: x.T + iota along the output's innermost axis + full."""
    x = fd.from_pytorch(inputs[0])
    xt = fd.ops.permute(x, [1, 0])
    i = fd.ops.iota(xt.size(1), 0, 1, dtype=DataType.Int)
    ib = fd.ops.broadcast_in_dim(fd.ops.cast(i, DataType.Float), shape=xt.shape(), broadcast_dims=[1])
    f = fd.ops.full([xt.size(0), xt.size(1)], 0.5, dtype=DataType.Float)
    fd.add_output(fd.ops.add(fd.ops.add(xt, ib), f))


def _inputs(*makers):
    return lambda device: [m(device) for m in makers]


def _x(*shape, dtype=torch.float32, view=None):
    def make(device):
        if view is None:
            return rand(*shape, dtype=dtype, device=device)
        return view(rand(*shape, dtype=dtype, device=device))
    return make


CASES = [
    Case("t2d_fp32_8192", add_t, _inputs(_x(8192, 8192)),
         expect=("__shared__ float smem", "fuser::load_vec<float, 4>", "fuser::store_vec<float, 4>")),
    Case("t2d_bf16_8192", cast_add_t, _inputs(_x(8192, 8192, dtype=torch.bfloat16)),
         expect=("__shared__ __bfloat smem", "fuser::load_vec<__bfloat, 8>", "fuser::store_vec<__bfloat, 8>")),
    Case("t2d_fp16_odd_1025x127", cast_add_t, _inputs(_x(1025, 127, dtype=torch.float16))),
    Case("t2d_fp32_odd_1025x127", add_t, _inputs(_x(1025, 127))),
    Case("t2d_fp32_tails_33x65", add_t, _inputs(_x(33, 65))),
    Case("t2d_bf16_to_fp32", up_cast_t, _inputs(_x(4096, 2048, dtype=torch.bfloat16)),
         expect=("__shared__ __bfloat smem", "fuser::store_vec<float, 4>", "fuser::load_vec<__bfloat, 8>")),
    Case("bshd_to_bhsd_bf16", copy_t([0, 2, 1, 3]), _inputs(_x(2, 1024, 32, 128, dtype=torch.bfloat16)),
         exact=True, scheduler="pointwise"),
    Case("bshd_to_bhds_bf16", copy_t([0, 2, 3, 1]), _inputs(_x(2, 1024, 32, 128, dtype=torch.bfloat16)),
         exact=True, expect=("blockIdx.y",)),
    Case("batch3d_fp32", scalar_scale, lambda d: [rand(16, 1000, 1024, device=d), 1.5]),
    Case("two_layouts_fp32", two_layouts, _inputs(_x(2048, 1024), _x(1024, 2048))),
    Case("size_one_dims_fp32", size_one_dims, _inputs(_x(1000, 1, 300), _x(1000, 1, 300))),
    Case("expanded_fp32", expanded, _inputs(_x(1000, 300), _x(1, 300, view=lambda t: t.expand(1000, 300)),
                                            _x(1000, 1, view=lambda t: t.expand(1000, 300)))),
    Case("transposed_view_fp32", view_in, _inputs(_x(3000, 2000, view=lambda t: t.t()))),
    Case("sliced_view_fp32", view_in, _inputs(_x(3000, 2050, view=lambda t: t[:, :2000].t()))),
    Case("strided_view_bf16", view_in, _inputs(_x(3000, 4000, dtype=torch.bfloat16, view=lambda t: t[:, ::2].t()))),
    Case("bias_t_fp32", bias_t, _inputs(_x(1024, 4096), _x(1024), _x(4096))),
    Case("iota_full_t_fp32", iota_t, _inputs(_x(640, 384))),
    Case("big_batch_fp32", copy_t([0, 2, 1]), _inputs(_x(70000, 32, 32)), exact=True,
         expect=("gridDim.y",)),
    Case("int64_index_bf16", copy_t([1, 0]), _inputs(_x(1 << 16, 1 << 15 | 64, dtype=torch.bfloat16)),
         exact=True, expect=("typedef long long nvfuser_index_t;",), big=True),
]
for _dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
               torch.int32, torch.int64, torch.bool):
    CASES.append(Case(f"copy_{str(_dtype).split('.')[-1]}_515x1031", copy_t([1, 0]), _inputs(_x(515, 1031, dtype=_dtype)),
                      exact=True))
    CASES.append(Case(f"copy_{str(_dtype).split('.')[-1]}_1024x2048", copy_t([1, 0]), _inputs(_x(1024, 2048, dtype=_dtype)),
                      exact=True))

BY_NAME = {c.name: c for c in CASES}


def define(case: Case, inputs) -> FusionDefinition:
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    return fd


def _code(case: Case) -> str:
    inputs = case.inputs("meta")
    return define(case, inputs).cuda_code_for(inputs)


# --- tests -------------------------------------------------------------------------------------


def test_cases_are_scheduled_as_intended():
    for case in CASES:
        inputs = case.inputs("meta")
        seg = define(case, inputs).segmented_fusion_for(inputs)
        assert [str(g.scheduler) for g in seg.groups] == [case.scheduler], case.name


@pytest.mark.nvcc
def test_every_transpose_kernel_compiles_for_sm90():
    sources = [_code(case) for case in CASES]
    for case, src in zip(CASES, sources):
        if case.scheduler == "transpose":
            assert "fuser_transpose" in src and "__shared__" in src and "__syncthreads();" in src, case.name
        for want in case.expect:
            assert want in src, f"{case.name}: no {want!r} in\n{src}"
    assert compile_all(sources)[:4] == b"\x7fELF"


# --- the kernel IR simulated on the CPU ----------------------------------------------------------
#
# No GPU here: an interpreter runs a kernel's IR for every thread of its grid at once, in
# lockstep (a barrier is then a point where every write before it is done), on CPU tensors.
# It checks what a GPU would get wrong silently or fatally: a global access out of its
# tensor's storage, a misaligned vector access, a shared-memory race (two threads touch one
# address, one of them writing, with no barrier between), a barrier some threads of a block
# skip. It covers the ops the cases below use (the C the printer writes for arithmetic is
# tested elsewhere: this is about indexing, predicates, tiles and barriers).

from fuser.ir import MemoryType, ParallelType  # noqa: E402
from fuser.ir.dtype import compute_dtype  # noqa: E402
from fuser.ir.exprs import BinaryOpType, UnaryOpType  # noqa: E402
from fuser.lower import kir  # noqa: E402


class KernelFault(AssertionError):
    """What a GPU would do wrong: an out-of-bounds or misaligned access, a race, a deadlock."""


def _trunc_div(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.div(a, b, rounding_mode="trunc")
    return int(a / b)


_INDEX_OPS = {
    BinaryOpType.Add: lambda a, b: a + b,
    BinaryOpType.Sub: lambda a, b: a - b,
    BinaryOpType.Mul: lambda a, b: a * b,
    BinaryOpType.Div: _trunc_div,
    BinaryOpType.Mod: lambda a, b: a - b * _trunc_div(a, b),
    BinaryOpType.CeilDiv: lambda a, b: _trunc_div(a + b - 1, b),
    BinaryOpType.Lt: lambda a, b: a < b,
    BinaryOpType.Eq: lambda a, b: a == b,
    BinaryOpType.LogicalAnd: lambda a, b: a & b,
}
_VALUE_OPS = {
    UnaryOpType.Neg: torch.neg, UnaryOpType.Abs: torch.abs, UnaryOpType.Exp: torch.exp, UnaryOpType.Relu: torch.relu,
    BinaryOpType.Add: torch.add, BinaryOpType.Sub: torch.sub, BinaryOpType.Mul: torch.mul, BinaryOpType.Div: torch.div,
    BinaryOpType.Lt: torch.lt, BinaryOpType.Ge: torch.ge, BinaryOpType.LogicalAnd: torch.logical_and,
}


class _Global:
    """A tensor argument: its storage as a flat tensor and where the view starts in it."""

    def __init__(self, x: torch.Tensor) -> None:
        storage = x.untyped_storage()
        self.flat = torch.empty(0, dtype=x.dtype).set_(storage, 0, (storage.nbytes() // x.element_size(),))
        self.start = x.storage_offset()
        self.itemsize = x.element_size()


class _Array:
    """A register array (a row per thread) or a shared one (a row per block, with the last
    writer and reader of each element since the last barrier)."""

    def __init__(self, dtype: torch.dtype, size: int, rows: int, shared: bool) -> None:
        self.data = torch.zeros((rows, size), dtype=dtype)
        self.shared = shared
        self.writer = torch.full((rows, size), -1) if shared else None
        self.reader = torch.full((rows, size), -1) if shared else None


class Simulator:
    """Runs a kernel's IR for every thread of a grid of blocks at once."""

    def __init__(self, kernel: kir.Kernel, grid: tuple[int, ...], block: tuple[int, ...], values: list) -> None:
        gx, gy, bdx = grid[0], grid[1], block[0]
        self.blocks = gx * gy
        self.n = self.blocks * bdx
        t = torch.arange(self.n)
        self.tid, self.block = t, t // bdx
        self.index = {ParallelType.TIDx: t % bdx, ParallelType.BIDx: self.block % gx, ParallelType.BIDy: self.block // gx}
        self.dim = {ParallelType.TIDx: bdx, ParallelType.BIDx: gx, ParallelType.BIDy: gy}
        self.env: dict = {p.name: _Global(v) if p.pointer else v for p, v in zip(kernel.params, values)}
        self.kernel = kernel

    def run(self) -> None:
        """Run the kernel (outputs are written into the tensor arguments)."""
        self.stmts(self.kernel.body, torch.ones(self.n, dtype=torch.bool))

    # statements
    def stmts(self, stmts: list, mask: torch.Tensor) -> None:
        for s in stmts:
            if bool(mask.any()):
                self.stmt(s, mask)

    def stmt(self, s, mask: torch.Tensor) -> None:
        if isinstance(s, kir.Comment):
            return
        if isinstance(s, kir.Decl):
            dtype = torch.int64 if s.dtype is None else s.dtype.torch
            if s.size is not None:
                shared = s.space is MemoryType.Shared
                self.env[s.name] = _Array(dtype, s.size, self.blocks if shared else self.n, shared)
            else:
                init = self.value(s.init, mask) if s.init is not None else 0
                self.env[s.name] = torch.as_tensor(init).to(dtype).expand(self.n).clone()
        elif isinstance(s, kir.Assign):
            v = self.value(s.rhs, mask)
            if isinstance(s.lhs, kir.Var):
                old = self.env[s.lhs.name]
                self.env[s.lhs.name] = torch.where(mask, torch.as_tensor(v).to(old.dtype), old)
            else:
                self.access(self.env[s.lhs.base.name], self.value(s.lhs.index, mask), mask, v)
        elif isinstance(s, kir.For):
            stop = self.value(s.stop, mask)
            if isinstance(stop, torch.Tensor):
                if bool((stop[mask] != stop[mask][0]).any()):
                    raise KernelFault(f"loop over {s.var.name} has a trip count that differs between threads")
                stop = int(stop[mask][0])
            for i in range(stop):
                self.env[s.var.name] = i
                self.stmts(s.body, mask)
        elif isinstance(s, kir.If):
            cond = torch.as_tensor(self.value(s.cond, mask)).expand(self.n)
            self.stmts(s.then, mask & cond)
            self.stmts(s.orelse or [], mask & ~cond)
        elif isinstance(s, (kir.VecLoad, kir.VecStore)):
            (dst, dst_at), (src, src_at) = self.address(s.dst, mask), self.address(s.src, mask)
            for mem, at in ((dst, dst_at), (src, src_at)):
                if isinstance(mem, _Global):
                    byte = (mem.start + at[mask]) * mem.itemsize
                    if bool((byte % min(16, s.n * mem.itemsize) != 0).any()):
                        raise KernelFault(f"a misaligned {s.n}-element vector access")
            for e in range(s.n):
                self.access(dst, dst_at + e, mask, self.access(src, src_at + e, mask))
        elif isinstance(s, kir.Sync):
            arrived = torch.zeros(self.blocks, dtype=torch.int64).index_add_(0, self.block, mask.long())
            size = torch.bincount(self.block, minlength=self.blocks)
            if bool(((arrived != 0) & (arrived != size)).any()):
                raise KernelFault("__syncthreads() that some threads of a block skip")
            for a in self.env.values():
                if isinstance(a, _Array) and a.shared:
                    a.writer.fill_(-1)
                    a.reader.fill_(-1)
        else:
            raise TypeError(f"the simulator has no {type(s).__name__}")

    # memory
    def address(self, e, mask: torch.Tensor):
        """(memory, per-thread element offset) an address expression points at."""
        if isinstance(e, kir.AddressOf):
            return self.env[e.value.base.name], torch.as_tensor(self.value(e.value.index, mask)).expand(self.n)
        if isinstance(e, kir.Var):
            return self.env[e.name], torch.zeros(self.n, dtype=torch.int64)
        if isinstance(e, kir.IndexBinary) and e.op is BinaryOpType.Add and isinstance(e.lhs, kir.Var):
            return self.env[e.lhs.name], torch.as_tensor(self.value(e.rhs, mask)).expand(self.n)
        raise TypeError(f"no address in {e}")

    def access(self, mem, at, mask: torch.Tensor, value=None):
        """Read (`value` None) or write element `at` of `mem` in the threads of `mask`."""
        at = torch.as_tensor(at).expand(self.n)
        if isinstance(mem, _Global):
            pos = mem.start + at
            bad = mask & ((pos < 0) | (pos >= mem.flat.numel()))
            if bool(bad.any()):
                raise KernelFault(f"global access out of bounds at {pos[bad][:4].tolist()} (storage {mem.flat.numel()})")
            if value is None:
                return mem.flat[torch.where(mask, pos, 0)]
            mem.flat[pos[mask]] = torch.as_tensor(value).to(mem.flat.dtype).expand(self.n)[mask]
            return None
        size = mem.data.shape[1]
        bad = mask & ((at < 0) | (at >= size))
        if bool(bad.any()):
            raise KernelFault(f"array index out of bounds: {at[bad][:4].tolist()} of {size}")
        rows = (self.block if mem.shared else self.tid)[mask]
        cols, me = at[mask], self.tid[mask]
        if mem.shared:
            w = mem.writer[rows, cols]
            if bool(((w != -1) & (w != me)).any()):
                raise KernelFault("shared-memory race: an access after another thread's write, no barrier between")
            if value is not None:
                r = mem.reader[rows, cols]
                if bool(((r != -1) & (r != me)).any()):
                    raise KernelFault("shared-memory race: a write after another thread's read, no barrier between")
            (mem.writer if value is not None else mem.reader)[rows, cols] = me
        if value is None:
            out = torch.zeros(self.n, dtype=mem.data.dtype)
            out[mask] = mem.data[rows, cols]
            return out
        mem.data[rows, cols] = torch.as_tensor(value).to(mem.data.dtype).expand(self.n)[mask]
        return None

    # expressions
    def value(self, e, mask: torch.Tensor):
        if isinstance(e, kir.IntLit):
            return e.value
        if isinstance(e, (kir.Var, kir.Param)):
            return self.env[e.name]
        if isinstance(e, kir.ParallelIndex):
            return self.index[e.ptype]
        if isinstance(e, kir.ParallelDim):
            return self.dim[e.ptype]
        if isinstance(e, kir.IndexCast):
            return self.value(e.value, mask)
        if isinstance(e, kir.IndexBinary):
            a, b = self.value(e.lhs, mask), self.value(e.rhs, mask)
            return _INDEX_OPS[e.op](a, b)
        if isinstance(e, kir.Element):
            return self.access(self.env[e.base.name], self.value(e.index, mask), mask)
        if isinstance(e, kir.Const):
            return torch.tensor(e.value).to(e.dtype.torch)
        if isinstance(e, kir.Cast):
            return torch.as_tensor(self.value(e.value, mask)).to(e.dst.torch)
        if isinstance(e, kir.Unary):
            x = torch.as_tensor(self.value(e.operand, mask))
            if e.op is UnaryOpType.Cast:
                return x.to(e.out.torch)
            return _VALUE_OPS[e.op](x.to(compute_dtype(e.out).torch)).to(e.out.torch)
        if isinstance(e, kir.Binary):
            c = compute_dtype(e.common or e.out).torch
            a, b = (torch.as_tensor(self.value(x, mask)).to(c) for x in (e.lhs, e.rhs))
            return _VALUE_OPS[e.op](a, b).to(e.out.torch)
        raise TypeError(f"the simulator has no {type(e).__name__}")


def simulate_kernel(fusion, args: list):
    """(outputs, kernel): the transpose kernel of segment `fusion` simulated on CPU `args`;
    outputs start poisoned (NaN, -7, True), so an element the kernel skips shows."""
    from fuser.kernel import prepare_transpose

    k = prepare_transpose(fusion, args)
    return run_plan(k, args), k


def plan_values(k, args: list) -> tuple[list, list]:
    """(outputs, parameter values) of launch plan `k` (a GeneratedKernel) on CPU `args`:
    the outputs fresh and poisoned (NaN, -7, True) so that an element the kernel skips shows,
    the parameters the template with the arguments' and outputs' tensors in place."""
    outs = k.allocate_outputs()
    for o in outs:
        o.fill_(float("nan") if o.dtype.is_floating_point else True if o.dtype is torch.bool else -7)
    values = list(k._template)
    for pos, j in k._in_ptrs + k._scalars:
        values[pos] = args[j]
    for pos, j in k._out_ptrs + k._out_storage_ptrs:
        values[pos] = outs[j]
    return outs, values


def run_plan(k, args: list, simulator: type | None = None) -> list:
    """The outputs of launch plan `k` (a GeneratedKernel) simulated on CPU `args` by
    `simulator` (default: this file's Simulator), poisoned first (`plan_values`)."""
    outs, values = plan_values(k, args)
    if k.grid[0]:
        (simulator or Simulator)(k.kernel, k.grid, k.block, values).run()
    return outs


def simulate(fd: FusionDefinition, inputs: list):
    """(outputs, the reference executor's, kernel): `simulate_kernel` on `fd`'s one
    segment, a transpose one (its outputs in the segment's order)."""
    from fuser.runtime.reference import run_reference
    from fuser.host.lower import example_args

    seg = fd.segmented_fusion_for(inputs)
    assert [str(g.scheduler) for g in seg.groups] == ["transpose"], seg
    group = seg.groups[0]
    args = example_args(seg, group, inputs)
    got, k = simulate_kernel(group.fusion(), args)
    return got, run_reference(group.fusion(), args), k


SIMULATED = [
    Case("sim_tails_fp32", add_t, _inputs(_x(65, 97))),
    Case("sim_tails_bf16", cast_add_t, _inputs(_x(97, 130, dtype=torch.bfloat16))),
    Case("sim_bf16_to_fp32", up_cast_t, _inputs(_x(128, 256, dtype=torch.bfloat16))),
    Case("sim_two_layouts", two_layouts, _inputs(_x(200, 130), _x(130, 200))),
    Case("sim_batch_scalar", scalar_scale, lambda d: [rand(7, 100, 130, device=d), 1.5]),
    Case("sim_size_one_dims", size_one_dims, _inputs(_x(100, 1, 300), _x(100, 1, 300))),
    Case("sim_expanded", expanded, _inputs(_x(100, 300), _x(1, 300, view=lambda t: t.expand(100, 300)),
                                           _x(100, 1, view=lambda t: t.expand(100, 300)))),
    Case("sim_bias", bias_t, _inputs(_x(100, 260), _x(100), _x(260))),
    Case("sim_iota_full", iota_t, _inputs(_x(130, 200))),
    Case("sim_transposed_view", view_in, _inputs(_x(300, 200, view=lambda t: t.t()))),
    Case("sim_strided_view", view_in, _inputs(_x(300, 400, dtype=torch.bfloat16, view=lambda t: t[:, ::2].t()))),
    Case("sim_misaligned", copy_t([1, 0]), _inputs(_x(64 * 96 + 1, view=lambda t: t[1:].view(64, 96))), exact=True),
    Case("sim_bhds", copy_t([0, 2, 3, 1]), _inputs(_x(2, 100, 3, 64, dtype=torch.bfloat16)), exact=True),
    Case("sim_4d", copy_t([3, 1, 0, 2]), _inputs(_x(5, 3, 70, 66)), exact=True),
]
for _dtype in (torch.float64, torch.float16, torch.float8_e5m2, torch.int32, torch.int64, torch.bool):
    SIMULATED.append(Case(f"sim_copy_{str(_dtype).split('.')[-1]}", copy_t([0, 2, 1]),
                          _inputs(_x(4, 130, 192, dtype=_dtype)), exact=True))


@pytest.mark.parametrize("tiles", ["small", "large"])
@pytest.mark.parametrize("case", SIMULATED, ids=[c.name for c in SIMULATED])
def test_kernel_simulated_on_cpu_matches_reference(case, tiles, monkeypatch):
    """Each kernel, interpreted on the CPU, gives the reference executor's values: with the
    tiles the heuristics pick for these small sizes (32 x 32), and with 64 x 64 tiles and
    a grid of at most 3 batch indices (the blocks loop over the rest)."""
    if tiles == "large":
        monkeypatch.setattr(tr, "MIN_BLOCKS_PER_SM", 0)
        monkeypatch.setattr(tr, "MAX_GRID_Y", 3)
    torch.manual_seed(0)
    inputs = case.inputs("cpu")
    fd = define(case, inputs)
    got, want, k = simulate(fd, inputs)
    if tiles == "large":
        assert k.params.tile_a == 64
        assert k.params.batch_loop == (case.name in ("sim_batch_scalar", "sim_bhds", "sim_4d") or "copy" in case.name)
    for k, (g, w) in enumerate(zip(got, want)):
        if case.exact:
            assert torch.equal(g, w), f"{case.name} output {k}"
        else:
            torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2, msg=lambda m: f"{case.name} output {k}: {m}")


def test_simulator_catches_missing_barriers_and_predicates(monkeypatch):
    """The simulator is a real check: without the barriers the tiles race, without the tile
    predicate the edge tiles read past their tensors."""
    import fuser.lower.transpose as lowering

    case = next(c for c in SIMULATED if c.name == "sim_two_layouts")
    inputs = case.inputs("cpu")
    with monkeypatch.context() as m:
        m.setattr(lowering, "Sync", lambda: kir.Comment("no barrier"))
        with pytest.raises(KernelFault, match="race"):
            simulate(define(case, inputs), inputs)
    with monkeypatch.context() as m:
        m.setattr(lowering.TransposeLowering, "in_tile", lambda self, a, b: kir.lt(kir.IntLit(0), 1))
        with pytest.raises(KernelFault, match="out of bounds"):
            simulate(define(case, inputs), inputs)


# --- the schedule's choices ------------------------------------------------------------------------


def _kernel(case: Case, inputs=None):
    from fuser.host.lower import example_args
    from fuser.kernel import prepare_transpose

    inputs = inputs if inputs is not None else case.inputs("meta")
    fd = define(case, inputs)
    seg = fd.segmented_fusion_for(inputs)
    (group,) = seg.groups
    return prepare_transpose(group.fusion(), example_args(seg, group, inputs))


def test_tiles_are_padded_shared_memory_and_accesses_vectors():
    k = _kernel(BY_NAME["t2d_fp32_8192"])
    p = k.params
    assert (p.tile_a, p.tile_b, p.threads, p.vector_a, p.vector_b) == (64, 64, 256, 4, 4)
    b_inner, pad = p.smem_layout(4)
    assert pad > 0 and f"smem0[{64 * (64 + pad)}]" in k.source
    assert k.source.count("__syncthreads();") == 1  # one staged input, no staged output
    assert k.grid == (128 * 128, 1, 1) and k.block == (256, 1, 1)
    bf16 = _kernel(BY_NAME["t2d_bf16_8192"]).params
    assert (bf16.vector_a, bf16.vector_b) == (8, 8)
    odd = _kernel(BY_NAME["t2d_fp32_odd_1025x127"])
    assert "load_vec" not in odd.source and "store_vec" not in odd.source  # 1025 and 127 are odd
    assert (odd.params.tile_a, odd.params.threads) == (32, 64)  # few tiles: small ones
    sliced = _kernel(BY_NAME["sliced_view_fp32"]).params  # rows 2050 elements apart: 8-byte vectors
    assert (sliced.vector_a, sliced.vector_b) == (4, 2)
    strided = _kernel(BY_NAME["strided_view_bf16"]).params  # every other column: no vectors on that side
    assert (strided.vector_a, strided.vector_b) == (8, 1)


def test_both_layouts_stage_inputs_and_outputs():
    src = _code(BY_NAME["two_layouts_fp32"])
    assert src.count("__shared__ float smem") == 2  # x in, x - y.T ... out: one tile each way
    assert src.count("__syncthreads();") == 2
    assert "// staged outputs" in src and "// staged inputs" in src


def test_batches_go_to_blockIdx_y_and_loop_past_its_limit():
    k = _kernel(BY_NAME["batch3d_fp32"])
    assert k.grid[1] == 16 and "blockIdx.y" in k.source and "gridDim.y" not in k.source
    big = _kernel(BY_NAME["big_batch_fp32"])
    assert big.grid[1] == tr.MAX_GRID_Y and big.params.batch_loop
    assert "for (nvfuser_index_t g = 0;" in big.source


def test_padding_removes_bank_conflicts():
    """The chosen padding makes the tile accesses of both mappings conflict-free for 4-byte
    elements (one wavefront per warp-wide access; 8-byte ones need two by nature), where an
    unpadded tile serialises one side 8 ways."""
    def cost(itemsize, v, b_inner, pad, tile=64, threads=256):
        lanes = tr._lanes(v, itemsize, tile)
        ax, ay = tr.tile_mapping(tile, tile, v, lanes, threads)
        bx, by = tr.tile_mapping(tile, tile, v, lanes, threads)
        rows = lambda x: x.reshape(threads // 32, 32, *x.shape[1:]).transpose(0, 2, 3, 1).reshape(-1, 32)  # noqa: E731
        ax, ay, bx, by = map(rows, (ax, ay, bx, by))
        assert b_inner
        per = tile + pad
        return tr.wavefronts(ax * per + ay, itemsize) / len(ax), tr.wavefronts(by * per + bx, itemsize) / len(bx)

    b_inner, pad = tr._best_smem(4, 64, 64, 256, 4, 8, 4, 8)
    assert cost(4, 4, b_inner, pad) == (1.0, 1.0)
    assert cost(4, 4, True, 0)[0] == 8.0
    b_inner, pad = tr._best_smem(8, 64, 64, 256, 2, 8, 2, 8)
    assert cost(8, 2, b_inner, pad) == (2.0, 2.0)
    b_inner, pad = tr._best_smem(2, 64, 64, 256, 8, 8, 8, 8)
    assert max(cost(2, 8, b_inner, pad)) <= 1.5


def test_mapping_covers_the_tile_once():
    for tx, ty, v, lanes, threads in [(64, 64, 4, 8, 256), (32, 32, 16, 2, 64), (64, 32, 1, 32, 128)]:
        x, y = tr.tile_mapping(tx, ty, v, lanes, threads)
        cells = sorted(zip(x.ravel().tolist(), y.ravel().tolist()))
        assert cells == [(i, j) for i in range(tx) for j in range(ty)]


def test_params_are_hashable_and_printable():
    p = _kernel(BY_NAME["t2d_bf16_8192"]).params
    assert hash(p) == hash(_kernel(BY_NAME["t2d_bf16_8192"]).params)
    assert str(p).startswith("TransposeParams(tile=64x64, threads=256")


# --- what the scheduler rejects --------------------------------------------------------------------


def _reason(build, inputs) -> str | None:
    from fuser.runtime.info import runtime_info
    from fuser.scheduler import SchedulerType, schedulers_for

    with FusionDefinition() as fd:
        build(fd, inputs)
    f = fd.fusion
    return schedulers_for(f, runtime_info(f, inputs))[SchedulerType.transpose]


def test_rejects_what_the_kernel_cannot_lower():
    x = [rand(128, 96, device="meta")]

    def nothing_staged(fd, inputs):  # y is [M] along the output's outer axis: no tile to stage
        t = fd.from_pytorch(inputs[0])
        y = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.add(t, fd.ops.broadcast_in_dim(y, shape=t.shape(), broadcast_dims=[0])))

    why = _reason(nothing_staged, x + [rand(128, device="meta")])
    assert why is not None and "nothing to stage" in why

    def rng(fd, inputs):
        t = fd.ops.permute(fd.from_pytorch(inputs[0]), [1, 0])
        fd.add_output(fd.ops.add(t, fd.ops.rand_like(t)))

    assert _reason(rng, x) is None  # random numbers are computed on the tile, as any elementwise op

    def reshape(fd, inputs):
        t = fd.ops.permute(fd.from_pytorch(inputs[0]), [1, 0])
        fd.add_output(fd.ops.reshape(fd.ops.mul(t, 2.0), [96 * 128]))
        fd.add_output(fd.ops.mul(t, 3.0))

    assert _reason(reshape, x) == "has a reshape"

    def shared_innermost(fd, inputs):
        fd.add_output(fd.ops.permute(fd.from_pytorch(inputs[0]), [1, 0, 2]))

    assert "nothing to transpose" in _reason(shared_innermost, [rand(64, 64, 8, device="meta")])



def test_prepare_refuses_only_what_the_kernel_cannot_compute():
    """A segment the scheduler took lowers whatever its sizes (whether tiles pay off is the
    segmenter's question); one with work the kernel cannot do is refused with the reason."""
    from fuser.lower.errors import NotLowerable
    from fuser.kernel import prepare_transpose

    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.permute(t, [1, 0]))
    assert "8 < 32" in _reason(lambda fd2, inputs: fd2.add_output(fd2.ops.permute(fd2.from_pytorch(inputs[0]), [1, 0])),
                               [rand(8, 64, device="meta")])
    assert prepare_transpose(fd.fusion, [rand(8, 64, device="meta")]).grid == (2, 1, 1)
    with FusionDefinition() as fd:
        t = fd.ops.permute(fd.define_tensor(shape=[-1, -1], contiguity=[True, True]), [1, 0])
        fd.add_output(fd.ops.reshape(fd.ops.mul(t, 2.0), [64 * 64]))
        fd.add_output(fd.ops.mul(t, 3.0))
    with pytest.raises(NotLowerable, match="cannot compute this segment: has a reshape"):
        prepare_transpose(fd.fusion, [rand(64, 64, device="meta")])


def test_segments_judged_within_the_complete_fusion_get_their_kernels():
    """-x is forwarded: each segment recomputes it, but while the segmenter merges, it
    is an output of the segment that makes it (others read it), and in the [44] layout, so
    the merges are judged transposes. As fusions of their own, neither segment has anything
    to stage: the segmenter's last verdict, on the segments as they are, is pointwise.
    A transpose kernel of each still lowers (with nothing staged) and is right."""
    from fuser.runtime.reference import run_reference
    from fuser.host.lower import example_args

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True])
        t = fd.ops.neg(x)
        full = fd.ops.full(shape=[4, 44, 45], fill_value=-2.0, dtype=DataType.Float)
        div = fd.ops.div(full, fd.ops.expand(fd.ops.broadcast(fd.ops.abs(t), [True, False, True]), shape=[4, 44, 45]))
        cut = fd.ops.segment_set(div)
        fd.add_output(fd.ops.add(fd.ops.broadcast_in_dim(fd.ops.exp(t), shape=[4, 44, 45], broadcast_dims=[1]), cut))
    inputs = [rand(44)]
    seg = fd.segmented_fusion_for(inputs)
    assert [str(g.scheduler) for g in seg.groups] == ["pointwise", "pointwise"]
    for group in seg.groups:
        f = group.fusion()
        sub = FusionAnalysis(f, runtime_info(f, example_args(seg, group, inputs))).whole()
        assert tr.reject_reason(sub) and pw.reject_reason(sub) is None
        args = [rand(*a.shape) if isinstance(a, torch.Tensor) and a.device.type == "meta" else a
                for a in example_args(seg, group, inputs)]
        got, k = simulate_kernel(f, args)
        assert k.params.n_staged == 0 and "__shared__" not in k.source
        for g, w in zip(got, run_reference(f, args)):
            torch.testing.assert_close(g, w)


def test_shared_memory_holds_what_fits_and_the_rest_is_read_directly():
    """Six fp64 inputs to stage: 32 x 36 tiles of five fill 46 KB; the sixth is read where the
    work runs (not coalesced, but right)."""
    def many(fd, inputs):
        ys = [fd.ops.permute(fd.from_pytorch(v), [1, 0]) for v in inputs]
        for k, y in enumerate(ys):
            fd.add_output(fd.ops.add(fd.ops.mul(y, float(k + 1)), ys[0]))
        fd.add_output(ys[1])

    case = Case("many_staged", many, lambda d: [rand(96, 64, dtype=torch.float64, device=d) for _ in range(6)])
    assert _reason(many, case.inputs("meta")) is None
    k = _kernel(case)
    assert k.params.n_staged == 5 and k.source.count("__shared__ double") == 5
    inputs = case.inputs("cpu")
    got, want, _ = simulate(define(case, inputs), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
