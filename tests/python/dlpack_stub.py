"""A DLPack producer made with ctypes, exporting any dtype (code, bits, lanes) over memory given by
address: what a framework exports for dtypes NumPy has no name for, such as PyTorch's
float4_e2m1fn_x2 (code 17 kDLFloat4_e2m1fn, bits 4, lanes 2: one byte of two 4-bit values), which
only PyTorch 2.10+ on a GPU machine would otherwise show."""
import ctypes


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):  # legacy (unversioned) DLManagedTensor, capsule "dltensor"
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Producer:
    """n elements of (code, bits, lanes) at address, 1-D and contiguous, on (device_type, device_id)
    (1: CPU, 2: CUDA). Keeps what it exported alive as long as itself (no deleter)."""

    def __init__(self, address: int, n: int, code: int, bits: int, lanes: int, device=(1, 0), keep=None):
        self.address, self.n, self.dtype, self.device, self.keep = address, n, (code, bits, lanes), device, keep
        self.shape, self.strides = (ctypes.c_int64 * 1)(n), (ctypes.c_int64 * 1)(1)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kw):
        self.m = _Managed(_Tensor(self.address, _Device(*self.device), 1, _DType(*self.dtype), self.shape, self.strides,
                                  0), None, None)
        return _capsule(ctypes.addressof(self.m), b"dltensor", None)


def host_float4_x2(n: int) -> tuple[Producer, ctypes.Array]:
    """A host float4_e2m1fn_x2 array of n elements (n bytes) as PyTorch exports it, and its memory."""
    buf = (ctypes.c_uint8 * n)()
    return Producer(ctypes.addressof(buf), n, 17, 4, 2, keep=buf), buf
