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
"""
import ctypes
import threading

from ._lib import library, library_path
from .allocator import Allocator, device_pool

_lock = threading.Lock()
_installed = None  # the CUDAPluggableAllocator installed, kept alive with its library handle


def _torch():
    import torch  # on use only: gpumem itself never needs PyTorch

    return torch


def install():
    """Makes gpumem PyTorch's CUDA allocator (torch.cuda.memory.change_current_allocator with a
    CUDAPluggableAllocator over this libgpumem) and returns that allocator; a second call returns
    the first one's. Call it before PyTorch initializes CUDA (a CUDA tensor, torch.cuda.init(), a
    query of the current device): after that PyTorch refuses, and this raises RuntimeError saying
    so, with PyTorch's message."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        torch = _torch()
        # The file this process loaded: PyTorch's dlopen() of it gets the same library, so pool()
        # sees the memory PyTorch allocates.
        allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "gpumem_torch_alloc", "gpumem_torch_free")
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as error:
            raise RuntimeError(
                "gpumem.torch.install() must be called before PyTorch initializes CUDA (its first CUDA "
                "tensor, torch.cuda.init(), torch.cuda.current_device() ...); PyTorch keeps the allocator "
                f"it started with: {error}"
            ) from error
        _installed = allocator
        return allocator


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
