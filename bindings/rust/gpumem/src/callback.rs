//! What keeps Rust panics from unwinding into C: every function the library calls back runs its
//! Rust code through [`guarded`] or `catch_unwind` directly, and records what it caught.

use crate::sys;
use std::any::Any;
use std::mem;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;

/// Messages of the panics caught in callbacks, kept until taken.
#[derive(Default)]
pub(crate) struct PanicLog(Mutex<Vec<String>>);

impl PanicLog {
    pub(crate) fn push(&self, payload: Box<dyn Any + Send>) {
        let message = panic_message(payload);
        // A poisoned lock only means another push panicked; the list is still whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(message);
    }

    pub(crate) fn take(&self) -> Vec<String> {
        mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The text a panic was raised with; the payload is dropped without letting its own drop unwind.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a payload that is not a string".to_string()
    };
    if let Err(again) = panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        mem::forget(again);
    }
    message
}

/// Runs a callback's Rust side and gives the status to return to C: success, the error's status
/// (a non-negative one, which is not a failure, as an internal error), or for a panic, kept in
/// `panics`, ::GPUMEM_ERROR_INTERNAL.
pub(crate) fn guarded(panics: &PanicLog, f: impl FnOnce() -> crate::Result<()>) -> sys::gpumem_status_t {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => sys::GPUMEM_SUCCESS,
        Ok(Err(error)) if error.status < 0 => error.status,
        Ok(Err(_)) => sys::GPUMEM_ERROR_INTERNAL,
        Err(payload) => {
            panics.push(payload);
            sys::GPUMEM_ERROR_INTERNAL
        }
    }
}
