# Sourced by bench/run. Python frames (issue 35), in the runtimes table (RUNTIMES_TABLE, printed
# after the main one): tests/programs/known-profile.py (fa, fb and fc take 50/30/20 of the time
# under a 30-deep recursion), ≈ PYK_S s of CPU, on pyenv's CPython 3.8 to 3.13 at 999 Hz:
#   - flamerec's default, py-spy 0.4.3 `record --native` at its default 100 Hz and at 999 Hz
#     (installed with pip into a venv under target/bench), each with a core free;
#   - 3.12 and 3.13 with `-X perf`: flamerec's default and perf --call-graph dwarf;
#   - 3.12 with both cores busy (two copies at once): flamerec, py-spy --subprocesses at 100 Hz;
#   - Debian sid's 3.13, 3.14 and 3.15 in its root by chroot: flamerec;
#   - tests/programs/fork-pool.py (multiprocessing fork, 2 workers) on 3.12: flamerec, py-spy.
# Figures (bench/lib/runtimes.py, last run's recording): samples; % of samples showing a frame
# of the program; % of those whole from `<module>`; fa/fb/fc among the samples in one of them;
# wall over bare (medians); recorder CPU per sample (CPU of the recorded run − the bare run's,
# over the samples; samples: median over the runs). Then: exactness (flamerec with -X perf: the
# share of samples with frame-chain frames where a trampoline naming other code was kept, alone
# and beside two busy loops),
# and a real program: pip installing five pinned wheels from a local directory, its heaviest
# Python functions under flamerec and py-spy side by side.

RUNTIMES_TABLE=$OUT/runtimes.md
: > "$RUNTIMES_TABLE"
rt_row() { # CELLS... → a row of the runtimes table
    local out="|" c
    for c in "$@"; do out="$out $c |"; done
    echo "$out" >> "$RUNTIMES_TABLE"
}
RT=$BENCH_DIR/lib/runtimes.py
PY_PROG=$ROOT/tests/programs/known-profile.py
PYK_S=2; [ $QUICK = 1 ] && PYK_S=0.5

PYSPY_VERSION=0.4.3
PYSPY=$OUT/py-spy-venv/bin/py-spy
PYSPY_NA=""
if ! "$PYSPY" --version 2> /dev/null | grep -q "$PYSPY_VERSION"; then
    "$PY" -c 'import ensurepip' 2> /dev/null || need_apt python3-venv /nonexistent
    log "installing py-spy $PYSPY_VERSION (pip, into $OUT/py-spy-venv)"
    if ! { "$PY" -m venv "$OUT/py-spy-venv" && "$OUT/py-spy-venv/bin/pip" install -q "py-spy==$PYSPY_VERSION"; } > "$OUT/py-spy-install.txt" 2>&1; then
        PYSPY_NA="pip install py-spy==$PYSPY_VERSION failed: $(tail -n1 "$OUT/py-spy-install.txt")"
        log "py-spy: $PYSPY_NA"
    fi
fi

# The tools of these rows, beside bench/run's.
eval "base_recorder() $(declare -f recorder | sed 1d)"
recorder() {
    case $1 in
        py-spy-100 | py-spy-999)
            REC_FILE=$2.txt
            REC_CMD=("$PYSPY" record --native --subprocesses -r "${1#py-spy-}" -f raw -o "$REC_FILE" --) ;;
        *) base_recorder "$@" ;;
    esac
}
eval "base_samples_of() $(declare -f samples_of | sed 1d)"
samples_of() {
    case $1 in
        py-spy-*) awk '{n += $NF} END {print n + 0}' "$2" ;;
        *) base_samples_of "$@" ;;
    esac
}
eval "base_tool_na() $(declare -f tool_na | sed 1d)"
tool_na() {
    case $1 in
        py-spy-*) echo "$PYSPY_NA" ;;
        *) base_tool_na "$@" ;;
    esac
}
rt_folded() { # TOOL RECORDING → folded text of it on stdout
    case $1 in
        py-spy-*) cat "$2" ;;
        perf-*) perf script -i "$2" 2> /dev/null | inferno-collapse-perf 2> /dev/null ;;
        flamerec-*) "$FLAMEREC" fold "$2" 2> /dev/null ;;
    esac
}
rt_file() { # WORKLOAD TOOL → the last run's recording
    recorder "$2" "$OUT/rec/$1.$2" "$FREQ"
    echo "$REC_FILE"
}
pyenv_python() { # MINOR → pyenv's python3.MINOR, or nothing
    local d
    for d in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3."$1".*; do
        [ -x "$d/bin/python3.$1" ] && { echo "$d/bin/python3.$1"; return; }
    done
}
rt_tool_name() {
    case $1 in
        flamerec-dwarf) echo "flamerec (default)" ;;
        py-spy-100) echo "py-spy --native, 100 Hz" ;;
        py-spy-999) echo "py-spy --native, 999 Hz" ;;
        perf-dwarf) echo "perf --call-graph dwarf" ;;
        *) echo "$1" ;;
    esac
}
three() { # A B C → the three shares, or why there are none
    case $1 in nan) echo "n/a: none of the three named" ;; *) echo "$1 / $2 / $3 ($(calc "($1 - 50) ^ 2 <= 4 && ($2 - 30) ^ 2 <= 4 && ($3 - 20) ^ 2 <= 4" | sed 's/^1$/yes/; s/^0$/no/'))" ;; esac
}
py_rows() { # WORKLOAD LABEL TOOLS... → one runtimes row per tool
    local w=$1 label=$2 tool f s bare wall cpu_b cpu samples; shift 2
    bare=$(col "$w" bare wall_s) cpu_b=$(col "$w" bare cpu_s)
    for tool in "$@"; do
        if [ -n "$(tool_na "$tool")" ]; then
            rt_row "$label" "$(rt_tool_name "$tool")" "n/a: $(tool_na "$tool")" "" "" "" "" ""
            continue
        fi
        f=$(rt_file "$w" "$tool")
        rt_folded "$tool" "$f" > "$OUT/rec/$w.$tool.folded"
        IFS=$'\t' read -r _ named whole _ a b c < <(python3 "$RT" shares "$OUT/rec/$w.$tool.folded" known-profile '<module>' fa fb fc)
        samples=$(col "$w" "$tool" samples)
        wall=$(calc "$(col "$w" "$tool" wall_s) / $bare")
        cpu=$(calc "($(col "$w" "$tool" cpu_s) - $cpu_b) / $samples * 1e6")
        rt_row "$label" "$(rt_tool_name "$tool")" "$samples" "$(fmt %.1f%% "$named")" \
            "$(fmt %.1f%% "$whole") ($(holds "$whole" ">=" 99.5))" "$(three "$a" "$b" "$c")" \
            "$(fmt %.3f "$wall") ($(holds "$wall" "<=" 1.05))" "$(fmt %.1f "$cpu") µs"
    done
}

{
    echo "| program, runtime, cores | tool | samples | program frames shown | whole from the entry (goal ≥ 99.5%) | shares fa / fb / fc (goal 50 / 30 / 20 ± 2) | wall / bare (goal ≤ 1.05) | recorder CPU per sample |"
    echo "|---|---|---|---|---|---|---|---|"
} >> "$RUNTIMES_TABLE"

PY_TOOLS=(bare flamerec-dwarf py-spy-100 py-spy-999)
PY_X_TOOLS=(bare flamerec-dwarf perf-dwarf)
PY_PAIR_TOOLS=(bare flamerec-dwarf py-spy-100)
PY_W=() PY_XW=()
declare -A PY_BIN=()
for m in 8 9 10 11 12 13; do
    bin=$(pyenv_python "$m")
    if [ -z "$bin" ]; then
        rt_row "known-profile.py, CPython 3.$m" "—" "n/a: no pyenv CPython 3.$m here" "" "" "" "" ""
        continue
    fi
    PY_BIN[$m]=$bin
    rounds=$(calibrate "$PYK_S" 20 "$bin" "$PY_PROG")
    eval "workload_py3$m() { W_CMD=('$bin' '$PY_PROG' $rounds); }"
    PY_W+=("py3$m")
    if [ "$m" -ge 12 ]; then
        eval "workload_py3${m}_xperf() { W_CMD=('$bin' -X perf '$PY_PROG' $rounds); }"
        PY_XW+=("py3$m-xperf")
    fi
    if [ "$m" = 12 ]; then
        eval "workload_py312_pair() { W_CMD=(sh -c '\"\$0\" \"\$1\" \"\$2\" & \"\$0\" \"\$1\" \"\$2\" & wait' '$bin' '$PY_PROG' $rounds); }"
    fi
    log "python: CPython 3.$m, known-profile.py $rounds rounds (≈ $PYK_S s)"
done
# Debian's own builds (sid's 3.13, 3.14, 3.15: PGO, stripped, the eval loop's cold part apart),
# run in the sid root (tests/rootfs/make-sid-root) by chroot: another libc, files the host's
# paths do not reach.
SID_ROOT=${FLAMEREC_SID_ROOT:-/var/cache/flamerec/sid-root}
PY_SID_W=()
PY_SID_TOOLS=(bare flamerec-dwarf)
for m in 13 14 15; do
    if [ ! -x "$SID_ROOT/usr/bin/python3.$m" ]; then
        rt_row "known-profile.py, Debian sid's CPython 3.$m (chroot)" "—" "n/a: no $SID_ROOT/usr/bin/python3.$m (tests/rootfs/make-sid-root makes it)" "" "" "" "" ""
        continue
    fi
    cp "$PY_PROG" "$SID_ROOT/tmp/known-profile.py"
    rounds=$(calibrate "$PYK_S" 20 chroot "$SID_ROOT" "/usr/bin/python3.$m" /tmp/known-profile.py)
    eval "workload_pysid3$m() { W_CMD=(chroot '$SID_ROOT' /usr/bin/python3.$m /tmp/known-profile.py $rounds); }"
    PY_SID_W+=("pysid3$m")
    log "python: Debian sid's CPython 3.$m in a chroot, known-profile.py $rounds rounds"
done
[ ${#PY_W[@]} = 0 ] || record_runs PY_TOOLS "${PY_W[@]}"
[ ${#PY_SID_W[@]} = 0 ] || record_runs PY_SID_TOOLS "${PY_SID_W[@]}"
[ ${#PY_XW[@]} = 0 ] || record_runs PY_X_TOOLS "${PY_XW[@]}"
[ -z "${PY_BIN[12]:-}" ] || record_runs PY_PAIR_TOOLS py312-pair
for w in "${PY_W[@]}"; do
    py_rows "$w" "known-profile.py, CPython 3.${w#py3}, a core free" "${PY_TOOLS[@]:1}"
done
for w in "${PY_XW[@]}"; do
    m=${w#py3}; m=${m%-xperf}
    py_rows "$w" "known-profile.py, CPython 3.$m \`-X perf\`, a core free" "${PY_X_TOOLS[@]:1}"
done
[ -z "${PY_BIN[12]:-}" ] || py_rows py312-pair "known-profile.py ×2 at once, CPython 3.12, every core busy" "${PY_PAIR_TOOLS[@]:1}"
for w in "${PY_SID_W[@]}"; do
    py_rows "$w" "known-profile.py, Debian sid's CPython 3.${w#pysid3} (chroot), a core free" "${PY_SID_TOOLS[@]:1}"
done

# Forked workers (issue 45): multiprocessing's fork start method, 2 workers on 2 cores, each task
# 60/40 in work_a and work_b. Shown: samples with a frame of the program (the parent only
# waits), whole from `<module>` (a forked worker's stack starts in its parent's), the split.
FORK_PROG=$ROOT/tests/programs/fork-pool.py
if [ -n "${PY_BIN[12]:-}" ]; then
    rounds=$(calibrate "$PYK_S" 20 "${PY_BIN[12]}" "$FORK_PROG" fork)
    eval "workload_py312_fork() { W_CMD=('${PY_BIN[12]}' '$FORK_PROG' fork $rounds); }"
    log "python: fork-pool.py fork $rounds rounds, CPython 3.12"
    FORK_TOOLS=(bare flamerec-dwarf py-spy-100)
    record_runs FORK_TOOLS py312-fork
    for tool in "${FORK_TOOLS[@]:1}"; do
        label="fork-pool.py, multiprocessing fork, 2 workers, CPython 3.12, every core busy"
        if [ -n "$(tool_na "$tool")" ]; then
            rt_row "$label" "$(rt_tool_name "$tool")" "n/a: $(tool_na "$tool")" "" "" "" "" ""
            continue
        fi
        f=$(rt_file py312-fork "$tool")
        rt_folded "$tool" "$f" > "$OUT/rec/py312-fork.$tool.folded"
        IFS=$'\t' read -r _ named whole _ a b _ < <(python3 "$RT" shares "$OUT/rec/py312-fork.$tool.folded" fork-pool '<module>' work_a work_b none)
        samples=$(col py312-fork "$tool" samples)
        wall=$(calc "$(col py312-fork "$tool" wall_s) / $(col py312-fork bare wall_s)")
        cpu=$(calc "($(col py312-fork "$tool" cpu_s) - $(col py312-fork bare cpu_s)) / $samples * 1e6")
        split="n/a: neither named"
        [ "$a" = nan ] || split="$a / $b (goal 60 / 40 ± 2: $(calc "($a - 60) ^ 2 <= 4" | sed 's/^1$/yes/; s/^0$/no/'))"
        rt_row "$label" "$(rt_tool_name "$tool")" "$samples" "$(fmt %.1f%% "$named")" \
            "$(fmt %.1f%% "$whole") ($(holds "$whole" ">=" 99.5))" "$split" \
            "$(fmt %.3f "$wall") ($(holds "$wall" "<=" 1.05))" "$(fmt %.1f "$cpu") µs"
    done
fi

# Exactness: the last -X perf recording, and one more beside two busy loops.
PY_NOTES=$OUT/runtimes-notes.md
: > "$PY_NOTES"
if [ -n "${PY_BIN[12]:-}" ]; then
    workload py312-xperf
    f=$OUT/rec/py312-xperf-busy.frec
    busy=()
    for _ in 1 2; do timeout 120 sh -c 'while :; do :; done' & busy+=($!); done
    "$FLAMEREC" record -q -F "$FREQ" -o "$f" -- "${W_CMD[@]}" > /dev/null 2>&1 || log "python: the busy -X perf recording failed"
    kill "${busy[@]}" 2> /dev/null || true
    wait "${busy[@]}" 2> /dev/null || true
    for which in alone busy; do
        g=$OUT/rec/py312-xperf.flamerec-dwarf.frec; [ $which = busy ] && g=$f
        "$FLAMEREC" fold "$g" 2> /dev/null > "$g.folded"
        read -r both differ < <(python3 "$RT" agree "$g.folded" known-profile)
        pct=$(calc "100 * $differ / $both")
        echo "- Exactness, CPython 3.12 \`-X perf\`, $which$([ $which = busy ] && echo ' (two busy loops beside it)'): of $both samples showing Python frames read from the frame chain at the sample, $differ ($(fmt %.2f%% "$pct")) still show a perf trampoline, which the recorder keeps only where it names other code than the frame it called (goal ≤ 1%: $(holds "$pct" "<=" 1))." >> "$PY_NOTES"
    done
fi

# A real program: pip installing pinned wheels from a local directory.
if [ -n "${PY_BIN[12]:-}" ] && [ -z "$PYSPY_NA" ]; then
    bin=${PY_BIN[12]}
    WHEELS=$OUT/wheels
    PIP_PKGS=(requests==2.32.3 urllib3==2.2.3 idna==3.10 certifi==2024.8.30 charset-normalizer==3.4.0)
    if [ "$(ls "$WHEELS" 2> /dev/null | wc -l)" -lt 5 ]; then
        "$bin" -m pip download -q --no-deps -d "$WHEELS" "${PIP_PKGS[@]}" > "$OUT/wheels.txt" 2>&1 || true
    fi
    if [ "$(ls "$WHEELS" 2> /dev/null | wc -l)" -ge 5 ]; then
        workload_pip_install() {
            W_PREPARE="rm -rf '$OUT/pip-target'"
            W_CMD=("${PY_BIN[12]}" -m pip install -q --disable-pip-version-check --no-index --find-links "$WHEELS" --target "$OUT/pip-target" "${PIP_PKGS[@]}")
        }
        PIP_TOOLS=(bare flamerec-dwarf py-spy-100)
        record_runs PIP_TOOLS pip-install
        for tool in flamerec-dwarf py-spy-100; do
            rt_folded "$tool" "$(rt_file pip-install "$tool")" > "$OUT/rec/pip.$tool.folded"
        done
        fs=$(python3 "$RT" shares "$OUT/rec/pip.flamerec-dwarf.folded" zz '<module>' x | cut -f1)
        ps=$(python3 "$RT" shares "$OUT/rec/pip.py-spy-100.folded" zz '<module>' x | cut -f1)
        pip_wall=$(calc "$(col pip-install flamerec-dwarf wall_s) / $(col pip-install bare wall_s)")
        pyspy_wall=$(calc "$(col pip-install py-spy-100 wall_s) / $(col pip-install bare wall_s)")
        {
            echo
            echo "A real program: \`python3.12 -m pip install --no-index --find-links DIR --target DIR\` of ${PIP_PKGS[*]} (bare $(fmt %.2f "$(col pip-install bare wall_s)") s; wall over bare flamerec $(fmt %.3f "$pip_wall"), py-spy $(fmt %.3f "$pyspy_wall")). Its heaviest Python functions, as the innermost Python frame of a sample, in % of the samples showing one (flamerec $fs samples at $FREQ Hz, py-spy $ps at 100 Hz; last run):"
            echo
            echo "| function (file) | flamerec | py-spy --native |"
            echo "|---|---|---|"
            python3 "$RT" top "$OUT/rec/pip.py-spy-100.folded" 1000 > "$OUT/rec/pip.py-spy.top"
            python3 "$RT" top "$OUT/rec/pip.flamerec-dwarf.folded" 10 | while IFS=$'\t' read -r fn pct; do
                other=$(awk -F'\t' -v f="$fn" '$1 == f {print $2}' "$OUT/rec/pip.py-spy.top")
                echo "| \`$fn\` | $pct% | ${other:-0.0}% |"
            done
        } >> "$PY_NOTES"
    else
        echo "- A real program: n/a, the wheels could not be downloaded ($(tail -n1 "$OUT/wheels.txt"))." >> "$PY_NOTES"
    fi
fi
