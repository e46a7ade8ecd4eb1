"""Sharding propagation and resharding (the pre-segmentation pass of a sharded fusion).

A tensor of a sharded fusion lives on a DeviceMesh and is either replicated (every device
holds all of it), sharded on one logical axis (device k of the mesh holds the k-th of
`mesh.size` equal blocks of that axis), or partial (every device holds a full-shaped
partial result, `sum`, `max` or `min`, that the devices' values combine into).

`shard_fusion` gives every tensor a sharding, starting from the inputs' annotations
(`tv.set_device_mesh`, `tv.axis(i).parallelize(ParallelType.mesh_x)`), expression by
expression: an output takes the sharding its first sharded operand induces (an axis the
operand's sharded axis maps to; `partial` when the expression reduces or contracts it).
Where an operand is sharded otherwise than that output needs, or a tensor is annotated
otherwise than it is computed, a `set` is inserted: a resharding expression, which the
host program runs as a communication (or a local slice), in a segment of its own.

Everything a device computes between reshardings is ordinary single-device work on its
local shards: the kernels never see a mesh.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from fuser.ir import (
    AtenOp,
    BinaryOpType,
    DataType,
    Expr,
    Fusion,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    ParallelType,
    ReductionOp,
    ReshardOp,
    TensorView,
    Val,
)
from fuser.ir.mapping import exact_pairs

from .mesh import DeviceMesh

#: a reduction's operator -> the partial kind it leaves over a sharded axis
_PARTIAL_OF = {BinaryOpType.Add: "sum", BinaryOpType.Max: "max", BinaryOpType.Min: "min"}
#: an operand axis the expression reduces or contracts
REDUCED = "reduced"


@dataclass(frozen=True)
class Sharding:
    """How a tensor is laid out over `mesh`: sharded on logical axis `axis`, partial
    (`partial` names how the devices' values combine), or replicated (neither)."""

    mesh: DeviceMesh
    axis: int | None = None
    partial: str | None = None

    @property
    def replicated(self) -> bool:
        return self.axis is None and self.partial is None

    def __str__(self) -> str:
        if self.partial:
            return f"partial {self.partial} on {self.mesh}"
        if self.axis is None:
            return f"replicated on {self.mesh}"
        return f"sharded on axis {self.axis} over {self.mesh}"


@dataclass(frozen=True)
class Reshard:
    """A resharding `set`: how its input's sharding becomes its output's."""

    kind: str  # allgather, allreduce, reduce_scatter, all_to_all, local_slice, send_recv, broadcast
    src: Sharding
    dst: Sharding

    @property
    def is_communication(self) -> bool:
        return self.kind != "local_slice"


@dataclass
class ShardedFusion:
    """A fusion with every tensor's sharding, and the resharding expressions inserted."""

    fusion: Fusion
    shardings: dict[TensorView, Sharding] = field(default_factory=dict)
    reshards: dict[Expr, Reshard] = field(default_factory=dict)
    #: the fusion's first mesh (where unplaced inputs are replicated), and every mesh in it
    mesh: DeviceMesh | None = None
    meshes: set = field(default_factory=set)

    def of(self, tv: Val) -> Sharding | None:
        return self.shardings.get(tv) if isinstance(tv, TensorView) else None


def annotated(tv: TensorView) -> Sharding | None:
    """The sharding the definition gives `tv` (None: no mesh)."""
    mesh = tv.device_mesh
    if mesh is None:
        return None
    axes = [k for k, i in enumerate(tv.logical_no_reductions()) if i.parallel_type is ParallelType.DIDx]
    if len(axes) > 1:
        raise NotImplementedError(f"{tv!r} is sharded on axes {axes}: one sharded axis per tensor is supported "
                                  "(a 1-D mesh)")
    return Sharding(mesh, axes[0] if axes else None)


def is_sharded(fusion: Fusion) -> bool:
    """Whether any tensor of `fusion` is placed on a DeviceMesh."""
    return any(tv.device_mesh is not None for tv in fusion.tensors())


def fusion_mesh(fusion: Fusion) -> DeviceMesh:
    """The mesh an unplaced input of `fusion` is replicated on: its first input's (else
    first tensor's) mesh."""
    placed = [v for v in (*fusion.inputs, *fusion.tensors()) if isinstance(v, TensorView) and v.device_mesh is not None]
    if not placed:
        raise ValueError("the fusion places no tensor on a DeviceMesh")
    return placed[0].device_mesh


def out_axis(expr: Expr, operand: TensorView, axis: int, out: TensorView | None = None) -> int | str | None:
    """Where `operand`'s logical axis `axis` goes in output `out` of `expr` (default: the
    first): its position there, REDUCED when the expression reduces or contracts it,
    None when it has no place (a gather's looked-up axis, an axis a reshape merges or
    splits, an output without it)."""
    if out is None:
        out = next(o for o in expr.outputs if isinstance(o, TensorView))
    if isinstance(expr, (MatmulOp, LinearOp)):
        return _matmul_axis(expr, operand, axis, out)
    if isinstance(expr, AtenOp):
        return _aten_axis(expr, operand, axis, out)
    pid = operand.logical_no_reductions()[axis]
    logical = out.logical_no_reductions()
    for p, c in exact_pairs(expr):
        if p is pid and (c in out.root or c in out.logical):
            if c.is_reduction:
                return REDUCED
            if c in logical:
                return logical.index(c)
            # a reshape: the axis it splits or merges stays in blocks where it is the outer
            # part of each split and merge on the way (device k's rows stay one block)
            return next((k for k, i in enumerate(logical) if _outer_path(i, c)), None)
    return None


def _outer_path(i: Any, root: Any) -> bool:
    """Whether logical axis `i` comes from `root` through outer parts only: the outer
    output of a split, or a merge whose outer input it is."""
    from fuser.ir import Merge, Split

    if i is root:
        return True
    d = i.definition
    if isinstance(d, Split):
        return i is d.outputs[0] and _outer_path(d.inputs[0], root)
    if isinstance(d, Merge):
        return _outer_path(d.inputs[0], root)
    return False


def _aten_axis(expr: AtenOp, operand: TensorView, axis: int, out: TensorView) -> int | None:
    """Attention works per batch and head: axes 0 and 1 of its [batch, heads, seq, dim]
    operands (and of the [batch, heads, seq] log-sum-exp) are those of its outputs."""
    if expr.name in ("sdpfa_fwd", "sdpfa_bwd") and axis in (0, 1) and operand.ndim >= 3 and out.ndim >= 3:
        return axis
    return None


def _matmul_axis(expr: Expr, operand: TensorView, axis: int, out: TensorView) -> int | str | None:
    """`out_axis` for matmul and linear, by position as torch lays them out: matmul's
    [..., M, K] x [..., K, N] -> [..., M, N] with batch axes aligned from the right (a 1-D
    operand drops its M or N), linear's [..., K] x [N, K] (+ [N]) -> [..., N]; K is REDUCED."""
    n = operand.ndim
    nout = out.ndim
    if isinstance(expr, MatmulOp):
        a, b = expr.inputs[0], expr.inputs[1]
        if operand is a:
            if axis == n - 1:
                return REDUCED
            if axis == n - 2:
                return nout - 1 if b.ndim == 1 else nout - 2
            return nout - (n - axis) + (1 if b.ndim == 1 else 0) if n > 2 else None
        if n == 1 or axis == n - 2:
            return REDUCED
        if axis == n - 1:
            return nout - 1
        return nout - 2 - (n - 2 - axis) if a.ndim > 1 else nout - 1 - (n - 2 - axis)
    x, w = expr.inputs[0], expr.inputs[1]
    if operand is x:
        return REDUCED if axis == n - 1 else axis
    if operand is w:
        if n == 1 or axis == 1:
            return REDUCED
        return nout - 1
    return nout - 1  # bias [N]


def _partial_kind(expr: Expr) -> str:
    """How the devices' partial results of `expr` over a sharded axis combine."""
    if isinstance(expr, (MatmulOp, LinearOp)):
        return "sum"
    if isinstance(expr, ReductionOp) and expr.op_type in _PARTIAL_OF:
        return _PARTIAL_OF[expr.op_type]
    raise NotImplementedError(
        f"{type(expr).__name__} of {expr.outputs[0]!r} reduces a sharded axis: only sum, max, min, matmul and "
        "linear over a sharded axis are supported (a local reduction, then an allreduce)")


def reshard_kind(src: Sharding, dst: Sharding) -> str | None:
    """The communication taking a tensor from `src` to `dst` (None: none needed)."""
    if src.mesh != dst.mesh:
        # pipeline stages: a whole tensor held by one device goes to another mesh
        if not (src.replicated and dst.replicated and src.mesh.size == 1):
            raise NotImplementedError(
                f"moving a tensor {src} to {dst}: across meshes only a whole tensor held by one device moves "
                "(send/recv to one device, broadcast to several)")
        return "send_recv" if dst.mesh.size == 1 else "broadcast"
    if src.partial:
        if dst.partial:
            if dst.partial != src.partial:
                raise NotImplementedError(f"a {src.partial} partial cannot become a {dst.partial} partial")
            return None
        if dst.axis is None:
            return "allreduce"
        return "reduce_scatter"
    if dst.partial:
        raise NotImplementedError(f"a tensor {src} cannot be made partial")
    if src.axis == dst.axis:
        return None
    if src.axis is None:
        return "local_slice"
    if dst.axis is None:
        return "allgather"
    return "all_to_all"


class _Propagation:
    """One run of `shard_fusion`: the shardings found so far and the IR it inserts."""

    def __init__(self, fusion: Fusion, mesh: DeviceMesh, input_shardings: dict | None, keep_partial: bool) -> None:
        self.fusion = fusion
        self.mesh = mesh
        self.out = ShardedFusion(fusion, mesh=mesh)
        self.keep_partial = keep_partial
        self.input_shardings = input_shardings or {}

    def run(self) -> ShardedFusion:
        fusion, sh = self.fusion, self.out.shardings
        for tv in fusion.inputs:
            if isinstance(tv, TensorView):
                sh[tv] = self.input_shardings.get(tv) or annotated(tv) or Sharding(self.mesh)
                self._check_readable(tv, sh[tv])
        for tv in list(fusion.inputs):
            if isinstance(tv, TensorView) and sh[tv].partial:
                self._combine_once(tv)  # a Partial DTensor: its readers get one sum
        for expr in list(fusion.exprs()):
            if expr in self.out.reshards:
                continue
            self._expr(expr)
        self.out.meshes = {s.mesh for s in sh.values()}
        self._localize_fixed_extents()
        # what each device runs is single-device work on its blocks: the marks go (the
        # table keeps the shardings), so no segment of the copy is sharded again
        for tv in fusion.tensors():
            tv.device_mesh = None
            for i in tv.logical:
                if i.parallel_type is ParallelType.DIDx:
                    i.parallel_type = ParallelType.Serial
        fusion._sorted = None
        return self.out

    def _localize_fixed_extents(self) -> None:
        """A sharded axis the definition fixes (extent n) is, on each device, its block:
        n / devices (symbolic extents are bound from the local tensors already)."""
        from fuser.ir import Scalar
        from fuser.ir.base import fusion_guard

        for tv, s in self.out.shardings.items():
            if s.axis is None:
                continue
            d = s.mesh.size
            i = tv.logical_no_reductions()[s.axis]
            if not i.extent.is_const:
                continue
            n = int(i.extent.value)
            if n % d:
                raise ValueError(f"{tv!r}: axis {s.axis} of extent {n} is sharded over {d} devices, which do not split "
                                 "it into equal blocks")
            with fusion_guard(self.fusion):
                i.extent = Scalar(DataType.Int, n // d)

    def _expr(self, expr: Expr) -> None:
        """Give `expr`'s outputs their shardings, resharding its operands (and its outputs,
        where placed otherwise) so that each device computes its blocks locally."""
        sh = self.out.shardings
        outs = [o for o in expr.outputs if isinstance(o, TensorView)]
        if not outs:
            return
        # a partial operand is combined before anything reads it
        for v in [v for v in expr.inputs if isinstance(v, TensorView)]:
            if sh[v].partial:
                self._reshard_operand(expr, v, Sharding(sh[v].mesh))
        operands = [v for v in expr.inputs if isinstance(v, TensorView)]
        mesh = self._mesh_of(expr, operands)
        natural = self._natural(expr, operands, mesh)
        if natural.partial and isinstance(expr, LinearOp) and len(expr.inputs) > 2:
            self._bias_after_combine(expr)
            return
        for v in operands:
            want = self._operand_sharding(expr, v, natural)
            if want != sh[v]:
                self._reshard_operand(expr, v, want)
        if len(outs) > 1 and natural.partial:
            raise NotImplementedError(f"{type(expr).__name__} with {len(outs)} outputs over a sharded axis")
        for o in outs:
            sh[o] = natural if o is outs[0] else self._other_output(expr, operands, natural, o)
            want = annotated(o) if o.device_mesh is not None else None
            if want is not None and want != natural:
                self._reshard_uses(o, want)
            elif natural.partial:
                self._combine_once(o)

    def _mesh_of(self, expr: Expr, operands: Sequence[TensorView]) -> DeviceMesh:
        """Where `expr` runs: its output's mesh where the definition places it, else its
        first sharded operand's, else its first operand's (a factory: the fusion's first)."""
        out = next(o for o in expr.outputs if isinstance(o, TensorView))
        if out.device_mesh is not None:
            return out.device_mesh
        sh = self.out.shardings
        for v in operands:
            if not sh[v].replicated:
                return sh[v].mesh
        return sh[operands[0]].mesh if operands else self.mesh

    def _natural(self, expr: Expr, operands: Sequence[TensorView], mesh: DeviceMesh) -> Sharding:
        """The sharding `expr`'s output takes from a sharded operand: the one its
        annotation asks for when an operand gives it (a column-parallel linear on a
        sequence-sharded input: the weight's, the input gathered), else the first."""
        sh = self.out.shardings
        candidates = []
        for v in operands:
            s = sh[v]
            if s.axis is None or s.mesh != mesh:
                continue
            m = out_axis(expr, v, s.axis)
            if m == REDUCED:
                candidates.append(Sharding(mesh, partial=_partial_kind(expr)))
            elif m is not None:
                candidates.append(Sharding(mesh, axis=m))  # type: ignore[arg-type]
        out = next(o for o in expr.outputs if isinstance(o, TensorView))
        wanted = annotated(out) if out.device_mesh is not None else None
        if wanted in candidates:
            return wanted  # type: ignore[return-value]
        return candidates[0] if candidates else Sharding(mesh)

    def _other_output(self, expr: Expr, operands: Sequence[TensorView], natural: Sharding, o: TensorView) -> Sharding:
        """The sharding of a second output (attention's log-sum-exp and RNG state): the
        first sharded operand's axis where `o` has it, else replicated."""
        if natural.axis is None:
            return natural
        for v in operands:
            s = self.out.shardings[v]
            if s.axis is not None:
                m = out_axis(expr, v, s.axis, o)
                return Sharding(natural.mesh, axis=m) if isinstance(m, int) else Sharding(natural.mesh)
        return Sharding(natural.mesh)

    def _operand_sharding(self, expr: Expr, v: TensorView, natural: Sharding) -> Sharding:
        """How operand `v` must be laid out for `expr` to compute `natural` locally."""
        current = self.out.shardings[v]
        ids = v.logical_no_reductions()
        if natural.replicated:
            return Sharding(natural.mesh)
        for k in range(len(ids)):
            if ids[k].is_broadcast:
                continue
            m = out_axis(expr, v, k)
            if (natural.partial and m == REDUCED) or (natural.axis is not None and m == natural.axis):
                return Sharding(natural.mesh, axis=k)
        if natural.partial and current.axis is None:
            # an operand the contraction does not read along the sharded axis (a bias): the
            # output's partial sum counts it once per device
            raise NotImplementedError(f"{type(expr).__name__}: operand {v!r} would be added on every device to a "
                                      "partial result")
        return Sharding(natural.mesh)

    # --- IR surgery ------------------------------------------------------------------
    def _new_reshard(self, v: TensorView, want: Sharding) -> TensorView:
        """A new tensor: `v` laid out as `want` (a ReshardOp of `v`)."""
        from fuser.ir import TensorDomain
        from fuser.ops.arith import pointwise_domain

        src = self.out.shardings[v]
        kind = reshard_kind(src, want)
        with self.fusion.guard():
            copy = TensorView(TensorDomain(pointwise_domain([v])), v.dtype)
            ReshardOp([v], [copy])
        _same_streams(v, copy)  # chunk by chunk in the same stream loop
        copy.device_mesh = want.mesh
        self.out.shardings[copy] = want
        self.out.reshards[copy.definition] = Reshard(kind, src, want)  # type: ignore[index, arg-type]
        return copy

    def _reshard_operand(self, expr: Expr, v: TensorView, want: Sharding) -> None:
        copy = self._new_reshard(v, want)
        _replace_input(expr, v, copy)

    def _combine_once(self, v: TensorView) -> None:
        """Sum partial `v` over its devices once, right after it is computed: its readers
        read the sum, and so does the fusion's output, unless a partial output is kept
        (DTensor calls return it as Partial; its readers still read the sum)."""
        whole = Sharding(self.out.shardings[v].mesh)
        if self.keep_partial and v in self.fusion._output_set:
            if v.uses:
                copy = self._new_reshard(v, whole)
                for use in [u for u in v.uses if u is not copy.definition]:
                    _replace_input(use, v, copy)
            return
        self._reshard_uses(v, whole)

    def _check_readable(self, tv: TensorView, s: Sharding) -> None:
        """Refuse reading the size of a sharded input axis as a value (fd.ops.size, shape,
        full or iota of it, a reshape to it): here extents are the blocks', where nvFuser
        reads the whole axis's."""
        if s.axis is None:
            return
        ext = tv.logical_no_reductions()[s.axis].extent
        if not ext.is_const and ext.uses:
            raise NotImplementedError(
                f"{tv!r}: the fusion reads the size of axis {s.axis} (fd.ops.size or shape, or an op given it), "
                f"which is sharded over {s.mesh}; each device would read its block's size. Reading the size of a "
                "sharded axis is not supported yet")

    def _reshard_uses(self, v: TensorView, want: Sharding) -> None:
        """Reshard `v` once, right after it is computed, for every reader and output."""
        copy = self._new_reshard(v, want)
        for use in [u for u in v.uses if u is not copy.definition]:
            _replace_input(use, v, copy)
        fusion = self.fusion
        if v in fusion._output_set:
            fusion.outputs[:] = [copy if o is v else o for o in fusion.outputs]
            fusion._output_set.discard(v)
            fusion._output_set.add(copy)
        if v in fusion.output_aliases:
            fusion.output_aliases[copy] = fusion.output_aliases.pop(v)

    def _bias_after_combine(self, expr: LinearOp) -> None:
        """linear(x, w, b) over a sharded K: linear(x, w) on each device, the sum over the
        devices, then + b (adding b before the sum would count it once per device). The
        original output stays (its readers and the fusion's outputs keep it): a copy of
        the sum."""
        from fuser.ir import LoadStoreOpType
        from fuser.ops import arith
        from fuser.ops.indexing import linear
        from fuser.ops.reduction import broadcast

        x, w, b = expr.inputs[0], expr.inputs[1], expr.inputs[2]
        out = expr.outputs[0]
        fusion = self.fusion
        fusion.remove_expr(expr)
        with fusion.guard():
            part = linear(x, w)
        _same_streams(out, part)  # a stream loop's linear stays in the loop
        self._expr(part.definition)  # partial, then combined: its one reader is the copy
        whole = next(u.outputs[0] for u in part.uses)
        with fusion.guard():
            bb = broadcast(b, [True] * (out.ndim - b.ndim) + [False] * b.ndim) if b.ndim < out.ndim else b
        if bb is not b:
            self._expr(bb.definition)
        with fusion.guard():
            total = arith.binary(BinaryOpType.Add, whole, bb)
        _same_streams(out, total)
        self._expr(total.definition)
        if total.dtype != out.dtype:
            with fusion.guard():
                total = arith.cast(total, out.dtype)
            _same_streams(out, total)
            self._expr(total.definition)
        self._expr(LoadStoreOp([total], [out], op_type=LoadStoreOpType.Set, cache_op="Streaming"))
        fusion._sorted = None


def _same_streams(src: TensorView, dst: TensorView) -> None:
    """Mark `dst`'s axes stream-parallel where `src`'s (same positions) are."""
    for a, b in zip(src.logical_no_reductions(), dst.logical_no_reductions()):
        if a.parallel_type is ParallelType.Stream:
            b.parallel_type = ParallelType.Stream


def _replace_input(expr: Expr, old: Val, new: Val) -> None:
    """`expr` reads `new` where it read `old` (uses and the fusion's order updated)."""
    expr.inputs[:] = [new if v is old else v for v in expr.inputs]
    while expr in old.uses:
        old.uses.remove(expr)
    if expr not in new.uses:
        new.uses.append(expr)
    expr.fusion._sorted = None


def shard_fusion(fusion: Fusion, input_shardings: dict | None = None, keep_partial: bool = False) -> ShardedFusion:
    """Propagate shardings through `fusion` (modified in place: run it on a copy) and insert
    the resharding expressions; `input_shardings` overrides the inputs' annotations
    (DTensor placements); with `keep_partial`, a partial output stays partial."""
    given = list((input_shardings or {}).values())
    mesh = given[0].mesh if given else fusion_mesh(fusion)
    return _Propagation(fusion, mesh, input_shardings, keep_partial).run()
