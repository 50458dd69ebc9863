//! Allocators and the buffers they hand out (allocator.h, cuda_pool.h, vm.h).

use crate::callback::{guarded, PanicLog, Shell};
use crate::error::{check, invalid, Error, Result, Status};
use crate::pool::PoolParams;
use crate::stream::Stream;
use crate::{require_version, sys};
use std::fmt;
use std::mem::{self, ManuallyDrop};
use std::ops::{BitOr, BitOrAssign};
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::slice;
use std::sync::{Arc, Mutex, PoisonError};

/// An allocator: raw memory of one kind, a pool, or the caller's own functions. Cloning shares
/// it; the last handle to go destroys it, after every [`Buffer`], [`Hook`] and pool over it that
/// holds one of the handles, and after it stops being a default ([`Allocator::set_default`]
/// keeps a handle). Allocators made elsewhere and borrowed (a device's pool) are never destroyed
/// from Rust.
#[derive(Clone)]
pub struct Allocator {
    inner: Arc<Inner>,
}

type HookFn = dyn Fn(&HookInfo) + Send + Sync;

struct Inner {
    handle: NonNull<sys::gpumem_allocator_t>,
    owned: bool,
    /// False once destroy() has destroyed the handle: nothing is left for `drop` to do.
    live: bool,
    panics: Arc<PanicLog>,
    /// A pool's upstream, released only after the pool is destroyed (fields drop after `drop`).
    upstream: Option<Allocator>,
}

// SAFETY: every call made through `&Inner` (alloc, free, statistics, hooks, pool calls) is
// documented "Thread-safe: any thread, concurrently, including on the same handle."; the one
// "Per handle" call, gpumem_allocator_destroy(), is made only with the last reference (`drop`,
// `destroy`), when no other call through this crate can be running on the handle: every one
// holds a reference, a default's included (the table of `set_default` holds one). The rest is
// behind an `Arc`.
unsafe impl Send for Inner {}
// SAFETY: as for `Send`: shared references only make calls the headers declare thread-safe on the
// same handle.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        // Every Hook held this wrapper, so each has been removed, and its shell let go, already.
        if self.owned {
            // SAFETY: the last reference to a handle this crate created and nothing else destroys.
            let status = unsafe { sys::gpumem_allocator_destroy(self.handle.as_ptr()) };
            if status != sys::GPUMEM_SUCCESS {
                // Still live in the library (a thread's override or a default set through `sys`,
                // live raw allocations): what it relies on must outlive it.
                mem::forget(self.upstream.take());
            }
        }
    }
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocator")
            .field("handle", &self.inner.handle)
            .field("owned", &self.inner.owned)
            .finish()
    }
}

impl PartialEq for Allocator {
    /// The same library handle.
    fn eq(&self, other: &Allocator) -> bool {
        self.inner.handle == other.inner.handle
    }
}

impl Eq for Allocator {}

/// Flags of [`Allocator::pinned`] (`gpumem_host_alloc_flags`); combine with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct HostAllocFlags(pub u32);

impl HostAllocFlags {
    /// Pinned for every device, not only the current one.
    pub const PORTABLE: HostAllocFlags = HostAllocFlags(sys::GPUMEM_HOST_ALLOC_PORTABLE);
    /// Mapped into the device address space.
    pub const DEVICEMAP: HostAllocFlags = HostAllocFlags(sys::GPUMEM_HOST_ALLOC_DEVICEMAP);
    /// Write-combined: fast to send, slow for the host to read.
    pub const WRITECOMBINED: HostAllocFlags = HostAllocFlags(sys::GPUMEM_HOST_ALLOC_WRITECOMBINED);
}

impl BitOr for HostAllocFlags {
    type Output = HostAllocFlags;
    fn bitor(self, other: HostAllocFlags) -> HostAllocFlags {
        HostAllocFlags(self.0 | other.0)
    }
}

/// Flags of [`Allocator::managed`] (`gpumem_managed_flags`); 0 is global.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ManagedFlags(pub u32);

impl ManagedFlags {
    /// Any stream on any device may touch the memory.
    pub const ATTACH_GLOBAL: ManagedFlags = ManagedFlags(sys::GPUMEM_MANAGED_ATTACH_GLOBAL);
    /// Attached to the host until attached to a stream.
    pub const ATTACH_HOST: ManagedFlags = ManagedFlags(sys::GPUMEM_MANAGED_ATTACH_HOST);
}

/// How to build a VM allocator ([`Allocator::vm`], `gpumem_vm_params_t`); 0 means the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmParams {
    /// The device whose memory is mapped.
    pub device: i32,
    /// Bytes of addresses a pool over the allocator reserves at a time; 0 for the device's memory.
    pub range_size: u64,
    /// Bytes a pool maps at a time; 0 for 32 MiB (or the device's granularity if larger).
    pub map_unit: u64,
}

/// A tenant's budgets and figures ([`Allocator::tenant_info`], `gpumem_tenant_info_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantInfo {
    /// Its name.
    pub name: String,
    /// Hard budget in bytes; 0 for none.
    pub limit: u64,
    /// Soft budget in bytes; 0 for none.
    pub soft_limit: u64,
    /// Bytes of its live allocations.
    pub bytes_in_use: u64,
    /// The most since it was made or its peaks were reset.
    pub peak_bytes_in_use: u64,
    /// Allocations its hard budget refused.
    pub refused: u64,
    /// Times it crossed its soft budget, each giving back the pool's cache.
    pub soft_crossings: u64,
}

/// What a VM allocator holds ([`Allocator::vm_info`], `gpumem_vm_info_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VmInfo {
    /// Bytes a pool maps at a time, as in effect.
    pub map_unit: u64,
    /// Bytes of addresses a pool reserves at a time, as in effect.
    pub range_size: u64,
    /// Addresses reserved now.
    pub reserved_bytes: u64,
    /// Memory mapped now.
    pub mapped_bytes: u64,
}

/// Where a CUDA-pool allocator's pool comes from (`gpumem_cuda_pool_source`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CudaPoolSource(pub u32);

impl CudaPoolSource {
    /// The device's current pool when the allocator is made.
    pub const CURRENT: CudaPoolSource = CudaPoolSource(sys::GPUMEM_CUDA_POOL_CURRENT);
    /// The device's default pool.
    pub const DEFAULT: CudaPoolSource = CudaPoolSource(sys::GPUMEM_CUDA_POOL_DEFAULT);
    /// The caller's pool ([`CudaPoolParams::external`]).
    pub const EXTERNAL: CudaPoolSource = CudaPoolSource(sys::GPUMEM_CUDA_POOL_EXTERNAL);
    /// A new pool, owned by the allocator.
    pub const NEW: CudaPoolSource = CudaPoolSource(sys::GPUMEM_CUDA_POOL_NEW);
}

/// How to build a CUDA-pool allocator ([`Allocator::cuda_pool`], `gpumem_cuda_pool_params_t`).
#[derive(Clone, Copy, Debug)]
pub struct CudaPoolParams {
    device: i32,
    source: CudaPoolSource,
    pool: sys::gpumem_cuda_pool_t,
    max_size: u64,
    release_threshold: u64,
}

// SAFETY: `pool` is a CUDA pool handle held as a value and only passed to
// gpumem_allocator_create_cuda_pool(), which is "Thread-safe: any thread, concurrently, including
// on the same handle."
unsafe impl Send for CudaPoolParams {}
// SAFETY: as for `Send`; a shared reference only reads the fields.
unsafe impl Sync for CudaPoolParams {}

impl CudaPoolParams {
    /// A device's current pool, its release threshold left as it is.
    pub fn new(device: i32) -> CudaPoolParams {
        CudaPoolParams {
            device,
            source: CudaPoolSource::CURRENT,
            pool: ptr::null_mut(),
            max_size: 0,
            release_threshold: sys::GPUMEM_CUDA_POOL_KEEP_THRESHOLD,
        }
    }

    /// Where the pool comes from; [`CudaPoolSource::EXTERNAL`] is set by [`CudaPoolParams::external`].
    pub fn source(mut self, source: CudaPoolSource) -> CudaPoolParams {
        self.source = source;
        self
    }

    /// The caller's pool.
    ///
    /// # Safety
    /// `pool` must be a CUDA memory pool that outlives the allocator.
    pub unsafe fn external(mut self, pool: sys::gpumem_cuda_pool_t) -> CudaPoolParams {
        self.source = CudaPoolSource::EXTERNAL;
        self.pool = pool;
        self
    }

    /// With [`CudaPoolSource::NEW`]: the most bytes the pool may reserve (0: the driver's bound).
    pub fn max_size(mut self, bytes: u64) -> CudaPoolParams {
        self.max_size = bytes;
        self
    }

    /// The pool's release threshold, set at creation.
    pub fn release_threshold(mut self, bytes: u64) -> CudaPoolParams {
        self.release_threshold = bytes;
        self
    }
}

/// What a CUDA pool holds ([`Allocator::cuda_pool_info`], `gpumem_cuda_pool_info_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaPoolInfo {
    /// Bytes held from the driver, in use or cached.
    pub reserved: u64,
    /// Highest `reserved` since creation or the last reset.
    pub reserved_high: u64,
    /// Bytes of allocations not freed.
    pub used: u64,
    /// Highest `used` since creation or the last reset.
    pub used_high: u64,
    /// The release threshold in bytes.
    pub release_threshold: u64,
}

/// What another device may do with an allocator's memory (`gpumem_peer_access`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PeerAccess(pub u32);

impl PeerAccess {
    /// No direct access.
    pub const NONE: PeerAccess = PeerAccess(sys::GPUMEM_PEER_ACCESS_NONE);
    /// Kernels and copies read and write the memory directly.
    pub const READ_WRITE: PeerAccess = PeerAccess(sys::GPUMEM_PEER_ACCESS_READ_WRITE);
}

/// Statistics of an allocator (`gpumem_allocator_stats_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocatorStats {
    /// Bytes of live allocations as handed out (rounded by a pool).
    pub bytes_in_use: u64,
    /// Highest `bytes_in_use` since creation or [`Allocator::reset_peaks`].
    pub peak_bytes_in_use: u64,
    /// Bytes of live allocations as asked for.
    pub bytes_requested: u64,
    /// Bytes held from the upstream (the driver, for a raw allocator).
    pub bytes_reserved: u64,
    /// Highest `bytes_reserved` since creation or the last reset.
    pub peak_bytes_reserved: u64,
    /// Successful allocations.
    pub alloc_count: u64,
    /// Successful frees.
    pub free_count: u64,
    /// Allocations made from the upstream.
    pub upstream_alloc_count: u64,
    /// Allocations returned to the upstream.
    pub upstream_free_count: u64,
    /// Retries after releasing cached memory or running the reclaim callbacks.
    pub retry_count: u64,
    /// Allocations that failed out of memory.
    pub oom_count: u64,
}

/// Events a hook observes (`gpumem_hook_event`); combine with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct HookEvents(pub u32);

impl HookEvents {
    /// An allocation was asked for; `ptr` is 0.
    pub const MALLOC_PRE: HookEvents = HookEvents(sys::GPUMEM_HOOK_MALLOC_PRE);
    /// An allocation is returning; `status` says how it went.
    pub const MALLOC_POST: HookEvents = HookEvents(sys::GPUMEM_HOOK_MALLOC_POST);
    /// A pool is about to allocate from its upstream.
    pub const UPSTREAM_ALLOC_PRE: HookEvents = HookEvents(sys::GPUMEM_HOOK_UPSTREAM_ALLOC_PRE);
    /// A pool's upstream allocation returned.
    pub const UPSTREAM_ALLOC_POST: HookEvents = HookEvents(sys::GPUMEM_HOOK_UPSTREAM_ALLOC_POST);
    /// A free was asked for.
    pub const FREE_PRE: HookEvents = HookEvents(sys::GPUMEM_HOOK_FREE_PRE);
    /// A free is returning.
    pub const FREE_POST: HookEvents = HookEvents(sys::GPUMEM_HOOK_FREE_POST);
    /// Every event.
    pub const ALL: HookEvents = HookEvents(sys::GPUMEM_HOOK_ALL);

    /// Whether every event of `other` is in `self`.
    pub fn contains(self, other: HookEvents) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for HookEvents {
    type Output = HookEvents;
    fn bitor(self, other: HookEvents) -> HookEvents {
        HookEvents(self.0 | other.0)
    }
}

impl BitOrAssign for HookEvents {
    fn bitor_assign(&mut self, other: HookEvents) {
        self.0 |= other.0;
    }
}

/// What a hook is told (`gpumem_hook_info_t`); addresses are integers, so that it can be kept
/// and sent between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookInfo {
    /// The one event this call is for.
    pub event: HookEvents,
    /// The allocator's device, or -1 for host memory.
    pub device: i32,
    /// The allocator the event is on ([`Allocator::as_raw`] as an integer).
    pub allocator: usize,
    /// Bytes asked for.
    pub size: usize,
    /// Bytes handed out or taken back, after rounding (0 before it is known).
    pub mem_size: usize,
    /// The memory's address; 0 before it exists.
    pub ptr: usize,
    /// The stream of the call, as its handle's value ([`Stream::addr`]): a value, not a
    /// [`Stream`], since nothing says the stream is still alive when the hook keeps it.
    pub stream: usize,
    /// The outcome, in the post events; 0 in the pre events.
    pub status: i32,
}

impl HookInfo {
    fn from_raw(raw: &sys::gpumem_hook_info_t) -> HookInfo {
        HookInfo {
            event: HookEvents(raw.event),
            device: raw.device,
            allocator: raw.allocator as usize,
            size: raw.size,
            mem_size: raw.mem_size,
            ptr: raw.ptr as usize,
            stream: raw.stream as usize,
            status: raw.status,
        }
    }
}

unsafe extern "C" fn hook_trampoline(info: *const sys::gpumem_hook_info_t, user_data: *mut c_void) {
    // SAFETY: the library passes a valid info for the duration of the call.
    let info = HookInfo::from_raw(unsafe { &*info });
    // SAFETY: `user_data` is the shell of a hook the library is calling: its Hook holds it until
    // the removal returns, which is not before this call returns unless made from inside it.
    unsafe { Shell::<HookFn>::run(user_data, |hook| hook(&info)) };
}

/// Whether a hook's removal, answered `status`, leaves nothing that the library can still call:
/// removed now, or (`GPUMEM_ERROR_INVALID_HANDLE` for an id its allocator gave) removed already
/// through `sys`, or its allocator destroyed, which ends its hooks' calls.
fn hook_is_gone(status: sys::gpumem_status_t) -> bool {
    status == sys::GPUMEM_SUCCESS || status == sys::GPUMEM_ERROR_INVALID_HANDLE
}

/// A hook added by [`Allocator::add_hook`]; removed when dropped, and its closure with it. It
/// keeps its allocator alive.
#[must_use = "a Hook removes itself when dropped"]
pub struct Hook {
    allocator: Allocator,
    id: u64,
    shell: Arc<Shell<HookFn>>,
}

impl Hook {
    /// The id the library gave.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Removes the hook now, reporting a failure. The closure is dropped once the library can no
    /// longer call it: now, or from inside the hook, as that call returns; it is kept for good if
    /// the hook may still be on the allocator.
    pub fn remove(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is not dropped, so each field is read out exactly once.
        let (allocator, shell) = unsafe { (ptr::read(&this.allocator), ptr::read(&this.shell)) };
        // SAFETY: a live handle and a hook id it gave.
        let status = unsafe { sys::gpumem_allocator_remove_hook(allocator.as_raw(), this.id) };
        let result = check(status);
        if hook_is_gone(status) {
            drop(shell);
        } else {
            mem::forget(shell);
        }
        result
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        // SAFETY: a live handle and a hook id it gave.
        let status = unsafe { sys::gpumem_allocator_remove_hook(self.allocator.as_raw(), self.id) };
        if !hook_is_gone(status) {
            // Perhaps still on the allocator: its shell must outlive every call that may come.
            mem::forget(self.shell.clone());
        }
    }
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hook")
            .field("id", &self.id)
            .field("allocator", &self.allocator)
            .finish()
    }
}

/// Address ranges a pool maps memory into as it grows ([`AllocatorFunctions::ranges`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRanges {
    /// Bytes mapped at a time: a power of two, at least 512.
    pub map_unit: u64,
    /// Bytes of addresses a pool reserves at a time: a multiple of `map_unit`.
    pub range_size: u64,
}

/// The result of an [`AllocatorFunctions`] call: an error is a status alone, since the library
/// writes the detail its caller sees (naming this allocator and the status).
pub type FunctionsResult<T> = std::result::Result<T, Status>;

/// An allocator written in Rust, for [`Allocator::from_functions`] (`gpumem_allocator_functions_t`).
///
/// The library calls it from whichever thread allocates or frees, concurrently. An error gives its
/// status (a negative one; anything else becomes [`Status::INTERNAL`]) to the caller of the
/// allocation; [`Status::OUT_OF_MEMORY`] makes a pool above release cached memory and retry. A
/// panic becomes [`Status::INTERNAL`], kept for [`Allocator::take_panics`]. The functions must
/// not call gpumem: docs/thread-safety.md allows that of hooks and reclaim callbacks, not of a
/// caller's allocator functions. The object is dropped when the allocator is destroyed.
///
/// Streams are passed as their handles' values ([`Stream::addr`]): the stream is the caller's,
/// and nothing says it is still alive once the call has returned.
///
/// # Safety
/// The library and this crate's safe code use the memory as the implementation describes it, so
/// an implementation promises, as allocator.h asks of a caller's functions:
/// - [`alloc`](AllocatorFunctions::alloc) returns the start of `size` bytes that nothing else
///   uses, which stay allocated until [`free`](AllocatorFunctions::free) is called for them. For
///   `device` -1 they are host memory this process may read and write
///   ([`Buffer::write`] copies into them directly); for a device, memory gpumem's copies can reach
///   (device, managed or page-locked memory of that device).
/// - With [`ranges`](AllocatorFunctions::ranges), [`reserve`](AllocatorFunctions::reserve)
///   returns the start of `size` bytes of addresses aligned to `map_unit` that nothing else uses
///   until [`unreserve`](AllocatorFunctions::unreserve), and after a successful
///   [`map`](AllocatorFunctions::map) the part mapped is memory as above until
///   [`unmap`](AllocatorFunctions::unmap); a failed `map` maps nothing, a failed `unmap` unmaps
///   nothing.
pub unsafe trait AllocatorFunctions: Send + Sync + 'static {
    /// Allocates `size` bytes (never 0) for `device` (-1 for host memory), used on the stream
    /// whose handle is `stream`.
    fn alloc(&self, size: usize, device: i32, stream: usize) -> FunctionsResult<NonNull<c_void>>;

    /// Frees what [`alloc`](AllocatorFunctions::alloc) returned.
    ///
    /// # Safety
    /// `ptr` came from `alloc` of this object with this `size` and `device`, and is freed once.
    unsafe fn free(&self, ptr: NonNull<c_void>, size: usize, device: i32, stream: usize) -> FunctionsResult<()>;

    /// Address ranges for a pool to grow into, with the four functions below; `None` (the
    /// default) for none, when the four are never called.
    fn ranges(&self) -> Option<AddressRanges> {
        None
    }

    /// Reserves `size` bytes of addresses (a multiple of `map_unit`), aligned to `map_unit`,
    /// with nothing mapped.
    fn reserve(&self, size: usize, device: i32) -> FunctionsResult<NonNull<c_void>> {
        let _ = (size, device);
        Err(Status::NOT_SUPPORTED)
    }

    /// Releases a whole range from [`reserve`](AllocatorFunctions::reserve), with nothing mapped.
    ///
    /// # Safety
    /// `ptr` and `size` are those of one reservation, released once.
    unsafe fn unreserve(&self, ptr: NonNull<c_void>, size: usize, device: i32) -> FunctionsResult<()> {
        let _ = (ptr, size, device);
        Err(Status::NOT_SUPPORTED)
    }

    /// Maps memory into part of a range; on failure nothing may be mapped.
    ///
    /// # Safety
    /// The part lies in a reserved range, at a multiple of `map_unit`, and is not mapped.
    unsafe fn map(&self, ptr: NonNull<c_void>, size: usize, device: i32) -> FunctionsResult<()> {
        let _ = (ptr, size, device);
        Err(Status::NOT_SUPPORTED)
    }

    /// Unmaps part of a range that [`map`](AllocatorFunctions::map) mapped; on failure all of it
    /// must stay mapped.
    ///
    /// # Safety
    /// The part was mapped by `map` and nothing uses it any more.
    unsafe fn unmap(&self, ptr: NonNull<c_void>, size: usize, device: i32) -> FunctionsResult<()> {
        let _ = (ptr, size, device);
        Err(Status::NOT_SUPPORTED)
    }
}

/// Shares the object with the caller, who keeps a handle on it (to read its counters, say).
// SAFETY: every call goes to `T`, which keeps the trait's promises.
unsafe impl<T: AllocatorFunctions> AllocatorFunctions for Arc<T> {
    fn alloc(&self, size: usize, device: i32, stream: usize) -> FunctionsResult<NonNull<c_void>> {
        (**self).alloc(size, device, stream)
    }

    unsafe fn free(&self, ptr: NonNull<c_void>, size: usize, device: i32, stream: usize) -> FunctionsResult<()> {
        // SAFETY: the same contract.
        unsafe { (**self).free(ptr, size, device, stream) }
    }

    fn ranges(&self) -> Option<AddressRanges> {
        (**self).ranges()
    }

    fn reserve(&self, size: usize, device: i32) -> FunctionsResult<NonNull<c_void>> {
        (**self).reserve(size, device)
    }

    unsafe fn unreserve(&self, ptr: NonNull<c_void>, size: usize, device: i32) -> FunctionsResult<()> {
        // SAFETY: the same contract.
        unsafe { (**self).unreserve(ptr, size, device) }
    }

    unsafe fn map(&self, ptr: NonNull<c_void>, size: usize, device: i32) -> FunctionsResult<()> {
        // SAFETY: the same contract.
        unsafe { (**self).map(ptr, size, device) }
    }

    unsafe fn unmap(&self, ptr: NonNull<c_void>, size: usize, device: i32) -> FunctionsResult<()> {
        // SAFETY: the same contract.
        unsafe { (**self).unmap(ptr, size, device) }
    }
}

struct FunctionsContext {
    functions: Box<dyn AllocatorFunctions>,
    panics: Arc<PanicLog>,
}

/// The context behind a `void*` the library passes back.
///
/// # Safety
/// `context` is the `FunctionsContext` given at creation, which lives until `functions_destroy`.
unsafe fn context<'a>(context: *mut c_void) -> &'a FunctionsContext {
    // SAFETY: the caller's contract.
    unsafe { &*(context as *const FunctionsContext) }
}

/// A pointer the library passes to a function of the caller's; never NULL for what it was given.
fn non_null(ptr: *mut c_void) -> FunctionsResult<NonNull<c_void>> {
    NonNull::new(ptr).ok_or(Status::INVALID_ARGUMENT)
}

unsafe extern "C" fn functions_alloc(
    ctx: *mut c_void,
    size: usize,
    device: i32,
    stream: sys::gpumem_stream_t,
    out_ptr: *mut *mut c_void,
) -> sys::gpumem_status_t {
    // SAFETY: the library passes the context it was given.
    let ctx = unsafe { context(ctx) };
    guarded(&ctx.panics, || {
        let ptr = ctx.functions.alloc(size, device, stream as usize)?;
        // SAFETY: the library passes a valid output.
        unsafe { *out_ptr = ptr.as_ptr() };
        Ok(())
    })
}

unsafe extern "C" fn functions_free(
    ctx: *mut c_void,
    ptr: *mut c_void,
    size: usize,
    device: i32,
    stream: sys::gpumem_stream_t,
) -> sys::gpumem_status_t {
    // SAFETY: the library passes the context it was given.
    let ctx = unsafe { context(ctx) };
    guarded(&ctx.panics, || {
        let ptr = non_null(ptr)?;
        // SAFETY: the library frees only what this allocator's alloc returned, once, with its size.
        unsafe { ctx.functions.free(ptr, size, device, stream as usize) }
    })
}

unsafe extern "C" fn functions_destroy(ctx: *mut c_void) {
    // SAFETY: called once, from the allocator's destruction: the context is ours to drop.
    let ctx = unsafe { Box::from_raw(ctx as *mut FunctionsContext) };
    let panics = ctx.panics.clone();
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(ctx))) {
        panics.push(payload);
    }
}

unsafe extern "C" fn functions_reserve(
    ctx: *mut c_void,
    size: usize,
    device: i32,
    out_ptr: *mut *mut c_void,
) -> sys::gpumem_status_t {
    // SAFETY: the library passes the context it was given.
    let ctx = unsafe { context(ctx) };
    guarded(&ctx.panics, || {
        let ptr = ctx.functions.reserve(size, device)?;
        // SAFETY: the library passes a valid output.
        unsafe { *out_ptr = ptr.as_ptr() };
        Ok(())
    })
}

unsafe extern "C" fn functions_unreserve(ctx: *mut c_void, ptr: *mut c_void, size: usize, device: i32) -> i32 {
    // SAFETY: the library passes the context it was given.
    let ctx = unsafe { context(ctx) };
    guarded(&ctx.panics, || {
        let ptr = non_null(ptr)?;
        // SAFETY: the library releases only ranges this allocator reserved, once.
        unsafe { ctx.functions.unreserve(ptr, size, device) }
    })
}

unsafe extern "C" fn functions_map(ctx: *mut c_void, ptr: *mut c_void, size: usize, device: i32) -> i32 {
    // SAFETY: the library passes the context it was given.
    let ctx = unsafe { context(ctx) };
    guarded(&ctx.panics, || {
        let ptr = non_null(ptr)?;
        // SAFETY: the library maps unmapped parts of its reserved ranges.
        unsafe { ctx.functions.map(ptr, size, device) }
    })
}

unsafe extern "C" fn functions_unmap(ctx: *mut c_void, ptr: *mut c_void, size: usize, device: i32) -> i32 {
    // SAFETY: the library passes the context it was given.
    let ctx = unsafe { context(ctx) };
    guarded(&ctx.panics, || {
        let ptr = non_null(ptr)?;
        // SAFETY: the library unmaps mapped parts that no allocation uses any more.
        unsafe { ctx.functions.unmap(ptr, size, device) }
    })
}

/// The defaults set through [`Allocator::set_default`], by device: the handle each keeps, so that
/// a default is never destroyed while a call may reach it through a handle from `default_for`.
static DEFAULTS: Mutex<Vec<(i32, Allocator)>> = Mutex::new(Vec::new());

/// Runs a `gpumem_allocator_create_*` call and takes ownership of what it made.
fn create(make: impl FnOnce(*mut *mut sys::gpumem_allocator_t) -> sys::gpumem_status_t) -> Result<Allocator> {
    require_version()?;
    let mut out = ptr::null_mut();
    check(make(&mut out))?;
    Ok(Allocator::wrap(out, true, None, Arc::default()))
}

impl Allocator {
    fn wrap(
        handle: *mut sys::gpumem_allocator_t,
        owned: bool,
        upstream: Option<Allocator>,
        panics: Arc<PanicLog>,
    ) -> Allocator {
        let handle = NonNull::new(handle).expect("libgpumem returned success and a NULL allocator");
        Allocator {
            inner: Arc::new(Inner {
                handle,
                owned,
                live: true,
                panics,
                upstream,
            }),
        }
    }

    /// Plain host memory, aligned to `alignment` (a power of two from 8 to 1 MiB, or 0 for 512);
    /// needs no GPU.
    pub fn host(alignment: usize) -> Result<Allocator> {
        // SAFETY: `out` is a valid output.
        create(|out| unsafe { sys::gpumem_allocator_create_host(alignment, out) })
    }

    /// Device memory (`cuMemAlloc`); the stream is ignored.
    pub fn device(device: i32) -> Result<Allocator> {
        // SAFETY: `out` is a valid output.
        create(|out| unsafe { sys::gpumem_allocator_create_device(device, out) })
    }

    /// Stream-ordered device memory from the device's current CUDA pool (`cuMemAllocAsync`).
    pub fn device_async(device: i32) -> Result<Allocator> {
        // SAFETY: `out` is a valid output; a null CUDA pool means the device's current one.
        create(|out| unsafe { sys::gpumem_allocator_create_device_async(device, ptr::null_mut(), out) })
    }

    /// Managed memory (`cuMemAllocManaged`) owned by `device`'s context.
    pub fn managed(device: i32, flags: ManagedFlags) -> Result<Allocator> {
        // SAFETY: `out` is a valid output.
        create(|out| unsafe { sys::gpumem_allocator_create_managed(device, flags.0, out) })
    }

    /// Pinned host memory (`cuMemHostAlloc`).
    pub fn pinned(flags: HostAllocFlags) -> Result<Allocator> {
        // SAFETY: `out` is a valid output.
        create(|out| unsafe { sys::gpumem_allocator_create_pinned(flags.0, out) })
    }

    /// Device memory mapped into reserved addresses: a [`Pool`](crate::Pool) over it grows its segments in place.
    pub fn vm(params: &VmParams) -> Result<Allocator> {
        require_version()?;
        let mut raw = sized_zeroed!(sys::gpumem_vm_params_t);
        // SAFETY: a valid struct and its size.
        check(unsafe { sys::gpumem_vm_params_init(&mut raw, mem::size_of::<sys::gpumem_vm_params_t>()) })?;
        raw.device = params.device;
        raw.range_size = params.range_size;
        raw.map_unit = params.map_unit;
        // SAFETY: `raw` is initialized, `out` a valid output.
        create(|out| unsafe { sys::gpumem_allocator_create_vm(&raw, out) })
    }

    /// An allocator over a CUDA memory pool (`cuMemAllocFromPoolAsync` on each call's stream).
    pub fn cuda_pool(params: &CudaPoolParams) -> Result<Allocator> {
        require_version()?;
        let mut raw = sized_zeroed!(sys::gpumem_cuda_pool_params_t);
        // SAFETY: a valid struct and its size.
        check(unsafe {
            sys::gpumem_cuda_pool_params_init(&mut raw, mem::size_of::<sys::gpumem_cuda_pool_params_t>())
        })?;
        raw.device = params.device;
        raw.source = params.source.0;
        raw.pool = params.pool;
        raw.max_size = params.max_size;
        raw.release_threshold = params.release_threshold;
        // SAFETY: `raw` is initialized (an external pool was promised live by its setter).
        create(|out| unsafe { sys::gpumem_allocator_create_cuda_pool(&raw, out) })
    }

    /// A tenant of `upstream` (tenant.h): an allocator of its own, with budgets (0: none) and its
    /// own statistics, handing out `upstream`'s memory, which it keeps alive.
    pub fn tenant(upstream: &Allocator, name: &str, limit: u64, soft_limit: u64) -> Result<Allocator> {
        require_version()?;
        let name = std::ffi::CString::new(name).map_err(|_| Error::new(crate::Status::INVALID_ARGUMENT, "name holds a NUL byte"))?;
        let mut raw = sized_zeroed!(sys::gpumem_tenant_params_t);
        // SAFETY: a valid struct and its size.
        check(unsafe { sys::gpumem_tenant_params_init(&mut raw, mem::size_of::<sys::gpumem_tenant_params_t>()) })?;
        raw.upstream = upstream.as_raw();
        raw.limit = limit;
        raw.soft_limit = soft_limit;
        raw.name = name.as_ptr();
        let mut out = ptr::null_mut();
        // SAFETY: `raw` names a live upstream (kept below) and a name that outlives the call (copied).
        check(unsafe { sys::gpumem_tenant_create(&raw, &mut out) })?;
        Ok(Allocator::wrap(out, true, Some(upstream.clone()), Arc::default()))
    }

    /// Sets a tenant's budgets (0: none).
    pub fn set_tenant_limits(&self, limit: u64, soft_limit: u64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_tenant_set_limits(self.as_raw(), limit, soft_limit) })
    }

    /// A tenant's name, budgets and figures.
    pub fn tenant_info(&self) -> Result<TenantInfo> {
        let mut raw = sized_zeroed!(sys::gpumem_tenant_info_t);
        // SAFETY: a live handle and a valid struct with its size.
        check(unsafe { sys::gpumem_tenant_get_info(self.as_raw(), &mut raw) })?;
        // SAFETY: the library writes a NUL-terminated name within the array.
        let name = unsafe { std::ffi::CStr::from_ptr(raw.name.as_ptr()) }.to_string_lossy().into_owned();
        Ok(TenantInfo {
            name,
            limit: raw.limit,
            soft_limit: raw.soft_limit,
            bytes_in_use: raw.bytes_in_use,
            peak_bytes_in_use: raw.peak_bytes_in_use,
            refused: raw.refused,
            soft_crossings: raw.soft_crossings,
        })
    }

    /// Creates a pool handle over `upstream` (for [`Pool::new`](crate::Pool::new)).
    pub(crate) fn create_pool(upstream: &Allocator, params: &PoolParams) -> Result<Allocator> {
        require_version()?;
        let mut raw = sized_zeroed!(sys::gpumem_pool_params_t);
        // SAFETY: a valid struct and its size.
        check(unsafe { sys::gpumem_pool_params_init(&mut raw, mem::size_of::<sys::gpumem_pool_params_t>()) })?;
        raw.upstream = upstream.as_raw();
        raw.limit = params.limit;
        raw.limit_fraction = params.limit_fraction;
        let mut out = ptr::null_mut();
        // SAFETY: `raw` names a live upstream, which the pool's handle keeps below.
        check(unsafe { sys::gpumem_pool_create(&raw, &mut out) })?;
        Ok(Allocator::wrap(out, true, Some(upstream.clone()), Arc::default()))
    }

    /// An allocator whose memory comes from Rust: `functions` is called for each allocation and
    /// free, inside `catch_unwind`. `device` is the memory's device, -1 for host memory; the
    /// memory must be of that kind (see [`AllocatorFunctions`]' safety section).
    pub fn from_functions<F: AllocatorFunctions>(device: i32, functions: F) -> Result<Allocator> {
        require_version()?;
        let panics = Arc::new(PanicLog::default());
        let ranges = functions.ranges();
        let context = Box::into_raw(Box::new(FunctionsContext {
            functions: Box::new(functions),
            panics: panics.clone(),
        }));
        let mut raw = sized_zeroed!(sys::gpumem_allocator_functions_t);
        raw.context = context as *mut c_void;
        raw.device = device;
        raw.alloc = Some(functions_alloc);
        raw.free = Some(functions_free);
        raw.destroy = Some(functions_destroy);
        if let Some(ranges) = ranges {
            raw.reserve = Some(functions_reserve);
            raw.unreserve = Some(functions_unreserve);
            raw.map = Some(functions_map);
            raw.unmap = Some(functions_unmap);
            raw.map_unit = ranges.map_unit;
            raw.range_size = ranges.range_size;
        }
        let mut out = ptr::null_mut();
        // SAFETY: `raw` is complete; the context lives until functions_destroy.
        let status = unsafe { sys::gpumem_allocator_create_functions(&raw, &mut out) };
        if status != sys::GPUMEM_SUCCESS {
            let error = Error::last(status);
            // SAFETY: on failure the library keeps nothing and never destroys the context.
            drop(unsafe { Box::from_raw(context) });
            return Err(error);
        }
        Ok(Allocator::wrap(out, true, None, panics))
    }

    /// The process-wide default allocator of `device`: the allocator [`set_default`] made it,
    /// shared (it stays alive as long as this handle, whatever the default becomes), or the
    /// device's pool, borrowed, which lives as long as the process.
    /// [`Status::NOT_SUPPORTED`] if the default was set outside this crate (through
    /// [`sys`]), which cannot keep that allocator alive.
    ///
    /// [`set_default`]: Allocator::set_default
    pub fn default_for(device: i32) -> Result<Allocator> {
        require_version()?;
        // Held across the library's calls so that no set_default from Rust changes the default
        // between them.
        let defaults = DEFAULTS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, allocator)) = defaults.iter().find(|(d, _)| *d == device) {
            return Ok(allocator.clone());
        }
        let mut current = ptr::null_mut();
        // SAFETY: `current` is a valid output.
        check(unsafe { sys::gpumem_allocator_get_default(device, &mut current) })?;
        let mut pool = ptr::null_mut();
        // SAFETY: `pool` is a valid output.
        check(unsafe { sys::gpumem_pool_get_device(device, &mut pool) })?;
        if current != pool {
            return Err(Error::new(
                Status::NOT_SUPPORTED,
                format!(
                    "the default allocator of device {} ({:p}) was set outside the gpumem crate, which cannot keep \
                     it alive; borrow it with Allocator::from_raw_borrowed",
                    device, current
                ),
            ));
        }
        Ok(Allocator::wrap(pool, false, None, Arc::default()))
    }

    /// Sets the process-wide default allocator of `device`; `None` restores the device's pool.
    /// This crate keeps a handle to a default until it is replaced, so it is never destroyed
    /// while it is one; it is destroyed once replaced and its last other handle is gone. (Calls
    /// through a null allocator in [`sys`], which may have resolved to it, must be
    /// over by then.)
    pub fn set_default(device: i32, allocator: Option<&Allocator>) -> Result<()> {
        require_version()?;
        let replaced = {
            let mut defaults = DEFAULTS.lock().unwrap_or_else(PoisonError::into_inner);
            let handle = allocator.map_or(ptr::null_mut(), Allocator::as_raw);
            // SAFETY: a live handle or null.
            check(unsafe { sys::gpumem_allocator_set_default(device, handle) })?;
            let replaced = defaults
                .iter()
                .position(|(d, _)| *d == device)
                .map(|i| defaults.swap_remove(i).1);
            if let Some(allocator) = allocator {
                defaults.push((device, allocator.clone()));
            }
            replaced
        };
        // Dropped with the table unlocked: destroying it runs Rust code (its functions' drop),
        // which may set a default itself.
        drop(replaced);
        Ok(())
    }

    /// Borrows a handle made elsewhere; it is never destroyed from Rust.
    ///
    /// # Safety
    /// `handle` must be a live allocator that outlives every use of the returned one.
    pub unsafe fn from_raw_borrowed(handle: *mut sys::gpumem_allocator_t) -> Result<Allocator> {
        require_version()?;
        let handle = NonNull::new(handle as *mut c_void).ok_or_else(|| invalid("the allocator is NULL"))?;
        Ok(Allocator::wrap(
            handle.as_ptr() as *mut sys::gpumem_allocator_t,
            false,
            None,
            Arc::default(),
        ))
    }

    /// Wraps the device pool's handle (for [`Pool::device`](crate::Pool::device)).
    pub(crate) fn device_pool(device: i32) -> Result<Allocator> {
        require_version()?;
        let mut out = ptr::null_mut();
        // SAFETY: `out` is a valid output.
        check(unsafe { sys::gpumem_pool_get_device(device, &mut out) })?;
        Ok(Allocator::wrap(out, false, None, Arc::default()))
    }

    /// The library's handle, for calls this crate does not wrap; valid while this allocator lives.
    pub fn as_raw(&self) -> *mut sys::gpumem_allocator_t {
        self.inner.handle.as_ptr()
    }

    /// The upstream a pool keeps alive, if this is a pool made by this crate.
    pub fn upstream(&self) -> Option<&Allocator> {
        self.inner.upstream.as_ref()
    }

    /// Whether dropping the last handle destroys the allocator (false for borrowed ones).
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// The device the memory is on, or -1 for host memory.
    pub fn device_id(&self) -> Result<i32> {
        let mut device = 0;
        // SAFETY: a live handle and a valid output.
        check(unsafe { sys::gpumem_allocator_get_device(self.as_raw(), &mut device) })?;
        Ok(device)
    }

    /// Allocates `size` bytes for use on the default stream.
    pub fn alloc(&self, size: usize) -> Result<Buffer> {
        self.alloc_on(size, Stream::DEFAULT)
    }

    /// Allocates `size` bytes for use on `stream` (a pool keeps one arena per stream). The
    /// buffer is freed on the same stream; [`Stream::PER_THREAD`] names the per-thread stream of
    /// the thread that frees, so a buffer of it dropped on another thread is freed on that
    /// thread's stream (see [`Buffer`]).
    pub fn alloc_on(&self, size: usize, stream: Stream) -> Result<Buffer> {
        let ptr = self.alloc_raw(size, stream)?;
        Ok(Buffer {
            ptr,
            size,
            stream,
            allocator: self.clone(),
        })
    }

    /// Allocates without a [`Buffer`]: the memory is the caller's to free with
    /// [`free_raw`](Allocator::free_raw), and until then the allocator cannot be destroyed (its
    /// last handle going leaks it).
    pub fn alloc_raw(&self, size: usize, stream: Stream) -> Result<NonNull<c_void>> {
        let mut out = ptr::null_mut();
        // SAFETY: a live handle and a valid output.
        check(unsafe { sys::gpumem_alloc(self.as_raw(), size, stream.as_raw(), &mut out) })?;
        Ok(NonNull::new(out).expect("libgpumem returned success and a NULL pointer"))
    }

    /// Frees memory from [`alloc_raw`](Allocator::alloc_raw). The library refuses, with
    /// [`Status::NOT_OWNED`](crate::Status::NOT_OWNED), a pointer it did not hand out or freed
    /// already.
    ///
    /// # Safety
    /// Nothing may use the memory afterwards, and no [`Buffer`] may own it.
    pub unsafe fn free_raw(&self, ptr: *mut c_void, stream: Stream) -> Result<()> {
        // SAFETY: a live handle; the library checks the pointer is one of its live allocations.
        check(unsafe { sys::gpumem_free(self.as_raw(), ptr, stream.as_raw()) })
    }

    /// The allocator's statistics.
    pub fn stats(&self) -> Result<AllocatorStats> {
        let mut raw = sized_zeroed!(sys::gpumem_allocator_stats_t);
        // SAFETY: a live handle and a valid struct with its size.
        check(unsafe { sys::gpumem_allocator_get_stats(self.as_raw(), &mut raw) })?;
        Ok(AllocatorStats {
            bytes_in_use: raw.bytes_in_use,
            peak_bytes_in_use: raw.peak_bytes_in_use,
            bytes_requested: raw.bytes_requested,
            bytes_reserved: raw.bytes_reserved,
            peak_bytes_reserved: raw.peak_bytes_reserved,
            alloc_count: raw.alloc_count,
            free_count: raw.free_count,
            upstream_alloc_count: raw.upstream_alloc_count,
            upstream_free_count: raw.upstream_free_count,
            retry_count: raw.retry_count,
            oom_count: raw.oom_count,
        })
    }

    /// Sets the peaks of the statistics to the current values.
    pub fn reset_peaks(&self) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_allocator_reset_peaks(self.as_raw()) })
    }

    /// Calls `hook` on the given events, on the thread of each call, with no gpumem lock held;
    /// concurrently when calls are. A panic in it is caught and kept for
    /// [`take_panics`](Allocator::take_panics); the call it observes goes on.
    ///
    /// The hook may call gpumem only on another allocator, and to add or remove hooks, its own
    /// included (docs/thread-safety.md): dropping its own [`Hook`] from inside it is allowed.
    /// Dropping the [`Hook`] waits for the calls of it running on other threads, after which the
    /// library never calls it again, and drops the closure; dropped from inside the hook, the
    /// closure goes as that call returns.
    pub fn add_hook<F>(&self, events: HookEvents, hook: F) -> Result<Hook>
    where
        F: Fn(&HookInfo) + Send + Sync + 'static,
    {
        let shell: Arc<Shell<HookFn>> = Shell::new(Box::new(hook), self.inner.panics.clone());
        let mut id = 0u64;
        // SAFETY: a live handle; `shell`, then the Hook, holds the user data until the removal
        // returns (or for good, if the removal fails).
        let status = unsafe {
            sys::gpumem_allocator_add_hook(
                self.as_raw(),
                events.0,
                Some(hook_trampoline),
                Shell::user_data(&shell),
                &mut id,
            )
        };
        if status != sys::GPUMEM_SUCCESS {
            // The library kept nothing.
            return Err(Error::last(status));
        }
        Ok(Hook {
            allocator: self.clone(),
            id,
            shell,
        })
    }

    /// The messages of the panics caught so far in this allocator's Rust code (its hooks, and the
    /// functions of [`from_functions`](Allocator::from_functions)), oldest first; taken, so a
    /// second call returns only newer ones.
    pub fn take_panics(&self) -> Vec<String> {
        self.inner.panics.take()
    }

    /// Starts recording this allocator's events to a trace file (see [`crate::Trace`]).
    pub fn start_trace(&self, path: impl AsRef<std::path::Path>) -> Result<crate::Trace> {
        crate::trace::start(self, path.as_ref())
    }

    /// Destroys the allocator now, reporting a failure, where dropping the last handle would stay
    /// silent. On failure the handle comes back with the error, as from `Arc::try_unwrap`:
    /// [`Status::BUSY`] if other handles remain (clones, buffers, hooks, pools over it, its place
    /// as a default), or if the library refuses (memory from [`alloc_raw`](Allocator::alloc_raw)
    /// not freed, say); [`Status::NOT_SUPPORTED`] for a borrowed allocator, which is not this
    /// crate's to destroy.
    pub fn destroy(self) -> std::result::Result<(), (Allocator, Error)> {
        if !self.inner.owned {
            let error = Error::new(
                Status::NOT_SUPPORTED,
                "the allocator is borrowed (a device's pool, or from_raw_borrowed): it is not the gpumem crate's to \
                 destroy",
            );
            return Err((self, error));
        }
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => {
                let error = Error::new(
                    Status::BUSY,
                    format!(
                        "the allocator has {} other handles (clones, buffers, hooks, pools over it, or its place as a \
                         default)",
                        Arc::strong_count(&shared) - 1
                    ),
                );
                return Err((Allocator { inner: shared }, error));
            }
        };
        // SAFETY: the only reference to a handle this crate created.
        let status = unsafe { sys::gpumem_allocator_destroy(inner.handle.as_ptr()) };
        if status != sys::GPUMEM_SUCCESS {
            // The library changed nothing: the handle is as live as before.
            let error = Error::last(status);
            return Err((Allocator { inner: Arc::new(inner) }, error));
        }
        inner.live = false;
        Ok(())
    }

    /// A CUDA-pool allocator's pool, for calls gpumem does not wrap; it lives as long as the
    /// allocator (longer for a pool gpumem did not create).
    pub fn cuda_pool_raw(&self) -> Result<sys::gpumem_cuda_pool_t> {
        let mut pool = ptr::null_mut();
        // SAFETY: a live handle and a valid output.
        check(unsafe { sys::gpumem_cuda_pool_get(self.as_raw(), &mut pool) })?;
        Ok(pool)
    }

    /// What a CUDA-pool allocator's pool holds.
    pub fn cuda_pool_info(&self) -> Result<CudaPoolInfo> {
        let mut raw = sized_zeroed!(sys::gpumem_cuda_pool_info_t);
        // SAFETY: a live handle and a valid struct with its size.
        check(unsafe { sys::gpumem_cuda_pool_get_info(self.as_raw(), &mut raw) })?;
        Ok(CudaPoolInfo {
            reserved: raw.reserved,
            reserved_high: raw.reserved_high,
            used: raw.used,
            used_high: raw.used_high,
            release_threshold: raw.release_threshold,
        })
    }

    /// Returns a CUDA pool's unused memory until it holds about `keep_bytes`.
    pub fn cuda_pool_trim(&self, keep_bytes: u64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_cuda_pool_trim(self.as_raw(), keep_bytes) })
    }

    /// Sets a CUDA pool's release threshold.
    pub fn cuda_pool_set_release_threshold(&self, bytes: u64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_cuda_pool_set_release_threshold(self.as_raw(), bytes) })
    }

    /// Restarts a CUDA pool's high watermarks.
    pub fn cuda_pool_reset_peaks(&self) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_cuda_pool_reset_peaks(self.as_raw()) })
    }

    /// Lets `peer_device`'s kernels reach this allocator's memory, or stops them (cuda_pool.h
    /// says which kinds can).
    pub fn set_peer_access(&self, peer_device: i32, access: PeerAccess) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_allocator_set_peer_access(self.as_raw(), peer_device, access.0) })
    }

    /// What a VM allocator holds.
    pub fn vm_info(&self) -> Result<VmInfo> {
        let mut raw = sized_zeroed!(sys::gpumem_vm_info_t);
        // SAFETY: a live handle and a valid struct with its size.
        check(unsafe { sys::gpumem_vm_get_info(self.as_raw(), &mut raw) })?;
        Ok(VmInfo {
            map_unit: raw.map_unit,
            range_size: raw.range_size,
            reserved_bytes: raw.reserved_bytes,
            mapped_bytes: raw.mapped_bytes,
        })
    }
}

/// Memory from an allocator, freed when dropped (a failure then is ignored: `Drop` cannot report
/// it; [`free`](Buffer::free) does). It keeps its allocator alive.
///
/// It is freed on the stream it was allocated on. For [`Stream::PER_THREAD`] that is the
/// per-thread stream of the thread that frees it: dropped on another thread, a buffer is freed on
/// that thread's stream, which a stream-ordered allocator does not order after the allocating
/// thread's work. Synchronize the allocating thread's stream first, or allocate on a stream both
/// threads name.
pub struct Buffer {
    ptr: NonNull<c_void>,
    size: usize,
    stream: Stream,
    allocator: Allocator,
}

// SAFETY: a Buffer owns its allocation; gpumem_free() and the copies are "Thread-safe: any
// thread, concurrently, including on the same handle.", and the allocator is Send + Sync.
unsafe impl Send for Buffer {}
// SAFETY: a shared reference reads the buffer (copies out of it) or its address, never writes.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// The memory's address: a device address for device memory.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr.as_ptr()
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The stream it was allocated on, which its free uses.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// The allocator it came from.
    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// Frees the memory on the stream it was allocated on; see [`free_on`](Buffer::free_on).
    pub fn free(self) -> std::result::Result<(), (Buffer, Error)> {
        let stream = self.stream;
        self.free_on(stream)
    }

    /// Frees the memory on `stream`. On failure the library has changed nothing, and the buffer
    /// comes back with the error, still allocated (to free again, or to drop).
    pub fn free_on(self, stream: Stream) -> std::result::Result<(), (Buffer, Error)> {
        // SAFETY: a live allocation of this live allocator.
        let status = unsafe { sys::gpumem_free(self.allocator.as_raw(), self.ptr.as_ptr(), stream.as_raw()) };
        if status != sys::GPUMEM_SUCCESS {
            return Err((self, Error::last(status)));
        }
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is not dropped, so the allocator is read out, and released, exactly once.
        drop(unsafe { ptr::read(&this.allocator) });
        Ok(())
    }

    /// The bytes, for memory the host can read (host, pinned, managed memory).
    ///
    /// # Safety
    /// The memory must be readable by the host and not written meanwhile (by a device either).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller's contract; `size` bytes are allocated at `ptr`.
        unsafe { slice::from_raw_parts(self.ptr.as_ptr() as *const u8, self.size) }
    }

    /// The bytes, writable, for memory the host can write.
    ///
    /// # Safety
    /// The memory must be writable by the host and not used by a device meanwhile.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the caller's contract; `size` bytes are allocated at `ptr`.
        unsafe { slice::from_raw_parts_mut(self.ptr.as_ptr() as *mut u8, self.size) }
    }

    fn range(&self, offset: usize, len: usize) -> Result<*mut c_void> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok((self.ptr.as_ptr() as *mut u8).wrapping_add(offset) as *mut c_void),
            _ => Err(invalid(format!(
                "{} bytes at offset {} run past the end of a buffer of {} bytes",
                len, offset, self.size
            ))),
        }
    }

    /// Whether the memory is the host's (its allocator's device is -1): plain, pinned, or a Rust
    /// allocator's host memory, which the host reads and writes itself, with no driver.
    fn is_host(&self) -> Result<bool> {
        Ok(self.allocator.device_id()? == -1)
    }

    /// Copies `src` into the buffer at `offset`, whatever kind of memory the buffer is
    /// (`gpumem_copy`, synchronous; the host copies host memory itself, with no driver).
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        let dst = self.range(offset, src.len())?;
        if self.is_host()? {
            // SAFETY: the range lies in this live host allocation, which `&mut self` keeps from
            // other users and which cannot overlap the borrowed `src`.
            unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
            return Ok(());
        }
        // SAFETY: the range lies in this live allocation, which `&mut self` keeps from other users.
        check(unsafe { sys::gpumem_copy(dst, src.as_ptr() as *const c_void, src.len()) })
    }

    /// Copies bytes of the buffer from `offset` into `dst` (`gpumem_copy`, synchronous; the host
    /// copies host memory itself, with no driver).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let src = self.range(offset, dst.len())?;
        if self.is_host()? {
            // SAFETY: the range lies in this live host allocation; `dst` is exclusively borrowed,
            // so it cannot overlap it.
            unsafe { ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        // SAFETY: the range lies in this live allocation; `dst` is exclusively borrowed.
        check(unsafe { sys::gpumem_copy(dst.as_mut_ptr() as *mut c_void, src, dst.len()) })
    }

    /// Queues a copy of `src` into the buffer at `offset` on `stream` (`gpumem_copy_async`).
    ///
    /// # Safety
    /// `src` must stay alive and unchanged, and the buffer must not be freed or read, until the
    /// stream's work up to here is done (a copy from plain host memory is done on return).
    pub unsafe fn write_async(&mut self, offset: usize, src: &[u8], stream: Stream) -> Result<()> {
        let dst = self.range(offset, src.len())?;
        // SAFETY: the range lies in this live allocation; the rest is the caller's contract.
        check(unsafe { sys::gpumem_copy_async(dst, src.as_ptr() as *const c_void, src.len(), stream.as_raw()) })
    }

    /// Queues a copy of bytes of the buffer from `offset` into `dst` on `stream`.
    ///
    /// # Safety
    /// `dst` must stay alive and untouched, and the buffer alive and unwritten, until the
    /// stream's work up to here is done (a copy into plain host memory is done on return).
    pub unsafe fn read_async(&self, offset: usize, dst: &mut [u8], stream: Stream) -> Result<()> {
        let src = self.range(offset, dst.len())?;
        // SAFETY: the range lies in this live allocation; the rest is the caller's contract.
        check(unsafe { sys::gpumem_copy_async(dst.as_mut_ptr() as *mut c_void, src, dst.len(), stream.as_raw()) })
    }

    /// Sets every byte to `value` (`gpumem_memset` for device and managed memory; the host sets
    /// host memory itself).
    pub fn fill(&mut self, value: u8) -> Result<()> {
        if self.is_host()? {
            // SAFETY: the whole of this live host allocation, exclusively borrowed.
            unsafe { ptr::write_bytes(self.ptr.as_ptr() as *mut u8, value, self.size) };
            return Ok(());
        }
        // SAFETY: the whole of this live allocation, exclusively borrowed.
        check(unsafe { sys::gpumem_memset(self.ptr.as_ptr(), u32::from(value), 1, self.size) })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: a live allocation of this live allocator, freed once.
        unsafe { sys::gpumem_free(self.allocator.as_raw(), self.ptr.as_ptr(), self.stream.as_raw()) };
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .field("stream", &self.stream)
            .finish()
    }
}
