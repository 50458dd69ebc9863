//! Reclaim callbacks, which every pool of the process runs when out of memory; alone in this
//! binary so that no other test's pool runs them, and one test at a time (`ONE_AT_A_TIME`).

use gpumem::{Allocator, Buffer, Pool, PoolParams, Reclaim, Status};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool of host memory that holds at most `limit` bytes.
fn limited_pool(limit: u64) -> Pool {
    Pool::new(&Allocator::host(0).unwrap(), &PoolParams::new().limit(limit)).unwrap()
}

/// Sets its flag when dropped: a closure that holds one says when it is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_reclaim_callback_frees_memory_and_the_pool_retries() {
    let _alone = alone();
    let pool = limited_pool(8192);
    let garbage: Arc<Mutex<Option<Buffer>>> = Arc::new(Mutex::new(Some(pool.alloc(8192).unwrap())));
    let calls: Arc<Mutex<Vec<(i32, usize)>>> = Arc::default();
    let (garbage_in_callback, calls_in_callback) = (garbage.clone(), calls.clone());
    let reclaim = gpumem::add_reclaim(move |device, size| {
        calls_in_callback.lock().unwrap().push((device, size));
        garbage_in_callback.lock().unwrap().take();
    })
    .unwrap();

    let b = pool.alloc(4096).unwrap();
    assert_eq!(*calls.lock().unwrap(), vec![(-1, 4096)]);
    assert!(garbage.lock().unwrap().is_none());
    assert!(pool.stats().unwrap().retry_count >= 1);
    drop(b);

    // A panic in the callback is kept; the allocation fails as it would have.
    reclaim.remove().unwrap();
    let reclaim = gpumem::add_reclaim(|_, _| panic!("no garbage here")).unwrap();
    let hold = pool.alloc(8192).unwrap();
    assert_eq!(pool.alloc(512).unwrap_err().status, Status::OUT_OF_MEMORY);
    assert_eq!(reclaim.take_panics(), vec!["no garbage here".to_string()]);
    drop(reclaim);
    drop(hold);
}

#[test]
fn dropping_a_reclaim_removes_it_and_drops_its_closure() {
    let _alone = alone();
    let pool = limited_pool(4096);
    let hold = pool.alloc(4096).unwrap();
    let calls: Arc<Mutex<Vec<(i32, usize)>>> = Arc::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let (record, flag) = (calls.clone(), DropFlag(dropped.clone()));
    let reclaim = gpumem::add_reclaim(move |device, size| {
        let _ = &flag;
        record.lock().unwrap().push((device, size));
    })
    .unwrap();
    assert_eq!(pool.alloc(1000).unwrap_err().status, Status::OUT_OF_MEMORY);
    assert_eq!(*calls.lock().unwrap(), vec![(-1, 1000)]);

    drop(reclaim);
    assert!(dropped.load(Ordering::SeqCst), "the closure outlived its removal");
    assert_eq!(pool.alloc(1000).unwrap_err().status, Status::OUT_OF_MEMORY);
    assert_eq!(calls.lock().unwrap().len(), 1, "a dropped callback ran");
    drop(hold);
}

#[test]
fn a_reclaim_callback_may_remove_itself() {
    let _alone = alone();
    let pool = limited_pool(4096);
    let hold = pool.alloc(4096).unwrap();
    let slot: Arc<Mutex<Option<Reclaim>>> = Arc::default();
    let dropped = Arc::new(AtomicBool::new(false));
    let (own, flag) = (slot.clone(), DropFlag(dropped.clone()));
    let reclaim = gpumem::add_reclaim(move |_, _| {
        let _ = &flag;
        drop(own.lock().unwrap().take());
    })
    .unwrap();
    *slot.lock().unwrap() = Some(reclaim);
    assert_eq!(pool.alloc(1000).unwrap_err().status, Status::OUT_OF_MEMORY);
    assert!(slot.lock().unwrap().is_none());
    assert!(dropped.load(Ordering::SeqCst), "the closure outlived its own removal");
    drop(hold);
}

#[test]
fn a_removed_reclaim_callback_is_never_called_again_and_lets_its_captures_go() {
    let _alone = alone();
    let pool = limited_pool(4096);
    let hold = pool.alloc(4096).unwrap();
    for by_remove in [false, true] {
        let captured = Arc::new(Mutex::new(0usize));
        let counter = captured.clone();
        let reclaim = gpumem::add_reclaim(move |_, _| *counter.lock().unwrap() += 1).unwrap();
        assert_eq!(pool.alloc(1000).unwrap_err().status, Status::OUT_OF_MEMORY);
        assert_eq!(*captured.lock().unwrap(), 1);
        assert_eq!(Arc::strong_count(&captured), 2, "a call kept a reference");
        if by_remove {
            reclaim.remove().unwrap();
        } else {
            drop(reclaim);
        }
        assert_eq!(Arc::strong_count(&captured), 1, "the closure outlived its removal");
        assert_eq!(pool.alloc(1000).unwrap_err().status, Status::OUT_OF_MEMORY);
        assert_eq!(*captured.lock().unwrap(), 1, "a removed callback ran");
    }
    drop(hold);
}
