"""The one dispatch table from tensor-level expression classes to handler methods.

Every pass that handles each kind of expression (the reference executor, the translation
of a fusion back to a FusionDefinition) subclasses `ExprDispatcher` and implements one
method per class of `TENSOR_EXPR_CLASSES`, named as `HANDLER_NAMES` says: `UnaryOp` is
handled by `handle_unary`, `LoadStoreOp` by `handle_load_store`, `RNGOp` by `handle_rng`.
A subclass lacking one is refused when it is defined, so a new expression class cannot be
forgotten by one of them.
"""
from __future__ import annotations

import re
from typing import Any, Callable, ClassVar

from .base import Expr
from .exprs import TENSOR_EXPR_CLASSES


def _handler_name(cls: type[Expr]) -> str:
    stem = cls.__name__.removesuffix("Op")
    # the "handle_" prefix keeps handlers apart from a dispatcher's helpers (a translator's
    # `scalar` or `tensor`): a helper cannot pass for the handler of a new class by its name
    return "handle_" + re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()


#: each tensor-level expression class -> the name of the method that handles it
HANDLER_NAMES: dict[type[Expr], str] = {cls: _handler_name(cls) for cls in TENSOR_EXPR_CLASSES}


class DispatchError(TypeError):
    """An expression of a class the dispatcher has no handler for."""


class ExprDispatcher:
    """Base of a pass with one handler method per expression class; `dispatch(e)` calls
    the handler of `type(e)` with one dict lookup (the reference executor's hot path)."""

    #: raised for an expression of a class without a handler; a subclass names its own
    dispatch_error: ClassVar[type[Exception]] = DispatchError
    #: expression class -> handler function of this class, built when the class is defined
    _expr_handlers: ClassVar[dict[type[Expr], Callable[..., Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_complete(cls)
        cls._expr_handlers = {c: getattr(cls, name) for c, name in HANDLER_NAMES.items()}

    def handler_for(self, e: Expr) -> Callable[..., Any]:
        """The handler function of `e`'s class, to call as `handler(self, e, ...)`."""
        handler = self._expr_handlers.get(type(e))
        if handler is None:
            raise self.dispatch_error(
                f"{type(self).__name__} has no handler for {type(e).__name__}: it is not an expression "
                f"class of fuser.ir.dispatch.HANDLER_NAMES"
            )
        return handler

    def dispatch(self, e: Expr, *args: Any) -> Any:
        """Handle `e` with the method of its class, passing `args` on."""
        return self.handler_for(e)(self, e, *args)


def missing_handlers(cls: type) -> list[str]:
    """'Class (method)' for each expression class `cls` has no callable handler for."""
    return [f"{c.__name__} ({name})" for c, name in HANDLER_NAMES.items() if not callable(getattr(cls, name, None))]


def check_complete(cls: type) -> None:
    """Refuse a dispatcher class that lacks the handler of some expression class."""
    missing = missing_handlers(cls)
    if missing:
        raise TypeError(f"{cls.__name__} has no handler for {', '.join(missing)}")


__all__ = ["HANDLER_NAMES", "DispatchError", "ExprDispatcher", "check_complete", "missing_handlers"]
