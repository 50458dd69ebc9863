"""Addresses from the Python objects the wrappers accept in place of a `void*`."""
import ctypes


class Memory:
    """An address, the bytes known to lie behind it (None if unknown), and what keeps them alive."""

    __slots__ = ("address", "size", "keep")

    def __init__(self, address, size=None, keep=None):
        self.address, self.size, self.keep = address, size, keep


class Owned:
    """What Buffer and RawBuffer share: memory that `free()` gives back, with `ptr`, `size` and
    `freed`; a with block frees it at its end, and int() is its address."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __int__(self):
        # A freed address may name another allocation by now.
        if self.freed:
            raise ValueError(f"{self!r} is freed")
        return self.ptr

    def _gpumem_memory(self):
        if self.freed:
            raise ValueError(f"{self!r} is freed")
        return Memory(self.ptr, self.size, self)


def cuda_array_interface(ptr, size, stream=None, readonly=False):
    """A 1-D uint8 CUDA array interface (version 3) over `size` bytes at `ptr`. `stream` is the
    stream a consumer must order its work after (0, the legacy stream, is written as 1, as the
    protocol spells it); None: no ordering needed."""
    return {
        "shape": (size,),
        "typestr": "|u1",
        "data": (ptr, readonly),
        "strides": None,
        "version": 3,
        "stream": None if stream is None else (stream or 1),
    }


class Unowned:
    """Device memory gpumem did not allocate, as a CUDA array that keeps its owner alive (CuPy's
    UnownedMemory): `Unowned(ptr, size, owner)` stays valid as long as `owner` does, and so does
    every array a consumer makes from it (torch.as_tensor, cupy.asarray and numba.cuda.as_cuda_array
    hold the object they read the interface from)."""

    __slots__ = ("ptr", "size", "owner", "stream")

    def __init__(self, ptr, size, owner, stream=None):
        if size < 0:
            raise ValueError(f"size is {size}; it is a number of bytes")
        self.ptr, self.size, self.owner, self.stream = int(ptr), int(size), owner, stream

    @property
    def __cuda_array_interface__(self):
        return cuda_array_interface(self.ptr, self.size, self.stream)

    def __int__(self):
        return self.ptr

    def _gpumem_memory(self):
        return Memory(self.ptr, self.size, self)

    def __repr__(self):
        return f"<gpumem.Unowned ptr={self.ptr:#x} size={self.size} owner={type(self.owner).__name__}>"


def memory(obj, writable=True):
    """A Memory for an int address, a gpumem Buffer, a ctypes object, or a contiguous buffer
    (bytearray, memoryview, array.array; bytes too where the memory is only read)."""
    if obj is None:
        return Memory(0)
    if isinstance(obj, int):
        return Memory(nonnegative("address", obj))
    if hasattr(obj, "_gpumem_memory"):
        return obj._gpumem_memory()
    if isinstance(obj, (ctypes.c_void_p, ctypes.c_char_p)):
        return Memory(ctypes.cast(obj, ctypes.c_void_p).value or 0)
    if isinstance(obj, ctypes._Pointer):
        return Memory(ctypes.cast(obj, ctypes.c_void_p).value or 0)
    if isinstance(obj, (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array)):
        return Memory(ctypes.addressof(obj), ctypes.sizeof(obj), obj)
    if isinstance(obj, bytes) and not writable:
        # c_char_p points into the bytes object itself: no copy.
        return Memory(ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, len(obj), obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{type(obj).__name__} is not memory: pass an int address, a gpumem.Buffer, a ctypes object "
            f"or a writable buffer such as a bytearray"
        ) from None
    if view.readonly:
        raise TypeError(f"{type(obj).__name__} is read-only: pass a writable buffer such as a bytearray")
    if not view.c_contiguous:
        raise TypeError("the buffer is not contiguous")
    # The ctypes array holds an export of the buffer: a bytearray cannot be resized while it lives.
    window = (ctypes.c_char * view.nbytes).from_buffer(view)
    return Memory(ctypes.addressof(window), view.nbytes, window)


def sized(name, mem, size):
    """The size of an operation on `mem`: `size` if given, else what `mem` is known to hold. A size
    larger than the known one is refused, so a Python buffer is never overrun."""
    if size is None:
        if mem.size is None:
            raise TypeError(f"{name} is a bare address: pass the size")
        return mem.size
    nonnegative("size", size)
    if mem.size is not None and size > mem.size:
        raise ValueError(f"size {size} is larger than {name}, which holds {mem.size} bytes")
    return size


def nonnegative(name, value):
    """`value`, or ValueError when it is negative: ctypes would pass it to C's unsigned size, count
    or offset as a number near 2**64."""
    if value < 0:
        raise ValueError(f"{name} is {value}; it cannot be negative")
    return value
