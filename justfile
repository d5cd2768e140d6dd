# Recipes mirror the README and CI one to one.

# Build everything and write demo.svg, a flamegraph of the bundled cpu-mix sample.
demo:
    cargo build --release && target/release/flamerec record -o demo.frec --svg demo.svg -- target/release/cpu-mix

# The whole test suite (records real workloads with perf_event_open).
test:
    cargo test --workspace

# The test suite three times in a row beside a CPU hog (one busy loop per CPU):
# what a busy CI machine does to sampling tests.
stress-tests:
    .ci/stress-tests

# Formatting and lints, as CI runs them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# The side-by-side benchmark against perf, inferno and samply; writes bench/RESULTS.md
# (`just bench --quick` for a short development run).
bench *ARGS:
    bench/run {{ARGS}}

# What CI runs.
ci: lint test
