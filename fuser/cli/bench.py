"""`python -m fuser bench`: kernel time of fuser against eager PyTorch and torch.compile.

On a CUDA device, for each benchmark fusion (fuser/benchmarks/fusions.py; ``--only`` picks
fusions by name or by group: pointwise, reduction, backward), at each of its shapes
(``--quick``: its quick subset), and on the same inputs: fuser (``fd.execute``), the eager
PyTorch function and ``torch.compile`` of it (default mode). Reported: the median
kernel time (CUDA events around a loop of calls, see `fuser.benchmarks.kernel_time`), the
bytes a kernel must move, the achieved bandwidth as a percentage of the measured
device-to-device copy bandwidth, a correctness check of fuser against eager (dtype-aware
tolerances, widened with the reduced extent for reductions; a fusion drawing random numbers,
whose eager twin draws others, against the reference executor replaying the same draw), and
how fuser ran: each
segment's scheduler and whether a generated kernel or the reference executor ran it.
``--after-producer copy|write`` times each bandwidth row's calls one by one, each right after
a kernel rewrites the call's largest input (a copy into it, or normal_, which only writes),
as a model's activation comes from the kernel before it: what the producer wrote last is
still in L2 (dirty) when the call starts. Then
the host latency of a cached tiny fusion and the first-run compile time of GELU with a cold
and a warm kernel cache.

Without CUDA (or with ``--cpu``) each fusion runs once on small CPU tensors through fuser and
eager PyTorch and is checked; there is nothing to time.

Exit status: 0 when every check passed, 1 when a fuser result mismatched or fuser failed.
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from fuser.benchmarks import KernelTime
from fuser.benchmarks import fusions as F

_US = "µs"


def _unit() -> str:
    """"µs", or "us" when stdout cannot encode µ."""
    enc = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        _US.encode(enc)
        return _US
    except (UnicodeEncodeError, LookupError):
        return "us"


# ----------------------------------------------------------------------------------------------
# shared pieces


def _check(fusion: F.BenchFusion, got: Sequence[Any], inputs: Sequence[torch.Tensor], fd: Any = None,
           rng_state: torch.Tensor | None = None) -> tuple[bool, str]:
    """(ok, message): fuser's outputs `got` against the eager function on `inputs`; for a
    fusion drawing random numbers, against the reference executor drawing the same ones
    (`BenchFusion.expected`: `fd` ran with PyTorch's generator at `rng_state`)."""
    from fuser.runtime.tolerance import assert_close

    want = fusion.expected(inputs, fd, rng_state)
    if len(got) != len(want):
        return False, f"{len(got)} outputs, {'the reference' if fusion.random else 'eager'} gives {len(want)}"
    try:
        for k, (g, w) in enumerate(zip(got, want)):
            rtol, atol = fusion.tolerance(inputs, w, k) if isinstance(w, torch.Tensor) else (None, None)
            assert_close(g, w, what=f"{fusion.name} output {k}", rtol=rtol, atol=atol)
    except AssertionError as e:
        return False, str(e).strip().splitlines()[0] if str(e).strip() else "assert_close failed"
    return True, ""


def _generator_state(f: F.BenchFusion, inputs: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """PyTorch's generator state before fuser runs a fusion drawing random numbers (its
    check replays the draw); None for the others."""
    if not f.random:
        return None
    from fuser.runtime.philox import generator_state

    return generator_state(inputs[0].device)


def fuser_segments(fd: Any) -> list[tuple[str, bool]] | None:
    """(scheduler, ran a generated kernel) for each segment of the last execute of `fd`,
    in order; None when `fd` has not run."""
    runner = getattr(getattr(fd, "_entry", None), "last_runner", None)
    runs = getattr(runner, "runs", None)
    if runs is None:
        return None
    out = []
    for r in runs:
        sched = getattr(getattr(r, "group", None), "scheduler", None)
        out.append((str(getattr(sched, "value", sched) or "?"), bool(getattr(r, "kernel", None))))
    return out


def _schedulers(names: Sequence[str]) -> str:
    """"reduction" / "2x reduction, pointwise": each scheduler once, in first-seen order."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(n if c == 1 else f"{c}x {n}" for n, c in counts.items())


def _fuser_path(fd: Any) -> str:
    """How the last execute of `fd` ran, naming each segment's scheduler: generated kernels
    ("1 kernel (inner_persistent)") and/or reference-executor segments ("reference (reduction)")."""
    segs = fuser_segments(fd)
    if segs is None:
        return "?"
    gen = [s for s, ran in segs if ran]
    ref = [s for s, ran in segs if not ran]
    parts = []
    if gen:
        parts.append(f"{len(gen)} kernel{'s' if len(gen) > 1 else ''} ({_schedulers(gen)})")
    if ref:
        parts.append(f"reference ({_schedulers(ref)})")
    return " + ".join(parts) or "no segments"


def _first_line(e: BaseException) -> str:
    """The exception's type and first line, plus its first line that says "error" (a
    compiler's message starts with a header; the first error is what matters)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = f"{type(e).__name__}: {lines[0] if lines else ''}"
    err = next((ln for ln in lines[1:] if "error" in ln.lower()), None)
    if err:
        msg += f" | {err}"
    return msg if len(msg) <= 300 else msg[:297] + "..."


def _select(only: Sequence[str] | None) -> list[F.BenchFusion]:
    """The fusions `--only` names (fusions or groups, see `fuser.benchmarks.fusions.select`)."""
    return F.select(only)


# ----------------------------------------------------------------------------------------------
# without CUDA: run and check on CPU


def _run_cpu(fusions: Sequence[F.BenchFusion], reason: str) -> int:
    print(f"fuser bench: {reason}: no kernel timings (they need an NVIDIA GPU).")
    print("Checking each fusion once on CPU through fuser (fd.execute) and eager PyTorch, small shapes:")
    failed = 0
    width = max(len(f.name) for f in fusions)
    for f in fusions:
        shape = f.small_shape if f.kind == "bandwidth" else f.shape
        inputs = f.make_inputs("cpu", shape)
        try:
            fd = f.fusion_definition()
            state = _generator_state(f, inputs)
            got = fd.execute(inputs)
            ok, msg = _check(f, got, inputs, fd, state)
            path = _fuser_path(fd)
            status = "ok" if ok else f"MISMATCH  {msg}"
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            ok, path, status = False, "error", f"ERROR  {_first_line(e)}"
        failed += not ok
        print(f"  {f.name:<{width}}  {str(list(shape)):>12}  {f.bytes_moved(inputs):>9} bytes  "
              f"fuser: {path:<28} {status}")
    if failed:
        print(f"{failed} of {len(fusions)} fusions failed or do not match eager PyTorch")
        return 1
    print(f"all {len(fusions)} fusions match eager PyTorch")
    return 0


# ----------------------------------------------------------------------------------------------
# on CUDA


@dataclass
class _Row:
    fusion: F.BenchFusion
    shape: tuple[int, ...]
    nbytes: int = 0
    times: dict[str, Any] = field(default_factory=dict)  # impl -> KernelTime | None
    errors: dict[str, str] = field(default_factory=dict)  # impl -> why n/a
    check: str = "-"
    path: str = "?"
    latency: dict[str, Any] = field(default_factory=dict)  # impl -> µs | None
    #: input sets the timed loops rotate over (more than one: a single set would sit in L2)
    sets: int = 1

    @property
    def label(self) -> str:
        """The fusion's name, and the shape where the fusion has several."""
        f = self.fusion
        if len(set(f.shapes) | set(f.quick_shapes)) > 1:
            return f"{f.name}@{'x'.join(map(str, self.shape))}"
        return f.name


_IMPLS = ("fuser", "eager", "compile")
#: a cached one-kernel fd.execute should cost the host at most this many eager op calls
HOST_LATENCY_TARGET = 2.0


def _compiled(fn: Callable) -> Callable:
    """torch.compile(fn) (default mode) with dynamo's caches reset first, so that one eager
    function used at two shapes (the GELU rows) is compiled for each as if first seen."""
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is not None and hasattr(dynamo, "reset"):
        dynamo.reset()
    return torch.compile(fn)


def _time_after_producer(fn: Callable[[], Any], inputs: list, producer: str, *, iters: int,
                         repeats: int) -> KernelTime:
    """`fn`'s GPU time per call, each call right after `producer` rewrites the largest of
    `inputs` (`kernel_time_after_producer`), as a KernelTime; the host's issue time is not
    measured (nan). A ValueError where no input can be rewritten."""
    from fuser.benchmarks import kernel_time_after_producer

    us = kernel_time_after_producer(fn, inputs, producer=producer, iters=iters, repeats=repeats)
    if us is None:
        raise ValueError(f"--after-producer {producer}: no input the producer can rewrite "
                         "(none is on the GPU, or each is expanded)")
    return KernelTime(us, math.nan, False, iters, repeats)


def _bench_row(f: F.BenchFusion, shape, *, iters: int, repeats: int, latency_calls: int, l2: int = 0,
               producer: str | None = None) -> _Row:
    """One table row: `f` at `shape` through fuser (checked against eager), eager PyTorch and
    torch.compile, timed over loops of calls, or with `producer` ("copy", "write" or "matmul") a
    bandwidth row's calls each right after that producer rewrites their largest input."""
    from fuser.benchmarks import host_time_per_call, kernel_time, rotating, rotation

    row = _Row(f, tuple(shape))
    inputs = f.make_inputs("cuda", shape)
    row.nbytes = f.bytes_moved(inputs)
    after = producer if f.kind == "bandwidth" else None
    # shapes that fit in L2 are timed over several input sets, as a model's loop would
    # meet them (fresh activations), not re-reading what the last call left in L2; after a
    # producer, the input is the one it wrote, as in a model
    row.sets = rotation(row.nbytes, l2) if f.kind == "bandwidth" and after is None else 1
    sets = [inputs] + [f.make_inputs("cuda", shape) for _ in range(row.sets - 1)]
    fns: dict[str, Callable[[], Any] | None] = {}

    # fuser: define, run once, check against eager
    try:
        fd = f.fusion_definition()
        state = _generator_state(f, inputs)
        got = fd.execute(inputs)
        torch.cuda.synchronize()
        ok, msg = _check(f, got, inputs, fd, state)
        row.check = "ok" if ok else "MISMATCH"
        if not ok:
            row.errors["check"] = msg
        row.path = _fuser_path(fd)
        del got
        fns["fuser"] = rotating(fd.execute, sets)
    except Exception as e:  # noqa: BLE001
        row.check, row.path = "ERROR", "error"
        row.errors["fuser"] = _first_line(e)
        traceback.print_exc(file=sys.stderr)
        fns["fuser"] = None

    fns["eager"] = rotating(f.eager, sets)

    try:
        compiled = _compiled(f.reference)
        compiled(inputs)  # compiles here; failures show on the first call
        torch.cuda.synchronize()
        fns["compile"] = rotating(compiled, sets)
    except Exception as e:  # noqa: BLE001
        row.errors["compile"] = _first_line(e)
        fns["compile"] = None

    for impl in _IMPLS:
        fn = fns[impl]
        if fn is None:
            row.times[impl] = None
            continue
        try:
            row.times[impl] = (_time_after_producer(fn, inputs, after, iters=iters, repeats=repeats) if after
                               else kernel_time(fn, iters=iters, repeats=repeats))
        except Exception as e:  # noqa: BLE001
            row.times[impl] = None
            row.errors.setdefault(impl, _first_line(e))

    if f.kind == "latency":
        for impl in _IMPLS:
            fn = fns[impl]
            try:
                row.latency[impl] = host_time_per_call(fn, calls=latency_calls) if fn is not None else None
            except Exception as e:  # noqa: BLE001
                row.latency[impl] = None
                row.errors.setdefault(impl, _first_line(e))
        # the yardstick: one eager PyTorch op on the same tensor, in the same process
        x = next(t for t in inputs if isinstance(t, torch.Tensor))
        row.latency["one eager op"] = host_time_per_call(lambda: torch.mul(x, 0.5), calls=latency_calls)
    inputs = sets = fns = None  # the closures above are done: free the inputs
    torch.cuda.empty_cache()
    return row


def _reset_process_caches() -> list[str]:
    """Forget what this process remembers about compiled fusions, except the disk cache:
    the structural FusionCache (with each entry's per-signature runners, which hold the
    loaded kernel modules) and the kernel cache's in-memory CUBINs. Returns what was reset."""
    from fuser import FusionCache

    FusionCache.reset()
    done = ["FusionCache (definitions, segmentations, scheduled/lowered kernels, loaded modules)"]
    try:
        from fuser.driver import kernel_cache
    except ImportError:
        kernel_cache = None
    if kernel_cache is not None and hasattr(kernel_cache, "clear"):
        kernel_cache.clear()
        done.append("kernel_cache in-memory CUBINs")
    from fuser.kernel import generated as kernels

    kernels.clear_loaded()
    done.append("loaded kernel modules")
    return done


def _kernel_cache_stats() -> dict[str, int] | None:
    try:
        from fuser.driver import kernel_cache
    except ImportError:
        return None
    stats = getattr(kernel_cache, "stats", None)
    return stats() if callable(stats) else None


def _compile_times(f: F.BenchFusion, shape) -> list[tuple[str, float | None, str]]:
    """(label, seconds or None, note) for the first run of `f` with a cold kernel cache, a
    warm one (disk only), and a hot process (every cache kept)."""
    inputs = f.make_inputs("cuda", shape)
    torch.cuda.synchronize()
    old = os.environ.get("FUSER_CACHE_DIR")
    tmp = tempfile.mkdtemp(prefix="fuser-bench-kernels-")
    os.environ["FUSER_CACHE_DIR"] = tmp
    results: list[tuple[str, float | None, str]] = []

    def first_run() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fd = f.fusion_definition()
        fd.execute(inputs)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    try:
        for label in ("cold", "warm", "hot"):
            if label != "hot":
                _reset_process_caches()
            try:
                t = first_run()
            except Exception as e:  # noqa: BLE001
                results.append((label, None, _first_line(e)))
                continue
            stats = _kernel_cache_stats()
            note = ""
            if stats is not None and label != "hot":
                compiled, disk = stats.get("compiles", 0), stats.get("disk_hits", 0)
                note = f"kernel cache: {compiled} compiled, {disk} from disk"
                if not compiled and not disk:
                    note += "; no generated kernel: fuser ran the reference executor"
            results.append((label, t, note))
    finally:
        if old is None:
            os.environ.pop("FUSER_CACHE_DIR", None)
        else:
            os.environ["FUSER_CACHE_DIR"] = old
        shutil.rmtree(tmp, ignore_errors=True)
        # leave no runner pointing at the deleted directory's kernels behind
        _reset_process_caches()
    return results


def _fmt_time(t: Any, mark: bool = True) -> str:
    if t is None:
        return "n/a"
    s = f"{t.us:.1f}" if t.us < 1e4 else f"{t.us:.0f}"
    return s + ("*" if mark and t.host_bound else "")


def _pct(nbytes: int, t: Any, bw: float, kind: str) -> str:
    if t is None:
        return "n/a"
    if kind == "latency":
        return "-"
    return f"{100.0 * nbytes / (t.us * 1e-6) / bw:.1f}"


def _table(rows: Sequence[_Row], bw: float) -> str:
    us = _unit()
    head = ["fusion", "shape", f"fuser {us}", f"eager {us}", f"compile {us}", f"fuser host {us}", "GB moved",
            "fuser %copy", "eager %copy", "compile %copy", "check", "fuser ran"]
    body = []
    for r in rows:
        k = r.fusion.kind
        host = r.times.get("fuser")
        body.append([
            r.fusion.name,
            "x".join(map(str, r.shape)) + (f" (x{r.sets})" if r.sets > 1 else ""),
            *(_fmt_time(r.times.get(i)) for i in _IMPLS),
            "n/a" if host is None else "-" if math.isnan(host.host_us) else f"{host.host_us:.1f}",
            f"{r.nbytes / 1e9:.3f}" if r.nbytes >= 1e6 else f"{r.nbytes / 1e9:.1e}",
            *(_pct(r.nbytes, r.times.get(i), bw, k) for i in _IMPLS),
            r.check,
            r.path,
        ])
    widths = [max(len(str(x[c])) for x in [head, *body]) for c in range(len(head))]
    left = {0, 10, 11}

    def line(cells):
        return "  ".join(str(c).ljust(w) if j in left else str(c).rjust(w)
                         for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    out += [line(b) for b in body]
    return "\n".join(out)


def _plot(path: str, rows: Sequence[_Row], bw: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401 - used through matplotlib.ticker below
    except ImportError:
        print(f"--plot: matplotlib is not installed; no chart written to {path} (pip install matplotlib)")
        return
    bw_rows = [r for r in rows if r.fusion.kind == "bandwidth"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    names = [r.label for r in rows]
    width = 0.27
    for k, impl in enumerate(_IMPLS):
        xs = [j + (k - 1) * width for j in range(len(rows))]
        axes[0].bar(xs, [r.times[impl].us if r.times.get(impl) else 0.0 for r in rows], width, label=impl)
        xs = [j + (k - 1) * width for j in range(len(bw_rows))]
        axes[1].bar(xs, [100.0 * r.nbytes / (r.times[impl].us * 1e-6) / bw if r.times.get(impl) else 0.0
                         for r in bw_rows], width, label=impl)
    axes[0].set_xticks(range(len(rows)), names, rotation=20, ha="right")
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].set_ylabel("kernel time per call (µs, log)")
    top = max([r.times[i].us for r in rows for i in _IMPLS if r.times.get(i)] or [1.0])
    axes[0].set_ylim(top=top * 6)
    axes[0].legend(loc="upper center", ncol=3)
    axes[1].set_xticks(range(len(bw_rows)), [r.label for r in bw_rows], rotation=20, ha="right")
    axes[1].axhline(100.0, color="grey", lw=0.8, ls="--")
    axes[1].set_ylabel(f"% of copy bandwidth ({bw / 1e9:.0f} GB/s)")
    pcts = [100.0 * r.nbytes / (r.times[i].us * 1e-6) / bw for r in bw_rows for i in _IMPLS if r.times.get(i)]
    axes[1].set_ylim(0, max([100.0, *pcts]) * 1.2)
    axes[1].legend(loc="upper center", ncol=3)
    fig.suptitle(f"fuser bench on {torch.cuda.get_device_name()}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"chart written to {path}")


def _notes(rows: Sequence[_Row], l2: int) -> list[str]:
    """The table's footnotes: host-bound rows, and the rows timed over rotated input sets."""
    out = []
    bound = sorted({f"{r.label} ({i})" for r in rows for i, t in r.times.items() if t is not None and t.host_bound})
    if bound:
        out.append("* host-bound: issuing a call took the host longer than the GPU took to run it, so a loop of "
                   "calls runs at the host's pace (the 'fuser host' column for fuser): " + ", ".join(bound))
    else:
        out.append("no row is host-bound: the host issued every call faster than the GPU ran it")
    rotated = [f"{r.label} x{r.sets}" for r in rows if r.sets > 1]
    if rotated:
        out.append(f"(xN): moves less than 4x L2 ({l2 / 2**20:.0f} MiB) per call, so each timed loop rotates over N "
                   f"input sets and no call reads what the previous one left in L2: " + ", ".join(rotated))
    return out


def _run_cuda(fusions: Sequence[F.BenchFusion], *, quick: bool, plot: str | None, producer: str | None = None) -> int:
    import fuser
    from fuser.benchmarks import copy_bandwidth

    us = _unit()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0) or 0
    print(f"fuser bench on {props.name} (sm_{props.major}{props.minor}, {props.total_memory / 2**30:.0f} GiB, "
          f"L2 {l2 / 2**20:.0f} MiB); torch {torch.__version__}, fuser {fuser.__version__}"
          + ("; --quick" if quick else "") + (f"; --after-producer {producer}" if producer else ""))
    bw, bw_t = copy_bandwidth(1 << 28 if quick else 1 << 30, iters=10 if quick else 20)
    print(f"device-to-device copy bandwidth: {bw / 1e9:.0f} GB/s "
          f"(dst.copy_(src) on {(256 if quick else 1024)} MiB, 2 x bytes / time, {bw_t.us:.0f} {us} per copy)")

    iters, repeats, latency_calls = (20, 3, 500) if quick else (100, 7, 2000)
    rows: list[_Row] = []
    for f in fusions:
        for shape in (f.quick_shapes if quick else f.shapes):
            print(f"  {f.name} {list(shape)} ...", end="", file=sys.stderr, flush=True)
            r = _bench_row(f, shape, iters=iters, repeats=repeats, latency_calls=latency_calls, l2=l2,
                           producer=producer)
            rows.append(r)
            # (each row as it ends: a run cut short by a time limit still tells what it measured)
            print(" " + "  ".join(f"{i} {_fmt_time(r.times.get(i))} {us} ({_pct(r.nbytes, r.times.get(i), bw, f.kind)}%)"
                                  for i in _IMPLS) + f"  {r.check}", file=sys.stderr, flush=True)

    print()
    print(_table(rows, bw))
    print(f"kernel time: median over {repeats} loops of {iters} calls, CUDA events around each loop / {iters}; "
          "the GPU is held busy (torch.cuda._sleep) while the host issues the loop. fuser host: the host's "
          "time to issue one call (the same loops, no waiting).")
    if producer:
        from fuser.benchmarks import MATMUL_PRODUCER_K as k

        what = {"copy": "copies into it from a clone (a read and a write)",
                "write": "writes it with normal_ (writes only, as torch.randn makes a tensor)",
                "matmul": f"writes it as a matmul's output ([rows, {k}] @ [{k}, columns], a linear layer's)"}[producer]
        print(f"--after-producer {producer}: each bandwidth row's call is timed alone (median of {repeats} x "
              f"{iters} calls, CUDA events around each call) right after a kernel that {what}; the part the "
              "producer wrote last is in L2 when the call starts. Host time is not measured then ('-').")
    for note in _notes(rows, l2):
        print(note)
    for r in rows:
        for what, msg in r.errors.items():
            label = {"check": "fuser vs eager", "fuser": "fuser", "eager": "eager", "compile": "torch.compile"}[what]
            print(f"  {r.label}: {label}: {msg}")

    lat = [r for r in rows if r.fusion.kind == "latency"]
    for r in lat:
        print()
        print(f"host latency, {r.fusion.name} {list(r.shape)} (cached; per-call wall time of a loop of "
              f"{latency_calls} calls, one synchronize at the end, median of 5 loops):")
        for impl in (*_IMPLS, "one eager op"):
            v = r.latency.get(impl)
            print(f"  {impl:<12} {('n/a' if v is None else f'{v:.1f}'):>8} {us}/call")
        fz, op = r.latency.get("fuser"), r.latency.get("one eager op")
        if fz and op:
            print(f"  fuser / one eager op = {fz / op:.2f} (target: at most {HOST_LATENCY_TARGET:g} eager op calls)")

    gelu = next((f for f in fusions if f.name == "gelu_tanh_bf16"), None) or next(
        (f for f in fusions if f.name == "latency_gelu_8x8"), None)
    if gelu is not None:
        shape = gelu.quick_shape if quick else gelu.shape
        print()
        print(f"first-run compile time of {gelu.name} {list(shape)}: FusionDefinition to first result "
              "(synchronized), inputs made beforehand:")
        for label, t, note in _compile_times(gelu, shape):
            desc = {
                "cold": "cold: empty FUSER_CACHE_DIR, in-process caches cleared",
                "warm": "warm: same FUSER_CACHE_DIR (CUBIN on disk), in-process caches cleared again",
                "hot": "hot: new FusionDefinition, every cache of this process kept",
            }[label]
            value = "n/a" if t is None else f"{t * 1e3:.1f} ms"
            print(f"  {value:>10}  {desc}" + (f" [{note}]" if note else ""))
        print("  cleared: fuser.FusionCache (definitions, segmentations, kernels and their loaded modules) and "
              "fuser.driver.kernel_cache's memory; already initialised in every case: the CUDA context, "
              "pycuda, the NVRTC library and PyTorch's allocator.")

    if plot:
        print()
        _plot(plot, rows, bw)

    bad = [r.label for r in rows if r.check != "ok"]
    if bad:
        print(f"\nfuser failed or mismatched on: {', '.join(bad)}")
        return 1
    return 0


def _run_sweeps(names: Sequence[str]) -> int:
    """`bench --sweep`: each named threshold sweep's table (fuser/benchmarks/sweeps.py)."""
    from fuser.benchmarks import kernel_time, rotating, rotation
    from fuser.benchmarks import sweeps as S

    chosen = list(S.SWEEPS) if "all" in names else [S.by_name(n) for n in names]
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 0

    def time_one(sw: S.Sweep, f: F.BenchFusion, shape: tuple[int, ...]) -> float | None:
        try:
            inputs = f.make_inputs("cuda", shape)
            fd = f.fusion_definition()
            state = _generator_state(f, inputs)
            got = fd.execute(inputs)
            ok, msg = _check(f, got, inputs, fd, state)
            if not ok:
                print(f"  {f.name} {list(shape)}: MISMATCH {msg}", file=sys.stderr)
                return None
            if not all(kernel for _, kernel in fuser_segments(fd) or [("?", False)]):
                print(f"  {f.name} {list(shape)}: not every segment ran a generated kernel ({_fuser_path(fd)})",
                      file=sys.stderr)
                return None
            after = S.timer(sw)
            if after:
                return after(lambda: fd.execute(inputs), inputs)
            sets = [inputs] + [f.make_inputs("cuda", shape) for _ in range(rotation(f.bytes_moved(inputs), l2) - 1)]
            return kernel_time(rotating(fd.execute, sets), iters=50, repeats=5).us
        except Exception as e:  # noqa: BLE001 - a setting the scheduler cannot plan: n/a
            print(f"  {f.name} {list(shape)}: {_first_line(e)}", file=sys.stderr)
            return None
        finally:
            torch.cuda.empty_cache()

    for sw in chosen:
        rows = S.run(sw, functools.partial(time_one, sw), _reset_process_caches)
        print(S.table(sw, rows, S.device_name()))
        print()
    return 0


def run_bench(*, quick: bool = False, plot: str | None = None, only: Sequence[str] | None = None,
              cpu: bool = False, sweep: Sequence[str] | None = None, overlap: bool = False,
              after_producer: str | None = None) -> int:
    """`python -m fuser bench`; returns the exit status."""
    # the options that shape the timed table apply only where this run makes one
    times_table = not (cpu or sweep or overlap) and torch.cuda.is_available()
    if after_producer is not None:
        from fuser.benchmarks import PRODUCERS

        if after_producer not in PRODUCERS:
            print(f"fuser bench --after-producer {after_producer}: one of {', '.join(PRODUCERS)}", file=sys.stderr)
            return 2
        if not times_table:
            print(f"fuser bench --after-producer {after_producer}: it times the table's kernels, which this run "
                  "does not (it needs CUDA, and the default table; a sweep names its own producer)", file=sys.stderr)
            after_producer = None
    if plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            print(f"fuser bench --plot {plot}: drawing the chart needs matplotlib (pip install matplotlib); "
                  "running without it", file=sys.stderr)
            plot = None
        elif not times_table:
            print(f"fuser bench --plot {plot}: the chart shows kernel timings, which this run does not make "
                  "(it needs CUDA, and the default table)", file=sys.stderr)
            plot = None
    if overlap:
        if not torch.cuda.is_available():
            print("fuser bench --overlap: needs CUDA (torch.cuda.is_available() is False)", file=sys.stderr)
            return 2
        from fuser.benchmarks import overlap as O

        print(O.table(O.run(), torch.cuda.get_device_name()))
        return 0
    if sweep:
        if not torch.cuda.is_available():
            print("fuser bench --sweep: the sweeps time kernels and need CUDA (torch.cuda.is_available() is False)",
                  file=sys.stderr)
            return 2
        try:
            return _run_sweeps(sweep)
        except KeyError as e:
            print(f"fuser bench: {e.args[0]}", file=sys.stderr)
            return 2
    try:
        fusions = _select(only)
    except KeyError as e:
        print(f"fuser bench: {e.args[0]}", file=sys.stderr)
        return 2
    if cpu:
        return _run_cpu(fusions, "--cpu given")
    if not torch.cuda.is_available():
        return _run_cpu(fusions, "CUDA is not available (torch.cuda.is_available() is False)")
    return _run_cuda(fusions, quick=quick, plot=plot, producer=after_producer)


def add_parser(sub: Any) -> None:
    """Register the `bench` subcommand on an argparse subparsers object."""
    groups = "; ".join(f"{g}: {', '.join(names)}" for g, names in F.GROUPS.items())
    p = sub.add_parser(
        "bench",
        help="time fuser's kernels against eager PyTorch and torch.compile (CUDA); check them on CPU otherwise",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--quick", action="store_true",
                   help="fewer iterations, and each fusion at its quick shapes only (a subset for the reductions)")
    p.add_argument("--plot", metavar="OUT.png", default=None, help="also draw a bar chart (needs matplotlib)")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help=f"run only these fusions, or every fusion of these groups "
                        f"({', '.join(F.GROUPS)}; e.g. --only backward). Groups and their fusions: {groups}")
    p.add_argument("--cpu", action="store_true", help="only run and check each fusion on CPU, even with CUDA")
    from fuser.benchmarks import PRODUCERS
    from fuser.benchmarks.sweeps import SWEEPS

    p.add_argument("--after-producer", choices=PRODUCERS, default=None,
                   help="time each bandwidth row's calls one by one, each right after a kernel rewrites the call's "
                        "largest input: 'copy' (copy_ from a clone), 'write' (normal_, writes only) or 'matmul' (as "
                        "a linear layer's output), as a model's activation comes from the kernel before it (CUDA)")

    p.add_argument("--overlap", action="store_true",
                   help="instead of the table, time a stream-parallel matmul + pointwise loop beside its parts (CUDA)")
    p.add_argument("--sweep", nargs="+", metavar="NAME", default=None,
                   help="instead of the table, time one fusion around a scheduler threshold at each of a few "
                        "values of it (CUDA): " + ", ".join(s.name for s in SWEEPS) + ", or all")
