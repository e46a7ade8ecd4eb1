"""Comparing fuser's outputs with a reference, with tolerances that follow the dtype."""
from __future__ import annotations

from typing import Any

import torch

# (rtol, atol) per dtype: one rounding of the output type, plus float32 accumulation noise
_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
    torch.complex64: (1.3e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float8_e4m3fn: (0.125, 0.0625),
    torch.float8_e5m2: (0.25, 0.125),
}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing values of `dtype`; exact for integers and bools."""
    return _TOLERANCES.get(dtype, (0.0, 0.0))


def assert_close(got: Any, want: Any, *, what: str = "value", rtol: float | None = None, atol: float | None = None) -> None:
    """Raise AssertionError naming `what` unless `got` matches `want` in dtype, shape and value."""
    if not isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor):
            got = got.item()
        if got != want and not (got != got and want != want):
            raise AssertionError(f"{what}: got {got!r}, expected {want!r}")
        return
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: got {type(got).__name__}, expected a tensor")
    if got.dtype != want.dtype:
        raise AssertionError(f"{what}: dtype {got.dtype}, expected {want.dtype}")
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    r, a = tolerances(want.dtype)
    got, want = got.cpu(), want.cpu()
    if want.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # torch compares no fp8 with tolerances
        got, want = got.float(), want.float()
    torch.testing.assert_close(
        got, want, rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
        equal_nan=True, msg=lambda m: f"{what}: {m}",
    )
