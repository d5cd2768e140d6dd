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
    /// 3.14+: the frame's executable is a tagged reference (`_PyStackRef`):
    /// its low two bits are flags, not address.
    pub tagged_code: bool,
    /// 3.15+: each thread's chain ends in a base frame the thread state
    /// holds (owned like an eval-loop call's shim, no call of its own).
    pub base_frame: bool,
}

impl Layout {
    /// The code object a frame's `executable` word points to.
    pub fn code_of(&self, executable: u64) -> u64 {
        if self.tagged_code {
            executable & !3
        } else {
            executable
        }
    }
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
        match (major, minor) {
            (3, 8..=10) => Some(up_to_310(minor)),
            (3, 11) => Some(V311),
            (3, 12) => Some(V312),
            _ => None,
        }
    }

    /// The layout a 3.13, 3.14 or 3.15 runtime publishes in its
    /// `_Py_DebugOffsets` (`bytes`: the start of `_PyRuntime`, at least
    /// [`DEBUG_OFFSETS_LEN`] bytes; `runtime_size`: the `_PyRuntime`
    /// symbol's size). `None` when the cookie is missing, the version is not
    /// one whose field order is known here (each minor version moves
    /// fields: see [`Positions`]), the build is free-threaded, or the values
    /// disagree with themselves or with what is known of the version.
    pub fn from_debug_offsets(bytes: &[u8], runtime_size: u64) -> Option<Layout> {
        if bytes.get(..8)? != b"xdebugpy" {
            return None;
        }
        let field = |i: usize| -> Option<u64> {
            let b = bytes.get(i..i.checked_add(8)?)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let version = field(8)?;
        let minor = u8::try_from((version >> 16) & 0xff).ok()?;
        let at = Positions::of(minor).filter(|_| version >> 24 == 3)?;
        if field(16)? != 0 {
            // A free-threaded build (other layouts).
            return None;
        }
        let code_size = field(at.code_size)?;
        let adaptive = field(at.code_adaptive)?;
        // Checks: the runtime's size is the symbol's, the bytecode follows
        // the code object's fixed part, the frame is as large as known.
        if field(24)? != runtime_size
            || adaptive.checked_add(8)? != code_size
            || field(at.frame_size)? != at.expected_frame_size
        {
            return None;
        }
        // Offsets into one object each: a value past a few KiB is not one.
        let small = |i: usize| field(i).filter(|&v| v < 1 << 16);
        Some(Layout {
            version: (3, minor),
            model: FrameModel::EntryShim {
                in_thread_state: true,
            },
            runtime_interpreters_head: field(40).filter(|&v| v < runtime_size)?,
            interp_next: small(64)?,
            interp_threads_head: small(72)?,
            tstate_next: small(at.tstate_next)?,
            tstate_thread_id: small(at.tstate_thread_id)?,
            tstate_native_thread_id: Some(small(at.tstate_thread_id + 8)?),
            tstate_frame: small(at.tstate_current_frame)?,
            cframe_current_frame: 0,
            frame_code: small(at.frame_size + 16)?,
            frame_back: small(at.frame_size + 8)?,
            frame_instr: small(at.frame_size + 24)?,
            frame_marker: small(at.frame_owner)?,
            code_filename: small(at.code_size + 8)?,
            code_name: small(at.code_size + 16)?,
            code_qualname: Some(small(at.code_size + 24)?),
            code_firstlineno: small(at.code_size + 40)?,
            code_linetable: small(at.code_size + 32)?,
            // Not published: 16 bytes before the bytecode since 3.13
            // (checked against 3.13.0's DWARF and 3.14's and 3.15's headers).
            code_firsttraceable: Some(adaptive.checked_sub(16)?),
            code_adaptive: Some(adaptive),
            ascii_data: small(at.ascii_size)?,
            // Not published before 3.15: sizeof(PyCompactUnicodeObject)
            // since 3.12.
            compact_data: 56,
            tagged_code: minor >= 14,
            base_frame: minor >= 15,
        })
    }
}

/// Where a minor version's `_Py_DebugOffsets` keeps the fields this crate
/// reads (byte positions in the struct; the frame's and code object's
/// fields follow their `size` in the order CPython lists them: `previous`,
/// `executable`, `instr_ptr`; `filename`, `name`, `qualname`, `linetable`,
/// `firstlineno`). Read from each version's header and checked against live
/// processes of 3.13.0, 3.13.18, 3.14.10 and 3.15.2.
#[derive(Debug, Clone, Copy)]
struct Positions {
    tstate_next: usize,
    tstate_current_frame: usize,
    /// `thread_id`; `native_thread_id` follows.
    tstate_thread_id: usize,
    frame_size: usize,
    expected_frame_size: u64,
    frame_owner: usize,
    code_size: usize,
    code_adaptive: usize,
    ascii_size: usize,
}

impl Positions {
    fn of(minor: u8) -> Option<Positions> {
        Some(match minor {
            13 => Positions {
                tstate_next: 168,
                tstate_current_frame: 184,
                tstate_thread_id: 192,
                frame_size: 224,
                expected_frame_size: 80,
                frame_owner: 264,
                code_size: 272,
                code_adaptive: 344,
                ascii_size: 560,
            },
            // 3.14 adds `threads_main` to the interpreter's fields.
            14 => Positions {
                tstate_next: 192,
                tstate_current_frame: 208,
                tstate_thread_id: 216,
                frame_size: 248,
                expected_frame_size: 88,
                frame_owner: 288,
                code_size: 312,
                code_adaptive: 384,
                ascii_size: 640,
            },
            // 3.15 adds more thread-state fields and `err_stackitem`.
            15 => Positions {
                tstate_next: 192,
                tstate_current_frame: 208,
                tstate_thread_id: 240,
                frame_size: 312,
                expected_frame_size: 88,
                frame_owner: 352,
                code_size: 376,
                code_adaptive: 448,
                ascii_size: 736,
            },
            _ => return None,
        })
    }
}

/// Bytes of `_Py_DebugOffsets` this crate reads (3.15's whole struct; the
/// runtime that starts with it is far larger).
pub const DEBUG_OFFSETS_LEN: usize = 888;

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

/// Where the string data of a str object starts before 3.12: ASCII
/// (compact ASCII) and compact objects.
const BEFORE_312_STRINGS: (u64, u64) = (48, 72);

/// CPython 3.8 to 3.10: frames are objects.
fn up_to_310(minor: u8) -> Layout {
    Layout {
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
        ascii_data: BEFORE_312_STRINGS.0,
        compact_data: BEFORE_312_STRINGS.1,
        tagged_code: false,
        base_frame: false,
    }
}

/// CPython 3.11: interpreter frames, entry frames flagged.
const V311: Layout = Layout {
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
    ascii_data: BEFORE_312_STRINGS.0,
    compact_data: BEFORE_312_STRINGS.1,
    tagged_code: false,
    base_frame: false,
};

/// CPython 3.12: interpreter frames, entry frames behind a shim.
const V312: Layout = Layout {
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
    tagged_code: false,
    base_frame: false,
};

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

    /// 3.14.10's and 3.15.2's `_Py_DebugOffsets` as Debian sid's
    /// processes publish them (the words read: position, value).
    fn published(version: u64, words: &[(usize, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; DEBUG_OFFSETS_LEN];
        b[..8].copy_from_slice(b"xdebugpy");
        b[8..16].copy_from_slice(&version.to_le_bytes());
        for &(at, v) in words {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn the_314_and_315_offsets_are_read_where_each_version_keeps_them() {
        let v314 = published(
            0x030e_0af0,
            &[
                (24, 316_616),
                (40, 808),
                (64, 7272),
                (72, 7344),
                (192, 8),
                (208, 72),
                (216, 152),
                (224, 160),
                (248, 88),
                (256, 8),
                (264, 0),
                (272, 56),
                (288, 74),
                (312, 216),
                (320, 112),
                (328, 120),
                (336, 128),
                (344, 136),
                (352, 68),
                (384, 208),
                (640, 40),
            ],
        );
        let l = Layout::from_debug_offsets(&v314, 316_616).expect("3.14 offsets");
        assert_eq!(l.version, (3, 14));
        assert_eq!(
            (l.runtime_interpreters_head, l.interp_threads_head),
            (808, 7344)
        );
        assert_eq!((l.tstate_frame, l.tstate_native_thread_id), (72, Some(160)));
        assert_eq!((l.frame_back, l.frame_instr, l.frame_marker), (8, 56, 74));
        assert_eq!(
            (l.code_filename, l.code_qualname, l.code_firstlineno),
            (112, Some(128), 68)
        );
        assert_eq!(
            (l.code_adaptive, l.code_firsttraceable),
            (Some(208), Some(192))
        );
        assert!(l.tagged_code && !l.base_frame);
        assert_eq!(l.code_of(0xb52bb1), 0xb52bb0);
        let v315 = published(
            0x030f_02f0,
            &[
                (24, 346_568),
                (40, 936),
                (64, 7264),
                (72, 7336),
                (192, 8),
                (208, 72),
                (240, 176),
                (248, 184),
                (312, 88),
                (320, 8),
                (328, 0),
                (336, 56),
                (352, 74),
                (376, 216),
                (384, 112),
                (392, 120),
                (400, 128),
                (408, 136),
                (416, 68),
                (448, 208),
                (736, 40),
            ],
        );
        let l = Layout::from_debug_offsets(&v315, 346_568).expect("3.15 offsets");
        assert_eq!(l.version, (3, 15));
        assert_eq!(
            (l.tstate_thread_id, l.tstate_native_thread_id),
            (176, Some(184))
        );
        assert_eq!(l.runtime_interpreters_head, 936);
        assert!(l.tagged_code && l.base_frame);
        // 3.15's image read with 3.14's positions would disagree with
        // itself: a version's positions are its own.
        let mut as_314 = v315.clone();
        as_314[8..16].copy_from_slice(&0x030e_0af0u64.to_le_bytes());
        assert!(Layout::from_debug_offsets(&as_314, 346_568).is_none());
        // A torn offset (past any object) is refused.
        let mut torn = v314.clone();
        torn[320..328].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Layout::from_debug_offsets(&torn, 316_616).is_none());
        let mut v316 = v315;
        v316[8..16].copy_from_slice(&0x0310_00a0u64.to_le_bytes());
        assert!(
            Layout::from_debug_offsets(&v316, 346_568).is_none(),
            "3.16: unknown order"
        );
    }

    /// Each table is its version's, and holds what the BPF walk needs: the
    /// frame's fields within the bytes it reads of a frame, and the code
    /// object's file name and name close enough to be read in one go for
    /// the frame's identity.
    #[test]
    fn tables_for_known_versions_only_each_fit_for_the_walk() {
        let frame_read = crate::bpf::FRAME_READ as u64;
        for minor in 8..=12 {
            let l = Layout::for_version(3, minor).expect("a table");
            assert_eq!(l.version, (3, minor));
            for field in [l.frame_code, l.frame_back, l.frame_instr] {
                assert!(field + 8 <= frame_read, "3.{minor}: {field}");
            }
            assert!(
                l.frame_marker + 2 <= frame_read,
                "3.{minor}: is_entry, owner"
            );
            let name_at = l.code_qualname.unwrap_or(l.code_name);
            let span = (name_at + 8).saturating_sub(l.code_filename);
            assert!((16..=32).contains(&span), "3.{minor}: {span}");
            assert_ne!(l.frame_code, l.frame_back, "3.{minor}");
        }
        assert!(Layout::for_version(3, 7).is_none());
        assert!(Layout::for_version(3, 13).is_none());
        assert!(Layout::for_version(2, 7).is_none());
    }
}
