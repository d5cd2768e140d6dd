//! pprof's `profile.proto`, gzipped: what `go tool pprof`, Pyroscope,
//! Parca and Grafana read.
//!
//! Samples are summed per (thread, stack), since pprof has no per-sample
//! time; each carries the labels `pid`, `tid` (numbers) and `comm` (the
//! thread's name), and in recordings that identify processes `container`
//! (`podman:0123456789ab`, `host`) with `container.id` in a container. Sample types follow the event ([`Measure`]):
//! `samples/count` and `cpu/nanoseconds` for clock events (a sample is one
//! period, 1e9 / frequency ns), `off_cpu/nanoseconds` for off-CPU time (as
//! OTLP names it; Pyroscope refuses a `-` in a type's name),
//! `samples/count` otherwise.
//!
//! One location per frame, with one line per function, innermost first
//! (pprof's order for inlined frames); lines have no source file or line
//! number, since flamerec keeps function names only. Recordings store file
//! frames as (binary, file offset), not per-process addresses, so each
//! binary gets a made-up address range of its own in x86-64's non-canonical
//! hole, where no real code lies: `address − memory_start + file_offset` is
//! then the frame's file offset, as pprof reads mappings. Kernel and
//! anonymous frames keep their absolute addresses.

use std::io::{self, Write};

use flamerec_format::{FrameId, Metadata, ModuleKind, StackId};
use flamerec_symbolize::names::basename;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use rustc_hash::FxHashMap as HashMap;

use super::proto;
use super::{no_timeline, Measure, Timeline};
use crate::Profile;

/// The `container` label (`podman:0123456789ab`, `host`, or `unknown` for
/// a process the recording did not identify) and, in a container,
/// `container.id` (as OpenTelemetry names it) — for recordings that identify
/// processes (format 2.1).
fn container_labels(b: &mut Builder, t: &Timeline, pid: u32, keys: [i64; 2]) -> Vec<proto::Label> {
    if t.containers.is_empty() {
        return Vec::new();
    }
    let (label, id) = t
        .containers
        .get(&pid)
        .map_or(("unknown", ""), |(l, id)| (l.as_str(), id.as_str()));
    let mut labels = vec![proto::Label {
        key: keys[0],
        str: b.s(label),
        ..Default::default()
    }];
    if !id.is_empty() {
        labels.push(proto::Label {
            key: keys[1],
            str: b.s(id),
            ..Default::default()
        });
    }
    labels
}

/// Where the made-up ranges of file-backed binaries start: the first
/// address past the lower half of a 48-bit address space.
const SYNTHETIC_BASE: u64 = 1 << 47;
/// Each binary's range is this many address bits wide (1 TiB).
const SLOT_BITS: u32 = 40;

/// Writes `profile` (folded with `keep_samples`) as a gzipped pprof
/// profile.
pub fn write_pprof<W: Write>(profile: &Profile, out: W) -> io::Result<()> {
    let t = profile.timeline.as_ref().ok_or_else(no_timeline)?;
    let measure = Measure::of(&profile.metadata);
    let mut b = Builder::new();
    b.header(measure, &profile.metadata, profile.duration_ns);

    let mut sums: HashMap<(u32, StackId), u64> = HashMap::default();
    for s in &t.samples {
        let w = sums.entry((s.thread, s.stack)).or_insert(0);
        *w = w.saturating_add(s.weight);
    }
    let mut sums: Vec<((u32, StackId), u64)> = sums.into_iter().collect();
    sums.sort_unstable();

    let layout = Layout::new(t, sums.iter().map(|((_, stack), _)| *stack));
    let mut mapping_ids = vec![0u64; t.modules.len()];
    for m in mapping_order(t, &profile.metadata) {
        if let (Some(Some(r)), Some(module)) = (layout.ranges.get(m), t.modules.get(m)) {
            let id = b.p.mapping.len() as u64 + 1;
            let filename = b.s(&module.path);
            let build_id = b.s(&hex(&module.build_id));
            b.p.mapping.push(proto::Mapping {
                id,
                memory_start: r.start,
                memory_limit: r.limit,
                file_offset: 0,
                filename,
                build_id,
                has_functions: true,
                has_inline_frames: t.inline,
                ..Default::default()
            });
            if let Some(slot) = mapping_ids.get_mut(m) {
                *slot = id;
            }
        }
    }

    let mut location_ids = vec![0u64; t.frames.len()];
    let mut function_ids = vec![0u64; t.functions.len()];
    let keys = [b.s("pid"), b.s("tid"), b.s("comm")];
    let container_keys = [b.s("container"), b.s("container.id")];
    let mut frames = Vec::new();
    for ((thread, stack), weight) in sums {
        t.stack_frames(stack, &mut frames);
        let location_id = frames
            .iter()
            .rev()
            .map(|&f| {
                location(
                    &mut b,
                    t,
                    &layout,
                    &mapping_ids,
                    &mut location_ids,
                    &mut function_ids,
                    f,
                )
            })
            .collect();
        let mut label = Vec::new();
        if let Some(th) = t.threads.get(thread as usize) {
            let comm = b.s(&th.name);
            label = vec![
                num_label(keys[0], th.pid.into()),
                num_label(keys[1], th.tid.into()),
                proto::Label {
                    key: keys[2],
                    str: comm,
                    ..Default::default()
                },
            ];
            label.extend(container_labels(&mut b, t, th.pid, container_keys));
        }
        b.p.sample.push(proto::Sample {
            location_id,
            value: values(measure, weight),
            label,
        });
    }
    b.finish(out)
}

/// Writes folded stacks (`root;frame;...;leaf`, as a folded-text [`crate::Profile`]
/// returns them) as a gzipped pprof profile: one `samples/count` value per
/// stack, the root as the `comm` label, functions by name only.
pub fn write_pprof_folded<W: Write>(stacks: &[(String, u64)], out: W) -> io::Result<()> {
    let mut b = Builder::new();
    b.header(Measure::Count, &Metadata::default(), 0);
    let comm_key = b.s("comm");
    // Locations (and functions) by name: folded text knows nothing else.
    let mut by_name: HashMap<String, u64> = HashMap::default();
    for (line, count) in stacks {
        let mut frames = line.split(';');
        let root = frames.next().unwrap_or_default();
        let mut location_id: Vec<u64> = frames
            .map(|name| {
                if let Some(&id) = by_name.get(name) {
                    return id;
                }
                let id = b.p.location.len() as u64 + 1;
                let function_id = b.add_function(name);
                b.p.location.push(proto::Location {
                    id,
                    line: vec![proto::Line {
                        function_id,
                        line: 0,
                    }],
                    ..Default::default()
                });
                by_name.insert(name.to_string(), id);
                id
            })
            .collect();
        location_id.reverse();
        let comm = b.s(root);
        b.p.sample.push(proto::Sample {
            location_id,
            value: values(Measure::Count, *count),
            label: vec![proto::Label {
                key: comm_key,
                str: comm,
                ..Default::default()
            }],
        });
    }
    b.finish(out)
}

/// Module ids in the order their mappings are listed: pprof takes the
/// first for the main binary, so the recorded command's executable leads,
/// then other files, the vDSO, anonymous code and the kernel.
fn mapping_order(t: &Timeline, meta: &Metadata) -> Vec<usize> {
    let main = meta.command.first().map(|c| basename(c));
    let mut order: Vec<usize> = (0..t.modules.len()).collect();
    order.sort_by_key(|&m| {
        let Some(module) = t.modules.get(m) else {
            return (true, 4, m);
        };
        let rank = match module.kind {
            ModuleKind::File => 0,
            ModuleKind::Vdso => 1,
            ModuleKind::Anonymous => 2,
            _ => 3,
        };
        let is_main = rank == 0 && main == Some(basename(&module.path));
        (!is_main, rank, m)
    });
    order
}

/// The sample values for a summed weight, one per sample type.
fn values(measure: Measure, weight: u64) -> Vec<i64> {
    let v = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    match measure {
        Measure::Clock { period_ns } => vec![v(weight), v(weight.saturating_mul(period_ns))],
        Measure::OffCpu | Measure::Count => vec![v(weight)],
    }
}

fn num_label(key: i64, num: i64) -> proto::Label {
    proto::Label {
        key,
        num,
        ..Default::default()
    }
}

/// The location of frame `f`, made on first use (with its functions).
fn location(
    b: &mut Builder,
    t: &Timeline,
    layout: &Layout,
    mapping_ids: &[u64],
    location_ids: &mut [u64],
    function_ids: &mut [u64],
    f: FrameId,
) -> u64 {
    match location_ids.get(f as usize) {
        Some(&id) if id != 0 => return id,
        Some(_) => {}
        None => return 0,
    }
    let id = b.p.location.len() as u64 + 1;
    let (mapping_id, address) = match t.frames.get(f as usize) {
        Some(frame) => (
            mapping_ids.get(frame.module as usize).copied().unwrap_or(0),
            layout.address(frame.module as usize, frame.address),
        ),
        None => (0, 0),
    };
    let line = t
        .frame_functions(f)
        .iter()
        .rev()
        .map(|&func| {
            let function_id = match function_ids.get(func as usize) {
                Some(&id) if id != 0 => id,
                _ => {
                    let name = t.function(func).map_or("", |fu| fu.name.as_str());
                    let id = b.add_function(name);
                    if let Some(slot) = function_ids.get_mut(func as usize) {
                        *slot = id;
                    }
                    id
                }
            };
            proto::Line {
                function_id,
                line: 0,
            }
        })
        .collect();
    b.p.location.push(proto::Location {
        id,
        mapping_id,
        address,
        line,
        is_folded: false,
    });
    if let Some(slot) = location_ids.get_mut(f as usize) {
        *slot = id;
    }
    id
}

/// The address range each used module gets in the profile.
pub(super) struct Layout {
    /// Per module id: its range, `None` when unused.
    pub(super) ranges: Vec<Option<Range>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Range {
    pub(super) start: u64,
    pub(super) limit: u64,
    /// Added to a frame's stored address: the made-up base of file-backed
    /// binaries, 0 for absolute addresses.
    shift: u64,
}

impl Layout {
    pub(super) fn new(t: &Timeline, stacks: impl Iterator<Item = StackId>) -> Layout {
        // Lowest and highest stored address per module.
        let mut bounds: Vec<Option<(u64, u64)>> = vec![None; t.modules.len()];
        let mut seen = vec![false; t.nodes.len()];
        for leaf in stacks {
            let mut cur = leaf;
            while let (Some(&(parent, frame)), Some(s)) =
                (t.nodes.get(cur as usize), seen.get_mut(cur as usize))
            {
                if cur == 0 || *s {
                    break;
                }
                *s = true;
                if let Some(fr) = t.frames.get(frame as usize) {
                    if let Some(b) = bounds.get_mut(fr.module as usize) {
                        let (lo, hi) = b.unwrap_or((fr.address, fr.address));
                        *b = Some((lo.min(fr.address), hi.max(fr.address)));
                    }
                }
                cur = parent;
            }
        }
        let mut slot = 0u64;
        let ranges = bounds
            .iter()
            .zip(&t.modules)
            .map(|(b, m)| {
                let (lo, hi) = (*b)?;
                Some(match m.kind {
                    ModuleKind::File | ModuleKind::Vdso => {
                        let shift = SYNTHETIC_BASE.saturating_add(slot << SLOT_BITS);
                        slot += 1;
                        Range {
                            start: shift,
                            limit: shift.saturating_add(hi).saturating_add(1),
                            shift,
                        }
                    }
                    _ => Range {
                        start: lo,
                        limit: hi.saturating_add(1),
                        shift: 0,
                    },
                })
            })
            .collect();
        Layout { ranges }
    }

    pub(super) fn address(&self, module: usize, stored: u64) -> u64 {
        match self.ranges.get(module) {
            Some(Some(r)) => stored.saturating_add(r.shift),
            _ => stored,
        }
    }
}

/// A profile under construction, with its string table.
struct Builder {
    p: proto::Profile,
    ids: HashMap<String, i64>,
}

impl Builder {
    fn new() -> Builder {
        let mut b = Builder {
            p: proto::Profile::default(),
            ids: HashMap::default(),
        };
        b.s("");
        b
    }

    /// The string table index of `s`.
    fn s(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.p.string_table.len() as i64;
        self.p.string_table.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        id
    }

    /// A new function named `name`. Callers make one per function they
    /// tell apart: same-named functions of two binaries stay two, as in
    /// `fold --json`.
    fn add_function(&mut self, name: &str) -> u64 {
        let id = self.p.function.len() as u64 + 1;
        let n = self.s(name);
        self.p.function.push(proto::Function {
            id,
            name: n,
            system_name: n,
            ..Default::default()
        });
        id
    }

    fn header(&mut self, measure: Measure, meta: &Metadata, duration_ns: u64) {
        let vt = |b: &mut Builder, ty: &str, unit: &str| proto::ValueType {
            r#type: b.s(ty),
            unit: b.s(unit),
        };
        match measure {
            Measure::Clock { period_ns } => {
                let samples = vt(self, "samples", "count");
                let cpu = vt(self, "cpu", "nanoseconds");
                self.p.default_sample_type = cpu.r#type;
                self.p.sample_type = vec![samples, cpu.clone()];
                self.p.period_type = Some(cpu);
                self.p.period = i64::try_from(period_ns).unwrap_or(i64::MAX);
            }
            Measure::OffCpu | Measure::Count => {
                let only = match measure {
                    Measure::OffCpu => vt(self, "off_cpu", "nanoseconds"),
                    _ => vt(self, "samples", "count"),
                };
                self.p.default_sample_type = only.r#type;
                self.p.sample_type = vec![only];
            }
        }
        self.p.time_nanos = i64::try_from(meta.start_unix_ns).unwrap_or(0);
        self.p.duration_nanos = i64::try_from(duration_ns).unwrap_or(0);
        let mut comments = vec![format!("flamerec {}", env!("CARGO_PKG_VERSION"))];
        if !meta.command.is_empty() {
            comments.push(format!("command: {}", meta.command.join(" ")));
        }
        if !meta.event.is_empty() {
            comments.push(match meta.frequency_hz {
                0 => format!("event: {}", meta.event),
                hz => format!("event: {} at {hz} Hz", meta.event),
            });
        }
        // One line each: pprof prints comments as lines.
        self.p.comment = comments
            .iter()
            .map(|c| self.s(&c.replace(char::is_control, " ")))
            .collect();
    }

    fn finish<W: Write>(self, out: W) -> io::Result<()> {
        let bytes = self.p.encode_to_vec();
        let mut gz = GzEncoder::new(out, Compression::default());
        gz.write_all(&bytes)?;
        gz.finish()?.flush()
    }
}

/// Lowercase hex, as pprof and `readelf` show GNU build ids.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    pub(crate) fn decode(gz: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .expect("gzip");
        proto::Profile::decode(raw.as_slice()).expect("profile.proto")
    }

    #[test]
    fn folded_text_round_trips_with_names_intact() {
        let stacks = vec![
            ("app;main;</script>\"x\\y".to_string(), 3),
            ("app;main;work".to_string(), 5),
            ("other".to_string(), 1),
        ];
        let mut out = Vec::new();
        write_pprof_folded(&stacks, &mut out).unwrap();
        let p = decode(&out);
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!(p.sample_type.len(), 1);
        assert_eq!(
            (s(p.sample_type[0].r#type), s(p.sample_type[0].unit)),
            ("samples", "count")
        );
        assert_eq!(p.sample.len(), 3);
        let names = |smp: &proto::Sample| -> Vec<String> {
            smp.location_id
                .iter()
                .map(|&l| {
                    let loc = &p.location[l as usize - 1];
                    assert_eq!(loc.id, l);
                    let f = &p.function[loc.line[0].function_id as usize - 1];
                    s(f.name).to_string()
                })
                .collect()
        };
        assert_eq!(names(&p.sample[0]), vec!["</script>\"x\\y", "main"]);
        assert_eq!(p.sample[1].value, vec![5]);
        assert_eq!(s(p.sample[2].label[0].str), "other");
        assert!(p.sample[2].location_id.is_empty());
        // `main` is one function and one location, shared.
        assert_eq!(p.function.len(), 3);
        assert_eq!(p.location.len(), 3);
    }

    #[test]
    fn clock_values_are_counts_and_nanoseconds() {
        assert_eq!(
            values(
                Measure::Clock {
                    period_ns: 1_001_001
                },
                3
            ),
            vec![3, 3_003_003]
        );
        assert_eq!(values(Measure::OffCpu, 7), vec![7]);
        assert_eq!(values(Measure::Count, u64::MAX), vec![i64::MAX]);
    }
}
