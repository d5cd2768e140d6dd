/* Calls into the library (lib.c) for the number of iterations it is given. */
#include <stdint.h>
#include <stdlib.h>

uint64_t plt_spin(uint64_t n);

int main(int argc, char **argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], 0, 10) : 200000000ULL;
    /* Kept, so the calls are not optimized away; the exit status is 0. */
    volatile uint64_t sink = plt_spin(n);
    (void)sink;
    return 0;
}
