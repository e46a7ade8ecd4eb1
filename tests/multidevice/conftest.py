"""Multi-device tests run in every rank of a torchrun launch:

    torchrun --nproc-per-node 2 -m pytest tests/multidevice      (NCCL on GPUs, gloo on CPUs)

Under a plain `pytest` (one process) they skip, saying how to start them;
tests/test_multidevice_launch.py starts them that way on CPU with gloo (CI)."""
from __future__ import annotations

import os

import pytest
import torch

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _k, _v in NVLS_OFF.items():
    os.environ.setdefault(_k, _v)


def _world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


@pytest.fixture(scope="session")
def comm():
    """The Communicator over torchrun's ranks (skips with one process)."""
    if _world() < 2:
        pytest.skip("runs in every rank of `torchrun --nproc-per-node 2 -m pytest tests/multidevice` (which "
                    "tests/test_multidevice_launch.py starts on two CPU ranks)")
    from fuser.multidevice import Communicator

    c = Communicator.instance()
    yield c


@pytest.fixture
def seed(comm):
    """A fresh seed per test, the same on every rank (rank 0 draws it)."""
    import torch.distributed as dist

    t = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64)
    if comm.backend == "nccl":
        t = t.to(comm.device)
    dist.broadcast(t, 0)
    s = int(t.item())
    torch.manual_seed(s)
    return s


@pytest.fixture
def mesh(comm):
    from fuser.multidevice import DeviceMesh

    return DeviceMesh(torch.arange(comm.size()))
