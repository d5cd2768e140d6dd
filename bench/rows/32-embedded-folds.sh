# Sourced by bench/run after 30-cold-fold.sh. Folds of embedded recordings — what every user
# folds: `flamerec fold --no-cache` (names from the file, no binary read) against `perf script |
# inferno-collapse-perf` of the same workload's perf recording, frame-pointer mode, on every
# workload the bench records (issue 23: ≥ 25× on each; DESIGN.md promises ≥ 10×). The dwarf
# recordings are left out: perf script of those is 5–50× slower still, so fp is the hard case.
# Files: the last run of each recorder on each workload above, json-re of 10-many-stacks.sh
# (python3 without frame pointers: thousands of distinct unresolved frames), the DWARF-rich fold
# loop of 30-cold-fold.sh and the cargo build.

embedded_runs() { # NAME RUNS PERF-FILE FLAMEREC-FILE → rows embedded-NAME-{perf,flamerec} in FOLD_TSV
    local name=$1 n=$2 run p f
    for run in $(seq 1 "$n"); do
        p=$(perf_pipeline "$3" "$OUT/mem")
        printf 'embedded-%s-perf\t%s\t%s\t%s\n' "$name" "$run" "$p" "$(cat "$OUT/mem")" >> "$FOLD_TSV"
        f=$(timed "$OUT/mem" "$FLAMEREC" fold --no-cache -o /dev/null "$4")
        printf 'embedded-%s-flamerec\t%s\t%s\t%s\n' "$name" "$run" "$f" "$(cat "$OUT/mem")" >> "$FOLD_TSV"
        log "run $run embedded fold of $name: perf script | inferno-collapse-perf $(fmt %.3f "$p") s, flamerec $(fmt %.4f "$f") s"
    done
}
embedded_row() { # NAME LABEL
    local p f r
    p=$(fold_col "embedded-$1-perf" 3) f=$(fold_col "embedded-$1-flamerec" 3)
    r=$(calc "$p / $f")
    row "fold time of an embedded recording → folded text vs \`perf script \\| inferno-collapse-perf\`, fp, $2" \
        "$(fmt %.3f "$p") s" — — "$(fmt %.4f "$f") s" — "$(fmt %.1f× "$r") faster" "≥ 25×" "$(holds "$r" ">=" 25)"
}

if [ -z "$(tool_na perf-fp)" ] && [ -z "$(tool_na flamerec-fp)" ]; then
    log "embedded folds: every workload's last fp recordings, $FOLD_RUNS runs each"
    EMBEDDED_NAMES=()
    for w in "${W_NAMES[@]}" json-re; do
        [ -f "$OUT/rec/$w.perf-fp.data" ] && [ -f "$OUT/rec/$w.flamerec-fp.frec" ] || continue
        embedded_runs "$w" "$FOLD_RUNS" "$OUT/rec/$w.perf-fp.data" "$OUT/rec/$w.flamerec-fp.frec"
        EMBEDDED_NAMES+=("$w")
    done
    if [ -n "${COLD_FILE[perf-fp]:-}" ] && [ -n "${COLD_FILE[flamerec-fp]:-}" ]; then
        embedded_runs dwarf-rich "$FOLD_RUNS" "${COLD_FILE[perf-fp]}" "${COLD_FILE[flamerec-fp]}"
    fi
    if [ -z "$CARGO_NA" ]; then
        # perf script of a cargo build takes most of a second: the recordings' number of runs.
        embedded_runs cargo-build "$RUNS" "$OUT/rec/cargo-build.perf-fp.data" "$OUT/rec/cargo-build.flamerec-fp.frec"
    fi
    for w in "${EMBEDDED_NAMES[@]}"; do
        embedded_row "$w" "$w ($(samples_of flamerec-fp "$OUT/rec/$w.flamerec-fp.frec") samples, $FREQ Hz)"
    done
    if [ -n "${COLD_FILE[flamerec-fp]:-}" ]; then
        embedded_row dwarf-rich "flamerec built with frame pointers folding in a loop (${COLD_SAMPLES[flamerec-fp]:-?} samples, $HF_FREQ Hz)"
    fi
    if [ -z "$CARGO_NA" ]; then
        embedded_row cargo-build "\`cargo build --release\` of $CRATE_NAME ($(samples_of flamerec-fp "$OUT/rec/cargo-build.flamerec-fp.frec") samples)"
    fi
else
    row "fold time of an embedded recording vs perf script of the same, every workload" n/a — — n/a — "n/a: $(tool_na perf-fp)$(tool_na flamerec-fp)" "≥ 25×" n/a
fi
