"""The asv suite (asv_bench/benchmarks) imports without asv, hides its GPU-only benchmarks
without CUDA, and each host-side benchmark runs once (a smoke run, not a timing)."""
import importlib.abc
import importlib.util
import inspect
import json
import os
import subprocess
import sys

import pytest
import torch

BENCH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "asv_bench", "benchmarks")


class _NoAsv(importlib.abc.MetaPathFinder):
    """Makes `import asv` / `import asv_runner` fail, as on a machine without the bench extra."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("asv", "asv_runner"):
            raise ImportError(f"{name} is blocked: the benchmark modules must not need asv")
        return None


def _load(name):
    """Import asv_bench/benchmarks/<name>.py under a private module name, with asv blocked."""
    spec = importlib.util.spec_from_file_location(f"_asv_bench_{name}", os.path.join(BENCH_DIR, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    blocker = _NoAsv()
    sys.meta_path.insert(0, blocker)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.meta_path.remove(blocker)
    return module


def _benchmark_classes(module):
    """The classes asv would look at: public, defined in `module`, with a time_/track_ method."""
    return [
        cls
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and not name.startswith("_") and cls.__module__ == module.__name__
        and any(m.startswith(("time_", "track_")) for m in vars(cls))
    ]


def _methods(cls):
    return [m for m in vars(cls) if m.startswith(("time_", "track_"))]


def _first_params(cls):
    """The first parameter combination of an asv class (asv: a list, or a list of lists)."""
    params = getattr(cls, "params", None)
    if params is None:
        return ()
    names = getattr(cls, "param_names", None)
    if names is not None and len(names) == 1 and not isinstance(params[0], list):
        return (params[0],)
    return tuple(p[0] for p in params)


def test_host_benchmarks_run_once():
    host = _load("host")
    classes = _benchmark_classes(host)
    assert {c.__name__ for c in classes} >= {"Definition", "CacheHit", "InputValidation", "Segmentation"}
    for cls in classes:
        args = _first_params(cls)
        bench = cls()
        if hasattr(bench, "setup"):
            bench.setup(*args)
        for name in _methods(cls):
            result = getattr(bench, name)(*args)
            if name.startswith("track_"):
                assert isinstance(result, (int, float)), (cls.__name__, name, result)
        if hasattr(bench, "teardown"):
            bench.teardown(*args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_gpu_benchmarks_skip_without_cuda():
    kernels = _load("kernels")
    classes = _benchmark_classes(kernels)
    assert {c.__name__ for c in classes} == {"KernelTime", "KernelTimeShapes", "CopyBandwidth", "HostLatency"}
    for cls in classes:
        for name in _methods(cls):
            # asv >= 0.6 does not collect a method so marked: no interpreter is started for it
            assert getattr(cls, name).skip_benchmark is True, (cls.__name__, name)
        # a direct call (or an older asv) gets asv's "skipped" before any work
        with pytest.raises(NotImplementedError):
            cls().setup(*_first_params(cls))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_asv_discovers_only_host_benchmarks():
    pytest.importorskip("asv_runner")
    # asv's own discovery, in a child: it imports the suite as the top-level package "benchmarks"
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from asv_runner.discovery import disc_benchmarks;"
        "print(json.dumps(sorted(b.name for b in disc_benchmarks(sys.argv[2]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, os.path.dirname(BENCH_DIR), BENCH_DIR],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    names = json.loads(out.strip().splitlines()[-1])
    assert names and all(n.startswith("host.") for n in names), names
    assert "host.Segmentation.time_segment_pointwise_chain" in names
