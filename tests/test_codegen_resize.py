"""Resize (slice, pad, cat) and reshape inside generated kernels, without a GPU: each case's
segments are generated kernels of the expected schedulers, their kernel IR interpreted on
the CPU (the transpose tests' simulator, which faults on out-of-bounds and misaligned
accesses) matches the reference executor with outputs poisoned first, and all their CUDA
compiles for sm_90. Seed 002's RoPE backward at its real shape segments into generated
kernels with its `full` never crossing a segment boundary."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.examples import rope
from fuser.ir import CatOp, FullOp
from fuser.ir.exprs import BinaryOpType, TernaryOpType
from fuser.lower import kir
from fuser.kernel import prepare_kernel
from fuser.runtime.reference import run_reference
from fuser.host.lower import example_args

import test_codegen_transpose as tct
from cuda_units import compile_all
from resize_cases import BIG, CASES, cat_manual_static, cat_manual_symbolic

_MORE_INDEX_OPS = {
    BinaryOpType.Ge: lambda a, b: a >= b, BinaryOpType.Gt: lambda a, b: a > b, BinaryOpType.Le: lambda a, b: a <= b,
    BinaryOpType.Ne: lambda a, b: a != b, BinaryOpType.LogicalOr: lambda a, b: a | b,
    BinaryOpType.Min: lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
    BinaryOpType.Max: lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
}


class Simulator(tct.Simulator):
    """The transpose tests' simulator plus what resize kernels use: selects (only the chosen
    side is evaluated, so a load the predicate skips never faults), negation, comparisons."""

    def value(self, e, mask):
        if isinstance(e, kir.Ternary) and e.op is TernaryOpType.Where:
            c = torch.as_tensor(self.value(e.operands[0], mask)).to(torch.bool).expand(self.n)
            a = torch.as_tensor(self.value(e.operands[1], mask & c)).to(e.out.torch).expand(self.n)
            b = torch.as_tensor(self.value(e.operands[2], mask & ~c)).to(e.out.torch).expand(self.n)
            return torch.where(c, a, b)
        if isinstance(e, kir.Not):
            return ~torch.as_tensor(self.value(e.value, mask)).to(torch.bool)
        if isinstance(e, kir.IndexBinary) and e.op in _MORE_INDEX_OPS:
            return _MORE_INDEX_OPS[e.op](self.value(e.lhs, mask), self.value(e.rhs, mask))
        return super().value(e, mask)


def _materialize(args):
    """Intermediates (meta tensors in example_args) as random CPU tensors of their layout."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "meta":
            t = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
            t.copy_(torch.randn(a.shape) if a.dtype.is_floating_point else torch.randint(0, 5, a.shape))
            a = t
        out.append(a)
    return out


def simulate(k, args):
    return tct.run_plan(k, args, Simulator)


def _define(case) -> FusionDefinition:
    with FusionDefinition() as fd:
        case.build(fd)
    return fd


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_kernels_simulated_match_reference(case):
    torch.manual_seed(0)
    fd = _define(case)
    inputs = case.inputs("cpu")
    seg = fd.segmented_fusion_for(inputs)
    assert tuple(str(g.scheduler) for g in seg.groups) == case.schedulers, seg
    for g in seg.groups:
        args = _materialize(example_args(seg, g, inputs))
        k = prepare_kernel(g.scheduler, g.fusion(), args)
        got = simulate(k, args)
        want = run_reference(g.fusion(), args)
        for n, (a, b) in enumerate(zip(got, want)):
            assert a.shape == b.shape, f"{case.name} output {n}"
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2, msg=lambda m: f"{case.name} output {n}: {m}")


@pytest.mark.nvcc
def test_every_case_compiles_for_sm90():
    def meta(x):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")

    sources = []
    for case in CASES:
        fd = _define(case)
        sources.append(fd.cuda_code_for([meta(x) for x in case.inputs("cpu")]))
    assert compile_all(sources)[:4] == b"\x7fELF"


def _kernels(fd, inputs):
    seg = fd.segmented_fusion_for(inputs)
    return seg, [prepare_kernel(g.scheduler, g.fusion(), example_args(seg, g, inputs)) for g in seg.groups]


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_rope_backward_seed_shape_keeps_full_inside_generated_kernels():
    """Seed 002: at [1, 32, 8192, 128] the backward is generated resize/pointwise kernels,
    and its `full` is made where it is used: never a segment's input or output."""
    with FusionDefinition() as fd:
        rope.rope_backward(fd)
    b, h, t, d = rope.SHAPE
    inputs = [_meta(b, t, d), _meta(b, h, t, d), _meta(b, h, t, d), _meta(b, t, d)]
    seg, ks = _kernels(fd, inputs)
    assert {str(g.scheduler) for g in seg.groups} <= {"resize", "pointwise"}, seg
    fulls = {e.outputs[0] for e in seg.complete_fusion.exprs() if isinstance(e, FullOp)}
    assert fulls
    for g in seg.groups:
        assert not fulls & set(g.inputs) and not fulls & set(g.outputs), seg
    # bf16 [.., 128] with the pads' and slices' offsets at 64: 16-byte vectors throughout
    assert all(k.params.vectorize == 8 for k in ks)
    assert all("load_vec<__bfloat, 8>" in k.source and "store_vec<__bfloat, 8>" in k.source for k in ks)


def test_rope_forward_seed_shape_is_generated_kernels():
    with FusionDefinition() as fd:
        rope.rope_forward(fd)
    b, h, t, d = rope.SHAPE
    seg, ks = _kernels(fd, [_meta(b, h, t, d), _meta(b, h, t, d), _meta(b, t, d), _meta(b, t, d)])
    assert {str(g.scheduler) for g in seg.groups} == {"resize"}
    assert all(k.params.vectorize == 8 for k in ks)


def test_pad_and_cat_selects_test_lane_zero_once_per_vector():
    """The lanes of a vector agree on every pad and cat condition (the width divides the
    boundaries), so the selects test the vector's first element: no condition indexes a
    lane (RoPE backward at seed 002's shape: 560 -> 448 SASS instructions per thread)."""
    with FusionDefinition() as fd:
        rope.rope_backward(fd)
    b, h, t, d = rope.SHAPE
    _, ks = _kernels(fd, [_meta(b, t, d), _meta(b, h, t, d), _meta(b, h, t, d), _meta(b, t, d)])
    selects = [line for k in ks for line in k.source.splitlines() if " ? " in line]
    assert selects
    for line in selects:
        cond = line.split(" ? ")[0]
        assert "+ v)" not in cond, line
    with FusionDefinition() as fd:
        _cat2(fd)
    _, (k,) = _kernels(fd, [_meta(8, 16), _meta(8, 48)])
    cat_lines = [line for line in k.source.splitlines() if " ? " in line]
    assert cat_lines and all("+ v)" not in line.split(" ? ")[0] for line in cat_lines)


def _cat2(fd):
    a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    c = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    fd.add_output(fd.ops.cat([a, c], dim=1))


@pytest.mark.parametrize("widths, vec", [((16, 48), 8), ((12, 20), 4), ((6, 10), 2), ((5, 11), 1)])
def test_vector_width_divides_cat_boundaries(widths, vec):
    with FusionDefinition() as fd:
        _cat2(fd)
    _, (k,) = _kernels(fd, [_meta(8, widths[0]), _meta(8, widths[1])])
    assert k.params.vectorize == vec


def test_slice_step_on_innermost_axis_reads_scalars():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        # (exp: a slice alone is returned as a view of x, with no kernel)
        fd.add_output(fd.ops.exp(fd.ops.slice(x, [0, 0], [BIG, BIG], [1, 2])))
    _, (k,) = _kernels(fd, [_meta(8, 64)])
    assert k.params.vectorize == 1


def test_reshape_between_pointwise_ops_is_one_kernel():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        r = fd.ops.reshape(fd.ops.exp(x), new_shape=[4, 8, 16])
        fd.add_output(fd.ops.mul(fd.ops.relu(r), 2.0))
    seg, (k,) = _kernels(fd, [torch.empty(4, 128, device="meta")])
    assert [str(g.scheduler) for g in seg.groups] == ["pointwise"]
    assert k.params.vectorize == 4  # the reshape splits 128 into 8 x 16: lanes stay within 16


@pytest.mark.parametrize("start, stop, step", [(-3, BIG, 1), (-100, 4, 1), (2, 100, 3), (7, 2, 1), (-2, -1, 1),
                                               (0, 0, 1), (5, 5, 2)])
def test_slice_bounds_normalise_as_torch(start, stop, step):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.slice(x, [start], [stop], [step]))
    x = torch.randn(9)
    (out,) = fd.execute([x])
    assert torch.equal(out, x[start:stop:step])
    if out.numel():
        k = prepare_kernel("resize", fd.segmented_fusion_for([x]).groups[0].fusion(), [x])
        (got,) = simulate(k, [x])
        assert torch.equal(got, x[start:stop:step])


def test_manual_padding_cat_matches_torch():
    """cat(manual_padding=True) of pads placed side by side is torch.cat of the pads'
    inputs: a plain cat when the sizes are static, a select by position when symbolic."""
    a, b = torch.randn(5, 3), torch.randn(5, 6)
    with FusionDefinition() as fd:
        cat_manual_static(fd)
    (out,) = fd.execute([a, b])
    assert torch.equal(out, torch.cat([a, b], dim=1))
    assert any(isinstance(e, CatOp) for e in fd.segmented_fusion_for([a, b]).complete_fusion.exprs())
    assert "manual_padding=1" in str(fd)
    x, y = torch.randn(3, 7).bfloat16(), torch.randn(4, 7).bfloat16()
    with FusionDefinition() as fd:
        cat_manual_symbolic(fd)
    (out,) = fd.execute([x, y])
    # rows 0-2 from x (its pad's data), rows 3-6 from y (placed at 3)
    assert torch.equal(out, torch.cat([x, y], dim=0))


def test_manual_padding_cat_needs_pads():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        with pytest.raises(ValueError, match=r"tensors\[0\] is not"):
            fd.ops.cat([a, fd.ops.pad(a, [0, 2])], dim=0, manual_padding=True)
        fd.add_output(a)


def test_cat_drops_statically_empty_inputs():
    """As nvFuser's cat: an input of static extent 0 along dim is dropped, and a cat left
    with one input is a copy (RoPE's empty tail: the output keeps the rotated tensor's axes)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[4, 6], contiguity=[True, True])
        fd.add_output(fd.ops.cat([fd.ops.slice(a, [0, 6], [4, 6]), a], dim=1))
    x = torch.randn(4, 6)
    (out,) = fd.execute([x])
    assert torch.equal(out, x)
    assert not any(isinstance(e, CatOp) for e in fd.segmented_fusion_for([x]).complete_fusion.exprs())
