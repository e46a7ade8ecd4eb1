"""no_op: segments that compute nothing — every output is empty, or only views
(broadcast, squeeze, expand) of the inputs."""
from __future__ import annotations

from .analysis import SCATTER, SubFusion, VIEW


def reject_reason(sub: SubFusion) -> str | None:
    if sub.kinds <= {VIEW}:
        return None
    info = sub.a.info
    # (a scatter writing nothing still checks its indices: the greedy scheduler's kernel does)
    if info is not None and sub.outputs and SCATTER not in sub.kinds and all(info.numel(tv) == 0 for tv in sub.outputs):
        return None
    return "computes data: not only views, and some output is not empty"
