"""expr_eval: work ATen does best (matmul, linear, scan, the ATen-only ops), run through ATen
rather than a generated kernel, with the views around it."""
from __future__ import annotations

from .analysis import ATEN, RESHAPE, VIEW, SubFusion


def reject_reason(sub: SubFusion) -> str | None:
    if ATEN not in sub.kinds:
        return "no ATen-only op (matmul, linear, scan, argsort, ...)"
    others = sub.kinds - {ATEN, VIEW, RESHAPE}
    if others:
        return f"holds {', '.join(sorted(others))} work a kernel should do"
    return None
