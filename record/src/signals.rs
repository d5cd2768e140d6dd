//! The signals of a recording: SIGINT and SIGTERM noted for the loop, and
//! those and SIGCHLD waking it at once through a socket; unregistered when
//! the recording ends.

use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::RecordError;

/// Signal handlers of a recording, unregistered when it ends (also on an
/// error).
pub(crate) struct Signals {
    /// The last SIGINT or SIGTERM received, 0 when none since last read.
    pub(crate) flag: Arc<AtomicUsize>,
    /// Signals and the command's exit wake the loop through this socket at
    /// once, instead of after the poll timeout.
    pub(crate) wake: UnixStream,
    ids: Vec<signal_hook::SigId>,
}

impl Signals {
    pub(crate) fn register() -> Result<Signals, RecordError> {
        let flag = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            if let Ok(id) = signal_hook::flag::register_usize(s, Arc::clone(&flag), s as usize) {
                ids.push(id);
            }
        }
        let (wake_rx, wake_tx) =
            UnixStream::pair().map_err(|e| RecordError::sys("creating a wake-up socket", e))?;
        let _ = wake_rx.set_nonblocking(true);
        for s in [
            signal_hook::consts::SIGCHLD,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ] {
            if let Ok(tx) = wake_tx.try_clone() {
                if let Ok(id) = signal_hook::low_level::pipe::register(s, tx) {
                    ids.push(id);
                }
            }
        }
        Ok(Signals {
            flag,
            wake: wake_rx,
            ids,
        })
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
