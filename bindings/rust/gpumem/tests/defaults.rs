//! The process-wide default allocator of device 0, which this crate keeps alive while it is the
//! default; alone in this binary, since every test of the process shares the default. Setting a
//! default needs a device: each test prints `skipped: no CUDA device` and returns when there is
//! none.

mod common;

use common::{gpu, RustHeap};
use gpumem::{Allocator, Pool, PoolParams, Status};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::thread;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_default_lives_while_a_handle_from_default_for_does() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !gpu() {
        return;
    }
    let (heap, destroyed) = RustHeap::new();
    let rust = Allocator::from_functions(-1, heap).unwrap();
    let pool = Pool::new(&rust, &PoolParams::new()).unwrap();
    drop(rust);
    Allocator::set_default(0, Some(&pool)).unwrap();
    let default = Allocator::default_for(0).unwrap();
    assert_eq!(default, *pool.as_allocator());
    assert!(default.is_owned(), "a default set from Rust is shared, not borrowed");

    // Its last handle outside the table goes; the table's keeps it.
    drop(pool);
    let again = Allocator::default_for(0).unwrap();
    again.alloc(100).unwrap();
    drop(again);

    // Replaced and unset on another thread while this one still holds a handle from default_for.
    thread::spawn(|| Allocator::set_default(0, None).unwrap())
        .join()
        .unwrap();
    assert!(!destroyed.load(Ordering::SeqCst), "destroyed while a handle lives");
    default.alloc(100).unwrap();
    // The replaced default's handle in the table is gone: this one is the last.
    Pool::try_from(default).unwrap().destroy().map_err(|(_, e)| e).unwrap();
    assert!(destroyed.load(Ordering::SeqCst), "the pool's upstream outlived it");

    let device_pool = Allocator::default_for(0).unwrap();
    assert!(!device_pool.is_owned());
    assert_eq!(device_pool, *Pool::device(0).unwrap().as_allocator());
}

#[test]
fn a_default_in_use_on_another_thread_while_it_is_replaced() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !gpu() {
        return;
    }
    for _ in 0..20 {
        let (heap, destroyed) = RustHeap::new();
        let pool = Pool::new(&Allocator::from_functions(-1, heap).unwrap(), &PoolParams::new()).unwrap();
        Allocator::set_default(0, Some(&pool)).unwrap();
        let user = thread::spawn(|| {
            let default = Allocator::default_for(0).unwrap();
            for size in 1..=500 {
                default.alloc(size).unwrap();
            }
        });
        Allocator::set_default(0, None).unwrap();
        drop(pool);
        user.join().unwrap();
        assert!(destroyed.load(Ordering::SeqCst));
    }
}

#[test]
fn a_default_needs_a_device() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let host = Allocator::host(0).unwrap();
    match gpumem::device_count() {
        Ok(count) => {
            let e = Allocator::set_default(count, Some(&host)).unwrap_err();
            assert_eq!(e.status, Status::INVALID_DEVICE);
        }
        Err(_) => {
            let e = Allocator::set_default(0, Some(&host)).unwrap_err();
            assert!(e.status == Status::NO_DRIVER || e.status == Status::NO_DEVICE, "{}", e);
            let e = Allocator::default_for(0).unwrap_err();
            assert!(e.status == Status::NO_DRIVER || e.status == Status::NO_DEVICE, "{}", e);
        }
    }
    // Refused, it keeps nothing: the allocator is destroyed with its last handle.
    host.destroy().map_err(|(_, e)| e).unwrap();
}
