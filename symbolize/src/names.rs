//! Frame and root names as they appear in folded text.
//!
//! Owns the rules that keep a folded line unambiguous for every consumer
//! (inferno, flamegraph.pl, our own diff): no `;` inside a frame, no line
//! breaks or other control characters, no leading or trailing blanks, and no
//! trailing ` NUMBER` that a reader would take for a (differential) count.
//! It must not decide *what* a frame is called, only how it is spelled.

use std::borrow::Cow;

/// Name used when nothing is known (thread without a comm, empty symbol).
pub const UNKNOWN: &str = "[unknown]";

/// Makes `name` safe to stand as one frame of a folded line.
pub fn sanitize(name: &str) -> String {
    sanitized(name).into_owned()
}

/// [`sanitize`] of a name already owned: kept as it is when it is safe.
pub fn sanitize_owned(name: String) -> String {
    if is_safe(&name) {
        name
    } else {
        rewrite(&name)
    }
}

/// [`sanitize`], without a copy when `name` is already safe (as nearly
/// every name is): one pass over its bytes.
pub fn sanitized(name: &str) -> Cow<'_, str> {
    if is_safe(name) {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(rewrite(name))
    }
}

/// Whether [`rewrite`] would return `name` unchanged: printable ASCII
/// without `;`, blanks at neither end, no count-like tail after a blank.
/// (Anything else takes the slow path, which decides exactly.)
fn is_safe(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    if first == b' ' || last == b' ' {
        return false;
    }
    if !bytes
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b';')
    {
        return false;
    }
    match name.rfind(' ') {
        Some(blank) => !is_count_like(&name[blank + 1..]),
        None => true,
    }
}

fn rewrite(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| match c {
            // `;` separates frames; `:` keeps paths like `<[u8; 4]>` readable.
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    let trimmed = out.trim();
    if trimmed.len() != out.len() {
        out = trimmed.to_string();
    }
    if out.is_empty() {
        return UNKNOWN.to_string();
    }
    // `foo 12` as a leaf would read as frame `foo` with count 12 (or, before
    // the real count, as a differential pair): glue the number to the name.
    if let Some((ws, c)) = out.char_indices().rev().find(|(_, c)| c.is_whitespace()) {
        let tail_start = ws + c.len_utf8();
        if is_count_like(&out[tail_start..]) {
            let run_start = out[..ws].trim_end().len();
            out.replace_range(run_start..tail_start, "_");
        }
    }
    out
}

/// What flamegraph.pl and inferno accept as a count: digits, optionally with
/// a fractional part.
fn is_count_like(s: &str) -> bool {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// Makes a name safe as the first frame of a line: inferno skips lines that
/// start with `# ` as comments.
pub fn sanitize_root(name: &str) -> String {
    let mut s = sanitize(name);
    if s.starts_with("# ") {
        s.replace_range(0..1, "_");
    }
    s
}

/// Last path component, as `perf` prints module names (`libc.so.6`).
/// Pseudo paths like `[kernel.kallsyms]` come back unchanged.
pub fn basename(path: &str) -> &str {
    if path.starts_with('[') {
        return path;
    }
    match path.rsplit('/').next() {
        Some(b) if !b.is_empty() => b,
        _ => path,
    }
}

/// The name of a frame that could not be symbolized: `module+0xOFFSET`.
pub fn unresolved(module: &str, offset: u64) -> String {
    // Spelled by hand: a fold of a frame-pointer recording through code
    // built without them names tens of thousands of garbage addresses so,
    // and `format!` was a third of that.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut v = offset;
    loop {
        at -= 1;
        digits[at] = HEX[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    let mut s = String::with_capacity(module.len() + 3 + digits.len() - at);
    s.push_str(module);
    s.push_str("+0x");
    s.extend(digits[at..].iter().map(|&d| char::from(d)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unresolved_names_spell_the_offset_in_hex() {
        assert_eq!(unresolved("[unknown]", 0), "[unknown]+0x0");
        assert_eq!(unresolved("libc.so.6", 0x1a2b), "libc.so.6+0x1a2b");
        assert_eq!(unresolved("m", u64::MAX), format!("m+0x{:x}", u64::MAX));
        assert_eq!(sanitize_owned("a;b".to_string()), sanitize("a;b"));
    }

    #[test]
    fn separators_and_controls_are_replaced() {
        assert_eq!(sanitize("<[u8; 4]>::fmt"), "<[u8: 4]>::fmt");
        assert_eq!(sanitize("a\nb\tc\r"), "a b c");
        assert_eq!(sanitize("  "), UNKNOWN);
        assert_eq!(sanitize(""), UNKNOWN);
    }

    #[test]
    fn trailing_numbers_cannot_pass_for_a_count() {
        assert_eq!(sanitize("worker 12"), "worker_12");
        assert_eq!(sanitize("worker  1.5"), "worker_1.5");
        assert_eq!(sanitize("foo(int) const"), "foo(int) const");
        assert_eq!(sanitize("v 1.2.3"), "v 1.2.3");
        assert_eq!(sanitize("x 12a"), "x 12a");
        assert_eq!(sanitize("12"), "12");
    }

    #[test]
    fn the_fast_path_changes_nothing_the_slow_path_would() {
        let parts = [
            "",
            " ",
            "  ",
            "a",
            "a b",
            "f 12",
            "f 1.5",
            "f 1.",
            "f .5",
            "f 1.2.3",
            "x;y",
            "\t",
            "\u{85}",
            "\u{a0}",
            "é",
            "<[u8; 4]>",
            "#",
            "12",
            "a  12",
            "a\t12",
            "z 0",
            "fn() const",
        ];
        for a in parts {
            for b in parts {
                let name = format!("{a}{b}");
                assert_eq!(sanitized(&name), rewrite(&name), "{name:?}");
                if matches!(sanitized(&name), Cow::Borrowed(_)) {
                    assert_eq!(rewrite(&name), name, "{name:?} is safe as it is");
                }
            }
        }
        assert!(matches!(sanitized("core::fmt::write"), Cow::Borrowed(_)));
    }

    #[test]
    fn root_never_looks_like_a_comment() {
        assert_eq!(sanitize_root("# x"), "_ x");
        assert_eq!(sanitize_root("#x"), "#x");
    }

    #[test]
    fn basenames() {
        assert_eq!(basename("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(basename("[kernel.kallsyms]"), "[kernel.kallsyms]");
        assert_eq!(basename("/weird/"), "/weird/");
        assert_eq!(basename("rel"), "rel");
    }
}
