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
 * Write sampling (Porter's access profiler, without a PMU): with $NEARFAAS_MEMSHIM_SAMPLE_MS > 0
 * every logged block is registered with a userfaultfd in asynchronous write-protect mode, and
 * a thread of the shim asks the kernel every period which of its pages were written since the
 * last ask (PAGEMAP_SCAN on /proc/self/pagemap, which re-protects them in the same call). Each
 * run of written pages becomes a line
 *     <t_ns> touch <bytes> <addr> <stack of the block it lies in>
 * so the heat map comes already joined with the allocation that owns it. No signal handler and
 * no mprotect: the kernel resolves the write faults itself (a minor fault per page per period),
 * and a system call writing into a sampled page works as before. Needs Linux >= 6.7; where the
 * kernel refuses, the shim says so once on stderr and logs allocations only.
 *
 * Known caveats:
 * - Reads are not seen: this kernel offers no young-bit or idle-page interface (docs/memory.md),
 *   so "hot" here means written. A block only ever read looks cold.
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
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
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

#define MAX_FRAMES 24
#define MAX_BLOCKS 4096
#define PAGE 4096UL

/* The kernel ABI of PAGEMAP_SCAN and asynchronous userfaultfd write-protect (Linux 6.7), which
 * this system's headers predate. */
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region {
    uint64_t start, end, categories;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PM_SCAN_WP_MATCHING (1UL << 0)
#define PM_SCAN_CHECK_WPASYNC (1UL << 1)
#define PAGE_IS_WRITTEN (1UL << 1)
#define PAGE_IS_PRESENT (1UL << 3)
#define PAGE_IS_PFNZERO (1UL << 5)
#define FEATURE_WP_UNPOPULATED (1ULL << 13)
#define FEATURE_WP_ASYNC (1ULL << 15)

struct block {
    uint64_t start, end;  /* whole pages inside the block */
    uint64_t stack;
};

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static int log_fd = -1;
static unsigned long long max_log_bytes = 64ULL << 20;
static unsigned long long log_bytes;  /* written so far (approximate under threads: a cap, not an account) */
static int log_full;
static int uffd = -1, pagemap_fd = -1;
static long sample_ms;
static struct block blocks[MAX_BLOCKS];
static int nblocks;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t threshold = 131072;
static __thread int busy;  /* inside the shim on this thread: pass everything through */

static void *(*next_mmap)(void *, size_t, int, int, int, off_t);
static int (*next_munmap)(void *, size_t);
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
static void emit_line(const char *op, size_t size, const void *addr, uint64_t stack);
static void track(uint64_t addr, size_t size, uint64_t stack);

static void emit(const char *op, size_t size, const void *addr) {
    if (log_fd < 0)
        return;
    busy = 1;
    uint64_t h = stack_hash();
    emit_line(op, size, addr, h);
    if (uffd >= 0 && strcmp(op, "free") != 0 && strcmp(op, "munmap") != 0 && strcmp(op, "brk") != 0
        && strcmp(op, "sbrk") != 0)
        track((uint64_t)(uintptr_t)addr, size, h);
    busy = 0;
}

static void emit_line(const char *op, size_t size, const void *addr, uint64_t stack) {
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

/* Register a new block's whole pages for write sampling. They are not write-protected yet: a
 * page the program touches becomes present without protection, the next scan reports it as
 * written (present and unprotected) and protects it in the same call; a page never touched is
 * not present and never reported. So a block's first writes cost no faults, a temporary freed
 * within one period costs none at all, and each later period costs one minor fault per page
 * written in it. */
static void track(uint64_t addr, size_t size, uint64_t stack) {
    uint64_t start = (addr + PAGE - 1) & ~(PAGE - 1), end = (addr + size) & ~(PAGE - 1);
    if (end <= start)
        return;
    struct uffdio_register reg = {.range = {start, end - start}, .mode = UFFDIO_REGISTER_MODE_WP};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg))
        return;  /* not anonymous memory, or already registered: not sampled */
    pthread_mutex_lock(&blocks_lock);
    if (nblocks < MAX_BLOCKS)
        blocks[nblocks++] = (struct block){start, end, stack};
    pthread_mutex_unlock(&blocks_lock);
}

/* Forget the block that holds addr (before it is freed, so no scan reads a reused range). */
static void untrack(uint64_t addr) {
    if (uffd < 0)
        return;
    pthread_mutex_lock(&blocks_lock);
    for (int i = 0; i < nblocks; i++) {
        if (addr <= blocks[i].start + PAGE && blocks[i].start < addr + PAGE) {
            blocks[i] = blocks[--nblocks];
            break;
        }
    }
    pthread_mutex_unlock(&blocks_lock);
}

/* One sampling period: every block's pages written since the last scan, re-protected. */
static void scan(void) {
    struct page_region vec[256];
    pthread_mutex_lock(&blocks_lock);
    for (int i = 0; i < nblocks; i++) {
        uint64_t from = blocks[i].start;
        while (from < blocks[i].end) {
            struct pm_scan_arg arg = {.size = sizeof arg, .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                                      .start = from, .end = blocks[i].end, .vec = (uint64_t)(uintptr_t)vec,
                                      .vec_len = 256,
                                      /* written, present, and not the shared zero page (a read of a fresh page) */
                                      .category_inverted = PAGE_IS_PFNZERO,
                                      .category_mask = PAGE_IS_WRITTEN | PAGE_IS_PRESENT | PAGE_IS_PFNZERO,
                                      .return_mask = PAGE_IS_WRITTEN};
            long n = ioctl(pagemap_fd, PAGEMAP_SCAN, &arg);
            if (n < 0)
                break;
            for (long k = 0; k < n; k++)
                emit_line("touch", (size_t)(vec[k].end - vec[k].start), (void *)(uintptr_t)vec[k].start, blocks[i].stack);
            if (arg.walk_end <= from || n < 256)
                break;
            from = arg.walk_end;
        }
    }
    pthread_mutex_unlock(&blocks_lock);
}

static void *sampler(void *unused) {
    (void)unused;
    busy = 1;  /* this thread's own allocations are never logged */
    struct timespec period = {sample_ms / 1000, (sample_ms % 1000) * 1000000L};
    for (;;) {
        nanosleep(&period, NULL);
        scan();
    }
    return NULL;
}

static void sampling_off(const char *why) {
    fprintf(stderr, "nearfaas memshim: write sampling is unavailable here (%s: %s; needs userfaultfd with "
            "asynchronous write-protect and PAGEMAP_SCAN, Linux >= 6.7); logging allocations only\n",
            why, strerror(errno));
    if (uffd >= 0)
        close(uffd);
    uffd = -1;
}

/* The userfaultfd and the pagemap fd, made in the constructor (while the process may still
 * create them: a jailed worker drops the privilege later); the thread comes later or now. */
static void prepare_sampling(void) {
    uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = {.api = UFFD_API, .features = FEATURE_WP_ASYNC | FEATURE_WP_UNPOPULATED};
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) || pagemap_fd < 0)
        sampling_off("userfaultfd");
}

static int sampler_started;

/* Starts the sampling thread. Exported: a process that must stay single-threaded for a while
 * (a worker entering its mount namespace: unshare refuses a threaded process) sets
 * NEARFAAS_MEMSHIM_DEFER=1 and calls this once it may have threads. 0: sampling; -1: not. */
int nearfaas_memshim_start(void) {
    if (uffd < 0)
        return -1;
    if (sampler_started)
        return 0;
    int was = busy;
    busy = 1;
    pthread_t thread;
    int err = pthread_create(&thread, NULL, sampler, NULL);
    busy = was;
    if (err) {
        errno = err;
        sampling_off("pthread_create");
        return -1;
    }
    pthread_detach(thread);
    sampler_started = 1;
    return 0;
}

__attribute__((destructor)) static void memshim_fini(void) {
    if (uffd >= 0) {
        busy = 1;
        scan();  /* the last period's writes */
    }
}

__attribute__((constructor)) static void memshim_init(void) {
    busy = 1;
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
    const char *ms = getenv("NEARFAAS_MEMSHIM_SAMPLE_MS");
    sample_ms = ms && *ms ? strtol(ms, NULL, 10) : 0;
    if (log_fd >= 0 && sample_ms > 0) {
        prepare_sampling();
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
    if (old && old_size >= threshold && !busy)
        untrack((uint64_t)(uintptr_t)old);
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
    if (!busy)
        untrack((uint64_t)(uintptr_t)addr);
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
