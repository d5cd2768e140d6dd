# Sourced by bench/run. Deferred user callchains (issue 25): in one boot of Debian's Linux 7.2
# under qemu (TCG, one CPU; vm/run, which fetches the kernel and installs qemu as root),
# `flamerec record -g fp,defer` against `-g fp` and the default `-g dwarf`, each attached
# (`-p`, `-d DEFER_S`) to vm/guest/deep-fp running a 400-frame CPU path and a 400-frame
# system-call path, runs interleaved; then the same at 600 frames, past the deferred
# unwinder's 510. Per mode, medians over the runs of:
#   - bytes per sample (the file's size over its samples, names embedded);
#   - whole stacks: the share of samples whose stack reaches main (or the program's entry) —
#     a stack cut at a kernel cap keeps its leaf end and loses that;
#   - recorder CPU per sample, marginal: the recorder's user + sys CPU (busybox `time`, 10 ms
#     resolution) at 999 Hz less that at 99 Hz, same duration, over the difference in samples,
#     so the fixed costs (the kernel symbol table, embedding names) cancel.
# TCG runs the guest tens of times slower than the host: the CPU figures compare the modes
# with each other, not with the rows above. The row names the guest's kernel.

DEFER_S=4; [ $QUICK = 1 ] && DEFER_S=2
DEFER_DIR=$OUT/vm-defer
DEFER_TSV=$OUT/deferred.tsv
rm -rf "$DEFER_DIR"
mkdir -p "$DEFER_DIR"
defer_na=""
if ! gcc -O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -static -o "$DEFER_DIR/deep-fp" \
    "$BENCH_DIR/../vm/guest/deep-fp.c" 2> "$DEFER_DIR/gcc.err"; then
    defer_na="n/a: gcc could not build vm/guest/deep-fp.c: $(tail -n1 "$DEFER_DIR/gcc.err")"
fi
if [ -z "$defer_na" ]; then
    {
        echo 'uname -r > $OUT/kernel'
        echo 'cd /tmp'
        for depth_hz in 400-999 400-99 600-999; do
            depth=${depth_hz%-*} hz=${depth_hz#*-}
            for run in $(seq 1 "$RUNS"); do
                for mode in fp,defer fp dwarf; do
                    n="$(echo "$mode" | tr , -)-$depth-$hz-$run"
                    # Far more work than the attachment lasts; killed after.
                    echo "/deep-fp $depth 600 > /dev/null & pid=\$!"
                    echo "time -f '%U %S' -o \$OUT/$n.cpu /flamerec record -q -p \$pid -F $hz -d $DEFER_S -g $mode -o \$OUT/$n.frec 2> \$OUT/$n.err"
                    echo "kill \$pid; wait \$pid || true"
                done
            done
        done
    } > "$DEFER_DIR/guest.sh"
    log "deferred callchains: Linux 7.2 under qemu, $RUNS runs × 3 modes × 3 settings of $DEFER_S s"
    if ! "$BENCH_DIR/../vm/run" --kernel 7.2 --timeout 1800 --out "$DEFER_DIR/out" \
        --add "$FLAMEREC=/flamerec" --add "$DEFER_DIR/deep-fp=/deep-fp" "$DEFER_DIR/guest.sh" \
        > "$DEFER_DIR/console.log" 2>&1; then
        defer_na="n/a: the VM run failed: $(grep -a '^vm: ' "$DEFER_DIR/console.log" | tail -n1)"
    fi
fi
printf 'mode\tdepth\thz\trun\tcpu_s\tsamples\tbytes\twhole_pct\n' > "$DEFER_TSV"
if [ -z "$defer_na" ]; then
    for f in "$DEFER_DIR"/out/*.frec; do
        stem=${f%.frec} name=$(basename "$stem")
        mode=${name%%-[0-9]*} rest=${name#"$mode"-}
        depth=${rest%%-*} rest=${rest#*-}
        hz=${rest%%-*} run=${rest#*-}
        cpu=$(awk '{print $1 + $2}' "$stem.cpu")
        read -r samples bytes < <("$FLAMEREC" info --json "$f" | "$PY" -c '
import json, sys
i = json.load(sys.stdin)
print(i["samples"], i["bytes"])')
        whole=$("$FLAMEREC" fold "$f" | awk '{n = $NF; t += n; if ($0 ~ /(^|;)(main|_start|__libc_start_call_main)(;| )/) w += n}
            END {if (t) printf "%.2f", 100 * w / t; else print "nan"}')
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$depth" "$hz" "$run" "$cpu" "$samples" "$bytes" "$whole" >> "$DEFER_TSV"
    done
    DEFER_KERNEL="Linux $(cat "$DEFER_DIR/out/kernel") in qemu TCG, 1 CPU"
fi
defer_col() { # MODE DEPTH EXPR-OF-cpu,n,bytes,whole → median over the 999 Hz runs
    if [ "$3" = marginal ]; then
        # Per run: (CPU at 999 Hz − CPU at 99 Hz) / (samples at 999 Hz − samples at 99 Hz).
        awk -F'\t' -v m="$1" -v d="$2" 'NR > 1 && $1 == m && $2 == d {cpu[$3, $4] = $5; n[$3, $4] = $6; runs[$4] = 1}
            END {for (r in runs) if (n[999, r] > n[99, r]) print (cpu[999, r] - cpu[99, r]) * 1e6 / (n[999, r] - n[99, r])}' "$DEFER_TSV" | median
        return
    fi
    awk -F'\t' -v m="$1" -v d="$2" "NR > 1 && \$1 == m && \$2 == d && \$3 == 999 && \$6 > 0 {cpu = \$5; n = \$6; bytes = \$7; whole = \$8; print $3}" "$DEFER_TSV" | median
}
defer_row() { # LABEL DEPTH EXPR FORMAT UNIT
    local d f w
    if [ -n "$defer_na" ]; then
        row "$1" — — — "$defer_na" "$defer_na" "$defer_na" "as measured" —
        return
    fi
    d=$(defer_col fp-defer "$2" "$3") f=$(defer_col fp "$2" "$3") w=$(defer_col dwarf "$2" "$3")
    row "$1, $DEFER_KERNEL" — — — "$(fmt "$4" "$f")$5" "$(fmt "$4" "$w")$5" \
        "fp,defer $(fmt "$4" "$d")$5, fp $(fmt "$4" "$f")$5, dwarf $(fmt "$4" "$w")$5" "as measured" —
}
defer_row "\`-g fp,defer\` vs \`-g fp\` vs \`-g dwarf\`: bytes per sample, deep-fp at 400 frames (attached, $DEFER_S s, 999 Hz)" 400 'bytes / n' %.1f " B"
defer_row "\`-g fp,defer\` vs \`-g fp\` vs \`-g dwarf\`: % of samples whose stack reaches main, deep-fp at 400 frames" 400 'whole' %.1f %
defer_row "\`-g fp,defer\` vs \`-g fp\` vs \`-g dwarf\`: % of samples whose stack reaches main, deep-fp at 600 frames (deferred unwinder keeps 510)" 600 'whole' %.1f %
defer_row "\`-g fp,defer\` vs \`-g fp\` vs \`-g dwarf\`: recorder CPU (user + sys) per sample, marginal (999 Hz less 99 Hz), deep-fp at 400 frames (µs of TCG guest CPU)" 400 marginal %.0f " µs"
