"""Checking that a kernel wrote every element of its outputs (issue 32, item 3).

Poison alone cannot prove it: an element left unwritten passes wherever the answer equals
the poison (True where a comparison is true, NaN where the reference is NaN), or lies
within the tolerance of it (0xA5 bytes read as -2.9e-16 in fp32). So a kernel runs twice on
the same inputs, into two outputs whose every byte starts different (the second holds the
bitwise complement of the first), and the two must end bit-identical: every byte of a
written element is the kernel's (deterministic: fixed-order reductions, counter-based RNG),
every byte of an unwritten one still differs. That holds for any dtype and any value.

`poison_` fills outputs for the value comparison too (NaN is outside every tolerance).
`assert_written` is the check; `checked_run` wraps `GeneratedKernel.run` with it (the
conftest fixture `kernel_writes_checked`); test_codegen_ops_cuda.py launches its kernels
twice itself.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

#: what fresh outputs are filled with, per round: (float and complex, integer, bool)
POISONS = ((float("nan"), -7, True), (-7.0, 7, False))


def poison_(outs: Sequence[Any], round_: int = 0) -> Sequence[Any]:
    """Fill fresh outputs with a value a correct kernel overwrites (NaN floats: outside
    every tolerance). An expanded (stride-0) output is filled through its storage."""
    f, i, b = POISONS[round_ % len(POISONS)]
    for t in outs:
        if not isinstance(t, torch.Tensor):
            continue
        base = stored(t)
        if base.numel() == 0:
            continue
        if base.dtype.is_floating_point or base.dtype.is_complex:
            base.fill_(f)
        elif base.dtype is torch.bool:
            base.fill_(b)
        else:
            base.fill_(i)
    return outs


def stored(t: torch.Tensor) -> torch.Tensor:
    """`t`'s whole storage as a flat tensor of its dtype (an expanded output's stored
    elements; an output expanded to no elements still has them)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """`t`'s whole storage as a flat uint8 tensor (a view: writes show in `t`)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(s, 0, (s.nbytes(),), (1,))


def complement_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor laid out as `t` (storage size, offset, sizes, strides) on storage of its own
    holding the bitwise complement of `t`'s storage: every byte differs from `t`'s."""
    raw = storage_bytes(t).bitwise_not()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        raw.untyped_storage(), t.storage_offset(), t.size(), t.stride())


def unwritten(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Storage indices of the elements whose bytes differ between two outputs that began as
    complements of each other: those the kernel left unwritten."""
    a, b = storage_bytes(first), storage_bytes(second)
    assert a.numel() == b.numel(), f"storages of {a.numel()} and {b.numel()} bytes"
    if torch.equal(a, b):  # the usual answer, without building an index
        return torch.empty(0, dtype=torch.int64, device=a.device)
    return torch.unique((a != b).nonzero().flatten() // first.element_size())


def assert_written(firsts: Sequence[torch.Tensor], seconds: Sequence[torch.Tensor], what: str = "kernel") -> None:
    """Every element of every output was written: each pair (one launch's output, the other
    launch's, begun as complements) ends bit-identical."""
    problems = []
    for k, (a, b) in enumerate(zip(firsts, seconds)):
        if not isinstance(a, torch.Tensor):
            continue
        idx = unwritten(a, b)
        if idx.numel():
            fa, fb = stored(a), stored(b)
            shown = ", ".join(f"[{j}] {fa[j].item()!r} / {fb[j].item()!r}" for j in idx[:4].tolist())
            problems.append(f"output {k} ({a.dtype}, {tuple(a.shape)}): {idx.numel()} of {fa.numel()} stored "
                            f"elements left unwritten (storage index: value after each launch) {shown}")
    assert not problems, f"{what}: " + "; ".join(problems)


def checked_run(run: Callable[..., None]) -> Callable[..., None]:
    """`GeneratedKernel.run` that launches twice, into complement-poisoned copies of the
    outputs first, and asserts every output element was written. Not while a CUDA graph is
    being captured (the check reads results back, which capture forbids)."""

    def run_checked(self: Any, inputs: Sequence[Any], outputs: Sequence[torch.Tensor],
                    philox_state: Any = None) -> None:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return run(self, inputs, outputs, philox_state)
        if philox_state is None and getattr(self, "draws_random", False):
            # one draw for both launches, as run itself would draw once: same random bits
            from fuser.runtime import philox

            philox_state = philox.draw(self.info.device, philox.streams(self.fusion))
        shadows = [complement_like(t) if isinstance(t, torch.Tensor) else t for t in outputs]
        run(self, inputs, shadows, philox_state)
        run(self, inputs, outputs, philox_state)
        name = getattr(getattr(self, "kernel", None), "name", type(self).__name__)
        assert_written(outputs, shadows, f"kernel {name}")

    run_checked.__wrapped__ = run  # type: ignore[attr-defined]
    return run_checked
