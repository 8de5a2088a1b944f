/* What the shim's two halves share: memshim.c intercepts allocations and writes the log,
 * sampler.c watches the logged blocks' pages (writes and accesses) from a thread of its own. */
#ifndef NEARFAAS_MEMSHIM_H
#define NEARFAAS_MEMSHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PAGE 4096UL

/* Set while the shim itself is working on this thread: allocations pass through unlogged. */
extern __thread int busy;

/* The next mmap/munmap in the lookup order (the C library's): the sampler's own mappings are
 * not the program's and are never logged. */
extern void *(*next_mmap)(void *, size_t, int, int, int, off_t);
extern int (*next_munmap)(void *, size_t);

/* One log line, "<t_ns> <op> <size> <addr> <stack>", in one write(2). */
void emit_line(const char *op, size_t size, const void *addr, uint64_t stack);

/* sampler.c: set up from the constructor while the process may still make a userfaultfd
 * (0: sampling; -1: not, said on stderr), then watch blocks as they come and go. */
int sampler_prepare(long period_ms);
int sampler_on(void);
void track(uint64_t addr, size_t size, uint64_t stack);
void untrack(uint64_t addr);
void sampler_last_scan(void);
/* placement.c: the tier of each allocation, from the hint file, and migration from the
 * sampler's access counts. */
void placement_init(void);
int placement_on(void);
void place(uint64_t addr, size_t size, uint64_t stack);
void unplace(uint64_t addr);
void placement_heat(uint64_t addr, uint64_t pages, int accessed);
void placement_review(void);

/* Exported: starts the sampling thread (see sampler.c). */
int nearfaas_memshim_start(void);

#endif
