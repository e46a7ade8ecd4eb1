"""Inner-outer persistent kernels (norm backwards) are generated without a GPU: the CUDA of
RMSNorm and LayerNorm backward at many shapes and dtypes, and of seed 001's second
segment, compiles with nvcc for sm_90, and is one kernel that reduces rows in registers,
keeps column partials across rows and combines them after a grid barrier."""
import re
import pytest
import torch

from fuser import DataType, FusionDefinition
from cuda_units import compile_all, ptxas_usage
from fuser.scheduler.runtime_info import DeviceLimits
from normalization_backward_cases import rows_fit_one_kernel

_DT = {torch.float32: DataType.Float, torch.bfloat16: DataType.BFloat16, torch.float16: DataType.Half}


def _meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def rms_norm_backward(fd: FusionDefinition, dtype: DataType) -> None:
    """grad, x, rstd [M, 1] and weight [N] -> dx, dweight."""
    grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    rstd = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
    g, xf = fd.ops.cast(grad, DataType.Float), fd.ops.cast(x, DataType.Float)
    shape = fd.ops.shape(x)
    r = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
    xhat = fd.ops.mul(xf, r)
    gw = fd.ops.mul(g, fd.ops.broadcast_in_dim(fd.ops.cast(w, DataType.Float), shape=shape, broadcast_dims=[1]))
    mean = fd.ops.div(fd.ops.sum(fd.ops.mul(gw, xhat), dims=[1], keepdim=True), fd.ops.size(x, 1))
    dx = fd.ops.mul(r, fd.ops.sub(gw, fd.ops.mul(xhat, fd.ops.broadcast_in_dim(mean, shape=shape,
                                                                                broadcast_dims=[0, 1]))))
    fd.add_output(fd.ops.cast(dx, dtype))
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(g, xhat), dims=[0]), dtype))


def layer_norm_backward(fd: FusionDefinition, dtype: DataType) -> None:
    """grad, x, mean [M, 1], rstd [M, 1] and weight [N] -> dx, dweight, dbias."""
    grad = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
    mean = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
    rstd = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
    g, xf = fd.ops.cast(grad, DataType.Float), fd.ops.cast(x, DataType.Float)
    shape = fd.ops.shape(x)
    r = fd.ops.broadcast_in_dim(rstd, shape=shape, broadcast_dims=[0, 1])
    xhat = fd.ops.mul(fd.ops.sub(xf, fd.ops.broadcast_in_dim(mean, shape=shape, broadcast_dims=[0, 1])), r)
    gw = fd.ops.mul(g, fd.ops.broadcast_in_dim(fd.ops.cast(w, DataType.Float), shape=shape, broadcast_dims=[1]))
    n = fd.ops.size(x, 1)
    a = fd.ops.div(fd.ops.sum(gw, dims=[1], keepdim=True), n)
    b = fd.ops.div(fd.ops.sum(fd.ops.mul(gw, xhat), dims=[1], keepdim=True), n)
    inner = fd.ops.sub(fd.ops.sub(gw, fd.ops.broadcast_in_dim(a, shape=shape, broadcast_dims=[0, 1])),
                       fd.ops.mul(xhat, fd.ops.broadcast_in_dim(b, shape=shape, broadcast_dims=[0, 1])))
    fd.add_output(fd.ops.cast(fd.ops.mul(r, inner), dtype))
    fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(g, xhat), dims=[0]), dtype))
    fd.add_output(fd.ops.cast(fd.ops.sum(g, dims=[0]), dtype))


def _inputs(kind: str, m: int, n: int, dtype: torch.dtype) -> list:
    stats = [_meta((m, 1))] * (1 if kind == "rms" else 2)
    return [_meta((m, n), dtype), _meta((m, n), dtype), *stats, _meta((n,), dtype)]


def _code(kind: str, m: int, n: int, dtype: torch.dtype) -> str:
    build = rms_norm_backward if kind == "rms" else layer_norm_backward
    with FusionDefinition() as fd:
        build(fd, _DT[dtype])
    return fd.cuda_code_for(_inputs(kind, m, n, dtype))


SHAPES = [(16384, 4096), (8192, 8192), (2048, 16384), (1000, 1024), (7, 127), (1, 3), (16384, 4097)]


@pytest.mark.nvcc
def test_norm_backward_kernels_compile_for_sm90():
    sources = []
    for kind in ("rms", "layer"):
        for m, n in SHAPES:
            for dtype in (torch.float32, torch.bfloat16, torch.float16):
                src = _code(kind, m, n, dtype)
                # rows held in registers, or staged (normalization.INNER_OUTER_STAGED_FIT),
                # by the rule the segmentation tests check
                pattern = "rms_bwd" if kind == "rms" else "ln_bwd"
                if rows_fit_one_kernel(pattern, dtype.itemsize, n, DeviceLimits.target()):
                    assert src.count("__global__") == 1 and "fuser_inner_outer" in src, (kind, m, n, dtype)
                else:  # split into kernels that do not hold the rows
                    assert src.count("__global__") >= 2, (kind, m, n, dtype)
                sources.append(src)
    assert compile_all(sources)[:4] == b"\x7fELF"


def test_one_kernel_reads_rows_once_and_combines_columns_after_a_grid_barrier():
    src = _code("layer", 16384, 4096, torch.bfloat16)
    assert src.count("fuser::grid_sync(semaphore);") == 1
    # dweight and dbias: a tile of column accumulators each, combined after the barrier,
    # both in one pass over the blocks' partials
    assert src.count("float oacc") == 2
    assert src.count("fuser::column_partials<2>(") == 1 and re.search(r"cp_work\[2\] = {w\d+, w\d+}", src)
    # the row's two inner sums are block reductions, with blockDim.x a constant
    assert src.count("block_allreduce_x<false, 128>(") == 2
    # the rows are copied once, a group ahead, into shared memory; each pass over them
    # (before and after the block reductions) reads them from there, a vector at a time
    assert src.count("fuser::cp_async<16>(&stage_r0[") == 2  # the first group, then the next
    assert src.count("fuser::load_vec<__bfloat, 8>(&r0[u * 8], &stage_r0[") == 2
    assert "fuser::launder(r0)" not in src and "fuser::launder(r4)" in src
    # the weight is loaded once, before the loop
    assert src.count("(&r4[") == 1
    assert src.index("(&r4[") < src.index("for (nvfuser_index_t it = 0;") < src.index("(&r0[")
    # after the rows, the tiles are combined over threadIdx.y through the stages' memory
    # and the thread rows share out the vector stores of the partials
    tail = src[src.index("fuser::grid_sync"):]
    head = src[:src.index("fuser::grid_sync")]
    assert head.count("fuser::block_allreduce_tile_y(oacc") == 2 and "tiles_Float" in head
    assert head.count("fuser::store_vec<float, 8>(&w3") == 2 and "threadIdx.y) == (u % 4)" in head
    assert "fuser::column_partials" in tail


def test_rows_of_1024_threads_are_not_loaded_ahead():
    # holding two groups of rows would take more than the 64 registers a thread of a
    # 1024-thread block has
    src = _code("rms", 2048, 8192, torch.float32)
    assert "__launch_bounds__(1024)" in src and "fuser_inner_outer" in src and "nr0" not in src
    # with 512 threads, fp32 rows are loaded ahead; bf16 ones are not (measured slower)
    assert "nr0" in _code("rms", 2048, 4096, torch.float32) and "nr0" not in _code("rms", 2048, 4096, torch.bfloat16)


def test_short_rows_share_a_block_and_combine_partials_over_threadIdx_y():
    src = _code("rms", 16384, 1024, torch.bfloat16)
    assert "__launch_bounds__(256, 3)" in src  # 64 threads per row, 4 rows per block
    # bf16 rows are staged: the tile is combined through the stages' shared memory
    assert "fuser::block_allreduce_tile_y(oacc" in src and "tiles_Float" in src
    # fp32 rows are not: element by element through static shared memory
    assert "fuser::block_reduce_tile_y(oacc" in _code("rms", 16384, 1024, torch.float32)


def test_seed_001_is_one_inner_outer_kernel_with_sums_per_row_segment():
    from fuser.examples.rmsnorm_backward import make_inputs, rmsnorm_backward

    with FusionDefinition() as fd:
        rmsnorm_backward(fd)
    src = fd.cuda_code_for(make_inputs("meta"))
    # the sums over the sequence per batch flush their tiles at each batch a block leaves,
    # and are combined per (batch, column) after the grid synchronises
    assert src.count("__global__") == 1 and "fuser_inner_outer" in src
    assert src.count("fuser::segment_partials(") == 2 and src.count("fuser::column_partials<2>(") == 1
    assert compile_all([src])[:4] == b"\x7fELF"


def test_load_caps_the_grid_to_resident_blocks_and_sizes_the_partials(monkeypatch):
    # no GPU: the compiler and loader are stand-ins reporting 3 resident blocks per SM
    import fuser.driver.kernel_cache as kc
    import fuser.driver.launch as launch
    from fuser.kernel import prepare_kernel
    from fuser.scheduler import SchedulerType

    class Loaded:
        def __init__(self, *args, **kwargs):
            pass

        def max_active_blocks(self, threads: int, shared_mem: int = 0) -> int:
            asked.append(shared_mem)
            return 3

    asked: list[int] = []

    monkeypatch.setattr(kc, "get_cubin", lambda *a, **k: b"\x7fELF")
    monkeypatch.setattr(launch, "CompiledKernel", Loaded)
    with FusionDefinition() as fd:
        rms_norm_backward(fd, DataType.BFloat16)
    k = prepare_kernel(SchedulerType.inner_outer_persistent, fd.fusion, _inputs("rms", 16384, 4096, torch.bfloat16))
    per_block = {p: n for p, n, _ in k._work}
    assert all(fixed == 0 for _, _, fixed in k._work)
    k.load()
    sms = k.info.device_limits.sm_count
    # the groups of rows over at most 3 * sms blocks, balanced so every block runs as many rounds
    groups = -(-16384 // k.params.bdy)
    rounds = -(-groups // (3 * sms))
    assert k.grid == (-(-groups // rounds), 1, 1)
    # one row of 4096 float partials per block
    assert per_block == {p: 4096 * 4 for p in per_block}
    assert dict(k._work) == {p: k.grid[0] * 4096 * 4 for p in per_block}
    # the residency counts the rows' stages in dynamic shared memory: two stages of the
    # block's 4 rows of grad and x
    assert asked == [k.kernel.dynamic_smem] == [2 * 4 * 4096 * 2 * 2]


def test_narrow_rows_are_staged_through_dynamic_shared_memory(monkeypatch):
    # LayerNorm backward bf16: the next group of rows is copied (cp.async) into the other
    # of two shared stages while the current one is reduced; a thread reads back its own
    src = _code("layer", 16384, 1024, torch.bfloat16)
    assert src.count("fuser::cp_async<16>(&stage_r0[") == 2  # before the loop, and ahead in it
    assert "fuser::load_vec<__bfloat, 8>(&r0[u * 8], &stage_r0[(((it % 2) * " in src
    assert src.index("fuser::cp_async_wait<0>();") < src.index("&stage_r0[(((it % 2)")
    loop_end = src.index("fuser::grid_sync")
    assert src.rindex("fuser::cp_async_wait<0>();", 0, loop_end) > src.index("(((it + 1) % 2)")
    # the stages live in dynamic shared memory, grad's then x's: [stage][vector][thread][lane]
    # with 128 x 2 threads of one vector (the plain layout: INNER_OUTER_WIDE_FULL_BLOCKS)
    assert "extern __shared__ __align__(16) unsigned char fuser_dynamic_smem[];" in src
    assert "__bfloat* stage_r1 = reinterpret_cast<__bfloat*>(fuser_dynamic_smem + 8192);" in src
    # rows of 4096 take 128 KiB of stages, past what a block may declare statically
    big = _code("layer", 16384, 4096, torch.bfloat16)
    assert "reinterpret_cast<__bfloat*>(fuser_dynamic_smem + 65536)" in big
    assert "cp_async" in _code("rms", 16384, 1024, torch.bfloat16)
    assert compile_all([src, big])[:4] == b"\x7fELF"
    # fp32 rows (loaded ahead into registers instead), and stages past the budget, are not
    assert "cp_async" not in _code("layer", 16384, 1024, torch.float32)
    import fuser.scheduler.normalization as plan

    monkeypatch.setattr(plan, "STAGE_MAX_BYTES", 64 * 1024)  # as many inputs as fit
    src = _code("layer", 16384, 4096, torch.bfloat16)
    assert "stage_r0" in src and "stage_r1" not in src
    monkeypatch.setattr(plan, "STAGE_MAX_BYTES", 32 * 1024)
    src = _code("layer", 16384, 4096, torch.bfloat16)
    assert "cp_async" not in src and "fuser_dynamic_smem" not in src

def test_rows_left_out_of_the_stages_are_loaded_once_and_kept_in_registers(monkeypatch):
    import fuser.scheduler.normalization as plan

    # room for one of the two bf16 rows' stages only
    monkeypatch.setattr(plan, "STAGE_MAX_BYTES", 64 * 1024)
    src = _code("layer", 16384, 4096, torch.bfloat16)
    assert "stage_r0" in src and "stage_r1" not in src
    # the staged row is read from shared memory in each pass, the other loaded from global
    # memory once per row and laundered across the block reductions
    assert src.count("fuser::load_vec<__bfloat, 8>(&r0[u * 8], &stage_r0[") == 2
    assert src.count("fuser::load_vec<__bfloat, 8>(&r1[u * 8], &T1[") == 1
    assert "fuser::launder(r1)" in src and "fuser::launder(r0)" not in src
    assert compile_all([src])[:4] == b"\x7fELF"


def test_a_row_spanning_value_read_after_the_column_reductions_is_not_inner_outer():
    """GPU fuzz seed 19104 case 1167 (a fallback): after the reductions across rows, an
    expression read full() over the rows, which the inner-outer kernel's column phase does
    not have (it reads only the reductions' results and inputs there). The scheduler now
    says no, so the segment goes to kernels that compute it; they simulate to the reference."""
    from kernel_sim import simulate_fusion

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[False, True, True], dtype=DataType.Half,
                              stride_order=[1, 2, 0])
        t1 = fd.ops.cast(t0, dtype=DataType.Float)
        t2 = fd.ops.min(t1, dims=[2], keepdim=False)
        t4 = fd.ops.mul(t1, fd.ops.broadcast_in_dim(t2, shape=[1, 8, 255], broadcast_dims=[0, 1]))
        t5 = fd.ops.min(t0, dims=[0], keepdim=False)
        t6 = fd.ops.sum(t0, dims=[0, -2, 2], keepdim=False)
        t7 = fd.ops.iota(8, -1.5, 0.25, dtype=DataType.Float)
        t9 = fd.ops.add(fd.ops.broadcast_in_dim(t7, shape=[1, t0.size(1), t0.size(2)], broadcast_dims=[1]), t4)
        t10 = fd.ops.maximum(t7, t6)
        t11 = fd.ops.sum(t10, dims=[-1], keepdim=True)
        t12 = fd.ops.sub(t10, t11)
        t13 = fd.ops.ge(t5, 0.0)
        t15 = fd.ops.where(t13, fd.ops.broadcast_in_dim(t11, shape=[t0.size(1), t0.size(2)], broadcast_dims=[0]),
                           t13)
        t16 = fd.ops.full(shape=[t0.size(1), t0.size(2)], fill_value=1.0, dtype=DataType.Float)
        t19 = fd.ops.mul(t16, fd.ops.broadcast_in_dim(t12, shape=[8, t0.size(2)], broadcast_dims=[0]))
        t20 = fd.ops.full(shape=[8], fill_value=1, dtype=DataType.Int32)
        t22 = fd.ops.maximum(fd.ops.broadcast(t20, is_broadcast_dim=[False, True]), t19)
        t24 = fd.ops.sub(fd.ops.broadcast_in_dim(t20, shape=[8, t0.size(2)], broadcast_dims=[0]), t22)
        fd.add_output(t24)
        fd.add_output(t15)
        fd.add_output(fd.ops.cast(fd.ops.maximum(t16, t9), dtype=DataType.BFloat16))
    torch.manual_seed(1167)
    x = (torch.rand(8, 1, 258) * 5 + 0.25).half().permute(1, 0, 2).narrow(2, 0, 255)
    src = fd.cuda_code_for([torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")])
    assert "fuser_inner_outer" not in src
    report = simulate_fusion(fd, [x], resident=3)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_fp32"])
def test_fewer_row_groups_than_sms_run_as_separate_kernels(switches, name):
    """normalization.INNER_OUTER_FEW_ROWS_APART: where the inner-outer kernel would have
    fewer groups of rows than the target's SMs (128 rows: 32 groups of 4), a backward
    norm's reductions along and across the rows are separate kernels, which simulate to the
    reference; with enough rows (1024: 256 groups), or the switch off, one kernel."""
    from kernel_sim import simulate_fusion

    import fuser.benchmarks.fusions as F
    from fuser.scheduler import normalization as N

    f = F.by_name(name)
    torch.manual_seed(7)
    switches(N, INNER_OUTER_FEW_ROWS_APART=True)

    def kernels(shape):
        fd = f.fusion_definition()
        src = fd.cuda_code_for([x.to("meta") for x in f.make_inputs("cpu", shape)])
        return src.count("__global__"), "fuser_inner_outer" in src

    assert kernels((128, 1000)) == (2, False)
    assert kernels((1024, 1000)) == (1, True)
    xs = f.make_inputs("cpu", (128, 1000))
    report = simulate_fusion(f.fusion_definition(), xs)
    assert report.ok and report.status == "ok", str(report)
    switches(N, INNER_OUTER_FEW_ROWS_APART=False)
    assert kernels((128, 1000)) == (1, True)


@pytest.mark.nvcc
def test_rows_too_long_for_registers_run_as_one_kernel_from_shared_memory_stages(switches):
    """normalization.INNER_OUTER_STAGED_FIT: RMSNorm backward over bf16 rows of 16384,
    whose inputs, weight and column accumulators overflow the registers' half of the
    register file, runs with the switch on as one inner-outer kernel that holds the rows in
    two shared-memory stages and the rest in registers (nvcc spilling none), and simulates
    to the reference. Off, or with rows past the stages or in vectors short of a 16-byte
    copy, separate kernels."""
    from kernel_sim import simulate_fusion

    import fuser.benchmarks.fusions as F
    from fuser.scheduler import normalization as N

    f = F.by_name("rmsnorm_bwd_bf16")

    def code(shape, fusion=f):
        return fusion.fusion_definition().cuda_code_for([x.to("meta") for x in fusion.make_inputs("cpu", shape)])

    switches(N, INNER_OUTER_STAGED_FIT=False)
    off = code((136, 16384))
    assert off.count("__global__") == 2 and "fuser_inner_outer" not in off
    switches(N, INNER_OUTER_STAGED_FIT=True)
    on = code((136, 16384))
    assert on.count("__global__") == 1 and "__launch_bounds__(512) fuser_inner_outer" in on
    # x and grad in two stages of a row each: 2 x 512 threads x 32 elements x 2 bytes
    assert "stage_r1 = reinterpret_cast<__bfloat*>(fuser_dynamic_smem + 65536);" in on
    # with the (one-row) tile combine emitted, nvcc holds it without spilling
    assert "fuser::block_allreduce_tile_y(oacc" in on
    [(registers, spilled)] = ptxas_usage(on)
    assert spilled == 0 and registers <= 96, (registers, spilled)
    # LayerNorm's two column tiles fit the registers' larger share (STAGED_REGISTER_FRACTION)
    ln = code((136, 16384), F.by_name("layernorm_bwd_bf16"))
    assert ln.count("__global__") == 1 and ptxas_usage(ln)[0][1] == 0
    # past the stages' 128 KiB (bf16 rows of 32768, fp32 rows of 16384), or in vectors
    # short of a 16-byte copy (odd lengths; 2-element vectors): separate kernels
    assert code((136, 32768)).count("__global__") >= 2
    assert code((136, 16384), F.by_name("rmsnorm_bwd_fp32")).count("__global__") >= 2
    assert code((136, 16383)).count("__global__") >= 2
    assert code((136, 14338)).count("__global__") >= 2
    # a plan whose stages the lowering cannot fit raises instead of holding the rows in
    # registers (the gate and the lowering share the budget, so only a stand-in differs)
    import types

    import fuser.lower.row_loop as RL
    from fuser.lower.errors import NotLowerable

    switches(RL, plan=types.SimpleNamespace(STAGES=N.STAGES, stage_bytes=N.stage_bytes,
                                          stage_budget=lambda limits: 32 * 1024))
    with pytest.raises(NotLowerable, match="the plan stages rows"):
        code((136, 16384))
    switches(RL, plan=N)
    # simulated over few rows (the plan is the same; the few-rows rule would split them)
    switches(N, INNER_OUTER_FEW_ROWS_APART=False)
    torch.manual_seed(11)
    xs = f.make_inputs("cpu", (7, 16384))
    assert "stage_r1" in code((7, 16384))
    report = simulate_fusion(f.fusion_definition(), xs, resident=3)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.nvcc
def test_fp32_rows_too_long_for_registers_are_staged_where_the_plan_says(switches):
    """LayerNorm backward over fp32 rows of 8192 (two column accumulators) overflows the
    registers and runs as several kernels; with INNER_OUTER_STAGED_FIT its plan stages the
    rows (`stage_rows`), which fp32 rows otherwise never are (they load ahead into
    registers), and the one kernel simulates to the reference."""
    from kernel_sim import simulate_fusion

    import fuser.benchmarks.fusions as F
    from fuser.scheduler import normalization as N

    f = F.by_name("layernorm_bwd_fp32")

    def code(shape):
        return f.fusion_definition().cuda_code_for([x.to("meta") for x in f.make_inputs("cpu", shape)])

    switches(N, INNER_OUTER_STAGED_FIT=False)
    assert code((136, 8192)).count("__global__") >= 2  # (dbias's sum apart, at least)
    assert "cp_async" not in code((136, 4096))  # (rows that fit: loaded ahead into registers)
    switches(N, INNER_OUTER_STAGED_FIT=True)
    on = code((136, 8192))
    assert on.count("__global__") == 1 and "__launch_bounds__(1024) fuser_inner_outer" in on
    # 2 stages x 1024 threads x 8 floats of x, then of grad
    assert "float* stage_r1 = reinterpret_cast<float*>(fuser_dynamic_smem + 65536);" in on
    assert "cp_async" not in code((136, 4096))  # (rows that fit are planned as before)
    assert compile_all([on])[:4] == b"\x7fELF"
    switches(N, INNER_OUTER_FEW_ROWS_APART=False)
    torch.manual_seed(12)
    report = simulate_fusion(f.fusion_definition(), f.make_inputs("cpu", (5, 8192)), resident=2)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.nvcc
def test_one_thread_row_calls_the_tile_combine_where_the_switch_says(switches):
    """inner_outer.ONE_ROW_TILE_COMBINE: a one-row block (RMSNorm backward bf16 rows of
    12288, 512 threads) calls the tile combine of its partials, an empty one, only with
    the switch on; the kernel then takes fewer registers and simulates to the reference."""
    from kernel_sim import simulate_fusion

    import fuser.benchmarks.fusions as F
    import fuser.lower.inner_outer as IO
    from fuser.scheduler import normalization as N

    f = F.by_name("rmsnorm_bwd_bf16")

    def code(shape):
        return f.fusion_definition().cuda_code_for([x.to("meta") for x in f.make_inputs("cpu", shape)])

    switches(IO, ONE_ROW_TILE_COMBINE=False)
    off = code((4096, 12288))
    assert "__launch_bounds__(512) fuser_inner_outer" in off and "block_allreduce_tile_y" not in off
    switches(IO, ONE_ROW_TILE_COMBINE=True)
    on = code((4096, 12288))
    assert "fuser::block_allreduce_tile_y(oacc" in on
    (off_registers, _), = ptxas_usage(off)
    (on_registers, spilled), = ptxas_usage(on)
    assert on_registers < off_registers and spilled == 0, (off_registers, on_registers, spilled)
    switches(N, INNER_OUTER_FEW_ROWS_APART=False)
    torch.manual_seed(13)
    report = simulate_fusion(f.fusion_definition(), f.make_inputs("cpu", (5, 12288)), resident=2)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 12288), (700, 10240)], ids=str)
@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16"])
def test_one_row_tile_combine_matches_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    import fuser.lower.inner_outer as IO

    switches(IO, ONE_ROW_TILE_COMBINE=True)
    fd = bench_case_on_gpu(name, shape, seed=19)
    assert "fuser_inner_outer" in fd.last_cuda_code()


@pytest.mark.gpu
@pytest.mark.parametrize("name, shape, kernels", [
    ("rmsnorm_bwd_bf16", (2048, 16384), 1), ("rmsnorm_bwd_bf16", (333, 16000), 1),
    ("rmsnorm_bwd_bf16", (140, 14336), 1), ("layernorm_bwd_bf16", (2048, 16384), 1),
    ("layernorm_bwd_fp32", (1024, 8192), 1), ("layernorm_bwd_fp32", (150, 7000), 1)], ids=str)
def test_rows_held_in_shared_memory_stages_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape,
                                                                  kernels):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    from fuser.scheduler import normalization as N

    switches(N, INNER_OUTER_STAGED_FIT=True)
    fd = bench_case_on_gpu(name, shape, seed=17)
    src = fd.last_cuda_code()
    assert "fuser_inner_outer" in src and "stage_r1" in src and src.count("__global__") == kernels


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 1000), (300, 4096), (5, 8), (1024, 1000)],
                         ids=["128x1000", "300x4096", "5x8", "1024x1000"])
@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16", "layernorm_bwd_fp32"])
def test_few_rows_as_separate_kernels_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    from fuser.scheduler import normalization as N

    switches(N, INNER_OUTER_FEW_ROWS_APART=True)
    bench_case_on_gpu(name, shape, seed=11)


@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16", "layernorm_bwd_fp32"])
def test_a_kept_first_pass_is_not_recomputed_and_simulates_to_the_reference(switches, name):
    """normalization.INNER_OUTER_KEEP_REGISTERS: within it (here always), the pass after the row
    reductions reads the first pass's values from registers: it converts no loaded row
    again, and the kernel simulates to the reference."""
    from kernel_sim import simulate_fusion

    import fuser.benchmarks.fusions as F
    from fuser.scheduler import normalization as N

    f = F.by_name(name)
    torch.manual_seed(5)
    xs = f.make_inputs("cpu", (24, 1000))

    def passes(src: str) -> tuple[int, int]:
        body = src[src.index("fuser_inner_outer("):src.index("grid_sync(")]
        first, later = body.split("block_allreduce_x", 1)
        return first.count("bfloat_to_float(r") + first.count("] = r"), later.count("bfloat_to_float(r")

    switches(N, INNER_OUTER_KEEP_REGISTERS=0)
    recomputed = passes(f.fusion_definition().cuda_code_for([x.to("meta") for x in xs]))
    switches(N, INNER_OUTER_KEEP_REGISTERS=1 << 20)
    fd = f.fusion_definition()
    kept = passes(fd.cuda_code_for([x.to("meta") for x in xs]))
    if "bf16" in name:
        assert recomputed[1] > 0 and kept[1] == 0, (recomputed, kept)
    report = simulate_fusion(fd, xs)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name, shape", [("rmsnorm_bwd_bf16", (2048, 4096)), ("layernorm_bwd_bf16", (1500, 1000)),
                                         ("layernorm_bwd_fp32", (2048, 4096)), ("rmsnorm_bwd_bf16", (1024, 5000)),
                                         ("seed001_rmsnorm_bwd_bf16", (56, 1024, 1024))], ids=str)
@pytest.mark.parametrize("keep", [1 << 20, 0], ids=["kept", "recomputed"])
def test_kept_and_recomputed_first_passes_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape,
                                                                  keep):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    from fuser.scheduler import normalization as N

    switches(N, INNER_OUTER_KEEP_REGISTERS=keep)
    fd = bench_case_on_gpu(name, shape, seed=13)
    assert "fuser_inner_outer" in fd.last_cuda_code()


def test_the_first_pass_is_kept_where_its_values_fit_the_register_budget():
    """Seed 001 (rows of 1024 over 128 threads: 8 elements a thread) keeps its first pass's
    values; LayerNorm backward bf16 [16384, 4096] (32 elements a thread) recomputes them."""
    import fuser.benchmarks.fusions as F
    from fuser.scheduler import normalization as N

    def later_pass_conversions(name, shape):
        f = F.by_name(name)
        xs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
              for x in f.inputs(torch.device("cpu"), shape)]
        src = F.define(name).cuda_code_for(xs)
        body = src[src.index("fuser_inner_outer("):src.index("grid_sync(")]
        return body.split("block_allreduce_x", 1)[1].count("bfloat_to_float(r")

    assert N.INNER_OUTER_KEEP_REGISTERS > 0
    assert later_pass_conversions("seed001_rmsnorm_bwd_bf16", (56, 1024, 1024)) == 0
    assert later_pass_conversions("layernorm_bwd_bf16", (16384, 4096)) > 0


def test_a_kept_first_pass_without_launders_simulates_to_the_reference(switches):
    """lower.reduction.KEPT_PASS_LAUNDER off (a sweep's switch): the kept kernel launders
    nothing, and still simulates to the reference."""
    from kernel_sim import simulate_fusion

    import fuser.benchmarks.fusions as F
    import fuser.lower.reduction as R
    from fuser.scheduler import normalization as N

    f = F.by_name("layernorm_bwd_bf16")
    torch.manual_seed(9)
    xs = f.make_inputs("cpu", (24, 1000))
    switches(N, INNER_OUTER_KEEP_REGISTERS=1 << 20)
    assert "fuser::launder(" in f.fusion_definition().cuda_code_for([x.to("meta") for x in xs])
    switches(R, KEPT_PASS_LAUNDER=False)
    fd = f.fusion_definition()
    assert "fuser::launder(" not in fd.cuda_code_for([x.to("meta") for x in xs])
    report = simulate_fusion(fd, xs)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name, shape", [("layernorm_bwd_bf16", (1500, 1000)), ("rmsnorm_bwd_fp32", (2048, 4096)),
                                         ("seed001_rmsnorm_bwd_bf16", (56, 1024, 1024))], ids=str)
def test_a_kept_first_pass_without_launders_matches_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    import fuser.lower.reduction as R
    from fuser.scheduler import normalization as N

    switches(N, INNER_OUTER_KEEP_REGISTERS=1 << 20)
    switches(R, KEPT_PASS_LAUNDER=False)
    fd = bench_case_on_gpu(name, shape, seed=17)
    assert "fuser_inner_outer" in fd.last_cuda_code() and "fuser::launder(" not in fd.last_cuda_code()


def _kernel(kind: str, m: int, n: int, dtype: torch.dtype):
    with FusionDefinition() as fd:
        (rms_norm_backward if kind == "rms" else layer_norm_backward)(fd, _DT[dtype])
    (k,) = fd._kernels_for(_inputs(kind, m, n, dtype), "test")
    return k


def test_blocks_per_sm_come_from_the_threads_an_sm_is_compiled_for():
    from fuser.scheduler import normalization as N

    per_sm = N.INNER_OUTER_SM_THREADS
    assert per_sm >= 512
    short = _kernel("rms", 16384, 1024, torch.bfloat16)  # 64 x 4 threads
    assert short.block[:2] == (64, 4) and short.kernel.min_blocks == per_sm // 256
    assert short.kernel.spill_max == N.INNER_OUTER_SPILL_MAX
    assert f"__launch_bounds__(256, {per_sm // 256})" in short.source
    # a cap of one block still changes the compiler's register choice (more, not fewer):
    # a block of more than half the target asks for none
    wide = _kernel("rms", 16384, 4096, torch.bfloat16)
    assert wide.block[0] * wide.block[1] > per_sm // 2
    assert wide.kernel.min_blocks == 0 and "__launch_bounds__(512)" in wide.source


@pytest.mark.parametrize("spilled, kept", [(32, True), (33, False), (0, True)])
def test_an_inner_outer_register_cap_stays_while_it_spills_at_most_its_allowance(monkeypatch, spilled, kept):
    # no GPU: a stand-in loader reports local memory for the capped source only
    import fuser.driver.kernel_cache as kc
    import fuser.driver.launch as launch
    from fuser.kernel import generated
    from fuser.scheduler import normalization as N

    monkeypatch.setattr(N, "INNER_OUTER_SPILL_MAX", 32)
    monkeypatch.setattr(generated, "_loaded", {})  # (each case compiles afresh)
    loaded = []

    class Loaded:
        def __init__(self, cubin, name, fmt, device=None, dependent_launch=False):
            self.capped = b"__launch_bounds__(256, " in cubin
            self.local_size_bytes = spilled if self.capped else 0
            loaded.append(self.local_size_bytes)

        def max_active_blocks(self, threads, smem):
            return 3 if self.capped else 2  # (the grid must come from the kernel that loads)

    monkeypatch.setattr(kc, "get_cubin", lambda source, **k: source.encode())
    monkeypatch.setattr(launch, "CompiledKernel", Loaded)
    k = _kernel("rms", 16384, 1024, torch.bfloat16)
    assert k.kernel.min_blocks and k.kernel.grid_sync and k.kernel.grid_strided
    k.load()
    if kept:
        assert loaded == [spilled] and k.kernel.min_blocks and "__launch_bounds__(256, " in k.source
    else:
        assert loaded == [spilled, 0] and k.kernel.min_blocks == 0 and "__launch_bounds__(256)" in k.source
    fits = 3 if kept else 2
    sms = k.info.device_limits.sm_count
    assert (fits - 1) * sms < k.grid[0] <= fits * sms, (k.grid, sms)


@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_a_wide_layout_that_cannot_fill_its_block_gives_way_to_the_plain_one(switches, kind):
    """2-byte rows of 2048 in 4 vectors a thread would take 64 threads, four rows a block of
    256; they take the plain layout instead (RMSNorm: 128 threads of 2 vectors, two rows a
    block; LayerNorm: 256 threads of one), as with the wide layout off. Rows of 4096 fill
    512 threads in the wide layout and keep it."""
    from fuser.scheduler import normalization as N

    def plan(n):
        k = _kernel(kind, 16384, n, torch.bfloat16)
        return k.block[:2], k.params.unroll * k.params.vectorize

    assert N.INNER_OUTER_WIDE_FULL_BLOCKS
    plain = {"rms": ((128, 2), 16), "ln": ((256, 1), 8)}[kind]
    assert plan(2048) == plain and plan(1536) == plain
    assert plan(4096) == ((128, 4), 32)
    switches(N, INNER_OUTER_WIDE_FULL_BLOCKS=False)
    assert plan(2048) == ((64, 4), 32) and plan(4096) == ((128, 4), 32)
    switches(N, INNER_OUTER_WIDE_FULL_BLOCKS=True, INNER_OUTER_WIDE_MAX_OUTER=0)
    assert plan(2048) == plain


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rmsnorm_bwd_bf16", "layernorm_bwd_bf16"])
@pytest.mark.parametrize("wide_full_blocks", [True, False])
def test_rows_of_2048_in_either_layout_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name,
                                                              wide_full_blocks):
    pytest.importorskip("pycuda")
    from test_row_loop import bench_case_on_gpu

    from fuser.scheduler import normalization as N

    switches(N, INNER_OUTER_WIDE_FULL_BLOCKS=wide_full_blocks)
    fd = bench_case_on_gpu(name, (2304, 2048), seed=23)
    src = fd.last_cuda_code()
    assert "fuser_inner_outer" in src
    # (the plan caps both layouts at 3 blocks of 256 threads; the loader drops a cap that
    # spills, as LayerNorm's wide layout does there: 620 bytes, ptxas sm_90)
    assert re.search(r"__launch_bounds__\(256(, 3)?\)", src) and ("r0[32]" in src) != wide_full_blocks, src[:2000]
