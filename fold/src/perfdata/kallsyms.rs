//! Kernel symbols for perf.data input, read from `/proc/kallsyms` of the
//! folding machine: perf.data files do not carry kernel symbols, and perf
//! itself reads the running kernel's too. Right when the recording was made
//! on this machine and kernel (the importer warns when the kernel release
//! differs); without permission (addresses all zero) kernel frames print as
//! `[kernel.kallsyms]+0xADDR`.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::Path;

use flamerec_format::KernelSymbol;

/// `/proc/kallsyms` is a few MiB; anything far bigger is not kallsyms.
const MAX_BYTES: u64 = 256 << 20;

/// Text symbols sorted by address, as ranges into the file's bytes (names
/// become strings only for the few symbols a recording needs).
#[derive(Debug, Default)]
pub(crate) struct Kallsyms {
    text: Vec<u8>,
    /// (address, name range, module range).
    syms: Vec<(u64, Range<usize>, Range<usize>)>,
}

impl Kallsyms {
    /// Reads `path`; an unreadable file gives an empty table.
    pub(crate) fn load(path: &Path) -> Self {
        let mut text = Vec::new();
        match File::open(path).and_then(|f| f.take(MAX_BYTES).read_to_end(&mut text)) {
            Ok(_) => Self::parse(text),
            Err(_) => Kallsyms::default(),
        }
    }

    fn parse(text: Vec<u8>) -> Self {
        let mut syms = Vec::new();
        let mut at = 0;
        for line in text.split(|&b| b == b'\n') {
            let start = at;
            at += line.len() + 1;
            if let Some(sym) = parse_line(line, start) {
                syms.push(sym);
            }
        }
        syms.sort_by_key(|s| s.0);
        syms.dedup_by_key(|s| s.0);
        Kallsyms { text, syms }
    }

    fn str(&self, r: &Range<usize>) -> String {
        String::from_utf8_lossy(self.text.get(r.clone()).unwrap_or_default()).into_owned()
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
                    name: self.str(name),
                    module: self.str(module),
                })
            })
            .collect()
    }
}

/// `ADDR TYPE NAME [\t[MODULE]]` at byte `base` of the file: text symbols only.
fn parse_line(line: &[u8], base: usize) -> Option<(u64, Range<usize>, Range<usize>)> {
    let mut fields = Vec::with_capacity(4);
    let mut i = 0;
    while i < line.len() && fields.len() < 4 {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        let s = i;
        while i < line.len() && !line[i].is_ascii_whitespace() {
            i += 1;
        }
        if s < i {
            fields.push(s..i);
        }
    }
    let field = |k: usize| fields.get(k).and_then(|r| line.get(r.clone()));
    let addr = u64::from_str_radix(std::str::from_utf8(field(0)?).ok()?, 16).ok()?;
    if addr == 0 || !matches!(field(1)?, b"t" | b"T" | b"w" | b"W") {
        return None;
    }
    let name = fields.get(2)?.clone();
    let module = match (fields.get(3), field(3)) {
        (Some(r), Some(m)) if m.len() >= 2 && m[0] == b'[' && m[m.len() - 1] == b']' => {
            r.start + 1..r.end - 1
        }
        _ => 0..0,
    };
    let shift = |r: Range<usize>| r.start + base..r.end + base;
    Some((addr, shift(name), shift(module)))
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
        let k = Kallsyms::parse(text.as_bytes().to_vec());
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
