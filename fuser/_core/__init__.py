"""Compiled (Cython) core: graph primitives used by the IR and the segmenter."""

try:
    from .graph import CycleError, reachable_from, reverse_csr, topo_order
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "fuser._core.graph is not compiled; install the package with "
        "`pip install -e .` (or `pip install .`)"
    ) from exc

__all__ = ["CycleError", "reachable_from", "reverse_csr", "topo_order"]
