"""What schedulers may know about one call's inputs: sizes, strides, alignment, index
type, and the device's limits."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from fuser.ir import Fusion, IterDomain, Scalar, TensorView

if TYPE_CHECKING:
    from fuser.runtime.binding import Binding


@dataclass(frozen=True)
class DeviceLimits:
    """Per-SM resources a kernel's launch configuration and persistent buffers must fit."""

    sm_count: int = 132
    smem_per_sm: int = 228 * 1024
    #: shared memory a single block may use (opt-in maximum)
    smem_per_block: int = 227 * 1024
    registers_per_sm: int = 64 * 1024  # 32-bit registers
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    #: resident blocks per SM at most (torch does not report it: see _MAX_BLOCKS_PER_SM)
    max_blocks_per_sm: int = 32
    warp_size: int = 32
    name: str = "NVIDIA H100 (assumed: no GPU present)"

    @property
    def register_file_bytes(self) -> int:
        return self.registers_per_sm * 4

    @classmethod
    def h100(cls) -> "DeviceLimits":
        return cls()

    @classmethod
    def of(cls, device: torch.device) -> "DeviceLimits":
        """The limits of `device`; an H100's when it is not a CUDA device."""
        if device.type != "cuda" or not torch.cuda.is_available():
            return cls.h100()
        p = torch.cuda.get_device_properties(device)
        smem_sm = getattr(p, "shared_memory_per_multiprocessor", cls.smem_per_sm)
        smem_block = getattr(p, "shared_memory_per_block_optin", cls.smem_per_block)
        regs = getattr(p, "regs_per_multiprocessor", cls.registers_per_sm)
        return cls(
            sm_count=p.multi_processor_count,
            smem_per_sm=smem_sm,
            smem_per_block=smem_block,
            registers_per_sm=regs,
            max_threads_per_block=getattr(p, "max_threads_per_block", 1024),
            max_threads_per_sm=getattr(p, "max_threads_per_multi_processor", cls.max_threads_per_sm),
            warp_size=getattr(p, "warp_size", 32),
            max_blocks_per_sm=_MAX_BLOCKS_PER_SM.get((p.major, p.minor), cls.max_blocks_per_sm),
            name=p.name,
        )


#: resident blocks per SM by compute capability where it is not 32 (CUDA programming guide,
#: "Technical Specifications per Compute Capability")
_MAX_BLOCKS_PER_SM = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24}


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
