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
if _core.is_dir() and not any((_core / f"graph{suffix}").exists() for suffix in EXTENSION_SUFFIXES):
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
    # a GPU test that poisons kernel outputs also checks every element was written (poison
    # alone misses an unwritten element whose answer is the poison, or within tolerance of
    # it): the fixture runs before the test's own, whichever file defines those
    for item in gpu_items:
        names = getattr(item, "fixturenames", None)
        if names is not None and "kernel_writes_checked" not in names and any("poison" in n for n in names):
            names.insert(0, "kernel_writes_checked")


@pytest.fixture(autouse=True, scope="session")
def _repro_scripts_in_a_session_temp():
    """A failed execute writes its repro script to the temp directory (many tests fail
    executes on purpose): for the session that is a directory of its own, removed after.
    (Not pytest's tmp_path_factory: two torchrun ranks pruning its numbered directories at
    once warn that they cannot remove each other's.)"""
    import tempfile

    saved = tempfile.tempdir
    own = tempfile.mkdtemp(prefix="fuser-tests-")
    tempfile.tempdir = own
    yield
    tempfile.tempdir = saved
    shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(autouse=True)
def _inner_outer_at_any_rows(monkeypatch):
    """Tests run fusions with reductions along and across rows at the sizes the simulator
    and CI afford, with fewer rows than the SMs' worth at which the shipped rule
    (normalization.INNER_OUTER_FEW_ROWS_APART) splits them into separate kernels; those
    tests are of the inner-outer kernel, so the rule is off, and the tests of the rule turn
    it on (`switches`)."""
    from fuser.scheduler import normalization

    monkeypatch.setattr(normalization, "INNER_OUTER_FEW_ROWS_APART", False)


@pytest.fixture
def poisoned_kernel_outputs(monkeypatch, kernel_writes_checked):
    """Fill every output a generated kernel allocates with a value it never computes (NaN,
    or -7 / True for integers and bools) before the launch, so an element the kernel skips
    fails the comparison; and check every element was written (`kernel_writes_checked`:
    that also catches an unwritten element whose answer is the poison)."""
    from kernel_writes import poison_

    import fuser.kernel as kernels_mod

    real = kernels_mod.GeneratedKernel.allocate_outputs

    def poisoned(self):
        return poison_(real(self))

    monkeypatch.setattr(kernels_mod.GeneratedKernel, "allocate_outputs", poisoned)


@pytest.fixture
def kernel_writes_checked(monkeypatch):
    """Every generated kernel's launch is made twice, into outputs whose bytes all start
    different, and must leave them bit-identical: every element written
    (tests/kernel_writes.py). GPU tests that poison outputs get it automatically."""
    from kernel_writes import checked_run

    import fuser.kernel as kernels_mod

    cls = kernels_mod.GeneratedKernel
    monkeypatch.setattr(cls, "run", checked_run(cls.run))


@pytest.fixture
def fixed_addresses(monkeypatch):
    """Buffers a host program allocates keep one address per tensor across calls (the
    caching allocator's choice of blocks varies with what else ran), so stream-loop graphs
    are captured and replayed as a model's steady state would; the graphs and their keys
    are the real ones. The fusion cache is reset before (an evaluator must be built with the
    patch) and after: an evaluator built with it keeps the patched method (its handlers are
    bound at construction) and would pin its first buffers in later tests that share the
    cache entry (a later copy-engine test's chunks were then not in its symmetric buffer)."""
    from fuser.frontend.cache import FusionCache
    from fuser.host.evaluator import HostIrEvaluator

    fixed: dict = {}
    allocate = HostIrEvaluator._allocate

    def at_fixed(self, e, state):
        allocate(self, e, state)
        state.env[e.tv] = fixed.setdefault(e.tv, state.env[e.tv])

    monkeypatch.setattr(HostIrEvaluator, "_allocate", at_fixed)
    FusionCache.reset()
    yield
    FusionCache.reset()


@pytest.fixture
def switches(monkeypatch):
    """Set a scheduler's or lowering's module constants for one test:
    `switches(module, NAME=value, ...)`, with fuser's caches fresh after each call and at
    teardown (segmentations and kernels are cached per input signature, with the
    heuristics that read the constants)."""
    from fuser.frontend.cache import FusionCache

    def set_(module, **values) -> None:
        for name, value in values.items():
            assert hasattr(module, name), f"{module.__name__} has no {name}"
            monkeypatch.setattr(module, name, value)
        FusionCache.reset()

    yield set_
    FusionCache.reset()
