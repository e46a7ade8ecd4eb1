"""Kernel IR and its CUDA printer, without a GPU: every node kind prints as the text below,
the index arithmetic with the parentheses C needs (and a few for the reader), and the
lowering package neither imports codegen nor writes C."""
from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from fuser import DataType
from fuser.codegen import ops as cops
from fuser.codegen.cuda import kernel_source, param_decl, statements
from fuser.codegen.expr import expr
from fuser.ir import BinaryOpType, MemoryType, ParallelType, TernaryOpType, UnaryOpType
from fuser.lower.kir import (
    AddressOf,
    Assign,
    Binary,
    BlockAllReduce,
    Cast,
    Comment,
    Const,
    Decl,
    Element,
    For,
    GridItem,
    GridReduce,
    If,
    IndexBinary,
    IndexCast,
    IntLit,
    Kernel,
    Member,
    Not,
    ParallelDim,
    ParallelIndex,
    Param,
    Sync,
    Ternary,
    Unary,
    Var,
    VecLoad,
    VecStore,
    WelfordMerge,
    all_of,
    eq,
    lt,
)

LOWER = Path(__file__).resolve().parent.parent / "fuser" / "lower"
a, b, c, d = Var("a"), Var("b"), Var("c"), Var("d")
TIDX = IndexCast(ParallelIndex(ParallelType.TIDx))
T0 = Param("T0", "tensor", None, "P", DataType.Float, pointer=True, readonly=True)


def lines(*stmts) -> list[str]:
    out: list[str] = []
    statements(list(stmts), out, 0)
    return out


# --- the lowering package stays free of C ------------------------------------------------------------


def test_lower_does_not_import_codegen():
    for path in sorted(LOWER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [n.name for n in node.names]
            elif isinstance(node, ast.ImportFrom):
                # a relative import leaves the package only with level > 1 (..codegen)
                names = [("." * node.level) + (node.module or "")] + [n.name for n in node.names]
            else:
                continue
            assert not any("codegen" in n for n in names), f"{path.name}:{node.lineno} imports {names}"
    # and nothing the entry points import pulls codegen in
    code = "import sys, fuser.lower.lower, fuser.lower.kir\nprint([m for m in sys.modules if 'codegen' in m])"
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "[]"


_C_MARKS = ("nvfuser_index_t", "__restrict__", "__global__", "__shared__", "threadIdx", "blockIdx", "fuser::",
            "#pragma", "__syncthreads", "(float)", "(int)")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_lower_writes_no_c():
    for path in sorted(LOWER.glob("*.py")):
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                assert not any(m in node.value for m in _C_MARKS), f"{path.name}:{node.lineno}: {node.value!r}"


# --- expressions ------------------------------------------------------------------------------------


def test_operators_build_index_arithmetic():
    assert a + 1 == IndexBinary(BinaryOpType.Add, a, IntLit(1))
    assert 2 * a == IndexBinary(BinaryOpType.Mul, IntLit(2), a)
    assert a // b % 3 == IndexBinary(BinaryOpType.Mod, IndexBinary(BinaryOpType.Div, a, b), IntLit(3))
    assert all_of([]) is None and all_of([a]) is a


@pytest.mark.parametrize("e,want", [
    (a * b + c, "a * b + c"),
    ((a + b) * c, "(a + b) * c"),
    (a - (b - c), "a - (b - c)"),
    (a - b + c, "a - b + c"),
    (a + (b + c), "a + (b + c)"),
    ((a // b) * c, "(a / b) * c"),
    ((a * b) % c, "(a * b) % c"),
    (a * b * c, "a * b * c"),
    (IndexBinary(BinaryOpType.CeilDiv, a, b * c), "(a + b * c - 1) / (b * c)"),
    (IndexBinary(BinaryOpType.CeilDiv, a, b) * 4, "((a + b - 1) / b) * 4"),
    (IndexBinary(BinaryOpType.Max, a + 1, b), "max(a + 1, b)"),
    (IndexBinary(BinaryOpType.Min, a, b) * 2, "min(a, b) * 2"),
    (lt(a * 4 + 1, b * c), "(a * 4 + 1) < (b * c)"),
    (all_of([lt(a, b), eq(c, 0), lt(d, 1)]), "a < b && c == 0 && d < 1"),
    (IndexBinary(BinaryOpType.LogicalOr, all_of([lt(a, b), lt(c, d)]), eq(a, 0)), "(a < b && c < d) || a == 0"),
    (IndexBinary(BinaryOpType.Eq, lt(a, b), IntLit(0)), "(a < b) == 0"),
    (Not(lt(a, b)), "!(a < b)"),
    (Not(a), "!a"),
    (IntLit(-3) + a, "(-3) + a"),
    (TIDX * 8 + a, "((nvfuser_index_t)threadIdx.x) * 8 + a"),
    (IndexCast(a + b), "((nvfuser_index_t)(a + b))"),
    (ParallelIndex(ParallelType.BIDy), "blockIdx.y"),
    (ParallelDim(ParallelType.TIDx) * ParallelDim(ParallelType.BIDx), "blockDim.x * gridDim.x"),
    (Element(a, b * 2 + c), "a[b * 2 + c]"),
    (AddressOf(Element(T0, a % b)), "&T0[a % b]"),
    (a + b * 4, "a + b * 4"),
])
def test_index_arithmetic(e, want):
    assert expr(e) == want


def test_values_go_through_the_emitters():
    h = Element(Var("r0"), a)
    assert expr(Const(-1.5, DataType.Float)) == "(-1.5f)"
    assert expr(Const(1.0, DataType.Half)) == "fuser::half_from_bits(0x3c00)"
    assert expr(Cast(h, DataType.Half, DataType.Float)) == "fuser::half_to_float(r0[a])"
    assert expr(Cast(a * 2, DataType.Int32, DataType.Float)) == "((float)(a * 2))"
    assert expr(Unary(UnaryOpType.Exp, h, DataType.Half, DataType.Half)) == \
        "fuser::float_to_half(fuser::exp(fuser::half_to_float(r0[a])))"
    add = Binary(BinaryOpType.Add, h, Const(2, DataType.Int), DataType.Half, DataType.Int, DataType.Half)
    assert expr(add) == "fuser::float_to_half((fuser::half_to_float(r0[a]) + ((float)2LL)))"
    # a float tensor against a double number compares in float
    cmp = Binary(BinaryOpType.Lt, Var("x"), Var("d0"), DataType.Float, DataType.Double, DataType.Bool, DataType.Float)
    assert expr(cmp) == "(x < ((float)d0))"
    where = Ternary(TernaryOpType.Where, (Var("p"), Var("x"), Const(0.0, DataType.Float)),
                    (DataType.Bool, DataType.Float, DataType.Float), DataType.Float)
    assert expr(where) == "(p ? x : 0.0f)"
    th = Ternary(TernaryOpType.Threshold, (Var("x"), Const(0.5, DataType.Double), Const(-1.0, DataType.Double)),
                 (DataType.BFloat16, DataType.Double, DataType.Double), DataType.BFloat16, DataType.Float)
    assert expr(th) == ("fuser::float_to_bfloat(fuser::threshold<float>(fuser::bfloat_to_float(x), "
                        "((float)0.5), ((float)(-1.0))))")
    # a value under index syntax is parenthesised where it does not bind tightly
    assert expr(Not(Cast(a + b, DataType.Int, DataType.Int))) == "!(a + b)"
    assert expr(Not(cmp)) == "!(x < ((float)d0))"


# --- statements ---------------------------------------------------------------------------------------


def test_declarations():
    assert lines(Decl("t1", DataType.BFloat16, 8)) == ["__bfloat t1[8];"]
    assert lines(Decl("i", None, init=TIDX + 1)) == ["nvfuser_index_t i = ((nvfuser_index_t)threadIdx.x) + 1;"]
    assert lines(Decl("acc", DataType.Float, init=Const(0.0, DataType.Float))) == ["float acc = 0.0f;"]
    assert lines(Decl("smem", DataType.Float, 256, space=MemoryType.Shared)) == ["__shared__ float smem[256];"]
    with pytest.raises(ValueError, match="shared"):
        lines(Decl("s", DataType.Float, space=MemoryType.Shared, init=Const(0.0, DataType.Float)))
    with pytest.raises(ValueError, match="Global"):
        lines(Decl("g", DataType.Float, 4, space=MemoryType.Global))


def test_loops_branches_and_accesses():
    body = [Assign(Element(Var("t1"), a), Element(T0, a * 4 + Var("v")))]
    assert lines(For(Var("v"), IntLit(4), body, unroll=True, dtype=DataType.Int32)) == [
        "#pragma unroll",
        "for (int v = 0; v < 4; ++v) {",
        "  t1[a] = T0[a * 4 + v];",
        "}",
    ]
    assert lines(For(a, Var("i0") * Var("i1"), [Comment("serial")])) == [
        "for (nvfuser_index_t a = 0; a < i0 * i1; ++a) {",
        "  // serial",
        "}",
    ]
    assert lines(If(lt(a, b), [Sync()], [Comment("else")]), If(Not(lt(a, b)), [Sync()])) == [
        "if (a < b) {",
        "  __syncthreads();",
        "} else {",
        "  // else",
        "}",
        "if (!(a < b)) {",
        "  __syncthreads();",
        "}",
    ]
    assert lines(VecLoad(DataType.Half, 8, Var("r0") + a * 8, AddressOf(Element(T0, TIDX * 8))),
                 VecStore(DataType.Float, 4, AddressOf(Element(Var("T1"), b)), Var("t2"))) == [
        "fuser::load_vec<__half, 8>(r0 + a * 8, &T0[((nvfuser_index_t)threadIdx.x) * 8]);",
        "fuser::store_vec<float, 4>(&T1[b], t2);",
    ]


def test_reductions_print_as_runtime_calls():
    acc, x, smem = Var("acc"), Element(Var("r0"), IntLit(0)), Var("smem")
    assert lines(BlockAllReduce(acc, acc, BinaryOpType.Add, DataType.Float, smem)) == [
        "acc = fuser::block_allreduce_x(acc, [](float a, float b) { return (a + b); }, smem);"
    ]
    assert lines(BlockAllReduce(acc, x, BinaryOpType.Max, DataType.Half, smem, over=ParallelType.TIDy)) == [
        "acc = fuser::block_allreduce_y(r0[0], [](__half a, __half b) { return "
        "fuser::float_to_half(fuser::maximum(fuser::half_to_float(a), fuser::half_to_float(b))); }, smem);"
    ]
    w = Var("w")
    assert lines(Decl("w", DataType.Float, welford=True)) == ["fuser::Welford<float> w = {};"]
    assert lines(Decl("ws", DataType.Float, 64, space=MemoryType.Shared, welford=True)) == [
        "__shared__ fuser::Welford<float> ws[64];"]
    assert lines(WelfordMerge(w, Var("mean"), Var("m2"), Var("cnt"))) == [
        "fuser::welford_merge(w, mean, m2, cnt);"]
    assert lines(BlockAllReduce(w, w, None, DataType.Float, Var("ws"))) == [
        "w = fuser::block_allreduce_x(w, fuser::WelfordOp(), ws);"]
    assert expr(Cast(Member(w, "avg"), DataType.Float, DataType.Half)) == "fuser::float_to_half(w.avg)"
    work = Param("work0", "work", (4, 2, 0), "P", DataType.Float, pointer=True)
    sem = Param("semaphore", "semaphore", None, "P", DataType.Int32, pointer=True)
    slot = IndexCast(ParallelIndex(ParallelType.TIDy))
    item = GridItem(acc, BinaryOpType.Add, DataType.Float, Const(0.0, DataType.Float), work, smem, slot)
    assert lines(GridReduce([item], sem, Var("flag"), 2, eq(TIDX, 0), over_x=True)) == [
        "fuser::grid_write(acc, work0, ((nvfuser_index_t)threadIdx.y), 2, ((nvfuser_index_t)threadIdx.x) == 0);",
        "if (!fuser::grid_arrive(semaphore, &flag)) return;",
        "acc = fuser::grid_finish<true>([](float a, float b) { return (a + b); }, 0.0f, work0, "
        "((nvfuser_index_t)threadIdx.y), 2, smem);",
    ]
    wwork = Param("work1", "work", (16, 1, 0), "P", DataType.Float, pointer=True, welford=True)
    assert [param_decl(p) for p in (sem, wwork)] == [
        "unsigned int* __restrict__ semaphore", "fuser::Welford<float>* __restrict__ work1"]


def test_kernel_source_and_parameters():
    s0 = Param("s1_0", "stride", None, "i")
    d2 = Param("d2", "scalar", None, "d", DataType.Double)
    out = Param("T1", "tensor", None, "P", DataType.BFloat16, pointer=True)
    assert [param_decl(p) for p in (T0, out, s0, d2)] == [
        "const float* __restrict__ T0", "__bfloat* __restrict__ T1", "nvfuser_index_t s1_0", "double d2"]
    k = Kernel("k", [T0, out], [Comment("empty")], "int64", threads=256)
    assert kernel_source(k) == (
        '#include "fuser_runtime.cuh"\n'
        "typedef long long nvfuser_index_t;\n"
        "\n"
        'extern "C" __global__ void __launch_bounds__(256) k(\n'
        "    const float* __restrict__ T0,\n"
        "    __bfloat* __restrict__ T1) {\n"
        "  fuser::wait_for_prior_grids();\n"
        "  // empty\n"
        "}\n"
    )
    # a kernel that does not wait may not be launched as a dependent: no call, and the flag says so
    src = kernel_source(dataclasses.replace(k, waits_for_prior_grids=False))
    assert "wait_for_prior_grids" not in src and "// empty" in src


@pytest.mark.nvcc
def test_shared_memory_sync_and_branches_compile():
    # a block sum through shared memory, from nodes alone (no runtime reduction helper)
    from fuser.driver.nvrtc import compile_cubin_nvcc

    n = Param("i0", "extent", None, "i")
    out = Param("T1", "tensor", None, "P", DataType.Float, pointer=True)
    tid, bid = TIDX, IndexCast(ParallelIndex(ParallelType.BIDx))
    gid = bid * ParallelDim(ParallelType.TIDx) + tid
    smem, k = Var("smem"), Var("k")
    body = [
        Decl("smem", DataType.Float, 128, space=MemoryType.Shared),
        Decl("x", DataType.Float, init=Const(0.0, DataType.Float)),
        If(lt(gid, n), [Assign(Var("x"), Element(T0, gid))]),
        Assign(Element(smem, tid), Var("x")),
        Sync(),
        If(eq(tid, 0), [
            Decl("acc", DataType.Float, init=Const(0.0, DataType.Float)),
            For(k, IntLit(128), [Assign(Var("acc"), Binary(BinaryOpType.Add, Var("acc"), Element(smem, k),
                                                           DataType.Float, DataType.Float, DataType.Float))],
                unroll=True),
            Assign(Element(out, bid), Var("acc")),
        ], [Comment("the other threads are done")]),
    ]
    source = kernel_source(Kernel("block_sum", [T0, out, n], body, "int32", threads=128))
    cubin = compile_cubin_nvcc(source, arch="sm_90", headers=cops.runtime_headers())
    assert cubin[:4] == b"\x7fELF"
