"""Exceptions callers can catch the nvFuser way: every definition and input error is
also a RuntimeError (nvFuser raises RuntimeError), besides the ValueError / TypeError /
IndexError its message describes."""
from __future__ import annotations

from fuser.runtime.binding import InputError


class FuserError(RuntimeError):
    """Base of the errors fuser raises for a bad definition or bad inputs."""


class DefinitionError(FuserError, ValueError):
    """A definition argument has a bad value (a shape, a dim, a missing output)."""


class DefinitionTypeError(FuserError, TypeError):
    """A definition argument has the wrong type or dtype."""


class DefinitionIndexError(FuserError, IndexError):
    """A definition argument indexes out of range."""


class FusionInputError(InputError, FuserError):
    """An execute input does not match the definition (dtype, rank, sizes, strides)."""


_BY_BASE = (
    (InputError, FusionInputError),
    (IndexError, DefinitionIndexError),
    (TypeError, DefinitionTypeError),
    (ValueError, DefinitionError),
)


def nvfuser_style(err: BaseException, message: str | None = None) -> BaseException:
    """`err` as the matching RuntimeError subclass above (same message unless `message`);
    errors that are RuntimeErrors already, or of other kinds, come back unchanged."""
    if isinstance(err, RuntimeError) and message is None:
        return err
    for base, cls in _BY_BASE:
        if isinstance(err, base):
            return cls(message if message is not None else (err.args[0] if len(err.args) == 1 else str(err)))
    return type(err)(message) if message is not None else err


__all__ = [
    "FuserError",
    "DefinitionError",
    "DefinitionTypeError",
    "DefinitionIndexError",
    "FusionInputError",
    "nvfuser_style",
]
