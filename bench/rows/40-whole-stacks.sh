# Sourced by bench/run. Whole stacks (issue 12): the share of samples whose user stack reaches
# the thread's entry (entry_share's rule), flamerec dwarf against perf dwarf, on
#   a) the deep-stack sample (over 200 KiB of stack at the sampled leaf, two threads);
#   b) the rustc/LLVM threads of the cargo build recordings of 10-many-stacks.sh: threads
#      named rustc, opt …, lto …, copy … or coordinator (rustc's main thread and LLVM's);
#      perf's side folded with `perf script --no-inline`.
# Budget ≥ 99.5% (DESIGN.md). Beside it flamerec's own count: truncated_stacks / samples
# from `flamerec info --json`.

DEEP_STACK=$TARGET/release/deep-stack
RUSTC_THREADS='^(rustc|opt[ _]|lto[ _]|copy[ _]|coordinator)'
info_cut() { # FREC → percent of samples flamerec counted as cut short
    "$FLAMEREC" info --json "$1" | "$PY" -c '
import json, sys
i = json.load(sys.stdin)
print("%.2f" % (100 * i["truncated_stacks"] / i["samples"]) if i["samples"] else "nan")'
}
stack_row() { # LABEL PERF-FOLDED FLAMEREC-FOLDED FLAMEREC-FREC [THREAD-REGEX]
    local pd fd cut
    pd=$(entry_share "$2" "${5:-}") fd=$(entry_share "$3" "${5:-}") cut=$(info_cut "$4")
    row "dwarf mode: % of samples whose stack reaches the thread's entry, $1" — "$(fmt %.2f%% "$pd")" \
        "n/a: samply's saved profile is unsymbolicated" — "$(fmt %.2f%% "$fd")" \
        "dwarf $(fmt %.2f%% "$fd") vs perf dwarf $(fmt %.2f%% "$pd"); \`info\`: $(fmt %.2f%% "$cut") cut short" \
        "≥ 99.5%" "$(dwarf_holds "$fd" ">=" 99.5)"
}

if [ -n "$FLAMEREC_DWARF_NA" ]; then
    row "dwarf mode: % of samples whose stack reaches the thread's entry, deep-stack and cargo build" — n/a — — n/a "n/a: flamerec dwarf $FLAMEREC_DWARF_NA" "≥ 99.5%" n/a
elif [ ! -x "$DEEP_STACK" ]; then
    row "dwarf mode: % of samples whose stack reaches the thread's entry, deep-stack" — n/a — — n/a "n/a: $DEEP_STACK was not built" "≥ 99.5%" n/a
else
    DEEP_UNITS=$(calibrate "$CPU_S" 30000 "$DEEP_STACK" --units)
    workload_deep_stack() { W_CMD=("$DEEP_STACK" --units "$DEEP_UNITS"); }
    DEEP_TOOLS=(perf-dwarf flamerec-dwarf)
    log "whole stacks: deep-stack --units $DEEP_UNITS"
    record_runs DEEP_TOOLS deep-stack
    f=$OUT/rec/deep-stack
    folded_of perf-dwarf "$f.perf-dwarf.data" "$f.perf-dwarf.folded"
    folded_of flamerec-dwarf "$f.flamerec-dwarf.frec" "$f.flamerec-dwarf.folded"
    stack_row "deep-stack (\`deep-stack --units $DEEP_UNITS\`, 200 KiB+ deep, 2 threads; last run)" \
        "$f.perf-dwarf.folded" "$f.flamerec-dwarf.folded" "$f.flamerec-dwarf.frec"
fi

if [ -z "$FLAMEREC_DWARF_NA" ] && [ -z "$CARGO_NA" ]; then
    f=$OUT/rec/cargo-build
    # --no-inline: perf's inline frames come from addr2line over rustc's 150 MB library,
    # minutes of work; inlined frames never are a stack's root.
    perf script --no-inline -i "$f.perf-dwarf.data" 2> /dev/null | inferno-collapse-perf 2> /dev/null > "$f.perf-dwarf.folded"
    folded_of flamerec-dwarf "$f.flamerec-dwarf.frec" "$f.flamerec-dwarf.folded"
    names=$(awk -v only="$RUSTC_THREADS" '{split($0, f, ";"); if (f[1] ~ only) {sub(/ .*/, "", f[1]); n[f[1]] += $NF}}
        END {for (k in n) printf "%s%s %d", (s++ ? ", " : ""), k, n[k]}' "$f.flamerec-dwarf.folded")
    stack_row "rustc/LLVM threads of \`cargo build --release\` of $CRATE_NAME (flamerec samples by thread name: ${names:-none}; last run)" \
        "$f.perf-dwarf.folded" "$f.flamerec-dwarf.folded" "$f.flamerec-dwarf.frec" "$RUSTC_THREADS"
fi
