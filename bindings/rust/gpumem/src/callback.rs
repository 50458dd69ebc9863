//! What keeps Rust panics from unwinding into C, and closures alive exactly as long as the library
//! may call them: every function the library calls back runs its Rust code through [`guarded`],
//! a [`Shell`] or `catch_unwind` directly, and records what it caught.

use crate::error::Status;
use crate::sys;
use std::any::Any;
use std::cell::RefCell;
use std::mem;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

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

thread_local! {
    /// The shells whose closure runs on this thread, innermost last: each shell's address, and the
    /// address of the `&F` that the frame holding its read lock lent the closure through.
    static RUNNING: RefCell<Vec<(usize, *const ())>> = const { RefCell::new(Vec::new()) };
}

/// Takes this thread's entry for a shell off `RUNNING`, on return or unwind alike.
struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        let _ = RUNNING.try_with(|running| running.borrow_mut().pop());
    }
}

/// What the library keeps as a callback's `user_data`: the closure, until it is removed. The
/// library may still run a callback after removing it (a call that started before), so the shell
/// outlives the removal and the closure does not: a call that comes late finds nothing to run.
/// Calls hold the read lock while the closure runs, and the removal takes the closure under the
/// write lock, so it waits for calls running on other threads. A closure may remove itself (a
/// hook dropping its own [`Hook`](crate::Hook)): the write lock would wait for this very call, so
/// the closure is dropped once its outermost call on this thread has returned.
pub(crate) struct Shell<F: ?Sized> {
    closure: RwLock<Option<Box<F>>>,
    /// Removed from inside a call of its own: the call that returns last on that thread drops it.
    removed_while_running: AtomicBool,
    panics: Arc<PanicLog>,
}

impl<F: ?Sized> Shell<F> {
    pub(crate) fn new(closure: Box<F>, panics: Arc<PanicLog>) -> Shell<F> {
        Shell {
            closure: RwLock::new(Some(closure)),
            removed_while_running: AtomicBool::new(false),
            panics,
        }
    }

    pub(crate) fn panics(&self) -> &PanicLog {
        &self.panics
    }

    fn id(&self) -> usize {
        self as *const Shell<F> as *const () as usize
    }

    /// The closure lent by a call of this shell further up this thread's stack, if one is running.
    fn running_here(&self) -> Option<*const ()> {
        let id = self.id();
        // No thread-local left (the thread is ending): nothing of this crate's runs further up.
        RUNNING
            .try_with(|running| {
                running
                    .borrow()
                    .iter()
                    .rev()
                    .find(|entry| entry.0 == id)
                    .map(|entry| entry.1)
            })
            .unwrap_or(None)
    }

    /// Calls `call` with the closure, unless it has been removed; a panic is caught and kept. Never
    /// unwinds, so it may run in a function called from C.
    pub(crate) fn run(&self, call: impl FnOnce(&F)) {
        if let Some(lent) = self.running_here() {
            // The closure calls gpumem, which calls it again on this thread. Another read lock could
            // wait behind a writer that waits for the outer one; the outer call's lends it instead.
            // SAFETY: `lent` is the `&F` of the frame above that holds the read lock, a shell of the
            // same type (one address, one shell), and it stays there until this call returns.
            let closure: &F = unsafe { *(lent as *const &F) };
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| call(closure))) {
                self.panics.push(payload);
            }
            return;
        }
        {
            let guard = self.closure.read().unwrap_or_else(PoisonError::into_inner);
            let closure: &F = match guard.as_deref() {
                Some(closure) => closure,
                None => return,
            };
            let entry = (self.id(), &closure as *const &F as *const ());
            let registered = RUNNING.try_with(|running| running.borrow_mut().push(entry)).is_ok();
            let _running = if registered { Some(Running) } else { None };
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| call(closure))) {
                self.panics.push(payload);
            }
        }
        if self.removed_while_running.load(Ordering::SeqCst) && self.running_here().is_none() {
            self.removed_while_running.store(false, Ordering::SeqCst);
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| self.clear())) {
                self.panics.push(payload);
            }
        }
    }

    /// Drops the closure, once the library can no longer start a call of it: after the removal.
    /// Waits for its calls on other threads; from inside one of its own calls, leaves it to that call.
    pub(crate) fn clear(&self) {
        if self.running_here().is_some() {
            self.removed_while_running.store(true, Ordering::SeqCst);
            return;
        }
        let closure = self.closure.write().unwrap_or_else(PoisonError::into_inner).take();
        // Dropped with no lock held: its captures may call back into this crate.
        drop(closure);
    }

    /// Whether the closure is gone.
    #[cfg(test)]
    pub(crate) fn is_clear(&self) -> bool {
        self.closure.read().unwrap_or_else(PoisonError::into_inner).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    type Callback = dyn Fn(usize) + Send + Sync;

    /// Sets its flag when dropped.
    struct DropFlag(Arc<AtomicBool>);

    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_cleared_shell_runs_nothing_and_drops_its_closure() {
        let dropped = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let (flag, counter) = (DropFlag(dropped.clone()), calls.clone());
        let shell: Shell<Callback> = Shell::new(
            Box::new(move |n| {
                let _ = &flag;
                counter.fetch_add(n, Ordering::SeqCst);
            }),
            Arc::default(),
        );
        shell.run(|f| f(2));
        shell.clear();
        assert!(dropped.load(Ordering::SeqCst));
        shell.run(|f| f(5));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_closure_may_clear_its_own_shell_and_is_dropped_when_its_call_returns() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        let shell: Arc<Shell<Callback>> = Arc::new(Shell::new(
            Box::new(move |_| {
                let _ = &flag;
            }),
            Arc::default(),
        ));
        let seen_inside = AtomicBool::new(true);
        shell.run(|f| {
            f(0);
            shell.clear();
            seen_inside.store(dropped.load(Ordering::SeqCst), Ordering::SeqCst);
        });
        assert!(!seen_inside.load(Ordering::SeqCst), "dropped while running");
        assert!(dropped.load(Ordering::SeqCst) && shell.is_clear());
    }

    #[test]
    fn a_call_from_inside_a_call_reuses_the_outer_lock() {
        let shell: Arc<Shell<Callback>> = Arc::new(Shell::new(Box::new(|_| {}), Arc::default()));
        let depth = AtomicUsize::new(0);
        shell.run(|_| {
            depth.fetch_add(1, Ordering::SeqCst);
            shell.run(|_| {
                depth.fetch_add(1, Ordering::SeqCst);
                shell.clear();
            });
            assert!(!shell.is_clear(), "cleared under the outer call");
        });
        assert_eq!(depth.load(Ordering::SeqCst), 2);
        assert!(shell.is_clear());
    }

    #[test]
    fn a_panic_is_kept_and_clearing_waits_for_other_threads() {
        let panics = Arc::new(PanicLog::default());
        let shell: Arc<Shell<Callback>> = Arc::new(Shell::new(
            Box::new(|n| {
                if n == 0 {
                    panic!("zero");
                }
                std::thread::sleep(std::time::Duration::from_millis(n as u64));
            }),
            panics.clone(),
        ));
        shell.run(|f| f(0));
        assert_eq!(panics.take(), vec!["zero".to_string()]);
        let (started, finished) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (runner, start, finish) = (shell.clone(), started.clone(), finished.clone());
        let thread = std::thread::spawn(move || {
            runner.run(|f| {
                start.store(true, Ordering::SeqCst);
                f(200);
                finish.store(true, Ordering::SeqCst);
            })
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        shell.clear();
        assert!(finished.load(Ordering::SeqCst), "the closure was dropped while it ran");
        assert!(shell.is_clear());
        thread.join().unwrap();
    }
}
