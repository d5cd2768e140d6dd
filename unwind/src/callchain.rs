//! Splitting a kernel callchain (`PERF_SAMPLE_CALLCHAIN`) into kernel and
//! user frames. Shared by the recorder and the perf.data import, so both
//! read a chain the same way.

/// Entries at or above this are context markers, not addresses.
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
/// Marks the start of the kernel part.
pub const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// Marks the start of the user part.
pub const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// Which side of the system call boundary a frame is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A kernel address.
    Kernel,
    /// A user-space address.
    User,
}

/// The frames of a callchain, leaf first, with markers removed.
///
/// The first address of each context is where the sample was taken; the
/// others are return addresses and come out one less, inside the call
/// instruction, so they symbolize to the calling line. Hypervisor and guest
/// contexts are skipped. A zero user address ends the user part: a
/// frame-pointer walk through code built without frame pointers can read
/// one, and no code runs at address zero.
pub struct Frames<I> {
    entries: I,
    side: Option<Side>,
    first: bool,
}

/// Splits `entries` (leaf first, markers included). Entries before the
/// first marker belong to `initial`, or are skipped when it is `None`.
pub fn frames<I: Iterator<Item = u64>>(entries: I, initial: Option<Side>) -> Frames<I> {
    Frames {
        entries,
        side: initial,
        first: true,
    }
}

impl<I: Iterator<Item = u64>> Iterator for Frames<I> {
    type Item = (Side, u64);

    fn next(&mut self) -> Option<(Side, u64)> {
        loop {
            let ip = self.entries.next()?;
            if ip >= PERF_CONTEXT_MAX {
                self.side = match ip {
                    PERF_CONTEXT_KERNEL => Some(Side::Kernel),
                    PERF_CONTEXT_USER => Some(Side::User),
                    _ => None,
                };
                self.first = true;
                continue;
            }
            let Some(side) = self.side else { continue };
            if ip == 0 && side == Side::User {
                self.side = None;
                continue;
            }
            let addr = if self.first { ip } else { ip - 1 };
            self.first = false;
            return Some((side, addr));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_split_and_callers_step_back() {
        let chain = [
            PERF_CONTEXT_KERNEL,
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0020,
            PERF_CONTEXT_USER,
            0x40_1000,
            0x40_2000,
            0x40_3000,
        ];
        let got: Vec<_> = frames(chain.into_iter(), None).collect();
        assert_eq!(
            got,
            [
                (Side::Kernel, 0xffff_ffff_8100_0010),
                (Side::Kernel, 0xffff_ffff_8100_001f),
                (Side::User, 0x40_1000),
                (Side::User, 0x40_1fff),
                (Side::User, 0x40_2fff),
            ]
        );
    }

    #[test]
    fn a_zero_return_address_ends_the_user_part() {
        // Seen from `dd` (no frame pointers) under `-g fp`: before, the zero
        // became 0xffff_ffff_ffff_ffff and folded as a bogus frame.
        let chain = [PERF_CONTEXT_USER, 0x40_1000, 0, 0x40_3000, 0x40_4000];
        let got: Vec<_> = frames(chain.into_iter(), None).collect();
        assert_eq!(got, [(Side::User, 0x40_1000)]);
        // A leaf of zero (a jump to null) ends it as well.
        let chain = [PERF_CONTEXT_USER, 0, 0x40_3000];
        assert_eq!(frames(chain.into_iter(), None).count(), 0);
    }

    #[test]
    fn other_contexts_and_unmarked_entries() {
        let guest = (-2048i64) as u64; // PERF_CONTEXT_GUEST
        let chain = [0x10, guest, 0x20, PERF_CONTEXT_USER, 0x30];
        let skipped: Vec<_> = frames(chain.into_iter(), None).collect();
        assert_eq!(skipped, [(Side::User, 0x30)]);
        let user: Vec<_> = frames(chain.into_iter(), Some(Side::User)).collect();
        assert_eq!(user, [(Side::User, 0x10), (Side::User, 0x30)]);
    }
}
