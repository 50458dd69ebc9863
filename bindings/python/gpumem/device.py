"""Versions, the CUDA driver and the devices (core.h, device.h)."""
import ctypes
import dataclasses

from . import _types
from ._lib import library


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """Name, memory and memory features of a device (gpumem_device_info_t)."""

    name: str
    total_memory: int
    compute_capability_major: int
    compute_capability_minor: int
    unified_addressing: bool
    managed_memory: bool
    concurrent_managed_access: bool
    memory_pools: bool
    pageable_memory_access: bool
    host_register: bool
    can_map_host_memory: bool


def version():
    """The loaded library's version, as "MAJOR.MINOR.PATCH"."""
    return library().gpumem_version_string().decode()


def version_number():
    """The loaded library's version as one number: major * 10000 + minor * 100 + patch."""
    return library().gpumem_version_number()


def status_name(status):
    """The name of a status code, such as "GPUMEM_ERROR_OUT_OF_MEMORY", as the library gives it."""
    return library().gpumem_status_name(status).decode()


def driver_version():
    """The CUDA version the driver supports, as cuDriverGetVersion gives it (13000 for CUDA 13.0)."""
    out = ctypes.c_int32()
    library().gpumem_driver_get_version(ctypes.byref(out))
    return out.value


def device_count():
    """How many CUDA devices there are; raises NoDriver or NoDevice where there are none."""
    out = ctypes.c_int32()
    library().gpumem_device_get_count(ctypes.byref(out))
    return out.value


def device_info(device):
    """Name, memory and memory features of a device."""
    info = _types.new(_types.DeviceInfo)
    library().gpumem_device_get_info(device, ctypes.byref(info))
    values = {f.name: getattr(info, f.name) for f in dataclasses.fields(DeviceInfo)}
    values["name"] = info.name.decode("utf-8", "replace")
    return DeviceInfo(**values)


def query_memory(device):
    """Free and total bytes of a device now, as a (free, total) tuple."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    library().gpumem_device_query_memory(device, ctypes.byref(free), ctypes.byref(total))
    return free.value, total.value
