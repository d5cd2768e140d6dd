# Sourced by bench/run. Recorder CPU per sample (issue 16; DESIGN.md ≤ 3 µs in dwarf mode):
# the `threads` sample runs (three busy threads on the machine's cores) and each recorder
# attaches to it for ATTACH_S seconds at HF_FREQ (perf: `perf record -p` stopped by
# `timeout -s INT`; perf stat counts perf as timeout's child); the recorder's CPU time (perf
# stat's task-clock, in ns: GNU time's 10 ms ticks are 0.2 µs per sample here, and once
# turned a 2.8 µs median into 3.06) over the samples it wrote gives µs per sample, and its
# inverse the samples one recorder sustains per second of its own CPU.

THREADS_BIN=$TARGET/release/threads
ATTACH_S=5; [ $QUICK = 1 ] && ATTACH_S=2
CPU_TSV=$OUT/recorder-cpu.tsv
printf 'tool\trun\tcpu_s\tsamples\n' > "$CPU_TSV"
attach_cmd() { # TOOL PID FILE-STEM → REC_CMD and REC_FILE
    case $1 in
        # perf record -p stops on SIGINT (exit status 130), writing its file.
        perf-fp) REC_FILE=$3.data; REC_CMD=(timeout -s INT "$ATTACH_S" perf record -q -e cpu-clock -F "$HF_FREQ" -g -p "$2" -o "$REC_FILE") ;;
        perf-dwarf) REC_FILE=$3.data; REC_CMD=(timeout -s INT "$ATTACH_S" perf record -q -e cpu-clock -F "$HF_FREQ" --call-graph dwarf -p "$2" -o "$REC_FILE") ;;
        flamerec-fp) REC_FILE=$3.frec; REC_CMD=("$FLAMEREC" record -q -p "$2" -F "$HF_FREQ" -g fp -d "$ATTACH_S" -o "$REC_FILE") ;;
        flamerec-dwarf) REC_FILE=$3.frec; REC_CMD=("$FLAMEREC" record -q -p "$2" -F "$HF_FREQ" -g dwarf -d "$ATTACH_S" -o "$REC_FILE") ;;
    esac
}
if [ -x "$THREADS_BIN" ]; then
    log "recorder CPU: attached to threads for $ATTACH_S s at $HF_FREQ Hz"
    for run in $(seq 1 "$RUNS"); do
        for tool in perf-fp perf-dwarf flamerec-fp flamerec-dwarf; do
            [ -z "$(tool_na "$tool")" ] || continue
            # Far more work than the attachment lasts; killed after.
            "$THREADS_BIN" --units 100000000 > /dev/null &
            BG_PID=$!
            # Attach once its three workers run (start-up takes a while on a busy machine).
            for _ in $(seq 100); do
                [ "$(ls "/proc/$BG_PID/task" 2> /dev/null | wc -l)" -lt 4 ] || break
                sleep 0.05
            done
            attach_cmd "$tool" "$BG_PID" "$OUT/rec/attach.$tool"
            # timeout exits 124 when it stopped perf, as it should.
            perf stat -x, -e task-clock -o "$OUT/cpu" -- "${REC_CMD[@]}" > /dev/null 2> "$OUT/rec/attach.$tool.err" ||
                [ $? = 124 ] || die "$tool attached to threads failed: $(tail -n3 "$OUT/rec/attach.$tool.err")"
            kill "$BG_PID" 2> /dev/null || true
            wait "$BG_PID" 2> /dev/null || true
            BG_PID=""
            cpu=$(awk -F, '$3 == "task-clock" {print $1 / 1000}' "$OUT/cpu")
            n=$(samples_of "$tool" "$REC_FILE")
            printf '%s\t%s\t%s\t%s\n' "$tool" "$run" "$cpu" "$n" >> "$CPU_TSV"
            log "run $run $tool attached: $cpu s of CPU, $n samples"
        done
    done
fi
cpu_col() { # TOOL EXPR-OF-cpu,n → median over the runs
    awk -F'\t' -v t="$1" "NR > 1 && \$1 == t && \$4 > 0 && \$3 > 0 {cpu = \$3; n = \$4; print $2}" "$CPU_TSV" | median
}
declare -A US=() RATE=()
for tool in perf-fp perf-dwarf flamerec-fp flamerec-dwarf; do
    if [ ! -x "$THREADS_BIN" ]; then US[$tool]="n/a: $THREADS_BIN was not built" RATE[$tool]=n/a
    elif [ -n "$(tool_na "$tool")" ]; then US[$tool]=n/a RATE[$tool]=n/a
    else US[$tool]=$(cpu_col "$tool" 'cpu * 1e6 / n') RATE[$tool]=$(cpu_col "$tool" 'n / cpu'); fi
done
row "recorder CPU (user + sys) per sample, attached to the threads sample, $HF_FREQ Hz, $ATTACH_S s (µs)" \
    "$(fmt %.2f "${US[perf-fp]}")" "$(fmt %.2f "${US[perf-dwarf]}")" "not run" \
    "$(fmt %.2f "${US[flamerec-fp]}")" "$(fmt %.2f "${US[flamerec-dwarf]}")" \
    "fp $(fmt %.2f "${US[flamerec-fp]}") µs, dwarf $(fmt %.2f "${US[flamerec-dwarf]}") µs" "≤ 3 µs (dwarf)" \
    "$(dwarf_holds "${US[flamerec-dwarf]}" "<=" 3)"
row "samples per second of recorder CPU (what one recorder thread sustains), same runs" \
    "$(fmt %.0f "${RATE[perf-fp]}")" "$(fmt %.0f "${RATE[perf-dwarf]}")" "not run" \
    "$(fmt %.0f "${RATE[flamerec-fp]}")" "$(fmt %.0f "${RATE[flamerec-dwarf]}")" "—" "as measured" "—"
