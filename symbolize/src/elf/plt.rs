//! Names for the stubs of the procedure linkage table, as perf gives them:
//! `callee@plt`. The symbol tables have no symbols there, so without this
//! a sample in a stub takes the name of the last symbol before `.plt`
//! (typically `_init`, which reaches to the next symbol) and sends the
//! reader of a profile to a function that never ran.
//!
//! x86_64 only; three sections hold stubs, all of them read here:
//!
//! - `.plt`: lazy binding. A 16-byte header (PLT0: push, jump to the
//!   resolver), then one 16-byte entry per import, each starting
//!   `jmp *GOT[n](%rip)`. With IBT (`-z ibtplt`, `-fcf-protection`) these
//!   entries only push and jump to the header, and the calls go to
//! - `.plt.sec`: one `endbr64; bnd jmp *GOT[n](%rip)` entry per import.
//! - `.plt.got`: stubs of functions whose GOT slot is also used for their
//!   address (a `GLOB_DAT` relocation in `.rela.dyn`), 8 bytes
//!   (16 with IBT).
//!
//! Every entry is named after the GOT slot its jump goes through: the
//! relocation that fills that slot (`JUMP_SLOT` in `.rela.plt`, `GLOB_DAT`
//! in `.rela.dyn`) names the symbol. Decoding the jump rather than counting
//! entries in relocation order covers every layout alike: lazy or not
//! (`-z now`, or a `.plt` without header), IBT or not, and `IRELATIVE`
//! slots (local IFUNCs, named after the function at their resolver's
//! address by the caller, as perf does). What jumps through no known slot
//! — PLT0, the lazy half of an IBT `.plt` — is `.plt`, as perf calls it;
//! a slot without a usable symbol is `offset_0xOFF@plt` (its file offset).
//!
//! Only the binary's own sections count: a separate debug file keeps the
//! headers of `.plt` and `.rela.plt` but not their contents.

use goblin::container::Ctx;
use goblin::elf::header::EM_X86_64;
use goblin::elf::reloc::{RelocSection, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE, R_X86_64_JUMP_SLOT};
use goblin::elf::section_header::{SectionHeader, SHT_DYNSYM, SHT_RELA};
use goblin::elf::sym::{Sym, Symtab};

use super::sections::{elf_section_headers, range};

/// The names of the sections holding stubs.
pub(crate) const STUB_SECTIONS: [&[u8]; 3] = [b".plt", b".plt.sec", b".plt.got"];

/// What one stub is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StubName {
    /// `symbol@plt`: the (possibly mangled) symbol its slot is filled with.
    Symbol(String),
    /// The slot of a local IFUNC: named after the function at the address
    /// of its resolver (an ELF address).
    Ifunc(u64),
    /// Code of `.plt` that jumps through no slot (the header, lazy entries).
    Header,
    /// A slot no relocation names: the stub's file offset.
    Unnamed(u64),
}

/// One stub: `[start, end)` in ELF addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stub {
    pub start: u64,
    pub end: u64,
    pub name: StubName,
}

/// The stubs of one binary, sorted by address.
#[derive(Debug, Default)]
pub(crate) struct Stubs {
    stubs: Vec<Stub>,
}

/// A section holding stubs.
struct StubSection<'d> {
    header: SectionHeader,
    bytes: &'d [u8],
    is_plt: bool,
}

impl Stubs {
    /// The stubs of the x86_64 ELF image `data` (at file offsets), if it
    /// has any whose section contains one of `vaddrs`; empty for anything
    /// else (no relocation is read then).
    pub(crate) fn of(data: &[u8], vaddrs: &[u64]) -> Self {
        Self::parse(data, vaddrs).unwrap_or_default()
    }

    fn parse(data: &[u8], vaddrs: &[u64]) -> Option<Self> {
        let (header, ctx, headers) = elf_section_headers(data)?;
        if header.e_machine != EM_X86_64 {
            return None;
        }
        let names = headers.get(usize::from(header.e_shstrndx))?;
        let names = data.get(range(names.sh_offset, names.sh_size, data.len())?)?;
        let sections: Vec<StubSection<'_>> = headers
            .iter()
            .filter_map(|sh| {
                let name = section_name(names, sh.sh_name)?;
                if !STUB_SECTIONS.contains(&name) || sh.sh_size == 0 {
                    return None;
                }
                let bytes = data.get(range(sh.sh_offset, sh.sh_size, data.len())?)?;
                Some(StubSection {
                    header: sh.clone(),
                    bytes,
                    is_plt: name == b".plt",
                })
            })
            .collect();
        let wanted = sections.iter().any(|s| {
            let (lo, size) = (s.header.sh_addr, s.header.sh_size);
            vaddrs.iter().any(|&v| v >= lo && v - lo < size)
        });
        if !wanted {
            return None;
        }
        let slots = Slots::read(data, ctx, &headers);
        let mut stubs = Vec::new();
        for s in &sections {
            let size = entry_size(&s.header);
            let mut at = 0u64;
            while at < s.header.sh_size {
                let len = size.min(s.header.sh_size - at);
                let entry = usize::try_from(at)
                    .ok()
                    .and_then(|a| s.bytes.get(a..))
                    .unwrap_or_default();
                let start = s.header.sh_addr.saturating_add(at);
                let name = match jump_slot(entry).and_then(|d| start.checked_add(d)) {
                    Some(slot) => match slots.at(slot) {
                        Some(name) => name,
                        None => StubName::Unnamed(s.header.sh_offset.saturating_add(at)),
                    },
                    None if s.is_plt => StubName::Header,
                    None => StubName::Unnamed(s.header.sh_offset.saturating_add(at)),
                };
                stubs.push(Stub {
                    start,
                    end: start.saturating_add(len),
                    name,
                });
                at += len;
            }
        }
        stubs.sort_unstable_by_key(|s| s.start);
        Some(Stubs { stubs })
    }

    /// The stub holding `vaddr`, if any.
    pub(crate) fn at(&self, vaddr: u64) -> Option<&Stub> {
        let i = self.stubs.partition_point(|s| s.start <= vaddr);
        let s = self.stubs.get(i.checked_sub(1)?)?;
        (vaddr < s.end).then_some(s)
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.stubs.is_empty()
    }
}

/// The size of one entry of stub section `sh`: its entry size when that is
/// 8 or 16 (what x86_64 linkers write), else what its alignment suggests.
fn entry_size(sh: &SectionHeader) -> u64 {
    match sh.sh_entsize {
        8 | 16 => sh.sh_entsize,
        _ if sh.sh_addralign == 8 => 8,
        _ => 16,
    }
}

/// Where the jump at the start of a stub reads its target, relative to the
/// stub: `[endbr64] [bnd] jmp *disp32(%rip)`, the displacement counting
/// from the end of the jump.
fn jump_slot(entry: &[u8]) -> Option<u64> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let mut at = 0usize;
    if entry.starts_with(&ENDBR64) {
        at += ENDBR64.len();
    }
    if entry.get(at) == Some(&0xf2) {
        at += 1;
    }
    if entry.get(at..at + 2) != Some(&[0xff, 0x25]) {
        return None;
    }
    let disp: [u8; 4] = entry.get(at + 2..at + 6)?.try_into().ok()?;
    let end = (at + 6) as i64;
    u64::try_from(end + i64::from(i32::from_le_bytes(disp))).ok()
}

/// The dynamic relocations that fill GOT slots with functions.
struct Slots<'d> {
    /// `(slot address, symbol index or IFUNC resolver, is IFUNC)`, sorted.
    by_address: Vec<(u64, u64, bool)>,
    dynsym: &'d [u8],
    dynstr: &'d [u8],
    ctx: Ctx,
}

impl<'d> Slots<'d> {
    /// The `JUMP_SLOT`, `GLOB_DAT` and `IRELATIVE` relocations of every
    /// `SHT_RELA` section tied to the dynamic symbol table.
    fn read(data: &'d [u8], ctx: Ctx, headers: &[SectionHeader]) -> Self {
        let mut slots = Slots {
            by_address: Vec::new(),
            dynsym: &[],
            dynstr: &[],
            ctx,
        };
        let Some((dynsym_index, dynsym)) = headers
            .iter()
            .enumerate()
            .rfind(|(_, sh)| sh.sh_type == SHT_DYNSYM)
        else {
            return slots;
        };
        let bytes = |sh: &SectionHeader| data.get(range(sh.sh_offset, sh.sh_size, data.len())?);
        slots.dynsym = bytes(dynsym).unwrap_or_default();
        slots.dynstr = headers
            .get(dynsym.sh_link as usize)
            .and_then(bytes)
            .unwrap_or_default();
        for sh in headers.iter().filter(|sh| sh.sh_type == SHT_RELA) {
            let linked = sh.sh_link as usize == dynsym_index;
            let (Ok(offset), Ok(size)) =
                (usize::try_from(sh.sh_offset), usize::try_from(sh.sh_size))
            else {
                continue;
            };
            if !linked || bytes(sh).is_none() {
                continue;
            }
            let Ok(relocs) = RelocSection::parse(data, offset, size, true, ctx) else {
                continue;
            };
            for r in relocs.iter() {
                match r.r_type {
                    R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT if r.r_sym != 0 => {
                        slots.by_address.push((r.r_offset, r.r_sym as u64, false));
                    }
                    R_X86_64_IRELATIVE => {
                        let resolver = r.r_addend.unwrap_or(0) as u64;
                        slots.by_address.push((r.r_offset, resolver, true));
                    }
                    _ => {}
                }
            }
        }
        slots.by_address.sort_unstable();
        slots
    }

    /// The name of the function the slot at `address` is filled with.
    fn at(&self, address: u64) -> Option<StubName> {
        let i = self.by_address.partition_point(|&(a, _, _)| a < address);
        let &(a, what, ifunc) = self.by_address.get(i)?;
        if a != address {
            return None;
        }
        if ifunc {
            return Some(StubName::Ifunc(what));
        }
        let size = Sym::size(self.ctx.container);
        let at = usize::try_from(what).ok()?.checked_mul(size)?;
        self.dynsym.get(at..at.checked_add(size)?)?;
        let sym = Symtab::parse(self.dynsym, at, 1, self.ctx).ok()?.get(0)?;
        let name = section_name(self.dynstr, sym.st_name)?;
        let name = std::str::from_utf8(name).ok().filter(|n| !n.is_empty())?;
        Some(StubName::Symbol(name.to_string()))
    }
}

/// The NUL-terminated string at `offset` of string table `strings`.
fn section_name(strings: &[u8], offset: usize) -> Option<&[u8]> {
    let from = strings.get(offset..)?;
    Some(&from[..from.iter().position(|&b| b == 0)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_through_the_got_are_decoded() {
        // jmp *0x2fe2(%rip)
        assert_eq!(jump_slot(&[0xff, 0x25, 0xe2, 0x2f, 0, 0]), Some(6 + 0x2fe2));
        // endbr64; bnd jmp *0x2fa6(%rip)
        let ibt = [0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xa6, 0x2f, 0, 0];
        assert_eq!(jump_slot(&ibt), Some(11 + 0x2fa6));
        // endbr64; push $0 (the lazy half of an IBT .plt); PLT0's push.
        assert_eq!(jump_slot(&[0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0]), None);
        assert_eq!(jump_slot(&[0xff, 0x35, 0xca, 0x2f, 0, 0]), None);
        // Cut short, and a negative displacement.
        assert_eq!(jump_slot(&[0xff, 0x25, 0xe2]), None);
        assert_eq!(jump_slot(&[0xff, 0x25, 0xf0, 0xff, 0xff, 0xff]), None);
        assert_eq!(jump_slot(&[0xff, 0x25, 0xfa, 0xff, 0xff, 0xff]), Some(0));
    }

    /// A library that calls its own exported functions through its PLT:
    /// `callee` through `.plt` (or `.plt.sec`), `taken`, whose address it
    /// also reads from the GOT, through `.plt.got`.
    const LIBRARY: &str = r#"
        #include <stdint.h>
        __attribute__((noinline)) uint64_t callee(uint64_t x) { return x * 3 + 1; }
        __attribute__((noinline)) uint64_t taken(uint64_t x) { return x ^ 5; }
        uint64_t caller(uint64_t x) { return callee(x) + taken(x); }
        void *address_of_taken(void) { return (void *)taken; }
    "#;

    /// Builds `LIBRARY` with gcc and `flags` into `dir`.
    fn build(dir: &std::path::Path, name: &str, flags: &[&str]) -> Vec<u8> {
        let src = dir.join("plt.c");
        std::fs::write(&src, LIBRARY).expect("write the C source");
        let lib = dir.join(name);
        let out = std::process::Command::new("gcc")
            .args(["-O2", "-fPIC", "-shared", "-o"])
            .arg(&lib)
            .arg(&src)
            .args(flags)
            .output()
            .unwrap_or_else(|e| panic!("this test compiles C with gcc, which is missing: {e}"));
        assert!(
            out.status.success(),
            "gcc {flags:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(&lib).expect("read the library")
    }

    /// The stubs binutils' objdump names in `path`: `(address, name)`.
    fn objdump_stubs(path: &std::path::Path) -> Vec<(u64, String)> {
        let out = std::process::Command::new("objdump")
            .args(["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got"])
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("this test compares with binutils' objdump: {e}"));
        assert!(out.status.success(), "objdump failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.split_once(" <")?;
                let name = rest.strip_suffix(">:")?.strip_suffix("@plt")?;
                Some((u64::from_str_radix(addr, 16).ok()?, name.to_string()))
            })
            .collect()
    }

    #[test]
    fn stubs_are_named_as_binutils_names_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layouts: [(&str, &[&str]); 4] = [
            ("lazy.so", &[]),
            ("now.so", &["-Wl,-z,now"]),
            ("ibt.so", &["-fcf-protection=full", "-Wl,-z,ibtplt"]),
            (
                "ibt-now.so",
                &["-fcf-protection=full", "-Wl,-z,ibtplt", "-Wl,-z,now"],
            ),
        ];
        for (name, flags) in layouts {
            let data = build(dir.path(), name, flags);
            let expected = objdump_stubs(&dir.path().join(name));
            let names: Vec<&str> = expected.iter().map(|(_, n)| n.as_str()).collect();
            assert!(
                names.contains(&"callee") && names.contains(&"taken"),
                "{name}: the library calls both through stubs ({names:?})"
            );
            let vaddrs: Vec<u64> = expected.iter().map(|&(a, _)| a).collect();
            let stubs = Stubs::of(&data, &vaddrs);
            for (addr, want) in &expected {
                // Every byte of the stub, not only its first.
                for at in [*addr, addr + 7] {
                    let got = stubs.at(at).map(|s| &s.name);
                    assert_eq!(
                        got,
                        Some(&StubName::Symbol(want.clone())),
                        "{name} at {at:#x}"
                    );
                }
            }
            // The header (and with IBT the lazy entries) are `.plt`.
            let plt = stubs.stubs.iter().filter(|s| s.name == StubName::Header);
            assert!(plt.count() >= 1, "{name}: PLT0 is found");
        }
    }

    #[test]
    fn garbage_has_no_stubs() {
        assert!(Stubs::of(b"not an ELF image", &[0]).is_empty());
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(Stubs::of(&exe[..200], &[0x1000]).is_empty());
        assert!(
            Stubs::of(&exe, &[]).is_empty(),
            "nothing asked, nothing read"
        );
    }
}
