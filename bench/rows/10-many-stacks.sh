# Sourced by bench/run. Bytes per sample, names embedded, on workloads with many distinct
# stacks (issues 13, 16; DESIGN.md: ≤ 6 B/sample), and their wall ratios:
#   json-re      python3 running a JSON- and regex-heavy script (≈ CPU_S s)
#   cargo-build  `cargo build --release --offline` of regex-syntax, copied from the local
#                registry cache; a fresh target dir each run (removed outside the timing)
# Defines MANY_TOOLS_CARGO, CARGO_NA and the recordings rec/{json-re,cargo-build}.TOOL.* that
# later rows fold.

cat > "$OUT/json_re.py" << 'PY'
# JSON and regex work over documents of random shape: N units (argv[1]). The pure-Python
# JSON encoder (indent) and compiling new patterns give many distinct stacks.
import json
import random
import re
import sys

WORDS = ["alpha", "beta", "gamma", "delta", "user@example.com", "555-1234", "true", "x y z"]
PATTERNS = [r"(\w+)@(\w+)\.com", r"\d{3}-\d{4}", r'"k(\d+)"', r"(?i)true|false|null",
            r"[aeiou]{2,}", r"\s+", r"-?\d+\.\d+(e-?\d+)?"]


def leaf(rnd):
    kind = rnd.randrange(5)
    if kind == 0:
        return rnd.random()
    if kind == 1:
        return rnd.randrange(1 << 40)
    if kind == 2:
        return " ".join(rnd.choice(WORDS) for _ in range(rnd.randrange(1, 6)))
    return [None, True, False][kind % 3]


def make(depth, rnd):
    if depth == 0:
        return leaf(rnd)
    k = rnd.randrange(1, 5)
    if rnd.random() < 0.5:
        return [make(depth - 1, rnd) for _ in range(k)]
    return {"k%d" % rnd.randrange(100): make(depth - 1, rnd) for _ in range(k)}


def scan(text, i):
    found = sum(len(re.findall(p, text)) for p in PATTERNS)
    fresh = re.compile(r'"k%d"|%s\b' % (i % 97, re.escape(WORDS[i % len(WORDS)])))
    found += len(fresh.findall(text))
    if i % 50 == 0:
        re.purge()
    return found


def unit(i):
    rnd = random.Random(i)
    doc = make(rnd.randrange(2, 7), rnd)
    text = json.dumps(doc, indent=rnd.choice([None, 2]), sort_keys=rnd.random() < 0.5)
    back = json.loads(text)
    return scan(text, i) + len(json.dumps(back))


total = 0
for i in range(int(sys.argv[1])):
    total += unit(i)
PY
JSON_N=$(calibrate "$CPU_S" 300 "$PY" "$OUT/json_re.py")
workload_json_re() { W_CMD=("$PY" "$OUT/json_re.py" "$JSON_N"); }

# The crate: the newest regex-syntax 0.8 in the registry cache (no dependencies but an
# optional one, removed here so the offline build resolves), made its own workspace.
CARGO_NA=""
CRATE_SRC=$(ls -d "$HOME"/.cargo/registry/src/*/regex-syntax-0.8.* 2> /dev/null | sort -V | tail -n1 || true)
CRATE=$OUT/crate
if [ -z "$CRATE_SRC" ]; then
    CARGO_NA="no regex-syntax-0.8.* in ~/.cargo/registry/src (a \`cargo fetch\` of flamerec puts it there)"
else
    rm -rf "$CRATE" && cp -r "$CRATE_SRC" "$CRATE" && rm -f "$CRATE/Cargo.lock"
    sed -i '/^arbitrary = \["dep:arbitrary"\]$/d; /^\[dependencies.arbitrary\]$/,/^$/d' "$CRATE/Cargo.toml"
    printf '\n[workspace]\n' >> "$CRATE/Cargo.toml"
    cargo generate-lockfile --offline --quiet --manifest-path "$CRATE/Cargo.toml" 2> "$OUT/crate.err" ||
        CARGO_NA="cargo cannot resolve $(basename "$CRATE_SRC") offline: $(head -n1 "$OUT/crate.err")"
fi
CRATE_NAME=$(basename "${CRATE_SRC:-none}")
workload_cargo_build() {
    # The caller's job count, flags and target dir would change what is built: cleared.
    W_CMD=(env -u CARGO_BUILD_JOBS -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS CARGO_TARGET_DIR="$OUT/crate-target"
        cargo build --release --offline --quiet --manifest-path "$CRATE/Cargo.toml")
    W_PREPARE='rm -rf "$OUT/crate-target"'
}

MANY_TOOLS_PY=("${TOOLS[@]}")
MANY_TOOLS_CARGO=(bare perf-fp perf-dwarf flamerec-fp flamerec-dwarf)
log "many stacks: json-re (python3 json_re.py $JSON_N)${CARGO_NA:+; cargo build n/a: $CARGO_NA}${CARGO_NA:-, cargo build --release of $CRATE_NAME}"
record_runs MANY_TOOLS_PY json-re
[ -n "$CARGO_NA" ] || record_runs MANY_TOOLS_CARGO cargo-build

many_cells() { # WORKLOAD → R[] wall ratios and B[] bytes per sample of each recorder
    local w=$1 tool bare
    bare=$(col "$w" bare wall_s)
    R=() B=()
    for tool in perf-fp perf-dwarf samply flamerec-fp flamerec-dwarf; do
        if [ -n "$(tool_na "$tool")" ] || { [ "$w" = cargo-build ] && [ "$tool" = samply ]; }; then
            R[$tool]=n/a B[$tool]=n/a
        else
            R[$tool]=$(calc "$(col "$w" "$tool" wall_s) / $bare") B[$tool]=$(bps "$w" "$tool")
        fi
    done
    MANY_BARE=$bare
}
declare -A R B
for w in json-re cargo-build; do
    if [ $w = cargo-build ] && [ -n "$CARGO_NA" ]; then
        row "bytes per sample, names embedded, cargo build" n/a n/a n/a n/a n/a "n/a: $CARGO_NA" "≤ 6" "n/a"
        continue
    fi
    many_cells $w
    label="python3 json_re.py (JSON and regex heavy)"
    [ $w = cargo-build ] && label="\`cargo build --release --offline\` of $CRATE_NAME, samply not run"
    row "bytes per sample, kernel stacks and embedded names included, many stacks: $label" \
        "$(fmt %.1f "${B[perf-fp]}")" "$(fmt %.0f "${B[perf-dwarf]}")" "$(fmt %.1f "${B[samply]}")" \
        "$(fmt %.2f "${B[flamerec-fp]}")" "$(fmt %.2f "${B[flamerec-dwarf]}")" \
        "perf dwarf / flamerec dwarf $(fmt %.0f× "$(calc "${B[perf-dwarf]} / ${B[flamerec-dwarf]}")")" "≤ 6" \
        "fp $(holds "${B[flamerec-fp]}" "<=" 6), dwarf $(dwarf_holds "${B[flamerec-dwarf]}" "<=" 6)"
    budget=1.02 free="a core free"
    [ $w = cargo-build ] && budget=1.03 free="every core busy"
    row "wall of \`record -- W\` / wall of W, names embedded, $label (W $(fmt %.2f "$MANY_BARE") s, $FREQ Hz, $free)" \
        "$(fmt %.3f "${R[perf-fp]}")" "$(fmt %.3f "${R[perf-dwarf]}")" "$(fmt %.3f "${R[samply]}")" \
        "$(fmt %.3f "${R[flamerec-fp]}")" "$(fmt %.3f "${R[flamerec-dwarf]}")" \
        "fp $(fmt %.3f "${R[flamerec-fp]}"), dwarf $(fmt %.3f "${R[flamerec-dwarf]}")" "≤ $budget" \
        "fp $(holds "${R[flamerec-fp]}" "<=" $budget), dwarf $(dwarf_holds "${R[flamerec-dwarf]}" "<=" $budget)"
done
