"""The CUBIN cache: compile a kernel once per (source, headers, options, arch, compiler, fuser
version), remember it in this process and on disk.

Location: ``$FUSER_CACHE_DIR``, else ``$XDG_CACHE_HOME/fuser/kernels``, else
``~/.cache/fuser/kernels`` (read on every call, so tests can point it elsewhere). Each entry
is one file ``<sha256 key>.cubin`` holding a small header (magic and a SHA-256 of the payload)
and the CUBIN; an entry that is truncated, corrupt or unreadable is compiled again and
rewritten. Writes go to a temporary file in the same directory and are moved into place with
``os.replace``, so readers never see half a file and concurrent writers of one key are harmless.
A cache directory that cannot be written is reported once (a warning) and compiling goes on
without it.

``FUSER_DISABLE=kernel_cache`` bypasses both the in-process and the disk cache: every call
compiles.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Mapping, Sequence

from fuser.options import disabled

from . import nvrtc as _nvrtc

__all__ = ["cache_dir", "cache_key", "clear", "entry_path", "get_cubin", "stats"]

#: First bytes of every cache file; bump the number when the file layout changes.
MAGIC = b"FUSERCUBIN1\n"
_DIGEST_SIZE = hashlib.sha256().digest_size
_SUFFIX = ".cubin"

_memory: dict[str, bytes] = {}
_lock = threading.Lock()
_warned_dirs: set[str] = set()
#: counters for tests and diagnostics: memory hits, disk hits, compiles, corrupt entries
_stats = {"memory_hits": 0, "disk_hits": 0, "compiles": 0, "corrupt": 0}


def cache_dir() -> Path:
    """Where CUBINs are stored: ``$FUSER_CACHE_DIR``, else ``$XDG_CACHE_HOME/fuser/kernels``,
    else ``~/.cache/fuser/kernels``. The directory is created on first write."""
    env = os.environ.get("FUSER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fuser" / "kernels"


@functools.cache
def _fuser_version() -> str:
    """The installed fuser distribution's version (read from its metadata, not by importing
    the package above this layer), or ``"unknown"`` when fuser runs uninstalled."""
    try:
        return importlib.metadata.version("fuser")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def cache_key(
    source: str,
    *,
    arch: str,
    options: Sequence[str] = (),
    headers: Mapping[str, str] = {},
    compiler: str | None = None,
) -> str:
    """The hex SHA-256 naming a kernel's cache entry. It covers the source, the headers
    (sorted by name, with their text), the options (in order: order can matter), the
    architecture, the compiler and its version (`compiler`, default: the one `nvrtc.compile`
    would use now, e.g. ``"nvrtc 13.0"``) and fuser's version."""
    if compiler is None:
        compiler = _nvrtc.compiler_identity()
    payload = {
        "source": source,
        "headers": sorted(headers.items()),
        "options": list(options),
        "arch": arch,
        "compiler": compiler,
        "fuser": _fuser_version(),
    }
    blob = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def entry_path(key: str) -> Path:
    """The file for cache key `key` in the current `cache_dir`."""
    return cache_dir() / f"{key}{_SUFFIX}"


def _read(path: Path) -> bytes | None:
    """The CUBIN stored at `path`, or None when missing or not intact."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        _stats["corrupt"] += 1
        return None
    head = len(MAGIC) + _DIGEST_SIZE
    if len(data) <= head or not data.startswith(MAGIC):
        _stats["corrupt"] += 1
        return None
    digest, payload = data[len(MAGIC) : head], data[head:]
    if hashlib.sha256(payload).digest() != digest:
        _stats["corrupt"] += 1
        return None
    return payload


def _write(path: Path, cubin: bytes) -> None:
    """Store `cubin` at `path` atomically (temporary file in the same directory, then
    ``os.replace``); a failure is warned about once per directory and otherwise ignored."""
    directory = path.parent
    tmp_name = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem[:16]}-", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.sha256(cubin).digest() + cubin)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as e:
        key = str(directory)
        if key not in _warned_dirs:
            _warned_dirs.add(key)
            warnings.warn(
                f"fuser kernel cache: cannot write to {directory} ({e}); kernels will be compiled "
                "again in new processes. Set FUSER_CACHE_DIR to a writable directory.",
                RuntimeWarning,
                stacklevel=3,
            )
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


def get_cubin(
    source: str,
    *,
    arch: str,
    options: Sequence[str] = (),
    headers: Mapping[str, str] = {},
    name: str = "kernel.cu",
) -> bytes:
    """The CUBIN for `source` on `arch`: from this process's memory, else from the disk
    cache, else compiled with `fuser.driver.nvrtc.compile` (NVRTC, or nvcc without it) and
    stored in both. ``FUSER_DISABLE=kernel_cache`` makes every call compile.

    `name` is only the file name compile errors mention; it is not part of the key.
    Raises what the compiler raises (`CompilationError`, `CompilerNotFoundError`).
    """
    options = tuple(options)
    headers = dict(headers)
    if disabled("kernel_cache"):
        _stats["compiles"] += 1
        return _nvrtc.compile(source, name=name, arch=arch, options=options, headers=headers)

    key = cache_key(source, arch=arch, options=options, headers=headers)
    path = entry_path(key)
    mem_key = f"{path}"  # a different FUSER_CACHE_DIR is a different cache
    hit = _memory.get(mem_key)
    if hit is not None:
        _stats["memory_hits"] += 1
        return hit

    cubin = _read(path)
    if cubin is not None:
        _stats["disk_hits"] += 1
    else:
        _stats["compiles"] += 1
        cubin = _nvrtc.compile(source, name=name, arch=arch, options=options, headers=headers)
        _write(path, cubin)
    with _lock:
        _memory[mem_key] = cubin
    return cubin


def clear(*, disk: bool = False) -> None:
    """Forget the in-process entries (and, with ``disk=True``, delete the current
    `cache_dir`'s ``*.cubin`` files); resets `stats`. Meant for tests."""
    with _lock:
        _memory.clear()
        for k in _stats:
            _stats[k] = 0
    if disk:
        d = cache_dir()
        if d.is_dir():
            for p in d.glob(f"*{_SUFFIX}"):
                try:
                    p.unlink()
                except OSError:
                    pass


def stats() -> dict[str, int]:
    """Counts since the last `clear`: ``memory_hits``, ``disk_hits``, ``compiles``,
    ``corrupt`` (entries found damaged and recompiled)."""
    return dict(_stats)
