"""Fusion IR: domains built by ops, topological order, cycles, cloning, names, dumps."""
import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.ir import (
    Fusion,
    IterDomain,
    IterType,
    Merge,
    Split,
    TensorDomain,
    TensorView,
    UnaryOp,
    UnaryOpType,
)
from fuser.ir.fusion import expr_levels
from fuser.ir.transforms import id_exprs_between
from fuser.runtime.reference import run_reference


def _define(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def test_static_reshape_builds_split_and_merge_between_root_and_logical():
    def build(fd):
        t0 = fd.define_tensor(shape=[6, 4], contiguity=[True, True])
        fd.add_output(fd.ops.reshape(t0, [3, 8]))

    out = _define(build).fusion.outputs[0]
    dom = out.domain
    assert dom.has_root and len(dom.root) == 2 and len(dom.logical) == 2
    kinds = [type(e) for e in id_exprs_between(dom.root, dom.logical)]
    assert kinds == [Merge, Split]
    assert [i.extent.value for i in dom.logical] == [3, 8]
    assert all(i.is_rfactor_product for i in dom.logical)


def test_reshape_of_size_one_dims_squeezes_and_broadcasts():
    def build(fd):
        t0 = fd.define_tensor(shape=[1, 12], contiguity=[None, True])
        fd.add_output(fd.ops.reshape(t0, [3, 1, 4]))

    out = _define(build).fusion.outputs[0]
    assert [i.iter_type for i in out.logical] == [IterType.Iteration, IterType.Broadcast, IterType.Iteration]
    x = torch.randn(1, 12)
    (got,) = run_reference(_define(build).fusion, [x])
    assert torch.equal(got, x.reshape(3, 1, 4))


def test_permute_is_a_root_to_logical_reordering():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=True)
        fd.add_output(fd.ops.permute(t0, [2, 0, 1]))

    out = _define(build).fusion.outputs[0]
    root, logical = out.domain.root, out.domain.logical
    assert logical == [root[2], root[0], root[1]]
    assert id_exprs_between(root, logical) == []


def test_symbolic_extents_are_named_densely_and_shared_by_consumers():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(t0))

    ir = _define(build).fusion_ir()
    assert "T0_g_float[iS0{i0}, iS1{i1}]" in ir
    assert re.search(r"T1_g_float\[iS\d+\{i0\}, iS\d+\{i1\}\]\n   = exp\(T0_g_float", ir)


def test_topological_order_and_levels_follow_producers():
    def build(fd):
        a = fd.define_tensor(shape=[-1], contiguity=True)
        b = fd.ops.neg(a)
        c = fd.ops.exp(a)
        fd.add_output(fd.ops.add(b, c))

    fusion = _define(build).fusion
    exprs = fusion.exprs()
    order, levels = expr_levels(exprs)
    assert list(order) == [0, 1, 2] and list(levels) == [0, 0, 1]
    assert exprs[-1].op_type.value == "add"


def test_dead_code_is_not_in_exprs_but_is_registered():
    def build(fd):
        a = fd.define_tensor(shape=[-1], contiguity=True)
        fd.ops.sin(a)  # never used
        fd.add_output(fd.ops.cos(a))

    fusion = _define(build).fusion
    assert [e.op_type.value for e in fusion.exprs()] == ["cos"]
    assert sorted(e.op_type.value for e in fusion.all_exprs()) == ["cos", "sin"]


def test_a_cycle_is_reported_with_its_expressions():
    f = Fusion()
    with f.guard():
        t0 = TensorView(TensorDomain([IterDomain(4)]), DataType.Float)
        t1 = TensorView(TensorDomain([IterDomain(4)]), DataType.Float)
        t2 = TensorView(TensorDomain([IterDomain(4)]), DataType.Float)
        UnaryOp([t0], [t1], op_type=UnaryOpType.Neg)
        UnaryOp([t1], [t2], op_type=UnaryOpType.Exp)
        UnaryOp([t2], [t0], op_type=UnaryOpType.Cos)
        f.add_output(t2)
    with pytest.raises(ValueError, match=r"cycle: UnaryOp\(T\d.*-> UnaryOp\(T\d.*-> UnaryOp\(T\d"):
        f.exprs()


def _two_step():
    def build(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=True)
        s = fd.ops.sum(fd.ops.mul(a, a), dims=[1], keepdim=True)
        fd.add_output(fd.ops.div(a, s))

    return _define(build)


def test_clone_is_deep_keeps_names_and_computes_the_same():
    fd = _two_step()
    fusion = fd.fusion
    copy, mapping = fusion.clone()
    assert str(copy) == str(fusion)
    originals = {id(v) for v in fusion.vals()}
    assert not any(id(v) in originals for v in copy.vals())
    assert all(mapping[v] in copy.vals() for v in fusion.vals())
    x = torch.randn(3, 5)
    for a, b in zip(run_reference(copy, [x]), run_reference(fusion, [x])):
        assert torch.equal(a, b)


def test_clone_subgraph_makes_a_fusion_of_part_of_the_graph():
    fd = _two_step()
    fusion = fd.fusion
    exprs = fusion.exprs()
    square = exprs[0]  # a * a
    reduce_ = exprs[1]  # sum
    sub, mapping = fusion.clone_subgraph([square, reduce_], [fusion.inputs[0]], [reduce_.output])
    assert len(sub.exprs()) == 2 and len(sub.inputs) == 1 and len(sub.outputs) == 1
    assert mapping[fusion.inputs[0]] is sub.inputs[0]
    x = torch.randn(4, 6)
    (got,) = run_reference(sub, [x])
    torch.testing.assert_close(got, (x * x).sum(1))


def test_clone_subgraph_rejects_a_tensor_with_no_producer():
    fd = _two_step()
    fusion = fd.fusion
    last = fusion.exprs()[-1]
    with pytest.raises(ValueError, match="neither produced nor an input"):
        fusion.clone_subgraph([last], [fusion.inputs[0]], [last.output])


def test_fuser_dump_fusion_ir(monkeypatch, capsys):
    monkeypatch.setenv("FUSER_DUMP", "fusion_ir")
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Half)
        fd.add_output(fd.ops.abs(t0))
    err = capsys.readouterr().err
    assert "===== fusion_ir =====" in err and "T0_g___half[iS0{i0}]" in err
