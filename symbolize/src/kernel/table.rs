//! Kernel frames: absolute addresses looked up in the kernel symbols the
//! recording carries (the recorder embeds the ones its samples need). Never
//! reads `/proc/kallsyms` of the folding machine, which may run another kernel.

use flamerec_format::KernelSymbol;

/// Kernel symbols sorted by start address.
pub(crate) struct KernelTable<'a> {
    syms: Vec<&'a KernelSymbol>,
}

impl<'a> KernelTable<'a> {
    pub(crate) fn new(symbols: &'a [KernelSymbol]) -> Self {
        let mut syms: Vec<&KernelSymbol> = symbols.iter().collect();
        // Stable order for equal starts (aliases): the first in the file wins.
        syms.sort_by_key(|s| s.start);
        syms.dedup_by_key(|s| s.start);
        KernelTable { syms }
    }

    /// The symbol covering `addr`. A symbol of size 0 covers everything up to
    /// the next one.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&'a KernelSymbol> {
        let idx = self.syms.partition_point(|s| s.start <= addr);
        let sym = *self.syms.get(idx.checked_sub(1)?)?;
        let inside = sym.size == 0 || addr - sym.start < sym.size;
        inside.then_some(sym)
    }
}

/// Module name of a kernel symbol as perf prints it: `[kernel.kallsyms]` for
/// the image, `[ext4]` for a loadable module.
pub(crate) fn module_name(sym: &KernelSymbol) -> String {
    if sym.module.is_empty() {
        "[kernel.kallsyms]".to_string()
    } else {
        format!("[{}]", sym.module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(start: u64, size: u64, name: &str) -> KernelSymbol {
        KernelSymbol {
            start,
            size,
            name: name.into(),
            module: String::new(),
        }
    }

    #[test]
    fn lookup_respects_sizes_and_order() {
        let syms = vec![
            sym(0x300, 0, "c"),
            sym(0x100, 0x10, "a"),
            sym(0x200, 0x80, "b"),
        ];
        let t = KernelTable::new(&syms);
        assert!(t.lookup(0xff).is_none());
        assert_eq!(t.lookup(0x100).map(|s| s.name.as_str()), Some("a"));
        assert_eq!(t.lookup(0x10f).map(|s| s.name.as_str()), Some("a"));
        assert!(t.lookup(0x110).is_none());
        assert_eq!(t.lookup(0x27f).map(|s| s.name.as_str()), Some("b"));
        assert_eq!(t.lookup(u64::MAX).map(|s| s.name.as_str()), Some("c"));
    }
}
