"""The `fd.ops` reference (issue 31 item 4): docs/ops.md is what tools/gen_ops_doc.py renders
from the op docstrings now; every op has a docstring with a summary and a `Dtypes:` line; and
a sample of the dtype claims, across op kinds, holds for the code (an op documented to refuse
a dtype raises at definition time, one documented to accept it defines, with the documented
result dtype). Without the source tree (tests copied beside an installed fuser) the
docs/ops.md comparison skips; the docstring and dtype checks run anywhere."""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from fuser import DataType, FusionDefinition
from fuser.errors import FuserError
from fuser.frontend.ops import Operators

REPO = Path(__file__).resolve().parent.parent
GEN = REPO / "tools" / "gen_ops_doc.py"
DOC = REPO / "docs" / "ops.md"
D = DataType


def _generator():
    if not GEN.is_file() or not DOC.is_file():
        pytest.skip("needs the source tree (tools/gen_ops_doc.py and docs/ops.md beside tests/)")
    spec = importlib.util.spec_from_file_location("gen_ops_doc", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def public_ops() -> list[str]:
    return sorted(n for n in dir(Operators) if not n.startswith("_") and callable(getattr(Operators, n)))


# --- (a) docs/ops.md is current ----------------------------------------------------------------


def test_ops_md_is_current():
    gen = _generator()
    assert DOC.read_text(encoding="utf-8") == gen.render(), "docs/ops.md is stale: run python tools/gen_ops_doc.py"


def test_every_op_is_in_the_reference_under_a_named_group():
    gen = _generator()
    groups = gen.groups()
    listed = [n for _, names in groups for n in names]
    assert sorted(listed) == public_ops() and len(listed) == len(set(listed))
    assert gen.OTHER not in [t for t, _ in groups], "an op no group names: add it to _GROUPS in tools/gen_ops_doc.py"
    text = DOC.read_text(encoding="utf-8")
    for name in public_ops():
        assert f"\n### {name}\n" in text and gen.signature(name) in text


def test_check_mode_fails_on_a_stale_file(tmp_path, monkeypatch, capsys):
    gen = _generator()
    doc = tmp_path / "docs" / "ops.md"
    doc.parent.mkdir()
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "DOC", doc)
    assert gen.main(["--check"]) == 1  # missing
    doc.write_text(gen.render().replace("### sum\n", "### sum (edited)\n"), encoding="utf-8")
    assert gen.main(["--check"]) == 1  # stale
    assert gen.main([]) == 0 and doc.read_text(encoding="utf-8") == gen.render()
    assert gen.main(["--check"]) == 0


def test_signature_rendering():
    gen = _generator()
    assert gen.signature("sum") == "fd.ops.sum(arg, dims=None, keepdim=False, dtype=DataType.Null, *, dim=None)"
    assert gen.signature("sin") == "fd.ops.sin(arg)"


# --- (b) every op has a docstring with a summary and a Dtypes line ------------------------------


def docstring_problems(doc: str | None) -> list[str]:
    lines = inspect.cleandoc(doc or "").splitlines()
    problems = []
    if not lines or not lines[0].strip() or lines[0].startswith(("Dtypes:", "Differs from PyTorch:")):
        problems.append("no summary first line")
    if sum(line.startswith("Dtypes: ") for line in lines[1:]) != 1:
        problems.append("not exactly one 'Dtypes:' line after the summary")
    if not 2 <= len(lines) <= 5:
        problems.append(f"{len(lines)} lines (2 to 5 wanted)")
    return problems


def test_every_op_has_a_docstring():
    ops = public_ops()
    assert len(ops) >= 130
    bad = {n: p for n in ops if (p := docstring_problems(getattr(Operators, n).__doc__))}
    assert not bad, bad


def test_generated_ops_have_their_own_docstrings():
    # the unary and binary ops made in a loop each take their own entry, not a shared text
    from fuser.frontend.ops import _BINARY, _UNARY

    for table in (_UNARY, _BINARY):
        docs = [getattr(Operators, n).__doc__ for n in table]
        assert len(set(docs)) == len(docs)


def test_docstring_check_can_fail():
    assert docstring_problems(None)
    assert docstring_problems("Elementwise sin.")  # no Dtypes line
    assert docstring_problems("Dtypes: any.")  # no summary
    assert not docstring_problems("Sine.\nDtypes: any.")


# --- (c) the documented dtypes hold ------------------------------------------------------------

REFUSED = "refused"


def _t(fd, dtype, shape=(-1, -1)):
    return fd.define_tensor(shape=list(shape), contiguity=[True] * len(shape), dtype=dtype)


def _idx(fd, dtype):
    return _t(fd, dtype, (-1,))


#: (op, a phrase its `Dtypes:` line must hold, how to call it on a tensor of dtype `dt`, dt,
#: REFUSED or the expected output dtype)
CLAIMS = [
    ("sin", "integer and bool inputs give Float", lambda fd, dt: fd.ops.sin(_t(fd, dt)), D.Int32, D.Float),
    ("sin", "floating and complex inputs keep their dtype", lambda fd, dt: fd.ops.sin(_t(fd, dt)), D.BFloat16, D.BFloat16),
    ("neg", "bool is refused", lambda fd, dt: fd.ops.neg(_t(fd, dt)), D.Bool, REFUSED),
    ("neg", "integer, floating and complex, kept", lambda fd, dt: fd.ops.neg(_t(fd, dt)), D.Int, D.Int),
    ("bitwise_not", "floating and complex are refused", lambda fd, dt: fd.ops.bitwise_not(_t(fd, dt)), D.Float, REFUSED),
    ("bitwise_not", "integer and bool, kept", lambda fd, dt: fd.ops.bitwise_not(_t(fd, dt)), D.Bool, D.Bool),
    ("frac", "floating only", lambda fd, dt: fd.ops.frac(_t(fd, dt)), D.Int, REFUSED),
    ("erf", "complex is refused", lambda fd, dt: fd.ops.erf(_t(fd, dt)), D.ComplexFloat, REFUSED),
    ("abs", "complex gives its real counterpart", lambda fd, dt: fd.ops.abs(_t(fd, dt)), D.ComplexFloat, D.Float),
    ("isnan", "the result is Bool", lambda fd, dt: fd.ops.isnan(_t(fd, dt)), D.Int, D.Bool),
    ("sub", "bool operands are refused", lambda fd, dt: fd.ops.sub(_t(fd, dt), _t(fd, dt)), D.Bool, REFUSED),
    ("add", "any", lambda fd, dt: fd.ops.add(_t(fd, dt), _t(fd, dt)), D.Bool, D.Bool),
    ("div", "operands that promote to bool are refused", lambda fd, dt: fd.ops.div(_t(fd, dt), _t(fd, dt)), D.Bool, REFUSED),
    ("div", "integer", lambda fd, dt: fd.ops.div(_t(fd, dt), _t(fd, dt)), D.Int32, D.Int32),
    ("truediv", "integer and bool operands give Float", lambda fd, dt: fd.ops.truediv(_t(fd, dt), _t(fd, dt)), D.Int, D.Float),
    ("bitwise_and", "integer and bool operands only", lambda fd, dt: fd.ops.bitwise_and(_t(fd, dt), _t(fd, dt)), D.Float, REFUSED),
    ("gcd", "two bools are refused", lambda fd, dt: fd.ops.gcd(_t(fd, dt), _t(fd, dt)), D.Bool, REFUSED),
    ("lt", "complex is refused", lambda fd, dt: fd.ops.lt(_t(fd, dt), _t(fd, dt)), D.ComplexFloat, REFUSED),
    ("eq", "the result is Bool", lambda fd, dt: fd.ops.eq(_t(fd, dt), _t(fd, dt)), D.ComplexFloat, D.Bool),
    ("atan2", "integer and bool operands give Float", lambda fd, dt: fd.ops.atan2(_t(fd, dt), _t(fd, dt)), D.Int, D.Float),
    ("where", "`cond` must be Bool", lambda fd, dt: fd.ops.where(_t(fd, dt), 1.0, 2.0), D.Int, REFUSED),
    ("clamp", "complex are refused", lambda fd, dt: fd.ops.clamp(_t(fd, dt), 0, 1), D.ComplexFloat, REFUSED),
    ("clamp", "integer and floating", lambda fd, dt: fd.ops.clamp(_t(fd, dt), 0, 1), D.Int32, D.Int32),
    ("lerp", "floating and complex", lambda fd, dt: fd.ops.lerp(_t(fd, dt), _t(fd, dt), 0.5), D.Int, REFUSED),
    ("cast", "any input", lambda fd, dt: fd.ops.cast(_t(fd, dt), D.Half), D.Bool, D.Half),
    ("sum", "integer and bool inputs accumulate in Int", lambda fd, dt: fd.ops.sum(_t(fd, dt), [1]), D.Bool, D.Int),
    ("max", "complex is refused", lambda fd, dt: fd.ops.max(_t(fd, dt), [1]), D.ComplexFloat, REFUSED),
    ("max", "bool, integer and floating, kept", lambda fd, dt: fd.ops.max(_t(fd, dt), [1]), D.Bool, D.Bool),
    ("cumsum", "integer and bool inputs accumulate in Int", lambda fd, dt: fd.ops.cumsum(_t(fd, dt), 1), D.Int32, D.Int),
    ("var", "integer and bool are refused", lambda fd, dt: fd.ops.var(_t(fd, dt), [1]), D.Int, REFUSED),
    ("var", "complex (a real variance)", lambda fd, dt: fd.ops.var(_t(fd, dt), [1]), D.ComplexFloat, D.Float),
    ("welford", "complex is refused", lambda fd, dt: fd.ops.welford(_t(fd, dt), [1])[0], D.ComplexFloat, REFUSED),
    ("welford", "integer and bool compute in Float", lambda fd, dt: fd.ops.welford(_t(fd, dt), [1])[0], D.Int, D.Float),
    ("reshape", "any, kept", lambda fd, dt: fd.ops.reshape(_t(fd, dt, (2, 3)), [6]), D.Bool, D.Bool),
    ("index_select", "bool and complex indices are refused",
     lambda fd, dt: fd.ops.index_select(_t(fd, D.Float), _idx(fd, dt), 0), D.Bool, REFUSED),
    ("index_select", "`index` integer or floating",
     lambda fd, dt: fd.ops.index_select(_t(fd, D.Float), _idx(fd, dt), 0), D.Float, D.Float),
    ("gather", "bool and complex indices are refused",
     lambda fd, dt: fd.ops.gather(_t(fd, D.Float), _t(fd, dt), 0), D.ComplexFloat, REFUSED),
    ("full", "any `dtype` but DataType.Null", lambda fd, dt: fd.ops.full([2, 3], 1, dt), D.Bool, D.Bool),
    ("iota", "bool and complex are refused", lambda fd, dt: fd.ops.iota(5, dtype=dt), D.Bool, REFUSED),
    ("iota", "`dtype` integer or floating", lambda fd, dt: fd.ops.iota(5, dtype=dt), D.Float, D.Float),
    ("uniform", "bool, integer and complex are refused", lambda fd, dt: fd.ops.uniform(0.0, 1.0, [4], dtype=dt), D.Int, REFUSED),
    ("uniform", "`dtype` floating", lambda fd, dt: fd.ops.uniform(0.0, 1.0, [4], dtype=dt), D.BFloat16, D.BFloat16),
    ("rand_like", "bool, integer and complex are refused", lambda fd, dt: fd.ops.rand_like(_t(fd, dt)), D.Int32, REFUSED),
    ("matmul", "floating and complex", lambda fd, dt: fd.ops.matmul(_t(fd, dt), _t(fd, dt)), D.Int, REFUSED),
    ("matmul", "floating and complex", lambda fd, dt: fd.ops.matmul(_t(fd, dt), _t(fd, dt)), D.BFloat16, D.BFloat16),
    ("embedding_fwd", "`input` integer", lambda fd, dt: fd.ops.embedding_fwd(_idx(fd, dt), _t(fd, D.Float)), D.Float, REFUSED),
    ("argsort", "the result is Int", lambda fd, dt: fd.ops.argsort(_t(fd, dt), 1), D.Bool, D.Int),
    ("bitcast", "of equal size", lambda fd, dt: fd.ops.bitcast(_t(fd, dt), D.Int32), D.Float, D.Int32),
    ("bitcast", "of equal size", lambda fd, dt: fd.ops.bitcast(_t(fd, dt), D.Int32), D.Double, REFUSED),
    ("ndtri", "integer and bool give Float", lambda fd, dt: fd.ops.ndtri(_t(fd, dt)), D.Bool, D.Float),
]


def claim_failure(op: str, phrase: str, build, dt: DataType, expected) -> str | None:
    """Why the claim does not hold (None when it does): the phrase must be in `op`'s Dtypes
    line, and `build` must raise at definition time (REFUSED) or give the expected dtype."""
    dtypes = [line for line in inspect.cleandoc(getattr(Operators, op).__doc__ or "").splitlines()
              if line.startswith("Dtypes:")]
    if not dtypes or phrase not in dtypes[0]:
        return f"fd.ops.{op}'s Dtypes line does not say {phrase!r}: {dtypes}"
    fd = FusionDefinition()
    fd.__enter__()  # definition-time behaviour only: the definition is never finished
    try:
        out = build(fd, dt)
    except FuserError as err:
        if expected is REFUSED:
            return None if f"fd.ops.{op}" in str(err) else f"fd.ops.{op} on {dt} raised from elsewhere: {err}"
        return f"fd.ops.{op} refused {dt}, documented to accept it: {err}"
    finally:
        fd.__exit__(RuntimeError, None, None)  # closes the definition without finishing it
    if expected is REFUSED:
        return f"fd.ops.{op} accepted {dt} (gave {out.dtype}), documented to refuse it"
    if out.dtype is not expected:
        return f"fd.ops.{op} on {dt} gave {out.dtype}, documented {expected}"
    return None


@pytest.mark.parametrize("op,phrase,build,dt,expected", CLAIMS,
                         ids=[f"{c[0]}-{c[3].name}-{'refused' if c[4] is REFUSED else 'ok'}" for c in CLAIMS])
def test_documented_dtype_claim_holds(op, phrase, build, dt, expected):
    assert claim_failure(op, phrase, build, dt, expected) is None


def test_claims_cover_the_kinds_of_ops():
    ops = {c[0] for c in CLAIMS}
    assert len(ops) >= 10
    assert sum(c[4] is REFUSED for c in CLAIMS) >= 10 and sum(c[4] is not REFUSED for c in CLAIMS) >= 10
    for kind in ({"sin", "neg", "frac"}, {"sub", "div", "bitwise_and"}, {"where", "clamp", "lerp"},
                 {"sum", "max", "var", "welford"}, {"index_select", "gather"}, {"iota", "full"},
                 {"uniform", "rand_like"}, {"matmul", "embedding_fwd", "argsort"}):
        assert kind & ops


def test_dtype_claim_check_can_fail():
    sin = lambda fd, dt: fd.ops.sin(_t(fd, dt))  # noqa: E731
    assert claim_failure("sin", "floating only", sin, D.Float, D.Float)  # not what the docstring says
    assert claim_failure("sin", "integer and bool inputs give Float", sin, D.Int, REFUSED)  # it accepts
    assert claim_failure("sin", "integer and bool inputs give Float", sin, D.Int, D.Int)  # wrong dtype
    neg = lambda fd, dt: fd.ops.neg(_t(fd, dt))  # noqa: E731
    assert claim_failure("neg", "bool is refused", neg, D.Float, D.Float) is None
    assert claim_failure("neg", "bool is refused", neg, D.Bool, D.Bool)  # it refuses
