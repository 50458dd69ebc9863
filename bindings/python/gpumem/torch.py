"""gpumem as PyTorch's CUDA allocator, through PyTorch's pluggable allocator and the functions
libgpumem exports for it (gpumem_torch_alloc_raising, gpumem_torch_free,
gpumem_torch_record_stream; include/gpumem/torch.h).

    import gpumem.torch
    import torch

    gpumem.torch.install()            # before PyTorch initializes CUDA
    x = torch.randn(1 << 20, device="cuda")
    gpumem.torch.memory_stats()       # PyTorch's key names, from gpumem's figures
    gpumem.torch.tenant(0).info()     # PyTorch's own share of device 0's pool

PyTorch is imported when these functions run, never when this module is imported.

The allocator is fixed per process: PyTorch refuses to change it once CUDA is initialized, and has
no way back. install() makes, for each device, a tenant named "torch" (gpumem.Tenant) of the
device's default allocator (gpumem.device_pool, unless another was set), which PyTorch's memory
comes from on PyTorch's current stream: other libraries on the same pool (gpumem.numba,
gpumem.cupy when shared) reuse what PyTorch frees, and PyTorch has budgets of its own (install()'s
arguments, or GPUMEM_TORCH_LIMIT and GPUMEM_TORCH_SOFT_LIMIT). GPUMEM_TRACE (gpumem.trace) records
each device's allocator from install() on, with Python stacks if it asks, as PyTorch's
torch.cuda.memory._record_memory_history(stacks="python") does.

What reaches PyTorch: allocations, frees and, where this PyTorch lets a pluggable allocator have
it (record_stream_supported()), Tensor.record_stream. A refused allocation raises PyTorch's own
torch.OutOfMemoryError (any other failure, RuntimeError) with gpumem's detail as its message, the
budget or limit that refused and what the pool held. PyTorch's own figures and controls
(torch.cuda.memory_stats, empty_cache, memory_summary) know nothing of a pluggable allocator: this
module's functions of the same names answer from gpumem's instead.

Sharing with other processes: PyTorch's own sharing of CUDA tensors (torch.multiprocessing) asks
the allocator for IPC handles, which a pluggable allocator cannot give. install() calls
enable_ipc(), after which torch.multiprocessing sends CUDA tensors of gpumem's memory through
gpumem.ipc instead: the handle in the pickle, its file descriptors through multiprocessing's own
passing of descriptors. The receiver needs gpumem importable; it need not call install().
"""
import ctypes
import multiprocessing.reduction
import threading

from . import ipc
from ._lib import library, library_path
from .allocator import Allocator, Pool, device_pool
from .device import device_count
from .errors import Error
from .tenant import Tenant, budget_from_environment, parse_size
from .trace import _stop_environment_trace, environment_setting, trace_from_environment

_lock = threading.Lock()
_installed = None  # the CUDAPluggableAllocator installed, kept alive with its library handle
_tenants = {}  # device -> the Tenant install() made, kept for the process (the library holds it too)
_record_stream = False  # whether PyTorch was given gpumem_torch_record_stream
_ipc_lock = threading.Lock()
_ipc_enabled = False


def _torch():
    import torch  # on use only: gpumem itself never needs PyTorch

    return torch


def install(limit=None, soft_limit=None, devices=None):
    """Makes gpumem PyTorch's CUDA allocator (torch.cuda.memory.change_current_allocator with a
    CUDAPluggableAllocator over this libgpumem) and returns that allocator; a second call returns
    the first one's, setting the budgets it is given. Call it before PyTorch initializes CUDA (a
    CUDA tensor, torch.cuda.init(), a query of the current device): after that PyTorch refuses,
    and this raises RuntimeError saying so, with PyTorch's message.

    Each device of `devices` (None: every device the process sees) gets a Tenant "torch" of its
    default allocator, with budgets `limit` and `soft_limit` (bytes, or text such as "8GiB" or
    "50%"; None: GPUMEM_TORCH_LIMIT and GPUMEM_TORCH_SOFT_LIMIT, else none). Making it makes the
    device's pool, and with it the device's primary context, which PyTorch uses too: a process
    that uses one device of several passes that one. A device left out is served by its default
    allocator, without a tenant. It then calls enable_ipc(), so that torch.multiprocessing shares
    CUDA tensors of gpumem's memory."""
    global _installed, _record_stream
    with _lock:
        if _installed is not None:
            if limit is not None or soft_limit is not None:
                for device, tenant in _tenants.items():
                    tenant.set_limits(*_budgets(device, limit, soft_limit))
        else:
            torch = _torch()
            # The file this process loaded: PyTorch's dlopen() of it gets the same library, so
            # the tenants set here are the ones PyTorch's allocations go through.
            allocator = torch.cuda.memory.CUDAPluggableAllocator(
                library_path(), "gpumem_torch_alloc_raising", "gpumem_torch_free"
            )
            native = getattr(allocator, "allocator", lambda: None)()
            set_record_stream = getattr(native, "set_record_stream_fn", None)
            hooked = callable(set_record_stream)
            if hooked:
                set_record_stream(ctypes.cast(library().gpumem_torch_record_stream, ctypes.c_void_p).value)
            made, traces = _make_tenants(devices, limit, soft_limit)
            try:
                torch.cuda.memory.change_current_allocator(allocator)
            except RuntimeError as error:
                _drop_tenants(made, traces)
                raise RuntimeError(
                    "gpumem.torch.install() must be called before PyTorch initializes CUDA (its first CUDA "
                    "tensor, torch.cuda.init(), torch.cuda.current_device() ...); PyTorch keeps the allocator "
                    f"it started with: {error}"
                ) from error
            _tenants.update(made)
            _installed, _record_stream = allocator, hooked
    enable_ipc()
    return _installed


def _budgets(device, limit, soft_limit):
    if limit is None:
        limit = budget_from_environment("GPUMEM_TORCH_LIMIT", device)
    if soft_limit is None:
        soft_limit = budget_from_environment("GPUMEM_TORCH_SOFT_LIMIT", device)
    return parse_size(limit, "limit", device), parse_size(soft_limit, "soft_limit", device)


def _make_tenants(devices, limit, soft_limit):
    """({device: Tenant}, [Trace]): each Tenant set as the allocator of gpumem_torch_alloc for its
    device, and the recordings GPUMEM_TRACE asks for of their upstreams. Nothing is left behind
    when it raises."""
    if devices is None:
        try:
            devices = range(device_count())
        except Error:  # no driver or no device: PyTorch will not allocate either
            devices = ()
    elif isinstance(devices, int):
        devices = (devices,)
    setting = environment_setting()  # read first: a wrong GPUMEM_TRACE is refused before any change
    made, traces = {}, []
    try:
        for device in devices:
            tenant = Tenant(pool(device), device, *_budgets(device, limit, soft_limit), name="torch")
            made[device] = tenant
            library().gpumem_torch_set_allocator(device, tenant.handle)
        # Last, once nothing else can fail: a recording started is a file written, which a failed
        # install() would leave behind half-made.
        for device, tenant in made.items():
            trace = trace_from_environment(tenant.upstream, device, setting)
            if trace is not None:
                traces.append(trace)
    except BaseException:
        _drop_tenants(made, traces)
        raise
    return made, traces


def _drop_tenants(made, traces=()):
    for trace in traces:
        _stop_environment_trace(trace)
    for device, tenant in made.items():
        library().gpumem_torch_set_allocator(device, None)
        tenant.close()


def installed():
    """Whether install() made gpumem PyTorch's allocator in this process."""
    return _installed is not None


def pool(device=0):
    """The device's default allocator (gpumem.device_pool(device) unless another was set): the
    upstream of PyTorch's tenant once install() ran, and where PyTorch's memory comes from
    without one. Borrowed: Python never destroys it."""
    handle = ctypes.c_void_p()
    library().gpumem_allocator_get_default(device, ctypes.byref(handle))
    the_pool = device_pool(device)
    return the_pool if handle.value == the_pool.handle else Allocator.from_handle(handle.value)


def tenant(device=0):
    """The Tenant "torch" that install() made for `device`, or None (not installed, or the device
    was left out)."""
    return _tenants.get(device)


def record_stream_supported():
    """Whether Tensor.record_stream reaches gpumem: install() gave PyTorch's pluggable allocator
    gpumem_torch_record_stream, which a PyTorch without set_record_stream_fn cannot take. Without
    it, record_stream does nothing for gpumem's memory: synchronize the other stream before the
    tensor is freed instead."""
    return _record_stream


def last_out_of_memory_detail():
    """gpumem's explanation of the last failure on the calling thread, such as why PyTorch's last
    allocation there got no memory (a tenant's budget, the device full); "" if none. PyTorch
    allocates on the thread that makes the tensor: read it there, right after the error."""
    detail = library().gpumem_last_error_detail()
    return detail.decode("utf-8", "replace") if detail else ""


# ---- PyTorch's memory figures and controls, from gpumem ---------------------------------------------


def _device(device):
    """PyTorch's device index: an int, a torch.device or "cuda:1"; None: the current device."""
    if device is None:
        torch = _torch()
        return torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    if isinstance(device, int):
        return device
    index = _torch().device(device).index
    return 0 if index is None else index


def memory_stats(device=None):
    """PyTorch's figures for a device under gpumem, with torch.cuda.memory_stats()'s key names:
    allocated and requested bytes and the allocation counts are those of PyTorch's tenant (of the
    default allocator without one); reserved bytes, device allocations and retries are those of
    the pool, which every library on it shares. "gpumem.*" keys add the tenant's budgets."""
    device = _device(device)
    mine, shared = tenant(device), pool(device)
    own = (mine or shared).stats()
    whole = shared.stats()
    stats = {
        "allocated_bytes.all.current": own.bytes_in_use,
        "allocated_bytes.all.peak": own.peak_bytes_in_use,
        "requested_bytes.all.current": own.bytes_requested,
        "reserved_bytes.all.current": whole.bytes_reserved,
        "reserved_bytes.all.peak": whole.peak_bytes_reserved,
        "active_bytes.all.current": own.bytes_in_use,
        "allocation.all.allocated": own.alloc_count,
        "allocation.all.freed": own.free_count,
        "allocation.all.current": own.alloc_count - own.free_count,
        "num_alloc_retries": whole.retry_count,
        "num_ooms": own.oom_count,
        "num_device_alloc": whole.upstream_alloc_count,
        "num_device_free": whole.upstream_free_count,
    }
    if mine is not None:
        info = mine.info()
        stats.update({
            "gpumem.limit": info.limit,
            "gpumem.soft_limit": info.soft_limit,
            "gpumem.refused": info.refused,
            "gpumem.soft_crossings": info.soft_crossings,
        })
    return stats


def memory_allocated(device=None):
    """Bytes of PyTorch's live allocations on the device (as the pool rounds them)."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    """The most bytes PyTorch held at once since install() or reset_peak_memory_stats()."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    """Bytes the device's pool holds from the device, for every library on it."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    """The most bytes the device's pool held at once."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    """Restarts the peaks from now: the tenant's, and the pool's (shared with its other users)."""
    device = _device(device)
    mine = tenant(device)
    if mine is not None:
        mine.reset_peaks()
    pool(device).reset_peaks()


def empty_cache(device=None):
    """Has the pool of the device (None: of every device install() made a tenant for, else the
    current one) give back the memory it caches, of every stream, as torch.cuda.empty_cache() does
    for PyTorch's own allocator. The cache is shared: other libraries' freed memory goes too."""
    devices = [_device(device)] if device is not None or not _tenants else sorted(_tenants)
    for index in devices:
        shared = pool(index)
        if isinstance(shared, Pool):
            shared.release(all_streams=True)


def memory_summary(device=None):
    """A short table of PyTorch's memory on the device under gpumem, in the spirit of
    torch.cuda.memory_summary()."""
    device = _device(device)
    s = memory_stats(device)

    def size(n):
        for unit in ("B", "KiB", "MiB", "GiB"):
            if n < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024

    mine = tenant(device)
    who = f"tenant {mine.name!r}" if mine is not None else "default allocator (no tenant)"
    rows = [
        ("Allocated (PyTorch)", size(s["allocated_bytes.all.current"]), size(s["allocated_bytes.all.peak"])),
        ("Requested (PyTorch)", size(s["requested_bytes.all.current"]), ""),
        ("Reserved (whole pool)", size(s["reserved_bytes.all.current"]), size(s["reserved_bytes.all.peak"])),
    ]
    lines = [
        f"gpumem memory summary, device {device}: {who}",
        f"{'':24}{'current':>14}{'peak':>14}",
        *(f"{name:24}{now:>14}{peak:>14}" for name, now, peak in rows),
        f"Allocations {s['allocation.all.allocated']:,}, frees {s['allocation.all.freed']:,}, "
        f"live {s['allocation.all.current']:,}, out of memory {s['num_ooms']:,}",
    ]
    if mine is not None:
        budget = [f"limit {size(s['gpumem.limit'])}" if s["gpumem.limit"] else "no limit"]
        budget.append(f"soft limit {size(s['gpumem.soft_limit'])}" if s["gpumem.soft_limit"] else "no soft limit")
        lines.append(f"Budget: {', '.join(budget)}; refused {s['gpumem.refused']:,}, "
                     f"soft crossings {s['gpumem.soft_crossings']:,}")
    return "\n".join(lines)

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
        # the device's tenant (its default allocator without one): the allocator its free goes to.
        handle = ipc.export(storage.data_ptr(), tenant(device) or pool(device))
    except Error:
        return None  # not memory of gpumem's allocator: PyTorch's reducer
    torch.cuda.synchronize(tensor.device)
    passed = ipc.pickled_fds(handle)
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
    imported = ipc.open_pickled(data, fd_count, passed)
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
