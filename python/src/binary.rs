//! What a CPython binary (a `libpython3.X.so` or a `python3.X` linked
//! statically against it) says about itself, from its file: where
//! `_PyRuntime` is and how big, its version, where `PyCode_Type` is, and
//! the address ranges of the eval loop (`_PyEval_EvalFrameDefault` and
//! its `.cold` part, where the symbol table names one).

use std::path::Path;

use goblin::elf::{program_header::PT_LOAD, Elf};

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
    /// Reads the binary at `path`.
    pub fn read(path: &Path) -> Result<PythonBinary, BinaryError> {
        let name = path.display().to_string();
        let data = std::fs::read(path).map_err(|source| BinaryError::Read {
            path: name.clone(),
            source,
        })?;
        Self::parse(&data, &name)
    }

    /// Parses the bytes of a binary named `name` (for messages and the
    /// version of 3.8–3.10, which is only in the file name).
    pub fn parse(data: &[u8], name: &str) -> Result<PythonBinary, BinaryError> {
        let elf = Elf::parse(data).map_err(|_| BinaryError::NotElf(name.into()))?;
        let mut runtime = None;
        let mut py_version = None;
        let mut code_type = None;
        let mut eval = Vec::new();
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
            match sym_name {
                "_PyRuntime" => runtime = Some((sym.st_value, sym.st_size)),
                "Py_Version" => py_version = Some(sym.st_value),
                "PyCode_Type" => code_type = Some(sym.st_value),
                "_PyEval_EvalFrameDefault" | "_PyEval_EvalFrameDefault.cold" => {
                    let range = (sym.st_value, sym.st_value + sym.st_size.max(1));
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
                    p.p_offset + p.p_filesz,
                )
            })
            .collect();
        let version = py_version
            .and_then(|v| {
                let off = file_offset(&segments, v)?;
                let b = data.get(off as usize..off as usize + 8)?;
                let hex = u64::from_le_bytes(b.try_into().ok()?);
                Some(((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8))
            })
            .or_else(|| version_in_name(name))
            .ok_or_else(|| BinaryError::NoVersion(name.into()))?;
        eval.sort_unstable();
        Ok(PythonBinary {
            runtime,
            version,
            code_type,
            eval,
            segments,
        })
    }

    /// The load bias of the binary mapped at `start` from file offset
    /// `pgoff`: what its file addresses are moved by in that process.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let &(delta, _, _) = self
            .segments
            .iter()
            .find(|&&(_, from, to)| (from..to.max(from + 1)).contains(&pgoff))?;
        Some(start.wrapping_sub(delta.wrapping_add(pgoff)))
    }
}

/// The file offset of virtual address `vaddr`.
fn file_offset(segments: &[(u64, u64, u64)], vaddr: u64) -> Option<u64> {
    segments.iter().find_map(|&(delta, from, to)| {
        let off = vaddr.checked_sub(delta)?;
        (from..to).contains(&off).then_some(off)
    })
}

/// `3.X` from `libpython3.X.so…` or `python3.X`.
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
