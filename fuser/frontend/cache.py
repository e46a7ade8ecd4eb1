"""The structural fusion cache: one Fusion per distinct definition (sequence of records)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fuser.ir import Fusion

from .records import Record


@dataclass(eq=False)
class CachedFusion:
    """A defined fusion, shared by every FusionDefinition that records the same program."""

    id: int
    records: tuple[Record, ...]
    fusion: Fusion
    state_vals: list[Any]
    #: per input signature: what the runtime prepared to run this fusion (segments, kernels)
    executors: dict = field(default_factory=dict)
    #: the runner the last execute used (for last_cuda_code / last_scheduled_fusion_ir)
    last_runner: Any = None
    #: per set of enabled pre-segmentation passes: the PresegFusion the segmenter gets
    preseg: dict = field(default_factory=dict)
    #: per returned output: ("out", k) the runtime's k-th result, ("input", k) the k-th input
    #: (an output also written into that input); set by the first definition
    output_plan: list | None = None
    #: whether the definition places tensors on a DeviceMesh (it runs sharded, every call
    #: agreed on by the ranks), and per input placement its propagated copy
    sharded: bool = field(init=False)
    sharded_copies: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from fuser.multidevice.sharding import is_sharded

        self.sharded = is_sharded(self.fusion)


class FusionCache:
    """Process-wide cache of defined fusions, keyed by their records."""

    _instance: "FusionCache | None" = None

    def __init__(self) -> None:
        self._by_key: dict[tuple, CachedFusion] = {}
        self._entries: list[CachedFusion] = []

    @classmethod
    def get(cls, max_fusions: int = 16384) -> "FusionCache":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    @classmethod
    def reset(cls) -> None:
        """Forget every cached fusion."""
        cls._instance = cls()

    def num_fusions(self) -> int:
        return len(self._entries)

    def _lookup_or_add(self, records: list[Record], fusion: Fusion, state_vals: list[Any]) -> CachedFusion:
        key = tuple(r.key() for r in records)
        entry = self._by_key.get(key)
        if entry is None:
            entry = CachedFusion(len(self._entries), tuple(records), fusion, state_vals)
            self._by_key[key] = entry
            self._entries.append(entry)
        return entry

    def fusion(self, id: int) -> CachedFusion:  # noqa: A002 - mirrors fd.id()
        return self._entries[id]
