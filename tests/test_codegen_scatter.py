"""Scatter as a generated kernel, with no GPU: a scatter (with the elementwise producers of
its operands) is one `greedy` segment; every case of scatter_cases is lowered to one
two-phase kernel (copy, grid barrier, bounds-checked writes) and compiles for sm_90 in one
nvcc call; the copy is flat and vectorised where every tensor it reads is laid out like
the output; torch's size rule is checked on the host before any launch, and the device
check's flag turns into an IndexError naming scatter."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.lower.kir import CheckedIndex, GridSync
from fuser.lower.kir import nodes as kir_nodes
from fuser.runtime.index_check import ErrorFlag, IndexOutOfRangeError
from fuser.kernel import generates_kernel, prepare_greedy
from fuser.runtime.info import runtime_info
from fuser.scheduler import FusionAnalysis, SchedulerType, schedulers_for
from fuser.scheduler import greedy

from cuda_units import compile_all
from scatter_cases import CASES, unique_index
from indexing_cases import defined as _define, meta as _meta, rand


def _schedulers(fd, xs):
    return [g.scheduler.value for g in fd.segmented_fusion_for(xs).groups]


def _walk(stmts):
    import dataclasses
    for s in stmts:
        yield s
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            if isinstance(v, list):
                yield from _walk([x for x in v if dataclasses.is_dataclass(x)])


def test_greedy_is_registered_after_the_pointwise_family_and_generates_kernels():
    assert generates_kernel(SchedulerType.greedy)
    assert str(SchedulerType.greedy) == "greedy"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_is_one_greedy_segment_lowered_to_a_scatter_kernel(case):
    fd, xs = _define(case)
    assert _schedulers(fd, xs) == ["greedy"], case.name
    group = fd.segmented_fusion_for(xs).groups[0]
    k = prepare_greedy(group.fusion(), [_meta(x) for x in xs])
    assert k.params.flat == case.flat, case.name
    assert k.kernel.grid_sync and k.kernel.grid_strided
    assert sum(isinstance(s, GridSync) for s in _walk(k.kernel.body)) == 1
    checked = [e for e in kir_nodes(k.kernel.body) if isinstance(e, CheckedIndex)]
    assert len(checked) == 1 and not checked[0].wrap and checked[0].flag is not None
    device_check = k.kernel.index_checks[checked[0].check]
    assert device_check.op == "scatter" and device_check.value is None
    src = k.source
    assert "fuser_scatter" in src and "fuser::grid_sync(semaphore)" in src
    assert "fuser::checked_index<false>(" in src


@pytest.mark.nvcc
def test_every_case_compiles_for_sm90():
    sources = []
    for case in CASES:
        fd, xs = _define(case)
        sources.append(fd.cuda_code_for([_meta(x) for x in xs]))
    assert compile_all(sources)[:4] == b"\x7fELF"


def test_contiguous_copy_is_vectorised_and_a_strided_one_is_indexed_per_axis():
    fd, xs = _define(next(c for c in CASES if c.name == "2d_dim0"))  # float [37, 65]: 2405 elements
    src = fd.cuda_code_for([_meta(x) for x in xs])
    assert "load_vec" not in src  # 2405 is odd: one element per access
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(x, i, 1.0, 1))
    ins = [torch.empty(64, 96, dtype=torch.bfloat16, device="meta"), torch.empty(64, 7, dtype=torch.int64, device="meta")]
    src = fd.cuda_code_for(ins)
    assert "fuser::load_vec<__bfloat, 8>" in src and "fuser::store_vec<__bfloat, 8>" in src
    ins[0] = torch.empty(96, 64, dtype=torch.bfloat16, device="meta").t()
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[False, False], dtype=DataType.BFloat16)
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(x, i, 1.0, 1))
    src = fd.cuda_code_for(ins)
    assert "load_vec" not in src and "% i" in src  # the transposed input is indexed axis by axis


def test_scatter_is_only_the_greedy_schedulers():
    fd, xs = _define(CASES[1])
    verdicts = schedulers_for(fd.fusion, runtime_info(fd.fusion, xs))
    assert verdicts[SchedulerType.greedy] is None
    for st, why in verdicts.items():
        if st is not SchedulerType.greedy:
            assert why is not None, st
    assert verdicts[SchedulerType.pointwise] == "has a scatter (the greedy scheduler's)"
    assert verdicts[SchedulerType.expr_eval] is not None


def test_consumers_of_the_scatter_are_a_kernel_of_their_own():
    x, i, s = rand(20, 30), unique_index(30, (20, 10), 1), rand(20, 10)
    with FusionDefinition() as fd:
        tx, ti, ts = fd.from_pytorch(x), fd.from_pytorch(i), fd.from_pytorch(s)
        out = fd.ops.scatter(tx, ti, ts, 1)
        fd.add_output(fd.ops.relu(fd.ops.add(out, tx)))
    assert _schedulers(fd, [x, i, s]) == ["greedy", "pointwise"]
    (got,) = fd.execute([x, i, s])  # the reference on the CPU
    assert torch.equal(got, torch.relu(torch.scatter(x, 1, i, s) + x))
    # the scatter's result also an output, beside its consumer
    with FusionDefinition() as fd:
        tx, ti, ts = fd.from_pytorch(x), fd.from_pytorch(i), fd.from_pytorch(s)
        out = fd.ops.scatter(fd.ops.exp(tx), ti, ts, 1)
        fd.add_output(out)
        fd.add_output(fd.ops.mul(out, 2.0))
    assert _schedulers(fd, [x, i, s]) == ["greedy", "pointwise"]


def test_producers_used_elsewhere_stay_outside_the_scatter_segment():
    x, i, s = rand(20, 30), unique_index(30, (20, 10), 1), rand(20, 10)
    with FusionDefinition() as fd:
        tx, ti, ts = fd.from_pytorch(x), fd.from_pytorch(i), fd.from_pytorch(s)
        y = fd.ops.mul(tx, 3.0)
        fd.add_output(y)
        fd.add_output(fd.ops.scatter(y, ti, ts, 1))
    seg = fd.segmented_fusion_for([x, i, s])
    kinds = sorted(g.scheduler.value for g in seg.groups)
    assert "greedy" in kinds
    for g in seg.groups:
        if g.scheduler is SchedulerType.greedy:
            sub = FusionAnalysis(g.fusion()).whole()
            assert greedy.reject_reason(sub) is None


def test_two_scatters_are_two_segments():
    x, i, s = rand(20, 30), unique_index(30, (20, 10), 1), rand(20, 10)
    with FusionDefinition() as fd:
        tx, ti, ts = fd.from_pytorch(x), fd.from_pytorch(i), fd.from_pytorch(s)
        a = fd.ops.scatter(tx, ti, ts, 1)
        fd.add_output(fd.ops.scatter(a, ti, fd.ops.neg(ts), 1))
    assert _schedulers(fd, [x, i, s]) == ["greedy", "greedy"]
    (got,) = fd.execute([x, i, s])
    assert torch.equal(got, torch.scatter(torch.scatter(x, 1, i, s), 1, i, -s))


def test_size_rule_is_checked_on_the_host_before_any_launch():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        i = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        s = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.scatter(x, i, s, 0))

    def m(*shape, dtype=torch.float32):
        return torch.empty(*shape, dtype=dtype, device="meta")

    group = fd.segmented_fusion_for([m(8, 6), m(9, 6, dtype=torch.int64), m(9, 6)]).groups[0].fusion()
    prepare_greedy(group, [m(8, 6), m(9, 6, dtype=torch.int64), m(9, 6)])  # dim 0 may be larger than arg's
    with pytest.raises(RuntimeError, match=r"scatter: the index has size 7 in dimension 1, larger than .*'s 6 "
                                           r"\(the index may be no larger than src"):
        prepare_greedy(group, [m(8, 7), m(2, 7, dtype=torch.int64), m(2, 6)])
    with pytest.raises(RuntimeError, match=r"scatter: the index has size 7 in dimension 1, larger than .*'s 6"):
        prepare_greedy(group, [m(8, 6), m(2, 7, dtype=torch.int64), m(2, 9)])
    with pytest.raises(RuntimeError, match=r"scatter: the index has size 3 in dimension 0, larger than .*'s 2"):
        prepare_greedy(group, [m(8, 6), m(3, 6, dtype=torch.int64), m(2, 6)])


def test_error_flag_becomes_an_index_error_naming_scatter():
    fd, xs = _define(CASES[1])
    k = prepare_greedy(fd.segmented_fusion_for(xs).groups[0].fusion(), [_meta(x) for x in xs])
    (checked,) = [e for e in kir_nodes(k.kernel.body) if isinstance(e, CheckedIndex)]
    flag = ErrorFlag(k.kernel, torch.device("cpu"))
    flag._flag = torch.tensor([0, 0, 0])
    flag.raise_if_set()
    flag._flag = torch.tensor([checked.check + 1, -1, 37])
    with pytest.raises(IndexOutOfRangeError, match=r"scatter: index -1 is out of bounds for dimension 0 of T.*"
                                                   r"size 37 \(valid indices: \[0, 36\]\)"):
        flag.raise_if_set()
    assert flag._flag.tolist() == [0, 0, 0]
