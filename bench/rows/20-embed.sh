# Sourced by bench/run. What embedding the names adds after the command ended (issues 13, 22):
# the seconds flamerec's summary line reports ("names of N frames embedded in X s": naming the
# last frames, since the rest were named while recording, and writing the names), median over
# the runs, for every workload recorded so far. The wall ratios with embedding (the default)
# are the wall rows above.

embed_cell() { # WORKLOAD TOOL → "X s", or n/a with the reason
    local s
    s=$(col "$1" "$2" embed_s)
    if [ "$s" = nan ]; then
        if [ "$2" = flamerec-dwarf ] && [ -n "$FLAMEREC_DWARF_NA" ]; then echo "n/a: $FLAMEREC_DWARF_NA"
        else echo "n/a: no summary line with embedded names"; fi
    else
        echo "$(fmt %.3f "$s") s"
    fi
}
for w in "${W_NAMES[@]}" json-re cargo-build; do
    [ $w != cargo-build ] || [ -z "$CARGO_NA" ] || { row "seconds names took to embed, cargo build" — — — n/a n/a "n/a: $CARGO_NA" "≤ 0.05 s" n/a; continue; }
    row "seconds the summary line says names took to embed (\"names of N frames embedded in X s\"), $w" \
        — — — "$(embed_cell "$w" flamerec-fp)" "$(embed_cell "$w" flamerec-dwarf)" "—" "≤ 0.05 s" \
        "fp $(holds "$(col "$w" flamerec-fp embed_s)" "<=" 0.05), dwarf $(dwarf_holds "$(col "$w" flamerec-dwarf embed_s)" "<=" 0.05)"
done
