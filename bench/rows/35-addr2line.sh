# Sourced by bench/run after 30-cold-fold.sh (its frame-pointer build of flamerec, .debug_info
# ≈ 18 MB, is the binary). Naming throughput, cold, inlined functions included (issue 23):
# distinct code addresses per second named by flamerec's symbolizer (the example
# `name_offsets`, on one thread, no symbol cache: what a cold fold does per distinct frame)
# and by binutils' `addr2line -f -i` on the same addresses. The addresses: the middle byte of
# every sized function in the binary's symbol table, so most fall in inlined code. Both count
# the same names (an inlined frame is one each); the row says so when they differ.

need_apt binutils addr2line
NAME_OFFSETS=$TARGET/release/examples/name_offsets
(cd "$ROOT" && cargo build --release --quiet -p flamerec-symbolize --example name_offsets) ||
    die "building the name_offsets example failed"

read -r text_vma text_off < <(objdump -h "$FP_FLAMEREC" | awk '$2 == ".text" {print $4, $6}')
nm --defined-only -S "$FP_FLAMEREC" | awk 'NF >= 4 && $3 ~ /^[tT]$/ {print $1, $2}' |
    awk -v vma=$((16#$text_vma)) -v off=$((16#$text_off)) \
        -v va="$OUT/a2l.vaddr" -v fo="$OUT/a2l.offset" '
        function hex(s,  i, n, c) { n = 0; s = tolower(s)
            for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; n = n * 16 + c }
            return n }
        { a = hex($1); s = hex($2); if (s == 0) next; v = a + int(s / 2)
          printf "%x\n", v > va; printf "%x\n", v - vma + off > fo }'
A2L_N=$(wc -l < "$OUT/a2l.vaddr")
log "naming throughput: $A2L_N addresses in $FP_FLAMEREC, flamerec (one thread) against addr2line -f -i"
a2l_names=$(addr2line -f -i -e "$FP_FLAMEREC" < "$OUT/a2l.vaddr" | wc -l)
a2l_names=$((a2l_names / 2))
fr_names=$(RAYON_NUM_THREADS=1 "$NAME_OFFSETS" "$FP_FLAMEREC" < "$OUT/a2l.offset" | awk '{print $2}')
declare -a A2L_S FR_S
for run in $(seq 1 "$RUNS"); do
    A2L_S+=("$(timed "$OUT/mem" sh -c "addr2line -f -i -e '$FP_FLAMEREC' < '$OUT/a2l.vaddr'")")
    FR_S+=("$(timed "$OUT/mem" env RAYON_NUM_THREADS=1 sh -c "'$NAME_OFFSETS' '$FP_FLAMEREC' < '$OUT/a2l.offset'")")
    log "run $run naming $A2L_N addresses: addr2line ${A2L_S[-1]} s, flamerec ${FR_S[-1]} s"
done
a2l_s=$(printf '%s\n' "${A2L_S[@]}" | median) fr_s=$(printf '%s\n' "${FR_S[@]}" | median)
a2l_rate=$(calc "$A2L_N / $a2l_s") fr_rate=$(calc "$A2L_N / $fr_s")
same=""; [ "$a2l_names" = "$fr_names" ] || same=", names differ: addr2line $a2l_names, flamerec $fr_names"
row "addresses named per second, cold, with inlines (one thread, process start and reading the binary included): flamerec's symbolizer vs binutils \`addr2line -f -i\` ($(fmt %.0f "$a2l_rate")/s, $(fmt %.2f "$a2l_s") s) on $A2L_N function midpoints of flamerec built with frame pointers ($fr_names names$same)" \
    — — — "$(fmt %.0f "$fr_rate")/s ($(fmt %.3f "$fr_s") s)" — "$(fmt %.1f× "$(calc "$fr_rate / $a2l_rate")") addr2line's" — —
