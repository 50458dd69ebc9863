//! What keeps Rust panics from unwinding into C, and closures alive exactly as long as the library
//! may call them: every function the library calls back runs its Rust code through [`guarded`],
//! a [`Shell`] or `catch_unwind` directly, and records what it caught.

use crate::error::Status;
use crate::sys;
use std::any::Any;
use std::mem;
use std::os::raw::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};

/// Messages of the panics caught in callbacks, kept until taken.
#[derive(Default)]
pub(crate) struct PanicLog(Mutex<Vec<String>>);

impl PanicLog {
    pub(crate) fn push(&self, payload: Box<dyn Any + Send>) {
        let message = panic_message(payload);
        // A poisoned lock only means another push panicked; the list is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(message);
    }

    pub(crate) fn take(&self) -> Vec<String> {
        mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
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
pub(crate) fn guarded(panics: &PanicLog, f: impl FnOnce() -> Result<(), Status>) -> sys::gpumem_status_t {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => sys::GPUMEM_SUCCESS,
        Ok(Err(status)) if status.0 < 0 => status.0,
        Ok(Err(_)) => sys::GPUMEM_ERROR_INTERNAL,
        Err(payload) => {
            panics.push(payload);
            sys::GPUMEM_ERROR_INTERNAL
        }
    }
}

/// What the library keeps as a callback's `user_data`: the closure, shared through an `Arc` by
/// the handle that removes it ([`Hook`](crate::Hook), [`Reclaim`](crate::Reclaim)) and by each
/// call of it that is running. The library calls a callback only between its adding and the
/// return of its removal (or its allocator's destruction), and a removal returns only once no
/// call of it runs on another thread: so when the handle lets its reference go after the removal,
/// that is the last one and the closure is dropped then, except where the closure removed itself
/// (a hook dropping its own [`Hook`](crate::Hook)). Its removal returns while it runs, and the
/// call's own reference drops it as that call returns, not under it.
pub(crate) struct Shell<F: ?Sized> {
    /// Always `Some` until the shell is dropped, which takes it out to drop it inside `catch_unwind`.
    closure: Option<Box<F>>,
    panics: Arc<PanicLog>,
}

impl<F: ?Sized> Shell<F> {
    pub(crate) fn new(closure: Box<F>, panics: Arc<PanicLog>) -> Arc<Shell<F>> {
        Arc::new(Shell {
            closure: Some(closure),
            panics,
        })
    }

    pub(crate) fn panics(&self) -> &PanicLog {
        &self.panics
    }

    /// The `user_data` to give the library: the shell's address, valid as long as `this` is held.
    pub(crate) fn user_data(this: &Arc<Shell<F>>) -> *mut c_void {
        Arc::as_ptr(this) as *mut c_void
    }

    /// Calls `call` with the closure of the shell at `user_data`, holding a reference to the shell
    /// until it returns; a panic is caught and kept. Never unwinds, so it may run in a function
    /// called from C.
    ///
    /// # Safety
    /// `user_data` comes from [`Shell::user_data`] of a `Shell<F>`, and the library is making a
    /// call of the callback registered with it: the reference that registration's handle holds is
    /// still there, since the removal that would let it go has not returned (one on another
    /// thread waits for this call; one on this thread can only come from inside this call).
    pub(crate) unsafe fn run(user_data: *mut c_void, call: impl FnOnce(&F)) {
        let raw = user_data as *const Shell<F>;
        // SAFETY: as the caller promises, `raw` came from `Arc::as_ptr` and at least one strong
        // reference is alive now; this call's own keeps the shell until it returns.
        let shell = unsafe {
            Arc::increment_strong_count(raw);
            Arc::from_raw(raw)
        };
        if let Some(closure) = shell.closure.as_deref() {
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| call(closure))) {
                shell.panics.push(payload);
            }
        }
        // The last reference when the closure removed itself: it is dropped here, and `Drop`
        // keeps a panic of its captures' drop rather than let it unwind into C.
        drop(shell);
    }
}

impl<F: ?Sized> Drop for Shell<F> {
    fn drop(&mut self) {
        let closure = self.closure.take();
        // Its captures' drop may call back into this crate, or panic; the panic is kept with the
        // callback's others, wherever the last reference goes.
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(move || drop(closure))) {
            self.panics.push(payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    type Callback = dyn Fn(usize) + Send + Sync;

    /// Sets its flag when dropped.
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Panics when dropped.
    struct PanicOnDrop;

    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("dropped");
        }
    }

    #[test]
    fn a_shell_let_go_drops_its_closure() {
        let dropped = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let (flag, counter) = (DropFlag(dropped.clone()), calls.clone());
        let shell: Arc<Shell<Callback>> = Shell::new(
            Box::new(move |n| {
                let _ = &flag;
                counter.fetch_add(n, Ordering::SeqCst);
            }),
            Arc::default(),
        );
        // SAFETY: `shell` is held across the call.
        unsafe { Shell::run(Shell::user_data(&shell), |f: &Callback| f(2)) };
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(Arc::strong_count(&shell), 1, "a call kept its reference");
        drop(shell);
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(Arc::strong_count(&calls), 1);
    }

    #[test]
    fn a_closure_that_lets_its_shell_go_is_dropped_when_its_call_returns() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        let shell: Arc<Shell<Callback>> = Shell::new(
            Box::new(move |_| {
                let _ = &flag;
            }),
            Arc::default(),
        );
        let user_data = Shell::user_data(&shell);
        let handle = Mutex::new(Some(shell));
        let seen_inside = AtomicBool::new(true);
        // SAFETY: the handle's reference is held until the closure lets it go, inside the call.
        unsafe {
            Shell::run(user_data, |f: &Callback| {
                f(0);
                drop(handle.lock().unwrap().take());
                seen_inside.store(dropped.load(Ordering::SeqCst), Ordering::SeqCst);
            })
        };
        assert!(!seen_inside.load(Ordering::SeqCst), "dropped while running");
        assert!(dropped.load(Ordering::SeqCst), "kept after its last call");
    }

    #[test]
    fn a_call_from_inside_a_call_keeps_the_shell_until_the_outer_one_returns() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        let shell: Arc<Shell<Callback>> = Shell::new(
            Box::new(move |_| {
                let _ = &flag;
            }),
            Arc::default(),
        );
        let user_data = Shell::user_data(&shell);
        let handle = Mutex::new(Some(shell));
        let depth = AtomicUsize::new(0);
        // SAFETY: the handle's reference is held until the inner call lets it go.
        unsafe {
            Shell::run(user_data, |_: &Callback| {
                depth.fetch_add(1, Ordering::SeqCst);
                Shell::run(user_data, |_: &Callback| {
                    depth.fetch_add(1, Ordering::SeqCst);
                    drop(handle.lock().unwrap().take());
                });
                assert!(!dropped.load(Ordering::SeqCst), "dropped under the outer call");
            })
        };
        assert_eq!(depth.load(Ordering::SeqCst), 2);
        assert!(dropped.load(Ordering::SeqCst));
    }

    #[test]
    fn panics_of_the_closure_and_of_its_drop_are_kept() {
        let panics = Arc::new(PanicLog::default());
        let captured = PanicOnDrop;
        let shell: Arc<Shell<Callback>> = Shell::new(
            Box::new(move |n| {
                let _ = &captured;
                if n == 0 {
                    panic!("zero");
                }
            }),
            panics.clone(),
        );
        let user_data = Shell::user_data(&shell);
        // SAFETY: `shell` is held across the call.
        unsafe { Shell::run(user_data, |f: &Callback| f(0)) };
        assert_eq!(panics.take(), vec!["zero".to_string()]);
        let handle = Mutex::new(Some(shell));
        // SAFETY: the handle's reference is held until the closure lets it go, inside the call.
        unsafe { Shell::run(user_data, |_: &Callback| drop(handle.lock().unwrap().take())) };
        assert_eq!(panics.take(), vec!["dropped".to_string()]);
    }
}
