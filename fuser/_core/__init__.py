"""Compiled (Cython) core: graph primitives used by the IR and the segmenter."""

try:
    from .flow import min_cut
    from .graph import CycleError, reachable_from, reverse_csr, topo_order
    from .segment import GroupGraph
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "fuser._core is not compiled; install the package with "
        "`pip install -e .` (or `pip install .`)"
    ) from exc

__all__ = [
    "CycleError",
    "GroupGraph",
    "min_cut",
    "reachable_from",
    "reverse_csr",
    "topo_order",
]
