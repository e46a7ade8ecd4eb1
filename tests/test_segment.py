"""The segmenter on the seed documents' fusions (001-004) and on the cases between:
group counts, schedulers, edges, inter-segment bytes, forwarding, rematerialisation,
segment_set, custom segmentation, the dump format, and results through the segments."""
import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.examples.pointwise_chain import pointwise_chain
from fuser.examples.rmsnorm_backward import make_inputs, rmsnorm_backward
from fuser.ir import FullOp, LoadStoreOp, ReductionOp
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close
from fuser.frontend.segmentation import segment
from fuser.segment import SegmentedFusion
from fuser.segment.forwarding import forwarded_exprs


def _define(build, *args):
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


def _check_through_segments(fd, inputs):
    """fd.execute (segment by segment) equals the unsegmented reference executor."""
    got = fd.execute(inputs)
    want = run_reference(fd.fusion, inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"output {k}")
    return got


# --- seed 001: IO-aware rematerialisation --------------------------------------------------

@pytest.fixture(scope="module")
def seed001():
    fd = _define(rmsnorm_backward)
    return fd, make_inputs("meta")


def test_seed001_is_one_inner_outer_kernel(seed001):
    fd, inputs = seed001
    seg = segment(fd, inputs)
    assert [g.scheduler for g in seg.groups] == ["inner_outer_persistent"]
    assert seg.edges == []


def test_seed001_two_kernels_and_nothing_between_them(seed001, monkeypatch):
    # without the inner-outer kernel's sums per row segment, the sums over the sequence
    # go to a reduction kernel, and rematerialisation leaves nothing between the two
    monkeypatch.setenv("FUSER_DISABLE", "row_segments")
    fd, inputs = seed001
    seg = segment(fd, inputs)
    assert [g.scheduler for g in seg.groups] == ["reduction", "inner_outer_persistent"]
    assert seg.edges == []
    assert seg.inter_segment_bytes() == 0
    # every output of the fusion comes out of a group
    produced = {v for g in seg.groups for v in g.outputs}
    assert set(fd.fusion.outputs) <= produced


def test_seed001_without_remat_passes_nvfusers_three_tensors(seed001, monkeypatch):
    fd, inputs = seed001
    monkeypatch.setenv("FUSER_DISABLE", "remat,row_segments")
    seg = segment(fd, inputs)
    assert [g.scheduler for g in seg.groups] == ["reduction", "inner_outer_persistent"]
    shapes = sorted(tuple(seg.runtime_info.shape(v)) for v in seg.edge_vals())
    # nvFuser's T12, T14 (expanded: stored once per row) and T15
    assert shapes == [(56, 1024, 1024)] * 3
    full = 56 * 1024 * 1024 * 4
    assert seg.inter_segment_bytes() == 2 * full + 56 * 1024 * 4


def test_seed001_forwarded_casts_are_in_both_groups(seed001, monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", "row_segments")
    fd, inputs = seed001
    seg = segment(fd, inputs)
    fwd = set(forwarded_exprs(fd.fusion, set(fd.fusion.exprs())))
    shared = set(seg.groups[0].exprs) & set(seg.groups[1].exprs)
    # each shared expr is forwarded (owned by neither) or recomputed (owned by one)
    for e in shared:
        owners = sum(e in g.owned for g in seg.groups)
        assert owners == (0 if e in fwd else 1)
    assert shared & fwd
    # bf16 -> float casts of full-size inputs are recomputed in each kernel, never passed
    assert any(e.outputs[0].dtype is DataType.Float and e.inputs[0].dtype is DataType.BFloat16 for e in shared)


# --- seed 002: forwarding factories --------------------------------------------------------

def _full_both_sides(fd):
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    t1 = fd.ops.full([t0.size(0)], 1.0, dtype=DataType.Float)
    t2 = fd.ops.add(t0, t1)
    t3 = fd.ops.segment_set(t2)
    t4 = fd.ops.add(t3, t1)
    fd.add_output(t4)


def test_seed002_full_is_recomputed_on_both_sides_of_segment_set():
    fd = _define(_full_both_sides)
    x = torch.randn(1024)
    seg = segment(fd, [x])
    assert len(seg.groups) == 2
    full = next(e for e in fd.fusion.exprs() if isinstance(e, FullOp))
    assert all(full in g.exprs for g in seg.groups)  # each segment has its own FullOp
    assert full.outputs[0] not in {e.val for e in seg.edges}
    assert all(full.outputs[0] not in g.outputs and full.outputs[0] not in g.inputs for g in seg.groups)
    (out,) = _check_through_segments(fd, [x])
    assert torch.allclose(out, x + 1 + 1)


def test_forwarding_off_passes_the_full_between_segments(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", "forwarding,remat")
    fd = _define(_full_both_sides)
    seg = segment(fd, [torch.randn(64)])
    full = next(e for e in fd.fusion.exprs() if isinstance(e, FullOp))
    assert full.outputs[0] in {e.val for e in seg.edges}


def test_rng_is_never_forwarded():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        r = fd.ops.uniform(0.0, 1.0, [t0.size(0)], dtype=DataType.Float)
        a = fd.ops.segment_set(fd.ops.add(t0, r))
        fd.add_output(fd.ops.mul(a, r))

    fd = _define(build)
    x = torch.randn(32)
    seg = segment(fd, [x])
    rng_out = next(e for e in fd.fusion.exprs() if type(e).__name__ == "RNGOp").outputs[0]
    assert sum(rng_out.definition in g.exprs for g in seg.groups) == 1
    assert rng_out in {e.val for e in seg.edges}
    (out,) = fd.execute([x])
    assert out.shape == (32,)


# --- seed 003: user-facing segmentation ----------------------------------------------------

def _normalised(text):
    return re.sub(r"\s+", " ", re.sub(r"nvfuser_fusion_id\d+", "nvfuser_fusion_idN", text)).strip()


def test_seed003_segments_print_as_in_the_report():
    from tests.test_frontend_seed003 import FIRST_SEGMENT, ORIGINAL, SECOND_SEGMENT, _define as define_text

    fd = define_text(ORIGINAL, "nvfuser_fusion_id1")
    inputs = [torch.randn(5, 7), torch.randn(5, 7)]
    segments = fd.segment(inputs)
    assert [_normalised(str(s)) for s in segments] == [_normalised(FIRST_SEGMENT), _normalised(SECOND_SEGMENT)]
    # segment state index -> original state index: inputs T0, T1, intermediate T3, output T4
    maps = [fd.segment_index_space_maps[s] for s in segments]
    assert maps[0][segments[0].inputs()[0]] == 0 and maps[0][segments[0].outputs()[0]] == 3
    assert [maps[1][i] for i in segments[1].inputs()] == [1, 3] and maps[1][segments[1].outputs()[0]] == 4
    (out,) = fd.execute(inputs)  # now through _execute_segments
    assert torch.allclose(out, inputs[1] + inputs[0].sum(1, keepdim=True))


def test_segment_of_a_one_kernel_fusion_is_empty():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.exp(fd.ops.neg(t0)))

    fd = _define(build)
    x = torch.randn(3, 4)
    assert fd.segment([x]) == []
    assert fd.segment_index_space_maps == {}
    (out,) = fd.execute([x])
    assert torch.equal(out, torch.exp(-x))


def test_execute_segments_frees_intermediates_and_matches():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        a = fd.ops.sum(t0, dims=[1], keepdim=True)
        b = fd.ops.segment_set(fd.ops.add(t0, a))
        c = fd.ops.sum(b, dims=[0], keepdim=False)
        fd.add_output(c)
        fd.add_output(fd.ops.mul(b, 2.0))

    fd = _define(build)
    x = torch.randn(6, 5)
    segments = fd.segment([x])
    assert len(segments) >= 2
    got = fd.execute([x])
    want = run_reference(fd.fusion, [x])
    for g, w in zip(got, want):
        assert_close(g, w)


# --- seed 004: custom segmentation ---------------------------------------------------------

def _chain(fd):
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    t1 = fd.ops.exp(t0)
    t2 = fd.ops.sum(t1, dims=[1], keepdim=True)
    t3 = fd.ops.div(t1, t2)
    t4 = fd.ops.cast(t3, DataType.Half)
    fd.add_output(t4)


def test_seed004_custom_never_merge_gives_one_group_per_expr():
    fd = _define(_chain)
    x = torch.randn(4, 6)
    seg = segment(fd, [x], custom_should_merge=lambda a, b: False)
    exprs = fd.fusion.exprs()
    assert len(seg.groups) == len(exprs)
    assert [g.exprs for g in seg.groups] == [[e] for e in exprs]
    assert all(g.scheduler == "none" for g in seg.groups)
    assert {e.val for e in seg.edges} == {v for e in exprs[:-1] for v in e.outputs}
    (out,) = fd.execute([x])
    assert_close(out, torch.softmax(x, 1).half())


def test_seed004_custom_always_merge_gives_one_group():
    fd = _define(_chain)
    seg = segment(fd, [torch.randn(4, 6)], custom_should_merge=lambda a, b: True)
    assert len(seg.groups) == 1 and seg.groups[0].scheduler == "none"
    assert seg.groups[0].exprs == fd.fusion.exprs() and seg.edges == []


def test_custom_predicate_sees_groups():
    fd = _define(_chain)
    seen = []

    def should_merge(a, b):
        seen.append((len(a.exprs), len(b.exprs)))
        # keep reductions on their own
        return not any(isinstance(e, ReductionOp) for g in (a, b) for e in g.exprs)

    seg = segment(fd, [torch.randn(4, 6)], custom_should_merge=should_merge)
    assert seen
    red = [g for g in seg.groups if any(isinstance(e, ReductionOp) for e in g.exprs)]
    assert len(red) == 1 and len(red[0].exprs) == 1
    assert all(g.scheduler == "none" for g in seg.groups)


# --- segment_set, remat, scale, dump ---------------------------------------------------------

def test_segment_set_forces_a_boundary():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.ops.relu(fd.ops.mul(t0, 3.0))
        t2 = fd.ops.segment_set(t1)
        fd.add_output(fd.ops.add(t2, 1.0))

    fd = _define(build)
    x = torch.randn(8, 8)
    seg = segment(fd, [x])
    assert len(seg.groups) == 2 and [g.scheduler for g in seg.groups] == ["pointwise", "pointwise"]
    sset = next(e for e in fd.fusion.exprs() if isinstance(e, LoadStoreOp))
    assert [e.val for e in seg.edges] == [sset.inputs[0]]
    assert sset in seg.groups[1].exprs and sset not in seg.groups[0].exprs
    _check_through_segments(fd, [x])


def _two_reductions(fd):
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    a = fd.ops.mul(fd.ops.exp(t0), 2.0)
    fd.add_output(fd.ops.sum(a, dims=[0]))  # outer reduction
    fd.add_output(fd.ops.sum(a, dims=[1]))  # inner reduction: another kernel


def test_remat_recomputes_a_pointwise_intermediate_instead_of_passing_it(monkeypatch):
    fd = _define(_two_reductions)
    x = torch.randn(64, 48)
    seg = segment(fd, [x])
    assert [g.scheduler for g in seg.groups] == ["reduction", "reduction"]
    assert seg.edges == [] and seg.inter_segment_bytes() == 0
    assert all(g.inputs == [fd.fusion.inputs[0]] for g in seg.groups)
    _check_through_segments(fd, [x])
    monkeypatch.setenv("FUSER_DISABLE", "remat")
    seg = segment(fd, [x])
    assert len(seg.edges) == 1 and seg.inter_segment_bytes() == 64 * 48 * 4


def test_remat_keeps_a_narrow_intermediate_when_recomputing_reads_more():
    # the consumer would have to read a wide input (fp32 [N, K]) to recompute a narrow
    # intermediate (bf16 [N]): reading the intermediate is cheaper, so it stays an edge
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        s = fd.ops.sum(t0, dims=[1])
        r = fd.ops.segment_set(fd.ops.cast(s, DataType.BFloat16))
        fd.add_output(fd.ops.add(t1, fd.ops.broadcast(fd.ops.cast(r, DataType.Float), [False, True])))

    fd = _define(build)
    seg = segment(fd, [torch.randn(32, 512), torch.randn(32, 16)])
    assert len(seg.groups) == 2 and len(seg.edges) == 1
    assert seg.inter_segment_bytes() == 32 * 2
    _check_through_segments(fd, [torch.randn(32, 512), torch.randn(32, 16)])


def test_many_pointwise_ops_make_one_kernel():
    with FusionDefinition(max_length=100000) as fd:
        pointwise_chain(fd, 1000)
    seg = segment(fd, [torch.empty(16, 16, dtype=torch.half, device="meta")])
    assert len(seg.groups) == 1 and seg.groups[0].scheduler == "pointwise"
    assert len(seg.groups[0].exprs) == len(fd.fusion.exprs()) == 3002


def test_dump_segmented_fusion(monkeypatch, capsys):
    monkeypatch.setenv("FUSER_DUMP", "segmented_fusion")
    fd = _define(_full_both_sides)
    seg = segment(fd, [torch.randn(16)])
    err = capsys.readouterr().err
    assert "Segmented_Fusion Dump: -- fusion segments:" in err and "} //Segmented_Fusion" in err
    text = str(seg)
    assert re.search(r"^g\{\(pointwise\)\ngroup id: 0\ninputs:\n  T0_g_float\[iS0\{i0\}\] float\noutputs:\n", text, re.M)
    assert "edges: \ne{ g{" in text and "\n -> g{" in text
    # each expr is printed with its index in the complete fusion
    assert re.search(r"= full\(\{i0\}, f\d+\);\n\(\d+\)", text)


def test_segmented_fusion_for_matches_execute_and_is_cached():
    fd = _define(_two_reductions)
    x = torch.randn(16, 8)
    seg = fd.segmented_fusion_for([x])
    assert isinstance(seg, SegmentedFusion)
    assert fd.segmented_fusion_for([torch.randn(16, 8)]) is seg  # same input signature
    assert fd.segmented_fusion_for([torch.randn(17, 8)]) is not seg
    _check_through_segments(fd, [x])


def test_segment_needs_no_gpu_and_takes_meta_tensors():
    fd = _define(_chain)
    seg = segment(fd, [torch.empty(8, 1 << 20, device="meta")])
    # a 4 MB fp32 row does not fit one SM's registers and shared memory: two kernels
    assert [g.scheduler for g in seg.groups] == ["reduction", "pointwise"]
    seg = segment(fd, [torch.empty(1024, 1024, device="meta")])
    assert [g.scheduler for g in seg.groups] == ["inner_persistent"]
