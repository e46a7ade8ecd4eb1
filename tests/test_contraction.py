"""A float product that is read beside an add (a reduction, a store, a copy recomputed
after a reduction, in the same kernel or in a later segment) is printed as `__fmul_rn`, so
nvcc cannot fuse it into an FMA in one place and round it in another: `t - max(t)` is
exactly 0 at the maximum (GPU fuzz seed 12020 case 124 gave 2.2e-4). A product read by
adds alone still contracts. Kernel-level reads: fuser.codegen.contraction; readers in
other segments: the preseg pass fuser.preseg.rounded_products."""
from __future__ import annotations

import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.frontend.cache import FusionCache
from fuser.codegen import cuda as codegen_cuda
from fuser.codegen.contraction import round_shared_products
from fuser.ir.exprs import BinaryOpType
from fuser.lower.kir import Assign, Binary, Element, GridItem, GridReduce, Param, Var

from cuda_units import ptx_of

F, D = DataType.Float, DataType.Double


def _fuzz_case(fd: FusionDefinition) -> None:
    """Seed 12020 case 124: t9 = (x * 31 + n) * min(...) reduced over a size-1 axis, then t9 - max(t9)."""
    t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
    t1 = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=DataType.Float)
    t2 = fd.ops.broadcast_in_dim(t1, shape=[31, 31, 1], broadcast_dims=[1, 2])
    t3 = fd.ops.sum(t2, dims=[0], keepdim=False)
    t4 = fd.ops.add(t3, t0.size(2))
    t5 = fd.ops.min(t4, dims=[0, 1], keepdim=False)
    t7 = fd.ops.mul(t4, fd.ops.broadcast(t5, is_broadcast_dim=[True, True]))
    t8 = fd.ops.broadcast_in_dim(t7, shape=[t0.size(0), 31, 1], broadcast_dims=[1, 2])
    t9 = fd.ops.max(t8, dims=[0], keepdim=True)
    t10 = fd.ops.max(t9, dims=[2], keepdim=False)
    fd.add_output(fd.ops.sub(t9, fd.ops.broadcast_in_dim(t10, shape=t9.shape(), broadcast_dims=[0, 1])))


def _fuzz_inputs(device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(124)
    return [(torch.randn(31, 31, 1, generator=g) * 3).to(device),
            (torch.randn(62, 1, generator=g) * 3).to(device)[::2]]


def _shifted(fd: FusionDefinition, dtype: DataType) -> None:
    """softmax's first step on a scaled input: t = x * s, t - amax(t) over the rows."""
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    s = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
    t = fd.ops.mul(x, fd.ops.broadcast(s, is_broadcast_dim=[True, False]))
    m = fd.ops.max(t, dims=[1], keepdim=False)
    fd.add_output(fd.ops.sub(t, fd.ops.broadcast(m, is_broadcast_dim=[False, True])))


def _define(build, *args) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


def _products(src: str) -> dict[str, str]:
    """{variable: how its product is printed} for every product statement of `src`."""
    found = {}
    for lhs, rhs in re.findall(r"(\w+)(?:\[[^\]=]*\])? = (__[fd]mul_rn\(|\(\w+(?:\[[^\]]*\])? \* )", src):
        found.setdefault(lhs, set()).add("rounded" if rhs.startswith("__") else "plain")
    return {k: "/".join(sorted(v)) for k, v in found.items()}


def test_the_fuzz_case_rounds_the_product_a_reduction_and_a_subtract_read():
    fd = _define(_fuzz_case)
    src = fd.cuda_code_for([x.to("meta") for x in _fuzz_inputs("cpu")])
    products = _products(src)
    # (x * 31) feeds one add only: contracted, the same in every copy; t9 feeds the max
    # reduction and, recomputed after it, the subtract
    assert sorted(products.values()) == ["plain", "rounded"], products
    rounded = next(k for k, v in products.items() if v == "rounded")
    assert re.search(rf"maximum\(\w+, {rounded}\)", src) and re.search(rf"= \({rounded} - \w+\)", src)


@pytest.mark.parametrize("dtype, call", [(F, "__fmul_rn"), (D, "__dmul_rn")])
def test_a_product_read_by_a_reduction_and_a_subtract_is_rounded(dtype, call):
    tdt = torch.float32 if dtype is F else torch.float64
    src = _define(_shifted, dtype).cuda_code_for([torch.empty(64, 1000, device="meta", dtype=tdt),
                                                 torch.empty(1000, device="meta", dtype=tdt)])
    assert call in src and set(_products(src).values()) == {"rounded"}


@pytest.mark.nvcc
def test_the_rounded_product_is_a_mul_rn_in_the_ptx(monkeypatch):
    """PTX's mul.rn is a product ptxas may not fuse into an FMA (a plain mul.f32 it may).
    The check can fail: without the pass the kernels have no mul.rn."""
    src = _define(_fuzz_case).cuda_code_for([x.to("meta") for x in _fuzz_inputs("cpu")])
    fixed = ptx_of(src)
    monkeypatch.setattr(codegen_cuda, "round_shared_products", lambda body: body)
    fd = _define(_fuzz_case)
    unfixed_src = fd.cuda_code_for([x.to("meta") for x in _fuzz_inputs("cpu")])
    unfixed = ptx_of(unfixed_src)
    # (one copy per pass over the row: the compiler merges them where no bounds checks
    # separate the passes, normalization.EXACT_TILES)
    rounded = fixed.count("mul.rn.f32")
    assert rounded >= 1 and unfixed.count("mul.rn.f32") == 0
    assert unfixed.count("mul.f32") == fixed.count("mul.f32") + rounded


def _mul(a: str, b: str, dt: DataType = F) -> Binary:
    return Binary(BinaryOpType.Mul, Var(a), Var(b), dt, dt, dt)


def _add(a, b, dt: DataType = F, a_dt: DataType | None = None) -> Binary:
    a = Var(a) if isinstance(a, str) else a
    return Binary(BinaryOpType.Add, a, Var(b), a_dt or dt, dt, dt)


def _rounded(body) -> set[str]:
    out = set()

    def visit(x):
        if isinstance(x, list):
            for y in x:
                visit(y)
        elif isinstance(x, Assign) and isinstance(x.rhs, Binary) and x.rhs.rounded:
            out.add(x.lhs.name if isinstance(x.lhs, Var) else x.lhs.base.name)
        elif hasattr(x, "body"):
            visit(x.body)

    visit(round_shared_products(body))
    return out


def test_products_read_only_by_adds_of_their_type_stay_contractible():
    out = Param("T0", "tensor", None, "P", F, pointer=True)
    body = [Assign(Var("p"), _mul("a", "b")), Assign(Var("s"), _add("p", "c")), Assign(Var("u"), _add("d", "p")),
            Assign(Var("q"), _mul("a", "c")), Assign(Var("r"), _add("q", "c")),
            Assign(Element(out, Var("i")), Var("q"))]
    assert _rounded(body) == {"q"}  # p: two adds; q: an add and a store


def test_products_read_another_way_are_rounded():
    body = [Assign(Var("p"), _mul("a", "b")), Assign(Var("s"), _add("p", "c", D, a_dt=F)),  # a double add
            Assign(Var("q"), _mul("a", "b", D)), Assign(Var("m"), _mul("q", "c", D)),  # a product of a product
            Assign(Element(Var("w"), Var("u")), _mul("a", "b")), Assign(Var("v"), _add(Element(Var("w"), Var("u")), "c")),
            Assign(Var("x"), _mul("a", "b"))]
    rounded = _rounded(body)
    assert rounded == {"p", "q"}  # w[u] is read by one add of its type; x by nothing
    # a grid reduction's accumulator is read by the reduction
    item = GridItem(Var("x"), BinaryOpType.Add, F, None, Var("work"), Var("smem"), Var("slot"))
    assert _rounded([*body, GridReduce([item], Var("sem"), Var("flag"), 1, Var("w0"), True)]) == {"p", "q", "x"}


#: [rows, columns] of `_shifted`: one persistent kernel; rows too long for one, a
#: reduction and a pointwise segment that recomputes t
SHIFTED_SHAPES = [(512, 1000), (8, 1 << 20)]


def _shifted_code(shape) -> tuple[list[str], str]:
    fd = _define(_shifted, F)
    ins = [torch.empty(*shape, device="meta"), torch.empty(shape[1], device="meta")]
    return [g.scheduler.value for g in fd.segmented_fusion_for(ins).groups], fd.cuda_code_for(ins)


def test_a_product_a_later_segment_recomputes_is_rounded_there_too(monkeypatch):
    """t = x * s feeds the reduction's segment and, recomputed, the pointwise segment's
    subtract: judged on the whole fusion, every copy is rounded. The check can fail: with
    the pass off, the pointwise kernel's copy is a plain product (fused by nvcc)."""
    kinds, src = _shifted_code(SHIFTED_SHAPES[1])
    assert kinds == ["reduction", "pointwise"]
    kernels = src.split('extern "C"')[1:]
    assert all(set(_products(k).values()) == {"rounded"} for k in kernels), [_products(k) for k in kernels]
    monkeypatch.setenv("FUSER_DISABLE", "rounded_products")
    FusionCache.reset()  # (the segmentation, with its marks, is cached with the definition)
    try:
        _, unmarked = _shifted_code(SHIFTED_SHAPES[1])
    finally:
        FusionCache.reset()  # (no later test may get the unmarked segmentation)
    assert [set(_products(k).values()) for k in unmarked.split('extern "C"')[1:]] == [{"rounded"}, {"plain"}]


def test_the_pass_marks_products_read_two_ways_only():
    from fuser.preseg import rounded_products as rp

    def marked(build) -> list[str]:
        fd = _define(build)
        rp.mark_rounded_products(fd.fusion)
        return sorted(e.output.name for e in fd.fusion.exprs() if getattr(e, "rounded", False))

    def build(fd):
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        h = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Half)
        one = fd.ops.mul(x, x)  # one reader: an add
        fd.add_output(fd.ops.add(one, x))
        adds = fd.ops.mul(x, 3.0)  # two adds of its type
        fd.add_output(fd.ops.sub(fd.ops.add(adds, x), adds))
        out = fd.ops.mul(x, 5.0)  # an output and an add
        fd.add_output(out)
        fd.add_output(fd.ops.add(out, 1.0))
        red = fd.ops.mul(x, 7.0)  # a reduction and an add
        fd.add_output(fd.ops.sum(red, dims=[0]))
        fd.add_output(fd.ops.add(red, 2.0))
        half = fd.ops.mul(h, h)  # a half product: rounded to half anyway
        fd.add_output(half)
        fd.add_output(fd.ops.add(half, h))
        only = fd.ops.mul(x, 9.0)  # one reader, a reduction
        fd.add_output(fd.ops.max(only, dims=[0]))

    fd = _define(build)
    products = [e for e in fd.fusion.exprs() if type(e).__name__ == "BinaryOp" and e.op_type is BinaryOpType.Mul]
    names = [e.output.name for e in products]  # one, adds, out, red, half, only
    assert marked(build) == sorted([names[2], names[3]])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHIFTED_SHAPES, ids=["one_kernel", "two_segments"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shifted_max_is_exactly_zero_on_the_gpu(dtype, shape):
    fd = _define(_shifted, DataType.Float if dtype is torch.float32 else DataType.Double)
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 30).to(dtype).cuda()
    s = (torch.rand(shape[1], generator=g, dtype=torch.float64) * 3 + 0.1).to(dtype).cuda()
    (y,) = fd.execute([x, s])
    assert all(r.kernel for r in fd.last_segments() if r.generates_kernel)  # the generated kernels ran
    eager = x * s - (x * s).amax(1, keepdim=True)
    assert torch.equal(y.amax(1), torch.zeros(shape[0], dtype=dtype, device="cuda"))
    assert torch.equal(y, eager)


@pytest.mark.gpu
def test_the_fuzz_case_matches_eager_exactly_on_the_gpu():
    fd = _define(_fuzz_case)
    t0, t1 = _fuzz_inputs("cuda")
    (got,) = fd.execute([t0, t1])
    assert all(r.kernel for r in fd.last_segments() if r.generates_kernel)
    t4 = t1.unsqueeze(0).expand(31, 31, 1).sum(0) + 1
    t9 = (t4 * t4.amin()).unsqueeze(0).amax(0, keepdim=True)
    assert torch.equal(got, t9 - t9.amax(2, keepdim=True))


@pytest.mark.nvcc
def test_fuser_disable_fma_compiles_without_contraction(monkeypatch):
    """nvFuser's FUSER_DISABLE=fma: kernels compile with --fmad=false (every product and
    sum rounded as eager's), under another kernel-cache key. GELU's one fused multiply-add
    (a product read by one add) is gone from the PTX."""
    from fuser.driver.kernel_cache import cache_key
    from fuser.kernel.generated import compile_options

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(x, 3.0), 1.0))
    src = fd.cuda_code_for([torch.empty(1 << 12, device="meta")])
    assert compile_options() == ()
    assert "fma.rn.f32" in ptx_of(src, compile_options())
    monkeypatch.setenv("FUSER_DISABLE", "fma")
    assert compile_options() == ("--fmad=false",)
    ptx = ptx_of(src, compile_options())
    assert "fma.rn.f32" not in ptx and "mul.rn.f32" in ptx and "add.rn.f32" in ptx
    assert cache_key(src, arch="sm_90", options=compile_options(), headers={}) != cache_key(src, arch="sm_90", headers={})
