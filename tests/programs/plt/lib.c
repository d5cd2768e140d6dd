/* A shared library that calls its own exported function through its PLT:
 * built with -fPIC and without -fvisibility or -Bsymbolic, the call from
 * plt_spin to plt_step may be interposed, so it goes through plt_step@plt.
 * plt_step is tiny, so a good part of the samples land in the stub itself. */
#include <stdint.h>

__attribute__((noinline)) uint64_t plt_step(uint64_t x) {
    return x + 1;
}

__attribute__((noinline)) uint64_t plt_spin(uint64_t n) {
    uint64_t x = 1;
    for (uint64_t i = 0; i < n; i++)
        x = plt_step(x);
    return x;
}
