"""Index ops as generated kernels, with no GPU: every case of indexing_cases compiles for
sm_90 (one nvcc call); an embedding lookup and its pointwise epilogue are one pointwise
kernel that reads the table only where the lookup computes; the bounds checks the host
makes raise before any launch, and the device checks' flag turns into an IndexError."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.ir import DataType as IrDataType
from fuser.lower.kir import CheckedIndex, Const, Element, IntLit, Lookup, Param, Var
from fuser.lower.lower import NotLowerable
from fuser.runtime.index_check import ErrorFlag, IndexOutOfRangeError
from fuser.runtime.kernels import prepare_pointwise
from fuser.runtime.reference import run_reference

from cuda_units import compile_all
from indexing_cases import CASES, defined as _define, indices, meta as _meta, rand


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
        if case.name.startswith(("index_select", "embedding", "select", "gather", "take_along")):
            assert "fuser::lookup(" in src and '#include "fuser_indexing.cuh"' in src, case.name
        else:  # iota and triu: index arithmetic, no lookups
            assert "fuser::lookup(" not in src and "fuser_indexing" not in src, case.name


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
    from fuser.runtime.kernels import prepare_kernel

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


def test_gather_with_an_index_expanded_along_another_dim_runs_on_the_reference():
    case = next(c for c in CASES if c.name == "gather_index_expanded_along_other_dim")
    fd, xs = _define(case)
    with pytest.raises(NotLowerable, match="expanded"):
        fd.cuda_code_for([_meta(x) for x in xs])
    (out,) = fd.execute(xs)
    assert torch.equal(out, torch.gather(xs[0], 1, xs[1]))


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
