"""Compiling generated CUDA C++ to a CUBIN: NVRTC in-process (through ctypes), nvcc as the fallback.

The code generator emits one self-contained translation unit per kernel, with its helpers in
in-memory headers (``#include "fuser_runtime.cuh"``). This module turns that into a CUBIN for
one real architecture (``sm_90``), which `fuser.driver.launch` loads with pycuda.

NVRTC is reached through ctypes, so fuser needs no extra Python package: the library is
searched for in this order (the first that loads wins):

1. ``$FUSER_NVRTC``: a path to ``libnvrtc.so*``. When set, nothing else is tried; a bad path
   makes `compile_cubin` (and `compile`) raise `CompilerNotFoundError` naming it.
2. PyTorch's own ``lib`` directory and the ``nvidia/*`` wheel directories beside it
   (``nvidia/cu13/lib``, ``nvidia/cuda_nvrtc/lib``, ...), newest soname first.
3. ``ctypes.util.find_library("nvrtc")`` (the system loader's paths).
4. ``$CUDA_HOME/lib64`` (and ``$CUDA_PATH``), then ``/usr/local/cuda/lib64``.

`compile` uses NVRTC when it is available and nvcc (``nvcc -cubin``) otherwise; both raise
`CompilationError` with the compiler's log and the numbered source lines around the first error.
Kernels are expected to be declared ``extern "C"`` so their names are not mangled.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping, Sequence

__all__ = [
    "CompilationError",
    "CompilerNotFoundError",
    "compile",
    "compile_cubin",
    "compile_cubin_nvcc",
    "compiler_identity",
    "device_arch",
    "nvcc_path",
    "nvcc_version",
    "nvrtc_available",
    "nvrtc_candidates",
    "nvrtc_library_path",
    "nvrtc_version",
]

#: Options every compile gets, before the caller's (NVRTC and nvcc spell these the same).
BASE_OPTIONS: tuple[str, ...] = ("--std=c++17",)

_NVRTC_SUCCESS = 0
_NVRTC_ERROR_COMPILATION = 6
_ARCH_RE = re.compile(r"^sm_\d+[af]?$")
#: ``file(12): error`` (NVRTC, nvcc's front end) or ``file:12:3: fatal error`` (the host preprocessor)
_ERROR_LINE_RE = re.compile(
    r"^(?:(?P<file>[^\n(]*?)\((?P<line>\d+)\): (?:catastrophic )?error\b"
    r"|(?P<file2>[^\n:]+):(?P<line2>\d+):(?:\d+:)? (?:fatal )?error\b)",
    re.MULTILINE,
)
#: Source lines shown before and after the first error.
CONTEXT_LINES = 3


class CompilationError(RuntimeError):
    """A kernel failed to compile. The message holds the compiler's log and the numbered
    source lines around the first error; `log` and `source` keep the raw text."""

    def __init__(self, message: str, *, log: str = "", source: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.source = source


class CompilerNotFoundError(RuntimeError):
    """No usable CUDA compiler: NVRTC could not be loaded (and, for `compile`, nvcc is not on
    PATH either). The message lists what was tried."""


# ----------------------------------------------------------------------------------------------
# Finding and loading libnvrtc


def _version_key(path: str) -> tuple:
    """Sort key: newest soname first (``libnvrtc.so.13`` before ``libnvrtc.so.12``)."""
    suffix = Path(path).name.partition(".so")[2]
    nums = tuple(int(n) for n in re.findall(r"\d+", suffix))
    return (len(nums) > 0, nums)


def _glob_nvrtc(directory: str | os.PathLike) -> list[str]:
    hits = [
        p
        for p in glob.glob(os.path.join(str(directory), "libnvrtc.so*"))
        if "builtins" not in os.path.basename(p) and os.path.isfile(p)
    ]
    return sorted(hits, key=_version_key, reverse=True)


def _torch_dir() -> Path | None:
    """PyTorch's package directory, found without importing torch (which is slow)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def nvrtc_candidates() -> list[str]:
    """Every path (or loader name) tried for libnvrtc, in order, before ``$FUSER_NVRTC``
    is considered: useful when diagnosing why NVRTC was not found."""
    out: list[str] = []
    torch_dir = _torch_dir()
    if torch_dir is not None:
        out += _glob_nvrtc(torch_dir / "lib")
        nvidia = torch_dir.parent / "nvidia"
        if nvidia.is_dir():
            wheel_hits: list[str] = []
            for lib_dir in sorted(glob.glob(str(nvidia / "*" / "lib"))):
                wheel_hits += _glob_nvrtc(lib_dir)
            out += sorted(wheel_hits, key=_version_key, reverse=True)
    found = ctypes.util.find_library("nvrtc")
    if found:
        out.append(found)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            out += _glob_nvrtc(Path(root) / "lib64")
    out += _glob_nvrtc("/usr/local/cuda/lib64")
    seen: set[str] = set()
    return [p for p in out if not (p in seen or seen.add(p))]


class _Nvrtc:
    """The loaded library with the signatures fuser uses."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self.lib = lib
        self.path = path
        c_int, c_char_p, c_void_p, c_size_t = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
        P = ctypes.POINTER
        sigs: dict[str, tuple[Any, list[Any]]] = {
            "nvrtcVersion": (c_int, [P(c_int), P(c_int)]),
            "nvrtcGetErrorString": (c_char_p, [c_int]),
            "nvrtcCreateProgram": (c_int, [P(c_void_p), c_char_p, c_char_p, c_int, P(c_char_p), P(c_char_p)]),
            "nvrtcDestroyProgram": (c_int, [P(c_void_p)]),
            "nvrtcCompileProgram": (c_int, [c_void_p, c_int, P(c_char_p)]),
            "nvrtcGetProgramLogSize": (c_int, [c_void_p, P(c_size_t)]),
            "nvrtcGetProgramLog": (c_int, [c_void_p, c_char_p]),
            "nvrtcGetCUBINSize": (c_int, [c_void_p, P(c_size_t)]),
            "nvrtcGetCUBIN": (c_int, [c_void_p, c_char_p]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(lib, name)  # AttributeError: not an NVRTC (or one without CUBIN output)
            fn.restype = restype
            fn.argtypes = argtypes
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)

    def error_string(self, code: int) -> str:
        s = self.lib.nvrtcGetErrorString(code)
        return s.decode(errors="replace") if s else f"NVRTC error {code}"

    def _check(self, code: int, what: str) -> None:
        if code != _NVRTC_SUCCESS:
            raise RuntimeError(f"{what} failed: {self.error_string(code)} (code {code}); library {self.path}")


_lock = threading.Lock()
_loaded: dict[str | None, tuple[_Nvrtc | None, str]] = {}  # $FUSER_NVRTC value -> (lib, why not)


def _try_load(path: str) -> tuple[_Nvrtc | None, str]:
    directory = os.path.dirname(path)
    if directory:
        # NVRTC dlopens its builtins library by soname; load the one beside it first so a
        # wheel directory that is not on the loader's path still works.
        for builtins in sorted(glob.glob(os.path.join(directory, "libnvrtc-builtins.so*")), key=_version_key, reverse=True):
            try:
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
    try:
        return _Nvrtc(ctypes.CDLL(path), path), ""
    except (OSError, AttributeError, RuntimeError) as e:
        return None, f"{path}: {e}"


def _load() -> tuple[_Nvrtc | None, str]:
    """The NVRTC library for the current ``$FUSER_NVRTC`` (cached per value), or None and the
    reason it could not be loaded."""
    env = os.environ.get("FUSER_NVRTC") or None
    with _lock:
        if env in _loaded:
            return _loaded[env]
        if env is not None:
            lib, why = _try_load(env)
            if lib is None:
                why = (
                    f"FUSER_NVRTC={env!r} could not be loaded as NVRTC ({why}). "
                    "Point it at a libnvrtc.so file (e.g. site-packages/nvidia/cu13/lib/libnvrtc.so.13) "
                    "or unset it to search the usual places."
                )
            result = (lib, why)
        else:
            reasons = []
            result = (None, "")
            for cand in nvrtc_candidates():
                lib, why = _try_load(cand)
                if lib is not None:
                    result = (lib, "")
                    break
                reasons.append(why)
            else:
                tried = "\n  ".join(reasons) if reasons else "(no libnvrtc.so* found)"
                result = (
                    None,
                    "NVRTC (libnvrtc.so) was not found. Searched PyTorch's lib directory, the nvidia/* "
                    "wheel directories beside it, the system loader path, $CUDA_HOME/lib64 and "
                    f"/usr/local/cuda/lib64; tried:\n  {tried}\n"
                    "Install a CUDA-enabled PyTorch (its wheels ship NVRTC), or set FUSER_NVRTC to the "
                    "library's path.",
                )
        _loaded[env] = result
        return result


def _nvrtc() -> _Nvrtc:
    lib, why = _load()
    if lib is None:
        raise CompilerNotFoundError(why)
    return lib


def nvrtc_available() -> bool:
    """Whether NVRTC can be loaded (never raises)."""
    try:
        return _load()[0] is not None
    except Exception:  # pragma: no cover - discovery must not crash callers
        return False


def nvrtc_version() -> tuple[int, int]:
    """The loaded NVRTC's (major, minor) version; raises `CompilerNotFoundError` without one."""
    return _nvrtc().version


def nvrtc_library_path() -> str | None:
    """The file NVRTC was loaded from, or None when it is not available."""
    lib = _load()[0]
    return lib.path if lib is not None else None


# ----------------------------------------------------------------------------------------------
# Error messages


def _check_arch(arch: str) -> None:
    if not _ARCH_RE.match(arch):
        raise ValueError(
            f"arch must name a real GPU architecture such as 'sm_90' (a CUBIN is built for exactly one); got {arch!r}"
        )


def _check_header_name(name: str) -> None:
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or "\\" in name:
        raise ValueError(f"header name {name!r} must be a relative path without '..'")


def _excerpt(text: str, line: int, label: str) -> str:
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    lo, hi = max(1, line - CONTEXT_LINES), min(len(lines), line + CONTEXT_LINES)
    width = len(str(hi))
    body = "\n".join(f"{'>' if n == line else ' '} {n:>{width}} | {lines[n - 1]}" for n in range(lo, hi + 1))
    return f"{label}, line {line}:\n{body}"


def format_error(compiler: str, log: str, source: str, *, name: str, headers: Mapping[str, str]) -> str:
    """The `CompilationError` message: the log, then the lines around the first error (in the
    source or in whichever in-memory header it points at)."""
    log = log.strip()
    parts = [f"{compiler} failed to compile {name}:", log or "(empty log)"]
    m = _ERROR_LINE_RE.search(log)
    if m:
        where = (m.group("file") if m.group("file") is not None else m.group("file2")).strip()
        line = int(m.group("line") or m.group("line2"))
        files = {name: source, **dict(headers)}
        text = None
        for cand, body in files.items():
            if where == cand or where.endswith("/" + cand) or os.path.basename(where) == os.path.basename(cand):
                where, text = cand, body
                break
        if text is None and where in ("", "<stdin>"):
            where, text = name, source
        if text is not None:
            excerpt = _excerpt(text, line, where)
            if excerpt:
                parts.append(excerpt)
    return "\n\n".join(parts)


# ----------------------------------------------------------------------------------------------
# NVRTC


def compile_cubin(
    source: str,
    *,
    name: str = "kernel.cu",
    arch: str = "sm_90",
    options: Sequence[str] = (),
    headers: Mapping[str, str] = {},
) -> bytes:
    """Compile `source` with NVRTC in this process to a CUBIN for `arch` (a real ``sm_XX``).

    `headers` maps include names to their text, so ``#include "fuser_runtime.cuh"`` resolves
    without include paths. Options are ``--gpu-architecture=<arch> --std=c++17`` then
    `options`. Raises `CompilationError` (log plus source excerpt) when the code does not
    compile and `CompilerNotFoundError` when NVRTC cannot be loaded.
    """
    _check_arch(arch)
    for h in headers:
        _check_header_name(h)
    nv = _nvrtc()
    lib = nv.lib
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, *options]
    n_headers = len(headers)
    header_texts = (ctypes.c_char_p * max(n_headers, 1))(*[t.encode() for t in headers.values()])
    header_names = (ctypes.c_char_p * max(n_headers, 1))(*[k.encode() for k in headers])
    c_opts = (ctypes.c_char_p * max(len(opts), 1))(*[o.encode() for o in opts])

    prog = ctypes.c_void_p()
    nv._check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), n_headers, header_texts, header_names),
        "nvrtcCreateProgram",
    )
    try:
        rc = lib.nvrtcCompileProgram(prog, len(opts), c_opts)
        log = _program_log(nv, prog)
        if rc != _NVRTC_SUCCESS:
            what = f"NVRTC {nv.version[0]}.{nv.version[1]} ({nv.error_string(rc)}; options {' '.join(opts)})"
            raise CompilationError(format_error(what, log, source, name=name, headers=headers), log=log, source=source)
        size = ctypes.c_size_t()
        nv._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        if size.value == 0:
            raise CompilationError(
                f"NVRTC produced no CUBIN for {name} (arch {arch!r}): pass a real architecture "
                f"such as sm_90, not a virtual compute_XX one.\n{log}",
                log=log,
                source=source,
            )
        buf = ctypes.create_string_buffer(size.value)
        nv._check(lib.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        return buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _program_log(nv: _Nvrtc, prog: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    if nv.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != _NVRTC_SUCCESS or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    if nv.lib.nvrtcGetProgramLog(prog, buf) != _NVRTC_SUCCESS:
        return ""
    return buf.value.decode(errors="replace")


# ----------------------------------------------------------------------------------------------
# nvcc


def nvcc_path() -> str | None:
    """nvcc on PATH, else ``$CUDA_HOME/bin/nvcc`` or ``/usr/local/cuda/bin/nvcc`` if present."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            p = Path(root) / "bin" / "nvcc"
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    return None


_nvcc_versions: dict[str, str] = {}


def nvcc_version() -> str:
    """nvcc's version (e.g. ``"13.0.88"``, from ``nvcc --version``); raises
    `CompilerNotFoundError` when there is no nvcc."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompilerNotFoundError("nvcc was not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin")
    if nvcc not in _nvcc_versions:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        m = re.search(r"\bV(\d+(?:\.\d+)+)", out) or re.search(r"release (\d+\.\d+)", out)
        _nvcc_versions[nvcc] = m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"
    return _nvcc_versions[nvcc]


def compile_cubin_nvcc(
    source: str,
    *,
    name: str = "kernel.cu",
    arch: str = "sm_90",
    options: Sequence[str] = (),
    headers: Mapping[str, str] = {},
) -> bytes:
    """Compile `source` with ``nvcc -cubin -arch=<arch>`` in a temporary directory to a CUBIN.

    The same contract as `compile_cubin`: `headers` are written as files beside the source
    (so quoted includes resolve), options are ``--std=c++17`` then `options`, and failures
    raise `CompilationError` with nvcc's output and the numbered lines around the first error.
    Used by CPU tests and when NVRTC is missing.
    """
    _check_arch(arch)
    for h in headers:
        _check_header_name(h)
    _check_header_name(name)
    nvcc = nvcc_path()
    if nvcc is None:
        raise CompilerNotFoundError(
            "nvcc was not found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin; install the CUDA "
            "toolkit or make NVRTC available (see fuser.driver.nvrtc)."
        )
    with tempfile.TemporaryDirectory(prefix="fuser-nvcc-") as tmp:
        for hname, text in headers.items():
            path = Path(tmp, hname)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        src = Path(tmp, name)
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(source)
        out = Path(tmp, "fuser_kernel_out.cubin")
        flags = ["-cubin", f"-arch={arch}", *BASE_OPTIONS, *options]
        cmd = [nvcc, *flags, "-I", tmp, "-o", str(out), name]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
        log = (proc.stdout + proc.stderr).replace(tmp + os.sep, "").replace(tmp, ".")
        if proc.returncode != 0 or not out.is_file():
            what = f"nvcc {nvcc_version()} (exit {proc.returncode}; options {' '.join(flags)})"
            raise CompilationError(format_error(what, log, source, name=name, headers=headers), log=log, source=source)
        data = out.read_bytes()
    if not data:
        raise CompilationError(f"nvcc produced an empty CUBIN for {name}:\n{log}", log=log, source=source)
    return data


# ----------------------------------------------------------------------------------------------
# Choosing a compiler


def _selected() -> tuple[str, Callable[..., bytes]]:
    lib, why = _load()
    if lib is not None:
        return f"nvrtc {lib.version[0]}.{lib.version[1]}", compile_cubin
    if os.environ.get("FUSER_NVRTC"):
        # An explicit NVRTC that does not load is a configuration error, not a cue to use nvcc.
        raise CompilerNotFoundError(why)
    if nvcc_path() is not None:
        return f"nvcc {nvcc_version()}", compile_cubin_nvcc
    raise CompilerNotFoundError(why + "\nnvcc (the fallback) is not on PATH either.")


def compiler_identity() -> str:
    """Which compiler `compile` will use, with its version (``"nvrtc 13.0"`` or
    ``"nvcc 13.0.88"``): part of the kernel cache key."""
    return _selected()[0]


def compile(
    source: str,
    *,
    name: str = "kernel.cu",
    arch: str = "sm_90",
    options: Sequence[str] = (),
    headers: Mapping[str, str] = {},
) -> bytes:
    """Compile `source` to a CUBIN with NVRTC when it is available, else with nvcc.

    Same arguments and errors as `compile_cubin`. When ``$FUSER_NVRTC`` is set but does not
    load, this raises `CompilerNotFoundError` rather than silently using nvcc.
    """
    return _selected()[1](source, name=name, arch=arch, options=options, headers=headers)


def device_arch(device: Any = None) -> str:
    """The ``sm_XY`` architecture of `device` (a ``torch.device``, index, or None for the
    current CUDA device), from ``torch.cuda.get_device_capability``; ``"sm_90"`` when there
    is no GPU (the architecture fuser targets by default)."""
    try:
        import torch
    except ImportError:
        return "sm_90"
    if not torch.cuda.is_available():
        return "sm_90"
    if isinstance(device, torch.device) and device.type != "cuda":
        return "sm_90"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"
