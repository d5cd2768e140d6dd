//! The kernel's symbol table from `/proc/kallsyms`, the one parser of it:
//! resolves kernel addresses to the symbols a recording embeds (or a live
//! tool prints), turns a set of names into address ranges (the recorder's
//! trim set), and gives `fold` the symbols covering a perf.data file's
//! kernel addresses ([`Kallsyms::covering`]: perf.data carries none).
//!
//! Text symbols only (`t`, `T`, `w`, `W`) at non-zero addresses (zero
//! everywhere: kptr_restrict hides them, and the table is empty). Names
//! that are not UTF-8 are read lossily.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use flamerec_format::KernelSymbol;

/// Largest size assumed for one kernel function.
const MAX_SYMBOL_SIZE: u64 = 64 << 10;

/// `/proc/kallsyms` is a few MiB; anything far bigger is not kallsyms.
const MAX_BYTES: u64 = 256 << 20;

/// Where the running kernel's table is.
const PROC_KALLSYMS: &str = "/proc/kallsyms";

/// File names of the per-boot copies in the cache directory.
const CACHE_PREFIX: &str = "kallsyms-";

/// This boot and its loaded modules: the boot id, and an FNV-1a hash of
/// /proc/modules (absent on kernels without modules). `None` when the boot
/// id cannot be read: then nothing is cached.
fn boot_key() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot = boot.trim();
    if boot.is_empty() || !boot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return None;
    }
    let modules = std::fs::read("/proc/modules").unwrap_or_default();
    let hash = modules.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Some(format!("{boot}-{hash:016x}"))
}

/// Kernel text symbols sorted by address.
#[derive(Debug, Default)]
pub struct Kallsyms {
    starts: Vec<u64>,
    names: Vec<(u32, u32)>,
    modules: Vec<u32>,
    text: String,
    module_names: Vec<String>,
}

impl Kallsyms {
    /// Reads /proc/kallsyms. An address-less table (kptr_restrict) gives an
    /// empty one: kernel frames then fold as addresses.
    pub fn load() -> io::Result<Self> {
        Self::load_from(Path::new(PROC_KALLSYMS))
    }

    /// Reads /proc/kallsyms through a copy kept in `dir` for this boot: the
    /// kernel formats its 5 MB of text anew for every reader (50–80 ms of
    /// CPU per recording on a VM, a tenth of the recorder's CPU on a 10 s
    /// compile), while a file of its text symbols reads in a few. The copy
    /// is keyed by the boot id and the list of loaded modules, so a reboot
    /// or a module loaded since reads the kernel's table again; it holds
    /// addresses, so it is written readable by its owner only, atomically
    /// (a reader never sees half of one), and copies of other boots are
    /// removed. A table without addresses (kptr_restrict) is never kept.
    pub fn load_cached(dir: Option<&Path>) -> io::Result<Self> {
        let (Some(dir), Some(key)) = (dir, boot_key()) else {
            return Self::load();
        };
        let path = dir.join(format!("{CACHE_PREFIX}{key}"));
        if let Ok(k) = Self::load_from(&path) {
            if !k.is_empty() {
                return Ok(k);
            }
        }
        let k = Self::load()?;
        if !k.is_empty() {
            // A cache that cannot be written only costs the next recording.
            let _ = k.store(dir, &path);
        }
        Ok(k)
    }

    /// Writes the table as kallsyms text to `path` in `dir`, owner-only,
    /// through a temporary file renamed into place; other boots' copies go.
    fn store(&self, dir: &Path, path: &Path) -> io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut out = io::BufWriter::new(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?,
        );
        for i in 0..self.starts.len() {
            let module = &self.module_names[self.modules[i] as usize];
            write!(out, "{:016x} T {}", self.starts[i], self.name(i))?;
            if module.is_empty() {
                writeln!(out)?;
            } else {
                writeln!(out, "\t[{module}]")?;
            }
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        for entry in std::fs::read_dir(dir)?.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(CACHE_PREFIX) && entry.path() != path {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    /// Reads a kallsyms file (at most 256 MiB of it).
    pub fn load_from(path: &Path) -> io::Result<Self> {
        let mut bytes = Vec::new();
        File::open(path)?.take(MAX_BYTES).read_to_end(&mut bytes)?;
        Ok(Self::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// Parses the text of /proc/kallsyms.
    pub fn parse(data: &str) -> Self {
        let mut entries: Vec<(u64, &str, &str)> = Vec::new();
        for line in data.lines() {
            let mut it = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            let module = it
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']'))
                .unwrap_or("");
            entries.push((addr, name, module));
        }
        entries.sort_by_key(|e| e.0);
        let mut k = Kallsyms {
            module_names: vec![String::new()],
            ..Default::default()
        };
        k.text.reserve(entries.iter().map(|e| e.1.len()).sum());
        for (addr, name, module) in entries {
            let off = k.text.len() as u32;
            k.text.push_str(name);
            k.starts.push(addr);
            k.names.push((off, name.len() as u32));
            let m = if module.is_empty() {
                0
            } else {
                match k.module_names.iter().position(|n| n == module) {
                    Some(i) => i as u32,
                    None => {
                        k.module_names.push(module.to_string());
                        (k.module_names.len() - 1) as u32
                    }
                }
            };
            k.modules.push(m);
        }
        k
    }

    /// Whether any symbol is known.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    fn name(&self, i: usize) -> &str {
        let (off, len) = self.names[i];
        &self.text[off as usize..(off + len) as usize]
    }

    /// Index of the symbol containing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<usize> {
        let i = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        Some(i)
    }

    /// The symbol at index `i`, sized up to the next symbol.
    pub fn symbol(&self, i: usize) -> KernelSymbol {
        let start = self.starts[i];
        // Several names may share one address; the size runs to the next distinct one.
        let next = self.starts[i..]
            .iter()
            .find(|&&s| s > start)
            .copied()
            .unwrap_or(start + 4096);
        KernelSymbol {
            start,
            // The last symbol before a gap (end of text, module area) would
            // otherwise swallow the gap.
            size: (next - start).min(MAX_SYMBOL_SIZE),
            name: self.name(i).to_string(),
            module: self.module_names[self.modules[i] as usize].clone(),
        }
    }

    /// The symbols covering `addrs`, each once, as perf.data input gets
    /// them: the first of the names at an address, sized up to the next
    /// address that has a symbol (the last one: size 0, open-ended).
    pub fn covering(&self, addrs: &[u64]) -> Vec<KernelSymbol> {
        let mut firsts: Vec<usize> = addrs
            .iter()
            .filter_map(|&a| self.lookup(a))
            .map(|i| self.starts.partition_point(|&s| s < self.starts[i]))
            .collect();
        firsts.sort_unstable();
        firsts.dedup();
        firsts
            .into_iter()
            .map(|i| {
                let start = self.starts[i];
                let next = self.starts[i..].iter().find(|&&s| s > start);
                KernelSymbol {
                    start,
                    size: next.map_or(0, |n| n - start),
                    name: self.name(i).to_string(),
                    module: self.module_names[self.modules[i] as usize].clone(),
                }
            })
            .collect()
    }

    /// Address ranges of every symbol `wanted` accepts, sorted and merged.
    pub fn ranges(&self, wanted: impl Fn(&str) -> bool) -> AddressRanges {
        let mut r = Vec::new();
        for i in 0..self.starts.len() {
            if wanted(self.name(i)) {
                let s = self.symbol(i);
                r.push((s.start, s.start + s.size));
            }
        }
        r.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(r.len());
        for (s, e) in r {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        AddressRanges(merged)
    }
}

/// Sorted, disjoint address ranges.
#[derive(Debug, Default, Clone)]
pub struct AddressRanges(Vec<(u64, u64)>);

impl AddressRanges {
    /// Whether `addr` falls in one of the ranges.
    pub fn contains(&self, addr: u64) -> bool {
        let i = self.0.partition_point(|r| r.0 <= addr);
        i > 0 && addr < self.0[i - 1].1
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_cached_copy_reads_back_the_same_table() {
        let dir = std::env::temp_dir().join(format!("flamerec-kallsyms-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let text = "ffffffff81000000 T _stext\nffffffff81000100 t helper\nffffffffc0000000 t mod_fn\t[kvm]\n";
        let k = Kallsyms::parse(text);
        let path = dir.join(format!("{CACHE_PREFIX}test"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{CACHE_PREFIX}old-boot")), "x").unwrap();
        k.store(&dir, &path).unwrap();
        let back = Kallsyms::load_from(&path).unwrap();
        for addr in [
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0180,
            0xffff_ffff_c000_0004,
        ] {
            let (a, b) = (k.lookup(addr).unwrap(), back.lookup(addr).unwrap());
            assert_eq!(k.symbol(a), back.symbol(b));
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Other boots' copies are gone; only this one is left.
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;

    const TABLE: &str = "ffffffff81000000 T _stext\n\
ffffffff81000100 T vfs_read\n\
ffffffff81000200 t perf_swevent_hrtimer\n\
ffffffff81000300 T __hrtimer_run_queues\n\
ffffffff81000400 d some_data\n\
ffffffffc0000000 t xfs_read\t[xfs]\n";

    #[test]
    fn lookup_and_sizes() {
        let k = Kallsyms::parse(TABLE);
        let i = k.lookup(0xffffffff81000150).unwrap();
        let s = k.symbol(i);
        assert_eq!(
            (s.name.as_str(), s.start, s.size),
            ("vfs_read", 0xffffffff81000100, 0x100)
        );
        let m = k.symbol(k.lookup(0xffffffffc0000010).unwrap());
        assert_eq!((m.name.as_str(), m.module.as_str()), ("xfs_read", "xfs"));
        assert!(k.lookup(0x1000).is_none());
    }

    #[test]
    fn covering_gives_each_symbol_once_with_the_first_alias() {
        let text = "ffffffff81000000 T _text\n\
                    ffffffff81000000 T _stext\n\
                    ffffffff81000100 D some_data\n\
                    ffffffff81000200 t helper\n\
                    ffffffffc0001000 t ext4_read\t[ext4]\n\
                    0000000000000000 T hidden\n\
                    bogus\n";
        let k = Kallsyms::parse(text);
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

    #[test]
    fn files_are_read_lossily_and_missing_ones_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kallsyms");
        std::fs::write(
            &path,
            b"ffffffff81000000 T caf\xe9\nffffffff81000100 T next\n",
        )
        .expect("write");
        let k = Kallsyms::load_from(&path).expect("read");
        let got = k.covering(&[0xffff_ffff_8100_0001]);
        assert_eq!(got[0].name, "caf\u{fffd}");
        assert!(Kallsyms::load_from(&dir.path().join("none")).is_err());
    }

    #[test]
    fn ranges_cover_the_named_symbols_only() {
        let k = Kallsyms::parse(TABLE);
        let r = k.ranges(|n| n.starts_with("perf_") || n.starts_with("__hrtimer"));
        assert!(r.contains(0xffffffff81000250));
        assert!(r.contains(0xffffffff81000350));
        assert!(!r.contains(0xffffffff81000150));
        assert!(!r.contains(0xffffffff81000400 + 0x10000));
    }
}
