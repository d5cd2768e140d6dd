# Sourced by bench/run once the table is made: writes the details table (the medians behind
# the rows), the header (machine, load, steadiness, tool versions, workloads) and RESULTS.md
# (bench/RESULTS.md, or target/bench/RESULTS.md with --quick), then prints the table.

# Medians behind the table, for whoever wants to check a ratio.
DETAILS=$OUT/details.md
{
    echo "| workload | tool | median wall (s) | least wall (s) | median bytes | median samples | median s embedding names |"
    echo "|---|---|---|---|---|---|---|"
    # Every workload recorded, the row files' too, in the order they ran.
    for w in $(awk -F'\t' 'NR > 1 && !seen[$1]++ {print $1}' "$RUNS_TSV"); do
        for tool in "${TOOLS[@]}"; do
            na=$(tool_na "$tool")
            if [ -n "$na" ]; then echo "| $w | $tool | n/a | | | | |"; continue; fi
            [ "$(col "$w" "$tool" wall_s)" != nan ] || continue # not run on this workload
            echo "| $w | $tool | $(fmt %.3f "$(col "$w" "$tool" wall_s)") | $(fmt %.3f "$(col_min "$w" "$tool")") | $(col "$w" "$tool" bytes | sed 's/^nan$//') | $(col "$w" "$tool" samples | sed 's/^nan$//') | $(col "$w" "$tool" embed_s | sed 's/^nan$//') |"
        done
    done
} > "$DETAILS"

kernel=$(uname -r)
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
rev=$(cd "$ROOT" && git rev-parse --short HEAD 2> /dev/null || echo unknown)
[ -z "$(cd "$ROOT" && git status --porcelain --untracked-files=no 2> /dev/null)" ] || rev="$rev + uncommitted changes"
inferno_v=$(cargo install --list 2> /dev/null | awk '/^inferno / {print $2; exit}' | tr -d 'v:')
# How steady the machine was: the spread of the same command's times, (max - min) / median.
# No recorder runs in the bare runs and flamerec is not in perf script's, so their spread is
# the machine's; ratios between tools cannot be trusted much below it.
spread() { # VALUES... (stdin) → spread in percent
    sort -g | awk '{v[NR] = $1} END {if (NR < 2) {print "nan"; exit}
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print 100 * (v[NR] - v[1]) / m}'
}
STEADY=""
for w in "${W_NAMES[@]}"; do
    sp=$(awk -F'\t' -v w="$w" 'NR > 1 && $1 == w && $2 == "bare" {print $4}' "$RUNS_TSV" | spread)
    STEADY="$STEADY bare $w $(fmt %.0f%% "$sp"),"
done
for what in perf-fp perf-dwarf; do
    sp=$(awk -F'\t' -v w="$what" 'NR > 1 && $1 == w {print $3}' "$FOLD_TSV" | spread)
    STEADY="$STEADY \`perf script\` ${what#perf-} $(fmt %.0f%% "$sp"),"
done
STEADY=${STEADY%,}

RESULT=$ROOT/bench/RESULTS.md
[ $QUICK = 1 ] && RESULT=$OUT/RESULTS.md
{
    echo "# Benchmark results"
    echo
    echo "Written by \`bench/run$([ $QUICK = 1 ] && echo ' --quick')\` ($RUNS run(s) per pair of recordings and $FOLD_RUNS of folds, interleaved, medians) on $(date -u '+%Y-%m-%d %H:%M UTC')."
    echo "Machine: $(nproc) CPUs ($cpu), Linux $kernel; load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after (wall-time ratios are only as good as the machine was quiet); kernel.perf_event_max_stack $MAX_STACK_BEFORE before (perf -g walks that deep)."
    echo "Steadiness, the spread (max − min) / median of one command's times across its runs:$STEADY. On a quiet machine these stay within a few percent; a ratio whose budget is closer than the spread says little."
    echo "Tools: flamerec $rev; $(perf --version); samply $(samply --version 2> /dev/null | awk '{print $2}')$([ -n "$SAMPLY_NA" ] && echo ' (could not record)'); inferno ${inferno_v:-?}."
    echo "Workloads, each ≈ $CPU_S s of CPU at $FREQ Hz: \`python3 busy.py $PY_N\` (/usr/bin/python3), \`xz -9 -T1\` on $XZ_MB MB of random data, \`cpu-mix --units $MIX_UNITS\` (cargo release build, no frame pointers). Budgets: DESIGN.md, Performance."
    echo
    cat "$TABLE"
    echo
    [ -z "$SAMPLY_NA" ] || echo "- samply: n/a — $SAMPLY_NA."
    [ -z "$FLAMEREC_DWARF_NA" ] || echo "- flamerec dwarf: $FLAMEREC_DWARF_NA."
    [ -n "$SAMPLY_NA" ] || echo "- samply recorded with kernel.perf_event_paranoid lowered to 1 for its runs only (restored after each)."
    echo "- Rows after the fold memory rows come from \`bench/rows/*.sh\` (see bench/README.md for what each runs)."
    if [ -s "$OUT/runtimes.md" ]; then
        echo
        echo "## Interpreters and JITs"
        echo
        echo "Known-profile programs (fa, fb, fc: 50/30/20 of the time) under each runtime, from \`bench/rows/36-python.sh\` and \`37-jit.sh\`, and a pre-fork server, gunicorn serving two views of 75/25 the cost (\`38-gunicorn.sh\`); figures of the last run's recording, wall and CPU medians over the runs. A goal's verdict is in brackets."
        echo
        cat "$OUT/runtimes.md"
        if [ -s "$OUT/runtimes-notes.md" ]; then
            echo
            cat "$OUT/runtimes-notes.md"
        fi
    fi
    echo "- Fold times: flamerec \`fold ${FOLD_CACHE[*]}\` (symbol cache off) vs \`perf script | inferno-collapse-perf\`; wall time of the bare commands (clock read with bash's \$EPOCHREALTIME, no process started around them); peak memory is \`/usr/bin/time\`'s maximum RSS of \`flamerec fold\` and of \`perf script\` in a second run."
    echo
    echo "## Medians (and least times) behind the table"
    echo
    cat "$DETAILS"
    if [ -f "$OUT/gate.md" ]; then
        echo
        cat "$OUT/gate.md"
    fi
} > "$RESULT"

cat "$TABLE"
log "wrote $RESULT"
