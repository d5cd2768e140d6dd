# Sourced by bench/run after 32-embedded-folds.sh. The same folds against a second perf: 7.2,
# what current distributions ship (issue 23), built from Debian sid's linux-source package by
# bench/perf7 (about a minute, once; cached in target/bench/perf7). Its `perf script` reads the
# same perf.data files as perf 6.1's rows above, and by default adds inlined frames to
# frame-pointer callchains where a binary has DWARF — as flamerec's folds do — so the DWARF-rich
# rows compare like with like. (perf 7.2 looks caller frames' inlines up at the return address,
# not the call: the frames it adds belong to the code after each call.)

PERF7=""
PERF7_NA=""
if ! PERF7=$("$BENCH_DIR/perf7" 2> "$OUT/perf7.err"); then
    PERF7_NA="bench/perf7 failed: $(tail -n1 "$OUT/perf7.err")"
    log "perf 7: $PERF7_NA"
fi

perf7_pipeline() { # DATA → seconds of `perf7 script | inferno-collapse-perf`
    local t0 t1
    t0=${EPOCHREALTIME/,/.}
    "$PERF7" script -i "$1" 2> /dev/null | inferno-collapse-perf > /dev/null
    t1=${EPOCHREALTIME/,/.}
    calc "$t1 - $t0"
}

if [ -z "$PERF7_NA" ] && [ -z "$(tool_na perf-fp)" ]; then
    PERF7_VERSION=$("$PERF7" --version 2> /dev/null | awk '{print $3}')
    log "perf $PERF7_VERSION: the fold rows' perf fp recordings, $FOLD_RUNS runs each"
    # NAME PERF-FILE: every perf fp file the fold rows above used.
    declare -A PERF7_FILE=()
    for w in "${EMBEDDED_NAMES[@]}"; do PERF7_FILE[$w]=$OUT/rec/$w.perf-fp.data; done
    [ -z "${COLD_FILE[perf-fp]:-}" ] || PERF7_FILE[dwarf-rich]=${COLD_FILE[perf-fp]}
    [ -n "$CARGO_NA" ] || PERF7_FILE[cargo-build]=$OUT/rec/cargo-build.perf-fp.data
    for name in "${!PERF7_FILE[@]}"; do
        n=$FOLD_RUNS; [ "$name" = cargo-build ] && n=$RUNS
        for run in $(seq 1 "$n"); do
            s=$(perf7_pipeline "${PERF7_FILE[$name]}")
            printf 'perf7-%s\t%s\t%s\t\n' "$name" "$run" "$s" >> "$FOLD_TSV"
            log "run $run perf $PERF7_VERSION script | inferno-collapse-perf ($name): $(fmt %.3f "$s") s"
        done
    done
    perf7_row() { # NAME FLAMEREC-ROW LABEL BUDGET
        local p f r
        p=$(fold_col "perf7-$1" 3) f=$(fold_col "$2" 3)
        r=$(calc "$p / $f")
        row "$3 vs perf $PERF7_VERSION's \`perf script \\| inferno-collapse-perf\` (inlined frames on, its default), fp" \
            "$(fmt %.3f "$p") s (perf $PERF7_VERSION)" — — "$(fmt %.4f "$f") s" — "$(fmt %.1f× "$r") faster" "≥ ${4}×" "$(holds "$r" ">=" "$4")"
    }
    for w in "${EMBEDDED_NAMES[@]}"; do
        perf7_row "$w" "embedded-$w-flamerec" "fold time of an embedded recording, $w" 25
    done
    if [ -n "${PERF7_FILE[dwarf-rich]:-}" ]; then
        perf7_row dwarf-rich embedded-dwarf-rich-flamerec "fold time of an embedded recording, DWARF-rich (flamerec built with frame pointers folding)" 25
        perf7_row dwarf-rich cold-flamerec-fp "cold fold (\`--no-cache --resymbolize\`), DWARF-rich (flamerec built with frame pointers folding)" 10
    fi
    if [ -n "${PERF7_FILE[cargo-build]:-}" ]; then
        perf7_row cargo-build embedded-cargo-build-flamerec "fold time of an embedded recording, cargo build" 25
        perf7_row cargo-build cargo-flamerec-fp "cold fold (\`--no-cache --resymbolize\`), cargo build" 10
    fi
else
    row "folds vs perf 7's \`perf script \\| inferno-collapse-perf\`" — — — — — "n/a: ${PERF7_NA:-$(tool_na perf-fp)}" — n/a
fi
