//! The output file, written by a thread of its own.
//!
//! A `write` into the page cache is usually a copy, but on a busy file
//! system it can wait for the journal (ext4 commits, online discard) for
//! tens of milliseconds. The draining thread must not wait there: at
//! 4999 Hz with 60 KiB stack copies a ring of 16 MiB holds about 50 ms of
//! one CPU's samples. So the drain hands each flushed chunk to this thread
//! and goes back to the rings.
//!
//! The queue is bounded (`QUEUE_CHUNKS` chunks of at most a few MiB), so a
//! disk slower than the recording for long makes the drain wait rather than
//! grow memory without bound. A write error is kept and returned by the
//! next `flush` or by [`Spool::close`]; nothing after it is written.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Chunks that may wait for the disk before the drain waits too.
const QUEUE_CHUNKS: usize = 32;

/// Buffered bytes handed to the thread without a `flush`.
const HAND_OVER_BYTES: usize = 4 << 20;

/// A `Write` whose bytes reach the file on another thread.
pub(crate) struct Spool {
    buf: Vec<u8>,
    tx: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<io::Result<()>>>,
    failed: Arc<Mutex<Option<io::ErrorKind>>>,
}

impl Spool {
    pub(crate) fn new(mut file: File) -> io::Result<Spool> {
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_CHUNKS);
        let failed = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&failed);
        let thread = std::thread::Builder::new()
            .name("flamerec-spool".into())
            .spawn(move || {
                for chunk in rx {
                    if let Err(e) = file.write_all(&chunk) {
                        if let Ok(mut f) = seen.lock() {
                            *f = Some(e.kind());
                        }
                        return Err(e);
                    }
                }
                Ok(())
            })?;
        Ok(Spool {
            buf: Vec::new(),
            tx: Some(tx),
            thread: Some(thread),
            failed,
        })
    }

    /// Writes what is queued, waits for the thread and returns its first error.
    pub(crate) fn close(mut self) -> io::Result<()> {
        let handed = self.hand_over();
        // The thread's own error says more than "writing failed" does.
        self.finish().and(handed)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.tx = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the thread writing the output panicked")),
            None => Ok(()),
        }
    }

    fn earlier_error(&self) -> io::Result<()> {
        match self.failed.lock().ok().and_then(|f| *f) {
            Some(kind) => Err(io::Error::new(kind, "writing the output failed")),
            None => Ok(()),
        }
    }

    fn hand_over(&mut self) -> io::Result<()> {
        self.earlier_error()?;
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.buf);
        let sent = self.tx.as_ref().map(|tx| tx.send(chunk));
        match sent {
            Some(Ok(())) => Ok(()),
            // The thread ended: it failed; its error says why.
            _ => match self.finish() {
                Err(e) => Err(e),
                Ok(()) => Err(io::Error::other("the thread writing the output ended")),
            },
        }
    }
}

impl Write for Spool {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= HAND_OVER_BYTES {
            self.hand_over()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        // An error path: write what was handed over so far (the recording
        // stays readable up to its last whole chunk).
        let _ = self.hand_over();
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_reach_the_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut s = Spool::new(File::create(&path).unwrap()).unwrap();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let piece = vec![i as u8; 100_000 + i as usize];
            s.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
            if i % 7 == 0 {
                s.flush().unwrap();
            }
        }
        s.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    #[test]
    fn a_write_error_is_returned_not_lost() {
        // /dev/full refuses every write with ENOSPC.
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            panic!("/dev/full is needed for this test (a Linux device)");
        };
        let mut s = Spool::new(full).unwrap();
        s.write_all(b"chunk").unwrap();
        // The thread may not have written yet when flush returns; close waits.
        let _ = s.flush();
        let e = s.close().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
    }
}
