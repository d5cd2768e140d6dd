//! The skip rule: a test that cannot run its real part fails with its
//! cause, unless the skip variable documented for it is set to `1`.

use std::fmt::Display;

/// Skips tests that need perf_event_open (or the `perf` tool).
pub const SKIP_PERF: &str = "FLAMEREC_SKIP_PERF_TESTS";
/// Skips tests that load BPF programs (root, or CAP_BPF and CAP_PERFMON).
pub const SKIP_BPF: &str = "FLAMEREC_SKIP_BPF_TESTS";
/// Skips the CPythons a test needs that are not installed (see
/// [`mod@crate::python`]).
pub const SKIP_PYTHON: &str = "FLAMEREC_SKIP_PYTHON_TESTS";
/// Skips tests that run node.
pub const SKIP_NODE: &str = "FLAMEREC_SKIP_NODE_TESTS";
/// Skips tests that run a JDK's `javac` and `java`.
pub const SKIP_JAVA: &str = "FLAMEREC_SKIP_JAVA_TESTS";
/// Skips the tests that boot kernels under qemu (`tests/vm.rs`).
pub const SKIP_VM: &str = "FLAMEREC_SKIP_VM_TESTS";
/// Skips the tests that start containers with podman and runc.
pub const SKIP_CONTAINER: &str = "FLAMEREC_SKIP_CONTAINER_TESTS";
/// Skips the tests that deliver to a built OpenTelemetry Collector.
pub const SKIP_COLLECTOR: &str = "FLAMEREC_SKIP_COLLECTOR_TESTS";

/// Whether the environment variable `var` is exactly `1`: the only value
/// that skips.
pub fn skipping(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "1")
}

/// The skip rule, for a test that cannot run its real part because of
/// `why`: with `var` set to `1`, says `skipped (VAR=1): why` on stderr and
/// returns (the caller then leaves out what it cannot do); otherwise fails
/// the test with `why` and how to skip it.
#[track_caller]
pub fn skip_or_fail(var: &str, why: impl Display) {
    if skipping(var) {
        eprintln!("skipped ({var}=1): {why}");
        return;
    }
    panic!("{why} (set {var}=1 to skip)");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Variables of these tests' own: nothing else reads them, so setting
    /// them changes nothing else running in this process (every reader and
    /// writer of the environment here is std's, which locks it).
    const SET: &str = "FLAMEREC_TESTKIT_SKIP_SET";
    const OTHER: &str = "FLAMEREC_TESTKIT_SKIP_OTHER";
    const UNSET: &str = "FLAMEREC_TESTKIT_SKIP_UNSET";

    #[test]
    fn only_1_skips() {
        std::env::set_var(SET, "1");
        std::env::set_var(OTHER, "yes");
        assert!(skipping(SET));
        assert!(!skipping(OTHER));
        assert!(!skipping(UNSET));
        // Returns: the caller leaves its part out.
        skip_or_fail(SET, "nothing to run here");
    }

    #[test]
    fn without_the_variable_the_test_fails_with_its_cause() {
        let failed = std::panic::catch_unwind(|| skip_or_fail(UNSET, "no frobnicator here"))
            .expect_err("a missing cause without the variable fails the test");
        let message = failed
            .downcast_ref::<String>()
            .expect("a formatted panic message");
        assert_eq!(
            message,
            "no frobnicator here (set FLAMEREC_TESTKIT_SKIP_UNSET=1 to skip)"
        );
    }

    #[test]
    fn a_value_other_than_1_does_not_skip() {
        std::env::set_var("FLAMEREC_TESTKIT_SKIP_TRUE", "true");
        let failed = std::panic::catch_unwind(|| {
            skip_or_fail("FLAMEREC_TESTKIT_SKIP_TRUE", "no frobnicator here")
        });
        assert!(failed.is_err());
    }
}
