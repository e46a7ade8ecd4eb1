"""The members and arguments nvFuser scripts (and Thunder) use, with nvFuser's names and
positions (issue 10, item 3): FusionDefinition(id), NotImplementedError for a definition
never defined, define_scalar(DataType.X), reductions' dim=/dims=/dtype overloads,
index_select with a 0-dim index, scatter with a scalar src, inputs()/outputs()/extents(),
capture_debug_output, profile, option switches, save_repro_inputs, the compat module's
version, _C and submodules, the new DataTypes, and the ATen-only ops."""
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import fuser
import fuser.compat.nvfuser
from fuser import DataType, FusionCache, FusionDefinition


def _define(build):
    with FusionDefinition() as fd:
        build(fd)
    return fd


def _relu_sum(fd):
    t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.add_output(fd.ops.sum(fd.ops.relu(t), dims=[1]))


# --- FusionDefinition(id), definition() --------------------------------------------------------------
def test_fusion_definition_by_id_rebuilds_the_cached_definition():
    fd = _define(_relu_sum)
    again = FusionDefinition(fd.id())
    assert again.id() == fd.id() and str(again) == str(fd)
    x = torch.randn(3, 4)
    assert torch.equal(again.execute([x])[0], x.relu().sum(1))
    assert FusionDefinition(fd.id(), max_length=16).id() == fd.id()


def test_fusion_definition_by_unknown_id_is_an_error():
    n = FusionCache.get().num_fusions()
    for bad in (n, n + 5, -1):
        with pytest.raises(ValueError, match=rf"id={bad}.*no cached fusion"):
            FusionDefinition(bad)


def test_executing_a_definition_never_defined_raises_not_implemented():
    fd = FusionDefinition()
    assert fd.id() is None
    with pytest.raises(NotImplementedError, match="definition"):
        fd.execute([torch.randn(2)])
    # the failed attempt leaves it undefined and usable
    assert fd.id() is None
    with fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1], contiguity=[True])))
    assert torch.equal(fd.execute([torch.ones(2)])[0], -torch.ones(2))


def test_subclass_defines_itself_in_definition():
    class Neg(FusionDefinition):
        def definition(self):
            self.add_output(self.ops.neg(self.define_tensor(shape=[-1], contiguity=[True])))

    fd = Neg()
    assert torch.equal(fd.execute([torch.ones(3)])[0], -torch.ones(3))
    assert fd.id() is not None


# --- define_scalar, reductions --------------------------------------------------------------------------
def test_define_scalar_with_a_dtype_alone_is_an_input():
    def build(fd):
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        n = fd.define_scalar(DataType.Int)
        d = fd.define_scalar(DataType.Double)
        fd.add_output(fd.ops.add(t, n))
        fd.add_output(fd.ops.mul(d, 2.0))

    fd = _define(build)
    assert "S1 = fd.define_scalar(None, dtype=DataType.Int)" in str(fd)
    assert fd.inputs() == [0, 1, 2]
    a, b = fd.execute([torch.tensor([1, 2]), 5, 0.25])
    assert a.tolist() == [6, 7] and b == 0.5


def test_reductions_take_dim_dims_or_none_and_a_dtype():
    x = torch.arange(1.0, 7.0).reshape(2, 3)

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.sum(t, dim=1))
        fd.add_output(fd.ops.sum(t, 0, True))
        fd.add_output(fd.ops.sum(t, dims=[0, 1]))
        fd.add_output(fd.ops.sum(t))
        fd.add_output(fd.ops.prod(t, DataType.Double))
        fd.add_output(fd.ops.max(t, dim=-1, keepdim=True))
        fd.add_output(fd.ops.min(t, 0))
        fd.add_output(fd.ops.var(t, dim=1))

    s1, s0k, s01, sall, p, mx, mn, v = _define(build).execute([x])
    assert torch.equal(s1, x.sum(1)) and torch.equal(s0k, x.sum(0, keepdim=True))
    assert s01.item() == 21.0 and sall.item() == 21.0
    assert p.dtype == torch.float64 and p.item() == 720.0
    assert torch.equal(mx, x.amax(-1, keepdim=True)) and torch.equal(mn, x.amin(0))
    torch.testing.assert_close(v, x.var(1))
    with pytest.raises(TypeError, match="dims or dim"):
        _define(lambda fd: fd.add_output(fd.ops.sum(fd.define_tensor(shape=[-1], contiguity=[True]), [0], dim=0)))


# --- indexing -------------------------------------------------------------------------------------------
def test_index_select_with_a_0_dim_index_keeps_the_axis():
    x = torch.arange(12.0).reshape(3, 4)

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[], contiguity=[], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(t, i, 0))
        fd.add_output(fd.ops.index_select(t, i, 1))

    rows, cols = _define(build).execute([x, torch.tensor(2)])
    assert torch.equal(rows, x[2:3]) and torch.equal(cols, x[:, 2:3])


def test_scatter_with_a_scalar_src_writes_that_value():
    x = torch.zeros(3, 4)
    index = torch.tensor([[0, 1, 2, 0], [2, 0, 1, 1]])

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(t, i, 7.5, 0))
        fd.add_output(fd.ops.scatter(t, i, fd.define_scalar(dtype=DataType.Int), 0))

    a, b = _define(build).execute([x, index, 3])
    assert torch.equal(a, torch.scatter(x, 0, index, 7.5))
    assert torch.equal(b, torch.scatter(x, 0, index, 3.0))


# --- inputs(), outputs(), extents() ---------------------------------------------------------------------
def test_inputs_outputs_extents_are_nvfusers_indices():
    def build(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        s = fd.define_scalar(dtype=DataType.Double)
        b = fd.define_tensor(shape=[-1, 1, -1], contiguity=[True, None, True])
        c = fd.ops.mul(a, s)
        fd.add_output(c)
        fd.add_output(fd.ops.add(b, 1.0), alias_input=b)  # an in-place update: not among outputs()
        fd.add_output(fd.ops.neg(c))

    fd = _define(build)
    assert fd.inputs() == [0, 1, 2]
    assert fd.outputs() == [3, 6]
    assert fd.extents() == [-1, -2, -3, -4, -5]  # one per dim of each tensor input


# --- capture_debug_output, profile, options, save_repro_inputs ------------------------------------------
def test_capture_debug_output(monkeypatch):
    fd = _define(_relu_sum)
    assert fd.debug_output() is None
    monkeypatch.setenv("FUSER_DUMP", "segmented_fusion")
    fd.execute([torch.randn(5, 7)], capture_debug_output=True)  # a new signature: segmented now
    text = fd.debug_output()
    assert "===== segmented_fusion =====" in text and "Segmented_Fusion" in text
    fd.execute([torch.randn(5, 7)])
    assert fd.debug_output() is None


def test_profile_reports_segments_times_and_bytes():
    fd = _define(_relu_sum)
    with pytest.raises(ValueError, match="profiling"):
        fd.profile()
    x = torch.randn(64, 32)
    fd.execute([x])
    with pytest.raises(ValueError, match="profiling"):
        fd.profile()  # an execute without profile=True keeps none
    (out,) = fd.execute([x], profile=True)
    prof = fd.profile()
    assert prof.fusion_id == fd.id() and prof.segments == len(prof.kernel_profiles) >= 1
    assert prof.host_time_ms > 0 and prof.kernel_time_ms > 0
    assert prof.input_bytes == x.numel() * 4 and prof.output_bytes == out.numel() * 4
    k = prof.kernel_profiles[0]
    assert k.segment_id == 0 and k.scheduler and k.time_ms > 0
    assert k.input_bytes == x.numel() * 4 and k.effective_bandwidth_gbs > 0
    # fuser's runtime is left as it was: the next execute is unprofiled and still right
    assert torch.equal(fd.execute([x])[0], out)


def test_options_are_checked_against_known_names():
    fd = _define(_relu_sum)
    x = torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fd.execute([x], _enable_options=["kernel_profile", "id_model"], _disable_options=["fma", "kernel_cache"])
        fd.execute([x], _enable_options=None, _disable_options=None)
    with pytest.warns(UserWarning, match="'no_such_option'"):
        fd.execute([x], _enable_options=["no_such_option"])
    with pytest.raises(TypeError, match="_disable_options"):
        fd.execute([x], _disable_options="fma")


def test_disabling_matmul_expr_eval_leaves_matmul_without_a_scheduler():
    # nvFuser then needs a matmul kernel; fuser makes none, so no scheduler takes it (as
    # Thunder's test_nvfuser expects of nvFuser for float32 matmuls)
    def build(fd):
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.matmul(a, a))

    fd = _define(build)
    x = torch.randn(3, 3)
    with pytest.raises(RuntimeError, match="Can not find a scheduler to schedule fusion segment"):
        fd.execute([x], _disable_options=["matmul_expr_eval", "kernel_reuse"])
    torch.testing.assert_close(fd.execute([x])[0], x @ x)


def test_save_repro_inputs_keeps_fake_inputs_for_last_repro_script():
    fd = _define(_relu_sum)
    with pytest.raises(ValueError, match="save_repro_inputs"):
        fd.last_repro_script()
    x = torch.randn(6, 2).t()
    fd.execute([x.contiguous()], save_repro_inputs=True)
    assert fd.fake_inputs[0].shape == (2, 6)
    script = fd.last_repro_script()
    assert "torch.testing.make_tensor((2, 6), dtype=torch.float32, device='cpu')" in script


# --- the compat module ------------------------------------------------------------------------------------
@pytest.fixture
def as_nvfuser():
    saved = {k: sys.modules[k] for k in list(sys.modules) if k == "nvfuser" or k.startswith("nvfuser.")}
    sys.modules["nvfuser"] = fuser.compat.nvfuser
    try:
        yield fuser.compat.nvfuser
    finally:
        for k in [k for k in sys.modules if k == "nvfuser" or k.startswith("nvfuser.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_version_compares_with_strings(as_nvfuser):
    import nvfuser
    from nvfuser.nvfuser_version import Version

    v = nvfuser.version()
    assert isinstance(v, Version) and isinstance(v, str)
    assert v == "0.2.27" and v > "0.2.8" and v < "0.2.28" and v >= Version("0.2.27+git123") and v != "0.2.26"
    assert fuser.__version__ == fuser.version() != v  # fuser keeps its own version


def test_c_module_exposes_the_frontend_classes(as_nvfuser):
    import nvfuser
    import nvfuser._C as C

    assert C is nvfuser._C
    for name in ("Scalar", "Tensor", "Vector", "FusionDefinition", "DataType", "FusionCache"):
        assert getattr(C, name) is getattr(fuser, name), name
    assert C._FusionDefinition is fuser.FusionDefinition
    with FusionDefinition() as fd:
        s = fd.define_scalar(1.0)
        assert isinstance(s, nvfuser._C.Scalar) and not isinstance(s, nvfuser._C.Tensor)
        fd.add_output(fd.ops.mul(fd.define_tensor(shape=[-1], contiguity=[True]), s))
    from nvfuser import FusionProfile, KernelProfile  # noqa: F401
    from nvfuser.pytorch_utils import torch_dtype_to_nvfuser_dtype

    assert torch_dtype_to_nvfuser_dtype(torch.uint64) is DataType.UInt64


def test_new_datatypes_map_to_torch():
    assert DataType.UInt64.torch is torch.uint64 and DataType.UInt64.is_integral
    assert DataType.Float4_e2m1fn_x2.torch is torch.float4_e2m1fn_x2
    assert fuser.pytorch_utils.torch_dtype_to_nvfuser_dtype(torch.float4_e2m1fn_x2) is DataType.Float4_e2m1fn_x2


def test_selected_device_attribute_is_settable_before_defining():
    fd = FusionDefinition()
    assert fd._selected_device is None
    fd._selected_device = 0  # Thunder sets it before `with fd:`
    with fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1], contiguity=[True])))
    assert fd._selected_device == 0


# --- the ATen-only ops --------------------------------------------------------------------------------------
def test_argsort_and_topk():
    x = torch.tensor([[3.0, 1.0, 2.0, 5.0], [0.5, -1.0, 4.0, 4.5]])

    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.argsort(t, 1, True, True))
        values, indices = fd.ops.topk(t, fd.define_scalar(2), dim=1, largest=False, sorted=True)
        fd.add_output(values)
        fd.add_output(indices)

    order, values, indices = _define(build).execute([x])
    assert torch.equal(order, torch.argsort(x, dim=1, descending=True, stable=True))
    want_v, want_i = torch.topk(x, 2, dim=1, largest=False, sorted=True)
    assert torch.equal(values, want_v) and torch.equal(indices, want_i)


def test_embedding_fwd_and_thunders_decomposition():
    weight = torch.randn(10, 4)
    ids = torch.tensor([[1, 9], [0, 1]])

    def build(fd):
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.embedding_fwd(i, w, fd.define_scalar(1), None, None, None, None))
        # Thunder's embedding without max_norm: flatten, index_select, reshape back
        shape = [i.size(0), i.size(1), w.size(1)]
        fd.add_output(fd.ops.reshape(fd.ops.index_select(w, fd.ops.reshape(i, [-1]), 0), shape))

    a, b = _define(build).execute([ids, weight])
    assert torch.equal(a, F.embedding(ids, weight, padding_idx=1)) and torch.equal(b, weight[ids])


def test_flash_attention_forward_and_backward_on_cpu():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    g = torch.randn(1, 2, 5, 8)

    def build(fd):
        tq, tk, tv, tg = (fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4) for _ in range(4))
        causal, scale = fd.define_scalar(True), fd.define_scalar(0.25)
        out, lse, seed, offset = fd.ops.sdpfa_fwd(tq, tk, tv, None, causal, scale)
        gq, gk, gv = fd.ops.sdpfa_bwd(tg, tq, tk, tv, out, lse, None, causal, seed, offset, scale)
        for t in (out, lse, seed, offset, gq, gk, gv):
            fd.add_output(t)

    out, lse, seed, offset, gq, gk, gv = _define(build).execute([q, k, v, g])
    assert seed.dtype == torch.uint64 and seed.shape == (2,) and offset.shape == ()
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True, scale=0.25)
    ref.backward(g)
    torch.testing.assert_close(out, ref.detach(), atol=1e-5, rtol=1e-4)
    scores = (q @ k.transpose(-1, -2) * 0.25).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), atol=1e-5, rtol=1e-4)
    for got, want in ((gq, qr.grad), (gk, kr.grad), (gv, vr.grad)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_grouped_mm_bitcast_ndtri():
    torch.manual_seed(0)
    a, b2 = torch.randn(6, 4), torch.randn(2, 4, 5)
    offsets = torch.tensor([2, 6], dtype=torch.int32)
    x = torch.tensor([0.1, 0.5, 0.975])

    def build(fd):
        ta = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        tb = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True])
        to = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int32)
        tx = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.grouped_mm(ta, tb, to))
        fd.add_output(fd.ops.bitcast(tx, DataType.Int32))
        fd.add_output(fd.ops.ndtri(tx))

    mm, bits, nd = _define(build).execute([a, b2, offsets, x])
    torch.testing.assert_close(mm, torch.cat([a[:2] @ b2[0], a[2:] @ b2[1]]))
    assert torch.equal(bits, x.view(torch.int32))
    torch.testing.assert_close(nd, torch.special.ndtri(x))
    with pytest.raises(ValueError, match="bitcast.*sizes"):
        _define(lambda fd: fd.add_output(fd.ops.bitcast(fd.define_tensor(shape=[-1], contiguity=[True]), DataType.Double)))


def test_aten_only_ops_are_expr_eval_segments():
    def build(fd):
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.exp(fd.ops.cast(fd.ops.argsort(fd.ops.relu(t), 1), DataType.Float)))

    fd = _define(build)
    seg = fd.segmented_fusion_for([torch.randn(3, 4)])
    assert "expr_eval" in [g.scheduler.value for g in seg.groups]
