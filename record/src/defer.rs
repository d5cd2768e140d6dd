//! Deferred user callchains (`-g fp,defer`, Linux 6.19 and later): a sample
//! taken in the kernel (or in user space) carries its kernel frames and a
//! cookie; the kernel walks the thread's user stack once, by frame pointers,
//! when it next returns to user space, and writes that walk in a
//! CALLCHAIN_DEFERRED record naming the cookie. Every sample taken before
//! that return shares it.
//!
//! Here each sample waits, by cookie, for its user part and is written whole
//! when it comes. The two can arrive out of order across drain rounds (the
//! thread may return to user space on another CPU, whose ring was copied
//! before the sample's), so a user part that comes first waits too. What is
//! never joined is counted, not guessed at:
//! - a sample whose user part never came (its thread exited, or recording
//!   stopped, before it returned to user space) is written with its kernel
//!   frames only, one round after its thread's exit or at the end;
//! - a user part whose samples never came (they were lost) is dropped after
//!   [`EARLY_ROUNDS`] rounds.
//!
//! This module must not unwind anything itself: the kernel did.

use std::collections::{HashMap, VecDeque};
use std::io;

use flamerec_format::Frame;
use flamerec_perf::parse::words;
use flamerec_unwind::callchain::{self, Side};

use crate::depth::DEFERRED_CAP;
use crate::raw::RawSample;
use crate::state::State;

/// A user part is kept through the end of the round it came in and this
/// many more (its samples are at most one round behind it).
const EARLY_ROUNDS: u64 = 2;
/// At most this many samples wait at once; past that, the oldest cookie's
/// samples are written without their user part (bounded memory whatever
/// the kernel sends).
const MAX_WAITING: usize = 65_536;

/// Counts of what deferral did, for the trailer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DeferStats {
    /// Samples joined with their user part.
    pub stitched: u64,
    /// Samples whose user part never came (written with kernel frames only).
    pub unmatched_samples: u64,
    /// User parts whose samples never came (lost).
    pub orphan_records: u64,
}

struct Waiting {
    tid: u32,
    /// Order of arrival, to give up the oldest first when too many wait.
    seq: u64,
    samples: Vec<RawSample>,
}

struct Early {
    user: Vec<Frame>,
    /// The kernel's deferred unwinder stopped at its cap.
    cut: bool,
    round: u64,
    /// Some sample was joined with it.
    claimed: bool,
}

/// Samples and user parts waiting for each other.
#[derive(Default)]
pub(crate) struct Deferred {
    waiting: HashMap<u64, Waiting>,
    waiting_samples: usize,
    /// Cookies in the order they started waiting (some since joined), so
    /// the oldest is found without a scan.
    order: VecDeque<u64>,
    early: HashMap<u64, Early>,
    /// Threads that exited, with the round their exit was read in.
    exited: Vec<(u32, u64)>,
    round: u64,
    seq: u64,
    pub stats: DeferStats,
}

impl<W: io::Write> State<W> {
    /// A sample whose callchain ended in `PERF_CONTEXT_USER_DEFERRED` and
    /// `cookie`; `raw` holds its kernel part.
    pub(crate) fn defer_sample(&mut self, cookie: u64, mut raw: RawSample) {
        let Some(d) = &mut self.deferred else {
            self.finish_raw(raw);
            return;
        };
        if let Some(e) = d.early.get_mut(&cookie) {
            e.claimed = true;
            raw.user.extend_from_slice(&e.user);
            d.stats.stitched += 1;
            self.cut_at_cap += u64::from(e.cut);
            self.finish_raw(raw);
            return;
        }
        d.seq += 1;
        let seq = d.seq;
        let tid = raw.tid;
        let w = d.waiting.entry(cookie).or_insert_with(|| Waiting {
            tid,
            seq,
            samples: Vec::new(),
        });
        if w.samples.is_empty() {
            d.order.push_back(cookie);
        }
        w.samples.push(raw);
        d.waiting_samples += 1;
        if d.order.len() > 2 * MAX_WAITING {
            let waiting = &d.waiting;
            d.order.retain(|c| waiting.contains_key(c));
        }
        if d.waiting_samples > MAX_WAITING {
            while let Some(oldest) = d.order.pop_front() {
                if d.waiting.contains_key(&oldest) {
                    self.give_up(oldest);
                    break;
                }
            }
        }
    }

    /// A CALLCHAIN_DEFERRED record: the user part of `cookie`'s samples.
    pub(crate) fn deferred_callchain(&mut self, cookie: u64, pid: u32, ips: &[u8]) {
        if self.deferred.is_none() {
            return;
        }
        // A deferred part holds user addresses only.
        let (mut kernel, mut user) = (Vec::new(), Vec::new());
        let looped =
            self.conv
                .split_callchain(pid, words(ips), Some(Side::User), &mut kernel, &mut user);
        let cut = !looped
            && words(ips)
                .filter(|&a| a < callchain::PERF_CONTEXT_MAX)
                .count()
                >= DEFERRED_CAP;
        let Some(d) = &mut self.deferred else { return };
        let round = d.round;
        // Absent: its samples are in a ring not read yet, or were lost.
        let waiting = d.waiting.remove(&cookie);
        if let Some(w) = &waiting {
            d.waiting_samples -= w.samples.len();
            d.stats.stitched += w.samples.len() as u64;
        }
        let claimed = waiting.is_some();
        if let Some(w) = waiting {
            self.cut_at_cap += u64::from(cut) * w.samples.len() as u64;
            for mut raw in w.samples {
                raw.user.extend_from_slice(&user);
                self.finish_raw(raw);
            }
        }
        // Kept either way: samples of later rounds may still name this cookie.
        if let Some(d) = &mut self.deferred {
            d.early.insert(
                cookie,
                Early {
                    user,
                    cut,
                    round,
                    claimed,
                },
            );
        }
    }

    /// A thread exited: its samples still waiting get one more round.
    pub(crate) fn deferred_exit(&mut self, tid: u32) {
        if let Some(d) = &mut self.deferred {
            let round = d.round;
            d.exited.push((tid, round));
        }
    }

    /// End of a drain round: samples of threads that exited a round ago are
    /// written without their user part; user parts kept long enough go.
    pub(crate) fn end_deferred_round(&mut self) {
        let Some(d) = &mut self.deferred else { return };
        let round = d.round;
        let (gone, kept): (Vec<_>, Vec<_>) = d.exited.iter().partition(|&&(_, r)| r < round);
        d.exited = kept;
        let mut cookies: Vec<(u64, u64)> = d
            .waiting
            .iter()
            .filter(|(_, w)| gone.iter().any(|&(tid, _)| tid == w.tid))
            .map(|(&c, w)| (w.seq, c))
            .collect();
        cookies.sort_unstable();
        let mut orphans = 0;
        d.early.retain(|_, e| {
            let keep = round - e.round < EARLY_ROUNDS;
            orphans += u64::from(!keep && !e.claimed);
            keep
        });
        d.stats.orphan_records += orphans;
        d.round += 1;
        for (_, c) in cookies {
            self.give_up(c);
        }
    }

    /// Recording ended: every sample still waiting is written without its
    /// user part; user parts never claimed are orphans.
    pub(crate) fn finish_deferred(&mut self) {
        let Some(d) = &mut self.deferred else { return };
        d.stats.orphan_records += d.early.drain().filter(|(_, e)| !e.claimed).count() as u64;
        let mut cookies: Vec<(u64, u64)> = d.waiting.iter().map(|(&c, w)| (w.seq, c)).collect();
        cookies.sort_unstable();
        for (_, c) in cookies {
            self.give_up(c);
        }
    }

    fn give_up(&mut self, cookie: u64) {
        let Some(d) = &mut self.deferred else { return };
        let Some(w) = d.waiting.remove(&cookie) else {
            return;
        };
        d.waiting_samples -= w.samples.len();
        d.stats.unmatched_samples += w.samples.len() as u64;
        for raw in w.samples {
            self.finish_raw(raw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordOptions;
    use flamerec_format::{Metadata, Writer};
    use flamerec_symbolize::kallsyms::Kallsyms;

    fn state() -> State<Vec<u8>> {
        let writer = Writer::new(Vec::new(), &Metadata::default()).unwrap();
        let mut st = State::new(writer, &RecordOptions::default(), 0, (0, 0), false);
        st.set_kallsyms(Kallsyms::default());
        st.deferred = Some(Deferred::default());
        st
    }

    fn raw(tid: u32) -> RawSample {
        RawSample {
            pid: 1,
            tid,
            time: 10,
            ip: 0xffff_ffff_8100_0000,
            kernel: vec![0xffff_ffff_8100_0000],
            user: Vec::new(),
        }
    }

    fn ips(addrs: &[u64]) -> Vec<u8> {
        addrs.iter().flat_map(|a| a.to_ne_bytes()).collect()
    }

    fn stats(st: &State<Vec<u8>>) -> DeferStats {
        st.deferred.as_ref().unwrap().stats
    }

    #[test]
    fn samples_wait_for_their_user_part_and_share_it() {
        let mut st = state();
        st.defer_sample(7, raw(2));
        st.defer_sample(7, raw(2));
        assert_eq!(
            st.conv.writer().samples(),
            0,
            "no sample is written without its user part"
        );
        st.deferred_callchain(7, 1, &ips(&[0x40_1000, 0x40_2000]));
        assert_eq!(st.conv.writer().samples(), 2);
        // A sample read from a ring copied later still finds it.
        st.end_deferred_round();
        st.defer_sample(7, raw(2));
        assert_eq!(st.conv.writer().samples(), 3);
        st.finish_deferred();
        assert_eq!(
            stats(&st),
            DeferStats {
                stitched: 3,
                unmatched_samples: 0,
                orphan_records: 0
            }
        );
    }

    #[test]
    fn a_user_part_before_its_sample_waits_a_round() {
        let mut st = state();
        st.deferred_callchain(9, 1, &ips(&[0x40_1000]));
        st.end_deferred_round();
        st.defer_sample(9, raw(2));
        assert_eq!(st.conv.writer().samples(), 1);
        // One that no sample claims is an orphan once it has waited the
        // rest of its round and EARLY_ROUNDS more.
        st.deferred_callchain(10, 1, &ips(&[0x40_1000]));
        for _ in 0..EARLY_ROUNDS {
            st.end_deferred_round();
        }
        assert_eq!(stats(&st).orphan_records, 0);
        st.end_deferred_round();
        assert_eq!(stats(&st).orphan_records, 1);
        st.defer_sample(10, raw(2));
        assert_eq!(st.conv.writer().samples(), 1, "the late sample waits again");
        st.finish_deferred();
        assert_eq!(
            stats(&st),
            DeferStats {
                stitched: 1,
                unmatched_samples: 1,
                orphan_records: 1
            }
        );
        assert_eq!(st.conv.writer().samples(), 2);
    }

    #[test]
    fn an_exited_threads_samples_are_given_up_a_round_later() {
        let mut st = state();
        st.defer_sample(3, raw(5));
        st.defer_sample(4, raw(6));
        st.deferred_exit(5);
        // The exit was read in this round; the user part may be in a ring
        // copied before the sample's, so it gets the next round too.
        st.end_deferred_round();
        assert_eq!(st.conv.writer().samples(), 0);
        st.end_deferred_round();
        assert_eq!(st.conv.writer().samples(), 1);
        assert_eq!(stats(&st).unmatched_samples, 1);
        // Thread 6 lives on: its sample still waits.
        st.deferred_callchain(4, 1, &ips(&[0x40_1000]));
        assert_eq!(st.conv.writer().samples(), 2);
        assert_eq!(stats(&st).stitched, 1);
    }

    #[test]
    fn user_parts_at_the_unwinders_cap_count_as_cut_per_sample() {
        let mut st = state();
        let full: Vec<u64> = (0..DEFERRED_CAP as u64)
            .map(|i| 0x40_0000 + 16 * i)
            .collect();
        st.defer_sample(1, raw(2));
        st.defer_sample(1, raw(2));
        st.deferred_callchain(1, 1, &ips(&full));
        st.defer_sample(1, raw(2));
        assert_eq!(st.cut_at_cap, 3);
        st.deferred_callchain(2, 1, &ips(&full[1..]));
        st.defer_sample(2, raw(2));
        assert_eq!(st.cut_at_cap, 3, "one address short of the cap is whole");
        // A walk round a loop of non-code addresses reaches the cap without
        // the stack being deep.
        let looping: Vec<u64> = (0..DEFERRED_CAP as u64)
            .map(|i| 0x40_0000 + 16 * (i % 4))
            .collect();
        st.deferred_callchain(3, 1, &ips(&looping));
        st.defer_sample(3, raw(2));
        assert_eq!(st.cut_at_cap, 3, "a loop is not a deep stack");
    }

    #[test]
    fn waiting_samples_are_bounded() {
        let mut st = state();
        for cookie in 0..=MAX_WAITING as u64 {
            st.defer_sample(cookie, raw(2));
        }
        assert_eq!(stats(&st).unmatched_samples, 1);
        assert_eq!(st.conv.writer().samples(), 1);
        // The oldest went: the newest still joins its user part.
        st.deferred_callchain(MAX_WAITING as u64, 1, &ips(&[0x40_1000]));
        assert_eq!(stats(&st).stitched, 1);
    }
}
