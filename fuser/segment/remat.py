"""IO-aware rematerialisation (seed 001): recompute, in a consumer segment, pointwise work
whose result would otherwise cross a segment boundary through memory.

For each (producer P, consumer C) pair, in topological order, the tensors C reads from P
are the sinks of a flow network over the producer-side work that computes them; every
tensor `v` there is an edge `v_in -> v_out` whose capacity is what reading `v` in C
costs: nothing when C reads it anyway, its size when it is in memory anyway (a fusion
input, a fusion output, another group's output), twice its size (written and read) when
it is an intermediate of P. Ops a consumer may recompute (elementwise, views; never
reductions, RNG or segment_set) connect their operands' `out` to their results' `in` with
infinite capacity; tensors nothing recomputes hang off the source. The minimum cut is the
cheapest set of tensors C can read instead (as Thunder's rematerialisation does); C takes
the work between the cut and the sinks only if its scheduler still accepts it. P then
drops outputs nobody reads and work nobody needs.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fuser._core import min_cut
from fuser.ir import TensorView
from fuser.scheduler import propose, reject_reason
from fuser.scheduler.analysis import is_recomputable, is_segmenter_set

if TYPE_CHECKING:
    from .segmenter import _Proto, _Segmenter


def rematerialize(seg: "_Segmenter", protos: list["_Proto"]) -> list["_Proto"]:
    """Apply every profitable, schedulable recomputation; returns the surviving groups."""
    progress = True
    while progress:
        progress = False
        # (a failed try changes nothing and an undone one is restored: once per pass)
        before = [(p.owned.copy(), p.extra.copy(), p.scheduler) for p in protos]
        written = dict(zip(map(id, protos), seg.group_outputs(protos)))
        for ci in range(len(protos)):
            if not _improve_consumer(seg, protos, ci):
                continue
            pruned = _prune(seg, protos)
            if _still_scheduled(seg, pruned, written):
                protos = pruned
                progress = True
                break
            for p, (owned, extra, st) in zip(protos, before):  # a producer lost what every scheduler needs
                p.owned, p.extra, p.scheduler = owned.copy(), extra.copy(), st
    return protos


def _still_scheduled(seg: "_Segmenter", protos: list["_Proto"], written: dict[int, set]) -> bool:
    """Whether each group whose outputs changed (`written`: by id, before) is still taken
    by a scheduler once the outputs nobody reads are gone (a resize segment needs an output
    whose loop nest writes the others whole: the one dropped may be it); a group its own
    scheduler no longer takes gets the first that does."""
    if seg.custom is not None:
        return True
    for p, w in zip(protos, seg.group_outputs(protos)):
        if written.get(id(p)) == w:
            continue
        sub = seg.exact_sub(p, w)
        if reject_reason(sub, p.scheduler) is not None:
            st = propose(sub)
            if st is None:
                return False
            p.scheduler = st
    return True


def _reads(seg: "_Segmenter", ks: set[int]) -> list[TensorView]:
    return seg.reads(ks)


def _homes(seg: "_Segmenter", protos: list["_Proto"]) -> dict[Any, int]:
    home: dict[Any, int] = {}
    for pi, p in enumerate(protos):
        for k in p.owned:
            for v in seg.a.exprs[k].outputs:
                home[v] = pi
    return home


def _improve_consumer(seg: "_Segmenter", protos: list["_Proto"], ci: int) -> bool:
    a = seg.a
    c = protos[ci]
    home = _homes(seg, protos)
    c_all = c.all()
    c_reads = _reads(seg, c_all)
    # operands of segment_sets stay boundaries: the user asked for them
    pinned = {a.exprs[k].inputs[0] for k in c_all if is_segmenter_set(a.exprs[k])}
    by_producer: dict[int, list[TensorView]] = {}
    for v in c_reads:
        pi = home.get(v)
        if pi is not None and pi != ci and v not in pinned:
            by_producer.setdefault(pi, []).append(v)
    for pi in sorted(by_producer):
        if _try(seg, protos, home, pi, ci, by_producer[pi], set(c_reads)):
            return True
    return False


def _origin(seg: "_Segmenter", v: Any) -> Any:
    """Where a forwarded chain ending at `v` starts: a fusion input, or None for a factory."""
    while True:
        k = seg.def_index.get(v)
        if k is None:
            return v
        if k not in seg.forwarded:
            return v
        tins = [x for x in seg.a.exprs[k].inputs if isinstance(x, TensorView)]
        if not tins:
            return None
        v = tins[0]


def _try(seg: "_Segmenter", protos, home, pi: int, ci: int, sinks: list[TensorView], c_reads: set) -> bool:
    a = seg.a
    info = seg.info
    p = protos[pi]
    p_defs = {v: k for k in p.all() for v in a.exprs[k].outputs if isinstance(v, TensorView)}
    read_elsewhere: set[Any] = set(a.outputs)
    for oi, o in enumerate(protos):
        if oi != ci:
            read_elsewhere.update(_reads(seg, o.all()))
    c_origins = {_origin(seg, v) for v in c_reads}
    sink_set = set(sinks)

    # region: the tensors the sinks are computed from inside P, up to what must be read;
    # a segment_set's operand is never recomputed elsewhere: it stays where the user cut
    pinned = seg.segment_set_operands
    region: list[TensorView] = []
    index: dict[TensorView, int] = {}
    internal: dict[TensorView, int] = {}
    stack = list(sinks)
    while stack:
        v = stack.pop()
        if v in index:
            continue
        index[v] = len(region)
        region.append(v)
        k = p_defs.get(v)
        if k is not None and v not in pinned and is_recomputable(a.exprs[k]):
            internal[v] = k
            stack.extend(x for x in a.exprs[k].inputs if isinstance(x, TensorView))

    def cost(v: TensorView) -> float:
        if v in c_reads and v not in sink_set:
            return 0.0
        if v in internal or home.get(v) == pi:
            # computed by P: read it, and write it unless P writes it for someone else anyway
            return float(info.stored_bytes(v) * (1 if v in read_elsewhere else 2))
        if home.get(v) is not None:  # another group's output: in memory already
            return float(info.stored_bytes(v))
        origin = _origin(seg, v)  # a fusion input or a forwarded chain's end
        if origin is None or origin in c_origins:
            return 0.0
        return float(info.stored_bytes(origin))

    n = 2 + 2 * len(region)
    src, dst, cap = [], [], []
    inf = math.inf
    for v, i in index.items():
        vin, vout = 2 + 2 * i, 3 + 2 * i
        src.append(vin), dst.append(vout), cap.append(cost(v))
        k = internal.get(v)
        if k is None:
            src.append(0), dst.append(vin), cap.append(inf)
        else:
            for x in a.exprs[k].inputs:
                if isinstance(x, TensorView):
                    src.append(3 + 2 * index[x]), dst.append(vin), cap.append(inf)
    for v in sinks:
        src.append(3 + 2 * index[v]), dst.append(1), cap.append(inf)
    value, side = min_cut(n, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                          np.array(cap, dtype=np.float64), 0, 1)
    current = sum(cost(v) for v in sinks)
    if not value < current:
        return False
    cut = {v for v, i in index.items() if side[2 + 2 * i] and not side[3 + 2 * i]}
    recompute: set[int] = set()
    stack = [v for v in sinks if v not in cut]
    seen: set[TensorView] = set()
    while stack:
        v = stack.pop()
        if v in seen or v in cut:
            continue
        seen.add(v)
        k = internal.get(v)
        if k is None:  # cannot happen for a finite cut: such a tensor is cut or unreachable
            return False
        recompute.add(k)
        stack.extend(x for x in a.exprs[k].inputs if isinstance(x, TensorView))
    c = protos[ci]
    trial = c.owned | c.extra | recompute
    # asked as _finalize will build the segment: with the forwarded and scalar work it reads
    if seg.custom is None and not seg.accepts(trial, c.scheduler):
        return False
    c.extra |= recompute - c.owned
    return True


def _prune(seg: "_Segmenter", protos: list["_Proto"]) -> list["_Proto"]:
    """Drop from each group the outputs nobody reads and the work they needed; an expr that
    loses its home moves to the first group that recomputes it; empty groups go."""
    a = seg.a
    changed = True
    while changed:
        changed = False
        reads = [set(_reads(seg, p.all())) for p in protos]
        for pi, p in enumerate(protos):
            wanted = set(a.outputs)
            for oi, r in enumerate(reads):
                if oi != pi:
                    wanted |= r
            defs = {v: k for k in p.all() for v in a.exprs[k].outputs}
            live: set[int] = set()
            stack = [v for k in p.owned for v in a.exprs[k].outputs if v in wanted]
            while stack:
                v = stack.pop()
                k = defs.get(v)
                if k is None or k in live:
                    continue
                live.add(k)
                stack.extend(a.exprs[k].inputs)
            dead_owned = p.owned - live
            dead_extra = p.extra - live
            p.extra -= dead_extra
            changed |= bool(dead_extra)
            for k in sorted(dead_owned):
                for o in protos:
                    if o is not p and k in o.extra:
                        o.extra.discard(k)
                        o.owned.add(k)
                        p.owned.discard(k)
                        changed = True
                        break
        if any(not p.owned for p in protos):
            protos = [p for p in protos if p.owned]
            changed = True
    return protos
