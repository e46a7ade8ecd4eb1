import importlib.util
import shutil
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# `python -m pytest` puts the repo root first on sys.path, so the source tree
# would shadow an installed fuser. That is right after `pip install -e .`
# (the extension is built in place) but wrong after `pip install .`, where
# only the installed copy has the compiled core: then drop the repo root.
_core = REPO / "fuser" / "_core"
if not any((_core / f"graph{suffix}").exists() for suffix in EXTENSION_SUFFIXES):
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]


def pytest_report_header(config):
    spec = importlib.util.find_spec("fuser")
    where = list(spec.submodule_search_locations) if spec else "not importable"
    return f"fuser: {where}"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    # Import torch only when needed: it is slow to import.
    if gpu_items:
        import torch

        if not torch.cuda.is_available():
            for item in gpu_items:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
    if shutil.which("nvcc") is None:
        for item in items:
            if item.get_closest_marker("nvcc"):
                item.add_marker(pytest.mark.skip(reason="needs nvcc on PATH"))


@pytest.fixture
def poisoned_kernel_outputs(monkeypatch):
    """Fill every output a generated kernel allocates with a value it never computes (NaN,
    or -7 / True for integers and bools) before the launch, so an element the kernel skips
    fails the comparison. Expanded (stride-0) outputs are left alone."""
    import torch

    from fuser.runtime import kernels as kernels_mod

    real = kernels_mod.GeneratedKernel.allocate_outputs

    def poisoned(self):
        outs = real(self)
        for t in outs:
            if t.numel() and 0 not in t.stride():
                if t.dtype.is_floating_point or t.dtype.is_complex:
                    t.fill_(float("nan"))
                else:
                    t.fill_(-7 if t.dtype is not torch.bool else True)
        return outs

    monkeypatch.setattr(kernels_mod.GeneratedKernel, "allocate_outputs", poisoned)
