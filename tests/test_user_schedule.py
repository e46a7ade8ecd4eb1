"""User schedules (issue 31, item 6): a FusionDefinition subclass's `schedule()` with nvFuser's
`fd.sched` operations. execute() runs it once per input signature on a copy of the fusion and
compiles the fusion as ONE kernel, scheduled as written (SchedulerType.user) or by the automatic
scheduler it names. On the CPU: results (the reference executor), the generated CUDA (it says
what the schedule says, and compiles with nvcc for sm_90), each kernel interpreted thread by
thread (tests/kernel_sim.py: outputs poisoned, every element checked written) against PyTorch,
reporting, and the errors. On a GPU: the kernels run, outputs poisoned, against PyTorch."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.host.evaluator import SegmentRun
from fuser.kernel import prepare_kernel
from fuser.runtime.tolerance import assert_close
from fuser.scheduler import SchedulerType

from kernel_sim import KernelFault, simulate_kernel

CPU = torch.device("cpu")


class MyFusion(FusionDefinition):
    """The issue's example, as written there."""

    def definition(self):
        self.t0 = self.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        self.t1 = self.ops.relu(self.t0); self.add_output(self.t1)  # noqa: E702

    def schedule(self):
        self.sched.split(self.t1, 1, 128)        # split(tensor, dim, factor, inner_split=True)
        self.sched.merge(self.t1, 0)              # merge(tensor, dim)
        self.sched.reorder(self.t1, {0: 1, 1: 0})  # reorder(tensor, old2new dict)
        self.sched.parallelize(self.t1, 0, ParallelType.grid_x)
        self.sched.inline_most()
        print(self.sched.to_string(self.t1))


def _kernel(fd: FusionDefinition, inputs: list[Any]):
    """The generated kernel of `fd`'s one segment for `inputs` (no GPU needed)."""
    (g,) = fd.segmented_fusion_for(inputs).groups
    return prepare_kernel(g.scheduler, g.fusion(), inputs, CPU)


def test_the_issues_example_is_one_kernel_scheduled_as_written(capsys):
    fd = MyFusion()
    x = torch.randn(5, 300)
    (out,) = fd.execute([x])
    assert torch.equal(out, x.relu())
    # schedule() ran once, on the copy: the loop nest as the user left it, fully inlined
    assert capsys.readouterr().out == "T1_g_float[iblockIdx.x5{128}rf, iS6{( i0 * ceilDiv(i1, 128) )}rf] ca_pos( 2 )\n"
    fd.execute([x])
    assert capsys.readouterr().out == ""  # the same input signature: schedule() does not run again
    assert torch.equal(fd.execute([x[:3]])[0], x[:3].relu())
    assert capsys.readouterr().out.startswith("T1_g_float[")  # a new signature: it runs again
    # one segment, reported as the user's
    seg = fd.segmented_fusion_for([x])
    assert [g.scheduler for g in seg.groups] == [SchedulerType.user] and "g{(user)" in str(seg)
    assert fd.last_segments() == [SegmentRun("user", True, None)]  # no GPU: no kernel was launched
    fd.execute([x], profile=True)
    prof = fd.profile()
    assert prof.segments == 1 and [k.scheduler for k in prof.kernel_profiles] == ["user"]
    # the CUDA says what the schedule says: 128 blocks over the split's inner axis, one thread
    # each walking the merged outer axis
    src = fd.cuda_code_for([x])
    assert "__launch_bounds__(1) fuser_user(" in src and "threadIdx" not in src
    assert "* 128 + ((nvfuser_index_t)blockIdx.x)" in src
    assert "u1 < i0 * ((i1 + 128 - 1) / 128)" in src
    k = _kernel(fd, [x])
    assert (k.grid, k.block) == ((128, 1, 1), (1, 1, 1))
    assert torch.equal(simulate_kernel(k, [x])[0], x.relu())


# --- schedules, simulated ---------------------------------------------------------------------------


@dataclass
class Case:
    """A fusion, a schedule of it, inputs and what PyTorch computes; `launch`: (grid, block)."""

    name: str
    define: Callable[[FusionDefinition], None]
    schedule: Callable[[FusionDefinition], None]
    inputs: Callable[[str], list[Any]]
    expect: Callable[[list[Any]], list[torch.Tensor]]
    launch: tuple[tuple[int, int, int], tuple[int, int, int]]

    def fusion(self) -> FusionDefinition:
        case = self

        class Scheduled(FusionDefinition):
            def definition(self):
                case.define(self)

            def schedule(self):
                case.schedule(self)

        return Scheduled()


def _add_exp(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.out = fd.ops.exp(fd.ops.add(fd.t0, fd.t1))
    fd.add_output(fd.out)


def _bias(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.b = fd.define_tensor(shape=[-1], contiguity=[True])
    fd.bb = fd.ops.broadcast_in_dim(fd.b, shape=fd.t0.shape(), broadcast_dims=[1])
    fd.out = fd.ops.relu(fd.ops.add(fd.t0, fd.bb))
    fd.add_output(fd.out)


def _two(*shape):
    return lambda dev: [torch.randn(*shape, device=dev), torch.randn(*shape, device=dev)]


def _with_bias(*shape):
    return lambda dev: [torch.randn(*shape, device=dev), torch.randn(shape[-1], device=dev)]


def _exp_sum(xs):
    return [torch.exp(xs[0] + xs[1])]


def _relu_bias(xs):
    return [torch.relu(xs[0] + xs[1])]


def _basic(fd):  # nvFuser's test_pointwise_basic_user_schedule
    fd.sched.merge(fd.out, dim=0)
    fd.sched.split(fd.out, dim=0, factor=128)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 1, ParallelType.block_x)


def _vector(fd):
    fd.sched.merge(fd.out, 0)
    fd.sched.split(fd.out, 0, 4)
    fd.sched.split(fd.out, 0, 32)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 1, ParallelType.block_x)
    fd.sched.parallelize(fd.out, 2, ParallelType.vectorize)


def _rows_on_grid_y(fd):
    fd.sched.split(fd.out, 1, 64)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_y)
    fd.sched.parallelize(fd.out, 1, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 2, ParallelType.block_x)


def _unrolled(fd):
    fd.sched.merge(fd.out, 0)
    fd.sched.split(fd.out, 0, 128)
    fd.sched.split(fd.out, 0, 4)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 1, ParallelType.unroll)
    fd.sched.parallelize(fd.out, 2, ParallelType.block_x)


def _like_nvfusers_pointwise(fd):
    """[grid_x, unswitch, unroll, block_x, vectorize], propagated and inlined as nvFuser's
    pointwise scheduler leaves a fusion."""
    fd.sched.merge(fd.out, 0)
    fd.sched.split(fd.out, 0, 2)
    fd.sched.split(fd.out, 0, 64)
    fd.sched.split(fd.out, 0, 2)
    fd.sched.split(fd.out, 0, 1)
    fd.sched.transform_like(fd.out)
    for axis, pt in enumerate((ParallelType.grid_x, ParallelType.unswitch, ParallelType.unroll, ParallelType.block_x,
                               ParallelType.vectorize)):
        fd.sched.parallelize(fd.out, axis, pt)
    fd.sched.parallelize_like(fd.out)
    fd.sched.inline_most()


def _outer_split(fd):
    fd.sched.split(fd.out, 0, 4, inner_split=False)  # [4, ceil(i0 / 4), i1]
    fd.sched.parallelize(fd.out, 0, ParallelType.block_x)
    fd.sched.parallelize(fd.out, 1, ParallelType.grid_x)


def _nothing(fd):
    pass


def _multi(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.a = fd.ops.relu(fd.t0)
    fd.out = fd.ops.exp(fd.t0)
    fd.add_output(fd.a)
    fd.add_output(fd.out)


def _second_output(fd):  # the first output, the kernel's reference, takes it over
    fd.sched.split(fd.out, 1, 32)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 2, ParallelType.block_x)


def _reshape(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.out = fd.ops.mul(fd.ops.exp(fd.ops.reshape(fd.t0, [6, 5, 14])), 2.0)
    fd.add_output(fd.out)


def _merged_rows(fd):
    fd.sched.merge(fd.out, 1)
    fd.sched.split(fd.out, 1, 16)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_y)
    fd.sched.parallelize(fd.out, 1, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 2, ParallelType.block_x)


def _pad(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.out = fd.ops.pad(fd.ops.relu(fd.t0), [3, 5])
    fd.add_output(fd.out)


def _rows_blocks(fd):
    fd.sched.split(fd.out, 1, 32)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 2, ParallelType.block_x)


def _static(fd):
    fd.t0 = fd.define_tensor(shape=[6, 70], contiguity=[True, True])
    fd.out = fd.ops.relu(fd.t0)
    fd.add_output(fd.out)


def _one_block(fd):  # [4, 128]: one constant serial loop, which the lowering unswitches
    fd.sched.merge(fd.out, 0)
    fd.sched.split(fd.out, 0, 128)
    fd.sched.parallelize(fd.out, 1, ParallelType.block_x)


def _scaled(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.s = fd.define_scalar(dtype=DataType.Double)
    fd.out = fd.ops.mul(fd.t0, fd.s)
    fd.add_output(fd.out)


def _bf16(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    fd.out = fd.ops.cast(fd.ops.mul(fd.ops.cast(fd.t0, DataType.Float), 2.0), DataType.BFloat16)
    fd.add_output(fd.out)


def _vector8(fd):  # 8 bf16 lanes: one 16-byte access
    fd.sched.split(fd.out, 1, 8)
    fd.sched.split(fd.out, 1, 16)
    fd.sched.parallelize(fd.out, 0, ParallelType.grid_y)
    fd.sched.parallelize(fd.out, 1, ParallelType.grid_x)
    fd.sched.parallelize(fd.out, 2, ParallelType.block_x)
    fd.sched.parallelize(fd.out, 3, ParallelType.vectorize)


def _one(*shape, dtype=torch.float32):
    return lambda dev: [torch.randn(*shape, device=dev).to(dtype)]


CASES = [
    Case("basic", _add_exp, _basic, _two(37, 300), _exp_sum, ((87, 1, 1), (128, 1, 1))),
    Case("vectorized", _add_exp, _vector, _two(37, 300), _exp_sum, ((87, 1, 1), (32, 1, 1))),
    Case("rows_on_grid_y", _bias, _rows_on_grid_y, _with_bias(37, 300), _relu_bias, ((5, 37, 1), (64, 1, 1))),
    Case("unrolled", _bias, _unrolled, _with_bias(37, 300), _relu_bias, ((22, 1, 1), (128, 1, 1))),
    Case("nvfuser_pointwise_like", _add_exp, _like_nvfusers_pointwise, _two(37, 64), _exp_sum,
         ((10, 1, 1), (64, 1, 1))),
    Case("outer_split", _add_exp, _outer_split, _two(37, 300), _exp_sum, ((10, 1, 1), (4, 1, 1))),
    Case("unscheduled", _add_exp, _nothing, _two(5, 7), _exp_sum, ((1, 1, 1), (1, 1, 1))),
    Case("second_output", _multi, _second_output, _one(6, 70), lambda xs: [xs[0].relu(), xs[0].exp()],
         ((6, 1, 1), (32, 1, 1))),
    Case("reshape", _reshape, _merged_rows, _one(6, 70), lambda xs: [xs[0].reshape(6, 5, 14).exp() * 2],
         ((5, 6, 1), (16, 1, 1))),
    Case("pad", _pad, _rows_blocks, _one(6, 70), lambda xs: [torch.nn.functional.pad(xs[0].relu(), [3, 5])],
         ((6, 1, 1), (32, 1, 1))),
    Case("static_unswitched", _static, _one_block, _one(6, 70), lambda xs: [xs[0].relu()], ((1, 1, 1), (128, 1, 1))),
    Case("scalar_input", _scaled, _basic, lambda dev: [torch.randn(6, 70, device=dev), 2.5], lambda xs: [xs[0] * 2.5],
         ((4, 1, 1), (128, 1, 1))),
    Case("bf16_vector8", _bf16, _vector8, _one(4, 256, dtype=torch.bfloat16),
         lambda xs: [(xs[0].float() * 2).bfloat16()], ((2, 4, 1), (16, 1, 1))),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_user_kernel_computes_what_pytorch_does(case):
    torch.manual_seed(0)
    fd = case.fusion()
    inputs = case.inputs("cpu")
    want = case.expect(inputs)
    got = fd.execute(inputs)  # the reference executor on the CPU
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{case.name} output {k}")
    (g,) = fd.segmented_fusion_for(inputs).groups
    assert g.scheduler is SchedulerType.user
    k = _kernel(fd, inputs)
    assert (k.grid, k.block) == case.launch
    # every thread of the grid interpreted: outputs poisoned first, each element checked written
    sim = simulate_kernel(k, inputs)
    for j, (s, w) in enumerate(zip(sim, want)):
        assert_close(s, w, what=f"{case.name} simulated output {j}")


def test_generated_code_follows_the_schedule():
    x = _two(37, 300)("cpu")
    by_name = {c.name: c for c in CASES}
    basic = by_name["basic"].fusion().cuda_code_for(x)
    assert "__launch_bounds__(128)" in basic and "threadIdx.x" in basic and "blockIdx.x" in basic
    assert "blockIdx.y" not in basic and "#pragma unroll" not in basic
    vec = by_name["vectorized"].fusion().cuda_code_for(x)
    assert "fuser::load_vec<float, 4>" in vec and "fuser::store_vec<float, 4>" in vec
    xb = _with_bias(37, 300)("cpu")
    rows = by_name["rows_on_grid_y"].fusion().cuda_code_for(xb)
    assert "blockIdx.y" in rows and "% " not in rows  # a row per blockIdx.y: the bias needs no modulo
    unrolled = by_name["unrolled"].fusion().cuda_code_for(xb)
    assert unrolled.count("#pragma unroll") >= 1 and "< 4;" in unrolled
    bf16 = by_name["bf16_vector8"].fusion().cuda_code_for(_one(4, 256, dtype=torch.bfloat16)("cpu"))
    assert "fuser::load_vec<__bfloat, 8>" in bf16 and "fuser::store_vec<__bfloat, 8>" in bf16


@pytest.mark.nvcc
def test_user_kernels_compile_for_sm90():
    from cuda_units import compile_all

    sources = [re.sub(r"\bfuser_user\b", f"user_{c.name}", c.fusion().cuda_code_for(c.inputs("cpu")))
               for c in CASES]
    sources.append(re.sub(r"\bfuser_user\b", "user_issue", MyFusion().cuda_code_for([torch.randn(5, 300)])))
    assert compile_all(sources)[:4] == b"\x7fELF"


def test_the_simulator_catches_a_vector_running_past_the_end(monkeypatch):
    """The check that keeps a vector's lanes inside the innermost axis matters: without it,
    4 lanes over 66 columns read and write past the row, and the simulation faults."""
    import fuser.kernel.prepare as prep

    case = next(c for c in CASES if c.name == "rows_on_grid_y")

    def vectorized(fd):
        fd.sched.split(fd.out, 1, 4)
        fd.sched.parallelize(fd.out, 0, ParallelType.grid_x)
        fd.sched.parallelize(fd.out, 2, ParallelType.vectorize)

    inputs = _with_bias(1, 66)("cpu")  # one row: no outer stride for the alignment check to refuse
    bad = Case("bad", case.define, vectorized, None, None, None).fusion()
    with pytest.raises(RuntimeError, match="the innermost extent, 66 in this call, is not a multiple of the width 4"):
        bad.execute(inputs)
    monkeypatch.setattr(prep, "_user_vector_width", lambda ref, info: 4)
    k = _kernel(Case("bad", case.define, vectorized, None, None, None).fusion(), inputs)
    with pytest.raises(KernelFault):
        simulate_kernel(k, inputs)


# --- automatic schedulers by name, and the queries -------------------------------------------------


def test_an_automatic_scheduler_chosen_by_name():
    seen = {}

    def auto(fd):
        seen["compatible"] = fd.sched.find_compatible_schedulers()
        seen["pointwise"] = fd.sched.can_schedule(SchedulerType.pointwise)
        seen["reduction"] = fd.sched.can_schedule(SchedulerType.reduction)
        fd.sched.schedule(SchedulerType.pointwise)

    fd = Case("auto", _add_exp, auto, None, None, None).fusion()
    x = _two(8, 64)("cpu")
    (out,) = fd.execute(x)
    assert_close(out, torch.exp(x[0] + x[1]))
    assert seen == {"compatible": [SchedulerType.pointwise], "pointwise": (True, ""),
                    "reduction": (False, "Scheduler _reduction_ ***rejected*** because : has no reduction")}
    assert [g.scheduler for g in fd.segmented_fusion_for(x).groups] == [SchedulerType.pointwise]
    assert "fuser_pointwise(" in fd.cuda_code_for(x)


def test_a_reduction_takes_its_automatic_scheduler_by_name():
    seen = {}

    def auto(fd):
        seen["pointwise"] = fd.sched.can_schedule(SchedulerType.pointwise)
        seen["reductions"] = [fd.sched.is_reduction(t) for t in fd.sched.tensors()]
        fd.sched.schedule(SchedulerType.reduction)

    def define(fd):
        fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.out = fd.ops.exp(fd.ops.sum(fd.t0, dims=[1]))
        fd.add_output(fd.out)

    fd = Case("sum", define, auto, None, None, None).fusion()
    x = torch.randn(8, 64)
    assert_close(fd.execute([x])[0], x.sum(1).exp())
    assert seen == {"pointwise": (False, "Scheduler _pointwise_ ***rejected*** because : has a reduction"),
                    "reductions": [False, True, False]}
    assert fd.last_segments() == [SegmentRun("reduction", True, None)]


def test_override_user_schedule_runs_the_automatic_pipeline(capsys):
    fd = MyFusion()
    x = torch.randn(4, 8)
    (out,) = fd.execute([x], override_user_schedule=True)
    assert torch.equal(out, x.relu()) and capsys.readouterr().out == ""  # schedule() not run
    assert fd.last_segments() == [SegmentRun("pointwise", True, None)]
    fd.execute([x])
    assert fd.last_segments() == [SegmentRun("user", True, None)]


def test_queries_inside_schedule():
    seen = {}

    def queries(fd):
        fd.sched.split(fd.out, 1, 32)
        fd.sched.transform_like(fd.out, [fd.t0])
        seen["out"] = fd.sched.to_string(fd.out)
        seen["t0"] = fd.sched.to_string(fd.t0)
        seen["t1"] = fd.sched.to_string(fd.t1)  # not selected: as defined
        seen["tensors"] = [t.index for t in fd.sched.tensors()]
        seen["ir"] = fd.sched.user_schedule_ir()

    fd = Case("queries", _add_exp, queries, None, None, None).fusion()
    x = _two(8, 64)("cpu")
    assert_close(fd.execute(x)[0], torch.exp(x[0] + x[1]))
    assert seen["out"] == "T3_g_float[iS6{i0}, iS8{ceilDiv(i1, 32)}rf, iS9{32}rf]"
    assert seen["t0"] == "T0_g_float[iS0{i0}, iS10{ceilDiv(i1, 32)}rf, iS11{32}rf]"
    assert seen["t1"] == "T1_g_float[iS2{i2}, iS3{i3}]"
    assert seen["tensors"] == [0, 1, 2, 3]
    assert "outer split" not in seen["ir"] and "inner split: iS7{i1} by factor 32" in seen["ir"]


def test_nvfusers_parallel_type_names_are_fusers():
    assert ParallelType.grid_x is ParallelType.BIDx and ParallelType.grid_y is ParallelType.BIDy
    assert ParallelType.block_x is ParallelType.TIDx and ParallelType.vectorize is ParallelType.Vectorize
    assert ParallelType.unroll is ParallelType.Unroll and ParallelType.unswitch is ParallelType.Unswitch
    assert ParallelType.serial is ParallelType.Serial and ParallelType.stream is ParallelType.Stream


# --- errors -------------------------------------------------------------------------------------------


def _fails(schedule, match, *, define=_add_exp, inputs=None, error=RuntimeError):
    """execute() of `define` scheduled by `schedule` raises `error` matching `match`, the
    fusion named first."""
    fd = Case("Failing", define, schedule, None, None, None).fusion()
    inputs = inputs if inputs is not None else _two(8, 64)("cpu")
    with pytest.raises(error, match=r"^Scheduled\.schedule\(\) of fusion \d+: " + match):
        fd.execute(inputs)


def _sum(fd):
    fd.t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
    fd.out = fd.ops.sum(fd.t0, dims=[1])
    fd.add_output(fd.out)


def test_a_manual_schedule_of_a_reduction_is_refused_with_what_to_do():
    x = [torch.randn(8, 64)]
    _fails(lambda fd: fd.sched.split(fd.out, 0, 4),
           re.escape("fd.sched.split on a reduction fusion: user schedules of reductions are not supported yet; "
                     "call fd.sched.schedule(SchedulerType.reduction) or drop schedule()"), define=_sum, inputs=x)
    _fails(_nothing, re.escape("schedule() made no schedule call, so the fusion would be one kernel as defined, "
                               "which fuser cannot generate for a reduction fusion"), define=_sum, inputs=x)


@pytest.mark.parametrize("schedule, match, error", [
    (lambda fd: fd.sched.split(fd.out, 2, 4),
     re.escape("fd.sched.split: dim=2 is out of range for T3's 2 loop axes (T3_g_float[iS6{i0}, iS7{i1}])"),
     IndexError),
    (lambda fd: fd.sched.split(fd.out, -3, 4), "fd.sched.split: dim=-3 is out of range", IndexError),
    (lambda fd: fd.sched.split(fd.out, 1, 0),
     re.escape("fd.sched.split: factor=0; a split factor must be >= 1"), ValueError),
    (lambda fd: fd.sched.split(fd.out, 1, 2.0), re.escape("fd.sched.split: factor must be an int, got 2.0"), TypeError),
    (lambda fd: fd.sched.merge(fd.out, 1),
     re.escape("fd.sched.merge: dim=1 is the last of T3's 2 loop axes"), IndexError),
    (lambda fd: fd.sched.reorder(fd.out, {0: 2}), re.escape("fd.sched.reorder: old2new[0]=2 is out of range"),
     IndexError),
    (lambda fd: fd.sched.reorder(fd.out, {0: 1, 1: 1}),
     re.escape("fd.sched.reorder: old2new={0: 1, 1: 1} moves two axes to position 1"), ValueError),
    (lambda fd: fd.sched.reorder(fd.out, [1, 0]), re.escape("fd.sched.reorder: old2new must be a dict"), TypeError),
    (lambda fd: fd.sched.parallelize(fd.out, 0, "warp"),
     re.escape("fd.sched.parallelize: parallel_type='warp' is not a ParallelType"), TypeError),
    (lambda fd: fd.sched.parallelize(fd.out, 0, ParallelType.block_y),
     re.escape("fd.sched.parallelize: ParallelType.block_y is not supported by user schedules yet; they bind grid_x, "
               "grid_y, block_x, vectorize, unroll, unswitch and serial axes"), ValueError),
    (lambda fd: fd.sched.parallelize(fd.out, 0, ParallelType.stream),
     re.escape("fd.sched.parallelize: ParallelType.stream is declared in the definition"), ValueError),
    (lambda fd: fd.sched.parallelize(fd.out, 1, ParallelType.block_x),
     re.escape("fd.sched.parallelize: block_x needs an axis of constant extent 1 to 1024; axis 1 of T3"), ValueError),
    (lambda fd: (fd.sched.split(fd.out, 1, 2048), fd.sched.parallelize(fd.out, 2, ParallelType.block_x)),
     re.escape("fd.sched.parallelize: block_x needs an axis of constant extent 1 to 1024"), ValueError),
    (lambda fd: (fd.sched.split(fd.out, 1, 3), fd.sched.parallelize(fd.out, 2, ParallelType.vectorize)),
     re.escape("fd.sched.parallelize: vectorize needs an axis of constant extent 1, 2, 4, 8, 16"), ValueError),
    (lambda fd: (fd.sched.split(fd.out, 1, 32), fd.sched.split(fd.out, 0, 2),
                 fd.sched.parallelize(fd.out, 1, ParallelType.block_x),
                 fd.sched.parallelize(fd.out, 3, ParallelType.block_x)),
     re.escape("fd.sched.parallelize: loop axis 1 of T3 (T3_g_float[iS10{ceilDiv(i0, 2)}rf, ithreadIdx.x11{2}rf, "
               "iS8{ceilDiv(i1, 32)}rf, iS9{32}rf]) is bound to block_x already; a loop nest binds it once"),
     ValueError),
    (lambda fd: fd.sched.split(3, 0, 2),
     re.escape("fd.sched.split: expected a Tensor of this definition, got int"), TypeError),
    (lambda fd: fd.sched.split(_other_tensor(), 0, 2),
     "fd.sched.split: Tensor\\(index=0, ndim=1\\) belongs to another FusionDefinition", ValueError),
    (lambda fd: fd.sched.cache_after(fd.t0),
     re.escape("fd.sched.cache_after is not supported yet: fuser's user-scheduled kernel computes every tensor "
               "inside one loop nest, in registers"), ValueError),
    (lambda fd: (fd.sched.split(fd.out, 1, 4), fd.sched.schedule(SchedulerType.pointwise)),
     re.escape("fd.sched.schedule after fd.sched.split: the automatic scheduler schedules the whole fusion itself"),
     ValueError),
    (lambda fd: (fd.sched.schedule(SchedulerType.pointwise), fd.sched.split(fd.out, 1, 4)),
     re.escape("fd.sched.split after fd.sched.schedule(SchedulerType.pointwise)"), ValueError),
    (lambda fd: fd.sched.schedule(SchedulerType.reduction),
     re.escape("fd.sched.schedule(SchedulerType.reduction): Scheduler _reduction_ ***rejected*** because : has no "
               "reduction"), ValueError),
    (lambda fd: fd.sched.schedule("fastest"), re.escape("fd.sched.schedule: 'fastest' is not an automatic scheduler"),
     ValueError),
], ids=["dim", "negative_dim", "factor", "float_factor", "merge_last", "reorder_range", "reorder_twice",
        "reorder_list", "unknown_parallel_type", "block_y", "stream", "symbolic_block_x", "too_many_threads",
        "vector_of_3", "block_x_twice", "not_a_tensor", "another_definitions", "cache_after", "auto_after_manual",
        "manual_after_auto", "rejected_scheduler", "unknown_scheduler"])
def test_bad_schedule_calls_name_the_argument(schedule, match, error):
    _fails(schedule, match, error=error)


def _other_tensor():
    with FusionDefinition() as other:
        t = other.define_tensor(shape=[-1])
        other.add_output(other.ops.relu(t))
    return t


@pytest.mark.parametrize("schedule, match, inputs", [
    (lambda fd: (fd.sched.split(fd.out, 1, 32), fd.sched.split(fd.t0, 1, 16)),
     re.escape("T0 is scheduled as T0_g_float[iS0{i0}, iS10{ceilDiv(i1, 16)}rf, iS11{16}rf], unlike T3 "
               "(T3_g_float[iS6{i0}, iS8{ceilDiv(i1, 32)}rf, iS9{32}rf]), whose loop nest the kernel runs: fuser "
               "computes every tensor inside that one loop nest (in registers), so schedule T3 alone or give T0 the "
               "same schedule (fd.sched.transform_like / parallelize_like)"), None),
    (lambda fd: (fd.sched.split(fd.out, 1, 4), fd.sched.parallelize(fd.out, 2, ParallelType.vectorize),
                 fd.sched.reorder(fd.out, {2: 0})),
     re.escape("the vectorize axis of T3 (T3_g_float[iV9{4}rf, iS6{i0}, iS8{ceilDiv(i1, 4)}rf]) is loop axis 0: it "
               "must be the innermost one"), None),
    (lambda fd: (fd.sched.split(fd.out, 1, 4), fd.sched.parallelize(fd.out, 2, ParallelType.vectorize)),
     re.escape("the vectorize axis of T3 (T3_g_float[iS6{i0}, iS8{ceilDiv(i1, 4)}rf, iV9{4}rf]): the innermost "
               "extent, 66 in this call, is not a multiple of the width 4 (the lanes of the last vector would run "
               "past it)"), _two(8, 66)("cpu")),
    (lambda fd: (fd.sched.split(fd.out, 1, 8), fd.sched.parallelize(fd.out, 2, ParallelType.vectorize)),
     re.escape("vectorize by 8: T0 would move 32 bytes per vector access (Float); a vector access moves at most 16"),
     None),
    (lambda fd: (fd.sched.split(fd.out, 1, 4), fd.sched.parallelize(fd.out, 2, ParallelType.vectorize)),
     re.escape("vectorize by 4: the data of T0 is aligned to 4 bytes in this call; a vector of 16 bytes needs it "
               "aligned to that"),
     [torch.randn(8 * 64 + 1)[1:].view(8, 64), torch.randn(8, 64)]),  # contiguous, 4 bytes past an aligned start
    (lambda fd: (fd.sched.merge(fd.out, 0), fd.sched.split(fd.out, 0, 2),
                 fd.sched.parallelize(fd.out, 0, ParallelType.grid_y)),
     re.escape("the grid_x and grid_y axes of T3 (T3_g_float[iblockIdx.y9{ceilDiv(( i0 * i1 ), 2)}rf, iS10{2}rf]) "
               "launch 1 x 262144 blocks in this call; a launch takes at most 2147483647 x 65535"),
     _two(8, 65536)("meta")),
], ids=["scheduled_unlike_the_reference", "vector_not_innermost", "vector_past_the_end", "vector_of_32_bytes",
        "vector_misaligned", "grid_y_too_large"])
def test_schedules_the_kernel_cannot_honour_fail_at_execute(schedule, match, inputs):
    _fails(schedule, match, inputs=inputs)


def test_schedule_calls_outside_schedule_are_refused():
    class InDefinition(FusionDefinition):
        def definition(self):
            self.t0 = self.define_tensor(shape=[-1])
            self.sched.split(self.t0, 0, 2)
            self.add_output(self.ops.relu(self.t0))

    with pytest.raises(RuntimeError, match=re.escape(
            "fd.sched.split: schedule operations are only valid inside the schedule() of a FusionDefinition subclass, "
            "which execute() runs on a copy of the defined fusion (nvFuser: Attempting to use a SchedOperators Op "
            "prior to definition!)")):
        InDefinition().execute([torch.randn(4)])
    fd = MyFusion()
    fd.execute([torch.randn(2, 3)])
    with pytest.raises(RuntimeError, match=r"fd\.sched\.merge: schedule operations are only valid inside"):
        fd.sched.merge(fd.t1, 0)
    # in a definition, parallelize is the stream loop it always was
    with FusionDefinition() as plain:
        t0 = plain.define_tensor(shape=[-1, -1], contiguity=[True, True])
        with pytest.raises(RuntimeError, match="only ParallelType.stream is set in the definition"):
            plain.sched.parallelize(t0, 0, ParallelType.grid_x)
        plain.add_output(plain.ops.relu(t0))
    with pytest.raises(AttributeError, match="fd.sched has no operation 'fastest'"):
        plain.sched.fastest()


# --- on a GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_user_kernel_runs_on_the_gpu(case, poisoned_kernel_outputs):
    pytest.importorskip("pycuda")
    torch.manual_seed(0)
    fd = case.fusion()
    inputs = case.inputs("cuda")
    got = fd.execute(inputs)
    assert fd.last_segments() == [SegmentRun("user", True, True)]  # the generated kernel ran
    assert "fuser_user(" in fd.last_cuda_code()
    for k, (g, w) in enumerate(zip(got, case.expect(inputs))):
        assert_close(g, w, what=f"{case.name} output {k}")
    again = fd.execute(inputs)  # the cached runner: the same kernel, the same results
    for g, a in zip(got, again):
        assert torch.equal(g, a)


@pytest.mark.gpu
def test_user_kernel_profile_on_the_gpu(poisoned_kernel_outputs):
    pytest.importorskip("pycuda")
    fd = MyFusion()
    x = torch.randn(64, 1000, device="cuda")
    (out,) = fd.execute([x], profile=True)
    assert torch.equal(out, x.relu())
    (k,) = fd.profile().kernel_profiles
    assert k.scheduler == "user" and k.time_ms > 0


@pytest.mark.gpu
def test_an_automatic_scheduler_by_name_runs_on_the_gpu(poisoned_kernel_outputs):
    pytest.importorskip("pycuda")
    fd = Case("auto", _add_exp, lambda fd: fd.sched.schedule(SchedulerType.pointwise), None, None, None).fusion()
    x = _two(256, 1024)("cuda")
    (out,) = fd.execute(x)
    assert fd.last_segments() == [SegmentRun("pointwise", True, True)]
    assert_close(out, torch.exp(x[0] + x[1]))
