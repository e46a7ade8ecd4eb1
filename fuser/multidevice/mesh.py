"""DeviceMesh: the devices a tensor lives on (nvFuser's `multidevice.DeviceMesh`)."""
from __future__ import annotations

from typing import Any

import torch


class DeviceMesh:
    """An ordered set of device ids (torch.distributed ranks); a tensor sharded on the mesh
    holds the mesh's k-th block of its sharded axis on device `devices[k]`."""

    def __init__(self, devices: Any = None) -> None:
        if devices is None:
            from .communicator import Communicator

            devices = range(Communicator.instance().size())
        if isinstance(devices, torch.Tensor):
            if devices.dim() != 1:
                raise ValueError(f"DeviceMesh: devices has shape {tuple(devices.shape)}; only 1-D meshes are "
                                 "supported yet")
            devices = devices.tolist()
        try:
            ids = [int(d) for d in devices]  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise TypeError(f"DeviceMesh: devices={devices!r} must be a 1-D sequence of integer device ids") from None
        if not ids:
            raise ValueError("DeviceMesh: devices is empty")
        if any(d < 0 for d in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"DeviceMesh: devices={ids} must be distinct non-negative ids")
        self._devices = tuple(ids)

    @property
    def devices(self) -> list[int]:
        return list(self._devices)

    @property
    def size(self) -> int:
        return len(self._devices)

    @property
    def shape(self) -> tuple[int]:
        return (len(self._devices),)

    def __len__(self) -> int:
        return len(self._devices)

    def __contains__(self, device: int) -> bool:
        return device in self._devices

    def index(self, device: int) -> int:
        """The position of `device` in the mesh (which block of a sharded axis it holds)."""
        try:
            return self._devices.index(device)
        except ValueError:
            raise ValueError(f"device {device} is not in {self}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceMesh) and other._devices == self._devices

    def __hash__(self) -> int:
        return hash(self._devices)

    def __repr__(self) -> str:
        return "DeviceMesh{" + " ".join(map(str, self._devices)) + "}"
