//! Helpers of the fold tests: synthetic recordings and the real ELF (this
//! test binary) their user frames point into.

use std::hint::black_box;
use std::path::Path;

use flamerec_fold::{write_folded, FoldOptions, Profile};
use flamerec_format::{
    Frame, FrameId, KernelSymbol, Metadata, Module, ModuleKind, Sample, Totals, Writer,
};

/// A C-named function to find in the symbol table.
#[no_mangle]
#[inline(never)]
pub extern "C" fn flamerec_fold_test_leaf(x: u64) -> u64 {
    black_box(x).wrapping_mul(0x9e37_79b9).rotate_left(7) ^ black_box(x >> 3)
}

/// A Rust-mangled function, to check demangling drops the hash.
#[inline(never)]
pub fn rust_target_fn(x: u64) -> u64 {
    flamerec_fold_test_leaf(black_box(x)).wrapping_add(black_box(x).rotate_right(3)) ^ 0x55
}

pub const KBASE: u64 = 0xffff_ffff_8100_0000;

pub fn meta() -> Metadata {
    Metadata {
        command: vec!["testprog".into(), "--fast".into()],
        target: "command".into(),
        event: "cpu-clock".into(),
        frequency_hz: 999,
        call_graph: "fp".into(),
        weight_unit: "samples".into(),
        ..Default::default()
    }
}

pub fn writer() -> Writer<Vec<u8>> {
    Writer::new(Vec::new(), &meta()).expect("writer")
}

pub fn finish(w: Writer<Vec<u8>>) -> Vec<u8> {
    w.finish(Totals {
        duration_ns: 2_000_000_000,
        lost_samples: 4,
        processes: 1,
        threads: 1,
        ..Default::default()
    })
    .expect("finish")
}

pub fn fold_bytes(bytes: &[u8], opts: &FoldOptions) -> Profile {
    flamerec_fold::fold_bytes(bytes, std::path::Path::new("test.frec"), opts).expect("fold")
}

pub fn folded(p: &Profile) -> String {
    let mut out = Vec::new();
    write_folded(p, &mut out).expect("write folded");
    String::from_utf8(out).expect("utf-8")
}

pub fn sample(pid: u32, tid: u32, stack: u32, weight: u64) -> Sample {
    Sample {
        time_ns: 1_000_000,
        pid,
        tid,
        stack,
        weight,
    }
}

/// Kernel module with three functions: `entry_a` (0x100 bytes), `helper_b`
/// (in module `ext4`) and a `weird;name 12` symbol.
pub fn kernel(w: &mut Writer<Vec<u8>>) -> u32 {
    let m = w.module(&Module {
        kind: ModuleKind::Kernel,
        path: "[kernel.kallsyms]".into(),
        build_id: Vec::new(),
    });
    for (off, size, name, module) in [
        (0u64, 0x100u64, "entry_a", ""),
        (0x200, 0x40, "helper_b", "ext4"),
        (0x300, 0x10, "weird;name 12", ""),
    ] {
        w.kernel_symbol(&KernelSymbol {
            start: KBASE + off,
            size,
            name: name.into(),
            module: module.into(),
        });
    }
    m
}

pub fn kframe(w: &mut Writer<Vec<u8>>, m: u32, off: u64) -> FrameId {
    w.frame(Frame {
        module: m,
        address: KBASE + off,
    })
}

/// The executable's path, GNU build id, and the file offsets of a byte
/// inside `flamerec_fold_test_leaf` and inside `rust_target_fn`.
pub struct Exe {
    pub path: String,
    pub build_id: Vec<u8>,
    pub leaf_off: u64,
    pub rust_off: u64,
    /// File range of the executable segment.
    pub text: (u64, u64),
}

pub fn exe() -> Exe {
    black_box(rust_target_fn(black_box(7)));
    let path = std::env::current_exe().expect("current exe");
    let data = std::fs::read(&path).expect("read exe");
    let elf = goblin::elf::Elf::parse(&data).expect("exe is ELF");
    let offset_of = |want: &dyn Fn(&str) -> bool| -> u64 {
        let sym = elf
            .syms
            .iter()
            .find(|s| {
                s.is_function()
                    && s.st_value != 0
                    && s.st_size > 4
                    && elf.strtab.get_at(s.st_name).is_some_and(want)
            })
            .expect("symbol in the test binary");
        let vaddr = sym.st_value + 4;
        let ph = elf
            .program_headers
            .iter()
            .find(|p| {
                p.p_type == goblin::elf::program_header::PT_LOAD
                    && vaddr >= p.p_vaddr
                    && vaddr < p.p_vaddr + p.p_filesz
            })
            .expect("segment holding the symbol");
        vaddr - ph.p_vaddr + ph.p_offset
    };
    let leaf_off = offset_of(&|n| n == "flamerec_fold_test_leaf");
    let rust_off = offset_of(&|n| n.contains("rust_target_fn"));
    let text = elf
        .program_headers
        .iter()
        .find(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
        .map(|p| (p.p_offset, p.p_filesz))
        .expect("executable segment");
    let obj = symbolic_debuginfo::elf::ElfObject::parse(&data).expect("symbolic parses exe");
    let hex = obj
        .code_id()
        .map(|c| c.as_str().to_string())
        .unwrap_or_default();
    let build_id = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    Exe {
        path: path.to_string_lossy().into_owned(),
        build_id,
        leaf_off,
        rust_off,
        text,
    }
}

pub fn exe_name(e: &Exe) -> String {
    Path::new(&e.path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
