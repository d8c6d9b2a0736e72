//! Running out of memory as an error, not an abort (issue 54). Rust's default answer to a
//! failed allocation is "memory allocation of N bytes failed" and SIGABRT (exit 134), which
//! leaves the run's staging folder behind. [`ExitOnOutOfMemory`], the binary's global
//! allocator, hands each failed allocation to the process's handler instead (one line,
//! unfinished output removed, exit 2). Code that can handle a failed allocation itself
//! (`try_reserve` of an input's bytes) asks for it inside [`fallible`].
//!
//! A run sized past the memory it has is refused before it starts (the schedule's check);
//! this is the backstop for what that estimate does not see.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};

/// What the process does with an allocation of `bytes` that failed: never returns.
pub type Handler = fn(bytes: usize) -> !;

static HANDLER: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// Whether this thread's current allocations may fail (inside [`fallible`]).
    static FALLIBLE: Cell<bool> = const { Cell::new(false) };
}

/// Sets the handler of failed allocations (the binary's, once at start).
pub fn on_out_of_memory(handler: Handler) {
    HANDLER.store(handler as *mut (), Ordering::SeqCst);
}

/// Runs `f` with its failed allocations returned to it (as `try_reserve`'s error) rather
/// than handed to the handler.
pub fn fallible<T>(f: impl FnOnce() -> T) -> T {
    let before = FALLIBLE.with(|c| c.replace(true));
    let out = f();
    FALLIBLE.with(|c| c.set(before));
    out
}

/// The system allocator, with failed allocations handed to the process's handler.
pub struct ExitOnOutOfMemory;

/// `ptr`, or the handler's end when it is null and the caller did not ask for [`fallible`].
fn checked(ptr: *mut u8, bytes: usize) -> *mut u8 {
    if !ptr.is_null() || FALLIBLE.with(|c| c.get()) {
        return ptr;
    }
    let handler = HANDLER.load(Ordering::SeqCst);
    if handler.is_null() {
        return ptr; // no handler: Rust's own answer
    }
    // SAFETY: only `on_out_of_memory` stores here, and it stores a `Handler`
    let handler: Handler = unsafe { std::mem::transmute::<*mut (), Handler>(handler) };
    handler(bytes)
}

// SAFETY: every call is forwarded to `System` unchanged; a null result either goes back to
// the caller or ends the process (the handler never returns).
unsafe impl GlobalAlloc for ExitOnOutOfMemory {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        checked(System.alloc(layout), layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        checked(System.alloc_zeroed(layout), layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        checked(System.realloc(ptr, layout, new_size), new_size)
    }
}
