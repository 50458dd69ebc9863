//! Allocators and buffers shared and sent between threads (their Send and Sync).

use gpumem::{Allocator, Buffer, Pool, PoolParams, Stream};
use std::sync::mpsc;
use std::thread;

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
            b.free().unwrap();
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
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    let buffer = pool.alloc(100).unwrap();
    drop((host, pool));
    thread::spawn(move || drop(buffer)).join().unwrap();
}
