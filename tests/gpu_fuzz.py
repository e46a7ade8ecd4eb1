"""A differential fuzzer: random fusions through the public frontend against eager PyTorch.

Each case is a pure function of (seed, index): `generate(seed, index)` draws, with
`random.Random`, a fusion program (`fd.define_tensor ... fd.add_output`) as text, the same
computation written as a plain eager-PyTorch function (the "twin", one line per fd line),
and the code that builds the inputs (contiguous, permuted, sliced or expanded tensors and
scalars). `run_case(case, device)` execs the fd text (so a repro is exactly what ran),
executes it twice, runs the twin on the same inputs and compares: dtypes and shapes
exactly, values with tolerances (NaN positions equal). A failure carries `case.repro()`,
a self-contained script: the fd program, the inputs, the twin and a comparison.

Run as a script (the summary line comes last; --help lists every flag)::

    python -m tests.gpu_fuzz --cases 2000 --seed 7 --device cuda
    python -m tests.gpu_fuzz --cases 500 --seed 7 --device cuda --family index   # one family
    python tests/gpu_fuzz.py --cases 1 --start 41 --seed 7 --print-repro   # one case's repro

The summary line: ``gpu fuzz: N cases, M mismatches, K crashes, F fallbacks, G generator
failures; X of E elements excluded; segments: A kernels, R reference, P expected
fallbacks``. Mismatches, crashes, fallbacks and generator failures fail a run.

Families. Each case comes from one generator family (`FAMILY_WEIGHTS` is the default mix;
`--family` runs one): classic (the original mix of 1-8 elementwise, reduction,
normalisation, broadcast, cast, factory, RNG and view ops on a universe of <= 1e5
elements); reshape (splits and merges of the innermost and other axes, reshapes of
broadcast / expanded tensors, flatten round trips, feeding reductions and persistent
ops); resize (slices of width 1 and odd offsets, steps, pads (negative: crops), cats of
2-4 tensors on any axis, whose values reach the outputs); layout (permuted, sliced with
odd offsets and row strides, and expanded (stride 0, innermost and several dims) inputs
through views into reductions and persistent kernels); reduce_view (reductions, var_mean
and softmax right after reshapes and slices); index (take_along_axis, gather,
index_select, select and scatter with index inputs (contiguous, permuted, stride 0) and
computed indices (iota arithmetic, broadcasts), then ops that notice a wrong broadcast
flag); rotary (GPT-J interleaved and NeoX / partial rotary embeddings as Thunder emits
them, random sizes); dropout (random numbers feeding a mask, where and a scale: the twin
reads fuser's random outputs, so what follows them is compared exactly); big (inputs of
1e5 .. 4M elements, odd extents next to large ones); norm_bwd (normalisation backward:
the sum along each row of dy·w·x̂ broadcast back into the row's gradient, beside sums
across the rows, on up to 1M elements: the inner-outer persistent scheduler's fusions,
which the other families almost never make). Every case is tagged
``family_<name>``; `Summary.details()` counts the families run and those failing.

How values are compared. The twin is written with `F` for float32 (`x.to(F)`, `dtype=F`);
it runs once with F = float32 (eager PyTorch as written: the expected dtypes and shapes)
and once with F = float64 (the truth: float32 inputs are widened at its top, and half /
bfloat16 values are widened where the program casts them to Float, so only the program's
own narrow roundings remain, each the correctly rounded value of its float64 result, not
PyTorch's narrow kernel on that device: `_round_truth`). A float element must lie within
``atol + rtol * |truth| + 4 * noise`` of the truth at that element, with (rtol, atol) from
`fuser.runtime.tolerance` for the output dtype and `noise` measured per element, not
guessed: the twin runs NOISE_RUNS more times in float64 with every inexact value perturbed
by about the error of the arithmetic fuser computes it with (float32 math: 2**-22
relative; a sum: the float32 summation error bound, eps * log2(n) * sum|x|; a half /
bfloat16 result is rounded again from its perturbed unrounded value, so it differs from
the truth's only where it lies within its error bound of a rounding boundary, and there
run 1 takes the upper neighbour, run 2 the lower and run 3 a random one, so that both
sides are explored whichever the truth took: `_round_near`), and noise is how far those runs,
and eager float32 itself, land from the truth at that element. Cancellations, softmax
denominators and the like thus get the room their conditioning needs, element by
element, and no more; an element where a perturbed run reaches NaN or infinity and the
truth does not cannot be judged and is excluded by itself (counted in the summary); an
output with fewer than MIN_JUDGED of its elements judged is the generator's failure.
Integer and bool outputs must be equal. RNG outputs (uniform / normal with a fixed
rng_seed) are checked for dtype, shape, range, rough moments, distinct values and
determinism (two executes agree bitwise).

Kernels. On CUDA every segment whose scheduler generates kernels (pointwise, reduction,
the persistent ones, transpose, resize, greedy) must have run its generated kernel
(`fd.last_segments()`): a fallback to the reference executor fails the case unless its
NotLowerable reason is one every case accepts (EXPECTED_FALLBACKS: segments with no
elements) or the case's own `allowed_fallbacks`; expr_eval and no_op segments run on the
reference by design. A CUDA run without pycuda or with FUSER_DISABLE=codegen is refused
(GpuRunRefused, exit status 2): it would compare the reference executor with eager.
FUSER_TEST_ALLOW_REFERENCE has no effect here.

What the generator avoids (so that every difference is a bug): division by anything but
|y| + 1, integer division, exp of values above 12 (10 in half), half values above 6e4,
prod over more than 64 elements (of values in [0.75, 1.25], or 8 small integers), max/min
and var_mean over empty dims, any discontinuity (comparison, logical op, float->int/bool
cast, round, floor) of a value that is not computed exactly by every implementation
("exact" values: inputs and what neg/abs/relu/max/min/where/casts/permutes/broadcasts,
views (reshape, slice, pad, cat), index ops and integer math make of them; random values
the twin takes from fuser), duplicate indices along a scatter's axis, a layer norm
(x - mean) * rsqrt(var + eps) of large values over axes along which they are constant
(broadcast, expanded, a full, and what reshapes, slices and lookups make of them, tracked
per axis by `_Gen.factors`): their variance is 0, and one rounding away it is below -eps,
so x is scaled by a power of two first (`_Gen.norm_scale`), and (while
AVOID_NARROW_PROMOTION) operands that a half / bfloat16 result type would round in
PyTorch but not in fuser (a dropout mask compares a half / bfloat16 random value with a
p that type holds exactly). Classic tensors stay under ~1e5 elements and rank 4, the
families' under 4e5 and rank 5 (big: 4M); classic programs have 1-8 drawn ops (about 13
lines) and 1-3 outputs.

A failure's repro names the case (`--seed S --start I --cases 1` runs it again; add
`--family F` for a case of a one-family run) and its message; `Summary.details()` also
counts the tags (op families, input layouts) of the failing cases, which usually points
at the culprit.
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
import weakref
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


def make_index(shape, n, seed, dtype=torch.int64, device="cpu", unique_dim=None):
    """A reproducible tensor of positions in [0, n); with `unique_dim`, distinct along that
    dim (the first shape[unique_dim] of a random permutation of range(n) per fiber)."""
    g = torch.Generator().manual_seed(seed)
    if unique_dim is None:
        x = torch.randint(0, max(n, 1), shape, generator=g)
    else:
        full = list(shape)
        full[unique_dim] = n
        x = torch.rand(full, generator=g).argsort(dim=unique_dim).narrow(unique_dim, 0, shape[unique_dim])
    return x.to(dtype).contiguous().to(device)


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
#: the generator's families (--family) and their share of the mixed stream, in percent
#: (classic: the original op mix; the others: see the `fam_*` methods of _Gen). A new
#: family takes its share from the end of classic's interval, so that every other case of
#: a seed's mix stays what it was
FAMILY_WEIGHTS = {"classic": 33, "norm_bwd": 5, "reshape": 10, "resize": 10, "layout": 8, "reduce_view": 10,
                  "index": 10, "rotary": 4, "dropout": 5, "big": 5}
FAMILIES = tuple(FAMILY_WEIGHTS)
#: odd extents the families mean to reach
ODD_EXTENTS = (1, 3, 7, 33, 127, 129, 1025, 4097)
#: axis extents of the families' universes (small first: slices of it pick small ones)
FAMILY_EXTENTS = (1, 2, 3, 4, 7, 8, 16, 32, 33, 64, 127, 128, 129, 256, 1025, 4097)
#: the "norm_bwd" family: row counts and row lengths (the inner-outer scheduler takes
#: rows enough for a block an SM: hundreds), and elements of its inputs at most
NORM_ROWS = (1, 3, 33, 129, 256, 1025, 1025, 2049, 2049, 4097, 8193)
NORM_ROW_LENGTHS = (1, 3, 7, 33, 64, 127, 128, 129, 256, 1024, 1025, 2048, 4097, 8193, 12288, 16385)
NORM_NUMEL = 1 << 20
#: ... and of an input whose rows are LONG_ROW elements or more: rows too long for a
#: thread block's registers (held in shared-memory stages instead), hundreds of them
LONG_ROW, LONG_ROW_NUMEL = 8192, 1 << 22
#: the "big" family: universes of 1e5 .. BIG_NUMEL elements from these extents
BIG_EXTENTS = (1, 3, 7, 33, 127, 129, 513, 1025, 2049, 4097, 8192, 16385, 65537, 131073, 1048577)
BIG_NUMEL = 4_000_000
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


#: the eps of the generator's layer norms, (x - mean) * rsqrt(var + eps)
LAYER_NORM_EPS = 1e-05


def _var_floor(n: int, sabs: Any) -> Any:
    """The part of a variance's rounding error (`_perturb`, "var_mean") that does not vanish
    with the variance: n elements of mean magnitude sabs."""
    return EPS32 * _clog(n) * sabs * sabs * 1e-3


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
    #: the generator family that made the case (FAMILIES)
    family: str = "classic"
    #: regexes of NotLowerable reasons for which a segment of this case may run on the
    #: reference executor (besides EXPECTED_FALLBACKS), each with a comment where it is set
    allowed_fallbacks: tuple[str, ...] = ()
    #: random outputs that later ops read: the twin takes fuser's values of them (RNG[name];
    #: `run_twin(..., rng_values=...)`), so what the ops make of them is compared exactly
    rng_feeds: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"seed={self.seed} index={self.index}"

    def fd_source(self) -> str:
        return "with FusionDefinition() as fd:\n" + "".join(f"    {line}\n" for line in self.fd_lines)

    def inputs_source(self) -> str:
        return "inputs = [\n" + "".join(f"    {e},\n" for e in self.input_exprs) + "]\n"

    def twin_source(self) -> str:
        body = "".join(f"    {t.text}\n" for t in self.twin_lines)
        params = self.twin_params + (["RNG=None"] if self.rng_feeds else [])
        return (f"def torch_fn({', '.join(params)}):\n{body}"
                f"    return [{', '.join(self.outputs)}]\n")

    def execute_source(self) -> str:
        return "fd.execute(inputs, device=DEVICE)" if self.pass_device else "fd.execute(inputs)"

    def repro(self, device: str = "cuda", failure: str = "") -> str:
        """A self-contained script: the fusion, its inputs, the eager twin and a comparison."""
        head = (f"# gpu_fuzz case {self.id} (python -m tests.gpu_fuzz --seed {self.seed} --start {self.index} --cases 1 "
                f"--family {self.family})\n")
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
            + (inspect.getsource(make_index) + "\n\n" if any("make_index(" in e for e in self.input_exprs) else "")
            + self.fd_source()
            + "\n"
            + self.inputs_source()
            + "\n"
            + self.twin_source()
            + "\n"
            + rng_note
            + f"got = {self.execute_source()}\n"
            + (f"want = torch_fn(*inputs, RNG=dict(zip({self.outputs!r}, got)))  # the random values fuser drew\n"
               if self.rng_feeds else "want = torch_fn(*inputs)\n")
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
    #: label -> factors (`_norm_factors`) of an "i" axis along which the value is constant
    #: in part or whole (a reshape of broadcasts, a full, ...); absent: it varies (see
    #: `_Gen.factors`)
    pat: dict = field(default_factory=dict)


# --- constant axes -------------------------------------------------------------------------------
# Where a value is constant along an axis (a broadcast, an expanded input, a full, or what
# reshapes, slices and lookups make of them: [2, 256 expanded] -> [512] -> [2, 256] is
# constant along the 256 again), a normalisation over it takes the variance of equal
# values, 0, which one rounding away may be negative (see `_Gen.norm_scale`). The
# generator describes each iteration axis of a value by its factors: the mixed-radix digits
# of the axis's index, outermost first, as (extent, constant), the value depending on none
# of the constant digits. It errs towards constant (a scatter into a constant axis, say).


def _norm_factors(fs) -> tuple:
    """Factors without size-1 digits, adjacent ones of the same kind merged; an empty axis
    is one varying digit of extent 0."""
    fs = tuple(fs)
    if any(s == 0 for s, _ in fs):
        return ((0, False),)
    out: list = []
    for s, c in fs:
        if s == 1:
            continue
        if out and out[-1][1] == c:
            out[-1] = (out[-1][0] * s, c)
        else:
            out.append((s, c))
    return tuple(out)


def _all_const(fs) -> bool:
    return all(c for _, c in fs)


def _cuts(fs) -> list[int]:
    """The extents of the innermost 1, 2, ... digits of fs."""
    out, prod = [], 1
    for s, _ in reversed(fs):
        prod *= s
        out.append(prod)
    return out


def _refine(fs, cuts: list[int]) -> tuple:
    """fs cut at every extent in `cuts` (ascending, each dividing the next, fs's own among them)."""
    out, prod, i = [], 1, 0
    for s, c in reversed(fs):
        hi = prod * s
        while i < len(cuts) and cuts[i] <= hi:
            out.append((cuts[i] // prod, c))
            prod = cuts[i]
            i += 1
    return tuple(reversed(out))


def _chain(cuts: list[int]) -> bool:
    return all(b % a == 0 for a, b in zip(cuts, cuts[1:]))


def _combine_factors(fa, fb) -> tuple:
    """The factors of a value computed from two along the same axis: constant in a digit
    where both are. (Factorisations with no common refinement, which the generator's views
    do not make of one axis: varying.)"""
    if _all_const(fa):
        return fb
    if _all_const(fb) or fa == fb:
        return fa
    cuts = sorted(set(_cuts(fa)) | set(_cuts(fb)))
    if not cuts or cuts[0] == 0 or not _chain(cuts):
        return _norm_factors(((cuts[-1] if cuts else 0, False),))
    ra, rb = _refine(fa, cuts), _refine(fb, cuts)
    return _norm_factors((s, ca and cb) for (s, ca), (_, cb) in zip(ra, rb))


def _split_factors(fs, a: int, b: int) -> tuple[tuple, tuple]:
    """The factors of the two axes (a outer, b inner) a reshape splits an axis of factors
    fs into. (A split inside a digit that does not divide it: varying.)"""
    if _all_const(fs):
        return _norm_factors(((a, True),)), _norm_factors(((b, True),))
    cuts = sorted(set(_cuts(fs)) | {b})
    if a == 0 or b == 0 or not _chain(cuts):
        return _norm_factors(((a, False),)), _norm_factors(((b, False),))
    r = _refine(fs, cuts)
    k = len(r) - cuts.index(b) - 1  # r[k:] are the digits of the inner axis
    return _norm_factors(r[:k]), _norm_factors(r[k:])


def _range_const(fs, start: int, stop: int, step: int) -> bool:
    """Whether the positions start:stop:step of an axis of factors fs all hold one value."""
    if _all_const(fs) or len(range(start, stop, step)) <= 1:
        return True
    j = torch.arange(start, stop, step)
    inner = 1
    for s, c in reversed(fs):
        if not c:
            d = (j // inner) % s
            if bool((d != d[0]).any()):
                return False
        inner *= s
    return True


#: fd names a line reads as operands (not those it only takes a size from)
_OPERAND = re.compile(r"\bt\d+\b(?!\.size\(|\.shape\()")


_NAME = re.compile(r"\bt\d+\b")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


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
    """Draws one case: its fusion lines, twin lines and inputs (see `generate`)."""

    def __init__(self, rng: random.Random, family: str = "classic") -> None:
        self.rng = rng
        self.family = family
        #: families other than classic: no value may exceed this many elements (emit rejects)
        self.numel_cap = math.inf
        #: twin names of random outputs later ops read (Case.rng_feeds)
        self.rng_feeds: list[str] = []
        #: NotLowerable reasons this case's segments may fall back for (Case.allowed_fallbacks)
        self.allowed_fallbacks: list[str] = []
        self.fd_lines: list[str] = []
        self.twin_lines: list[TwinLine] = []
        self.twin_params: list[str] = []
        self.input_exprs: list[str] = []
        self.pool: list[Var] = []
        #: every value by name (what a line's operands are: `infer_pat`)
        self.vars: dict[str, Var] = {}
        self.inputs: list[Var] = []
        self.rng_vars: list[Var] = []
        self.tags: set[str] = set()
        #: names some line reads (what is not read is a sink: an output candidate)
        self.used: set[str] = set()
        self.n = 0
        self.meta: dict[str, Any] = {"torch": torch, "F": torch.float32, "DEVICE": "meta", "RNG": {}}
        self.sizes = self._draw_sizes() if family == "classic" else self._draw_family_sizes()
        #: the universe's own axes (new_label adds the extents views make after these)
        self.n_universe = len(self.sizes)

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
             squeezable: frozenset = frozenset(), shape: tuple | None = None, pat: dict | None = None) -> Var:
        """One fd line and its twin line; the twin runs on meta tensors at once, which
        gives the dtype torch says the value has (and checks the generator's shapes).
        Where the value is constant along its "i" axes comes from its operands
        (`infer_pat`), except for the labels `pat` gives (a view's new axes, a full; random
        values vary everywhere)."""
        name = self.name()
        if math.prod(self.shape(axes) if shape is None else shape) > self.numel_cap:
            raise _Reject(f"{name} would have more than {self.numel_cap} elements")
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
            perturb = (None if exact or not val.dtype.is_floating_point or rng
                       else ("round", val.dtype, None) if val.dtype in NARROW else ("elem", EPS[val.dtype]))
        self.twin_lines.append(TwinLine(text, (name,), perturb))
        if rng is not None:
            known = {}
        else:
            known = self.infer_pat(fd_rhs, axes)
            known.update(pat or {})
        v = Var(name, tuple(axes), val.dtype, exact, bound, rng=rng, squeezable=squeezable, pat=self._clean_pat(known))
        self.vars[name] = v
        if pool and rng is None:
            self.pool.append(v)
        return v

    # --- constant axes (see `_norm_factors`) -------------------------------------------------------
    def factors(self, v: Var, p: int) -> tuple:
        """The factors of v's axis p: broadcast and expanded axes are constant, an "i" axis
        is as v.pat says (absent: varying), an axis of extent 1 trivially constant."""
        k, kind = v.axes[p]
        if kind == "b":
            return ()
        if kind == "e":
            return _norm_factors(((self.sizes[k], True),))
        return v.pat.get(k, _norm_factors(((self.sizes[k], False),)))

    def is_const(self, v: Var, p: int) -> bool:
        return _all_const(self.factors(v, p))

    def infer_pat(self, fd_rhs: str, axes: Sequence) -> dict:
        """The factors of each "i" axis of a value the line `fd_rhs` computes from its
        operands elementwise (or by a reduction, broadcast, permute, cast, gather...): its
        value depends on an axis's digit where an operand with that label does; a label no
        operand has (a view's or an iota's new axis) varies."""
        ops = [self.vars[n] for n in _OPERAND.findall(fd_rhs) if n in self.vars]
        pat = {}
        for k, kind in axes:
            if kind != "i":
                continue
            acc = None
            for o in ops:
                for q, (ko, ko_kind) in enumerate(o.axes):
                    if ko == k:
                        # (an operand's flattened axis: varying)
                        f = self.factors(o, q) if ko_kind in "ibe" else _norm_factors(((self.sizes[k], False),))
                        acc = f if acc is None else _combine_factors(acc, f)
            if acc is not None:
                pat[k] = acc
        return pat

    def _clean_pat(self, pat: dict) -> dict:
        """pat without the labels along which the value varies in every digit."""
        return {k: f for k, f in pat.items() if any(c for _, c in f) or not f}

    def const_pat(self, axes: Sequence) -> dict:
        """The factors of a value constant along all its "i" axes."""
        return {k: _norm_factors(((self.sizes[k], True),)) for k, kind in axes if kind == "i"}

    def norm_scale(self, x: Var, dims: list[int], n: int) -> float:
        """The power of two that x is scaled by before (x - mean) * rsqrt(var + eps) over
        `dims`, so that this is not NaN one rounding away: where x is constant along every
        dim its variance is 0, and a large x lets a variance one rounding away from 0 (the
        floor of the noise runs' variance error, `_var_floor`) fall below -eps, at every
        element (seed 9601 case 3 and seed 9609 case 35 of the reshape family: a
        broadcast, reshaped, summed and normalised over the axes it was broadcast along).
        Rows constant by coincidence look like any other (seed 9900 case 2: a max over 1025
        rows of integers in [-8, 8] plus a large sum is the same in every column), so every
        x large enough is scaled, constant or not; 1.0 elsewhere."""
        k = 0
        while 4 * _var_floor(n, x.bound * 2.0**-k) >= LAYER_NORM_EPS:
            k += 1
        return 2.0**-k

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
        contiguity = _contiguity(phys, kinds, logical, strides, declare=lambda: rng.random() > 0.1)
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
        self.vars[name] = v
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
                         exact=v.exact, bound=v.bound, perturb=("round", dt, v.name) if lossy else None, pool=False)

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
            perturb: Any = ("round", dt, x.name)
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

    def op_reduction(self, x: Var | None = None, dims: list[int] | None = None) -> None:
        """sum / max / min / prod of a pool tensor (or of `x` over `dims`), often
        combined back with its operand."""
        rng = self.rng
        x = self.pick(lambda v: len(v.axes) > 0) if x is None else x
        if x is None:
            return
        op = rng.choice(("sum", "sum", "sum", "max", "min", "prod"))
        if x.dtype is torch.bool and op in ("max", "min"):
            op = "sum"
        if x.dtype in NARROW and rng.random() < 0.6 or (x.dtype is torch.bool and op == "prod"):
            x = self.as_float(x)
        if dims is not None:
            if op in ("max", "min") and any(self.shape(x.axes)[p] == 0 for p in dims):
                op = "sum"
        else:
            dims = self.reduce_dims(x, nonempty=op in ("max", "min"))
        if dims is None:
            op = "sum"
            dims = self.reduce_dims(x, nonempty=False)
        shape = self.shape(x.axes)
        n = math.prod(shape[p] for p in dims)
        if op == "prod" and x.dtype in NARROW and len(dims) > 1:
            # torch's prod takes one dim: the twin's chain of half prods would round between
            # them, fuser rounds once
            x = self.as_float(x)
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
            perturb = ("sum", x.name, tuple(dims), keepdim, n, out_dt if out_dt in NARROW else None) if is_float else None
            exact = not is_float and x.exact
        elif op == "prod":
            twin = x.name
            for p in sorted(dims, reverse=True):
                twin += f".prod({p}, keepdim={keepdim}{tw_dtype})"
                tw_dtype = ""
            bound = x.bound ** max(n, 1)
            perturb = ("prod", n, out_dt if out_dt in NARROW else None) if is_float else None
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

    def float_reduction_operand(self, x: Var | None = None, dims: list[int] | None = None) -> tuple[Var, list[int]] | None:
        """A floating pool tensor (or `x` made floating) and a nonempty set of its dims to
        reduce (or `dims`, unless one of them is empty), or None."""
        if x is None:
            x = self.float_input()
        elif x.dtype is torch.bool or not x.dtype.is_floating_point or (x.dtype in NARROW and self.rng.random() < 0.7):
            x = self.as_float(x)
        if x is not None and dims is not None:
            return None if any(self.shape(x.axes)[p] == 0 for p in dims) or not dims else (x, dims)
        dims = self.reduce_dims(x, nonempty=True) if x is not None else None
        return None if dims is None else (x, dims)

    def op_var_mean(self, x: Var | None = None, dims: list[int] | None = None) -> None:
        """var_mean of a float tensor, half the time normalised layer-norm style:
        (x - mean) * rsqrt(var + eps), of x scaled by `norm_scale` first where its variance
        is 0."""
        rng = self.rng
        got = self.float_reduction_operand(x, dims)
        if got is None:
            return
        x, dims = got
        shape = self.shape(x.axes)
        n = math.prod(shape[p] for p in dims)
        correction = rng.choice((0, 1))
        keepdim = rng.random() < 0.5
        norm = rng.random() < 0.5
        flat = all(self.is_const(x, p) for p in dims)  # the variance is 0 everywhere
        scale = self.norm_scale(x, dims, n) if norm else 1.0
        if scale != 1.0:  # (a power of two: x * scale is exact)
            x = self.as_float(x)  # (no half subnormals)
            x = self.emit(f"fd.ops.mul({x.name}, {scale!r})", f"torch.mul({x.name}, {scale!r})", x.axes,
                          exact=x.exact, bound=x.bound * scale, perturb=None, pool=False, squeezable=x.squeezable)
            self.tags.add("layer_norm_scaled")
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
        rnd = x.dtype if x.dtype in NARROW else None
        self.twin_lines.append(TwinLine(tw, (vn, mn), ("var_mean", x.name, tuple(dims), keepdim, n, correction, rnd)))
        self._reduce_tags(x, dims)
        self.tags.add(f"var_mean_c{correction}")
        pat = self._clean_pat(self.infer_pat(fd, axes))
        var = Var(vn, axes, self.meta[vn].dtype, False, x.bound**2 * 2, squeezable=sq,
                  pat=self.const_pat(axes) if flat else pat)
        mean = Var(mn, axes, self.meta[mn].dtype, False, x.bound, squeezable=sq, pat=pat)
        self.vars[vn], self.vars[mn] = var, mean
        self.pool += [var, mean]
        if norm:  # layer-norm like: (x - mean) * rsqrt(var + eps)
            vb = self.broadcast_back(var, x, dims, keepdim)
            mb = self.broadcast_back(mean, x, dims, keepdim)
            d_axes = self.merged(x.axes, mb.axes)
            # (where the variance is 0, so is x - mean, and the result)
            zero = self.const_pat(d_axes) if flat else None
            d = self.emit(f"fd.ops.sub({x.name}, {mb.name})", f"torch.sub({x.name}, {mb.name})",
                          d_axes, exact=False, bound=2 * x.bound, pool=False, pat=zero)
            ve = self.emit(f"fd.ops.add({vb.name}, {LAYER_NORM_EPS!r})", f"torch.add({vb.name}, {LAYER_NORM_EPS!r})",
                           vb.axes, exact=False,
                           bound=vb.bound + 1, pool=False)
            rs = self.emit(f"fd.ops.rsqrt({ve.name})", f"torch.rsqrt({ve.name})", vb.axes, exact=False,
                           bound=1 / math.sqrt(LAYER_NORM_EPS), pool=False)
            self.tags.add("layer_norm")
            self.emit(f"fd.ops.mul({d.name}, {rs.name})", f"torch.mul({d.name}, {rs.name})",
                      self.merged(d.axes, rs.axes), exact=False, bound=d.bound / math.sqrt(LAYER_NORM_EPS), pat=zero)

    def op_softmax(self, x: Var | None = None, dims: list[int] | None = None) -> None:
        """A softmax over some dims (max, sub, exp, sum, div)."""
        got = self.float_reduction_operand(x, dims)
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
        # (over dims along which x is constant: 0, 1, n and 1 / n everywhere)
        flat = all(self.is_const(x, p) for p in dims)
        z = self.emit(f"fd.ops.sub({x.name}, {mb.name})", f"torch.sub({x.name}, {mb.name})", x.axes, exact=False,
                      bound=2 * x.bound, pool=False, pat=self.const_pat(x.axes) if flat else None)
        e = self.emit(f"fd.ops.exp({z.name})", f"torch.exp({z.name})", x.axes, exact=False, bound=1.0, pool=False)
        s = self.emit(f"fd.ops.sum({e.name}, dims={dims}, keepdim={keepdim})",
                      f"torch.sum({e.name}, dim={dims}, keepdim={keepdim})", axes, exact=False, bound=float(n),
                      perturb=("sum", e.name, tuple(dims), keepdim, n, e.dtype if e.dtype in NARROW else None),
                      pool=False)
        sb = self.broadcast_back(s, x, dims, keepdim)
        del rank
        self.emit(f"fd.ops.div({e.name}, {sb.name})", f"torch.div({e.name}, {sb.name})", x.axes, exact=False, bound=1.0,
                  pat=self.const_pat(x.axes) if flat else None)

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
            perturb = ("sum", b.name, tuple(dims), keepdim, n, None) if op == "sum" and is_float else None
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
                          squeezable=frozenset(p for p, (k, kd) in enumerate(axes) if kd == "b"),
                          pat=self.const_pat(axes))
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
                  exact=x.exact, bound=x.bound, perturb=None, pat=dict(x.pat))
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
                  exact=x.exact, bound=x.bound, perturb=None, pat=dict(x.pat))
        return None

    # --- families: sizes and inputs --------------------------------------------------------------
    def _draw_family_sizes(self) -> list[int]:
        """The universe of a family case: odd extents next to powers of two and large ones;
        for "big", 1e5 .. BIG_NUMEL elements in all."""
        rng = self.rng
        if self.family == "big":
            self.numel_cap = 2 * BIG_NUMEL
            for _ in range(200):
                sizes = [rng.choice(BIG_EXTENTS) for _ in range(rng.choice((1, 2, 2, 3, 3)))]
                if 100_000 < math.prod(sizes) <= BIG_NUMEL:
                    break
            else:
                sizes = [129, 4097]
            self.tags.add("big_input")
        elif self.family == "norm_bwd":
            # rows (the leading axes) by a row (the last, or the last two): many rows of any
            # length, as the inner-outer scheduler's fusions have
            lead = rng.choice((1, 1, 1, 2))
            sizes = [rng.choice(NORM_ROWS) for _ in range(lead)] + [rng.choice(NORM_ROW_LENGTHS)]
            def cap() -> int:
                return LONG_ROW_NUMEL if sizes[-1] >= LONG_ROW else NORM_NUMEL

            while math.prod(sizes) > cap():
                k = max(range(len(sizes) - 1), key=lambda j: sizes[j])
                rows = [e for e in NORM_ROWS if e < sizes[k]]
                if rows and (sizes[-1] <= 64 or rng.random() < 0.5):  # fewer rows, or a shorter row
                    sizes[k] = rng.choice(rows)
                else:
                    sizes[-1] = rng.choice([e for e in NORM_ROW_LENGTHS if e < sizes[-1]])
            self.numel_cap = 4 * cap()
            if sizes[-1] >= LONG_ROW:
                self.tags.add("norm_bwd_long_row")
        elif self.family == "rotary":
            self.numel_cap = 4 * MAX_NUMEL
            for _ in range(200):
                b, s, h, d = (rng.choice(v) for v in ((1, 2, 3), (1, 3, 7, 16, 33, 127, 128), (1, 2, 3, 4, 8),
                                                    (2, 4, 8, 16, 32, 64, 128)))
                if b * s * h * d <= MAX_NUMEL:
                    break
            sizes = [b, s, h, d]
        else:
            self.numel_cap = 4 * MAX_NUMEL
            u = rng.choice((1, 2, 2, 3, 3, 3, 4))
            sizes = [rng.choice(FAMILY_EXTENTS) for _ in range(u)]
            while math.prod(sizes) > MAX_NUMEL:
                k = max(range(u), key=lambda j: sizes[j])
                sizes[k] = rng.choice([e for e in FAMILY_EXTENTS if e < sizes[k]])
            if self.family not in ("index", "dropout") and rng.random() < 0.02:
                sizes[rng.randrange(u)] = 0
                self.tags.add("zero_size")
        if any(s in ODD_EXTENTS for s in sizes):
            self.tags.add("odd_extent")
        if 1 in sizes:
            self.tags.add("size1_extent")
        return sizes

    def new_label(self, n: int) -> int:
        """A new universe axis of extent n (what a reshape, slice, pad or cat makes)."""
        self.sizes.append(n)
        return len(self.sizes) - 1

    def draw_axes(self, rank: int | None = None, *, expand: float = 0.25, bcast: float = 0.1,
                  labels: Sequence[int] | None = None) -> tuple:
        """Axes for a family input: labels of the universe in order, some broadcast (size 1)
        or expanded (stride 0), innermost included."""
        rng = self.rng
        if labels is None:
            u = self.n_universe
            rank = min(u, rank if rank is not None else rng.choice((1, 2, 2, 3, 3, 4)))
            labels = sorted(rng.sample(range(u), rank))
        kinds = []
        for _ in labels:
            r = rng.random()
            kinds.append("b" if r < bcast else "e" if r < bcast + expand else "i")
        if kinds and all(k != "i" for k in kinds):
            kinds[rng.randrange(len(kinds))] = "i"
        return tuple(zip(labels, kinds))

    def input_var(self, axes: tuple, dtype: torch.dtype, *, layout: str | None = None,
                  phys: list[int] | None = None, index_of: tuple | None = None) -> Var:
        """A fusion input with logical `axes` ("e": expanded, stride 0) in one of the layouts:
        contiguous, permuted (allocation order `phys`, or a random one), sliced (a step of 2,
        or odd offsets into wider rows: row strides that are not the extent), or both.
        `index_of` = (n, unique_dim) makes it an index tensor of positions in [0, n) (distinct
        along the logical dim unique_dim, if not None) instead of make_input's values."""
        rng = self.rng
        rank = len(axes)
        kinds = [kd for _, kd in axes]
        logical = [1 if kd == "b" else self.sizes[k] for k, kd in axes]
        if layout is None:
            layout = rng.choice(("contiguous", "contiguous", "permuted", "sliced", "permuted_sliced", "rows"))
        base = [n if kd == "i" else 1 for n, kd in zip(logical, kinds)]
        if phys is None:
            phys = list(range(rank))
            if "permuted" in layout and rank >= 2:
                for _ in range(4):
                    rng.shuffle(phys)
                    if phys != sorted(phys):
                        break
        idx = [":"] * rank
        # (an index distinct along a dim is made at that dim's extent: not sliced there)
        iters = [d for d in range(rank) if kinds[d] == "i" and logical[d] > 0
                 and not (index_of is not None and index_of[1] == d)]
        if iters and ("sliced" in layout or layout == "rows"):
            dims = [max(iters)] if layout == "rows" else rng.sample(iters, rng.randint(1, min(2, len(iters))))
            for d in dims:
                n = logical[d]
                r = rng.random()
                if layout != "rows" and r < 0.3:
                    base[d], idx[d] = 2 * n, "::2"
                elif layout != "rows" and r < 0.45:
                    base[d], idx[d] = 2 * n + 1, "1::2"
                else:  # odd offset into a wider row
                    extra = rng.randint(1, 5)
                    off = rng.randrange(1, extra + 1, 2)
                    base[d], idx[d] = n + extra, f"{off}:{off + n}"
            self.tags.add("input_sliced")
            if layout == "rows":
                self.tags.add("input_row_stride")
        name = self.name()
        seed = rng.randrange(2**31)
        phys_shape = [base[d] for d in phys]
        if index_of is not None:
            n, unique = index_of
            ud = "" if unique is None else f", unique_dim={phys.index(unique)}"
            expr = f"make_index({phys_shape}, {n}, {seed}, {_torch_name(dtype)}, DEVICE{ud})"
        else:
            expr = f"make_input({phys_shape}, {_torch_name(dtype)}, {seed}, DEVICE)"
        suffix = ""
        if phys != list(range(rank)):
            inv = [phys.index(d) for d in range(rank)]
            suffix += f".permute({', '.join(map(str, inv))})"
            self.tags.add("input_permuted")
        if any(i != ":" for i in idx):
            suffix += f"[{', '.join(idx)}]"
        if "e" in kinds:
            suffix += f".expand({', '.join(map(str, logical))})"
            self.tags.add("input_expanded")
            if kinds[-1] == "e":
                self.tags.add("input_expanded_inner")
            if kinds.count("e") > 1:
                self.tags.add("input_expanded_multi")
        if "b" in kinds:
            self.tags.add("input_broadcast")
        self.input_exprs.append(expr + suffix)
        meta_val = eval("x" + suffix, {"x": torch.empty(phys_shape, dtype=dtype, device="meta")})  # noqa: S307
        assert tuple(meta_val.shape) == tuple(logical), (meta_val.shape, logical, suffix)
        strides = meta_val.stride()
        shape = [1 if kd == "b" else (n if kd == "i" and n > 1 and rng.random() < 0.1 else -1)
                 for n, kd in zip(logical, kinds)]
        contiguity = _contiguity(phys, kinds, logical, strides)
        extra = ""
        if phys != list(range(rank)):
            extra = f", stride_order={[rank - 1 - phys.index(d) for d in range(rank)]}"
        self.fd_lines.append(f"{name} = fd.define_tensor(shape={shape}, contiguity={contiguity}, dtype={FD_DT[dtype]}{extra})")
        self.twin_params.append(name)
        self.meta[name] = torch.empty(logical, dtype=dtype, device="meta")
        if dtype is torch.float32:
            self.twin_lines.append(TwinLine(f"{name} = {name}.to(F)", (name,), None))
        if index_of is not None:
            bound = float(max(index_of[0], 1))
        else:
            bound = 5.25 if dtype.is_floating_point else 8.0 if dtype in INTS else 1.0
        sq = frozenset(p for p, (k, kd) in enumerate(axes) if kd == "b")
        v = Var(name, tuple(axes), dtype, True, bound, is_input=True, squeezable=sq)
        self.inputs.append(v)
        self.vars[name] = v
        if index_of is None:
            self.pool.append(v)
        self.tags.add(f"input_{str(dtype).replace('torch.', '')}")
        return v

    def family_input(self, *, min_rank: int = 1, dtype: torch.dtype | None = None, layout: str | None = None) -> Var:
        """A fresh input for a family op: floats mostly, any layout."""
        rng = self.rng
        if dtype is None:
            dtype = rng.choice((torch.float32,) * 5 + (torch.bfloat16, torch.float16, torch.int32))
        rank = max(min_rank, rng.choice((1, 2, 2, 3, 3, 4)))
        axes = self.draw_axes(rank)
        while len(axes) < rank:  # a universe of fewer axes: more of small extents
            room = max(1, MAX_NUMEL // max(1, math.prod(self.shape(axes))))
            axes += ((self.new_label(rng.choice([e for e in FAMILY_EXTENTS[:12] if e <= room] or [1])), "i"),)
        return self.input_var(axes, dtype, layout=layout)

    def pick_or_input(self, pred=None, **kw: Any) -> Var:
        """A pool tensor satisfying pred (half the time, when there is one), else a fresh input."""
        x = self.pick(pred) if self.rng.random() < 0.5 else None
        return x if x is not None else self.family_input(**kw)

    # --- families: views (reshape) -----------------------------------------------------------------
    def op_merge(self, x: Var | None = None, p: int | None = None) -> Var | None:
        """reshape merging two adjacent axes (most often the innermost two)."""
        rng = self.rng
        x = x or self.pick(lambda v: len(v.axes) >= 2)
        if x is None or len(x.axes) < 2:
            return None
        rank = len(x.axes)
        if p is None:
            p = rank - 2 if rng.random() < 0.6 else rng.randrange(rank - 1)
        shp = list(self.shape(x.axes))
        n = shp[p] * shp[p + 1]
        lab = self.new_label(n)
        axes = x.axes[:p] + ((lab, "i"),) + x.axes[p + 2:]
        new = shp[:p] + [n] + shp[p + 2:]
        fd_new = list(map(str, new))
        if 0 not in shp and rng.random() < 0.2:
            fd_new[p] = "-1"
        kinds = {x.axes[p][1], x.axes[p + 1][1]}
        self.tags.add("reshape_merge_inner" if p == rank - 2 else "reshape_merge")
        if "e" in kinds:
            self.tags.add("reshape_of_expanded")
        if "b" in kinds:
            self.tags.add("reshape_of_broadcast")
        pat = {lab: _norm_factors(self.factors(x, p) + self.factors(x, p + 1))}
        return self.emit(f"fd.ops.reshape({x.name}, new_shape=[{', '.join(fd_new)}])",
                         f"{x.name}.reshape([{', '.join(fd_new)}])", axes, exact=x.exact, bound=x.bound, perturb=None,
                         pat=pat)

    def op_split(self, x: Var | None = None, p: int | None = None) -> Var | None:
        """reshape splitting one axis (most often the innermost) in two: odd factors too."""
        rng = self.rng
        x = x or self.pick(lambda v: 1 <= len(v.axes) <= 4)
        if x is None or not x.axes or len(x.axes) > 4:
            return None
        rank = len(x.axes)
        shp = list(self.shape(x.axes))
        if p is None:
            p = rank - 1 if rng.random() < 0.6 else rng.randrange(rank)
        n = shp[p]
        if n == 0:
            a, b = rng.choice(((0, 3), (1, 0)))
        else:
            small = [a for a in range(1, math.isqrt(n) + 1) if n % a == 0]
            divs = sorted(set(small + [n // a for a in small]))
            proper = [a for a in divs if a not in (1, n)]
            a = rng.choice(proper) if proper and rng.random() < 0.85 else rng.choice(divs)
            b = n // a
        la, lb = self.new_label(a), self.new_label(b)
        axes = x.axes[:p] + ((la, "i"), (lb, "i")) + x.axes[p + 1:]
        new = shp[:p] + [a, b] + shp[p + 1:]
        fd_new = list(map(str, new))
        if 0 not in new and rng.random() < 0.2:
            fd_new[p + rng.randrange(2)] = "-1"
        self.tags.add("reshape_split_inner" if p == rank - 1 else "reshape_split")
        if x.axes[p][1] == "e":
            self.tags.add("reshape_of_expanded")
        fa, fb = _split_factors(self.factors(x, p), a, b)
        return self.emit(f"fd.ops.reshape({x.name}, new_shape=[{', '.join(fd_new)}])",
                         f"{x.name}.reshape([{', '.join(fd_new)}])", axes, exact=x.exact, bound=x.bound, perturb=None,
                         pat={la: fa, lb: fb})

    def op_expand_reshape(self, x: Var | None = None) -> Var | None:
        """A tensor broadcast along a new axis (expanded, stride 0), then reshaped across it:
        [7] -> broadcast_in_dim [7, 1025] -> [7175] -> [7, 1025] or another split."""
        rng = self.rng
        x = x or self.pick(lambda v: 1 <= len(v.axes) <= 3)
        if x is None or not 1 <= len(x.axes) <= 3:
            return None
        rank = len(x.axes)
        m = rng.choice(FAMILY_EXTENTS[1:])
        lab = self.new_label(m)
        inner = rng.random() < 0.7
        axes = (x.axes + ((lab, "e"),)) if inner else (((lab, "e"),) + x.axes)
        shp = list(self.shape(axes))
        dims = list(range(rank)) if inner else list(range(1, rank + 1))
        twin = f"{x.name}.unsqueeze({-1 if inner else 0}).expand({shp})"
        self.tags.add("broadcast_in_dim")
        b = self.emit(f"fd.ops.broadcast_in_dim({x.name}, shape={shp}, broadcast_dims={dims})", twin, axes,
                      exact=x.exact, bound=x.bound, perturb=None, pool=False)
        y = self.op_merge(b, rank - 1 if inner else 0)
        if y is None:
            return None
        self.tags.add("reshape_expanded_merge")
        if rng.random() < 0.6:
            y = self.op_split(y, rank - 1 if inner else 0) or y
        return y

    def op_flatten_roundtrip(self, x: Var | None = None) -> Var | None:
        """Flatten to 1-D and reshape to another factorisation of the same elements."""
        rng = self.rng
        x = x or self.pick(lambda v: 2 <= len(v.axes) <= 4)
        if x is None or len(x.axes) < 2:
            return None
        n = math.prod(self.shape(x.axes))
        lab = self.new_label(n)
        fs = _norm_factors(f for p in range(len(x.axes)) for f in self.factors(x, p))
        flat = self.emit(f"fd.ops.reshape({x.name}, new_shape=[{n}])", f"{x.name}.reshape([{n}])",
                         ((lab, "i"),), exact=x.exact, bound=x.bound, perturb=None, pool=False, pat={lab: fs})
        self.tags.add("reshape_flatten")
        return self.op_split(flat, 0) if rng.random() < 0.8 else flat

    def view_op(self, x: Var | None = None) -> Var | None:
        """One reshape of the families' kinds."""
        op = self.rng.choice((self.op_merge, self.op_merge, self.op_split, self.op_split, self.op_expand_reshape,
                              self.op_flatten_roundtrip))
        return op(x)

    # --- families: slices, pads, cats --------------------------------------------------------------
    def op_slice(self, x: Var | None = None) -> Var | None:
        """A slice narrowing one or two axes: width 1, odd offsets, sometimes a step of 2."""
        rng = self.rng
        x = x or self.pick(lambda v: len(v.axes) >= 1 and any(n > 0 for n in self.shape(v.axes)))
        if x is None or not x.axes:
            return None
        shp = list(self.shape(x.axes))
        cands = [p for p, n in enumerate(shp) if n > 0 and (x.axes[p][1] == "i" or rng.random() < 0.3)]
        if not cands:
            return None
        rank = len(shp)
        chosen = rng.sample(cands, min(len(cands), rng.choice((1, 1, 1, 2))))
        if rank - 1 in cands and rank - 1 not in chosen and rng.random() < 0.4:
            chosen[0] = rank - 1
        starts, ends, steps = [0] * rank, list(shp), [1] * rank
        axes = list(x.axes)
        pat = {}
        for p in chosen:
            n = shp[p]
            w = rng.choice((1, 1, n - 1, max(1, n // 2), rng.randint(1, n))) if n > 1 else 1
            w = max(1, min(w, n))
            odd = [s for s in range(1, n - w + 1, 2)]
            start = rng.choice(odd) if odd and rng.random() < 0.6 else rng.randint(0, n - w)
            step = 2 if w >= 3 and rng.random() < 0.15 else 1
            starts[p], ends[p], steps[p] = start, start + w, step
            length = -(-w // step)
            axes[p] = (self.new_label(length), "i")
            if _range_const(self.factors(x, p), start, start + w, step):
                pat[axes[p][0]] = _norm_factors(((length, True),))
            self.tags.add("slice_width1" if length == 1 else "slice")
            if start % 2:
                self.tags.add("slice_odd_offset")
            if step > 1:
                self.tags.add("slice_step")
            if x.axes[p][1] != "i":
                self.tags.add("slice_of_broadcast")
        stride_arg = f", strides={steps}" if any(s != 1 for s in steps) else ""
        idx = ", ".join(f"{a}:{b}" + (f":{c}" if c != 1 else "") for a, b, c in zip(starts, ends, steps))
        return self.emit(f"fd.ops.slice({x.name}, start_indices={starts}, end_indices={ends}{stride_arg})",
                         f"{x.name}[{idx}]", tuple(axes), exact=x.exact, bound=x.bound, perturb=None, pat=pat)

    def op_pad(self, x: Var | None = None) -> Var | None:
        """A pad of the last one or two axes (widths 0..3, sometimes negative: a crop), with
        a value that reaches the output."""
        rng = self.rng
        x = x or self.pick(lambda v: len(v.axes) >= 1 and v.dtype is not torch.bool)
        if x is None or not x.axes or x.dtype is torch.bool:
            return None
        shp = list(self.shape(x.axes))
        rank = len(shp)
        k = min(rank, rng.choice((1, 1, 2)))
        widths, axes = [], list(x.axes)
        for j in range(k):
            p = rank - 1 - j
            lo, hi = rng.randint(0, 3), rng.randint(0, 3)
            if shp[p] > 2 and rng.random() < 0.2:
                lo = -rng.randint(1, min(2, shp[p] - 1))
                self.tags.add("pad_negative")
            if lo == hi == 0:
                hi = 1
            widths += [lo, hi]
            axes[p] = (self.new_label(shp[p] + lo + hi), "i")
            if x.axes[p][1] != "i":
                self.tags.add("pad_of_broadcast")
        if x.dtype.is_floating_point:
            value = rng.choice((0.0, 1.5, -2.0))
        else:
            value = rng.choice((0, 3, -1))
        self.tags.add("pad")
        return self.emit(f"fd.ops.pad({x.name}, {widths}, {value!r})",
                         f"torch.nn.functional.pad({x.name}, {widths}, value={value!r})", tuple(axes),
                         exact=x.exact, bound=max(x.bound, abs(value)), perturb=None)

    def op_cat(self, x: Var | None = None) -> Var | None:
        """A cat of 2-4 tensors along any axis: slices of one operand, new inputs of other
        extents there (any layout), values computed from the first."""
        rng = self.rng
        x = x or self.pick(lambda v: len(v.axes) >= 1 and v.dtype is not torch.bool)
        if x is None or not x.axes or x.dtype is torch.bool:
            return None
        rank = len(x.axes)
        p = rank - 1 if rng.random() < 0.4 else rng.randrange(rank)
        parts = [x]
        same = {x.name}  # parts holding x's values along the cat axis: x and slices of it
        for _ in range(rng.choice((1, 1, 2, 3))):
            how = rng.random()
            if how < 0.45:  # a new input, another extent along the cat axis
                m = rng.choice(FAMILY_EXTENTS[:14])
                lab = self.new_label(m)
                kinds = self.draw_axes(labels=[k for k, _ in x.axes], bcast=0.0)
                # off the cat axis the extents must be x's: size 1 where x's is a broadcast
                axes = tuple((lab, "i") if q == p else (k, "b" if x.axes[q][1] == "b" else kd)
                             for q, (k, kd) in enumerate(kinds))
                parts.append(self.input_var(axes, x.dtype))
                self.tags.add("cat_input")
            elif how < 0.7 and self.shape(x.axes)[p] > 0:  # a slice of x along the cat axis
                n = self.shape(x.axes)[p]
                a = rng.randint(0, n - 1)
                b = rng.randint(a + 1, n)
                axes = tuple((self.new_label(b - a), "i") if q == p else ax for q, ax in enumerate(x.axes))
                idx = ", ".join(f"{a}:{b}" if q == p else ":" for q in range(rank))
                starts = [a if q == p else 0 for q in range(rank)]
                ends = [b if q == p else n_ for q, n_ in enumerate(self.shape(x.axes))]
                parts.append(self.emit(f"fd.ops.slice({x.name}, start_indices={starts}, end_indices={ends})",
                                       f"{x.name}[{idx}]", axes, exact=x.exact, bound=x.bound, perturb=None,
                                       pool=False))
                same.add(parts[-1].name)
            else:  # a value computed from x (the same extents)
                op = rng.choice(("neg", "abs"))
                parts.append(self.emit(f"fd.ops.{op}({x.name})", f"torch.{op}({x.name})", x.axes, exact=x.exact,
                                       bound=x.bound, perturb=None, pool=False))
        rng.shuffle(parts)
        total = sum(self.shape(v.axes)[p] for v in parts)
        axes = []
        for q in range(rank):
            if q == p:
                axes.append((self.new_label(total), "i"))
            else:
                kind = None
                for v in parts:
                    kind = _merge_kind(kind, v.axes[q][1])
                axes.append((x.axes[q][0], kind))
        dim = p - rank if rng.random() < 0.3 else p
        names = ", ".join(v.name for v in parts)
        # constant along the cat axis where every part is x (or a slice of it) and x is
        flat = same >= {v.name for v in parts} and self.is_const(x, p)
        pat = {axes[p][0]: _norm_factors(((total, True),))} if flat else {}
        self.tags.add(f"cat{len(parts)}")
        if p != rank - 1:
            self.tags.add("cat_outer_axis")
        return self.emit(f"fd.ops.cat([{names}], dim={dim})", f"torch.cat([{names}], dim={dim})", tuple(axes),
                         exact=all(v.exact for v in parts), bound=max(v.bound for v in parts), perturb=None, pat=pat)

    def resize_op(self, x: Var | None = None) -> Var | None:
        """One slice, pad or cat."""
        return self.rng.choice((self.op_slice, self.op_slice, self.op_pad, self.op_cat, self.op_cat))(x)

    # --- families: what follows a view ------------------------------------------------------------------
    def reduce_after(self, v: Var | None, new: bool = True) -> None:
        """A reduction, var_mean (layer norm) or softmax of `v` over dims that include its
        newest axes (those a view op just made), or nothing if `v` is None."""
        if v is None or not v.axes:
            return
        rng = self.rng
        rank = len(v.axes)
        newest = max(range(rank), key=lambda p: v.axes[p][0]) if new else rank - 1
        dims = sorted({newest} | set(rng.sample(range(rank), rng.randint(0, rank - 1))))
        self.tags.add("reduce_after_view")
        which = rng.random()
        if which < 0.45 or v.dtype is torch.bool:
            self.op_reduction(v, dims)
        elif which < 0.75:
            self.op_var_mean(v, dims)
        else:
            self.op_softmax(v, dims)

    def classic_ops(self, lo: int, hi: int) -> None:
        """A few ops of the classic mix on what the family made."""
        names, weights = zip(*self.OPS.items())
        for _ in range(self.rng.randint(lo, hi)):
            snap = self._snapshot()
            try:
                getattr(self, self.rng.choices(names, weights)[0])()
            except _Reject:
                self._restore(snap)

    def attempt(self, fn, *args: Any) -> Any:
        """fn(*args), rolled back (None) if it draws a value the generator must not make."""
        snap = self._snapshot()
        try:
            return fn(*args)
        except _Reject:
            self._restore(snap)
            return None

    # --- families: the recipes --------------------------------------------------------------------------
    def fam_reshape(self) -> None:
        """Reshapes splitting or merging the innermost axis, of broadcast / expanded tensors,
        feeding reductions and persistent ops."""
        for _ in range(self.rng.randint(1, 2)):
            self.family_input(min_rank=self.rng.choice((1, 2, 2, 3)))
        for _ in range(self.rng.randint(1, 3)):
            v = self.attempt(self.view_op)
            if v is not None and self.rng.random() < 0.5:
                self.attempt(self.reduce_after, v)
        self.classic_ops(0, 2)

    def fam_resize(self) -> None:
        """Slices (width 1, odd offsets), pads and cats of several inputs on any axis, whose
        values reach the outputs."""
        for _ in range(self.rng.randint(1, 2)):
            self.family_input()
        for _ in range(self.rng.randint(1, 3)):
            v = self.attempt(self.resize_op)
            if v is not None and self.rng.random() < 0.35:
                self.attempt(self.reduce_after, v)
        self.classic_ops(0, 2)

    def fam_layout(self) -> None:
        """Permuted, sliced (odd offsets, row strides) and expanded (stride 0, innermost and
        several dims) inputs through reshapes, slices, pads and cats into reductions and
        persistent ops."""
        rng = self.rng
        for _ in range(rng.randint(1, 2)):
            axes = self.draw_axes(rng.choice((2, 2, 3, 4)), expand=0.35, bcast=0.05)
            self.input_var(axes, rng.choice((torch.float32,) * 3 + (torch.bfloat16, torch.float16)),
                           layout=rng.choice(("permuted", "sliced", "permuted_sliced", "rows", "rows")))
        v = None
        for _ in range(rng.randint(1, 2)):
            v = self.attempt(rng.choice((self.view_op, self.resize_op))) or v
        self.attempt(self.reduce_after, v if v is not None else self.pick())
        self.classic_ops(0, 1)

    def fam_reduce_view(self) -> None:
        """Reductions (sum/max/min/prod, var_mean, softmax) right after reshapes and slices."""
        rng = self.rng
        self.family_input(min_rank=rng.choice((1, 2, 2, 3)))
        for _ in range(rng.randint(1, 2)):
            v = self.attempt(rng.choice((self.op_merge, self.op_split, self.op_split, self.op_expand_reshape,
                                         self.op_flatten_roundtrip, self.op_slice, self.op_slice, self.op_pad)))
            if v is not None and rng.random() < 0.3:
                v = self.attempt(self.view_op, v) or v
            self.attempt(self.reduce_after, v if v is not None else self.pick())
        self.classic_ops(0, 1)

    def fam_big(self) -> None:
        """Inputs of 1e5 .. 4M elements (odd extents next to large ones): large grids,
        transposes, reductions and a view or two."""
        rng = self.rng
        for _ in range(rng.randint(1, 2)):
            axes = self.draw_axes(len(self.sizes), expand=0.1, bcast=0.05, labels=range(len(self.sizes)))
            self.input_var(axes, rng.choice((torch.float32, torch.float32, torch.bfloat16, torch.float16)),
                           layout=rng.choice(("contiguous", "contiguous", "permuted", "sliced", "rows")))
        ops = {"op_unary": 3, "op_binary": 4, "op_permute": 3, "op_reduction": 4, "op_softmax": 2, "op_var_mean": 2,
               "op_broadcast": 1, "op_cast": 1}
        names, weights = zip(*ops.items())
        for _ in range(rng.randint(1, 4)):
            snap = self._snapshot()
            try:
                if rng.random() < 0.2:
                    rng.choice((self.view_op, self.resize_op))()
                else:
                    getattr(self, rng.choices(names, weights)[0])()
            except _Reject:
                self._restore(snap)

    def fam_rotary(self) -> None:
        """Rotary embeddings as Thunder emits them for GPT-J (interleaved pairs: reshape the
        head dim to (D/2, 2), slice each half, rotate with fp32 cos / sin expanded over batch
        and heads, cast to bf16, broadcast back to (..., 1), pad to (..., 2), add) and NeoX
        (rotate_half: slices and a cat; partial rotary: a cat with the unrotated rest), on a
        bf16 (B, H, S, D) input laid out as (B, S, H, D)."""
        rng = self.rng
        B, S, H, D = 0, 1, 2, 3  # labels of the universe axes
        b_, s_, h_, d_ = self.sizes
        dt = rng.choice((torch.bfloat16, torch.bfloat16, torch.float16, torch.float32))
        x = self.input_var(((B, "i"), (H, "i"), (S, "i"), (D, "i")), dt, layout="permuted", phys=[0, 2, 1, 3])
        self.tags.add("rotary")
        xf = self.as_float(x)
        xp = self.emit(f"fd.ops.permute({xf.name}, dims=[0, 2, 1, 3])", f"{xf.name}.permute([0, 2, 1, 3])",
                       ((B, "i"), (S, "i"), (H, "i"), (D, "i")), exact=True, bound=xf.bound, perturb=None, pool=False)
        style = rng.choice(("gptj", "gptj", "neox", "neox_partial"))
        self.tags.add(f"rotary_{style}")
        rot = d_ if style != "neox_partial" or d_ < 4 else rng.choice([r for r in range(2, d_, 2)])
        half = rot // 2
        HL = self.new_label(half)
        RL = self.new_label(rot) if rot != d_ else D

        def trig(label: int) -> Var:
            # fp32, strides (0, n, 0, 1): an (S, n) table expanded over batch and heads
            return self.input_var(((B, "e" if b_ > 1 else "b"), (S, "i"), (H, "e" if h_ > 1 else "b"), (label, "i")),
                                  torch.float32, layout="contiguous")

        def sl(v: Var, start: int, stop: int, label: int, last: int) -> Var:
            shp = list(self.shape(v.axes))
            starts, ends = [0] * (len(shp) - 1) + [start], shp[:-1] + [stop]
            idx = ", ".join([":"] * (len(shp) - 1) + [f"{start}:{stop}"])
            axes = v.axes[:-1] + ((label, "i"),)
            return self.emit(f"fd.ops.slice({v.name}, start_indices={starts}, end_indices={ends})", f"{v.name}[{idx}]",
                             axes, exact=v.exact, bound=v.bound, perturb=None, pool=False)

        def binop(op: str, a: Var, b: Var) -> Var:
            return self.emit(f"fd.ops.{op}({a.name}, {b.name})", f"torch.{op}({a.name}, {b.name})",
                             self.merged(a.axes, b.axes), exact=False, bound=a.bound + b.bound, pool=False)

        cos, sin = trig(HL if style == "gptj" else RL), trig(HL if style == "gptj" else RL)
        out_dt = torch.bfloat16 if dt is torch.float32 else dt
        if style == "gptj":
            P = self.new_label(2)
            one = self.new_label(1)
            xr = self.emit(f"fd.ops.reshape({xp.name}, new_shape=[{b_}, {s_}, {h_}, {half}, 2])",
                           f"{xp.name}.reshape([{b_}, {s_}, {h_}, {half}, 2])",
                           ((B, "i"), (S, "i"), (H, "i"), (HL, "i"), (P, "i")), exact=True, bound=xp.bound,
                           perturb=None, pool=False)
            halves = []
            for j in (0, 1):
                h1 = sl(xr, j, j + 1, one, 1)
                if rng.random() < 0.5:
                    sq = self.emit(f"fd.ops.squeeze({h1.name}, dims=[4])", f"{h1.name}.squeeze(4)", h1.axes[:-1],
                                   exact=True, bound=h1.bound, perturb=None, pool=False)
                else:
                    sq = self.emit(f"fd.ops.reshape({h1.name}, new_shape=[{b_}, {s_}, {h_}, {half}])",
                                   f"{h1.name}.reshape([{b_}, {s_}, {h_}, {half}])", h1.axes[:-1], exact=True,
                                   bound=h1.bound, perturb=None, pool=False)
                halves.append(sq)
            x1, x2 = halves
            o1 = binop("sub", binop("mul", x1, cos), binop("mul", x2, sin))
            o2 = binop("add", binop("mul", x2, cos), binop("mul", x1, sin))
            padded = []
            for o, w in ((o1, [0, 1]), (o2, [1, 0])):
                c = self.cast_round(o, out_dt)
                shp5 = [b_, s_, h_, half, 1]
                bc = self.emit(f"fd.ops.broadcast_in_dim({c.name}, shape={shp5}, broadcast_dims=[0, 1, 2, 3])",
                               f"{c.name}.unsqueeze(-1)", c.axes + ((P, "b"),), exact=c.exact, bound=c.bound,
                               perturb=None, pool=False)
                padded.append(self.emit(f"fd.ops.pad({bc.name}, {w})", f"torch.nn.functional.pad({bc.name}, {w})",
                                        c.axes + ((P, "i"),), exact=c.exact, bound=c.bound, perturb=None, pool=False))
            s = self.emit(f"fd.ops.add({padded[0].name}, {padded[1].name})",
                          f"torch.add({padded[0].name}, {padded[1].name})", padded[0].axes, exact=False,
                          bound=padded[0].bound + padded[1].bound, pool=False)
            out = self.emit(f"fd.ops.reshape({s.name}, new_shape=[{b_}, {s_}, {h_}, {d_}])",
                            f"{s.name}.reshape([{b_}, {s_}, {h_}, {d_}])", ((B, "i"), (S, "i"), (H, "i"), (D, "i")),
                            exact=False, bound=s.bound, perturb=None, pool=False)
        else:
            xr = xp if rot == d_ else sl(xp, 0, rot, RL, rot)
            x1, x2 = sl(xr, 0, half, HL, half), sl(xr, half, rot, HL, half)
            n2 = self.emit(f"fd.ops.neg({x2.name})", f"torch.neg({x2.name})", x2.axes, exact=True, bound=x2.bound,
                           perturb=None, pool=False)
            rh = self.emit(f"fd.ops.cat([{n2.name}, {x1.name}], dim=-1)", f"torch.cat([{n2.name}, {x1.name}], dim=-1)",
                           xr.axes, exact=True, bound=xr.bound, perturb=None, pool=False)
            o = binop("add", binop("mul", xr, cos), binop("mul", rh, sin))
            if rot != d_:
                rest = sl(xp, rot, d_, self.new_label(d_ - rot), d_ - rot)
                o = self.emit(f"fd.ops.cat([{o.name}, {rest.name}], dim=3)", f"torch.cat([{o.name}, {rest.name}], dim=3)",
                              ((B, "i"), (S, "i"), (H, "i"), (D, "i")), exact=False, bound=max(o.bound, rest.bound),
                              perturb=None, pool=False)
                self.tags.add("rotary_partial")
            out = self.cast_round(o, out_dt)
        if rng.random() < 0.6:  # back to (B, H, S, D), as attention reads it
            out = self.emit(f"fd.ops.permute({out.name}, dims=[0, 2, 1, 3])", f"{out.name}.permute([0, 2, 1, 3])",
                            ((B, "i"), (H, "i"), (S, "i"), (D, "i")), exact=out.exact, bound=out.bound, perturb=None,
                            pool=False)
        self.pool.append(out)
        if rng.random() < 0.3:
            self.classic_ops(1, 1)

    def cast_round(self, v: Var, dt: torch.dtype) -> Var:
        """v cast to dt (a rounding where dt is narrower)."""
        if v.dtype is dt:
            return v
        lossy = dt in NARROW and not v.exact
        return self.emit(f"fd.ops.cast({v.name}, dtype={FD_DT[dt]})", f"{v.name}.to({TWIN_DT[dt]})", v.axes,
                         exact=v.exact, bound=v.bound, perturb=("round", dt, v.name) if lossy else None, pool=False)

    def op_dropout(self, x: Var | None = None) -> Var | None:
        """Dropout: uniform random numbers (an output: the twin reads fuser's values), a mask
        rand < p, where(mask, x, 0), a scale by 1/p; then often a sum or a residual add."""
        rng = self.rng
        x = x or self.pick_or_input(lambda v: v.dtype.is_floating_point and len(v.axes) > 0)
        if x is None or not x.dtype.is_floating_point:
            return None
        p = rng.choice((0.5, 0.8, 0.9, 0.25))
        seed, offset = rng.randrange(1000), rng.choice((0, 4, 8))
        seed_fd = str(seed)
        if rng.random() < 0.3:
            seed_fd, _ = self.scalar_input(torch.int64)
            self.input_exprs[-1] = repr(seed)
            self.meta[seed_fd] = seed
        name = f"t{self.n}"
        if rng.random() < 0.5:
            fd_rhs = f"fd.ops.rand_like({x.name}, rng_seed={seed_fd}, rng_offset={offset})"
            axes, dt = x.axes, x.dtype
        else:
            axes = tuple((k, "b" if kd == "b" else "i") for k, kd in x.axes)
            dt = rng.choice((torch.float32, torch.float32, torch.bfloat16))
            shp_fd, _ = self.shape_src(axes)
            if rng.random() < 0.4:
                shp_fd = f"{x.name}.shape()"
            fd_rhs = f"fd.ops.uniform(0.0, 1.0, shape={shp_fd}, rng_seed={seed_fd}, rng_offset={offset}, dtype={FD_DT[dt]})"
        if dt in NARROW:  # torch compares a half / bfloat16 tensor with p rounded to its type
            p = rng.choice((0.5, 0.75, 0.875, 0.25))
        self.meta["RNG"][name] = torch.empty(self.shape(axes), dtype=dt, device="meta")
        twin = f'RNG["{name}"]' + (".to(F)" if dt is torch.float32 else "")
        r = self.emit(fd_rhs, twin, axes, exact=True, bound=1.0, perturb=None, pool=False,
                      rng=RngCheck("uniform", 0.0, 1.0))
        self.rng_vars.append(r)
        self.rng_feeds.append(r.name)
        self.tags.add("rng_feeds_ops")
        keep = self.emit(f"fd.ops.lt({r.name}, {p!r})", f"torch.lt({r.name}, {p!r})", axes, exact=True, bound=1.0,
                         pool=False)
        (k2, x2), axes2 = self.align([keep, x])
        zero = 0.0
        y = self.emit(f"fd.ops.where({k2.name}, {x2.name}, {zero!r})", f"torch.where({k2.name}, {x2.name}, {zero!r})",
                      axes2, exact=x.exact, bound=x.bound, perturb=None, pool=False)
        scale = 1.0 / p
        self.tags.add("dropout")
        return self._finish_binary("mul", y, None, repr(scale), repr(scale), scale, axes2, scale in (2.0, 4.0))

    def residual(self, v: Var) -> None:
        """v combined with another pool tensor (a residual add, a scale)."""
        others = [u for u in self.pool if u is not v]
        if others:
            self._combine(v, self.pick(pool=others))

    def fam_dropout(self) -> None:
        """RNG feeding later ops: dropout masks, then a reduction, a residual add, a norm."""
        rng = self.rng
        self.family_input(dtype=rng.choice((torch.float32, torch.float32, torch.bfloat16)))
        z = self.attempt(self.op_dropout)
        if z is not None and rng.random() < 0.6:
            self.attempt(rng.choice((self.reduce_after, self.reduce_after, self.residual)), z)
        self.classic_ops(0, 2)

    # --- families: normalisation backward ---------------------------------------------------------------
    def _sum(self, v: Var, dims: list[int], keepdim: bool, *, pool: bool) -> Var:
        """sum(v, dims) of a float32 `v`."""
        n = math.prod(self.shape(v.axes)[p] for p in dims)
        axes = reduced_axes(v, dims, keepdim)
        sq = frozenset(p for p, (k, kind) in enumerate(axes) if kind == "b") if keepdim else frozenset()
        self._reduce_tags(v, dims)
        return self.emit(f"fd.ops.sum({v.name}, dims={dims}, keepdim={keepdim})",
                         f"torch.sum({v.name}, dim={dims}, keepdim={keepdim})", axes, exact=False,
                         bound=v.bound * max(n, 1), perturb=("sum", v.name, tuple(dims), keepdim, n, None), pool=pool,
                         squeezable=sq)

    def _mul(self, a: Var, b: Var | float, *, pool: bool = False) -> Var:
        """a · b of float32 values (b a tensor broadcast to a's axes, or a number)."""
        if isinstance(b, float):
            return self.emit(f"fd.ops.mul({a.name}, {b!r})", f"torch.mul({a.name}, {b!r})", a.axes, exact=False,
                             bound=a.bound * abs(b), pool=pool, squeezable=a.squeezable)
        (a, b), axes = self.align([a, b])
        return self.emit(f"fd.ops.mul({a.name}, {b.name})", f"torch.mul({a.name}, {b.name})", axes, exact=False,
                         bound=a.bound * b.bound, pool=pool)

    def fam_norm_bwd(self) -> None:
        """Normalisation backward as Thunder emits it (RMSNorm, LayerNorm): the sum along
        each row of dy·w·x̂ broadcast back into the row's gradient, beside sums across the
        rows of the same inputs (the weight's and the bias's gradients), with x̂ = x·rstd
        from a per-row input: the fusions the inner-outer persistent scheduler takes (seed
        001), at odd row lengths and counts."""
        rng = self.rng
        dt = rng.choice((torch.float32, torch.bfloat16, torch.bfloat16, torch.float16))

        def layout() -> str:
            return rng.choice(("contiguous", "contiguous", "contiguous", "rows", "permuted"))

        axes = self.draw_axes(expand=0.08, bcast=0.04, labels=range(len(self.sizes)))  # (2 or 3 axes)
        x = self.input_var(axes, dt, layout=layout())
        dy = self.input_var(x.axes, dt, layout=layout())
        rank = len(x.axes)
        inner = [rank - 1] if rank == 2 or rng.random() < 0.75 else [rank - 2, rank - 1]
        outer = [p for p in range(rank) if p not in inner]
        if len(inner) > 1:
            self.tags.add("norm_bwd_two_row_axes")
        xf, gf = self.as_float(x), self.as_float(dy)
        if rng.random() < 0.5:  # x̂ = x · rstd, one float per row
            rstd = self.input_var(tuple(x.axes[p] for p in outer), torch.float32, layout="contiguous")
            xf = self._mul(xf, self.positive(rstd))
            self.tags.add("norm_bwd_rstd")
        gw = gf
        if rng.random() < 0.6:  # dy · w, the weight along the row
            w = self.input_var(tuple(x.axes[p] for p in inner), dt, layout="contiguous")
            gw = self._mul(gf, self.as_float(w))
            self.tags.add("norm_bwd_weight")
        dot = self._mul(gw, xf)
        n = math.prod(self.shape(x.axes)[p] for p in inner)
        keepdim = rng.random() < 0.5
        s = self._sum(dot, inner, keepdim, pool=False)
        sb = self.broadcast_back(s, dot, inner, keepdim)
        t = self._mul(self._mul(xf, sb), 1.0 / max(n, 1))
        (a, b), axes = self.align([gw, t])
        self.emit(f"fd.ops.sub({a.name}, {b.name})", f"torch.sub({a.name}, {b.name})", axes, exact=False,
                  bound=a.bound + b.bound)  # the row's gradient
        if outer:
            self._sum(self._mul(gf, xf), outer, False, pool=True)  # the weight's gradient
            if rng.random() < 0.5:
                self._sum(gf, outer, False, pool=True)  # the bias's gradient
                self.tags.add("norm_bwd_bias")
        self.tags.add("norm_bwd")

    # --- families: indexing ------------------------------------------------------------------------------
    def index_tensor(self, axes: tuple, n: int, *, unique: int | None = None) -> Var:
        """An integer tensor of positions in [0, n) with `axes`: an input (any layout,
        stride 0 along its "e" axes), or computed from an iota along one axis (an affine map
        taken mod n) broadcast along the others (unique: varying along that logical dim, so
        distinct along it where its extent is at most n)."""
        rng = self.rng
        dt = rng.choice((torch.int64, torch.int64, torch.int32))
        iters = [p for p, (k, kd) in enumerate(axes) if kd == "i" and self.sizes[k] > 0]
        if rng.random() < 0.6 or not iters or n <= 0:
            if unique is not None:
                axes = tuple((ax[0], "i") if q == unique else ax for q, ax in enumerate(axes))
            self.tags.add("index_input")
            v = self.input_var(axes, dt, index_of=(n, unique))
            if n <= 1:  # all 0
                v.pat = self.const_pat(v.axes)
            if any(kd == "e" for _, kd in axes):
                self.tags.add("index_input_expanded")
            return v
        self.tags.add("index_computed")
        p = unique if unique is not None else rng.choice(iters)
        k = axes[p][0]
        m = self.sizes[k]
        start, step = (rng.randrange(n), 1) if unique is not None else (rng.randrange(n), rng.choice((1, 2, 3, 5)))
        it = self.emit(f"fd.ops.iota({m}, {start}, {step}, dtype={FD_DT[dt]})",
                       f"torch.arange({m}, dtype={TWIN_DT[dt]}, device=DEVICE) * {step} + {start}", ((k, "i"),),
                       exact=True, bound=start + step * m, pool=False)
        md = self.emit(f"fd.ops.remainder({it.name}, {n})", f"torch.remainder({it.name}, {n})", ((k, "i"),),
                       exact=True, bound=float(n), pool=False, pat=self.const_pat(((k, "i"),)) if n == 1 else None)
        if len(axes) == 1:
            return md
        shp = list(self.shape(axes))
        # (the same positions along the other axes: constant along them)
        same = self.const_pat([ax for q, ax in enumerate(axes) if q != p])
        if any(kd == "b" for q, (_, kd) in enumerate(axes) if q != p) and rng.random() < 0.5:
            flags = [q != p for q in range(len(axes))]
            b = self.emit(f"fd.ops.broadcast({md.name}, is_broadcast_dim={flags})",
                          md.name + "".join(f".unsqueeze({q})" for q in range(len(axes)) if q != p),
                          tuple(ax if q == p else (ax[0], "b") for q, ax in enumerate(axes)), exact=True, bound=md.bound,
                          perturb=None, pool=False)
            if all(kd == "b" for q, (_, kd) in enumerate(axes) if q != p):
                return b
            return self.emit(f"fd.ops.expand({b.name}, shape={shp})", f"{b.name}.expand({shp})", axes, exact=True,
                             bound=md.bound, perturb=None, pool=False, pat=same)
        twin = md.name + "".join(f".unsqueeze({q})" for q in range(len(axes)) if q != p)
        return self.emit(f"fd.ops.broadcast_in_dim({md.name}, shape={shp}, broadcast_dims=[{p}])",
                         f"{twin}.expand({shp})", axes, exact=True, bound=md.bound, perturb=None, pool=False, pat=same)

    def lookup_table(self) -> Var:
        """The tensor an index op reads: a pool tensor or a fresh input, rank >= 1, no
        zero extents."""
        rng = self.rng

        def ok(v: Var) -> bool:
            return 1 <= len(v.axes) <= 4 and all(n > 0 for n in self.shape(v.axes)) and v.dtype is not torch.bool

        x = self.pick(ok) if rng.random() < 0.4 else None
        if x is None:
            x = self.family_input(dtype=rng.choice((torch.float32,) * 4 + (torch.bfloat16, torch.int64)))
            if not ok(x):
                raise _Reject("a lookup table with no elements")
        return x

    def lookup_pat(self, x: Var, p: int, axes: tuple) -> dict | None:
        """Where the table x of a lookup along its axis p is constant along it, the result
        (of `axes`) is what x is wherever the index points: constant along the index's
        axes, as x is along the others (None: x varies along p)."""
        if not self.is_const(x, p):
            return None
        pat = self.const_pat(axes)
        pat.update(self.infer_pat(x.name, axes))
        return pat

    def op_index_select(self) -> Var:
        rng = self.rng
        x = self.lookup_table()
        p = rng.randrange(len(x.axes))
        n = self.shape(x.axes)[p]
        lab = self.new_label(rng.choice((1, 3, 7, 16, 33, 129, 1025)))
        idx = self.index_tensor(((lab, "e" if rng.random() < 0.15 else "i"),), n)
        axes = tuple((lab, "i") if q == p else ax for q, ax in enumerate(x.axes))
        self.tags.add("index_select")
        return self.emit(f"fd.ops.index_select({x.name}, {idx.name}, dim={p})",
                         f"torch.index_select({x.name}, {p}, {idx.name})", axes, exact=x.exact, bound=x.bound,
                         perturb=None, pat=self.lookup_pat(x, p, axes))

    def op_select(self) -> Var:
        rng = self.rng
        x = self.lookup_table()
        p = rng.randrange(len(x.axes))
        n = self.shape(x.axes)[p]
        i = rng.randrange(-n, n)
        i_fd = str(i)
        if rng.random() < 0.3:
            i_fd, _ = self.scalar_input(torch.int64)
            self.input_exprs[-1] = repr(i)
            self.meta[i_fd] = i
        self.tags.add("select")
        return self.emit(f"fd.ops.select({x.name}, {i_fd}, dim={p})", f"{x.name}.select({p}, {i_fd})",
                         x.axes[:p] + x.axes[p + 1:], exact=x.exact, bound=x.bound, perturb=None)

    def op_gather(self, take_along: bool = False) -> Var:
        """torch.gather (an index no larger than the tensor off the gathered axis) or
        take_along_axis (the same extents, or broadcast: issue 34's wrong results came from
        an index broadcast along an axis the tensor varies on)."""
        rng = self.rng
        x = self.lookup_table()
        rank = len(x.axes)
        p = rng.randrange(rank) if rng.random() < 0.5 else rank - 1
        n = self.shape(x.axes)[p]
        lab = self.new_label(rng.choice((1, 2, 3, 7, 16, 33, 129)))
        axes = []
        for q, (k, kd) in enumerate(x.axes):
            if q == p:
                axes.append((lab, "i"))
            elif kd == "b":
                axes.append((k, "i" if take_along and self.sizes[k] > 1 and rng.random() < 0.3 else "b"))
            else:
                r = rng.random()
                axes.append((k, "b" if r < 0.3 else "e" if r < 0.45 else "i"))
        idx = self.index_tensor(tuple(axes), n)
        out = []
        for q, ((k, kd), (ki, kdi)) in enumerate(zip(x.axes, idx.axes)):
            if q == p:
                out.append((lab, "i"))
            elif take_along:
                out.append((k, "b" if kd == "b" and kdi == "b" else "i"))
            else:
                out.append((k, "b" if kdi == "b" else "i"))
        if any(kdi == "b" and kd != "b" for (_, kd), (_, kdi) in zip(x.axes, idx.axes)):
            self.tags.add("take_along_axis_broadcast_index" if take_along else "gather_size1_index")
        if any(kdi == "e" for q, (_, kdi) in enumerate(idx.axes) if q != p):
            self.tags.add("index_expanded_other_axis")
            if not take_along:
                # fuser's kernels leave a gather whose index is expanded along an axis the
                # tensor varies on to the reference executor (tests/indexing_cases.py:
                # gather_index_expanded_along_other_dim, kernel=False)
                self.allowed_fallbacks.append(r"is expanded but the lookup's is not")
        if take_along:
            self.tags.add("take_along_axis")
            return self.emit(f"fd.ops.take_along_axis({x.name}, {idx.name}, dim={p})",
                             f"torch.take_along_dim({x.name}, {idx.name}.long(), dim={p})", tuple(out), exact=x.exact,
                             bound=x.bound, perturb=None, pat=self.lookup_pat(x, p, tuple(out)))
        self.tags.add("gather")
        return self.emit(f"fd.ops.gather({x.name}, {idx.name}, dim={p})", f"torch.gather({x.name}, {p}, {idx.name}.long())",
                         tuple(out), exact=x.exact, bound=x.bound, perturb=None, pat=self.lookup_pat(x, p, tuple(out)))

    def op_scatter(self) -> Var:
        """torch.scatter with indices distinct along the scattered axis (duplicates would
        make the result depend on the order of the writes)."""
        rng = self.rng
        x = self.lookup_table()
        rank = len(x.axes)
        p = rng.randrange(rank)
        n = self.shape(x.axes)[p]
        m = rng.randint(1, n)
        lab = self.new_label(m)
        axes = tuple((lab, "i") if q == p else (k, "b" if kd == "b" else "e" if rng.random() < 0.2 else "i")
                     for q, (k, kd) in enumerate(x.axes))
        idx = self.index_tensor(axes, n, unique=p)
        src_axes = tuple((k, "b" if kd == "b" else "i") for k, kd in idx.axes)
        self.tags.add("scatter")
        if rng.random() < 0.25:
            value = 1.5 if x.dtype.is_floating_point else 3
            return self.emit(f"fd.ops.scatter({x.name}, {idx.name}, {value!r}, dim={p})",
                             f"torch.scatter({x.name}, {p}, {idx.name}.long(), {value!r})",
                             tuple((k, "i" if kd == "e" else kd) for k, kd in x.axes), exact=x.exact,
                             bound=max(x.bound, 1.5), perturb=None)
        src = self.input_var(src_axes, x.dtype)
        return self.emit(f"fd.ops.scatter({x.name}, {idx.name}, {src.name}, dim={p})",
                         # (the twin computes a low-precision intermediate in its float type)
                         f"torch.scatter({x.name}, {p}, {idx.name}.long(), {src.name}.to({x.name}.dtype))",
                         tuple((k, "i" if kd == "e" else kd) for k, kd in x.axes), exact=x.exact and src.exact,
                         bound=max(x.bound, src.bound), perturb=None)

    def after_lookup(self, v: Var) -> None:
        """Ops after an index op that notice a wrong broadcast flag on its result: an add of
        a full tensor of its shape, a sum over its rows, a normalisation."""
        rng = self.rng
        if not v.axes:
            return
        r = rng.random()
        if r < 0.4:
            full = self.input_var(tuple((k, "b" if kd == "b" else "i") for k, kd in v.axes),
                                  v.dtype if v.dtype.is_floating_point else torch.float32)
            (a, b), axes = self.align([v, full])
            self.tags.add("lookup_plus_full")
            self._finish_binary("add", a, b, b.name, b.name, b.bound, axes, False)
        elif r < 0.8:
            dims = [0] if len(v.axes) > 1 and rng.random() < 0.5 else [len(v.axes) - 1]
            self.tags.add("lookup_then_reduce")
            self.op_reduction(v, dims)
        else:
            self.reduce_after(v, new=False)

    def fam_index(self) -> None:
        """take_along_axis / gather / index_select / select / scatter with index inputs
        (contiguous, permuted, stride 0) and computed indices, then ops that would notice a
        wrong broadcast flag."""
        rng = self.rng
        for _ in range(rng.randint(1, 2)):
            op = rng.choice(("index_select", "index_select", "select", "gather", "take_along_axis",
                             "take_along_axis", "take_along_axis", "scatter"))
            fn = (lambda: self.op_gather(take_along=True)) if op == "take_along_axis" else getattr(self, f"op_{op}")
            v = self.attempt(fn)
            if v is not None and rng.random() < 0.8:
                self.attempt(self.after_lookup, v)
        self.classic_ops(0, 1)

    def build_family(self) -> tuple[list[str], dict[int, RngCheck]]:
        """A case of self.family: its recipe, then the outputs (the recipe's values are the
        newest sinks, so they reach the outputs)."""
        getattr(self, f"fam_{self.family}")()
        if not self.pool and not self.rng_vars:
            self.family_input()
        return self.outputs()

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
        # random values later ops read must be outputs (the twin takes fuser's values of them)
        fed = [v for v in self.rng_vars if v.name in self.rng_feeds]
        rng_outs = (fed + [v for v in self.rng_vars if v not in fed][-2:])[:max(2, len(fed))]
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
                         exact=v.exact, bound=v.bound, perturb=None if v.exact else ("round", dt, v.name), pool=False)

    # --- a whole case ------------------------------------------------------------------------
    def _snapshot(self) -> tuple:
        return (len(self.fd_lines), len(self.twin_lines), len(self.twin_params), len(self.input_exprs),
                len(self.pool), len(self.inputs), len(self.rng_vars), set(self.tags), set(self.used), self.n,
                len(self.rng_feeds), len(self.allowed_fallbacks))

    def _restore(self, snap: tuple) -> None:
        nf, nt, np_, ni, npool, ninp, nrng, tags, used, n, nfeed, nallow = snap
        del self.fd_lines[nf:], self.twin_lines[nt:], self.twin_params[np_:], self.input_exprs[ni:]
        del self.pool[npool:], self.inputs[ninp:], self.rng_vars[nrng:]
        del self.rng_feeds[nfeed:], self.allowed_fallbacks[nallow:]
        self.tags, self.used, self.n = tags, used, n

    OPS = {
        "op_unary": 10, "op_binary": 18, "op_cast": 8, "op_where": 6, "op_broadcast": 7, "op_reduction": 14,
        "op_var_mean": 5, "op_softmax": 3, "op_permute": 4, "op_factory": 5, "op_rng": 2, "op_segment_set": 1,
        "op_squeeze": 2, "op_ternary": 3, "op_reshape": 1, "op_resize": 1,
    }

    def build(self) -> tuple[list[str], dict[int, RngCheck]]:
        """Draw the case's program; returns its outputs and the random ones' checks."""
        if self.family != "classic":
            return self.build_family()
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


def case_family(seed: int, index: int) -> str:
    """The family case `index` of the mixed stream `seed` comes from (drawn apart from the
    case's own draws, so a classic case is the same with or without --family classic)."""
    r = random.Random(f"family {seed} {index}")
    return r.choices(FAMILIES, [FAMILY_WEIGHTS[f] for f in FAMILIES])[0]


def generate(seed: int, index: int, family: str | None = None) -> Case:
    """Case `index` of the stream `seed` (a pure function of both, and of `family`: None
    draws it from the mix FAMILY_WEIGHTS, a name makes every case one of that family)."""
    family = case_family(seed, index) if family is None else family
    if family not in FAMILY_WEIGHTS:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")
    g = _Gen(random.Random(seed * 1_000_003 + index), family)
    outputs, checks = g.build()
    tags = g.tags | {f"family_{family}"}
    return Case(seed, index, g.sizes, g.fd_lines, g.twin_params, g.twin_lines, outputs, g.input_exprs, checks,
                tags, pass_device=not g.inputs, family=family, allowed_fallbacks=tuple(g.allowed_fallbacks),
                rng_feeds=tuple(g.rng_feeds))


# --- running a case ----------------------------------------------------------------------------------

#: perturbed twin runs per case (at least len(ROUND_BIAS), so that both neighbours of a
#: narrow value at a rounding boundary are taken); torch's own float32 run counts as one
#: more sample of how far an implementation may land from the truth (see `judge_output`)
NOISE_RUNS = 3
#: an output whose judged elements are fewer than this share of its float elements is the
#: generator's failure (it made a value it cannot check), never a pass
MIN_JUDGED = 0.5
#: NotLowerable reasons every case accepts: a segment with no elements to compute (or whose
#: result an empty accumulator does not hold) runs on the reference executor by design
EXPECTED_FALLBACKS = (r"has no elements", r"iteration space is empty", r"mean over no elements",
                      r"rows with no elements", r"reduced axes with no elements")
#: Result.status values that fail a run
STATUSES = ("ok", "mismatch", "crash", "fallback", "generator")


@dataclass
class Result:
    """One case's outcome."""

    case: Case
    #: "ok"; "mismatch" (fuser's values, dtypes or shapes differ from torch's); "crash"
    #: (fuser raised); "fallback" (on CUDA, a segment that should run a generated kernel ran
    #: on the reference executor); "generator" (the fuzzer's own failure: a twin or input
    #: that failed, an output too ill-conditioned to judge)
    status: str
    message: str = ""
    device: str = "cpu"
    #: float elements compared, and how many of them were too ill-conditioned to judge
    elements: int = 0
    excluded: int = 0
    #: the last execute's segments: (scheduler, generates kernels, ran its kernel: True /
    #: False (fell back) / None (not tried)) each; and those fallbacks EXPECTED_FALLBACKS allow
    segments: list = field(default_factory=list)
    expected_fallbacks: int = 0

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def repro(self) -> str:
        return self.case.repro(self.device, f"{self.status}: {self.message}")


def _namespace(device: str) -> dict[str, Any]:
    from fuser import DataType, FusionDefinition

    return {"torch": torch, "DataType": DataType, "FusionDefinition": FusionDefinition, "DEVICE": device,
            "make_input": make_input, "make_index": make_index, "F": torch.float32}


def build_inputs(case: Case, device: str) -> list[Any]:
    """The case's inputs on `device` (what its repro's `inputs = [...]` makes)."""
    ns = _namespace(device)
    exec(case.inputs_source(), ns)  # noqa: S102
    return ns["inputs"]


def run_twin(case: Case, inputs: Sequence[Any], device: str, ftype: torch.dtype, noise_seed: int | None = None,
             rng_values: dict[str, Any] | None = None, truth_ns: dict[str, Any] | None = None) -> list[Any]:
    """The twin's outputs with F = ftype; with noise_seed, every inexact value is perturbed
    by about one rounding of the type fuser computes it in (see the docstring; `truth_ns`,
    the float64 run's namespace from `twin_namespace`, saves computing it again). A case
    whose later ops read random values (`case.rng_feeds`) needs fuser's values of them:
    `rng_values` maps those output names to fuser's outputs."""
    ns = twin_namespace(case, inputs, device, ftype, noise_seed, rng_values, truth_ns)
    return [ns[n] for n in case.outputs]


def twin_namespace(case: Case, inputs: Sequence[Any], device: str, ftype: torch.dtype, noise_seed: int | None = None,
                   rng_values: dict[str, Any] | None = None, truth_ns: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every value the twin computes, by name (see run_twin). In the truth run (F =
    float64, no noise_seed) every half / bfloat16 value the program rounds is the correctly
    rounded float64 value (`_round_truth`); a noise run rounds them as `_round_near` says,
    biased by its seed (`ROUND_BIAS`)."""
    missing = [n for n in case.rng_feeds if not rng_values or n not in rng_values]
    if missing:
        raise ValueError(f"case {case.id}: the twin reads fuser's random outputs {missing}: pass rng_values")
    if noise_seed is not None and truth_ns is None:
        truth_ns = twin_namespace(case, inputs, device, torch.float64, rng_values=rng_values)
    ns: dict[str, Any] = {"torch": torch, "F": ftype, "DEVICE": device, "RNG": dict(rng_values or {})}
    ns.update(zip(case.twin_params, inputs))
    gen = torch.Generator().manual_seed(noise_seed) if noise_seed is not None else None
    truth = ftype is torch.float64 and noise_seed is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for line in case.twin_lines:
            exec(line.text, ns)  # noqa: S102
            if gen is not None and line.perturb is not None:
                _perturb(line, ns, gen, truth_ns, bias=_round_bias(noise_seed))
            elif truth and line.perturb is not None:
                _round_truth(line, ns)
    return ns


#: how noise run k (seeds 1, 2, 3, ...) rounds a half / bfloat16 value that lies within its
#: error bound of a rounding boundary (`_round_near`): +1 to the upper neighbour, -1 to the
#: lower, 0 its random draw (or, where the draw gives the truth's rounding, the other side).
#: Both neighbours are then always explored, whichever the truth took.
ROUND_BIAS = (1, -1, 0)


def _round_bias(noise_seed: int) -> int:
    return ROUND_BIAS[(noise_seed - 1) % len(ROUND_BIAS)]


def _to_narrow(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """float64 `x` rounded once, to nearest (ties to even), to the half / bfloat16 `dt`.
    PyTorch converts float64 to half / bfloat16 through float32, which rounds twice: the
    variance 3.7001953664 of seed 9609 case 355 becomes 3.7001953125 (float32, exactly a
    half midpoint), then 3.69921875 (ties to even), where the correctly rounded half is
    3.701171875. Where the other neighbour of torch's result, on x's side, is nearer to x,
    it is taken (a tie cannot be double rounded: a half / bfloat16 midpoint is a float32)."""
    x = x.double()
    r = x.to(dt)
    rd = r.double()
    inf = torch.full_like(r, math.inf)
    other = torch.nextafter(r, torch.where(x > rd, inf, -inf))
    better = torch.isfinite(rd) & ((other.double() - x).abs() < (rd - x).abs())
    return torch.where(better, other, r)


def _round_truth(line: TwinLine, ns: dict[str, Any]) -> None:
    """The truth run's half / bfloat16 values of `line`, made the correctly rounded value
    (`_to_narrow`) of the line computed in float64 from the truth's operands (`_wide`):
    what fuser's float32 math and one rounding approximate, independent of how PyTorch
    computes that op in that dtype on that device. (Seed 9605 case 82: PyTorch's CPU
    bfloat16 rsqrt of a small tensor rounds twice, rsqrt(bf16 1.0078125) = 1.0 where
    0.99609375 is correct, and the truth carried the 1-ulp error on. Writing such ops
    `op(x.float()).to(dt)` in the twin text was the other way: it changes the repro's
    eager code, drops PyTorch's own kernel as the eager float32 sample of `judge_output`
    (that run keeps it: one more implementation), and its float64 run would still convert
    to dt through float32. This covers every narrow rounding, casts and reductions too.)"""
    kind = line.perturb[0]
    if kind == "round":
        _, dt, src = line.perturb
        (name,) = line.names
        ns[name] = _to_narrow(ns[src] if src is not None else _wide(line, ns)[name], dt)
    elif kind in ("sum", "prod", "var_mean") and line.perturb[-1] is not None:
        wide = _wide(line, ns)
        for n in line.names:
            ns[n] = _to_narrow(wide[n], line.perturb[-1])


def _signs(shape: Sequence[int], gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element: a random sign, and a random magnitude factor in [0.25, 1.75] (mean 1).
    The factor's spread keeps a difference of two perturbed values from cancelling in
    every run (same signs and near-equal factors) more often than ~1e-4 per element with
    3 runs; its floor keeps a single perturbation at least a quarter of its bound."""
    u = torch.rand(shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).double()
    return sign.to(device), (0.25 + 1.5 * u).to(device)


def _finite(mag: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    mag = torch.broadcast_to(mag.double(), shape)
    return torch.where(torch.isfinite(mag), mag, torch.zeros((), dtype=torch.float64, device=mag.device))


def _jitter(x: torch.Tensor, mag: torch.Tensor, gen: torch.Generator, bias: int = 0) -> torch.Tensor:
    """x moved by up to 1.75 * mag (elementwise): up where `bias` (this run's, ROUND_BIAS)
    is +1, down where it is -1, in a random direction where 0. The runs thus take both
    sides of every value, as `_round_near` does: three random draws that all moved a layer
    norm's mean up gave its row, constant (variance 0, x - mean scaled by rsqrt(eps)), no
    room on the other side, which a ReLU after it keeps (seed 1723 case 236: fuser's mean,
    the sum / n of 33 equal floats, one ulp below them, gave 3.8e-5 where every run gave 0)."""
    x = x.double()
    sign, factor = _signs(x.shape, gen, x.device)
    if bias:
        sign = torch.full_like(sign, float(bias))
    return x + _finite(mag, x.shape) * factor * sign


def _round_near(u: torch.Tensor, mag: torch.Tensor, dt: torch.dtype, gen: torch.Generator,
                u_truth: torch.Tensor | None = None, bias: int = 0) -> torch.Tensor:
    """`u`, this run's value before its rounding to the half / bfloat16 `dt`, rounded as an
    implementation whose value is up to `mag` off may round it (correctly rounded,
    `_to_narrow`). Every implementation rounds the same way unless the value lies within
    its error bound of a rounding boundary; there either neighbour is a correct result,
    and the runs must take both, whichever side the truth took (three random draws that
    all fell on the truth's side, or all flipped it where a later rounding undid the flip,
    gave a correct 1-ulp difference no room: seed 9609 case 355, a variance of 7 halves
    5e-8 above a half midpoint, within its 2e-5 bound; seed 9605 case 82, a bf16 x - mean
    exactly on a midpoint). So `bias` (this run's, `ROUND_BIAS`) +1 takes the rounding of
    u + mag, the upper neighbour where a boundary lies within mag above u, and -1 that of
    u - mag; far from a boundary both are u's own rounding. Bias 0 rounds a random draw
    u + mag * factor * sign, and where that gives the truth's rounding of `u_truth` (the
    float64 run's unrounded value), takes the other side if a boundary lies within
    mag + 2 |u - u_truth| of u_truth (this run's own drift, doubled: another implementation
    may drift as far the other way). (The biased runs stay around u: their drift from the
    truth is already upstream's, so t6 - prod(t6 over 1 element), 0 everywhere, stays 0.
    A half ulp of noise on every narrow value drowned what follows: in
    (1 - mean(ones)) * rsqrt(var + 1e-5), 0 in every implementation, it made +-0.3.)"""
    u = u.double()
    ut = u if u_truth is None else torch.broadcast_to(u_truth.double(), u.shape)
    mag = _finite(mag, u.shape)
    sign, factor = _signs(u.shape, gen, u.device)
    if bias:
        return _to_narrow(u + mag * bias, dt).double()
    r0 = _to_narrow(ut, dt).double()
    sampled = _to_narrow(u + mag * factor * sign, dt).double()
    reach = mag + 2 * _finite((u - ut).abs(), u.shape)
    ahead, behind = _to_narrow(ut + reach * sign, dt).double(), _to_narrow(ut - reach * sign, dt).double()
    flip = torch.where(ahead != r0, ahead, behind)
    return torch.where(sampled != r0, sampled, flip)


def _wide(line: TwinLine, ns: dict[str, Any]) -> dict[str, Any]:
    """The line computed again with its half / bfloat16 operands widened to float64: the
    values its narrow result rounds."""
    wide = dict(ns)
    for k in set(_IDENT.findall(line.text)):  # (only the names it reads: ns holds every value)
        v = ns.get(k)
        if isinstance(v, torch.Tensor) and v.dtype in NARROW:
            wide[k] = v.double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(line.text, wide)  # noqa: S102
    return wide


def _perturb(line: TwinLine, ns: dict[str, Any], gen: torch.Generator, truth_ns: dict[str, Any] | None = None,
             bias: int = 0) -> None:
    """Move the values `line` assigned by about the rounding error an implementation may
    make computing them (float32 math, a float32 sum, ...); a half / bfloat16 result is
    rounded again from its perturbed unrounded value (`_round_near` with this run's
    `bias`, against the truth's unrounded value from `truth_ns`, the float64 run's
    namespace)."""
    kind = line.perturb[0]

    def unrounded(name: str, src: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        if src is not None:
            return ns[src].double(), None if truth_ns is None else truth_ns[src].double()
        return _wide(line, ns)[name].double(), None if truth_ns is None else _wide(line, truth_ns)[name].double()

    if kind == "elem":
        eps = line.perturb[1]
        for n in line.names:
            x = ns[n]
            ns[n] = _jitter(x, eps * x.double().abs(), gen, bias)
    elif kind == "round":  # a half / bfloat16 result: float32 math (or a cast), then the rounding
        _, dt, src = line.perturb
        (name,) = line.names
        u, ut = unrounded(name, src)
        ns[name] = _round_near(u, EPS32 * u.abs(), dt, gen, ut, bias)
    elif kind == "sum":
        _, src, dims, keepdim, n, rnd = line.perturb
        (name,) = line.names
        s = torch.sum(ns[src].double().abs(), dim=list(dims), keepdim=keepdim) if dims else ns[src].double().abs()
        mag = EPS32 * _clog(n) * s
        if rnd is None:
            ns[name] = _jitter(ns[name], mag, gen, bias)
        else:
            u, ut = unrounded(name)
            ns[name] = _round_near(u, mag + EPS32 * u.abs(), rnd, gen, ut, bias)
    elif kind == "prod":
        _, n, rnd = line.perturb
        (name,) = line.names
        if rnd is None:
            x = ns[name]
            ns[name] = _jitter(x, EPS32 * (n + 2) * x.double().abs(), gen, bias)
        else:
            u, ut = unrounded(name)
            ns[name] = _round_near(u, EPS32 * (n + 2) * u.abs(), rnd, gen, ut, bias)
    elif kind == "var_mean":
        _, src, dims, keepdim, n, correction, rnd = line.perturb
        vn, mn = line.names
        got = _wide(line, ns) if rnd is not None else ns
        var, mean = got[vn].double(), got[mn].double()
        sabs = torch.sum(ns[src].double().abs(), dim=list(dims), keepdim=keepdim) / max(n, 1)
        c = EPS32 * _clog(n)
        mean_mag = c * sabs + EPS32 * mean.abs()
        var_mag = c * (var.abs() + 2 * mean.abs() * var.abs().sqrt()) + _var_floor(n, sabs) + EPS32 * var.abs()
        if rnd is None:
            ns[mn], ns[vn] = _jitter(mean, mean_mag, gen, bias), _jitter(var, var_mag, gen, bias)
        else:
            tw = _wide(line, truth_ns) if truth_ns is not None else None
            ns[mn] = _round_near(mean, mean_mag, rnd, gen, tw[mn] if tw else None, bias)
            ns[vn] = _round_near(var, var_mag, rnd, gen, tw[vn] if tw else None, bias)
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


def _conditioning(runs: Sequence[torch.Tensor], t64: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(noise, unjudgeable) per element from runs that computed the output with other
    roundings: noise is how far the farthest run lands from the truth; an element is
    unjudgeable where a run is NaN or infinite and the truth is not the same (seed 9323
    case 40: a variance of values rounded at a 64-element product's 0.06 ulp, whose
    perturbed runs took rsqrt of < 0, while torch's own float32 was 0.1 off the float64
    truth): what a value one rounding away turns into is unknown there, so that element
    is left out, and only it."""
    fin = torch.isfinite(t64)
    zero = torch.zeros((), dtype=torch.float64, device=t64.device)
    noise = torch.zeros_like(t64)
    lost = torch.zeros(t64.shape, dtype=torch.bool, device=t64.device)
    for r in runs:
        same = (r == t64) | (torch.isnan(r) & torch.isnan(t64))
        gone = ~same & ~(torch.isfinite(r) & fin)
        lost |= gone
        noise = torch.maximum(noise, torch.where(same | gone, zero, (r - t64).abs()))
    return noise, lost


@dataclass
class Verdict:
    """What `judge_output` found for one output."""

    #: wrong values, dtype or shape: a mismatch (None: none)
    problem: str | None = None
    #: too few elements could be judged: the generator's failure (None: enough were)
    unjudged: str | None = None
    #: float elements compared, and how many of them were too ill-conditioned to judge
    elements: int = 0
    excluded: int = 0


def judge_output(k: int, name: str, got: Any, want: torch.Tensor, truth: torch.Tensor,
                 noise: Sequence[torch.Tensor]) -> Verdict:
    """Compare fuser's output `got` with torch's: `want` (eager float32: dtype, shape, and
    one more sample of an implementation's error), `truth` (float64) and `noise` (the
    perturbed runs). Integers and bools must be equal. A float element must lie within
    ``atol + rtol * |truth| + NOISE_K * noise`` of the truth, noise being its own: how far
    the perturbed runs and torch's float32 land from the truth at that element.

    There is no slack across elements: every shared intermediate (a softmax denominator,
    a mean, a broadcast reduction) is perturbed once per run and reaches every element
    that reads it, so an element's own noise already holds that value's conditioning
    (the old `+ max(noise)` term let one ill-conditioned element widen all the others).
    Elements `_conditioning` finds unjudgeable are left out and counted; an output with
    fewer than MIN_JUDGED of its elements judged is reported as `unjudged`."""
    from fuser.runtime.tolerance import tolerances

    what = f"output {k} ({name})"
    wrong = _wrong_kind(what, got, want)
    if wrong:
        return Verdict(problem=wrong)
    # on the output's device: elementwise float64 arithmetic there is what it is on the CPU
    # (IEEE, one op at a time), and a GPU does it without taking the fuzzing processes' CPUs
    g = got.detach()
    t = truth.detach().to(g.device)
    if not g.dtype.is_floating_point:
        t = t.to(g.dtype)
        if torch.equal(g, t):
            return Verdict()
        bad = (g != t).reshape(-1)
        i = int(bad.nonzero()[0])
        return Verdict(problem=(
            f"{what} [{g.dtype}, {tuple(g.shape)}]: {int(bad.sum())} of {g.numel()} elements differ; first at "
            f"{_fmt_index(i, g.shape)}: fuser {g.reshape(-1)[i].item()}, torch {t.reshape(-1)[i].item()}"))
    g64, t64 = g.double(), t.double()
    rtol, atol = tolerances(g.dtype)
    runs = [p.detach().to(g.device).double() for p in noise]
    if isinstance(want, torch.Tensor) and want.dtype.is_floating_point and tuple(want.shape) == tuple(t64.shape):
        runs.append(want.detach().to(g.device).double())
    nz, lost = _conditioning(runs, t64)
    tol = atol + rtol * t64.abs() + NOISE_K * nz
    gn, tn = torch.isnan(g64), torch.isnan(t64)
    both_inf = torch.isinf(g64) & torch.isinf(t64) & (g64 == t64)
    # (where the truth is infinite, rtol * |truth| is too: only the same infinity matches)
    close = ((g64 - t64).abs() <= tol) & torch.isfinite(t64)
    ok = (gn & tn) | both_inf | (close & ~gn)
    n, e = g.numel(), int(lost.sum())
    verdict = Verdict(elements=n, excluded=e)
    bad = ~ok & ~lost
    if bool(bad.any()):
        err = torch.where(bad, (g64 - t64).abs().nan_to_num(math.inf),
                          torch.zeros((), dtype=torch.float64, device=g.device)).reshape(-1)
        i = int(err.argmax())
        left_out = f", {e} too ill-conditioned to judge" if e else ""
        verdict.problem = (
            f"{what} [{g.dtype}, {tuple(g.shape)}]: {int(bad.sum())} of {n} elements out of tolerance{left_out}; "
            f"worst at {_fmt_index(i, g.shape)}: fuser {g64.reshape(-1)[i].item():.7g}, "
            f"torch {t64.reshape(-1)[i].item():.7g} (tolerance {tol.reshape(-1)[i].item():.3g})")
    if n and n - e < MIN_JUDGED * n:
        i = int(lost.reshape(-1).nonzero()[0])
        verdict.unjudged = (
            f"[generator] {what} [{g.dtype}, {tuple(g.shape)}]: only {n - e} of {n} elements can be judged (a run "
            f"one rounding away is NaN or infinite where the truth is not, e.g. at {_fmt_index(i, g.shape)}: "
            f"truth {t64.reshape(-1)[i].item():.7g})")
    return verdict


def compare_output(k: int, name: str, got: Any, want: torch.Tensor, truth: torch.Tensor,
                   noise: Sequence[torch.Tensor]) -> str | None:
    """None if fuser's output `got` passes; else what is wrong: a mismatch, or (prefixed
    "[generator]") an output with too few elements that can be judged (see judge_output)."""
    v = judge_output(k, name, got, want, truth, noise)
    return v.problem or v.unjudged


def check_rng(k: int, name: str, got: Any, again: Any, want: torch.Tensor, check: RngCheck) -> str | None:
    """None if a random output passes its checks (dtype, shape, range, moments, distinct
    values, two executes equal); else what is wrong."""
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


# --- which segments ran generated kernels ------------------------------------------------------------


class GpuRunRefused(RuntimeError):
    """A CUDA run that could not count as a GPU pass: fd.execute would run the reference
    executor for every segment, and comparing that with eager PyTorch tests no kernel."""


def gpu_refusal(device: str) -> str | None:
    """Why a fuzz run on `device` cannot test generated kernels (None: it can, or it is
    not a CUDA run). The fuzzer never reads FUSER_TEST_ALLOW_REFERENCE: on CUDA every
    segment whose scheduler generates kernels must run one (see `check_segments`)."""
    if not device.startswith("cuda"):
        return None
    import importlib.util

    from fuser.options import disabled

    why = []
    if importlib.util.find_spec("pycuda") is None:
        why.append("pycuda is not importable")
    if disabled("codegen"):
        why.append("FUSER_DISABLE names codegen")
    if not why:
        return None
    return (f"refusing a {device} fuzz run: {' and '.join(why)}, so fd.execute would run every segment on the "
            "reference executor and a pass would test no generated kernel")


#: NotLowerable messages by the segment fusion whose kernel preparation raised them
#: (recorded while the fuzzer executes; a cached runner's reasons outlive the case)
_fallback_reasons: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def _contiguity(phys, kinds, logical, strides, declare=lambda: True) -> list:
    """define_tensor's contiguity, in allocation order `phys`, for a tensor of these strides:
    None for broadcast axes, True for size-1 ones, else whether the axis is dense over the
    next inner one (and `declare()` agrees: a dense axis may still be declared strided)."""
    contig: dict[int, bool | None] = {}
    expected = 1
    for d in reversed(phys):
        if kinds[d] != "i":
            contig[d] = None
            continue
        if logical[d] == 1:
            contig[d] = True
            continue
        contig[d] = strides[d] == expected and declare()
        expected = strides[d] * logical[d]
    return [contig[d] for d in phys]


@contextlib.contextmanager
def _recording_fallbacks():
    """Record why a segment's kernel was not lowerable, without touching fuser's own run
    path: the runner looks up `prepare_kernel` in its module at each first run, so a
    wrapper there sees every NotLowerable while the fuzzer executes."""
    from fuser.lower.lower import NotLowerable
    from fuser.host import evaluator

    orig = evaluator.prepare_kernel

    def prepare(scheduler: Any, fusion: Any, args: Sequence[Any], device: Any = None) -> Any:
        try:
            return orig(scheduler, fusion, args, device)
        except NotLowerable as err:
            _fallback_reasons[fusion] = (str(err).strip().splitlines() or [""])[0]
            raise

    evaluator.prepare_kernel = prepare
    try:
        yield
    finally:
        evaluator.prepare_kernel = orig


def segment_report(fd: Any) -> list[tuple[str, bool, bool | None, str]]:
    """(scheduler, generates kernels, ran its kernel (None: not tried), why it fell back)
    for each segment of fd's last execute."""
    runs = fd.last_segments()
    runner = getattr(getattr(fd, "_entry", None), "last_runner", None)
    fusions = [getattr(r, "fusion", None) for r in getattr(runner, "runs", [])]
    out = []
    for k, s in enumerate(runs):
        reason = ""
        if s.kernel is False:
            f = fusions[k] if k < len(fusions) else None
            reason = _fallback_reasons.get(f, "") if f is not None else ""
        out.append((s.scheduler, s.generates_kernel, s.kernel, reason))
    return out


def check_segments(case: Case, segments: Sequence[tuple[str, bool, bool | None, str]]) -> tuple[str | None, int]:
    """(what is wrong, expected fallbacks) with a CUDA run's segments: every segment whose
    scheduler generates kernels must have run its kernel, unless it fell back for a reason
    EXPECTED_FALLBACKS or the case's `allowed_fallbacks` name (an unknown reason is not
    allowed). Segments of other schedulers (expr_eval, no_op) run on the reference."""
    allowed = EXPECTED_FALLBACKS + tuple(case.allowed_fallbacks)
    problems, expected = [], 0
    for k, (sched, generates, kernel, reason) in enumerate(segments):
        if not generates or kernel:
            continue
        if kernel is None:
            problems.append(f"segment {k} ({sched}) tried no kernel (kernels unavailable)")
        elif reason and any(re.search(p, reason) for p in allowed):
            expected += 1
        else:
            problems.append(f"segment {k} ({sched}) fell back to the reference executor: {reason or 'reason unknown'}")
    if not problems:
        return None, expected
    kinds = ", ".join(f"{s}:{'kernel' if r else 'fallback' if r is False else 'reference'}" for s, _, r, _ in segments)
    return "; ".join(problems) + f" (segments: {kinds})", expected


def run_case(case: Case, device: str, *, require_kernels: bool | None = None) -> Result:
    """Execute `case` with fuser on `device` and compare with the twin (see the docstring).
    With `require_kernels` (default: on CUDA) every segment whose scheduler generates
    kernels must have run one (`check_segments`); a CUDA run that cannot generate kernels
    raises GpuRunRefused."""
    cuda = device.startswith("cuda")
    refusal = gpu_refusal(device)
    if refusal:
        raise GpuRunRefused(refusal)
    require_kernels = cuda if require_kernels is None else require_kernels
    ns = _namespace(device)
    try:
        exec(case.fd_source(), ns)  # noqa: S102
        fd = ns["fd"]
    except Exception as err:  # noqa: BLE001
        return Result(case, "crash", f"defining the fusion: {_err(err)}", device)
    try:
        inputs = build_inputs(case, device)
    except Exception as err:  # noqa: BLE001
        return Result(case, "generator", f"[generator] building inputs: {_err(err)}", device)
    kwargs = {"device": device} if case.pass_device else {}
    try:
        with contextlib.redirect_stderr(io.StringIO()), _recording_fallbacks():
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
        segments = segment_report(fd)
    except Exception as err:  # noqa: BLE001
        return Result(case, "crash", f"fd.last_segments(): {_err(err)}", device)
    fallback, expected = check_segments(case, segments) if require_kernels else (None, 0)
    if not isinstance(outs, (list, tuple)) or len(outs) != len(case.outputs):
        n = len(outs) if isinstance(outs, (list, tuple)) else type(outs).__name__
        return Result(case, "mismatch", f"fd.execute returned {n} outputs, torch {len(case.outputs)}", device,
                      segments=segments)
    try:
        fed = {n: outs[k] for k, n in enumerate(case.outputs) if n in case.rng_feeds} if case.rng_feeds else None
        want = run_twin(case, inputs, device, torch.float32, rng_values=fed)
        truth_ns = twin_namespace(case, inputs, device, torch.float64, rng_values=fed)
        truth = [truth_ns[n] for n in case.outputs]
        noise = [run_twin(case, inputs, device, torch.float64, noise_seed=s, rng_values=fed, truth_ns=truth_ns)
                 for s in range(1, NOISE_RUNS + 1)]
    except Exception as err:  # noqa: BLE001
        return Result(case, "generator", f"[generator] the torch twin failed: {_err(err)}", device, segments=segments)
    problems, unjudged = [], []
    elements = excluded = 0
    for k, name in enumerate(case.outputs):
        try:
            if k in case.rng_checks:
                p = check_rng(k, name, outs[k], again[k], want[k], case.rng_checks[k])
            else:
                v = judge_output(k, name, outs[k], want[k], truth[k], [n[k] for n in noise])
                elements, excluded = elements + v.elements, excluded + v.excluded
                p = v.problem
                if p is None:
                    p = judge_output(k, name, again[k], want[k], truth[k], [n[k] for n in noise]).problem
                    p = p and f"second execute (cached): {p}"
                if v.unjudged:
                    unjudged.append(v.unjudged)
        except Exception as err:  # noqa: BLE001
            return Result(case, "generator", f"[generator] comparing output {k}: {_err(err)}", device,
                          segments=segments)
        if p:
            problems.append(p)
    counts = {"elements": elements, "excluded": excluded, "segments": segments, "expected_fallbacks": expected}
    if problems:
        msg = "; ".join(problems) + (f"; and {fallback}" if fallback else "")
        return Result(case, "mismatch", msg, device, **counts)
    if fallback:
        return Result(case, "fallback", fallback, device, **counts)
    if unjudged:
        return Result(case, "generator", "; ".join(unjudged), device, **counts)
    return Result(case, "ok", "", device, **counts)


def _err(err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[0] if msg else ''}{where}"


# --- many cases ---------------------------------------------------------------------------------------


@dataclass
class Summary:
    """The results of a run of cases, its summary line and details."""

    device: str
    seed: int
    results: list[Result]
    seconds: float
    aborted: str = ""
    family: str | None = None

    def _with(self, status: str) -> list[Result]:
        return [r for r in self.results if r.status == status]

    @property
    def mismatches(self) -> list[Result]:
        return self._with("mismatch")

    @property
    def crashes(self) -> list[Result]:
        return self._with("crash")

    @property
    def fallbacks(self) -> list[Result]:
        return self._with("fallback")

    @property
    def generator_failures(self) -> list[Result]:
        return self._with("generator")

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    @property
    def elements(self) -> int:
        return sum(r.elements for r in self.results)

    @property
    def excluded(self) -> int:
        return sum(r.excluded for r in self.results)

    def segment_counts(self) -> tuple[int, int, int]:
        """(segments that ran a generated kernel, segments on the reference executor by
        design or device, expected fallbacks)."""
        kernels = sum(1 for r in self.results for s in r.segments if s[2])
        fell = sum(r.expected_fallbacks for r in self.results)
        total = sum(len(r.segments) for r in self.results)
        return kernels, total - kernels - fell, fell

    def line(self) -> str:
        """``gpu fuzz: N cases, M mismatches, K crashes, ...`` (the first three fields are fixed)."""
        label = "gpu" if self.device.startswith("cuda") else "cpu"
        kernels, reference, fell = self.segment_counts()
        return (f"{label} fuzz: {len(self.results)} cases, {len(self.mismatches)} mismatches, {len(self.crashes)} crashes, "
                f"{len(self.fallbacks)} fallbacks, {len(self.generator_failures)} generator failures; "
                f"{self.excluded} of {self.elements} elements excluded; "
                f"segments: {kernels} kernels, {reference} reference, {fell} expected fallbacks")

    def family_counts(self, failing: bool = False) -> dict[str, int]:
        """Cases per family (of the failing cases only, with `failing`)."""
        counts: dict[str, int] = {}
        for r in self.results:
            if failing and not r.failed:
                continue
            counts[r.case.family] = counts.get(r.case.family, 0) + 1
        return counts

    def details(self, show: int = 3) -> str:
        """The run's families, the failing cases' tags and messages, and the first repros."""
        out = [f"seed {self.seed}, device {self.device}, {self.seconds:.1f} s"
               + (f", family {self.family}" if self.family else "")]
        if self.aborted:
            out.append(f"stopped early: {self.aborted}")
        out.append("families: " + ", ".join(f"{f} {n}" for f, n in sorted(self.family_counts().items())))
        ex = [r for r in self.results if r.excluded]
        if ex:
            out.append(f"elements excluded (too ill-conditioned to judge) in {len(ex)} cases: "
                       + ", ".join(f"{r.case.index} ({r.excluded}/{r.elements})" for r in ex[:12])
                       + (" ..." if len(ex) > 12 else ""))
        fails = self.failures
        if fails:
            tags: dict[str, int] = {}
            for r in fails:
                for t in r.case.tags:
                    tags[t] = tags.get(t, 0) + 1
            common = ", ".join(f"{t} {n}" for t, n in sorted(tags.items(), key=lambda kv: -kv[1])[:12])
            out.append("families of failing cases: "
                       + ", ".join(f"{f} {n}" for f, n in sorted(self.family_counts(True).items())))
            out.append(f"tags of failing cases: {common}")
            for r in fails:
                out.append(f"  [{r.status}] case {r.case.id} ({r.case.family}): {r.message}")
            for r in fails[:show]:
                out.append("-" * 100 + "\n" + r.repro())
        return "\n".join(out)


def run_cases(n: int, seed: int, device: str, *, start: int = 0, progress: bool = False,
              family: str | None = None, deadline: float | None = None) -> Summary:
    """Generate and run cases start .. start + n - 1 of the stream `seed` (all of one
    family with `family`), starting none after `deadline` seconds (the summary counts the
    cases run); raises GpuRunRefused for a CUDA run that cannot test kernels."""
    refusal = gpu_refusal(device)
    if refusal:
        raise GpuRunRefused(refusal)
    t0 = time.time()
    results = []
    aborted = ""
    for index in range(start, start + n):
        if deadline is not None and time.time() - t0 > deadline:
            break
        try:
            case = generate(seed, index, family=family)
        except Exception as err:  # noqa: BLE001
            case = Case(seed, index, [], [], [], [], [], [], {}, {"generator_error"}, family=family or "?")
            tb = "".join(traceback.format_exception(err)[-4:])
            results.append(Result(case, "generator", f"[generator] generate({seed}, {index}): {_err(err)}\n{tb}", device))
            continue
        r = run_case(case, device)
        results.append(r)
        if progress and (index - start + 1) % 100 == 0:
            bad = sum(x.failed for x in results)
            print(f"  {index - start + 1}/{n} cases, {bad} failures, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        if r.status == "crash" and device.startswith("cuda") and not _cuda_alive():
            aborted = f"the CUDA context is unusable after case {case.id} ({r.message})"
            break
    return Summary(device, seed, results, time.time() - t0, aborted, family)


def _cuda_alive() -> bool:
    try:
        torch.zeros(1, device="cuda").add_(1).item()
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


def write_report(summary: Summary, path: str | None) -> None:
    """Append the summary line to the file `path` (nothing without one)."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(summary.line() + "\n")


DEFAULT_SEED = 20_240_613


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: every option's help states its default (tests check it)."""
    # the plain formatter on purpose: an option whose help forgets %(default)s shows it in --help
    p = argparse.ArgumentParser(
        prog="python -m tests.gpu_fuzz",
        description="Differential fuzzing of fuser against eager PyTorch (see the module docstring). The last line "
                    "printed is the summary: '<gpu|cpu> fuzz: N cases, M mismatches, K crashes, ...'.")
    p.add_argument("--cases", type=int, metavar="N", default=int(os.environ.get("FUSER_FUZZ_CASES", "300")),
                   help="how many cases to run, from --start on (default: %(default)s; env FUSER_FUZZ_CASES sets it)")
    p.add_argument("--seed", type=int, default=int(os.environ.get("FUSER_FUZZ_SEED", str(DEFAULT_SEED))),
                   help="the case stream; a case is a pure function of (seed, index) (default: %(default)s; "
                        "env FUSER_FUZZ_SEED sets it)")
    p.add_argument("--start", type=int, metavar="I", default=0,
                   help="index of the first case; --start I --cases 1 reruns case I (default: %(default)s)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="where fuser executes: cuda (generated kernels; refused without pycuda or with "
                        "FUSER_DISABLE=codegen) or cpu (the reference executor: checks the fuzzer itself) "
                        "(default: %(default)s, cuda where this machine has a GPU)")
    p.add_argument("--family", default="mix", choices=("mix",) + FAMILIES,
                   help="run only cases of this generator family; mix draws each case's family: "
                        + ", ".join(f"{f} {w}%%" for f, w in FAMILY_WEIGHTS.items()) + " (default: %(default)s)")
    p.add_argument("--report", metavar="PATH", default=os.environ.get("FUSER_FUZZ_REPORT"),
                   help="append the summary line to this file (default: %(default)s; env FUSER_FUZZ_REPORT sets it, "
                        "None writes no file)")
    p.add_argument("--show", type=int, metavar="N", default=3,
                   help="print the repro scripts of this many failures (default: %(default)s)")
    p.add_argument("--print-repro", action="store_true",
                   help="print the cases' repro scripts (for --device) instead of running them (default: %(default)s)")
    p.add_argument("--progress", action="store_true",
                   help="print a progress line to stderr every 100 cases (default: %(default)s)")
    p.add_argument("--deadline", type=float, metavar="S", default=None,
                   help="start no case after S seconds; the summary counts the cases run (default: none)")
    p.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE", dest="settings",
                   help="set a module constant before running (a scheduler or lowering switch, say "
                        "fuser.scheduler.normalization.PERSISTENT_LATE_LOADS=True; VALUE is a Python literal); "
                        "repeatable (default: none)")
    return p


def apply_settings(settings: Sequence[str]) -> list[tuple[Any, str, Any]]:
    """Set each MODULE.NAME=VALUE (VALUE a Python literal) of `settings`; returns (module,
    name, old value) for each, to undo. A name the module lacks is an error."""
    import ast
    import importlib

    done = []
    for s in settings:
        target, sep, text = s.partition("=")
        mod_name, _, name = target.strip().rpartition(".")
        if not sep or not mod_name:
            raise ValueError(f"--set {s!r}: expected MODULE.NAME=VALUE")
        mod = importlib.import_module(mod_name)
        if not hasattr(mod, name):
            raise ValueError(f"--set {s!r}: {mod_name} has no {name}")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"--set {s!r}: the value must be a Python literal") from None
        done.append((mod, name, getattr(mod, name)))
        setattr(mod, name, value)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see --help); exit status 0 when every case passed, 1 when some
    failed, 2 when a CUDA run was refused."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.family == "mix":
        args.family = None
    if args.print_repro:
        for index in range(args.start, args.start + args.cases):
            print(generate(args.seed, index, family=args.family).repro(args.device))
        return 0
    try:
        apply_settings(args.settings)
    except (ValueError, ImportError) as err:
        p.error(str(err))
    try:
        summary = run_cases(args.cases, args.seed, args.device, start=args.start, progress=args.progress,
                            family=args.family, deadline=args.deadline)
    except GpuRunRefused as err:
        print(f"gpu fuzz: {err}", flush=True)
        return 2
    print(summary.details(args.show))
    print(summary.line(), flush=True)
    write_report(summary, args.report)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
