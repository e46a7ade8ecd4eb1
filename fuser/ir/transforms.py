"""Walking the Split/Merge/Resize graph between two of a tensor's domains."""
from __future__ import annotations

from typing import Sequence

from .base import Expr
from .domain import IterDomain


def id_exprs_between(src: Sequence[IterDomain], dst: Sequence[IterDomain]) -> list[Expr]:
    """The IterDomain transforms that lead from `src` to `dst`, producers first."""
    src_set = set(src)
    found: dict[Expr, None] = {}
    visiting: set[IterDomain] = set()

    def visit(i: IterDomain) -> None:
        if i in src_set or i in visiting:
            return
        visiting.add(i)
        d = i.definition
        if d is None or d.tensor_level:
            return
        for inp in d.inputs:
            visit(inp)
        found.setdefault(d, None)

    for i in dst:
        visit(i)
    return list(found)
