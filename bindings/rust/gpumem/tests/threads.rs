//! Allocators and buffers shared and sent between threads (their Send and Sync).

mod common;

use common::RustHeap;
use gpumem::{Allocator, Buffer, Hook, Pool, PoolParams, Reclaim, Stream, Trace, TraceReader};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread;

/// Compiles only for types that may be sent and shared between threads.
fn send_and_sync<T: Send + Sync>() {}

#[test]
fn handles_are_send_and_sync() {
    send_and_sync::<Allocator>();
    send_and_sync::<Pool>();
    send_and_sync::<Buffer>();
    send_and_sync::<Hook>();
    send_and_sync::<Reclaim>();
    send_and_sync::<Trace>();
    send_and_sync::<TraceReader>();
    send_and_sync::<gpumem::Error>();
}

#[test]
fn one_pool_many_threads() {
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let pool = pool.clone();
            thread::spawn(move || {
                let stream = if t % 2 == 0 {
                    Stream::DEFAULT
                } else {
                    Stream::PER_THREAD
                };
                for i in 0..500usize {
                    let mut b = pool.alloc_on(64 + (i * 37 + t) % 5000, stream).unwrap();
                    // SAFETY: host memory of this thread's own buffer.
                    let bytes = unsafe { b.as_mut_slice() };
                    bytes.fill(t as u8);
                    assert!(
                        bytes.iter().all(|&x| x == t as u8),
                        "another thread wrote into this buffer"
                    );
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let s = pool.stats().unwrap();
    assert_eq!((s.alloc_count, s.free_count, s.bytes_in_use), (4000, 4000, 0));
}

#[test]
fn buffers_freed_on_another_thread() {
    let pool = Pool::new(&Allocator::host(0).unwrap(), &PoolParams::new()).unwrap();
    let (send, receive) = mpsc::channel::<Buffer>();
    let freer = thread::spawn(move || {
        let mut n = 0;
        for b in receive {
            b.free().map_err(|(_, e)| e).unwrap();
            n += 1;
        }
        n
    });
    for size in 1..=200 {
        send.send(pool.alloc(size * 16).unwrap()).unwrap();
    }
    drop(send);
    assert_eq!(freer.join().unwrap(), 200);
    assert_eq!(pool.info().unwrap().used_bytes, 0);
}

#[test]
fn the_last_handle_may_go_on_any_thread() {
    let (heap, destroyed) = RustHeap::new();
    let upstream = Allocator::from_functions(-1, heap).unwrap();
    let pool = Pool::new(&upstream, &PoolParams::new()).unwrap();
    let buffer = pool.alloc(100).unwrap();
    drop((upstream, pool));
    assert!(!destroyed.load(Ordering::SeqCst));
    thread::spawn(move || drop(buffer)).join().unwrap();
    assert!(
        destroyed.load(Ordering::SeqCst),
        "the pool and its upstream outlived their last handle"
    );
}
