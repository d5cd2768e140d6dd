// A known profile for JIT tests: fa, fb and fc take 50/30/20 of the time.
// They run the same loop (which V8 optimizes) 5, 3 and 2 million times a
// round; main is never optimized (node --allow-natives-syntax), so none of
// them is inlined into it and each keeps its own frame.
function fa(n) { let s = 0; for (let i = 0; i < n; i++) s = (s + i * 3) | 0; return s; }
function fb(n) { let s = 0; for (let i = 0; i < n; i++) s = (s + i * 3) | 0; return s; }
function fc(n) { let s = 0; for (let i = 0; i < n; i++) s = (s + i * 3) | 0; return s; }
function main(rounds) {
  let t = 0;
  for (let k = 0; k < rounds; k++) t += fa(5_000_000) + fb(3_000_000) + fc(2_000_000);
  return t;
}
%NeverOptimizeFunction(main);
console.log(main(Number(process.argv[2] || 300)));
