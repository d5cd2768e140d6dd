# Sourced by bench/run. Overhead with every core busy (issue 16; DESIGN.md ≤ 1.03): two copies
# of the python3 workload at once, so both cores run Python and the recorder competes for
# one; the wall of the pair under each recorder over the bare pair's.

workload_python3_pair() {
    W_CMD=(sh -c '"$0" "$1" "$2" & "$0" "$1" "$2" & wait' "$PY" "$OUT/busy.py" "$PY_N")
}
log "every core busy: two python3 busy.py $PY_N at once"
record_runs TOOLS python3-pair

declare -A R=()
bare=$(col python3-pair bare wall_s)
for tool in perf-fp perf-dwarf samply flamerec-fp flamerec-dwarf; do
    if [ -n "$(tool_na "$tool")" ]; then R[$tool]=n/a; else R[$tool]=$(calc "$(col python3-pair "$tool" wall_s) / $bare"); fi
done
row "wall of \`record -- W\` / wall of W, every core busy: two python3 busy.py at once (pair $(fmt %.2f "$bare") s, $FREQ Hz)" \
    "$(fmt %.3f "${R[perf-fp]}")" "$(fmt %.3f "${R[perf-dwarf]}")" "$(fmt %.3f "${R[samply]}")" \
    "$(fmt %.3f "${R[flamerec-fp]}")" "$(fmt %.3f "${R[flamerec-dwarf]}")" \
    "fp $(fmt %.3f "${R[flamerec-fp]}"), dwarf $(fmt %.3f "${R[flamerec-dwarf]}")" "≤ 1.03" \
    "fp $(holds "${R[flamerec-fp]}" "<=" 1.03), dwarf $(dwarf_holds "${R[flamerec-dwarf]}" "<=" 1.03)"
