//! The one kind of frame framehop cannot step: a frame whose canonical
//! frame address is kept in `rbx`. framehop tracks only ip, sp and bp;
//! glibc's lazy-binding trampoline (`_dl_runtime_resolve_xsave*`, on every
//! first call of a library function in a program linked without `-z now`)
//! saves `rsp` in `rbx` and realigns the stack, so every sample in symbol
//! lookup at start-up would end there.
//!
//! With the sampled `rbx`, the frame's CFA is found by following `rbx`
//! through the frames unwound so far: where a frame's DWARF rule says it
//! saved the caller's `rbx`, the caller's value is read from there. This is
//! read with gimli from the module's `.eh_frame`, only for these frames.

use std::sync::Arc;

use std::ops::Range;

use gimli::{
    BaseAddresses, CallFrameInstruction, CfaRule, CieOrFde, EhFrame, EhFrameHdr, EndianSlice,
    LittleEndian, Register, RegisterRule, UnwindContext, UnwindSection, X86_64,
};

use crate::elf::UnwindSections;

/// A module of a process, for looking up its DWARF rules.
#[derive(Clone)]
pub(crate) struct CfiModule {
    /// Where stated address 0 lands in the process.
    pub bias: u64,
    pub sections: Arc<UnwindSections>,
}

/// What one frame's rules say about the three registers unwinding follows.
pub(crate) struct Rules {
    /// The CFA: a register and an offset.
    pub cfa: (Register, i64),
    /// Where the return address, rbp and rbx are saved, as offsets from the CFA.
    pub ra: Option<i64>,
    pub bp: Option<i64>,
    pub bx: Option<i64>,
}

/// `s`'s `.eh_frame`, and the addresses its pointers are relative to.
fn eh_frame(s: &UnwindSections) -> Option<(EhFrame<EndianSlice<'_, LittleEndian>>, BaseAddresses)> {
    let (eh_range, eh_bytes) = s.eh_frame.as_ref()?;
    let mut bases = BaseAddresses::default().set_eh_frame(eh_range.start);
    if let Some(text) = &s.text {
        bases = bases.set_text(text.start);
    }
    if let Some((hdr, _)) = &s.eh_frame_hdr {
        bases = bases.set_eh_frame_hdr(hdr.start);
    }
    Some((EhFrame::new(eh_bytes, LittleEndian), bases))
}

/// The DWARF rules of `module` at `avma` (an address to look up: the ip, or
/// a return address less one).
pub(crate) fn rules(module: &CfiModule, avma: u64) -> Option<Rules> {
    let s = &module.sections;
    let (eh_frame, bases) = eh_frame(s)?;
    let svma = avma.checked_sub(module.bias)?;
    let fde = match &s.eh_frame_hdr {
        Some((_, hdr_bytes)) => {
            let hdr = EhFrameHdr::new(hdr_bytes, LittleEndian)
                .parse(&bases, 8)
                .ok()?;
            hdr.table()?
                .fde_for_address(&eh_frame, &bases, svma, EhFrame::cie_from_offset)
                .ok()?
        }
        None => eh_frame
            .fde_for_address(&bases, svma, EhFrame::cie_from_offset)
            .ok()?,
    };
    let mut ctx = UnwindContext::new();
    let row = fde
        .unwind_info_for_address(&eh_frame, &bases, &mut ctx, svma)
        .ok()?;
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => (*register, *offset),
        CfaRule::Expression(_) => return None,
    };
    let saved = |r: Register| match row.register(r) {
        Some(RegisterRule::Offset(o)) => Some(o),
        _ => None,
    };
    Some(Rules {
        cfa,
        ra: saved(X86_64::RA),
        bp: saved(X86_64::RBP),
        bx: saved(X86_64::RBX),
    })
}

/// The rows (stated address ranges, sorted) of `s`'s `.eh_frame` whose CFA
/// is kept in a register other than rsp and rbp. framehop cannot find such
/// a frame's CFA and falls back to the frame-pointer rule, which in code
/// without frame pointers reads a word no call put there as the return
/// address (measured: `[unknown]+0x0` above `_dl_runtime_resolve_xsavec`);
/// the walk steps these rows itself. Only FDEs whose instructions name
/// another register have their rows evaluated (a few in glibc).
pub(crate) fn cfa_elsewhere(s: &UnwindSections) -> Vec<Range<u64>> {
    let Some((eh_frame, bases)) = eh_frame(s) else {
        return Vec::new();
    };
    let followed = |r: Register| r == X86_64::RSP || r == X86_64::RBP;
    let mut out = Vec::new();
    let mut ctx = UnwindContext::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        let mut instructions = fde.instructions(&eh_frame, &bases);
        let mut other = false;
        while let Ok(Some(i)) = instructions.next() {
            if let CallFrameInstruction::DefCfa { register, .. }
            | CallFrameInstruction::DefCfaSf { register, .. }
            | CallFrameInstruction::DefCfaRegister { register } = i
            {
                if !followed(register) {
                    other = true;
                    break;
                }
            }
        }
        if !other {
            continue;
        }
        let Ok(mut rows) = fde.rows(&eh_frame, &bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = rows.next_row() {
            if let CfaRule::RegisterAndOffset { register, .. } = row.cfa() {
                if !followed(*register) {
                    out.push(row.start_address()..row.end_address());
                }
            }
        }
    }
    out.sort_by_key(|r| r.start);
    out
}

/// Whether `svma` lies in one of `ranges` (sorted, as [`cfa_elsewhere`] gives).
pub(crate) fn in_ranges(ranges: &[Range<u64>], svma: u64) -> bool {
    let i = ranges.partition_point(|r| r.start <= svma);
    i > 0 && svma < ranges[i - 1].end
}

/// The caller's (ip, sp, bp) of a frame whose CFA is `rbx`-based, given
/// the frames unwound before it (their lookup address and CFA, leaf
/// first), the sampled `rbx`, the frame's own lookup address and bp, and a
/// word reader. `module_of` finds the module of an address.
pub(crate) fn step_by_rbx(
    module_of: &dyn Fn(u64) -> Option<CfiModule>,
    history: &[(u64, u64)],
    sampled_bx: u64,
    lookup: u64,
    bp: u64,
    read: &mut dyn FnMut(u64) -> Option<u64>,
) -> Option<(u64, u64, u64)> {
    let own = rules(&module_of(lookup)?, lookup)?;
    let (register, offset) = own.cfa;
    if register != X86_64::RBX {
        return None;
    }
    // rbx as this frame sees it: each frame below that saved its caller's
    // rbx says where.
    let mut bx = sampled_bx;
    for &(at, cfa) in history {
        if let Some(saved) = module_of(at).and_then(|m| rules(&m, at)).and_then(|r| r.bx) {
            bx = read(cfa.checked_add_signed(saved)?)?;
        }
    }
    let cfa = bx.checked_add_signed(offset)?;
    let ra = read(cfa.checked_add_signed(own.ra.unwrap_or(-8))?)?;
    let bp = match own.bp {
        Some(o) => read(cfa.checked_add_signed(o)?)?,
        None => bp,
    };
    Some((ra, cfa, bp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flamerec_testkit::maps::{own_code_mapping, own_exec_maps};

    #[inline(never)]
    fn probe() -> u64 {
        std::hint::black_box(3)
    }

    /// This test binary as a module: its unwind sections and where it is loaded.
    fn this_binary() -> CfiModule {
        let f = std::fs::File::open("/proc/self/exe").expect("own binary");
        let sections = crate::read_unwind_sections(&f).expect("ELF");
        let exe = std::fs::read_link("/proc/self/exe").expect("exe path");
        let code = own_code_mapping(&exe);
        let svma = sections.svma_of_exec_mapping(code.pgoff).expect("segment");
        CfiModule {
            bias: code.start - svma,
            sections: Arc::new(sections),
        }
    }

    #[test]
    fn a_functions_first_instruction_has_its_cfa_right_above_the_return_address() {
        let m = this_binary();
        let addr = probe as *const () as usize as u64;
        let r = rules(&m, addr).expect("rules at the function's entry");
        assert_eq!(r.cfa, (X86_64::RSP, 8));
        assert_eq!(r.ra, Some(-8));
        assert!(rules(&m, 16).is_none());
    }

    /// glibc's lazy-binding trampolines keep their CFA in rbx (and a few
    /// loader functions in other registers): the dynamic loader's rows say
    /// so, each found row's own rules agree, the rows next to them do not,
    /// and this binary (Rust, no such code) has none.
    #[test]
    fn rows_keeping_the_cfa_in_rbx_are_found() {
        assert!(cfa_elsewhere(&this_binary().sections).is_empty());
        let ld = own_exec_maps()
            .into_iter()
            .map(|m| m.path)
            .find(|p| p.contains("/ld-linux"))
            .expect("a dynamic loader");
        let f = std::fs::File::open(&ld).expect("the loader");
        let sections = crate::read_unwind_sections(&f).expect("ELF");
        let ranges = cfa_elsewhere(&sections);
        assert!(!ranges.is_empty(), "{ld}");
        let m = CfiModule {
            bias: 0,
            sections: Arc::new(sections),
        };
        let mut in_rbx = 0;
        for r in &ranges {
            let own = rules(&m, r.start).expect("rules");
            assert!(![X86_64::RSP, X86_64::RBP].contains(&own.cfa.0), "{r:x?}");
            in_rbx += usize::from(own.cfa.0 == X86_64::RBX);
            assert!(in_ranges(&ranges, r.start) && in_ranges(&ranges, r.end - 1));
            let before = rules(&m, r.start - 1).map(|b| b.cfa.0);
            assert!(
                before.is_none_or(|b| [X86_64::RSP, X86_64::RBP].contains(&b))
                    || in_ranges(&ranges, r.start - 1),
                "{r:x?}"
            );
        }
        assert!(in_rbx > 0, "{ranges:x?}");
    }

    #[test]
    fn without_rules_for_the_frame_nothing_is_guessed() {
        let mut read = |_: u64| Some(0x4242);
        let none = |_: u64| None;
        assert!(step_by_rbx(&none, &[(0x10, 0x1000)], 7, 0x20, 0, &mut read).is_none());
        // The test binary's own code keeps its CFA in rsp, not rbx.
        let m = this_binary();
        let module_of = |_: u64| Some(m.clone());
        let addr = probe as *const () as usize as u64;
        assert!(step_by_rbx(&module_of, &[], 7, addr, 0, &mut read).is_none());
    }
}
