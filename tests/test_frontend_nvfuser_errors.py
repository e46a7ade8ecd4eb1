"""Errors a caller can catch the nvFuser way (issue 10, item 4): nvFuser raises
RuntimeError, so fuser's definition and input errors are RuntimeErrors too, besides the
ValueError / TypeError / IndexError their messages describe (which keep naming the bad
argument)."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import DefinitionError, DefinitionIndexError, DefinitionTypeError, FuserError, FusionInputError
from fuser.runtime.binding import InputError


def _defining(build):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        build(fd, t)
        fd.add_output(t)
    return fd


@pytest.mark.parametrize(
    "build, kind, words",
    [
        (lambda fd, t: fd.ops.permute(t, [0, 0]), ValueError, ["fd.ops.permute", "permutation"]),
        (lambda fd, t: fd.ops.sum(t, dims=[5]), IndexError, ["fd.ops.sum", "out of range"]),
        (lambda fd, t: fd.ops.cast(t, "float"), TypeError, ["fd.ops.cast", "dtype"]),
        (lambda fd, t: fd.ops.add(t, torch.ones(2)), TypeError, ["torch.Tensor"]),
        (lambda fd, t: fd.ops.bitwise_and(t, t), TypeError, ["bitwise_and", "integer"]),
        (lambda fd, t: fd.define_tensor(shape=[-2]), ValueError, ["fd.define_tensor", "shape[0]"]),
        (lambda fd, t: fd.define_scalar("x"), TypeError, ["fd.define_scalar", "value"]),
        (lambda fd, t: fd.ops.reshape(t, [2, 1.5]), TypeError, ["fd.ops.reshape", "new_shape[1]"]),
        (lambda fd, t: fd.ops.at(t.shape(), 7), IndexError, ["fd.ops.at", "index 7"]),
        (lambda fd, t: fd.add_output(3), TypeError, ["fd.add_output", "output"]),
    ],
)
def test_definition_errors_are_runtime_errors_too(build, kind, words):
    with pytest.raises(RuntimeError) as info:
        _defining(build)
    err = info.value
    assert isinstance(err, kind) and isinstance(err, FuserError), type(err).__mro__
    for w in words:
        assert w in str(err), f"{w!r} not in {err}"


def test_no_outputs_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="no outputs") as info:
        with FusionDefinition() as fd:
            fd.define_tensor(shape=[-1])
    assert isinstance(info.value, ValueError)


def test_input_errors_are_runtime_errors_with_their_message():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.relu(fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)))
    for bad, words in (
        ([torch.randn(3, 4)], ["input 0", "dtype", "torch.float16"]),
        ([torch.randn(3, dtype=torch.float16)], ["input 0", "2-D"]),
        ([torch.randn(3, 4, dtype=torch.float16), 1], ["input"]),
    ):
        with pytest.raises(RuntimeError) as info:
            fd.execute(bad)
        err = info.value
        # also the ValueError / InputError fuser always raised: existing handlers still catch it
        assert isinstance(err, ValueError) and isinstance(err, InputError) and isinstance(err, FusionInputError)
        for w in words:
            assert w in str(err), f"{w!r} not in {err}"


def test_the_classes():
    assert issubclass(DefinitionError, ValueError) and issubclass(DefinitionError, RuntimeError)
    assert issubclass(DefinitionTypeError, TypeError) and issubclass(DefinitionTypeError, RuntimeError)
    assert issubclass(DefinitionIndexError, IndexError) and issubclass(DefinitionIndexError, RuntimeError)
    assert issubclass(FusionInputError, InputError) and issubclass(FusionInputError, RuntimeError)


def test_thunder_style_catch():
    # Thunder and nvFuser scripts wrap execution in `except RuntimeError`
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1], contiguity=[True])))
    try:
        fd.execute([torch.ones(2, 2)])
    except RuntimeError as err:
        assert "1-D" in str(err)
    else:
        raise AssertionError("a 2-D input for a 1-D definition was accepted")
