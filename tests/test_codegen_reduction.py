"""Reduction and inner-persistent kernels are generated without a GPU: each fusion's CUDA,
made from meta tensors of many shapes (inner and outer reductions, grid reductions,
Welford, softmax and the norms), compiles with nvcc for sm_90, and the schedule's choices
show in the code (vector loads, block and grid reductions)."""
import re
import shutil
import subprocess

import pytest
import torch

from fuser import DataType, FusionDefinition
from cuda_units import compile_all

#: a block's one row: its block index (counted from the end or not) plus threadIdx.y
ONE_ROW_A_BLOCK = r"blockIdx\.x\)+ \* 1 \+ \(\(nvfuser_index_t\)threadIdx\.y\)"


def _meta(shape, dtype=torch.float32, stride=None):
    return torch.empty_strided(shape, stride or torch.empty(shape, device="meta").stride(), dtype=dtype, device="meta")


def _sum(dims, dtype=DataType.Float, keepdim=False):
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        fd.add_output(fd.ops.sum(fd.ops.cast(t0, DataType.Float), dims=dims, keepdim=keepdim))
    return build


def _max(dims):
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.max(t0, dims=dims))
    return build


def _var_mean(dims):
    def build(fd):
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        v, m = fd.ops.var_mean(fd.ops.cast(t0, DataType.Float), dims=dims, correction=1)
        fd.add_output(v)
        fd.add_output(m)
    return build


def _softmax_of(dtype):
    """Softmax over the last dim of a 2D `dtype` (bf16 or fp32) input, in float."""
    def build(fd):
        dt = DataType.BFloat16 if dtype == torch.bfloat16 else DataType.Float
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
        x = fd.ops.cast(t0, DataType.Float)
        m = fd.ops.max(x, dims=[1], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(x, m))
        s = fd.ops.sum(e, dims=[1], keepdim=True)
        fd.add_output(fd.ops.cast(fd.ops.div(e, s), dt))
    return build


_softmax = _softmax_of(torch.bfloat16)


def _rms_norm(fd):
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
    x = fd.ops.cast(t0, DataType.Float)
    ms = fd.ops.sum(fd.ops.mul(x, x), dims=[1], keepdim=True)
    n = fd.define_scalar(1e-6, dtype=DataType.Double)
    rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(ms, fd.ops.cast(x.size(1), DataType.Double)) if hasattr(x, "size") else ms, n))
    y = fd.ops.mul(fd.ops.mul(x, rstd), fd.ops.cast(fd.ops.broadcast_in_dim(w, shape=x.shape(), broadcast_dims=[1]), DataType.Float))
    fd.add_output(fd.ops.cast(y, DataType.BFloat16))


def _layer_norm(fd):
    t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
    x = fd.ops.cast(t0, DataType.Float)
    var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=True)
    eps = fd.define_scalar(1e-5, dtype=DataType.Double)
    y = fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, eps)))
    fd.add_output(fd.ops.cast(y, DataType.Half))
    fd.add_output(mean)


CASES = [
    ("sum_inner", _sum([1]), [_meta((16384, 4096))]),
    ("sum_inner_bf16", _sum([1], DataType.BFloat16), [_meta((8192, 8192), torch.bfloat16)]),
    ("sum_inner_one_row_grid", _sum([1]), [_meta((1, 1 << 24))]),
    ("sum_inner_odd", _sum([1]), [_meta((1025, 127))]),
    ("sum_outer", _sum([0]), [_meta((16384, 8192))]),
    ("sum_outer_keepdim", _sum([0], keepdim=True), [_meta((4097, 33))]),
    ("sum_all", _sum([0, 1]), [_meta((1000, 1000))]),
    ("max_middle", _max([1]), [_meta((8, 1025, 64))]),
    ("max_outer_two", _max([0, 1]), [_meta((7, 9, 1024))]),
    ("var_mean_inner", _var_mean([1]), [_meta((16384, 4096), torch.bfloat16)]),
    ("var_mean_outer", _var_mean([0]), [_meta((16384, 1024), torch.bfloat16)]),
    ("softmax", _softmax, [_meta((16384, 4096), torch.bfloat16)]),
    ("softmax_small", _softmax, [_meta((128, 1000), torch.bfloat16)]),
    ("layer_norm", _layer_norm, [_meta((2048, 16384), torch.float16)]),
]


def _code(build, inputs):
    with FusionDefinition() as fd:
        build(fd)
    return fd.cuda_code_for(inputs), fd


@pytest.mark.nvcc
def test_every_reduction_kernel_compiles_for_sm90():
    sources = [_code(build, inputs)[0] for _, build, inputs in CASES]
    assert all("fuser_reduction.cuh" in src for src in sources)
    assert compile_all(sources)[:4] == b"\x7fELF"


def _body_lines(src):
    lines = src.split("\n")
    start = next(i for i, line in enumerate(lines) if line.endswith(") {") and "__global__" not in line) + 1
    return [line.strip() for line in lines[start:]]


def test_every_kernel_waits_for_the_prior_grids_first():
    # the runtime launches generated kernels as programmatic dependents of the stream's
    # previous kernel: no global access may come before the wait. Every benchmark fusion's
    # kernels (pointwise, RNG, reductions, inner, outer and inner-outer persistent,
    # transpose, resize) and the cases above
    from fuser.benchmarks import fusions as F

    sources = [(name, _code(build, inputs)[0]) for name, build, inputs in CASES]
    for f in F.FUSIONS:
        fd = f.fusion_definition()
        sources += [(f.name, k.source) for k in fd._kernels_for(f.make_inputs("meta", f.shapes[-1]), "cuda_code_for")]
    assert any("fuser::Philox " in src for _, src in sources) and any("extern __shared__" in src for _, src in sources)
    for name, src in sources:
        body = [line for line in _body_lines(src) if not line.startswith(("fuser::Philox ", "extern __shared__"))]
        assert body[0] == "fuser::wait_for_prior_grids();", name
        assert sum("wait_for_prior_grids" in line for line in body) == 1, name


def test_inner_sum_uses_vectors_and_a_block_reduction():
    src, _ = _code(_sum([1]), [_meta((16384, 4096))])
    # (read once, and no full-size output: loaded evict-first)
    assert "fuser::load_vec_stream<float, 4>" in src and "fuser::load_vec<" not in src
    assert "block_allreduce_x" in src and "grid_" not in src


def test_full_size_outputs_keep_cached_loads():
    # softmax writes its rows: its loads keep the default cache policy (streaming them
    # measured 1-3% slower on an H100)
    src, _ = _code(_softmax_of(torch.float32), [_meta((16384, 4096))])
    assert "fuser::load_vec<float, 4>" in src and "load_vec_stream" not in src


def test_one_long_row_is_a_grid_reduction():
    src, _ = _code(_sum([1]), [_meta((1, 1 << 24))])
    assert "fuser::grid_arrive" in src and "fuser::grid_finish<true>" in src


def test_outer_sum_reduces_over_threadIdx_y():
    src, _ = _code(_sum([0]), [_meta((16384, 8192))])
    # a thread's 4 columns (its vector's lanes) combine over the block in one call; 128
    # column blocks, near the SM count, take their whole rows (OUTER_WHOLE_COLUMNS) in
    # blocks of 16 x 64 threads
    assert src.count("fuser::block_allreduce_tile_y<true, 16, 64>(acc") == 1 and "fuser::load_vec_stream<float, 4>" in src
    assert "grid_arrive" not in src
    assert "block_allreduce_y" not in src


def test_few_columns_and_rows_spread_over_narrow_tall_blocks():
    # sum over dim 0 of [128, 1000]: 500 vectors of 2 columns in 4-wide blocks (125 blocks,
    # not 8), every row loaded in one step of 32 thread rows x 4; the 2-element tile's
    # column allreduce then takes the shuffle path (4 warps x 2 values to read)
    src, _ = _code(_sum([0]), [_meta((128, 1000))])
    assert re.search(r"__launch_bounds__\(128\)", src) and "blockIdx.x) * 4 + ((nvfuser_index_t)threadIdx.x)) * 2" in src
    assert "(i0 + 128 - 1) / 128" in src and "float r0[8];" in src
    assert "fuser::block_allreduce_tile_y<true, 4, 32>(acc" in src  # (blockDim.x and .y fixed)
    # with rows enough to split over blocks, the wide block stays
    src, _ = _code(_sum([0]), [_meta((16384, 1000))])
    assert "blockIdx.x) * 16 + ((nvfuser_index_t)threadIdx.x)) * 4" in src and "grid_arrive" in src


def test_outer_reduction_takes_narrow_blocks_rather_than_sharing_rows():
    # sum over dim 0 of [2048, 16384]: 8 threads of 4-element vectors across a block (512
    # blocks, no partials across blocks), where 16-wide blocks would need 4 blocks a row
    for dtype, ctype in [(DataType.BFloat16, "__bfloat"), (DataType.Float, "float")]:
        tdtype = torch.bfloat16 if dtype == DataType.BFloat16 else torch.float32
        src, _ = _code(_sum([0], dtype), [_meta((2048, 16384), tdtype)])
        assert "blockIdx.x) * 8 + ((nvfuser_index_t)threadIdx.x)) * 4" in src, dtype
        assert f"load_vec_stream<{ctype}, 4>" in src and "grid_" not in src, dtype
    # too few columns for that even with 4-element vectors, or vectors already shorter
    # (8194 columns: 2-element ones), which were not measured: the rows are shared
    for shape in [(16384, 1024), (2048, 8194)]:
        src, _ = _code(_sum([0]), [_meta(shape)])
        assert "grid_arrive" in src, shape


@pytest.mark.nvcc
def test_few_rows_of_no_elements_compile():
    # [16, 0]: rows too few for the SMs and empty (GPU fuzz seed 9313 case 381 made a
    # register array of 0 vectors, which did not compile)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        p = fd.ops.prod(x, dims=[1])  # broadcast back over the row: a persistent kernel
        y = fd.ops.add(x, fd.ops.broadcast_in_dim(p, shape=x.shape(), broadcast_dims=[0]))
        fd.add_output(fd.ops.sum(y, dims=[1]))
        fd.add_output(fd.ops.sum(x, dims=[1]))
    src = fd.cuda_code_for([_meta((16, 0), torch.float16)])
    assert "block_allreduce_x" in src and "[0]" not in src
    assert compile_all([src])[:4] == b"\x7fELF"


def test_welford_rows_too_few_take_a_block_each():
    # var_mean over [128, 1000] fp32: 128 blocks of 128 threads holding 8 elements each;
    # with rows enough, 2 rows of 64 threads a block stay
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        v, m = fd.ops.var_mean(x, [1], correction=1)
        fd.add_output(v)
        fd.add_output(m)
    src = fd.cuda_code_for([_meta((128, 1000))])
    assert re.search(r"__launch_bounds__\(128\)", src) and "float r0[8];" in src
    assert re.search(ONE_ROW_A_BLOCK, src), src


@pytest.mark.parametrize("dtype,per_thread", [(torch.bfloat16, 8), (torch.float32, 8)])
def test_few_rows_take_a_block_each_and_more_threads_a_row(dtype, per_thread):
    # softmax over [128, 1000]: 128 blocks of 128 threads holding 8 elements each, where
    # rows enough take 4 rows of 64 threads holding 16
    ctype = "__bfloat" if dtype == torch.bfloat16 else "float"
    src, _ = _code(_softmax_of(dtype), [_meta((128, 1000), dtype)])
    assert re.search(r"__launch_bounds__\(128(, \d+)?\)", src) and f"{ctype} r0[{per_thread}];" in src
    assert re.search(ONE_ROW_A_BLOCK, src), src
    src, _ = _code(_softmax_of(dtype), [_meta((16384, 1000), dtype)])
    assert re.search(r"__launch_bounds__\(256(, \d+)?\)", src) and f"{ctype} r0[16];" in src


def test_outer_grid_reduction_combines_a_thread_s_lanes_together():
    src, _ = _code(_sum([0]), [_meta((16384, 1024))])
    assert src.count("fuser::grid_write_tile(acc") == 1 and src.count("fuser::grid_finish_tile_y(acc") == 1
    assert "grid_finish<" not in src


@pytest.mark.parametrize("rows", [16384, 32768, 12345, 65536, 4100])
@pytest.mark.parametrize("cols,dtype", [(1024, torch.bfloat16), (1024, torch.float32), (2048, torch.bfloat16),
                                        (1000, torch.float32)])
def test_outer_grid_reduction_gives_every_block_rows(rows, cols, dtype):
    # blocks sharing columns split the rows' steps evenly, ceil(steps / grid_y) a block:
    # the grid has no block past the last step (one would only write a partial of init
    # values for the last block to read)
    src, _ = _code(_sum([0], DataType.BFloat16 if dtype == torch.bfloat16 else DataType.Float),
                   [_meta((rows, cols), dtype)])
    m = re.search(r"steps = \(\(i0 \+ (\d+) - 1\) / \1 \+ (\d+) - 1\) / \2;", src)
    assert m, src[:2000]
    unit, grid_y = int(m.group(1)), int(m.group(2))
    steps = -(-rows // unit)
    per_block = -(-steps // grid_y)
    assert grid_y > 1 and (grid_y - 1) * per_block < steps, (unit, grid_y, steps)
    assert "fuser::grid_finish_tile_y(acc" in src


def test_var_mean_holds_short_rows_and_combines_welford_over_long_ones():
    # rows up to WELFORD_PERSISTENT_MAX (16384): held in registers, the mean then the
    # squared deviations from it as two float block reductions; longer rows: Welford
    # triples over a serial loop
    for shape in ((16384, 4096), (4096, 16384)):
        src, _ = _code(_var_mean([1]), [_meta(shape, torch.bfloat16)])
        assert src.count("block_allreduce_x") == 2 and "WelfordOp()" not in src
        assert "for (nvfuser_index_t s = 0" not in src
    src, _ = _code(_var_mean([1]), [_meta((1024, 16392), torch.bfloat16)])
    assert src.count("block_allreduce_x") == 1 and "fuser::WelfordOp()" in src
    assert "for (nvfuser_index_t s = 0" in src


def test_softmax_is_one_persistent_kernel():
    src, _ = _code(_softmax, [_meta((16384, 4096), torch.bfloat16)])
    assert src.count("__global__") == 1
    assert src.count("block_allreduce_x") == 2  # the max, then the sum of exponentials
    assert "for (nvfuser_index_t s = 0" not in src  # the row is held: no serial loop


def test_softmax_keeps_its_exponentials_across_the_sum():
    # exp runs once per element: the epilogue reads the kept values instead of recomputing
    src, _ = _code(_softmax, [_meta((16384, 4096), torch.bfloat16)])
    assert src.count("fuser::exp(") == 1


def test_persistent_passes_recompute_from_the_loaded_row():
    # after each block reduction the bf16 row's and weight's registers are laundered, so
    # the next pass converts them again instead of keeping floats live
    src, _ = _code(_rms_norm, [_meta((16384, 4096), torch.bfloat16), _meta((4096,), torch.bfloat16)])
    assert src.count("fuser::launder(r0);") == 1 and src.count("fuser::launder(r1);") == 1
    src, _ = _code(_layer_norm, [_meta((16384, 4096), torch.float16)])
    # the variance's second pass and the epilogue each start from the loaded row
    assert src.count("fuser::launder(r0);") == 2
    assert src.count("fuser::half_to_float(r0[") == 3


def test_persistent_block_reductions_alternate_scratch_without_a_trailing_barrier():
    src, _ = _code(_softmax, [_meta((16384, 4096), torch.bfloat16)])
    calls = [line for line in src.splitlines() if "block_allreduce_x" in line]
    assert len(calls) == 2 and all("block_allreduce_x<false, 256>" in c for c in calls)
    assert calls[0].rstrip().endswith("smem_Float);") and calls[1].rstrip().endswith("smem_Float_b);")
    # a (non-persistent) reduction kernel keeps the barrier that frees its scratch
    src, _ = _code(_sum([1]), [_meta((16384, 4096))])
    assert "block_allreduce_x<true, " in src and "<false" not in src


def test_block_reductions_take_a_row_of_at_most_256_threads_as_a_constant():
    """The warp loop unrolls for rows up to FIXED_BDX_MAX threads; wider rows read
    blockDim.x (the constant made 512-thread LayerNorm rows spill and run slower)."""
    cases = [((128, 1000), 128), ((16384, 4096), 256), ((2048, 16384), 512)]
    for shape, bdx in cases:
        src, _ = _code(_layer_norm, [_meta(shape, torch.float16)])
        assert re.search(rf"__launch_bounds__\({bdx}(, \d+)?\)", src), shape  # one row a block
        calls = [line for line in src.splitlines() if "block_allreduce_x" in line]
        assert calls
        want = f"block_allreduce_x<false, {bdx}>(" if bdx <= 256 else "block_allreduce_x<false>("
        assert all(want in c for c in calls), (shape, calls)


@pytest.mark.parametrize("cols,threads,per_thread", [(4096, 256, 16), (8192, 256, 32), (16384, 512, 32),
                                                     (32768, 1024, 32)])
def test_long_rows_hold_more_elements_per_thread_before_1024_threads(cols, threads, per_thread):
    src, _ = _code(_softmax, [_meta((64, cols), torch.bfloat16)])
    assert re.search(rf"__launch_bounds__\({threads}(, \d+)?\)", src) and f"__bfloat r0[{per_thread}];" in src


def test_rows_holding_many_input_bytes_take_more_threads():
    # LayerNorm fp32 over 16384 holds row, weight and bias: 512 threads would hold 384
    # bytes each; 1024 threads hold 192
    def layer_norm_affine(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5, dtype=DataType.Double))))
        y = fd.ops.add(fd.ops.mul(y, fd.ops.broadcast_in_dim(w, shape=x.shape(), broadcast_dims=[1])),
                       fd.ops.broadcast_in_dim(b, shape=x.shape(), broadcast_dims=[1]))
        fd.add_output(y)

    src, _ = _code(layer_norm_affine, [_meta((2048, 16384)), _meta((16384,)), _meta((16384,))])
    assert re.search(r"__launch_bounds__\(1024(, 1)?\)", src) and "float r0[16];" in src


def test_code_for_a_fusion_of_several_segments_from_cpu_inputs():
    # a row too long to hold is split into segments; the intermediates between them are
    # meta tensors beside the CPU inputs, which binding takes as shapes only
    with FusionDefinition() as fd:
        _softmax(fd)
    x = torch.randn(4, 1 << 17, dtype=torch.bfloat16)
    assert fd.cuda_code_for([x]).count("__global__") >= 2


def _case_sources():
    """(name, CUDA) of every reduction-case kernel, generated from meta copies of its inputs."""
    from reduction_cases import CASES as RCASES

    out = []
    for case in RCASES:
        if case.big:
            continue
        inputs = case.inputs("cpu")
        meta = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor)
                else x for x in inputs]
        with FusionDefinition() as fd:
            case.build(fd, inputs)
        try:
            out.append((case.name, fd.cuda_code_for(meta)))
        except RuntimeError as e:
            if "no segment of this fusion becomes a generated kernel" not in str(e):
                raise
    return out


@pytest.mark.nvcc
def test_every_reduction_case_generates_and_compiles():
    sources = [src for _, src in _case_sources()]
    assert len(sources) > 100
    assert compile_all(sources)[:4] == b"\x7fELF"


def _batch_norm(dtype: DataType):
    """Batch-norm training forward over channels-last [M, N]: statistics over M."""
    def build(fd):
        x0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        x = fd.ops.cast(x0, DataType.Float)
        var, mean = fd.ops.var_mean(x, dims=[0], correction=0, keepdim=False)
        inv = fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5, dtype=DataType.Double)))
        sh = x.shape()
        y = fd.ops.mul(fd.ops.sub(x, fd.ops.broadcast_in_dim(mean, shape=sh, broadcast_dims=[1])),
                       fd.ops.broadcast_in_dim(inv, shape=sh, broadcast_dims=[1]))
        y = fd.ops.add(fd.ops.mul(y, fd.ops.broadcast_in_dim(w, shape=sh, broadcast_dims=[1])),
                       fd.ops.broadcast_in_dim(b, shape=sh, broadcast_dims=[1]))
        fd.add_output(fd.ops.cast(y, dtype))
        fd.add_output(mean)
        fd.add_output(inv)
    return build


def _bn_inputs(m, n, dtype=torch.bfloat16):
    return [_meta((m, n), dtype), _meta((n,)), _meta((n,))]


@pytest.mark.nvcc
def test_outer_persistent_kernels_compile_for_sm90():
    sources = []
    for dt, tdt in ((DataType.BFloat16, torch.bfloat16), (DataType.Float, torch.float32)):
        for m, n in ((1000, 1024), (7, 3), (1, 127), (500, 4097), (64, 96)):
            src, _ = _code(_batch_norm(dt), _bn_inputs(m, n, tdt))
            assert src.count("__global__") == 1, (dt, m, n)
            sources.append(src)
    assert compile_all(sources)[:4] == b"\x7fELF"


def test_outer_persistent_holds_its_rows_and_allreduces_across_the_grid():
    src, _ = _code(_batch_norm(DataType.BFloat16), _bn_inputs(1000, 1024))
    # one kernel: rows loaded once, statistics combined over the block and the grid, which
    # synchronises (two blocks per SM fit, so all are resident), then y from registers
    assert src.count("__global__") == 1 and "__launch_bounds__(256, 2)" in src
    assert "fuser::grid_sync(semaphore);" in src and "grid_arrive" not in src
    assert len(re.findall(r"fuser::load_vec(_stream)?<__bfloat, 4>\(&r0\[", src)) == 1
    # the column statistics are written by one block of each column group
    assert "((nvfuser_index_t)blockIdx.y) == 0" in src


@pytest.mark.parametrize("m,n,dt", [(128, 1000, DataType.BFloat16), (256, 72, DataType.Float), (37, 5, DataType.Half)])
def test_rows_one_block_holds_are_reduced_without_a_grid_barrier(m, n, dt):
    """Rows that one block of narrow column groups holds (normalization.OUTER_ONE_BLOCK):
    one block per column group, a block reduction and no grid barrier; simulated against
    the reference on the CPU."""
    from kernel_sim import simulate_fusion

    tdt = dt.torch
    src, fd = _code(_batch_norm(dt), _bn_inputs(m, n, tdt))
    assert src.count("__global__") == 1 and "grid_sync" not in src and "semaphore" not in src
    torch.manual_seed(m + n)
    xs = [(torch.randn(m, n) + 2).to(tdt), torch.randn(n), torch.randn(n)]
    report = simulate_fusion(fd, xs)
    assert report.ok and report.status == "ok", str(report)


def test_rows_too_many_to_hold_are_not_outer_persistent():
    # [16384, 4096] bf16 cannot be held by the GPU's registers: the statistics and the
    # normalisation are separate kernels
    src, _ = _code(_batch_norm(DataType.BFloat16), _bn_inputs(16384, 4096))
    assert src.count("__global__") >= 2 and "grid_sync" not in src


def test_persistent_kernels_are_compiled_for_the_blocks_their_held_rows_allow():
    """A persistent kernel's __launch_bounds__ asks for as many blocks per SM as its held
    row and 16 more registers per thread allow (LayerNorm bf16 over 4096: 96 held bytes,
    40 registers: 6 blocks of 256 threads), never more than the SM's threads allow."""
    from fuser.benchmarks.fusions import by_name
    from fuser.scheduler.normalization import persistent_min_blocks
    from fuser.scheduler.runtime_info import DeviceLimits

    h100 = DeviceLimits.h100()
    assert persistent_min_blocks(h100, 256, 16 * 6) == 6
    assert persistent_min_blocks(h100, 256, 16 * 2) == 8  # 24 registers: the SM's 2048 threads bound it
    assert persistent_min_blocks(h100, 1024, 64 * 12) == 1
    f = by_name("layernorm_fwd_bf16")
    src = f.fusion_definition().cuda_code_for(f.make_inputs("meta", (16384, 4096)))
    assert "__launch_bounds__(256, 6)" in src


def test_a_register_cap_that_spills_is_dropped_when_the_kernel_loads(monkeypatch):
    # no GPU: a stand-in loader reports local memory for the capped source only
    import fuser.driver.kernel_cache as kc
    import fuser.driver.launch as launch
    from fuser.kernel import prepare_kernel
    from fuser.scheduler import SchedulerType

    loaded = []

    class Loaded:
        def __init__(self, cubin, name, fmt, device=None, dependent_launch=False):
            self.local_size_bytes = 40 if b"__launch_bounds__(256, " in cubin else 0
            loaded.append(self.local_size_bytes)

    monkeypatch.setattr(kc, "get_cubin", lambda source, **k: source.encode())
    monkeypatch.setattr(launch, "CompiledKernel", Loaded)
    k = prepare_kernel(SchedulerType.inner_persistent, _code(_softmax, [_meta((8, 4096), torch.bfloat16)])[1].fusion,
                       [_meta((8, 4096), torch.bfloat16)])
    assert k.kernel.min_blocks and "__launch_bounds__(256, " in k.source
    k.load()
    assert loaded == [40, 0]
    assert k.kernel.min_blocks == 0 and "__launch_bounds__(256)" in k.source


@pytest.mark.nvcc
def test_int_max_and_min_keep_their_negated_operands(tmp_path):
    # ptxas (CUDA 12.8 to 13.3, sm_90) fuses a chain of signed int max / min into VIMNMX3 and
    # can drop a negated source (GPU fuzz seed 9302 case 278: max over dim 1 of int32(-x)
    # gave max(x0, -x1) per thread): the header compares ints in the unsigned order, which
    # ptxas lowers to the unsigned forms with each negation an instruction of its own
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        pytest.skip("needs cuobjdump (the CUDA toolkit's) to read the SASS")

    def negated_max(fd):
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        fd.add_output(fd.ops.max(fd.ops.cast(fd.ops.neg(x), DataType.Int32), dims=[1]))
        fd.add_output(fd.ops.min(fd.ops.clamp(fd.ops.neg(x), -3, 4), dims=[1]))
        fd.add_output(fd.ops.max(fd.ops.relu(fd.ops.cast(fd.ops.neg(x), DataType.Int32)), dims=[1]))

    src, _ = _code(negated_max, [_meta((4, 4), torch.int64)])
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compile_all([src]))
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    # (a signed two-input VIMNMX stays: the index math's max(steps, 1))
    fused = re.findall(r"\b(VIMNMX3|VIADDMNMX)(\.U32)?\b", sass)
    assert fused and all(u == ".U32" for _, u in fused), sorted(set(fused))
