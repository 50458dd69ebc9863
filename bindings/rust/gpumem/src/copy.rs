//! Copies, memsets and what an address is (copy.h, pointer.h).
//!
//! The copies take raw addresses of any kind of memory (device, managed, pinned, registered or
//! plain host) and find each side's kind themselves; they are `unsafe` because nothing can check
//! that an address is live memory of the size given. [`Buffer`](crate::Buffer)'s `read`, `write`
//! and `fill` are the safe forms for memory from an allocator.

use crate::error::{check, Result};
use crate::stream::Stream;
use crate::{require_version, sys};
use std::os::raw::c_void;
use std::ptr;

/// Copies `size` bytes from `src` to `dst` between any two kinds of memory; returns when done.
///
/// # Safety
/// `src` must be readable and `dst` writable for `size` bytes, and the ranges must not overlap.
pub unsafe fn copy(dst: *mut c_void, src: *const c_void, size: usize) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_copy(dst, src, size) })
}

/// Queues a copy as [`copy`] does on `stream`. A copy with plain host memory returns once the host
/// side has been read or written; one with pinned memory may still be running.
///
/// # Safety
/// As for [`copy`], for as long as the stream's work up to here runs.
pub unsafe fn copy_async(dst: *mut c_void, src: *const c_void, size: usize, stream: Stream) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_copy_async(dst, src, size, stream.as_raw()) })
}

/// Copies a slice to memory at `dst` (device memory, say).
///
/// # Safety
/// `dst` must be writable for `src.len()` bytes and not overlap `src`.
pub unsafe fn copy_from_slice(dst: *mut c_void, src: &[u8]) -> Result<()> {
    require_version()?;
    // SAFETY: `src` is readable for its length; the rest is the caller's contract.
    check(unsafe { sys::gpumem_copy(dst, src.as_ptr() as *const c_void, src.len()) })
}

/// Copies memory at `src` (device memory, say) into a slice.
///
/// # Safety
/// `src` must be readable for `dst.len()` bytes and not overlap `dst`.
pub unsafe fn copy_to_slice(dst: &mut [u8], src: *const c_void) -> Result<()> {
    require_version()?;
    // SAFETY: `dst` is writable for its length; the rest is the caller's contract.
    check(unsafe { sys::gpumem_copy(dst.as_mut_ptr() as *mut c_void, src, dst.len()) })
}

/// Queues a copy of a slice to memory at `dst` on `stream`.
///
/// # Safety
/// As for [`copy_from_slice`]; besides, `src` must stay alive and unchanged until the stream's
/// work up to here is done (a copy from plain host memory is done on return).
pub unsafe fn copy_from_slice_async(dst: *mut c_void, src: &[u8], stream: Stream) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_copy_async(dst, src.as_ptr() as *const c_void, src.len(), stream.as_raw()) })
}

/// Queues a copy of memory at `src` into a slice on `stream`.
///
/// # Safety
/// As for [`copy_to_slice`]; besides, `dst` must stay alive and untouched until the stream's work
/// up to here is done (a copy into plain host memory is done on return).
pub unsafe fn copy_to_slice_async(dst: &mut [u8], src: *const c_void, stream: Stream) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_copy_async(dst.as_mut_ptr() as *mut c_void, src, dst.len(), stream.as_raw()) })
}

/// Sets `count` elements of `element_size` bytes (1, 2 or 4) at `dst` to `value`; returns when
/// done. Device, managed or mapped pinned memory only.
///
/// # Safety
/// `dst` must be writable for `count * element_size` bytes.
pub unsafe fn memset(dst: *mut c_void, value: u32, element_size: u32, count: usize) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_memset(dst, value, element_size, count) })
}

/// Queues a memset as [`memset`] does on `stream`.
///
/// # Safety
/// As for [`memset`], for as long as the stream's work up to here runs.
pub unsafe fn memset_async(
    dst: *mut c_void,
    value: u32,
    element_size: u32,
    count: usize,
    stream: Stream,
) -> Result<()> {
    require_version()?;
    // SAFETY: the caller's contract.
    check(unsafe { sys::gpumem_memset_async(dst, value, element_size, count, stream.as_raw()) })
}

/// A 2D copy between pitched memory of any kinds (`gpumem_copy2d_t`): `height` rows of `width`
/// bytes, each side starting `x` bytes into its row `y`. Build it, then [`run`](Copy2d::run).
#[derive(Clone, Copy, Debug)]
pub struct Copy2d {
    raw: sys::gpumem_copy2d_t,
}

impl Copy2d {
    /// A copy of `height` rows of `width` bytes, with no sides yet.
    pub fn new(width: usize, height: usize) -> Copy2d {
        let mut raw = sized_zeroed!(sys::gpumem_copy2d_t);
        raw.width = width;
        raw.height = height;
        Copy2d { raw }
    }

    /// The destination: memory at `ptr` with `pitch` bytes from row to row (0 means `width`).
    pub fn dst(mut self, ptr: *mut c_void, pitch: usize) -> Copy2d {
        self.raw.dst = ptr;
        self.raw.dst_array = ptr::null_mut();
        self.raw.dst_pitch = pitch;
        self
    }

    /// Where the region starts in the destination: `x` bytes into row `y`.
    pub fn dst_at(mut self, x: usize, y: usize) -> Copy2d {
        self.raw.dst_x = x;
        self.raw.dst_y = y;
        self
    }

    /// The source: memory at `ptr` with `pitch` bytes from row to row (0 means `width`).
    pub fn src(mut self, ptr: *const c_void, pitch: usize) -> Copy2d {
        self.raw.src = ptr;
        self.raw.src_array = ptr::null();
        self.raw.src_pitch = pitch;
        self
    }

    /// Where the region starts in the source: `x` bytes into row `y`.
    pub fn src_at(mut self, x: usize, y: usize) -> Copy2d {
        self.raw.src_x = x;
        self.raw.src_y = y;
        self
    }

    /// The description as the library reads it.
    pub fn as_raw(&self) -> &sys::gpumem_copy2d_t {
        &self.raw
    }

    /// Copies, returning when done. Nothing is written unless the whole copy is valid.
    ///
    /// # Safety
    /// Each side's rows must be live memory of the reach the description gives.
    pub unsafe fn run(&self) -> Result<()> {
        require_version()?;
        // SAFETY: a complete description; the memory is the caller's contract.
        check(unsafe { sys::gpumem_copy2d(&self.raw) })
    }

    /// Queues the copy on `stream`.
    ///
    /// # Safety
    /// As for [`run`](Copy2d::run), for as long as the stream's work up to here runs.
    pub unsafe fn run_async(&self, stream: Stream) -> Result<()> {
        require_version()?;
        // SAFETY: a complete description, read before the call returns.
        check(unsafe { sys::gpumem_copy2d_async(&self.raw, stream.as_raw()) })
    }
}

/// Bytes of page-locked staging memory gpumem holds for copies with plain host memory.
pub fn copy_staging_held() -> Result<usize> {
    require_version()?;
    let mut bytes = 0;
    // SAFETY: a valid output.
    check(unsafe { sys::gpumem_copy_staging_get_held(&mut bytes) })?;
    Ok(bytes)
}

/// Frees the staging buffers no copy is using.
pub fn copy_staging_release() -> Result<()> {
    require_version()?;
    // SAFETY: no arguments.
    check(unsafe { sys::gpumem_copy_staging_release() })
}

/// Kind of memory behind an address (`gpumem_memory_type`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MemoryType(pub i32);

impl MemoryType {
    /// Plain host memory the driver does not know.
    pub const UNREGISTERED: MemoryType = MemoryType(sys::GPUMEM_MEMORY_UNREGISTERED);
    /// Page-locked host memory: pinned or registered.
    pub const HOST: MemoryType = MemoryType(sys::GPUMEM_MEMORY_HOST);
    /// Device memory.
    pub const DEVICE: MemoryType = MemoryType(sys::GPUMEM_MEMORY_DEVICE);
    /// Managed (unified) memory.
    pub const MANAGED: MemoryType = MemoryType(sys::GPUMEM_MEMORY_MANAGED);
}

/// What the driver knows about an address (`gpumem_pointer_info_t`); addresses as integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PointerInfo {
    /// The kind of memory.
    pub memory_type: MemoryType,
    /// Device of the allocation or registration; -1 for plain host memory.
    pub device: i32,
    /// Managed memory.
    pub is_managed: bool,
    /// Page-locked host memory.
    pub is_pinned: bool,
    /// The address as the host reaches it; 0 if it cannot.
    pub host_ptr: usize,
    /// The address as the device reaches it; 0 if it cannot.
    pub device_ptr: usize,
    /// Start of the allocation or registered range; 0 for plain host memory.
    pub base: usize,
    /// Size of that allocation or range; 0 for plain host memory.
    pub size: usize,
}

/// Describes any address, inside an allocation or at its start (`cuPointerGetAttributes`).
// Safe: the address is looked up in the driver's tables, never read or written.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn pointer_info(ptr: *const c_void) -> Result<PointerInfo> {
    require_version()?;
    let mut raw = sized_zeroed!(sys::gpumem_pointer_info_t);
    // SAFETY: the address is only looked up, never dereferenced; `raw` is a valid struct.
    check(unsafe { sys::gpumem_pointer_get_info(ptr, &mut raw) })?;
    Ok(PointerInfo {
        memory_type: MemoryType(raw.memory_type),
        device: raw.device,
        is_managed: raw.is_managed,
        is_pinned: raw.is_pinned,
        host_ptr: raw.host_ptr as usize,
        device_ptr: raw.device_ptr as usize,
        base: raw.base as usize,
        size: raw.size,
    })
}
