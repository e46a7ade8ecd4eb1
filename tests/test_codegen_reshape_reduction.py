"""Reshapes inside reduction and persistent kernels, without a GPU (tests/reshape_reduction_cases.py):
each case segments as expected, every segment a kernel scheduler accepted becomes a kernel
(no NotLowerable, so nothing falls back to the reference executor on a GPU), the kernels'
IR simulated on the CPU (tests/reduction_sim.py: out-of-bounds and misaligned accesses
fault) matches the reference executor with outputs poisoned first, all their CUDA compiles
for sm_90, and `fd.execute` on the CPU matches eager PyTorch. The reshapes the kernels
cannot index are refused by the schedulers, which cut them out of the segment."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.kernel import generates_kernel, prepare_kernel
from fuser.runtime.reference import run_reference
from fuser.host.lower import example_args
from fuser.runtime.tolerance import assert_close
from fuser.scheduler import FusionAnalysis
from fuser.scheduler.registry import explain

from cuda_units import compile_all
from reduction_sim import simulate
from reshape_reduction_cases import CASES, LARGE_CASES, outer_reduced_reshape

_ids = [c.name for c in CASES]


def _define(case, inputs) -> FusionDefinition:
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    return fd


def _meta(inputs):
    return [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor)
            else x for x in inputs]


def _materialize(args):
    """Intermediates (meta tensors in example_args) as random CPU tensors of their layout."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == "meta":
            t = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype)
            t.copy_(torch.randn(a.shape).to(a.dtype))
            a = t
        out.append(a)
    return out


def _simulate_segments(case) -> None:
    """Each segment of `case` (on CPU inputs) is a kernel its scheduler's preparation makes
    without NotLowerable, and simulated it gives the reference executor's values."""
    torch.manual_seed(0)
    inputs = case.inputs("cpu")
    fd = _define(case, inputs)
    seg = fd.segmented_fusion_for(inputs)
    assert tuple(str(g.scheduler) for g in seg.groups) == case.schedulers, seg
    one = len(seg.groups) == 1  # (then the segment's outputs are the case's, with its tolerances)
    for g in seg.groups:
        assert generates_kernel(g.scheduler)
        args = _materialize(example_args(seg, g, inputs))
        k = prepare_kernel(g.scheduler, g.fusion(), args)
        got = simulate(k, args)
        want = run_reference(g.fusion(), args)
        for n, (a, b) in enumerate(zip(got, want)):
            rtol, atol = case.tolerance(n, b) if one else (1e-4, 1e-4)
            assert_close(a, b, what=f"{case.name} {g.scheduler} output {n}", rtol=rtol, atol=atol)
    # and the CUDA of every segment, from meta tensors (no NotLowerable either)
    assert fd.cuda_code_for(_meta(inputs)).count("__global__") == len(case.schedulers)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_segments_are_kernels_that_simulate_to_the_reference(case):
    _simulate_segments(case)


_LARGE = [c for c in LARGE_CASES if c.name in (
    "flatten_then_red_bf16_64x32x4096", "flatten_then_red_grid_fp32_2x3x1048576", "outer_over_merged_64x128x1024",
    "rms_norm_heads_bf16_4x512x32x128", "layer_norm_heads_bf16_4x512x16x64")]


@pytest.mark.parametrize("case", _LARGE, ids=[c.name for c in _LARGE])
def test_large_cases_simulate_to_the_reference(case):
    # vector accesses of 8 bf16, a grid reduction over 32 blocks per row, an outer one over
    # 25 blocks per column, persistent rows of attention heads
    _simulate_segments(case)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_execute_matches_eager_on_cpu(case):
    torch.manual_seed(1)
    inputs = case.inputs("cpu")
    fd = _define(case, inputs)
    got = fd.execute(inputs)
    want = case.eager(*inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        rtol, atol = case.tolerance(k, w)
        assert_close(g, w, what=f"{case.name} output {k}", rtol=rtol, atol=atol)


@pytest.mark.nvcc
def test_every_case_compiles_for_sm90():
    sources = []
    for case in CASES + LARGE_CASES:
        inputs = case.inputs("meta")
        sources.append(_define(case, inputs).cuda_code_for(inputs))
    assert compile_all(sources)[:4] == b"\x7fELF"


def _code(case):
    inputs = case.inputs("cpu")
    return _define(case, inputs).cuda_code_for(_meta(inputs))


def _case(name):
    return next(c for c in CASES if c.name == name)


def test_vector_accesses_only_where_lanes_are_contiguous():
    # a static reshape keeps the innermost axis: the input is read in vectors along it
    assert re.search(r"fuser::load_vec(_stream)?<float, 4>", _code(_case("flatten_then_red_static_fp32_8x6x32")))
    # an outer reduction's [A, C] result reshaped to [C, A]: its lanes (4 adjacent columns
    # of C) are no adjacent elements of the output, which is stored element by element
    # (columns enough to keep 4-element vectors: fewer take shorter ones to fill the SMs)
    src = _code(outer_reduced_reshape((8, 6, 4096)))
    assert re.search(r"fuser::load_vec(_stream)?<float, 4>", src) and "store_vec" not in src


def test_an_input_whose_axes_are_rows_or_columns_is_the_reference():
    # [8, 6, 32] -> [48, 32] with symbolic sizes, summed over 32: the input's axes are the
    # rows (8, 6) and the column (32) themselves, so the kernel is laid out on the input,
    # read in vectors, and the reshape's [48] rows are indexed from it
    src = _code(_case("flatten_then_red_fp32_8x6x32"))
    assert re.search(r"fuser::load_vec(_stream)?<float, 4>\(&r0\[u \* 4\], &T0\[", src)
    assert "% i1) * s0_1" in src and "/ i1) * s0_0" in src


def test_an_input_whose_axis_mixes_rows_and_columns_is_read_through_the_reshape():
    # [6, 256] -> [24, 64], a softmax over 64: the input's 256 holds 4 rows of 64 columns,
    # so it is indexed through the reshape (element by element: its index along 256 is
    # the row-major position modulo its extent)
    src = _code(_case("softmax_of_heads_fp32_6x256_h4"))
    assert "load_vec" not in src and ") % i1) * s0_1" in src


def _explain(build, inputs):
    with FusionDefinition() as fd:
        build(fd)
    seg = fd.segmented_fusion_for(inputs)
    return explain(FusionAnalysis(seg.complete_fusion, seg.runtime_info).whole()), seg


def test_a_reshape_reached_two_ways_is_refused():
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.sum(fd.ops.add(fd.ops.reshape(x, [4, 6]), fd.ops.permute(x, [1, 0])), dims=[1]))

    why, seg = _explain(build, [torch.randn(6, 4)])
    for st in ("reduction", "inner_persistent"):
        assert "a reshape relates axes that other ops relate too" in why[st]
    assert [str(g.scheduler) for g in seg.groups] == ["pointwise", "reduction"]


def test_a_reshape_and_its_inverse_stay_in_one_kernel():
    # flatten (symbolic) and back (static): the same relation both ways
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        b = fd.ops.reshape(fd.ops.reshape(x, [8 * 6 * 32]), [8, 6, 32])
        fd.add_output(fd.ops.sum(fd.ops.add(b, x), dims=[2]))

    why, seg = _explain(build, [torch.randn(8, 6, 32)])
    assert why["reduction"] is None and [str(g.scheduler) for g in seg.groups] == ["reduction"]


def test_an_index_op_beside_a_deriving_reshape_is_refused():
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        idx = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Int)
        s = fd.ops.sum(fd.ops.take_along_axis(x, idx, 2), dims=[2])
        fd.add_output(fd.ops.reshape(s, [48]))

    inputs = [torch.randn(8, 6, 32), torch.randint(0, 32, (8, 6, 32))]
    why, seg = _explain(build, inputs)
    assert "an index op beside a reshape" in why["reduction"]
    # the reshape alone is a view of the sum's result: no kernel copies it
    assert [str(g.scheduler) for g in seg.groups] == ["reduction", "no_op"]
    prepare_kernel(seg.groups[0].scheduler, seg.groups[0].fusion(), example_args(seg, seg.groups[0], inputs))


def test_a_reshape_dropping_a_reduced_axis_of_extent_one_stays_full():
    # the reduced axis has one element: the reshape to [2 * 127] holds x's elements, and
    # ceil of its static reshape back is computed with them (the fuzzer's case)
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        t3 = fd.ops.ceil(fd.ops.reshape(fd.ops.reshape(t0, [254]), [2, 1, 127]))
        t4 = fd.ops.sum(t0, dims=[1])
        fd.add_output(fd.ops.sub(t0, fd.ops.broadcast(t4, [False, True, False])))
        fd.add_output(t3)

    inputs = [torch.randn(2, 1, 127)]
    _, seg = _explain(build, inputs)
    for g in seg.groups:
        args = example_args(seg, g, inputs)
        k = prepare_kernel(g.scheduler, g.fusion(), args)
        for a, b in zip(simulate(k, args), run_reference(g.fusion(), args)):
            assert_close(a, b)


def test_an_output_with_broadcasts_before_its_root_axes_is_written_densely():
    # a static reshape [7] -> [1, 7] of a reduction's result: an output whose logical
    # domain adds a broadcast before its root's axis, whose stride parameters would be
    # numbered by its root's dims; it is indexed by its dense allocation's strides instead
    def build(fd):
        x = fd.define_tensor(shape=[4, 7], contiguity=[True, True])
        fd.add_output(fd.ops.reshape(fd.ops.sum(x, dims=[0]), [1, 7]))

    inputs = [torch.randn(4, 7)]
    _, seg = _explain(build, inputs)
    assert [str(g.scheduler) for g in seg.groups] == ["reduction"]
    (g,) = seg.groups
    args = example_args(seg, g, inputs)
    k = prepare_kernel(g.scheduler, g.fusion(), args)
    assert not any(p.kind == "stride" and p.source[0] in g.fusion().outputs for p in k.kernel.params)
    (got,), (want,) = simulate(k, args), run_reference(g.fusion(), args)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_no_reshape_inner_outer_kernel_derives_axes():
    # an RMSNorm backward over rows of [B * S, N] given as [B, S, N]: the column phase
    # indexes by the reference's axes, so the reshape is not inside an inner-outer kernel
    def build(fd):
        b, s, n = 4, 8, 64
        dy0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        x0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        rstd0 = fd.define_tensor(shape=[-1], contiguity=[True])
        w = fd.define_tensor(shape=[-1], contiguity=[True])
        dy, x = fd.ops.reshape(dy0, [b * s, n]), fd.ops.reshape(x0, [b * s, n])
        rstd = fd.ops.broadcast_in_dim(rstd0, shape=[b * s, n], broadcast_dims=[0])
        xhat = fd.ops.mul(x, rstd)
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, xhat), dims=[0]))
        g = fd.ops.mul(dy, fd.ops.broadcast_in_dim(w, shape=[b * s, n], broadcast_dims=[1]))
        proj = fd.ops.sum(fd.ops.mul(g, xhat), dims=[1], keepdim=True)
        fd.add_output(fd.ops.mul(rstd, fd.ops.sub(g, fd.ops.mul(xhat, fd.ops.mul(proj, 1.0 / n)))))

    inputs = [torch.randn(4, 8, 64), torch.randn(4, 8, 64), torch.rand(32) + 0.5, torch.randn(64)]
    why, seg = _explain(build, inputs)
    assert "the inner-outer kernel indexes by the reference's axes" in why["inner_outer_persistent"]
    for g in seg.groups:
        args = _materialize(example_args(seg, g, inputs))
        k = prepare_kernel(g.scheduler, g.fusion(), args)
        for a, b in zip(simulate(k, args), run_reference(g.fusion(), args)):
            assert_close(a, b, rtol=1e-4, atol=1e-4)


def _fuzz_extent_one_outer(fd):
    # gpu_fuzz seed 1 case 1342: a reshape dropping a reduced axis of extent 1 (outer
    # persistent) and its static inverse
    t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[False, True, True])
    t4 = fd.ops.add(fd.ops.mul(fd.ops.tanh(t0), 0.25), 1.0)
    t6 = fd.ops.sub(t4, fd.ops.prod(t4, dims=[1], keepdim=True))
    fd.add_output(fd.ops.reshape(fd.ops.reshape(t6, new_shape=[2040]), new_shape=[8, 1, 255]))


def _fuzz_extent_one_ceil(fd):
    # seed 2 case 1922: the same dropped axis, the static inverse read by pointwise work
    t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
    t3 = fd.ops.ceil(fd.ops.reshape(fd.ops.reshape(t0, new_shape=[254]), new_shape=[2, 1, 127]))
    t5 = fd.ops.broadcast(fd.ops.sum(t0, dims=[1]), is_broadcast_dim=[False, True, False])
    fd.add_output(fd.ops.sub(t0, t5))
    fd.add_output(t3)


def _fuzz_leading_broadcast_output(fd):
    # seed 5 case 453: a static reshape to [1, 7] of work beside a reduction: an output
    # adding a broadcast before its root's axis
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    t3 = fd.ops.broadcast_in_dim(fd.ops.sum(t1, dims=[0]), shape=[1, 7], broadcast_dims=[1])
    t6 = fd.ops.full(shape=[], fill_value=-2.0, dtype=DataType.Float)
    t7 = fd.ops.maximum(t6, fd.ops.cos(fd.ops.sub(t1, t3)))
    t9 = fd.ops.sum(fd.ops.maximum(t6, t7), dims=[-2, 1])
    fd.add_output(fd.ops.reshape(fd.ops.reshape(t7, new_shape=[7]), new_shape=[1, 7]))
    fd.add_output(fd.ops.clamp(t9, -1.5, 2.0))


def _fuzz_remat_output(fd):
    # seed 2 case 817: the same kind of output, made one by a rematerialising consumer
    # after the reduction's segment was accepted
    t0 = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True], dtype=DataType.BFloat16)
    t2 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    t4 = fd.ops.reshape(fd.ops.reshape(t2, new_shape=[33]), new_shape=[1, 33])
    t7 = fd.ops.permute(fd.ops.permute(t0, dims=[2, 1, 0]), dims=[2, 1, 0])
    t9 = fd.ops.add(fd.ops.broadcast(t4, is_broadcast_dim=[True, False, False]), t7)
    t12 = fd.ops.cast(fd.ops.cast(t9, dtype=DataType.BFloat16), dtype=DataType.Float)
    t15 = fd.ops.exp(fd.ops.sub(t12, fd.ops.max(t12, dims=[0, 1, 2], keepdim=True)))
    t17 = fd.ops.div(t15, fd.ops.sum(t15, dims=[0, 1, 2], keepdim=True))
    fd.add_output(fd.ops.cast(t17, dtype=DataType.BFloat16))


#: programs the GPU fuzzer (tests/gpu_fuzz.py) found the reshape lowering getting wrong
FUZZ_CASES = [
    (_fuzz_extent_one_outer, lambda: [torch.randn(8, 1, 257)[:, :, :255]]),
    (_fuzz_extent_one_ceil, lambda: [torch.randn(2, 1, 127)]),
    (_fuzz_leading_broadcast_output, lambda: [torch.randn(1, 7)]),
    (_fuzz_remat_output, lambda: [torch.randn(1025, 1, 33).bfloat16(), torch.randn(1, 34)[:, 1:]]),
]


@pytest.mark.parametrize("build,inputs", FUZZ_CASES, ids=[b.__name__[1:] for b, _ in FUZZ_CASES])
def test_fuzzer_reshape_cases_simulate_to_the_reference(build, inputs):
    torch.manual_seed(0)
    inputs = inputs()
    with FusionDefinition() as fd:
        build(fd)
    seg = fd.segmented_fusion_for(inputs)
    assert any(str(g.scheduler) in ("reduction", "inner_persistent", "outer_persistent") for g in seg.groups)
    for g in seg.groups:
        args = _materialize(example_args(seg, g, inputs))
        k = prepare_kernel(g.scheduler, g.fusion(), args)
        for n, (a, b) in enumerate(zip(simulate(k, args), run_reference(g.fusion(), args))):
            assert_close(a, b, what=f"{build.__name__} {g.scheduler} output {n}", rtol=1e-4, atol=1e-4)
    for a, b in zip(fd.execute(inputs), run_reference(fd.fusion, inputs)):
        assert_close(a, b)
