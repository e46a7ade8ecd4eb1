"""Input binding and validation (fuser.runtime.binding) and nvFuser's layout descriptors
(fuser.runtime.descriptor), over fusions built directly with the IR."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuser.ir import (
    BinaryOp,
    BinaryOpType,
    DataType,
    FullOp,
    Fusion,
    IterDomain,
    Scalar,
    UnaryOp,
    UnaryOpType,
)
from fuser.runtime.binding import Binding, BindingPlan, InputError, bind_inputs
from fuser.runtime.descriptor import compute_contiguity, compute_tensor_descriptor

from irbuild import bc, it, sym, tv


def fusion_of(*make):
    """A fusion whose inputs are made by the callables (run inside its guard)."""
    f = Fusion()
    with f.guard():
        vals = [m() for m in make]
        for v in vals:
            f.add_input(v)
    return f, vals


def one_tensor(ids_fn, dtype=DataType.Float, **kw):
    f, (t,) = fusion_of(lambda: tv(ids_fn(), dtype, **kw))
    return f, t


def raises(f, inputs, *fragments, **kw):
    with pytest.raises(InputError) as info:
        bind_inputs(f, inputs, **kw)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


# --- 1. count -------------------------------------------------------------------------


def test_input_count():
    f, (_, s) = fusion_of(lambda: tv([it()]), lambda: Scalar(DataType.Double))
    b = bind_inputs(f, [torch.zeros(3), 2.0])
    assert isinstance(b, Binding)
    raises(f, [torch.zeros(3)], f"expected 2 inputs (T0, d{s.name}), got 1")
    raises(f, [torch.zeros(3), 1.0, 2.0], "expected 2 inputs", "got 3")


def test_no_inputs():
    f = Fusion()
    b = bind_inputs(f, [])
    assert b.tensors == [] and b.extents == {} and b.scalars == {} and b.device == torch.device("cpu")
    raises(f, [1], "expected 0 inputs (none), got 1")


# --- 2. type ----------------------------------------------------------------------------


def test_tensor_input_needs_a_tensor():
    f, _ = one_tensor(lambda: [it()])
    raises(f, [1.5], "input 0 (T0)", "expected a torch.Tensor, got float 1.5")
    raises(f, [[1.0, 2.0]], "input 0 (T0)", "got list")


def test_scalar_input_needs_a_number_or_0dim_tensor():
    f, (t, s) = fusion_of(lambda: tv([it()]), lambda: Scalar(DataType.Int))
    assert bind_inputs(f, [torch.zeros(2), 3]).scalars == {s: 3}
    assert bind_inputs(f, [torch.zeros(2), torch.tensor(4)]).scalars == {s: 4}
    raises(f, [torch.zeros(2), "3"], f"input 1 (i{s.name})", "expected a Python number or a 0-dim tensor", "str '3'")
    raises(f, [torch.zeros(2), torch.tensor([4])], f"input 1 (i{s.name})", "got a 1-D tensor")


# --- 3. dtype ---------------------------------------------------------------------------


def test_tensor_dtype_must_match_exactly():
    f, _ = one_tensor(lambda: [it()])
    bind_inputs(f, [torch.zeros(3)])
    raises(f, [torch.zeros(3, dtype=torch.float16)],
           "input 0 (T0): expected dtype torch.float32 (DataType.Float), got torch.float16")
    raises(f, [torch.zeros(3, dtype=torch.float64)], "input 0 (T0)", "got torch.float64")


@pytest.mark.parametrize(
    "dtype, good, bad",
    [
        (DataType.Bool, [True, torch.tensor(False)], [1, 0.0, torch.tensor(1)]),
        (DataType.Int, [3, -2, torch.tensor(5), torch.tensor(5, dtype=torch.int32)], [True, 2.0, torch.tensor(1.0)]),
        (DataType.Int32, [3], [2.5, False]),
        (DataType.Double, [1, 2.5, torch.tensor(2.0), torch.tensor(3)], [True, 1j, torch.tensor(True)]),
        (DataType.Float, [2.5], [1 + 0j]),
        (DataType.ComplexDouble, [1, 2.5, 1 + 2j, torch.tensor(1j)], [True, torch.tensor(True)]),
    ],
)
def test_scalar_dtype(dtype, good, bad):
    f, (s,) = fusion_of(lambda: Scalar(dtype))
    label = f"input 0 ({dtype.scalar_prefix}{s.name})"
    for v in good:
        value = bind_inputs(f, [v]).scalars[s]
        expected_type = {0: bool, 1: int, 2: float, 3: complex}[dtype.category]
        assert type(value) is expected_type
        assert value == (v.item() if isinstance(v, torch.Tensor) else v)
    for v in bad:
        raises(f, [v], label, f"for {dtype}", "got")


def test_scalar_values_are_converted_in_tensors_list():
    f, (s,) = fusion_of(lambda: Scalar(DataType.Double))
    b = bind_inputs(f, [3])
    assert b.tensors == [3.0] and type(b.tensors[0]) is float and b.scalars == {s: 3.0}


# --- 4. rank ----------------------------------------------------------------------------


def test_rank():
    f, _ = one_tensor(lambda: [it(), it()])
    bind_inputs(f, [torch.zeros(2, 3)])
    raises(f, [torch.zeros(2, 3, 4)], "input 0 (T0): expected a 2-D tensor, got a 3-D tensor of shape (2, 3, 4)")
    raises(f, [torch.zeros(())], "input 0 (T0)", "got a 0-D tensor")


def test_zero_dim_tensor():
    f, t = one_tensor(lambda: [])
    b = bind_inputs(f, [torch.tensor(2.0)])
    assert b.extents == {} and b.device == torch.device("cpu")
    raises(f, [torch.zeros(1)], "input 0 (T0): expected a 0-D tensor")


# --- 5. broadcast dims --------------------------------------------------------------------


def test_broadcast_dim_needs_size_1():
    f, _ = one_tensor(lambda: [it(), bc()], contiguity=[True, None])
    bind_inputs(f, [torch.zeros(4, 1)])
    bind_inputs(f, [torch.zeros(1, 4).t()])  # size-1 dim with stride 4: any stride is fine
    raises(f, [torch.zeros(4, 3)], "input 0 (T0): dim 1 is defined as a broadcast (size 1), got size 3")


def test_expanded_dim_needs_stride_0():
    n = {}

    def ids():
        n["e"] = sym()
        return [it(), bc(expanded=n["e"])]

    f, _ = one_tensor(ids, contiguity=[True, None])
    b = bind_inputs(f, [torch.zeros(4, 1).expand(4, 6)])
    assert b.extents[n["e"]] == 6
    bind_inputs(f, [torch.zeros(4, 1)])  # an expanded dim of size 1 reads one element
    raises(f, [torch.zeros(4, 6)], "input 0 (T0): dim 1 is defined as an expanded broadcast",
           "needs stride 0, got stride 1")


def test_expanded_dim_with_constant_extent():
    f, _ = one_tensor(lambda: [it(), bc(expanded=5)], contiguity=[True, None])
    bind_inputs(f, [torch.zeros(4, 1).expand(4, 5)])
    raises(f, [torch.zeros(4, 1).expand(4, 6)], "input 0 (T0): dim 1 is defined as expanded to size 5, got size 6")


# --- 6. constant extents ----------------------------------------------------------------------


def test_constant_extent():
    f, _ = one_tensor(lambda: [it(4), it()])
    bind_inputs(f, [torch.zeros(4, 7)])
    raises(f, [torch.zeros(5, 7)], "input 0 (T0): dim 0 has size 5, but the definition fixes it to 4")


# --- 7. undeclared expanded dims ---------------------------------------------------------------


def test_stride_0_on_an_ordinary_dim():
    f, _ = one_tensor(lambda: [it(), it()], contiguity=[False, False])
    bind_inputs(f, [torch.zeros(4, 6)[:, ::2]])
    bind_inputs(f, [torch.zeros(4, 1).expand(4, 1)])  # size 1: stride 0 is harmless
    raises(f, [torch.zeros(4, 1).expand(4, 6)],
           "input 0 (T0): dim 1 is expanded (stride 0, size 6) but defined as not expanded")


# --- 8. contiguity and stride order -----------------------------------------------------------------


def test_contiguous_definition():
    f, _ = one_tensor(lambda: [it(), it(), it()])
    bind_inputs(f, [torch.zeros(2, 3, 4)])
    msg = raises(f, [torch.zeros(2, 3, 8)[:, :, :4]], "input 0 (T0): dim 1 has stride 8",
                 "declares it contiguous", "stride 4 (dim 2's stride × size)", "contiguity False")
    assert "stride order" not in msg
    raises(f, [torch.zeros(2, 3, 8)[:, :, ::2]], "input 0 (T0): dim 2 has stride 2",
           "needs stride 1 as the innermost dim")
    raises(f, [torch.zeros(2, 4, 3).transpose(1, 2)], "input 0 (T0)", "declares it contiguous")


def test_partially_contiguous_definition():
    # contiguity False on the innermost dim allows a strided innermost dim only
    f, _ = one_tensor(lambda: [it(), it()], contiguity=[True, False])
    bind_inputs(f, [torch.zeros(4, 6)[:, ::2]])  # strides (6, 2): 6 == 2 * 3
    raises(f, [torch.zeros(4, 8)[:, :6:2]], "input 0 (T0): dim 0 has stride 8", "stride 6")
    g, _ = one_tensor(lambda: [it(), it()], contiguity=[False, True])
    bind_inputs(g, [torch.zeros(4, 8)[:, :3]])
    raises(g, [torch.zeros(4, 8)[:, ::2]], "input 0 (T0): dim 1 has stride 2")


def test_non_contiguous_definition_accepts_any_layout():
    f, _ = one_tensor(lambda: [it(), it()], contiguity=[False, False])
    for x in (torch.zeros(3, 4), torch.zeros(4, 3).t(), torch.zeros(5, 7)[1:4, ::2]):
        bind_inputs(f, [x])


def test_stride_order_definition():
    def ids_alloc():
        ids = [it(), it(), it()]
        # stride_order [0, 2, 1]: dim 1 outermost, then dim 2, dim 0 innermost
        return ids, [ids[1], ids[2], ids[0]]

    holder = {}

    def make():
        ids, alloc = ids_alloc()
        holder["ids"] = ids
        return tv(ids, allocation=alloc, contiguity=[True, True, True])

    f, _ = fusion_of(make)
    x = torch.zeros(3, 4, 2).permute(2, 0, 1)  # shape (2, 3, 4), strides (1, 8, 2)
    assert compute_tensor_descriptor(x.shape, x.stride()) == ([True, True, True], [0, 2, 1])
    bind_inputs(f, [x])
    raises(f, [torch.zeros(2, 3, 4)], "input 0 (T0)", "declares it contiguous with stride order [0, 2, 1]")


def test_size_one_dims_take_any_stride():
    f, _ = one_tensor(lambda: [it(), it(), it()])
    x = torch.zeros(4, 3).unsqueeze(1)
    x = x.as_strided((4, 1, 3), (3, 100, 1))
    bind_inputs(f, [x])
    # but a size-1 dim does not hide a gap between its neighbours
    raises(f, [torch.zeros(4, 2, 3)[:, :1, :]], "input 0 (T0): dim 0 has stride 6", "stride 3")


def test_empty_tensors_take_any_strides():
    f, t = one_tensor(lambda: [it(), it()])
    b = bind_inputs(f, [torch.zeros(0, 5).t()])
    assert [b.extents[i.extent] for i in t.logical] == [5, 0]
    bind_inputs(f, [torch.zeros(1, 0).expand(3, 0)])
    g, _ = one_tensor(lambda: [it(), bc(expanded=sym())], contiguity=[True, None])
    bind_inputs(g, [torch.zeros(0, 4)])


# --- 9. consistent extents ----------------------------------------------------------------------------


def elementwise(a, b):
    out = tv([i.clone_like() for i in (a.logical if not a.logical[0].is_broadcast else b.logical)])
    BinaryOp([a, b], [out], op_type=BinaryOpType.Add)
    return out


def test_exactly_mapped_input_dims_agree():
    f = Fusion()
    with f.guard():
        t0, t1 = tv([it(), it()]), tv([it(), it()])
        f.add_input(t0)
        f.add_input(t1)
        f.add_output(elementwise(t0, t1))
    bind_inputs(f, [torch.zeros(4, 5), torch.zeros(4, 5)])
    raises(f, [torch.zeros(4, 5), torch.zeros(4, 6)],
           "input 1 (T1) dim 1 has size 6, but input 0 (T0) dim 1 has size 5 and the fusion uses them as the same axis")


def test_broadcast_dims_do_not_constrain():
    f = Fusion()
    with f.guard():
        t0, t1 = tv([it(), it()]), tv([bc(), it()], contiguity=[None, True])
        f.add_input(t0)
        f.add_input(t1)
        f.add_output(elementwise(t0, t1))
    b = bind_inputs(f, [torch.zeros(4, 5), torch.zeros(1, 5)])
    assert sorted(b.extents.values()) == [4, 5, 5]
    raises(f, [torch.zeros(4, 5), torch.zeros(1, 3)], "input 1 (T1) dim 1 has size 3", "input 0 (T0) dim 1 has size 5")


def test_constant_extent_from_another_tensor():
    f = Fusion()
    with f.guard():
        t0 = tv([it()])
        f.add_input(t0)
        n = Scalar(DataType.Int, 4)
        full = tv([IterDomain(n)])
        FullOp([n, Scalar(DataType.Float, 1.0)], [full])
        f.add_output(elementwise(t0, full))
    bind_inputs(f, [torch.zeros(4)])
    raises(f, [torch.zeros(5)],
           f"input 0 (T0) dim 0 has size 5, but the fusion uses it as the same axis as T{full.name} dim 0, "
           "whose extent is 4")


def test_unmapped_dims_are_independent():
    f = Fusion()
    with f.guard():
        t0, t1 = tv([it()]), tv([it()])
        f.add_input(t0)
        f.add_input(t1)
        out = tv([t0.logical[0].clone_like()])
        UnaryOp([t0], [out], op_type=UnaryOpType.Neg)
        f.add_output(out)
    bind_inputs(f, [torch.zeros(3), torch.zeros(7)])


def test_shared_extent_scalar():
    n = {}

    def make():
        n.setdefault("n", sym())
        return tv([IterDomain(n["n"])])

    f, (t0, t1) = fusion_of(make, make)
    b = bind_inputs(f, [torch.zeros(3), torch.zeros(3)])
    assert b.extents == {n["n"]: 3}
    raises(f, [torch.zeros(3), torch.zeros(4)], "input 1 (T1) dim 0 has size 4, but input 0 (T0) dim 0 has size 3")


# --- 10. devices and CPU scalars -------------------------------------------------------------------------


def cpu_scalar_tv():
    t = tv([])
    t.is_cpu_scalar = True
    return t


def test_cpu_scalar_tensor():
    f, _ = fusion_of(lambda: tv([it()]), cpu_scalar_tv)
    b = bind_inputs(f, [torch.zeros(3, device="meta"), torch.tensor(2.0)])
    assert b.device == torch.device("meta")
    raises(f, [torch.zeros(3, device="meta"), torch.tensor(2.0, device="meta")],
           "input 1 (T1): defined as a CPU scalar (is_cpu=True), so it needs a 0-dim CPU tensor, got a tensor on meta")
    raises(f, [torch.zeros(3), torch.zeros(2)], "input 1 (T1): expected a 0-D tensor")


def test_all_cpu_inputs_are_valid():
    f, _ = fusion_of(lambda: tv([it()]), lambda: tv([it()]))
    assert bind_inputs(f, [torch.zeros(3), torch.zeros(2)]).device == torch.device("cpu")


def test_mixed_devices():
    f, _ = fusion_of(lambda: tv([it()]), lambda: tv([it()]))
    assert bind_inputs(f, [torch.zeros(3, device="meta"), torch.zeros(2, device="meta")]).device.type == "meta"
    # meta tensors stand for shapes only (code generation between segments): they bind
    # beside tensors of any one device
    assert bind_inputs(f, [torch.zeros(3, device="meta"), torch.zeros(2)]).device.type == "cpu"


def test_requested_device():
    f, _ = fusion_of(lambda: tv([it()]), lambda: Scalar(DataType.Int))
    assert bind_inputs(f, [torch.zeros(3), 1], device=torch.device("cpu")).device == torch.device("cpu")
    raises(f, [torch.zeros(3), 1], "input 0 (T0) is on cpu, but device meta was requested", device=torch.device("meta"))
    # a 0-dim tensor passed for a scalar does not count as a tensor input
    g, _ = fusion_of(lambda: Scalar(DataType.Int))
    assert bind_inputs(g, [torch.tensor(1)], device=torch.device("meta")).device == torch.device("meta")
    assert bind_inputs(g, [1]).device == torch.device("cpu")


# --- ordering, binding contents, plan caching ---------------------------------------------------------


def test_checks_run_in_rule_order():
    f, _ = one_tensor(lambda: [it(4), bc()], contiguity=[True, None])
    # dim 0 breaks rule 6 and dim 1 rule 5: the broadcast is reported first
    raises(f, [torch.zeros(5, 3)], "dim 1 is defined as a broadcast")
    # dtype is checked before rank
    raises(f, [torch.zeros(2, dtype=torch.int64)], "expected dtype torch.float32")


def test_binding_contents():
    ids = {}

    def make():
        ids["a"], ids["e"] = sym(), sym()
        return tv([IterDomain(ids["a"]), bc(expanded=ids["e"]), it(3)], contiguity=[True, None, True])

    f, (t0, s) = fusion_of(make, lambda: Scalar(DataType.Bool))
    x = torch.zeros(2, 1, 3).expand(2, 5, 3)
    b = bind_inputs(f, [x, True])
    assert b.tensors[0] is x and b.tensors[1] is True
    assert b.extents == {ids["a"]: 2, ids["e"]: 5}
    assert b.scalars == {s: True}
    assert b.device == torch.device("cpu")


def test_plan_is_cached_and_rebuilt_after_changes():
    f, (t0,) = fusion_of(lambda: tv([it()]))
    bind_inputs(f, [torch.zeros(2)])
    plan = f._binding_plan
    bind_inputs(f, [torch.zeros(3)])
    assert f._binding_plan is plan and BindingPlan.of(f) is plan
    with f.guard():
        t1 = tv([it()])
        f.add_input(t1)
        f.add_output(elementwise(t0, t1))
    raises(f, [torch.zeros(2)], "expected 2 inputs")
    assert f._binding_plan is not plan
    raises(f, [torch.zeros(2), torch.zeros(3)], "input 1 (T1) dim 0 has size 3")


# --- descriptors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, contiguity, descriptor",
    [
        (torch.zeros(2, 3, 4), [True, True, True], ([True, True, True], [2, 1, 0])),
        (torch.zeros(3, 4).t(), [False, False], ([True, True], [0, 1])),
        (torch.zeros(2, 3, 4).permute(2, 0, 1), [False, True, False], ([True, True, True], [0, 2, 1])),
        (torch.zeros(3, 1).expand(3, 5), [True, None], ([True, None], [1, 0])),
        (torch.zeros(1, 3).expand(5, 3), [None, True], ([None, True], [1, 0])),
        (torch.zeros(2, 1, 3), [True, None, True], ([True, None, True], [2, 1, 0])),
        (torch.zeros(4, 6)[:, ::2], [True, False], ([True, False], [1, 0])),
        (torch.zeros(4, 6)[:, 1:4], [False, True], ([False, True], [1, 0])),
        (torch.zeros(4, 6)[::2, 1:4], [False, True], ([False, True], [1, 0])),
        (torch.zeros(()), [], ([], [])),
        (torch.zeros(0, 3), [True, True], ([True, True], [1, 0])),
    ],
)
def test_descriptors(x, contiguity, descriptor):
    assert compute_contiguity(x.shape, x.stride()) == contiguity
    assert compute_tensor_descriptor(x.shape, x.stride()) == descriptor


def test_descriptor_stride_ties_and_zero_strides():
    # equal strides keep logical order; stride-0 dims stay at their logical position
    assert compute_tensor_descriptor([2, 3, 1], [1, 1, 1]) == ([False, True, None], [2, 1, 0])
    assert compute_tensor_descriptor([5, 2, 3], [0, 1, 2]) == ([None, True, True], [2, 0, 1])


def test_descriptor_errors():
    with pytest.raises(ValueError, match="same number of dimensions"):
        compute_tensor_descriptor([2, 3], [1])
    with pytest.raises(ValueError, match="negative stride"):
        compute_tensor_descriptor([2, 3], [3, -1])
    with pytest.raises(ValueError, match="same number of dimensions"):
        compute_contiguity([2], [])


def _nvfuser_contiguity(sizes, strides):
    """A line-by-line transcription of nvFuser's computeContiguity, as an oracle."""
    n = len(sizes)
    nb = lambda i: strides[i] != 0 and sizes[i] != 1  # noqa: E731
    c = [None] * n
    if n == 0:
        return c
    last = n - 1
    while last >= 0:
        if nb(last):
            c[last] = strides[last] == 1
            break
        last -= 1
    i = 0
    while i < last:
        if nb(i):
            l = i
            i += 1
            while i <= last:
                if nb(i):
                    break
                i += 1
            c[l] = strides[l] == strides[i] * sizes[i]
        else:
            i += 1
    return c


def _nvfuser_descriptor(sizes, strides):
    """A line-by-line transcription of nvFuser's computeTensorDescriptor, as an oracle."""
    n = len(sizes)
    dims = [{"index": i, "size": sizes[i], "stride": strides[i], "order": None, "contig": None} for i in range(n)]
    vec = sorted([d for d in dims if d["stride"] != 0], key=lambda d: -d["stride"])
    for d in [d for d in dims if d["stride"] == 0]:
        vec.insert(d["index"], d)
    bcast = lambda d: d["stride"] == 0 or d["size"] == 1  # noqa: E731
    i = 0
    while i < n:
        vec[i]["order"] = n - 1 - i
        if not bcast(vec[i]):
            l = i
            i += 1
            expected = 1
            while i < n:
                vec[i]["order"] = n - 1 - i
                if not bcast(vec[i]):
                    expected = vec[i]["stride"] * vec[i]["size"]
                    break
                i += 1
            vec[l]["contig"] = vec[l]["stride"] == expected
        else:
            i += 1
    order = [-1] * n
    for d in vec:
        order[d["index"]] = d["order"]
    return [d["contig"] for d in vec], order


@st.composite
def strided_tensors(draw):
    """Tensors as PyTorch makes them: sliced, permuted, expanded views of a buffer."""
    rank = draw(st.integers(0, 4))
    sizes = draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank))
    if draw(st.booleans()):
        sizes = [max(s, 1) for s in sizes]
    base = torch.zeros([s + draw(st.integers(0, 2)) for s in sizes])
    x = base[tuple(slice(0, s) for s in sizes)]
    steps = [draw(st.integers(1, 2)) for _ in sizes]
    if any(s > 1 for s in steps):
        big = torch.zeros([s * k for s, k in zip(sizes, steps)])
        x = big[tuple(slice(None, None, k) for k in steps)]
    perm = draw(st.permutations(range(rank)))
    x = x.permute(*perm) if rank else x
    expand = [draw(st.integers(2, 3)) if s == 1 and draw(st.booleans()) else -1 for s in x.shape]
    return x.expand(*expand) if rank else x


@settings(max_examples=300, deadline=None)
@given(strided_tensors())
def test_descriptors_match_nvfuser(x):
    sizes, strides = list(x.shape), list(x.stride())
    assert compute_contiguity(sizes, strides) == _nvfuser_contiguity(sizes, strides)
    assert compute_tensor_descriptor(sizes, strides) == _nvfuser_descriptor(sizes, strides)


def _define_like(x: torch.Tensor) -> Fusion:
    """The fusion define_tensor(shape=-1s, contiguity, stride_order) would make for `x`."""
    contiguity, stride_order = compute_tensor_descriptor(x.shape, x.stride())
    n = x.ndim
    f = Fusion()
    with f.guard():
        ids = []
        for size, stride in zip(x.shape, x.stride()):
            if size == 1:
                ids.append(bc())
            elif stride == 0:
                ids.append(bc(expanded=sym()))
            else:
                ids.append(it())
        alloc = [None] * n
        for d, o in enumerate(stride_order):
            alloc[n - 1 - o] = ids[d]
        f.add_input(tv(ids, allocation=alloc, contiguity=contiguity))
    return f


@settings(max_examples=300, deadline=None)
@given(strided_tensors())
def test_tensor_binds_to_its_own_descriptor(x):
    bind_inputs(_define_like(x), [x])
    # and a contiguous copy binds to a fully contiguous definition
    f, _ = one_tensor(lambda: [it() for _ in range(x.ndim)])
    bind_inputs(f, [x.contiguous()])
