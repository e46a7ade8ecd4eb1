"""Compiled kernels on a real GPU: NVRTC (or nvcc) -> CUBIN -> pycuda load on PyTorch's
context -> launch on PyTorch's current stream, checked against PyTorch on fresh random inputs
with outputs pre-filled with NaN. Skipped without a CUDA GPU or without pycuda."""
import contextlib
import math
import threading
import time

import pytest

from fuser.driver import kernel_cache, nvrtc
from fuser.driver.nvrtc import CompilationError

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _needs_cuda_and_pycuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("pycuda.driver")


HEADER_NAME = "fuser_runtime.cuh"
# Half precision without cuda_fp16.h: a half is its 16 bits in an unsigned short, converted
# with the PTX cvt instructions.
HEADER = r"""#pragma once
namespace fuser {
__device__ __forceinline__ float h2f(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
}  // namespace fuser
"""

AXPY_F32 = r"""
extern "C" __global__ void axpy_f32(float a, const float* __restrict__ x, const float* __restrict__ y,
                                    float* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
"""

AXPY_F16 = r"""#include "fuser_runtime.cuh"
extern "C" __global__ void axpy_f16(float a, const unsigned short* __restrict__ x,
                                    const unsigned short* __restrict__ y,
                                    unsigned short* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fuser::f2h(a * fuser::h2f(x[i]) + fuser::h2f(y[i]));
}
"""

REVERSE_SMEM = r"""
extern "C" __global__ void reverse_rows(const float* __restrict__ x, float* __restrict__ out, int row) {
  extern __shared__ float buf[];
  const float* xr = x + (long long)blockIdx.x * row;
  float* outr = out + (long long)blockIdx.x * row;
  for (int i = threadIdx.x; i < row; i += blockDim.x) buf[i] = xr[i];
  __syncthreads();
  for (int i = threadIdx.x; i < row; i += blockDim.x) outr[i] = buf[row - 1 - i];
}
"""

AXPY_FORMAT = "fPPPq"
#: no FMA contraction, so the kernel rounds exactly as PyTorch's separate mul and add do
OPTIONS = ("--fmad=false",)
BLOCK = 256


def _compile(source, **kw):
    """NVRTC when it is found (test_nvrtc_is_found insists on it), else nvcc, so the launch
    tests still run and say something if discovery is what broke."""
    kw.setdefault("arch", nvrtc.device_arch())
    if nvrtc.nvrtc_available():
        return nvrtc.compile_cubin(source, **kw)
    return nvrtc.compile_cubin_nvcc(source, **kw)


def _kernel(source, name, fmt, **kw):
    from fuser.driver.launch import CompiledKernel

    return CompiledKernel(_compile(source, options=OPTIONS, **kw), name, fmt)


def _axpy_case(n, dtype=torch.float32):
    a = float(torch.randn(()).item())
    x = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.randn(n, device="cuda", dtype=dtype)
    out = torch.full((n + 1,), math.nan, device="cuda", dtype=dtype)  # one guard element past n
    want = (a * x.float() + y.float()).to(dtype)
    return a, x, y, out, want


def _grid(n):
    return ((n + BLOCK - 1) // BLOCK, 1, 1)


def _check_axpy(out, want, n):
    torch.testing.assert_close(out[:n], want)
    assert not torch.isnan(out[:n]).any(), "some outputs were not written"
    assert torch.isnan(out[n]), "the kernel wrote past n"


# ------------------------------------------------------------------------------------------------


def test_nvrtc_is_found():
    assert nvrtc.nvrtc_available(), nvrtc._load()[1]
    assert nvrtc.nvrtc_version() >= (12, 0)
    assert nvrtc.compiler_identity().startswith("nvrtc ")
    print(f"NVRTC {nvrtc.nvrtc_version()} from {nvrtc.nvrtc_library_path()}")


def test_nvrtc_cubin_with_in_memory_header():
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC not found (test_nvrtc_is_found reports why)")
    cubin = nvrtc.compile_cubin(AXPY_F16, arch=nvrtc.device_arch(), headers={HEADER_NAME: HEADER})
    assert cubin[:4] == b"\x7fELF"


def test_device_arch_matches_torch():
    major, minor = torch.cuda.get_device_capability()
    assert nvrtc.device_arch() == f"sm_{major}{minor}"
    assert nvrtc.device_arch(torch.device("cuda", 0)) == nvrtc.device_arch(0)


@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_axpy_float32(n):
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    a, x, y, out, want = _axpy_case(n)
    k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n))
    torch.cuda.synchronize()
    _check_axpy(out, want, n)


def test_axpy_float16_via_ptx_cvt():
    n = 65_537
    k = _kernel(AXPY_F16, "axpy_f16", AXPY_FORMAT, headers={HEADER_NAME: HEADER})
    a, x, y, out, want = _axpy_case(n, torch.float16)
    k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n))
    torch.cuda.synchronize()
    _check_axpy(out, want, n)


def test_function_attributes():
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    assert 0 < k.num_regs <= 255
    assert k.local_size_bytes >= 0
    assert 0 < k.max_threads_per_block <= 1024
    assert k.shared_size_bytes == 0


def test_loading_does_not_change_torchs_current_device_or_stream():
    dev = torch.cuda.current_device()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
        assert torch.cuda.current_stream() == s
    assert torch.cuda.current_device() == dev
    torch.ones(4, device="cuda").sum().item()  # PyTorch still works on its context


def test_launch_runs_on_the_current_torch_stream():
    n = 1 << 20
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    s = torch.cuda.Stream()
    for cycles in (int(5e8), int(4e9)):  # ~0.3 s, then ~2 s if the first was too short to see
        a, x, y, out, want = _axpy_case(n)
        s.wait_stream(torch.cuda.current_stream())  # inputs are made on the default stream
        snapshot = torch.empty_like(out)  # allocated up front: no allocator work below
        with torch.cuda.stream(s):
            torch.cuda._sleep(cycles)  # keeps s busy: whatever is queued on s after it waits
            k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n))
        # The default stream does not wait for s (PyTorch's side streams are non-blocking):
        # a copy made there now sees the output as it is while s still sleeps.
        snapshot.copy_(out)
        torch.cuda.current_stream().synchronize()
        s_was_busy = not s.query()
        s.synchronize()
        _check_axpy(out, want, n)  # correct once s is done
        if s_was_busy:
            assert torch.isnan(snapshot[:n]).all(), (
                "the kernel ran before the sleep queued ahead of it on the side stream finished, "
                "so it was not launched on torch.cuda.current_stream()"
            )
            return
    pytest.fail("the side stream finished its sleep before it could be observed; lengthen the sleep")


def test_pycuda_cannot_take_a_raw_stream_handle():
    """Why side streams go through the driver API: pycuda's launch extracts a pycuda Stream
    (``py::extract<const stream &>``) and a raw CUstream int is refused before any launch."""
    import struct

    n = 64
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    a, x, y, out, want = _axpy_case(n)
    s = torch.cuda.Stream()
    params = struct.pack(AXPY_FORMAT, a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n)
    with pytest.raises(TypeError):  # Boost.Python: no converter from int to pycuda::stream
        k.function._launch_kernel((1, 1, 1), (BLOCK, 1, 1), params, 0, s.cuda_stream)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()


def test_launch_on_an_explicit_stream_handle():
    n = 4099
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    s = torch.cuda.Stream()
    a, x, y, out, want = _axpy_case(n)
    s.wait_stream(torch.cuda.current_stream())
    k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n), stream=s.cuda_stream)
    s.synchronize()
    _check_axpy(out, want, n)
    a, x, y, out, want = _axpy_case(n)
    s.wait_stream(torch.cuda.current_stream())
    k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n), stream=s)
    s.synchronize()
    _check_axpy(out, want, n)


def test_default_stream_launch_is_ordered_with_torch_work():
    n = 1 << 16
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    a, x, y, out, want = _axpy_case(n)
    torch.cuda._sleep(int(2e8))
    k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n))
    result = out[:n].clone()  # queued after the kernel on the same stream
    torch.cuda.current_stream().synchronize()
    torch.testing.assert_close(result, want)


def test_launch_from_a_new_thread():
    n = 5000
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    a, x, y, out, want = _axpy_case(n)
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n))
            torch.cuda.synchronize()
        except Exception as e:  # reported in the main thread
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    _check_axpy(out, want, n)


def test_warm_disk_cache_does_not_compile(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSER_DISABLE", raising=False)
    arch = nvrtc.device_arch()
    kernel_cache.clear()
    try:
        cubin = kernel_cache.get_cubin(AXPY_F16, arch=arch, options=OPTIONS, headers={HEADER_NAME: HEADER})
        assert kernel_cache.stats()["compiles"] == 1
        assert len(list(tmp_path.glob("*.cubin"))) == 1
        kernel_cache.clear()  # as in a new process: memory empty, disk warm

        def refuse(*args, **kwargs):
            raise AssertionError("compiled although the disk cache held the kernel")

        for name in ("compile", "compile_cubin", "compile_cubin_nvcc"):
            monkeypatch.setattr(nvrtc, name, refuse)
        again = kernel_cache.get_cubin(AXPY_F16, arch=arch, options=OPTIONS, headers={HEADER_NAME: HEADER})
        assert again == cubin
        assert kernel_cache.stats()["disk_hits"] == 1
    finally:
        kernel_cache.clear()

    from fuser.driver.launch import CompiledKernel

    k = CompiledKernel(again, "axpy_f16", AXPY_FORMAT)  # the cached CUBIN runs
    n = 777
    a, x, y, out, want = _axpy_case(n, torch.float16)
    k.launch(_grid(n), (BLOCK, 1, 1), (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n))
    torch.cuda.synchronize()
    _check_axpy(out, want, n)


def test_dynamic_shared_memory_above_48k():
    optin = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", 0)
    row = 25_000  # floats: 100,000 bytes of shared memory per block
    smem = row * 4
    if optin and optin < smem:
        pytest.skip(f"device allows only {optin} bytes of shared memory per block")
    k = _kernel(REVERSE_SMEM, "reverse_rows", "PPi")
    rows = 5
    x = torch.randn(rows, row, device="cuda")
    want = x.flip(1)

    out = torch.full_like(x, math.nan)
    k.launch((rows, 1, 1), (512, 1, 1), (x.data_ptr(), out.data_ptr(), row), shared_mem=smem)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, want, rtol=0, atol=0)

    # the same on a side stream (the driver-API path), which must inherit the opt-in
    s = torch.cuda.Stream()
    out2 = torch.full_like(x, math.nan)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        k.launch((rows, 1, 1), (512, 1, 1), (x.data_ptr(), out2.data_ptr(), row), shared_mem=smem)
    s.synchronize()
    torch.testing.assert_close(out2, want, rtol=0, atol=0)

    # a fresh kernel whose first large launch is on the side stream
    k2 = _kernel(REVERSE_SMEM, "reverse_rows", "PPi")
    out3 = torch.full_like(x, math.nan)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        k2.launch((rows, 1, 1), (512, 1, 1), (x.data_ptr(), out3.data_ptr(), row), shared_mem=smem)
    s.synchronize()
    torch.testing.assert_close(out3, want, rtol=0, atol=0)


def test_too_much_shared_memory_is_a_clear_error():
    from fuser.driver.launch import KernelLaunchError

    optin = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", 0)
    if not optin:
        pytest.skip("PyTorch does not report the opt-in shared memory limit")
    k = _kernel(REVERSE_SMEM, "reverse_rows", "PPi")
    x = torch.randn(1, 16, device="cuda")
    with pytest.raises(KernelLaunchError, match="shared memory"):
        k.launch((1, 1, 1), (32, 1, 1), (x.data_ptr(), x.data_ptr(), 16), shared_mem=optin + 4096)


def test_nvrtc_compile_error_has_log_and_source_lines():
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC not found (test_nvrtc_is_found reports why)")
    bad = AXPY_F32.replace("if (i < n)", "int broken = ;\n  if (i < n)")
    with pytest.raises(CompilationError) as info:
        nvrtc.compile_cubin(bad, arch=nvrtc.device_arch())
    msg = str(info.value)
    assert msg.startswith("NVRTC ")
    assert "expected an expression" in msg and "expected an expression" in info.value.log
    assert "kernel.cu, line 5:" in msg and "> 5 |   int broken = ;" in msg

    with pytest.raises(CompilationError, match="fuser_runtime.cuh"):
        nvrtc.compile_cubin(AXPY_F16, arch=nvrtc.device_arch())  # header not supplied


def test_many_launches_on_both_paths_give_the_right_result():
    """Launches on both paths, many in a row, give the right result; their host time per
    launch is printed (timed in `asv_bench`, not asserted here)."""
    n = 1024
    k = _kernel(AXPY_F32, "axpy_f32", AXPY_FORMAT)
    a, x, y, out, want = _axpy_case(n)
    args = (a, x.data_ptr(), y.data_ptr(), out.data_ptr(), n)
    grid, block = _grid(n), (BLOCK, 1, 1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    times = {}
    for label, stream in (("default stream (pycuda)", None), ("side stream (driver API)", s)):
        ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with ctx:
            for _ in range(200):
                k.launch(grid, block, args)
            torch.cuda.synchronize()
            reps = 2000
            t0 = time.perf_counter()
            for _ in range(reps):
                k.launch(grid, block, args)
            times[label] = (time.perf_counter() - t0) / reps * 1e6
        torch.cuda.synchronize()
    print("host time per launch: " + ", ".join(f"{k_}: {v:.1f} us" for k_, v in times.items()))
    _check_axpy(out, want, n)


# --- programmatic dependent launch (sm_90+) ----------------------------------------------------

#: writes 2 * x after spinning; with `trigger` its blocks let dependents launch first thing
SLOW_DOUBLE = r"""
extern "C" __global__ void slow_double(const float* __restrict__ x, float* __restrict__ out, int n, long long spin,
                                       int trigger) {
  if (trigger) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  long long t0 = clock64();
  while (clock64() - t0 < spin) {}
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}
"""
#: out = in + 1, after waiting for the grids before it (the generated kernels' prologue)
WAITING_INC = r"""#include "fuser_runtime.cuh"
extern "C" __global__ void waiting_inc(const float* __restrict__ in, float* __restrict__ out, int n) {
  fuser::wait_for_prior_grids();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}
"""


def _sm90():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or later")


def _dependent_pair():
    from fuser.codegen.ops import runtime_headers
    from fuser.driver.launch import CompiledKernel

    first = _kernel(SLOW_DOUBLE, "slow_double", "PPiqi")
    second = CompiledKernel(_compile(WAITING_INC, options=OPTIONS, headers=runtime_headers()), "waiting_inc", "PPi",
                            dependent_launch=True)
    return first, second


@pytest.mark.parametrize("side_stream", [False, True])
def test_a_dependent_launch_waits_for_the_previous_kernels_writes(side_stream):
    # the first kernel lets its dependents launch at once and writes only after a ~1 ms spin:
    # the second, launched as its dependent (the driver may start it early: "opportunistically"),
    # must still read every value it wrote
    _sm90()
    first, second = _dependent_pair()
    assert second.dependent_launch and not first.dependent_launch
    n = 1 << 20
    s = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    for _ in range(3):
        x = torch.randn(n, device="cuda")
        mid = torch.full((n,), math.nan, device="cuda")
        out = torch.full((n,), math.nan, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            first.launch(_grid(n), (BLOCK, 1, 1), (x.data_ptr(), mid.data_ptr(), n, int(2e6), 1))
            second.launch(_grid(n), (BLOCK, 1, 1), (mid.data_ptr(), out.data_ptr(), n))
        s.synchronize()
        torch.testing.assert_close(out, 2 * x + 1)


def test_generated_kernels_chain_as_dependents():
    # two segments (segment_set): the sum's kernel reads the product the first kernel
    # writes, launched back to back as its dependent, over fresh inputs each time
    from fuser import FusionDefinition

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t1 = fd.ops.segment_set(fd.ops.mul(t0, t0))
        fd.add_output(fd.ops.sum(fd.ops.add(t1, t0), dims=[1]))
    xs = [torch.randn(4096, 8192, device="cuda") for _ in range(4)]
    outs = [fd.execute([x])[0] for x in xs for _ in range(3)]
    for k, out in enumerate(outs):
        x = xs[k // 3]
        torch.testing.assert_close(out, (x * x + x).sum(1), rtol=1e-4, atol=1e-2)
    kernels = [r.kernel for r in fd._entry.last_runner.runs]
    assert len(kernels) == 2 and all(k and k.compiled is not None for k in kernels)
    sm90 = torch.cuda.get_device_capability()[0] >= 9
    assert all(k.compiled.dependent_launch == sm90 for k in kernels)


def _pointwise_and_sum():
    from fuser import FusionDefinition

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.add(t0, fd.define_scalar(1.0)))
        fd.add_output(fd.ops.sum(t0, dims=[1]))
    return fd


def test_generated_kernels_wait_for_an_early_triggering_kernel():
    # the kernel before them lets its dependents launch at once and writes their input only
    # after a ~1 ms spin: the generated kernels (launched as its dependents) must read it
    _sm90()
    first, _ = _dependent_pair()
    fd = _pointwise_and_sum()
    rows, cols = 512, 2048
    fd.execute([torch.randn(rows, cols, device="cuda")])  # compiled and loaded ahead
    for _ in range(3):
        x = torch.randn(rows, cols, device="cuda")
        mid = torch.full((rows, cols), math.nan, device="cuda")
        first.launch(_grid(rows * cols), (BLOCK, 1, 1), (x.data_ptr(), mid.data_ptr(), rows * cols, int(2e6), 1))
        plus, total = fd.execute([mid])
        torch.testing.assert_close(plus, 2 * x + 1)
        torch.testing.assert_close(total, (2 * x).sum(1), rtol=1e-4, atol=1e-3)


def test_dependent_launches_are_captured_in_a_cuda_graph():
    # captured launches keep their programmatic dependencies; replays see each new input
    from fuser import FusionDefinition

    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        t1 = fd.ops.segment_set(fd.ops.mul(t0, t0))
        fd.add_output(fd.ops.sum(fd.ops.add(t1, t0), dims=[1]))
    x = torch.randn(1024, 4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fd.execute([x])  # compiled and loaded outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = fd.execute([x])
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        out.fill_(math.nan)
        graph.replay()
        torch.testing.assert_close(out, (x * x + x).sum(1), rtol=1e-4, atol=1e-2)
