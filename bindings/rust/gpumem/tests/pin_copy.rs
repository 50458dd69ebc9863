//! Pinning and copies of host memory. Querying needs no driver, and neither do a host buffer's
//! reads and writes; pinning and raw copies do, and skip, saying so, without one.

mod common;

use gpumem::{Allocator, Copy2d, MemoryType, PinState, Pool, PoolParams, Status};
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};

#[test]
fn querying_and_statistics_need_no_driver() {
    let data = vec![7u8; 10000];
    assert_eq!(gpumem::pin_query(&data).unwrap(), PinState::NONE);
    let e = gpumem::pin_query(&data[..0]).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    let stats = gpumem::pin_stats().unwrap();
    assert!(stats.cache_budget > 0);
    assert_eq!(gpumem::copy_staging_held().unwrap() % 4096, 0);
    gpumem::copy_staging_release().unwrap();
}

#[test]
fn a_slice_is_pinned_for_the_length_of_the_scope() {
    let mut data = vec![0u8; 3 * 4096 + 100];
    let pins_before = gpumem::pin_stats().unwrap().pins;
    let pinned = gpumem::pin_scope_mut(&mut data[100..], |pinned| {
        pinned[0] = 42;
        assert_eq!(gpumem::pin_query(pinned).unwrap(), PinState::FULL);
        assert!(gpumem::pin_stats().unwrap().pins > pins_before);
        pinned.len()
    });
    if !common::needs_gpu(&pinned) {
        return;
    }
    assert_eq!(pinned.unwrap(), 3 * 4096);
    assert_eq!(data[100], 42);
    assert_eq!(gpumem::pin_query(&data).unwrap(), PinState::NONE);

    // Pins nest and overlap: each range stays pinned while any pin covers it.
    gpumem::pin_scope(&data[..4096], |_| {
        assert_eq!(gpumem::pin_query(&data).unwrap(), PinState::PARTIAL);
        gpumem::pin_scope(&data[..100], |_| {
            assert_eq!(gpumem::pin_query(&data[..100]).unwrap(), PinState::FULL)
        })
        .unwrap();
        assert_eq!(gpumem::pin_query(&data[..4096]).unwrap(), PinState::FULL);
    })
    .unwrap();
    assert_eq!(gpumem::pin_query(&data).unwrap(), PinState::NONE);
}

#[test]
fn a_panic_in_the_scope_unpins_the_slice() {
    let mut data = vec![0u8; 8192];
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        gpumem::pin_scope_mut(&mut data, |_| panic!("inside the scope"))
    }));
    match caught {
        // The closure always panics: it was not called, for want of a driver.
        Ok(not_pinned) => assert!(!common::needs_gpu(&not_pinned)),
        Err(payload) => {
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"inside the scope"));
            assert_eq!(gpumem::pin_query(&data).unwrap(), PinState::NONE);
        }
    }
}

#[test]
fn copies_between_host_buffers_and_slices() {
    let host = Allocator::host(0).unwrap();
    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    let mut b = pool.alloc(256).unwrap();
    let data: Vec<u8> = (0..=255).collect();
    b.write(0, &data).unwrap();
    let mut back = vec![0u8; 100];
    b.read(50, &mut back).unwrap();
    assert_eq!(back, &data[50..150]);
    // SAFETY: host memory the buffer owns.
    assert_eq!(unsafe { b.as_slice() }, &data[..]);

    let mut out = vec![0u8; 256];
    // SAFETY: both ranges are 256 live bytes that do not overlap.
    let copied = unsafe { gpumem::copy(out.as_mut_ptr() as *mut c_void, b.as_ptr(), 256) };
    if !common::needs_gpu(&copied) {
        return;
    }
    assert_eq!(out, data);
    // SAFETY: as above.
    unsafe { gpumem::copy_to_slice(&mut out[..16], b.as_ptr().cast::<u8>().add(16) as *const c_void) }.unwrap();
    assert_eq!(&out[..16], &data[16..32]);

    // Rows of 4 bytes out of a pitch of 16: a column of the buffer.
    let mut column = vec![0u8; 4 * 16];
    // SAFETY: 16 rows of 16 bytes in the buffer, 16 rows of 4 in `column`.
    unsafe {
        Copy2d::new(4, 16)
            .src(b.as_ptr(), 16)
            .src_at(8, 0)
            .dst(column.as_mut_ptr() as *mut c_void, 4)
            .run()
    }
    .unwrap();
    for row in 0..16 {
        assert_eq!(&column[row * 4..row * 4 + 4], &data[row * 16 + 8..row * 16 + 12]);
    }

    // Plain host memory is the host's to set: the buffer does it, the driver refuses.
    b.fill(0).unwrap();
    // SAFETY: as above.
    let e = unsafe { gpumem::memset(b.as_ptr(), 0, 1, 256) }.unwrap_err();
    assert_eq!(e.status, Status::INVALID_POINTER);
    let info = gpumem::pointer_info(b.as_ptr()).unwrap();
    assert_eq!((info.memory_type, info.is_pinned), (MemoryType::UNREGISTERED, false));
}
