//! BPF instructions, written from Rust: each function returns one
//! instruction (two for a 64-bit immediate), named as the kernel's
//! `Documentation/bpf/standardization/instruction-set.rst` describes them.
//! Programs are built at run time, so offsets that differ per process (a
//! CPython version's layout, say) go in as immediates, and no compiler for
//! BPF is needed to build flamerec.

/// One 8-byte instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Operation code.
    pub code: u8,
    /// Destination register (low nibble) and source register (high nibble).
    pub regs: u8,
    /// Signed offset: of a memory access, or of a jump in instructions.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// The instruction's bytes, as the kernel reads them (little-endian).
    pub fn to_bytes(self) -> [u8; 8] {
        let [o0, o1] = self.off.to_le_bytes();
        let [i0, i1, i2, i3] = self.imm.to_le_bytes();
        [self.code, self.regs, o0, o1, i0, i1, i2, i3]
    }
}

/// A register: r0 (return value), r1–r5 (arguments), r6–r9 (kept across
/// calls), r10 (frame pointer, read only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(pub u8);

/// Return value of helper calls and of the program.
pub const R0: Reg = Reg(0);
/// First argument (the context at entry).
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);
/// Kept across calls.
pub const R6: Reg = Reg(6);
/// Kept across calls.
pub const R7: Reg = Reg(7);
/// Kept across calls.
pub const R8: Reg = Reg(8);
/// Kept across calls.
pub const R9: Reg = Reg(9);
/// The frame pointer: the stack is the 512 bytes below it.
pub const FP: Reg = Reg(10);

fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src.0 << 4) | (dst.0 & 0x0f),
        off,
        imm,
    }
}

const ALU64: u8 = 0x07;
const JMP: u8 = 0x05;
const K: u8 = 0x00;
const X: u8 = 0x08;

/// Sizes of memory accesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// 1 byte.
    B = 0x10,
    /// 2 bytes.
    H = 0x08,
    /// 4 bytes.
    W = 0x00,
    /// 8 bytes.
    DW = 0x18,
}

/// `dst = imm` (sign-extended to 64 bits).
pub fn mov_imm(dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | 0xb0 | K, dst, R0, 0, imm)
}

/// `dst = src`.
pub fn mov(dst: Reg, src: Reg) -> Insn {
    insn(ALU64 | 0xb0 | X, dst, src, 0, 0)
}

/// `dst += imm`.
pub fn add_imm(dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | K, dst, R0, 0, imm)
}

/// `dst += src`.
pub fn add(dst: Reg, src: Reg) -> Insn {
    insn(ALU64 | X, dst, src, 0, 0)
}

/// `dst &= imm` (the immediate sign-extended to 64 bits).
pub fn and_imm(dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | 0x50 | K, dst, R0, 0, imm)
}

/// `dst <<= imm`.
pub fn lsh_imm(dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | 0x60 | K, dst, R0, 0, imm)
}

/// `dst >>= imm` (logical).
pub fn rsh_imm(dst: Reg, imm: i32) -> Insn {
    insn(ALU64 | 0x70 | K, dst, R0, 0, imm)
}

/// `dst = *(size *)(src + off)`.
pub fn load(size: Size, dst: Reg, src: Reg, off: i16) -> Insn {
    insn(0x61 | size as u8, dst, src, off, 0)
}

/// `*(size *)(dst + off) = src`.
pub fn store(size: Size, dst: Reg, off: i16, src: Reg) -> Insn {
    insn(0x63 | size as u8, dst, src, off, 0)
}

/// `*(size *)(dst + off) = imm`.
pub fn store_imm(size: Size, dst: Reg, off: i16, imm: i32) -> Insn {
    insn(0x62 | size as u8, dst, R0, off, imm)
}

/// `dst = <the map whose descriptor is fd>` (two instructions).
pub fn load_map(dst: Reg, fd: i32) -> [Insn; 2] {
    // src = BPF_PSEUDO_MAP_FD: the kernel puts the map's address here.
    [insn(0x18, dst, Reg(1), 0, fd), insn(0, R0, R0, 0, 0)]
}

/// `dst = imm` for a 64-bit immediate (two instructions).
pub fn load_imm64(dst: Reg, imm: u64) -> [Insn; 2] {
    [
        insn(0x18, dst, R0, 0, imm as u32 as i32),
        insn(0, R0, R0, 0, (imm >> 32) as u32 as i32),
    ]
}

/// Jump `off` instructions ahead (from the next one).
pub fn ja(off: i16) -> Insn {
    insn(JMP, R0, R0, off, 0)
}

/// Jump `off` ahead when `dst == imm`.
pub fn jeq_imm(dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP | 0x10 | K, dst, R0, off, imm)
}

/// Jump `off` ahead when `dst != imm`.
pub fn jne_imm(dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP | 0x50 | K, dst, R0, off, imm)
}

/// Jump `off` ahead when `dst == src`.
pub fn jeq(dst: Reg, src: Reg, off: i16) -> Insn {
    insn(JMP | 0x10 | X, dst, src, off, 0)
}

/// Jump `off` ahead when `dst > imm` (unsigned).
pub fn jgt_imm(dst: Reg, imm: i32, off: i16) -> Insn {
    insn(JMP | 0x20 | K, dst, R0, off, imm)
}

/// Jump `off` ahead when `dst >= src` (unsigned).
pub fn jge(dst: Reg, src: Reg, off: i16) -> Insn {
    insn(JMP | 0x30 | X, dst, src, off, 0)
}

/// Call helper `id` (arguments in r1–r5, result in r0; r1–r5 are lost).
pub fn call(id: i32) -> Insn {
    insn(JMP | 0x80, R0, R0, 0, id)
}

/// Return r0.
pub fn exit() -> Insn {
    insn(JMP | 0x90, R0, R0, 0, 0)
}

/// A place in a program that jumps go to, bound once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// A program being written: instructions, and jumps to labels bound later.
#[derive(Debug, Default)]
pub struct Code {
    insns: Vec<Insn>,
    /// (index of a jump, its target).
    jumps: Vec<(usize, Label)>,
    labels: Vec<Option<usize>>,
}

impl Code {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new label, to bind later.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `label` to the next instruction.
    pub fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    /// Appends instructions.
    pub fn push(&mut self, insns: impl IntoIterator<Item = Insn>) {
        self.insns.extend(insns);
    }

    /// Appends a lookup of the key at `fp + key_at` in map `map`: r0 is
    /// the value's address, or 0 when there is none (r1–r5 are lost).
    pub fn lookup(&mut self, map: i32, key_at: i16) {
        self.push(load_map(R1, map));
        self.push([
            mov(R2, FP),
            add_imm(R2, i32::from(key_at)),
            call(helper::MAP_LOOKUP_ELEM),
        ]);
    }

    /// Appends a jump (`ja`, `jeq_imm`, …, any offset) to `to`.
    pub fn jump(&mut self, jump: Insn, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(jump);
    }

    /// The instructions, jumps resolved; `None` when a label was never
    /// bound or a jump is too far.
    pub fn finish(mut self) -> Option<Vec<Insn>> {
        for (at, label) in self.jumps {
            let target = self.labels.get(label.0).copied().flatten()?;
            let off = i16::try_from(target as i64 - at as i64 - 1).ok()?;
            self.insns[at].off = off;
        }
        Some(self.insns)
    }
}

/// Helper functions the programs call, by the kernel's numbers.
pub mod helper {
    /// `void *bpf_map_lookup_elem(map, key)`.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `long bpf_map_update_elem(map, key, value, flags)`.
    pub const MAP_UPDATE_ELEM: i32 = 2;
    /// `u64 bpf_ktime_get_ns(void)`: CLOCK_MONOTONIC.
    pub const KTIME_GET_NS: i32 = 5;
    /// `u64 bpf_get_current_pid_tgid(void)`: tgid << 32 | tid.
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    /// `long bpf_tail_call(ctx, prog_array, index)`: runs that program
    /// instead, never returning; goes on where there is none.
    pub const TAIL_CALL: i32 = 12;
    /// `long bpf_perf_event_output(ctx, map, flags, data, size)`.
    pub const PERF_EVENT_OUTPUT: i32 = 25;
    /// `long bpf_probe_read_user(dst, size, unsafe_ptr)` (Linux 5.5+).
    pub const PROBE_READ_USER: i32 = 112;
    /// `long bpf_probe_read_user_str(dst, size, unsafe_ptr)` (Linux 5.5+):
    /// up to and with the first NUL.
    pub const PROBE_READ_USER_STR: i32 = 114;
    /// `long bpf_ringbuf_output(ringbuf, data, size, flags)` (Linux 5.8+).
    pub const RINGBUF_OUTPUT: i32 = 130;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_go_to_their_labels() {
        let mut c = Code::new();
        let end = c.label();
        let top = c.label();
        c.bind(top);
        c.push([mov_imm(R0, 0)]);
        c.jump(jeq_imm(R0, 0, 0), end);
        c.jump(ja(0), top);
        c.bind(end);
        c.push([exit()]);
        let p = c.finish().expect("all bound");
        assert_eq!(p[1].off, 1, "over the backward jump to the exit");
        assert_eq!(p[2].off, -3, "back to the top");
        let mut unbound = Code::new();
        let l = unbound.label();
        unbound.jump(ja(0), l);
        assert!(unbound.finish().is_none());
    }

    #[test]
    fn encodings_are_the_kernels() {
        // As `llvm-objdump -d` shows them for BPF.
        assert_eq!(mov_imm(R0, 1).to_bytes(), [0xb7, 0x00, 0, 0, 1, 0, 0, 0]);
        assert_eq!(mov(R6, R1).to_bytes(), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            load(Size::DW, R3, R0, 8).to_bytes(),
            [0x79, 0x03, 8, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            store(Size::W, FP, -4, R7).to_bytes(),
            [0x63, 0x7a, 0xfc, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            store_imm(Size::W, FP, -4, 0).to_bytes(),
            [0x62, 0x0a, 0xfc, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            load_map(R1, 5)[0].to_bytes(),
            [0x18, 0x11, 0, 0, 5, 0, 0, 0]
        );
        assert_eq!(jeq_imm(R0, 0, 3).to_bytes(), [0x15, 0x00, 3, 0, 0, 0, 0, 0]);
        assert_eq!(call(14).to_bytes(), [0x85, 0, 0, 0, 14, 0, 0, 0]);
        assert_eq!(exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(rsh_imm(R0, 32).to_bytes(), [0x77, 0, 0, 0, 32, 0, 0, 0]);
        assert_eq!(lsh_imm(R0, 32).to_bytes(), [0x67, 0, 0, 0, 32, 0, 0, 0]);
        assert_eq!(
            add_imm(R2, -8).to_bytes(),
            [0x07, 0x02, 0, 0, 0xf8, 0xff, 0xff, 0xff]
        );
    }
}
