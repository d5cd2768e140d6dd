//! Kernel symbols for perf.data input, read from `/proc/kallsyms` of the
//! folding machine: perf.data files do not carry kernel symbols, and perf
//! itself reads the running kernel's too. Right when the recording was made
//! on this machine and kernel (the importer warns when the kernel release
//! differs); without permission (addresses all zero) kernel frames print as
//! `[kernel.kallsyms]+0xADDR`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flamerec_format::KernelSymbol;

/// `/proc/kallsyms` is a few MiB; anything far bigger is not kallsyms.
const MAX_BYTES: u64 = 256 << 20;

/// Text symbols sorted by address.
#[derive(Debug, Default)]
pub(crate) struct Kallsyms {
    syms: Vec<(u64, String, String)>,
}

impl Kallsyms {
    /// Reads `path`; an unreadable file gives an empty table.
    pub(crate) fn load(path: &Path) -> Self {
        match File::open(path) {
            Ok(f) => Self::parse(BufReader::new(f.take(MAX_BYTES))),
            Err(_) => Kallsyms::default(),
        }
    }

    fn parse<R: BufRead>(input: R) -> Self {
        let mut syms: Vec<(u64, String, String)> = input
            .split(b'\n')
            .map_while(Result::ok)
            .filter_map(|line| {
                let line = String::from_utf8_lossy(&line);
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                let module = parts
                    .next()
                    .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
                    .unwrap_or_default();
                let text = matches!(kind, "t" | "T" | "w" | "W");
                (text && addr != 0).then(|| (addr, name.to_string(), module.to_string()))
            })
            .collect();
        syms.sort_by_key(|s| s.0);
        syms.dedup_by_key(|s| s.0);
        Kallsyms { syms }
    }

    /// The symbols covering `addrs`, each once, sized up to the next symbol.
    pub(crate) fn covering(&self, addrs: &[u64]) -> Vec<KernelSymbol> {
        let mut idx: Vec<usize> = addrs
            .iter()
            .filter_map(|&a| self.syms.partition_point(|s| s.0 <= a).checked_sub(1))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter()
            .filter_map(|i| {
                let (start, name, module) = self.syms.get(i)?;
                let size = self.syms.get(i + 1).map_or(0, |n| n.0 - start);
                Some(KernelSymbol {
                    start: *start,
                    size,
                    name: name.clone(),
                    module: module.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_symbols_with_modules_cover_addresses() {
        let text = "ffffffff81000000 T _text\n\
                    ffffffff81000100 D some_data\n\
                    ffffffff81000200 t helper\n\
                    ffffffffc0001000 t ext4_read\t[ext4]\n\
                    0000000000000000 T hidden\n\
                    bogus\n";
        let k = Kallsyms::parse(text.as_bytes());
        assert_eq!(k.syms.len(), 3);
        let got = k.covering(&[
            0xffff_ffff_8100_0150,
            0xffff_ffff_8100_0010,
            0xffff_ffff_c000_1004,
            5,
        ]);
        let names: Vec<(&str, u64, &str)> = got
            .iter()
            .map(|s| (s.name.as_str(), s.size, s.module.as_str()))
            .collect();
        assert_eq!(names, vec![("_text", 0x200, ""), ("ext4_read", 0, "ext4")]);
    }
}
