//! A user-space interpreter of the programs [`asm`](crate::asm) writes:
//! their instructions run over an emulated stack, context and maps, with
//! user memory read through a callback. It lets a machine without BPF (no
//! root, or a kernel without it) check what a program computes — a frame
//! walk over a captured memory image — where the kernel cannot run it.
//!
//! It runs the instructions and helpers `asm` has (64-bit ALU, loads and
//! stores of 1–8 bytes, the jumps, map lookups and updates, user-memory
//! reads, the ring buffer), and checks every access against the region it
//! falls in; it does not verify a program as the kernel's verifier does.

use std::collections::HashMap;

use crate::asm::{helper, Insn};

/// Why a run stopped before its `exit`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fault {
    /// An instruction this interpreter does not run.
    #[error("instruction {at}: opcode {code:#04x} is not run here")]
    Opcode {
        /// Its index.
        at: usize,
        /// Its opcode.
        code: u8,
    },
    /// A helper this interpreter does not run.
    #[error("instruction {at}: helper {id} is not run here")]
    Helper {
        /// Its index.
        at: usize,
        /// The helper's number.
        id: i32,
    },
    /// A load or store outside the stack, the context and map values.
    #[error("instruction {at}: {len} bytes at {addr:#x} are in no region")]
    Access {
        /// Its index.
        at: usize,
        /// The address.
        addr: u64,
        /// Bytes accessed.
        len: usize,
    },
    /// A map the program names was not made.
    #[error("instruction {at}: no map {fd}")]
    NoMap {
        /// Its index.
        at: usize,
        /// The descriptor the program names.
        fd: i32,
    },
    /// A jump out of the program, or more steps than any run takes.
    #[error("instruction {at}: the run left the program or ran past {MAX_STEPS} steps")]
    Runaway {
        /// Where.
        at: usize,
    },
}

/// Most instructions one run executes (the kernel's limit on verified
/// instructions: a bound, not an emulation of the verifier).
pub const MAX_STEPS: usize = 1_000_000;

const STACK: u64 = 0x1_0000_0000;
const STACK_LEN: usize = 512;
const CTX: u64 = 0x2_0000_0000;
/// Map values: map slot `s`, value `v` at `VALUES + s << 32 + v << 16`.
const VALUES: u64 = 0x10_0000_0000;

/// A map as a program sees it: keys to values of one size.
#[derive(Debug, Clone, Default)]
struct SimMap {
    key_size: usize,
    value_size: usize,
    /// Values, in the order their keys were first set; a key's slot.
    values: Vec<Vec<u8>>,
    keys: HashMap<Vec<u8>, usize>,
    /// A ring buffer: what `ringbuf_output` wrote, in order.
    ring: Option<Vec<Vec<u8>>>,
}

/// The world a program runs in: its maps, its thread, user memory.
pub struct Machine<'a> {
    maps: Vec<(i32, SimMap)>,
    read_user: &'a dyn Fn(u64, &mut [u8]) -> bool,
    /// What `get_current_pid_tgid` gives: `tgid << 32 | tid`.
    pub pid_tgid: u64,
    /// What `ktime_get_ns` gives.
    pub ktime: u64,
}

impl std::fmt::Debug for Machine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("maps", &self.maps.len())
            .field("pid_tgid", &self.pid_tgid)
            .finish()
    }
}

impl<'a> Machine<'a> {
    /// A machine whose user memory is what `read_user(address, buffer)`
    /// fills (`false`: not mapped, the read fails as the helper's would).
    pub fn new(read_user: &'a dyn Fn(u64, &mut [u8]) -> bool) -> Machine<'a> {
        Machine {
            maps: Vec::new(),
            read_user,
            pid_tgid: 0,
            ktime: 0,
        }
    }

    /// A hash map named `fd` in programs (a lookup of a key not set finds
    /// nothing; an update sets it).
    pub fn hash(&mut self, fd: i32, key_size: usize, value_size: usize) {
        self.maps.push((
            fd,
            SimMap {
                key_size,
                value_size,
                ..SimMap::default()
            },
        ));
    }

    /// An array map (one CPU's view of a per-CPU one) named `fd`: `entries`
    /// zeroed values, keyed by a 4-byte index.
    pub fn array(&mut self, fd: i32, value_size: usize, entries: u32) {
        self.hash(fd, 4, value_size);
        for i in 0..entries {
            self.set(fd, &i.to_ne_bytes(), &vec![0; value_size]);
        }
    }

    /// A ring buffer named `fd`.
    pub fn ring(&mut self, fd: i32) {
        self.maps.push((
            fd,
            SimMap {
                ring: Some(Vec::new()),
                ..SimMap::default()
            },
        ));
    }

    /// Sets `key` of map `fd` to `value` (a map not made: nothing).
    pub fn set(&mut self, fd: i32, key: &[u8], value: &[u8]) {
        if let Some(m) = self.map_mut(fd) {
            put(m, key, value);
        }
    }

    /// The value of `key` in map `fd`.
    pub fn get(&self, fd: i32, key: &[u8]) -> Option<&[u8]> {
        let (_, m) = self.maps.iter().find(|(f, _)| *f == fd)?;
        m.keys.get(key).map(|&s| &m.values[s][..])
    }

    /// What the program wrote to ring buffer `fd`, in order.
    pub fn ring_entries(&self, fd: i32) -> &[Vec<u8>] {
        self.maps
            .iter()
            .find(|(f, _)| *f == fd)
            .and_then(|(_, m)| m.ring.as_deref())
            .unwrap_or(&[])
    }

    fn map_mut(&mut self, fd: i32) -> Option<&mut SimMap> {
        self.maps.iter_mut().find(|(f, _)| *f == fd).map(|(_, m)| m)
    }

    /// Runs `prog` with `ctx` as its context (r1); its return value (r0).
    pub fn run(&mut self, prog: &[Insn], ctx: &[u8]) -> Result<u64, Fault> {
        let mut run = Run {
            regs: [0; 11],
            stack: vec![0; STACK_LEN],
            ctx: ctx.to_vec(),
        };
        run.regs[1] = CTX;
        run.regs[10] = STACK + STACK_LEN as u64;
        let mut pc = 0usize;
        for _ in 0..MAX_STEPS {
            let insn = *prog.get(pc).ok_or(Fault::Runaway { at: pc })?;
            let (dst, src) = (usize::from(insn.regs & 0x0f), usize::from(insn.regs >> 4));
            if dst > 10 || src > 10 {
                return Err(Fault::Opcode {
                    at: pc,
                    code: insn.code,
                });
            }
            let class = insn.code & 0x07;
            pc += 1;
            match class {
                0x07 => run.alu(pc - 1, insn, dst, src)?,
                0x05 => match insn.code {
                    0x85 => run.regs[0] = self.call(&mut run, pc - 1, insn.imm)?,
                    0x95 => return Ok(run.regs[0]),
                    code => {
                        if run.jumps(pc - 1, code, dst, src, insn.imm)? {
                            pc = jump(pc, insn.off).ok_or(Fault::Runaway { at: pc - 1 })?;
                        }
                    }
                },
                0x00 if insn.code == 0x18 => {
                    // A 64-bit immediate: its high half in the next slot (a
                    // map's descriptor stays its value here).
                    let high = prog.get(pc).ok_or(Fault::Runaway { at: pc })?;
                    run.regs[dst] = u64::from(insn.imm as u32) | u64::from(high.imm as u32) << 32;
                    pc += 1;
                }
                0x01 => {
                    let len = size_of(insn.code);
                    let addr = run.regs[src].wrapping_add(insn.off as i64 as u64);
                    let bytes = self.bytes(&mut run, pc - 1, addr, len)?;
                    let mut word = [0u8; 8];
                    word[..len].copy_from_slice(bytes);
                    run.regs[dst] = u64::from_le_bytes(word);
                }
                0x02 | 0x03 => {
                    let len = size_of(insn.code);
                    let value = match class {
                        0x02 => insn.imm as i64 as u64,
                        _ => run.regs[src],
                    };
                    let addr = run.regs[dst].wrapping_add(insn.off as i64 as u64);
                    let bytes = self.bytes(&mut run, pc - 1, addr, len)?;
                    bytes.copy_from_slice(&value.to_le_bytes()[..len]);
                }
                _ => {
                    return Err(Fault::Opcode {
                        at: pc - 1,
                        code: insn.code,
                    })
                }
            }
        }
        Err(Fault::Runaway { at: pc })
    }

    /// The `len` bytes at `addr` in the region they fall in.
    fn bytes<'r>(
        &'r mut self,
        run: &'r mut Run,
        at: usize,
        addr: u64,
        len: usize,
    ) -> Result<&'r mut [u8], Fault> {
        let fault = Fault::Access { at, addr, len };
        let within = |base: u64, size: usize| {
            let off = usize::try_from(addr.checked_sub(base)?).ok()?;
            (off.checked_add(len)? <= size).then_some(off)
        };
        if let Some(off) = within(STACK, STACK_LEN) {
            return Ok(&mut run.stack[off..off + len]);
        }
        if let Some(off) = within(CTX, run.ctx.len()) {
            return Ok(&mut run.ctx[off..off + len]);
        }
        let slot = addr.checked_sub(VALUES).ok_or(fault.clone())?;
        let (m, v, off) = (
            (slot >> 32) as usize,
            (slot >> 16 & 0xffff) as usize,
            (slot & 0xffff) as usize,
        );
        let value = self
            .maps
            .get_mut(m)
            .and_then(|(_, map)| map.values.get_mut(v))
            .ok_or(fault.clone())?;
        value.get_mut(off..off + len).ok_or(fault)
    }

    /// Helper `id`, its arguments in r1–r5; r1–r5 are lost after it.
    fn call(&mut self, run: &mut Run, at: usize, id: i32) -> Result<u64, Fault> {
        let [_, r1, r2, r3, ..] = run.regs;
        let out = match id {
            helper::GET_CURRENT_PID_TGID => self.pid_tgid,
            helper::KTIME_GET_NS => self.ktime,
            helper::MAP_LOOKUP_ELEM => {
                let m = self.map_at(at, r1)?;
                let key_size = self.maps[m].1.key_size;
                let key = self.bytes(run, at, r2, key_size)?.to_vec();
                match self.maps[m].1.keys.get(&key) {
                    Some(&v) => VALUES + ((m as u64) << 32) + ((v as u64) << 16),
                    None => 0,
                }
            }
            helper::MAP_UPDATE_ELEM => {
                let m = self.map_at(at, r1)?;
                let (ks, vs) = (self.maps[m].1.key_size, self.maps[m].1.value_size);
                let key = self.bytes(run, at, r2, ks)?.to_vec();
                let value = self.bytes(run, at, r3, vs)?.to_vec();
                put(&mut self.maps[m].1, &key, &value);
                0
            }
            helper::PROBE_READ_USER | helper::PROBE_READ_USER_STR => {
                let len = r2 as usize;
                let mut buf = vec![0; len];
                let ok = (self.read_user)(r3, &mut buf);
                if !ok {
                    buf.fill(0);
                }
                let mut written = len;
                if ok && id == helper::PROBE_READ_USER_STR {
                    written = buf.iter().position(|&b| b == 0).map_or(len, |n| n + 1);
                    buf[written.min(len)..].fill(0);
                }
                let dst = self.bytes(run, at, r1, len)?;
                dst.copy_from_slice(&buf);
                match ok {
                    true if id == helper::PROBE_READ_USER_STR => written as u64,
                    true => 0,
                    false => (-14i64) as u64, // -EFAULT
                }
            }
            helper::RINGBUF_OUTPUT => {
                let m = self.map_at(at, r1)?;
                let data = self.bytes(run, at, r2, r3 as usize)?.to_vec();
                match self.maps[m].1.ring.as_mut() {
                    Some(ring) => {
                        ring.push(data);
                        0
                    }
                    None => return Err(Fault::NoMap { at, fd: r1 as i32 }),
                }
            }
            id => return Err(Fault::Helper { at, id }),
        };
        run.regs[1..=5].fill(0);
        Ok(out)
    }

    /// The index of the map a program names by descriptor `fd`.
    fn map_at(&self, at: usize, fd: u64) -> Result<usize, Fault> {
        self.maps
            .iter()
            .position(|(f, _)| i64::from(*f) == fd as i64)
            .ok_or(Fault::NoMap { at, fd: fd as i32 })
    }
}

/// Sets `key` of `m` to `value` (cut or zero-padded to the value size).
fn put(m: &mut SimMap, key: &[u8], value: &[u8]) {
    let mut v = vec![0; m.value_size];
    let n = value.len().min(v.len());
    v[..n].copy_from_slice(&value[..n]);
    match m.keys.get(key) {
        Some(&slot) => m.values[slot] = v,
        None => {
            m.keys.insert(key.to_vec(), m.values.len());
            m.values.push(v);
        }
    }
}

/// One run's registers, stack and context.
struct Run {
    regs: [u64; 11],
    stack: Vec<u8>,
    ctx: Vec<u8>,
}

impl Run {
    fn alu(&mut self, at: usize, insn: Insn, dst: usize, src: usize) -> Result<(), Fault> {
        let operand = match insn.code & 0x08 {
            0 => insn.imm as i64 as u64,
            _ => self.regs[src],
        };
        let d = &mut self.regs[dst];
        *d = match insn.code & 0xf0 {
            0x00 => d.wrapping_add(operand),
            0x10 => d.wrapping_sub(operand),
            0x40 => *d | operand,
            0x50 => *d & operand,
            0x60 => d.wrapping_shl(operand as u32),
            0x70 => d.wrapping_shr(operand as u32),
            0xb0 => operand,
            _ => {
                return Err(Fault::Opcode {
                    at,
                    code: insn.code,
                })
            }
        };
        Ok(())
    }

    /// Whether the conditional jump `code` is taken.
    fn jumps(&self, at: usize, code: u8, dst: usize, src: usize, imm: i32) -> Result<bool, Fault> {
        let a = self.regs[dst];
        let b = match code & 0x08 {
            0 => imm as i64 as u64,
            _ => self.regs[src],
        };
        Ok(match code & 0xf0 {
            0x00 => true,
            0x10 => a == b,
            0x20 => a > b,
            0x30 => a >= b,
            0x50 => a != b,
            _ => return Err(Fault::Opcode { at, code }),
        })
    }
}

/// The size of a load's or store's access.
fn size_of(code: u8) -> usize {
    match code & 0x18 {
        0x10 => 1,
        0x08 => 2,
        0x00 => 4,
        _ => 8,
    }
}

/// Where a jump of `off` from the instruction before `next` lands.
fn jump(next: usize, off: i16) -> Option<usize> {
    usize::try_from(next as i64 + i64::from(off)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::{self, Code, Size, FP, R0, R1, R2, R3, R6};

    /// A program that looks a key up, reads user memory into the value and
    /// sends it to a ring: what the frame walk does, in small.
    #[test]
    fn a_program_reads_user_memory_into_a_map_and_a_ring() {
        let memory = |addr: u64, buf: &mut [u8]| {
            if addr != 0x7000 {
                return false;
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = i as u8 + 1;
            }
            true
        };
        let mut m = Machine::new(&memory);
        m.array(5, 16, 1);
        m.ring(6);
        m.pid_tgid = 42 << 32 | 43;
        let mut c = Code::new();
        let out = c.label();
        c.push([asm::store_imm(Size::W, FP, -4, 0)]);
        c.lookup(5, -4);
        c.jump(asm::jeq_imm(R0, 0, 0), out);
        c.push([
            asm::mov(R6, R0),
            asm::mov(R1, R6),
            asm::mov_imm(R2, 8),
            asm::load(Size::DW, R3, R1, 0),
            asm::add_imm(R3, 0x7000),
            asm::call(helper::PROBE_READ_USER),
            asm::call(helper::GET_CURRENT_PID_TGID),
            asm::store(Size::DW, R6, 8, R0),
        ]);
        c.push(asm::load_map(R1, 6));
        c.push([
            asm::mov(R2, R6),
            asm::mov_imm(R3, 16),
            asm::mov_imm(asm::R4, 0),
            asm::call(helper::RINGBUF_OUTPUT),
        ]);
        c.bind(out);
        c.push([asm::mov_imm(R0, 7), asm::exit()]);
        let prog = c.finish().unwrap();
        assert_eq!(m.run(&prog, &[]), Ok(7));
        let value = m.get(5, &0u32.to_ne_bytes()).unwrap();
        assert_eq!(&value[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            u64::from_ne_bytes(value[8..].try_into().unwrap()),
            42 << 32 | 43
        );
        assert_eq!(m.ring_entries(6), &[value.to_vec()]);
        // A read outside the stack, context and values is a fault.
        let bad = [asm::load(Size::DW, R0, R6, 0), asm::exit()];
        assert!(matches!(m.run(&bad, &[]), Err(Fault::Access { .. })));
    }
}
