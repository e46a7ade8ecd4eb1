"""Version strings comparable with plain strings, as `nvfuser.nvfuser_version.Version` is,
and the nvFuser frontend version fuser's compat module implements."""
from __future__ import annotations

import re
from typing import Any


class Version(str):
    """A version string that compares by its numeric parts: `Version("0.2.27") > "0.2.8"`;
    a local suffix (`+git1234`) is ignored, as nvFuser's is."""

    def __new__(cls, version: Any) -> "Version":
        return super().__new__(cls, str(version))

    @staticmethod
    def _parts(v: Any) -> tuple[int, ...]:
        if isinstance(v, tuple):
            return tuple(int(x) for x in v)
        base = str(v).split("+", 1)[0]
        parts = [int(m) for m in re.findall(r"\d+", base)]
        while len(parts) > 1 and parts[-1] == 0:  # 0.2.0 == 0.2
            parts.pop()
        return tuple(parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (str, tuple)):
            return NotImplemented
        return self._parts(self) == self._parts(other)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __lt__(self, other: Any) -> bool:
        return self._parts(self) < self._parts(other)

    def __le__(self, other: Any) -> bool:
        return self._parts(self) <= self._parts(other)

    def __gt__(self, other: Any) -> bool:
        return self._parts(self) > self._parts(other)

    def __ge__(self, other: Any) -> bool:
        return self._parts(self) >= self._parts(other)

    def __hash__(self) -> int:
        return hash(self._parts(self))


#: the nvFuser frontend release whose legacy API fuser.compat.nvfuser implements: Thunder
#: 0.2.6 selects its nvFuser executor from 0.2.8 and stays on this (legacy) API below 0.2.28
NVFUSER_VERSION = Version("0.2.27")
__version__ = NVFUSER_VERSION

__all__ = ["Version", "NVFUSER_VERSION", "__version__"]
