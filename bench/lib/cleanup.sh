# Sourced by bench/run: what must be undone on every way out of the script — normal exit,
# a failed command under `set -e`, Ctrl-C (INT), TERM. bash runs a trap once the foreground
# command has finished, so an interrupt during a run cleans up as soon as that run exits.
#
# samply refuses to record while kernel.perf_event_paranoid > 1, even as
# root: `paranoid_lower` sets it to 1 for one samply run and `paranoid_restore` puts the old
# value back right after; the trap restores it, so the machine is never left with the setting lowered.
# BG_PID is a workload running in the background (killed) and SCRATCH_DIR a directory
# outside OUT (removed).

PARANOID_FILE=/proc/sys/kernel/perf_event_paranoid
PARANOID_OLD="" # the value to put back; empty while nothing is lowered

paranoid_restore() {
    [ -n "$PARANOID_OLD" ] || return 0
    if echo "$PARANOID_OLD" > "$PARANOID_FILE" 2> /dev/null; then
        PARANOID_OLD=""
    else
        echo "bench: error: could not restore kernel.perf_event_paranoid to $PARANOID_OLD; run: sysctl kernel.perf_event_paranoid=$PARANOID_OLD" >&2
    fi
}

paranoid_lower() { # → 0 when samply can record now (the setting is ≤ 1), else 1
    local now
    now=$(cat "$PARANOID_FILE" 2> /dev/null) || return 1
    [ "$now" -gt 1 ] || return 0
    [ "$IS_ROOT" = 1 ] || return 1
    PARANOID_OLD=$now # set first: a signal between the two lines still restores
    echo 1 > "$PARANOID_FILE" 2> /dev/null || { PARANOID_OLD=""; return 1; }
}

BG_PID=""
SCRATCH_DIR=""
bench_cleanup() {
    paranoid_restore
    [ -z "$BG_PID" ] || kill "$BG_PID" 2> /dev/null || true
    [ -z "$SCRATCH_DIR" ] || rm -rf "$SCRATCH_DIR"
}
trap 'bench_cleanup' EXIT
trap 'bench_cleanup; trap - INT; kill -INT $$' INT
trap 'bench_cleanup; trap - TERM; kill -TERM $$' TERM
