# Sourced by bench/run after 36-python.sh (whose runtimes table and helpers it shares). JIT frames
# (issue 36): the known-profile programs of tests/programs (fa, fb and fc take 50/30/20 of the
# time, kept from being inlined), ≈ JIT_S s each, at 999 Hz with a core free:
#   node 20 --perf-basic-prof (perf map) and --perf-prof (jitdump), CPython 3.13 -X perf_jit
#   (jitdump with unwind records), java 17 with -XX:+PreserveFramePointer and the map written at
#   exit (-XX:+DumpPerfMapAtExit) or perf's JVMTI agent (a jitdump; the agent is built from the
#   Linux source 34-perf7.sh unpacked);
# recorded by flamerec's default (dwarf) and -g fp, samply, and perf -k 1 -g (with
# `perf inject --jit` before perf script for a jitdump), perf 6.1 and the perf 7 34-perf7.sh built. Each command runs under
# `sh -c 'CMD; date > END'`, so the time from its end to a written recording is the recorder's
# exit (bench/run's t1) − END (perf's row adds what perf script, and perf inject for a jitdump,
# take before there is anything to read). Figures as in 36-python.sh, with
# "whole" the share of samples showing program frames whose root-most frame is a thread's entry
# (samply: n/a, its native frames are left unsymbolicated).

JIT_S=2; [ $QUICK = 1 ] && JIT_S=0.5
{
    echo
    echo "| program, runtime | tool | samples; bytes per sample; recording written after the command's end (median) | program frames shown; samples whose leaf is unnamed JIT code (goal: leaf named ≥ 99%) | whole to the thread's entry (goal ≥ 99.5%) | shares fa / fb / fc (goal 50 / 30 / 20 ± 2) | wall / bare (goal ≤ 1.05) | recorder CPU per sample |"
    echo "|---|---|---|---|---|---|---|---|"
} >> "$RUNTIMES_TABLE"
JIT_DIR=$OUT/jit # node writes its jitdump in the current directory
mkdir -p "$JIT_DIR"
jit_perf() { # TOOL → the perf binary of a perf row
    if [ "$1" = perf7-k1 ]; then echo "$PERF7"; else echo perf; fi
}
eval "jit_base_tool_na() $(declare -f tool_na | sed 1d)"
tool_na() {
    case $1 in
        perf7-k1) echo "$PERF7_NA" ;;
        *) jit_base_tool_na "$@" ;;
    esac
}
eval "jit_base_recorder() $(declare -f recorder | sed 1d)"
recorder() {
    case $1 in
        perf-k1 | perf7-k1) REC_FILE=$2.data; REC_CMD=("$(jit_perf "$1")" record -q -k 1 -e cpu-clock -F "$3" -g -o "$REC_FILE" --) ;;
        *) jit_base_recorder "$@" ;;
    esac
}
eval "jit_base_samples_of() $(declare -f samples_of | sed 1d)"
samples_of() {
    case $1 in
        perf-k1) jit_base_samples_of perf-fp "$2" ;;
        perf7-k1) "$PERF7" report -i "$2" --stats 2> /dev/null | awk '$1 == "SAMPLE" && $2 == "events:" {print $3; exit}' ;;
        *) jit_base_samples_of "$@" ;;
    esac
}
jit_folded() { # WORKLOAD TOOL RECORDING → folded text on stdout
    case $2 in
        perf-k1 | perf7-k1)
            local perf
            perf=$(jit_perf "$2")
            if [[ $1 == *dump* || $1 == *perf-jit* || $1 == *agent* ]]; then
                (cd "$JIT_DIR" && "$perf" inject --jit -i "$3" -o "$3.jitted" 2> /dev/null) &&
                    "$perf" script -i "$3.jitted" 2> /dev/null | inferno-collapse-perf 2> /dev/null
            else
                "$perf" script -i "$3" 2> /dev/null | inferno-collapse-perf 2> /dev/null
            fi ;;
        samply) python3 "$RT" samply "$3" ;;
        *) rt_folded "$2" "$3" ;;
    esac
}
# The command, then its end time in END (ns).
ended() {
    W_CMD=(sh -c 'cd "$0" && "$@"; r=$?; date +%s%N > "$0/end"; exit $r' "$JIT_DIR" "$@")
    W_AFTER='cp "$JIT_DIR/end" "$OUT/rec/$w.$tool.end"'
}

JIT_W=()
declare -A JIT_LABEL=() JIT_PROGRAM=()
if command -v node > /dev/null; then
    JS=$ROOT/tests/programs/known-profile.js
    JS_N=$(calibrate "$JIT_S" 20 node --allow-natives-syntax "$JS")
    workload_node_map() { ended node --perf-basic-prof --allow-natives-syntax "$JS" "$JS_N"; }
    workload_node_dump() { ended node --perf-prof --allow-natives-syntax "$JS" "$JS_N"; }
    JIT_W+=(node-map node-dump)
    JIT_LABEL[node-map]="known-profile.js, node $(node --version) \`--perf-basic-prof\`"
    JIT_LABEL[node-dump]="known-profile.js, node $(node --version) \`--perf-prof\`"
    JIT_PROGRAM[node-map]=known-profile JIT_PROGRAM[node-dump]=known-profile
else
    rt_row "known-profile.js, node" "—" "n/a: no node here" "" "" "" "" ""
fi
PY13=$(pyenv_python 13)
if [ -n "$PY13" ]; then
    PY13_N=$(calibrate "$JIT_S" 20 "$PY13" "$PY_PROG")
    workload_py313_perf_jit() { ended "$PY13" -X perf_jit "$PY_PROG" "$PY13_N"; }
    JIT_W+=(py313-perf-jit)
    JIT_LABEL[py313-perf-jit]="known-profile.py, CPython 3.13 \`-X perf_jit\`"
    JIT_PROGRAM[py313-perf-jit]=known-profile
else
    rt_row "known-profile.py, CPython 3.13 \`-X perf_jit\`" "—" "n/a: no pyenv CPython 3.13 here" "" "" "" "" ""
fi
if command -v javac > /dev/null && command -v java > /dev/null &&
    javac -d "$JIT_DIR" "$ROOT/tests/programs/KnownProfile.java" 2> "$OUT/javac.txt"; then
    JAVA_FLAGS=(-XX:+PreserveFramePointer -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit
        -XX:CompileCommand=quiet "-XX:CompileCommand=dontinline,KnownProfile::*" -cp "$JIT_DIR" KnownProfile)
    JAVA_N=$(calibrate "$JIT_S" 20 java "${JAVA_FLAGS[@]}")
    workload_java_map() { ended java "${JAVA_FLAGS[@]}" "$JAVA_N"; }
    JIT_W+=(java-map)
    JIT_LABEL[java-map]="KnownProfile.java, java 17 \`-XX:+PreserveFramePointer -XX:+DumpPerfMapAtExit\`"
    JIT_PROGRAM[java-map]=KnownProfile
else
    rt_row "KnownProfile.java, java" "—" "n/a: no java and javac here" "" "" "" "" ""
fi
# perf's JVMTI agent, built from the Linux source bench/perf7 unpacked (34-perf7.sh ran it).
JVMTI_SRC=$(ls -d "$OUT"/perf7/src/*/tools 2> /dev/null | tail -n1)
AGENT=$OUT/libperf-jvmti.so
JDK=$(dirname "$(dirname "$(readlink -f "$(command -v javac 2> /dev/null || echo /nonexistent)")")")
if [ -n "${JIT_LABEL[java-map]:-}" ] && [ -n "$JVMTI_SRC" ] &&
    gcc -shared -fPIC -DPIC -O2 -I"$JDK/include" -I"$JDK/include/linux" -I"$JVMTI_SRC/include" \
        -I"$JVMTI_SRC/perf" -I"$JVMTI_SRC/arch/x86/include" -o "$AGENT" \
        "$JVMTI_SRC"/perf/jvmti/libjvmti.c "$JVMTI_SRC"/perf/jvmti/jvmti_agent.c \
        "$JVMTI_SRC"/lib/string.c "$JVMTI_SRC"/lib/ctype.c 2> "$OUT/jvmti.txt"; then
    workload_java_agent() { ended java -agentpath:"$AGENT" "${JAVA_FLAGS[@]/-XX:+DumpPerfMapAtExit/-Xshare:auto}" "$JAVA_N"; }
    JIT_W+=(java-agent)
    JIT_LABEL[java-agent]="KnownProfile.java, java 17 \`-XX:+PreserveFramePointer\` with perf's JVMTI agent (jitdump)"
    JIT_PROGRAM[java-agent]=KnownProfile
else
    rt_row "KnownProfile.java, java 17 with perf's JVMTI agent (jitdump)" "—" "n/a: the agent was not built (no Linux source from bench/perf7, or: $(tail -n1 "$OUT/jvmti.txt" 2> /dev/null))" "" "" "" "" ""
fi

JIT_TOOLS=(bare flamerec-dwarf flamerec-fp samply perf-k1 perf7-k1)
jit_tool_name() { # WORKLOAD TOOL
    case $2 in
        flamerec-dwarf) echo "flamerec (default)" ;;
        flamerec-fp) echo "flamerec -g fp" ;;
        perf-k1 | perf7-k1)
            local v=""
            [ "$2" = perf-k1 ] || v=" ${PERF7_VERSION:-7}"
            echo "perf$v -k 1 -g$([[ $1 == *dump* || $1 == *perf-jit* || $1 == *agent* ]] && echo ' + inject --jit')" ;;
        *) echo "$2" ;;
    esac
}
declare -A JIT_LAG=() JIT_INJECT=()
[ ${#JIT_W[@]} = 0 ] || log "jit: ${JIT_W[*]} (≈ $JIT_S s each)"
for run in $(seq 1 "$RUNS"); do
    for w in "${JIT_W[@]}"; do
        # One workload at a time: its runtime's files are read (perf) and removed in between.
        RUNS_SAVED=$RUNS RUNS=1
        record_runs JIT_TOOLS "$w"
        RUNS=$RUNS_SAVED
        for tool in "${JIT_TOOLS[@]:1}"; do
            [ -z "$(tool_na "$tool")" ] && [ -s "$OUT/rec/$w.$tool.t1" ] || continue
            JIT_LAG[$w.$tool]+="$(calc "($(cat "$OUT/rec/$w.$tool.t1") - $(cat "$OUT/rec/$w.$tool.end")) / 1e9") "
            rm -f "$OUT/rec/$w.$tool.t1"
            [ "$run" = "$RUNS" ] || continue
            recorder "$tool" "$OUT/rec/$w.$tool" "$FREQ"
            t=$(now_ns)
            jit_folded "$w" "$tool" "$REC_FILE" > "$OUT/rec/$w.$tool.folded"
            [[ $tool != perf*-k1 ]] || JIT_INJECT[$w.$tool]=$(calc "($(now_ns) - $t) / 1e9")
        done
        rm -rf "$JIT_DIR"/jit-*.dump "$JIT_DIR"/jitted-*.so /tmp/perf-*.map /tmp/jit-*.dump "$HOME"/.debug/jit/java-jit-* 2> /dev/null || true
    done
done
for w in "${JIT_W[@]}"; do
    bare=$(col "$w" bare wall_s) cpu_b=$(col "$w" bare cpu_s)
    for tool in "${JIT_TOOLS[@]:1}"; do
        name=$(jit_tool_name "$w" "$tool")
        if [ -n "$(tool_na "$tool")" ]; then
            rt_row "${JIT_LABEL[$w]}" "$name" "n/a: $(tool_na "$tool")" "" "" "" "" ""
            continue
        fi
        IFS=$'\t' read -r _ named _ rooted a b c < <(python3 "$RT" shares "$OUT/rec/$w.$tool.folded" "${JIT_PROGRAM[$w]}" main fa fb fc)
        unnamed=$(python3 "$RT" unnamed "$OUT/rec/$w.$tool.folded")
        samples=$(col "$w" "$tool" samples)
        [ "$tool" != samply ] || rooted=n/a unnamed=n/a
        wall=$(calc "$(col "$w" "$tool" wall_s) / $bare")
        cpu=$(calc "($(col "$w" "$tool" cpu_s) - $cpu_b) / $samples * 1e6")
        lag=$(echo "${JIT_LAG[$w.$tool]:-}" | tr ' ' '\n' | grep . | median)
        inject=""
        [[ $tool != perf*-k1 ]] || inject=" + perf script$([[ $w == *dump* || $w == *perf-jit* || $w == *agent* ]] && echo ' and inject') $(fmt %.2f "${JIT_INJECT[$w.$tool]:-nan}") s"
        rt_row "${JIT_LABEL[$w]}" "$name" "$samples; $(fmt %.1f "$(bps "$w" "$tool")") B; $(fmt %.2f "$lag") s$inject" \
            "$(fmt %.1f%% "$named"); leaf unnamed JIT code $(fmt %.2f%% "$unnamed")" \
            "$(fmt %.1f%% "$rooted")$([ "$rooted" = n/a ] || echo " ($(holds "$rooted" ">=" 99.5))")" "$(three "$a" "$b" "$c")" \
            "$(fmt %.3f "$wall") ($(holds "$wall" "<=" 1.05))" "$(fmt %.1f "$cpu") µs"
    done
done
