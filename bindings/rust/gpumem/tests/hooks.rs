//! Hooks: Rust closures the library calls on an allocator's events.

mod common;

use common::RustHeap;
use gpumem::{Allocator, Hook, HookEvents, HookInfo, Pool, PoolParams, Status, Stream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
            (-1, pool.as_raw() as usize, Stream::DEFAULT.addr())
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
    let (host, e) = host.destroy().unwrap_err();
    assert_eq!(e.status, Status::BUSY);
    drop(host);
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

/// Sets its flag when dropped: a closure that holds one says when it is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn drop_flag() -> (DropFlag, Arc<AtomicBool>) {
    let flag = Arc::new(AtomicBool::new(false));
    (DropFlag(flag.clone()), flag)
}

#[test]
fn a_removed_hooks_closure_is_dropped() {
    let (_host, pool) = host_pool();
    let (flag, dropped) = drop_flag();
    let hook = pool
        .add_hook(HookEvents::MALLOC_PRE, move |_| {
            let _ = &flag;
        })
        .unwrap();
    pool.alloc(8).unwrap();
    drop(hook);
    assert!(dropped.load(Ordering::SeqCst), "the closure outlived its hook");

    let (flag, dropped) = drop_flag();
    let hook = pool
        .add_hook(HookEvents::MALLOC_PRE, move |_| {
            let _ = &flag;
        })
        .unwrap();
    hook.remove().unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the closure outlived its removal");
}

#[test]
fn a_hook_of_a_borrowed_allocator_drops_its_closure() {
    let (_host, pool) = host_pool();
    // SAFETY: `pool` outlives the borrowed wrapper, and its hooks.
    let borrowed = unsafe { Allocator::from_raw_borrowed(pool.as_raw()) }.unwrap();
    for _ in 0..3 {
        let (flag, dropped) = drop_flag();
        let hook = borrowed
            .add_hook(HookEvents::MALLOC_PRE, move |_| {
                let _ = &flag;
            })
            .unwrap();
        pool.alloc(8).unwrap();
        drop(hook);
        assert!(dropped.load(Ordering::SeqCst));
    }
}

#[test]
fn a_hook_that_holds_its_allocator_lets_it_be_destroyed() {
    let (heap, destroyed) = RustHeap::new();
    let rust = Allocator::from_functions(-1, heap).unwrap();
    let held = rust.clone();
    let hook = rust
        .add_hook(HookEvents::MALLOC_POST, move |_| {
            let _ = &held;
        })
        .unwrap();
    rust.alloc(8).unwrap();
    drop(hook);
    drop(rust);
    assert!(
        destroyed.load(Ordering::SeqCst),
        "the allocator outlived its last handle, held by a removed hook"
    );
}

#[test]
fn a_hook_may_remove_itself() {
    let (_host, pool) = host_pool();
    let slot: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
    let calls = Arc::new(AtomicUsize::new(0));
    let (flag, dropped) = drop_flag();
    let (own, counter) = (slot.clone(), calls.clone());
    let hook = pool
        .add_hook(HookEvents::MALLOC_PRE, move |_| {
            let _ = &flag;
            counter.fetch_add(1, Ordering::SeqCst);
            drop(own.lock().unwrap().take());
        })
        .unwrap();
    *slot.lock().unwrap() = Some(hook);
    pool.alloc(8).unwrap();
    assert!(slot.lock().unwrap().is_none());
    assert!(dropped.load(Ordering::SeqCst), "the closure outlived its own removal");
    pool.alloc(8).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(pool.take_panics().is_empty());
}

#[test]
fn dropping_a_hook_while_other_threads_run_it() {
    let (_host, pool) = host_pool();
    for _ in 0..20 {
        let (flag, dropped) = drop_flag();
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let hook = pool
            .add_hook(HookEvents::MALLOC_PRE | HookEvents::FREE_POST, move |_| {
                let _ = &flag;
                counter.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for size in 1..=200 {
                        pool.alloc(size).unwrap();
                    }
                })
            })
            .collect();
        while calls.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(hook);
        assert!(dropped.load(Ordering::SeqCst));
        for thread in threads {
            thread.join().unwrap();
        }
    }
    assert!(pool.take_panics().is_empty());
}

#[test]
fn a_removed_hook_is_never_called_again_and_lets_its_captures_go() {
    let (_host, pool) = host_pool();
    for by_remove in [false, true] {
        let captured = Arc::new(AtomicUsize::new(0));
        let counter = captured.clone();
        let hook = pool
            .add_hook(HookEvents::MALLOC_PRE | HookEvents::FREE_POST, move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        pool.alloc(64).unwrap().free().unwrap();
        assert_eq!(captured.load(Ordering::SeqCst), 2);
        assert_eq!(Arc::strong_count(&captured), 2, "a call kept a reference");
        if by_remove {
            hook.remove().unwrap();
        } else {
            drop(hook);
        }
        assert_eq!(Arc::strong_count(&captured), 1, "the closure outlived its removal");
        for size in [64, 5000, 70000] {
            pool.alloc(size).unwrap().free().unwrap();
        }
        assert_eq!(captured.load(Ordering::SeqCst), 2, "a removed hook ran");
    }
}

#[test]
fn a_hook_removed_through_sys_lets_its_closure_go_when_dropped() {
    let (_host, pool) = host_pool();
    let captured = Arc::new(());
    let held = captured.clone();
    let hook = pool
        .add_hook(HookEvents::MALLOC_PRE, move |_| {
            let _ = &held;
        })
        .unwrap();
    // SAFETY: a live allocator and a hook id it gave.
    assert_eq!(
        unsafe { gpumem::sys::gpumem_allocator_remove_hook(pool.as_raw(), hook.id()) },
        Status::SUCCESS.0
    );
    assert_eq!(Arc::strong_count(&captured), 2);
    // The library has nothing left to call: refused, and the closure goes.
    assert_eq!(hook.remove().unwrap_err().status, Status::INVALID_HANDLE);
    assert_eq!(Arc::strong_count(&captured), 1);
}

#[test]
fn a_hook_removes_itself_while_other_threads_run_it() {
    let (_host, pool) = host_pool();
    for _ in 0..10 {
        let slot: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
        let calls = Arc::new(AtomicUsize::new(0));
        let (flag, dropped) = drop_flag();
        let (own, counter) = (slot.clone(), calls.clone());
        let hook = pool
            .add_hook(HookEvents::MALLOC_PRE, move |_| {
                let _ = &flag;
                if counter.fetch_add(1, Ordering::SeqCst) == 50 {
                    // Only this call takes the Hook; the others find the slot empty.
                    drop(own.lock().unwrap().take());
                }
            })
            .unwrap();
        *slot.lock().unwrap() = Some(hook);
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
        assert!(slot.lock().unwrap().is_none());
        assert!(dropped.load(Ordering::SeqCst), "the closure outlived its removal");
        assert_eq!(Arc::strong_count(&calls), 1);
        let after = calls.load(Ordering::SeqCst);
        pool.alloc(8).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), after, "a removed hook ran");
    }
    assert!(pool.take_panics().is_empty());
}
