//! The eval loop's cold part in a binary without a symbol table.
//!
//! GCC splits a function profiled as mostly cold (CPython's eval loop in
//! Debian's optimized builds: 0x950 bytes keep the exported symbol
//! `_PyEval_EvalFrameDefault`, 77 KB of opcode bodies go to
//! `_PyEval_EvalFrameDefault.cold`) into two parts; only the symbol table
//! names the cold one, and distributions strip it, keeping `.dynsym`. The
//! cold part is its own entry in `.eh_frame_hdr`'s table of function
//! starts, and the hot part reaches it by jumps only: every direct jump
//! (`jmp`/`jcc` rel32) of the hot part that leaves it lands there. When at
//! least [`MIN_JUMPS`] such jumps leave it and all land in one table entry,
//! that entry (up to the next one) is the cold part; anything else (jumps
//! to several functions: tail calls, or a stray byte pattern read as one)
//! finds none, and the binary's eval loop is its hot part alone, as
//! before. Measured on Debian sid's python3.13, 3.14 and 3.15: 12, 11 and
//! 13 jumps leave the hot part, all into the one 77–84 KB entry.
//!
//! Pure functions over bytes the caller read; every offset is checked.

use std::ops::Range;

/// The fewest jumps out of the hot part that name a cold part.
pub(crate) const MIN_JUMPS: usize = 4;

/// The start addresses of `.eh_frame_hdr`'s table, sorted, from the
/// section's bytes `hdr` at address `at`. Only the encodings every x86-64
/// linker writes are read (`eh_frame_ptr` pc-relative sdata4, the count
/// udata4, the table data-relative sdata4 pairs); others give `None`.
pub(crate) fn function_starts(hdr: &[u8], at: u64) -> Option<Vec<u64>> {
    let (&version, rest) = hdr.split_first()?;
    if version != 1 || rest.get(..3)? != [0x1b, 0x03, 0x3b] {
        return None;
    }
    let word = |i: usize| -> Option<[u8; 4]> { hdr.get(i..i.checked_add(4)?)?.try_into().ok() };
    let count = u32::from_le_bytes(word(8)?) as usize;
    // Each entry is 8 bytes: a count past what the section holds is corrupt.
    if count > hdr.len() / 8 {
        return None;
    }
    let mut starts = Vec::with_capacity(count);
    for i in 0..count {
        let loc = i32::from_le_bytes(word(12 + 8 * i)?);
        starts.push(at.checked_add_signed(i64::from(loc))?);
    }
    starts.sort_unstable();
    Some(starts)
}

/// Where the direct jumps in `code` (the hot part, at address `hot.start`)
/// that leave it land, within `text`.
fn jumps_out(code: &[u8], hot: &Range<u64>, text: &Range<u64>) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..code.len() {
        let (len, rel_at) = match (code[i], code.get(i + 1)) {
            (0xe9, _) => (5, i + 1),
            (0x0f, Some(0x80..=0x8f)) => (6, i + 2),
            _ => continue,
        };
        let Some(rel) = code.get(rel_at..rel_at + 4) else {
            continue;
        };
        let rel = i32::from_le_bytes(rel.try_into().unwrap_or_default());
        let target = hot
            .start
            .checked_add((i + len) as u64)
            .and_then(|next| next.checked_add_signed(i64::from(rel)));
        if let Some(t) = target.filter(|t| !hot.contains(t) && text.contains(t)) {
            out.push(t);
        }
    }
    out
}

/// The cold part of the function whose hot part is `code` at `hot`:
/// the one entry of `starts` (sorted function starts) that every jump out
/// lands in, up to the next entry (or `text`'s end).
pub(crate) fn cold_part(
    code: &[u8],
    hot: Range<u64>,
    text: Range<u64>,
    starts: &[u64],
) -> Option<Range<u64>> {
    let jumps = jumps_out(code, &hot, &text);
    if jumps.len() < MIN_JUMPS {
        return None;
    }
    let entry = |t: u64| starts.partition_point(|&s| s <= t).checked_sub(1);
    let first = entry(jumps[0])?;
    if jumps.iter().any(|&t| entry(t) != Some(first)) {
        return None;
    }
    let start = starts[first];
    let end = starts
        .get(first + 1)
        .copied()
        .unwrap_or(text.end)
        .min(text.end);
    (start < end && !(start..end).contains(&hot.start)).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(at: u64, starts: &[u64]) -> Vec<u8> {
        let mut b = vec![1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0];
        b.extend((starts.len() as u32).to_le_bytes());
        for &s in starts {
            b.extend(((s as i64 - at as i64) as i32).to_le_bytes());
            b.extend(0u32.to_le_bytes());
        }
        b
    }

    /// `jmp` and `jcc` rel32 from `at + pos` to each target.
    fn code_with_jumps(at: u64, len: usize, jumps: &[(usize, u64, bool)]) -> Vec<u8> {
        let mut c = vec![0x90u8; len];
        for &(pos, target, conditional) in jumps {
            let (op, n): (&[u8], usize) = if conditional {
                (&[0x0f, 0x85], 6)
            } else {
                (&[0xe9], 5)
            };
            let rel = (target as i64 - (at + (pos + n) as u64) as i64) as i32;
            c[pos..pos + op.len()].copy_from_slice(op);
            c[pos + op.len()..pos + n].copy_from_slice(&rel.to_le_bytes());
        }
        c
    }

    #[test]
    fn every_jump_out_into_one_entry_names_the_cold_part() {
        let text = 0x1000..0x9000;
        let starts = function_starts(&hdr(0x9000, &[0x2000, 0x1000, 0x5000, 0x6000]), 0x9000)
            .expect("the table");
        assert_eq!(starts, [0x1000, 0x2000, 0x5000, 0x6000]);
        let hot = 0x5000..0x5100;
        let into_cold: Vec<_> = (0..5)
            .map(|i| (i * 16, 0x2100 + i as u64, i % 2 == 0))
            .collect();
        let code = code_with_jumps(hot.start, 0x100, &into_cold);
        assert_eq!(
            cold_part(&code, hot.clone(), text.clone(), &starts),
            Some(0x2000..0x5000)
        );
        // A jump elsewhere too (a tail call): no cold part is claimed.
        let mut mixed = into_cold.clone();
        mixed.push((0x90, 0x6010, false));
        let code = code_with_jumps(hot.start, 0x100, &mixed);
        assert_eq!(cold_part(&code, hot.clone(), text.clone(), &starts), None);
        // Too few jumps, or jumps within the hot part only: none.
        let code = code_with_jumps(hot.start, 0x100, &into_cold[..3]);
        assert_eq!(cold_part(&code, hot.clone(), text.clone(), &starts), None);
        let inside: Vec<_> = (0..6).map(|i| (i * 16, 0x5080, false)).collect();
        let code = code_with_jumps(hot.start, 0x100, &inside);
        assert_eq!(cold_part(&code, hot, text, &starts), None);
    }

    #[test]
    fn torn_tables_are_refused() {
        assert_eq!(function_starts(&[], 0), None);
        assert_eq!(function_starts(&[2, 0x1b, 3, 0x3b], 0), None);
        assert_eq!(function_starts(&[1, 0x1b, 3, 0x3b, 0, 0, 0, 0], 0), None);
        let mut huge = hdr(0, &[0x10]);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(function_starts(&huge, 0), None);
        // A start below address 0 is corrupt.
        assert_eq!(function_starts(&hdr(0, &[]), 0), Some(Vec::new()));
    }
}
