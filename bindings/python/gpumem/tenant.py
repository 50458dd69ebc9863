"""Tenants (tenant.h): views of a shared allocator, a device's pool most often, that are allocators
of their own, each with budgets, statistics, hooks and traces. Libraries of one process then draw
on one pool, and what one frees serves another at once, while each keeps a budget and figures.

A tenant's hard budget (`limit`) refuses what would take it past the budget, with OutOfMemory and
a detail naming the tenant; its soft budget (`soft_limit`) never refuses: crossing it makes the
upstream pool give back what it caches. Memory is freed through the tenant that allocated it; the
upstream and other tenants refuse it (NotOwned).

Budgets are bytes (0: none), as ints or as text in the syntax of GPUMEM_GPU_MEMORY_LIMIT:
"1073741824", "8GiB", "512MB", or "50%" of the device's memory.
"""
import ctypes
import dataclasses
import os
import re

from . import _ptr, _types
from ._lib import library
from .allocator import Allocator, Pool, _create, device_pool
from .device import device_info

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([-+]?\d+))?\s*([A-Za-z]*|%)\s*")
_SYNTAX = "write bytes (1073741824), a size with a unit (8GiB, 512MB) or a percentage of the device's memory (50%)"


def parse_size(value, name="size", device=None):
    """Bytes from an int, or from text such as "8GiB", "512MB" or "50%" (of `device`'s memory; a
    percentage needs a device). ValueError for what it cannot read, TypeError for other types."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{name} must be an int or a str such as '8GiB', not {type(value).__name__}")
    if isinstance(value, int):
        return _ptr.nonnegative(name, value)
    match = _SIZE.fullmatch(value)
    if match is None:
        raise ValueError(f"{name}={value!r} is not a size: {_SYNTAX}")
    number, exponent, unit = match.groups()
    if unit == "%":
        if device is None or device < 0:
            raise ValueError(f"{name}={value!r} is a percentage, which needs a device")
        share = float(number) * 10 ** int(exponent or 0)
        if not 0 < share <= 100:
            raise ValueError(f"{name}={value!r} is not a percentage in (0, 100]")
        return int(device_info(device).total_memory * share / 100)
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"{name}={value!r} has an unknown unit {unit!r}: {_SYNTAX}")
    if "." in number or exponent:
        return int(float(number) * 10 ** int(exponent or 0) * factor)
    return int(number) * factor  # exact for whole numbers of any size


def budget_from_environment(variable, device=None, default=0):
    """The budget an environment variable gives (parse_size()), or `default` where it is unset or
    empty; ValueError naming the variable for text it cannot read."""
    text = os.environ.get(variable, "").strip()
    return parse_size(text, variable, device) if text else default


def kept_tenant(tenants, key, name, device, limit, soft_limit, upstream):
    """A drop-in's tenant `name` of `device`, kept in `tenants` under `key` (the caller holds its
    lock): made on first use over upstream() with budgets `limit` and `soft_limit` (None: the
    environment's GPUMEM_<NAME>_LIMIT and GPUMEM_<NAME>_SOFT_LIMIT, else none, for a new one; as set,
    for one made already), whose budgets are then set when given."""
    found = tenants.get(key)
    if found is not None and limit is None and soft_limit is None:
        return found
    variable = f"GPUMEM_{name.upper()}_"
    if limit is None:
        limit = found.limit if found else budget_from_environment(variable + "LIMIT", device)
    if soft_limit is None:
        soft_limit = found.soft_limit if found else budget_from_environment(variable + "SOFT_LIMIT", device)
    if found is None:
        found = tenants[key] = Tenant(upstream(), device, limit, soft_limit, name=name)
    else:
        found.set_limits(limit, soft_limit)
    return found


@dataclasses.dataclass(frozen=True)
class TenantInfo:
    """A tenant's name, budgets (0: none) and figures (gpumem_tenant_info_t)."""

    name: str
    limit: int
    soft_limit: int
    bytes_in_use: int
    peak_bytes_in_use: int
    refused: int
    soft_crossings: int


class Tenant(Allocator):
    """A tenant of `upstream` (an Allocator, kept alive as long as the tenant), or with None of
    `device`'s pool (gpumem.device_pool). alloc(), free(), stats(), hooks and traces work on it as
    on any allocator; stats() count its own allocations only, as the upstream accounts them.
    `name` (cut to 31 bytes) appears in details and info()."""

    def __init__(self, upstream=None, device=0, limit=0, soft_limit=0, name="tenant"):
        lib = library()
        if upstream is not None and not isinstance(upstream, Allocator):
            raise TypeError(f"upstream must be a gpumem Allocator or None, not {type(upstream).__name__}")
        where = device if upstream is None else upstream.device_id
        params = _types.TenantParams()
        lib.gpumem_tenant_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.upstream = None if upstream is None else upstream.handle
        params.device = device
        params.limit = parse_size(limit, "limit", where)
        params.soft_limit = parse_size(soft_limit, "soft_limit", where)
        encoded = None if name is None else str(name).encode("utf-8")
        params.name = encoded  # the library copies it
        handle = _create(lib.gpumem_tenant_create, ctypes.byref(params))
        super().__init__(handle, keep=() if upstream is None else (upstream,))
        self.upstream = device_pool(device) if upstream is None else upstream
        self.name = self.info().name

    @classmethod
    def from_handle(cls, handle):
        """Borrows a tenant made elsewhere: never destroyed from Python; its upstream is not known."""
        tenant = super().from_handle(handle)
        tenant.upstream = None
        tenant.name = tenant.info().name
        return tenant

    def info(self):
        """Its name, budgets and figures now."""
        info = _types.new(_types.TenantInfo)
        library().gpumem_tenant_get_info(self.handle, ctypes.byref(info))
        values = {f.name: getattr(info, f.name) for f in dataclasses.fields(TenantInfo)}
        values["name"] = info.name.decode("utf-8", "replace")
        return TenantInfo(**values)

    def set_limits(self, limit, soft_limit=0):
        """Sets both budgets (0: none). A hard budget below what it holds refuses its next
        allocations until it frees enough; nothing it holds is taken away."""
        device = self.device_id
        limit = parse_size(limit, "limit", device)
        soft_limit = parse_size(soft_limit, "soft_limit", device)
        library().gpumem_tenant_set_limits(self.handle, limit, soft_limit)

    @property
    def limit(self):
        """The hard budget in bytes; 0 for none."""
        return self.info().limit

    @property
    def soft_limit(self):
        """The soft budget in bytes; 0 for none."""
        return self.info().soft_limit

    def record_stream(self, memory, stream):
        """As Pool.record_stream(), for memory of a tenant of a pool: once freed, it is handed out
        again only after the work queued on `stream` until the free."""
        library().gpumem_pool_record_stream(self.handle, _ptr.memory(memory, writable=False).address, stream)

    def release(self, stream=0, all_streams=True):
        """Has the upstream pool give back what it caches (Pool.release()), so that a tenant stands
        where a pool did; the cache is shared by every user of the pool. Does nothing when the
        upstream is not a pool known here."""
        if isinstance(self.upstream, Pool):
            self.upstream.release(stream, all_streams)

    def __repr__(self):
        state = "closed" if self.closed else ("borrowed" if not self.owned else "open")
        return f"<gpumem.Tenant {getattr(self, 'name', '?')!r} {self._handle:#x} {state}>"

