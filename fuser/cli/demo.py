"""`python -m fuser demo`: RMSNorm backward (seed 001) defined, run and checked against eager PyTorch."""
from __future__ import annotations

import sys
import time

import torch


def run_demo(device: str | None = None) -> int:
    """Run the demo; returns the process exit status (0 when every output matches)."""
    from fuser import FusionCache, FusionDefinition
    from fuser.examples.rmsnorm_backward import eager_reference, make_inputs, rmsnorm_backward
    from fuser.runtime.tolerance import assert_close

    from .bench import _fuser_path

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"fuser demo: --device {device} needs a CUDA GPU, and this PyTorch sees none "
              f"(torch {torch.__version__}); run it without --device to use the CPU", file=sys.stderr)
        return 2
    if device.type not in ("cpu", "cuda"):
        print(f"fuser demo: --device {device} is not a device the demo runs on: it compares real outputs "
              "with eager PyTorch, so it takes cpu or cuda", file=sys.stderr)
        return 2
    print(f"fuser demo: RMSNorm backward (seed 001) on {device}")

    t0 = time.perf_counter()
    with FusionDefinition() as fd:
        rmsnorm_backward(fd)
    t_def = time.perf_counter() - t0
    fusion = fd.fusion
    n_exprs = len(fusion.exprs())
    print(
        f"  defined in {t_def * 1e3:.1f} ms: {len(fusion.inputs)} inputs, {n_exprs} IR expressions, "
        f"{len(fusion.outputs)} outputs (fusion id {fd.id()}, {FusionCache.get().num_fusions()} in cache)"
    )

    inputs = make_inputs(device)
    moved = sum(x.untyped_storage().nbytes() for x in inputs)
    print(f"  inputs: {len(inputs)} tensors, {moved / 2**20:.0f} MiB of storage (two of them expanded, stride 0)")

    t0 = time.perf_counter()
    outs = fd.execute(inputs)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_run = time.perf_counter() - t0
    print(f"  first run (segmenting, scheduling, compiling, running) in {t_run:.2f} s: {_fuser_path(fd)}")

    expected = eager_reference(inputs)
    worst = 0.0
    for k, (got, want) in enumerate(zip(outs, expected)):
        assert_close(got, want, what=f"output {k}")
        err = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
        worst = max(worst, err)
        print(f"  output {k}: {str(got.dtype):15} {tuple(got.shape)!s:20} max |fuser - eager| = {err:.3g}")
    print(f"  all {len(outs)} outputs match eager PyTorch (worst abs diff {worst:.3g})")
    if device.type == "cuda":
        _timings(fd, inputs, eager_reference)
    return 0


def _timings(fd, inputs: list[torch.Tensor], eager) -> None:
    """GPU time per call of fuser, eager PyTorch and torch.compile on the same inputs."""
    from fuser.benchmarks import kernel_time

    from .bench import _compiled, _first_line

    times = {"fuser": kernel_time(lambda: fd.execute(inputs), iters=20, repeats=5)}
    times["eager PyTorch"] = kernel_time(lambda: eager(inputs), iters=5, repeats=3)
    try:
        compiled = _compiled(eager)
        times["torch.compile"] = kernel_time(lambda: compiled(inputs), iters=20, repeats=5)
    except Exception as e:  # a missing compiler toolchain, say: report it, keep the others
        print(f"  torch.compile failed: {_first_line(e)}")
    for name, t in times.items():
        speed = f" ({times[name].us / times['fuser'].us:.2f}x fuser's time)" if name != "fuser" else ""
        print(f"  {name:14} {t.us:9.1f} us per call{speed}")
