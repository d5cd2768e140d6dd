//! Bounds checks on a perf.data header before `linux-perf-data` parses it.
//!
//! That parser allocates whatever the header's section sizes and counts say
//! (a flipped bit asks for petabytes and aborts the process), so every
//! length it will allocate from is checked here against the file size
//! first: the header's sections, the feature section table, and inside the
//! feature sections folding reads (event descriptions, host name, kernel
//! release, command line). Only little-endian files (`PERFILE2` as is) are
//! accepted, which is what `crate::input::sniff` detects.

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
    if head.get(..8) != Some(b"PERFILE2".as_slice()) || len < HEADER {
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
    fn header_sections_must_fit() {
        let mut head = vec![0u8; 104];
        head[..8].copy_from_slice(b"PERFILE2");
        head[8] = 104;
        assert!(
            check(&head, 104, |_, _| Some(Vec::new())).is_err(),
            "no event desc"
        );
        head[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(&head, 104, |_, _| Some(Vec::new())).is_err());
    }
}
