"""Pre-segmentation passes: rewrites of a defined fusion's IR that never change what it
computes, run on a copy of it before the segmenter sees it (nvFuser's preseg passes).

Each pass has a name that `FUSER_DISABLE` turns it off by (an opt-in pass, one that
`FUSER_ENABLE` or its module's switch turns on); `run_passes` returns the
fusion to segment and, for each of its values, the defined fusion's value it stands for,
so that segments can be described in the user's terms (`fd.segment`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from fuser.ir import Fusion, Val
from fuser.options import disabled

from . import approx_exp, input_broadcast, reciprocal_divisors, rounded_products, tanh_sigmoid


@dataclass(frozen=True)
class Pass:
    """One pass: `applies(fusion)` says whether it would change anything (checked on the
    defined fusion, so an unchanged fusion is not copied), `run(fusion, original)`
    rewrites the copy in place, recording in `original` what its new values stand for."""

    name: str
    applies: Callable[[Fusion], bool]
    run: Callable[[Fusion, dict[Val, Val]], int]
    #: an opt-in pass: whether it is switched on now (None: on unless FUSER_DISABLE names it)
    switched_on: Callable[[], bool] | None = None


#: in the order they run
PASSES: tuple[Pass, ...] = (
    Pass(input_broadcast.NAME, input_broadcast.applies, input_broadcast.fold_input_broadcasts),
    Pass(tanh_sigmoid.NAME, tanh_sigmoid.applies, tanh_sigmoid.tanh_to_sigmoid),
    Pass(reciprocal_divisors.NAME, reciprocal_divisors.applies, reciprocal_divisors.mark_reciprocal_divisors),
    Pass(approx_exp.NAME, approx_exp.applies, approx_exp.mark_approx_exps, approx_exp.switched_on),
    # last: it judges the products the rewrites above leave
    Pass(rounded_products.NAME, rounded_products.applies, rounded_products.mark_rounded_products),
)


@dataclass
class PresegFusion:
    """The fusion the segmenter gets, and how it relates to the defined one."""

    fusion: Fusion
    #: its values -> the defined fusion's value each stands for (absent: itself, or none)
    original: dict[Val, Val] = field(default_factory=dict)
    #: the names of the passes that changed something
    applied: tuple[str, ...] = ()

    def to_original(self, v: Val) -> Val:
        """The defined fusion's value that `v` of the rewritten fusion stands for."""
        return self.original.get(v, v)


def enabled_passes() -> tuple[str, ...]:
    """The names of the passes FUSER_DISABLE does not turn off and, of the opt-in ones,
    those switched on, in order."""
    return tuple(p.name for p in PASSES
                 if not disabled(p.name) and (p.switched_on is None or p.switched_on()))


def run_passes(fusion: Fusion) -> PresegFusion:
    """Run the enabled passes on a copy of `fusion`; `fusion` itself when none applies."""
    names = set(enabled_passes())
    todo = [p for p in PASSES if p.name in names]
    if not any(p.applies(fusion) for p in todo):
        return PresegFusion(fusion)
    copy, memo = fusion.clone()
    original: dict[Val, Val] = {new: old for old, new in memo.items() if isinstance(old, Val)}
    applied = tuple(p.name for p in todo if p.run(copy, original))
    return PresegFusion(copy, original, applied)


__all__ = ["Pass", "PASSES", "PresegFusion", "enabled_passes", "run_passes"]
