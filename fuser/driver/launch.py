"""Loading a CUBIN on PyTorch's CUDA context and launching its kernel on PyTorch's current stream.

`CompiledKernel` loads the module with pycuda (``module_from_buffer``) on the *primary*
context of the kernel's device, which is the context PyTorch uses, so ``tensor.data_ptr()``
values are valid kernel arguments and pycuda never creates a context of its own.

Streams (what pycuda 2026.1 allows, read from its source):

* ``Function.prepared_async_call(grid, block, stream, *args)`` packs the arguments and calls
  ``Function._launch_kernel(grid, block, arg_buf, shared, stream)``. In C++ that is
  ``function::launch_kernel(py::tuple, py::tuple, py::object, unsigned, py::object stream_py)``
  whose ``PYCUDA_PARSE_STREAM_PY`` does ``py::extract<const stream &>(stream_py)`` unless the
  object is None (then stream 0). A raw ``CUstream`` integer is therefore rejected.
* ``pycuda.driver.Stream`` is bound as ``init<unsigned int>(flags=0)`` and its constructor
  always calls ``cuStreamCreate``; ``handle`` is a read-only property. A pycuda Stream cannot
  wrap an existing handle such as ``torch.cuda.current_stream().cuda_stream``.
* pycuda's ``Function`` and ``Module`` expose no ``CUfunction``/``CUmodule`` handle.

So the launch takes the cheapest path that is correct for the stream at hand:

* PyTorch's default (legacy) stream, handle 0: ``Function._launch_kernel(grid, block,
  params, shared_mem, None)`` directly, skipping ``prepared_async_call``'s Python (its
  ``_set_block_shape``, keyword handling and texture-reference loop);
* any other stream: the CUDA driver API through ctypes (``libcuda.so.1``): ``cuLaunchKernel``
  with the packed parameter buffer (``CU_LAUNCH_PARAM_BUFFER_POINTER``) on the raw handle,
  using a ``CUfunction`` from a second load of the same CUBIN (``cuModuleLoadData``) into the
  same primary context, made on first use.

* a kernel made with ``dependent_launch=True`` (it starts by waiting for the grids before it:
  every generated kernel, see ``fuser::wait_for_prior_grids``), on a GPU of compute capability
  9.0 or more, on any stream: ``cuLaunchKernelEx`` with programmatic stream serialization
  (programmatic dependent launch), so that its blocks are launched as the previous kernel's
  last blocks exit instead of after its completion (the previous kernel's writes are made
  visible before the wait returns). Back-to-back kernels then do not pay the whole launch gap.
  ``FUSER_DISABLE=pdl`` (read when a kernel is loaded) launches them as any other.

All paths pack the arguments with one precompiled ``struct.Struct`` built from pycuda's
format letters ("P" pointer, "i" int32, "q" int64, "f" float32, "d" float64, ...; native
alignment, as pycuda packs them).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import importlib
import importlib.util
import struct
import sys
import threading
import warnings
from typing import Any, Iterator, Sequence

__all__ = ["CompiledKernel", "KernelLaunchError", "DEFAULT_SHARED_MEM_LIMIT"]

#: Dynamic shared memory a kernel may use without opting in (48 KiB on every GPU since Volta).
DEFAULT_SHARED_MEM_LIMIT = 48 * 1024

# CUDA driver API constants (cuda.h)
_CUDA_SUCCESS = 0
_CUDA_ERROR_INVALID_CONTEXT = 201
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_CU_LAUNCH_PARAM_END = 0
_CU_LAUNCH_PARAM_BUFFER_POINTER = 1
_CU_LAUNCH_PARAM_BUFFER_SIZE = 2
_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, padding, and a 64-byte value union (here one int)."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint64 * 8)]


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``: grid, block, dynamic shared bytes, stream and attributes."""

    _fields_ = [("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared_mem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


class KernelLaunchError(RuntimeError):
    """Loading or launching a compiled kernel failed; the message says which kernel and why."""


# ----------------------------------------------------------------------------------------------
# pycuda, imported only when a kernel is loaded


_NEEDS_PYCUDA = (
    "running compiled kernels needs pycuda{why}; install it with `pip install pycuda` (or `pip install fuser[cuda]`)"
)


def _require_pycuda() -> None:
    """Fail early, before touching the driver, when pycuda is not installed."""
    if importlib.util.find_spec("pycuda") is None:
        raise KernelLaunchError(_NEEDS_PYCUDA.format(why=" (it is not installed)"))


def _pycuda() -> Any:
    """``pycuda.driver``, after ``pycuda.autoprimaryctx`` has initialised CUDA and made a
    primary context current (the one PyTorch uses)."""
    try:
        # initialises CUDA and pushes device 0's primary context (popped again at exit)
        importlib.import_module("pycuda.autoprimaryctx")
        cuda = importlib.import_module("pycuda.driver")
    except ImportError as e:
        raise KernelLaunchError(_NEEDS_PYCUDA.format(why=f" ({e})")) from e
    except Exception as e:  # pycuda's own errors: no driver, no device
        raise KernelLaunchError(f"pycuda could not initialise CUDA: {type(e).__name__}: {e}") from e
    return cuda


_primary_contexts: dict[int, Any] = {}


def _primary_context(cuda: Any, index: int) -> Any:
    """pycuda's handle on device `index`'s primary context (retained once, kept)."""
    ctx = _primary_contexts.get(index)
    if ctx is None:
        ctx = cuda.Device(index).retain_primary_context()
        _primary_contexts[index] = ctx
    return ctx


@contextlib.contextmanager
def primary_context_pushed(index: int) -> Iterator[Any]:
    """``pycuda.driver`` with device `index`'s primary context pushed (for loading a module
    there); afterwards whatever context PyTorch had current on this thread is current again,
    so PyTorch's idea of the current device never changes."""
    _require_pycuda()
    drv = _driver()
    before = drv.current_context()
    cuda = _pycuda()
    _primary_context(cuda, index).push()
    try:
        yield cuda
    finally:
        cuda.Context.pop()
        if before and drv.current_context() != before:
            drv.check(drv.lib.cuCtxSetCurrent(before), "cuCtxSetCurrent")


# ----------------------------------------------------------------------------------------------
# The CUDA driver API through ctypes, for launches on non-default streams


class _CudaDriver:
    """The few libcuda entry points the launcher needs, with their signatures."""

    def __init__(self) -> None:
        path = ctypes.util.find_library("cuda") or "libcuda.so.1"
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise KernelLaunchError(f"cannot load the CUDA driver library (libcuda.so.1): {e}") from e
        self.lib = lib
        c_int, c_uint, c_void_p, c_char_p = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_char_p
        P = ctypes.POINTER
        sigs: dict[str, list[Any]] = {
            "cuInit": [c_uint],
            "cuDeviceGet": [P(c_int), c_int],
            "cuDeviceGetAttribute": [P(c_int), c_int, c_int],
            "cuDevicePrimaryCtxRetain": [P(c_void_p), c_int],
            "cuCtxGetCurrent": [P(c_void_p)],
            "cuCtxSetCurrent": [c_void_p],
            "cuModuleLoadData": [P(c_void_p), c_void_p],
            "cuModuleUnload": [c_void_p],
            "cuModuleGetFunction": [P(c_void_p), c_void_p, c_char_p],
            "cuFuncSetAttribute": [c_void_p, c_int, c_int],
            "cuLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, c_void_p, c_void_p],
            "cuOccupancyMaxActiveBlocksPerMultiprocessor": [P(c_int), c_void_p, c_int, ctypes.c_size_t],
            "cuGetErrorName": [c_int, P(c_char_p)],
            "cuGetErrorString": [c_int, P(c_char_p)],
        }
        for name, argtypes in sigs.items():
            fn = getattr(lib, name)
            fn.restype = c_int
            fn.argtypes = argtypes
        self.cuLaunchKernel = lib.cuLaunchKernel
        #: None where the driver predates CUDA 12.0, which added it
        self.cuLaunchKernelEx = getattr(lib, "cuLaunchKernelEx", None)
        if self.cuLaunchKernelEx is not None:
            self.cuLaunchKernelEx.restype = c_int
            self.cuLaunchKernelEx.argtypes = [P(_LaunchConfig), c_void_p, c_void_p, c_void_p]
        self.check(lib.cuInit(0), "cuInit")
        self._contexts: dict[int, int] = {}

    def error(self, code: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(code, ctypes.byref(name))
        self.lib.cuGetErrorString(code, ctypes.byref(text))
        n = name.value.decode() if name.value else f"CUresult {code}"
        t = text.value.decode() if text.value else "unknown error"
        return f"{n}: {t}"

    def check(self, code: int, what: str) -> None:
        if code != _CUDA_SUCCESS:
            raise KernelLaunchError(f"{what} failed: {self.error(code)}")

    def primary_context(self, index: int) -> int:
        ctx = self._contexts.get(index)
        if ctx is None:
            dev, handle = ctypes.c_int(), ctypes.c_void_p()
            self.check(self.lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
            self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(handle), dev), "cuDevicePrimaryCtxRetain")
            ctx = self._contexts[index] = handle.value or 0
        return ctx

    def current_context(self) -> int:
        handle = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(handle)), "cuCtxGetCurrent")
        return handle.value or 0

    def max_shared_optin(self, index: int) -> int:
        dev, value = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        self.check(
            self.lib.cuDeviceGetAttribute(ctypes.byref(value), _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
            "cuDeviceGetAttribute",
        )
        return value.value


_driver_instance: _CudaDriver | None = None
_driver_lock = threading.Lock()


def _driver() -> _CudaDriver:
    """The process's `_CudaDriver` (loaded on first use)."""
    global _driver_instance
    if _driver_instance is None:
        with _driver_lock:
            if _driver_instance is None:
                _driver_instance = _CudaDriver()
    return _driver_instance


def _dependent_launch_supported(device_index: int) -> bool:
    """Whether kernels on `device_index` can be launched as programmatic dependents:
    compute capability 9.0 or more, a driver with ``cuLaunchKernelEx``, and FUSER_DISABLE
    not naming ``pdl``."""
    import torch

    from fuser.options import disabled

    if disabled("pdl") or torch.cuda.get_device_capability(device_index)[0] < 9:
        return False
    return _driver().cuLaunchKernelEx is not None


# ----------------------------------------------------------------------------------------------
# PyTorch's current stream


def _raw_stream_getter() -> Any:
    import torch

    getter = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what TorchInductor uses
    if getter is not None:
        return getter

    def slow(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream

    return slow


_current_raw_stream: Any = None


def current_stream_handle(device_index: int) -> int:
    """The raw ``cudaStream_t`` of PyTorch's current stream on `device_index` (0 for the
    legacy default stream)."""
    global _current_raw_stream
    if _current_raw_stream is None:
        _current_raw_stream = _raw_stream_getter()
    return _current_raw_stream(device_index)


# ----------------------------------------------------------------------------------------------
# The kernel


class CompiledKernel:
    """One ``extern "C"`` kernel from a CUBIN, loaded on PyTorch's context and ready to launch.

    `param_format` gives the kernel's parameters in pycuda's prepared-call letters (Python
    ``struct`` codes, native alignment): "P" pointer (pass ``tensor.data_ptr()``), "i" int32,
    "q" int64, "I"/"Q" unsigned, "f" float32, "d" float64, "e" float16, "?" bool, ...
    `device` (a ``torch.device``, index or None for the current one) is the GPU it is loaded on.

    Launch with `launch`; `num_regs`, `local_size_bytes` and `max_threads_per_block` describe
    the compiled function (for diagnostics and launch-parameter checks).
    """

    def __init__(self, cubin: bytes, name: str, param_format: str, *, device: Any = None,
                 dependent_launch: bool = False) -> None:
        self.name = name
        self.param_format = param_format
        if param_format[:1] in ("<", ">", "!", "=", "@"):
            raise ValueError(f"kernel {name}: param_format must use native alignment, without a {param_format[0]!r} prefix")
        try:
            self._struct = struct.Struct(param_format)
        except struct.error as e:
            raise ValueError(f"kernel {name}: bad param_format {param_format!r} ({e}); use struct letters like 'PPfq'") from e
        if not isinstance(cubin, (bytes, bytearray, memoryview)) or len(cubin) == 0:
            raise ValueError(f"kernel {name}: cubin must be non-empty bytes")
        self.cubin = bytes(cubin)
        self.device_index = device_index(device)
        self._pack = self._struct.pack
        self._pack_into = self._struct.pack_into
        self._opted_in = False  # (to dynamic shared memory past the default limit)

        # (pycuda keeps its own context stack and pushes/pops on the driver's)
        with primary_context_pushed(self.device_index) as cuda:
            self._cuda = cuda
            try:
                self.module = cuda.module_from_buffer(self.cubin)
                self.function = self.module.get_function(name)
            except cuda.Error as e:
                raise KernelLaunchError(
                    f"cannot load kernel {name!r} on cuda:{self.device_index}: {e} (a CUBIN must be built "
                    f"for this GPU's architecture, see fuser.driver.nvrtc.device_arch, and the kernel "
                    f"declared extern \"C\")"
                ) from e
        #: dynamic shared bytes a launch may take: without opting in, what the default
        #: limit leaves beside the static shared memory
        self._shared_limit = max(0, DEFAULT_SHARED_MEM_LIMIT - int(self.function.shared_size_bytes))
        self.function.prepare(param_format)
        self._pycuda_launch = self.function._launch_kernel

        # Driver-API state for non-default streams and dependent launches, made on first use.
        self._drv_lock = threading.Lock()
        self._drv_function: int | None = None
        self._drv_module: int | None = None
        self._drv_params: Any = None
        self._drv_extra: Any = None
        #: launched as a programmatic dependent of the stream's previous kernel (only a kernel
        #: that waits for the grids before it, on a GPU that supports it, may be)
        self.dependent_launch = bool(dependent_launch) and _dependent_launch_supported(self.device_index)
        # (made with the driver function: the launch config, its byref, cuLaunchKernelEx)
        self._config: _LaunchConfig | None = None
        self._config_ref: Any = None
        self._config_key: Any = None
        self._cu_launch_ex: Any = None

    # -- diagnostics ----------------------------------------------------------------------------

    @property
    def num_regs(self) -> int:
        """Registers per thread."""
        return int(self.function.num_regs)

    @property
    def local_size_bytes(self) -> int:
        """Local (spill/stack) memory per thread, in bytes."""
        return int(self.function.local_size_bytes)

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this function can be launched with (registers and
        ``__launch_bounds__`` permitting)."""
        return int(self.function.max_threads_per_block)

    @property
    def shared_size_bytes(self) -> int:
        """Static shared memory per block, in bytes."""
        return int(self.function.shared_size_bytes)

    def max_active_blocks(self, threads: int, shared_mem: int = 0) -> int:
        """Blocks of `threads` threads (and `shared_mem` dynamic shared bytes) one SM holds
        at once: what a kernel that synchronises its whole grid may launch per SM."""
        self._load_driver_function()
        if shared_mem > self._shared_limit:  # (the occupancy counts what the launch will allow)
            self._allow_shared_mem(shared_mem)
        drv = _driver()
        n = ctypes.c_int()
        drv.check(drv.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), self._drv_function, threads,
                                                                        shared_mem),
                  f"cuOccupancyMaxActiveBlocksPerMultiprocessor({self.name})")
        return int(n.value)

    def __repr__(self) -> str:
        return f"CompiledKernel({self.name!r}, {self.param_format!r}, cuda:{self.device_index})"

    # -- launching ------------------------------------------------------------------------------

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[Any],
        *,
        shared_mem: int = 0,
        stream: int | None = None,
    ) -> None:
        """Launch on `grid` x `block` (tuples of ints) with `args` in `param_format`'s order
        (pointers as ints from ``tensor.data_ptr()``), `shared_mem` bytes of dynamic shared
        memory, on `stream`: a raw ``CUstream`` handle (a ``torch.cuda.Stream`` or pycuda
        ``Stream`` is accepted too), or None for PyTorch's current stream on the kernel's
        device. Asynchronous, like any launch; errors the launch itself
        reports raise `KernelLaunchError`.
        """
        if stream is None:
            stream = current_stream_handle(self.device_index)
        elif type(stream) is not int:
            stream = _stream_handle(stream)
        if shared_mem > self._shared_limit:
            self._allow_shared_mem(shared_mem)
        if self.dependent_launch:
            self._launch_dependent(grid, block, args, shared_mem, stream)
        elif stream == 0:
            try:
                params = self._pack(*args)
            except struct.error as e:
                raise self._bad_args(args, e) from None
            try:
                self._pycuda_launch(grid, block, params, shared_mem, None)
            except (self._cuda.Error, TypeError) as e:  # TypeError: Boost.Python.ArgumentError
                self._retry_pycuda_launch(grid, block, params, shared_mem, e)
        else:
            self._launch_driver(grid, block, args, shared_mem, stream)

    def _retry_pycuda_launch(self, grid: Any, block: Any, params: bytes, shared_mem: int, err: Exception) -> None:
        """The slow path after a failed default-stream launch: set a missing context and
        retry, accept grid/block given as lists, else raise `KernelLaunchError`."""
        retry = False
        if isinstance(err, TypeError):
            if not (isinstance(grid, tuple) and isinstance(block, tuple)):
                grid, block, retry = tuple(grid), tuple(block), True
        elif self._fix_context():
            retry = True
        if retry:
            try:
                self._pycuda_launch(grid, block, params, shared_mem, None)
                return
            except (self._cuda.Error, TypeError) as e:
                err = e
        raise KernelLaunchError(self._launch_context(grid, block, shared_mem, 0, err)) from err

    def _launch_driver(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: int) -> None:
        """Launch through ``cuLaunchKernel`` on the raw handle `stream`."""
        if self._drv_function is None:
            self._load_driver_function()
        gx, gy, gz = grid
        bx, by, bz = block
        cu_launch = self._cu_launch
        with self._drv_lock:  # the parameter buffer is shared; the driver copies it at launch
            try:
                self._pack_into(self._drv_params, 0, *args)
            except struct.error as e:
                raise self._bad_args(args, e) from None
            rc = cu_launch(self._drv_function, gx, gy, gz, bx, by, bz, shared_mem, stream, None, self._drv_extra)
            if rc != _CUDA_SUCCESS and self._fix_context():
                rc = cu_launch(self._drv_function, gx, gy, gz, bx, by, bz, shared_mem, stream, None, self._drv_extra)
        if rc != _CUDA_SUCCESS:
            raise KernelLaunchError(self._launch_context(grid, block, shared_mem, stream, _driver().error(rc)))

    def _launch_dependent(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: int) -> None:
        """Launch through ``cuLaunchKernelEx`` with programmatic stream serialization on the
        raw handle `stream`. Where the driver refuses the attribute (say, while a graph is
        captured on a driver that cannot record it), the kernel is launched plainly, now and
        from then on."""
        if self._drv_function is None:
            self._load_driver_function()
        launch_ex, cfg = self._cu_launch_ex, self._config
        key = (tuple(grid), tuple(block), shared_mem, stream)
        with self._drv_lock:  # the parameter buffer and the config are shared; the driver copies both
            try:
                self._pack_into(self._drv_params, 0, *args)
            except struct.error as e:
                raise self._bad_args(args, e) from None
            if key != self._config_key:  # (a kernel mostly launches alike: set the fields on change)
                cfg.grid_x, cfg.grid_y, cfg.grid_z = key[0]
                cfg.block_x, cfg.block_y, cfg.block_z = key[1]
                cfg.shared_mem = shared_mem
                cfg.stream = stream
                self._config_key = key
            rc = launch_ex(self._config_ref, self._drv_function, None, self._drv_extra)
            if rc != _CUDA_SUCCESS and self._fix_context():
                rc = launch_ex(self._config_ref, self._drv_function, None, self._drv_extra)
        if rc == _CUDA_SUCCESS:
            return
        refused = _driver().error(rc)
        self.dependent_launch = False
        warnings.warn(f"kernel {self.name!r}: the driver refused a programmatic dependent launch ({refused}); "
                      f"it is launched plainly from now on", RuntimeWarning, stacklevel=3)
        try:
            self._launch_driver(grid, block, args, shared_mem, stream)
        except KernelLaunchError as e:
            raise KernelLaunchError(f"{e} (and as a programmatic dependent launch, which FUSER_DISABLE=pdl "
                                    f"turns off: {refused})") from None

    def _load_driver_function(self) -> None:
        drv = _driver()
        with self._drv_lock:
            if self._drv_function is not None:
                return
            self._ensure_context(drv)
            module, function = ctypes.c_void_p(), ctypes.c_void_p()
            drv.check(drv.lib.cuModuleLoadData(ctypes.byref(module), self.cubin), f"cuModuleLoadData({self.name})")
            rc = drv.lib.cuModuleGetFunction(ctypes.byref(function), module, self.name.encode())
            if rc != _CUDA_SUCCESS:
                drv.lib.cuModuleUnload(module)
                drv.check(rc, f"cuModuleGetFunction({self.name})")
            if self._opted_in:
                drv.check(
                    drv.lib.cuFuncSetAttribute(function.value, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self._shared_limit),
                    f"cuFuncSetAttribute({self.name}, MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                )
            size = self._struct.size
            if size:
                self._drv_params = ctypes.create_string_buffer(size)
                self._drv_size = ctypes.c_size_t(size)
                self._drv_extra = (ctypes.c_void_p * 5)(
                    _CU_LAUNCH_PARAM_BUFFER_POINTER,
                    ctypes.addressof(self._drv_params),
                    _CU_LAUNCH_PARAM_BUFFER_SIZE,
                    ctypes.addressof(self._drv_size),
                    _CU_LAUNCH_PARAM_END,
                )
            else:
                self._drv_params = bytearray(0)
                self._drv_extra = None
            self._cu_launch = drv.cuLaunchKernel
            if self.dependent_launch:
                attr = _LaunchAttribute()
                attr.id = _CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                attr.value[0] = 1  # programmaticStreamSerializationAllowed (an int at the union's start)
                self._config = _LaunchConfig(attrs=ctypes.pointer(attr), num_attrs=1)
                self._config_ref = ctypes.byref(self._config)
                self._cu_launch_ex = drv.cuLaunchKernelEx
            self._drv_module = module.value
            self._drv_function = function.value  # last: launches test it before taking the lock

    def _ensure_context(self, drv: _CudaDriver) -> None:
        """Make the device's primary context current when this thread has none (a thread
        that has not touched CUDA yet); refuse to switch away from another device's."""
        want = drv.primary_context(self.device_index)
        have = drv.current_context()
        if have == want:
            return
        if have == 0:
            drv.check(drv.lib.cuCtxSetCurrent(want), "cuCtxSetCurrent")
            return
        raise KernelLaunchError(
            f"kernel {self.name!r} lives on cuda:{self.device_index} but this thread's current CUDA "
            f"context is another device's; launch inside `with torch.cuda.device({self.device_index}):`"
        )

    def _fix_context(self) -> bool:
        """After a failed launch: True when the cause was a missing current context and it
        has now been set (so retrying makes sense)."""
        try:
            drv = _driver()
            if drv.current_context() != 0:
                return False
            drv.check(drv.lib.cuCtxSetCurrent(drv.primary_context(self.device_index)), "cuCtxSetCurrent")
            return True
        except KernelLaunchError:
            return False

    def _allow_shared_mem(self, nbytes: int) -> None:
        """Opt the function in to `nbytes` of dynamic shared memory (needed above 48 KiB)."""
        cuda = self._cuda
        try:
            self.function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
            if self._drv_function is not None:
                drv = _driver()
                drv.check(
                    drv.lib.cuFuncSetAttribute(self._drv_function, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
                    "cuFuncSetAttribute",
                )
        except (cuda.Error, KernelLaunchError) as e:
            try:
                limit = f"{_driver().max_shared_optin(self.device_index)} bytes"
            except Exception:
                limit = "unknown"
            raise KernelLaunchError(
                f"kernel {self.name!r}: cannot allow {nbytes} bytes of dynamic shared memory on "
                f"cuda:{self.device_index} (the device's opt-in maximum per block is {limit}, less the "
                f"kernel's {self.shared_size_bytes} static bytes): {e}"
            ) from e
        self._shared_limit = nbytes
        self._opted_in = True

    def _bad_args(self, args: Sequence[Any], err: Exception) -> TypeError:
        kinds = ", ".join(type(a).__name__ for a in args)
        return TypeError(
            f"kernel {self.name!r} takes parameters {self.param_format!r} ({len(self.param_format)} letters); "
            f"got {len(args)} arguments ({kinds}): {err}. Pass pointers as ints (tensor.data_ptr())."
        )

    def _launch_context(self, grid: Any, block: Any, shared_mem: int, stream: int, err: Any) -> str:
        return (
            f"launching kernel {self.name!r} on cuda:{self.device_index} failed: {err} "
            f"(grid={grid!r}, block={block!r}, shared_mem={shared_mem}, stream=0x{stream:x}; "
            f"max_threads_per_block={self._safe(lambda: self.max_threads_per_block)})"
        )

    @staticmethod
    def _safe(fn: Any) -> Any:
        try:
            return fn()
        except Exception:
            return "?"

    def close(self) -> None:
        """Unload the driver-API copy of the module (pycuda unloads its own when collected)."""
        module, self._drv_module, self._drv_function = self._drv_module, None, None
        if module and _driver_instance is not None and not sys.is_finalizing():
            try:
                drv = _driver_instance
                if drv.current_context() == drv.primary_context(self.device_index):
                    drv.lib.cuModuleUnload(module)
            except Exception:
                pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _stream_handle(stream: Any) -> int:
    """The raw handle of a ``torch.cuda.Stream`` (``cuda_stream``) or pycuda ``Stream``
    (``handle``)."""
    for attr in ("cuda_stream", "handle"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"stream must be a raw CUstream int, a torch.cuda.Stream or None; got {stream!r}") from None


def device_index(device: Any) -> int:
    """The CUDA device index of `device` (an index, a torch.device or its string; None or
    an unindexed "cuda": the current device)."""
    import torch

    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"compiled kernels run on CUDA devices, not {device}")
    return device.index if device.index is not None else torch.cuda.current_device()
