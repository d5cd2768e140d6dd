//! How CPython's code is spelled in a recording: the module Python frames
//! belong to, and the prefix CPython gives its perf trampolines' names. A
//! leaf: the Python reader (`python`) and the JIT follower (`jit`) both
//! use them, and neither imports the other.

/// The module Python frames belong to (named by the Python reader, not by
/// a file, map or dump).
pub(crate) const MODULE: &str = "[python]";

/// How CPython's `-X perf` and `-X perf_jit` begin the name of a Python
/// function's trampoline, in maps and dumps: `py::qualname:file`.
pub(crate) const PY_PREFIX: &str = "py::";
