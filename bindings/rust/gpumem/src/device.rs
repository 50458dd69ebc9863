//! The CUDA driver and the devices (device.h).

use crate::error::{check, Result};
use crate::{fixed_str, require_version, sys};

/// The CUDA version the loaded driver supports, as `cuDriverGetVersion` gives it (13000 for 13.0).
pub fn driver_version() -> Result<i32> {
    require_version()?;
    let mut version = 0;
    // SAFETY: the output is a valid i32.
    check(unsafe { sys::gpumem_driver_get_version(&mut version) })?;
    Ok(version)
}

/// How many CUDA devices there are. [`Status::NO_DRIVER`](crate::Status::NO_DRIVER) or
/// [`Status::NO_DEVICE`](crate::Status::NO_DEVICE) when there are none to use.
pub fn device_count() -> Result<i32> {
    require_version()?;
    let mut count = 0;
    // SAFETY: the output is a valid i32.
    check(unsafe { sys::gpumem_device_get_count(&mut count) })?;
    Ok(count)
}

/// What a device is and which memory features it has (`gpumem_device_info_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// Product name.
    pub name: String,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// Compute capability, major and minor.
    pub compute_capability: (i32, i32),
    /// Shares one address space with the host.
    pub unified_addressing: bool,
    /// Can allocate managed memory.
    pub managed_memory: bool,
    /// Host and device can touch managed memory at once.
    pub concurrent_managed_access: bool,
    /// Supports stream-ordered allocation (memory pools).
    pub memory_pools: bool,
    /// Can read and write plain host memory directly.
    pub pageable_memory_access: bool,
    /// Can page-lock an existing host range.
    pub host_register: bool,
    /// Can map page-locked host memory into its address space.
    pub can_map_host_memory: bool,
}

/// Name, memory and capabilities of a device.
pub fn device_info(device: i32) -> Result<DeviceInfo> {
    require_version()?;
    let mut raw = sized_zeroed!(sys::gpumem_device_info_t);
    // SAFETY: `raw` is a valid struct with its struct_size set.
    check(unsafe { sys::gpumem_device_get_info(device, &mut raw) })?;
    Ok(DeviceInfo {
        name: fixed_str(&raw.name),
        total_memory: raw.total_memory,
        compute_capability: (raw.compute_capability_major, raw.compute_capability_minor),
        unified_addressing: raw.unified_addressing,
        managed_memory: raw.managed_memory,
        concurrent_managed_access: raw.concurrent_managed_access,
        memory_pools: raw.memory_pools,
        pageable_memory_access: raw.pageable_memory_access,
        host_register: raw.host_register,
        can_map_host_memory: raw.can_map_host_memory,
    })
}

/// Free and total memory of a device, from [`device_memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes free now.
    pub free: usize,
    /// Bytes in all.
    pub total: usize,
}

/// Free and total memory of a device now, as `cuMemGetInfo` reports them.
pub fn device_memory(device: i32) -> Result<DeviceMemory> {
    require_version()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both outputs are valid usizes.
    check(unsafe { sys::gpumem_device_query_memory(device, &mut free, &mut total) })?;
    Ok(DeviceMemory { free, total })
}
