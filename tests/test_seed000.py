"""Seed 000 (nvFuser #3366): fusion inputs whose logical domain adds broadcast dims to
their root (`T0[iS{i0}, bS{1}]`, root `(iS{i0})`), passed as a tensor of the root, and the
pre-segmentation pass that folds a broadcast of an input (through unary ops) into such an
input. CPU: printed IR, binding and its errors, the reference executor, segmentation, and
generated kernels (compiled with nvcc for sm_90)."""
import warnings

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser import ops as irops
from fuser.frontend.cache import FusionCache
from fuser.ir import BinaryOpType, BroadcastOp, Fusion, TensorDomain, TensorView, UnaryOpType, fusion_str, transforms_str
from fuser.preseg import run_passes
from fuser.runtime.binding import InputError, bind_inputs
from fuser.kernel import prepare_pointwise, prepare_reduction
from fuser.runtime.reference import run_reference

from cuda_units import compile_all
from irbuild import bc, it

PASS = "fold_input_broadcasts"


def _define(build) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _meta(x):
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x


def _n_broadcasts(fusion: Fusion) -> int:
    return sum(isinstance(e, BroadcastOp) for e in fusion.exprs())


# --- the seed's example -----------------------------------------------------------------------


def _seed(fd):
    # tv2[i0] = neg(tv0); tv3[i0, b1] = broadcast(tv2); tv4[i0, i1] = mul(tv3, tv1)
    tv0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    tv1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    tv2 = fd.ops.neg(tv0)
    tv3 = fd.ops.broadcast(tv2, [False, True])
    fd.add_output(fd.ops.mul(tv3, tv1))


SEED_BEFORE = """\
Inputs:
  T0_g_float[iS0{i0}]
  T1_g_float[iS1{i1}, iS2{i2}]
Outputs:
  T4_g_float[iS6{i0}, iS7{i2}]

%kernel_math {
T2_l_float[iS3{i0}]
   = -T0_g_float[iS0{i0}];
T3_l_float[iS4{i0}, bS5{1}]
   = broadcast( T2_l_float[iS3{i0}], flags = {false, true} )
T4_g_float[iS6{i0}, iS7{i2}]
   = T3_l_float[iS4{i0}, bS5{1}]
   * T1_g_float[iS1{i1}, iS2{i2}];
} // %kernel_math \n"""

# nvFuser's Fusion::print with tensor transforms: the new input T0 shows its root
SEED_AFTER = """\
Inputs:
  T0_g_float[iS8{i0}, bS9{1}]
  T1_g_float[iS1{i1}, iS2{i2}]
Outputs:
  T4_g_float[iS6{i0}, iS7{i2}]

%kernel {
T3_l_float[iS4{i0}, bS5{1}]
   = -T0_g_float[iS8{i0}, bS9{1}];
T4_g_float[iS6{i0}, iS7{i2}]
   = T3_l_float[iS4{i0}, bS5{1}]
   * T1_g_float[iS1{i1}, iS2{i2}];

TransformPrinter : \n\
T0_g_float[iS8{i0}, bS9{1}]
 root domain : (iS8{i0})
 logical domain : (iS8{i0}, bS9{1})
 contiguity: t n
 loop domain : (iS8{i0}, bS9{1})
T1_g_float[iS1{i1}, iS2{i2}]
 logical domain : (iS1{i1}, iS2{i2})
 contiguity: t t
 loop domain : (iS1{i1}, iS2{i2})
T3_l_float[iS4{i0}, bS5{1}]
 logical domain : (iS4{i0}, bS5{1})
 contiguity: t n
 loop domain : (iS4{i0}, bS5{1})
T4_g_float[iS6{i0}, iS7{i2}]
 logical domain : (iS6{i0}, iS7{i2})
 contiguity: t t
 loop domain : (iS6{i0}, iS7{i2})
} // %kernel
"""


def test_the_seed_as_defined_prints_its_broadcast():
    fd = _define(_seed)
    assert fd.fusion_ir() == SEED_BEFORE
    assert " root domain" not in fusion_str(fd.fusion)  # no input has a root yet


def test_the_pass_folds_the_broadcast_into_the_input_which_prints_its_root():
    fd = _define(_seed)
    pre = run_passes(fd.fusion)
    assert pre.applied == (PASS,)
    assert fusion_str(pre.fusion) == SEED_AFTER
    assert _n_broadcasts(fd.fusion) == 1 and _n_broadcasts(pre.fusion) == 0
    # the defined fusion is untouched (the pass rewrote a copy) and printed as before
    assert fd.fusion_ir() == SEED_BEFORE
    new = pre.fusion.inputs[0]
    assert pre.to_original(new) is fd.fusion.inputs[0]
    assert new.tensor_axes() == new.root and len(new.logical) == 2


def test_fusion_ir_preseg_dump_shows_the_folded_input(monkeypatch):
    monkeypatch.setenv("FUSER_DUMP", "fusion_ir_preseg")
    FusionCache.reset()
    fd = _define(_seed)
    a, b = torch.randn(5), torch.randn(5, 7)
    fd.execute([a, b], capture_debug_output=True)
    out = fd.debug_output()
    assert "Fusion IR after pre-segmenter optimization passes:\n" + SEED_AFTER in out


# --- results never change ---------------------------------------------------------------------


def _front(fd):
    # the broadcast in front: the root axis is logical dim 1
    t0 = fd.define_tensor(shape=[-1], contiguity=[False], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.add(fd.ops.broadcast(fd.ops.exp(t0), [True, False]), t1))


def _column_major_bf16(fd):
    # a 2-D root in column-major memory (stride_order), cast through bf16 -> float, then
    # broadcast in the middle with broadcast_in_dim
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16, stride_order=[0, 1])
    t1 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    t2 = fd.ops.broadcast_in_dim(fd.ops.cast(t0, DataType.Float), shape=[t1.size(0), 1, t1.size(2)],
                                 broadcast_dims=[0, 2])
    fd.add_output(fd.ops.cast(fd.ops.mul(t2, t1), DataType.BFloat16))


def _twice(fd):
    # broadcast, a unary op, broadcast again: both fold, one after the other
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    t2 = fd.ops.broadcast(t0, [False, True])
    t3 = fd.ops.broadcast(fd.ops.abs(t2), [True, False, False])
    fd.add_output(fd.ops.sub(t1, t3))


def _reduced(fd):
    # the folded input feeds a reduction over the broadcast-to axis
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    t2 = fd.ops.broadcast(fd.ops.cast(t0, DataType.Float), [False, True])
    fd.add_output(fd.ops.sum(fd.ops.mul(t2, fd.ops.cast(t1, DataType.Float)), [1]))


def _int_chain(fd):
    # integer input, two unary ops before the broadcast; the broadcast feeds two readers
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int32)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int32)
    t2 = fd.ops.broadcast(fd.ops.bitwise_not(fd.ops.neg(t0)), [False, True])
    fd.add_output(fd.ops.add(t2, t1))
    fd.add_output(fd.ops.mul(t2, t1))


def _expanded(fd):
    # the root holds an expanded broadcast (stride 0 in the tensor) beside an iterated axis
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.mul(fd.ops.broadcast(fd.ops.neg(t0), [False, False, True]), t1))


def _seed_eager(a, b):
    return [-a[:, None] * b]


CASES = {
    "seed": (_seed, lambda: [torch.randn(5), torch.randn(5, 7)], _seed_eager),
    "front": (_front, lambda: [torch.randn(14)[::2], torch.randn(3, 7)], lambda a, b: [a.exp()[None, :] + b]),
    "column_major_bf16": (
        _column_major_bf16,
        lambda: [torch.randn(6, 4, dtype=torch.bfloat16).t(), torch.randn(4, 3, 6)],
        lambda a, b: [(a.float()[:, None, :] * b).bfloat16()],
    ),
    "twice": (_twice, lambda: [torch.randn(4), torch.randn(3, 4, 5)], lambda a, b: [b - a.abs()[None, :, None]]),
    "reduced": (
        _reduced,
        lambda: [torch.randn(9, dtype=torch.half), torch.randn(9, 33, dtype=torch.half)],
        lambda a, b: [(a.float()[:, None] * b.float()).sum(1)],
    ),
    "expanded": (
        _expanded,
        lambda: [torch.randn(1, 5).expand(4, 5), torch.randn(4, 5, 3)],
        lambda a, b: [-a[:, :, None] * b],
    ),
    "int_chain": (
        _int_chain,
        lambda: [torch.randint(-50, 50, (5,), dtype=torch.int32), torch.randint(-50, 50, (5, 3), dtype=torch.int32)],
        lambda a, b: [(~(-a))[:, None] + b, (~(-a))[:, None] * b],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_results_are_unchanged_on_the_reference_executor(name):
    build, make, eager = CASES[name]
    FusionCache.reset()
    fd = _define(build)
    pre = run_passes(fd.fusion)
    assert pre.applied == (PASS,) and _n_broadcasts(pre.fusion) < _n_broadcasts(fd.fusion)
    assert not any(isinstance(e, BroadcastOp) and e.input.is_fusion_input for e in pre.fusion.exprs())
    torch.manual_seed(0)
    inputs = make()
    before = run_reference(fd.fusion, inputs)
    after = run_reference(pre.fusion, inputs)  # the same tensors: each input's root
    want = eager(*inputs)
    for b, a, w in zip(before, after, want):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, w)
    for got, w in zip(fd.execute(inputs), want):  # execute segments the folded fusion
        torch.testing.assert_close(got, w)
    assert _n_broadcasts(fd.segmented_fusion_for(inputs).complete_fusion) == _n_broadcasts(pre.fusion)


def _schedulers(build, inputs, monkeypatch, disable: str) -> tuple[list[str], str, Fusion]:
    monkeypatch.setenv("FUSER_DISABLE", disable)
    FusionCache.reset()
    fd = _define(build)
    seg = fd.segmented_fusion_for(inputs)
    return [g.scheduler.value for g in seg.groups], fd.cuda_code_for(inputs), seg.complete_fusion


def _both_ways(monkeypatch):
    """Per case: (schedulers, CUDA, segmented fusion) with the pass, then without it."""
    for name, (build, make, _) in CASES.items():
        inputs = [_meta(x) for x in make()]
        yield name, _schedulers(build, inputs, monkeypatch, ""), _schedulers(build, inputs, monkeypatch, PASS)


def test_segmentation_is_unchanged_with_fewer_broadcasts(monkeypatch):
    # the schedulers see fewer BroadcastOps, and cut and schedule the fusions as before
    for name, (on, src_on, fused), (off, src_off, plain) in _both_ways(monkeypatch):
        assert on == off, name
        assert _n_broadcasts(fused) < _n_broadcasts(plain), name
        assert src_on.count("__global__") == src_off.count("__global__"), name


@pytest.mark.nvcc
def test_kernels_with_and_without_the_pass_compile_for_sm90(monkeypatch):
    sources = [src for _, (_, src_on, _), (_, src_off, _) in _both_ways(monkeypatch) for src in (src_on, src_off)]
    a, b = torch.empty(6, device="meta"), torch.empty(6, 5, device="meta")
    sources.append(prepare_pointwise(_ir_seed(), [a, b]).source)  # an input built with a root
    assert compile_all(sources)[:4] == b"\x7fELF"


# --- the tensor holds the root: strides map to the root's axes ----------------------------------


def test_the_kernel_reads_the_root_tensor_with_the_root_dims_stride():
    # T0 is passed with stride 3; its root axis is logical dim 1 of the folded T0[b, i0]:
    # the kernel's stride parameter is the tensor's dim 0, and the broadcast has none
    FusionCache.reset()
    fd = _define(_front)
    seg = fd.segmented_fusion_for([_meta(x) for x in (torch.randn(21)[::3], torch.randn(4, 7))])
    (group,) = seg.groups
    args = [torch.empty(21, device="meta")[::3], torch.empty(4, 7, device="meta")]
    k = prepare_pointwise(group.fusion(), args)
    names = [p.name for p in k.kernel.params]
    assert "s0_0" in names and "s0_1" not in names
    assert k._template[names.index("s0_0")] == 3
    assert "* s0_0]" in k.source


def test_a_reduction_kernel_reads_the_folded_input():
    FusionCache.reset()
    fd = _define(_reduced)
    args = [torch.empty(9, dtype=torch.half, device="meta"), torch.empty(9, 33, dtype=torch.half, device="meta")]
    seg = fd.segmented_fusion_for(args)
    (group,) = seg.groups
    assert group.scheduler.value == "reduction"
    assert _n_broadcasts(group.fusion()) == 0
    k = prepare_reduction(group.fusion(), args)
    assert "fuser_reduction" in k.source


# --- an input built in IR with a root domain (the seed's tv7) -----------------------------------


def _ir_seed() -> Fusion:
    """The seed's translated fusion built directly: tv7[i0, b1] (root [i0]), tv1[i0, i1];
    tv6 = neg(tv7); tv5 = mul(tv6, tv1)."""
    fusion = Fusion()
    with fusion.guard():
        i0 = it()
        tv7 = TensorView(TensorDomain([i0, bc()], root=[i0]), DataType.Float)
        tv1 = TensorView(TensorDomain([it(), it()]), DataType.Float)
        fusion.add_input(tv7)
        fusion.add_input(tv1)
        tv6 = irops.unary(UnaryOpType.Neg, tv7)
        tv5 = irops.binary(BinaryOpType.Mul, tv6, tv1)
        fusion.add_output(tv5)
    return fusion


def test_an_ir_input_with_a_root_prints_it_and_takes_a_tensor_of_the_root():
    fusion = _ir_seed()
    tv7 = fusion.inputs[0]
    assert transforms_str(tv7) == (
        "T0_g_float[iS0{i0}, bS1{1}]\n root domain : (iS0{i0})\n logical domain : (iS0{i0}, bS1{1})\n"
        " contiguity: t n\n loop domain : (iS0{i0}, bS1{1})"
    )
    a, b = torch.randn(6), torch.randn(6, 5)
    (out,) = run_reference(fusion, [a, b])
    torch.testing.assert_close(out, -a[:, None] * b)
    # a kernel for it (meta tensors: code generation only), and that code compiles
    k = prepare_pointwise(fusion, [_meta(a), _meta(b)])  # code generation only
    assert "const float* __restrict__ T0" in k.source and "s0_1" not in k.source


def test_a_tensor_that_does_not_match_the_root_is_refused_naming_the_argument():
    fusion = _ir_seed()
    with pytest.raises(InputError, match=r"input 0 \(T0\): expected a 1-D tensor \(its root domain \(iS0\{i0\}\): "
                                         r"the logical domain \(iS0\{i0\}, bS1\{1\}\) adds broadcast dim 1, which the "
                                         r"tensor does not hold\), got a 2-D tensor of shape \(6, 1\)"):
        bind_inputs(fusion, [torch.randn(6, 1), torch.randn(6, 5)])
    with pytest.raises(InputError, match=r"input 1 \(T1\) dim 0 has size 4, but input 0 \(T0\) dim 0 has size 6"):
        bind_inputs(fusion, [torch.randn(6), torch.randn(4, 5)])
    with pytest.raises(InputError, match=r"input 0 \(T0\): expected dtype torch.float32"):
        bind_inputs(fusion, [torch.randn(6, dtype=torch.float64), torch.randn(6, 5)])
    with pytest.raises(InputError, match=r"input 0 \(T0\): dim 0 has stride 2, but the definition declares it contiguous"):
        bind_inputs(fusion, [torch.randn(12)[::2], torch.randn(6, 5)])


def test_a_mismatched_tensor_for_a_folded_input_is_refused_as_defined():
    # execute validates against the definition: the user's T0 is 1-D
    FusionCache.reset()
    fd = _define(_seed)
    with pytest.raises(Exception, match=r"input 0 \(T0\): expected a 1-D tensor, got a 2-D tensor of shape \(5, 1\)"):
        fd.execute([torch.randn(5, 1), torch.randn(5, 7)])


# --- what the pass leaves alone ------------------------------------------------------------------


def _allreduce(fd):
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    s = fd.ops.broadcast(fd.ops.sum(t0, [1]), [False, True])  # a reduction broadcast back in its place
    fd.add_output(fd.ops.sub(t0, s))


def _aliased(fd):
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.mul(fd.ops.broadcast(t0, [False, True]), t1))
    fd.add_output(fd.ops.add(t0, t0), alias_input=t0)  # t0 is written in place


def _read_elsewhere(fd):
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    t2 = fd.ops.neg(t0)
    fd.add_output(fd.ops.mul(fd.ops.broadcast(t2, [False, True]), t1))
    fd.add_output(t2)  # the unbroadcast value escapes


def _straight_out(fd):
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    fd.add_output(fd.ops.broadcast(t0, [True, False]))


def _binary_before(fd):
    t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.mul(fd.ops.broadcast(fd.ops.add(t0, t0), [False, True]), t1))


@pytest.mark.parametrize("build", [_allreduce, _aliased, _read_elsewhere, _straight_out, _binary_before],
                         ids=["allreduce", "aliased", "read_elsewhere", "straight_out", "binary_before"])
def test_the_pass_leaves_other_broadcasts_alone(build):
    fd = _define(build)
    pre = run_passes(fd.fusion)
    assert pre.fusion is fd.fusion and pre.applied == ()


def test_fuser_disable_names_the_pass(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", PASS)
    FusionCache.reset()
    fd = _define(_seed)
    assert run_passes(fd.fusion).fusion is fd.fusion
    inputs = [torch.randn(5), torch.randn(5, 7)]
    assert fd.segmented_fusion_for(inputs).complete_fusion is fd.fusion
    torch.testing.assert_close(fd.execute(inputs)[0], _seed_eager(*inputs)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a name execute knows: no "ignoring unknown option" warning
        fd.execute(inputs, _disable_options=[PASS])


# --- segments in the user's terms ----------------------------------------------------------------


def test_fd_segment_defines_a_folded_input_as_its_root_then_broadcasts_it():
    FusionCache.reset()

    def build(fd):
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        t3 = fd.ops.mul(fd.ops.broadcast(fd.ops.neg(t0), [False, True]), t1)
        fd.add_output(fd.ops.sum(fd.ops.segment_set(t3), [1]))

    fd = _define(build)
    a, b = torch.randn(5), torch.randn(5, 7)
    first, second = fd.segment([a, b])
    text = str(first)
    assert "fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float, is_cpu=False)" in text
    assert "T2 = fd.ops.broadcast(T0, is_broadcast_dim=[False, True])" in text
    # the segment's root-shaped input is the user's T0 (state 0)
    t0_state = next(k for k, v in enumerate(first._state_vals)
                    if isinstance(v, TensorView) and v.is_fusion_input and v.ndim == 1)
    assert fd.segment_index_space_maps[first][t0_state] == 0
    (out,) = fd.execute([a, b])  # runs the segments one after the other
    torch.testing.assert_close(out, (-a[:, None] * b).sum(1))


def test_an_intermediate_made_a_segment_input_is_passed_as_its_logical_shape():
    # reshape [6] -> [6, 1] gives T1 root [i] and logical [i, b]: a broadcast-adding root, but
    # as an intermediate cut into a segment input it is a [6, 1] tensor, so the segment's
    # copy drops the root (nvFuser erases it too)
    FusionCache.reset()

    def build(fd):
        t0 = fd.define_tensor(shape=[6], contiguity=[True], dtype=DataType.Float)
        t1 = fd.define_tensor(shape=[6, 4], contiguity=[True, True], dtype=DataType.Float)
        r = fd.ops.reshape(fd.ops.exp(t0), new_shape=[6, 1])
        fd.add_output(fd.ops.add(fd.ops.segment_set(r), t1))

    fd = _define(build)
    a, b = torch.randn(6), torch.randn(6, 4)
    seg = fd.segmented_fusion_for([a, b])
    edge = next(e.val for e in seg.edges)
    assert edge.domain.added_broadcasts()  # in the complete fusion: a reshape output with a root
    reader = next(g for g in seg.groups if edge in g.inputs)
    copy = reader.fusion_and_map()[1][edge]
    assert copy.domain.root is None and copy.tensor_axes() == copy.logical
    (out,) = fd.execute([a, b])
    torch.testing.assert_close(out, a.exp()[:, None] + b)
