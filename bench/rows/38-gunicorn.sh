# Sourced by bench/run after 36-python.sh (whose runtimes table, py-spy and pyenv CPython 3.12 it
# shares). A pre-fork WSGI server (issue 45): gunicorn GUNICORN_VERSION from PyPI (pip, into a
# venv under target/bench, made with pyenv's CPython 3.12), `-w 2` (sync workers, forked by the
# master) on 127.0.0.1 at a free port, serving tests/programs/wsgi-two-views.py: slow_view runs
# three units of a pure-Python loop and fast_view one, so of the samples in either view 75% are
# slow_view's. Its client requests /slow and /fast in turn, one request at a time (a worker busy
# at a time, or the client: about a core free), for WSGI_S s (10; 5 with --quick).
# bench/lib/wsgi-drive.py puts the recorder in front of gunicorn alone (`flamerec record … --
# gunicorn …`: it records the master and follows the workers it forks; the client and the driver
# are not recorded), waits until a worker answers, runs the client, then stops gunicorn with
# SIGTERM to the master, which ends the recorder's command: the recording ends as it would for a
# user. Tools: bare, flamerec's default, py-spy 0.4.3 `record --native --subprocesses -r 100`.
# Figures (bench/lib/runtimes.py workers, on the last run's recording: flamerec's `fold
# --per-process`, py-spy's raw output, whose `process PID` frames name the process):
#   - samples: all of them, and the workers': every process but the master (its pid from
#     gunicorn's --pid file), from the fork to the exit — booting (importing the app) and the
#     interpreter's finalization at the exit (no Python frames to show: ≈ 25 samples a worker
#     at 999 Hz) included;
#   - % of the workers' samples showing a Python frame (of a .py file, or a `<module>`; goal
#     ≥ 97%), and % showing a frame of the app;
#   - whole: of those with a frame of the app, % reaching gunicorn's `<module>` (the script's: a
#     worker's stack goes on from the master's Arbiter.spawn_worker; goal ≥ 99.5%);
#   - slow_view / fast_view among the workers' samples in one of them (unit counts for the view
#     it runs in; goal 75 / 25 ± 3);
#   - wall per request over bare's: the client's seconds over its requests, medians over the
#     runs (goal ≤ 1.05), and the whole run's wall over bare's (gunicorn's start, the stop and
#     the recording written included);
#   - recorder CPU per sample: (CPU per request of the run − the bare run's) × requests /
#     samples, medians (GNU time over the driver, client, gunicorn and recorder: a fixed time,
#     not a fixed amount of work, so per request); for flamerec also its own CPU (the summary
#     line's) per sample.

GUNICORN_VERSION=27.0.1
GUNICORN_VENV=$OUT/gunicorn-venv
GUNICORN=$GUNICORN_VENV/bin/gunicorn
WSGI_APP=$ROOT/tests/programs/wsgi-two-views.py
WSGI_DRIVE=$BENCH_DIR/lib/wsgi-drive.py
WSGI_S=10; [ $QUICK = 1 ] && WSGI_S=5
WSGI_TSV=$OUT/wsgi-runs.tsv
GUNICORN_NA=""
if [ -z "${PY_BIN[12]:-}" ]; then
    GUNICORN_NA="no pyenv CPython 3.12 here"
elif ! "$GUNICORN" --version 2> /dev/null | grep -qF "(version $GUNICORN_VERSION)"; then
    log "installing gunicorn $GUNICORN_VERSION (pip, into $GUNICORN_VENV)"
    rm -rf "$GUNICORN_VENV"
    if ! { "${PY_BIN[12]}" -m venv "$GUNICORN_VENV" && "$GUNICORN_VENV/bin/pip" install -q "gunicorn==$GUNICORN_VERSION"; } > "$OUT/gunicorn-install.txt" 2>&1; then
        GUNICORN_NA="pip install gunicorn==$GUNICORN_VERSION failed: $(tail -n1 "$OUT/gunicorn-install.txt")"
        log "gunicorn: $GUNICORN_NA"
    fi
fi

{
    echo
    echo "| server, runtime, load | tool | samples, last run (the workers') | workers' samples showing a Python frame (goal ≥ 97%); a frame of the app | whole from gunicorn's \`<module>\` (goal ≥ 99.5%) | views' shares slow_view / fast_view (goal 75 / 25 ± 3) | wall per request / bare's (goal ≤ 1.05); whole run's | recorder CPU per sample |"
    echo "|---|---|---|---|---|---|---|---|"
} >> "$RUNTIMES_TABLE"
WSGI_LABEL="gunicorn $GUNICORN_VERSION \`-w 2\`, wsgi-two-views.py, CPython 3.12, a client for $WSGI_S s, one request at a time"

# The recorder goes in front of gunicorn, inside the driver: W_PREPARE runs once bench/run's
# recorder() has set REC_CMD for the tool, and moves it there. W_AFTER keeps the client's count.
wsgi_prepare() { # WORKLOAD TOOL
    rm -f "$OUT/rec/$1.$2.drive"
    W_CMD=("${PY_BIN[12]}" "$WSGI_DRIVE" --gunicorn "$GUNICORN" --app "$WSGI_APP" --seconds "$WSGI_S"
        --report "$OUT/rec/$1.$2.drive" -- "${REC_CMD[@]}")
    REC_CMD=()
}
wsgi_after() { # WORKLOAD TOOL RUN → a row of WSGI_TSV: tool, run, requests, seconds, master pid
    awk -v t="$2" -v r="$3" '{v[$1] = $2} END {printf "%s\t%s\t%s\t%s\t%s\n", t, r, v["requests"], v["seconds"], v["master"]}' \
        "$OUT/rec/$1.$2.drive" >> "$WSGI_TSV"
}
workload_gunicorn() {
    W_CMD=()
    W_PREPARE='wsgi_prepare "$w" "$tool"'
    W_AFTER='wsgi_after "$w" "$tool" "$run"'
}
wsgi_col() { # TOOL COLUMN(3 requests, 4 seconds, 6 seconds per request) → median over the runs
    awk -F'\t' -v t="$1" -v c="$2" 'NR > 1 && $1 == t && $3 > 0 {print (c == 6) ? $4 / $3 : $c}' "$WSGI_TSV" | median
}

WSGI_TOOLS=(bare flamerec-dwarf py-spy-100)
wsgi_tool_name() {
    case $1 in
        py-spy-100) echo "py-spy --native --subprocesses, 100 Hz" ;;
        *) rt_tool_name "$1" ;;
    esac
}
if [ -n "$GUNICORN_NA" ]; then
    rt_row "$WSGI_LABEL" "—" "n/a: $GUNICORN_NA" "" "" "" "" ""
else
    printf 'tool\trun\trequests\tseconds\tmaster\n' > "$WSGI_TSV"
    log "gunicorn: $GUNICORN_VERSION -w 2, wsgi-two-views.py, a client for $WSGI_S s"
    record_runs WSGI_TOOLS gunicorn
    bare_wall=$(col gunicorn bare wall_s) bare_cpu=$(col gunicorn bare cpu_s)
    bare_req=$(wsgi_col bare 3) bare_spr=$(wsgi_col bare 6)
    for tool in "${WSGI_TOOLS[@]:1}"; do
        if [ -n "$(tool_na "$tool")" ]; then
            rt_row "$WSGI_LABEL" "$(wsgi_tool_name "$tool")" "n/a: $(tool_na "$tool")" "" "" "" "" ""
            continue
        fi
        f=$(rt_file gunicorn "$tool")
        folded=$OUT/rec/gunicorn.$tool.folded
        case $tool in
            flamerec-*) "$FLAMEREC" fold --per-process "$f" 2> /dev/null > "$folded" ;;
            *) rt_folded "$tool" "$f" > "$folded" ;;
        esac
        master=$(awk '$1 == "master" {print $2}' "$OUT/rec/gunicorn.$tool.drive")
        IFS=$'\t' read -r nworkers wsamples msamples python named whole slow fast < <(python3 "$RT" workers "$folded" "$master" wsgi-two-views '<module>' slow_view fast_view)
        samples=$(col gunicorn "$tool" samples)
        req=$(wsgi_col "$tool" 3)
        per_req=$(calc "$(wsgi_col "$tool" 6) / $bare_spr")
        wall=$(calc "$(col gunicorn "$tool" wall_s) / $bare_wall")
        cpu=$(calc "($(col gunicorn "$tool" cpu_s) / $req - $bare_cpu / $bare_req) * $req / $samples * 1e6")
        cpu_cell="$(fmt %.1f "$cpu") µs"
        [[ $tool != flamerec-* ]] || cpu_cell="$cpu_cell (its own $(fmt %.1f "$(calc "$(col gunicorn "$tool" own_cpu_s) / $samples * 1e6")") µs)"
        split="n/a: neither view named"
        [ "$slow" = nan ] || split="$slow / $fast ($(calc "($slow - 75) ^ 2 <= 9" | sed 's/^1$/yes/; s/^0$/no/'))"
        rt_row "$WSGI_LABEL" "$(wsgi_tool_name "$tool")" "$((wsamples + msamples)) ($wsamples in $nworkers workers)" \
            "$(fmt %.1f%% "$python") ($(holds "$python" ">=" 97)); $(fmt %.1f%% "$named")" \
            "$(fmt %.1f%% "$whole") ($(holds "$whole" ">=" 99.5))" "$split" \
            "$(fmt %.3f "$per_req") ($(holds "$per_req" "<=" 1.05)), $(fmt %.0f "$req") requests (bare $(fmt %.0f "$bare_req")); $(fmt %.3f "$wall")" "$cpu_cell"
    done
fi
