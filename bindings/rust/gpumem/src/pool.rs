//! The caching pool (pool.h).

use crate::allocator::{Allocator, Buffer};
use crate::callback::{PanicLog, Shell};
use crate::error::{check, invalid, Error, Result};
use crate::stream::Stream;
use crate::{require_version, sys};
use std::any::Any;
use std::ffi::CString;
use std::ops::Deref;
use std::os::raw::c_void;
use std::os::unix::ffi::OsStrExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

/// How to build a pool ([`Pool::new`]); by default no limit (or `GPUMEM_GPU_MEMORY_LIMIT`'s, for
/// pools over device memory).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolParams {
    pub(crate) limit: u64,
    pub(crate) limit_fraction: f64,
}

impl PoolParams {
    /// No limit.
    pub fn new() -> PoolParams {
        PoolParams::default()
    }

    /// The most bytes the pool may hold from its upstream; 0 for none.
    pub fn limit(mut self, bytes: u64) -> PoolParams {
        self.limit = bytes;
        self
    }

    /// The limit as a fraction in (0, 1] of the device's memory (not with [`PoolParams::limit`]).
    pub fn limit_fraction(mut self, fraction: f64) -> PoolParams {
        self.limit_fraction = fraction;
        self
    }
}

/// What a pool holds ([`Pool::info`], `gpumem_pool_info_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolInfo {
    /// Bytes handed out and not freed (rounded sizes).
    pub used_bytes: u64,
    /// Bytes cached, free for reuse.
    pub free_bytes: u64,
    /// Bytes held from the upstream: used plus free plus pending.
    pub total_bytes: u64,
    /// Free blocks in all arenas.
    pub free_block_count: u64,
    /// The limit in bytes; 0 for none.
    pub limit: u64,
    /// Streams with an arena.
    pub arena_count: u32,
    /// Bytes freed while other streams' work may still use them.
    pub pending_bytes: u64,
    /// Bytes of addresses the pool's segments span.
    pub address_bytes: u64,
}

/// States of a pool's blocks in a snapshot (`gpumem_block_state`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BlockState(pub u32);

impl BlockState {
    /// Cached, free for reuse.
    pub const FREE: BlockState = BlockState(sys::GPUMEM_BLOCK_FREE);
    /// Handed out and not freed.
    pub const IN_USE: BlockState = BlockState(sys::GPUMEM_BLOCK_IN_USE);
    /// Freed, waiting for other streams' work before reuse.
    pub const PENDING: BlockState = BlockState(sys::GPUMEM_BLOCK_PENDING);
    /// Addresses of a segment with no memory mapped.
    pub const UNMAPPED: BlockState = BlockState(sys::GPUMEM_BLOCK_UNMAPPED);
}

/// One block of a pool ([`Pool::snapshot`], `gpumem_block_info_t`); addresses as integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockInfo {
    /// The upstream block (segment) it lies in.
    pub segment: usize,
    /// That segment's bytes.
    pub segment_size: usize,
    /// The block's address.
    pub address: usize,
    /// Its bytes, rounded.
    pub size: usize,
    /// Bytes asked for, for a block in use; else 0.
    pub requested: usize,
    /// Its state.
    pub state: BlockState,
    /// The stream it was handed out on (in use), or of its arena, as its handle's value
    /// ([`Stream::addr`]): a value, not a [`Stream`], since nothing says the stream is still alive.
    pub stream: usize,
}

/// Whether a pool lends one stream's free memory to another (`gpumem_stream_reuse`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct StreamReuse(pub i32);

impl StreamReuse {
    /// Never: each stream keeps its memory.
    pub const NEVER: StreamReuse = StreamReuse(sys::GPUMEM_STREAM_REUSE_NEVER);
    /// The allocating stream waits on an event of the lending stream (the default).
    pub const FENCE: StreamReuse = StreamReuse(sys::GPUMEM_STREAM_REUSE_FENCE);
    /// The host waits for that event before the memory is handed out.
    pub const HOST_WAIT: StreamReuse = StreamReuse(sys::GPUMEM_STREAM_REUSE_HOST_WAIT);
}

/// A caching pool over an upstream allocator, which it keeps alive. It is an [`Allocator`] (by
/// `Deref`): allocate, hook and read statistics through it as through any other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    allocator: Allocator,
}

impl Deref for Pool {
    type Target = Allocator;
    fn deref(&self) -> &Allocator {
        &self.allocator
    }
}

impl From<Pool> for Allocator {
    fn from(pool: Pool) -> Allocator {
        pool.allocator
    }
}

impl TryFrom<Allocator> for Pool {
    type Error = Error;

    /// The allocator as a pool, if it is one ([`Status::INVALID_HANDLE`](crate::Status::INVALID_HANDLE)
    /// if not): an allocator from [`Allocator::default_for`], say.
    fn try_from(allocator: Allocator) -> Result<Pool> {
        let pool = Pool { allocator };
        pool.info()?;
        Ok(pool)
    }
}

/// The blocks of a gpumem_pool_snapshot() call as they come.
struct Snapshot {
    blocks: Vec<BlockInfo>,
    /// Growing the list panics only past `isize::MAX` bytes; it must not unwind into C all the same.
    panic: Option<Box<dyn Any + Send>>,
}

unsafe extern "C" fn snapshot_block(block: *const sys::gpumem_block_info_t, user_data: *mut c_void) {
    // SAFETY: `user_data` is the Snapshot of the gpumem_pool_snapshot() call that runs this.
    let snapshot = unsafe { &mut *(user_data as *mut Snapshot) };
    if snapshot.panic.is_some() {
        return;
    }
    // SAFETY: the library passes a valid block for the duration of the call.
    let raw = unsafe { &*block };
    let blocks = &mut snapshot.blocks;
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        blocks.push(BlockInfo {
            segment: raw.segment as usize,
            segment_size: raw.segment_size,
            address: raw.address as usize,
            size: raw.size,
            requested: raw.requested,
            state: BlockState(raw.state),
            stream: raw.stream as usize,
        })
    }));
    if let Err(payload) = result {
        snapshot.panic = Some(payload);
    }
}

impl Pool {
    /// A pool over `upstream`, with `params`' limit. Its device is the upstream's.
    pub fn new(upstream: &Allocator, params: &PoolParams) -> Result<Pool> {
        Ok(Pool {
            allocator: Allocator::create_pool(upstream, params)?,
        })
    }

    /// The pool of a device (created on first use, the device's default allocator until another
    /// is set); borrowed: it lives as long as the process, and [`Pool::destroy`] refuses it.
    pub fn device(device: i32) -> Result<Pool> {
        Ok(Pool {
            allocator: Allocator::device_pool(device)?,
        })
    }

    /// The pool as an allocator.
    pub fn as_allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// Destroys the pool now, reporting a failure; see [`Allocator::destroy`]. A device's pool
    /// ([`Pool::device`]) lives as long as the process: [`Status::NOT_SUPPORTED`](crate::Status::NOT_SUPPORTED).
    pub fn destroy(self) -> std::result::Result<(), (Pool, Error)> {
        self.allocator
            .destroy()
            .map_err(|(allocator, error)| (Pool { allocator }, error))
    }

    /// What the pool holds now.
    pub fn info(&self) -> Result<PoolInfo> {
        let mut raw = sized_zeroed!(sys::gpumem_pool_info_t);
        // SAFETY: a live handle and a valid struct with its size.
        check(unsafe { sys::gpumem_pool_get_info(self.as_raw(), &mut raw) })?;
        Ok(PoolInfo {
            used_bytes: raw.used_bytes,
            free_bytes: raw.free_bytes,
            total_bytes: raw.total_bytes,
            free_block_count: raw.free_block_count,
            limit: raw.limit,
            arena_count: raw.arena_count,
            pending_bytes: raw.pending_bytes,
            address_bytes: raw.address_bytes,
        })
    }

    /// Returns the cached whole blocks of every arena to the upstream.
    pub fn release_all(&self) -> Result<()> {
        // SAFETY: a live handle; the stream is ignored with ALL_STREAMS.
        check(unsafe {
            sys::gpumem_pool_release(
                self.as_raw(),
                Stream::DEFAULT.as_raw(),
                sys::GPUMEM_POOL_RELEASE_ALL_STREAMS,
            )
        })
    }

    /// Returns the cached whole blocks of `stream`'s arena to the upstream.
    pub fn release_stream(&self, stream: Stream) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_pool_release(self.as_raw(), stream.as_raw(), 0) })
    }

    /// The limit in bytes; 0 for none.
    pub fn limit(&self) -> Result<u64> {
        Ok(self.info()?.limit)
    }

    /// Sets the limit in bytes (0 for none); below what the pool holds is allowed.
    pub fn set_limit(&self, bytes: u64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_pool_set_limit(self.as_raw(), bytes) })
    }

    /// Before the pool grows past `bytes` (0: none) it gives back what it caches; never refuses.
    pub fn set_soft_limit(&self, bytes: u64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_pool_set_soft_limit(self.as_raw(), bytes) })
    }

    /// Sets the limit as a fraction in (0, 1] of the device's memory.
    pub fn set_limit_fraction(&self, fraction: f64) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_pool_set_limit_fraction(self.as_raw(), fraction) })
    }

    /// Sets whether the pool lends free memory across streams.
    pub fn set_stream_reuse(&self, reuse: StreamReuse) -> Result<()> {
        // SAFETY: a live handle.
        check(unsafe { sys::gpumem_pool_set_stream_reuse(self.as_raw(), reuse.0) })
    }

    /// Marks a buffer of this pool as used on `stream` too: once freed, it is handed out again
    /// only after the work queued on `stream` until the free is done.
    pub fn record_stream(&self, buffer: &Buffer, stream: Stream) -> Result<()> {
        // SAFETY: a live handle; the library checks the pointer is one of its live allocations.
        check(unsafe { sys::gpumem_pool_record_stream(self.as_raw(), buffer.as_ptr(), stream.as_raw()) })
    }

    /// Every block the pool holds, in order of segment and address, as one consistent picture.
    pub fn snapshot(&self) -> Result<Vec<BlockInfo>> {
        let mut snapshot = Snapshot {
            blocks: Vec::new(),
            panic: None,
        };
        // SAFETY: a live handle; `snapshot` outlives the call, which runs snapshot_block only during it.
        let status = unsafe {
            sys::gpumem_pool_snapshot(
                self.as_raw(),
                Some(snapshot_block),
                &mut snapshot as *mut Snapshot as *mut c_void,
            )
        };
        if let Some(payload) = snapshot.panic {
            // Caught in C's frame, raised again in Rust's.
            panic::resume_unwind(payload);
        }
        check(status)?;
        Ok(snapshot.blocks)
    }

    /// Writes the pool's snapshot as JSON to a file (docs/pool.md gives the shape).
    pub fn snapshot_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: a live handle and a NUL-terminated path.
        check(unsafe { sys::gpumem_pool_snapshot_json(self.as_raw(), path.as_ptr()) })
    }
}

/// A path as the library takes it.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| invalid(format!("the path {:?} has a NUL byte", path)))
}

type ReclaimFn = dyn Fn(i32, usize) + Send + Sync;

unsafe extern "C" fn reclaim_trampoline(device: i32, size: usize, user_data: *mut c_void) {
    // SAFETY: `user_data` is the shell of a callback the library is calling: its Reclaim holds it
    // until the removal returns, which is not before this call returns unless made from inside it.
    unsafe { Shell::<ReclaimFn>::run(user_data, |callback| callback(device, size)) };
}

/// Whether a reclaim callback's removal, answered `status`, leaves nothing that the library can
/// still call: removed now, or (`GPUMEM_ERROR_INVALID_HANDLE` for an id it gave) removed already
/// through `sys`.
fn reclaim_is_gone(status: sys::gpumem_status_t) -> bool {
    status == sys::GPUMEM_SUCCESS || status == sys::GPUMEM_ERROR_INVALID_HANDLE
}

/// A reclaim callback added by [`add_reclaim`]; removed when dropped, and its closure with it.
#[must_use = "a Reclaim removes itself when dropped"]
pub struct Reclaim {
    id: u64,
    shell: Arc<Shell<ReclaimFn>>,
}

impl Reclaim {
    /// Removes the callback now, reporting a failure. The closure is dropped once the library can
    /// no longer call it: now, or from inside the callback, as that call returns; it is kept for
    /// good if the callback may still be registered.
    pub fn remove(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is not dropped, so the shell is read out exactly once.
        let shell = unsafe { std::ptr::read(&this.shell) };
        // SAFETY: an id the library gave.
        let status = unsafe { sys::gpumem_reclaim_remove(this.id) };
        let result = check(status);
        if reclaim_is_gone(status) {
            drop(shell);
        } else {
            std::mem::forget(shell);
        }
        result
    }

    /// The messages of the panics caught in the callback so far; taken.
    pub fn take_panics(&self) -> Vec<String> {
        self.shell.panics().take()
    }
}

impl Drop for Reclaim {
    fn drop(&mut self) {
        // SAFETY: an id the library gave.
        if !reclaim_is_gone(unsafe { sys::gpumem_reclaim_remove(self.id) }) {
            // Perhaps still registered: its shell must outlive every call that may come.
            std::mem::forget(self.shell.clone());
        }
    }
}

impl std::fmt::Debug for Reclaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reclaim").field("id", &self.id).finish()
    }
}

/// Registers a callback every pool runs when it is out of memory, before its last retry, on the
/// allocating thread with no gpumem lock held: `callback(device, size)` may free memory (drop
/// buffers it can reach), and may call gpumem. A panic in it is caught and kept
/// ([`Reclaim::take_panics`]).
///
/// Dropping the [`Reclaim`] removes it: that waits for its calls running on other threads, after
/// which no pool calls it again, and drops the closure; dropped from inside the callback, the
/// closure goes as that call returns.
pub fn add_reclaim<F>(callback: F) -> Result<Reclaim>
where
    F: Fn(i32, usize) + Send + Sync + 'static,
{
    require_version()?;
    let shell: Arc<Shell<ReclaimFn>> = Shell::new(Box::new(callback), Arc::new(PanicLog::default()));
    let mut id = 0;
    // SAFETY: `shell`, then the Reclaim, holds the user data until the removal returns (or for
    // good, if the removal fails).
    let status = unsafe { sys::gpumem_reclaim_add(Some(reclaim_trampoline), Shell::user_data(&shell), &mut id) };
    if status != sys::GPUMEM_SUCCESS {
        // The library kept nothing.
        return Err(Error::last(status));
    }
    Ok(Reclaim { id, shell })
}
