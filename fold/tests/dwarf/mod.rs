//! DWARF: inlined frames, separate debug files and the symbol cache, on a
//! tiny C program compiled here with `cc -O2 -g` whose `inner_work` is
//! always inlined into `outer_fn`.

use std::path::{Path, PathBuf};
use std::process::Command;

use flamerec_fold::FoldOptions;
use flamerec_format::{Frame, Module, ModuleKind};
use symbolic_debuginfo::dwarf::Dwarf as _;
use symbolic_debuginfo::elf::ElfObject;

use crate::support::*;

const SOURCE: &str = r#"
static inline __attribute__((always_inline)) unsigned inner_work(unsigned x) {
    unsigned s = 0;
    for (unsigned i = 0; i < x; i++) s += (i * i) ^ (x >> (i & 7));
    return s;
}
__attribute__((noinline)) unsigned outer_fn(unsigned x) { return inner_work(x) * 3 + 1; }
int main(int argc, char **argv) { (void)argv; return (int)(outer_fn((unsigned)argc * 1000u) & 1u); }
"#;

/// A compiled program: its path, build id and the file offset of an
/// instruction of `inner_work` inlined into `outer_fn`.
pub struct Inlined {
    pub path: PathBuf,
    pub build_id: Vec<u8>,
    pub offset: u64,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles [`SOURCE`] (with `extra` appended, to make a different build)
/// into `dir/name` and finds the inlined instruction with symbolic itself.
pub fn compile(dir: &Path, name: &str, extra: &str) -> Inlined {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, format!("{SOURCE}{extra}")).expect("write source");
    let path = dir.join(name);
    run(Command::new("cc")
        .args(["-O2", "-g", "-Wl,--build-id", "-o"])
        .arg(&path)
        .arg(&src));
    let data = std::fs::read(&path).expect("read binary");
    let obj = ElfObject::parse(&data).expect("ELF");
    let build_id = obj
        .code_id()
        .and_then(|c| unhex(c.as_str()))
        .expect("build id");
    let elf = goblin::elf::Elf::parse(&data).expect("goblin");
    let text = elf
        .program_headers
        .iter()
        .find(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
        .expect("text segment");
    // The DWARF, read with addr2line (an independent path from fold's lookups
    // only in how the address is found; good enough to pick a probe).
    let sections: Vec<(gimli::SectionId, Vec<u8>)> = [
        gimli::SectionId::DebugAbbrev,
        gimli::SectionId::DebugAddr,
        gimli::SectionId::DebugAranges,
        gimli::SectionId::DebugInfo,
        gimli::SectionId::DebugLine,
        gimli::SectionId::DebugLineStr,
        gimli::SectionId::DebugRanges,
        gimli::SectionId::DebugRngLists,
        gimli::SectionId::DebugStr,
        gimli::SectionId::DebugStrOffsets,
    ]
    .into_iter()
    .filter_map(|id| {
        let s = obj.section(id.name().trim_start_matches('.'))?;
        Some((id, s.data.into_owned()))
    })
    .collect();
    let dwarf = gimli::Dwarf::load(|id| {
        let bytes = sections
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(&[][..], |(_, d)| &d[..]);
        Ok::<_, gimli::Error>(gimli::EndianSlice::new(bytes, gimli::RunTimeEndian::Little))
    })
    .expect("dwarf");
    let ctx = addr2line::Context::from_dwarf(dwarf).expect("addr2line");
    let offset = (text.p_offset..text.p_offset + text.p_filesz)
        .find(|&off| {
            let vaddr = off - text.p_offset + text.p_vaddr;
            let Ok(mut frames) = ctx.find_frames(vaddr).skip_all_loads() else {
                return false;
            };
            let mut names = Vec::new();
            while let Ok(Some(f)) = frames.next() {
                if let Some(n) = f
                    .function
                    .and_then(|n| n.raw_name().ok().map(|c| c.into_owned()))
                {
                    names.push(n);
                }
            }
            names == ["inner_work", "outer_fn"]
        })
        .expect("an address inside the inlined body");
    Inlined {
        path,
        build_id,
        offset,
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// A recording with one sample at the inlined instruction of `p`.
pub fn recording(p: &Inlined) -> Vec<u8> {
    let mut w = writer();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: p.path.to_string_lossy().into_owned(),
        build_id: p.build_id.clone(),
    });
    let f = w.frame(Frame {
        module: m,
        address: p.offset,
    });
    let s = w.stack(&[f]);
    w.comm(0, 42, 42, "inl", true);
    w.sample(sample(42, 42, s, 1));
    finish(w)
}

const INLINED: &str = "inl;outer_fn;inner_work 1\n";
const OUTER: &str = "inl;outer_fn 1\n";

fn opts(debug_dirs: Vec<PathBuf>, cache_dir: Option<PathBuf>) -> FoldOptions {
    let mut o = FoldOptions::default();
    o.names.debug_dirs = debug_dirs;
    o.names.cache_dir = cache_dir;
    o
}

#[test]
fn inlined_frames_are_expanded_by_default_and_not_with_no_inline() {
    let dir = tempfile::tempdir().expect("dir");
    let p = compile(dir.path(), "inl", "");
    let bytes = recording(&p);
    let prof = fold_bytes(&bytes, &FoldOptions::default());
    assert_eq!(folded(&prof), INLINED);
    assert!(prof.warnings.is_empty(), "{:?}", prof.warnings);
    let names: Vec<(&str, u64, u64)> = prof
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.self_weight, f.total_weight))
        .collect();
    assert_eq!(names, vec![("inner_work", 1, 1), ("outer_fn", 0, 1)]);
    let no_inline = {
        let mut o = FoldOptions::default();
        o.names.inline = false;
        o
    };
    assert_eq!(folded(&fold_bytes(&bytes, &no_inline)), OUTER);
}

/// Splits the DWARF of `p` off into `debug` and strips the binary.
fn split(p: &Inlined, debug: &Path, strip: &str, link: bool) {
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&p.path)
        .arg(debug));
    run(Command::new("strip").arg(strip).arg(&p.path));
    if link {
        run(Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&p.path));
    }
}

#[test]
fn debuglink_files_beside_the_binary_or_in_dot_debug_give_the_dwarf() {
    for sub in ["", ".debug"] {
        let dir = tempfile::tempdir().expect("dir");
        let p = compile(dir.path(), "inl", "");
        let debug_dir = dir.path().join(sub);
        std::fs::create_dir_all(&debug_dir).expect("mkdir");
        let debug = debug_dir.join("inl.debug");
        split(&p, &debug, "--strip-debug", true);
        if !sub.is_empty() {
            // objcopy needs the file where the link is made; it names it by basename.
            assert!(debug.is_file());
        }
        let bytes = recording(&p);
        let none = opts(Vec::new(), None);
        assert_eq!(folded(&fold_bytes(&bytes, &none)), INLINED, "in {sub:?}");
        std::fs::remove_file(&debug).expect("rm");
        assert_eq!(folded(&fold_bytes(&bytes, &none)), OUTER, "symtab only");
    }
}

#[test]
fn build_id_debug_files_are_used_only_for_the_same_build() {
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().join("debugroot");
    let p = compile(dir.path(), "inl", "");
    let hex: String = p.build_id.iter().map(|b| format!("{b:02x}")).collect();
    let id_dir = root.join(".build-id").join(&hex[..2]);
    std::fs::create_dir_all(&id_dir).expect("mkdir");
    let debug = id_dir.join(format!("{}.debug", &hex[2..]));
    split(&p, &debug, "--strip-all", false);
    let bytes = recording(&p);
    let with_root = opts(vec![root.clone()], None);
    assert_eq!(folded(&fold_bytes(&bytes, &with_root)), INLINED);

    // Another build's debug file at that path is refused: no names at all,
    // since the binary itself has no symbols left.
    let other = compile(
        dir.path(),
        "other",
        "int unused_extra(void) { return 7; }\n",
    );
    assert_ne!(other.build_id, p.build_id);
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&other.path)
        .arg(&debug));
    let out = folded(&fold_bytes(&bytes, &with_root));
    assert_eq!(out, format!("inl;inl+0x{:x} 1\n", p.offset));
}

#[test]
fn second_fold_reads_the_cache_even_without_the_binary() {
    let dir = tempfile::tempdir().expect("dir");
    let cache = dir.path().join("cache");
    let p = compile(dir.path(), "inl", "");
    let bytes = recording(&p);
    let cached = opts(Vec::new(), Some(cache.clone()));
    assert_eq!(folded(&fold_bytes(&bytes, &cached)), INLINED);
    // The names, and beside them where the binary's DWARF functions are.
    let mut entries: Vec<PathBuf> = std::fs::read_dir(cache.join("symbols-v3"))
        .expect("cache dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let exts: Vec<_> = entries.iter().filter_map(|e| e.extension()).collect();
    assert_eq!(exts, ["dies", "sym"], "{entries:?}");
    let entry = entries[1].clone();

    // The binary is gone: only the cache can name the frames now.
    std::fs::rename(&p.path, dir.path().join("moved")).expect("move binary");
    let prof = fold_bytes(&bytes, &cached);
    assert_eq!(folded(&prof), INLINED);
    assert!(prof.warnings.is_empty(), "{:?}", prof.warnings);
    let uncached = opts(Vec::new(), None);
    let prof = fold_bytes(&bytes, &uncached);
    assert_eq!(folded(&prof), format!("inl;inl+0x{:x} 1\n", p.offset));
    assert_eq!(prof.warnings.len(), 1);

    // A corrupt entry is ignored, never trusted...
    let mut raw = std::fs::read(&entry).expect("read entry");
    let mid = raw.len() / 2;
    raw[mid] ^= 0xff;
    std::fs::write(&entry, &raw).expect("corrupt");
    let prof = fold_bytes(&bytes, &cached);
    assert_eq!(folded(&prof), format!("inl;inl+0x{:x} 1\n", p.offset));
    // ...and rebuilt once the binary is back.
    std::fs::rename(dir.path().join("moved"), &p.path).expect("restore binary");
    assert_eq!(folded(&fold_bytes(&bytes, &cached)), INLINED);
    assert_ne!(std::fs::read(&entry).expect("entry"), raw);
    std::fs::rename(&p.path, dir.path().join("moved")).expect("move binary");
    assert_eq!(folded(&fold_bytes(&bytes, &cached)), INLINED);
}

#[test]
fn no_inline_folds_and_inline_folds_share_one_cache() {
    let dir = tempfile::tempdir().expect("dir");
    let p = compile(dir.path(), "inl", "");
    let bytes = recording(&p);
    let cache = Some(dir.path().join("cache"));
    let outer = {
        let mut o = FoldOptions {
            ..opts(Vec::new(), cache.clone())
        };
        o.names.inline = false;
        o
    };
    let inlined = opts(Vec::new(), cache);
    // Symbol table only, then DWARF replaces it, then its outer names serve.
    assert_eq!(folded(&fold_bytes(&bytes, &outer)), OUTER);
    assert_eq!(folded(&fold_bytes(&bytes, &inlined)), INLINED);
    std::fs::rename(&p.path, dir.path().join("moved")).expect("move binary");
    assert_eq!(folded(&fold_bytes(&bytes, &outer)), OUTER);
    assert_eq!(folded(&fold_bytes(&bytes, &inlined)), INLINED);
}
