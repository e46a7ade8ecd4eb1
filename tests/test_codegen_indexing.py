"""Index ops as generated kernels, with no GPU: every case of indexing_cases compiles for
sm_90 (one nvcc call), and its kernels' IR, interpreted on the CPU (the reduction tests'
simulator plus index-op reads), matches the reference executor and eager PyTorch; an
embedding lookup and its pointwise epilogue are one pointwise kernel that reads the table
only where the lookup computes; the bounds checks the host makes raise before any launch,
and the device checks' flag turns into an IndexError."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.ir import DataType as IrDataType
from fuser.ir import TensorView
from fuser.lower import kir
from fuser.lower.kir import CheckedIndex, Const, Element, IntLit, Lookup, Param, Var
from fuser.lower.lookup import INDEX_OPS
from fuser.lower.lower import NotLowerable
from fuser.runtime.index_check import ErrorFlag, IndexOutOfRangeError, out_of_range
from fuser.kernel import generates_kernel, prepare_kernel, prepare_pointwise
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

import reduction_sim
import test_codegen_transpose as tct
from cuda_units import compile_all
from indexing_cases import CASES, cross_entropy, defined as _define, indices, meta as _meta, rand, targets
from scatter_cases import unique_index


class Simulator(reduction_sim.Simulator):
    """The reduction tests' kernel-IR simulator plus what index-op kernels use: bounds-checked
    positions (an out-of-range one reads nothing; the first is raised after the run as the
    runtime raises the device flag's), lookups at them, and scatter's grid barrier (the
    simulated threads run each statement in lockstep: every copy is done before any write)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.failed: IndexOutOfRangeError | None = None

    def run(self) -> None:
        super().run()
        if self.failed is not None:
            raise self.failed

    def stmt(self, s, mask):
        if isinstance(s, kir.GridSync):
            return
        super().stmt(s, mask)

    def value(self, e, mask):
        if isinstance(e, kir.CheckedIndex):
            v = torch.as_tensor(self.value(e.value, mask)).to(torch.int64).expand(self.n)
            n = torch.as_tensor(self.value(e.extent, mask)).expand(self.n)
            i = torch.where(v < 0, v + n, v) if e.wrap else v
            ok = (i >= 0) & (i < n)
            bad = mask & ~ok
            if bool(bad.any()) and self.failed is None:
                c = self.kernel.index_checks[e.check]
                self.failed = out_of_range(c.op, int(v[bad][0]), c.dim, int(n[bad][0]), c.tensor, c.wrap)
            return torch.where(ok, i, -1)
        if isinstance(e, kir.Lookup):
            pos = torch.as_tensor(self.value(e.position, mask)).expand(self.n)
            at = torch.as_tensor(self.value(e.offset, mask)) + pos * torch.as_tensor(self.value(e.stride, mask))
            got = self.access(self.env[e.base.name], at, mask & (pos >= 0))
            return torch.where(pos >= 0, got, torch.zeros((), dtype=got.dtype))
        return super().value(e, mask)


def simulate(fd: FusionDefinition, inputs: list) -> tuple[list, list[tuple[str, bool]]]:
    """`fd`'s outputs on CPU `inputs`, every generated kernel of its segments simulated (the
    others run by the reference executor), each segment on the values the ones before it
    made; and (scheduler, generated) of each segment in the order they ran."""
    seg = fd.segmented_fusion_for(inputs)
    env = dict(zip(seg.complete_fusion.inputs, inputs))
    todo, ran = list(seg.groups), []
    while todo:
        g = next(g for g in todo if all(v in env for v in g.inputs if isinstance(v, TensorView)))
        todo.remove(g)
        args = [env[v] if v in env else seg.runtime_info.evaluate(v) for v in g.inputs]
        if generates_kernel(g.scheduler):
            got = tct.run_plan(prepare_kernel(g.scheduler, g.fusion(), args), args, Simulator)
        else:
            got = run_reference(g.fusion(), args)
        ran.append((str(g.scheduler), generates_kernel(g.scheduler)))
        env.update(zip(g.outputs, got))
    return [env[o] for o in seg.complete_fusion.outputs], ran


def _has_index_op(fd) -> bool:
    return any(isinstance(e, INDEX_OPS) for e in fd.fusion.exprs())


def _embedding(fd, index_dtype=DataType.Int):
    w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=index_dtype)
    b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
    e = fd.ops.cast(fd.ops.index_select(w, i, 0), DataType.Float)
    scaled = fd.ops.mul(e, 27.7)  # sqrt(hidden), as embeddings scale
    out = fd.ops.add(scaled, fd.ops.broadcast_in_dim(b, shape=[fd.ops.size(i, 0), fd.ops.size(w, 1)],
                                                     broadcast_dims=[1]))
    fd.add_output(fd.ops.cast(out, DataType.BFloat16))


def _embedding_inputs(vocab=1000, hidden=768, tokens=257):
    return [torch.empty(vocab, hidden, dtype=torch.bfloat16, device="meta"),
            torch.empty(tokens, dtype=torch.int64, device="meta"), torch.empty(hidden, device="meta")]


@pytest.mark.nvcc
def test_every_case_compiles_for_sm90():
    sources = []
    for case in CASES:
        if case.kernel:
            fd, xs = _define(case)
            sources.append(fd.cuda_code_for([_meta(x) for x in xs]))
    assert compile_all(sources)[:4] == b"\x7fELF"


def test_every_kernel_case_is_lowered_and_reads_through_lookups():
    for case in CASES:
        fd, xs = _define(case)
        metas = [_meta(x) for x in xs]
        if not case.kernel:
            with pytest.raises(NotLowerable):
                fd.cuda_code_for(metas)
            continue
        src = fd.cuda_code_for(metas)
        assert case.kind in src, case.name
        if _has_index_op(fd):
            assert "fuser::lookup(" in src and '#include "fuser_indexing.cuh"' in src, case.name
        else:  # iota and triu: index arithmetic, no lookups
            assert "fuser::lookup(" not in src and "fuser_indexing" not in src, case.name


_KERNEL_CASES = [c for c in CASES if c.kernel]


@pytest.mark.parametrize("case", _KERNEL_CASES, ids=[c.name for c in _KERNEL_CASES])
def test_case_kernels_simulated_match_reference_and_torch(case):
    """Every segment with an index op is a generated kernel; simulated on the CPU (outputs
    poisoned first) the segments give the reference executor's outputs and, where the case
    has them, eager PyTorch's (broadcast, expanded and computed indices read by ops over
    every row; floating-point indices; Thunder's cross-entropy)."""
    torch.manual_seed(0)
    fd, xs = _define(case)
    seg = fd.segmented_fusion_for(xs)
    for g in seg.groups:
        if any(isinstance(e, INDEX_OPS) for e in g.exprs):
            assert generates_kernel(g.scheduler), (case.name, str(g.scheduler))
    got, _ = simulate(fd, xs)
    want = run_reference(fd.fusion, xs)
    if case.want is not None:
        torch_want = case.want(*xs)
        assert len(torch_want) == len(want)
        for k, (r, t) in enumerate(zip(want, torch_want)):
            assert_close(r, t, what=f"{case.name} reference output {k} against torch")
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{case.name} kernel output {k}")


def test_embedding_and_its_epilogue_are_one_pointwise_kernel():
    with FusionDefinition() as fd:
        _embedding(fd)
    inputs = _embedding_inputs()
    seg = fd.segmented_fusion_for(inputs)
    assert [g.scheduler.value for g in seg.groups] == ["pointwise"]
    src = fd.cuda_code_for(inputs)
    assert src.count("__global__") == 1
    # the table is read only at the looked-up rows (no register copy of it is loaded),
    # and the index is checked against the vocabulary size on the device
    assert "const __bfloat* __restrict__ T0" in src and "unsigned long long* __restrict__ index_error" in src
    table_reads = [line for line in src.splitlines() if "T0" in line and "__restrict__" not in line]
    assert table_reads and all("fuser::lookup(T0," in line for line in table_reads)
    assert "fuser::checked_index<false>(" in src
    # the epilogue is in the same kernel, stored with vector accesses
    assert "fuser::store_vec<__bfloat" in src


def test_int32_index_tensor_is_checked_as_int64():
    with FusionDefinition() as fd:
        _embedding(fd, DataType.Int32)
    inputs = _embedding_inputs()
    inputs[1] = torch.empty(257, dtype=torch.int32, device="meta")
    src = fd.cuda_code_for(inputs)
    assert "const int* __restrict__ T1" in src and "fuser::checked_index<false>(r1[" in src


def test_lookup_computed_in_the_fusion_is_read_from_memory():
    # the table is computed (w * 2): the lookup needs it in memory, so the producer is
    # another segment and the lookup's segment reads it as an input
    with FusionDefinition() as fd:
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd.add_output(fd.ops.exp(fd.ops.index_select(fd.ops.mul(w, 2.0), i, 0)))
    w, i = rand(9, 4), indices(9, (6,))
    seg = fd.segmented_fusion_for([w, i])
    assert len(seg.groups) == 2
    for g in seg.groups:
        for e in g.exprs:
            if type(e).__name__ == "IndexSelectOp":
                assert e.inputs[0] in g.inputs
    src = fd.cuda_code_for([_meta(w), _meta(i)])
    assert src.count("__global__") == 2 and "fuser::lookup(" in src
    (out,) = fd.execute([w, i])
    assert torch.equal(out, torch.exp(w[i] * 2.0))


def test_index_checks_of_each_op():
    """select's index and gather's index sizes are checked by the host (no flag, no
    synchronisation); index tensor values by the kernel."""
    from fuser.kernel import prepare_kernel

    def kernel_of(build, xs):
        with FusionDefinition() as fd:
            build(fd)
        (g,) = fd.segmented_fusion_for(xs).groups
        return prepare_kernel(g.scheduler, g.fusion(), [_meta(x) for x in xs]).kernel

    def select(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.select(x, -1, 1))

    k = kernel_of(select, [rand(3, 4)])
    (c,) = k.index_checks
    assert (c.op, c.dim, c.wrap, c.size) == ("select", 1, True, False) and c.value is not None
    assert not any(p.kind == "index_error" for p in k.params)

    def gather(fd):
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3)
        i = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Int)
        fd.add_output(fd.ops.gather(x, i, 1))

    k = kernel_of(gather, [rand(3, 4, 5), indices(4, (2, 6, 5))])
    assert [(c.op, c.dim, c.size, c.value is None) for c in k.index_checks] == [
        ("gather", 0, True, False), ("gather", 2, True, False), ("gather", 1, False, True)]
    assert sum(p.kind == "index_error" for p in k.params) == 1


def test_host_checks_raise_before_any_launch():
    def select(index):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
            fd.add_output(fd.ops.select(x, index, 0))
        return fd

    x = torch.empty(5, 3, device="meta")
    for ok in (-5, -1, 0, 4):
        assert "fuser::checked_index<true>" in select(ok).cuda_code_for([x])
    for bad in (5, -6, 100):
        with pytest.raises(IndexOutOfRangeError, match=rf"select: index {bad} is out of bounds for dimension 0 .* "
                                                       r"size 5 \(valid indices: \[-5, 4\]\)"):
            select(bad).cuda_code_for([x])
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.gather(t, i, 0))
    with pytest.raises(RuntimeError, match="gather: the index has size 6 in dimension 1, larger than"):
        fd.cuda_code_for([torch.empty(3, 4, device="meta"), torch.empty(2, 6, dtype=torch.int64, device="meta")])


def test_select_scalar_input_is_checked_per_call():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        k = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.select(x, k, 1))
    x = torch.empty(2, 7, device="meta")
    assert "fuser::checked_index<true>(" in fd.cuda_code_for([x, -7])
    with pytest.raises(IndexError, match="select: index 7 "):
        fd.cuda_code_for([x, 7])


def test_error_flag_becomes_an_index_error_naming_the_op():
    with FusionDefinition() as fd:
        _embedding(fd)
    k = prepare_pointwise(fd.segmented_fusion_for(_embedding_inputs()).groups[0].fusion(), _embedding_inputs())
    flag = ErrorFlag(k.kernel, torch.device("cpu"))
    flag._flag = torch.tensor([0, 0, 0])
    flag.raise_if_set()  # nothing recorded
    flag._flag = torch.tensor([1, 1000, 1000])  # check 0 failed with index 1000 of 1000
    with pytest.raises(IndexError, match=r"index_select: index 1000 is out of bounds for dimension 0 of T0.*"
                                         r"size 1000 \(valid indices: \[0, 999\]\)"):
        flag.raise_if_set()
    assert flag._flag.tolist() == [0, 0, 0]  # zeroed for the next launch
    flag._flag = torch.tensor([1, -3, 0])
    with pytest.raises(RuntimeError, match="index -3 is out of bounds for dimension 0 .* an empty dimension"):
        flag.raise_if_set()


def test_gather_with_an_index_expanded_along_another_dim_is_a_kernel_over_every_row():
    """The output varies along the index's expanded axis (each row gathers from its own row
    of the input): a concrete axis, stored and computed for every row."""
    case = next(c for c in CASES if c.name == "gather_index_expanded_along_other_dim")
    fd, xs = _define(case)
    (out_tv,) = fd.fusion.outputs
    assert not out_tv.logical_no_reductions()[0].is_broadcast
    (g,) = fd.segmented_fusion_for(xs).groups
    k = prepare_kernel(g.scheduler, g.fusion(), xs)
    (out,) = tct.run_plan(k, xs, Simulator)
    assert out.stride(0) != 0 and torch.equal(out, torch.gather(xs[0], 1, xs[1]))
    assert not torch.equal(out[1:], out[:1].expand_as(out[1:]))  # rows differ: a row-0 copy would fail


@pytest.mark.parametrize("name", ["take_along_axis_computed_broadcast_index_broadcast_addend",
                                  "take_along_axis_expanded_index_input_sum_over_rows",
                                  "gather_expanded_index_sum_over_rows"])
def test_issue_34_fusions_are_one_kernel_reading_every_row(name):
    """Issue 34's fusions: the index op and what reads its rows are one generated kernel,
    which reads every row of the lookup tensor (its row axis is indexed, not taken as 0)."""
    case = next(c for c in CASES if c.name == name)
    fd, xs = _define(case)
    (g,) = fd.segmented_fusion_for(xs).groups
    assert case.kind in fd.cuda_code_for([_meta(x) for x in xs])
    k = prepare_kernel(g.scheduler, g.fusion(), xs)
    lookups = [e for e in kir.nodes(k.kernel.body) if isinstance(e, Lookup)]
    assert lookups and all(not isinstance(e.offset, IntLit) for e in lookups), name
    got = tct.run_plan(k, xs, Simulator)
    for a, b in zip(got, case.want(*xs)):
        assert_close(a, b, what=name)


def test_float_index_is_converted_to_int64_where_it_is_used():
    """A floating-point index is converted in the kernel (truncated toward zero, as nvFuser's
    kernels and the reference's `.long()` do) before its bounds check: bf16 through float."""
    for dtype, conversion in ((torch.float32, "fuser::checked_index<false>(((long long)"),
                              (torch.bfloat16, "fuser::checked_index<false>(((long long)fuser::bfloat_to_float(")):
        x, i = rand(5, 8), indices(8, (5, 3)).to(dtype)
        with FusionDefinition() as fd:
            t, j = fd.from_pytorch(x), fd.from_pytorch(i)
            fd.add_output(fd.ops.take_along_axis(t, j, 1))
        src = fd.cuda_code_for([_meta(x), _meta(i)])
        assert conversion in src, dtype
        (g,) = fd.segmented_fusion_for([x, i]).groups
        k = prepare_kernel(g.scheduler, g.fusion(), [x, i])
        frac = (i.float() + 0.5).to(dtype)  # exact in bf16 below 128
        (out,) = tct.run_plan(k, [x, frac], Simulator)
        assert torch.equal(out, torch.take_along_dim(x, i.long(), 1))
        bad = frac.clone()
        bad[2, 1] = 8.5  # converts to 8: out of range
        with pytest.raises(IndexError, match=r"take_along_axis: index 8 is out of bounds for dimension 1 .*size 8"):
            tct.run_plan(k, [x, bad], Simulator)


def test_take_along_axis_with_unbroadcastable_expanded_sizes_is_left_to_the_reference():
    """An index expanded to 5 rows beside an input of 3: torch raises, so no kernel reads
    the index's one row for the input's three; matching sizes make one kernel."""
    x = rand(3, 4)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        j = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.take_along_axis(t, j, 1), 2.0))
    bad = indices(4, (1, 2)).expand(5, 2)
    seg = fd.segmented_fusion_for([x, bad])
    owner = next(g for g in seg.groups if any(isinstance(e, INDEX_OPS) for e in g.exprs))
    assert not generates_kernel(owner.scheduler)
    with pytest.raises(RuntimeError, match="must match the size"):
        fd.execute([x, bad])
    good = indices(4, (1, 2)).expand(3, 2)
    assert [str(g.scheduler) for g in fd.segmented_fusion_for([x, good]).groups] == ["pointwise"]
    (out,) = fd.execute([x, good])
    assert torch.equal(out, torch.take_along_dim(x, good, 1) * 2.0)


@pytest.mark.parametrize("ignore_index", [-100, -10])
def test_thunder_cross_entropy_is_generated_kernels(ignore_index):
    """Thunder's cross-entropy fusion (a Float index into take_along_axis) runs as generated
    kernels whose simulation gives F.cross_entropy's loss."""
    logits, target = rand(64, 300), targets(300, 64, ignore_index)
    with FusionDefinition() as fd:
        for out in cross_entropy(fd, fd.from_pytorch(logits), fd.from_pytorch(target), ignore_index):
            fd.add_output(out)
    (loss,), ran = simulate(fd, [logits, target])
    assert all(generated for _, generated in ran), ran
    assert_close(loss, torch.nn.functional.cross_entropy(logits, target, ignore_index=ignore_index), what="loss")


def test_scatter_with_broadcast_index_then_ops_over_every_row_simulated():
    """A scatter with an index expanded along the rows (a greedy kernel), then an add of a
    full tensor and sums over and within the rows (kernels reading every row of it)."""
    x, src, y = rand(6, 20), rand(6, 9), rand(6, 20)
    index = unique_index(20, (1, 9), 1).expand(6, 9)
    with FusionDefinition() as fd:
        t, i, s, u = (fd.from_pytorch(v) for v in (x, index, src, y))
        out = fd.ops.scatter(t, i, s, 1)
        for o in (fd.ops.add(out, u), fd.ops.sum(out, [0]), fd.ops.sum(out, [1])):
            fd.add_output(o)
    got, ran = simulate(fd, [x, index, src, y])
    assert ("greedy", True) in ran and all(generated for _, generated in ran), ran
    want = torch.scatter(x, 1, index, src)
    for g, w, what in zip(got, (want + y, want.sum(0), want.sum(1)), ("add", "sum over rows", "row sums")):
        assert_close(g, w, what=f"scatter then {what}")


def test_take_along_axis_int32_index_on_the_reference():
    x, i = rand(4, 6), indices(6, (4, 9), torch.int32)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        j = fd.from_pytorch(i)
        fd.add_output(fd.ops.take_along_axis(t, j, 1))
    (out,) = run_reference(fd.fusion, [x, i])
    assert torch.equal(out, torch.take_along_dim(x, i.long(), 1))


def test_lookup_and_checked_index_print_as_helper_calls():
    from fuser.codegen.expr import expr

    table = Param("T0", "tensor", None, "P", IrDataType.Float, pointer=True, readonly=True)
    flag = Param("index_error", "index_error", None, "P", IrDataType.UInt64, pointer=True)
    pos = CheckedIndex(Element(Var("r1"), Var("v")), IrDataType.Int32, Var("i0"), 3, flag)
    assert expr(pos) == "fuser::checked_index<false>(r1[v], i0, index_error, 3)"
    wrap = CheckedIndex(Const(-2, IrDataType.Int), IrDataType.Int, IntLit(5), 0, None, wrap=True)
    assert expr(wrap) == "fuser::checked_index<true>((-2LL), 5, nullptr, 0)"
    assert expr(Lookup(table, Var("o"), pos, Var("s0_0"), IrDataType.Float)) == (
        "fuser::lookup(T0, o, fuser::checked_index<false>(r1[v], i0, index_error, 3), s0_0)")


def test_index_op_in_a_reduction_prologue_reads_the_table_through_lookups():
    case = next(c for c in CASES if c.name == "embedding_row_sum")
    fd, xs = _define(case)
    assert [g.scheduler.value for g in fd.segmented_fusion_for(xs).groups] == ["reduction"]
    src = fd.cuda_code_for([_meta(x) for x in xs])
    assert src.count("__global__") == 1 and "block_allreduce" in src
    table_reads = [line for line in src.splitlines() if "T0" in line and "__restrict__" not in line]
    assert table_reads and all("fuser::lookup(T0," in line for line in table_reads)
    assert "unsigned long long* __restrict__ index_error" in src
