"""The one dispatch table from expression classes to handlers (`fuser.ir.dispatch`): both
of its users handle every class, and its checks refuse what they should."""
import pytest
import torch

from fuser.frontend.translate import TranslationError, _Translator
from fuser.ir import TENSOR_EXPR_CLASSES, DataType, Expr, Fusion, Scalar, fusion_guard
from fuser.ir.dispatch import (
    HANDLER_NAMES,
    DispatchError,
    ExprDispatcher,
    check_complete,
    missing_handlers,
)
from fuser.ir.exprs import LoadStoreOp, ReductionOp, RNGOp, ScanOp, UnaryOp
from fuser.runtime.reference import EvaluationError, ReferenceExecutor


def test_the_table_names_one_handler_per_tensor_expression_class():
    assert list(HANDLER_NAMES) == list(TENSOR_EXPR_CLASSES)
    assert len(set(HANDLER_NAMES.values())) == len(HANDLER_NAMES)
    assert HANDLER_NAMES[UnaryOp] == "handle_unary"
    assert HANDLER_NAMES[ReductionOp] == "handle_reduction"
    assert HANDLER_NAMES[LoadStoreOp] == "handle_load_store"
    assert HANDLER_NAMES[RNGOp] == "handle_rng"


@pytest.mark.parametrize("dispatcher", [ReferenceExecutor, _Translator])
def test_reference_and_translator_handle_every_class(dispatcher):
    assert missing_handlers(dispatcher) == []
    check_complete(dispatcher)
    # the cached table resolves every class to the dispatcher's own method
    assert set(dispatcher._expr_handlers) == set(TENSOR_EXPR_CLASSES)
    for cls, name in HANDLER_NAMES.items():
        assert dispatcher._expr_handlers[cls] is getattr(dispatcher, name)


def _handlers_but(missing: str) -> dict:
    return {name: (lambda self, e: None) for name in HANDLER_NAMES.values() if name != missing}


def test_a_dispatcher_missing_a_handler_is_refused():
    assert missing_handlers(type("Partial", (), _handlers_but("handle_scan"))) == ["ScanOp (handle_scan)"]
    with pytest.raises(TypeError, match=r"Partial has no handler for ScanOp \(handle_scan\)"):
        type("Partial", (ExprDispatcher,), _handlers_but("handle_scan"))


def test_a_subclass_that_drops_a_handler_is_refused():
    with pytest.raises(TypeError, match=r"NoReductions has no handler for ReductionOp \(handle_reduction\)"):

        class NoReductions(ReferenceExecutor):
            handle_reduction = None


def test_a_complete_dispatcher_calls_the_handler_of_the_class():
    calls = []
    handlers = _handlers_but("handle_unary")
    handlers["handle_unary"] = lambda self, e, *args: calls.append((type(e), args)) or "done"
    complete = type("Complete", (ExprDispatcher,), handlers)
    e = UnaryOp.__new__(UnaryOp)  # dispatch reads only the class
    assert complete().dispatch(e, 1, 2) == "done"
    assert calls == [(UnaryOp, (1, 2))]


class _UnknownOp(Expr):
    """An expression class outside the table."""


def _unknown_expr() -> Expr:
    fusion = Fusion()
    with fusion_guard(fusion):
        return _UnknownOp([Scalar(DataType.Int)], [Scalar(DataType.Int)])


@pytest.mark.parametrize(
    "make,error",
    [
        (lambda: ReferenceExecutor(Fusion(), torch.device("cpu")), EvaluationError),
        (lambda: _Translator(Fusion(), None), TranslationError),
    ],
)
def test_dispatching_an_unknown_expression_names_it_and_the_dispatcher(make, error):
    dispatcher = make()
    with pytest.raises(error, match=rf"{type(dispatcher).__name__} has no handler for _UnknownOp"):
        dispatcher.dispatch(_unknown_expr())


def test_the_reference_executor_refuses_an_unknown_expression_before_evaluating_its_inputs():
    e = _unknown_expr()
    with pytest.raises(EvaluationError, match="ReferenceExecutor has no handler for _UnknownOp"):
        ReferenceExecutor(Fusion(), torch.device("cpu")).run_expr(e)


def test_the_base_class_dispatches_nothing():
    assert len(missing_handlers(ExprDispatcher)) == len(HANDLER_NAMES)
    with pytest.raises(DispatchError, match="ExprDispatcher has no handler for ScanOp"):
        ExprDispatcher().dispatch(ScanOp.__new__(ScanOp))
