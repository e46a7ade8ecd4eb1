"""Random fusion programs for property tests (a reusable hypothesis strategy).

`fusions()` draws a `FusionCase`: a closed FusionDefinition, the program text that defined
it, and `make_inputs()`, which builds fresh random inputs for it (normal values, never
zeros). A failing example prints as a runnable program, e.g.::

    FusionCase(sizes=[3, 2, 5], seed=7)
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.ops.sum(t0, dims=[1], keepdim=False)
        ...

How programs are built. Every tensor's axes are labels of a fixed "axis universe" of three
extents (`sizes`, each 2..6; now and then one of them 1, 40 — wide enough for the transpose
scheduler — or HUGE, a row too long for a persistent kernel): an axis is `(k, "i")`, of
extent sizes[k], or `(k, "b")`, a broadcast axis of extent 1 standing for universe axis k.
Inputs (1-3, rank 1-3, float32 or bf16/half cast to float at once) take an ordered subset
of the universe, some axes broadcast, some expanded with stride 0, some inputs with a
permuted stride_order. Any two tensors can be combined: operands with the same labels (or
one a suffix of the other: PyTorch's implicit broadcasting from the right) combine
directly; otherwise each is permuted back to universe order and brought to the union of
their axes with `broadcast_in_dim`, `broadcast`, or `broadcast` + `expand`.

Ops drawn: unary math; binary math (division by |x| + 1 only); casts to and from
bf16/half; sum/max reductions over random dims, keepdim or not, sometimes broadcast back
and combined with their input (normalisation); var_mean (two outputs of one expr);
factories (`full` incl. zeros/ones, `iota` float or int; each read by several ops); scalar
arithmetic (reciprocal of an input's extent, constant products) and Double scalar inputs;
`where`; `segment_set`; `permute`; `squeeze` of a broadcast axis; reshape round trips;
pad/slice and cat/slice round trips (resize); `matmul` (ATen, expr_eval). Then one to
three outputs: the newest tensor and some earlier ones, sometimes cast to bf16/half,
rarely an input itself.

Everything is drawn through hypothesis, so examples replay and shrink: choices of "which
tensor" count back from the newest, so a shrunk program is a short chain.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from hypothesis import strategies as st

from fuser import DataType, FusionDefinition

NARROW = (DataType.BFloat16, DataType.Half)
#: an extent whose float row (512 KiB) no persistent kernel holds
HUGE = 2**17
UNARY = ("neg", "abs", "cos", "sin", "tanh", "exp", "sigmoid", "relu")
BINARY = ("add", "mul", "sub", "maximum", "div")
#: what the next op is; repeats weight the choice (shrinking goes towards the first)
OPS = (
    "unary",
    "binary",
    "binary",
    "reduction",
    "reduction",
    "reduction",
    "cast",
    "factory",
    "segment_set",
    "scalar",
    "where",
    "permute",
    "reshape",
    "var_mean",
    "squeeze",
    "resize",
    "scalar_input",
    "matmul",
)

Axes = tuple  # of (k, "i" | "b")


@dataclass
class Var:
    name: str
    axes: Axes
    dtype: DataType
    is_input: bool = False
    static: bool = False


@dataclass
class InputSpec:
    """One fusion input: its axes, which of them are expanded (stride 0), and its dtype."""

    axes: Axes
    expanded: tuple[bool, ...]
    dtype: DataType
    #: define_tensor's stride_order (dim d's memory rank, highest outermost), or None: row major
    stride_order: tuple[int, ...] | None = None
    #: for a scalar input (axes empty): the Python value passed
    scalar: float | None = None


class FusionCase:
    """One drawn fusion: `fd` (closed), the `source` that defined it, the axis `sizes`, how
    to make its inputs, and what the generator tracked (output names, variables)."""

    def __init__(self, fd: FusionDefinition, source: str, sizes: list[int], input_specs: list[InputSpec],
                 seed: int, outputs: list[str], vars: dict[str, Var], n_segment_sets: int) -> None:  # noqa: A002
        self.fd = fd
        self.source = source
        self.sizes = sizes
        self.input_specs = input_specs
        self.seed = seed
        #: names of the outputs in add_output order, and the program's variables
        self.outputs = outputs
        self.vars = vars
        self.n_segment_sets = n_segment_sets

    def make_inputs(self, seed: int | None = None) -> list[torch.Tensor]:
        """Fresh random inputs (normal values, bounded away from zero), reproducible from `seed`."""
        g = torch.Generator().manual_seed(self.seed if seed is None else seed)
        out = []
        for spec in self.input_specs:
            if spec.scalar is not None:
                out.append(spec.scalar)
                continue
            full = [self.sizes[k] if kind == "i" else 1 for k, kind in spec.axes]
            base = [1 if e else n for n, e in zip(full, spec.expanded)]
            # allocated outermost dim first (row major without a stride_order)
            order = spec.stride_order or tuple(range(len(base) - 1, -1, -1))
            phys = sorted(range(len(base)), key=lambda d: -order[d])
            x = torch.randn([base[d] for d in phys], generator=g)
            x = torch.where(x.abs() < 1e-2, torch.full_like(x, 0.5), x)  # never zeros
            x = x.to(spec.dtype.torch).permute([phys.index(d) for d in range(len(base))])
            if any(spec.expanded):
                x = x.expand(full)
            out.append(x)
        return out

    @property
    def n_tensor_inputs(self) -> int:
        return sum(spec.scalar is None for spec in self.input_specs)

    def output_shapes(self) -> list[tuple[int, ...]]:
        return [shape_of(self.vars[n].axes, self.sizes) for n in self.outputs]

    def __repr__(self) -> str:
        return f"FusionCase(sizes={self.sizes}, seed={self.seed})\n{self.source}"


def shape_of(axes: Axes, sizes: list[int]) -> tuple[int, ...]:
    return tuple(sizes[k] if kind == "i" else 1 for k, kind in axes)


def _dtype_src(dt: DataType) -> str:
    return f"DataType.{dt.name}"


class _Builder:
    """Draws one program, executing each line as it is drawn (so a line the frontend
    rejects is a bug of this generator and fails loudly)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        self.draw = draw
        self.sizes = [draw(st.integers(2, 6)) for _ in range(3)]
        # now and then one axis is wide enough for the transpose scheduler (>= 32), or a
        # row too long for persistent buffers (a reduction must then be split off)
        mode = draw(st.sampled_from(("small",) * 13 + ("wide", "huge", "unit")))
        if mode != "small":
            k = draw(st.integers(0, 2))
            self.sizes[k] = {"wide": 40, "huge": HUGE, "unit": 1}[mode]
            if mode == "huge":
                self.sizes = [n if j == k else min(n, 3) for j, n in enumerate(self.sizes)]
        self.fd = FusionDefinition()
        self.ns: dict[str, Any] = {"fd": self.fd, "DataType": DataType}
        self.lines: list[str] = []
        self.vars: dict[str, Var] = {}
        self.pool: list[Var] = []  # tensors later ops may read
        self.inputs: list[Var] = []
        self.specs: list[InputSpec] = []
        self.scalars: list[str] = []
        self.n = 0
        self.n_segment_sets = 0

    # --- plumbing -------------------------------------------------------------------------
    def emit(self, expr: str, axes: Axes | None, *, pool: bool = True, prefix: str = "t") -> Var | str:
        name = f"{prefix}{self.n}"
        self.n += 1
        line = f"{name} = {expr}"
        self.lines.append(line)
        exec(line, self.ns)  # noqa: S102 - the program text is ours
        if axes is None:  # a scalar
            self.scalars.append(name)
            return name
        val = self.ns[name].val
        assert val.ndim == len(axes), f"generator lost track of {name}'s rank: {line}"
        v = Var(name, tuple(axes), val.dtype)
        self.vars[name] = v
        if pool:
            self.pool.append(v)
        return v

    def pick(self, pool: list[Var] | None = None) -> Var:
        """A tensor of the pool; shrinks towards the newest."""
        pool = self.pool if pool is None else pool
        i = self.draw(st.integers(0, len(pool) - 1))
        return pool[len(pool) - 1 - i]

    def size(self, k: int) -> int:
        return self.sizes[k]

    def shape(self, axes: Axes) -> list[int]:
        return list(shape_of(axes, self.sizes))

    # --- inputs -------------------------------------------------------------------------------
    def add_input(self) -> None:
        draw = self.draw
        rank = draw(st.integers(1, 3))
        ks = sorted(draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank, unique=True)))
        # "i": an axis of extent sizes[k]; "b": a size-1 broadcast; "e": extent sizes[k], stride 0
        kinds = [draw(st.sampled_from(("i", "i", "i", "b", "e"))) for _ in ks]
        dtype = draw(st.sampled_from((DataType.Float, DataType.Float, DataType.BFloat16, DataType.Half)))
        static = draw(st.sampled_from((False, False, False, True)))
        shape, contig = [], []
        for k, kind in zip(ks, kinds):
            if kind == "b":
                shape.append(1)
                contig.append(None)
            elif kind == "e":
                shape.append(-1)
                contig.append(None)
            else:
                shape.append(self.size(k) if static else -1)
                contig.append(True)
        axes = tuple((k, "b" if kind == "b" else "i") for k, kind in zip(ks, kinds))
        order = None
        if rank >= 2 and all(kind == "i" for kind in kinds) and draw(st.sampled_from((False, False, True))):
            order = tuple(draw(st.permutations(list(range(rank)))))
        extra = f", stride_order={list(order)}" if order is not None else ""
        v = self.emit(f"fd.define_tensor(shape={shape}, contiguity={contig}, dtype={_dtype_src(dtype)}{extra})",
                      axes, pool=False)
        v.is_input = True
        v.static = static
        self.inputs.append(v)
        self.specs.append(InputSpec(axes, tuple(kind == "e" for kind in kinds), dtype, order))
        if dtype in NARROW:
            # narrow inputs are read as float (the raw input stays usable, less often)
            self.emit(f"fd.ops.cast({v.name}, dtype=DataType.Float)", axes)
            if draw(st.booleans()):
                self.pool.insert(0, v)
        else:
            self.pool.append(v)

    # --- alignment ------------------------------------------------------------------------------
    def canonical(self, v: Var) -> Var:
        """`v` with its axes in universe order (a permute when they are not)."""
        order = sorted(range(len(v.axes)), key=lambda p: v.axes[p][0])
        if order == list(range(len(v.axes))):
            return v
        return self.emit(f"fd.ops.permute({v.name}, dims={order})", tuple(v.axes[p] for p in order), pool=False)

    @staticmethod
    def merged(a: Axes, b: Axes) -> Axes:
        """Axes of a binary op's result when `b` broadcasts against `a` from the right."""
        if len(b) > len(a):
            a, b = b, a
        out = list(a)
        off = len(a) - len(b)
        for p, (k, kind) in enumerate(b):
            if kind == "i":
                out[off + p] = (k, "i")
        return tuple(out)

    @staticmethod
    def direct(a: Axes, b: Axes) -> bool:
        """Operands with these axes combine without help (same labels from the right)."""
        n = min(len(a), len(b))
        return all(a[len(a) - n + p][0] == b[len(b) - n + p][0] for p in range(n))

    def to_target(self, v: Var, target: Axes) -> Var:
        """`v` (in universe order) brought to `target`'s labels (a superset of v's)."""
        ks = [k for k, _ in v.axes]
        tks = [k for k, _ in target]
        if ks == tks:
            return v
        how = self.draw(st.sampled_from(("broadcast_in_dim", "broadcast", "expand")))
        if how == "broadcast_in_dim":
            dims = [tks.index(k) for k in ks]
            return self.emit(
                f"fd.ops.broadcast_in_dim({v.name}, shape={self.shape(target)}, broadcast_dims={dims})", target, pool=False
            )
        flags = [k not in ks for k in tks]
        have = dict(v.axes)
        axes = tuple((k, have.get(k, "b")) for k in tks)
        b = self.emit(f"fd.ops.broadcast({v.name}, is_broadcast_dim={flags})", axes, pool=False)
        if how == "broadcast":
            return b
        return self.emit(f"fd.ops.expand({b.name}, shape={self.shape(target)})", target, pool=False)

    def align(self, a: Var, b: Var) -> tuple[Var, Var, Axes]:
        """Operands for a binary op on `a` and `b`, and the axes of its result."""
        if self.direct(a.axes, b.axes):
            return a, b, self.merged(a.axes, b.axes)
        a, b = self.canonical(a), self.canonical(b)
        kinds: dict[int, str] = {}
        for k, kind in a.axes + b.axes:
            kinds[k] = "i" if kind == "i" or kinds.get(k) == "i" else "b"
        target = tuple((k, kinds[k]) for k in sorted(kinds))
        a, b = self.to_target(a, target), self.to_target(b, target)
        return a, b, self.merged(a.axes, b.axes)

    def safe_denominator(self, v: Var) -> Var:
        return self.emit(f"fd.ops.add(fd.ops.abs({v.name}), 1.0)", v.axes, pool=False)

    def as_float(self, v: Var) -> Var:
        if v.dtype is DataType.Float:
            return v
        return self.emit(f"fd.ops.cast({v.name}, dtype=DataType.Float)", v.axes, pool=False)

    # --- ops ----------------------------------------------------------------------------------
    def unary(self) -> None:
        x = self.pick()
        op = self.draw(st.sampled_from(UNARY))
        self.emit(f"fd.ops.{op}({x.name})", x.axes)

    def binary(self, x: Var | None = None, y: Var | None = None) -> Var:
        draw = self.draw
        x = self.pick() if x is None else x
        y = self.pick() if y is None else y
        op = draw(st.sampled_from(BINARY))
        if op == "div":
            y = self.safe_denominator(y)
        a, b, axes = self.align(x, y)
        if draw(st.booleans()):
            a, b = b, a
            if op == "div":  # keep the safe operand the denominator
                a, b = b, a
        return self.emit(f"fd.ops.{op}({a.name}, {b.name})", axes)

    def reduction(self) -> None:
        draw = self.draw
        x = self.pick()
        if not x.axes:
            return self.unary()
        x = self.as_float(x)
        rank = len(x.axes)
        dims = sorted(draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True)))
        op = draw(st.sampled_from(("sum", "max")))
        keepdim = draw(st.booleans())
        dims_src = [d - rank if draw(st.booleans()) else d for d in dims]  # some negative dims
        axes = tuple(
            (k, "b") if p in dims else x.axes[p] for p, (k, _) in enumerate(x.axes) if keepdim or p not in dims
        )
        n = math.prod(self.sizes[k] for p, (k, kind) in enumerate(x.axes) if p in dims and kind != "b")
        if op == "sum" and n >= HUGE:
            # a sum of 2**17 values rounds differently in another segmentation, and what
            # follows can make that any size (cos of the sum of the centred values, about
            # 1e8: seed 0 of sizes [131072, 2, 2] once differed by 0.05): the mean keeps it small
            r = self.emit(f"fd.ops.sum({x.name}, dims={dims_src}, keepdim={keepdim})", axes, pool=False)
            r = self.emit(f"fd.ops.mul({r.name}, {1.0 / n!r})", axes)
        else:
            r = self.emit(f"fd.ops.{op}({x.name}, dims={dims_src}, keepdim={keepdim})", axes)
        if not draw(st.booleans()):
            return None
        # normalisation: broadcast back and combine with the reduced input
        if keepdim:
            back = r
        elif draw(st.booleans()):
            flags = [p in dims for p in range(rank)]
            back = self.emit(
                f"fd.ops.broadcast({r.name}, is_broadcast_dim={flags})",
                tuple((k, "b") if p in dims else (k, kind) for p, (k, kind) in enumerate(x.axes)), pool=False,
            )
        else:
            kept = [p for p in range(rank) if p not in dims]
            back = self.emit(
                f"fd.ops.broadcast_in_dim({r.name}, shape={self.shape(x.axes)}, broadcast_dims={kept})", x.axes, pool=False
            )
        comb = draw(st.sampled_from(("sub", "mul", "add", "div")))
        if comb == "div":
            back = self.safe_denominator(back)
        self.emit(f"fd.ops.{comb}({x.name}, {back.name})", self.merged(x.axes, back.axes))
        return None

    def cast(self) -> None:
        x = self.pick()
        choices = [d for d in (DataType.Float, DataType.BFloat16, DataType.Half) if d is not x.dtype]
        dt = self.draw(st.sampled_from(choices))
        self.emit(f"fd.ops.cast({x.name}, dtype={_dtype_src(dt)})", x.axes)

    def factory(self) -> None:
        draw = self.draw
        if draw(st.booleans()):
            ks = sorted(draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)))
            fill = draw(st.sampled_from((1.0, 0.0, 0.5, -2.0)))
            f = self.emit(f"fd.ops.full(shape={[self.size(k) for k in ks]}, fill_value={fill}, dtype=DataType.Float)",
                          tuple((k, "i") for k in ks))
        else:
            k = draw(st.integers(0, 2))
            start = draw(st.sampled_from((0.0, 1.0, -1.5)))
            step = draw(st.sampled_from((1.0, 0.25)))
            if draw(st.booleans()):
                f = self.emit(f"fd.ops.iota({self.size(k)}, {start}, {step}, dtype=DataType.Float)", ((k, "i"),))
            else:
                i = self.emit(f"fd.ops.iota({self.size(k)}, {int(start)}, 1, dtype=DataType.Int)", ((k, "i"),), pool=False)
                f = self.emit(f"fd.ops.cast({i.name}, dtype=DataType.Float)", ((k, "i"),))
        # a factory several ops read
        for _ in range(draw(st.integers(1, 3))):
            others = [v for v in self.pool if v is not f]
            self.binary(f, self.pick(others) if others else f)

    def segment_set(self) -> None:
        x = self.pick()
        self.emit(f"fd.ops.segment_set({x.name})", x.axes)
        self.n_segment_sets += 1

    def scalar(self) -> None:
        draw = self.draw
        symbolic = [
            (v, p) for v in self.inputs for p, (k, kind) in enumerate(v.axes)
            if kind == "i" and not v.static
        ]
        if symbolic and draw(st.booleans()):
            v, p = symbolic[draw(st.integers(0, len(symbolic) - 1))]
            s = self.emit(f"fd.ops.reciprocal(fd.ops.cast(fd.ops.size({v.name}, dim={p}), dtype=DataType.Float))",
                          None, prefix="s")
        else:
            c1 = draw(st.sampled_from((1.5, 0.5, -3.0)))
            c2 = draw(st.sampled_from((2.0, 0.25)))
            s = self.emit(f"fd.ops.mul(fd.define_scalar({c1}, dtype=DataType.Double), "
                          f"fd.define_scalar({c2}, dtype=DataType.Double))", None, prefix="s")
        x = self.pick()
        op = draw(st.sampled_from(("mul", "add", "sub")))
        self.emit(f"fd.ops.{op}({x.name}, {s})", x.axes)

    def where(self) -> None:
        x, y = self.pick(), self.pick()
        a, b, axes = self.align(x, y)
        c = self.emit(f"fd.ops.gt({a.name}, 0.0)", a.axes, pool=False)
        self.emit(f"fd.ops.where({c.name}, {a.name}, {b.name})", axes)

    def permute(self) -> None:
        x = self.pick()
        if len(x.axes) < 2:
            return self.unary()
        perm = self.draw(st.permutations(list(range(len(x.axes)))))
        self.emit(f"fd.ops.permute({x.name}, dims={list(perm)})", tuple(x.axes[p] for p in perm))
        return None

    def reshape(self) -> None:
        cands = [v for v in self.pool if v.axes and all(kind == "i" for _, kind in v.axes)]
        if not cands:
            return self.unary()
        x = self.pick(cands)
        shape = self.shape(x.axes)
        flat = self.emit(f"fd.ops.reshape({x.name}, new_shape=[{math.prod(shape)}])", ((x.axes[0][0], "i"),), pool=False)
        self.emit(f"fd.ops.reshape({flat.name}, new_shape={shape})", x.axes)
        return None

    def var_mean(self) -> None:
        """A reduction with two outputs (one expr making two tensors)."""
        draw = self.draw
        x = self.pick()
        if not x.axes:
            return self.unary()
        x = self.as_float(x)
        rank = len(x.axes)
        dims = sorted(draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True)))
        keepdim = draw(st.booleans())
        axes = tuple((k, "b") if p in dims else x.axes[p] for p, (k, _) in enumerate(x.axes) if keepdim or p not in dims)
        name = f"t{self.n}"
        self.n += 1
        line = f"{name}_var, {name}_mean = fd.ops.var_mean({x.name}, dims={dims}, correction=0, keepdim={keepdim})"
        self.lines.append(line)
        exec(line, self.ns)  # noqa: S102
        for part in ("var", "mean"):
            v = Var(f"{name}_{part}", axes, self.ns[f"{name}_{part}"].val.dtype)
            self.vars[v.name] = v
            self.pool.append(v)
        return None

    def squeeze(self) -> None:
        """Drop a size-1 broadcast axis (or add one first, then drop it)."""
        x = self.pick()
        val = self.ns[x.name].val
        ids = val.logical_no_reductions()
        cands = [p for p, (k, kind) in enumerate(x.axes)
                 if kind == "b" and ids[p].is_broadcast and ids[p].expanded_extent is None]
        if not cands:
            flags = [True] + [False] * len(x.axes)
            k = x.axes[0][0] if x.axes else 0
            x = self.emit(f"fd.ops.broadcast({x.name}, is_broadcast_dim={flags})", ((k, "b"),) + x.axes, pool=False)
            cands = [0]
        p = cands[self.draw(st.integers(0, len(cands) - 1))]
        self.emit(f"fd.ops.squeeze({x.name}, dims=[{p}])", x.axes[:p] + x.axes[p + 1:])

    def resize(self) -> None:
        """Slices, pads and cats that give back a tensor of the operand's shape."""
        draw = self.draw
        cands = [v for v in self.pool if v.axes and v.axes[-1][1] == "i"]
        if not cands:
            return self.unary()
        x = self.pick(cands)
        shape = self.shape(x.axes)
        rank, n = len(shape), shape[-1]
        if draw(st.booleans()):  # pad the last axis, slice the padding off again
            lo, hi = draw(st.integers(0, 2)), draw(st.integers(0, 2))
            y = self.emit(f"fd.ops.pad({x.name}, [{lo}, {hi}], {draw(st.sampled_from((0.0, 1.5)))})",
                          x.axes, pool=False)
            start, end = [0] * (rank - 1) + [lo], shape[:-1] + [lo + n]
        else:  # cat with a unary of itself along the last axis, keep the second half
            z = self.emit(f"fd.ops.{draw(st.sampled_from(UNARY))}({x.name})", x.axes, pool=False)
            y = self.emit(f"fd.ops.cat([{x.name}, {z.name}], dim={rank - 1})", x.axes, pool=False)
            start, end = [0] * (rank - 1) + [n], shape[:-1] + [2 * n]
        self.emit(f"fd.ops.slice({y.name}, start_indices={start}, end_indices={end})", x.axes)

    def scalar_input(self) -> None:
        """A Double scalar input of the fusion, scaling a tensor."""
        value = self.draw(st.sampled_from((0.5, -1.25, 3.0)))
        s = self.emit("fd.define_scalar(None, dtype=DataType.Double)", None, prefix="s")
        self.specs.append(InputSpec((), (), DataType.Double, scalar=value))
        x = self.pick()
        self.emit(f"fd.ops.{self.draw(st.sampled_from(('mul', 'add')))}({x.name}, {s})", x.axes)

    def concrete(self, ks: tuple[int, int]) -> Var:
        """A float tensor with exactly the axes `ks` (in that order), all of full extent: a
        pool tensor over some of them, expanded (or a factory when none fits)."""
        tgt = tuple((k, "i") for k in sorted(ks))
        cands = [v for v in self.pool if v.axes and {k for k, _ in v.axes} <= set(ks)]
        if cands:
            v = self.canonical(self.as_float(self.pick(cands)))
            if [k for k, _ in v.axes] != [k for k, _ in tgt]:
                dims = [[k for k, _ in tgt].index(k) for k, _ in v.axes]
                v = self.emit(f"fd.ops.broadcast_in_dim({v.name}, shape={self.shape(tgt)}, broadcast_dims={dims})",
                              tgt, pool=False)
            elif v.axes != tgt:
                v = self.emit(f"fd.ops.expand({v.name}, shape={self.shape(tgt)})", tgt, pool=False)
        else:
            v = self.emit(f"fd.ops.full(shape={self.shape(tgt)}, fill_value=0.5, dtype=DataType.Float)", tgt, pool=False)
        if list(ks) != sorted(ks):
            v = self.emit(f"fd.ops.permute({v.name}, dims=[1, 0])", tuple((k, "i") for k in ks), pool=False)
        return v

    def matmul(self) -> None:
        """[a, b] @ [b, c]: an op only ATen runs (expr_eval)."""
        a, b, c = self.draw(st.permutations([0, 1, 2]))
        x, y = self.concrete((a, b)), self.concrete((b, c))
        if self.sizes[b] < HUGE:
            self.emit(f"fd.ops.matmul({x.name}, {y.name})", ((a, "i"), (c, "i")))
            return
        # a sum of 2**17 products rounds differently with the operands' layout (the whole
        # fusion's expanded view against a segment's dense copy); a periodic op downstream
        # (cos of 1.5e5) would make that any size: the mean keeps the values small
        m = self.emit(f"fd.ops.matmul({x.name}, {y.name})", ((a, "i"), (c, "i")), pool=False)
        self.emit(f"fd.ops.mul({m.name}, {1.0 / self.sizes[b]!r})", m.axes)

    # --- outputs ------------------------------------------------------------------------------
    def outputs(self) -> list[str]:
        draw = self.draw
        computed = [v for v in self.pool if not v.is_input]
        last = computed[-1]
        chosen = [last]
        for _ in range(draw(st.integers(0, 2))):
            v = self.pick(computed)
            if v not in chosen:
                chosen.append(v)
        if draw(st.sampled_from((False,) * 9 + (True,))):
            chosen.append(self.pick(self.inputs))
        names = []
        for v in chosen:
            if not v.is_input and draw(st.sampled_from((False, False, False, True))):
                dt = draw(st.sampled_from(NARROW))
                if dt is not v.dtype:
                    v = self.emit(f"fd.ops.cast({v.name}, dtype={_dtype_src(dt)})", v.axes, pool=False)
            self.lines.append(f"fd.add_output({v.name})")
            self.fd.add_output(self.ns[v.name])
            names.append(v.name)
        return names


@st.composite
def fusions(draw: Callable[[Any], Any], max_ops: int = 12) -> FusionCase:
    """A random fusion program: see the module docstring."""
    b = _Builder(draw)
    b.fd.__enter__()
    try:
        for _ in range(draw(st.integers(1, 3))):
            b.add_input()
        for _ in range(draw(st.integers(1, max_ops))):
            getattr(b, draw(st.sampled_from(OPS)))()
        outputs = b.outputs()
    except BaseException as err:
        b.fd.__exit__(type(err), err, None)
        raise
    b.fd.__exit__(None, None, None)
    seed = draw(st.integers(0, 2**16))
    source = "with FusionDefinition() as fd:\n" + "".join(f"    {line}\n" for line in b.lines)
    return FusionCase(b.fd, source, b.sizes, b.specs, seed, outputs, b.vars, b.n_segment_sets)


__all__ = ["FusionCase", "HUGE", "InputSpec", "Var", "fusions", "shape_of"]
