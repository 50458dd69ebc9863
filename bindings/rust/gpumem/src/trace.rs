//! Recording an allocator's events, and reading the recordings back (trace.h).

use crate::allocator::Allocator;
use crate::error::{check, Error, Result};
use crate::pool::c_path;
use crate::{fixed_str, sys};
use std::fmt;
use std::path::Path;
use std::ptr::{self, NonNull};

/// A recording in progress, from [`Allocator::start_trace`]; stopped (its file completed) when
/// dropped. It keeps its allocator alive.
#[must_use = "a Trace stops when dropped"]
pub struct Trace {
    handle: NonNull<sys::gpumem_trace_t>,
    allocator: Allocator,
}

// SAFETY: the only call on the handle, gpumem_trace_stop(), is "Per handle: concurrent calls on
// different handles; one handle is serialized by the caller." and takes `self` by value.
unsafe impl Send for Trace {}
// SAFETY: a shared reference makes no call on the handle.
unsafe impl Sync for Trace {}

pub(crate) fn start(allocator: &Allocator, path: &Path) -> Result<Trace> {
    let path = c_path(path)?;
    let mut out = ptr::null_mut();
    // SAFETY: a live allocator, a NUL-terminated path and a valid output.
    check(unsafe { sys::gpumem_trace_start(allocator.as_raw(), path.as_ptr(), 0, &mut out) })?;
    let handle = NonNull::new(out).expect("libgpumem returned success and a NULL trace");
    Ok(Trace {
        handle,
        allocator: allocator.clone(),
    })
}

impl Trace {
    /// The allocator being recorded.
    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// Stops the recording and completes its file, reporting a write failure (the file then
    /// holds the records before it).
    pub fn stop(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is not dropped, so the allocator it holds is read out once.
        let allocator = unsafe { ptr::read(&this.allocator) };
        // SAFETY: a live recording, stopped once.
        let result = check(unsafe { sys::gpumem_trace_stop(this.handle.as_ptr()) });
        drop(allocator);
        result
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        // SAFETY: a live recording, stopped once.
        unsafe { sys::gpumem_trace_stop(self.handle.as_ptr()) };
    }
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace").field("handle", &self.handle).finish()
    }
}

/// Kinds of trace record (`gpumem_trace_event`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TraceEvent(pub u32);

impl TraceEvent {
    /// An allocation: `size` asked, `mem_size` handed out, at `address`.
    pub const ALLOC: TraceEvent = TraceEvent(sys::GPUMEM_TRACE_ALLOC);
    /// The allocation at `address` was freed.
    pub const FREE: TraceEvent = TraceEvent(sys::GPUMEM_TRACE_FREE);
    /// A pool took a block of `size` bytes at `address` from its upstream.
    pub const UPSTREAM_ALLOC: TraceEvent = TraceEvent(sys::GPUMEM_TRACE_UPSTREAM_ALLOC);
    /// A pool gave the block of `size` bytes at `address` back.
    pub const UPSTREAM_FREE: TraceEvent = TraceEvent(sys::GPUMEM_TRACE_UPSTREAM_FREE);
    /// An allocation of `size` bytes failed with `status`.
    pub const ALLOC_FAILED: TraceEvent = TraceEvent(sys::GPUMEM_TRACE_ALLOC_FAILED);
}

/// The header of a trace file (`gpumem_trace_header_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceHeader {
    /// The file format's version.
    pub version: u32,
    /// The traced allocator's device; -1 for host memory.
    pub device: i32,
    /// Wall-clock time at the start of the recording, ns since 1970 (UTC).
    pub start_unix_ns: u64,
    /// The traced allocator's kind.
    pub kind: String,
}

/// One record of a trace (`gpumem_trace_record_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceRecord {
    /// What happened.
    pub event: TraceEvent,
    /// The recording thread, numbered from 1.
    pub thread: u32,
    /// Nanoseconds since the start of the recording.
    pub time_ns: u64,
    /// The stream of the call, as its handle's value.
    pub stream: u64,
    /// The memory's address (0 for a failed allocation).
    pub address: u64,
    /// Bytes asked for, or of the upstream block; 0 for a free.
    pub size: u64,
    /// Bytes handed out, for an allocation; else 0.
    pub mem_size: u64,
    /// The status of a failed allocation; else 0.
    pub status: i32,
}

/// An open trace file; iterate it for its records. Closed when dropped.
pub struct TraceReader {
    handle: NonNull<sys::gpumem_trace_reader_t>,
    header: TraceHeader,
    done: bool,
}

// SAFETY: the reader's calls are "Per handle: concurrent calls on different handles; one handle
// is serialized by the caller.": each takes `&mut self` (or `self`), which serializes them.
unsafe impl Send for TraceReader {}
// SAFETY: a shared reference makes no call on the handle (the header is read at open).
unsafe impl Sync for TraceReader {}

impl TraceReader {
    /// Opens a trace file: the whole file is read and its header checked.
    pub fn open(path: impl AsRef<Path>) -> Result<TraceReader> {
        crate::require_version()?;
        let path = c_path(path.as_ref())?;
        let mut out = ptr::null_mut();
        // SAFETY: a NUL-terminated path and a valid output.
        check(unsafe { sys::gpumem_trace_reader_open(path.as_ptr(), &mut out) })?;
        let handle = NonNull::new(out).expect("libgpumem returned success and a NULL reader");
        let mut raw = sized_zeroed!(sys::gpumem_trace_header_t);
        // SAFETY: a live reader and a valid struct with its size.
        let status = unsafe { sys::gpumem_trace_reader_get_header(handle.as_ptr(), &mut raw) };
        if status != sys::GPUMEM_SUCCESS {
            let error = Error::last(status);
            // SAFETY: a live reader, closed once.
            unsafe { sys::gpumem_trace_reader_close(handle.as_ptr()) };
            return Err(error);
        }
        let header = TraceHeader {
            version: raw.version,
            device: raw.device,
            start_unix_ns: raw.start_unix_ns,
            kind: fixed_str(&raw.kind),
        };
        Ok(TraceReader {
            handle,
            header,
            done: false,
        })
    }

    /// The file's header.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>> {
        let mut raw = sized_zeroed!(sys::gpumem_trace_record_t);
        let mut has_record = false;
        // SAFETY: a live reader and valid outputs.
        check(unsafe { sys::gpumem_trace_reader_next(self.handle.as_ptr(), &mut raw, &mut has_record) })?;
        if !has_record {
            return Ok(None);
        }
        Ok(Some(TraceRecord {
            event: TraceEvent(raw.event),
            thread: raw.thread,
            time_ns: raw.time_ns,
            stream: raw.stream,
            address: raw.address,
            size: raw.size,
            mem_size: raw.mem_size,
            status: raw.status,
        }))
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceRecord>;

    /// Records until the end; a damaged file gives its error once, then the end.
    fn next(&mut self) -> Option<Result<TraceRecord>> {
        if self.done {
            return None;
        }
        let next = self.next_record().transpose();
        if !matches!(next, Some(Ok(_))) {
            self.done = true;
        }
        next
    }
}

impl Drop for TraceReader {
    fn drop(&mut self) {
        // SAFETY: a live reader, closed once.
        unsafe { sys::gpumem_trace_reader_close(self.handle.as_ptr()) };
    }
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader").field("header", &self.header).finish()
    }
}
