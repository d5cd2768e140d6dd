//! Code objects as a reader sees them: their names (`co_qualname` where
//! the version has it, else `co_name`), file and first line, and the line
//! an instruction offset is on, decoded from the version's line table.
//! Strings are CPython's compact `str` objects; anything else (a legacy
//! string, a length past [`MAX_STR`]) is not a name this crate reads.

use std::io;

use crate::layout::{FrameModel, Layout, BYTES_DATA, OB_SIZE, STR_LENGTH, STR_STATE};
use crate::memory::Memory;

/// Longest name or file name read, in code points.
pub const MAX_STR: u64 = 4096;
/// Largest line table read, in bytes.
pub const MAX_LINETABLE: u64 = 1 << 20;

/// What a code object says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_qualname` (`Class.method`; 3.11+), else `co_name`.
    pub name: String,
    /// `co_filename`.
    pub file: String,
    /// `co_firstlineno`.
    pub first_line: i32,
    /// The line table's bytes (`co_lnotab` or `co_linetable`).
    pub linetable: Vec<u8>,
}

impl CodeInfo {
    /// Reads the code object at `code`.
    pub fn read(mem: &dyn Memory, layout: &Layout, code: u64) -> io::Result<CodeInfo> {
        let name_at = layout.code_qualname.unwrap_or(layout.code_name);
        let name = read_str(mem, layout, mem.u64(code.wrapping_add(name_at))?)?;
        let file = read_str(
            mem,
            layout,
            mem.u64(code.wrapping_add(layout.code_filename))?,
        )?;
        let first_line = mem.i32(code.wrapping_add(layout.code_firstlineno))?;
        let linetable = read_bytes(mem, mem.u64(code.wrapping_add(layout.code_linetable))?)?;
        Ok(CodeInfo {
            name,
            file,
            first_line,
            linetable,
        })
    }

    /// The line of instruction `offset` (bytes for 3.8/3.9, code units
    /// from 3.10 on, as [`crate::PyFrame::instr`] holds it); `None` where
    /// the table says the instruction has no line.
    pub fn line(&self, layout: &Layout, offset: i64) -> Option<i32> {
        match layout.model {
            FrameModel::Objects {
                lasti_in_units: false,
            } => Some(line_lnotab(&self.linetable, self.first_line, offset)),
            FrameModel::Objects {
                lasti_in_units: true,
            } => line_310(&self.linetable, self.first_line, offset.saturating_mul(2)),
            _ => line_311(&self.linetable, self.first_line, offset),
        }
    }
}

/// What a `str` object's state word says (`PyASCIIObject.state`).
struct StrState {
    /// Bytes per code point: 1, 2 or 4.
    kind: u64,
    compact: bool,
    ascii: bool,
}

impl StrState {
    fn of(state: u32) -> StrState {
        StrState {
            kind: u64::from((state >> 2) & 7),
            compact: state & (1 << 5) != 0,
            ascii: state & (1 << 6) != 0,
        }
    }
}

/// A compact ASCII `str` captured as the walker program reads one: its
/// header (the object's bytes from [`STR_LENGTH`] on: length, hash,
/// state) and its characters up to their NUL. `None` unless it is one and
/// every character was captured.
pub fn captured_str(header: &[u8], chars: &[u8]) -> Option<String> {
    let word = |at: u64| -> Option<[u8; 8]> {
        let at = usize::try_from(at - STR_LENGTH).ok()?;
        header.get(at..at + 8)?.try_into().ok()
    };
    let length = u64::from_le_bytes(word(STR_LENGTH)?);
    let state = word(STR_STATE)?;
    let state = StrState::of(u32::from_le_bytes([state[0], state[1], state[2], state[3]]));
    let end = chars.iter().position(|&b| b == 0)?;
    if !(state.compact && state.ascii) || length != end as u64 {
        return None;
    }
    std::str::from_utf8(&chars[..end]).ok().map(str::to_string)
}

/// A compact `str` object at `addr`.
pub fn read_str(mem: &dyn Memory, layout: &Layout, addr: u64) -> io::Result<String> {
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{what} at {addr:#x}"));
    if addr == 0 {
        return Err(bad("no string"));
    }
    let length = mem.u64(addr.wrapping_add(STR_LENGTH))?;
    let mut state = [0; 4];
    mem.read(addr.wrapping_add(STR_STATE), &mut state)?;
    let StrState {
        kind,
        compact,
        ascii,
    } = StrState::of(u32::from_le_bytes(state));
    if !compact || length > MAX_STR || !matches!(kind, 1 | 2 | 4) {
        return Err(bad("not a compact string"));
    }
    if ascii {
        let mut b = vec![0; length as usize];
        mem.read(addr.wrapping_add(layout.ascii_data), &mut b)?;
        return String::from_utf8(b).map_err(|_| bad("not ASCII"));
    }
    let mut b = vec![0; (length * kind) as usize];
    mem.read(addr.wrapping_add(layout.compact_data), &mut b)?;
    let chars: Vec<u32> = match kind {
        1 => b.iter().map(|&c| u32::from(c)).collect(),
        2 => b
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    Ok(chars
        .into_iter()
        .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect())
}

/// The contents of a `bytes` object at `addr`, at most [`MAX_LINETABLE`].
fn read_bytes(mem: &dyn Memory, addr: u64) -> io::Result<Vec<u8>> {
    let n = mem.u64(addr.wrapping_add(OB_SIZE))?;
    if n > MAX_LINETABLE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line table of {n} bytes at {addr:#x}"),
        ));
    }
    let mut b = vec![0; n as usize];
    mem.read(addr.wrapping_add(BYTES_DATA), &mut b)?;
    Ok(b)
}

/// 3.8, 3.9: `co_lnotab`, pairs of (bytecode offset increment, signed line
/// increment); `offset` in bytes.
fn line_lnotab(table: &[u8], first: i32, offset: i64) -> i32 {
    let (mut line, mut pc) = (first, 0i64);
    for pair in table.chunks_exact(2) {
        pc += i64::from(pair[0]);
        if pc > offset {
            break;
        }
        // A torn table or first line wraps into a wrong line, never a panic.
        line = line.wrapping_add(i32::from(pair[1] as i8));
    }
    line
}

/// 3.10: `co_linetable`, pairs of (bytes covered, signed line increment;
/// −128: no line); `offset` in bytes.
fn line_310(table: &[u8], first: i32, offset: i64) -> Option<i32> {
    if offset < 0 {
        return Some(first);
    }
    let (mut line, mut start) = (first, 0i64);
    for pair in table.chunks_exact(2) {
        let delta = pair[1] as i8;
        let here = (delta != -128).then(|| {
            line = line.wrapping_add(i32::from(delta));
            line
        });
        let end = start + i64::from(pair[0]);
        if (start..end).contains(&offset) {
            return here;
        }
        start = end;
    }
    None
}

/// 3.11+: the location table; `index` in code units. Each entry starts
/// with a byte whose top bit is set: bits 3–6 the entry's form, bits 0–2
/// its length in code units less one.
fn line_311(table: &[u8], first: i32, index: i64) -> Option<i32> {
    if index < 0 {
        return Some(first);
    }
    let mut at = 0;
    let mut next = || -> Option<u8> {
        let b = *table.get(at)?;
        at += 1;
        Some(b)
    };
    let (mut line, mut start) = (first, 0i64);
    loop {
        let head = next()?;
        if head & 0x80 == 0 {
            return None;
        }
        let form = (head >> 3) & 15;
        let length = i64::from(head & 7) + 1;
        let here = match form {
            15 => None,
            14 => {
                line = line.checked_add(svarint(&mut next)?)?;
                for _ in 0..3 {
                    varint(&mut next)?;
                }
                Some(line)
            }
            13 => {
                line = line.checked_add(svarint(&mut next)?)?;
                Some(line)
            }
            10..=12 => {
                line = line.checked_add(i32::from(form - 10))?;
                next()?;
                next()?;
                Some(line)
            }
            _ => {
                next()?;
                Some(line)
            }
        };
        if (start..start + length).contains(&index) {
            return here;
        }
        start += length;
    }
}

fn varint(next: &mut impl FnMut() -> Option<u8>) -> Option<u32> {
    let mut b = next()?;
    let mut v = u32::from(b & 63);
    let mut shift = 0;
    while b & 64 != 0 {
        b = next()?;
        shift += 6;
        if shift > 30 {
            return None;
        }
        v |= u32::from(b & 63) << shift;
    }
    Some(v)
}

fn svarint(next: &mut impl FnMut() -> Option<u8>) -> Option<i32> {
    let v = varint(next)?;
    let magnitude = (v >> 1) as i32;
    Some(if v & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_lines_by_byte_offset() {
        // Lines 10 (bytes 0–5), 12 (6–9), 11 (10–).
        let t = [6, 2, 4, 0xff];
        assert_eq!(line_lnotab(&t, 10, -1), 10);
        assert_eq!(line_lnotab(&t, 10, 5), 10);
        assert_eq!(line_lnotab(&t, 10, 6), 12);
        assert_eq!(line_lnotab(&t, 10, 12), 11);
    }

    #[test]
    fn linetable_310_ranges_and_no_line() {
        // Bytes 0–3 line 5, 4–5 no line, 6–9 line 7.
        let t = [4, 0, 2, 0x80, 4, 2];
        assert_eq!(line_310(&t, 5, 0), Some(5));
        assert_eq!(line_310(&t, 5, 4), None);
        assert_eq!(line_310(&t, 5, 8), Some(7));
        assert_eq!(line_310(&t, 5, 10), None);
        assert_eq!(line_310(&t, 5, -2), Some(5));
    }

    #[test]
    fn location_table_311_forms() {
        let t = [
            0x80 | (13 << 3) | 1, // no-column form, 2 units, line +1 (svarint 2)
            2,
            0x80 | (11 << 3), // one-line form, 1 unit, line +1, two column bytes
            0,
            4,
            0x80 | (15 << 3) | 2, // no location, 3 units
            0x80 | (14 << 3),     // long form, 1 unit, line −3 (svarint 7), three varints
            7,
            0,
            1,
            1,
            0x80 | (5 << 3), // short form, 1 unit, same line, one byte
            0,
        ];
        assert_eq!(line_311(&t, 20, 0), Some(21));
        assert_eq!(line_311(&t, 20, 1), Some(21));
        assert_eq!(line_311(&t, 20, 2), Some(22));
        assert_eq!(line_311(&t, 20, 3), None);
        assert_eq!(line_311(&t, 20, 6), Some(19));
        assert_eq!(line_311(&t, 20, 7), Some(19));
        assert_eq!(line_311(&t, 20, 8), None, "past the table");
        assert_eq!(line_311(&[0x05], 20, 0), None, "no top bit: not a table");
        assert_eq!(line_311(&[0x80 | (14 << 3)], 20, 0), None, "cut short");
    }
}
