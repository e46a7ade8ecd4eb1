"""Lightning Thunder on fuser (issue 10, item 6): with `sys.modules["nvfuser"] =
fuser.compat.nvfuser` set before Thunder is imported, Thunder 0.2.6 selects its nvFuser
executor, and `thunder.jit` of a small GPT block (embedding, RMSNorm, causal attention
through scaled_dot_product_attention, SwiGLU MLP) runs forward and backward with fuser
generating its fused regions, matching eager PyTorch and Thunder without nvFuser.

Needs CUDA and `lightning-thunder==0.2.6` (skipped otherwise)."""
import copy
import importlib.util
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuser
import fuser.compat.nvfuser

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("thunder") is None, reason="needs lightning-thunder==0.2.6"),
]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


class GPTBlock(nn.Module):
    """Token embedding, pre-norm causal self-attention, pre-norm SwiGLU MLP, LM head."""

    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, hidden: int = 128) -> None:
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, dim)
        self.norm1 = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.head(x)


@pytest.fixture(scope="module")
def thunder():
    """Thunder imported with `import nvfuser` resolving to fuser (the alias stays while the
    module's tests run: Thunder imports nvfuser again whenever it checks the version)."""
    saved = sys.modules.get("nvfuser")
    if "thunder" in sys.modules and sys.modules.get("nvfuser") is not fuser.compat.nvfuser:
        pytest.skip("thunder was imported before nvfuser was aliased to fuser")
    sys.modules["nvfuser"] = fuser.compat.nvfuser
    import thunder as th
    import thunder.executors.nvfuserex as nvfuserex

    try:
        yield th
    finally:
        del nvfuserex
        if saved is None:
            sys.modules.pop("nvfuser", None)
        else:
            sys.modules["nvfuser"] = saved


@pytest.fixture(scope="module")
def nvfuser_executor(thunder):
    from thunder.executors.nvfuserex import nvfuser_version, nvfuserex

    assert str(nvfuser_version()) == "0.2.27"
    assert nvfuserex is not None, "Thunder did not select its nvFuser executor"
    import thunder.executors.nvfuserex_impl as impl

    assert impl.nvfuser is fuser.compat.nvfuser and impl.FusionDefinition is fuser.FusionDefinition
    return nvfuserex


def test_thunder_selects_fuser_as_its_nvfuser_executor(thunder, nvfuser_executor):
    assert nvfuser_executor.name == "nvfuser" and str(nvfuser_executor.version) == "0.2.27"
    assert "nvfuser" in [e.name for e in thunder.get_default_executors()]


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12)).item()


def _fusion_regions(thunder, jitted) -> list:
    """The fuser FusionDefinitions behind the nvFusion regions of the last forward and
    backward traces."""
    fds = []
    for trace in (thunder.last_traces(jitted)[-1], thunder.last_backward_traces(jitted)[-1]):
        for bsym in trace.bound_symbols:
            if bsym.sym.name.startswith("nvFusion"):
                wrapper = bsym._call_ctx[bsym.sym.name]
                fds.append(wrapper.last_used)
    return fds


def _run(model: nn.Module, fn, idx: torch.Tensor, grad: torch.Tensor):
    out = fn(idx)
    out.backward(grad)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out.detach(), grads


@pytest.mark.parametrize(
    "dtype, options, tol",
    [
        (torch.float32, {}, 2e-5),
        # flash attention through fd.ops.sdpfa_fwd / sdpfa_bwd (Thunder sends it only for half types)
        (torch.bfloat16, {"nv_enable_sdpa": True}, 3e-2),
    ],
    ids=["float32", "bfloat16_sdpa"],
)
def test_gpt_block_forward_and_backward(thunder, nvfuser_executor, dtype, options, tol):
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = GPTBlock().to(device=device, dtype=dtype)
    idx = torch.randint(0, 128, (2, 16), device=device)
    grad = torch.randn(2, 16, 128, device=device, dtype=dtype)
    cache = fuser.FusionCache.get()
    before = cache.num_fusions()

    jitted = thunder.jit(model, executors=[nvfuser_executor], **options)
    out, grads = _run(model, jitted, idx, grad)

    # fuser made the fused regions, forward and backward, and ran them on the GPU
    fds = _fusion_regions(thunder, jitted)
    assert len(fds) >= 2 and all(isinstance(fd, fuser.FusionDefinition) for fd in fds)
    assert cache.num_fusions() > before
    generated = []
    for fd in fds:
        try:
            generated.append(fd.last_cuda_code())
        except RuntimeError:  # a region whose segments all ran on the reference executor
            pass
    assert generated and all("__global__" in code for code in generated)
    if options.get("nv_enable_sdpa"):
        assert any("fd.ops.sdpfa_fwd(" in str(fd) for fd in fds) and any("fd.ops.sdpfa_bwd(" in str(fd) for fd in fds)

    # the same block in eager PyTorch, and under Thunder without nvFuser
    eager_out, eager_grads = _run(model, model, idx, grad)
    plain = thunder.jit(model, executors=[])
    plain_out, plain_grads = _run(model, plain, idx, grad)
    assert not any(b.sym.name.startswith("nvFusion") for b in thunder.last_traces(plain)[-1].bound_symbols)
    for want, want_grads in ((eager_out, eager_grads), (plain_out, plain_grads)):
        assert _relative_error(out, want) < tol
        for name, g in grads.items():
            assert _relative_error(g, want_grads[name]) < tol, name


def test_gpt_block_with_thunders_default_executors(thunder, nvfuser_executor):
    torch.manual_seed(1)
    model = GPTBlock().cuda()
    reference = copy.deepcopy(model)
    idx = torch.randint(0, 128, (3, 8), device="cuda")
    grad = torch.randn(3, 8, 128, device="cuda")
    jitted = thunder.jit(model)  # sdpa, torch.compile's, nvFuser: Thunder's defaults
    out, grads = _run(model, jitted, idx, grad)
    assert _fusion_regions(thunder, jitted)
    want, want_grads = _run(reference, reference, idx, grad)
    assert _relative_error(out, want) < 2e-5
    for name, g in grads.items():
        assert _relative_error(g, want_grads[name]) < 2e-5, name


def test_integer_div_matches_thunders_truncating_div(thunder, nvfuser_executor):
    # Thunder's test_div_truediv_integer_tensors_consistency, in small
    a = torch.tensor([-7, 7, -7, 9, 0], device="cuda")
    b = torch.tensor([2, 2, -2, -4, 3], device="cuda")

    def f(x, y):
        return x // y, torch.div(x, y, rounding_mode="trunc"), x / y

    got = thunder.jit(f, executors=[nvfuser_executor])(a, b)
    want = f(a, b)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)
