# Sourced by bench/run. Lost samples at default settings (issue 16; DESIGN.md: 0, and ≤ 0.1%
# at 4999 Hz dwarf with every core busy), from `flamerec info --json`: lost / (samples + lost)
# summed over the runs.
#   a) unprivileged: `runuser -u nobody` records cpu-mix at 999 Hz, default mode, with copies
#      of flamerec and cpu-mix in a directory nobody can read and run (OUT may not be);
#   b) root: the threads sample at 4999 Hz dwarf from its start (three threads, both cores).

lost_of() { # FREC → "lost samples" on one line
    "$FLAMEREC" info --json "$1" | "$PY" -c '
import json, sys
i = json.load(sys.stdin)
print(i["lost_samples"], i["samples"])'
}
lost_cell() { # FILE of "lost samples" lines → LOST_CELL "L of N (P%)" and LOST_PCT, summed
    local l n
    read -r l n < <(awk '{l += $1; n += $2} END {print l + 0, n + 0}' "$1")
    LOST_PCT=$(calc "100 * $l / ($n + $l)")
    LOST_CELL="$l of $((n + l)) ($(fmt %.3f%% "$LOST_PCT"))"
}

# a) unprivileged
: > "$OUT/lost-nobody.txt"
NOBODY_NA=""
if [ $IS_ROOT != 1 ]; then
    NOBODY_NA="needs root to switch to the user nobody"
elif ! command -v runuser > /dev/null; then
    NOBODY_NA="runuser (util-linux) is missing"
else
    SCRATCH_DIR=$(mktemp -d /tmp/flamerec-bench-nobody.XXXXXX)
    cp "$FLAMEREC" "$CPU_MIX" "$SCRATCH_DIR/"
    chown nobody "$SCRATCH_DIR" && chmod 755 "$SCRATCH_DIR"
    log "lost samples: cpu-mix at $FREQ Hz as nobody"
    for run in $(seq 1 "$RUNS"); do
        runuser -u nobody -- env HOME="$SCRATCH_DIR" "$SCRATCH_DIR/flamerec" record -q -F "$FREQ" -o "$SCRATCH_DIR/mix.frec" -- \
            "$SCRATCH_DIR/cpu-mix" --units "$MIX_UNITS" > /dev/null 2> "$OUT/rec/nobody.err" ||
            { NOBODY_NA="flamerec record as nobody failed: $(head -n1 "$OUT/rec/nobody.err")"; break; }
        lost_of "$SCRATCH_DIR/mix.frec" >> "$OUT/lost-nobody.txt"
    done
    rm -rf "$SCRATCH_DIR"; SCRATCH_DIR=""
fi
if [ -n "$NOBODY_NA" ]; then
    row "lost samples, unprivileged (user nobody), cpu-mix, $FREQ Hz, defaults" — — — — "n/a: $NOBODY_NA" — "0" n/a
else
    lost_cell "$OUT/lost-nobody.txt"
    row "lost samples / (samples + lost), unprivileged (user nobody, kernel.perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid)), cpu-mix, $FREQ Hz, defaults (dwarf), all runs" \
        — — — — "$LOST_CELL" "$LOST_CELL" "0" "$(holds "$LOST_PCT" "<=" 0)"
fi

# b) root, 4999 Hz dwarf from the start
THREADS_BIN=$TARGET/release/threads
if [ -n "$FLAMEREC_DWARF_NA" ] || [ ! -x "$THREADS_BIN" ]; then
    row "lost samples, threads sample at $HF_FREQ Hz dwarf from its start" — — — — n/a "n/a: ${FLAMEREC_DWARF_NA:-$THREADS_BIN was not built}" "≤ 0.1%" n/a
else
    THREADS_UNITS=$(calibrate "$CPU_S" 100000 "$THREADS_BIN" --units)
    : > "$OUT/lost-threads.txt"
    : > "$OUT/lost-threads.log"
    log "lost samples: threads --units $THREADS_UNITS at $HF_FREQ Hz dwarf"
    for run in $(seq 1 "$RUNS"); do
        "$FLAMEREC" record -q -F "$HF_FREQ" -g dwarf -o "$OUT/rec/lost-threads.frec" -- \
            "$THREADS_BIN" --units "$THREADS_UNITS" > /dev/null 2> "$OUT/rec/lost-threads.err" ||
            die "recording threads at $HF_FREQ Hz failed: $(tail -n3 "$OUT/rec/lost-threads.err")"
        lost_of "$OUT/rec/lost-threads.frec" >> "$OUT/lost-threads.txt"
        # Each run's summary (and warning: lost samples name their cause, and
        # whether ring readers took over), kept beside the counts.
        sed "s/^/run $run: /" "$OUT/rec/lost-threads.err" >> "$OUT/lost-threads.log"
    done
    lost_cell "$OUT/lost-threads.txt"
    row "lost samples / (samples + lost), root, \`threads --units $THREADS_UNITS\` (3 threads, every core busy) from its start, $HF_FREQ Hz dwarf, all runs" \
        — — — — "$LOST_CELL" "$LOST_CELL" "≤ 0.1%" "$(holds "$LOST_PCT" "<=" 0.1)"
fi
