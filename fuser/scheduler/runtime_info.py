"""What schedulers may know about one call's inputs: sizes, strides, alignment, index
type, and the device's limits."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from fuser.ir import Fusion, IterDomain, Scalar, TensorView

if TYPE_CHECKING:
    from fuser.runtime.binding import Binding


@dataclass(frozen=True)
class DeviceLimits:
    """Per-SM resources a kernel's launch configuration and persistent buffers must fit.
    The field defaults are the default planning target's (`DEFAULT_TARGET`: an H100)."""

    sm_count: int = 132
    smem_per_sm: int = 228 * 1024
    #: shared memory a single block may use (opt-in maximum)
    smem_per_block: int = 227 * 1024
    registers_per_sm: int = 64 * 1024  # 32-bit registers
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    #: resident blocks per SM at most (torch does not report it: see _ARCH_LIMITS)
    max_blocks_per_sm: int = 32
    warp_size: int = 32
    name: str = "H100"
    #: compute capability (major, minor)
    arch: tuple[int, int] = (9, 0)
    #: the memory's rated bandwidth (bytes/s: memory clock x 2 x bus width) and the SMs'
    #: clock (Hz): how many bytes an SM must move per clock to keep memory busy
    memory_bandwidth: float = 3.35e12
    clock_hz: float = 1.98e9

    @property
    def bytes_per_sm_clock(self) -> float:
        """Bytes each SM moves per clock when memory runs at its rated bandwidth."""
        return self.memory_bandwidth / (self.clock_hz * self.sm_count)

    @property
    def register_file_bytes(self) -> int:
        return self.registers_per_sm * 4

    def describe(self) -> str:
        """One line naming the device or target and the limits plans depend on most."""
        major, minor = self.arch
        return f"{self.name} (sm_{major}{minor}, {self.sm_count} SMs, {self.smem_per_block // 1024} KB smem)"

    @classmethod
    def h100(cls) -> "DeviceLimits":
        """The H100 target (the default planning target)."""
        return TARGETS["h100"]

    @classmethod
    def target(cls, name: str | None = None) -> "DeviceLimits":
        """The named planning target; without a name, FUSER_TARGET's, else DEFAULT_TARGET."""
        if name is None:
            name = os.environ.get(TARGET_ENV, "").strip() or DEFAULT_TARGET
        got = TARGETS.get(name.lower())
        if got is None:
            raise ValueError(f"{TARGET_ENV}={name!r}: no such planning target; the targets are "
                             f"{', '.join(sorted(TARGETS))}")
        return got

    @classmethod
    def of(cls, device: torch.device) -> "DeviceLimits":
        """The limits of `device`; the planning target's (`target()`) when it is not a CUDA
        device or there is none. A property torch does not report is taken as the smaller
        of the default target's and what the device's architecture is known to have
        (`_ARCH_LIMITS`), with a warning (once per device and properties)."""
        if device.type != "cuda" or not torch.cuda.is_available():
            return cls.target()
        p = torch.cuda.get_device_properties(device)
        arch = (p.major, p.minor)
        default = TARGETS[DEFAULT_TARGET]
        known = _ARCH_LIMITS.get(arch, {})
        values: dict[str, int] = {}
        guessed: list[str] = []
        for prop, field_ in _REPORTED:
            v = getattr(p, prop, None)
            if not isinstance(v, int) or v <= 0:
                # a limit taken too large plans kernels that fail to launch: take the smaller
                v = min(getattr(default, field_), known.get(field_, getattr(default, field_)))
                guessed.append(f"{prop} (took {v})")
            values[field_] = int(v)
        if guessed:
            _warn_once(p.name, arch, guessed)
        rated = _rated(p, arch)
        return cls(
            sm_count=p.multi_processor_count,
            memory_bandwidth=rated[0],
            clock_hz=rated[1],
            # CUDA's limit on every architecture since sm_20 (torch does not report it)
            max_threads_per_block=1024,
            # torch does not report it either; an architecture not in the table is taken as
            # the default target's
            max_blocks_per_sm=known.get("max_blocks_per_sm", default.max_blocks_per_sm),
            name=p.name,
            arch=arch,
            **values,
        )


def _rated(p: Any, arch: tuple[int, int]) -> tuple[float, float]:
    """(memory bandwidth in bytes/s, SM clock in Hz) from torch's device properties, or
    the architecture's (`_ARCH_RATES`, else the default target's) where torch lacks them."""
    default = TARGETS[DEFAULT_TARGET]
    bw, clock = _ARCH_RATES.get(arch, (default.memory_bandwidth, default.clock_hz))
    mem_khz, bus_bits, sm_khz = (getattr(p, k, 0) for k in ("memory_clock_rate", "memory_bus_width", "clock_rate"))
    if isinstance(mem_khz, int) and isinstance(bus_bits, int) and mem_khz > 0 and bus_bits > 0:
        bw = mem_khz * 1e3 * 2 * bus_bits / 8  # (double data rate)
    if isinstance(sm_khz, int) and sm_khz > 0:
        clock = sm_khz * 1e3
    return float(bw), float(clock)


#: FUSER_TARGET: the planning target where there is no CUDA device (meta or CPU inputs)
TARGET_ENV = "FUSER_TARGET"
#: the planning target when FUSER_TARGET names none
DEFAULT_TARGET = "h100"
#: named planning targets (CUDA programming guide, "Technical Specifications per Compute
#: Capability", and the products' SM counts): what CPU / meta planning assumes
TARGETS: dict[str, DeviceLimits] = {
    "h100": DeviceLimits(),
    # an H200 is an H100's chip (sm_90, 132 SMs) with more and faster memory
    "h200": DeviceLimits(name="H200", memory_bandwidth=4.8e12),
    "a100": DeviceLimits(sm_count=108, smem_per_sm=164 * 1024, smem_per_block=163 * 1024, name="A100", arch=(8, 0),
                         memory_bandwidth=2.04e12, clock_hz=1.41e9),
    "l40s": DeviceLimits(sm_count=142, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, max_threads_per_sm=1536,
                         max_blocks_per_sm=24, name="L40S", arch=(8, 9), memory_bandwidth=8.64e11, clock_hz=2.52e9),
}

#: per compute capability, the rated (memory bandwidth, SM clock) of its data-centre part,
#: where torch does not report the device's own (products' data sheets)
_ARCH_RATES: dict[tuple[int, int], tuple[float, float]] = {
    (8, 0): (2.04e12, 1.41e9), (8, 9): (8.64e11, 2.52e9), (9, 0): (3.35e12, 1.98e9),
}

#: (torch device property, DeviceLimits field) of the limits torch reports
_REPORTED = (
    ("shared_memory_per_multiprocessor", "smem_per_sm"),
    ("shared_memory_per_block_optin", "smem_per_block"),
    ("regs_per_multiprocessor", "registers_per_sm"),
    ("max_threads_per_multi_processor", "max_threads_per_sm"),
    ("warp_size", "warp_size"),
)

#: per compute capability, what the CUDA programming guide ("Technical Specifications per
#: Compute Capability") gives: resident blocks per SM (torch never reports it), and the
#: limits used where torch lacks a property
_ARCH_LIMITS: dict[tuple[int, int], dict[str, int]] = {
    (7, 5): dict(max_blocks_per_sm=16, smem_per_sm=64 * 1024, smem_per_block=64 * 1024, max_threads_per_sm=1024,
                 registers_per_sm=64 * 1024, warp_size=32),
    (8, 0): dict(max_blocks_per_sm=32, smem_per_sm=164 * 1024, smem_per_block=163 * 1024, max_threads_per_sm=2048,
                 registers_per_sm=64 * 1024, warp_size=32),
    (8, 6): dict(max_blocks_per_sm=16, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, max_threads_per_sm=1536,
                 registers_per_sm=64 * 1024, warp_size=32),
    (8, 7): dict(max_blocks_per_sm=16, smem_per_sm=164 * 1024, smem_per_block=163 * 1024, max_threads_per_sm=1536,
                 registers_per_sm=64 * 1024, warp_size=32),
    (8, 9): dict(max_blocks_per_sm=24, smem_per_sm=100 * 1024, smem_per_block=99 * 1024, max_threads_per_sm=1536,
                 registers_per_sm=64 * 1024, warp_size=32),
    (9, 0): dict(max_blocks_per_sm=32, smem_per_sm=228 * 1024, smem_per_block=227 * 1024, max_threads_per_sm=2048,
                 registers_per_sm=64 * 1024, warp_size=32),
}

_warned: set[tuple] = set()


def target_line(limits: DeviceLimits) -> str:
    """The "target: ..." line of the dumps: the device plans were made for, or the planning
    target (and how to choose another) where there was no CUDA device."""
    for key, t in TARGETS.items():
        if limits is t:
            return f"target: {limits.describe()} [no CUDA device: planning target {key!r}; {TARGET_ENV} chooses]"
    return f"target: {limits.describe()}"


def _warn_once(name: str, arch: tuple[int, int], guessed: list[str]) -> None:
    key = (name, arch, tuple(guessed))
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"fuser: torch reports no {', '.join(guessed)} for {name} (sm_{arch[0]}{arch[1]}); "
                  f"planning with the smaller of the default target's ({TARGETS[DEFAULT_TARGET].describe()}) "
                  f"and the architecture's known value", RuntimeWarning, stacklevel=3)


#: fraction of the register file a persistent kernel may hold buffers in; the rest is for
#: indexing, accumulators and temporaries
PERSISTENT_REGISTER_FRACTION = 0.5
#: shared memory a block keeps for reduction scratch and bookkeeping
SMEM_RESERVED_PER_BLOCK = 1024
_INT32_MAX = 2**31 - 1


class SchedulerRuntimeInfo:
    """One call's facts about a fusion's tensors, computed once and shared by every
    scheduler the segmenter asks about this fusion and its sub-fusions.

    Made by the runtime (`fuser.runtime.info.runtime_info`), which binds the call's inputs
    (`binding`: tensors, extents, device) and evaluates extents (`evaluate`); meta tensors
    work: only sizes, strides, dtypes and devices are read, plus data pointers for
    alignment when the tensors have storage.
    """

    def __init__(self, fusion: Fusion, binding: "Binding", evaluate: Callable[[Scalar], Any], *,
                 device_limits: DeviceLimits | None = None) -> None:
        self.fusion = fusion
        self.binding = binding
        self.device = binding.device
        self.device_limits = device_limits if device_limits is not None else DeviceLimits.of(self.device)
        self._evaluate = evaluate
        self._extent_cache: dict[Scalar, int] = {}
        #: per tensor input, per logical axis (no reductions): its size and stride in the
        #: torch tensor; a broadcast the logical domain adds to the root the tensor holds
        #: (seed 000) is in no memory: size 1, stride 0
        self.sizes: dict[TensorView, tuple[int, ...]] = {}
        self.strides: dict[TensorView, tuple[int, ...]] = {}
        self.alignment: dict[TensorView, int] = {}
        for tv, x in zip(fusion.inputs, binding.tensors):
            if isinstance(tv, TensorView) and isinstance(x, torch.Tensor):
                self.sizes[tv], self.strides[tv] = _logical_layout(tv, x)
                self.alignment[tv] = _alignment(x)
        self.index_type = "int64" if self._needs_int64() else "int32"

    # --- extents -------------------------------------------------------------------------
    def evaluate(self, s: Scalar) -> int:
        """The value of an integer scalar of the fusion (an extent) for this call."""
        got = self._extent_cache.get(s)
        if got is None:
            got = self._extent_cache[s] = int(self._evaluate(s))
        return got

    def extent(self, id_: IterDomain) -> int:
        """The size `id_` presents: its expanded extent for an expanded broadcast."""
        return self.evaluate(id_.user_extent)

    def shape(self, tv: TensorView) -> tuple[int, ...]:
        return tuple(self.extent(i) for i in tv.logical_no_reductions())

    def numel(self, tv: TensorView) -> int:
        n = 1
        for i in tv.logical_no_reductions():
            n *= self.extent(i)
        return n

    def stored_bytes(self, tv: TensorView) -> int:
        """Bytes `tv` occupies in memory: broadcast axes, expanded or not, are stored once."""
        n = 1
        for i in tv.logical_no_reductions():
            if not i.is_broadcast:
                n *= self.extent(i)
        return n * tv.dtype.itemsize

    def _needs_int64(self) -> bool:
        for tv in self.fusion.tensors():
            try:
                if self.numel(tv) > _INT32_MAX:
                    return True
            except Exception:  # noqa: BLE001 - an extent only an executed op knows (data-dependent)
                continue
        for tv, size in self.sizes.items():
            span = sum((n - 1) * abs(s) for n, s in zip(size, self.strides[tv]) if n > 0)
            if span > _INT32_MAX:
                return True
        return False


def _logical_layout(tv: TensorView, x: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(sizes, strides) of `x` per logical axis of the input `tv`: the tensor's dims hold
    `tv.tensor_axes()`, its root where the logical domain adds broadcasts to it."""
    if not tv.domain.added_broadcasts():
        return tuple(x.shape), tuple(x.stride())
    dim = {i: d for d, i in enumerate(tv.tensor_axes())}
    sizes, strides = [], []
    for i in tv.logical_no_reductions():
        d = dim.get(i)
        sizes.append(1 if d is None else x.shape[d])
        strides.append(0 if d is None else x.stride(d))
    return tuple(sizes), tuple(strides)


def _alignment(x: torch.Tensor) -> int:
    """The largest power of two (up to 16 bytes) dividing the tensor's data address."""
    if x.device.type == "meta":
        return 16
    try:
        ptr = x.data_ptr()
    except RuntimeError:
        return 16
    align = 16
    while align > 1 and ptr % align:
        align //= 2
    return align
