//! The wall-clock path's stack capture: a real-time signal sent to a
//! stalled thread, whose handler copies the interrupted registers and a
//! fixed-size slice of the stack into a buffer made at registration, marks
//! it done and writes one byte to the detector's wake-up pipe.
//!
//! The handler runs only async-signal-safe code: atomics, `getpid`,
//! `gettid`, `write`, and a memcpy into memory allocated beforehand. It never
//! allocates, locks or panics. It finds its buffer through a fixed static
//! table keyed by thread id, so it needs no thread-local storage.
//!
//! Lifetimes: a buffer is published in the table while a [`WallSlot`] lives;
//! dropping the slot takes it out and waits until no handler is inside it,
//! so the memory is never freed under a running handler (a Dekker-style
//! handshake on `busy` and `capture`, all sequentially consistent).

use std::cell::UnsafeCell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Most threads one process may register for wall-clock detection at once.
pub(crate) const MAX_THREADS: usize = 256;
/// Bytes of stack the handler copies, from the stack pointer up.
pub(crate) const STACK_COPY: usize = 16 * 1024;

/// What the handler fills in.
struct CaptureData {
    /// bp, sp, ip of the interrupted code.
    regs: [u64; 3],
    /// Valid bytes of `stack`.
    len: usize,
    stack: [u8; STACK_COPY],
}

/// One thread's capture buffer, shared by the watcher and the handler.
pub(crate) struct Capture {
    /// The request the watcher wants answered.
    requested: AtomicU64,
    /// The last request the handler answered.
    done: AtomicU64,
    /// Where the handler announces an answer (a duplicate of the
    /// detector's pipe, so it stays open as long as this buffer).
    wake: OwnedFd,
    /// The thread's stack mapping: the handler copies only inside it.
    stack_lo: u64,
    stack_hi: u64,
    data: UnsafeCell<CaptureData>,
}

// SAFETY: `data` is written only by the handler while `requested != done`
// and read only by the watcher once `done == requested` (acquire), before it
// makes another request; the other fields are atomics or immutable.
unsafe impl Sync for Capture {}
// SAFETY: as above; nothing in it is tied to a thread.
unsafe impl Send for Capture {}

impl Capture {
    /// A buffer for a thread whose stack mapping is `stack_lo..stack_hi`.
    pub(crate) fn new(wake: OwnedFd, stack_lo: u64, stack_hi: u64) -> Arc<Self> {
        Arc::new(Capture {
            requested: AtomicU64::new(0),
            done: AtomicU64::new(0),
            wake,
            stack_lo,
            stack_hi,
            data: UnsafeCell::new(CaptureData {
                regs: [0; 3],
                len: 0,
                stack: [0; STACK_COPY],
            }),
        })
    }

    /// Asks for a new capture (the signal is sent separately); returns
    /// whether the previous one had been answered.
    pub(crate) fn request(&self) -> bool {
        let done = self.done.load(Ordering::Acquire);
        let req = self.requested.load(Ordering::Relaxed);
        self.requested.store(req.wrapping_add(1), Ordering::Release);
        req == done
    }

    /// The answered capture, if the last request has one: (bp, sp, ip) and
    /// the stack bytes from sp up.
    pub(crate) fn take(&self) -> Option<([u64; 3], Vec<u8>)> {
        let req = self.requested.load(Ordering::Relaxed);
        if req == 0 || self.done.load(Ordering::Acquire) != req {
            return None;
        }
        // SAFETY: done == requested, so the handler will not write `data`
        // until this (the only requesting) thread asks again; the acquire
        // load above orders the handler's writes before these reads.
        let d = unsafe { &*self.data.get() };
        let len = d.len.min(STACK_COPY);
        Some((d.regs, d.stack[..len].to_vec()))
    }
}

struct Entry {
    /// 0: free; u32::MAX: being filled; else the thread id.
    tid: AtomicU32,
    /// A handler is looking at this entry.
    busy: AtomicBool,
    capture: AtomicPtr<Capture>,
}

impl Entry {
    const fn new() -> Self {
        Entry {
            tid: AtomicU32::new(0),
            busy: AtomicBool::new(false),
            capture: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

static TABLE: [Entry; MAX_THREADS] = [const { Entry::new() }; MAX_THREADS];

/// A capture buffer published for a thread; unpublished on drop.
pub(crate) struct WallSlot {
    index: usize,
    capture: Arc<Capture>,
}

impl WallSlot {
    /// Publishes `capture` for thread `tid`; `None` when the table is full.
    pub(crate) fn publish(tid: u32, capture: Arc<Capture>) -> Option<Self> {
        let index = TABLE.iter().position(|e| {
            e.tid
                .compare_exchange(0, u32::MAX, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        })?;
        let e = &TABLE[index];
        e.capture
            .store(Arc::as_ptr(&capture).cast_mut(), Ordering::SeqCst);
        e.tid.store(tid, Ordering::SeqCst);
        Some(WallSlot { index, capture })
    }

    /// The published buffer.
    pub(crate) fn capture(&self) -> &Capture {
        &self.capture
    }
}

impl Drop for WallSlot {
    fn drop(&mut self) {
        let e = &TABLE[self.index];
        e.capture.store(ptr::null_mut(), Ordering::SeqCst);
        // A handler that set `busy` before we cleared `capture` may still be
        // copying; one that sets it later sees null. Handlers are short.
        while e.busy.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        e.tid.store(0, Ordering::SeqCst);
    }
}

/// Why the capture signal cannot be used.
#[derive(Debug)]
pub(crate) enum InstallError {
    /// The program already handles (or ignores) this signal.
    InUse,
    /// sigaction failed.
    Os(io::Error),
}

/// Installs the capture handler for `sig`, unless something else owns it.
/// The handler stays installed for the life of the process: a signal may
/// still be pending when a detector stops.
pub(crate) fn install(sig: i32) -> Result<(), InstallError> {
    let ours = handler as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
        as libc::sighandler_t;
    // SAFETY: an all-zero sigaction is a valid value to be overwritten.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: queries the current action into a valid, writable struct.
    if unsafe { libc::sigaction(sig, ptr::null(), &mut old) } < 0 {
        return Err(InstallError::Os(io::Error::last_os_error()));
    }
    if old.sa_sigaction == ours {
        return Ok(());
    }
    if old.sa_sigaction != libc::SIG_DFL {
        return Err(InstallError::InUse);
    }
    // SAFETY: as above.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = ours;
    // SA_RESTART: a blocking read interrupted for a capture goes on.
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    // SAFETY: `act.sa_mask` is a valid sigset_t to initialize.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: `act` is fully initialized and names a handler with the
    // SA_SIGINFO signature.
    if unsafe { libc::sigaction(sig, &act, ptr::null_mut()) } < 0 {
        return Err(InstallError::Os(io::Error::last_os_error()));
    }
    Ok(())
}

extern "C" fn handler(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local and always addressable; `write` below
    // may change it, and the interrupted code must not see that.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes valid siginfo and ucontext pointers to an
    // SA_SIGINFO handler; both are only read.
    unsafe { on_signal(&*info, ctx.cast::<libc::ucontext_t>()) };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// # Safety
/// `ctx` must be the ucontext the kernel passed to this signal handler.
unsafe fn on_signal(info: &libc::siginfo_t, ctx: *const libc::ucontext_t) {
    // Only our own tgkill: another sender's signal is ignored.
    // SAFETY: si_pid is valid for SI_TKILL signals, checked first.
    if info.si_code != libc::SI_TKILL || unsafe { info.si_pid() } != std::process::id() as i32 {
        return;
    }
    let me = super::gettid();
    let Some(e) = TABLE.iter().find(|e| e.tid.load(Ordering::SeqCst) == me) else {
        return;
    };
    e.busy.store(true, Ordering::SeqCst);
    let p = e.capture.load(Ordering::SeqCst);
    // Checked after loading the pointer: an entry handed to another thread
    // meanwhile carries that thread's id.
    if !p.is_null() && e.tid.load(Ordering::SeqCst) == me {
        // SAFETY: a published pointer stays valid while `busy` is set (see
        // WallSlot::drop); `ctx` is the kernel's ucontext (caller's contract).
        unsafe { fill(&*p, ctx) };
    }
    e.busy.store(false, Ordering::SeqCst);
}

/// # Safety
/// `ctx` must be the ucontext of the interrupted code on this thread.
unsafe fn fill(c: &Capture, ctx: *const libc::ucontext_t) {
    let want = c.requested.load(Ordering::Acquire);
    if want == c.done.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: `ctx` is valid (caller's contract); gregs is plain data.
    let g = unsafe { &(*ctx).uc_mcontext.gregs };
    let reg = |i: libc::c_int| g[i as usize] as u64;
    let (ip, sp, bp) = (reg(libc::REG_RIP), reg(libc::REG_RSP), reg(libc::REG_RBP));
    let len = if sp >= c.stack_lo && sp < c.stack_hi {
        ((c.stack_hi - sp) as usize).min(STACK_COPY)
    } else {
        // Not on the stack registered (an alternate or green-thread
        // stack): the watcher reads it with process_vm_readv, which cannot fault.
        0
    };
    // SAFETY: the watcher does not read `data` while requested != done.
    let d = unsafe { &mut *c.data.get() };
    d.regs = [bp, sp, ip];
    d.len = len;
    // SAFETY: sp..sp+len lies inside this thread's mapped stack (checked
    // above) and above the interrupted stack pointer, which the handler's
    // own frames never overlap; the destination holds STACK_COPY bytes.
    unsafe { ptr::copy_nonoverlapping(sp as usize as *const u8, d.stack.as_mut_ptr(), len) };
    c.done.store(want, Ordering::Release);
    let b = 1u8;
    // SAFETY: write(2) is async-signal-safe; `wake` is open while `c` lives.
    unsafe { libc::write(c.wake.as_raw_fd(), (&b as *const u8).cast(), 1) };
}
