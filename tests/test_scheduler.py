"""The scheduler registry's acceptance rules: each scheduler on fusions it must take and
fusions it must refuse (for the reason it gives), size-dependent checks through
SchedulerRuntimeInfo, and the registry's order."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.info import runtime_info
from fuser.scheduler import (
    REGISTRY_ORDER,
    DeviceLimits,
    FusionAnalysis,
    SchedulerType,
    can_schedule,
    propose,
    schedulers_for,
)


def _fd(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _accepting(fd, inputs):
    f = fd.fusion
    return [st.value for st, why in schedulers_for(f, runtime_info(f, inputs)).items() if why is None]


def _first(fd, inputs):
    f = fd.fusion
    return propose(FusionAnalysis(f, runtime_info(f, inputs)).whole())


def _t(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_registry_order_is_nvfusers():
    assert [s.value for s in REGISTRY_ORDER] == [
        "no_op", "expr_eval", "reduction", "resize", "transpose", "pointwise",
        "inner_persistent", "outer_persistent", "inner_outer_persistent", "greedy",
    ]
    assert SchedulerType.pointwise == "pointwise" and str(SchedulerType.inner_persistent) == "inner_persistent"


def test_pointwise_with_broadcast():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t1 = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.mul(fd.ops.exp(t0), fd.ops.broadcast(t1, [True, False])))

    fd = _fd(build)
    assert _accepting(fd, [_t(4, 5), _t(5)]) == ["pointwise"]


def test_pointwise_refuses_outputs_that_span_different_axes():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t1 = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.neg(t0))
        fd.add_output(fd.ops.neg(t1))  # unrelated axis: no output spans both

    f = _fd(build).fusion
    why = schedulers_for(f, runtime_info(f, [_t(4, 5), _t(7)]))[SchedulerType.pointwise]
    assert why == "no output spans every axis the segment iterates over"


def test_pointwise_through_reshape():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t1 = fd.ops.reshape(fd.ops.exp(t0), [24])
        fd.add_output(fd.ops.add(t1, 1.0))

    assert _first(_fd(build), [_t(4, 6)]) == "pointwise"


def _softmax(fd):
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    m = fd.ops.max(t0, dims=[1], keepdim=True)
    e = fd.ops.exp(fd.ops.sub(t0, m))
    fd.add_output(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)))


def test_reduction_takes_a_plain_reduction_with_epilogue():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        s = fd.ops.sum(fd.ops.cast(t0, DataType.Float), dims=[1])
        fd.add_output(fd.ops.cast(fd.ops.mul(s, 0.5), DataType.BFloat16))

    assert _accepting(_fd(build), [_t(4, 8, dtype=torch.bfloat16)]) == ["reduction"]


def test_reduction_refuses_reductions_over_different_axes():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.sum(t0, dims=[0]))
        fd.add_output(fd.ops.sum(t0, dims=[1]))

    f = _fd(build).fusion
    why = schedulers_for(f, runtime_info(f, [_t(4, 8)]))
    assert why[SchedulerType.reduction] == "reductions over different axes"
    assert why[SchedulerType.inner_outer_persistent].startswith("no persistent buffer")


def test_reduction_refuses_reductions_in_series():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.sum(fd.ops.sum(t0, dims=[1]), dims=[0]))

    f = _fd(build).fusion
    assert not can_schedule(f, runtime_info(f, [_t(4, 8)]), "reduction")
    assert schedulers_for(f, None)[SchedulerType.reduction] == "a reduction reads another reduction's result"


def test_inner_persistent_softmax_and_its_buffer_limit():
    fd = _fd(_softmax)
    assert _accepting(fd, [_t(32, 1024)]) == ["inner_persistent"]
    f = fd.fusion
    info = runtime_info(f, [_t(32, 1 << 18)])  # a 1 MB row
    why = schedulers_for(f, info)[SchedulerType.inner_persistent]
    assert why.startswith("persistent buffers need 1048576 bytes per row")
    # the generated kernel holds rows in registers only: half the register file
    budget = int(64 * 1024 * 4 * 0.5)
    assert why.endswith(f"the {budget} bytes registers hold")
    fits = runtime_info(f, [_t(32, budget // 4)])  # a float row of exactly that size
    assert schedulers_for(f, fits)[SchedulerType.inner_persistent] is None
    over = runtime_info(f, [_t(32, budget // 4 + 1)])
    assert schedulers_for(f, over)[SchedulerType.inner_persistent] is not None


def test_persistent_buffer_is_projected_to_a_narrower_input():
    def build(fd):  # the fp32 buffer is recomputable from the bf16 input: half the bytes
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        x = fd.ops.exp(fd.ops.cast(t0, DataType.Float))
        s = fd.ops.sum(x, dims=[1], keepdim=True)
        fd.add_output(fd.ops.div(x, s))

    f = _fd(build).fusion
    sub = FusionAnalysis(f, runtime_info(f, [_t(8, 1000, dtype=torch.bfloat16)])).whole()
    assert sub.persistent_buffer_bytes() == 2000


def test_outer_persistent():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        mean = fd.ops.sum(t0, dims=[0], keepdim=True)
        fd.add_output(fd.ops.sub(t0, mean))

    assert _accepting(_fd(build), [_t(256, 64)]) == ["outer_persistent"]


def test_inner_outer_persistent_layer_norm_backward_shape():
    def build(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        dy = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        w = fd.define_tensor(shape=[-1], contiguity=[True])
        g = fd.ops.mul(dy, fd.ops.broadcast(w, [True, False]))
        row = fd.ops.sum(fd.ops.mul(g, x), dims=[1], keepdim=True)  # inner
        fd.add_output(fd.ops.sub(g, fd.ops.mul(x, row)))
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, x), dims=[0]))  # outer: dw

    assert _accepting(_fd(build), [_t(64, 128), _t(64, 128), _t(128)]) == ["inner_outer_persistent"]


def test_transpose_needs_different_innermost_axes_and_big_enough_tiles():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], stride_order=[0, 1])
        fd.add_output(fd.ops.mul(t0, 2.0))

    fd = _fd(build)
    big = torch.empty(64, 96, device="meta").t().contiguous().t()
    assert _accepting(fd, [big])[:1] == ["transpose"]
    small = torch.empty(64, 8, device="meta").t().contiguous().t()
    f = fd.fusion
    why = schedulers_for(f, runtime_info(f, [small]))[SchedulerType.transpose]
    assert why == "a transposed innermost axis has 8 < 32 elements"
    assert _first(fd, [small]) == "pointwise"


def test_resize_takes_slice_pad_cat():
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        a = fd.ops.slice(t0, [0, 0], [4, 3])
        b = fd.ops.pad(a, [1, 1])
        fd.add_output(fd.ops.cat([b, b], 1))

    fd = _fd(build)
    assert _accepting(fd, [_t(6, 8)]) == ["resize"]
    assert schedulers_for(fd.fusion, None)[SchedulerType.pointwise] == "has slice, pad or cat (the resize scheduler's)"


def test_expr_eval_takes_matmul_but_not_its_epilogue():
    def mm(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.matmul(a, b))

    assert _accepting(_fd(mm), [_t(4, 8), _t(8, 3)]) == ["expr_eval"]

    def mm_relu(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b)))

    f = _fd(mm_relu).fusion
    assert schedulers_for(f, None)[SchedulerType.expr_eval] == "holds pointwise work a kernel should do"
    from fuser.frontend.segmentation import segment

    seg = segment(f, [torch.randn(4, 8), torch.randn(8, 3)])
    assert [g.scheduler for g in seg.groups] == ["expr_eval", "pointwise"]


def test_no_op_for_views_and_empty_outputs():
    def views(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.broadcast(t0, [False, True, False]))

    assert _first(_fd(views), [_t(3, 4)]) == "no_op"

    def work(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.exp(t0))

    fd = _fd(work)
    assert _first(fd, [_t(0, 4)]) == "no_op"
    assert _first(fd, [_t(2, 4)]) == "pointwise"


def test_runtime_info_facts():
    fd = _fd(_softmax)
    f = fd.fusion
    x = torch.randn(6, 10)
    info = runtime_info(f, [x])
    assert info.device_limits == DeviceLimits.h100()
    assert (info.device_limits.sm_count, info.device_limits.smem_per_sm, info.device_limits.registers_per_sm) == (132, 228 * 1024, 65536)
    assert info.sizes[f.inputs[0]] == (6, 10) and info.strides[f.inputs[0]] == (10, 1)
    assert info.alignment[f.inputs[0]] in (4, 8, 16)
    assert info.index_type == "int32"
    out = f.outputs[0]
    assert info.shape(out) == (6, 10) and info.stored_bytes(out) == 240
    assert runtime_info(f, [_t(1 << 16, 1 << 16)]).index_type == "int64"


def test_runtime_info_must_match_the_fusion():
    f1, f2 = _fd(_softmax).fusion, _fd(_softmax.__wrapped__ if hasattr(_softmax, "__wrapped__") else _softmax).fusion
    info = runtime_info(f1, [_t(2, 2)])
    if f2 is not f1:  # the structural cache may hand back the same fusion
        with pytest.raises(ValueError, match="another fusion"):
            can_schedule(f2, info, "pointwise")
    with pytest.raises(ValueError, match="custom segmentation"):
        can_schedule(f1, info, "none")


def test_device_limits_read_resident_blocks_by_compute_capability(monkeypatch):
    # torch does not report blocks per SM: sm_86 holds 16, sm_90 32
    import types

    from fuser.scheduler.runtime_info import DeviceLimits

    def props(major, minor):
        return types.SimpleNamespace(major=major, minor=minor, multi_processor_count=84, name=f"sm_{major}{minor}")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for (major, minor), blocks in [((8, 6), 16), ((8, 9), 24), ((9, 0), 32), ((8, 0), 32)]:
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_, p=props(major, minor): p)
        # these fake properties report no shared memory: the limits warn that they guess it
        with pytest.warns(RuntimeWarning, match="torch reports no"):
            limits = DeviceLimits.of(torch.device("cuda", 0))
        assert limits.max_blocks_per_sm == blocks, (major, minor)
