"""gpumem as PyTorch's CUDA allocator, through PyTorch's pluggable allocator and the two functions
libgpumem exports for it (gpumem_torch_alloc, gpumem_torch_free; include/gpumem/torch.h).

    import gpumem.torch
    import torch

    gpumem.torch.install()            # before PyTorch initializes CUDA
    x = torch.randn(1 << 20, device="cuda")
    gpumem.torch.pool().stats()       # device 0's default allocator: where x came from

PyTorch is imported when these functions run, never when this module is imported.

The allocator is fixed per process: PyTorch refuses to change it once CUDA is initialized, and has
no way back. Memory comes from the default allocator of each device (gpumem_allocator_get_default:
the device's pool, gpumem.device_pool, unless another was set), on PyTorch's current stream; do
not change that default while PyTorch holds memory from it, since frees go to the default of the
moment.

Sharing with other processes: PyTorch's own sharing of CUDA tensors (torch.multiprocessing) asks
the allocator for IPC handles, which a pluggable allocator cannot give. install() calls
enable_ipc(), after which torch.multiprocessing sends CUDA tensors of gpumem's memory through
gpumem.ipc instead: the handle in the pickle, its file descriptors through multiprocessing's own
passing of descriptors. The receiver needs gpumem importable; it need not call install().
"""
import ctypes
import multiprocessing.context
import multiprocessing.reduction
import multiprocessing.util
import os
import threading

from . import ipc
from ._lib import library, library_path
from .allocator import Allocator, device_pool
from .errors import Error

_lock = threading.Lock()
_installed = None  # the CUDAPluggableAllocator installed, kept alive with its library handle
_ipc_lock = threading.Lock()
_ipc_enabled = False


def _torch():
    import torch  # on use only: gpumem itself never needs PyTorch

    return torch


def install():
    """Makes gpumem PyTorch's CUDA allocator (torch.cuda.memory.change_current_allocator with a
    CUDAPluggableAllocator over this libgpumem) and returns that allocator; a second call returns
    the first one's. Call it before PyTorch initializes CUDA (a CUDA tensor, torch.cuda.init(), a
    query of the current device): after that PyTorch refuses, and this raises RuntimeError saying
    so, with PyTorch's message. It then calls enable_ipc(), so that torch.multiprocessing shares
    CUDA tensors of gpumem's memory."""
    global _installed
    with _lock:
        if _installed is None:
            torch = _torch()
            # The file this process loaded: PyTorch's dlopen() of it gets the same library, so
            # pool() sees the memory PyTorch allocates.
            allocator = torch.cuda.memory.CUDAPluggableAllocator(
                library_path(), "gpumem_torch_alloc", "gpumem_torch_free"
            )
            try:
                torch.cuda.memory.change_current_allocator(allocator)
            except RuntimeError as error:
                raise RuntimeError(
                    "gpumem.torch.install() must be called before PyTorch initializes CUDA (its first CUDA "
                    "tensor, torch.cuda.init(), torch.cuda.current_device() ...); PyTorch keeps the allocator "
                    f"it started with: {error}"
                ) from error
            _installed = allocator
    enable_ipc()
    return _installed


def installed():
    """Whether install() made gpumem PyTorch's allocator in this process."""
    return _installed is not None


def pool(device=0):
    """The allocator PyTorch's memory on `device` goes through: the device's default allocator
    (gpumem.device_pool(device) unless another was set), for stats(), and for info(), release() and
    snapshot() when it is a pool. Borrowed: Python never destroys it."""
    handle = ctypes.c_void_p()
    library().gpumem_allocator_get_default(device, ctypes.byref(handle))
    the_pool = device_pool(device)
    return the_pool if handle.value == the_pool.handle else Allocator.from_handle(handle.value)


# ---- Sharing CUDA tensors with other processes (torch.multiprocessing) ------------------------------


def enable_ipc():
    """Makes torch.multiprocessing (its queues, pipes and process arguments: whatever pickles with
    multiprocessing's ForkingPickler) send CUDA tensors of gpumem's memory through gpumem.ipc;
    PyTorch's own sharing refuses a pluggable allocator ("does not yet support shareIPcHandle").
    install() calls it; calling it again does nothing.

    It replaces PyTorch's reducer of torch.Tensor and torch.nn.Parameter (subclasses keep theirs).
    Once install() ran, a strided CUDA tensor whose storage gpumem's allocator handed out is
    exported; every other tensor (CPU ones, memory from elsewhere, for which the export fails;
    sparse, quantized, nested, named, conjugate and negative views) goes to PyTorch's reducer as
    before. Storages sent on their own, and tensors opened from another process sent on again, are
    left to PyTorch, which refuses them under a pluggable allocator.

    Sending synchronizes the tensor's device (torch.cuda.synchronize(device)), so that the writes
    of every stream are done before the receiver reads: a queue pickles on its feeder thread, whose
    current stream is not the sender's. Each send is an export of its own, for one receiver; a
    tensor pickled and never unpickled keeps its memory, once freed here, until this process exits.
    The sender may drop the tensor at once: gpumem keeps the memory until the receiver closes it.
    In the receiver the tensor holds the import, which closes (after a synchronize of its device)
    when PyTorch frees the storage."""
    global _ipc_enabled
    with _ipc_lock:
        if _ipc_enabled:
            return
        torch = _torch()
        # PyTorch registers its reducers when torch.multiprocessing is imported: that first, so that
        # ours replace them rather than the other way round.
        import torch.multiprocessing.reductions  # noqa: F401

        for cls in (torch.Tensor, torch.nn.Parameter):  # ForkingPickler looks up the exact type
            multiprocessing.reduction.ForkingPickler.register(cls, _reduce_tensor)
        _ipc_enabled = True


def _reduce_tensor(tensor):
    """ForkingPickler's reducer of torch.Tensor and torch.nn.Parameter."""
    reduced = _reduce_gpumem(tensor)
    if reduced is None:
        return _torch().multiprocessing.reductions.reduce_tensor(tensor)
    return reduced


def _shareable(torch, tensor):
    """Whether gpumem sends the tensor: a plain strided CUDA tensor, once install() ran (otherwise
    its memory is PyTorch's own, and its reducer works)."""
    return (
        _installed is not None
        and tensor.device.type == "cuda"
        and tensor.layout == torch.strided
        and not tensor.is_nested
        and not tensor.is_quantized
        and not tensor.is_conj()
        and not tensor.is_neg()
        and not tensor.has_names()
        and not (tensor.requires_grad and not tensor.is_leaf)  # PyTorch's reducer says why it refuses
    )


def _reduce_gpumem(tensor):
    """(rebuild, args) for a tensor of gpumem's memory; None for PyTorch's reducer."""
    torch = _torch()
    if not _shareable(torch, tensor):
        return None
    storage = tensor.untyped_storage()
    nbytes, device = storage.nbytes(), tensor.device.index
    view = (
        tensor.dtype,
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.storage_offset(),
        tensor.requires_grad,
        type(tensor) is torch.nn.Parameter,
    )
    if nbytes == 0:
        return (_rebuild_empty, (device, *view))
    try:
        # The storage's start is that of the allocation PyTorch asked gpumem_torch_alloc for, from
        # the device's default allocator.
        handle = ipc.export(storage.data_ptr(), pool(device))
    except Error:
        return None  # not memory of gpumem's allocator: PyTorch's reducer
    torch.cuda.synchronize(tensor.device)
    fds = handle.fds()
    # While a process starts, the descriptors of its arguments go to the child as they are, after
    # the pickling: those stay open until the starting process object goes. Otherwise DupFd keeps
    # a copy of its own, and ours are closed at once.
    spawning = multiprocessing.context.get_spawning_popen()
    try:
        passed = [multiprocessing.reduction.DupFd(fd) for fd in fds]
    finally:
        for fd in fds:
            if spawning is None:
                os.close(fd)
            else:
                multiprocessing.util.Finalize(spawning, os.close, (fd,))
    return (_rebuild_tensor, (handle.data, handle.fd_count, passed, nbytes, *view))


class _StorageBytes:
    """A storage's bytes of an open import, as a CUDA array: torch.as_tensor() keeps the object,
    and so the import, alive as long as the storage."""

    __slots__ = ("imported", "nbytes")

    def __init__(self, imported, nbytes):
        self.imported, self.nbytes = imported, nbytes

    @property
    def __cuda_array_interface__(self):
        return dict(self.imported.__cuda_array_interface__, shape=(self.nbytes,))


def _rebuild_tensor(data, fd_count, passed, nbytes, dtype, shape, stride, offset, requires_grad, parameter):
    """The receiver's half of _reduce_gpumem; the pickle names it, so gpumem must be importable."""
    torch = _torch()
    fds = []
    try:
        for dup in passed:
            fds.append(dup.detach())
        imported = ipc.open(ipc.Handle(data, fd_count), fds)
    finally:
        for fd in fds:
            os.close(fd)
    if imported.size < nbytes:
        imported.close()
        raise ValueError(f"the imported memory holds {imported.size} bytes, fewer than the storage's {nbytes}")
    # The memory's device as this process numbers it, whatever the sender's number for it was.
    device = torch.device("cuda", imported.device)
    raw = torch.as_tensor(_StorageBytes(imported, nbytes), device=device)
    return _finish(torch, raw.view(dtype).as_strided(shape, stride, offset).detach(), requires_grad, parameter)


def _rebuild_empty(device, dtype, shape, stride, offset, requires_grad, parameter):
    """A tensor of an empty storage: nothing to share."""
    torch = _torch()
    tensor = torch.empty_strided(shape, stride, dtype=dtype, device=torch.device("cuda", device))
    return _finish(torch, tensor, requires_grad, parameter)


def _finish(torch, tensor, requires_grad, parameter):
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)
