// A known profile for JIT tests: fa, fb and fc take 50/30/20 of the time
// (the same loop run 5, 3 and 2 million times a round); the tests run it
// with -XX:CompileCommand=dontinline,KnownProfile::* so each keeps its own
// frame once compiled.
public class KnownProfile {
    static int fa(int n) { int s = 0; for (int i = 0; i < n; i++) s = (s + i * 3) ^ (s >>> 3); return s; }
    static int fb(int n) { int s = 0; for (int i = 0; i < n; i++) s = (s + i * 3) ^ (s >>> 3); return s; }
    static int fc(int n) { int s = 0; for (int i = 0; i < n; i++) s = (s + i * 3) ^ (s >>> 3); return s; }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 300;
        long t = 0;
        for (int k = 0; k < rounds; k++) t += fa(5_000_000) + fb(3_000_000) + fc(2_000_000);
        System.out.println(t);
    }
}
