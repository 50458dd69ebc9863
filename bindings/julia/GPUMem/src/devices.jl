# Versions, status names, the driver and the devices (core.h, device.h).

"""
    version()

The version of the libgpumem that is loaded, as a `VersionNumber`.
"""
version() = version_from_number(gpumem_version_number())

"""
    status_name(status)

The name of a status, such as `"GPUMEM_ERROR_OUT_OF_MEMORY"`; unknown values give
`"GPUMEM_UNKNOWN_STATUS"`.
"""
status_name(status::Integer) = unsafe_string(gpumem_status_name(Int32(status)))

"""
    status_string(status)

A one-line message for a status, such as `"out of memory"`.
"""
status_string(status::Integer) = unsafe_string(gpumem_status_string(Int32(status)))

"""
    driver_version()

The CUDA version the loaded driver supports, as `cuDriverGetVersion` gives it (13000 for CUDA 13.0).
Throws `GPUMemError` with `GPUMEM_ERROR_NO_DRIVER` when there is no usable driver.
"""
function driver_version()
    out = Ref{Int32}(0)
    check(gpumem_driver_get_version(out))
    return Int(out[])
end

"""
    device_count()

How many CUDA devices there are. Throws `GPUMemError` with `GPUMEM_ERROR_NO_DRIVER` without a
driver, `GPUMEM_ERROR_NO_DEVICE` when the driver sees none.
"""
function device_count()
    out = Ref{Int32}(0)
    check(gpumem_device_get_count(out))
    return Int(out[])
end

"""
    has_device()

Whether there is a driver and at least one device; never throws for their absence.
"""
function has_device()
    out = Ref{Int32}(0)
    return gpumem_device_get_count(out) == GPUMEM_SUCCESS && out[] > 0
end

"""
    device_info(device = 0)

Name, memory and capabilities of a device, as a `NamedTuple`: `name`, `total_memory`,
`compute_capability` (a `VersionNumber`), and the `Bool`s `unified_addressing`, `managed_memory`,
`concurrent_managed_access`, `memory_pools`, `pageable_memory_access`, `host_register` and
`can_map_host_memory`.
"""
function device_info(device::Integer = 0)
    out = out_struct(gpumem_device_info_t)
    check(gpumem_device_get_info(device, out))
    info = out[]
    return (name = c_string(info.name), total_memory = Int(info.total_memory),
            compute_capability = VersionNumber(info.compute_capability_major, info.compute_capability_minor),
            unified_addressing = info.unified_addressing, managed_memory = info.managed_memory,
            concurrent_managed_access = info.concurrent_managed_access, memory_pools = info.memory_pools,
            pageable_memory_access = info.pageable_memory_access, host_register = info.host_register,
            can_map_host_memory = info.can_map_host_memory)
end

"""
    memory_info(device = 0)

Free and total memory of a device now, as `cuMemGetInfo` reports them: `(free = ..., total = ...)`
in bytes.
"""
function memory_info(device::Integer = 0)
    free = Ref{Csize_t}(0)
    total = Ref{Csize_t}(0)
    check(gpumem_device_query_memory(device, free, total))
    return (free = Int(free[]), total = Int(total[]))
end
