"""The process group a sharded fusion runs on: torch.distributed's default group
(NCCL on GPUs, gloo on CPU), started from torchrun's environment when nobody started it."""
from __future__ import annotations

import atexit
import datetime
import os
from typing import Any

import torch

#: how long a collective may wait for the other ranks before it fails (FUSER_COMM_TIMEOUT s)
TIMEOUT_S = float(os.environ.get("FUSER_COMM_TIMEOUT", "300"))
#: the timeout of the NCCL groups fuser makes: NCCL's watchdog ends the process then, so
#: it comes after fuser has said which communication (or agreement) did not finish
NCCL_TIMEOUT_S = TIMEOUT_S * 1.1 + 5


def _destroy() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class Communicator:
    """nvFuser's `multidevice.Communicator`: this process's rank, the world size, its local
    rank on the host, and the device it computes on."""

    _instance: "Communicator | None" = None

    def __init__(self) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("torch.distributed is not available in this PyTorch build")
        if not dist.is_initialized():
            if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
                raise RuntimeError(
                    "no process group: start the processes with torchrun (e.g. `torchrun --nproc-per-node 2 "
                    "script.py`), or call torch.distributed.init_process_group before using a DeviceMesh")
            local = int(os.environ.get("LOCAL_RANK", "0"))
            backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > local else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(local)
            kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=TIMEOUT_S)}
            if backend == "nccl":
                kwargs["device_id"] = torch.device("cuda", local)
                kwargs["timeout"] = datetime.timedelta(seconds=NCCL_TIMEOUT_S)
                # a rank may replay a collective from a CUDA graph that another issues plainly;
                # NCCL must not register the captured one's buffers (fuser/host/communication.py)
                os.environ.setdefault("NCCL_GRAPH_REGISTER", "0")
            dist.init_process_group(**kwargs)
            # the group we started ends with the process (left to interpreter exit, its
            # threads abort the process: "terminate called without an active exception")
            atexit.register(_destroy)
        self._dist = dist

    @classmethod
    def instance(cls) -> "Communicator":
        """The communicator over the default process group (made on first use)."""
        if cls._instance is None or not cls._instance._dist.is_initialized():
            cls._instance = cls()
        return cls._instance

    def rank(self) -> int:
        return self._dist.get_rank()

    def size(self) -> int:
        return self._dist.get_world_size()

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", self.rank() % max(1, self.local_size())))

    def local_size(self) -> int:
        return int(os.environ.get("LOCAL_WORLD_SIZE", self.size()))

    @property
    def backend(self) -> str:
        return str(self._dist.get_backend())

    @property
    def device(self) -> torch.device:
        """The device this rank computes on: its local GPU under NCCL, the CPU under gloo."""
        if self.backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def barrier(self) -> None:
        self._dist.barrier()

    def __repr__(self) -> str:
        return f"Communicator(rank={self.rank()}, size={self.size()}, backend={self.backend})"
