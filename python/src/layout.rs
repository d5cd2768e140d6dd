//! Where CPython keeps what a reader needs, per minor version: the byte
//! offsets of the runtime, interpreter, thread state, frame, code object
//! and string fields (x86-64). 3.8–3.12 come from tables checked against
//! the DWARF of each version's libpython and against live processes; 3.13
//! publishes its own (`_Py_DebugOffsets` at the start of `_PyRuntime`),
//! which [`Layout::from_debug_offsets`] reads and checks against what the
//! table expects before trusting it.

/// How a thread's frames are chained, and how one eval-loop call's run of
/// frames is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameModel {
    /// 3.8–3.10: heap `PyFrameObject`s, one per eval-loop call; `f_lasti`
    /// in bytes (3.8, 3.9) or code units (3.10).
    Objects {
        /// `f_lasti` counts 2-byte code units (3.10), not bytes.
        lasti_in_units: bool,
    },
    /// 3.11: `_PyInterpreterFrame`s reached through the thread's
    /// `_PyCFrame`; the oldest frame of each eval-loop call has `is_entry`.
    EntryFlag,
    /// 3.12, 3.13: each eval-loop call pushes a shim frame owned by the C
    /// stack (`owner == 3`) below the frames it runs.
    EntryShim {
        /// The thread's current frame is a field of the thread state
        /// (3.13), not of its `_PyCFrame`.
        in_thread_state: bool,
    },
}

/// Byte offsets of one CPython minor version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// (major, minor).
    pub version: (u8, u8),
    /// How frames are chained.
    pub model: FrameModel,
    /// `_PyRuntime.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// `PyInterpreterState.next`.
    pub interp_next: u64,
    /// `PyInterpreterState` threads head (`tstate_head`, `threads.head`).
    pub interp_threads_head: u64,
    /// `PyThreadState.next`.
    pub tstate_next: u64,
    /// `PyThreadState.thread_id` (`pthread_t`).
    pub tstate_thread_id: u64,
    /// `PyThreadState.native_thread_id` (3.11+: the Linux tid).
    pub tstate_native_thread_id: Option<u64>,
    /// Where the thread's current frame is found: `PyThreadState.frame`
    /// (3.8–3.10), `.cframe` (3.11, 3.12: a `_PyCFrame*` whose
    /// `current_frame` is at [`Layout::cframe_current_frame`]) or
    /// `.current_frame` (3.13).
    pub tstate_frame: u64,
    /// `_PyCFrame.current_frame` (3.11, 3.12).
    pub cframe_current_frame: u64,
    /// The frame's code object (`f_code`, `f_executable`).
    pub frame_code: u64,
    /// The older frame (`f_back`, `previous`).
    pub frame_back: u64,
    /// The instruction (`f_lasti`: an int; `prev_instr`, `instr_ptr`: a pointer).
    pub frame_instr: u64,
    /// `is_entry` (3.11) or `owner` (3.12+), one byte; 0 where neither exists.
    pub frame_marker: u64,
    /// `co_filename`.
    pub code_filename: u64,
    /// `co_name`.
    pub code_name: u64,
    /// `co_qualname` (3.11+).
    pub code_qualname: Option<u64>,
    /// `co_firstlineno` (an int).
    pub code_firstlineno: u64,
    /// `co_lnotab` (3.8, 3.9) or `co_linetable`.
    pub code_linetable: u64,
    /// `_co_firsttraceable` (3.11+; an int): frames not yet past it are
    /// incomplete and not shown.
    pub code_firsttraceable: Option<u64>,
    /// `co_code_adaptive`, the inline bytecode (3.11+).
    pub code_adaptive: Option<u64>,
    /// Where a compact ASCII string's characters start (`sizeof(PyASCIIObject)`).
    pub ascii_data: u64,
    /// Where a compact non-ASCII string's start (`sizeof(PyCompactUnicodeObject)`).
    pub compact_data: u64,
}

/// The `owner` of a 3.12+ frame that an eval-loop call keeps on the C stack.
pub const OWNED_BY_CSTACK: u8 = 3;

/// `PyObject.ob_type`.
pub const OB_TYPE: u64 = 8;
/// `PyVarObject.ob_size` (of bytes objects).
pub const OB_SIZE: u64 = 16;
/// `PyBytesObject.ob_sval`.
pub const BYTES_DATA: u64 = 32;
/// `PyASCIIObject.length` and `.state`.
pub const STR_LENGTH: u64 = 16;
/// See [`STR_LENGTH`].
pub const STR_STATE: u64 = 32;

impl Layout {
    /// The table for CPython `major.minor`, for 3.8–3.12 (3.13 and later
    /// describe themselves: [`Layout::from_debug_offsets`]).
    pub fn for_version(major: u8, minor: u8) -> Option<Layout> {
        if major != 3 {
            return None;
        }
        let before_312_strings = (48, 72);
        let l = match minor {
            8..=10 => Layout {
                version: (3, minor),
                model: FrameModel::Objects {
                    lasti_in_units: minor == 10,
                },
                runtime_interpreters_head: 32,
                interp_next: 0,
                interp_threads_head: 8,
                tstate_next: 8,
                tstate_thread_id: 176,
                tstate_native_thread_id: None,
                tstate_frame: 24,
                cframe_current_frame: 0,
                frame_code: 32,
                frame_back: 24,
                frame_instr: if minor == 10 { 96 } else { 104 },
                frame_marker: 0,
                code_filename: 104,
                code_name: 112,
                code_qualname: None,
                code_firstlineno: 40,
                code_linetable: 120,
                code_firsttraceable: None,
                code_adaptive: None,
                ascii_data: before_312_strings.0,
                compact_data: before_312_strings.1,
            },
            11 => Layout {
                version: (3, 11),
                model: FrameModel::EntryFlag,
                runtime_interpreters_head: 40,
                interp_next: 0,
                interp_threads_head: 16,
                tstate_next: 8,
                tstate_thread_id: 152,
                tstate_native_thread_id: Some(160),
                tstate_frame: 56,
                cframe_current_frame: 8,
                frame_code: 32,
                frame_back: 48,
                frame_instr: 56,
                frame_marker: 68,
                code_filename: 112,
                code_name: 120,
                code_qualname: Some(128),
                code_firstlineno: 72,
                code_linetable: 136,
                code_firsttraceable: Some(168),
                code_adaptive: Some(184),
                ascii_data: before_312_strings.0,
                compact_data: before_312_strings.1,
            },
            12 => Layout {
                version: (3, 12),
                model: FrameModel::EntryShim {
                    in_thread_state: false,
                },
                runtime_interpreters_head: 40,
                interp_next: 0,
                interp_threads_head: 72,
                tstate_next: 8,
                tstate_thread_id: 136,
                tstate_native_thread_id: Some(144),
                tstate_frame: 56,
                cframe_current_frame: 0,
                frame_code: 0,
                frame_back: 8,
                frame_instr: 56,
                frame_marker: 70,
                code_filename: 112,
                code_name: 120,
                code_qualname: Some(128),
                code_firstlineno: 68,
                code_linetable: 136,
                code_firsttraceable: Some(176),
                code_adaptive: Some(192),
                ascii_data: 40,
                compact_data: 56,
            },
            _ => return None,
        };
        Some(l)
    }

    /// The layout a 3.13 runtime publishes in its `_Py_DebugOffsets`
    /// (`bytes`: the start of `_PyRuntime`, at least [`DEBUG_OFFSETS_LEN`]
    /// bytes; `runtime_size`: the `_PyRuntime` symbol's size). `None` when
    /// the cookie is missing, the version is not 3.13 (later versions may
    /// order the fields otherwise), or the values disagree with themselves.
    pub fn from_debug_offsets(bytes: &[u8], runtime_size: u64) -> Option<Layout> {
        if bytes.get(..8)? != b"xdebugpy" {
            return None;
        }
        let field = |i: usize| -> Option<u64> {
            let b = bytes.get(i..i + 8)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let version = field(8)?;
        if version >> 16 != 0x030d || field(16)? != 0 {
            // Another version, or a free-threaded build (other layouts).
            return None;
        }
        let code_size = field(272)?;
        let adaptive = field(344)?;
        // Checks: the runtime's size is the symbol's, and the bytecode
        // follows the code object's fixed part.
        if field(24)? != runtime_size || adaptive + 8 != code_size || field(224)? != 80 {
            return None;
        }
        Some(Layout {
            version: (3, 13),
            model: FrameModel::EntryShim {
                in_thread_state: true,
            },
            runtime_interpreters_head: field(40)?,
            interp_next: field(64)?,
            interp_threads_head: field(72)?,
            tstate_next: field(168)?,
            tstate_thread_id: field(192)?,
            tstate_native_thread_id: Some(field(200)?),
            tstate_frame: field(184)?,
            cframe_current_frame: 0,
            frame_code: field(240)?,
            frame_back: field(232)?,
            frame_instr: field(248)?,
            frame_marker: field(264)?,
            code_filename: field(280)?,
            code_name: field(288)?,
            code_qualname: Some(field(296)?),
            code_firstlineno: field(312)?,
            code_linetable: field(304)?,
            // Not published: 3.13.0's, checked against its DWARF.
            code_firsttraceable: Some(adaptive - 16),
            code_adaptive: Some(adaptive),
            ascii_data: field(560)?,
            // Not published either: sizeof(PyCompactUnicodeObject) since 3.12.
            compact_data: 56,
        })
    }
}

/// Bytes of 3.13's `_Py_DebugOffsets` this crate reads.
pub const DEBUG_OFFSETS_LEN: usize = 584;

/// The size of 3.13.0's `_PyRuntime`.
pub(crate) const RUNTIME_SIZE_3130: u64 = 283_320;

/// 3.13.0's `_Py_DebugOffsets`, as its processes publish them (read from
/// a live 3.13.0 and its DWARF): what the BPF walker is built with.
pub(crate) fn debug_offsets_3130() -> Vec<u8> {
    let mut b = vec![0u8; DEBUG_OFFSETS_LEN];
    b[..8].copy_from_slice(b"xdebugpy");
    let mut set = |at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    for (at, v) in [
        (8, 0x030d_00f0),
        (24, 283_320),
        (40, 632),
        (64, 7264),
        (72, 7344),
        (168, 8),
        (184, 72),
        (192, 152),
        (200, 160),
        (224, 80),
        (232, 8),
        (240, 0),
        (248, 56),
        (264, 70),
        (272, 208),
        (280, 112),
        (288, 120),
        (296, 128),
        (304, 136),
        (312, 68),
        (344, 200),
        (560, 40),
    ] {
        set(at, v);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_313_offsets_are_read_and_checked() {
        let b = debug_offsets_3130();
        let l = Layout::from_debug_offsets(&b, 283_320).expect("3.13 offsets");
        assert_eq!(l.runtime_interpreters_head, 632);
        assert_eq!(l.interp_threads_head, 7344);
        assert_eq!(l.tstate_frame, 72);
        assert_eq!(l.code_firsttraceable, Some(184));
        // A runtime of another size is another build: not trusted.
        assert!(Layout::from_debug_offsets(&b, 283_321).is_none());
        let mut other = b.clone();
        other[8..16].copy_from_slice(&0x030e_00f0u64.to_le_bytes());
        assert!(Layout::from_debug_offsets(&other, 283_320).is_none());
        let mut free_threaded = b.clone();
        free_threaded[16] = 1;
        assert!(Layout::from_debug_offsets(&free_threaded, 283_320).is_none());
        assert!(Layout::from_debug_offsets(b"garbage", 0).is_none());
    }

    #[test]
    fn tables_for_known_versions_only() {
        for minor in 8..=12 {
            assert!(Layout::for_version(3, minor).is_some(), "3.{minor}");
        }
        assert!(Layout::for_version(3, 7).is_none());
        assert!(Layout::for_version(3, 13).is_none());
        assert!(Layout::for_version(2, 7).is_none());
    }
}
