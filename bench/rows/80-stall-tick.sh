# Sourced by bench/run. What `tick()` of the flamerec-stall library costs (issue 18; budget
# "a few ns", ≤ 5 ns): its criterion bench (`cargo bench -p flamerec-stall --bench tick`),
# the median of criterion's estimates (target/criterion/…/new/estimates.json), beside a bare
# relaxed atomic store measured in the same bench.

CRIT_ARGS=(); [ $QUICK = 1 ] && CRIT_ARGS=(--warm-up-time 1 --measurement-time 2)
log "stall tick(): cargo bench -p flamerec-stall --bench tick ${CRIT_ARGS[*]}"
TICK_NA=""
(cd "$ROOT" && cargo bench --quiet -p flamerec-stall --bench tick -- "${CRIT_ARGS[@]}") > "$OUT/tick.txt" 2>&1 ||
    TICK_NA="cargo bench failed: $(grep -m1 -i error "$OUT/tick.txt" || tail -n1 "$OUT/tick.txt")"
crit_median() { # BENCH-DIR-GLOB → median ns from criterion's estimates
    local f
    f=$(ls -d "$TARGET"/criterion/stall/$1/new/estimates.json 2> /dev/null | head -n1)
    [ -n "$f" ] || { echo nan; return; }
    "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' "$f"
}
if [ -n "$TICK_NA" ]; then
    row "stall \`tick()\` (criterion median)" — — — "n/a: $TICK_NA" — "—" "≤ 5 ns" n/a
else
    tick=$(crit_median 'tick*') bare=$(crit_median 'bare*')
    clock=$(sed -n 's/^stall\/tick (\([A-Za-z]*\) clock).*/\1/p' "$OUT/tick.txt" | head -n1)
    row "flamerec-stall \`tick()\` on a registered thread (${clock:-?} clock), criterion median" — — — \
        "$(fmt %.2f "$tick") ns" — "$(fmt %.2f "$tick") ns (a bare relaxed store: $(fmt %.2f "$bare") ns)" "≤ 5 ns" "$(holds "$tick" "<=" 5)"
fi
