"""Exact mapping of IterDomains (fuser.ir.mapping) over fusions built directly with the IR."""
import pytest

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    CatOp,
    DataType,
    ExpandOp,
    Fusion,
    FullOp,
    GatherOp,
    IndexSelectOp,
    IterDomain,
    IterType,
    LoadStoreOp,
    LoadStoreOpType,
    MatmulOp,
    ReductionOp,
    ReshapeOp,
    Scalar,
    ScatterOp,
    SelectOp,
    SliceOp,
    SqueezeOp,
    TensorView,
    TernaryOp,
    TernaryOpType,
    UnaryOp,
    UnaryOpType,
    WelfordOp,
)
from fuser.ir.domain import resize
from fuser.ir.mapping import ExactMap, exact_pairs

from irbuild import bc, it, sym, tv


def like(t: TensorView, dtype=None) -> TensorView:
    return tv([i.clone_like() for i in t.logical_no_reductions()], dtype or t.dtype)


def inputs(f: Fusion, *tvs: TensorView) -> None:
    for t in tvs:
        f.add_input(t)


def names(ids) -> set:
    return {i.name for i in ids}


def test_elementwise_maps_position_wise_and_broadcast_only_to_broadcast():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        t1 = tv([it(), bc()])
        inputs(f, t0, t1)
        t2 = like(t0)
        BinaryOp([t0, t1], [t2], op_type=BinaryOpType.Add)
        t3 = like(t2)
        UnaryOp([t2], [t3], op_type=UnaryOpType.Exp)
        f.add_output(t3)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])
    assert em.same(t0.logical[0], t3.logical[0])
    assert em.same(t0.logical[1], t3.logical[1])
    # the broadcast operand does not constrain the extent
    assert not em.same(t1.logical[1], t2.logical[1])
    assert em.class_of(t1.logical[1]) == [t1.logical[1]]
    assert em.class_of(t3.logical[0]) == [t0.logical[0], t1.logical[0], t2.logical[0], t3.logical[0]]
    assert exact_pairs(t2.definition) == [
        (t0.logical[0], t2.logical[0]),
        (t0.logical[1], t2.logical[1]),
        (t1.logical[0], t2.logical[0]),
    ]


def test_broadcast_maps_to_broadcast_and_scalar_operands_are_ignored():
    f = Fusion()
    with f.guard():
        t0 = tv([bc(), it()])
        t1 = tv([bc(), it()])
        s = Scalar(DataType.Float)
        inputs(f, t0, t1, s)
        t2 = like(t0)
        BinaryOp([t0, t1], [t2], op_type=BinaryOpType.Mul)
        cond = tv([bc(), it()], DataType.Bool)
        f.add_input(cond)
        t3 = like(t2)
        TernaryOp([cond, t2, s], [t3], op_type=TernaryOpType.Where)
        f.add_output(t3)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])
    assert em.same(t0.logical[0], t3.logical[0])
    assert em.same(cond.logical[1], t0.logical[1])


def test_cast_set_and_segment_set_map_position_wise():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        f.add_input(t0)
        t1 = like(t0, DataType.Half)
        UnaryOp([t0], [t1], op_type=UnaryOpType.Cast)
        t2 = like(t1)
        LoadStoreOp([t1], [t2], op_type=LoadStoreOpType.Set, cache_op="Streaming")
        t3 = like(t2)
        LoadStoreOp([t2], [t3], op_type=LoadStoreOpType.SegmenterSet, cache_op="Streaming")
        f.add_output(t3)
    em = ExactMap(f)
    for d in range(2):
        assert names(em.class_of(t0.logical[d])) == {t.logical[d].name for t in (t0, t1, t2, t3)}


def test_permute_maps_root_to_producer_and_logical_follows_the_permutation():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it(), it()])
        f.add_input(t0)
        root = [i.clone_like() for i in t0.logical]
        t1 = tv([root[2], root[0], root[1]], root=root)
        LoadStoreOp([t0], [t1], op_type=LoadStoreOpType.Set, cache_op="Streaming")
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t1.logical[0], t0.logical[2])
    assert em.same(t1.logical[1], t0.logical[0])
    assert em.same(t1.logical[2], t0.logical[1])
    assert not em.same(t1.logical[0], t0.logical[0])


def test_reduction_axis_maps_to_the_axis_it_reduces():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        f.add_input(t0)
        a, b = t0.logical
        t1 = tv([a.clone_like(), IterDomain(b.extent, IterType.Reduction)])
        ReductionOp([t0], [t1], op_type=BinaryOpType.Add, init=Scalar(DataType.Float, 0.0))
        # a consumer of the reduction sees only the kept axis
        t2 = tv([t1.logical[0].clone_like()])
        UnaryOp([t1], [t2], op_type=UnaryOpType.Neg)
        f.add_output(t2)
    em = ExactMap(f)
    assert em.same(t0.logical[1], t1.logical[1])
    assert em.same(t0.logical[0], t2.logical[0])
    assert not em.same(t1.logical[1], t2.logical[0])


def test_welford_maps_every_output():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        f.add_input(t0)
        outs = [
            tv([t0.logical[0].clone_like(), IterDomain(t0.logical[1].extent, IterType.Reduction)], dt)
            for dt in (DataType.Float, DataType.Float, DataType.Int)
        ]
        WelfordOp([t0], outs)
        for o in outs:
            f.add_output(o)
    em = ExactMap(f)
    for o in outs:
        assert em.same(o.logical[0], t0.logical[0])
        assert em.same(o.logical[1], t0.logical[1])
    assert em.same(outs[0].logical[1], outs[2].logical[1])


def test_broadcast_op_maps_kept_axes_in_order():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        f.add_input(t0)
        a, b = t0.logical
        t1 = tv([bc(), a.clone_like(), bc(), b.clone_like()])
        BroadcastOp([t0], [t1], flags=[True, False, True, False])
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(a, t1.logical[1])
    assert em.same(b, t1.logical[3])
    assert em.class_of(t1.logical[0]) == [t1.logical[0]]
    assert em.class_of(t1.logical[2]) == [t1.logical[2]]


def test_squeeze_maps_the_kept_producer_axes():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), bc(), it()])
        f.add_input(t0)
        t1 = tv([t0.logical[0].clone_like(), t0.logical[2].clone_like()])
        SqueezeOp([t0], [t1], flags=[False, True, False])
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])
    assert em.same(t0.logical[2], t1.logical[1])
    assert em.class_of(t0.logical[1]) == [t0.logical[1]]


def test_expand_keeps_broadcast_and_expanded_broadcast_as_one_axis():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), bc()])
        n = sym()
        inputs(f, t0, n)
        t1 = tv([t0.logical[0].clone_like(), bc(expanded=n)])
        ExpandOp([t0, t0.logical[0].extent, n], [t1])
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])
    assert em.same(t0.logical[1], t1.logical[1])


def test_symbolic_reshape_maps_root_only():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        n = sym()
        inputs(f, t0, n)
        root = [i.clone_like() for i in t0.logical]
        t1 = tv([IterDomain(n, is_rfactor_product=True)], root=root)
        ReshapeOp([t0, n], [t1])
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[0], root[0]) and em.same(t0.logical[1], root[1])
    assert not em.same(t1.logical[0], t0.logical[0])
    assert not em.same(t1.logical[0], t0.logical[1])


def test_slice_maps_root_to_producer_not_the_resized_logical():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        f.add_input(t0)
        root = [i.clone_like() for i in t0.logical]
        sliced = resize(root[1], -1, -1, sym())
        t1 = tv([root[0], sliced], root=root)
        one = Scalar(DataType.Int, 1)
        SliceOp([t0], [t1], ranges=[(Scalar(DataType.Int, 0), root[0].extent, one), (one, sym(), one)])
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])  # untouched axis: root is logical
    assert em.same(t0.logical[1], t1.root[1])
    assert not em.same(t0.logical[1], t1.logical[1])


def test_cat_maps_every_input_except_at_dim():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        t1 = tv([it(), it()])
        inputs(f, t0, t1)
        t2 = tv([t0.logical[0].clone_like(), it()])
        CatOp([t0, t1], [t2], dim=1)
        f.add_output(t2)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])
    assert em.same(t0.logical[0], t2.logical[0])
    assert not em.same(t0.logical[1], t1.logical[1])
    assert em.class_of(t2.logical[1]) == [t2.logical[1]]


def test_select_drops_the_selected_axis():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it(), it()])
        idx = sym()
        inputs(f, t0, idx)
        t1 = tv([t0.logical[0].clone_like(), t0.logical[2].clone_like()])
        SelectOp([t0, idx], [t1], dim=1)
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0])
    assert em.same(t0.logical[2], t1.logical[1])
    assert em.class_of(t0.logical[1]) == [t0.logical[1]]


def test_index_select_maps_other_axes_and_the_index_to_the_selected_axis():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        index = tv([it()], DataType.Int)
        inputs(f, t0, index)
        t1 = tv([index.logical[0].clone_like(), t0.logical[1].clone_like()])
        IndexSelectOp([t0, index], [t1], dim=0)
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[1], t1.logical[1])
    assert em.same(index.logical[0], t1.logical[0])
    assert not em.same(t0.logical[0], t1.logical[0])


@pytest.mark.parametrize("exact_sizes", [False, True])
def test_gather_maps_index_to_output_and_lookup_only_for_take_along_axis(exact_sizes):
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        index = tv([it(), it()], DataType.Int)
        inputs(f, t0, index)
        t1 = like(index, DataType.Float)
        GatherOp([t0, index], [t1], dim=1, exact_sizes=exact_sizes)
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(index.logical[0], t1.logical[0])
    assert em.same(index.logical[1], t1.logical[1])
    assert em.same(t0.logical[0], t1.logical[0]) is exact_sizes
    assert not em.same(t0.logical[1], t1.logical[1])


def test_scatter_maps_self_only():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        index = tv([it(), it()], DataType.Int)
        src = tv([it(), it()])
        inputs(f, t0, index, src)
        t1 = like(t0)
        ScatterOp([t0, index, src], [t1], dim=0)
        f.add_output(t1)
    em = ExactMap(f)
    assert em.same(t0.logical[0], t1.logical[0]) and em.same(t0.logical[1], t1.logical[1])
    assert not em.same(index.logical[0], t1.logical[0])
    assert not em.same(src.logical[1], t1.logical[1])


def test_matmul_and_factories_map_nothing():
    f = Fusion()
    with f.guard():
        a = tv([it(), it()])
        b = tv([it(), it()])
        inputs(f, a, b)
        c = tv([a.logical[0].clone_like(), b.logical[1].clone_like()])
        MatmulOp([a, b], [c])
        n = Scalar(DataType.Int, 4)
        full = tv([IterDomain(n)])
        FullOp([n, Scalar(DataType.Float, 1.0)], [full])
        f.add_output(c)
        f.add_output(full)
    assert exact_pairs(c.definition) == []
    assert exact_pairs(full.definition) == []
    em = ExactMap(f)
    assert all(len(cls) == 1 for cls in em.classes())


def test_scalar_exprs_have_no_pairs():
    f = Fusion()
    with f.guard():
        a, b, c = sym(), sym(), sym()
        e = BinaryOp([a, b], [c], op_type=BinaryOpType.Add)
    assert exact_pairs(e) == []


def test_rank_mismatch_is_an_ir_error():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        t1 = tv([it()])
        e = UnaryOp([t0], [t1], op_type=UnaryOpType.Neg)
    with pytest.raises(ValueError, match="UnaryOp: an operand has 2 axes but the output root has 1"):
        exact_pairs(e)


def test_classes_partition_all_ids_and_unknown_ids():
    f = Fusion()
    with f.guard():
        t0 = tv([it(), it()])
        f.add_input(t0)
        t1 = like(t0)
        UnaryOp([t0], [t1], op_type=UnaryOpType.Abs)
        f.add_output(t1)
        stray = it()
    em = ExactMap(f)
    classes = em.classes()
    flat = [i for c in classes for i in c]
    assert len(flat) == len(set(flat)) == 4
    assert [c[0] for c in classes] == [t0.logical[0], t0.logical[1]]
    assert not em.same(stray, t0.logical[0])
    assert em.same(stray, stray)
    with pytest.raises(KeyError):
        em.class_of(stray)


def test_dead_exprs_do_not_map():
    f = Fusion()
    with f.guard():
        t0 = tv([it()])
        t1 = tv([it()])
        inputs(f, t0, t1)
        dead = like(t0)
        BinaryOp([t0, t1], [dead], op_type=BinaryOpType.Add)
        out = like(t0)
        UnaryOp([t0], [out], op_type=UnaryOpType.Neg)
        f.add_output(out)
    em = ExactMap(f)
    assert em.same(t0.logical[0], out.logical[0])
    assert not em.same(t0.logical[0], t1.logical[0])
