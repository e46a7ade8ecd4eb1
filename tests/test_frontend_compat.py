"""`fuser.compat.nvfuser`: with `sys.modules["nvfuser"] = fuser.compat.nvfuser`, an
unmodified nvFuser script (`from nvfuser import FusionDefinition, DataType`) runs on
fuser. sys.modules is restored after each test."""
import sys

import pytest
import torch

import fuser
import fuser.compat.nvfuser

SCRIPT = """\
import torch
from nvfuser import FusionDefinition, DataType

def nvfuser_fusion_id0(fd : FusionDefinition) -> None :
    T0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16, is_cpu=False, stride_order=[2, 1, 0])
    T1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float, is_cpu=False, stride_order=[1, 0])
    T2 = fd.ops.cast(T0, dtype=DataType.Float)
    S3 = fd.define_scalar(2, dtype=DataType.Int)
    S4 = fd.define_scalar(3, dtype=DataType.Int)
    S5 = fd.define_scalar(1, dtype=DataType.Int)
    V6 = fd.define_vector([S3, S4, S5], dtype=DataType.Int)
    T7 = fd.ops.broadcast_in_dim(T1, shape=V6, broadcast_dims=[0, 1])
    S8 = fd.define_scalar(2, dtype=DataType.Int)
    S9 = fd.define_scalar(3, dtype=DataType.Int)
    S10 = fd.define_scalar(4, dtype=DataType.Int)
    V11 = fd.define_vector([S8, S9, S10], dtype=DataType.Int)
    T12 = fd.ops.broadcast_in_dim(T7, shape=V11, broadcast_dims=[0, 1, 2])
    T13 = fd.ops.sub(T2, T12)
    S14 = fd.define_scalar(-0.500000, dtype=DataType.Double)
    T15 = fd.ops.mul(S14, T13)
    T16 = fd.ops.sum(T15, dims=[2], keepdim=False, dtype=DataType.Null)
    T17 = fd.ops.cast(T16, dtype=DataType.BFloat16)
    fd.add_output(T17)
    fd.add_output(T13)

with FusionDefinition() as fd:
    nvfuser_fusion_id0(fd)

inputs = [
    torch.randn((24,), dtype=torch.bfloat16, device='cpu').as_strided((2, 3, 4), (12, 4, 1)),
    torch.randn((6,), dtype=torch.float32, device='cpu').as_strided((2, 3), (3, 1)),
]
outputs = fd.execute(inputs)
"""


@pytest.fixture
def as_nvfuser():
    saved = {k: sys.modules[k] for k in list(sys.modules) if k == "nvfuser" or k.startswith("nvfuser.")}
    sys.modules["nvfuser"] = fuser.compat.nvfuser
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == "nvfuser" or k.startswith("nvfuser.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_unmodified_nvfuser_script_runs(as_nvfuser):
    namespace = {}
    exec(SCRIPT, namespace)
    assert namespace["FusionDefinition"] is fuser.FusionDefinition
    assert namespace["DataType"] is fuser.DataType
    t0, t1 = namespace["inputs"]
    diff = t0.float() - t1[:, :, None]
    expected = (-0.5 * diff).sum(2).bfloat16()
    out, sub = namespace["outputs"]
    assert out.dtype == torch.bfloat16 and out.shape == (2, 3)
    torch.testing.assert_close(sub, diff)
    torch.testing.assert_close(out, expected)


def test_alias_module_names(as_nvfuser):
    import nvfuser

    assert nvfuser is fuser.compat.nvfuser
    for name in ["FusionDefinition", "DataType", "FusionCache", "Tensor", "Scalar", "Vector", "clone",
                 "compute_contiguity", "compute_tensor_descriptor", "pytorch_utils"]:
        assert getattr(nvfuser, name) is getattr(fuser, name), name
    # the compat module reports the nvFuser frontend version it implements; fuser keeps its own
    assert nvfuser.version() == "0.2.27" and fuser.version() == fuser.__version__ != "0.2.27"
    from nvfuser import pytorch_utils

    assert pytorch_utils.torch_dtype_to_nvfuser_dtype(torch.float16) is fuser.DataType.Half
    assert nvfuser.FusionCache.get() is fuser.FusionCache.get()


def test_subclass_style_script(as_nvfuser):
    namespace = {}
    exec(
        "from nvfuser import FusionDefinition, DataType\n"
        "class Fusion(FusionDefinition):\n"
        "    def definition(self):\n"
        "        t0 = self.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)\n"
        "        self.add_output(self.ops.relu(t0))\n",
        namespace,
    )
    x = torch.randn(6)
    assert torch.equal(namespace["Fusion"]().execute([x])[0], x.relu())


def test_sys_modules_restored():
    assert sys.modules.get("nvfuser") is not fuser.compat.nvfuser


def test_from_nvfuser_pytorch_utils_import(as_nvfuser):
    namespace = {}
    exec("from nvfuser.pytorch_utils import torch_dtype_to_nvfuser_dtype\n", namespace)
    assert namespace["torch_dtype_to_nvfuser_dtype"](torch.float32) is fuser.DataType.Float
