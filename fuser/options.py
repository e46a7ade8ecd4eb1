"""FUSER_DUMP / FUSER_DISABLE / FUSER_ENABLE: debug dumps, optimisation switches and opt-in
features, named as nvFuser's."""
from __future__ import annotations

import os
import sys

#: the names FUSER_DUMP understands; each has a dump() call site (tests/test_kernel_ir_dump.py checks)
KNOWN_DUMPS = frozenset({"fusion_ir", "fusion_ir_preseg", "segmented_fusion", "scheduler_params", "kernel_ir",
                         "cuda_kernel", "host_ir"})


def _names(var: str) -> frozenset[str]:
    return frozenset(n.strip() for n in os.environ.get(var, "").split(",") if n.strip())


def dump_enabled(name: str) -> bool:
    """Whether FUSER_DUMP names `name` (read on each call, so tests can set it)."""
    return name in _names("FUSER_DUMP")


def disabled(name: str) -> bool:
    """Whether FUSER_DISABLE names the optimisation `name`."""
    return name in _names("FUSER_DISABLE")


def enabled(name: str) -> bool:
    """Whether FUSER_ENABLE names the opt-in feature `name` (read on each call)."""
    return name in _names("FUSER_ENABLE")


def dump(name: str, text: str) -> None:
    """Print `text` to stderr under a header when FUSER_DUMP names `name`."""
    if dump_enabled(name):
        print(f"===== {name} =====\n{text.rstrip()}\n", file=sys.stderr)
