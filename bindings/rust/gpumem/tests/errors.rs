//! Errors: each bad input gives its status with the library's detail; the version check.

mod common;

use gpumem::{Allocator, Error, HookEvents, Pool, PoolParams, Status, Stream};

#[test]
fn a_size_of_0_is_an_invalid_argument_with_its_detail() {
    let host = Allocator::host(0).unwrap();
    let e = host.alloc(0).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    assert_eq!(e.detail, "size is 0");
    assert_eq!(e.cuda_result, 0);
    assert_eq!(e.name(), "GPUMEM_ERROR_INVALID_ARGUMENT");
    assert_eq!(e.to_string(), "GPUMEM_ERROR_INVALID_ARGUMENT: size is 0");
}

#[test]
fn a_double_free_is_not_owned_and_says_which_pointer() {
    let host = Allocator::host(0).unwrap();
    let ptr = host.alloc_raw(64, Stream::DEFAULT).unwrap().as_ptr();
    // SAFETY: memory from alloc_raw, used by nothing; the second free is the library's to refuse.
    unsafe { host.free_raw(ptr, Stream::DEFAULT) }.unwrap();
    // SAFETY: as above.
    let e = unsafe { host.free_raw(ptr, Stream::DEFAULT) }.unwrap_err();
    assert_eq!(e.status, Status::NOT_OWNED);
    assert_eq!(
        e.detail,
        format!(
            "{:p} was not allocated by this host allocator, or is freed already",
            ptr
        )
    );
    assert_eq!(host.stats().unwrap().free_count, 1);

    // A pool refuses the same way, and changes nothing.
    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    let ptr = pool.alloc_raw(64, Stream::DEFAULT).unwrap().as_ptr();
    // SAFETY: as above.
    unsafe { pool.free_raw(ptr, Stream::DEFAULT) }.unwrap();
    // SAFETY: as above.
    let e = unsafe { pool.free_raw(ptr, Stream::DEFAULT) }.unwrap_err();
    assert_eq!(e.status, Status::NOT_OWNED, "{}", e);
    assert!(e.detail.contains(&format!("{:p}", ptr)), "{}", e.detail);
    assert_eq!(pool.stats().unwrap().free_count, 1);
}

#[test]
fn bad_arguments_of_constructors_and_hooks() {
    let e = Allocator::host(3).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    assert!(!e.detail.is_empty());

    let host = Allocator::host(0).unwrap();
    let e = host.add_hook(HookEvents(0), |_| {}).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    let e = host.add_hook(HookEvents(0x40), |_| {}).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);

    let pool = Pool::new(&host, &PoolParams::new()).unwrap();
    let e = pool.snapshot_json("/no/such/directory/snapshot.json").unwrap_err();
    assert_eq!(e.status, Status::IO, "{}", e);
    let e = pool.snapshot_json("nul\0byte").unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    assert!(e.detail.contains("NUL"), "{}", e.detail);
}

#[test]
fn a_buffer_checks_its_bounds_before_the_library() {
    let host = Allocator::host(0).unwrap();
    let mut b = host.alloc(16).unwrap();
    let e = b.write(10, &[0; 8]).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
    assert_eq!(
        e.detail,
        "8 bytes at offset 10 run past the end of a buffer of 16 bytes"
    );
    let e = b.read(usize::MAX, &mut [0; 2]).unwrap_err();
    assert_eq!(e.status, Status::INVALID_ARGUMENT);
}

#[test]
fn status_names_and_messages_are_the_librarys() {
    let all = [
        (Status::SUCCESS, "GPUMEM_SUCCESS"),
        (Status::INVALID_ARGUMENT, "GPUMEM_ERROR_INVALID_ARGUMENT"),
        (Status::OUT_OF_MEMORY, "GPUMEM_ERROR_OUT_OF_MEMORY"),
        (Status::NO_DRIVER, "GPUMEM_ERROR_NO_DRIVER"),
        (Status::NO_DEVICE, "GPUMEM_ERROR_NO_DEVICE"),
        (Status::INVALID_DEVICE, "GPUMEM_ERROR_INVALID_DEVICE"),
        (Status::NOT_SUPPORTED, "GPUMEM_ERROR_NOT_SUPPORTED"),
        (Status::INVALID_POINTER, "GPUMEM_ERROR_INVALID_POINTER"),
        (Status::INVALID_HANDLE, "GPUMEM_ERROR_INVALID_HANDLE"),
        (Status::ALREADY_REGISTERED, "GPUMEM_ERROR_ALREADY_REGISTERED"),
        (Status::STREAM_CAPTURE, "GPUMEM_ERROR_STREAM_CAPTURE"),
        (Status::DRIVER, "GPUMEM_ERROR_DRIVER"),
        (Status::INTERNAL, "GPUMEM_ERROR_INTERNAL"),
        (Status::NOT_OWNED, "GPUMEM_ERROR_NOT_OWNED"),
        (Status::BUSY, "GPUMEM_ERROR_BUSY"),
        (Status::IO, "GPUMEM_ERROR_IO"),
    ];
    for (status, name) in all {
        assert_eq!(status.name(), name);
        assert_eq!(status.to_string(), name);
        assert!(!status.message().is_empty(), "{}", name);
    }
    assert_eq!(Status(-1000).name(), "GPUMEM_UNKNOWN_STATUS");
    assert_eq!(format!("{:?}", Status::BUSY), "GPUMEM_ERROR_BUSY(-14)");
    assert!(-2 == Status::OUT_OF_MEMORY, "i32 == Status");
    assert!(Status::OUT_OF_MEMORY == -2, "Status == i32");
    assert_eq!(i32::from(Status::IO), -15);
}

#[test]
fn errors_display_and_box() {
    let e = Error::new(Status::OUT_OF_MEMORY, "");
    assert_eq!(e.to_string(), "GPUMEM_ERROR_OUT_OF_MEMORY");
    let e = Error::new(Status(-1000), "from the future");
    assert_eq!(e.to_string(), "GPUMEM_UNKNOWN_STATUS: from the future");
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e.clone());
    assert_eq!(boxed.to_string(), e.to_string());
}

#[test]
fn the_loaded_library_is_new_enough() {
    gpumem::check_version().unwrap();
    let number = gpumem::version_number();
    assert!(number >= gpumem::REQUIRED_VERSION);
    assert_eq!(
        gpumem::version(),
        format!("{}.{}.{}", number / 10000, number / 100 % 100, number % 100)
    );
}

#[test]
fn gpu_work_without_a_device_is_a_clear_error() {
    let device = Allocator::device(0).map(|_| ());
    match gpumem::device_count() {
        Ok(count) => {
            assert!(count > 0, "the driver reports no device and no error");
            device.unwrap();
        }
        Err(e) => {
            for e in [e, device.unwrap_err()] {
                assert!(e.status == Status::NO_DRIVER || e.status == Status::NO_DEVICE, "{}", e);
                assert!(!e.detail.is_empty());
            }
        }
    }
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "is not an error")]
fn an_error_of_success_is_a_mistake() {
    let _ = Error::new(Status::SUCCESS, "all is well");
}
