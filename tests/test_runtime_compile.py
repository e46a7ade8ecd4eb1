"""Compiling kernels without a GPU: the nvcc path, NVRTC discovery and its errors, the on-disk
CUBIN cache, and the launcher's Python logic against stand-ins for pycuda and the driver."""
import ctypes
import os
import struct
import sys
import types
from pathlib import Path

import pytest

from fuser.driver import kernel_cache, launch, nvrtc
from fuser.driver.nvrtc import CompilationError, CompilerNotFoundError

HEADER_NAME = "fuser_runtime.cuh"
HEADER = """#pragma once
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
SOURCE = """#include "fuser_runtime.cuh"
extern "C" __global__ void axpy_f16(float a, const unsigned short* x, const unsigned short* y,
                                    unsigned short* out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fuser::f2h(a * fuser::h2f(x[i]) + fuser::h2f(y[i]));
}
"""
ELF_MAGIC = b"\x7fELF"


# ------------------------------------------------------------------------------------------------
# nvcc


@pytest.mark.nvcc
def test_nvcc_compiles_with_in_memory_header():
    cubin = nvrtc.compile_cubin_nvcc(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER})
    assert len(cubin) > 0 and cubin[:4] == ELF_MAGIC
    assert b"axpy_f16" in cubin  # extern "C": the symbol is not mangled


@pytest.mark.nvcc
def test_nvcc_header_in_a_subdirectory_and_options():
    src = '#include "sub/defs.cuh"\nextern "C" __global__ void k(float* x) { x[threadIdx.x] = SCALE; }\n'
    cubin = nvrtc.compile_cubin_nvcc(
        src, headers={"sub/defs.cuh": "#define SCALE 2.0f\n"}, options=["-DUNUSED=1", "-lineinfo"]
    )
    assert cubin[:4] == ELF_MAGIC


@pytest.mark.nvcc
def test_nvcc_syntax_error_shows_log_and_offending_line():
    bad = SOURCE.replace("if (i < n)", "int broken = ;\n  if (i < n)")
    with pytest.raises(CompilationError) as info:
        nvrtc.compile_cubin_nvcc(bad, headers={HEADER_NAME: HEADER})
    msg = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "expected an expression" in msg  # nvcc's own words
    assert "kernel.cu, line 5:" in msg
    assert "> 5 |   int broken = ;" in msg  # the numbered, marked source line
    assert "  4 |" in msg and "  6 |" in msg  # with context around it
    assert "nvcc" in msg
    assert "expected an expression" in info.value.log and info.value.source == bad
    assert "fuser-nvcc-" not in msg  # the temporary directory is not in the message


@pytest.mark.nvcc
def test_nvcc_error_inside_a_header_shows_the_header_line():
    with pytest.raises(CompilationError) as info:
        nvrtc.compile_cubin_nvcc(SOURCE, headers={HEADER_NAME: HEADER.replace("float f;", "float f = ;")})
    assert "fuser_runtime.cuh, line 4:" in str(info.value)
    assert "> 4 |   float f = ;" in str(info.value)


@pytest.mark.nvcc
def test_nvcc_missing_header_is_a_compilation_error():
    with pytest.raises(CompilationError, match="fuser_runtime.cuh") as info:
        nvrtc.compile_cubin_nvcc(SOURCE)
    assert "> 1 | #include" in str(info.value)


@pytest.mark.nvcc
def test_compile_falls_back_to_nvcc_without_nvrtc(monkeypatch):
    monkeypatch.delenv("FUSER_NVRTC", raising=False)
    monkeypatch.setattr(nvrtc, "_load", lambda: (None, "no NVRTC in this test"))
    assert nvrtc.compiler_identity().startswith("nvcc ")
    assert nvrtc.compile(SOURCE, headers={HEADER_NAME: HEADER})[:4] == ELF_MAGIC


def test_arch_and_header_names_are_checked():
    with pytest.raises(ValueError, match="real GPU architecture"):
        nvrtc.compile_cubin_nvcc(SOURCE, arch="compute_90")
    with pytest.raises(ValueError, match="real GPU architecture"):
        nvrtc.compile_cubin(SOURCE, arch="90")
    with pytest.raises(ValueError, match="relative path"):
        nvrtc.compile_cubin_nvcc(SOURCE, headers={"../escape.cuh": ""})
    with pytest.raises(ValueError, match="relative path"):
        nvrtc.compile_cubin_nvcc(SOURCE, headers={"/abs.cuh": ""})


def test_nvcc_missing_gives_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvrtc, "nvcc_path", lambda: None)
    with pytest.raises(CompilerNotFoundError, match="nvcc was not found"):
        nvrtc.compile_cubin_nvcc(SOURCE)


# ------------------------------------------------------------------------------------------------
# NVRTC discovery and errors


@pytest.fixture
def fresh_nvrtc(monkeypatch):
    """Forget which NVRTC was loaded, so each test searches again (and restores afterwards)."""
    monkeypatch.setattr(nvrtc, "_loaded", {})
    monkeypatch.delenv("FUSER_NVRTC", raising=False)


def test_nvrtc_discovery_never_crashes(fresh_nvrtc):
    ok = nvrtc.nvrtc_available()
    assert isinstance(ok, bool)
    if ok:
        assert nvrtc.nvrtc_version() >= (11, 0)
        assert nvrtc.nvrtc_library_path()
    else:
        assert nvrtc.nvrtc_library_path() is None
        with pytest.raises(CompilerNotFoundError, match="NVRTC"):
            nvrtc.nvrtc_version()


def test_nvrtc_compiles_when_available():
    """Runs where NVRTC is found (e.g. beside a CUDA build of PyTorch, or FUSER_NVRTC set)."""
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC not found here")
    cubin = nvrtc.compile_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER}, options=["--fmad=false"])
    assert cubin[:4] == ELF_MAGIC and b"axpy_f16" in cubin
    assert nvrtc.compiler_identity() == "nvrtc {}.{}".format(*nvrtc.nvrtc_version())
    assert nvrtc.compile(SOURCE, headers={HEADER_NAME: HEADER})[:4] == ELF_MAGIC
    bad = SOURCE.replace("if (i < n)", "int broken = ;\n  if (i < n)")
    with pytest.raises(CompilationError) as info:
        nvrtc.compile_cubin(bad, headers={HEADER_NAME: HEADER})
    msg = str(info.value)
    assert msg.startswith("NVRTC ") and "expected an expression" in msg
    assert "> 5 |   int broken = ;" in msg
    with pytest.raises(CompilationError, match='cannot open source file "fuser_runtime.cuh"'):
        nvrtc.compile_cubin(SOURCE)  # the header was not supplied
    with pytest.raises(CompilationError, match="gpu-architecture"):
        nvrtc.compile_cubin(SOURCE, arch="sm_9999", headers={HEADER_NAME: HEADER})


def test_nvrtc_not_found_is_false_and_compile_cubin_says_what_to_do(fresh_nvrtc, monkeypatch):
    monkeypatch.setattr(nvrtc, "nvrtc_candidates", lambda: [])
    assert nvrtc.nvrtc_available() is False
    with pytest.raises(CompilerNotFoundError) as info:
        nvrtc.compile_cubin(SOURCE, headers={HEADER_NAME: HEADER})
    assert "NVRTC (libnvrtc.so) was not found" in str(info.value)
    assert "FUSER_NVRTC" in str(info.value)


def test_fuser_nvrtc_nonexistent_is_a_clear_error(fresh_nvrtc, monkeypatch):
    monkeypatch.setenv("FUSER_NVRTC", "/nonexistent/libnvrtc.so.13")
    assert nvrtc.nvrtc_available() is False
    with pytest.raises(CompilerNotFoundError) as info:
        nvrtc.compile_cubin(SOURCE)
    msg = str(info.value)
    assert "FUSER_NVRTC='/nonexistent/libnvrtc.so.13'" in msg
    assert "could not be loaded" in msg and "unset it" in msg
    # An explicit library that fails is not silently replaced by nvcc.
    with pytest.raises(CompilerNotFoundError, match="FUSER_NVRTC"):
        nvrtc.compile(SOURCE)
    with pytest.raises(CompilerNotFoundError, match="FUSER_NVRTC"):
        nvrtc.compiler_identity()


def test_fuser_nvrtc_pointing_at_another_library(fresh_nvrtc, monkeypatch):
    monkeypatch.setenv("FUSER_NVRTC", "libm.so.6")  # loads, but has no nvrtcVersion
    assert nvrtc.nvrtc_available() is False
    with pytest.raises(CompilerNotFoundError, match="could not be loaded as NVRTC"):
        nvrtc.compile_cubin(SOURCE)


def test_nvrtc_candidates_search_order(monkeypatch, tmp_path):
    site = tmp_path / "site-packages"
    torch_lib = site / "torch" / "lib"
    cu13 = site / "nvidia" / "cu13" / "lib"
    old = site / "nvidia" / "cuda_nvrtc" / "lib"
    for d in (torch_lib, cu13, old):
        d.mkdir(parents=True)
    for f in (
        torch_lib / "libnvrtc.so.12",
        cu13 / "libnvrtc.so.13",
        cu13 / "libnvrtc-builtins.so.13.0",
        old / "libnvrtc.so.12",
        old / "libnvrtc.alt.so.12",
    ):
        f.write_bytes(b"")
    cuda_home = tmp_path / "cuda"
    (cuda_home / "lib64").mkdir(parents=True)
    (cuda_home / "lib64" / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.setattr(nvrtc, "_torch_dir", lambda: site / "torch")
    monkeypatch.setattr(nvrtc.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    got = [c for c in nvrtc.nvrtc_candidates() if c.startswith(str(tmp_path))]
    assert got == [
        str(torch_lib / "libnvrtc.so.12"),
        str(cu13 / "libnvrtc.so.13"),  # newest wheel first
        str(old / "libnvrtc.so.12"),
        str(cuda_home / "lib64" / "libnvrtc.so.13"),
    ]
    assert not any("builtins" in c or ".alt." in c for c in got)


def test_nvrtc_style_log_is_formatted_with_source_lines():
    src = "line1\nline2\nline3 bad\nline4\n"
    log = 'kernel.cu(3): error: identifier "bad" is undefined\n\n1 error detected in the compilation of "kernel.cu".'
    msg = nvrtc.format_error("NVRTC 13.0", log, src, name="kernel.cu", headers={})
    assert msg.startswith("NVRTC 13.0 failed to compile kernel.cu:")
    assert 'identifier "bad" is undefined' in msg
    assert "> 3 | line3 bad" in msg and "  1 | line1" in msg and "  4 | line4" in msg
    # No recognisable error location: the log alone.
    assert "line" not in nvrtc.format_error("NVRTC", "something odd", src, name="kernel.cu", headers={}).split(":", 1)[1].replace("something odd", "")


def test_device_arch_without_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert nvrtc.device_arch() == "sm_90"
    assert nvrtc.device_arch(torch.device("cpu")) == "sm_90"


# ------------------------------------------------------------------------------------------------
# kernel cache


class FakeCompiler:
    """Stands in for nvrtc.compile: counts calls, returns an ELF-looking blob per input."""

    def __init__(self):
        self.calls = 0

    def __call__(self, source, *, name, arch, options, headers):
        self.calls += 1
        return ELF_MAGIC + f"{arch}|{options}|{sorted(headers.items())}|{source}".encode()


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """An empty cache in a temporary directory, compiled by a FakeCompiler."""
    d = tmp_path / "kernels"
    monkeypatch.setenv("FUSER_CACHE_DIR", str(d))
    monkeypatch.delenv("FUSER_DISABLE", raising=False)
    compiler = FakeCompiler()
    monkeypatch.setattr(nvrtc, "compile", compiler)
    monkeypatch.setattr(nvrtc, "compiler_identity", lambda: "fake 1.0")
    kernel_cache.clear()
    yield types.SimpleNamespace(dir=d, compiler=compiler)
    kernel_cache.clear()


def _refuse(*args, **kwargs):
    raise AssertionError("compiled although the kernel was cached")


def test_cache_keys_differ_when_any_input_differs(cache):
    base = dict(arch="sm_90", options=("-lineinfo",), headers={"a.cuh": "A", "b.cuh": "B"})
    k = kernel_cache.cache_key(SOURCE, **base)
    assert len(k) == 64 and int(k, 16) >= 0
    assert kernel_cache.cache_key(SOURCE, **base) == k
    # header order in the mapping does not matter
    assert kernel_cache.cache_key(SOURCE, **{**base, "headers": {"b.cuh": "B", "a.cuh": "A"}}) == k
    variants = [
        kernel_cache.cache_key(SOURCE + " ", **base),
        kernel_cache.cache_key(SOURCE, **{**base, "arch": "sm_80"}),
        kernel_cache.cache_key(SOURCE, **{**base, "options": ()}),
        kernel_cache.cache_key(SOURCE, **{**base, "options": ("-lineinfo", "--use_fast_math")}),
        kernel_cache.cache_key(SOURCE, **{**base, "headers": {"a.cuh": "A", "b.cuh": "B2"}}),
        kernel_cache.cache_key(SOURCE, **{**base, "headers": {"a.cuh": "A", "c.cuh": "B"}}),
        kernel_cache.cache_key(SOURCE, **{**base, "headers": {"a.cuh": "A"}}),
        kernel_cache.cache_key(SOURCE, **base, compiler="nvrtc 13.0"),
        kernel_cache.cache_key(SOURCE, **base, compiler="nvcc 13.0.88"),
    ]
    assert len({k, *variants}) == len(variants) + 1
    # option order can change the result, so it changes the key
    two = dict(arch="sm_90", headers={})
    assert kernel_cache.cache_key(SOURCE, options=("-a", "-b"), **two) != kernel_cache.cache_key(SOURCE, options=("-b", "-a"), **two)


def test_cache_key_includes_fuser_version(cache, monkeypatch):
    k = kernel_cache.cache_key(SOURCE, arch="sm_90")
    monkeypatch.setattr(kernel_cache, "_fuser_version", lambda: "999.0")
    assert kernel_cache.cache_key(SOURCE, arch="sm_90") != k


def test_hits_do_not_compile(cache, monkeypatch):
    first = kernel_cache.get_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER})
    assert cache.compiler.calls == 1 and first[:4] == ELF_MAGIC
    monkeypatch.setattr(nvrtc, "compile", _refuse)
    assert kernel_cache.get_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER}) == first  # memory
    kernel_cache.clear()  # a new process: only the disk remains
    assert kernel_cache.get_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER}) == first  # disk
    assert kernel_cache.stats() == {"memory_hits": 0, "disk_hits": 1, "compiles": 0, "corrupt": 0}
    assert kernel_cache.get_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER}) == first
    assert kernel_cache.stats()["memory_hits"] == 1


def test_different_inputs_compile_separately(cache):
    a = kernel_cache.get_cubin(SOURCE, arch="sm_90")
    b = kernel_cache.get_cubin(SOURCE, arch="sm_80")
    c = kernel_cache.get_cubin(SOURCE, arch="sm_90", options=["-lineinfo"])
    assert len({a, b, c}) == 3 and cache.compiler.calls == 3
    assert len(list(cache.dir.glob("*.cubin"))) == 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"",  # empty
        lambda data: data[:-5],  # truncated
        lambda data: b"garbage" * 10,  # not ours
        lambda data: data[:-1] + bytes([data[-1] ^ 0xFF]),  # one flipped byte
    ],
    ids=["empty", "truncated", "garbage", "bitflip"],
)
def test_corrupt_entry_is_recompiled_and_rewritten(cache, damage):
    good = kernel_cache.get_cubin(SOURCE, arch="sm_90")
    path = kernel_cache.entry_path(kernel_cache.cache_key(SOURCE, arch="sm_90"))
    assert path.is_file()
    path.write_bytes(damage(path.read_bytes()))
    kernel_cache.clear()
    assert kernel_cache.get_cubin(SOURCE, arch="sm_90") == good
    assert cache.compiler.calls == 2
    assert kernel_cache.stats()["corrupt"] == 1
    kernel_cache.clear()
    assert kernel_cache.get_cubin(SOURCE, arch="sm_90") == good  # the rewritten entry is sound
    assert kernel_cache.stats() == {"memory_hits": 0, "disk_hits": 1, "compiles": 0, "corrupt": 0}


def test_unreadable_entry_is_recompiled(cache, monkeypatch):
    kernel_cache.get_cubin(SOURCE, arch="sm_90")
    kernel_cache.clear()
    real = Path.read_bytes

    def failing(self):
        if self.suffix == ".cubin":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", failing)
    kernel_cache.get_cubin(SOURCE, arch="sm_90")
    assert cache.compiler.calls == 2 and kernel_cache.stats()["corrupt"] == 1


def test_cache_dir_locations(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("FUSER_CACHE_DIR")
    assert kernel_cache.cache_dir() == tmp_path / "xdg" / "fuser" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernel_cache.cache_dir() == tmp_path / "home" / ".cache" / "fuser" / "kernels"


def test_fuser_cache_dir_is_honoured(cache, monkeypatch, tmp_path):
    kernel_cache.get_cubin(SOURCE, arch="sm_90")
    assert [p.suffix for p in cache.dir.iterdir()] == [".cubin"]
    other = tmp_path / "other"
    monkeypatch.setenv("FUSER_CACHE_DIR", str(other))
    kernel_cache.get_cubin(SOURCE, arch="sm_90")  # another cache: compiles again, there
    assert cache.compiler.calls == 2
    assert len(list(other.glob("*.cubin"))) == 1


def test_fuser_disable_kernel_cache_always_compiles(cache, monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", "remat,kernel_cache")
    a = kernel_cache.get_cubin(SOURCE, arch="sm_90")
    b = kernel_cache.get_cubin(SOURCE, arch="sm_90")
    assert a == b and cache.compiler.calls == 2
    assert not cache.dir.exists() or not any(cache.dir.iterdir())
    monkeypatch.setenv("FUSER_DISABLE", "remat")
    kernel_cache.get_cubin(SOURCE, arch="sm_90")
    kernel_cache.get_cubin(SOURCE, arch="sm_90")
    assert cache.compiler.calls == 3


def test_atomic_write_leaves_no_temporary_files(cache):
    for i in range(5):
        kernel_cache.get_cubin(SOURCE + f"// {i}\n", arch="sm_90")
    names = sorted(p.name for p in cache.dir.iterdir())
    assert len(names) == 5 and all(n.endswith(".cubin") and not n.startswith(".") for n in names)


def test_failed_write_warns_and_cleans_up(cache, monkeypatch):
    def no_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kernel_cache.os, "replace", no_replace)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        cubin = kernel_cache.get_cubin(SOURCE, arch="sm_90")
    assert cubin[:4] == ELF_MAGIC
    assert list(cache.dir.iterdir()) == []  # the temporary file was removed


def test_unwritable_cache_dir_still_compiles(cache, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUSER_CACHE_DIR", str(blocker / "kernels"))
    with pytest.warns(RuntimeWarning, match="FUSER_CACHE_DIR"):
        assert kernel_cache.get_cubin(SOURCE, arch="sm_90")[:4] == ELF_MAGIC


def test_compile_errors_pass_through_and_are_not_cached(cache, monkeypatch):
    def broken(source, **kw):
        raise CompilationError("boom", log="kernel.cu(1): error: boom", source=source)

    monkeypatch.setattr(nvrtc, "compile", broken)
    for _ in range(2):
        with pytest.raises(CompilationError, match="boom"):
            kernel_cache.get_cubin(SOURCE, arch="sm_90")
    assert not cache.dir.exists() or not any(cache.dir.iterdir())


@pytest.mark.nvcc
def test_cache_with_real_nvcc(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSER_DISABLE", raising=False)
    monkeypatch.delenv("FUSER_NVRTC", raising=False)
    monkeypatch.setattr(nvrtc, "_load", lambda: (None, "no NVRTC in this test"))
    kernel_cache.clear()
    try:
        cubin = kernel_cache.get_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER})
        assert cubin[:4] == ELF_MAGIC
        assert kernel_cache.stats()["compiles"] == 1
        kernel_cache.clear()
        monkeypatch.setattr(nvrtc, "compile_cubin_nvcc", _refuse)
        assert kernel_cache.get_cubin(SOURCE, arch="sm_90", headers={HEADER_NAME: HEADER}) == cubin
    finally:
        kernel_cache.clear()


# ------------------------------------------------------------------------------------------------
# The launcher's logic, against fake pycuda and driver objects (the real thing is exercised by
# tests/test_runtime_launch_cuda.py on a GPU)


class FakeCudaError(Exception):
    pass


class FakeFunction:
    def __init__(self, name):
        self.name = name
        self.launches = []
        self.attributes = {}
        self.prepared = None
        self.fail_next = None
        self.require_tuples = True

    def prepare(self, fmt):
        self.prepared = fmt

    def _launch_kernel(self, grid, block, buf, shared, stream):
        if self.require_tuples and not (isinstance(grid, tuple) and isinstance(block, tuple)):
            raise TypeError("Python argument types did not match C++ signature")  # Boost's ArgumentError
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        self.launches.append((grid, block, bytes(buf), shared, stream))

    def set_attribute(self, attr, value):
        self.attributes[attr] = value

    def __getattr__(self, name):
        values = {"num_regs": 18, "local_size_bytes": 0, "max_threads_per_block": 1024, "shared_size_bytes": 0}
        if name in values:
            return values[name]
        raise AttributeError(name)


class FakeContext:
    stack = []

    def push(self):
        FakeContext.stack.append(self)

    @staticmethod
    def pop():
        FakeContext.stack.pop()


def make_fake_pycuda():
    driver = types.ModuleType("pycuda.driver")
    driver.Error = FakeCudaError
    driver.functions = {}
    driver.loaded = []

    class Device:
        def __init__(self, index):
            self.index = index

        def retain_primary_context(self):
            return FakeContext()

    class Module:
        def get_function(self, name):
            if name not in driver.functions:
                raise FakeCudaError(f"cuModuleGetFunction failed: named symbol not found ({name})")
            return driver.functions[name]

    def module_from_buffer(buf):
        driver.loaded.append(bytes(buf))
        return Module()

    driver.Device = Device
    driver.Context = FakeContext
    driver.module_from_buffer = module_from_buffer
    driver.function_attribute = types.SimpleNamespace(MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES")
    pkg = types.ModuleType("pycuda")
    pkg.__path__ = []
    pkg.driver = driver
    auto = types.ModuleType("pycuda.autoprimaryctx")
    return pkg, driver, auto


class FakeLib:
    def __init__(self, drv):
        self.drv = drv
        self.set_attrs = []
        self.loads = 0

    def cuCtxSetCurrent(self, ctx):
        self.drv.current = ctx
        return 0

    def cuModuleLoadData(self, out, image):
        self.loads += 1
        out._obj.value = 0x1000 + self.loads
        return 0

    def cuModuleGetFunction(self, out, module, name):
        out._obj.value = 0x2000
        self.drv.function_name = name
        return 0

    def cuModuleUnload(self, module):
        return 0

    def cuFuncSetAttribute(self, fn, attr, value):
        self.set_attrs.append((fn, attr, value))
        return 0


class FakeDriver:
    """Stands in for launch._CudaDriver; records cuLaunchKernel calls with the parameter
    bytes read back through the `extra` array, as the real driver would."""

    PRIMARY = 0xC0

    def __init__(self):
        self.current = self.PRIMARY
        self.lib = FakeLib(self)
        self.launches = []
        self.fail_next = 0

    def check(self, code, what):
        if code:
            raise launch.KernelLaunchError(f"{what} failed: {code}")

    def error(self, code):
        return f"CUDA_ERROR_{code}"

    def primary_context(self, index):
        return self.PRIMARY

    def current_context(self):
        return self.current

    def max_shared_optin(self, index):
        return 232448

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if self.fail_next:
            code, self.fail_next = self.fail_next, 0
            return code
        if extra is None:
            buf = b""
        else:
            ptrs = list(extra)
            assert ptrs[0] == 1 and ptrs[2] == 2 and ptrs[4] in (0, None)
            size = ctypes.c_size_t.from_address(ptrs[3]).value
            buf = ctypes.string_at(ptrs[1], size)
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), shared, stream, buf))
        return 0

    fail_ex_next = 0

    def cuLaunchKernelEx(self, cfg_ref, fn, params, extra):
        if self.fail_ex_next:
            code, self.fail_ex_next = self.fail_ex_next, 0
            return code
        cfg = cfg_ref._obj
        attrs = [(cfg.attrs[i].id, cfg.attrs[i].value[0]) for i in range(cfg.num_attrs)]
        rc = self.cuLaunchKernel(fn, cfg.grid_x, cfg.grid_y, cfg.grid_z, cfg.block_x, cfg.block_y, cfg.block_z,
                                 cfg.shared_mem, cfg.stream or 0, params, extra)
        if rc == 0:
            self.launches[-1] += (attrs,)
        return rc


@pytest.fixture
def fake_cuda(monkeypatch):
    pkg, driver, auto = make_fake_pycuda()
    monkeypatch.setitem(sys.modules, "pycuda", pkg)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)
    monkeypatch.setitem(sys.modules, "pycuda.autoprimaryctx", auto)
    monkeypatch.setattr(launch, "_require_pycuda", lambda: None)
    monkeypatch.setattr(launch, "_primary_contexts", {})  # never mix fakes with real contexts
    drv = FakeDriver()
    monkeypatch.setattr(launch, "_driver", lambda: drv)
    monkeypatch.setattr(launch, "_driver_instance", None)
    streams = {"current": 0}
    monkeypatch.setattr(launch, "current_stream_handle", lambda index: streams["current"])
    FakeContext.stack = []
    driver.functions["axpy"] = FakeFunction("axpy")
    return types.SimpleNamespace(driver=driver, drv=drv, streams=streams, fn=driver.functions["axpy"])


FMT = "fPPPq"
ARGS = (2.5, 0x7F0000001000, 0x7F0000002000, 0x7F0000003000, 1000)


def test_kernel_loads_through_pycuda_on_the_primary_context(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF-cubin", "axpy", FMT, device=0)
    assert fake_cuda.driver.loaded == [b"\x7fELF-cubin"]
    assert fake_cuda.fn.prepared == FMT
    assert FakeContext.stack == []  # pushed for the load, popped again
    assert (k.num_regs, k.local_size_bytes, k.max_threads_per_block) == (18, 0, 1024)
    assert "axpy" in repr(k)


def test_default_stream_launch_goes_through_pycuda(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    k.launch((4, 1, 1), (256, 1, 1), ARGS)
    assert fake_cuda.fn.launches == [((4, 1, 1), (256, 1, 1), struct.pack(FMT, *ARGS), 0, None)]
    assert fake_cuda.drv.launches == [] and fake_cuda.drv.lib.loads == 0


def test_current_torch_stream_launch_goes_through_the_driver(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    fake_cuda.streams["current"] = 0xABC0
    k.launch((4, 1, 1), (256, 1, 1), ARGS)
    k.launch((8, 1, 1), (128, 1, 1), ARGS[:-1] + (7,), shared_mem=1024)
    assert fake_cuda.fn.launches == []
    assert fake_cuda.drv.lib.loads == 1 and fake_cuda.drv.function_name == b"axpy"  # loaded once
    assert fake_cuda.drv.launches == [
        (0x2000, (4, 1, 1), (256, 1, 1), 0, 0xABC0, struct.pack(FMT, *ARGS)),
        (0x2000, (8, 1, 1), (128, 1, 1), 1024, 0xABC0, struct.pack(FMT, *ARGS[:-1], 7)),
    ]


def test_explicit_stream_handles_and_objects(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    k.launch((1, 1, 1), (32, 1, 1), ARGS, stream=0x55)
    k.launch((1, 1, 1), (32, 1, 1), ARGS, stream=types.SimpleNamespace(cuda_stream=0x66))  # torch.cuda.Stream
    k.launch((1, 1, 1), (32, 1, 1), ARGS, stream=0)  # the legacy default stream
    assert [x[4] for x in fake_cuda.drv.launches] == [0x55, 0x66]
    assert len(fake_cuda.fn.launches) == 1
    with pytest.raises(TypeError, match="stream must be"):
        k.launch((1, 1, 1), (32, 1, 1), ARGS, stream="s")


def test_large_shared_memory_opts_in_once_on_both_paths(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    k.launch((1, 1, 1), (32, 1, 1), ARGS, shared_mem=48 * 1024)  # no opt-in needed
    assert fake_cuda.fn.attributes == {}
    k.launch((1, 1, 1), (32, 1, 1), ARGS, shared_mem=100_000)
    k.launch((1, 1, 1), (32, 1, 1), ARGS, shared_mem=90_000)
    assert fake_cuda.fn.attributes == {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 100_000}
    fake_cuda.streams["current"] = 0x77  # the driver copy inherits the opt-in when loaded ...
    k.launch((1, 1, 1), (32, 1, 1), ARGS, shared_mem=100_000)
    assert fake_cuda.drv.lib.set_attrs == [(0x2000, 8, 100_000)]
    k.launch((1, 1, 1), (32, 1, 1), ARGS, shared_mem=150_000)  # ... and follows later raises
    assert fake_cuda.fn.attributes["MAX_DYNAMIC_SHARED_SIZE_BYTES"] == 150_000
    assert fake_cuda.drv.lib.set_attrs[-1][1:] == (8, 150_000)
    assert [x[3] for x in fake_cuda.drv.launches] == [100_000, 150_000]


def test_wrong_arguments_are_a_clear_type_error(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    with pytest.raises(TypeError, match=r"takes parameters 'fPPPq' \(5 letters\); got 4 arguments"):
        k.launch((1, 1, 1), (32, 1, 1), ARGS[:-1])
    with pytest.raises(TypeError, match=r"data_ptr\(\)"):
        k.launch((1, 1, 1), (32, 1, 1), (1.0, object(), 0, 0, 1))
    fake_cuda.streams["current"] = 0x99
    with pytest.raises(TypeError, match="got 4 arguments"):
        k.launch((1, 1, 1), (32, 1, 1), ARGS[:-1])


def test_bad_format_and_cubin_are_rejected(fake_cuda):
    with pytest.raises(ValueError, match="bad param_format"):
        launch.CompiledKernel(b"\x7fELF", "axpy", "PZ", device=0)
    with pytest.raises(ValueError, match="native alignment"):
        launch.CompiledKernel(b"\x7fELF", "axpy", "<Pq", device=0)
    with pytest.raises(ValueError, match="non-empty"):
        launch.CompiledKernel(b"", "axpy", "P", device=0)
    with pytest.raises(launch.KernelLaunchError, match="cannot load kernel 'nope'.*extern"):
        launch.CompiledKernel(b"\x7fELF", "nope", "P", device=0)
    assert FakeContext.stack == []


def test_grid_given_as_lists_still_launches(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    k.launch([2, 1, 1], [64, 1, 1], ARGS)
    assert fake_cuda.fn.launches[0][:2] == ((2, 1, 1), (64, 1, 1))


def test_missing_context_on_a_new_thread_is_set_and_retried(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    fake_cuda.drv.current = 0
    fake_cuda.fn.fail_next = FakeCudaError("cuLaunchKernel failed: invalid device context")
    k.launch((1, 1, 1), (32, 1, 1), ARGS)
    assert fake_cuda.drv.current == FakeDriver.PRIMARY and len(fake_cuda.fn.launches) == 1
    # a genuine launch failure is reported with the launch configuration
    fake_cuda.fn.fail_next = FakeCudaError("cuLaunchKernel failed: too many resources requested for launch")
    with pytest.raises(launch.KernelLaunchError, match=r"too many resources.*block=\(32, 1, 1\)"):
        k.launch((1, 1, 1), (32, 1, 1), ARGS)
    fake_cuda.streams["current"] = 0x42
    fake_cuda.drv.fail_next = 701
    with pytest.raises(launch.KernelLaunchError, match="CUDA_ERROR_701.*stream=0x42"):
        k.launch((1, 1, 1), (32, 1, 1), ARGS)


def test_driver_path_refuses_another_devices_context(fake_cuda):
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    fake_cuda.drv.current = 0xD1  # some other device's context is current
    with pytest.raises(launch.KernelLaunchError, match=r"torch.cuda.device\(0\)"):
        k.launch((1, 1, 1), (32, 1, 1), ARGS, stream=0x10)


def test_kernel_without_parameters(fake_cuda):
    fake_cuda.driver.functions["noargs"] = FakeFunction("noargs")
    k = launch.CompiledKernel(b"\x7fELF", "noargs", "", device=0)
    k.launch((1, 1, 1), (1, 1, 1), ())
    k.launch((1, 1, 1), (1, 1, 1), (), stream=0x10)
    assert fake_cuda.driver.functions["noargs"].launches[0][2] == b""
    assert fake_cuda.drv.launches[0][-1] == b""


def test_without_pycuda_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(launch.KernelLaunchError, match="pip install pycuda"):
        launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)


def test_module_files_have_no_stray_state():
    # the modules import without a GPU, pycuda or NVRTC, and expose what the docs say
    for name in ("compile", "compile_cubin", "compile_cubin_nvcc", "nvrtc_available", "nvrtc_version", "device_arch"):
        assert callable(getattr(nvrtc, name))
    for name in ("get_cubin", "cache_dir", "clear", "cache_key"):
        assert callable(getattr(kernel_cache, name))
    assert issubclass(CompilationError, RuntimeError) and issubclass(CompilerNotFoundError, RuntimeError)
    assert os.fspath(kernel_cache.cache_dir())


def test_dependent_launch_goes_through_cuLaunchKernelEx_on_every_stream(fake_cuda, monkeypatch):
    # a kernel that waits for the grids before it is launched with programmatic stream
    # serialization (attribute 6 = 1), on the default stream as on others; a kernel that
    # does not wait, or a device without support, never is
    monkeypatch.setattr(launch, "_dependent_launch_supported", lambda index: True)
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0, dependent_launch=True)
    assert k.dependent_launch
    k.launch((3, 2, 1), (64, 2, 1), ARGS, shared_mem=256)
    k.launch((1, 1, 1), (32, 1, 1), ARGS, stream=0x10)
    first, second = fake_cuda.drv.launches
    assert first[1:5] == ((3, 2, 1), (64, 2, 1), 256, 0) and first[5] == struct.pack(FMT, *ARGS)
    assert first[6] == [(6, 1)] and second[4] == 0x10 and second[6] == [(6, 1)]
    assert fake_cuda.fn.launches == []  # not through pycuda
    # a launch failing both ways says so, and how to turn dependent launches off
    fake_cuda.drv.fail_ex_next = fake_cuda.drv.fail_next = 700
    with pytest.raises(launch.KernelLaunchError, match=r"CUDA_ERROR_700.*grid=\(1, 1, 1\).*FUSER_DISABLE=pdl"), \
            pytest.warns(RuntimeWarning):
        k.launch((1, 1, 1), (32, 1, 1), ARGS)

    plain = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0)
    assert not plain.dependent_launch
    plain.launch((1, 1, 1), (32, 1, 1), ARGS)
    assert len(fake_cuda.fn.launches) == 1 and len(fake_cuda.drv.launches) == 2
    monkeypatch.setattr(launch, "_dependent_launch_supported", lambda index: False)
    assert not launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0, dependent_launch=True).dependent_launch


def test_dependent_launches_can_be_disabled(monkeypatch):
    monkeypatch.setenv("FUSER_DISABLE", "pdl")
    assert not launch._dependent_launch_supported(0)  # (decided before asking the device)


def test_launch_config_structs_match_cuda_h():
    # CUlaunchAttribute and CUlaunchConfig as cuda.h (CUDA 12 and 13) lays them out
    A, C = launch._LaunchAttribute, launch._LaunchConfig
    assert ctypes.sizeof(A) == 72 and A.value.offset == 8 and ctypes.alignment(A) == 8
    assert ctypes.sizeof(C) == 56
    assert [getattr(C, f).offset for f in ("shared_mem", "stream", "attrs", "num_attrs")] == [24, 32, 40, 48]
    a = A()
    a.value[0] = 1  # programmaticStreamSerializationAllowed: the int at the union's start
    assert ctypes.string_at(ctypes.addressof(a) + 8, 4) == (1).to_bytes(4, sys.byteorder)


def test_a_refused_dependent_launch_falls_back_to_a_plain_one(fake_cuda, monkeypatch):
    monkeypatch.setattr(launch, "_dependent_launch_supported", lambda index: True)
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0, dependent_launch=True)
    fake_cuda.drv.fail_ex_next = 1  # CUDA_ERROR_INVALID_VALUE
    with pytest.warns(RuntimeWarning, match="refused a programmatic dependent launch"):
        k.launch((2, 1, 1), (64, 1, 1), ARGS, stream=0x10)
    assert not k.dependent_launch
    (launched,) = fake_cuda.drv.launches
    assert len(launched) == 6 and launched[1:5] == ((2, 1, 1), (64, 1, 1), 0, 0x10)  # cuLaunchKernel, no attrs
    grid = [3, 1, 1]  # later launches take the plain paths, lists and all
    k.launch(grid, [64, 1, 1], ARGS)
    assert fake_cuda.fn.launches[0][:2] == ((3, 1, 1), (64, 1, 1))


def test_a_dependent_launch_reads_grids_given_as_lists_afresh(fake_cuda, monkeypatch):
    monkeypatch.setattr(launch, "_dependent_launch_supported", lambda index: True)
    k = launch.CompiledKernel(b"\x7fELF", "axpy", FMT, device=0, dependent_launch=True)
    grid = [1, 1, 1]
    k.launch(grid, (32, 1, 1), ARGS)
    grid[0] = 4  # the same list, changed in place
    k.launch(grid, (32, 1, 1), ARGS)
    assert [x[1] for x in fake_cuda.drv.launches] == [(1, 1, 1), (4, 1, 1)]
