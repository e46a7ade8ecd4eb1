"""A differential fuzzer: random fusions through the public frontend against eager PyTorch.

Each case is a pure function of (seed, index): `generate(seed, index)` draws, with
`random.Random`, a fusion program (`fd.define_tensor ... fd.add_output`) as text, the same
computation written as a plain eager-PyTorch function (the "twin", one line per fd line),
and the code that builds the inputs (contiguous, permuted, sliced or expanded tensors and
scalars). `run_case(case, device)` execs the fd text (so a repro is exactly what ran),
executes it twice, runs the twin on the same inputs and compares: dtypes and shapes
exactly, values with tolerances (NaN positions equal). A failure carries `case.repro()`,
a self-contained script: the fd program, the inputs, the twin and a comparison.

Run as a script (the summary line comes last)::

    python -m tests.gpu_fuzz --cases 2000 --seed 7 --device cuda
    python tests/gpu_fuzz.py --cases 1 --start 41 --seed 7 --print-repro   # one case's repro

How values are compared. The twin is written with `F` for float32 (`x.to(F)`, `dtype=F`);
it runs once with F = float32 (eager PyTorch as written: the expected dtypes and shapes)
and once with F = float64 (the truth: float32 inputs are widened at its top, and half /
bfloat16 values are widened where the program casts them to Float, so only the program's
own narrow roundings remain). A float output must lie within
``atol + rtol * |truth| + 4 * noise + max(noise)`` of the truth, with (rtol, atol) from
`fuser.runtime.tolerance` for the output dtype and `noise` measured, not guessed: the twin
runs twice more in float64 with every inexact value perturbed by about one rounding unit
of the dtype fuser computes it in (float32 math: 2**-22 relative; a half / bfloat16 result:
one ulp; a sum: the float32 summation error bound, eps * log2(n) * sum|x|), and noise is
how far those runs land from the truth. Cancellations, softmax denominators and the like
thus get exactly the room their conditioning needs and no more. Integer and bool outputs
must be equal. RNG outputs (uniform / normal with a fixed rng_seed) are checked for dtype,
shape, range, rough moments, distinct values and determinism (two executes agree bitwise).

What the generator avoids (so that every difference is a bug): division by anything but
|y| + 1, integer division, exp of values above 12 (10 in half), half values above 6e4,
prod over more than 64 elements (of values in [0.75, 1.25], or 8 small integers), max/min
and var_mean over empty dims, any discontinuity (comparison, logical op, float->int/bool
cast, round, floor) of a value that is not computed exactly by every implementation
("exact" values: inputs and what neg/abs/relu/max/min/where/casts/permutes/broadcasts and
integer math make of them), and (while AVOID_NARROW_PROMOTION) operands that a half /
bfloat16 result type would round in PyTorch but not in fuser. Tensors stay under ~1e5
elements and rank 4; programs have 1-8 drawn ops (about 13 lines) and 1-3 outputs.

A failure's repro names the case (`--seed S --start I --cases 1` runs it again) and its
message; `Summary.details()` also counts the tags (op families, input layouts) of the
failing cases, which usually points at the culprit.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import math
import os
import random
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

# --- inputs (this function is copied into every repro) -----------------------------------------


def make_input(shape, dtype, seed, device="cpu"):
    """A reproducible random tensor: floats in [-5.25, -0.25] U [0.25, 5.25], ints in
    [-8, 8], bools half True; made on the CPU, then moved to `device`."""
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        x = torch.rand(shape, generator=g) < 0.5
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=g).clamp(-5.0, 5.0)
        x = (x + 0.25 * torch.where(x < 0, -1.0, 1.0)).to(dtype)
    else:
        x = torch.randint(-8, 9, shape, generator=g).to(dtype)
    return x.to(device)


# --- tables --------------------------------------------------------------------------------------

#: axis extents drawn for the "universe" of a case (repeats weight the draw)
EXTENTS = (1, 1, 2, 2, 3, 3, 4, 5, 7, 7, 8, 16, 31, 33, 64, 127, 128, 255, 1025, 4097)
MAX_NUMEL = 100_000
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
NARROW = (torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
FD_DT = {
    torch.float32: "DataType.Float", torch.float16: "DataType.Half", torch.bfloat16: "DataType.BFloat16",
    torch.int32: "DataType.Int32", torch.int64: "DataType.Int", torch.bool: "DataType.Bool",
}
TWIN_DT = {
    torch.float32: "F", torch.float16: "torch.float16", torch.bfloat16: "torch.bfloat16",
    torch.int32: "torch.int32", torch.int64: "torch.int64", torch.bool: "torch.bool",
}
#: relative size of one rounding of a value computed in this dtype (float32 math: 2 ulps,
#: which also covers CUDA's transcendental functions; half / bfloat16: one ulp)
EPS = {torch.float32: 2.0**-22, torch.float64: 2.0**-22, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
EPS32 = 2.0**-22
#: noise multiplier of the comparison (see the module docstring)
NOISE_K = 4.0
HALF_MAX = 6.0e4
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL = ("logical_and", "logical_or")
BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor")
#: ops whose result jumps with its operands: only for exact operands
NEEDS_EXACT = COMPARE + LOGICAL
#: ops PyTorch takes only with two tensors
TENSOR_ONLY = ("maximum", "minimum") + LOGICAL
#: Eager PyTorch rounds an operand of another type (an integer tensor, a 0-dim float32
#: tensor, a number) to a half / bfloat16 result type before computing; fuser computes with
#: it unrounded (e.g. bf16 [352] - 0-dim f32 350.37: torch 2, fuser 1.63; eq(bf16 [350],
#: 0-dim f32 350.37): torch True, fuser False). While True, the generator casts such
#: operands explicitly, so that both compute the same thing; False fuzzes that promotion.
AVOID_NARROW_PROMOTION = True


def _clog(n: int) -> float:
    """Summation error growth used for a reduction of n elements (tree plus serial part)."""
    return 4.0 + 2.0 * math.log2(n + 1)


# --- case --------------------------------------------------------------------------------------------


def reduced_axes(x: "Var", dims: list[int], keepdim: bool) -> tuple:
    """The axes of a reduction of `x` over `dims`: reduced ones dropped, or kept as
    broadcast axes with keepdim."""
    return tuple((k, "b") if p in dims else x.axes[p] for p, (k, _) in enumerate(x.axes) if keepdim or p not in dims)


@dataclass
class TwinLine:
    text: str
    #: names the line assigns, and how to perturb them in the noise runs (None: exact)
    names: tuple[str, ...]
    perturb: tuple | None = None


@dataclass
class RngCheck:
    kind: str  # "uniform" (values in [lo, hi]) or "normal" (mean lo, std hi)
    lo: float
    hi: float


@dataclass
class Case:
    seed: int
    index: int
    sizes: list[int]
    fd_lines: list[str]
    twin_params: list[str]
    twin_lines: list[TwinLine]
    outputs: list[str]
    input_exprs: list[str]
    rng_checks: dict[int, RngCheck]
    tags: set[str] = field(default_factory=set)
    #: execute(..., device=DEVICE): the fusion has no tensor input to say where it runs
    pass_device: bool = False

    @property
    def id(self) -> str:
        return f"seed={self.seed} index={self.index}"

    def fd_source(self) -> str:
        return "with FusionDefinition() as fd:\n" + "".join(f"    {line}\n" for line in self.fd_lines)

    def inputs_source(self) -> str:
        return "inputs = [\n" + "".join(f"    {e},\n" for e in self.input_exprs) + "]\n"

    def twin_source(self) -> str:
        body = "".join(f"    {t.text}\n" for t in self.twin_lines)
        return (f"def torch_fn({', '.join(self.twin_params)}):\n{body}"
                f"    return [{', '.join(self.outputs)}]\n")

    def execute_source(self) -> str:
        return "fd.execute(inputs, device=DEVICE)" if self.pass_device else "fd.execute(inputs)"

    def repro(self, device: str = "cuda", failure: str = "") -> str:
        """A self-contained script: the fusion, its inputs, the eager twin and a comparison."""
        head = f"# gpu_fuzz case {self.id} (python -m tests.gpu_fuzz --seed {self.seed} --start {self.index} --cases 1)\n"
        if failure:
            head += "".join(f"# {line}\n" for line in failure.splitlines())
        rng_note = ""
        if self.rng_checks:
            outs = ", ".join(f"{k} ({c.kind} {c.lo:g}, {c.hi:g})" for k, c in sorted(self.rng_checks.items()))
            rng_note = f"# random outputs, compared by range/moments/determinism only: {outs}\n"
        return (
            head
            + "import torch\nfrom fuser import DataType, FusionDefinition\n\n"
            + f'DEVICE = "{device}"\n'
            + "F = torch.float32  # the twin's float type (the fuzzer also runs it with float64 as the truth)\n\n"
            + inspect.getsource(make_input)
            + "\n\n"
            + self.fd_source()
            + "\n"
            + self.inputs_source()
            + "\n"
            + self.twin_source()
            + "\n"
            + rng_note
            + f"got = {self.execute_source()}\n"
            + "want = torch_fn(*inputs)\n"
            + "for k, (g, w) in enumerate(zip(got, want)):\n"
            + "    diff = (g.double() - w.double()).abs().nan_to_num(0.0).max().item() if g.numel() and g.shape == w.shape else None\n"
            + "    print(k, 'fuser', g.dtype, tuple(g.shape), 'torch', w.dtype, tuple(w.shape), 'max abs diff', diff)\n"
        )


# --- generator ---------------------------------------------------------------------------------------


@dataclass
class Var:
    name: str
    #: one (universe label, kind) per dim: kind "i" an iteration axis, "b" a size-1
    #: broadcast, "e" a broadcast presented at its label's extent (stride 0 / expanded)
    axes: tuple
    dtype: torch.dtype
    exact: bool
    bound: float
    is_input: bool = False
    rng: RngCheck | None = None
    #: "b" axes that are plain (non-expanded) broadcasts, squeezable
    squeezable: frozenset = frozenset()


_NAME = re.compile(r"\bt\d+\b")


class _Reject(Exception):
    """The op just drawn could make a value the implementations may legitimately disagree
    on (a half overflow): the generator rolls the op back."""


def _merge_kind(a: str | None, b: str) -> str:
    if a == "i" or b == "i":
        return "i"
    if a == "e" or b == "e":
        return "e"
    return "b"


def _is_int(dt: torch.dtype) -> bool:
    return dt in INTS


class _Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.fd_lines: list[str] = []
        self.twin_lines: list[TwinLine] = []
        self.twin_params: list[str] = []
        self.input_exprs: list[str] = []
        self.pool: list[Var] = []
        self.inputs: list[Var] = []
        self.rng_vars: list[Var] = []
        self.tags: set[str] = set()
        #: names some line reads (what is not read is a sink: an output candidate)
        self.used: set[str] = set()
        self.n = 0
        self.meta: dict[str, Any] = {"torch": torch, "F": torch.float32, "DEVICE": "meta"}
        self.sizes = self._draw_sizes()

    # --- plumbing ---------------------------------------------------------------------------------
    def _draw_sizes(self) -> list[int]:
        rng = self.rng
        u = rng.choice((1, 2, 2, 3, 3, 3, 4))
        sizes = [rng.choice(EXTENTS) for _ in range(u)]
        while math.prod(sizes) > MAX_NUMEL:
            k = max(range(u), key=lambda j: sizes[j])
            sizes[k] = rng.choice([e for e in EXTENTS if e < sizes[k]])
        if rng.random() < 0.03:
            sizes[rng.randrange(u)] = 0
            self.tags.add("zero_size")
        if any(s in (3, 7, 31, 33, 127, 255, 1025, 4097) for s in sizes):
            self.tags.add("odd_extent")
        if 1 in sizes:
            self.tags.add("size1_extent")
        return sizes

    def name(self, prefix: str = "t") -> str:
        n = f"{prefix}{self.n}"
        self.n += 1
        return n

    def shape(self, axes: Sequence) -> tuple[int, ...]:
        return tuple(1 if kind == "b" else self.sizes[k] for k, kind in axes)

    def emit(self, fd_rhs: str, twin_rhs: str, axes: Sequence, *, exact: Any, bound: float,
             perturb: Any = "default", pool: bool = True, rng: RngCheck | None = None,
             squeezable: frozenset = frozenset(), shape: tuple | None = None) -> Var:
        """One fd line and its twin line; the twin runs on meta tensors at once, which
        gives the dtype torch says the value has (and checks the generator's shapes)."""
        name = self.name()
        self.fd_lines.append(f"{name} = {fd_rhs}")
        self.used.update(_NAME.findall(fd_rhs))
        text = f"{name} = {twin_rhs}"
        exec(text, self.meta)  # noqa: S102 - the text is ours
        val = self.meta[name]
        want = self.shape(axes) if shape is None else shape
        assert tuple(val.shape) == want, f"generator lost track of {name}'s shape: {tuple(val.shape)} vs {want}: {text}"
        if callable(exact):
            exact = exact(val.dtype)
        if val.dtype is torch.float16 and bound > HALF_MAX and not exact:
            raise _Reject(text)
        if perturb == "default":
            perturb = None if exact or not val.dtype.is_floating_point or rng else ("elem", EPS[val.dtype])
        self.twin_lines.append(TwinLine(text, (name,), perturb))
        v = Var(name, tuple(axes), val.dtype, exact, bound, rng=rng, squeezable=squeezable)
        if pool and rng is None:
            self.pool.append(v)
        return v

    def pick(self, pred=None, pool: Sequence[Var] | None = None) -> Var | None:
        """A pool tensor satisfying pred, biased towards the newest and (half the time)
        towards what no line reads yet, so that little of the program is dead."""
        cands = [v for v in (self.pool if pool is None else pool) if pred is None or pred(v)]
        if not cands:
            return None
        fresh = [v for v in cands if v.name not in self.used]
        if fresh and self.rng.random() < 0.5:
            cands = fresh
        i = min(int(self.rng.expovariate(0.45)), len(cands) - 1)
        return cands[len(cands) - 1 - i]

    def shape_src(self, axes: Sequence) -> tuple[str, str]:
        """fd and twin text for a shape list: int literals, some as an input's size."""
        fd, tw = [], []
        for k, kind in axes:
            n = 1 if kind == "b" else self.sizes[k]
            src = None
            if kind != "b" and self.rng.random() < 0.3:
                cands = [(v, p) for v in self.inputs for p, (kk, kd) in enumerate(v.axes) if kk == k and kd in "ie"]
                if cands:
                    v, p = self.rng.choice(cands)
                    src = (f"{v.name}.size({p})", f"{v.name}.shape[{p}]")
                    self.tags.add("symbolic_shape")
            fd.append(src[0] if src else str(n))
            tw.append(src[1] if src else str(n))
        return f"[{', '.join(fd)}]", f"[{', '.join(tw)}]"

    # --- inputs -------------------------------------------------------------------------------------
    def add_input(self) -> None:
        rng = self.rng
        u = len(self.sizes)
        rank = min(rng.choice([0] + [1] * 2 + [2] * 3 + [3] * 3 + [4] * 2), u)
        labels = sorted(rng.sample(range(u), rank))
        kinds = []
        for k in labels:
            r = rng.random()
            kinds.append("b" if r < 0.12 else "e" if r < 0.27 else "i")
        dtype = rng.choice((torch.float32,) * 5 + (torch.float16, torch.bfloat16) * 2 + INTS + (torch.bool,))
        axes = tuple(zip(labels, kinds))
        name = self.name()
        logical = [1 if kd == "b" else self.sizes[k] for k, kd in axes]
        base = [n if kd == "i" else 1 for n, (k, kd) in zip(logical, axes)]
        suffix = ""
        phys = list(range(rank))
        layout = rng.choice(("contiguous",) * 3 + ("permuted", "sliced", "permuted_sliced")) if rank else "contiguous"
        if "permuted" in layout and rank >= 2:
            rng.shuffle(phys)
            if phys != list(range(rank)):
                self.tags.add("input_permuted")
                inv = [phys.index(d) for d in range(rank)]
                suffix += f".permute({', '.join(map(str, inv))})"
        iters = [d for d in range(rank) if kinds[d] == "i"]
        if "sliced" in layout and iters:
            d = rng.choice(iters)
            n = logical[d]
            if rng.random() < 0.5:
                base[d] = 2 * n
                idx = ", ".join("::2" if j == d else ":" for j in range(rank))
                suffix += f"[{idx}]"
            else:
                extra = rng.randint(1, 3)
                base[d] = n + extra
                suffix += f".narrow({d}, {rng.randint(0, extra)}, {n})"
            self.tags.add("input_sliced")
        if "e" in kinds:
            suffix += f".expand({', '.join(map(str, logical))})" if rank else ""
            self.tags.add("input_expanded")
        if "b" in kinds:
            self.tags.add("input_broadcast")
        phys_shape = [base[d] for d in phys]
        seed = rng.randrange(2**31)
        self.input_exprs.append(f"make_input({phys_shape}, {_torch_name(dtype)}, {seed}, DEVICE){suffix}")
        meta_val = eval("x" + suffix, {"x": torch.empty(phys_shape, dtype=dtype, device="meta")})  # noqa: S307
        assert tuple(meta_val.shape) == tuple(logical), (meta_val.shape, logical, suffix)
        strides = meta_val.stride()
        # define_tensor: shape -1 (symbolic), 1 (broadcast) or a static size; contiguity in
        # allocation order (outermost first), None for broadcast and expanded dims
        static = rng.random() < 0.1
        shape = []
        for n, (k, kd) in zip(logical, axes):
            if kd == "b":
                shape.append(1)
            elif kd == "i" and static and n > 1:
                shape.append(n)
                self.tags.add("input_static")
            else:
                shape.append(-1)
        contig: dict[int, bool | None] = {}
        expected = 1
        for d in reversed(phys):
            if kinds[d] != "i":
                contig[d] = None
                continue
            if logical[d] == 1:
                contig[d] = True
                continue
            contig[d] = strides[d] == expected and rng.random() > 0.1
            expected = strides[d] * logical[d]
        contiguity = [contig[d] for d in phys]
        extra = ""
        if phys != list(range(rank)) or (rank > 1 and rng.random() < 0.1):
            order = [rank - 1 - phys.index(d) for d in range(rank)]
            extra = f", stride_order={order}"
        self.fd_lines.append(f"{name} = fd.define_tensor(shape={shape}, contiguity={contiguity}, dtype={FD_DT[dtype]}{extra})")
        self.twin_params.append(name)
        self.meta[name] = torch.empty(logical, dtype=dtype, device="meta")
        if dtype is torch.float32:
            # the truth run (F = float64) widens float32 inputs here
            self.twin_lines.append(TwinLine(f"{name} = {name}.to(F)", (name,), None))
        bound = 5.25 if dtype.is_floating_point else 8.0 if dtype in INTS else 1.0
        sq = frozenset(p for p, (k, kd) in enumerate(axes) if kd == "b")
        v = Var(name, axes, dtype, True, bound, is_input=True, squeezable=sq)
        self.inputs.append(v)
        self.pool.append(v)
        if rank == 0:
            self.tags.add("input_rank0")
        self.tags.add(f"input_{str(dtype).replace('torch.', '')}")

    def scalar_input(self, dtype: torch.dtype) -> tuple[str, float]:
        """A scalar input of the fusion (Double or Int); returns (name, value)."""
        name = self.name("s")
        value = self.rng.choice((0.5, -1.25, 3.0, 0.75)) if dtype.is_floating_point else self.rng.choice((2, -3, 5))
        fd_dt = "DataType.Double" if dtype.is_floating_point else "DataType.Int"
        self.fd_lines.append(f"{name} = fd.define_scalar(None, dtype={fd_dt})")
        self.twin_params.append(name)
        self.input_exprs.append(repr(value))
        self.meta[name] = value
        self.tags.add("scalar_input")
        return name, value

    # --- alignment ------------------------------------------------------------------------------
    @staticmethod
    def direct(a: tuple, b: tuple) -> bool:
        n = min(len(a), len(b))
        return all(a[len(a) - n + p][0] == b[len(b) - n + p][0] for p in range(n))

    @staticmethod
    def merged(*axes_list: tuple) -> tuple:
        n = max(len(a) for a in axes_list)
        out: list = [None] * n
        for a in axes_list:
            off = n - len(a)
            for p, (k, kind) in enumerate(a):
                prev = out[off + p]
                out[off + p] = (k, _merge_kind(prev[1] if prev else None, kind))
        return tuple(out)

    def canonical(self, v: Var) -> Var:
        order = sorted(range(len(v.axes)), key=lambda p: v.axes[p][0])
        if order == list(range(len(v.axes))):
            return v
        sq = frozenset(order.index(p) for p in v.squeezable)
        self.tags.add("permute")
        return self.emit(f"fd.ops.permute({v.name}, dims={order})", f"{v.name}.permute({order})",
                         tuple(v.axes[p] for p in order), exact=v.exact, bound=v.bound, perturb=None, pool=False,
                         squeezable=sq)

    def to_target(self, v: Var, target: tuple) -> Var:
        """`v` (canonical) brought to the labels of `target` (a superset) by
        broadcast_in_dim, broadcast, or broadcast + expand."""
        ks = [k for k, _ in v.axes]
        tks = [k for k, _ in target]
        if ks == tks:
            return v
        how = self.rng.choice(("broadcast_in_dim", "broadcast_in_dim", "broadcast", "expand"))
        have = dict(v.axes)
        if how == "broadcast_in_dim":
            dims = [tks.index(k) for k in ks]
            # new axes, and size-1 axes of v, read at a larger extent become expanded broadcasts
            axes = tuple((k, "b" if tkind == "b" else "e") if have.get(k, "b") == "b" else (k, have[k])
                         for k, tkind in target)
            shp_fd, shp_tw = self.shape_src(axes)
            twin = v.name + "".join(f".unsqueeze({p})" for p, k in enumerate(tks) if k not in ks)
            self.tags.add("broadcast_in_dim")
            return self.emit(f"fd.ops.broadcast_in_dim({v.name}, shape={shp_fd}, broadcast_dims={dims})",
                             f"{twin}.expand({shp_tw})", axes, exact=v.exact, bound=v.bound, perturb=None, pool=False)
        flags = [k not in ks for k in tks]
        axes = tuple((k, have.get(k, "b")) for k in tks)
        twin = v.name + "".join(f".unsqueeze({p})" for p, f in enumerate(flags) if f)
        sq = frozenset(p for p, (k, kind) in enumerate(axes) if k not in have) | frozenset(
            tks.index(ks[p]) for p in v.squeezable)
        self.tags.add("broadcast")
        b = self.emit(f"fd.ops.broadcast({v.name}, is_broadcast_dim={flags})", twin, axes,
                      exact=v.exact, bound=v.bound, perturb=None, pool=False, squeezable=sq)
        if how == "broadcast":
            return b
        eaxes = tuple((k, "e" if kind == "b" and tkind != "b" else kind) for (k, kind), (_, tkind) in zip(axes, target))
        shp_fd, shp_tw = self.shape_src(eaxes)
        self.tags.add("expand")
        return self.emit(f"fd.ops.expand({b.name}, shape={shp_fd})", f"{b.name}.expand({shp_tw})", eaxes,
                         exact=v.exact, bound=v.bound, perturb=None, pool=False)

    def align(self, vs: list[Var]) -> tuple[list[Var], tuple]:
        """Operands for one elementwise op, and the axes of its result."""
        tensors = [v for v in vs if v is not None]
        longest = max(tensors, key=lambda v: len(v.axes))
        if all(self.direct(longest.axes, v.axes) for v in tensors):
            return vs, self.merged(*(v.axes for v in tensors))
        kinds: dict[int, str] = {}
        for v in tensors:
            for k, kind in v.axes:
                kinds[k] = _merge_kind(kinds.get(k), kind)
        target = tuple((k, kinds[k]) for k in sorted(kinds))
        out = [None if v is None else self.to_target(self.canonical(v), target) for v in vs]
        return out, self.merged(*(v.axes for v in out if v is not None))

    def as_float(self, v: Var) -> Var:
        """`v` cast to Float (F) unless it is float32 already."""
        if v.dtype is torch.float32:
            return v
        return self.emit(f"fd.ops.cast({v.name}, dtype=DataType.Float)", f"{v.name}.to(F)", v.axes,
                         exact=v.exact, bound=v.bound, perturb=None, pool=False, squeezable=v.squeezable)

    def positive(self, v: Var) -> Var:
        """|v| + 1.0 (a safe denominator / log argument), float."""
        a = self.emit(f"fd.ops.abs({v.name})", f"torch.abs({v.name})", v.axes, exact=v.exact, bound=v.bound,
                      perturb=None, pool=False, squeezable=v.squeezable)
        return self.emit(f"fd.ops.add({a.name}, 1.0)", f"torch.add({a.name}, 1.0)", v.axes, exact=False,
                         bound=v.bound + 1, pool=False, squeezable=v.squeezable)

    def newest_computed(self) -> Var | None:
        return self.pick(lambda v: not v.is_input)

    # --- ops ----------------------------------------------------------------------------------------
    def op_unary(self) -> None:
        x = self.pick()
        if x is None:
            return
        rng = self.rng
        if x.dtype is torch.bool:
            op = rng.choice(("logical_not", "bitwise_not"))
            self.emit(f"fd.ops.{op}({x.name})", f"torch.{op}({x.name})", x.axes, exact=x.exact, bound=1)
            self.tags.add("bool_math")
            return
        if _is_int(x.dtype):
            op = rng.choice(("neg", "abs", "bitwise_not", "relu", "sin", "logical_not"))
            if op == "logical_not" and not x.exact:
                op = "neg"
            exact = x.exact and op != "sin"
            bound = 1.0 if op in ("sin", "logical_not") else x.bound + 1
            self.emit(f"fd.ops.{op}({x.name})", f"torch.{op}({x.name})", x.axes, exact=exact, bound=bound,
                      perturb="default" if op == "sin" else None)
            self.tags.add("int_math")
            return
        ops = ["neg", "abs", "relu", "sin", "cos", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "reciprocal"]
        if x.exact:
            ops += ["floor", "ceil", "trunc", "round", "signbit", "logical_not"]
        op = rng.choice(ops)
        if op == "exp" and x.bound > (10 if x.dtype is torch.float16 else 12):
            op = "tanh"
        if x.dtype in NARROW:
            self.tags.add("narrow_math")
        self.tags.add("unary")
        if op in ("neg", "abs", "relu", "floor", "ceil", "trunc", "round"):
            self.emit(f"fd.ops.{op}({x.name})", f"torch.{op}({x.name})", x.axes, exact=x.exact, bound=x.bound + 1,
                      perturb=None)
        elif op in ("signbit", "logical_not"):
            self.emit(f"fd.ops.{op}({x.name})", f"torch.{op}({x.name})", x.axes, exact=True, bound=1)
        elif op in ("sin", "cos", "tanh", "sigmoid"):
            self.emit(f"fd.ops.{op}({x.name})", f"torch.{op}({x.name})", x.axes, exact=False, bound=1)
        elif op == "exp":
            self.emit(f"fd.ops.exp({x.name})", f"torch.exp({x.name})", x.axes, exact=False, bound=math.exp(x.bound))
        else:  # of |x| + 1
            p = self.positive(x)
            bound = {"log": math.log(p.bound), "sqrt": math.sqrt(p.bound), "rsqrt": 1.0, "reciprocal": 1.0}[op]
            self.emit(f"fd.ops.{op}({p.name})", f"torch.{op}({p.name})", x.axes, exact=False, bound=bound)

    def scalar_operand(self, x: Var) -> tuple[str, str, float, bool]:
        """(fd text, twin text, |value| bound, a power of two) of a scalar operand beside x:
        a literal, a define_scalar constant, a scalar input of the fusion, or an input's size."""
        rng = self.rng
        r = rng.random()
        want_int = _is_int(x.dtype) or x.dtype is torch.bool
        if r < 0.15:
            name, value = self.scalar_input(torch.int64 if want_int and rng.random() < 0.7 else torch.float64)
            return name, name, abs(value), value in (2, 0.5)
        if r < 0.25:
            cands = [(v, p) for v in self.inputs for p, (k, kd) in enumerate(v.axes) if kd in "ie"]
            if cands:
                v, p = rng.choice(cands)
                self.tags.add("size_scalar")
                return f"{v.name}.size({p})", f"{v.name}.shape[{p}]", float(max(1, self.sizes[v.axes[p][0]])), False
        if r < 0.35:
            name = self.name("s")
            value = rng.choice((2.0, 0.5, -1.5, 1.25))
            self.fd_lines.append(f"{name} = fd.define_scalar({value!r}, dtype=DataType.Double)")
            self.twin_lines.append(TwinLine(f"{name} = {value!r}", (name,), None))
            self.meta[name] = value
            return name, name, abs(value), value in (2.0, 0.5)
        if want_int and rng.random() < 0.7:
            value = rng.choice((1, 2, 3, -2, 7))
            return repr(value), repr(value), float(abs(value)), value in (1, 2)
        value = rng.choice((2.0, 0.5, -1.5, 0.25, 3.0, -2.0))
        return repr(value), repr(value), abs(value), value in (2.0, 0.5, 0.25, -2.0)

    def op_binary(self) -> None:
        rng = self.rng
        x = self.pick()
        if x is None:
            return
        dt = x.dtype
        if dt is torch.bool:
            ops = ["logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "add", "mul"]
        elif _is_int(dt):
            ops = ["add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor",
                   "remainder", "lt", "le", "gt", "ge", "eq", "ne", "div", "logical_and"]
        else:
            ops = ["add", "add", "sub", "sub", "mul", "mul", "div", "maximum", "minimum", "lt", "gt", "le", "ge",
                   "eq", "ne", "logical_or"]
        op = rng.choice(ops)
        fallback = "bitwise_xor" if dt is torch.bool else "add"
        if op in NEEDS_EXACT and not x.exact:
            op = fallback

        def ok(y: Var) -> bool:
            if op in NEEDS_EXACT and not y.exact:
                return False
            ydt = y.dtype
            if op in BITWISE:
                return ydt is torch.bool or _is_int(ydt)
            if op == "remainder":
                return _is_int(ydt)
            if op in ("sub", "div", "maximum", "minimum", "lt", "le", "gt", "ge"):
                return ydt is not torch.bool
            if op in ("add", "mul"):
                return not (ydt is torch.bool and dt is torch.bool)
            return True

        y = self.pick(ok) if op in TENSOR_ONLY or rng.random() < 0.7 else None
        if y is None and op in TENSOR_ONLY:
            op = fallback
        self.tags.add("binary")
        for v in (x, y):
            if v is not None:
                self.tags.add("bool_math" if v.dtype is torch.bool else "int_math" if _is_int(v.dtype)
                              else "narrow_math" if v.dtype in NARROW else "float_math")
        if y is None:
            self.tags.add("scalar_operand")
            pow2 = False
            if op == "remainder":
                b, bb = str(rng.choice((3, 5, 2))), 5.0
            elif op == "div":
                b, bb = repr(rng.choice((2.0, 1.5, 4.0, -3.0))), 4.0
            elif op in BITWISE:
                b, bb = ("True", 1.0) if dt is torch.bool else (str(rng.choice((1, 6, 3))), 6.0)
            elif op in NEEDS_EXACT:  # comparisons (logical ops are tensor-only)
                b = "True" if dt is torch.bool else "0.5" if dt.is_floating_point else "2"
                bb = 2.0
            else:
                b_fd, b_tw, bb, pow2 = self.scalar_operand(x)
                if op == "mul" and x.bound * bb > 1e6:
                    op = "add"
                self._finish_binary(op, x, None, b_fd, b_tw, bb, x.axes, pow2)
                return
            self._finish_binary(op, x, None, b, b, bb, x.axes, pow2)
            return
        if op == "mul" and x.bound * y.bound > 1e6:
            op = "add" if not (dt is torch.bool and y.dtype is torch.bool) else "bitwise_or"
        if y.dtype != dt:
            self.tags.add("mixed_dtypes")
        if op == "div":
            y = self.positive(y)
        if op == "remainder":
            y = self._positive_int(y)
        (a, b), axes = self.align([x, y])
        if op not in ("sub", "div", "remainder") and rng.random() < 0.5:
            a, b = b, a
        self._finish_binary(op, a, b, b.name, b.name, b.bound, axes, False)

    def _positive_int(self, y: Var) -> Var:
        a = self.emit(f"fd.ops.abs({y.name})", f"torch.abs({y.name})", y.axes, exact=y.exact, bound=y.bound,
                      perturb=None, pool=False, squeezable=y.squeezable)
        return self.emit(f"fd.ops.add({a.name}, 1)", f"torch.add({a.name}, 1)", y.axes, exact=y.exact,
                         bound=y.bound + 1, pool=False, squeezable=y.squeezable)

    def _finish_binary(self, op: str, a: Var, b: Var | None, b_fd: str, b_tw: str, bb: float, axes: tuple,
                       pow2: bool) -> Var:
        """Emit `op(a, b)` (b a tensor Var, or a scalar given by its texts)."""
        ab = a.bound
        bound = {"add": ab + bb, "sub": ab + bb, "mul": ab * bb, "div": ab, "maximum": max(ab, bb),
                 "minimum": max(ab, bb), "remainder": bb + 1}.get(op, 1.0)
        if op in BITWISE:
            bound = 2.0 ** (math.ceil(math.log2(max(ab, bb) + 1)) + 1)
        if op in NEEDS_EXACT:
            self.tags.add("comparison" if op in COMPARE else "logical")
        if op not in ("maximum", "minimum"):
            a, b, b_fd, b_tw = self._narrow_operands(a, b, b_fd, b_tw)
        operands_exact = a.exact and (b is None or b.exact)

        def exact(dt: torch.dtype) -> bool:
            if not operands_exact or op == "div":
                return False
            if op in ("add", "sub", "mul"):  # float math rounds, but for a power-of-two scale
                return not dt.is_floating_point or (op == "mul" and pow2)
            return True

        # maximum / minimum select, they round nothing new
        perturb = None if op in ("maximum", "minimum") else "default"
        return self.emit(f"fd.ops.{op}({a.name}, {b_fd})", f"torch.{op}({a.name}, {b_tw})", axes, exact=exact,
                         bound=bound, perturb=perturb)

    def _narrow_operands(self, a: Var, b: Var | None, b_fd: str, b_tw: str) -> tuple:
        """Where an op's result is half / bfloat16 and an operand is of another type (an
        integer tensor, a 0-dim float32 tensor, a number), eager PyTorch rounds that operand
        to the result type first, fuser computes with it unrounded (see the fuzzer's report
        on issue 13): cast such tensor operands explicitly, and keep to numbers the narrow
        type holds exactly, so that both compute the same thing."""
        ma = self.meta[a.name]
        mb = self.meta[b.name] if b is not None else eval(b_tw, dict(self.meta))  # noqa: S307
        rt = torch.result_type(ma, mb)
        if rt not in NARROW or not AVOID_NARROW_PROMOTION:
            return a, b, b_fd, b_tw
        if ma.dtype != rt:
            a = self._cast_to(a, rt)
        if b is None:
            if float(torch.tensor(mb, dtype=torch.float64).to(rt)) != float(mb):
                b_fd = b_tw = "2"
        elif mb.dtype != rt:
            b = self._cast_to(b, rt)
            b_fd = b_tw = b.name
        return a, b, b_fd, b_tw

    def _cast_to(self, v: Var, dt: torch.dtype) -> Var:
        self.tags.add("narrow_promotion")
        lossy = v.dtype.is_floating_point and not v.exact
        return self.emit(f"fd.ops.cast({v.name}, dtype={FD_DT[dt]})", f"{v.name}.to({TWIN_DT[dt]})", v.axes,
                         exact=v.exact, bound=v.bound, perturb=("elem", EPS[dt]) if lossy else None, pool=False)

    def exact_bool(self) -> Var:
        """An exact bool tensor for where's condition (made from an exact value if needed)."""
        c = self.pick(lambda v: v.dtype is torch.bool and v.exact)
        if c is not None and self.rng.random() < 0.6:
            return c
        x = self.pick(lambda v: v.exact and v.dtype is not torch.bool)
        if x is None:
            if c is not None:
                return c
            return self.emit("fd.ops.full(shape=[], fill_value=True, dtype=DataType.Bool)",
                             "torch.full([], True, dtype=torch.bool, device=DEVICE)", (), exact=True, bound=1)
        op = self.rng.choice(("gt", "lt", "ge", "ne"))
        c0 = 0.0 if x.dtype.is_floating_point else 0
        self.tags.add("comparison")
        return self.emit(f"fd.ops.{op}({x.name}, {c0!r})", f"torch.{op}({x.name}, {c0!r})", x.axes, exact=True, bound=1)

    def op_where(self) -> None:
        cond = self.exact_bool()
        a = self.pick()
        if a is None:
            return
        rng = self.rng
        b = self.pick() if rng.random() < 0.7 else None
        self.tags.add("where")
        if b is None:
            value: Any = 0.0 if a.dtype.is_floating_point else (0 if a.dtype is not torch.bool else False)
            if rng.random() < 0.5 and a.dtype.is_floating_point:
                value = -1.5
            (c2, a2), axes = self.align([cond, a])
            self.emit(f"fd.ops.where({c2.name}, {a2.name}, {value!r})", f"torch.where({c2.name}, {a2.name}, {value!r})",
                      axes, exact=a.exact, bound=max(a.bound, abs(value)), perturb=None)
            return
        (c2, a2, b2), axes = self.align([cond, a, b])
        if a2.dtype != b2.dtype:
            self.tags.add("mixed_dtypes")
        # where selects, it computes nothing: the result is as exact as its operands
        self.emit(f"fd.ops.where({c2.name}, {a2.name}, {b2.name})", f"torch.where({c2.name}, {a2.name}, {b2.name})",
                  axes, exact=a2.exact and b2.exact, bound=max(a2.bound, b2.bound), perturb=None)

    def op_cast(self, x: Var | None = None, pool: bool = True) -> Var | None:
        x = x or self.pick()
        if x is None:
            return None
        rng = self.rng
        targets = [d for d in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool)
                   if d is not x.dtype]
        if x.dtype.is_floating_point and not x.exact:
            targets = [d for d in targets if d.is_floating_point]
        if x.bound > HALF_MAX:
            targets = [d for d in targets if d is not torch.float16]
        if x.bound > 2**30:
            targets = [d for d in targets if d not in INTS]
        dt = rng.choice(targets)
        exact = x.exact and not (x.bound >= 2**24 and dt.is_floating_point)
        if dt in NARROW and not x.exact:
            perturb: Any = ("elem", EPS[dt])
        else:
            perturb = None
        self.tags.add("cast")
        bound = 1.0 if dt is torch.bool else x.bound + 1
        return self.emit(f"fd.ops.cast({x.name}, dtype={FD_DT[dt]})", f"{x.name}.to({TWIN_DT[dt]})", x.axes,
                         exact=exact, bound=bound, perturb=perturb, pool=pool, squeezable=x.squeezable)

    def reduce_dims(self, x: Var, *, nonempty: bool) -> list[int] | None:
        """Dims to reduce: random, often all broadcast/expanded/size-1 axes."""
        rng = self.rng
        rank = len(x.axes)
        special = [p for p, (k, kind) in enumerate(x.axes) if kind != "i" or self.sizes[k] == 1]
        if special and rng.random() < 0.5:
            dims = sorted(set(special) | set(rng.sample(range(rank), rng.randint(0, rank))))
        else:
            dims = sorted(rng.sample(range(rank), rng.randint(1, rank)))
        if nonempty and any(self.shape(x.axes)[p] == 0 for p in dims):
            return None
        return dims

    def _reduce_tags(self, x: Var, dims: list[int]) -> None:
        for p in dims:
            k, kind = x.axes[p]
            if kind == "e":
                self.tags.add("reduce_expanded_axis")
            elif kind == "b":
                self.tags.add("reduce_broadcast_axis")
            elif self.sizes[k] == 1:
                self.tags.add("reduce_size1_axis")

    def op_reduction(self) -> None:
        rng = self.rng
        x = self.pick(lambda v: len(v.axes) > 0)
        if x is None:
            return
        op = rng.choice(("sum", "sum", "sum", "max", "min", "prod"))
        if x.dtype is torch.bool and op in ("max", "min"):
            op = "sum"
        if x.dtype in NARROW and rng.random() < 0.6 or (x.dtype is torch.bool and op == "prod"):
            x = self.as_float(x)
        dims = self.reduce_dims(x, nonempty=op in ("max", "min"))
        if dims is None:
            op = "sum"
            dims = self.reduce_dims(x, nonempty=False)
        shape = self.shape(x.axes)
        n = math.prod(shape[p] for p in dims)
        if op == "prod":
            if x.dtype.is_floating_point and n <= 64:
                t = self.emit(f"fd.ops.tanh({x.name})", f"torch.tanh({x.name})", x.axes, exact=False, bound=1,
                              pool=False, squeezable=x.squeezable)
                t = self.emit(f"fd.ops.mul({t.name}, 0.25)", f"torch.mul({t.name}, 0.25)", x.axes, exact=False,
                              bound=0.25, pool=False, squeezable=x.squeezable)
                x = self.emit(f"fd.ops.add({t.name}, 1.0)", f"torch.add({t.name}, 1.0)", x.axes, exact=False,
                              bound=1.25, pool=False, squeezable=x.squeezable)
            elif not (_is_int(x.dtype) and n <= 8 and x.bound <= 8):
                op = "sum"
        if op == "sum" and x.bound * max(n, 1) > 1e9:
            op = "max" if all(shape[p] for p in dims) else "sum"
        if op == "sum" and x.dtype is torch.float16 and x.bound * max(n, 1) > HALF_MAX:
            x = self.as_float(x)  # a half sum that could overflow
        keepdim = rng.random() < 0.4
        rank = len(x.axes)
        dims_src = [p - rank if rng.random() < 0.3 else p for p in dims]
        axes = reduced_axes(x, dims, keepdim)
        sq = frozenset(p for p, (k, kind) in enumerate(axes) if kind == "b") if keepdim else frozenset()
        dtype_arg = ""
        tw_dtype = ""
        if op in ("sum", "prod") and rng.random() < 0.15 and x.dtype is not torch.float32:
            dtype_arg, tw_dtype = ", dtype=DataType.Float", ", dtype=F"
        self._reduce_tags(x, dims)
        self.tags.add(f"reduce_{op}")
        if keepdim:
            self.tags.add("keepdim")
        out_dt = torch.float32 if dtype_arg else x.dtype
        is_float = out_dt.is_floating_point
        if op == "sum":
            twin = f"torch.sum({x.name}, dim={dims_src}, keepdim={keepdim}{tw_dtype})"
            bound = x.bound * max(n, 1)
            perturb = ("sum", x.name, tuple(dims), keepdim, n, EPS[out_dt] if out_dt in NARROW else 0.0) if is_float else None
            exact = not is_float and x.exact
        elif op == "prod":
            twin = x.name
            for p in sorted(dims, reverse=True):
                twin += f".prod({p}, keepdim={keepdim}{tw_dtype})"
                tw_dtype = ""
            bound = x.bound ** max(n, 1)
            perturb = ("prod", n, EPS[out_dt] if out_dt in NARROW else 0.0) if is_float else None
            exact = not is_float and x.exact
        else:
            twin = f"torch.{'amax' if op == 'max' else 'amin'}({x.name}, dim={dims_src}, keepdim={keepdim})"
            bound = x.bound
            perturb = None
            exact = x.exact
        r = self.emit(f"fd.ops.{op}({x.name}, dims={dims_src}, keepdim={keepdim}{dtype_arg})", twin, axes,
                      exact=exact, bound=bound, perturb=perturb, squeezable=sq)
        if rng.random() < 0.5:
            self.combine_back(x, r, dims, keepdim)

    def broadcast_back(self, r: Var, x: Var, dims: list[int], keepdim: bool) -> Var:
        """A reduction result `r` brought back to x's axes (broadcast_in_dim or broadcast)."""
        if keepdim:
            return r
        rank = len(x.axes)
        if self.rng.random() < 0.5:
            flags = [p in dims for p in range(rank)]
            axes = tuple((k, "b") if p in dims else ax for p, ax in enumerate(x.axes) for k in (ax[0],))
            twin = r.name + "".join(f".unsqueeze({p})" for p in range(rank) if p in dims)
            self.tags.add("broadcast")
            return self.emit(f"fd.ops.broadcast({r.name}, is_broadcast_dim={flags})", twin, axes,
                             exact=r.exact, bound=r.bound, perturb=None, pool=False,
                             squeezable=frozenset(dims))
        kept = [p for p in range(rank) if p not in dims]
        axes = tuple(x.axes[p] if p in kept else (x.axes[p][0], "e" if x.axes[p][1] != "b" else "b") for p in range(rank))
        if self.rng.random() < 0.4:
            shp_fd, shp_tw = f"{x.name}.shape()", f"list({x.name}.shape)"
            # a reduced axis of x read back at x's extent
            axes = tuple(x.axes[p] if p in kept else (x.axes[p][0], "e" if x.axes[p][1] != "b" else "b")
                         for p in range(rank))
        else:
            shp_fd, shp_tw = self.shape_src(axes)
        twin = r.name + "".join(f".unsqueeze({p})" for p in range(rank) if p in dims)
        self.tags.add("broadcast_in_dim")
        return self.emit(f"fd.ops.broadcast_in_dim({r.name}, shape={shp_fd}, broadcast_dims={kept})",
                         f"{twin}.expand({shp_tw})", axes, exact=r.exact, bound=r.bound, perturb=None, pool=False)

    def combine_back(self, x: Var, r: Var, dims: list[int], keepdim: bool) -> None:
        """Normalisation: a reduction broadcast back and combined with its input."""
        back = self.broadcast_back(r, x, dims, keepdim)
        comb = self.rng.choice(("sub", "sub", "mul", "add", "div"))
        if comb == "mul" and x.bound * back.bound > 1e6:
            comb = "sub"
        if comb == "sub" and (x.dtype is torch.bool or back.dtype is torch.bool):
            comb = "add"
        if comb == "div":
            back = self.positive(back)
        self.tags.add("normalize")
        exact = x.exact and back.exact and not (x.dtype.is_floating_point or back.dtype.is_floating_point)
        if comb == "div":
            exact = False
        bound = {"sub": x.bound + back.bound, "add": x.bound + back.bound, "mul": x.bound * back.bound, "div": x.bound}[comb]
        self.emit(f"fd.ops.{comb}({x.name}, {back.name})", f"torch.{comb}({x.name}, {back.name})",
                  self.merged(x.axes, back.axes), exact=exact, bound=bound)

    def float_input(self) -> Var | None:
        x = self.pick(lambda v: len(v.axes) > 0 and v.dtype is not torch.bool)
        if x is None:
            return None
        if x.dtype not in FLOATS or (x.dtype in NARROW and self.rng.random() < 0.7):
            x = self.as_float(x)
        return x

    def float_reduction_operand(self) -> tuple[Var, list[int]] | None:
        """A floating input and a nonempty set of its dims to reduce, or None."""
        x = self.float_input()
        dims = self.reduce_dims(x, nonempty=True) if x is not None else None
        return None if dims is None else (x, dims)

    def op_var_mean(self) -> None:
        rng = self.rng
        got = self.float_reduction_operand()
        if got is None:
            return
        x, dims = got
        shape = self.shape(x.axes)
        n = math.prod(shape[p] for p in dims)
        correction = rng.choice((0, 1))
        keepdim = rng.random() < 0.5
        axes = reduced_axes(x, dims, keepdim)
        sq = frozenset(p for p, (k, kind) in enumerate(axes) if kind == "b") if keepdim else frozenset()
        vn, mn = self.name(), self.name()
        fd = f"{vn}, {mn} = fd.ops.var_mean({x.name}, dims={dims}, correction={correction}, keepdim={keepdim})"
        tw = f"{vn}, {mn} = torch.var_mean({x.name}, dim={dims}, correction={correction}, keepdim={keepdim})"
        self.fd_lines.append(fd)
        self.used.add(x.name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(tw, self.meta)  # noqa: S102
        out_eps = EPS[x.dtype] if x.dtype in NARROW else 0.0
        self.twin_lines.append(TwinLine(tw, (vn, mn), ("var_mean", x.name, tuple(dims), keepdim, n, correction, out_eps)))
        self._reduce_tags(x, dims)
        self.tags.add(f"var_mean_c{correction}")
        var = Var(vn, axes, self.meta[vn].dtype, False, x.bound**2 * 2, squeezable=sq)
        mean = Var(mn, axes, self.meta[mn].dtype, False, x.bound, squeezable=sq)
        self.pool += [var, mean]
        if rng.random() < 0.5:  # layer-norm like: (x - mean) * rsqrt(var + eps)
            vb = self.broadcast_back(var, x, dims, keepdim)
            mb = self.broadcast_back(mean, x, dims, keepdim)
            d = self.emit(f"fd.ops.sub({x.name}, {mb.name})", f"torch.sub({x.name}, {mb.name})",
                          self.merged(x.axes, mb.axes), exact=False, bound=2 * x.bound, pool=False)
            ve = self.emit(f"fd.ops.add({vb.name}, 1e-05)", f"torch.add({vb.name}, 1e-05)", vb.axes, exact=False,
                           bound=vb.bound + 1, pool=False)
            rs = self.emit(f"fd.ops.rsqrt({ve.name})", f"torch.rsqrt({ve.name})", vb.axes, exact=False,
                           bound=1 / math.sqrt(1e-5), pool=False)
            self.tags.add("layer_norm")
            self.emit(f"fd.ops.mul({d.name}, {rs.name})", f"torch.mul({d.name}, {rs.name})",
                      self.merged(d.axes, rs.axes), exact=False, bound=d.bound / math.sqrt(1e-5))

    def op_softmax(self) -> None:
        got = self.float_reduction_operand()
        if got is None:
            return
        x, dims = got
        keepdim = self.rng.random() < 0.6
        rank = len(x.axes)
        axes = reduced_axes(x, dims, keepdim)
        n = math.prod(self.shape(x.axes)[p] for p in dims)
        self._reduce_tags(x, dims)
        self.tags.add("softmax")
        m = self.emit(f"fd.ops.max({x.name}, dims={dims}, keepdim={keepdim})",
                      f"torch.amax({x.name}, dim={dims}, keepdim={keepdim})", axes, exact=x.exact, bound=x.bound,
                      perturb=None, pool=False)
        mb = self.broadcast_back(m, x, dims, keepdim)
        z = self.emit(f"fd.ops.sub({x.name}, {mb.name})", f"torch.sub({x.name}, {mb.name})", x.axes, exact=False,
                      bound=2 * x.bound, pool=False)
        e = self.emit(f"fd.ops.exp({z.name})", f"torch.exp({z.name})", x.axes, exact=False, bound=1.0, pool=False)
        s = self.emit(f"fd.ops.sum({e.name}, dims={dims}, keepdim={keepdim})",
                      f"torch.sum({e.name}, dim={dims}, keepdim={keepdim})", axes, exact=False, bound=float(n),
                      perturb=("sum", e.name, tuple(dims), keepdim, n, EPS[e.dtype] if e.dtype in NARROW else 0.0),
                      pool=False)
        sb = self.broadcast_back(s, x, dims, keepdim)
        del rank
        self.emit(f"fd.ops.div({e.name}, {sb.name})", f"torch.div({e.name}, {sb.name})", x.axes, exact=False, bound=1.0)

    def op_broadcast(self) -> None:
        """A tensor broadcast to more axes (often to an extent > 1), then often reduced
        over the new axes right away."""
        x = self.pick()
        if x is None:
            return
        missing = [k for k in range(len(self.sizes)) if k not in {kk for kk, _ in x.axes}]
        if not missing:
            return self.op_reduction()
        x = self.canonical(x)
        add = self.rng.sample(missing, self.rng.randint(1, len(missing)))
        target = tuple(sorted(list(x.axes) + [(k, "i") for k in add]))
        b = self.to_target(x, target)
        self.pool.append(b)
        if self.rng.random() < 0.6:
            new = [p for p, (k, _) in enumerate(b.axes) if k in add]
            dims = sorted(set(self.rng.sample(new, self.rng.randint(1, len(new)))))
            shape = self.shape(b.axes)
            op = self.rng.choice(("sum", "max", "min")) if b.dtype is not torch.bool else "sum"
            if op != "sum" and any(shape[p] == 0 for p in dims):
                op = "sum"
            if b.dtype in NARROW and op == "sum":
                b = self.as_float(b)
            n = math.prod(shape[p] for p in dims)
            keepdim = self.rng.random() < 0.4
            axes = tuple((k, "b") if p in dims else b.axes[p] for p, (k, _) in enumerate(b.axes)
                         if keepdim or p not in dims)
            self._reduce_tags(b, dims)
            self.tags.add(f"reduce_{op}")
            fn = {"sum": "torch.sum", "max": "torch.amax", "min": "torch.amin"}[op]
            is_float = b.dtype.is_floating_point
            perturb = ("sum", b.name, tuple(dims), keepdim, n, 0.0) if op == "sum" and is_float else None
            r = self.emit(f"fd.ops.{op}({b.name}, dims={dims}, keepdim={keepdim})",
                          f"{fn}({b.name}, dim={dims}, keepdim={keepdim})", axes,
                          exact=b.exact and (op != "sum" or not is_float), bound=b.bound * (max(n, 1) if op == "sum" else 1),
                          perturb=perturb,
                          squeezable=frozenset(p for p, (k, kd) in enumerate(axes) if kd == "b") if keepdim else frozenset())
            if self.rng.random() < 0.5:
                self.combine_back(b, r, dims, keepdim)
        return None

    def op_permute(self) -> None:
        x = self.pick(lambda v: len(v.axes) >= 2)
        if x is None:
            return self.op_unary()
        perm = list(range(len(x.axes)))
        while perm == sorted(perm):
            self.rng.shuffle(perm)
        self.tags.add("permute")
        self.emit(f"fd.ops.permute({x.name}, dims={perm})", f"{x.name}.permute({perm})",
                  tuple(x.axes[p] for p in perm), exact=x.exact, bound=x.bound, perturb=None,
                  squeezable=frozenset(perm.index(p) for p in x.squeezable))
        return None

    def op_factory(self) -> None:
        rng = self.rng
        u = len(self.sizes)
        if rng.random() < 0.55:
            labels = sorted(rng.sample(range(u), rng.randint(0, u)))
            axes = tuple((k, "i" if self.sizes[k] != 1 else "b") for k in labels)
            dt = rng.choice((torch.float32, torch.float32, torch.int64, torch.int32, torch.bool, torch.bfloat16, torch.float16))
            fill = {torch.bool: rng.choice((True, False))}.get(dt)
            if fill is None:
                fill = rng.choice((0.0, 1.0, 0.5, -2.0)) if dt.is_floating_point else rng.choice((0, 1, 3, -2))
            shp_fd, shp_tw = self.shape_src(axes)
            self.tags.add("full")
            f = self.emit(f"fd.ops.full(shape={shp_fd}, fill_value={fill!r}, dtype={FD_DT[dt]})",
                          f"torch.full({shp_tw}, {fill!r}, dtype={TWIN_DT[dt]}, device=DEVICE)", axes,
                          exact=True, bound=abs(float(fill)),
                          squeezable=frozenset(p for p, (k, kd) in enumerate(axes) if kd == "b"))
        else:
            k = rng.randrange(u)
            if self.sizes[k] == 1:
                return self.op_unary() if self.pool else None
            axes = ((k, "i"),)
            n_fd, n_tw = self.shape_src(axes)
            n_fd, n_tw = n_fd[1:-1], n_tw[1:-1]
            self.tags.add("iota")
            if rng.random() < 0.5:
                start, step = rng.choice((0, 1, -3)), rng.choice((1, 2, -1))
                dt = rng.choice((torch.int64, torch.int32))
                f = self.emit(f"fd.ops.iota({n_fd}, {start}, {step}, dtype={FD_DT[dt]})",
                              f"torch.arange({n_tw}, dtype={TWIN_DT[dt]}, device=DEVICE) * {step} + {start}",
                              axes, exact=True, bound=abs(start) + abs(step) * self.sizes[k])
            else:
                start, step = rng.choice((0.0, 1.0, -1.5)), rng.choice((1.0, 0.25, -0.5))
                f = self.emit(f"fd.ops.iota({n_fd}, {start!r}, {step!r}, dtype=DataType.Float)",
                              f"torch.arange({n_tw}, dtype=F, device=DEVICE) * {step!r} + {start!r}",
                              axes, exact=True, bound=abs(start) + abs(step) * self.sizes[k])
        # a factory several ops read
        for _ in range(rng.randint(1, 2)):
            others = [v for v in self.pool if v is not f]
            y = self.pick(pool=others) if others else f
            self._combine(f, y)
        return None

    def _combine(self, a: Var, b: Var) -> None:
        """a op b for a valid op of their dtypes (add / mul / maximum / sub / logical_or)."""
        if a.dtype is torch.bool and b.dtype is torch.bool:
            op = "logical_or" if a.exact and b.exact else "bitwise_or"
        elif a.dtype is torch.bool or b.dtype is torch.bool:
            op = "add"
        else:
            op = self.rng.choice(("add", "mul", "maximum", "sub"))
        if op == "mul" and a.bound * b.bound > 1e6:
            op = "add"
        (a2, b2), axes = self.align([a, b])
        self._finish_binary(op, a2, b2, b2.name, b2.name, b2.bound, axes, False)

    def op_rng(self) -> None:
        rng = self.rng
        u = len(self.sizes)
        dt = rng.choice((torch.float32, torch.float32, torch.float16, torch.bfloat16))
        kind = rng.choice(("uniform", "normal", "like"))
        seed, offset = rng.randrange(1000), rng.choice((0, 4, 8))
        seed_fd = str(seed)
        if rng.random() < 0.2:
            seed_fd, value = self.scalar_input(torch.int64)
            self.input_exprs[-1] = repr(seed)  # the seed itself as the scalar input's value
            self.meta[seed_fd] = seed
        self.tags.add("rng")
        if kind == "like":
            x = self.pick(lambda v: v.dtype.is_floating_point)
            if x is not None:
                which = rng.choice(("rand_like", "randn_like"))
                check = RngCheck("uniform", 0.0, 1.0) if which == "rand_like" else RngCheck("normal", 0.0, 1.0)
                twin = f"torch.{which}({x.name})"
                v = self.emit(f"fd.ops.{which}({x.name}, rng_seed={seed_fd}, rng_offset={offset})", twin, x.axes,
                              exact=False, bound=1.0, rng=check)
                self.rng_vars.append(v)
                return
            kind = "uniform"
        labels = sorted(rng.sample(range(u), rng.randint(1, u)))
        axes = tuple((k, "i" if self.sizes[k] != 1 else "b") for k in labels)
        shp_fd, shp_tw = self.shape_src(axes)
        a, b = (rng.choice((0.0, -1.0)), rng.choice((1.0, 2.0))) if kind == "uniform" else (rng.choice((0.0, 1.0)), rng.choice((1.0, 0.5)))
        check = RngCheck(kind, a, b)
        twin = (f"torch.rand({shp_tw}, dtype={TWIN_DT[dt]}, device=DEVICE) * {b - a!r} + {a!r}" if kind == "uniform"
                else f"torch.randn({shp_tw}, dtype={TWIN_DT[dt]}, device=DEVICE) * {b!r} + {a!r}")
        v = self.emit(f"fd.ops.{kind}({a!r}, {b!r}, shape={shp_fd}, rng_seed={seed_fd}, rng_offset={offset}, dtype={FD_DT[dt]})",
                      twin, axes, exact=False, bound=1.0, rng=check)
        if rng.random() < 0.4:  # an affine map of the random values, in the same kernel
            c, d = rng.choice((2.0, 0.5)), rng.choice((1.0, -3.0))
            lo, hi = (a * c + d, b * c + d) if kind == "uniform" else (a * c + d, b * c)
            v = self.emit(f"fd.ops.add(fd.ops.mul({v.name}, {c!r}), {d!r})", f"{v.name} * {c!r} + {d!r}", axes,
                          exact=False, bound=1.0, rng=RngCheck(kind, lo, hi))
        self.rng_vars.append(v)

    def op_segment_set(self) -> None:
        x = self.pick()
        if x is None:
            return
        self.tags.add("segment_set")
        self.emit(f"fd.ops.segment_set({x.name})", x.name, x.axes, exact=x.exact, bound=x.bound, perturb=None,
                  squeezable=x.squeezable)

    def op_squeeze(self) -> None:
        x = self.pick(lambda v: bool(v.squeezable))
        if x is None:
            return self.op_unary()
        p = self.rng.choice(sorted(x.squeezable))
        axes = x.axes[:p] + x.axes[p + 1:]
        sq = frozenset(q if q < p else q - 1 for q in x.squeezable if q != p)
        self.tags.add("squeeze")
        self.emit(f"fd.ops.squeeze({x.name}, dims=[{p}])", f"{x.name}.squeeze({p})", axes, exact=x.exact,
                  bound=x.bound, perturb=None, squeezable=sq)
        return None

    def op_ternary(self) -> None:
        """clamp(x, lo, hi) with constant bounds (a selection), or lerp(a, b, w) of floats."""
        rng = self.rng
        x = self.pick(lambda v: v.dtype is not torch.bool)
        if x is None:
            return
        self.tags.add("ternary")
        if rng.random() < 0.6 or not x.dtype.is_floating_point:
            lo, hi = (-1.5, 2.0) if x.dtype.is_floating_point else (-3, 4)
            self.emit(f"fd.ops.clamp({x.name}, {lo!r}, {hi!r})", f"torch.clamp({x.name}, {lo!r}, {hi!r})", x.axes,
                      exact=x.exact, bound=max(abs(lo), abs(hi)), perturb=None)
            return
        y = self.pick(lambda v: v.dtype is x.dtype and v is not x)
        if y is None:
            return
        w = rng.choice((0.25, 0.5, 0.75))
        (a, b), axes = self.align([x, y])
        # (torch.lerp wants one dtype: the truth runs widen some operands to float64)
        self.emit(f"fd.ops.lerp({a.name}, {b.name}, {w!r})", f"torch.lerp({a.name}, {b.name}.to({a.name}.dtype), {w!r})", axes,
                  exact=False, bound=a.bound + b.bound)

    def op_reshape(self) -> None:
        """Flatten and reshape back (a view in torch; a ReshapeOp in fuser)."""
        x = self.pick(lambda v: len(v.axes) >= 2 and all(kind == "i" for _, kind in v.axes))
        if x is None:
            return self.op_unary()
        shape = list(self.shape(x.axes))
        self.tags.add("reshape")
        flat = self.emit(f"fd.ops.reshape({x.name}, new_shape=[{math.prod(shape)}])",
                         f"{x.name}.reshape([{math.prod(shape)}])", ((x.axes[0][0], "f"),), exact=x.exact,
                         bound=x.bound, perturb=None, pool=False, shape=(math.prod(shape),))
        self.emit(f"fd.ops.reshape({flat.name}, new_shape={shape})", f"{flat.name}.reshape({shape})", x.axes,
                  exact=x.exact, bound=x.bound, perturb=None)
        return None

    def op_resize(self) -> None:
        """pad + slice, or cat + slice, of the last axis, back to the operand's shape."""
        rng = self.rng
        x = self.pick(lambda v: len(v.axes) >= 1 and v.axes[-1][1] == "i" and v.dtype.is_floating_point)
        if x is None:
            return self.op_unary()
        shape = list(self.shape(x.axes))
        rank, n = len(shape), shape[-1]
        self.tags.add("resize")
        padded = tuple(x.axes[:-1]) + ((x.axes[-1][0], "f"),)
        if rng.random() < 0.5:
            lo, hi, value = rng.randint(0, 2), rng.randint(0, 2), rng.choice((0.0, 1.5))
            y = self.emit(f"fd.ops.pad({x.name}, [{lo}, {hi}], {value!r})",
                          f"torch.nn.functional.pad({x.name}, [{lo}, {hi}], value={value!r})", padded,
                          exact=x.exact, bound=max(x.bound, value), perturb=None, pool=False,
                          shape=tuple(shape[:-1]) + (n + lo + hi,))
            start = lo
        else:
            z = self.emit(f"fd.ops.neg({x.name})", f"torch.neg({x.name})", x.axes, exact=x.exact, bound=x.bound,
                          perturb=None, pool=False)
            y = self.emit(f"fd.ops.cat([{x.name}, {z.name}], dim={rank - 1})", f"torch.cat([{x.name}, {z.name}], dim={rank - 1})",
                          padded, exact=x.exact, bound=x.bound, perturb=None, pool=False,
                          shape=tuple(shape[:-1]) + (2 * n,))
            start = n
        starts, ends = [0] * (rank - 1) + [start], shape[:-1] + [start + n]
        idx = ", ".join([":"] * (rank - 1) + [f"{start}:{start + n}"])
        self.emit(f"fd.ops.slice({y.name}, start_indices={starts}, end_indices={ends})", f"{y.name}[{idx}]", x.axes,
                  exact=x.exact, bound=x.bound, perturb=None)
        return None

    # --- outputs ------------------------------------------------------------------------------
    def outputs(self) -> tuple[list[str], dict[int, RngCheck]]:
        rng = self.rng
        computed = [v for v in self.pool if not v.is_input]
        if not computed:
            x = self.pick()
            if x is None:
                self.emit("fd.ops.full(shape=[], fill_value=1.5, dtype=DataType.Float)",
                          "torch.full([], 1.5, dtype=F, device=DEVICE)", (), exact=True, bound=1.5)
            elif x.dtype is torch.bool:
                self.emit(f"fd.ops.logical_not({x.name})", f"torch.logical_not({x.name})", x.axes, exact=x.exact, bound=1)
            else:
                self.emit(f"fd.ops.neg({x.name})", f"torch.neg({x.name})", x.axes, exact=x.exact, bound=x.bound,
                          perturb=None)
            computed = [v for v in self.pool if not v.is_input]
        # the sinks (values no line reads), newest first, then maybe one more value
        sinks = [v for v in reversed(computed) if v.name not in self.used]
        chosen = sinks[:1] + rng.sample(sinks[1:], min(max(len(sinks) - 1, 0), rng.choice((1, 2, 2))))
        if not chosen:
            chosen = [computed[-1]]
        if len(chosen) < 3 and rng.random() < 0.2:
            v = self.pick(pool=computed)
            if v not in chosen:
                chosen.append(v)
        if rng.random() < 0.03:
            v = self.pick(pool=[v for v in self.inputs if v not in chosen])
            if v is not None:
                chosen.append(v)
                self.tags.add("input_as_output")
        rng_outs = self.rng_vars[-2:]
        chosen = chosen[:max(1, 3 - len(rng_outs))]
        names = []
        for v in chosen:
            if not v.is_input and v.dtype is torch.float32 and rng.random() < 0.3:
                v = self.op_cast_narrow(v)
            names.append(v.name)
        checks = {}
        for v in rng_outs:
            checks[len(names)] = v.rng
            names.append(v.name)
        for n in names:
            self.fd_lines.append(f"fd.add_output({n})")
        return names, checks

    def op_cast_narrow(self, v: Var) -> Var:
        dt = torch.bfloat16 if v.bound > HALF_MAX else self.rng.choice(NARROW)
        self.tags.add("narrow_output")
        return self.emit(f"fd.ops.cast({v.name}, dtype={FD_DT[dt]})", f"{v.name}.to({TWIN_DT[dt]})", v.axes,
                         exact=v.exact, bound=v.bound, perturb=None if v.exact else ("elem", EPS[dt]), pool=False)

    # --- a whole case ------------------------------------------------------------------------
    def _snapshot(self) -> tuple:
        return (len(self.fd_lines), len(self.twin_lines), len(self.twin_params), len(self.input_exprs),
                len(self.pool), len(self.inputs), len(self.rng_vars), set(self.tags), set(self.used), self.n)

    def _restore(self, snap: tuple) -> None:
        nf, nt, np_, ni, npool, ninp, nrng, tags, used, n = snap
        del self.fd_lines[nf:], self.twin_lines[nt:], self.twin_params[np_:], self.input_exprs[ni:]
        del self.pool[npool:], self.inputs[ninp:], self.rng_vars[nrng:]
        self.tags, self.used, self.n = tags, used, n

    OPS = {
        "op_unary": 10, "op_binary": 18, "op_cast": 8, "op_where": 6, "op_broadcast": 7, "op_reduction": 14,
        "op_var_mean": 5, "op_softmax": 3, "op_permute": 4, "op_factory": 5, "op_rng": 2, "op_segment_set": 1,
        "op_squeeze": 2, "op_ternary": 3, "op_reshape": 1, "op_resize": 1,
    }

    def build(self) -> tuple[list[str], dict[int, RngCheck]]:
        rng = self.rng
        n_inputs = 0 if rng.random() < 0.04 else rng.choice((1, 1, 2, 2, 2, 3))
        for _ in range(n_inputs):
            self.add_input()
        if not n_inputs:
            self.tags.add("no_tensor_inputs")
            snap = self._snapshot()
            try:
                self.op_factory()
            except _Reject:
                self._restore(snap)
        names, weights = zip(*self.OPS.items())
        for _ in range(rng.randint(1, 8)):
            snap = self._snapshot()
            try:
                getattr(self, rng.choices(names, weights)[0])()
            except _Reject:
                self._restore(snap)
        return self.outputs()


def _torch_name(dt: torch.dtype) -> str:
    return str(dt)


def generate(seed: int, index: int) -> Case:
    """Case `index` of the stream `seed` (a pure function of both)."""
    g = _Gen(random.Random(seed * 1_000_003 + index))
    outputs, checks = g.build()
    return Case(seed, index, g.sizes, g.fd_lines, g.twin_params, g.twin_lines, outputs, g.input_exprs, checks,
                g.tags, pass_device=not g.inputs)


# --- running a case ----------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    status: str  # "ok", "mismatch", "crash"
    message: str = ""
    device: str = "cpu"

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def repro(self) -> str:
        return self.case.repro(self.device, f"{self.status}: {self.message}")


def _namespace(device: str) -> dict[str, Any]:
    from fuser import DataType, FusionDefinition

    return {"torch": torch, "DataType": DataType, "FusionDefinition": FusionDefinition, "DEVICE": device,
            "make_input": make_input, "F": torch.float32}


def build_inputs(case: Case, device: str) -> list[Any]:
    ns = _namespace(device)
    exec(case.inputs_source(), ns)  # noqa: S102
    return ns["inputs"]


def run_twin(case: Case, inputs: Sequence[Any], device: str, ftype: torch.dtype, noise_seed: int | None = None) -> list[Any]:
    """The twin line by line with F = ftype; with noise_seed, every inexact value is
    perturbed by about one rounding of the type fuser computes it in (see the docstring)."""
    ns: dict[str, Any] = {"torch": torch, "F": ftype, "DEVICE": device}
    ns.update(zip(case.twin_params, inputs))
    gen = torch.Generator().manual_seed(noise_seed) if noise_seed is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for line in case.twin_lines:
            exec(line.text, ns)  # noqa: S102
            if gen is not None and line.perturb is not None:
                _perturb(line, ns, gen)
    return [ns[n] for n in case.outputs]


def _jitter(x: torch.Tensor, mag: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    x = x.double()
    mag = torch.broadcast_to(mag.double(), x.shape)
    mag = torch.where(torch.isfinite(mag), mag, torch.zeros((), dtype=torch.float64, device=x.device))
    u = torch.rand(x.shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(x.shape, generator=gen) < 0.5, -1.0, 1.0).double()
    return x + mag * ((0.5 + 0.5 * u) * sign).to(x.device)


def _perturb(line: TwinLine, ns: dict[str, Any], gen: torch.Generator) -> None:
    kind = line.perturb[0]
    if kind == "elem":
        eps = line.perturb[1]
        for n in line.names:
            x = ns[n]
            ns[n] = _jitter(x, eps * x.double().abs(), gen)
    elif kind == "sum":
        _, src, dims, keepdim, n, out_eps = line.perturb
        (name,) = line.names
        x = ns[name]
        s = torch.sum(ns[src].double().abs(), dim=list(dims), keepdim=keepdim) if dims else ns[src].double().abs()
        ns[name] = _jitter(x, EPS32 * _clog(n) * s + out_eps * x.double().abs(), gen)
    elif kind == "prod":
        _, n, out_eps = line.perturb
        (name,) = line.names
        x = ns[name]
        ns[name] = _jitter(x, (EPS32 * (n + 2) + out_eps) * x.double().abs(), gen)
    elif kind == "var_mean":
        _, src, dims, keepdim, n, correction, out_eps = line.perturb
        vn, mn = line.names
        var, mean = ns[vn].double(), ns[mn].double()
        sabs = torch.sum(ns[src].double().abs(), dim=list(dims), keepdim=keepdim) / max(n, 1)
        c = EPS32 * _clog(n)
        mean_mag = c * sabs + out_eps * mean.abs()
        var_mag = c * (var.abs() + 2 * mean.abs() * var.abs().sqrt() + sabs * sabs * 1e-3) + out_eps * var.abs()
        ns[mn] = _jitter(mean, mean_mag, gen)
        ns[vn] = _jitter(var, var_mag, gen)
    else:  # pragma: no cover - generator bug
        raise AssertionError(f"unknown perturbation {line.perturb!r}")


def _fmt_index(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s if s else 0)
        flat //= s if s else 1
    return tuple(reversed(idx))


def _wrong_kind(what: str, got: Any, want: torch.Tensor) -> str | None:
    """What is wrong with `got` before its values are looked at: not a tensor, or another
    dtype or shape than torch's."""
    if not isinstance(got, torch.Tensor):
        return f"{what}: fuser returned {type(got).__name__}, torch a tensor"
    if got.dtype != want.dtype:
        return f"{what}: dtype {got.dtype}, torch gives {want.dtype}"
    if tuple(got.shape) != tuple(want.shape):
        return f"{what}: shape {tuple(got.shape)}, torch gives {tuple(want.shape)}"
    return None


def _noise(run: torch.Tensor, t64: torch.Tensor) -> torch.Tensor:
    """How far a perturbed run lands from the truth, elementwise: 0 where both are the same
    NaN or infinity, infinite where only one is NaN (a perturbation one rounding unit wide
    reached a NaN: the value is too ill-conditioned to judge; seed 9323 case 40, a variance
    of values rounded at a product's 0.06 ulp, whose perturbed runs took rsqrt of < 0)."""
    same = (run == t64) | (torch.isnan(run) & torch.isnan(t64))
    d = (run - t64).abs()
    return torch.where(same, torch.zeros((), dtype=torch.float64), d.nan_to_num(math.inf))


def compare_output(k: int, name: str, got: Any, want: torch.Tensor, truth: torch.Tensor,
                   noise: list[torch.Tensor]) -> str | None:
    """None if fuser's output `got` matches; else what is wrong."""
    from fuser.runtime.tolerance import tolerances

    what = f"output {k} ({name})"
    wrong = _wrong_kind(what, got, want)
    if wrong:
        return wrong
    g = got.detach().cpu()
    t = truth.detach().cpu()
    if not g.dtype.is_floating_point:
        t = t.to(g.dtype)
        if torch.equal(g, t):
            return None
        bad = (g != t).reshape(-1)
        i = int(bad.nonzero()[0])
        return (f"{what} [{g.dtype}, {tuple(g.shape)}]: {int(bad.sum())} of {g.numel()} elements differ; first at "
                f"{_fmt_index(i, g.shape)}: fuser {g.reshape(-1)[i].item()}, torch {t.reshape(-1)[i].item()}")
    g64, t64 = g.double(), t.double()
    rtol, atol = tolerances(g.dtype)
    if noise:
        nz = torch.stack([_noise(p.detach().cpu().double(), t64) for p in noise]).amax(0)
    else:
        nz = torch.zeros_like(t64)
    nz_max = nz.max().item() if nz.numel() else 0.0
    tol = atol + rtol * t64.abs() + NOISE_K * nz + nz_max
    gn, tn = torch.isnan(g64), torch.isnan(t64)
    both_inf = torch.isinf(g64) & torch.isinf(t64) & (g64 == t64)
    close = (g64 - t64).abs() <= tol
    ok = (gn & tn) | both_inf | (close & ~gn & ~tn)
    if bool(ok.all()):
        return None
    bad = ~ok
    err = torch.where(bad, (g64 - t64).abs().nan_to_num(math.inf), torch.zeros((), dtype=torch.float64)).reshape(-1)
    i = int(err.argmax())
    return (f"{what} [{g.dtype}, {tuple(g.shape)}]: {int(bad.sum())} of {g.numel()} elements out of tolerance; "
            f"worst at {_fmt_index(i, g.shape)}: fuser {g64.reshape(-1)[i].item():.7g}, torch {t64.reshape(-1)[i].item():.7g} "
            f"(tolerance {tol.reshape(-1)[i].item():.3g})")


def check_rng(k: int, name: str, got: Any, again: Any, want: torch.Tensor, check: RngCheck) -> str | None:
    what = f"output {k} ({name}, {check.kind} random)"
    wrong = _wrong_kind(what, got, want)
    if wrong:
        return wrong
    if not torch.equal(got, again):
        return f"{what}: two executes with the same rng_seed/rng_offset differ"
    x = got.detach().cpu().double().reshape(-1)
    if not x.numel():
        return None
    if not bool(torch.isfinite(x).all()):
        return f"{what}: non-finite values"
    if check.kind == "uniform":
        lo, hi = min(check.lo, check.hi), max(check.lo, check.hi)
        if x.min().item() < lo or x.max().item() > hi:
            return f"{what}: values in [{x.min().item():g}, {x.max().item():g}], expected within [{lo:g}, {hi:g}]"
        mid, width = (lo + hi) / 2, hi - lo
        if x.numel() >= 2000 and abs(x.mean().item() - mid) > 0.05 * width:
            return f"{what}: mean {x.mean().item():g}, expected about {mid:g}"
    else:
        mean, std = check.lo, abs(check.hi)
        if (x - mean).abs().max().item() > 10 * std:
            return f"{what}: a value {x[(x - mean).abs().argmax()].item():g} is > 10 std from the mean {mean:g}"
        if x.numel() >= 2000:
            if abs(x.mean().item() - mean) > 0.1 * std or not 0.8 * std < x.std().item() < 1.2 * std:
                return f"{what}: mean {x.mean().item():g} std {x.std().item():g}, expected {mean:g} and {std:g}"
    if x.numel() >= 64:
        head = x[:4096]
        # half / bfloat16 have few values in a unit interval (bfloat16: 128 per octave)
        need = head.numel() // 8 if got.dtype is torch.float32 else min(head.numel() // 16, 32)
        if torch.unique(head).numel() < need:
            return f"{what}: only {torch.unique(head).numel()} distinct values among the first {head.numel()}"
    return None


def _poison_cuda_allocator(device: str) -> None:
    """Fill blocks the caching allocator will hand out next with 0xFF bytes (NaN for every
    float type), so an output element a kernel never writes cannot pass by luck."""
    blocks = [torch.empty(n, dtype=torch.uint8, device=device).fill_(255) for n in [1 << 18] * 8 + [1 << 22] * 4]
    del blocks


def run_case(case: Case, device: str) -> Result:
    """Execute `case` with fuser on `device` and compare with the twin (see the docstring)."""
    cuda = device.startswith("cuda")
    ns = _namespace(device)
    try:
        exec(case.fd_source(), ns)  # noqa: S102
        fd = ns["fd"]
    except Exception as err:  # noqa: BLE001
        return Result(case, "crash", f"defining the fusion: {_err(err)}", device)
    try:
        inputs = build_inputs(case, device)
    except Exception as err:  # noqa: BLE001
        return Result(case, "crash", f"[generator] building inputs: {_err(err)}", device)
    kwargs = {"device": device} if case.pass_device else {}
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            if cuda:
                _poison_cuda_allocator(device)
            outs = fd.execute(inputs, **kwargs)
            if cuda:
                torch.cuda.synchronize()
                _poison_cuda_allocator(device)
            again = fd.execute(inputs, **kwargs)
            if cuda:
                torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001
        return Result(case, "crash", f"fd.execute: {_err(err)}", device)
    try:
        want = run_twin(case, inputs, device, torch.float32)
        truth = run_twin(case, inputs, device, torch.float64)
        noise = [run_twin(case, inputs, device, torch.float64, noise_seed=s) for s in (1, 2)]
    except Exception as err:  # noqa: BLE001
        return Result(case, "crash", f"[generator] the torch twin failed: {_err(err)}", device)
    if not isinstance(outs, (list, tuple)) or len(outs) != len(case.outputs):
        n = len(outs) if isinstance(outs, (list, tuple)) else type(outs).__name__
        return Result(case, "mismatch", f"fd.execute returned {n} outputs, torch {len(case.outputs)}", device)
    problems = []
    for k, name in enumerate(case.outputs):
        try:
            if k in case.rng_checks:
                p = check_rng(k, name, outs[k], again[k], want[k], case.rng_checks[k])
            else:
                p = compare_output(k, name, outs[k], want[k], truth[k], [n[k] for n in noise])
                if p is None:
                    p = compare_output(k, name, again[k], want[k], truth[k], [n[k] for n in noise])
                    p = p and f"second execute (cached): {p}"
        except Exception as err:  # noqa: BLE001
            return Result(case, "crash", f"[generator] comparing output {k}: {_err(err)}", device)
        if p:
            problems.append(p)
    if problems:
        return Result(case, "mismatch", "; ".join(problems), device)
    return Result(case, "ok", "", device)


def _err(err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[0] if msg else ''}{where}"


# --- many cases ---------------------------------------------------------------------------------------


@dataclass
class Summary:
    device: str
    seed: int
    results: list[Result]
    seconds: float
    aborted: str = ""

    @property
    def mismatches(self) -> list[Result]:
        return [r for r in self.results if r.status == "mismatch"]

    @property
    def crashes(self) -> list[Result]:
        return [r for r in self.results if r.status == "crash"]

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    def line(self) -> str:
        label = "gpu" if self.device.startswith("cuda") else "cpu"
        return f"{label} fuzz: {len(self.results)} cases, {len(self.mismatches)} mismatches, {len(self.crashes)} crashes"

    def details(self, show: int = 3) -> str:
        out = [f"seed {self.seed}, device {self.device}, {self.seconds:.1f} s"]
        if self.aborted:
            out.append(f"stopped early: {self.aborted}")
        fails = self.failures
        if fails:
            tags: dict[str, int] = {}
            for r in fails:
                for t in r.case.tags:
                    tags[t] = tags.get(t, 0) + 1
            common = ", ".join(f"{t} {n}" for t, n in sorted(tags.items(), key=lambda kv: -kv[1])[:12])
            out.append(f"tags of failing cases: {common}")
            for r in fails:
                out.append(f"  [{r.status}] case {r.case.id}: {r.message}")
            for r in fails[:show]:
                out.append("-" * 100 + "\n" + r.repro())
        return "\n".join(out)


def run_cases(n: int, seed: int, device: str, *, start: int = 0, progress: bool = False) -> Summary:
    t0 = time.time()
    results = []
    aborted = ""
    for index in range(start, start + n):
        try:
            case = generate(seed, index)
        except Exception as err:  # noqa: BLE001
            case = Case(seed, index, [], [], [], [], [], [], {}, {"generator_error"})
            tb = "".join(traceback.format_exception(err)[-4:])
            results.append(Result(case, "crash", f"[generator] generate({seed}, {index}): {_err(err)}\n{tb}", device))
            continue
        r = run_case(case, device)
        results.append(r)
        if progress and (index - start + 1) % 100 == 0:
            bad = sum(x.failed for x in results)
            print(f"  {index - start + 1}/{n} cases, {bad} failures, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        if r.status == "crash" and device.startswith("cuda") and not _cuda_alive():
            aborted = f"the CUDA context is unusable after case {case.id} ({r.message})"
            break
    return Summary(device, seed, results, time.time() - t0, aborted)


def _cuda_alive() -> bool:
    try:
        torch.zeros(1, device="cuda").add_(1).item()
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


def write_report(summary: Summary, path: str | None) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(summary.line() + "\n")


DEFAULT_SEED = 20_240_613


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="differential fuzzing of fuser against eager PyTorch")
    p.add_argument("--cases", type=int, default=int(os.environ.get("FUSER_FUZZ_CASES", "300")))
    p.add_argument("--seed", type=int, default=int(os.environ.get("FUSER_FUZZ_SEED", str(DEFAULT_SEED))))
    p.add_argument("--start", type=int, default=0, help="index of the first case")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--report", default=os.environ.get("FUSER_FUZZ_REPORT"), help="append the summary line here")
    p.add_argument("--show", type=int, default=3, help="print this many repros of failures")
    p.add_argument("--print-repro", action="store_true", help="print the cases' repros instead of running them")
    p.add_argument("--progress", action="store_true")
    args = p.parse_args(argv)
    if args.print_repro:
        for index in range(args.start, args.start + args.cases):
            print(generate(args.seed, index).repro(args.device))
        return 0
    summary = run_cases(args.cases, args.seed, args.device, start=args.start, progress=args.progress)
    print(summary.details(args.show))
    print(summary.line(), flush=True)
    write_report(summary, args.report)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
