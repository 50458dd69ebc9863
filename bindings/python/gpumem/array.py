"""CUDA arrays: the 1D, 2D and 3D formatted memory that textures and surfaces read (array.h).

An Array is copied to and from with copy2d() and copy3d() (dst_array= / src_array=, or the Array
itself as dst= / src=); x offsets and widths into an array are in bytes of whole elements.
"""
import ctypes
import dataclasses
import enum
import threading
import weakref

from . import _ptr, _types
from ._lib import call_quietly, library


class Format(enum.IntEnum):
    """Element type of one channel of an array (gpumem_format)."""

    U8 = 1
    U16 = 2
    U32 = 3
    I8 = 4
    I16 = 5
    I32 = 6
    F16 = 7
    F32 = 8


_FORMAT_BYTES = {
    Format.U8: 1,
    Format.U16: 2,
    Format.U32: 4,
    Format.I8: 1,
    Format.I16: 2,
    Format.I32: 4,
    Format.F16: 2,
    Format.F32: 4,
}


@dataclasses.dataclass(frozen=True)
class ArrayDesc:
    """Shape and element type of an array (gpumem_array_desc_t): height 0 is 1D, depth 0 is 2D."""

    device: int
    format: Format
    channels: int
    width: int
    height: int
    depth: int

    @property
    def element_size(self):
        """Bytes of one element: the format's size times the channels."""
        return _FORMAT_BYTES[Format(self.format)] * self.channels


class Array:
    """A CUDA array of `width` (and `height`, and `depth`) elements of `channels` (1, 2 or 4)
    channels of `format`, on `device`. close(), the end of a with block, or collection destroys it."""

    def __init__(self, width, height=0, depth=0, *, format=Format.F32, channels=1, device=0):
        # Before the array exists: an unknown format raises ValueError here, with nothing to undo.
        for name, value in (("width", width), ("height", height), ("depth", depth), ("channels", channels)):
            _ptr.nonnegative(name, value)
        self.shape = ArrayDesc(device, Format(format), channels, width, height, depth)
        lib = library()
        desc = _types.ArrayDesc()
        lib.gpumem_array_desc_init(ctypes.byref(desc), ctypes.sizeof(desc))
        desc.device, desc.format, desc.channels = device, int(format), channels
        desc.width, desc.height, desc.depth = width, height, depth
        out = ctypes.c_void_p()
        lib.gpumem_array_create(ctypes.byref(desc), ctypes.byref(out))
        self._handle = out.value
        self._finalizer = weakref.finalize(self, call_quietly, "gpumem_array_destroy", out.value)
        self._lock = threading.Lock()

    @property
    def handle(self):
        """The gpumem_array_t* as an int; ValueError once closed."""
        if not self._finalizer.alive:
            raise ValueError(f"{self!r} is closed")
        return self._handle

    @property
    def closed(self):
        """Whether close() destroyed the array."""
        return not self._finalizer.alive

    def close(self):
        """Destroys the array and frees its memory; closing it again does nothing."""
        with self._lock:
            if not self._finalizer.alive:
                return
            library().gpumem_array_destroy(self._handle)
            self._finalizer.detach()

    def desc(self):
        """The shape and element type as the driver reports them, an ArrayDesc."""
        desc = _types.new(_types.ArrayDesc)
        library().gpumem_array_get_desc(self.handle, ctypes.byref(desc))
        return ArrayDesc(desc.device, Format(desc.format), desc.channels, desc.width, desc.height, desc.depth)

    @property
    def element_size(self):
        """Bytes of one element."""
        return self.shape.element_size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        s = self.shape
        extent = "x".join(str(n) for n in (s.width, s.height, s.depth) if n)
        state = "closed" if self.closed else f"{self._handle:#x}"
        return f"<gpumem.Array {extent} {s.format.name}x{s.channels} device={s.device} {state}>"
