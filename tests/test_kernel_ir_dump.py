"""FUSER_DUMP=kernel_ir, without a GPU: each generated kernel's kernel IR is printed as it is
lowered (loops, predicates, tensors named with their memory space, reductions), every kernel IR
node type has a rule in the printer, and every name FUSER_DUMP lists has a dump site."""
from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.ir import BinaryOpType, MemoryType, ParallelType, TernaryOpType, UnaryOpType
from fuser.ir.exprs import RNGOpType
from fuser.lower import kir
from fuser.lower.kir_printer import handled_nodes, kernel_ir_str
from fuser.options import KNOWN_DUMPS

HEADER = "===== kernel_ir ====="


def _meta(*shape, dtype=torch.float32):
    return torch.empty(shape, device="meta", dtype=dtype)


def _dumps(fd, inputs, monkeypatch, capsys) -> list[str]:
    """The kernel_ir dumps `fd.cuda_code_for(inputs)` prints, one per generated kernel."""
    capsys.readouterr()
    monkeypatch.setenv("FUSER_DUMP", "kernel_ir")
    fd.cuda_code_for(inputs)
    err = capsys.readouterr().err
    return [part.strip() for part in err.split(HEADER)[1:]]


def _balanced(text: str) -> None:
    """Blocks open and close in order, each at its own indentation (the printer's structure)."""
    stack = []
    for line in text.splitlines():
        pad = len(line) - len(line.lstrip())
        word = line.strip().split(" ")[0]
        closer = {"FOR": "ENDFOR", "IF": "ENDIF"}.get(word)
        if closer is None and word.startswith("GRID_REDUCE("):
            closer = "ENDGRID_REDUCE"
        if closer is not None:
            stack.append((closer, pad))
        elif word in ("ENDFOR", "ENDIF", "ENDGRID_REDUCE"):
            assert stack and stack[-1] == (word, pad), f"unbalanced {line!r} in\n{text}"
            stack.pop()
    assert not stack, f"unclosed {stack} in\n{text}"


def _not_c(text: str) -> None:
    for mark in ("nvfuser_index_t", "__global__", "__restrict__", "#pragma", "__syncthreads", "fuser::"):
        assert mark not in text, f"kernel IR dump has C ({mark}):\n{text}"
    assert not any(line.rstrip().endswith(";") for line in text.splitlines()), text


# --- the dump of generated kernels ---------------------------------------------------------------


def test_pointwise_kernel_ir(monkeypatch, capsys):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(a, b))
    (text,) = _dumps(fd, [_meta(64, 128), _meta(64, 128)], monkeypatch, capsys)
    lines = text.splitlines()
    assert lines[0] == "%kernel fuser_pointwise {" and lines[-1] == "}", text
    # the launch shape for this call: 64 * 128 elements, 4 a thread, 128 threads a block
    assert "block: 128 x 1; grid: 16 x 1 (this call)" in text
    # parameters: inputs read-only, the output written, all global
    assert "T0_g: const Float*  [tensor T0]" in text and "T1_g: const Float*  [tensor T1]" in text
    assert re.search(r"^\s+T2_g: Float\*  \[tensor T2\]$", text, re.M), text
    # loop structure: a predicate over the flattened index, unrolled loops inside it
    assert re.search(r"^    IF .*threadIdx\.x.* < i\d \* i\d:$", text, re.M), text
    assert re.search(r"^      FOR (\w+) in 0 \.\. 1 \(unroll\):$", text, re.M), text
    # register buffers, vector accesses of the global tensors, and the add itself
    assert re.search(r"ALLOCATE \w+_l: Float\[4\] \(local\)", text), text
    assert re.search(r"= VECTOR_LOAD<Float, 4>\(&T0_g\[", text), text
    assert re.search(r"&T2_g\[.*\] = VECTOR_STORE<Float, 4>", text), text
    assert re.search(r"^\s+\w+_l\[[^\]]+\] = \w+_l\[[^\]]+\] \+ \w+_l\[[^\]]+\]$", text, re.M), text
    _balanced(text)
    _not_c(text)


def test_reduction_kernel_ir(monkeypatch, capsys):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t0, dims=[1]))
    (text,) = _dumps(fd, [_meta(64, 1 << 20)], monkeypatch, capsys)
    assert text.startswith("%kernel fuser_reduction {")
    assert "T0_g: const Float*  [tensor T0]" in text and "T1_g: Float*  [tensor T1]" in text
    # a serial loop accumulates into a register, then the block and the grid combine it
    acc = re.search(r"^\s+(\w+) = \1 \+ \w+_l\[", text, re.M)
    assert acc, text
    assert re.search(r"^\s+FOR \w+ in 0 \.\. steps:$", text, re.M), text
    assert f"{acc[1]} = BLOCK_ALLREDUCE(add<Float>, {acc[1]}, over=TIDx, smem=" in text
    assert re.search(rf"^\s+{acc[1]} = grid add<Float>\({acc[1]}, ", text, re.M), text
    assert re.search(r"ALLOCATE \w+_s: Float\[\d+\] \(shared\)", text), text
    assert re.search(r"T1_g\[.*\] = \w+$", text, re.M), text
    _balanced(text)
    _not_c(text)


def test_softmax_kernel_ir(monkeypatch, capsys):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        x = fd.ops.cast(t0, DataType.Float)
        m = fd.ops.max(x, dims=[1], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(x, m))
        s = fd.ops.sum(e, dims=[1], keepdim=True)
        fd.add_output(fd.ops.cast(fd.ops.div(e, s), DataType.BFloat16))
    (text,) = _dumps(fd, [_meta(64, 1024, dtype=torch.bfloat16)], monkeypatch, capsys)
    assert text.startswith("%kernel fuser_reduction {")
    assert "T0_g: const BFloat16*  [tensor T0]" in text
    # two block reductions (the max, then the sum of the exponentials), persistent in registers
    assert re.search(r"= BLOCK_ALLREDUCE\(maximum<Float>, ", text), text
    assert re.search(r"= BLOCK_ALLREDUCE\(add<Float>, ", text), text
    assert text.index("maximum<Float>") < text.index("add<Float>")
    assert "GRID_REDUCE" not in text
    assert re.search(r"= cast<BFloat16->Float>\(\w+_l\[", text) and re.search(r"= exp\(\w+_l\[", text), text
    # the division by the row's sum: its scale and reciprocal once, two products an element
    assert re.search(r"^ *(\w+) = reciprocal_scale<Float>\((\w+)\)\n *(\w+) = float\(1\) / \(\2 \* \1\)$",
                     text, re.M), text
    assert re.search(r"= \w+_l\[[^\]]+\] \* rcp\w+ \* scl\w+$", text, re.M), text
    assert re.search(r"VECTOR_STORE<BFloat16, \d+>", text), text
    _balanced(text)
    _not_c(text)


def test_no_dump_unless_named(monkeypatch, capsys):
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.neg(t0))
    capsys.readouterr()
    monkeypatch.setenv("FUSER_DUMP", "cuda_kernel")
    fd.cuda_code_for([_meta(1000)])
    err = capsys.readouterr().err
    assert "===== cuda_kernel =====" in err and HEADER not in err
    monkeypatch.setenv("FUSER_DUMP", "cuda_kernel,kernel_ir")
    fd.cuda_code_for([_meta(1000)])
    err = capsys.readouterr().err
    assert "===== cuda_kernel =====" in err and err.count(HEADER) == 1


# --- every node type has a rule --------------------------------------------------------------------


def _kir_node_types() -> set[type]:
    # every class kir defines, but the abstract expression base
    return {c for c in vars(kir).values()
            if isinstance(c, type) and c.__module__ == kir.__name__ and c is not kir.Expr}


def test_printer_handles_every_kir_node_type():
    nodes = _kir_node_types()
    assert {kir.For, kir.If, kir.GridReduce, kir.Element, kir.Kernel} <= nodes  # the enumeration finds them
    missing = nodes - handled_nodes()
    assert not missing, f"kernel_ir printer has no rule for {sorted(c.__name__ for c in missing)}"


def _every_node_kernel() -> kir.Kernel:
    """A kernel (not a meaningful one) that uses every kernel IR node type."""
    f, i, tidx = DataType.Float, DataType.Int, kir.IndexCast(kir.ParallelIndex(ParallelType.TIDx))
    t0 = kir.Param("T0", "tensor", None, "P", f, pointer=True, readonly=True)
    t1 = kir.Param("T1", "tensor", None, "P", f, pointer=True)
    ext = kir.Param("i0", "extent", None, "i")
    stride = kir.Param("s0_0", "stride", (types.SimpleNamespace(name=0), 0), "i")
    work = kir.Param("w1", "work", (4, 1, 0), "P", f, pointer=True)
    sem = kir.Param("sem", "semaphore", None, "P", pointer=True)
    err = kir.Param("err", "index_error", None, "P", pointer=True)
    state = kir.Param("philox", "philox_state", None, "P", i, pointer=True)
    a, acc, smem, w = kir.Var("a"), kir.Var("acc"), kir.Var("smem"), kir.Var("wf")
    u = kir.Var("u")
    pos = kir.CheckedIndex(kir.Element(t0, u), i, ext, 0, flag=err)
    value = kir.Ternary(
        TernaryOpType.Where,
        (kir.Not(kir.lt(u, 3)),
         kir.Binary(BinaryOpType.Mul, kir.Unary(UnaryOpType.Exp, kir.Element(a, u), f, f),
                    kir.Cast(kir.Const(2, i), i, f), f, f, f),
         kir.Random(RNGOpType.Uniform, f, "rng0", kir.StateOr(state, 0, ext), kir.StateOr(state, 1, ext), u,
                    (kir.Const(0.0, f), kir.Const(1.0, f)), (f, f))),
        (DataType.Bool, f, f), f)
    body = [
        kir.Comment("every node"),
        kir.Decl("a", f, 4),
        kir.Decl("smem", f, 128, space=MemoryType.Shared, align=16),
        kir.Decl("acc", f, init=kir.Const(0.0, f)),
        kir.Decl("wf", f, welford=True),
        kir.Decl("flag", DataType.Int32, space=MemoryType.Shared, offset=512),
        kir.For(u, kir.IntLit(4), [
            kir.VecLoad(f, 4, a, kir.AddressOf(kir.Element(t0, u * 4 + tidx * stride)), stream=True),
            kir.CpAsync(smem, kir.AddressOf(kir.Element(t0, u)), 16),
            kir.CpAsyncCommit(),
            kir.CpAsyncWait(1),
            kir.If(kir.lt(u, kir.ColumnWidth(ext, 128)),
                   [kir.Assign(kir.Element(a, u), value)],
                   [kir.Assign(kir.Element(a, u),
                               kir.Lookup(t0, kir.IntLit(-1), pos, kir.ParallelDim(ParallelType.BIDx), f))]),
        ], unroll=True),
        kir.Launder(a),
        kir.Sync(),
        kir.WelfordMerge(w, kir.Element(a, kir.IntLit(0)), kir.Element(a, kir.IntLit(1)), kir.IntLit(4)),
        kir.Assign(acc, kir.Member(w, "avg")),
        kir.Assign(acc, kir.ReciprocalScale(acc, f, f)),
        kir.BlockAllReduce(acc, acc, BinaryOpType.Add, f, smem),
        kir.TileReduceY(a, BinaryOpType.Max, f, smem),
        kir.GridReduce([kir.GridItem(acc, BinaryOpType.Add, f, kir.Const(0.0, f), work, smem, tidx)],
                       sem, kir.Var("flag"), 1, kir.eq(tidx, 0), over_x=True),
        kir.GridSync(sem),
        kir.ColumnPartials([acc], BinaryOpType.Add, f, kir.Const(0.0, f), [work], kir.IntLit(2), ext,
                           kir.IntLit(0), smem, kir.IntLit(32)),
        kir.SegmentPartials(acc, BinaryOpType.Add, f, kir.Const(0.0, f), work, ext, kir.IntLit(0), u,
                            kir.IntLit(0), kir.IntLit(3)),
        kir.VecStore(f, 4, kir.AddressOf(kir.Element(t1, kir.IndexBinary(BinaryOpType.CeilDiv, ext, kir.IntLit(4)))),
                     a),
    ]
    checks = (kir.IndexCheck("gather", 0, "T0", 5),)
    return kir.Kernel("every_node", [t0, t1, ext, stride, work, sem, err, state], body, "int64", threads=128,
                      index_checks=checks, grid_sync=True, dynamic_smem=516)


def _types_in(x, found: set[type]) -> set[type]:
    if isinstance(x, (list, tuple)):
        for y in x:
            _types_in(y, found)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        found.add(type(x))
        for fld in dataclasses.fields(x):
            _types_in(getattr(x, fld.name), found)
    return found


def test_every_node_prints():
    k = _every_node_kernel()
    assert _types_in(k, set()) == _kir_node_types(), "the sample kernel no longer uses every node type"
    text = kernel_ir_str(k)
    for want in ("%kernel every_node {", "index type: int64", "grid sync", "dynamic smem 516 bytes",
                 "s0_0: index  [stride of T0 dim 0]",
                 "w1: Float*  [work (4 bytes a value, 1 a block, 0 beside)]",
                 "sem: UInt32*  [semaphore]", "gather reads T0 dim 0 of extent 5 (checked on the device)",
                 "# every node", "ALLOCATE a_l: Float[4] (local)", "ALLOCATE smem_s: Float[128] (shared, align=16)",
                 "ALLOCATE acc: Float (local) = float(0)", "ALLOCATE wf: Welford<Float> (local)",
                 "ALLOCATE flag_s: Int32 (shared, dynamic offset=512)", "FOR u in 0 .. 4 (unroll):",
                 "a_l = VECTOR_LOAD<Float, 4>(&T0_g[u * 4 + threadIdx.x * s0_0]) (evict first)",
                 "smem_s = CP_ASYNC<16 bytes>(&T0_g[u])", "CP_ASYNC_COMMIT", "CP_ASYNC_WAIT(pending=1)",
                 "IF u < column_width(i0, 128):", "ELSE:",
                 "a_l[u] = where(!(u < 3), exp(a_l[u]) * cast<Int->Float>(2), rng_uniform<Float>(",
                 "seed=state_or(philox[0], i0)", "lookup<Float>(T0_g, offset=(-1), position=checked_index<Int>("
                 "T0_g[u], extent=i0, check=0, flag=err), stride=gridDim.x)", "ENDIF", "ENDFOR u",
                 "LAUNDER(a_l)", "BLOCK_SYNC", "wf = WELFORD_MERGE(wf, mean=a_l[0], m2=a_l[1], count=4)",
                 "acc = wf.avg", "acc = reciprocal_scale<Float>(acc)", "acc = BLOCK_ALLREDUCE(add<Float>, acc, over=TIDx, smem=smem_s)",
                 "a_l = TILE_REDUCE_Y(maximum<Float>, a_l, smem=smem_s)",
                 "GRID_REDUCE(semaphore=sem, flag=flag_s, slots=1, writer=threadIdx.x == 0",
                 "acc = grid add<Float>(acc, init=float(0)) work=w1 smem=smem_s slot=threadIdx.x",
                 "ENDGRID_REDUCE", "GRID_SYNC(semaphore=sem)", "[acc] = COLUMN_PARTIALS(add<Float>",
                 "acc = SEGMENT_PARTIALS(add<Float>", "&T1_g[ceilDiv(i0, 4)] = VECTOR_STORE<Float, 4>(a_l)"):
        assert want in text, f"{want!r} not in\n{text}"
    _balanced(text)


def test_unknown_node_is_an_error():
    @dataclasses.dataclass
    class Mystery:
        pass

    k = kir.Kernel("k", [], [kir.Comment("ok"), Mystery()], "int32")
    with pytest.raises(TypeError, match="no rule for statement node Mystery"):
        kernel_ir_str(k)

    @dataclasses.dataclass(frozen=True)
    class Odd(kir.Expr):
        pass

    k = kir.Kernel("k", [], [kir.Assign(kir.Var("x"), kir.Var("y") + Odd())], "int32")
    with pytest.raises(TypeError, match="no rule for expression node Odd"):
        kernel_ir_str(k)


# --- every dump name does something ---------------------------------------------------------------


def _dump_sites() -> str:
    root = Path(fuser.__file__).resolve().parent
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.py")))


def _has_site(name: str, text: str) -> bool:
    return re.search(rf"\bdump\(\s*['\"]{re.escape(name)}['\"]", text) is not None


def test_every_known_dump_has_a_dump_site():
    text = _dump_sites()
    assert "kernel_ir" in KNOWN_DUMPS
    assert not _has_site("no_such_dump", text)  # the search can miss
    unused = sorted(n for n in KNOWN_DUMPS if not _has_site(n, text))
    assert not unused, f"FUSER_DUMP names with no dump() call: {unused}"
