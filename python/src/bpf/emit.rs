//! The walk emitted as BPF instructions: per layout, the thread's state
//! and record, the frame chain read into the record (the layout's offsets
//! as immediates), each frame's code identity, the names of code objects
//! not sent yet, and the record out to the ring.

use flamerec_bpf::asm::{
    self, helper, Code, Label, Reg, Size, FP, R0, R1, R2, R3, R4, R6, R7, R8, R9,
};

use super::{
    WalkFds, CTX_IP, ENDED_AT, ENTRY, FILE_BYTES, FILE_CHARS_AT, FILE_HEADER_AT, FRAME_AT,
    FRAME_READ, HEAD, IDENTITY_SHIFT, MAX_BPF_FRAMES, NAMED_FRAMES, NAMES_AT, NAME_BYTES,
    NAME_CHARS_AT, NAME_HEADER_AT, NAME_REC_AT, NAME_REC_LEN, REC_CODE, REC_IDENTITY, REC_TGID,
    STR_HEADER, TAIL_AT,
};
use crate::layout::{FrameModel, Layout, STR_LENGTH};

/// Whether the walk can read `l`'s frames: every field it takes of a
/// frame within the [`FRAME_READ`] bytes it reads of one at once.
pub(super) fn fits(l: &Layout) -> bool {
    let markers = match l.model {
        FrameModel::EntryFlag => 2,
        _ => 1,
    };
    let read = FRAME_READ as u64;
    [l.frame_code, l.frame_back, l.frame_instr]
        .iter()
        .all(|&f| f.checked_add(8).is_some_and(|end| end <= read))
        && l.frame_marker
            .checked_add(markers)
            .is_some_and(|end| end <= read)
}

/// The walk of `l` (`None` where it does not [fit](fits)): the thread's
/// state and the record, the frames, then the record out to the ring.
pub(super) fn walk_code(l: &Layout, fds: &WalkFds) -> Option<Vec<asm::Insn>> {
    if !fits(l) {
        return None;
    }
    let mut c = Code::new();
    let out = c.label();
    c.push([asm::mov(R6, R1), asm::call(helper::GET_CURRENT_PID_TGID)]);
    c.push([asm::mov(R7, R0)]);
    // The thread's state.
    c.push([asm::store(Size::W, FP, -4, R7)]);
    c.lookup(fds.threads, -4);
    c.jump(asm::jeq_imm(R0, 0, 0), out);
    c.push([asm::load(Size::DW, R8, R0, 0)]);
    // The record.
    c.push([asm::store_imm(Size::W, FP, -4, 0)]);
    c.lookup(fds.records, -4);
    c.jump(asm::jeq_imm(R0, 0, 0), out);
    c.push([
        asm::mov(R9, R0),
        asm::store(Size::DW, R9, 0, R7),
        asm::store_imm(Size::DW, R9, 8, 0),
        asm::call(helper::KTIME_GET_NS),
        asm::store(Size::DW, R9, 16, R0),
        asm::load(Size::DW, R1, R6, CTX_IP),
        asm::store(Size::DW, R9, 24, R1),
    ]);
    // A name record's first words: the same for every frame.
    c.push([
        asm::store_imm(Size::DW, FP, NAME_REC_AT, -1),
        asm::mov(R1, R7),
        asm::rsh_imm(R1, 32),
        asm::store(Size::DW, FP, NAME_REC_AT + 8, R1),
    ]);
    let emit = c.label();
    let names = fds.ring.map(|r| (fds.known, r));
    walk(&mut c, l, emit, names);
    c.bind(emit);
    if let Some(ring) = fds.ring {
        // Out with the frames read: HEAD + count × ENTRY bytes (the
        // count word's lower half).
        c.push([asm::load(Size::W, R3, R9, 8)]);
        c.jump(asm::jgt_imm(R3, MAX_BPF_FRAMES as i32, 0), out);
        c.push([
            asm::lsh_imm(R3, 5),
            asm::add_imm(R3, HEAD as i32),
            asm::mov(R2, R9),
            asm::mov_imm(R4, 0),
        ]);
        c.push(asm::load_map(R1, ring));
        c.push([asm::call(helper::RINGBUF_OUTPUT)]);
    }
    c.bind(out);
    c.push([asm::mov_imm(R0, 1), asm::exit()]);
    c.finish()
}

/// `r8` holds the thread state, `r9` the record: reads the frame chain
/// into the record, marked [ended](super::Record::ended) where its null
/// older-frame pointer is reached, then (or where a read fails) jumps to
/// `out`. With
/// `names` (the known-code map and the ring), each frame's code object not
/// sent yet has its names read and sent as a name record.
fn walk(c: &mut Code, l: &Layout, out: Label, names: Option<(i32, i32)>) {
    let read8 = |c: &mut Code, base: Reg, off: u64| {
        // *(fp-16) = *(u64 *)(base + off), from user memory.
        c.push([
            asm::mov(R1, FP),
            asm::add_imm(R1, -16),
            asm::mov_imm(R2, 8),
            asm::mov(R3, base),
            asm::add_imm(R3, off as i32),
            asm::call(helper::PROBE_READ_USER),
        ]);
        c.jump(asm::jne_imm(R0, 0, 0), out);
        c.push([asm::load(Size::DW, R8, FP, -16)]);
    };
    read8(c, R8, l.tstate_frame);
    if matches!(
        l.model,
        FrameModel::EntryFlag
            | FrameModel::EntryShim {
                in_thread_state: false
            }
    ) {
        c.jump(asm::jeq_imm(R8, 0, 0), out);
        read8(c, R8, l.cframe_current_frame);
    }
    // A bounded loop (Linux 5.3+; the ring buffer already needs 5.8), `r6`
    // the frames read: the verifier walks each turn, as it would the turns
    // unrolled, but the program holds the body once.
    let (top, ended, full) = (c.label(), c.label(), c.label());
    c.push([asm::mov_imm(R6, 0)]);
    c.bind(top);
    c.jump(asm::jeq_imm(R8, 0, 0), ended);
    c.jump(asm::jgt_imm(R6, MAX_BPF_FRAMES as i32 - 1, 0), full);
    c.push([
        asm::mov(R1, FP),
        asm::add_imm(R1, i32::from(FRAME_AT)),
        asm::mov_imm(R2, FRAME_READ),
        asm::mov(R3, R8),
        asm::call(helper::PROBE_READ_USER),
    ]);
    c.jump(asm::jne_imm(R0, 0, 0), out);
    let field = |off: u64| FRAME_AT + off as i16;
    if l.tagged_code {
        // 3.14+: the executable's low two bits are flags (see
        // `Layout::code_of`); every use below takes the address.
        c.push([
            asm::load(Size::DW, R1, FP, field(l.frame_code)),
            asm::and_imm(R1, -4),
            asm::store(Size::DW, FP, field(l.frame_code), R1),
        ]);
    }
    // The frame's entry in the record: `r9 + HEAD + r6 × ENTRY`.
    let entry = |c: &mut Code, into: Reg| {
        c.push([
            asm::mov(into, R6),
            asm::lsh_imm(into, ENTRY.trailing_zeros() as i32),
            asm::add(into, R9),
        ]);
    };
    entry(c, R2);
    let head = HEAD as i16;
    c.push([
        asm::store(Size::DW, R2, head, R8),
        asm::load(Size::DW, R1, FP, field(l.frame_code)),
        asm::store(Size::DW, R2, head + 8, R1),
        asm::load(Size::DW, R1, FP, field(l.frame_instr)),
        asm::store(Size::DW, R2, head + 16, R1),
    ]);
    match names {
        Some(names) => {
            // Names are read for the innermost frames only.
            let (plain, joined) = (c.label(), c.label());
            c.jump(asm::jgt_imm(R6, NAMED_FRAMES as i32 - 1, 0), plain);
            frame_identity(c, l, field(l.frame_code), Some(names));
            c.jump(asm::ja(0), joined);
            c.bind(plain);
            frame_identity(c, l, field(l.frame_code), None);
            c.bind(joined);
        }
        None => frame_identity(c, l, field(l.frame_code), None),
    }
    if l.frame_marker != 0 {
        // One byte (`is_entry`, `owner`): at any alignment.
        c.push([
            asm::load(Size::B, R2, FP, field(l.frame_marker)),
            asm::add(R1, R2),
        ]);
    }
    if l.model == FrameModel::EntryFlag {
        // 3.11's `owner`, after `is_entry`: the marker word's second byte.
        c.push([
            asm::load(Size::B, R2, FP, field(l.frame_marker + 1)),
            asm::lsh_imm(R2, 8),
            asm::add(R1, R2),
        ]);
    }
    entry(c, R2);
    c.push([
        asm::store(Size::DW, R2, head + 24, R1),
        asm::add_imm(R6, 1),
        asm::store(Size::DW, R9, 8, R6),
        asm::load(Size::DW, R8, FP, field(l.frame_back)),
    ]);
    c.jump(asm::ja(0), top);
    // Full: ended all the same if the last frame read was the oldest.
    c.bind(full);
    c.jump(asm::jne_imm(R8, 0, 0), out);
    c.bind(ended);
    c.push([asm::store_imm(Size::W, R9, ENDED_AT, 1)]);
}

/// Into `r1`, the marker word of the frame whose code object pointer is
/// at `code_at`: the code object's identity (its file name and name
/// objects, read now: an object freed and another made at its address is
/// told apart) above the two marker bytes, left 0. A failed read leaves zeros
/// (the helper clears its buffer), never the walk. With `names`, its
/// names are sent if the program has not sent them.
fn frame_identity(c: &mut Code, l: &Layout, code_at: i16, names: Option<(i32, i32)>) {
    let name_at = l.code_qualname.unwrap_or(l.code_name);
    let span = (name_at + 8).saturating_sub(l.code_filename);
    if (16..=32).contains(&span) {
        // The file name's length (into r7, free during the walk),
        // then its last 8 characters: no branch, so the verifier's
        // work stays one path per frame (a read that fails gives 0,
        // as `code_identity` takes it).
        c.push([
            asm::mov(R1, FP),
            asm::add_imm(R1, i32::from(NAMES_AT)),
            asm::mov_imm(R2, span as i32),
            asm::load(Size::DW, R3, FP, code_at),
            asm::add_imm(R3, l.code_filename as i32),
            asm::call(helper::PROBE_READ_USER),
            asm::mov(R1, FP),
            asm::add_imm(R1, i32::from(TAIL_AT)),
            asm::mov_imm(R2, 8),
            asm::load(Size::DW, R3, FP, NAMES_AT),
            asm::add_imm(R3, STR_LENGTH as i32),
            asm::call(helper::PROBE_READ_USER),
            asm::load(Size::DW, R7, FP, TAIL_AT),
            asm::mov(R1, FP),
            asm::add_imm(R1, i32::from(TAIL_AT)),
            asm::mov_imm(R2, 8),
            asm::load(Size::DW, R3, FP, NAMES_AT),
            asm::add(R3, R7),
            asm::add_imm(R3, l.ascii_data as i32 - 8),
            asm::call(helper::PROBE_READ_USER),
        ]);
        // The identity: as `mix_identity` mixes the same words.
        c.push([
            asm::load(Size::DW, R1, FP, NAMES_AT),
            asm::load(Size::DW, R2, FP, NAMES_AT + (span - 8) as i16),
            asm::lsh_imm(R2, 1),
            asm::add(R1, R2),
            asm::mov(R2, R7),
            asm::lsh_imm(R2, 2),
            asm::add(R1, R2),
            asm::load(Size::DW, R2, FP, TAIL_AT),
            asm::add(R1, R2),
            asm::lsh_imm(R1, IDENTITY_SHIFT),
        ]);
        if let Some((known, ring)) = names {
            send_names(c, l, known, ring, code_at, (span - 8) as i16);
        }
    } else {
        c.push([asm::mov_imm(R1, 0)]);
    }
}

/// With `r1` the frame's identity word (marker bytes clear) and its code
/// object's file name and name pointers at [`NAMES_AT`] (the name
/// `name_at` bytes on), sends a name record for a code object the program
/// has not sent (or sent with another identity), and remembers it; `r1`
/// is kept, `r2`–`r5` are lost. A failed read leaves zeros, which user
/// space does not take for a name.
fn send_names(c: &mut Code, l: &Layout, known: i32, ring: i32, code_at: i16, name_at: i16) {
    let done = c.label();
    let rec = |off: usize| NAME_REC_AT + off as i16;
    c.push([asm::store(Size::DW, FP, rec(REC_IDENTITY), R1)]);
    c.jump(asm::jeq_imm(R1, 0, 0), done);
    c.push([
        asm::load(Size::DW, R2, FP, code_at),
        asm::store(Size::DW, FP, rec(REC_CODE), R2),
    ]);
    c.lookup(known, rec(REC_TGID));
    let unknown = c.label();
    c.jump(asm::jeq_imm(R0, 0, 0), unknown);
    c.push([
        asm::load(Size::DW, R1, R0, 0),
        asm::load(Size::DW, R2, FP, rec(REC_IDENTITY)),
    ]);
    c.jump(asm::jeq(R1, R2, 0), done);
    c.bind(unknown);
    c.push(asm::load_map(R1, known));
    c.push([
        asm::mov(R2, FP),
        asm::add_imm(R2, i32::from(rec(REC_TGID))),
        asm::mov(R3, FP),
        asm::add_imm(R3, i32::from(rec(REC_IDENTITY))),
        asm::mov_imm(R4, 0),
        asm::call(helper::MAP_UPDATE_ELEM),
    ]);
    // (object pointer's place, header's place, bytes' place, bytes' size)
    let strings = [
        (
            NAMES_AT + name_at,
            NAME_HEADER_AT,
            NAME_CHARS_AT,
            NAME_BYTES,
        ),
        (NAMES_AT, FILE_HEADER_AT, FILE_CHARS_AT, FILE_BYTES),
    ];
    for (object, header, bytes, size) in strings {
        c.push([
            asm::mov(R1, FP),
            asm::add_imm(R1, i32::from(rec(header))),
            asm::mov_imm(R2, STR_HEADER as i32),
            asm::load(Size::DW, R3, FP, object),
            asm::add_imm(R3, STR_LENGTH as i32),
            asm::call(helper::PROBE_READ_USER),
            asm::mov(R1, FP),
            asm::add_imm(R1, i32::from(rec(bytes))),
            asm::mov_imm(R2, size as i32),
            asm::load(Size::DW, R3, FP, object),
            asm::add_imm(R3, l.ascii_data as i32),
            asm::call(helper::PROBE_READ_USER_STR),
        ]);
    }
    c.push(asm::load_map(R1, ring));
    c.push([
        asm::mov(R2, FP),
        asm::add_imm(R2, i32::from(NAME_REC_AT)),
        asm::mov_imm(R3, NAME_REC_LEN as i32),
        asm::mov_imm(R4, 0),
        asm::call(helper::RINGBUF_OUTPUT),
    ]);
    c.bind(done);
    c.push([asm::load(Size::DW, R1, FP, rec(REC_IDENTITY))]);
}
