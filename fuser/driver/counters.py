"""Zeroed arrival counters for the kernels' grid reductions and grid barriers, from one
arena per device held in a module global, which the driver zeroes when it loads the module:
a kernel's first launch needs no fill kernel (nor a memset) before it.

Every kernel leaves the counters it used at zero (`grid_arrive`'s and `grid_sync`'s last
block resets them), and the kernels of one stream run in order (a dependent launch waits
for the previous grid before it touches memory), so every kernel launched on one stream can
share the arena: the first stream that asks for a device's arena keeps it. Launches on
other streams, launches captured in CUDA graphs and kernels needing more counters than the
arena holds get counters of their own (the caller's fallback)."""
from __future__ import annotations

import threading
from typing import Any

__all__ = ["ARENA_COUNTERS", "arena_counters"]

#: 32-bit counters in a device's arena (256 KiB): a grid reduction counts in one per
#: column of blocks, a grid barrier in two
ARENA_COUNTERS = 1 << 16

_SYMBOL = "fuser_counters"
# a .global variable without an initializer is zero-initialised at module load (PTX ISA,
# "State Spaces": .global variables are initialised to zero by default)
_PTX = (f".version 7.0\n.target sm_50\n.address_size 64\n"
        f".visible .global .align 16 .b32 {_SYMBOL}[{ARENA_COUNTERS}];\n").encode() + b"\0"

_lock = threading.Lock()
#: device index -> (owner stream handle, arena address, the module holding it (kept loaded))
_arenas: dict[int, tuple[int, int, object]] = {}


def arena_counters(device: Any, stream: int, count: int) -> int | None:
    """Device address of `count` zeroed counters that kernels launched on `stream` (a raw
    CUstream handle) of `device` (an index or a torch.device; "cuda" is the current one)
    share and leave zeroed, or None: another stream owns the device's arena, or `count` is
    more than it holds."""
    from .launch import device_index

    if count > ARENA_COUNTERS:
        return None
    index = device_index(device)
    arena = _arenas.get(index)
    if arena is None:
        with _lock:
            arena = _arenas.get(index)
            if arena is None:
                arena = _arenas[index] = (stream, *_load(index))
    return arena[1] if arena[0] == stream else None


def _load(device_index: int) -> tuple[int, object]:
    """(address, module) of a freshly loaded arena on the device's primary context."""
    from .launch import primary_context_pushed

    with primary_context_pushed(device_index) as cuda:
        module = cuda.module_from_buffer(_PTX)
        address, size = module.get_global(_SYMBOL)
    if size != 4 * ARENA_COUNTERS:
        raise RuntimeError(f"fuser's counter arena on cuda:{device_index} has {size} bytes, "
                           f"expected {4 * ARENA_COUNTERS}")
    return int(address), module
