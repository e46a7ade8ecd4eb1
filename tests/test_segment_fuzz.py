"""Property tests of the segmenter on random fusions (strategy: tests/fusion_gen.py).

For each drawn fusion and its inputs:
* cover: every tensor expr of the complete fusion is owned by exactly one group, except
  forwarded and scalar-only exprs (owned by at most one, copied anywhere); every group's
  exprs are the complete fusion's, in its topological order;
* order: every tensor a group reads is a fusion input, made inside it, or an output of
  exactly one earlier group; edges go from earlier to later groups, are exactly those
  reads, and never carry fusion inputs;
* outputs: every fusion output is a group's output (or a fusion input); groups are
  numbered by position, write nothing nobody reads and compute nothing no output needs;
* schedulers: every group has a registry scheduler (never `none`);
* results: fd.execute (segment by segment) matches the unsegmented reference executor, and
  so does running each group's own Fusion in order (where inter_segment_bytes() must be
  what the edge tensors take); segmenting again gives the same cut;
* without remat, only forwarded and scalar exprs are copied; without remat and forwarding,
  the groups partition the tensor exprs; both still run to the same results;
* custom segmentation: never merging gives one group per tensor expr, always merging one
  group for a connected fusion, a size-capped predicate groups no larger than the cap;
  all `none`, and all run to the same results;
* segment_set: an op made by fd.ops.segment_set and the producer of its (computed)
  operand never share a group: the operand crosses a boundary through memory;
* merging ends at a fixed point (with and without remat and forwarding): when a scheduler
  accepts the whole fusion and no segment_set cuts it, it is one group; and no pair of
  groups joined by an edge is left whose merge would stay acyclic, keep every segment_set
  boundary and be accepted by a scheduler (asked about the union of the two groups'
  exprs, as the merged segment would hold them); each group's scheduler is the one the
  registry proposes for it.

A second property runs fd.segment(inputs): one FusionDefinition per group, each computing
its group's outputs from its group's inputs. Fixed regression cases for what the fuzzing
found (library bugs, fixed since) are at the end.
"""
from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings

from fuser import DataType, FusionDefinition
from fuser.ir import TensorView
from fuser.runtime.binding import bind_inputs
from fuser.runtime.reference import ReferenceExecutor, run_reference
from fuser.scheduler import FusionAnalysis, propose, reject_reason
from fuser.scheduler.analysis import SCALAR, expr_kind, is_segmenter_set
from fuser.scheduler.types import REGISTRY_ORDER, SchedulerType
from fuser.frontend.segmentation import segment
from fuser.runtime.info import runtime_info
from fuser.segment import segment_fusion
from fuser.segment.forwarding import forwarded_exprs

from fusion_gen import HUGE, FusionCase, fusions

#: (rtol, atol) per output dtype. Segmenting changes no arithmetic, only the memory layout
#: of intermediates (dense vs expanded with stride 0), and with it torch's summation
#: order: atol is relative to the output's largest magnitude, and reductions over HUGE
#: rows get more room (a float32 sum of an expanded [2**17, 2] tensor differs from the
#: dense one's by ~1e-3 relative).
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-2, 1e-2),
}
HUGE_TOLERANCE = (2e-2, 2e-2)

#: Remat once recomputed a segment_set's operand in the segment_set's own group (see
#: test_remat_keeps_a_segment_set_operand_a_boundary); True would tolerate that again.
TOLERATE_REMAT_SEGMENT_SET_BUG = False
#: how often the fuzz test met it (for the curious: print it after a run)
remat_segment_set_hits = [0]

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- checks ---------------------------------------------------------------------------------------


def assert_same_results(got, want, what: str = "output", *, huge: bool = False) -> None:
    assert len(got) == len(want), f"{len(got)} outputs, reference has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"{what} {k}: dtype {g.dtype}, reference {w.dtype}"
        assert g.shape == w.shape, f"{what} {k}: shape {tuple(g.shape)}, reference {tuple(w.shape)}"
        rtol, atol = TOLERANCES.get(w.dtype, (0.0, 0.0))
        if huge:
            rtol, atol = max(rtol, HUGE_TOLERANCE[0]), max(atol, HUGE_TOLERANCE[1])
        finite = w[torch.isfinite(w)].float() if w.is_floating_point() else w.float()
        scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol * scale, equal_nan=True,
                                   msg=lambda m, k=k: f"{what} {k}: {m}")


def tensor_reads(exprs) -> set:
    """The tensors `exprs` read and do not make themselves."""
    made = {v for e in exprs for v in e.outputs}
    return {v for e in exprs for v in e.inputs if isinstance(v, TensorView) and v not in made}


def check_structure(seg, *, custom: bool, forwarding: bool = True, remat: bool = True) -> None:
    """Cover, order, outputs and scheduler properties of one SegmentedFusion."""
    fusion = seg.complete_fusion
    exprs = fusion.exprs()
    pos = {e: i for i, e in enumerate(exprs)}
    scalar = {e for e in exprs if expr_kind(e) == SCALAR}
    fwd = set(forwarded_exprs(fusion, set(exprs))) if forwarding else set()
    fusion_inputs = set(fusion.inputs)
    groups = seg.groups
    index = {id(g): gi for gi, g in enumerate(groups)}
    assert len(index) == len(groups), "a group is listed twice"

    # cover: owned exactly once (forwarded / scalar: at most once), exprs in topological order
    owners: dict = {e: [] for e in exprs}
    for gi, g in enumerate(groups):
        assert g.exprs, f"group {gi} is empty"
        for e in g.exprs:
            assert e in pos, f"group {gi} holds {e!r}, which is no expr of the complete fusion"
        idx = [pos[e] for e in g.exprs]
        assert idx == sorted(idx) and len(set(idx)) == len(idx), f"group {gi}'s exprs are not in topological order: {idx}"
        assert list(g.expr_indices) == idx, f"group {gi}: expr_indices {g.expr_indices} != positions {idx}"
        in_group = set(g.exprs)
        for e in g.owned:
            assert e in in_group, f"group {gi} owns {e!r} but does not hold it"
            owners[e].append(gi)
        assert len(set(g.owned)) == len(g.owned), f"group {gi} owns an expr twice"
        if not remat:
            copies = in_group - set(g.owned) - scalar - fwd
            assert not copies, f"group {gi} copies {sorted(pos[e] for e in copies)} without remat"
    for e, who in owners.items():
        if e in scalar or e in fwd:
            assert len(who) <= 1, f"forwarded/scalar expr {pos[e]} owned by groups {who}"
        else:
            assert len(who) == 1, f"tensor expr {pos[e]} ({type(e).__name__}) owned by groups {who}"

    # order: reads come from fusion inputs, the group itself, or one earlier group's outputs
    producers: dict = {}
    for gi, g in enumerate(groups):
        made = {o for e in g.exprs for o in e.outputs}
        for v in g.outputs:
            if isinstance(v, TensorView):
                assert v not in producers, f"{v!r} is an output of groups {producers[v]} and {gi}"
                producers[v] = gi
                assert v in made, f"group {gi} outputs {v!r}, which it does not make"
    expected_edges = set()
    for gi, g in enumerate(groups):
        reads = tensor_reads(g.exprs)
        tv_inputs = {v for v in g.inputs if isinstance(v, TensorView)}
        assert reads == tv_inputs, f"group {gi}: inputs {tv_inputs} but reads {reads}"
        for v in reads:
            if v in fusion_inputs:
                continue
            assert v in producers, f"group {gi} reads {v!r}, which no group outputs"
            assert producers[v] < gi, f"group {gi} reads {v!r} from the later (or same) group {producers[v]}"
            expected_edges.add((v, producers[v], gi))
    got_edges = set()
    for e in seg.edges:
        f, t = index[id(e.from_group)], index[id(e.to_group)]
        assert e.val not in fusion_inputs, f"edge {e!r} carries a fusion input"
        assert f < t, f"edge {e!r} goes from group {f} to the earlier group {t}"
        assert e.val in e.from_group.outputs and e.val in e.to_group.inputs, f"edge {e!r} is no output/input pair"
        got_edges.add((e.val, f, t))
    assert got_edges == expected_edges, f"edges {got_edges} != reads across groups {expected_edges}"

    for v in fusion.outputs:
        assert v in fusion_inputs or v in producers, f"fusion output {v!r} is no group's output"

    # nothing written that nobody reads, nothing computed that no output needs
    fusion_outputs = set(fusion.outputs)
    read_later = {v for g in groups for v in g.inputs}
    for gi, g in enumerate(groups):
        assert g.id == gi, f"group at position {gi} has id {g.id}"
        for v in g.outputs:
            assert v in fusion_outputs or v in read_later, f"group {gi} writes {v!r}, which nothing reads"
        defs = {o: e for e in g.exprs for o in e.outputs}
        live, stack = set(), list(g.outputs)
        while stack:
            e = defs.get(stack.pop())
            if e is not None and e not in live:
                live.add(e)
                stack.extend(e.inputs)
        dead = [pos[e] for e in g.exprs if e not in live and e not in scalar]
        assert not dead, f"group {gi} computes exprs {dead} that none of its outputs needs"

    for gi, g in enumerate(groups):
        if custom:
            assert g.scheduler is SchedulerType.none, f"group {gi}: {g.scheduler} under custom segmentation"
        else:
            assert g.scheduler in REGISTRY_ORDER, f"group {gi}: scheduler {g.scheduler!r}"
            # what the segmenter judged is the segment the runtime prepares: its own outputs
            # (GPU fuzz seed 13013 case 171: a producer lost to remat the output its resize
            # kernel needed as reference, and fell back at run time)
            if g.scheduler not in (SchedulerType.expr_eval, SchedulerType.no_op):
                sub = FusionAnalysis(g.fusion()).whole()
                why = reject_reason(sub, g.scheduler)
                assert why is None, f"group {gi}: {g.scheduler.value} rejects the segment it became: {why}"


def check_segment_sets(seg) -> None:
    """A segment_set's computed operand is passed through memory: never made in its group."""
    edge_vals = {e.val for e in seg.edges}
    outs = {v for g in seg.groups for v in g.outputs}
    for gi, g in enumerate(seg.groups):
        made = {v for e in g.exprs for v in e.outputs}
        for e in g.exprs:
            if not is_segmenter_set(e) or e.inputs[0].definition is None:
                continue
            x = e.inputs[0]
            assert x not in made, f"group {gi} computes segment_set operand {x!r} itself instead of reading it"
            assert x in edge_vals or x in outs, f"segment_set operand {x!r} is no boundary"


def check_merged_to_fixed_point(seg) -> None:
    """No merge the schedulers would take is left undone: the whole fusion is one group when
    a scheduler accepts it (and no segment_set cuts it), and no producer/consumer pair of
    groups remains whose union stays acyclic, keeps the segment_set boundaries and is
    accepted by a scheduler. Each group's scheduler is the one the registry proposes."""
    fusion = seg.complete_fusion
    analysis = FusionAnalysis(fusion, seg.runtime_info)
    groups = seg.groups
    # (segment_set, producer of its operand): never in one group
    cuts = [(e, e.inputs[0].definition) for e in fusion.exprs()
            if is_segmenter_set(e) and e.inputs[0].definition is not None]
    whole = propose(analysis.whole())
    if whole is not None and not cuts:
        assert len(groups) == 1, (f"{whole.value} accepts the whole fusion, segmented as "
                                  f"{[g.scheduler.value for g in groups]}")
    # each group's scheduler is the registry's first to accept it (a lone op none takes: ATen),
    # asked of the group as it is, with the outputs it provides (a value another group
    # recomputes is not one: a resize group's cast that the next group casts again)
    for gi, g in enumerate(groups):
        st = propose(analysis.sub((analysis.expr_index[e] for e in g.exprs), set(g.outputs)))
        if st is None and len(g.owned) == 1:
            st = SchedulerType.expr_eval
        assert g.scheduler is st, f"group {gi} is {g.scheduler.value}, the registry proposes {st}"
    index = {id(g): gi for gi, g in enumerate(groups)}
    consumers: list[set[int]] = [set() for _ in groups]
    for e in seg.edges:
        consumers[index[id(e.from_group)]].add(index[id(e.to_group)])
    # groups are in topological order: what each reaches, from the last one back
    reach: list[set[int]] = [set() for _ in groups]
    for gi in reversed(range(len(groups))):
        for c in consumers[gi]:
            reach[gi] |= {c} | reach[c]
    for p, cs in enumerate(consumers):
        for c in sorted(cs):
            if any(c in reach[x] for x in cs if x != c):
                continue  # a path through a third group: the merge would make a cycle
            exprs = set(groups[p].exprs) | set(groups[c].exprs)
            if any(s in exprs and d in exprs for s, d in cuts):
                continue
            st = propose(analysis.sub(analysis.expr_index[e] for e in exprs))
            assert st is None, (f"groups {p} ({groups[p].scheduler.value}) and {c} ({groups[c].scheduler.value}) "
                                f"were left apart, but {st.value} accepts them merged")


def components(fusion) -> int:
    """Connected components of the tensor exprs (joined by the tensors they pass)."""
    exprs = [e for e in fusion.exprs() if expr_kind(e) != SCALAR]
    parent = list(range(len(exprs)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    made = {v: i for i, e in enumerate(exprs) for v in e.outputs if isinstance(v, TensorView)}
    for i, e in enumerate(exprs):
        for v in e.inputs:
            j = made.get(v)
            if j is not None:
                parent[find(i)] = find(j)
    return len({find(i) for i in range(len(exprs))})


def _declared(x: torch.Tensor, tv: TensorView) -> torch.Tensor:
    """An intermediate as a group input declares it: dense, stride 0 on expanded axes."""
    expanded = [d for d, i in enumerate(tv.logical_no_reductions()) if i.has_expanded_extent]
    base = x
    for d in expanded:
        base = base.narrow(d, 0, min(1, x.shape[d]))
    return base.contiguous().expand(x.shape) if expanded else x.contiguous()


def run_segmentation(seg, inputs, *, check_bytes: bool = False) -> list:
    """Run `seg` group by group, each group's own Fusion on the reference executor: what
    the segments compute, independent of how the runtime launches them. With
    `check_bytes`, seg.inter_segment_bytes() must be what its edge tensors take in memory
    (broadcast axes, expanded or not, stored once)."""
    fusion = seg.complete_fusion
    binding = bind_inputs(fusion, inputs)
    whole = ReferenceExecutor(fusion, binding.device)
    whole.bind(binding)  # for scalars (extents) a group needs
    env = dict(zip(fusion.inputs, binding.tensors))
    fusion_inputs = set(fusion.inputs)
    for g in seg.groups:
        args = []
        for v in g.inputs:
            if v in env:
                x = env[v]
                args.append(_declared(x, v) if isinstance(v, TensorView) and v not in fusion_inputs else x)
            else:
                args.append(whole.value(v))
        env.update(zip(g.outputs, run_reference(g.fusion(), args)))
    if check_bytes:
        stored = 0
        for v in dict.fromkeys(e.val for e in seg.edges):
            x = env[v]
            ids = v.logical_no_reductions()
            stored += math.prod(n for n, i in zip(x.shape, ids) if not i.is_broadcast) * x.element_size()
        assert seg.inter_segment_bytes() == stored, f"inter_segment_bytes {seg.inter_segment_bytes()} != {stored}"
    return [env[v] if v in env else whole.value(v) for v in fusion.outputs]


def check_case(case: FusionCase) -> None:
    fd = case.fd
    fusion = fd.fusion
    inputs = case.make_inputs()
    huge = max(case.sizes) >= HUGE
    want = run_reference(fusion, case.make_inputs())
    assert [tuple(w.shape) for w in want] == case.output_shapes(), "the generator's shapes disagree with the reference"

    def same(got, what):
        assert_same_results(got, want, what, huge=huge)

    # the segmentation fd.execute runs
    seg = fd.segmented_fusion_for(inputs)
    check_structure(seg, custom=False)
    try:
        check_segment_sets(seg)
    except AssertionError:
        plain = segment_fusion(fusion, runtime_info(fusion, inputs), rematerialize=False)
        check_segment_sets(plain)  # not only remat's doing: a new bug
        if not TOLERATE_REMAT_SEGMENT_SET_BUG:
            raise
        remat_segment_set_hits[0] += 1
    check_merged_to_fixed_point(seg)
    same(fd.execute(inputs), "output")
    same(run_segmentation(seg, inputs, check_bytes=True), "group-by-group output")
    # segmenting afresh gives the same cut (of the fusion execute segments: the one the
    # pre-segmentation passes made)
    again = segment(seg.complete_fusion, inputs)
    assert [[id(e) for e in g.exprs] for g in again.groups] == [[id(e) for e in g.exprs] for g in seg.groups]

    # without remat, and without forwarding too
    info = runtime_info(fusion, inputs)
    no_remat = segment_fusion(fusion, info, rematerialize=False)
    check_structure(no_remat, custom=False, remat=False)
    check_segment_sets(no_remat)
    check_merged_to_fixed_point(no_remat)
    same(run_segmentation(no_remat, inputs), "no-remat output")
    bare = segment_fusion(fusion, info, forwarding=False, rematerialize=False)
    check_structure(bare, custom=False, forwarding=False, remat=False)
    check_segment_sets(bare)
    check_merged_to_fixed_point(bare)
    same(run_segmentation(bare, inputs), "no-remat no-forwarding output")

    # custom: never merge
    never = segment(fd, inputs, custom_should_merge=lambda a, b: False)
    check_structure(never, custom=True, forwarding=False, remat=False)
    tensor_exprs = [e for e in fusion.exprs() if expr_kind(e) != SCALAR]
    assert len(never.groups) == len(tensor_exprs), f"{len(never.groups)} groups for {len(tensor_exprs)} tensor exprs"
    for g in never.groups:
        assert len(g.owned) == 1 and expr_kind(g.owned[0]) != SCALAR, f"group {g.id} owns {g.owned}"
    same(run_segmentation(never, inputs), "never-merge output")

    # custom: always merge
    always = segment(fd, inputs, custom_should_merge=lambda a, b: True)
    check_structure(always, custom=True, forwarding=False, remat=False)
    n = components(fusion)
    if n == 1:
        assert len(always.groups) == 1, f"a connected fusion in {len(always.groups)} groups with an always-merge predicate"
    else:
        assert len(always.groups) <= n
    same(run_segmentation(always, inputs), "always-merge output")

    # custom: merge up to a size cap; the predicate sees the groups as they stand
    cap = 3
    seen = []

    def capped(a, b):
        seen.append((len(a.owned), len(b.owned)))
        return len(a.owned) + len(b.owned) <= cap

    capped_seg = segment(fd, inputs, custom_should_merge=capped)
    check_structure(capped_seg, custom=True, forwarding=False, remat=False)
    assert all(len(g.owned) <= cap for g in capped_seg.groups)
    assert all(x >= 1 and y >= 1 for x, y in seen)
    same(run_segmentation(capped_seg, inputs), "capped-merge output")


# --- properties -----------------------------------------------------------------------------------


@FUZZ
@given(fusions())
def test_random_fusion_segments_correctly(case):
    check_case(case)


def check_translated_segments(case: FusionCase) -> None:
    """fd.segment(inputs): one FusionDefinition per group, each taking the group's inputs
    (intermediates laid out as declared) and computing the group's outputs."""
    fd = case.fd
    inputs = case.make_inputs()
    seg = fd.segmented_fusion_for(inputs)
    segments = fd.segment(inputs)
    if len(seg.groups) == 1:
        assert segments == []
        return
    assert len(segments) == len(seg.groups)
    fusion = seg.complete_fusion
    binding = bind_inputs(fusion, inputs)
    whole = ReferenceExecutor(fusion, binding.device)
    whole.bind(binding)
    env = dict(zip(fusion.inputs, binding.tensors))
    fusion_inputs = set(fusion.inputs)
    for gi, (g, sfd) in enumerate(zip(seg.groups, segments)):
        args = []
        for v in g.inputs:
            if v in env:
                x = env[v]
                args.append(_declared(x, v) if isinstance(v, TensorView) and v not in fusion_inputs else x)
            else:
                args.append(whole.value(v))
        assert len(sfd.inputs()) == len(args), f"segment {gi} takes {len(sfd.inputs())} inputs, its group {len(args)}"
        want = run_reference(g.fusion(), args)
        assert_same_results(sfd.execute(args), want, f"segment {gi} output", huge=max(case.sizes) >= HUGE)
        env.update(zip(g.outputs, want))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fusions())
def test_random_fusion_segments_translate_to_runnable_definitions(case):
    check_translated_segments(case)


# --- fixed regressions ----------------------------------------------------------------------------


def _define(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def test_segment_set_after_forwarded_cast_is_a_boundary():
    # Broke (before forwarding stopped at segment_set operands): a bf16 input's cast to
    # float was forwarded, so the segment_set's group recomputed its own operand and the
    # requested boundary vanished (one group holding cast + segment_set).
    def build(fd):
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
        t1 = fd.ops.cast(t0, dtype=DataType.Float)
        t2 = fd.ops.segment_set(t1)
        fd.add_output(fd.ops.exp(t2))

    fd = _define(build)
    inputs = [torch.randn(5).bfloat16()]
    seg = fd.segmented_fusion_for(inputs)
    check_structure(seg, custom=False)
    check_segment_sets(seg)
    assert len(seg.groups) == 2
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs))


def test_segment_set_after_forwarded_full_is_a_boundary():
    # Same as above with a factory: full -> segment_set must pass the full through memory.
    def build(fd):
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        f = fd.ops.full(shape=[4], fill_value=2.0, dtype=DataType.Float)
        s = fd.ops.segment_set(f)
        fd.add_output(fd.ops.mul(t0, s))

    fd = _define(build)
    inputs = [torch.randn(4)]
    seg = fd.segmented_fusion_for(inputs)
    check_structure(seg, custom=False)
    check_segment_sets(seg)
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs))


def _segment_set_beside_a_pointwise_consumer(fd):
    x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    a = fd.ops.mul(x, 2.0)
    s = fd.ops.segment_set(a)
    b = fd.ops.add(a, x)
    fd.add_output(fd.ops.sub(s, b))


def test_segment_set_beside_a_pointwise_consumer_without_remat():
    # The boundary holds when remat is off: [mul, add] | [segment_set, sub], `a` passed.
    fd = _define(_segment_set_beside_a_pointwise_consumer)
    inputs = [torch.randn(8)]
    seg = segment_fusion(fd.fusion, runtime_info(fd.fusion, inputs), rematerialize=False)
    check_structure(seg, custom=False, remat=False)
    check_segment_sets(seg)
    assert len(seg.groups) == 2


def test_remat_keeps_a_segment_set_operand_a_boundary():
    fd = _define(_segment_set_beside_a_pointwise_consumer)
    inputs = [torch.randn(8)]
    seg = fd.segmented_fusion_for(inputs)
    check_segment_sets(seg)  # fails: one group [mul, segment_set, add, sub]


def test_remat_keeps_a_segment_set_operand_of_a_trivial_reduction_a_boundary():
    def build(fd):
        t0 = fd.define_tensor(shape=[1], contiguity=[None], dtype=DataType.Float)
        t1 = fd.ops.sigmoid(t0)
        t3 = fd.ops.add(t1, 0.125)
        t5 = fd.ops.sum(t1, dims=[-1], keepdim=False)
        t6 = fd.ops.sigmoid(t5)
        t7 = fd.ops.segment_set(t5)
        t11 = fd.ops.mul(t6, t3)
        fd.add_output(fd.ops.sub(t7, t11))
        fd.add_output(t7)

    fd = _define(build)
    inputs = [torch.randn(1)]
    seg = fd.segmented_fusion_for(inputs)
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs))  # results are right
    check_segment_sets(seg)  # fails: the boundary is gone


# fd.segment(inputs) then fd.execute(inputs) runs the translated segments through
# FusionDefinition._execute_segments (fuser/frontend/fusion_definition.py). The segments are
# right (test_random_fusion_segments_translate_to_runnable_definitions), but the plumbing
# between them is not: found by fuzzing fd.segment + fd.execute (about 1 in 13 examples).


def _execute_after_segment(build, inputs):
    fd = _define(build)
    assert len(fd.segment(inputs)) == 2
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs))


def test_execute_after_segment_passes_extents_of_unread_inputs():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1], contiguity=[True])
        t1 = fd.define_tensor(shape=[-1], contiguity=[True])
        t2 = fd.ops.segment_set(fd.ops.exp(t1))
        fd.add_output(fd.ops.mul(t2, fd.ops.size(t0, 0)))

    _execute_after_segment(build, [torch.randn(3), torch.randn(4)])


def test_execute_after_segment_lays_out_a_permuted_intermediate():
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        p = fd.ops.permute(fd.ops.mul(x, x), dims=[1, 0])
        fd.add_output(fd.ops.exp(fd.ops.segment_set(p)))

    _execute_after_segment(build, [torch.randn(3, 4)])


def test_execute_after_segment_lays_out_an_expanded_intermediate():
    def build(fd):
        x = fd.define_tensor(shape=[-1], contiguity=[True])
        b = fd.ops.broadcast_in_dim(fd.ops.mul(x, x), shape=[5, 3], broadcast_dims=[1])
        ones = fd.ops.full([5, 2], 1.0, dtype=DataType.Float)
        fd.add_output(fd.ops.matmul(fd.ops.permute(b, [1, 0]), ones))

    _execute_after_segment(build, [torch.randn(3)])


# Found by check_merged_to_fixed_point (before the segmenter asked about the whole fusion
# first and about merges with the forwarded work the merged segment recomputes).


def test_whole_fusion_one_scheduler_takes_is_one_group_though_disconnected():
    # A reduction and an unrelated pointwise op read nothing in common, so no merge pass
    # offered them to each other: two groups, though the reduction scheduler takes both.
    def build(fd):
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[1], contiguity=[None], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t0, dims=[0], keepdim=True))
        fd.add_output(fd.ops.exp(t1))

    fd = _define(build)
    inputs = [torch.randn(5), torch.randn(1)]
    seg = fd.segmented_fusion_for(inputs)
    check_structure(seg, custom=False)
    check_merged_to_fixed_point(seg)
    assert [g.scheduler for g in seg.groups] == [SchedulerType.reduction]
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs))


def test_merges_are_judged_with_the_forwarded_casts_they_recompute():
    # The outer reduction of a bf16 input's float cast and the op reading both again fit
    # one outer_persistent kernel when the kernel holds the bf16 row (the cast is forwarded:
    # recomputed in the segment), not the float one the merge was once judged by. The
    # segment_set elsewhere keeps the whole-fusion check out of it.
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16)
        t1 = fd.ops.cast(t0, dtype=DataType.Float)
        t2 = fd.ops.sum(t1, dims=[0], keepdim=False)
        t3 = fd.ops.broadcast_in_dim(t2, shape=t0.shape(), broadcast_dims=[1, 2])
        fd.add_output(fd.ops.sub(t1, t3))
        t4 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.segment_set(fd.ops.exp(t4)), 2.0))

    fd = _define(build)
    inputs = [torch.randn(HUGE, 3, 3).bfloat16(), torch.randn(4)]
    seg = fd.segmented_fusion_for(inputs)
    check_structure(seg, custom=False)
    check_segment_sets(seg)
    check_merged_to_fixed_point(seg)
    assert SchedulerType.outer_persistent in [g.scheduler for g in seg.groups]
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs), huge=True)


def test_groups_remat_leaves_mergeable_are_merged():
    # Found by drawing fusions of up to 30 ops (fusions(max_ops=30)). Remat moves `neg(t6)` into the consumers of the resize group, after which the
    # reduction group and the pointwise group reading both its result and that recomputed
    # tensor are one inner_persistent kernel; the merge passes ran before remat, so a last
    # pass over the producer/consumer pairs left has to merge them.
    def build(fd):
        t0 = fd.define_tensor(shape=[1, -1], contiguity=[None, True], dtype=DataType.Float)
        t1 = fd.ops.neg(t0)
        t2 = fd.ops.cat([t0, t1], dim=1)
        t3 = fd.ops.slice(t2, start_indices=[0, 2], end_indices=[1, 4])
        t5 = fd.ops.neg(fd.ops.neg(t3))
        t6 = fd.ops.sum(t5, dims=[0], keepdim=False)
        t7 = fd.ops.neg(t6)
        t9 = fd.ops.sum(fd.ops.neg(t7), dims=[0], keepdim=False)
        fd.add_output(fd.ops.add(t9, t7))

    fd = _define(build)
    inputs = [torch.randn(1, 2)]
    seg = fd.segmented_fusion_for(inputs)
    check_structure(seg, custom=False)
    check_merged_to_fixed_point(seg)
    assert len(seg.groups) == 2, repr(seg)
    assert_same_results(fd.execute(inputs), run_reference(fd.fusion, inputs))
    assert_same_results(run_segmentation(seg, inputs, check_bytes=True), run_reference(fd.fusion, inputs))


def test_remat_kept_where_every_group_takes_its_real_outputs(monkeypatch):
    """pad, slice and two var_means: the merges judged one group with an output a later
    group recomputes (no scheduler took it so), but with the outputs it really writes resize
    takes it. The segmentation with rematerialisation stands (it was thrown away whole, and
    the segmenter fell back to one without recomputation)."""
    from fuser.segment import segmenter

    def build(fd):
        t2 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        t3 = fd.ops.cast(t2, dtype=DataType.Float)
        t5 = fd.ops.slice(fd.ops.pad(t3, [2, 2], 0.0), start_indices=[2], end_indices=[7])
        _, m1 = fd.ops.var_mean(fd.ops.sub(t5, t3), dims=[0], correction=0, keepdim=False)
        _, m2 = fd.ops.var_mean(t5, dims=[0], correction=0, keepdim=True)
        fd.add_output(m2)
        fd.add_output(m1)

    attempts = []
    finalize = segmenter._Segmenter._finalize

    def spy(self, protos):
        attempts.append(self.remat)
        return finalize(self, protos)

    monkeypatch.setattr(segmenter._Segmenter, "_finalize", spy)
    fd = _define(build)
    seg = fd.segmented_fusion_for([torch.randn(5).half()])
    assert attempts == [True], attempts  # the first attempt, with rematerialisation, stands
    check_structure(seg, custom=False)


def test_a_group_is_checked_with_the_outputs_it_provides():
    """Found by the fuzz above: a resize group casts an input that the reduction group after
    it casts again (recomputation), so the cast is not among the resize group's outputs; the
    check must ask the registry about the group with those outputs, as the segmenter did."""
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        t1 = fd.ops.cast(t0, dtype=DataType.Float)
        t3 = fd.ops.cat([t1, fd.ops.neg(t1)], dim=1)
        t4 = fd.ops.slice(t3, start_indices=[0, 2], end_indices=[2, 4])
        t6 = fd.ops.add(fd.ops.add(t4, t1), t4)
        fd.add_output(fd.ops.sum(fd.ops.neg(fd.ops.neg(t6)), dims=[0], keepdim=False))
    seg = fd.segmented_fusion_for([torch.empty(2, 2, dtype=torch.bfloat16, device="meta")])
    assert [g.scheduler for g in seg.groups] == [SchedulerType.resize, SchedulerType.reduction]
    assert len(seg.groups[0].outputs) == 1
    check_merged_to_fixed_point(seg)
