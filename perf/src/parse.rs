//! Decoding perf ring-buffer records from bytes copied out of the buffer.
//!
//! Safe code over owned bytes: every field read is bounds-checked, and a
//! record that does not fit is reported as malformed rather than trusted.

use crate::sys::{
    record_type as rt, reg, sample, MISC_COMM_EXEC, MISC_MMAP_BUILD_ID, MISC_SWITCH_OUT,
    MISC_SWITCH_OUT_PREEMPT, PERF_CONTEXT_USER_DEFERRED,
};

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum PerfRecord<'a> {
    /// A sample.
    Sample(SampleRecord<'a>),
    /// A new executable mapping.
    Mmap {
        /// Process id.
        pid: u32,
        /// Start address.
        addr: u64,
        /// Length.
        len: u64,
        /// File offset of `addr`.
        pgoff: u64,
        /// Build id when the kernel supplied one.
        build_id: Option<&'a [u8]>,
        /// Mapped path or pseudo name.
        filename: &'a str,
        /// Timestamp.
        time: u64,
    },
    /// A thread name.
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The name.
        name: &'a str,
        /// Set by exec.
        exec: bool,
        /// Timestamp.
        time: u64,
    },
    /// Fork or exit.
    Task {
        /// True for exit, false for fork.
        exit: bool,
        /// Process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// Thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
        /// Timestamp.
        time: u64,
    },
    /// Samples the kernel dropped.
    Lost {
        /// How many.
        count: u64,
        /// Timestamp.
        time: u64,
        /// The CPU whose ring overran (0 when the layout has no CPU).
        cpu: u32,
    },
    /// A monitored task was switched in or out.
    Switch {
        /// Switch-out (else switch-in).
        out: bool,
        /// A switch-out of a task that was still runnable (preempted).
        preempted: bool,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Timestamp.
        time: u64,
    },
    /// The user part of the callchains of earlier samples with this cookie,
    /// unwound when the thread returned to user space.
    CallchainDeferred {
        /// Names the samples whose callchain ended in
        /// `PERF_CONTEXT_USER_DEFERRED` and this cookie.
        cookie: u64,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Timestamp.
        time: u64,
        /// User addresses, leaf first, native-endian u64s (a leading
        /// `PERF_CONTEXT_USER` marker is allowed).
        ips: &'a [u8],
    },
    /// Sampling was throttled (too many interrupts).
    Throttle,
    /// A record flamerec does not use.
    Other,
}

/// The fields of a sample record that flamerec asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRecord<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp (CLOCK_MONOTONIC ns).
    pub time: u64,
    /// CPU.
    pub cpu: u32,
    /// Period.
    pub period: u64,
    /// Raw callchain: native-endian u64s, context markers included.
    pub callchain: &'a [u8],
    /// User registers (bp, sp, ip) when the sample has them.
    pub user_regs: Option<[u64; 3]>,
    /// User rbx, when sampled too.
    pub user_bx: Option<u64>,
    /// The valid part of the user stack copy.
    pub user_stack: &'a [u8],
}

impl SampleRecord<'_> {
    /// Callchain entries, leaf first, markers included.
    pub fn callchain(&self) -> impl Iterator<Item = u64> + '_ {
        self.callchain
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
    }

    /// The cookie of the deferred user callchain this sample's callchain
    /// ends with (`PERF_CONTEXT_USER_DEFERRED`, cookie), if it does.
    pub fn deferred_cookie(&self) -> Option<u64> {
        let mut entries = self.callchain();
        entries.find(|&e| e == PERF_CONTEXT_USER_DEFERRED)?;
        entries.next()
    }
}

/// u64s of native-endian bytes (a deferred record's `ips`).
pub fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
}

struct Bytes<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.b.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn u64(&mut self) -> Option<u64> {
        let s = self.take(8)?;
        Some(u64::from_ne_bytes(s.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        let s = self.take(4)?;
        Some(u32::from_ne_bytes(s.try_into().ok()?))
    }
}

/// Splits a buffer of whole records; yields (type, misc, body). Stops at
/// the first header that does not fit, counting it in `malformed`.
pub fn split<'a>(buf: &'a [u8], malformed: &mut u64) -> Vec<(u32, u16, &'a [u8])> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 8 <= buf.len() {
        let ty = u32::from_ne_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]);
        let misc = u16::from_ne_bytes([buf[pos + 4], buf[pos + 5]]);
        let size = u16::from_ne_bytes([buf[pos + 6], buf[pos + 7]]) as usize;
        if size < 8 || pos + size > buf.len() {
            *malformed += 1;
            break;
        }
        out.push((ty, misc, &buf[pos + 8..pos + size]));
        pos += size;
    }
    out
}

/// Where the records of a ring's two published slices (see
/// `RingBuffer::peek`) split: whole records end at `.0` in `first`, the
/// record that straddles the wrap (if any) is copied whole into `scratch`,
/// and whole records start again at `.1` in `second`. Feed `first[..0]`,
/// `scratch` and `second[.1..]` to [`split`]. A straddling record whose size
/// the bytes cannot hold is left to `split` to count as malformed.
pub fn straddle(first: &[u8], second: &[u8], scratch: &mut Vec<u8>) -> (usize, usize) {
    scratch.clear();
    let mut pos = 0;
    while pos + 8 <= first.len() {
        let size = u16::from_ne_bytes([first[pos + 6], first[pos + 7]]) as usize;
        if size < 8 || pos + size > first.len() {
            break;
        }
        pos += size;
    }
    if pos == first.len() || second.is_empty() {
        return (pos, 0);
    }
    // The header itself may be cut by the wrap: read its size from both parts.
    let tail = &first[pos..];
    let byte = |i: usize| {
        tail.get(i)
            .or_else(|| second.get(i - tail.len()))
            .copied()
            .unwrap_or(0)
    };
    let size = u16::from_ne_bytes([byte(6), byte(7)]) as usize;
    let from_second = size.saturating_sub(tail.len()).min(second.len());
    if size < 8 {
        // Not a record: `split` reports its header, and, as in one buffer,
        // nothing after it is read.
        scratch.extend_from_slice(tail);
        scratch.extend_from_slice(&second[..8usize.saturating_sub(tail.len()).min(second.len())]);
        return (pos, second.len());
    }
    scratch.extend_from_slice(tail);
    scratch.extend_from_slice(&second[..from_second]);
    (pos, from_second)
}

/// Layout of the sample_id trailer and of samples, from the sample_type bits.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// The `PERF_SAMPLE_*` bits the events were opened with.
    pub sample_type: u64,
    /// The `PERF_REG_X86_*` bits of the user registers sampled; bp, sp and
    /// ip among them (bx optional).
    pub regs_user: u64,
}

impl Layout {
    fn trailer_len(&self) -> usize {
        let st = self.sample_type;
        [sample::TID, sample::TIME, sample::CPU]
            .iter()
            .filter(|&&bit| st & bit != 0)
            .count()
            * 8
    }

    /// pid and tid from the sample_id trailer of a non-sample record.
    fn trailer_tid(&self, body: &[u8]) -> (u32, u32) {
        let len = self.trailer_len();
        if self.sample_type & sample::TID == 0 || body.len() < len {
            return (0, 0);
        }
        let mut b = Bytes {
            b: &body[body.len() - len..],
            pos: 0,
        };
        (b.u32().unwrap_or(0), b.u32().unwrap_or(0))
    }

    /// Time from the sample_id trailer of a non-sample record.
    fn trailer_time(&self, body: &[u8]) -> u64 {
        let st = self.sample_type;
        let len = self.trailer_len();
        if st & sample::TIME == 0 || body.len() < len {
            return 0;
        }
        let mut b = Bytes {
            b: &body[body.len() - len..],
            pos: 0,
        };
        if st & sample::TID != 0 {
            b.u64();
        }
        b.u64().unwrap_or(0)
    }

    /// CPU from the sample_id trailer of a non-sample record (0 without one).
    fn trailer_cpu(&self, body: &[u8]) -> u32 {
        let st = self.sample_type;
        let len = self.trailer_len();
        if st & sample::CPU == 0 || body.len() < len {
            return 0;
        }
        let skip = [sample::TID, sample::TIME]
            .iter()
            .filter(|&&bit| st & bit != 0)
            .count()
            * 8;
        let mut b = Bytes {
            b: &body[body.len() - len + skip..],
            pos: 0,
        };
        b.u32().unwrap_or(0)
    }

    /// Decodes one record; `None` when its body is too short.
    pub fn decode<'a>(&self, ty: u32, misc: u16, body: &'a [u8]) -> Option<PerfRecord<'a>> {
        let mut b = Bytes { b: body, pos: 0 };
        Some(match ty {
            rt::SAMPLE => PerfRecord::Sample(self.sample(&mut b)?),
            rt::MMAP2 | rt::MMAP => self.mmap(ty == rt::MMAP2, misc, body)?,
            rt::COMM => self.comm(misc, body)?,
            rt::FORK | rt::EXIT => PerfRecord::Task {
                exit: ty == rt::EXIT,
                pid: b.u32()?,
                ppid: b.u32()?,
                tid: b.u32()?,
                ptid: b.u32()?,
                time: b.u64()?,
            },
            rt::LOST => {
                let _id = b.u64()?;
                PerfRecord::Lost {
                    count: b.u64()?,
                    time: self.trailer_time(body),
                    cpu: self.trailer_cpu(body),
                }
            }
            rt::LOST_SAMPLES => PerfRecord::Lost {
                count: b.u64()?,
                time: self.trailer_time(body),
                cpu: self.trailer_cpu(body),
            },
            rt::THROTTLE => PerfRecord::Throttle,
            rt::CALLCHAIN_DEFERRED => {
                let cookie = b.u64()?;
                let nr = usize::try_from(b.u64()?).ok()?;
                let ips = b.take(nr.checked_mul(8)?)?;
                let (pid, tid) = self.trailer_tid(body);
                PerfRecord::CallchainDeferred {
                    cookie,
                    pid,
                    tid,
                    time: self.trailer_time(body),
                    ips,
                }
            }
            // A CPU-wide event reports each switch as SWITCH_CPU_WIDE: its
            // trailer names the task switched (out or in), as SWITCH's does;
            // the task on the other side of the switch is not needed.
            rt::SWITCH | rt::SWITCH_CPU_WIDE => {
                let (pid, tid) = self.trailer_tid(body);
                PerfRecord::Switch {
                    out: misc & MISC_SWITCH_OUT != 0,
                    preempted: misc & MISC_SWITCH_OUT_PREEMPT != 0,
                    pid,
                    tid,
                    time: self.trailer_time(body),
                }
            }
            _ => PerfRecord::Other,
        })
    }

    /// An MMAP or MMAP2 (`mmap2`) record.
    fn mmap<'a>(&self, mmap2: bool, misc: u16, body: &'a [u8]) -> Option<PerfRecord<'a>> {
        let mut b = Bytes { b: body, pos: 0 };
        let pid = b.u32()?;
        let _tid = b.u32()?;
        let addr = b.u64()?;
        let len = b.u64()?;
        let pgoff = b.u64()?;
        let mut build_id = None;
        if mmap2 {
            let ids = b.take(24)?;
            if misc & MISC_MMAP_BUILD_ID != 0 {
                let n = (ids[0] as usize).min(20);
                build_id = Some(&ids[4..4 + n]);
            }
            let _prot = b.u32()?;
            let _flags = b.u32()?;
        }
        let rest = &body[b.pos..body.len().saturating_sub(self.trailer_len())];
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        Some(PerfRecord::Mmap {
            pid,
            addr,
            len,
            pgoff,
            build_id,
            filename: std::str::from_utf8(&rest[..end]).unwrap_or("[invalid path]"),
            time: self.trailer_time(body),
        })
    }

    /// A COMM record (`exec` when the name came with an exec).
    fn comm<'a>(&self, misc: u16, body: &'a [u8]) -> Option<PerfRecord<'a>> {
        let mut b = Bytes { b: body, pos: 0 };
        let pid = b.u32()?;
        let tid = b.u32()?;
        let rest = &body[b.pos..body.len().saturating_sub(self.trailer_len())];
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        Some(PerfRecord::Comm {
            pid,
            tid,
            name: std::str::from_utf8(&rest[..end]).unwrap_or("[invalid name]"),
            exec: misc & MISC_COMM_EXEC != 0,
            time: self.trailer_time(body),
        })
    }

    fn sample<'a>(&self, b: &mut Bytes<'a>) -> Option<SampleRecord<'a>> {
        let st = self.sample_type;
        let mut s = SampleRecord {
            ip: 0,
            pid: 0,
            tid: 0,
            time: 0,
            cpu: 0,
            period: 0,
            callchain: &[],
            user_regs: None,
            user_bx: None,
            user_stack: &[],
        };
        if st & sample::IP != 0 {
            s.ip = b.u64()?;
        }
        if st & sample::TID != 0 {
            s.pid = b.u32()?;
            s.tid = b.u32()?;
        }
        if st & sample::TIME != 0 {
            s.time = b.u64()?;
        }
        if st & sample::CPU != 0 {
            s.cpu = b.u32()?;
            b.u32()?;
        }
        if st & sample::PERIOD != 0 {
            s.period = b.u64()?;
        }
        if st & sample::CALLCHAIN != 0 {
            let nr = usize::try_from(b.u64()?).ok()?;
            s.callchain = b.take(nr.checked_mul(8)?)?;
        }
        if st & sample::RAW != 0 {
            let n = b.u32()? as usize;
            b.take(n)?;
        }
        if st & sample::REGS_USER != 0 {
            let abi = b.u64()?;
            if abi != 0 {
                // One value per bit of the mask, in bit order.
                let mut at = [None; 64];
                for bit in 0..64u32 {
                    if self.regs_user & (1 << bit) != 0 {
                        at[bit as usize] = Some(b.u64()?);
                    }
                }
                let get = |r: u32| at[r as usize];
                if let (Some(bp), Some(sp), Some(ip)) = (get(reg::BP), get(reg::SP), get(reg::IP)) {
                    s.user_regs = Some([bp, sp, ip]);
                    s.user_bx = get(reg::BX);
                }
            }
        }
        if st & sample::STACK_USER != 0 {
            let size = usize::try_from(b.u64()?).ok()?;
            if size != 0 {
                let data = b.take(size)?;
                let dyn_size = usize::try_from(b.u64()?).ok()?;
                s.user_stack = &data[..dyn_size.min(size)];
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {

    /// Records of sizes 8–40 bytes: type = index, body bytes = index.
    fn records(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let size = 8 + 8 * (i % 5);
            out.extend_from_slice(&(i as u32).to_ne_bytes());
            out.extend_from_slice(&0u16.to_ne_bytes());
            out.extend_from_slice(&(size as u16).to_ne_bytes());
            out.extend(std::iter::repeat_n(i as u8, size - 8));
        }
        out
    }

    #[test]
    fn records_read_in_place_across_the_wrap_equal_a_contiguous_read() {
        let bytes = records(40);
        let mut m = 0;
        let want: Vec<(u32, u16, Vec<u8>)> = split(&bytes, &mut m)
            .into_iter()
            .map(|(t, x, b)| (t, x, b.to_vec()))
            .collect();
        assert_eq!((want.len(), m), (40, 0));
        let mut scratch = Vec::new();
        // Every cut point, including inside headers and at record starts.
        for cut in 0..=bytes.len() {
            let (first, second) = bytes.split_at(cut);
            let (end, start) = straddle(first, second, &mut scratch);
            let mut malformed = 0;
            let mut got = Vec::new();
            for part in [&first[..end], &scratch[..], &second[start..]] {
                got.extend(
                    split(part, &mut malformed)
                        .into_iter()
                        .map(|(t, x, b)| (t, x, b.to_vec())),
                );
            }
            assert_eq!((&got, malformed), (&want, 0), "cut at {cut}");
        }
    }

    #[test]
    fn a_straddling_header_with_no_size_is_malformed_not_a_loop() {
        let mut first = records(2);
        first.extend_from_slice(&[7, 0, 0, 0, 0, 0]); // 6 bytes of a header
        let second = [0u8, 0, 1, 2, 3];
        let mut scratch = Vec::new();
        let (end, start) = straddle(&first, &second, &mut scratch);
        let mut malformed = 0;
        let n = split(&first[..end], &mut malformed).len()
            + split(&scratch, &mut malformed).len()
            + split(&second[start..], &mut malformed).len();
        assert_eq!(n, 2);
        assert!(malformed >= 1);
    }

    use super::*;

    fn rec(ty: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn sample_with_callchain_decodes() {
        let layout = Layout {
            sample_type: sample::IP
                | sample::TID
                | sample::TIME
                | sample::PERIOD
                | sample::CALLCHAIN,
            regs_user: 0,
        };
        let mut body = Vec::new();
        body.extend_from_slice(&0x1234u64.to_ne_bytes());
        body.extend_from_slice(&10u32.to_ne_bytes());
        body.extend_from_slice(&11u32.to_ne_bytes());
        body.extend_from_slice(&99u64.to_ne_bytes());
        body.extend_from_slice(&1000u64.to_ne_bytes());
        body.extend_from_slice(&2u64.to_ne_bytes());
        body.extend_from_slice(&0x1234u64.to_ne_bytes());
        body.extend_from_slice(&0x5678u64.to_ne_bytes());
        let buf = rec(rt::SAMPLE, 0, &body);
        let mut bad = 0;
        let recs = split(&buf, &mut bad);
        assert_eq!(bad, 0);
        let (ty, misc, b) = recs[0];
        match layout.decode(ty, misc, b) {
            Some(PerfRecord::Sample(s)) => {
                assert_eq!((s.pid, s.tid, s.time, s.period), (10, 11, 99, 1000));
                assert_eq!(s.callchain().collect::<Vec<_>>(), vec![0x1234, 0x5678]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cpu_wide_switch_names_the_task_in_its_trailer() {
        // `-a` reports switches as SWITCH_CPU_WIDE: the task on the other
        // side first (here 70/71), then the trailer with the task switched.
        let layout = Layout {
            sample_type: sample::TID | sample::TIME,
            regs_user: 0,
        };
        let mut body = Vec::new();
        for w in [70u32, 71, 10, 11] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        body.extend_from_slice(&99u64.to_ne_bytes());
        for (misc, out, preempted) in [
            (0, false, false),
            (MISC_SWITCH_OUT, true, false),
            (MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, true, true),
        ] {
            assert_eq!(
                layout.decode(rt::SWITCH_CPU_WIDE, misc, &body),
                Some(PerfRecord::Switch {
                    out,
                    preempted,
                    pid: 10,
                    tid: 11,
                    time: 99
                })
            );
        }
    }

    #[test]
    fn callchain_longer_than_the_record_is_refused() {
        let layout = Layout {
            sample_type: sample::CALLCHAIN,
            regs_user: 0,
        };
        let body = 1000u64.to_ne_bytes();
        assert_eq!(layout.decode(rt::SAMPLE, 0, &body), None);
    }

    #[test]
    fn deferred_callchains_decode_with_their_cookie() {
        // As Linux 7.2 writes them (seen in the VM of vm/): a sample in a
        // system call, its chain ending in the marker and the cookie; then
        // the record with the user part and the sample_id trailer.
        let layout = Layout {
            sample_type: sample::TID | sample::TIME | sample::CALLCHAIN,
            regs_user: 0,
        };
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(&50u64.to_ne_bytes());
        body.extend_from_slice(&4u64.to_ne_bytes());
        for w in [
            flamerec_unwind::callchain::PERF_CONTEXT_KERNEL,
            0xffff_ffff_8100_0010,
            PERF_CONTEXT_USER_DEFERRED,
            0x3_0000_0001,
        ] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        match layout.decode(rt::SAMPLE, 0, &body) {
            Some(PerfRecord::Sample(s)) => assert_eq!(s.deferred_cookie(), Some(0x3_0000_0001)),
            other => panic!("{other:?}"),
        }
        let mut body = Vec::new();
        for w in [0x3_0000_0001u64, 2, 0x43_8e7d, 0x40_1812] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(&60u64.to_ne_bytes());
        match layout.decode(rt::CALLCHAIN_DEFERRED, 0, &body) {
            Some(PerfRecord::CallchainDeferred {
                cookie,
                pid,
                tid,
                time,
                ips,
            }) => {
                assert_eq!((cookie, pid, tid, time), (0x3_0000_0001, 7, 8, 60));
                assert_eq!(words(ips).collect::<Vec<_>>(), [0x43_8e7d, 0x40_1812]);
            }
            other => panic!("{other:?}"),
        }
        // A count past the record is refused, not trusted.
        let body = [0x3_0000_0001u64, 1000]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect::<Vec<u8>>();
        assert_eq!(layout.decode(rt::CALLCHAIN_DEFERRED, 0, &body), None);
    }

    #[test]
    fn a_chain_without_the_marker_has_no_cookie() {
        let layout = Layout {
            sample_type: sample::CALLCHAIN,
            regs_user: 0,
        };
        let mut body = 2u64.to_ne_bytes().to_vec();
        body.extend_from_slice(&0x40_1000u64.to_ne_bytes());
        body.extend_from_slice(&PERF_CONTEXT_USER_DEFERRED.to_ne_bytes());
        match layout.decode(rt::SAMPLE, 0, &body) {
            // The marker is the last entry: the cookie is missing.
            Some(PerfRecord::Sample(s)) => assert_eq!(s.deferred_cookie(), None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn record_size_past_the_buffer_stops_splitting() {
        let mut buf = rec(rt::COMM, 0, &[0u8; 16]);
        buf[6] = 200; // claims 200 bytes
        let mut bad = 0;
        assert!(split(&buf, &mut bad).is_empty());
        assert_eq!(bad, 1);
    }
}
