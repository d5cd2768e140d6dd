/*
 * deep-fp: a frame-pointer program whose stacks are known by construction,
 * for the VM tests and benchmark of deferred user callchains (vm/README.md).
 *
 * Usage: deep-fp DEPTH SECONDS
 *
 * Until SECONDS have passed it runs rounds of two paths, each DEPTH + 3
 * frames deep below its caller:
 *
 *   main -> deep_run -> deep_cpu_descend x DEPTH -> deep_cpu_leaf   (CPU work)
 *   main -> deep_run -> deep_sys_descend x DEPTH -> deep_sys_leaf   (read(2) of
 *                                                  /dev/zero, 64 KiB a call)
 *
 * deep_sys_leaf makes its system calls with the `syscall` instruction itself
 * (no libc wrapper, which has no frame pointer and would hide its caller), so
 * a sample in the kernel has the whole user stack above it.
 *
 * Build: gcc -O1 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -static \
 *        -o deep-fp deep-fp.c
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static char buffer[65536];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long deep_cpu_leaf(unsigned long units)
{
	/* On the stack: gcc 12 leaves out the frame pointer of a leaf function
	 * that uses none, -mno-omit-leaf-frame-pointer or not. */
	volatile unsigned long x = sink + 1;
	for (unsigned long i = 0; i < units * 1000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
	return x;
}

__attribute__((noinline)) long deep_sys_leaf(int fd, unsigned long calls)
{
	long got = 0;
	for (unsigned long i = 0; i < calls; i++) {
		long r;
		__asm__ volatile("syscall"
				 : "=a"(r)
				 : "0"(0L /* read */), "D"((long)fd), "S"(buffer),
				   "d"(sizeof buffer)
				 : "rcx", "r11", "memory");
		got += r;
	}
	return got;
}

__attribute__((noinline)) unsigned long deep_cpu_descend(int depth, unsigned long units)
{
	if (depth <= 1)
		return deep_cpu_leaf(units) + 1;
	/* Work after the call: no tail call, every frame stays. */
	return deep_cpu_descend(depth - 1, units) + sink % 3;
}

__attribute__((noinline)) long deep_sys_descend(int depth, int fd, unsigned long calls)
{
	if (depth <= 1)
		return deep_sys_leaf(fd, calls) + 1;
	return deep_sys_descend(depth - 1, fd, calls) + (long)(sink % 3);
}

__attribute__((noinline)) unsigned long deep_run(int depth, double seconds)
{
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0) {
		perror("deep-fp: /dev/zero");
		exit(1);
	}
	unsigned long total = 0, rounds = 0;
	double end = now() + seconds;
	while (now() < end) {
		total += deep_cpu_descend(depth, 200);
		total += (unsigned long)deep_sys_descend(depth, fd, 20);
		rounds++;
	}
	close(fd);
	return rounds + (total & 1);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: deep-fp DEPTH SECONDS\n");
		return 2;
	}
	int depth = atoi(argv[1]);
	double seconds = atof(argv[2]);
	if (depth < 1 || seconds <= 0) {
		fprintf(stderr, "deep-fp: DEPTH must be at least 1 and SECONDS positive\n");
		return 2;
	}
	unsigned long rounds = deep_run(depth, seconds);
	printf("deep-fp: %lu rounds at depth %d\n", rounds, depth);
	return 0;
}
