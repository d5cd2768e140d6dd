// Two JIT functions at one address. jit_a and jit_b are written in turn
// into the same executable page, each announced with a jitdump load
// (jit-PID.dump in the working directory, its first page mapped executable
// so that profilers find it) before it runs: run_a calls the code only
// while jit_a is loaded, run_b only while jit_b is. Naming JIT code by the
// load in force at each sample's time names every sample under run_a
// jit_a and every sample under run_b jit_b. A jitdump has no unload
// record: only the next load at an address ends the previous one.
//
// usage: jit-reuse [PHASES]   (default 24 phases of 40 ms)
#include "jitdump-writer.h"
#include <stdlib.h>

// push %rbp; mov %rsp,%rbp; mov %rdi,%rcx; 1: dec %rcx; jnz 1b; pop %rbp; ret
static const unsigned char CODE[] = {
    0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf9, 0x48, 0xff, 0xc9, 0x75, 0xfb, 0x5d, 0xc3,
};

static int dump;
static unsigned char *page;

// Writes the code at the page and announces it as `name`.
static void load(const char *name) {
    memcpy(page, CODE, sizeof CODE);
    __builtin___clear_cache((char *)page, (char *)page + sizeof CODE);
    if (jitdump_load(dump, name, page, sizeof CODE)) {
        perror("jit-reuse: writing the dump");
        exit(1);
    }
}

typedef void (*spin_fn)(uint64_t);

// Calls the code at the page for `ms` milliseconds.
static void __attribute__((noinline)) spin_for(uint64_t ms) {
    uint64_t end = jitdump_now_ns() + ms * 1000000u;
    while (jitdump_now_ns() < end)
        ((spin_fn)(void *)page)(200000);
}

static void __attribute__((noinline)) run_a(void) {
    load("jit_a");
    spin_for(40);
}

static void __attribute__((noinline)) run_b(void) {
    load("jit_b");
    spin_for(40);
}

int main(int argc, char **argv) {
    int phases = argc > 1 ? atoi(argv[1]) : 24;
    dump = jitdump_open();
    if (dump < 0) {
        perror("jit-reuse: creating the dump");
        return 1;
    }
    page = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE | PROT_EXEC,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("jit-reuse: mapping the code page");
        return 1;
    }
    for (int i = 0; i < phases; i++) {
        if (i % 2 == 0)
            run_a();
        else
            run_b();
    }
    return 0;
}
