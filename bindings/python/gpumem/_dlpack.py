"""DLPack capsules over gpumem's memory (the `__dlpack__` protocol of the Python array API), so that
torch.from_dlpack, cupy.from_dlpack, numpy.from_dlpack and JAX take a gpumem buffer without a copy.

A capsule is a 1-D uint8 tensor of the buffer's bytes. It holds a reference to the buffer until
the consumer calls the tensor's deleter (when its own array goes), or until the capsule itself is
collected unconsumed: the memory goes back to the allocator that gave it, whoever drops it last.
"""
import ctypes

# DLDeviceType values (dlpack.h).
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
_UINT = 1  # kDLUInt


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_deleter_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _ManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _deleter_type)]


# Each live tensor's struct and shape, and what it keeps alive, by the struct's address.
_live = {}

_NAME = b"dltensor"  # the capsule's name until a consumer takes it (it renames it "used_dltensor")
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# Called from the capsule's destructor, with the capsule as a bare address: made into a Python
# object again there, it would be revived in the middle of its own deallocation.
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))


@_deleter_type
def _delete(address):
    # The consumer's call when it is done, on whichever thread drops its array (ctypes takes the GIL).
    _live.pop(address, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A capsule collected before any consumer took it still owns its tensor.
    if _is_valid(capsule, _NAME):
        _live.pop(_get_pointer(capsule, _NAME), None)


def capsule(ptr, size, device_type, device_id, owner):
    """A "dltensor" capsule of `size` bytes at `ptr` on (device_type, device_id), holding `owner`."""
    shape = (ctypes.c_int64 * 1)(size)
    managed = _ManagedTensor()
    tensor = managed.dl_tensor
    tensor.data, tensor.ndim, tensor.shape, tensor.byte_offset = ptr, 1, shape, 0
    tensor.device = _Device(device_type, device_id)
    tensor.dtype = _DataType(_UINT, 8, 1)
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    _live[address] = (managed, shape, owner)
    try:
        return _api.PyCapsule_New(address, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))
    except BaseException:
        del _live[address]
        raise


def held():
    """How many tensors this module has handed out that no consumer has let go of yet."""
    return len(_live)
