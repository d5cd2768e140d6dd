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
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// push %rbp; mov %rsp,%rbp; mov %rdi,%rcx; 1: dec %rcx; jnz 1b; pop %rbp; ret
static const unsigned char CODE[] = {
    0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf9, 0x48, 0xff, 0xc9, 0x75, 0xfb, 0x5d, 0xc3,
};

struct header {
    uint32_t magic, version, total_size, elf_mach, pad1, pid;
    uint64_t timestamp, flags;
};

struct load {
    uint32_t id, total_size;
    uint64_t timestamp;
    uint32_t pid, tid;
    uint64_t vma, code_addr, code_size, code_index;
};

static int dump;
static unsigned char *page;
static uint64_t index_;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void write_all(const void *p, size_t n) {
    if (write(dump, p, n) != (ssize_t)n) {
        perror("jit-reuse: writing the dump");
        exit(1);
    }
}

// Writes the code at the page and announces it as `name`.
static void load(const char *name) {
    memcpy(page, CODE, sizeof CODE);
    __builtin___clear_cache((char *)page, (char *)page + sizeof CODE);
    struct load r = {
        .id = 0,
        .total_size = (uint32_t)(sizeof r + strlen(name) + 1 + sizeof CODE),
        .timestamp = now_ns(),
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)syscall(SYS_gettid),
        .vma = (uint64_t)(uintptr_t)page,
        .code_addr = (uint64_t)(uintptr_t)page,
        .code_size = sizeof CODE,
        .code_index = index_++,
    };
    write_all(&r, sizeof r);
    write_all(name, strlen(name) + 1);
    write_all(CODE, sizeof CODE);
}

typedef void (*spin_fn)(uint64_t);

// Calls the code at the page for `ms` milliseconds.
static void __attribute__((noinline)) spin_for(uint64_t ms) {
    uint64_t end = now_ns() + ms * 1000000u;
    while (now_ns() < end)
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
    char path[64];
    snprintf(path, sizeof path, "jit-%d.dump", getpid());
    dump = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (dump < 0) {
        perror("jit-reuse: creating the dump");
        return 1;
    }
    struct header h = {
        .magic = 0x4A695444,
        .version = 1,
        .total_size = sizeof h,
        .elf_mach = 62, // EM_X86_64
        .pid = (uint32_t)getpid(),
        .timestamp = now_ns(),
        .flags = 0,
    };
    write_all(&h, sizeof h);
    // The marker profilers look for: the dump mapped executable.
    if (mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC, MAP_PRIVATE, dump, 0) ==
        MAP_FAILED) {
        perror("jit-reuse: mapping the dump");
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
