//! The one rule that tells the machine's samples from the program's: an
//! interrupt-entry frame anywhere in a stack (see `tally` for why such a
//! sample is counted apart). A leaf of the comparison: the tallies and
//! the call-path tree both ask it, and it asks neither.

/// Whether `frame` enters the kernel for an interrupt (not for a system
/// call or an exception the program caused, such as a page fault): the
/// x86 entry points of system vectors and device interrupts, as kernels
/// since 5.8 name them (`asm_sysvec_apic_timer_interrupt`,
/// `asm_sysvec_reschedule_ipi`, `asm_common_interrupt`, …), and the names
/// of older kernels' entry stubs. A `_[k]` suffix (`fold --kernel-suffix`)
/// is ignored.
pub fn is_interrupt_entry(frame: &str) -> bool {
    let name = frame.strip_suffix("_[k]").unwrap_or(frame);
    name.starts_with("asm_sysvec_")
        || matches!(
            name,
            "asm_common_interrupt"
                | "asm_spurious_interrupt"
                | "common_interrupt"
                | "ret_from_intr"
                | "apic_timer_interrupt"
                | "reschedule_interrupt"
                | "call_function_interrupt"
                | "call_function_single_interrupt"
                | "irq_work_interrupt"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_entries_are_named_by_their_entry_points() {
        for yes in [
            "asm_sysvec_apic_timer_interrupt",
            "asm_sysvec_reschedule_ipi",
            "asm_sysvec_call_function_single",
            "asm_common_interrupt_[k]",
            "apic_timer_interrupt",
        ] {
            assert!(is_interrupt_entry(yes), "{yes}");
        }
        for no in [
            "asm_exc_page_fault",
            "entry_SYSCALL_64_after_hwframe",
            "irqentry_exit_to_user_mode",
            "schedule",
            "my_asm_sysvec_helper",
            "cpu_mix_beta",
        ] {
            assert!(!is_interrupt_entry(no), "{no}");
        }
    }
}
