// A jitdump writer for the tests' programs, as a runtime's own would write
// one: jit-PID.dump in the working directory, its first page mapped
// executable (how profilers find it), code load records stamped with
// CLOCK_MONOTONIC. Included by jit-reuse.c and jitdump-agent.c, which are
// compiled with -I naming this directory.
#ifndef JITDUMP_WRITER_H
#define JITDUMP_WRITER_H

#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t jitdump_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int jitdump_write(int fd, const void *p, size_t n) {
    return write(fd, p, n) == (ssize_t)n ? 0 : -1;
}

// Creates jit-PID.dump with its header and maps its first page executable:
// the descriptor, or -1 (errno set).
static int jitdump_open(void) {
    struct {
        uint32_t magic, version, total_size, elf_mach, pad1, pid;
        uint64_t timestamp, flags;
    } h = {
        .magic = 0x4A695444,
        .version = 1,
        .total_size = sizeof h,
        .elf_mach = 62, // EM_X86_64
        .pid = (uint32_t)getpid(),
        .timestamp = jitdump_now_ns(),
    };
    char path[64];
    snprintf(path, sizeof path, "jit-%d.dump", getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0)
        return -1;
    if (jitdump_write(fd, &h, sizeof h) ||
        mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) ==
            MAP_FAILED) {
        close(fd);
        return -1;
    }
    return fd;
}

// Announces `size` bytes of code at `code` as `name` (JIT_CODE_LOAD, with
// a copy of the code): 0, or -1 when the write failed.
static int jitdump_load(int fd, const char *name, const void *code, uint64_t size) {
    static uint64_t index;
    size_t len = strlen(name) + 1;
    struct {
        uint32_t id, total_size;
        uint64_t timestamp;
        uint32_t pid, tid;
        uint64_t vma, code_addr, code_size, code_index;
    } r = {
        .id = 0,
        .total_size = (uint32_t)(sizeof r + len + size),
        .timestamp = jitdump_now_ns(),
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)syscall(SYS_gettid),
        .vma = (uint64_t)(uintptr_t)code,
        .code_addr = (uint64_t)(uintptr_t)code,
        .code_size = size,
        .code_index = index++,
    };
    return jitdump_write(fd, &r, sizeof r) || jitdump_write(fd, name, len) ||
                   jitdump_write(fd, code, (size_t)size)
               ? -1
               : 0;
}

#endif
