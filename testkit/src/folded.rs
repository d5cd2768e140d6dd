//! Folded text (`frame;frame;...;leaf COUNT` lines) as the tests read it:
//! through the input layer's own parser
//! ([`flamerec_fold::input::folded::parse`]), so a test reads what
//! `flamerec fold`, `diff` and `view` read, and a line that parser rejects
//! fails the test.
//!
//! Like every input, the stacks come back distinct (repeated stacks added
//! up), sorted by stack, without zero counts; blank and `# ` comment lines
//! are left out.

use std::path::Path;

/// The stacks of folded `text`, each with its count, frames joined by
/// `;`. A line the parser rejects fails the test, naming it.
#[track_caller]
pub fn stacks(text: &str) -> Vec<(String, u64)> {
    flamerec_fold::input::folded::parse(text.as_bytes(), Path::new("folded text"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The stacks of folded `text` as their frames, root first, each with its
/// count (see [`stacks`]).
#[track_caller]
pub fn frames(text: &str) -> Vec<(Vec<String>, u64)> {
    stacks(text)
        .into_iter()
        .map(|(stack, count)| (stack.split(';').map(str::to_owned).collect(), count))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_summed_sorted_and_split_into_frames() {
        let text = "p;main;b 2\n# a comment\n\np;main;a 3\np;main;b 4\np;main 0\n";
        assert_eq!(
            stacks(text),
            [("p;main;a".to_string(), 3), ("p;main;b".to_string(), 6)]
        );
        let f = frames("my proc;operator new 7\n");
        assert_eq!(f, [(vec!["my proc".to_string(), "operator new".into()], 7)]);
    }

    #[test]
    #[should_panic(expected = "folded text:2: expected `frame;...;leaf COUNT`")]
    fn a_line_without_a_count_fails_naming_it() {
        stacks("p;main 1\np;main\n");
    }
}
