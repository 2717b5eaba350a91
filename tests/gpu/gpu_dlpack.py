"""hvd._core's device outputs as DLPack capsules, without a GPU: run by
tests/gpu/test-gpu-libhvd.sh in a job of one rank with HVD_GPU_MODULE = the
NCCL module over the host mock of CUDA (so "device memory" is host memory
and can be read here). Checks the capsule torch.utils.dlpack.from_dlpack
would take (name "dltensor", DLPack 0.x layout, kDLCUDA on the request's
device, dtype, shape, row-major strides, the data), that a stream handle in
the request is accepted, and that dropping an unconsumed capsule or calling
the deleter as a consumer does frees the device memory exactly once.

    python3 gpu_dlpack.py MOCK_MODULE_PATH"""

import ctypes
import sys

from hvd import _core

mock = ctypes.CDLL(sys.argv[1])  # the image libhvd loads: dlopen() of the same path
mock.mock_cuda_live_allocs.restype = ctypes.c_long
live = mock.mock_cuda_live_allocs


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]

capi = ctypes.pythonapi
capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
capi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def check(cond, msg):
    if not cond:
        print(f"FAIL: {msg}", file=sys.stderr)
        sys.exit(1)


def managed(cap):
    check(capi.PyCapsule_IsValid(cap, b"dltensor") == 1, f"not a 'dltensor' capsule: {cap!r}")
    return ctypes.cast(capi.PyCapsule_GetPointer(cap, b"dltensor"), ctypes.POINTER(DLManagedTensor)).contents


def allgather(name, values, ctype, dtype, shape, stream=None):
    buf = (ctype * len(values))(*values)
    req = (name, ctypes.addressof(buf), None, dtype, shape, _core.REDUCE_SUM, 1.0, 1.0, 0, None, 0, 0, stream)
    h = _core.submit(_core.KIND_ALLGATHER, [req], buf)
    h.wait()
    return h


_core.init()
check(_core.size() == 1, "a job of one rank expected")
base = live()

# float32 [2, 3], with a (mock) stream handle: the legacy stream is 0
h = allgather("dl.f32", [1.5, -2, 3, 4, 5, 6.25], ctypes.c_float, _core.FLOAT32, (2, 3), stream=0)
check(live() == base + 1, f"allgather made {live() - base} device allocations, want 1")
cap, shape = h.output(0)
check(shape == (2, 3), f"shape {shape}")
t = managed(cap).dl_tensor
check((t.device.device_type, t.device.device_id) == (2, 0), "device: want kDLCUDA (2), GPU 0")
check((t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1), "dtype: want kDLFloat 32")
check(t.ndim == 2 and t.shape[0] == 2 and t.shape[1] == 3, "DLTensor shape")
check(t.strides[0] == 3 and t.strides[1] == 1 and t.byte_offset == 0, "DLTensor strides: row-major")
got = list((ctypes.c_float * 6).from_address(t.data))
check(got == [1.5, -2, 3, 4, 5, 6.25], f"data {got}")
del h  # the output was taken: the capsule owns it
check(live() == base + 1, "releasing the handle freed the output the capsule owns")
del cap, t
check(live() == base, "an unconsumed capsule did not free its device memory")

# bfloat16 and bool: their DLPack dtypes
for name, dtype, es, want in (("dl.bf16", _core.BFLOAT16, 2, (4, 16, 1)), ("dl.bool", _core.BOOL, 1, (1, 8, 1)),
                              ("dl.i64", _core.INT64, 8, (0, 64, 1))):
    raw = [i % 2 for i in range(4)] if dtype == _core.BOOL else list(range(4 * es))  # 4 elements, as bytes
    h = allgather(name, raw, ctypes.c_uint8, dtype, (4,))
    cap, shape = h.output(0)
    t = managed(cap).dl_tensor
    check((t.dtype.code, t.dtype.bits, t.dtype.lanes) == want, f"{name}: dtype {t.dtype.code}/{t.dtype.bits}")
    check(list((ctypes.c_uint8 * len(raw)).from_address(t.data)) == raw, f"{name}: data")
    del h, t, cap
check(live() == base, "device outputs leaked")

# a consumer (as torch does): renames the capsule, later calls the deleter once
h = allgather("dl.consumed", [7, 8], ctypes.c_int32, _core.INT32, (2,))
cap, _ = h.output(0)
m = managed(cap)
capi.PyCapsule_SetName(cap, b"used_dltensor")
del cap
check(live() == base + 1, "a consumed capsule freed the memory its consumer owns")
m.deleter(ctypes.pointer(m))
check(live() == base, "the deleter did not free the device memory")
del h

# the same handle cannot give its output twice
h = allgather("dl.twice", [1], ctypes.c_int32, _core.INT32, (1,))
cap, _ = h.output(0)
try:
    h.output(0)
    check(False, "output() twice succeeded")
except RuntimeError:
    pass
del cap, h
_core.shutdown()
check(live() == 0, f"{live()} device allocations left after shutdown")
print("gpu_dlpack: device outputs as DLPack capsules (float32, bfloat16, bool, int64), "
      "freed once by the capsule or its consumer: ok")
