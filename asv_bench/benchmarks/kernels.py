"""Kernel time of the benchmark fusions (fuser/benchmarks/fusions.py) on a CUDA GPU: fuser
against eager PyTorch and torch.compile, as `python -m fuser bench` reports it.

Every benchmark here needs CUDA. Without it (`_gpu_only`) asv does not collect them at all,
and a direct call of `setup` raises NotImplementedError before any work. Kernel times are
`track_` benchmarks (CUDA events around a loop of calls, see `fuser.benchmarks.kernel_time`),
in microseconds; asv's own wall-clock `time_` loop is only used for the host cost of issuing a
tiny cached fusion.

`KernelTime` times each fusion of one shape (the pointwise set, and seed 001's RMSNorm
backward at its fixed [56, 1024, 1024]) at that shape; `KernelTimeShapes` times each fusion
of several shapes at every one of them: the reductions and normalisations (RMSNorm /
LayerNorm / softmax forward, inner and outer sum, var_mean, dropout + residual add +
LayerNorm forward) and the backward set (RMSNorm /
LayerNorm / softmax backward, the outer-persistent batch-norm forward), bf16 and fp32.
Both lists come from `FUSIONS`, so every fusion `python -m fuser bench` runs is here.
"""
import torch

from fuser.benchmarks import FUSIONS, by_name, copy_bandwidth, kernel_time

_BANDWIDTH = [f.name for f in FUSIONS if f.kind == "bandwidth" and len(f.shapes) == 1]
_MULTI_SHAPE = [f.name for f in FUSIONS if f.kind == "bandwidth" and len(f.shapes) > 1]
#: every shape of a multi-shape fusion, as "MxN"; a fusion skips the ones it lacks
_SHAPES = list(dict.fromkeys("x".join(map(str, s)) for f in FUSIONS if f.name in _MULTI_SHAPE for s in f.shapes))
_IMPLS = ["fuser", "eager", "compile"]
_copy_bw = None
_HAS_CUDA = torch.cuda.is_available()


def _require_cuda():
    """Raise NotImplementedError (asv's "skipped") where there is no CUDA GPU."""
    if not _HAS_CUDA:
        raise NotImplementedError("needs a CUDA GPU")


def _gpu_only(cls):
    """Without CUDA, hide every benchmark of `cls` from asv's discovery.

    A setup that raises NotImplementedError still costs asv one fresh interpreter (importing
    torch and fuser, ~2 s) per parameter combination, 800 of them here, to print n/a;
    asv >= 0.6 does not collect a method carrying `skip_benchmark` (what asv_runner's
    @skip_benchmark sets), so none of that runs. On a GPU machine nothing changes."""
    if not _HAS_CUDA:
        for name, attr in vars(cls).items():
            if name.startswith(("time_", "track_")) and callable(attr):
                attr.skip_benchmark = True
    return cls


def _copy_bandwidth():
    """Device-to-device copy bandwidth (bytes/s), measured once per process."""
    global _copy_bw
    if _copy_bw is None:
        _copy_bw = copy_bandwidth()[0]
    return _copy_bw


def _callable(fusion, impl, inputs):
    """A no-argument function running `fusion` on `inputs` with `impl`, run once already."""
    if impl == "fuser":
        fd = fusion.fusion_definition()

        def fn():
            return fd.execute(inputs)
    elif impl == "eager":
        def fn():
            return fusion.eager(inputs)
    else:
        dynamo = getattr(torch, "_dynamo", None)
        if dynamo is not None and hasattr(dynamo, "reset"):
            dynamo.reset()
        compiled = torch.compile(fusion.reference)

        def fn():
            return compiled(inputs)
    try:
        fn()
        torch.cuda.synchronize()
    except Exception as e:
        if impl == "compile":  # torch.compile unavailable here (no triton, ...): skip, do not fail
            raise NotImplementedError(f"torch.compile failed: {type(e).__name__}: {e}") from e
        raise
    return fn


@_gpu_only
class KernelTime:
    """Median GPU time per call of each memory-bound fusion of one shape at that shape."""

    params = [_BANDWIDTH, _IMPLS]
    param_names = ["fusion", "impl"]
    timeout = 600

    def setup(self, name, impl):
        _require_cuda()
        self.fusion = by_name(name)
        self.inputs = self.fusion.make_inputs("cuda")
        self.nbytes = self.fusion.bytes_moved(self.inputs)
        self.fn = _callable(self.fusion, impl, self.inputs)

    def teardown(self, name, impl):
        self.fn = self.inputs = None
        if _HAS_CUDA:
            torch.cuda.empty_cache()

    def track_kernel_us(self, name, impl):
        return kernel_time(self.fn).us

    track_kernel_us.unit = "us"

    def track_percent_of_copy_bandwidth(self, name, impl):
        t = kernel_time(self.fn)
        return 100.0 * self.nbytes / (t.us * 1e-6) / _copy_bandwidth()

    track_percent_of_copy_bandwidth.unit = "%"


@_gpu_only
class KernelTimeShapes:
    """Median GPU time per call of each reduction / normalisation fusion, forward and
    backward, at each of its shapes (`BenchFusion.shapes`); shapes a fusion does not list
    are skipped."""

    params = [_MULTI_SHAPE, _SHAPES, _IMPLS]
    param_names = ["fusion", "shape", "impl"]
    timeout = 600

    def setup(self, name, shape, impl):
        _require_cuda()
        self.fusion = by_name(name)
        dims = tuple(int(d) for d in shape.split("x"))
        if dims not in self.fusion.shapes:
            raise NotImplementedError(f"{name} is not benchmarked at {shape}")
        self.inputs = self.fusion.make_inputs("cuda", dims)
        self.nbytes = self.fusion.bytes_moved(self.inputs)
        self.fn = _callable(self.fusion, impl, self.inputs)

    def teardown(self, name, shape, impl):
        self.fn = self.inputs = None
        if _HAS_CUDA:
            torch.cuda.empty_cache()

    def track_kernel_us(self, name, shape, impl):
        return kernel_time(self.fn).us

    track_kernel_us.unit = "us"

    def track_percent_of_copy_bandwidth(self, name, shape, impl):
        t = kernel_time(self.fn)
        return 100.0 * self.nbytes / (t.us * 1e-6) / _copy_bandwidth()

    track_percent_of_copy_bandwidth.unit = "%"


@_gpu_only
class CopyBandwidth:
    """The reference the %-of-copy numbers divide by: dst.copy_(src) on 1 GiB."""

    timeout = 300

    def setup(self):
        _require_cuda()

    def track_copy_bandwidth_gbps(self):
        return copy_bandwidth()[0] / 1e9

    track_copy_bandwidth_gbps.unit = "GB/s"


@_gpu_only
class HostLatency:
    """Host cost of issuing the cached GELU fusion on [8, 8] (no synchronisation per call)."""

    params = [_IMPLS]
    param_names = ["impl"]
    timeout = 600

    def setup(self, impl):
        _require_cuda()
        self.fusion = by_name("latency_gelu_8x8")
        self.inputs = self.fusion.make_inputs("cuda")
        self.fn = _callable(self.fusion, impl, self.inputs)
        for _ in range(100):
            self.fn()
        torch.cuda.synchronize()

    def teardown(self, impl):
        if _HAS_CUDA:
            torch.cuda.synchronize()

    def time_issue_latency_gelu_8x8(self, impl):
        self.fn()

    def track_kernel_us_latency_gelu_8x8(self, impl):
        return kernel_time(self.fn).us

    track_kernel_us_latency_gelu_8x8.unit = "us"
