"""Run by tests/test_multidevice_launch.py on two GPUs: rank 1 never joins an allreduce,
so rank 0's waits forever on its GPU; fuser's watch must name the communication before
NCCL's watchdog ends the process."""
from __future__ import annotations

import time

import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.host import communication, evaluator
from fuser.multidevice import Communicator, DeviceMesh

comm = Communicator.instance()
mesh = DeviceMesh(torch.arange(comm.size()))
with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    x.set_device_mesh(mesh)
    x.outer_split(0, comm.size())
    x.axis(0).parallelize(ParallelType.mesh_x)
    fd.add_output(fd.ops.sum(x, [0]))
block = torch.randn(2, 3, device=comm.device)
(s,) = fd.execute([block])  # a call every rank joins
torch.cuda.synchronize()
if comm.rank() == 1:
    evaluator.start = lambda c, t, dest=None: communication.Pending(None, lambda: t)
fd.execute([block])
torch.cuda.synchronize()  # rank 0 hangs here until NCCL's watchdog ends its group
print(f"rank {comm.rank()} synchronized", flush=True)
if comm.rank() == 1:
    time.sleep(20)  # stays up: rank 0's hang is its missing peer, not an exited one
