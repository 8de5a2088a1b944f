/* nearfaas memory shim (issue 18, Porter's allocation interception): an LD_PRELOAD library
 * that logs a function worker's large allocations with a call-stack hash that is the same on
 * every run, whatever ASLR does.
 *
 * Why: Porter's tuner joins an access heat map (addresses) with the allocations that own those
 * addresses, and keys its hints by *who allocated* (the call stack) rather than by address or
 * size, so a hint learned on one input still applies when the next input is twice as large.
 *
 * What is logged (one line per event, written with write(2) to $NEARFAAS_MEMSHIM_LOG):
 *     <t_ns> <op> <size> <addr> <stack>
 *   t_ns   CLOCK_MONOTONIC nanoseconds
 *   op     malloc calloc realloc free mmap munmap brk sbrk
 *   size   bytes (for free/munmap: the block's usable size / the length)
 *   addr   hex address of the block (for realloc: the new one; the old is logged as a free)
 *   stack  16 hex digits: FNV-1a over each caller frame's (module basename, offset into the
 *          module); the offset from the module's load base does not move under ASLR, a raw
 *          return address does. Frames inside this library are skipped.
 * malloc/calloc/realloc/free are logged at or above $NEARFAAS_MEMSHIM_THRESHOLD bytes (default
 * 131072, glibc's mmap threshold: the blocks that own whole pages); mmap/munmap/brk/sbrk called
 * by the program always are. The log stops at $NEARFAAS_MEMSHIM_MAX_BYTES (default 64 MiB; a
 * long-lived worker sampling every few milliseconds must not fill the node's disk), with one
 * last line "0 full 0 0x0 0000000000000000" saying so.
 *
 * Placement (Porter's engine: each block's tier from the function's hint file, migration from
 * the access sample) lives in placement.c. Sampling (Porter's access profiler, without a PMU)
 * lives in sampler.c: with
 * $NEARFAAS_MEMSHIM_SAMPLE_MS > 0 every logged block is watched, and "touch" (written) and
 * "access" (read or written) lines join the log, each carrying the stack of its block.
 *
 * Known caveats:
 * - glibc's malloc calls its internal mmap/brk, which no preload can see: those blocks are
 *   logged as the malloc that caused them, which is what the tuner wants.
 * - backtrace() allocates on its first call (it loads libgcc_s): a thread-local guard makes any
 *   allocation made while the shim is working pass through unlogged; the constructor primes it.
 * - A program that calls the raw syscall (syscall(SYS_mmap, …)) is not seen.
 * - No log path, or one that cannot be opened: the shim forwards everything and logs nothing
 *   (and says so once on stderr), so a broken profile never breaks the function.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memshim.h"

#define MAX_FRAMES 24

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static int log_fd = -1;
static unsigned long long max_log_bytes = 64ULL << 20;
static unsigned long long log_bytes;  /* written so far (approximate under threads: a cap, not an account) */
static int log_full;
static size_t threshold = 131072;
__thread int busy;

void *(*next_mmap)(void *, size_t, int, int, int, off_t);
int (*next_munmap)(void *, size_t);
static int (*next_brk)(void *);
static void *(*next_sbrk)(intptr_t);

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* A frame's digest (its module's basename and its offset into the module), cached by return
 * address: dladdr costs microseconds, and the same call sites allocate again and again. A
 * direct-mapped cache; a collision only costs a fresh dladdr. */
#define FRAME_CACHE 4096
static struct {
    void *addr;
    uint64_t digest;
} frame_cache[FRAME_CACHE];
static pthread_mutex_t frame_lock = PTHREAD_MUTEX_INITIALIZER;
static void *self_base;

static uint64_t frame_digest(void *addr) {
    size_t slot = ((uintptr_t)addr >> 4) % FRAME_CACHE;
    pthread_mutex_lock(&frame_lock);
    if (frame_cache[slot].addr == addr) {
        uint64_t d = frame_cache[slot].digest;
        pthread_mutex_unlock(&frame_lock);
        return d;
    }
    pthread_mutex_unlock(&frame_lock);
    Dl_info info;
    uint64_t d;
    if (!dladdr(addr, &info) || !info.dli_fname) {
        d = fnv(1469598103934665603ULL, "?", 1);
    } else if (info.dli_fbase == self_base) {
        d = 0;  /* our own frames: skipped */
    } else {
        const char *base = strrchr(info.dli_fname, '/');
        base = base ? base + 1 : info.dli_fname;
        /* the main program may be named "" by dladdr: all that matters is that it is stable */
        uint64_t off = (uint64_t)((char *)addr - (char *)info.dli_fbase);
        d = fnv(fnv(1469598103934665603ULL, base, strlen(base)), &off, sizeof off);
    }
    pthread_mutex_lock(&frame_lock);
    frame_cache[slot].addr = addr;
    frame_cache[slot].digest = d;
    pthread_mutex_unlock(&frame_lock);
    return d;
}

static uint64_t stack_hash(void) {
    void *frames[MAX_FRAMES];
    int n = backtrace(frames, MAX_FRAMES);
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < n; i++) {
        uint64_t d = frame_digest(frames[i]);
        if (d)
            h = fnv(h, &d, sizeof d);
    }
    return h;
}

static void put_u64(char **p, uint64_t v, int hex, int width) {
    char tmp[24];
    int n = 0;
    do {
        unsigned d = (unsigned)(hex ? v % 16 : v % 10);
        tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        v = hex ? v / 16 : v / 10;
    } while (v);
    while (n < width)
        tmp[n++] = '0';
    while (n)
        *(*p)++ = tmp[--n];
}

/* Formats without printf (which may allocate) and writes one line in one write(2): lines from
 * several threads never interleave (O_APPEND, under PIPE_BUF bytes). */

static void emit(const char *op, size_t size, const void *addr) {
    if (log_fd < 0)
        return;
    busy = 1;
    uint64_t h = stack_hash();
    emit_line(op, size, addr, h);
    int block = strcmp(op, "free") != 0 && strcmp(op, "munmap") != 0 && strcmp(op, "brk") != 0
                && strcmp(op, "sbrk") != 0;
    if (block && sampler_on())
        track((uint64_t)(uintptr_t)addr, size, h);
    if (block && placement_on())
        place((uint64_t)(uintptr_t)addr, size, h);
    busy = 0;
}

void emit_line(const char *op, size_t size, const void *addr, uint64_t stack) {
    int saved = errno;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[160], *p = line;
    put_u64(&p, (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec, 0, 0);
    *p++ = ' ';
    size_t n = strlen(op);
    memcpy(p, op, n);
    p += n;
    *p++ = ' ';
    put_u64(&p, size, 0, 0);
    *p++ = ' ';
    *p++ = '0';
    *p++ = 'x';
    put_u64(&p, (uint64_t)(uintptr_t)addr, 1, 0);
    *p++ = ' ';
    put_u64(&p, stack, 1, 16);
    *p++ = '\n';
    size_t n_line = (size_t)(p - line);
    if (log_full || __atomic_add_fetch(&log_bytes, n_line, __ATOMIC_RELAXED) > max_log_bytes) {
        if (!__atomic_exchange_n(&log_full, 1, __ATOMIC_RELAXED)) {
            static const char full[] = "0 full 0 0x0 0000000000000000\n";
            ssize_t unused = write(log_fd, full, sizeof full - 1);
            (void)unused;
        }
        errno = saved;
        return;
    }
    ssize_t unused = write(log_fd, line, n_line);
    (void)unused;
    errno = saved;
}

__attribute__((destructor)) static void memshim_fini(void) {
    busy = 1;
    sampler_last_scan();  /* the last period's writes */
}

/* fork(): the child must not inherit the frame cache's lock held by a thread it does not have. */
static void lock_frames(void) { pthread_mutex_lock(&frame_lock); }
static void unlock_frames(void) { pthread_mutex_unlock(&frame_lock); }

__attribute__((constructor)) static void memshim_init(void) {
    busy = 1;
    pthread_atfork(lock_frames, unlock_frames, unlock_frames);
    next_mmap = dlsym(RTLD_NEXT, "mmap");
    next_munmap = dlsym(RTLD_NEXT, "munmap");
    next_brk = dlsym(RTLD_NEXT, "brk");
    next_sbrk = dlsym(RTLD_NEXT, "sbrk");
    const char *t = getenv("NEARFAAS_MEMSHIM_THRESHOLD");
    if (t && *t)
        threshold = (size_t)strtoull(t, NULL, 10);
    const char *cap = getenv("NEARFAAS_MEMSHIM_MAX_BYTES");
    if (cap && *cap)
        max_log_bytes = strtoull(cap, NULL, 10);
    void *prime[2];
    backtrace(prime, 2);  /* loads libgcc_s now, not inside the first logged allocation */
    Dl_info self;
    if (dladdr((void *)stack_hash, &self))
        self_base = self.dli_fbase;
    const char *path = getenv("NEARFAAS_MEMSHIM_LOG");
    if (path && *path) {
        log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log_fd < 0)
            fprintf(stderr, "nearfaas memshim: cannot open NEARFAAS_MEMSHIM_LOG=%s: %s; not logging\n", path,
                    strerror(errno));
    } else {
        fprintf(stderr, "nearfaas memshim: NEARFAAS_MEMSHIM_LOG is not set; not logging\n");
    }
    if (log_fd >= 0)
        placement_init();
    const char *ms = getenv("NEARFAAS_MEMSHIM_SAMPLE_MS");
    long sample_ms = ms && *ms ? strtol(ms, NULL, 10) : 0;
    if (log_fd >= 0 && sample_ms > 0 && sampler_prepare(sample_ms) == 0) {
        const char *defer = getenv("NEARFAAS_MEMSHIM_DEFER");
        if (!(defer && *defer == '1'))
            nearfaas_memshim_start();
    }
    busy = 0;
}

void *malloc(size_t size) {
    void *p = __libc_malloc(size);
    if (!busy && p && size >= threshold)
        emit("malloc", size, p);
    return p;
}

void *calloc(size_t n, size_t size) {
    void *p = __libc_calloc(n, size);
    if (!busy && p && n && size && n * size / n == size && n * size >= threshold)
        emit("calloc", n * size, p);
    return p;
}

void *realloc(void *old, size_t size) {
    size_t old_size = old ? malloc_usable_size(old) : 0;
    if (old && old_size >= threshold && !busy) {
        untrack((uint64_t)(uintptr_t)old);
        unplace((uint64_t)(uintptr_t)old);
    }
    void *p = __libc_realloc(old, size);
    if (busy || !p)
        return p;
    if (old && old_size >= threshold)
        emit("free", old_size, old);
    if (size >= threshold)
        emit("realloc", size, p);
    return p;
}

void free(void *p) {
    if (p && !busy) {
        size_t n = malloc_usable_size(p);
        if (n >= threshold) {
            untrack((uint64_t)(uintptr_t)p);
            unplace((uint64_t)(uintptr_t)p);
            emit("free", n, p);
        }
    }
    __libc_free(p);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (!next_mmap)
        next_mmap = dlsym(RTLD_NEXT, "mmap");
    void *p = next_mmap(addr, len, prot, flags, fd, off);
    if (!busy && p != MAP_FAILED)
        emit("mmap", len, p);
    return p;
}

int munmap(void *addr, size_t len) {
    if (!next_munmap)
        next_munmap = dlsym(RTLD_NEXT, "munmap");
    if (!busy) {
        untrack((uint64_t)(uintptr_t)addr);
        unplace((uint64_t)(uintptr_t)addr);
    }
    int r = next_munmap(addr, len);
    if (!busy && r == 0)
        emit("munmap", len, addr);
    return r;
}

int brk(void *end) {
    if (!next_brk)
        next_brk = dlsym(RTLD_NEXT, "brk");
    void *before = next_sbrk ? next_sbrk(0) : NULL;
    int r = next_brk(end);
    if (!busy && r == 0 && before)
        emit("brk", (size_t)((char *)end - (char *)before), before);
    return r;
}

void *sbrk(intptr_t inc) {
    if (!next_sbrk)
        next_sbrk = dlsym(RTLD_NEXT, "sbrk");
    void *p = next_sbrk(inc);
    if (!busy && p != (void *)-1 && inc)
        emit("sbrk", (size_t)(inc < 0 ? -inc : inc), p);
    return p;
}
