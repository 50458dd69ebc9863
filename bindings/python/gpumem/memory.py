"""Copies, memsets and what an address is (copy.h, pointer.h).

Memory arguments take an int address, a gpumem.Buffer, a ctypes object or a writable buffer
(bytearray, memoryview); a source may also be bytes. Where the size of either side is known it
bounds the operation, and it is the default size. 2D and 3D copies also take a gpumem.Array as a
side.
"""
import ctypes
import dataclasses
import enum

from . import _ptr, _types
from ._lib import library
from .array import Array

STREAM_LEGACY = 0x1  # GPUMEM_STREAM_LEGACY: the legacy default stream, named explicitly
STREAM_PER_THREAD = 0x2  # GPUMEM_STREAM_PER_THREAD: the calling thread's per-thread default stream
COPY_STAGING_LIMIT = 32 << 20  # GPUMEM_COPY_STAGING_LIMIT: most bytes of staging memory held at once


class MemoryType(enum.IntEnum):
    """Kind of memory behind an address (gpumem_memory_type)."""

    UNREGISTERED = 0
    HOST = 1
    DEVICE = 2
    MANAGED = 3


@dataclasses.dataclass(frozen=True)
class PointerInfo:
    """What the driver knows about an address (gpumem_pointer_info_t); addresses are ints."""

    memory_type: MemoryType
    device: int
    is_managed: bool
    is_pinned: bool
    host_ptr: int
    device_ptr: int
    base: int
    size: int


def _copy_size(d, s, size):
    if size is None:
        size = s.size if s.size is not None else d.size
        if size is None:
            raise TypeError("both sides are bare addresses: pass the size")
    _ptr.sized("src", s, size)
    return _ptr.sized("dst", d, size)


def copy(dst, src, size=None):
    """Copies `size` bytes (default: the size of src, else of dst) between any kinds of memory,
    synchronously."""
    d, s = _ptr.memory(dst), _ptr.memory(src, writable=False)
    library().gpumem_copy(d.address, s.address, _copy_size(d, s, size))


def copy_async(dst, src, size=None, stream=0):
    """Queues a copy as copy() does on `stream`; pageable host memory is read or written before it returns."""
    d, s = _ptr.memory(dst), _ptr.memory(src, writable=False)
    library().gpumem_copy_async(d.address, s.address, _copy_size(d, s, size), stream)


def _memset_count(d, count, element_size):
    if count is None:
        if d.size is None:
            raise TypeError("dst is a bare address: pass the count")
        count = d.size // element_size
    _ptr.nonnegative("count", count)
    _ptr.sized("dst", d, count * element_size)
    return count


def memset(dst, value, count=None, *, element_size=1):
    """Sets `count` elements of `element_size` bytes (1, 2 or 4) to `value`, synchronously;
    the count defaults to all of dst."""
    d = _ptr.memory(dst)
    library().gpumem_memset(d.address, value, element_size, _memset_count(d, count, element_size))


def memset_async(dst, value, count=None, *, element_size=1, stream=0):
    """Queues a memset as memset() does, on `stream`."""
    d = _ptr.memory(dst)
    library().gpumem_memset_async(d.address, value, element_size, _memset_count(d, count, element_size), stream)


_COPY2D_FIELDS = {name for name, _ in _types.Copy2D._fields_} - {"struct_size"}
_COPY3D_FIELDS = {name for name, _ in _types.Copy3D._fields_} - {"struct_size"}


def _array_handle(value):
    return value.handle if isinstance(value, Array) else value


def _describe(struct_type, init, known, fields):
    """The struct of a 2D or 3D copy, and what its sides' memory needs kept alive during the call.
    A side given as an Array goes to its _array field; a side whose size Python knows is checked to
    hold the whole region."""
    desc = struct_type()
    init(ctypes.byref(desc), ctypes.sizeof(desc))
    unknown = set(fields) - known
    if unknown:
        kind = "copy3d" if "depth" in known else "copy2d"
        raise TypeError(f"unknown {kind} field(s): {', '.join(sorted(unknown))}")
    fields = dict(fields)
    for side in ("dst", "src"):
        if isinstance(fields.get(side), Array):
            if fields.get(f"{side}_array") is not None:
                raise TypeError(f"{side} and {side}_array are both arrays")
            fields[f"{side}_array"] = fields.pop(side)
    keep = []
    for name, value in fields.items():
        if name.endswith("_array"):
            keep.append(value)
            value = _array_handle(value)
        elif name not in ("dst", "src"):
            _ptr.nonnegative(name, value)  # every other field is a size_t
        if name not in ("dst", "src"):
            setattr(desc, name, value)
    width, height = fields.get("width", 0), fields.get("height", 0)
    depth = fields.get("depth", 1) if "depth" in known else 1
    for side in ("dst", "src"):
        if side not in fields:
            continue
        mem = _ptr.memory(fields[side], writable=side == "dst")
        keep.append(mem)
        setattr(desc, side, mem.address)
        if mem.size is not None and width and height and depth:
            pitch = fields.get(f"{side}_pitch") or width
            rows = fields.get(f"{side}_height") or height
            last_row = (fields.get(f"{side}_z", 0) + depth - 1) * rows + fields.get(f"{side}_y", 0) + height - 1
            _ptr.sized(side, mem, last_row * pitch + fields.get(f"{side}_x", 0) + width)
    return desc, keep


def _copy2d(fields):
    return _describe(_types.Copy2D, library().gpumem_copy2d_init, _COPY2D_FIELDS, fields)


def _copy3d(fields):
    return _describe(_types.Copy3D, library().gpumem_copy3d_init, _COPY3D_FIELDS, fields)


def copy2d(**fields):
    """A 2D copy, synchronously; the keyword arguments are the fields of gpumem_copy2d_t (dst or
    dst_array, dst_x, dst_y, dst_pitch, the same for src, width in bytes, height in rows)."""
    desc, _keep = _copy2d(fields)
    library().gpumem_copy2d(ctypes.byref(desc))


def copy2d_async(*, stream=0, **fields):
    """Queues a 2D copy as copy2d() does, on `stream`."""
    desc, _keep = _copy2d(fields)
    library().gpumem_copy2d_async(ctypes.byref(desc), stream)


def copy3d(**fields):
    """A 3D copy, synchronously: `depth` slices of `height` rows of `width` bytes. The keyword
    arguments are the fields of gpumem_copy3d_t: per side (dst, src) the memory or `_array`, `_x`
    (bytes), `_y` (rows), `_z` (slices), `_pitch` (bytes per row, 0: width) and `_height` (rows
    per slice, 0: height)."""
    desc, _keep = _copy3d(fields)
    library().gpumem_copy3d(ctypes.byref(desc))


def copy3d_async(*, stream=0, **fields):
    """Queues a 3D copy as copy3d() does, on `stream`."""
    desc, _keep = _copy3d(fields)
    library().gpumem_copy3d_async(ctypes.byref(desc), stream)


def copy_staging_held():
    """Bytes of page-locked staging memory gpumem holds for copies with plain host memory."""
    out = ctypes.c_size_t()
    library().gpumem_copy_staging_get_held(ctypes.byref(out))
    return out.value


def copy_staging_release():
    """Frees the staging buffers no copy is using (those in use, when their copy ends)."""
    library().gpumem_copy_staging_release()


def pointer_info(ptr):
    """What the driver knows about an address: kind, device, mapped addresses, allocation."""
    info = _types.new(_types.PointerInfo)
    library().gpumem_pointer_get_info(_ptr.memory(ptr, writable=False).address, ctypes.byref(info))
    return PointerInfo(
        memory_type=MemoryType(info.memory_type),
        device=info.device,
        is_managed=info.is_managed,
        is_pinned=info.is_pinned,
        host_ptr=info.host_ptr or 0,
        device_ptr=info.device_ptr or 0,
        base=info.base or 0,
        size=info.size,
    )
