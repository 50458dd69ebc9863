//! Hooks: Rust closures the library calls on an allocator's events.

use gpumem::{Allocator, HookEvents, HookInfo, Pool, PoolParams, Status, Stream};
use std::sync::{Arc, Mutex};

fn host_pool() -> (Allocator, Pool) {
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    (host, pool)
}

/// A hook that keeps what it is told, and the list it keeps it in.
fn recorder() -> (Arc<Mutex<Vec<HookInfo>>>, impl Fn(&HookInfo) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    (seen, move |info: &HookInfo| keep.lock().unwrap().push(*info))
}

#[test]
fn every_event_with_its_sizes() {
    let (_host, pool) = host_pool();
    let (seen, hook) = recorder();
    let hook = pool.add_hook(HookEvents::ALL, hook).unwrap();
    let b = pool.alloc(1000).unwrap();
    let ptr = b.as_ptr() as usize;
    b.free().unwrap();
    hook.remove().unwrap();
    pool.alloc(8).unwrap().free().unwrap();

    let seen = seen.lock().unwrap();
    let got: Vec<_> = seen
        .iter()
        .map(|i| (i.event, i.size, i.mem_size, i.ptr, i.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (HookEvents::MALLOC_PRE, 1000, 0, 0, 0),
            (HookEvents::UPSTREAM_ALLOC_PRE, 1024, 1024, 0, 0),
            (HookEvents::UPSTREAM_ALLOC_POST, 1024, 1024, ptr, 0),
            (HookEvents::MALLOC_POST, 1000, 1024, ptr, 0),
            (HookEvents::FREE_PRE, 1000, 1024, ptr, 0),
            (HookEvents::FREE_POST, 1000, 1024, ptr, 0),
        ]
    );
    for info in seen.iter() {
        assert_eq!(
            (info.device, info.allocator, info.stream),
            (-1, pool.as_raw() as usize, Stream::DEFAULT)
        );
    }
}

#[test]
fn a_mask_selects_events_and_dropping_the_hook_removes_it() {
    let (_host, pool) = host_pool();
    let (seen, hook) = recorder();
    {
        let _hook = pool
            .add_hook(HookEvents::MALLOC_POST | HookEvents::FREE_PRE, hook)
            .unwrap();
        pool.alloc(100).unwrap().free().unwrap();
    }
    pool.alloc(100).unwrap().free().unwrap();
    let events: Vec<_> = seen.lock().unwrap().iter().map(|i| i.event).collect();
    assert_eq!(events, vec![HookEvents::MALLOC_POST, HookEvents::FREE_PRE]);
    assert!(HookEvents::ALL.contains(HookEvents::FREE_POST | HookEvents::MALLOC_PRE));
}

#[test]
fn a_failed_allocation_is_seen_with_its_status() {
    let (_host, pool) = host_pool();
    pool.set_limit(512).unwrap();
    let (seen, hook) = recorder();
    let _hook = pool.add_hook(HookEvents::MALLOC_POST, hook).unwrap();
    assert_eq!(pool.alloc(4096).unwrap_err().status, Status::OUT_OF_MEMORY);
    let got: Vec<_> = seen.lock().unwrap().iter().map(|i| (i.size, i.ptr, i.status)).collect();
    assert_eq!(got, vec![(4096, 0, Status::OUT_OF_MEMORY.0)]);
}

#[test]
fn a_panic_in_a_hook_is_kept_and_never_reaches_the_call() {
    let (_host, pool) = host_pool();
    let hook = pool
        .add_hook(HookEvents::MALLOC_PRE, |info| {
            panic!("hook saw event {:#x}", info.event.0)
        })
        .unwrap();
    let b = pool.alloc(64).unwrap();
    b.free().unwrap();
    assert_eq!(pool.take_panics(), vec!["hook saw event 0x1".to_string()]);
    assert_eq!(pool.stats().unwrap().alloc_count, 1);
    drop(hook);
    pool.alloc(64).unwrap().free().unwrap();
    assert!(pool.take_panics().is_empty());
}

#[test]
fn hooks_on_the_upstream_see_the_pools_blocks() {
    let (host, pool) = host_pool();
    let (seen, hook) = recorder();
    let hook = host.add_hook(HookEvents::MALLOC_POST, hook).unwrap();
    let b = pool.alloc(100).unwrap();
    drop(hook);
    let got: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|i| (i.size, i.mem_size, i.ptr, i.allocator))
        .collect();
    assert_eq!(got, vec![(512, 512, b.as_ptr() as usize, host.as_raw() as usize)]);
}

#[test]
fn a_hook_keeps_its_allocator_alive() {
    let host = Allocator::host(0).unwrap();
    let (seen, hook) = recorder();
    let hook = host.add_hook(HookEvents::MALLOC_PRE, hook).unwrap();
    let raw = host.as_raw();
    let e = host.destroy().unwrap_err();
    assert_eq!(e.status, Status::BUSY);
    // SAFETY: `hook` holds the allocator alive for as long as this borrowed wrapper is used.
    let borrowed = unsafe { Allocator::from_raw_borrowed(raw) }.unwrap();
    borrowed.alloc(8).unwrap().free().unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(hook.id() > 0);
    drop(borrowed);
    drop(hook);
}

#[test]
fn hooks_run_on_every_allocating_thread() {
    let (_host, pool) = host_pool();
    let (seen, hook) = recorder();
    let _hook = pool.add_hook(HookEvents::MALLOC_POST, hook).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for size in 1..=100 {
                    pool.alloc(size).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(seen.lock().unwrap().len(), 400);
}
