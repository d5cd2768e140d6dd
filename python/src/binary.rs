//! What a CPython binary (a `libpython3.X.so` or a `python3.X` linked
//! statically against it) says about itself, from its file: where
//! `_PyRuntime` is and how big, its version, where `PyCode_Type` is, and
//! the address ranges of the eval loop (`_PyEval_EvalFrameDefault` and
//! its `.cold` part, where the symbol table names one).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use goblin::container::Ctx;

use crate::cold;
use goblin::elf::section_header::{SHT_NOBITS, SHT_PROGBITS};
use goblin::elf::sym::STT_FUNC;
use goblin::elf::{program_header::PT_LOAD, Elf, SectionHeader};

/// The largest binary read: its size is allocated (only its tables are
/// read into it), or read whole where its tables are not enough.
const MAX_BINARY: u64 = 1 << 30;

/// Symbols and version of one CPython binary, as file virtual addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonBinary {
    /// `_PyRuntime`'s address and size.
    pub runtime: (u64, u64),
    /// (major, minor, micro), from `Py_Version` (3.11+) or the file name
    /// (micro 0 then).
    pub version: (u8, u8, u8),
    /// `PyCode_Type`'s address.
    pub code_type: Option<u64>,
    /// The eval loop's address ranges.
    pub eval: Vec<(u64, u64)>,
    /// The file-offset ranges of the binary's functions its symbol tables
    /// size, sorted by start: the interpreter's frame right outside a
    /// stack's outermost Python frame is shown as its function alone,
    /// without the call into the eval loop inlined into it
    /// (`_PyEval_Vector`, `_PyEval_EvalFrame`).
    pub functions: Arc<[(u64, u64)]>,
    /// The file-offset ranges of the functions through which C calls into
    /// the eval loop where they are not inlined (`_PyEval_Vector`,
    /// `_PyFunction_Vectorcall`): left out right outside the outermost
    /// Python frame.
    pub glue: Vec<(u64, u64)>,
    /// Where `Py_GetVersion` keeps the text it makes (`"3.10.13 (main, …"`,
    /// a static of its own, filled as the runtime starts): the micro version
    /// of a 3.8–3.10, whose binary holds no `Py_Version`. `None` where the
    /// binary says its version otherwise, or keeps no symbol table.
    pub version_text: Option<u64>,
    /// `(vaddr - offset)` of each loadable segment with its file range, to
    /// place the file in a process.
    segments: Vec<(u64, u64, u64)>,
}

/// Why a file is not a CPython binary this crate can read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BinaryError {
    /// It could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not an ELF file goblin can parse.
    #[error("{0} is not an ELF file")]
    NotElf(String),
    /// No `_PyRuntime` symbol: not a CPython runtime.
    #[error("{0} has no _PyRuntime symbol")]
    NoRuntime(String),
    /// No version could be told.
    #[error("{0}: the CPython version cannot be told (no Py_Version, no python3.X in its name)")]
    NoVersion(String),
}

impl PythonBinary {
    /// Reads the binary at `path`: its tables only (see [`tables_of`]),
    /// or the whole file where those are not enough to parse it.
    pub fn read(path: &Path) -> Result<PythonBinary, BinaryError> {
        Self::read_named(path, &path.display().to_string())
    }

    /// [`PythonBinary::read`] of a binary read at `path` whose own name is
    /// `name` (a mapping read through `/proc/PID/map_files` keeps the name
    /// its process mapped, which tells the version of 3.8–3.10).
    pub fn read_named(path: &Path, name: &str) -> Result<PythonBinary, BinaryError> {
        let name = name.to_string();
        let failed = |source| BinaryError::Read {
            path: name.clone(),
            source,
        };
        let file = File::open(path).map_err(failed)?;
        if let Ok(tables) = tables_of(&file) {
            let read = |off: u64, n: usize| {
                let mut b = vec![0u8; n];
                file.read_exact_at(&mut b, off).ok().map(|()| b)
            };
            if let Ok(binary) = Self::parse_with(&tables, &name, read) {
                return Ok(binary);
            }
        }
        let len = file.metadata().map_err(failed)?.len();
        if len > MAX_BINARY {
            let big = io::Error::new(io::ErrorKind::InvalidData, "larger than 1 GiB");
            return Err(failed(big));
        }
        let mut data = Vec::with_capacity(len as usize);
        io::Read::read_to_end(&mut &file, &mut data).map_err(failed)?;
        Self::parse(&data, &name)
    }

    /// Parses the bytes of a binary named `name` (for messages and the
    /// version of 3.8–3.10, which is only in the file name).
    pub fn parse(data: &[u8], name: &str) -> Result<PythonBinary, BinaryError> {
        let read = |off: u64, n: usize| {
            let from = usize::try_from(off).ok()?;
            data.get(from..from.checked_add(n)?).map(<[u8]>::to_vec)
        };
        Self::parse_with(data, name, read)
    }

    /// [`PythonBinary::parse`] of `data`, whose headers and symbol tables
    /// are the file's, with other bytes (`n` at a file offset) from `read`.
    fn parse_with(
        data: &[u8],
        name: &str,
        read: impl Fn(u64, usize) -> Option<Vec<u8>>,
    ) -> Result<PythonBinary, BinaryError> {
        let at = |off: u64| -> Option<[u8; 8]> { read(off, 8)?.try_into().ok() };
        let elf = Elf::parse(data).map_err(|_| BinaryError::NotElf(name.into()))?;
        let mut runtime = None;
        let mut py_version = None;
        let mut code_type = None;
        let mut version_text = None;
        let mut eval = Vec::new();
        // Sized functions, and the glue among them: (address, size).
        let mut functions = Vec::new();
        let mut glue = Vec::new();
        let syms = elf
            .dynsyms
            .iter()
            .map(|s| (s, elf.dynstrtab.get_at(s.st_name)))
            .chain(elf.syms.iter().map(|s| (s, elf.strtab.get_at(s.st_name))));
        for (sym, sym_name) in syms {
            let Some(sym_name) = sym_name else { continue };
            if sym.st_value == 0 {
                continue;
            }
            if sym.st_type() == STT_FUNC && sym.st_size > 0 {
                functions.push((sym.st_value, sym.st_size));
                if matches!(
                    sym_name,
                    "_PyEval_Vector"
                        | "_PyFunction_Vectorcall"
                        | "_PyEval_EvalCode"
                        | "_PyEval_EvalCodeWithName"
                        | "function_code_fastcall"
                ) {
                    glue.push((sym.st_value, sym.st_size));
                }
            }
            match sym_name {
                "_PyRuntime" => runtime = Some((sym.st_value, sym.st_size)),
                "Py_Version" => py_version = Some(sym.st_value),
                "PyCode_Type" => code_type = Some(sym.st_value),
                n if is_version_text(n) && sym.st_size >= VERSION_TEXT => {
                    version_text = Some(sym.st_value);
                }
                "_PyEval_EvalFrameDefault" | "_PyEval_EvalFrameDefault.cold" => {
                    let end = sym.st_value.saturating_add(sym.st_size.max(1));
                    let range = (sym.st_value, end);
                    if !eval.contains(&range) {
                        eval.push(range);
                    }
                }
                _ => {}
            }
        }
        let runtime = runtime.ok_or_else(|| BinaryError::NoRuntime(name.into()))?;
        let segments: Vec<(u64, u64, u64)> = elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| {
                (
                    p.p_vaddr.wrapping_sub(p.p_offset),
                    p.p_offset,
                    p.p_offset.saturating_add(p.p_filesz),
                )
            })
            .collect();
        let version = py_version
            .and_then(|v| {
                let hex = u64::from_le_bytes(at(file_offset(&segments, v)?)?);
                Some(((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8))
            })
            .or_else(|| version_in_name(name))
            .ok_or_else(|| BinaryError::NoVersion(name.into()))?;
        if let [hot] = eval[..] {
            // Stripped of its symbol table: its cold part, if it has one,
            // is found from its jumps (see `cold`).
            eval.extend(cold_part_of(&elf, hot, &segments, &read));
        }
        eval.sort_unstable();
        // As sorted file-offset ranges.
        let ranges = |sized: Vec<(u64, u64)>| -> Vec<(u64, u64)> {
            let mut out: Vec<(u64, u64)> = sized
                .into_iter()
                .filter_map(|(a, size)| {
                    let at = file_offset(&segments, a)?;
                    Some((at, at.saturating_add(size)))
                })
                .collect();
            out.sort_unstable();
            out.dedup();
            out
        };
        let (functions, glue) = (ranges(functions), ranges(glue));
        Ok(PythonBinary {
            runtime,
            version,
            code_type,
            version_text: version_text.filter(|_| py_version.is_none()),
            eval,
            functions: functions.into(),
            glue,
            segments,
        })
    }

    /// The load bias of the binary mapped at `start` from file offset
    /// `pgoff`: what its file addresses are moved by in that process.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let &(delta, _, _) = self
            .segments
            .iter()
            .find(|&&(_, from, to)| (from..to.max(from.saturating_add(1))).contains(&pgoff))?;
        Some(start.wrapping_sub(delta.wrapping_add(pgoff)))
    }
}

/// The file's bytes that finding symbols reads — the ELF and program
/// headers, the section headers and every section but code and data
/// (`SHT_PROGBITS`, `SHT_NOBITS`: `.text`, `.rodata`, `.debug_*`) — at their
/// offsets in a buffer the file's size whose other bytes stay zero (never
/// written, so never paged in). pyenv's libpython3.12 (30 MB, most of it
/// DWARF): the whole file read took ≈ 26 ms of the recorder's loop each
/// time a CPython process started.
fn tables_of(file: &File) -> io::Result<Vec<u8>> {
    let invalid = || io::Error::from(io::ErrorKind::InvalidData);
    let len = file.metadata()?.len();
    if len > MAX_BINARY {
        return Err(invalid());
    }
    let mut data = vec![0u8; len as usize];
    let fill = |data: &mut [u8], from: u64, n: u64| -> io::Result<()> {
        let end = from
            .checked_add(n)
            .filter(|&e| e <= len)
            .ok_or_else(invalid)?;
        file.read_exact_at(&mut data[from as usize..end as usize], from)
    };
    fill(&mut data, 0, 64.min(len))?;
    let header = Elf::parse_header(&data).map_err(|_| invalid())?;
    let ctx = Ctx::new(
        header.container().map_err(|_| invalid())?,
        header.endianness().map_err(|_| invalid())?,
    );
    let ph = u64::from(header.e_phnum) * u64::from(header.e_phentsize);
    let sh = u64::from(header.e_shnum) * u64::from(header.e_shentsize);
    fill(&mut data, header.e_phoff, ph)?;
    fill(&mut data, header.e_shoff, sh)?;
    let sections = SectionHeader::parse(
        &data,
        header.e_shoff as usize,
        usize::from(header.e_shnum),
        ctx,
    )
    .map_err(|_| invalid())?;
    for s in sections {
        if s.sh_type != SHT_PROGBITS && s.sh_type != SHT_NOBITS {
            fill(&mut data, s.sh_offset, s.sh_size)?;
        }
    }
    Ok(data)
}

/// The eval loop's cold part where the symbol table did not name it:
/// from the hot part's code and `.eh_frame_hdr` (both read with `read`).
fn cold_part_of(
    elf: &Elf<'_>,
    hot: (u64, u64),
    segments: &[(u64, u64, u64)],
    read: &impl Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<(u64, u64)> {
    /// More than any eval loop's hot part or function table holds.
    const MAX_READ: u64 = 16 << 20;
    let section = |name: &str| {
        elf.section_headers
            .iter()
            .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
    };
    let (hdr, text) = (section(".eh_frame_hdr")?, section(".text")?);
    if hdr.sh_size > MAX_READ || hot.1.checked_sub(hot.0)? > MAX_READ {
        return None;
    }
    let starts = cold::function_starts(&read(hdr.sh_offset, hdr.sh_size as usize)?, hdr.sh_addr)?;
    let code = read(file_offset(segments, hot.0)?, (hot.1 - hot.0) as usize)?;
    let text = text.sh_addr..text.sh_addr.checked_add(text.sh_size)?;
    let cold = cold::cold_part(&code, hot.0..hot.1, text, &starts)?;
    Some((cold.start, cold.end))
}

/// The file offset of virtual address `vaddr`.
fn file_offset(segments: &[(u64, u64, u64)], vaddr: u64) -> Option<u64> {
    segments.iter().find_map(|&(delta, from, to)| {
        let off = vaddr.checked_sub(delta)?;
        (from..to).contains(&off).then_some(off)
    })
}

/// `3.X` from `libpython3.X.so…` or `python3.X`.
/// Bytes of `Py_GetVersion`'s text read: enough for `3.X.YY `.
pub const VERSION_TEXT: u64 = 16;

/// Whether a symbol is `Py_GetVersion`'s static text (`version.0`, as
/// the compiler names a function's static).
fn is_version_text(name: &str) -> bool {
    name.strip_prefix("version.")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The micro version in `Py_GetVersion`'s text, if it starts with
/// `major.minor.` (nothing before the runtime made it).
pub fn micro_in_text(text: &[u8], major: u8, minor: u8) -> Option<u8> {
    let prefix = format!("{major}.{minor}.");
    let rest = text.strip_prefix(prefix.as_bytes())?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 2 {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

fn version_in_name(path: &str) -> Option<(u8, u8, u8)> {
    let base = path.rsplit('/').next()?;
    let rest = base
        .strip_prefix("libpython3.")
        .or_else(|| base.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((3, digits.parse().ok()?, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_names() {
        assert_eq!(
            version_in_name("/x/lib/libpython3.10.so.1.0"),
            Some((3, 10, 0))
        );
        assert_eq!(version_in_name("/usr/bin/python3.9"), Some((3, 9, 0)));
        assert_eq!(version_in_name("/usr/bin/python3"), None);
        assert_eq!(version_in_name("/usr/lib/libc.so.6"), None);
    }

    #[test]
    fn micro_versions_from_the_runtimes_text() {
        assert_eq!(micro_in_text(b"3.10.13 (main, May", 3, 10), Some(13));
        assert_eq!(micro_in_text(b"3.8.0 (default", 3, 8), Some(0));
        assert_eq!(micro_in_text(b"3.9.18+ (heads", 3, 9), Some(18));
        assert_eq!(micro_in_text(b"\0\0\0\0", 3, 10), None, "not made yet");
        assert_eq!(micro_in_text(b"3.10.13 ", 3, 9), None, "another version's");
        assert_eq!(micro_in_text(b"3.10.999", 3, 10), None);
        assert!(is_version_text("version.0") && is_version_text("version.12"));
        assert!(
            !is_version_text("version")
                && !is_version_text("version.x")
                && !is_version_text("PyId_version.15")
        );
    }

    /// Each CPython binary here (pyenv's libpython and executable, Debian's
    /// static python3.11) read by its tables alone says what the whole file
    /// says: the same runtime, version, eval-loop ranges and segments.
    #[test]
    fn a_binary_read_by_its_tables_says_what_the_whole_file_says() {
        let found = flamerec_testkit::pythons_or_skip(8..=13);
        if !found.iter().any(|(_, p)| p.starts_with("/usr/bin")) {
            flamerec_testkit::skip_or_fail(
                flamerec_testkit::SKIP_PYTHON,
                "no /usr/bin/python3.X here (Debian's, with the runtime linked statically)",
            );
        }
        for (minor, python) in found {
            let what = python.display().to_string();
            let lib = python
                .parent()
                .and_then(Path::parent)
                .map(|p| p.join(format!("lib/libpython3.{minor}.so.1.0")));
            let mut read = 0;
            for path in std::iter::once(python).chain(lib.filter(|l| l.is_file())) {
                let name = path.display().to_string();
                let whole = std::fs::read(&path).expect("read the binary");
                let file = File::open(&path).expect("open the binary");
                let at = |off: u64, n: usize| {
                    let mut b = vec![0u8; n];
                    file.read_exact_at(&mut b, off).ok().map(|()| b)
                };
                let tables = tables_of(&file).expect("the tables");
                let by_tables = PythonBinary::parse_with(&tables, &name, at);
                let by_whole = PythonBinary::parse(&whole, &name);
                assert_eq!(format!("{by_tables:?}"), format!("{by_whole:?}"), "{name}");
                read += usize::from(by_whole.is_ok());
            }
            // The runtime is in the executable (static) or its libpython.
            assert!(
                read > 0,
                "{what}: no CPython runtime in it or its libpython"
            );
        }
    }

    #[test]
    fn garbage_is_not_a_python() {
        assert!(matches!(
            PythonBinary::parse(b"not an elf at all", "x"),
            Err(BinaryError::NotElf(_))
        ));
        // An ELF without _PyRuntime: this test binary.
        let me = std::env::current_exe().unwrap();
        assert!(matches!(
            PythonBinary::read(&me),
            Err(BinaryError::NoRuntime(_))
        ));
    }
}
