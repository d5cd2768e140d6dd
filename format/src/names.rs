//! The names section: the function names (with inlined chains) of sampled
//! user frames, resolved by the recorder from the binaries it saw, so a
//! recording folds to the same names where those binaries are gone.
//!
//! It follows the trailer, in chunks of its own: a recorder killed before
//! the trailer leaves none (names then come from the binaries, as for
//! recordings without the section), and readers of format 1.0, which stop
//! at the trailer, never see it. Each chunk holds optional records (see
//! [`crate::layout`]): `names` records (self-contained: their own strings)
//! and one final `names end` record saying whether every sampled user frame
//! of a file module got its names.
//!
//! ```text
//! names     := n_strings, n_strings lengths, the strings' bytes (sorted),
//!              n_chains, n_chains lengths, every chain's string ids,
//!              n_frames, n_frames frame-id deltas (ascending ids),
//!              n_frames chain ids
//! names end := JSON { "frames": u64, "complete": bool }
//! ```
//!
//! Names are stored demangled and unspelled (as the binary says, not
//! sanitized for folded text): readers apply their own spelling rules.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::chunk::write_chunk;
use crate::codec::{put_bytes, put_u64, Cursor, DecodeFail};
use crate::error::FormatError;
use crate::layout::tag;
use crate::types::FrameId;

/// The zstd level of the names chunks. They are written while the user waits
/// for the recording to end; level 19 took ≈ 0.4 s of a `cargo build`
/// recording's 0.6 s of embedding (≈ 1 MB of names) for ≈ 10% fewer bytes.
const NAMES_LEVEL: i32 = 3;

/// Payload bytes per names chunk, at most (well below the chunk limit).
const CHUNK_PAYLOAD: usize = 1 << 20;

/// What the final record of the names section says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamesEnd {
    /// Frames whose names the section holds.
    pub frames: u64,
    /// Every sampled user frame of a file module was looked up in a
    /// readable binary (else some names must still come from binaries).
    pub complete: bool,
}

/// The names a recording embeds, by frame id: outermost function first,
/// the functions inlined into it after. An empty list means the binary was
/// read and knows no name for that address.
#[derive(Debug, Clone, Default)]
pub struct EmbeddedNames {
    /// Names per frame id.
    pub frames: HashMap<FrameId, Vec<Arc<str>>>,
    /// The section's end record, when it was read.
    pub end: Option<NamesEnd>,
    /// Why the section could not be read whole, if so.
    pub damage: Option<String>,
    /// Frames with lower ids were looked up while recording, as far as the
    /// stream read so far says: named in `frames`, or left for `fold`
    /// (0 where the recording does not say).
    pub through: u64,
}

impl EmbeddedNames {
    /// What the file holds: every name it should (`Embedded`), some
    /// (`Partial`), or none.
    pub fn state(&self) -> NamesState {
        match self.end {
            Some(end) if end.complete && self.damage.is_none() => NamesState::Embedded,
            _ if self.frames.is_empty() && self.end.is_none() && self.damage.is_none() => {
                NamesState::None
            }
            _ => NamesState::Partial,
        }
    }
}

/// How much of a recording's user-space names it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamesState {
    /// Every sampled user frame's names are in the file.
    Embedded,
    /// Some are (a binary was unreadable while recording, or the section is damaged).
    Partial,
    /// None: recorded with `--no-embed-symbols`, by an older flamerec, or cut short.
    None,
}

impl NamesState {
    /// The word `info --json` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            NamesState::Embedded => "embedded",
            NamesState::Partial => "partial",
            NamesState::None => "none",
        }
    }
}

/// Appends the names section to a finished recording: `names` by frame id
/// (any order), then the end record. Returns the bytes written.
pub fn write_names<W: Write>(
    out: &mut W,
    names: &[(FrameId, Vec<String>)],
    complete: bool,
) -> Result<u64, FormatError> {
    let mut sorted: Vec<&(FrameId, Vec<String>)> = names.iter().collect();
    sorted.sort_unstable_by_key(|(id, _)| *id);
    sorted.dedup_by_key(|(id, _)| *id);
    let mut written = 0;
    let mut start = 0;
    while start < sorted.len() {
        // As many frames as fit one chunk's budget (at least one).
        let mut end = start;
        let mut bytes = 0;
        while end < sorted.len() && (end == start || bytes < CHUNK_PAYLOAD) {
            bytes += 16 + sorted[end].1.iter().map(|n| n.len() + 4).sum::<usize>();
            end += 1;
        }
        let mut payload = Vec::new();
        optional_record(&mut payload, tag::NAMES, &encode(&sorted[start..end]));
        written += write_chunk(out, &payload, NAMES_LEVEL)?;
        start = end;
    }
    let json = serde_json::to_vec(&NamesEnd {
        frames: sorted.len() as u64,
        complete,
    })
    .map_err(|e| FormatError::Encode(e.to_string()))?;
    let mut payload = Vec::new();
    optional_record(&mut payload, tag::NAMES_END, &json);
    written += write_chunk(out, &payload, NAMES_LEVEL)?;
    out.flush()?;
    Ok(written)
}

/// `tag, length, payload`: the framing of records a reader may skip.
fn optional_record(out: &mut Vec<u8>, t: u8, body: &[u8]) {
    out.push(t);
    put_bytes(out, body);
}

pub(crate) fn encode(frames: &[&(FrameId, Vec<String>)]) -> Vec<u8> {
    // Strings sorted, so neighbours share prefixes (zstd finds them);
    // chains (a frame's list of names) interned, as many frames share one.
    let mut strings: Vec<&str> = frames
        .iter()
        .flat_map(|(_, names)| names.iter().map(String::as_str))
        .collect();
    strings.sort_unstable();
    strings.dedup();
    let string_id: HashMap<&str, u64> = strings
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, i as u64))
        .collect();
    let mut chains: Vec<&[String]> = Vec::new();
    let mut chain_id: HashMap<&[String], u64> = HashMap::new();
    let frame_chains: Vec<u64> = frames
        .iter()
        .map(|(_, names)| {
            *chain_id.entry(names.as_slice()).or_insert_with(|| {
                chains.push(names);
                chains.len() as u64 - 1
            })
        })
        .collect();
    let mut b = Vec::new();
    put_u64(&mut b, strings.len() as u64);
    for s in &strings {
        put_u64(&mut b, s.len() as u64);
    }
    for s in &strings {
        b.extend_from_slice(s.as_bytes());
    }
    put_u64(&mut b, chains.len() as u64);
    for c in &chains {
        put_u64(&mut b, c.len() as u64);
    }
    for c in &chains {
        for n in c.iter() {
            put_u64(&mut b, string_id[n.as_str()]);
        }
    }
    put_u64(&mut b, frames.len() as u64);
    let mut prev = 0u64;
    for (id, _) in frames {
        put_u64(&mut b, u64::from(*id) - prev);
        prev = u64::from(*id);
    }
    for c in frame_chains {
        put_u64(&mut b, c);
    }
    b
}

/// Decodes one `names` record body into `out`, checking every frame id
/// against `frame_count` and every string id against the record's table.
pub(crate) fn decode(
    body: &[u8],
    frame_count: u64,
    out: &mut HashMap<FrameId, Vec<Arc<str>>>,
) -> Result<(), DecodeFail> {
    let mut c = Cursor::new(body);
    let n = c.count(1, "name strings")?;
    let mut lens = Vec::with_capacity(n);
    for _ in 0..n {
        lens.push(c.count(0, "name length")?);
    }
    let mut strings: Vec<Arc<str>> = Vec::with_capacity(n);
    for len in lens {
        let b = c.take(len, "name")?;
        strings.push(Arc::from(String::from_utf8_lossy(b).as_ref()));
    }
    let n_chains = c.count(1, "name chains")?;
    let mut lens = Vec::with_capacity(n_chains);
    for _ in 0..n_chains {
        lens.push(c.count(1, "name chain length")?);
    }
    let mut chains: Vec<Vec<Arc<str>>> = Vec::with_capacity(n_chains);
    for len in lens {
        let mut chain = Vec::with_capacity(len);
        for _ in 0..len {
            let s = usize::try_from(c.u64("name id")?).map_err(|_| DecodeFail("name id"))?;
            chain.push(Arc::clone(strings.get(s).ok_or(DecodeFail("name id"))?));
        }
        chains.push(chain);
    }
    let frames = c.count(2, "named frames")?;
    let mut ids = Vec::with_capacity(frames);
    let mut prev = 0u64;
    for i in 0..frames {
        let d = c.u64("named frame")?;
        if i > 0 && d == 0 {
            return Err(DecodeFail("named frame"));
        }
        prev = prev.checked_add(d).ok_or(DecodeFail("named frame"))?;
        if prev >= frame_count {
            return Err(DecodeFail("named frame"));
        }
        ids.push(prev as FrameId);
    }
    let mut decoded = Vec::with_capacity(frames);
    for id in ids {
        let k = usize::try_from(c.u64("frame chain")?).map_err(|_| DecodeFail("frame chain"))?;
        let chain = chains.get(k).ok_or(DecodeFail("frame chain"))?;
        decoded.push((id, chain.clone()));
    }
    if !c.is_empty() {
        return Err(DecodeFail("names record"));
    }
    out.extend(decoded);
    Ok(())
}
