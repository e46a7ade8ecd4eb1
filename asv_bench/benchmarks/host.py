"""Host-side costs that exist today: defining fusions, structural cache hits, input validation."""
import torch

from fuser import FusionCache, FusionDefinition
from fuser.examples.pointwise_chain import pointwise_chain
from fuser.examples.rmsnorm_backward import rmsnorm_backward
from fuser.runtime.binding import bind_inputs


def _define(build, *args):
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


class Definition:
    """Recording a definition and building its IR (first definition: a cache miss)."""

    params = [10, 100, 1000]
    param_names = ["iterations"]

    def setup(self, iterations):
        FusionCache.reset()

    def time_define_pointwise_chain(self, iterations):
        FusionCache.reset()
        _define(pointwise_chain, iterations)


class DefinitionSeed001:
    """Recording seed 001 (RMSNorm backward) and building its IR, a cache miss."""

    # unparameterised: the program has no size, and asv pays a fresh interpreter per value
    def time_define_rmsnorm_backward(self):
        FusionCache.reset()
        _define(rmsnorm_backward)


class CacheHit:
    """Defining a program the structural cache already holds."""

    def setup(self):
        FusionCache.reset()
        _define(rmsnorm_backward)

    def time_redefine_rmsnorm_backward(self):
        _define(rmsnorm_backward)

    def track_cache_size_after_redefinition(self):
        _define(rmsnorm_backward)
        return FusionCache.get().num_fusions()


class InputValidation:
    """Binding and validating the inputs of an execute (meta tensors: no data needed)."""

    def setup(self):
        self.fd = _define(rmsnorm_backward)
        self.fusion = self.fd.fusion
        # laid out as seed 001's inputs; torch.empty touches no pages, so this is cheap
        self.inputs = [
            torch.empty((1024,), dtype=torch.bfloat16).as_strided((56, 1024, 1024), (0, 0, 1)),
            torch.empty((1024,), dtype=torch.bfloat16).as_strided((56, 1024, 1024), (0, 0, 1)),
            torch.empty((56, 1, 1024), dtype=torch.bfloat16),
            torch.empty((56, 1024, 1024), dtype=torch.bfloat16),
            torch.empty((56, 1024), dtype=torch.float32),
            torch.empty((56, 1024, 1), dtype=torch.float32),
            torch.empty((56, 1024, 1024), dtype=torch.bfloat16),
        ]
        bind_inputs(self.fusion, self.inputs)  # warm the per-fusion binding plan

    def time_bind_rmsnorm_backward_inputs(self):
        bind_inputs(self.fusion, self.inputs)


def _seed001_meta_inputs():
    from fuser.examples.rmsnorm_backward import make_inputs

    return make_inputs("meta")


class Segmentation:
    """Segmenting (scheduler checks, merging, forwarding, rematerialisation): the
    many-pointwise-ops chain, where nvFuser stalls past ~22 iterations, must stay close
    to linear in its length."""

    params = [10, 100, 1000, 4000]
    param_names = ["iterations"]
    timeout = 300

    def setup(self, iterations):
        from fuser.frontend.segmentation import segment

        with FusionDefinition(max_length=100000) as fd:
            pointwise_chain(fd, iterations)
        self.fd = fd
        self.inputs = [torch.empty(1024, 1024, dtype=torch.half, device="meta")]
        segment(fd, self.inputs)  # warm the per-fusion input binding plan

    def time_segment_pointwise_chain(self, iterations):
        from fuser.frontend.segmentation import segment

        segment(self.fd, self.inputs)


class SegmentSeed001:
    """Seed 001 (RMSNorm backward): segmentation time and what crosses the boundary."""

    def setup(self):
        from fuser.frontend.segmentation import segment

        self.fd = _define(rmsnorm_backward)
        self.inputs = _seed001_meta_inputs()
        self.seg = segment(self.fd, self.inputs)

    def time_segment_rmsnorm_backward(self):
        from fuser.frontend.segmentation import segment

        segment(self.fd, self.inputs)

    def track_groups_rmsnorm_backward(self):
        return len(self.seg.groups)

    def track_inter_segment_bytes_rmsnorm_backward(self):
        return self.seg.inter_segment_bytes()
