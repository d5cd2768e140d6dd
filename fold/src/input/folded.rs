//! Reading folded text (`frame;frame;...;leaf COUNT` per line), for every
//! command that takes it (fold, diff, view, info, the exports).
//!
//! One stack per line: the count is the last whitespace-separated token and
//! a whole number; frames may contain spaces. Blank lines and lines starting
//! with `# ` (inferno's comment syntax) are skipped; a line may end in
//! `\r\n`; repeated stacks add up; counts of 0 are dropped. Any other line
//! (no count, a count that is not a whole number, no frames, bytes that are
//! not UTF-8) is an error naming the input and line number: this module must
//! not guess, and a CI gate must not pass on a half-read profile. Memory
//! holds the distinct stacks and one line.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;

use crate::FoldError;

/// Longest piece of a bad line quoted in an error, in characters.
const QUOTE_CHARS: usize = 40;
/// Longest line read, in bytes: a stack of 10,000 frames of 1,000
/// characters each fits, a binary file without a line break does not.
pub const MAX_LINE: usize = 16 << 20;

/// Distinct stacks with their summed counts, sorted by stack; zero counts dropped.
pub fn parse<R: BufRead>(mut input: R, path: &Path) -> Result<Vec<(String, u64)>, FoldError> {
    let mut stacks: HashMap<String, u64> = HashMap::new();
    let mut buf = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        // At most one byte past the longest line: binary input without a
        // line break must not be read whole into one line.
        let n = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|source| FoldError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        let bad = |reason: String| FoldError::Folded {
            path: path.to_path_buf(),
            line: number,
            reason,
        };
        if n > MAX_LINE {
            return Err(bad(format!(
                "longer than {} MiB: neither a .frec recording nor folded stacks",
                MAX_LINE >> 20
            )));
        }
        let text = std::str::from_utf8(&buf).map_err(|_| {
            bad("not UTF-8 text: neither a .frec recording nor folded stacks".to_string())
        })?;
        let Some((stack, count)) = parse_line(text).map_err(bad)? else {
            continue;
        };
        if count == 0 {
            continue;
        }
        let c = stacks.entry(stack.to_string()).or_insert(0);
        *c = c.saturating_add(count);
    }
    let mut stacks: Vec<(String, u64)> = stacks.into_iter().collect();
    stacks.sort_unstable();
    Ok(stacks)
}

/// The stacks of a unit test's folded text, read by [`parse`] as any input
/// is; a line it rejects fails the test. (The tests outside this crate
/// have the same in `flamerec_testkit::folded`.)
#[cfg(test)]
#[track_caller]
pub(crate) fn test_stacks(text: &str) -> Vec<(String, u64)> {
    parse(text.as_bytes(), Path::new("test.folded")).unwrap_or_else(|e| panic!("{e}"))
}

/// `Ok(None)` for a blank or comment line, else the stack and its count.
fn parse_line(line: &str) -> Result<Option<(&str, u64)>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with("# ") || line == "#" {
        return Ok(None);
    }
    let Some((ws, c)) = line.char_indices().rev().find(|(_, c)| c.is_whitespace()) else {
        return Err(format!(
            "expected `frame;...;leaf COUNT`, found no count in `{}`",
            quote(line)
        ));
    };
    let token = &line[ws + c.len_utf8()..];
    let count = token.parse::<u64>().map_err(|_| {
        format!(
            "expected `frame;...;leaf COUNT`: `{}` is not a whole number of samples",
            quote(token)
        )
    })?;
    let stack = line[..ws].trim_end();
    if stack.is_empty() {
        return Err("no frames before the count".to_string());
    }
    Ok(Some((stack, count)))
}

/// The start of `s`, short enough for a one-line error.
fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_CHARS) {
        Some((end, _)) => format!("{}...", &s[..end]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Vec<(String, u64)>, FoldError> {
        parse(s.as_bytes(), Path::new("x.folded"))
    }

    #[test]
    fn sums_repeated_stacks_and_skips_blank_and_comment_lines() {
        let got = parse_str(
            "# comment line\n\nproc;main;b 2\r\nproc;main;a 3\n  proc;main;a 4  \nproc;main 0\n#\n",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("proc;main;a".to_string(), 7),
                ("proc;main;b".to_string(), 2)
            ]
        );
    }

    #[test]
    fn frames_may_contain_spaces_and_tabs_may_separate_the_count() {
        let got = parse_str("my proc;<Vec<u8> as Drop>::drop;operator new\t12\n").unwrap();
        assert_eq!(
            got,
            vec![(
                "my proc;<Vec<u8> as Drop>::drop;operator new".to_string(),
                12
            )]
        );
    }

    #[test]
    fn a_hash_without_space_starts_a_frame_not_a_comment() {
        let got = parse_str("#proc;main 1\n").unwrap();
        assert_eq!(got, vec![("#proc;main".to_string(), 1)]);
    }

    #[test]
    fn bad_lines_are_errors_with_their_line_number() {
        for (text, line, needle) in [
            ("a;b 1\nno_count_here\n", 2, "found no count"),
            ("a;b 1\n\na;b x12\n", 3, "`x12` is not a whole number"),
            ("a;b 1.5\n", 1, "`1.5` is not a whole number"),
            ("a;b -3\n", 1, "`-3` is not a whole number"),
            ("a;b 99999999999999999999999\n", 1, "not a whole number"),
            ("   7\n", 1, "found no count"),
            ("a;b 1\n\u{0}\u{ff}", 2, "found no count"),
        ] {
            let e = parse_str(text).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("x.folded:{line}: ")) && e.contains(needle),
                "{text:?}: {e}"
            );
        }
        let e = parse(&b"a;b 1\n\xff\xfe 2\n"[..], Path::new("x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x:2: not UTF-8 text: neither a .frec recording nor folded stacks"
        );
    }

    #[test]
    fn a_line_longer_than_the_limit_is_an_error_not_an_allocation() {
        let mut text = b"a;b 1\n".to_vec();
        text.resize(text.len() + MAX_LINE + 10, b'x');
        let e = parse(&text[..], Path::new("x")).unwrap_err().to_string();
        assert_eq!(
            e,
            "x:2: longer than 16 MiB: neither a .frec recording nor folded stacks"
        );
        let mut fits = vec![b'y'; MAX_LINE - 3];
        fits.extend(b" 1\n");
        assert_eq!(parse(&fits[..], Path::new("x")).unwrap()[0].1, 1);
    }

    #[test]
    fn long_bad_tokens_are_shortened() {
        let text = format!("a;b {}\n", "z".repeat(500));
        let e = parse_str(&text).unwrap_err().to_string();
        assert!(e.len() < 150, "{e}");
        assert!(e.contains("..."), "{e}");
    }

    #[test]
    fn counts_saturate_instead_of_overflowing() {
        let text = format!("a;b {}\na;b {}\n", u64::MAX, u64::MAX);
        assert_eq!(
            parse_str(&text).unwrap(),
            vec![("a;b".to_string(), u64::MAX)]
        );
    }
}
