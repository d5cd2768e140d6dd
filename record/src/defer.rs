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

use flamerec_format::Frame;
use flamerec_perf::parse::words;
use flamerec_unwind::callchain;

use crate::raw::RawSample;

/// A user part is kept through the end of the round it came in and this
/// many more (its samples are at most one round behind it).
const EARLY_ROUNDS: u64 = 2;
/// At most this many samples wait at once; past that, the oldest cookie's
/// samples are written without their user part (bounded memory whatever
/// the kernel sends).
const MAX_WAITING: usize = 65_536;

/// Addresses a deferred user callchain holds at most (Linux 7.2: a page
/// of `unsigned long` less the unwind cache's header).
pub(crate) const DEFERRED_CAP: usize = 510;

/// Counts of what deferral did, for the trailer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DeferStats {
    /// Samples joined with their user part.
    pub stitched: u64,
    /// Samples whose user part never came (written with kernel frames only).
    pub unmatched_samples: u64,
    /// User parts whose samples never came (lost).
    pub orphan_records: u64,
    /// Joined samples whose user part stopped at the deferred unwinder's cap.
    pub cut: u64,
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

impl Deferred {
    /// A sample whose callchain ended in `PERF_CONTEXT_USER_DEFERRED` and
    /// `cookie`; `raw` holds its kernel part. Returns the samples ready to
    /// be written: this one joined with a user part that came first, or the
    /// oldest cookie's given up when too many wait.
    pub(crate) fn sample(&mut self, cookie: u64, mut raw: RawSample) -> Vec<RawSample> {
        if let Some(e) = self.early.get_mut(&cookie) {
            e.claimed = true;
            raw.user.extend_from_slice(&e.user);
            self.stats.stitched += 1;
            self.stats.cut += u64::from(e.cut);
            return vec![raw];
        }
        self.seq += 1;
        let seq = self.seq;
        let tid = raw.tid;
        let w = self.waiting.entry(cookie).or_insert_with(|| Waiting {
            tid,
            seq,
            samples: Vec::new(),
        });
        if w.samples.is_empty() {
            self.order.push_back(cookie);
        }
        w.samples.push(raw);
        self.waiting_samples += 1;
        if self.order.len() > 2 * MAX_WAITING {
            let waiting = &self.waiting;
            self.order.retain(|c| waiting.contains_key(c));
        }
        let mut ready = Vec::new();
        if self.waiting_samples > MAX_WAITING {
            while let Some(oldest) = self.order.pop_front() {
                if self.waiting.contains_key(&oldest) {
                    self.give_up(oldest, &mut ready);
                    break;
                }
            }
        }
        ready
    }

    /// A CALLCHAIN_DEFERRED record: `user`, the user part of `cookie`'s
    /// samples (`cut`: the kernel's unwinder stopped at its cap). Returns
    /// the samples that waited for it, joined.
    pub(crate) fn user_part(&mut self, cookie: u64, user: Vec<Frame>, cut: bool) -> Vec<RawSample> {
        let round = self.round;
        // Absent: its samples are in a ring not read yet, or were lost.
        let waiting = self.waiting.remove(&cookie);
        let claimed = waiting.is_some();
        let mut ready = Vec::new();
        if let Some(w) = waiting {
            self.waiting_samples -= w.samples.len();
            self.stats.stitched += w.samples.len() as u64;
            self.stats.cut += u64::from(cut) * w.samples.len() as u64;
            for mut raw in w.samples {
                raw.user.extend_from_slice(&user);
                ready.push(raw);
            }
        }
        // Kept either way: samples of later rounds may still name this cookie.
        self.early.insert(
            cookie,
            Early {
                user,
                cut,
                round,
                claimed,
            },
        );
        ready
    }

    /// A thread exited: its samples still waiting get one more round.
    pub(crate) fn thread_exited(&mut self, tid: u32) {
        self.exited.push((tid, self.round));
    }

    /// End of a drain round: returns the samples of threads that exited a
    /// round ago, without their user part; user parts kept long enough go.
    pub(crate) fn end_round(&mut self) -> Vec<RawSample> {
        let round = self.round;
        let (gone, kept): (Vec<_>, Vec<_>) = self.exited.iter().partition(|&&(_, r)| r < round);
        self.exited = kept;
        let mut cookies: Vec<(u64, u64)> = self
            .waiting
            .iter()
            .filter(|(_, w)| gone.iter().any(|&(tid, _)| tid == w.tid))
            .map(|(&c, w)| (w.seq, c))
            .collect();
        cookies.sort_unstable();
        let mut orphans = 0;
        self.early.retain(|_, e| {
            let keep = round - e.round < EARLY_ROUNDS;
            orphans += u64::from(!keep && !e.claimed);
            keep
        });
        self.stats.orphan_records += orphans;
        self.round += 1;
        let mut ready = Vec::new();
        for (_, c) in cookies {
            self.give_up(c, &mut ready);
        }
        ready
    }

    /// Recording ended: returns every sample still waiting, without its user
    /// part; user parts never claimed are orphans.
    pub(crate) fn finish(&mut self) -> Vec<RawSample> {
        self.stats.orphan_records += self.early.drain().filter(|(_, e)| !e.claimed).count() as u64;
        let mut cookies: Vec<(u64, u64)> = self.waiting.iter().map(|(&c, w)| (w.seq, c)).collect();
        cookies.sort_unstable();
        let mut ready = Vec::new();
        for (_, c) in cookies {
            self.give_up(c, &mut ready);
        }
        ready
    }

    fn give_up(&mut self, cookie: u64, ready: &mut Vec<RawSample>) {
        let Some(w) = self.waiting.remove(&cookie) else {
            return;
        };
        self.waiting_samples -= w.samples.len();
        self.stats.unmatched_samples += w.samples.len() as u64;
        ready.extend(w.samples);
    }
}

/// Whether a deferred user part (its raw addresses, `looped`: the walk went
/// round a loop) stopped at the kernel's deferred unwinder's cap.
pub(crate) fn cut_at_cap(ips: &[u8], looped: bool) -> bool {
    !looped
        && words(ips)
            .filter(|&a| a < callchain::PERF_CONTEXT_MAX)
            .count()
            >= DEFERRED_CAP
}

#[cfg(test)]
mod tests {
    use super::*;
    use flamerec_format::Frame;

    fn raw(tid: u32) -> RawSample {
        RawSample {
            pid: 1,
            tid,
            time: 10,
            ip: 0xffff_ffff_8100_0000,
            kernel: vec![0xffff_ffff_8100_0000],
            user: Vec::new(),
            user_cut: false,
            python: None,
        }
    }

    fn user(addrs: &[u64]) -> Vec<Frame> {
        addrs
            .iter()
            .map(|&address| Frame { module: 0, address })
            .collect()
    }

    #[test]
    fn samples_wait_for_their_user_part_and_share_it() {
        let mut d = Deferred::default();
        assert!(
            d.sample(7, raw(2)).is_empty(),
            "no sample goes without its user part"
        );
        assert!(d.sample(7, raw(2)).is_empty());
        let joined = d.user_part(7, user(&[0x40_1000, 0x40_2000]), false);
        assert_eq!(joined.len(), 2);
        assert!(joined
            .iter()
            .all(|r| r.user == user(&[0x40_1000, 0x40_2000])));
        // A sample read from a ring copied later still finds it.
        assert!(d.end_round().is_empty());
        assert_eq!(d.sample(7, raw(2)).len(), 1);
        assert!(d.finish().is_empty());
        assert_eq!(
            d.stats,
            DeferStats {
                stitched: 3,
                unmatched_samples: 0,
                orphan_records: 0,
                cut: 0,
            }
        );
    }

    #[test]
    fn a_user_part_before_its_sample_waits_a_round() {
        let mut d = Deferred::default();
        assert!(d.user_part(9, user(&[0x40_1000]), false).is_empty());
        d.end_round();
        assert_eq!(d.sample(9, raw(2)).len(), 1);
        // One that no sample claims is an orphan once it has waited the
        // rest of its round and EARLY_ROUNDS more.
        d.user_part(10, user(&[0x40_1000]), false);
        for _ in 0..EARLY_ROUNDS {
            d.end_round();
        }
        assert_eq!(d.stats.orphan_records, 0);
        d.end_round();
        assert_eq!(d.stats.orphan_records, 1);
        assert!(
            d.sample(10, raw(2)).is_empty(),
            "the late sample waits again"
        );
        let given_up = d.finish();
        assert_eq!(given_up.len(), 1);
        assert!(given_up[0].user.is_empty());
        assert_eq!(
            d.stats,
            DeferStats {
                stitched: 1,
                unmatched_samples: 1,
                orphan_records: 1,
                cut: 0,
            }
        );
    }

    #[test]
    fn an_exited_threads_samples_are_given_up_a_round_later() {
        let mut d = Deferred::default();
        d.sample(3, raw(5));
        d.sample(4, raw(6));
        d.thread_exited(5);
        // The exit was read in this round; the user part may be in a ring
        // copied before the sample's, so it gets the next round too.
        assert!(d.end_round().is_empty());
        let given_up = d.end_round();
        assert_eq!(given_up.len(), 1);
        assert_eq!(given_up[0].tid, 5);
        assert_eq!(d.stats.unmatched_samples, 1);
        // Thread 6 lives on: its sample still waits.
        assert_eq!(d.user_part(4, user(&[0x40_1000]), false).len(), 1);
        assert_eq!(d.stats.stitched, 1);
    }

    #[test]
    fn user_parts_at_the_unwinders_cap_count_as_cut_per_sample() {
        let ips =
            |addrs: &[u64]| -> Vec<u8> { addrs.iter().flat_map(|a| a.to_ne_bytes()).collect() };
        let full: Vec<u64> = (0..DEFERRED_CAP as u64)
            .map(|i| 0x40_0000 + 16 * i)
            .collect();
        assert!(cut_at_cap(&ips(&full), false));
        assert!(
            !cut_at_cap(&ips(&full[1..]), false),
            "one address short of the cap is whole"
        );
        assert!(!cut_at_cap(&ips(&full), true), "a loop is not a deep stack");
        let mut d = Deferred::default();
        d.sample(1, raw(2));
        d.sample(1, raw(2));
        d.user_part(1, user(&full), true);
        d.sample(1, raw(2));
        assert_eq!(d.stats.cut, 3);
        d.user_part(2, user(&full[1..]), false);
        d.sample(2, raw(2));
        assert_eq!(d.stats.cut, 3);
    }

    #[test]
    fn waiting_samples_are_bounded() {
        let mut d = Deferred::default();
        let mut given_up = 0;
        for cookie in 0..=MAX_WAITING as u64 {
            given_up += d.sample(cookie, raw(2)).len();
        }
        assert_eq!(given_up, 1);
        assert_eq!(d.stats.unmatched_samples, 1);
        // The oldest went: the newest still joins its user part.
        assert_eq!(
            d.user_part(MAX_WAITING as u64, user(&[0x40_1000]), false)
                .len(),
            1
        );
        assert_eq!(d.stats.stitched, 1);
    }
}
