//! The messages of pprof's `profile.proto` (package `perftools.profiles`,
//! proto3), as prost types: field numbers and wire types follow the
//! published schema; prost does the encoding.
//!
//! Only the fields flamerec fills or a reader may need are declared; a
//! decoder skips the rest, so files other tools wrote still read back.
//! Every string field is an index into [`Profile::string_table`], whose
//! first entry is the empty string.

/// A whole profile.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each entry of [`Sample::value`] measures.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Binaries the locations lie in.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Code locations the samples' stacks are made of.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions the locations' lines name.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// All strings; entry 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regular expression of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regular expression of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// Start of the collection, nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Length of the collection in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the sampling period counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events between two samples, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form notes (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type a viewer shows first (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A quantity and its unit (both string indices).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// E.g. "cpu", "samples".
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. "nanoseconds", "count".
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// Values measured in one stack (with labels).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per [`Profile::sample_type`].
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Context such as the thread.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A key with a string or a number.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value, for string labels.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// The value, for numeric labels.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of `num`'s unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A binary's address range.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Nonzero, unique.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past the last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build id (hex for GNU build ids).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations in it carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// They carry source file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// They carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// They carry inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A code address and the functions it stands for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Nonzero, unique.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping it lies in (0: none).
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The innermost function first, then each caller it was inlined
    /// into; the last line is the function that holds the code.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several symbols share this address.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A function (and source line) at a location.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// A function.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Nonzero, unique.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the readable name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name as the system knows it.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First source line, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
