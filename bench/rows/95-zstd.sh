# Sourced by bench/run. What each zstd level costs on the recorder's own chunks (issue 22): the
# chunks of the last flamerec dwarf recordings of python3 and of the cargo build, decompressed
# and compressed again at each level (`format/examples/levels.rs`, least of three passes),
# bytes against nanoseconds of compression per sample. The recorder writes at level 3
# (`flamerec_format::DEFAULT_LEVEL`); until issue 22 it wrote at 19.

(cd "$ROOT" && cargo build --release --quiet -p flamerec-format --example levels)
for w in python3 cargo-build; do
    f=$OUT/rec/$w.flamerec-dwarf.frec
    [ -f "$f" ] || continue
    n=$(samples_of flamerec-dwarf "$f")
    "$TARGET/release/examples/levels" "$f" > "$OUT/zstd-$w.txt"
    raw=$(awk '/^chunks/ {print $4}' "$OUT/zstd-$w.txt")
    cells=$(awk -v n="$n" -v raw="$raw" '$1 == "level" && ($2 == 1 || $2 == 3 || $2 == 6 || $2 == 9 || $2 == 19) {
        printf "%sL%s %.2f B/sample, %.2f µs/sample", sep, $2, $4 / n, $6 * raw / n / 1000; sep = "; "}' "$OUT/zstd-$w.txt")
    l3=$(awk -v n="$n" -v raw="$raw" '$1 == "level" && $2 == 3 {print $6 * raw / n / 1000}' "$OUT/zstd-$w.txt")
    row "zstd level vs compression CPU per sample, flamerec dwarf recording of $w (chunks recompressed)" — — — — \
        "$cells" "level 3: $(fmt %.2f "$l3") µs/sample" "a small share of ≤ 3 µs" "$(holds "$l3" "<=" 0.5)"
done
