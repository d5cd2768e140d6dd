//! Turning captured stacks into named frames: user stacks are unwound
//! (DWARF CFI through `flamerec-unwind`, the vDSO included) and every
//! address of a process is named in one pass (`flamerec-symbolize`, inlined
//! functions expanded); kernel lines from /proc are already named.
//!
//! Runs after every thread was captured, so naming (which reads binaries
//! and debug files) never stretches the capture. It reads files only.

use flamerec_symbolize::kallsyms::Kallsyms;
use flamerec_symbolize::live::{name_addresses, vdso_image, AddressSpace, FrameNames};
use flamerec_symbolize::names::basename;
use flamerec_symbolize::NameOptions;
use flamerec_unwind::{Outcome, StackUnwinder, UserRegs};

use crate::blocked::UserStack;
use crate::capture::{Kernel, RawProcess, RawThread};
use crate::report::{state_name, Frame, FrameKind, Process, Thread};
use crate::Options;

/// Names the frames of every captured process; returns them and the
/// symbolization warnings.
pub(crate) fn resolve(raws: Vec<RawProcess>, opts: &Options) -> (Vec<Process>, Vec<String>) {
    let mut unwinder = StackUnwinder::new();
    if let Some(image) = vdso_image() {
        unwinder.add_image("[vdso]", &image);
    }
    let needs_kallsyms = raws
        .iter()
        .flat_map(|p| &p.threads)
        .any(|t| matches!(&t.kernel, Kernel::Addrs(a) if !a.is_empty()));
    let kallsyms = needs_kallsyms.then(|| Kallsyms::load().ok()).flatten();
    let name_opts = &opts.names;
    let mut warnings = Vec::new();
    let processes = raws
        .into_iter()
        .map(|p| {
            let (process, mut w) = resolve_process(p, &mut unwinder, kallsyms.as_ref(), name_opts);
            warnings.append(&mut w);
            process
        })
        .collect();
    warnings.sort();
    warnings.dedup();
    (processes, warnings)
}

/// Per thread: where its user and kernel addresses sit in the process's
/// address lists, and whether its user stack was cut short.
struct Span {
    user: std::ops::Range<usize>,
    kernel: std::ops::Range<usize>,
    truncated: bool,
}

fn resolve_process(
    p: RawProcess,
    unwinder: &mut StackUnwinder,
    kallsyms: Option<&Kallsyms>,
    name_opts: &NameOptions,
) -> (Process, Vec<String>) {
    for m in &p.exec {
        unwinder.add_mapping(p.pid, m.start, m.end, m.pgoff, &m.path, &[]);
    }
    let mut user = Vec::new();
    let mut kernel = Vec::new();
    let spans: Vec<Span> = p
        .threads
        .iter()
        .map(|t| {
            let (u0, k0) = (user.len(), kernel.len());
            let truncated = t.user.as_ref().is_some_and(|u| {
                matches!(unwind(unwinder, p.pid, u, &mut user), Outcome::Truncated(_))
            });
            if let Kernel::Addrs(a) = &t.kernel {
                kernel.extend_from_slice(a);
            }
            Span {
                user: u0..user.len(),
                kernel: k0..kernel.len(),
                truncated,
            }
        })
        .collect();
    unwinder.exit(p.pid);
    let space = AddressSpace::from_maps(p.exec);
    let (user_names, kernel_names, warnings) =
        name_addresses(&space, &user, kallsyms, &kernel, name_opts);
    let threads = p
        .threads
        .into_iter()
        .zip(spans)
        .map(|(t, span)| {
            let mut frames = Vec::new();
            match &t.kernel {
                Kernel::None => {}
                Kernel::Lines(lines) => frames.extend(lines.iter().map(|l| Frame {
                    name: l.name.clone(),
                    module: kernel_module(l.module.as_deref().unwrap_or("")),
                    kind: FrameKind::Kernel,
                    inlined: false,
                })),
                Kernel::Addrs(_) => {
                    for (addr, names) in kernel[span.kernel.clone()]
                        .iter()
                        .zip(&kernel_names[span.kernel.clone()])
                    {
                        let module = kallsyms
                            .and_then(|k| k.lookup(*addr).map(|i| k.symbol(i).module))
                            .unwrap_or_default();
                        push_expanded(
                            &mut frames,
                            names,
                            &kernel_module(&module),
                            FrameKind::Kernel,
                        );
                    }
                }
            }
            for (addr, names) in user[span.user.clone()]
                .iter()
                .zip(&user_names[span.user.clone()])
            {
                let module = space
                    .resolve(*addr)
                    .and_then(|(m, _)| space.modules().get(m))
                    .map_or("[unknown]", |m| basename(&m.path));
                push_expanded(&mut frames, names, module, FrameKind::User);
            }
            thread(t, frames, span.truncated)
        })
        .collect();
    let process = Process {
        pid: p.pid,
        name: p.name,
        error: p.error,
        threads,
    };
    (process, warnings)
}

/// Unwinds one user stack into `out`: the ip, then return addresses moved
/// back into their call instructions, so they name the calling line.
fn unwind(unwinder: &mut StackUnwinder, pid: u32, u: &UserStack, out: &mut Vec<u64>) -> Outcome {
    let start = out.len();
    let outcome = match u.bp {
        Some(bp) => {
            let regs = UserRegs {
                ip: u.ip,
                sp: u.sp,
                bp,
                bx: None,
            };
            unwinder.unwind(pid, regs, &u.bytes, out)
        }
        None => unwinder.unwind_without_bp(pid, u.ip, u.sp, &u.bytes, out),
    };
    if out.len() == start {
        // Not even the ip (no mapping known): keep the ip alone.
        out.push(u.ip);
        return Outcome::Truncated(flamerec_unwind::Cut::NoRule);
    }
    for a in &mut out[start + 1..] {
        *a = a.wrapping_sub(1);
    }
    outcome
}

/// One address's names, leaf first: the inlined functions innermost first,
/// then the function that holds the code.
fn push_expanded(frames: &mut Vec<Frame>, names: &FrameNames, module: &str, kind: FrameKind) {
    for (i, name) in names.iter().enumerate().rev() {
        frames.push(Frame {
            name: name.clone(),
            module: module.to_string(),
            kind,
            inlined: i != 0,
        });
    }
}

/// `[kernel.kallsyms]` for the kernel image, `[xfs]` for a module.
fn kernel_module(module: &str) -> String {
    if module.is_empty() {
        "[kernel.kallsyms]".to_string()
    } else {
        format!("[{module}]")
    }
}

fn thread(t: RawThread, frames: Vec<Frame>, truncated: bool) -> Thread {
    Thread {
        tid: t.tid,
        name: t.name,
        state: t.state,
        state_name: state_name(t.state),
        kernel_thread: t.kernel_thread,
        how: t.how,
        held_ns: t.held_ns,
        capture_ns: t.capture_ns,
        truncated,
        error: t.error,
        frames,
    }
}
