//! Names for the addresses of a running process, for the tools that look at
//! one while it runs (`flamerec stacks`, the `flamerec-stall` library) and
//! for the recorder, which reads the mappings of processes it attaches to.
//!
//! A process's executable mappings come from `/proc/PID/maps`; an address
//! becomes (module, file offset) through them, and the frames are named by
//! [`crate::symbolize`] as a recording's would be. This module reads files
//! only; it never touches another process's memory.

use std::fs;

use flamerec_format::{Frame, FrameId, KernelSymbol, Module, ModuleKind, Tables};
pub use flamerec_perf::procfs::{exec_maps, ExecMap};

use crate::kernel::kallsyms::Kallsyms;
use crate::names::{basename, unresolved};
use crate::{symbolize, NameOptions, Prefetch};

/// This process's vDSO image, from /proc/self/mem. Every process maps the
/// same one, so it stands in for theirs when unwinding through it (the
/// vDSO has no file). `None` when it cannot be found or read.
pub fn vdso_image() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let maps = exec_maps(std::process::id());
    let vdso = maps.iter().find(|m| m.path == "[vdso]")?;
    let len = usize::try_from(vdso.end - vdso.start).ok()?;
    if len > 1 << 20 {
        return None;
    }
    let mem = fs::File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; len];
    mem.read_exact_at(&mut buf, vdso.start).ok()?;
    Some(buf)
}

/// Where an address of a live process lies: the frame a recording would
/// hold for it (module index into [`AddressSpace::modules`], file offset).
#[derive(Debug, Clone)]
pub struct AddressSpace {
    maps: Vec<ExecMap>,
    modules: Vec<Module>,
    /// Per mapping, its index in `modules`.
    module_of: Vec<usize>,
}

impl AddressSpace {
    /// The executable mappings of `pid` now.
    pub fn of(pid: u32) -> Self {
        Self::from_maps(exec_maps(pid))
    }

    /// An address space of the given mappings.
    pub fn from_maps(mut maps: Vec<ExecMap>) -> Self {
        maps.sort_by_key(|m| m.start);
        let mut modules: Vec<Module> = Vec::new();
        let mut module_of = Vec::with_capacity(maps.len());
        for m in &maps {
            let module = Module::mapped(&m.path, &[]);
            let i = match modules.iter().position(|x| *x == module) {
                Some(i) => i,
                None => {
                    modules.push(module);
                    modules.len() - 1
                }
            };
            module_of.push(i);
        }
        AddressSpace {
            maps,
            modules,
            module_of,
        }
    }

    /// The mappings, sorted by start address.
    pub fn maps(&self) -> &[ExecMap] {
        &self.maps
    }

    /// The distinct modules mapped.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// The module (index into [`AddressSpace::modules`]) and module-relative
    /// address of `addr`: a file offset for files, the offset from the start
    /// for the vDSO, the address itself for anonymous memory.
    pub fn resolve(&self, addr: u64) -> Option<(usize, u64)> {
        let i = self
            .maps
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = &self.maps[i];
        if addr >= m.end {
            return None;
        }
        let module = self.module_of[i];
        let rel = match self.modules[module].kind {
            ModuleKind::File => addr - m.start + m.pgoff,
            ModuleKind::Vdso => addr - m.start,
            _ => addr,
        };
        Some((module, rel))
    }
}

/// The names of one frame, outermost function first (inlined ones after);
/// never empty.
pub type FrameNames = Vec<String>;

/// Names `user` addresses of the process whose mappings `space` holds and
/// `kernel` addresses through `kallsyms`, as `fold` would name them in a
/// recording. Addresses are looked up as given: callers move return
/// addresses back into the call instruction first. Returns one entry per
/// input address, in order, and the warnings symbolization had.
pub fn name_addresses(
    space: &AddressSpace,
    user: &[u64],
    kallsyms: Option<&Kallsyms>,
    kernel: &[u64],
    opts: &NameOptions,
) -> (Vec<FrameNames>, Vec<FrameNames>, Vec<String>) {
    let mut tables = Tables::default();
    tables.modules = space.modules.clone();
    let unknown = tables.modules.len() as u32;
    tables.modules.push(Module::mapped("//anon", &[]));
    let kernel_module = tables.modules.len() as u32;
    tables.modules.push(Module {
        kind: ModuleKind::Kernel,
        path: "[kernel.kallsyms]".into(),
        build_id: Vec::new(),
    });
    for &addr in user {
        let frame = match space.resolve(addr) {
            Some((module, rel)) => Frame {
                module: module as u32,
                address: rel,
            },
            None => Frame {
                module: unknown,
                address: addr,
            },
        };
        tables.frames.push(frame);
    }
    for &addr in kernel {
        tables.frames.push(Frame {
            module: kernel_module,
            address: addr,
        });
    }
    if let Some(k) = kallsyms {
        let mut seen = std::collections::HashSet::new();
        tables.kernel_symbols = kernel
            .iter()
            .filter_map(|&a| k.lookup(a))
            .filter(|&i| seen.insert(i))
            .map(|i| k.symbol(i))
            .collect::<Vec<KernelSymbol>>();
    }
    let used: Vec<FrameId> = (0..tables.frames.len() as FrameId).collect();
    let symbols = symbolize(&tables, &used, opts, &Prefetch::default(), None);
    let mut names: Vec<FrameNames> = symbols
        .frames
        .iter()
        .zip(&tables.frames)
        .map(|(ids, frame)| {
            let mut n: FrameNames = ids
                .iter()
                .filter_map(|&f| symbols.functions.get(f as usize))
                .map(|f| f.name.clone())
                .collect();
            if n.is_empty() {
                let module = tables
                    .modules
                    .get(frame.module as usize)
                    .map_or("[unknown]", |m| basename(&m.path));
                n.push(unresolved(module, frame.address));
            }
            n
        })
        .collect();
    let kernel_names = names.split_off(user.len());
    (names, kernel_names, symbols.warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vdso_image() {
        let image = vdso_image().expect("every x86-64 process maps a vDSO");
        assert_eq!(&image[..4], b"\x7fELF");
    }

    #[inline(never)]
    fn flamerec_live_test_target() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn names_a_function_of_this_process() {
        let space = AddressSpace::of(std::process::id());
        let addr = flamerec_live_test_target as *const () as usize as u64;
        assert!(space.resolve(addr).is_some(), "{:?}", space.maps());
        let opts = NameOptions::default();
        let (user, kernel, _) = name_addresses(&space, &[addr, 8], None, &[], &opts);
        assert!(kernel.is_empty());
        let leaf = user[0].last().map_or("", String::as_str);
        assert!(
            leaf.ends_with("::flamerec_live_test_target"),
            "{:?}",
            user[0]
        );
        assert_eq!(user[1], vec!["[anon]+0x8".to_string()]);
    }
}
