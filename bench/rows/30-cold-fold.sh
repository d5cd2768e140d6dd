# Sourced by bench/run. Cold folds: `flamerec fold --no-cache --resymbolize` (embedded names
# ignored, binaries read, inlines expanded from DWARF) against `perf script |
# inferno-collapse-perf` of the same workload's perf recording (issue 15; DESIGN.md: fp
# ≥ 10×, dwarf ≥ 50×, a cargo build ≥ 10×, peak memory ≤ perf script's).
#   a) a DWARF-rich program: flamerec itself built with frame pointers (line tables and
#      inline DWARF), folding the many-binaries recording in a loop for ≈ CPU_S s, recorded
#      at HF_FREQ by each recorder;
#   b) the fp cargo build recordings of 10-many-stacks.sh (the last run of each recorder).
#      fp only: `perf script` of the dwarf one runs addr2line over rustc's 150 MB library
#      for inline frames and was still going after minutes; the fp one takes seconds.

# The build lives in OUT/fp-build, rebuilt only when missing or older than a source file.
FP_BUILD=$OUT/fp-build
FP_FLAMEREC=$FP_BUILD/release/flamerec
if [ ! -x "$FP_FLAMEREC" ] || [ -n "$(find "$ROOT" -path "$ROOT/target" -prune -o \
    \( -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock \) -newer "$FP_FLAMEREC" -print -quit)" ]; then
    log "building flamerec with frame pointers into $FP_BUILD (cached for later runs)"
    (cd "$ROOT" && RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release --quiet \
        --target-dir "$FP_BUILD" -p flamerec --bin flamerec) || die "the frame-pointer build of flamerec failed"
fi
debug_info_hex=$(objdump -h "$FP_FLAMEREC" 2> /dev/null | awk '$2 == ".debug_info" {print $3}')
debug_info_mb=$([ -z "$debug_info_hex" ] || calc "int($((16#$debug_info_hex)) / 1e6 + 0.5)")

# One fold of the many-binaries recording, timed, sizes the loop.
t0=${EPOCHREALTIME/,/.}
"$FP_FLAMEREC" fold --no-cache --resymbolize -o /dev/null "$OUT/rec/many.frec"
t1=${EPOCHREALTIME/,/.}
FOLD_LOOP_N=$(calc "int($CPU_S / ($t1 - $t0)) + 1")
cat > "$OUT/fold-loop.sh" << SH
for i in \$(seq $FOLD_LOOP_N); do "$FP_FLAMEREC" fold --no-cache --resymbolize -o /dev/null "$OUT/rec/many.frec"; done
SH
log "cold fold: recording $FOLD_LOOP_N folds by flamerec built with frame pointers (.debug_info ${debug_info_mb:-?} MB) at $HF_FREQ Hz"
declare -A COLD_FILE COLD_SAMPLES
for tool in perf-fp perf-dwarf flamerec-fp flamerec-dwarf; do
    [ -z "$(tool_na "$tool")" ] || continue
    recorder "$tool" "$OUT/rec/cold.$tool" "$HF_FREQ"
    "${REC_CMD[@]}" sh "$OUT/fold-loop.sh" > /dev/null 2> "$OUT/rec/cold.$tool.err" ||
        die "$tool of the fold loop failed: $(tail -n3 "$OUT/rec/cold.$tool.err")"
    COLD_FILE[$tool]=$REC_FILE
    COLD_SAMPLES[$tool]=$(samples_of "$tool" "$REC_FILE")
done

cold_runs() { # PREFIX RUNS PERF-FP PERF-DWARF FLAMEREC-FP FLAMEREC-DWARF → rows PREFIX-TOOL in FOLD_TSV
    local prefix=$1 n=$2 run mode s
    local -A file=([perf-fp]=$3 [perf-dwarf]=$4 [flamerec-fp]=$5 [flamerec-dwarf]=$6)
    for run in $(seq 1 "$n"); do
        for mode in fp dwarf; do
            if [ -n "${file[perf-$mode]}" ] && [ -n "${file[flamerec-$mode]}" ]; then
                s=$(perf_pipeline "${file[perf-$mode]}" "$OUT/mem")
                printf '%s-perf-%s\t%s\t%s\t%s\n' "$prefix" "$mode" "$run" "$s" "$(cat "$OUT/mem")" >> "$FOLD_TSV"
                log "run $run $prefix perf script | inferno-collapse-perf ($mode): $(fmt %.2f "$s") s"
                s=$(timed "$OUT/mem" "$FLAMEREC" fold --no-cache --resymbolize -o /dev/null "${file[flamerec-$mode]}")
                printf '%s-flamerec-%s\t%s\t%s\t%s\n' "$prefix" "$mode" "$run" "$s" "$(cat "$OUT/mem")" >> "$FOLD_TSV"
                log "run $run $prefix flamerec fold --no-cache --resymbolize ($mode): $(fmt %.3f "$s") s"
            fi
        done
    done
}
cold_runs cold "$FOLD_RUNS" "${COLD_FILE[perf-fp]:-}" "${COLD_FILE[perf-dwarf]:-}" \
    "${COLD_FILE[flamerec-fp]:-}" "${COLD_FILE[flamerec-dwarf]:-}"
# A cargo build's folds last seconds, not milliseconds: the recordings' number of runs.
if [ -z "$CARGO_NA" ]; then
    cb=$OUT/rec/cargo-build
    cold_runs cargo "$RUNS" "$cb.perf-fp.data" "" "$cb.flamerec-fp.frec" ""
fi

cold_rows() { # PREFIX LABEL FP-BUDGET DWARF-BUDGET MODES...
    local prefix=$1 label=$2 mode p f r budget cells mem_p mem_f
    for mode in "${@:5}"; do
        budget=$3; [ $mode = dwarf ] && budget=$4
        p=$(fold_col "$prefix-perf-$mode" 3) f=$(fold_col "$prefix-flamerec-$mode" 3)
        mem_p=$(fold_col "$prefix-perf-$mode" 4) mem_f=$(fold_col "$prefix-flamerec-$mode" 4)
        if [ "$f" = nan ] && [ $mode = dwarf ] && [ -n "$FLAMEREC_DWARF_NA" ]; then f="n/a"; fi
        r=$(calc "$p / $f")
        if [ $mode = fp ]; then cells=("$(fmt %.2f "$p") s" — — "$(fmt %.3f "$f") s" —)
        else cells=(— "$(fmt %.2f "$p") s" — — "$(fmt %.3f "$f") s"); fi
        row "cold fold (\`--no-cache --resymbolize\`: binaries read, inlines from DWARF) vs \`perf script \\| inferno-collapse-perf\`, $mode, $label" \
            "${cells[@]}" "$(fmt %.1f× "$r") faster" "≥ ${budget}×" "$(holds "$r" ">=" "$budget")"
        r=$(calc "$mem_f / $mem_p")
        if [ $mode = fp ]; then cells=("$(fmt %.0f "$(calc "$mem_p / 1024")") MiB" — — "$(fmt %.0f "$(calc "$mem_f / 1024")") MiB" —)
        else cells=(— "$(fmt %.0f "$(calc "$mem_p / 1024")") MiB" — — "$(fmt %.0f "$(calc "$mem_f / 1024")") MiB"); fi
        row "cold fold peak memory (RSS) vs perf script's, $mode, $label" "${cells[@]}" "$(fmt %.2f "$r") of perf script's" "≤ 1" "$(holds "$r" "<=" 1)"
    done
}
cold_rows cold "flamerec built with frame pointers (.debug_info ${debug_info_mb:-?} MB) folding in a loop, $HF_FREQ Hz, ${COLD_SAMPLES[perf-fp]:-?}/${COLD_SAMPLES[perf-dwarf]:-?} perf fp/dwarf samples, ${COLD_SAMPLES[flamerec-fp]:-?}/${COLD_SAMPLES[flamerec-dwarf]:-?} flamerec" 10 50 fp dwarf
if [ -z "$CARGO_NA" ]; then
    cold_rows cargo "\`cargo build --release\` of $CRATE_NAME (the last fp recording of each recorder above)" 10 10 fp
else
    row "cold fold of a cargo build recording vs perf script of the same" n/a n/a — n/a n/a "n/a: $CARGO_NA" "≥ 10×" n/a
fi
