//! OpenTelemetry profiles (OTLP, `opentelemetry.proto.profiles.v1development`
//! as the OpenTelemetry Collector v0.165 / pdata v1.71 decodes it): one
//! `ExportProfilesServiceRequest` with a dictionary shared by every profile
//! in it, one resource per process (its attributes given by the caller, by
//! OpenTelemetry's semantic conventions) holding one profile of its samples.
//!
//! A profile has one sample type: `samples`/`count` for clock and other
//! events (its period type `cpu`/`nanoseconds`, its period one sampling
//! interval, as OpenTelemetry's eBPF profiler sends), `off_cpu`/`nanoseconds`
//! for off-CPU time. Samples are summed per (thread, stack), each with the
//! attributes `thread.name` and `thread.id`. Every table starts with its
//! zero entry (index 0 is "none"); stacks list locations leaf first; a
//! location's lines list inlined functions first and their caller last.
//! Addresses and mappings are laid out as the pprof export lays them.

use flamerec_format::{FrameId, StackId};
use prost::Message;
use rustc_hash::FxHashMap as HashMap;

use super::pprof::Layout;
use super::{no_timeline, Measure, Timeline};
use crate::Profile;

/// One process's resource: whose samples, and the resource's attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpResource {
    /// The process (the recording's pid).
    pub pid: u32,
    /// Its attributes, in order (`service.name`, `process.pid`, …).
    pub attributes: Vec<(String, OtlpValue)>,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum OtlpValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
}

/// `profile` (folded with `keep_samples`) as an OTLP export request: one
/// resource per entry of `resources` with samples; samples of processes
/// not listed are left out.
pub fn write_otlp(profile: &Profile, resources: &[OtlpResource]) -> std::io::Result<Vec<u8>> {
    let t = profile.timeline.as_ref().ok_or_else(no_timeline)?;
    let mut b = Builder::new(t);
    let measure = Measure::of(&profile.metadata);
    let (sample_type, period_type, period) = match measure {
        Measure::Clock { period_ns } => (
            b.value_type("samples", "count"),
            Some(b.value_type("cpu", "nanoseconds")),
            i64::try_from(period_ns).unwrap_or(i64::MAX),
        ),
        Measure::OffCpu => (b.value_type("off_cpu", "nanoseconds"), None, 0),
        Measure::Count => (b.value_type("samples", "count"), None, 0),
    };
    // Summed per (thread, stack), grouped by process.
    let mut sums: HashMap<(u32, u32, StackId), u64> = HashMap::default();
    for s in &t.samples {
        let pid = t.threads.get(s.thread as usize).map_or(0, |th| th.pid);
        let w = sums.entry((pid, s.thread, s.stack)).or_insert(0);
        *w = w.saturating_add(s.weight);
    }
    let mut sums: Vec<((u32, u32, StackId), u64)> = sums.into_iter().collect();
    sums.sort_unstable();
    let layout = Layout::new(t, sums.iter().map(|((_, _, stack), _)| *stack));
    let mut request = wire::Request::default();
    for r in resources {
        let samples: Vec<wire::Sample> = sums
            .iter()
            .filter(|((pid, _, _), _)| *pid == r.pid)
            .map(|&((_, thread, stack), weight)| wire::Sample {
                stack_index: b.stack(&layout, stack),
                attribute_indices: b.thread_attributes(thread),
                values: vec![i64::try_from(weight).unwrap_or(i64::MAX)],
                ..Default::default()
            })
            .collect();
        if samples.is_empty() {
            continue;
        }
        let profile_id = profile_id(profile.metadata.start_unix_ns, r.pid);
        request.resource_profiles.push(wire::ResourceProfiles {
            resource: Some(wire::Resource {
                attributes: r.attributes.iter().map(|(k, v)| key_value(k, v)).collect(),
            }),
            scope_profiles: vec![wire::ScopeProfiles {
                scope: Some(wire::Scope {
                    name: "flamerec".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                profiles: vec![wire::OneProfile {
                    sample_type: Some(sample_type.clone()),
                    samples,
                    time_unix_nano: profile.metadata.start_unix_ns,
                    duration_nano: profile.duration_ns,
                    period_type: period_type.clone(),
                    period,
                    profile_id: profile_id.to_vec(),
                }],
            }],
        });
    }
    request.dictionary = Some(b.finish());
    Ok(request.encode_to_vec())
}

/// A profile id: 16 bytes, not all zero, the same for the same window and process.
fn profile_id(start_unix_ns: u64, pid: u32) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&start_unix_ns.to_be_bytes());
    id[8..12].copy_from_slice(&pid.to_be_bytes());
    id[15] = 1;
    id
}

fn key_value(k: &str, v: &OtlpValue) -> wire::KeyValue {
    wire::KeyValue {
        key: k.to_string(),
        value: Some(any(v)),
    }
}

fn any(v: &OtlpValue) -> wire::AnyValue {
    match v {
        OtlpValue::Str(s) => wire::AnyValue {
            value: Some(wire::any_value::Value::StringValue(s.clone())),
        },
        OtlpValue::Int(i) => wire::AnyValue {
            value: Some(wire::any_value::Value::IntValue(*i)),
        },
    }
}

/// The shared dictionary under construction.
struct Builder<'t> {
    t: &'t Timeline,
    d: wire::Dictionary,
    strings: HashMap<String, i32>,
    /// Per module, its mapping's index (0: not yet made).
    mappings: Vec<i32>,
    locations: Vec<i32>,
    functions: Vec<i32>,
    stacks: HashMap<StackId, i32>,
    /// Per thread index, its attributes' indices.
    threads: HashMap<u32, Vec<i32>>,
    frames: Vec<FrameId>,
}

impl<'t> Builder<'t> {
    fn new(t: &'t Timeline) -> Builder<'t> {
        let mut b = Builder {
            t,
            d: wire::Dictionary {
                mapping_table: vec![wire::Mapping::default()],
                location_table: vec![wire::Location::default()],
                function_table: vec![wire::Function::default()],
                link_table: vec![wire::Link {
                    trace_id: vec![0; 16],
                    span_id: vec![0; 8],
                }],
                attribute_table: vec![wire::Attribute::default()],
                stack_table: vec![wire::Stack::default()],
                ..Default::default()
            },
            strings: HashMap::default(),
            mappings: vec![0; t.modules.len()],
            locations: vec![0; t.frames.len()],
            functions: vec![0; t.functions.len()],
            stacks: HashMap::default(),
            threads: HashMap::default(),
            frames: Vec::new(),
        };
        b.s("");
        b
    }

    fn finish(self) -> wire::Dictionary {
        self.d
    }

    /// The string table index of `s`.
    fn s(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn value_type(&mut self, ty: &str, unit: &str) -> wire::ValueType {
        wire::ValueType {
            type_strindex: self.s(ty),
            unit_strindex: self.s(unit),
        }
    }

    fn attribute(&mut self, key: &str, v: OtlpValue) -> i32 {
        let i = self.d.attribute_table.len() as i32;
        let key_strindex = self.s(key);
        self.d.attribute_table.push(wire::Attribute {
            key_strindex,
            value: Some(any(&v)),
        });
        i
    }

    fn thread_attributes(&mut self, thread: u32) -> Vec<i32> {
        if let Some(a) = self.threads.get(&thread) {
            return a.clone();
        }
        let a = match self.t.threads.get(thread as usize) {
            Some(th) => {
                let (name, tid) = (th.name.clone(), th.tid);
                vec![
                    self.attribute("thread.name", OtlpValue::Str(name)),
                    self.attribute("thread.id", OtlpValue::Int(i64::from(tid))),
                ]
            }
            None => Vec::new(),
        };
        self.threads.insert(thread, a.clone());
        a
    }

    fn stack(&mut self, layout: &Layout, stack: StackId) -> i32 {
        if let Some(&i) = self.stacks.get(&stack) {
            return i;
        }
        let mut frames = std::mem::take(&mut self.frames);
        self.t.stack_frames(stack, &mut frames);
        let location_indices = frames
            .iter()
            .rev()
            .map(|&f| self.location(layout, f))
            .collect();
        self.frames = frames;
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(wire::Stack { location_indices });
        self.stacks.insert(stack, i);
        i
    }

    fn location(&mut self, layout: &Layout, f: FrameId) -> i32 {
        match self.locations.get(f as usize) {
            Some(&i) if i != 0 => return i,
            Some(_) => {}
            None => return 0,
        }
        let (mapping_index, address) = match self.t.frames.get(f as usize) {
            Some(frame) => (
                self.mapping(layout, frame.module as usize),
                layout.address(frame.module as usize, frame.address),
            ),
            None => (0, 0),
        };
        let funcs: Vec<u32> = self.t.frame_functions(f).to_vec();
        let lines = funcs
            .iter()
            .rev()
            .map(|&func| wire::Line {
                function_index: self.function(func),
                ..Default::default()
            })
            .collect();
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(wire::Location {
            mapping_index,
            address,
            lines,
        });
        if let Some(slot) = self.locations.get_mut(f as usize) {
            *slot = i;
        }
        i
    }

    fn function(&mut self, func: u32) -> i32 {
        match self.functions.get(func as usize) {
            Some(&i) if i != 0 => return i,
            Some(_) => {}
            None => return 0,
        }
        let name = self
            .t
            .function(func)
            .map_or(String::new(), |f| f.name.clone());
        let n = self.s(&name);
        let i = self.d.function_table.len() as i32;
        self.d.function_table.push(wire::Function {
            name_strindex: n,
            system_name_strindex: n,
            ..Default::default()
        });
        if let Some(slot) = self.functions.get_mut(func as usize) {
            *slot = i;
        }
        i
    }

    fn mapping(&mut self, layout: &Layout, module: usize) -> i32 {
        match self.mappings.get(module) {
            Some(&i) if i != 0 => return i,
            Some(_) => {}
            None => return 0,
        }
        let (Some(Some(r)), Some(m)) = (layout.ranges.get(module), self.t.modules.get(module))
        else {
            return 0;
        };
        let (start, limit) = (r.start, r.limit);
        let (path, build_id) = (m.path.clone(), super::pprof::hex(&m.build_id));
        let filename_strindex = self.s(&path);
        let attribute_indices = if build_id.is_empty() {
            Vec::new()
        } else {
            vec![self.attribute("process.executable.build_id.gnu", OtlpValue::Str(build_id))]
        };
        let i = self.d.mapping_table.len() as i32;
        self.d.mapping_table.push(wire::Mapping {
            memory_start: start,
            memory_limit: limit,
            file_offset: 0,
            filename_strindex,
            attribute_indices,
        });
        if let Some(slot) = self.mappings.get_mut(module) {
            *slot = i;
        }
        i
    }
}

/// The messages, with the field numbers of `v1development` at the
/// Collector release named above.
mod wire {
    #![allow(missing_docs)]

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Request {
        #[prost(message, repeated, tag = "1")]
        pub resource_profiles: Vec<ResourceProfiles>,
        #[prost(message, optional, tag = "2")]
        pub dictionary: Option<Dictionary>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dictionary {
        #[prost(message, repeated, tag = "1")]
        pub mapping_table: Vec<Mapping>,
        #[prost(message, repeated, tag = "2")]
        pub location_table: Vec<Location>,
        #[prost(message, repeated, tag = "3")]
        pub function_table: Vec<Function>,
        #[prost(message, repeated, tag = "4")]
        pub link_table: Vec<Link>,
        #[prost(string, repeated, tag = "5")]
        pub string_table: Vec<String>,
        #[prost(message, repeated, tag = "6")]
        pub attribute_table: Vec<Attribute>,
        #[prost(message, repeated, tag = "7")]
        pub stack_table: Vec<Stack>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceProfiles {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_profiles: Vec<ScopeProfiles>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeProfiles {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<Scope>,
        #[prost(message, repeated, tag = "2")]
        pub profiles: Vec<OneProfile>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Scope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OneProfile {
        #[prost(message, optional, tag = "1")]
        pub sample_type: Option<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        #[prost(uint64, tag = "4")]
        pub duration_nano: u64,
        #[prost(message, optional, tag = "5")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "6")]
        pub period: i64,
        #[prost(bytes = "vec", tag = "7")]
        pub profile_id: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int32, tag = "1")]
        pub type_strindex: i32,
        #[prost(int32, tag = "2")]
        pub unit_strindex: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(int32, tag = "1")]
        pub stack_index: i32,
        #[prost(int32, repeated, tag = "2")]
        pub attribute_indices: Vec<i32>,
        #[prost(int32, tag = "3")]
        pub link_index: i32,
        #[prost(int64, repeated, tag = "4")]
        pub values: Vec<i64>,
        #[prost(fixed64, repeated, tag = "5")]
        pub timestamps_unix_nano: Vec<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Stack {
        #[prost(int32, repeated, tag = "1")]
        pub location_indices: Vec<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(int32, tag = "1")]
        pub mapping_index: i32,
        #[prost(uint64, tag = "2")]
        pub address: u64,
        #[prost(message, repeated, tag = "3")]
        pub lines: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(int32, tag = "1")]
        pub function_index: i32,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(int32, tag = "1")]
        pub name_strindex: i32,
        #[prost(int32, tag = "2")]
        pub system_name_strindex: i32,
        #[prost(int32, tag = "3")]
        pub filename_strindex: i32,
        #[prost(int64, tag = "4")]
        pub start_line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub memory_start: u64,
        #[prost(uint64, tag = "2")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "3")]
        pub file_offset: u64,
        #[prost(int32, tag = "4")]
        pub filename_strindex: i32,
        #[prost(int32, repeated, tag = "5")]
        pub attribute_indices: Vec<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Link {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
        #[prost(bytes = "vec", tag = "2")]
        pub span_id: Vec<u8>,
    }

    /// `KeyValueAndUnit` of the dictionary's attribute table.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Attribute {
        #[prost(int32, tag = "1")]
        pub key_strindex: i32,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "any_value::Value", tags = "1, 3")]
        pub value: Option<any_value::Value>,
    }

    pub mod any_value {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(string, tag = "1")]
            StringValue(String),
            #[prost(int64, tag = "3")]
            IntValue(i64),
        }
    }
}
