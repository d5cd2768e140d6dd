# Sourced by bench/run. The recorder's CPU as a share of the machine (issue 22), for every
# workload recorded so far, two ways:
#   added  (user + system CPU of `record -- W`) − (that of bare W), medians, over CPUs × the
#          bare wall: what a recorder costs the machine, its effect on the command included
#          (GNU time around every run); any recorder, and noisy (the bare runs' own spread)
#   own    flamerec's summary line ("recorder CPU X s": /proc/self/stat of the recorder, every
#          thread, start to finish, 10 ms resolution) over CPUs × the recording's wall: the
#          recorder alone, flamerec only
# The budget (≤ 2%) is for the busy compile (cargo build, every core busy) and holds on `own`.

CPUS=$(nproc)
share_cells() { # WORKLOAD → C[] added shares (%), and O[] own shares for flamerec
    local w=$1 tool bare_cpu bare_wall
    bare_cpu=$(col "$w" bare cpu_s) bare_wall=$(col "$w" bare wall_s)
    C=() O=()
    for tool in perf-fp perf-dwarf samply flamerec-fp flamerec-dwarf; do
        if [ -n "$(tool_na "$tool")" ] || { [ "$w" = cargo-build ] && [ "$tool" = samply ]; }; then
            C[$tool]=n/a O[$tool]=n/a
            continue
        fi
        C[$tool]=$(calc "100 * ($(col "$w" "$tool" cpu_s) - $bare_cpu) / ($CPUS * $bare_wall)")
        O[$tool]=$(calc "100 * $(col "$w" "$tool" own_cpu_s) / ($CPUS * $(col "$w" "$tool" wall_s))")
    done
}
flamerec_share() { # TOOL → "added X% (own Y%)"
    echo "$(fmt %.1f%% "${C[$1]}") (own $(fmt %.1f%% "${O[$1]}"))"
}
declare -A C O
for w in "${W_NAMES[@]}" json-re cargo-build; do
    if [ $w = cargo-build ] && [ -n "$CARGO_NA" ]; then
        row "recorder CPU as a share of the machine, cargo build" n/a n/a n/a n/a n/a "n/a: $CARGO_NA" "≤ 2% own" n/a
        continue
    fi
    share_cells $w
    budget="as measured" verdict="—"
    if [ $w = cargo-build ]; then
        budget="≤ 2% own"
        verdict="fp $(holds "${O[flamerec-fp]}" "<=" 2), dwarf $(dwarf_holds "${O[flamerec-dwarf]}" "<=" 2)"
    fi
    row "recorder CPU as a share of the machine ($CPUS CPUs): added = CPU of \`record -- W\` − CPU of W over CPUs × wall of W; own = flamerec's summary line over CPUs × recording wall; medians, $w" \
        "$(fmt %.1f%% "${C[perf-fp]}")" "$(fmt %.1f%% "${C[perf-dwarf]}")" "$(fmt %.1f%% "${C[samply]}")" \
        "$(flamerec_share flamerec-fp)" "$(flamerec_share flamerec-dwarf)" \
        "own: fp $(fmt %.1f%% "${O[flamerec-fp]}"), dwarf $(fmt %.1f%% "${O[flamerec-dwarf]}")" "$budget" "$verdict"
done
