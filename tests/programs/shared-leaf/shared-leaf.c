/* Four callers that spend all their time in one shared leaf, `work`:
 * parse_input 49%, compute_hash 29%, render 20%, log_message 2% of the
 * work units (issue 39). Built by tests/diff.rs with gcc -O2 -g
 * -fno-omit-frame-pointer -fno-optimize-sibling-calls, so every sample's
 * stack reads main → caller → work.
 *
 *   shared-leaf ROUNDS HASH_PCT
 *
 * runs ROUNDS rounds (default 7000, ≈ 1 s); compute_hash does HASH_PCT
 * percent of its work (default 100: 120 is the 20% slower caller). Each
 * round calls the four in a pseudo-random rotation, so a sampling clock
 * cannot alias with the rounds' period. */
#include <stdint.h>
#include <stdlib.h>

#define UNIT 1000

static volatile uint64_t sink;

/* A call now and then: gcc 12 leaves the frame pointer out of a leaf
 * function even with -fno-omit-frame-pointer, and a sample in a frameless
 * leaf loses its caller, which is all this program is about. */
__attribute__((noinline)) void tick(void) { __asm__ volatile(""); }

__attribute__((noinline)) uint64_t work(uint64_t x, long n) {
    for (long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ((i & 0xffff) == 0)
            tick();
    }
    return x;
}

__attribute__((noinline)) uint64_t parse_input(uint64_t x, long n) { return work(x, n) + 1; }
__attribute__((noinline)) uint64_t compute_hash(uint64_t x, long n) { return work(x, n) + 2; }
__attribute__((noinline)) uint64_t render(uint64_t x, long n) { return work(x, n) + 3; }
__attribute__((noinline)) uint64_t log_message(uint64_t x, long n) { return work(x, n) + 4; }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 7000;
    long hash_pct = argc > 2 ? atol(argv[2]) : 100;
    uint64_t x = 1, rng = 88172645463325252ull;
    for (long r = 0; r < rounds; r++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        for (int k = 0; k < 4; k++) {
            switch ((rng + k) % 4) {
            case 0: x = parse_input(x, 49 * UNIT); break;
            case 1: x = compute_hash(x, 29 * UNIT * hash_pct / 100); break;
            case 2: x = render(x, 20 * UNIT); break;
            default: x = log_message(x, 2 * UNIT); break;
            }
        }
    }
    sink = x; /* the work is used, and the exit status is 0 */
    return 0;
}
