//! What happened to the Python samples of a recording, and what the
//! user should know of it.

/// Counts of what happened to Python samples, for the summary and `info`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PythonStats {
    /// Samples whose Python frames were spliced in.
    pub spliced: u64,
    /// Samples of a CPython thread without a walk at the sample: taken
    /// before the program knew the thread's state, or (seen on Linux 6.18,
    /// not understood yet) on a thread whose perf events ran no walk.
    pub unwalked: u64,
    /// Samples whose runs and eval-loop frames did not pair one for one.
    pub unpaired: u64,
    /// Perf trampolines left out beside the Python frame they name.
    pub trampolines_named_alike: u64,
    /// Perf trampolines kept: beside a Python frame of other code.
    pub trampolines_named_otherwise: u64,
    /// Python frames shown as [`GONE`]: their code object was freed after
    /// the sample and another made at its address before it was named.
    pub code_gone: u64,
    /// Samples whose walk stopped at its frame limit with eval-loop calls
    /// left over: their outer Python frames are not shown.
    pub walks_full: u64,
}

impl PythonStats {
    /// What the user should know about samples of CPython threads that kept
    /// their native frames only (more than 1% of them), and about perf
    /// trampolines that named other code than the Python frame they called.
    pub(crate) fn warnings(&self, fp: bool) -> Vec<String> {
        let mut out = Vec::new();
        let alone = self.unwalked + self.unpaired;
        let all = alone + self.spliced;
        if alone * 100 > all {
            // Frame pointers stop at the first CPython function built without
            // them, short of the eval-loop calls the runs stand for.
            let help = if fp && self.unpaired > 0 {
                "; with frame pointers only, the native stack of a CPython built without them does not reach its eval loop: record with -g dwarf (the default) to see Python frames"
            } else {
                ""
            };
            out.push(format!(
                "{alone} of {all} samples of CPython threads kept their native frames only: {} came with no walk of their Python frames at the sample (taken before flamerec knew their thread, which it reads when it first samples one it does not know, or not walked by the kernel), {} had runs of Python frames and eval-loop frames that did not pair one for one{help}",
                self.unwalked, self.unpaired
            ));
        }
        if self.code_gone > 0 {
            use flamerec_python::bpf::{FILE_BYTES, NAMED_FRAMES, NAME_BYTES};
            out.push(format!(
                "{} Python frames are shown as [Python code freed before it was named]: their code object was freed after the sample, before flamerec read its name, and the walk at the sample did not read it (it reads the names of the innermost {NAMED_FRAMES} frames' code, ASCII names under {NAME_BYTES} characters and file names under {FILE_BYTES})",
                self.code_gone
            ));
        }
        if self.walks_full > 0 {
            out.push(format!(
                "{} samples ran more than {} Python frames deep (the most one walk reads): the Python frames of their innermost eval-loop calls are shown, the outer calls keep their native frames",
                self.walks_full,
                flamerec_python::bpf::MAX_BPF_FRAMES,
            ));
        }
        if self.trampolines_named_otherwise > 0 {
            out.push(format!(
                "{} of {} perf trampolines (-X perf) named other code than the Python frame they called, read at the sample; both are shown",
                self.trampolines_named_otherwise,
                self.trampolines_named_otherwise + self.trampolines_named_alike
            ));
        }
        out
    }
}
