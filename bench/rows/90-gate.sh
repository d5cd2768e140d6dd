# Sourced by bench/run. The regression gate's quality on this machine (issue 21): false alarms
# on identical builds and known regressions caught, 1 and 3 runs per side. `bench/gate` does
# the work (it also runs alone); its section goes after the medians in RESULTS.md.

rm -f "$OUT/gate.md"
GATE_ARGS=(--out "$OUT/gate.md")
[ $QUICK = 1 ] && GATE_ARGS+=(--quick)
log "regression gate quality: bench/gate ${GATE_ARGS[*]}"
"$BENCH_DIR/gate" "${GATE_ARGS[@]}" > /dev/null ||
    echo "## Gate quality (\`bench/gate\`)"$'\n\n'"bench/gate failed; run it alone to see why." > "$OUT/gate.md"
