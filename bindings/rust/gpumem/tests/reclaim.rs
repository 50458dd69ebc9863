//! Reclaim callbacks, which every pool of the process runs when out of memory; alone in this
//! binary so that no other test's pool runs them.

use gpumem::{Allocator, Buffer, Pool, PoolParams, Status};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[test]
fn a_reclaim_callback_frees_memory_and_the_pool_retries() {
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new().limit(8192)).unwrap();
    let garbage: Arc<Mutex<Option<Buffer>>> = Arc::new(Mutex::new(Some(pool.alloc(8192).unwrap())));
    let calls = Arc::new(AtomicUsize::new(0));
    let (garbage_in_callback, calls_in_callback) = (garbage.clone(), calls.clone());
    let reclaim = gpumem::add_reclaim(move |device, size| {
        assert_eq!((device, size), (-1, 4096));
        calls_in_callback.fetch_add(1, Ordering::SeqCst);
        garbage_in_callback.lock().unwrap().take();
    })
    .unwrap();

    let b = pool.alloc(4096).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
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
