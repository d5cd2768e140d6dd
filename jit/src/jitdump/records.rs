//! The bodies of the debug and unwinding records, parsed here rather
//! than by `linux-perf-data` (see the parent module): every count and
//! length is checked against what is left of the record before it is used.

use std::collections::HashMap;

/// A debug record waiting for its load: the code address and its
/// (address, line, file index) entries.
pub(super) type PendingLines = (u64, Vec<(u64, u32, u32)>);
/// An unwinding record waiting for its load: `.eh_frame`, `.eh_frame_hdr`.
pub(super) type Tables = (Vec<u8>, Option<Vec<u8>>);

/// A little-endian cursor that checks every length against what is left.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        let b = self.take(4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Some(u64::from_le_bytes(w))
    }
    fn cstr(&mut self) -> Option<&'a [u8]> {
        let n = self.0.iter().position(|&b| b == 0)?;
        let s = self.take(n)?;
        self.take(1)?;
        Some(s)
    }
}

/// A debug record: the code address and its (address, line, file) entries.
pub(super) fn parse_debug(
    body: &[u8],
    files: &mut Vec<String>,
    ids: &mut HashMap<String, u32>,
) -> Option<PendingLines> {
    const MIN_ENTRY: usize = 8 + 4 + 4 + 1;
    let mut c = Cursor(body);
    let code_addr = c.u64()?;
    let n = c.u64()?;
    // What the record can hold, whatever it claims.
    let n = usize::try_from(n).ok()?;
    if n > c.0.len() / MIN_ENTRY {
        return None;
    }
    let mut entries = Vec::with_capacity(n);
    let mut prev = None;
    for _ in 0..n {
        let addr = c.u64()?;
        let line = c.u32()?;
        let _column = c.u32()?;
        let name = c.cstr()?;
        // perf's convention: a name of the one byte 0xff repeats the
        // previous entry's.
        let file = if name == [0xff] {
            prev?
        } else {
            let name = String::from_utf8_lossy(name).into_owned();
            match ids.get(&name) {
                Some(&id) => id,
                None => {
                    let id = u32::try_from(files.len()).ok()?;
                    ids.insert(name.clone(), id);
                    files.push(name);
                    id
                }
            }
        };
        prev = Some(file);
        entries.push((addr, line, file));
    }
    Some((code_addr, entries))
}

/// An unwinding record: `Some(None)` when it carries no `.eh_frame` (V8
/// writes an empty one for code without tables), `None` when corrupt.
pub(super) fn parse_unwind(body: &[u8]) -> Option<Option<Tables>> {
    let mut c = Cursor(body);
    let size = usize::try_from(c.u64()?).ok()?;
    let hdr_size = usize::try_from(c.u64()?).ok()?;
    let _mapped_size = c.u64()?;
    let data = c.take(size)?;
    let table_len = size.checked_sub(hdr_size)?;
    let (eh_frame, hdr) = data.split_at(table_len);
    if eh_frame.is_empty() {
        return Some(None);
    }
    let hdr = (!hdr.is_empty()).then(|| hdr.to_vec());
    Some(Some((eh_frame.to_vec(), hdr)))
}
