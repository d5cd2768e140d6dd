//! Which kernel frames belong to the profiler rather than the workload:
//! the sampling path, and the scheduler's own frames of off-CPU samples.
//! The recorder turns these names into address ranges once, at start.

/// Kernel functions that belong to taking a sample, not to the workload:
/// the perf core, hrtimer-driven software events and the timer interrupt entry.
pub fn is_sampling_path(name: &str) -> bool {
    name.starts_with("perf_")
        || name.starts_with("__perf_")
        || name.starts_with("___perf_")
        || name.starts_with("hrtimer_")
        || name.starts_with("__hrtimer_")
        || name.starts_with("__run_hrtimer")
        || name.starts_with("__sysvec_apic_timer_interrupt")
        || name.starts_with("sysvec_apic_timer_interrupt")
        || name.starts_with("asm_sysvec_apic_timer_interrupt")
        || name == "perf_swevent_hrtimer"
        || name == "task_clock_event_read"
        || name == "cpu_clock_event_read"
}

/// The scheduler's own frames, trimmed from off-CPU samples.
pub fn is_scheduler(name: &str) -> bool {
    matches!(
        name,
        "__schedule"
            | "schedule"
            | "prepare_task_switch"
            | "__traceiter_sched_switch"
            | "schedule_idle"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flamerec_symbolize::kallsyms::Kallsyms;

    const TABLE: &str = "ffffffff81000000 T _stext\n\
ffffffff81000100 T vfs_read\n\
ffffffff81000200 t perf_swevent_hrtimer\n\
ffffffff81000300 T __hrtimer_run_queues\n\
ffffffff81000400 d some_data\n";

    #[test]
    fn trim_ranges_cover_the_sampling_path_only() {
        let k = Kallsyms::parse(TABLE);
        let r = k.ranges(is_sampling_path);
        assert!(r.contains(0xffffffff81000250));
        assert!(r.contains(0xffffffff81000350));
        assert!(!r.contains(0xffffffff81000150));
        assert!(!r.contains(0xffffffff81000400 + 0x10000));
    }
}
