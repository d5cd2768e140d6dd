//! A program built here, loaded by the kernel and attached to a real
//! `cpu-clock` event of this thread: at each sample it reads a word of
//! this process's memory (`bpf_probe_read_user`) and the sampled thread's
//! id, and counts, in a map this test then reads. Needs root (or CAP_BPF
//! and CAP_PERFMON); where BPF is refused the test fails with the cause
//! unless `FLAMEREC_SKIP_BPF_TESTS=1`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use flamerec_bpf::asm::{self, helper, Code, Size, FP, R0, R1, R2, R3, R6};
use flamerec_bpf::{BpfError, Map, MapKind, Program};
use flamerec_perf::sys::{self, Counter, EventConfig};
use flamerec_testkit::{skip_or_fail, SKIP_BPF};

/// What the program reads from this process at each sample.
static MAGIC: u64 = 0x5eed_f1a3_e0c0_ffee;

fn program(config: &Map, result: &Map) -> Vec<asm::Insn> {
    let mut c = Code::new();
    let done = c.label();
    // config[0]: the address to read.
    c.push([asm::store_imm(Size::W, FP, -4, 0)]);
    c.lookup(config.fd(), -4);
    c.jump(asm::jeq_imm(R0, 0, 0), done);
    c.push([
        asm::load(Size::DW, R3, R0, 0),
        asm::mov(R1, FP),
        asm::add_imm(R1, -16),
        asm::mov_imm(R2, 8),
        asm::call(helper::PROBE_READ_USER),
    ]);
    c.jump(asm::jne_imm(R0, 0, 0), done);
    // result[0] = { the word read, samples, the sampled thread's id }.
    c.push([asm::store_imm(Size::W, FP, -4, 0)]);
    c.lookup(result.fd(), -4);
    c.jump(asm::jeq_imm(R0, 0, 0), done);
    c.push([
        asm::mov(R6, R0),
        asm::load(Size::DW, R1, FP, -16),
        asm::store(Size::DW, R6, 0, R1),
        asm::load(Size::DW, R1, R6, 8),
        asm::add_imm(R1, 1),
        asm::store(Size::DW, R6, 8, R1),
        asm::call(helper::GET_CURRENT_PID_TGID),
        asm::store(Size::W, R6, 16, R0),
    ]);
    c.bind(done);
    // Keep the sample.
    c.push([asm::mov_imm(R0, 1), asm::exit()]);
    c.finish().expect("labels bound")
}

/// The skip rule for BPF refused with `e`.
fn refused(e: &BpfError) {
    skip_or_fail(
        SKIP_BPF,
        format!("BPF is not usable here, so this test cannot run (as root it is): {e}"),
    );
}

#[test]
fn a_program_reads_the_sampled_threads_memory_at_each_sample() {
    let maps = Map::new(MapKind::Array, 4, 8, 1)
        .and_then(|config| Ok((config, Map::new(MapKind::Array, 4, 24, 1)?)));
    let (config, result) = match maps {
        Ok(m) => m,
        Err(e) => return refused(&e),
    };
    let addr = &MAGIC as *const u64 as u64;
    config
        .set(&0u32.to_ne_bytes(), &addr.to_ne_bytes())
        .expect("set the address");
    let prog = match Program::perf_event(&program(&config, &result)) {
        Ok(p) => p,
        Err(e) => return refused(&e),
    };
    let cfg = EventConfig {
        frequency: 1000,
        exclude_kernel: true,
        ..EventConfig::bare(Counter::CpuClock)
    };
    let event = sys::perf_event_open(&cfg, 0, -1).expect("a cpu-clock event on this thread");
    sys::set_bpf(&event, prog.fd()).expect("attach the program");
    sys::enable(&event).expect("enable");
    // 200 ms of this thread's CPU: ≈ 200 samples at 1000 Hz, however busy
    // the machine (cpu-clock counts the thread's own time).
    let mut spun = 0u64;
    let start = Instant::now();
    let cpu = || flamerec_perf::procfs::own_cpu_ticks().unwrap_or(0);
    let before = cpu();
    while cpu() < before + 20 && start.elapsed() < Duration::from_secs(60) {
        for i in 0..100_000u64 {
            spun = black_box(spun.wrapping_add(i));
        }
    }
    sys::disable(&event).expect("disable");
    let value = result
        .get(&0u32.to_ne_bytes())
        .expect("read")
        .expect("present");
    let word = |i: usize| u64::from_ne_bytes(value[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(word(0), MAGIC, "the word read at the sample");
    // ≥ 100 of ≈ 200: half the samples for a timer on a loaded machine.
    assert!(word(1) >= 100, "{} samples ran the program", word(1));
    let tid = u32::try_from(word(2) & 0xffff_ffff).unwrap();
    let own: u32 = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|l| l.file_name()?.to_str()?.parse().ok())
        .expect("this thread's id");
    assert_eq!(tid, own, "the sampled thread");
}
