//! Traces of a host pool, written and read back.

mod common;

use gpumem::{Allocator, Pool, PoolParams, Status, Stream, TraceEvent, TraceReader};

#[test]
fn a_recording_reads_back_event_for_event() {
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new().limit(4096)).unwrap();
    let path = common::temp_path("pool.trace");
    let trace = pool.start_trace(&path).unwrap();
    assert_eq!(
        pool.start_trace(common::temp_path("again.trace")).unwrap_err().status,
        Status::BUSY
    );
    let b = pool.alloc(1000).unwrap();
    let ptr = b.as_ptr() as u64;
    b.free().unwrap();
    assert_eq!(pool.alloc(8192).unwrap_err().status, Status::OUT_OF_MEMORY);
    trace.stop().unwrap();

    let mut reader = TraceReader::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(reader.header().device, -1);
    assert!(!reader.header().kind.is_empty());
    let records: Vec<_> = reader.by_ref().collect::<gpumem::Result<_>>().unwrap();
    let alloc = records.iter().find(|r| r.event == TraceEvent::ALLOC).unwrap();
    assert_eq!(
        (alloc.size, alloc.mem_size, alloc.address, alloc.stream),
        (1000, 1024, ptr, Stream::DEFAULT.addr() as u64)
    );
    let free = records.iter().find(|r| r.event == TraceEvent::FREE).unwrap();
    assert_eq!(free.address, ptr);
    assert!(records
        .iter()
        .any(|r| r.event == TraceEvent::UPSTREAM_ALLOC && r.size == 1024));
    let failed = records.iter().find(|r| r.event == TraceEvent::ALLOC_FAILED).unwrap();
    assert_eq!((failed.size, failed.status), (8192, Status::OUT_OF_MEMORY.0));
    assert!(records.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    assert!(reader.next().is_none());
}

#[test]
fn a_dropped_recording_is_completed() {
    let host = Allocator::host(0).unwrap();
    let path = common::temp_path("dropped.trace");
    {
        let _trace = host.start_trace(&path).unwrap();
        host.alloc(64).unwrap();
    }
    let records = TraceReader::open(&path).unwrap().count();
    let _ = std::fs::remove_file(&path);
    assert_eq!(records, 2);
}

#[test]
fn files_that_are_not_traces() {
    let e = TraceReader::open(common::temp_path("missing.trace")).unwrap_err();
    assert_eq!(e.status, Status::IO);
    let path = common::temp_path("garbage.trace");
    std::fs::write(&path, b"not a trace at all").unwrap();
    let e = TraceReader::open(&path).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert_eq!(e.status, Status::IO);
    assert!(!e.detail.is_empty());
}
