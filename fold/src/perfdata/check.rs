//! Bounds checks on a perf.data header before `linux-perf-data` parses it.
//!
//! That parser allocates whatever the header's section sizes and counts say
//! (a flipped bit asks for petabytes and aborts the process), so every
//! length it will allocate from is checked here against the file size
//! first: the header's sections, the feature section table, and inside the
//! feature sections folding reads (event descriptions, host name, kernel
//! release, command line). Only little-endian files (`PERFILE2` as is) are
//! accepted, which is what [`crate::input::InputKind`] detects.
//!
//! In pipe mode the same feature sections come as records at the start of
//! the stream, which the parser reads before handing back control:
//! [`pipe_prefix`] reads and checks them first.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::input::PERF_DATA_MAGIC;

/// Size of the perf.data file header.
const HEADER: u64 = 104;
const FEAT_HOSTNAME: u32 = 2;
const FEAT_OSRELEASE: u32 = 3;
const FEAT_CMDLINE: u32 = 11;
const FEAT_EVENT_DESC: u32 = 12;
/// Smallest `perf_event_attr` (PERF_ATTR_SIZE_VER0).
const MIN_ATTR: u64 = 64;

fn u32_at(b: &[u8], at: u64) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// (offset, size) of a section that lies inside a file of `len` bytes.
fn section(b: &[u8], at: u64, len: u64) -> Result<(u64, u64), String> {
    let (off, size) = (u64_at(b, at), u64_at(b, at + 8));
    match (off, size) {
        (Some(o), Some(s)) if o.checked_add(s).is_some_and(|end| end <= len) => Ok((o, s)),
        _ => Err(format!(
            "section at header offset {at} lies outside the file"
        )),
    }
}

/// Checks the header (`head`: at least the first 104 bytes) and the feature
/// sections, read through `read_at(offset, size)`, of a file of `len` bytes.
pub(crate) fn check(
    head: &[u8],
    len: u64,
    mut read_at: impl FnMut(u64, u64) -> Option<Vec<u8>>,
) -> Result<(), String> {
    if head.get(..8) != Some(PERF_DATA_MAGIC.as_slice()) || len < HEADER {
        return Err("not a little-endian perf.data file".into());
    }
    let header_size = u64_at(head, 8).unwrap_or(0);
    if !(HEADER..=len).contains(&header_size) {
        return Err(format!("header size {header_size} is impossible"));
    }
    for at in [24, 40, 56] {
        section(head, at, len)?;
    }
    let (data_off, data_size) = section(head, 40, len)?;
    let mut features = Vec::new();
    for word in 0..4u32 {
        let bits = u64_at(head, 72 + 8 * u64::from(word)).unwrap_or(0);
        features.extend(
            (0..64)
                .filter(|i| bits & (1 << i) != 0)
                .map(|i| word * 64 + i),
        );
    }
    let table_at = data_off + data_size;
    let table_len = 16 * features.len() as u64;
    if !matches!(table_at.checked_add(table_len), Some(end) if end <= len) {
        return Err("feature table lies outside the file".into());
    }
    let table = read_at(table_at, table_len).ok_or("cannot read the feature table")?;
    if !features.contains(&FEAT_EVENT_DESC) {
        return Err("no event descriptions (written by a perf older than 3.x?)".into());
    }
    for (i, &feature) in features.iter().enumerate() {
        let (off, size) = section(&table, 16 * i as u64, len)?;
        let check: fn(&[u8]) -> bool = match feature {
            FEAT_EVENT_DESC => event_desc_ok,
            FEAT_HOSTNAME | FEAT_OSRELEASE => |s| string_ok(s, 0).is_some(),
            FEAT_CMDLINE => string_list_ok,
            _ => continue,
        };
        let data = read_at(off, size).ok_or("cannot read a feature section")?;
        if !check(&data) {
            return Err(format!("feature section {feature} is malformed"));
        }
    }
    Ok(())
}

/// Bytes of a pipe-mode stream's header (magic and header size) before
/// its first record.
pub(crate) const PIPE_HEADER: usize = 16;
/// Record types of the metadata at the start of a pipe-mode stream.
const PIPE_HEADER_ATTR: u32 = 64;
const PIPE_HEADER_FEATURE: u32 = 80;
/// Most bytes of metadata records read ahead of the first event (perf
/// writes a few KiB; a stream of nothing but metadata is not a profile).
const PIPE_PREFIX_MAX: usize = 16 << 20;

/// Reads the pipe header and the metadata records (attributes, feature
/// sections) that `linux-perf-data`'s `parse_pipe` will read, up to and
/// including the first other record, checking the feature sections it
/// parses. Returns the bytes read, to be handed to the parser in front of
/// the rest of the stream.
pub(crate) fn pipe_prefix(input: &mut impl Read) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0u8; PIPE_HEADER];
    input
        .read_exact(&mut bytes)
        .map_err(|_| "too short for a perf.data pipe header")?;
    loop {
        let at = bytes.len();
        bytes.resize(at + 8, 0);
        // A stream of metadata only ends here; the parser says what it lacks.
        if input.read_exact(&mut bytes[at..]).is_err() {
            bytes.truncate(at);
            return Ok(bytes);
        }
        let kind = u32_at(&bytes, at as u64).unwrap_or(0);
        let size = usize::from(u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]));
        if size < 8 {
            return Err(format!(
                "record at byte {at} has the impossible size {size}"
            ));
        }
        if at + size > PIPE_PREFIX_MAX {
            return Err("more than 16 MiB of metadata before the first event".into());
        }
        bytes.resize(at + size, 0);
        if input.read_exact(&mut bytes[at + 8..]).is_err() {
            return Err(format!("the stream ends inside the record at byte {at}"));
        }
        match kind {
            PIPE_HEADER_ATTR => {}
            PIPE_HEADER_FEATURE => {
                let body = &bytes[at + 8..];
                let feature = u64_at(body, 0).unwrap_or(u64::MAX);
                let data = body.get(8..).unwrap_or_default();
                let ok = match u32::try_from(feature) {
                    Ok(FEAT_EVENT_DESC) => event_desc_ok(data),
                    Ok(FEAT_HOSTNAME | FEAT_OSRELEASE) => string_ok(data, 0).is_some(),
                    Ok(FEAT_CMDLINE) => string_list_ok(data),
                    _ => true,
                };
                if !ok {
                    return Err(format!("feature record {feature} is malformed"));
                }
            }
            // The first event: the parser stops reading metadata here.
            _ => return Ok(bytes),
        }
    }
}

/// Follows the record framing of a pipe-mode stream as it is read (from
/// the first record, after the 16-byte pipe header), so that the end of the
/// stream can be told apart from a stream cut inside a record: the parser
/// takes both for the end.
pub(crate) struct Framer<R> {
    inner: R,
    /// The record header being read, and how much of it has come.
    header: [u8; 8],
    have: usize,
    /// Bytes of the current record's body still to come.
    body_left: usize,
    /// Set when the stream ended inside a record.
    cut: Arc<AtomicBool>,
}

impl<R: Read> Framer<R> {
    /// A framer over `inner`, which starts at a record; `cut` is set when it
    /// ends inside one.
    pub(crate) fn new(inner: R, cut: Arc<AtomicBool>) -> Self {
        Framer {
            inner,
            header: [0; 8],
            have: 0,
            body_left: 0,
            cut,
        }
    }

    fn follow(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len());
                self.body_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (8 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 8 {
                self.have = 0;
                let size = usize::from(u16::from_le_bytes([self.header[6], self.header[7]]));
                self.body_left = size.saturating_sub(8);
            }
        }
    }
}

impl<R: Read> Read for Framer<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() && (self.have > 0 || self.body_left > 0) {
            self.cut.store(true, Ordering::Relaxed);
        }
        self.follow(&buf[..n]);
        Ok(n)
    }
}

/// A `perf_header_string` at `at`: u32 length + bytes. Returns its end.
fn string_ok(s: &[u8], at: u64) -> Option<u64> {
    let n = u64::from(u32_at(s, at)?);
    let end = at.checked_add(4)?.checked_add(n)?;
    (end <= s.len() as u64).then_some(end)
}

fn string_list_ok(s: &[u8]) -> bool {
    let Some(n) = u32_at(s, 0) else { return false };
    if u64::from(n) > s.len() as u64 / 4 {
        return false;
    }
    let mut at = 4;
    for _ in 0..n {
        match string_ok(s, at) {
            Some(end) => at = end,
            None => return false,
        }
    }
    true
}

/// `nr`, `attr_size`, then per event: attr, u32 nr_ids, string, nr_ids × u64.
fn event_desc_ok(s: &[u8]) -> bool {
    let (Some(nr), Some(attr_size)) = (u32_at(s, 0), u32_at(s, 4)) else {
        return false;
    };
    let (nr, attr_size) = (u64::from(nr), u64::from(attr_size));
    let len = s.len() as u64;
    if attr_size < MIN_ATTR || nr == 0 || nr > len / (attr_size + 8) {
        return false;
    }
    let mut at = 8u64;
    for _ in 0..nr {
        let Some(ids_at) = at.checked_add(attr_size) else {
            return false;
        };
        let Some(nr_ids) = u32_at(s, ids_at) else {
            return false;
        };
        let Some(str_end) = string_ok(s, ids_at + 4) else {
            return false;
        };
        match str_end.checked_add(8 * u64::from(nr_ids)) {
            Some(end) if end <= len => at = end,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_lists_stay_inside() {
        assert_eq!(string_ok(b"\x02\0\0\0ab", 0), Some(6));
        assert_eq!(string_ok(b"\x03\0\0\0ab", 0), None);
        assert!(string_list_ok(b"\x01\0\0\0\x01\0\0\0a"));
        assert!(!string_list_ok(b"\xff\xff\xff\xff"));
    }

    #[test]
    fn event_desc_counts_are_bounded() {
        let mut s = vec![1, 0, 0, 0, 64, 0, 0, 0];
        s.extend([0u8; 64]);
        s.extend([1, 0, 0, 0]); // one id
        s.extend([2, 0, 0, 0, b'x', 0]);
        s.extend([7u8; 8]);
        assert!(event_desc_ok(&s));
        let mut big = s.clone();
        big[0] = 0xff;
        assert!(!event_desc_ok(&big));
        let mut ids = s.clone();
        ids[72] = 0xff;
        assert!(!event_desc_ok(&ids));
        assert!(!event_desc_ok(&s[..s.len() - 1]));
    }

    #[test]
    fn a_stream_cut_inside_a_record_is_told_from_its_end() {
        let record = |size: u16| {
            let mut r = vec![9, 0, 0, 0, 0, 0];
            r.extend(size.to_le_bytes());
            r.resize(usize::from(size), 7);
            r
        };
        let whole = [record(24), record(8), record(40)].concat();
        for (len, cut) in [
            (whole.len(), false),
            (whole.len() - 1, true),
            (30, true),
            (32, false),
        ] {
            let flag = Arc::new(AtomicBool::new(false));
            let mut f = Framer::new(&whole[..len], flag.clone());
            let mut out = Vec::new();
            f.read_to_end(&mut out).expect("read");
            assert_eq!(out.len(), len);
            assert_eq!(flag.load(Ordering::Relaxed), cut, "{len}");
        }
    }

    #[test]
    fn header_sections_must_fit() {
        let mut head = vec![0u8; 104];
        head[..8].copy_from_slice(PERF_DATA_MAGIC);
        head[8] = 104;
        assert!(
            check(&head, 104, |_, _| Some(Vec::new())).is_err(),
            "no event desc"
        );
        head[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(&head, 104, |_, _| Some(Vec::new())).is_err());
    }
}
