# Sourced by bench/run. `flamerec agent` as a fleet runs it (issue 46): 19 Hz system-wide, 15 s
# windows, OTLP to the OpenTelemetry Collector's receiver (tests/otelcol/build, from its Go
# modules) on loopback, beside a `cargo build` (repeated), a Python program and a churn of
# 1,000 short processes a minute — every core busy. Figures from the agent's own line per window
# (its CPU over the window, RSS, bytes) and its final line (the longest delay from a window's end
# to the collector's 200). The first window (start-up) and the last (cut at the signal) are left
# out of the steady figures; the peak RSS is the whole run's.

AG=$OUT/agent
rm -rf "$AG"
mkdir -p "$AG"
AGENT_SECS=$([ "$QUICK" = 1 ] && echo 50 || echo 240)
AGENT_NA=""
if ! "$ROOT/tests/otelcol/build" "$AG/otelcol" > "$AG/build.log" 2>&1; then
    AGENT_NA="the collector's receiver did not build: $(tail -n1 "$AG/build.log")"
fi
if [ -z "$AGENT_NA" ]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$AG/otelcol" -http "127.0.0.1:$port" -out "$AG/received.jsonl" > "$AG/otelcol.out" 2>&1 &
    col=$!
    busy=()
    # A cargo build again and again (its target removed each time), when the bench has the crate.
    if [ -z "${CARGO_NA:-}" ] && [ -n "${CRATE:-}" ]; then
        (while :; do rm -rf "$AG/crate-target"
            env -u CARGO_BUILD_JOBS -u RUSTFLAGS CARGO_TARGET_DIR="$AG/crate-target" \
                cargo build --release --offline --quiet --manifest-path "$CRATE/Cargo.toml" > /dev/null 2>&1
        done) &
        busy+=($!)
    fi
    python3 -c 'import time
def agent_bench_spin():
    while True:
        sum(i * i for i in range(1000))
agent_bench_spin()' &
    busy+=($!)
    # 1,000 short processes a minute.
    (while :; do for _ in $(seq 17); do /bin/true; done; sleep 1; done) &
    busy+=($!)
    "$TARGET/release/flamerec" agent --otlp "http://127.0.0.1:$port" --spool "$AG/spool" 2> "$AG/agent.log" &
    agent=$!
    sleep "$AGENT_SECS"
    kill -TERM "$agent"
    wait "$agent" || true
    for p in "${busy[@]}"; do pkill -P "$p" 2> /dev/null || true; kill "$p" 2> /dev/null || true; done
    kill "$col" 2> /dev/null || true
    wait 2> /dev/null || true
fi

agent_windows() { grep '^flamerec: window ' "$AG/agent.log" | sed '1d;$d'; }
agent_cpu=$(agent_windows | sed -n 's/.*recorder \([0-9.]*\)% of a core.*/\1/p' | median)
agent_rss=$(agent_windows | sed -n 's/.*RSS \([0-9]*\) MiB.*/\1/p' | median)
agent_peak=$(grep '^flamerec: window ' "$AG/agent.log" | sed -n 's/.*(peak \([0-9]*\)).*/\1/p' | sort -g | tail -n1)
agent_bytes=$(agent_windows | sed -n 's/.*processes, \([0-9]*\) bytes.*/\1/p' | median)
agent_n=$(grep -c '^flamerec: window ' "$AG/agent.log" 2> /dev/null || echo 0)
agent_delay=$(sed -n 's/^flamerec: otlp: .*at most \([0-9.]*\) s after their window.*/\1/p' "$AG/agent.log")
agent_dropped=$(sed -n 's/^flamerec: otlp: .*), \([0-9]*\) dropped.*/\1/p' "$AG/agent.log")
agent_label="flamerec agent, 19 Hz system-wide, 15 s windows, OTLP to the Collector's receiver, beside a cargo build, a Python loop and 1,000 short processes a minute ($agent_n windows in ${AGENT_SECS} s)"
if [ -n "$AGENT_NA" ]; then
    row "$agent_label" — — — — "n/a" "n/a: $AGENT_NA" "—" "n/a"
else
    row "recorder CPU per window (median), $agent_label" — — — — "$(fmt %.2f "$agent_cpu")% of a core" "—" "≤ 1% of a core" "$(holds "$agent_cpu" "<=" 1)"
    row "RSS steady (median of windows) and peak, $agent_label" — — — — "$agent_rss MiB, peak $agent_peak MiB" "—" "≤ 100 MiB, ≤ 150 MiB" "$(holds "$agent_rss" "<=" 100), $(holds "$agent_peak" "<=" 150)"
    row "bytes per window sent (median), $agent_label" — — — — "$agent_bytes B" "—" "as measured" "—"
    row "longest delay from a window's end to the collector's answer, $agent_label ($agent_dropped dropped)" — — — — "$agent_delay s" "—" "≤ 2 s" "$(holds "$agent_delay" "<=" 2)"
fi

# The OpenTelemetry eBPF profiler side by side (issue 46), when its Go module can be fetched here.
EBPF_NA=""
if ! command -v go > /dev/null; then
    EBPF_NA="no Go toolchain"
elif ! (cd "$AG" && GOFLAGS=-mod=mod go mod download -json go.opentelemetry.io/ebpf-profiler@latest) > "$AG/ebpf-profiler.txt" 2>&1; then
    EBPF_NA="its module go.opentelemetry.io/ebpf-profiler cannot be fetched here: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("Error", "")[:200])' "$AG/ebpf-profiler.txt" 2> /dev/null || tail -n1 "$AG/ebpf-profiler.txt")"
else
    EBPF_NA="its module is fetched, but this bench does not build and drive it yet"
fi
row "the OpenTelemetry eBPF profiler beside the same load" — — — — "n/a" "n/a: $EBPF_NA" "—" "n/a"
