/* The shim's access profiler (issue 18; Porter's heat map, without a PMU): which pages of the
 * logged blocks a function writes and reads, period by period, every $NEARFAAS_MEMSHIM_SAMPLE_MS.
 * Everything goes through one userfaultfd and one thread; the program never sees a signal, and
 * a system call reading or writing a watched page works as before (the kernel waits on the fault
 * like any other).
 *
 * Two modes, one at a time: accesses (the default) or, with $NEARFAAS_MEMSHIM_ACCESS_PAGES=0,
 * writes. Writes see every page but cost a fault per written page per period whatever the
 * footprint (linpack, which rewrites its matrix, ran 17-23% slower at 50 ms); accesses see reads
 * too and cost at most the budget's faults per period.
 *
 * Writes, every page: each block is registered in asynchronous write-protect mode, and once a
 * period the thread asks the kernel which of its pages were written since the last ask
 * (PAGEMAP_SCAN, which re-protects them in the same call). A run of written pages becomes
 *     <t_ns> touch <bytes> <addr> <stack of its block>
 * The kernel resolves those write faults itself: one minor fault per page per period.
 *
 * Accesses (reads too), a spatial sample: no interface here reports a read (no young bit, no
 * idle-page tracking, docs/memory.md), so the sampler makes reads fault. Once a block has lived
 * a whole period, one 64 KiB chunk in every $NEARFAAS_MEMSHIM_ACCESS_STRIDE (default 16) of it
 * is registered for missing pages (the rest of the block is not watched at all). To *arm* a
 * chunk the thread moves its pages out to a private stash (UFFDIO_MOVE: the page itself changes
 * address, nothing is copied, and a racing write simply faults) and logs
 *     <t_ns> arm 65536 <chunk addr> <stack>
 * The next read or write of an armed page faults; the thread moves the page back and logs
 *     <t_ns> access 4096 <page addr> <stack>
 * A page never touched again stays in the stash, armed, at no cost. Each period moves at most
 * an allowance of pages, round robin over the sampled chunks; the allowance adapts so that the
 * faults stay about $NEARFAAS_MEMSHIM_ACCESS_PAGES (default 32) a period whatever the
 * footprint (arm() has the rule): cold pages cost a move and no fault, hot ones a fault each.
 *
 * Worked example: a 64 MiB block has 1024 chunks; 64 are sampled (one in 16), 1024 pages. If
 * nothing reads it, the allowance doubles 32, 64, 128 (4 budgets at most) and the whole sample
 * is armed in ten periods, for no fault. If all of it is read all the time, about 32 pages
 * fault each period (a fault costs about 10 us here: ~0.3 ms of a 50 ms period) and each chunk
 * is re-armed every 32nd period. (A 2 s PageRank: 128 pages a period cost +24% to +38%, 64
 * pages +8.5% to +25% across sessions, 32 pages +3.2%: docs/memory.md.)
 *
 * Known caveats:
 * - Accesses are a sample: one page in `stride` in space, and in time a page is watched from
 *   its arming to its next access; memory/shim.py's to_trace estimates the rest from that.
 * - Needs userfaultfd with asynchronous write-protect and PAGEMAP_SCAN (Linux 6.7) for writes
 *   and UFFDIO_MOVE (6.8) for accesses, and a process allowed kernel-mode faults (root or
 *   CAP_SYS_PTRACE while vm.unprivileged_userfaultfd is 0): a user-mode-only userfaultfd would
 *   make a read(2) into an armed page fail with EFAULT, so the sampler never uses one. Where
 *   the kernel refuses, the shim says so once on stderr and logs what it still can.
 * - fork(): a child would see armed pages as zeros (a child does not inherit the registration),
 *   so a fork handler moves every armed page home first; the child does not sample.
 * - madvise(MADV_DONTNEED) on an armed page: the kernel tells the thread, which drops the
 *   stashed copy, so the page reads back as zeros as the program asked.
 * - A page that is pinned or shared (after a fork, KSM) cannot be moved; it is not armed.
 * - Blocks allocated before the sampling thread starts (NEARFAAS_MEMSHIM_DEFER) are logged but
 *   not watched: the kernel's events for a watched block need a reader, or an madvise() waits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "memshim.h"

#define MAX_BLOCKS 4096
#define CHUNK (16 * PAGE)
#define MAX_SAMPLED_CHUNKS 8192 /* two mappings each: far under vm.max_map_count */

/* Kernel ABI newer than this system's headers: PAGEMAP_SCAN and asynchronous write-protect
 * (Linux 6.7), UFFDIO_MOVE (6.8). */
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region {
    uint64_t start, end, categories;
};
struct uffdio_move_arg {
    uint64_t dst, src, len, mode;
    int64_t move;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PM_SCAN_WP_MATCHING (1UL << 0)
#define PM_SCAN_CHECK_WPASYNC (1UL << 1)
#define PAGE_IS_WRITTEN (1UL << 1)
#define PAGE_IS_PRESENT (1UL << 3)
#define PAGE_IS_PFNZERO (1UL << 5)
#define FEATURE_WP_UNPOPULATED (1ULL << 13)
#define FEATURE_WP_ASYNC (1ULL << 15)
#define FEATURE_MOVE (1ULL << 16)
#define UFFDIO_MOVE_IOCTL _IOWR(UFFDIO, 0x05, struct uffdio_move_arg)
#define MOVE_ALLOW_SRC_HOLES (1ULL << 1)

struct block {
    uint64_t start, end; /* whole pages inside the block */
    uint64_t stack;
    uint64_t stash;  /* where its armed pages wait (same offsets); 0: writes only */
    uint64_t stride; /* chunk i is sampled when i % stride == 0 */
    uint64_t born_ms;
    int tried; /* sample_block ran (stash is 0 if it could not) */
};

static int uffd = -1, pagemap_fd = -1;
static int access_on;
static long period_ms, access_pages = 32;
static uint64_t stride_default = 16;
static struct block blocks[MAX_BLOCKS];
static int nblocks, sampled_chunks, started;
static int cursor_block;
static uint64_t cursor_chunk;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;

int sampler_on(void) { return uffd >= 0; }

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}


static uint64_t sampled_in(const struct block *b) {
    return b->stash ? ((b->end - b->start) / CHUNK + b->stride - 1) / b->stride : 0;
}

/* Move len bytes of pages from src to dst, skipping holes and pages that cannot move; the pages
 * moved. EAGAIN means the program is changing its mappings and the kernel's event for it is not
 * read yet: the sampler thread (the reader) gives up for now; any other thread (patient) waits
 * for the sampler to read it, which it does without the lock this thread may hold. */
static uint64_t move_pages_between(uint64_t dst, uint64_t src, uint64_t len, int patient) {
    uint64_t done = 0, moved = 0;
    while (done < len) {
        struct uffdio_move_arg m = {.dst = dst + done, .src = src + done, .len = len - done,
                                    .mode = MOVE_ALLOW_SRC_HOLES};
        int r = ioctl(uffd, UFFDIO_MOVE_IOCTL, &m);
        uint64_t step = m.move > 0 ? (uint64_t)m.move : 0;
        moved += step;
        done += step;
        if (r == 0)
            break;
        if (errno == EAGAIN && !step && !patient)
            break;
        if (errno == EAGAIN && !step)
            sched_yield();
        if (errno != EAGAIN)
            done += PAGE; /* EEXIST, EBUSY: that page stays where it is */
    }
    return moved / PAGE;
}

/* Every armed page of the block goes home (a no-op for pages already home). */
static void disarm(const struct block *b) {
    if (!b->stash)
        return;
    for (uint64_t c = b->start; c + CHUNK <= b->end; c += b->stride * CHUNK)
        move_pages_between(c, b->stash + (c - b->start), CHUNK, 1);
}

static int reg_ok(uint64_t start, uint64_t len, uint64_t mode) {
    struct uffdio_register r = {.range = {start, len}, .mode = mode};
    return ioctl(uffd, UFFDIO_REGISTER, &r) == 0;
}

/* A new block: its whole pages watched for writes. The first writes cost nothing: pages are
 * registered without protection, and the next scan reports and protects the ones written.
 * Access sampling waits until the block has lived a whole period (arm): the temporaries a
 * kernel makes and frees within a period would pay for a stash and faults, and teach nothing. */
void track(uint64_t addr, size_t size, uint64_t stack) {
    uint64_t start = (addr + PAGE - 1) & ~(PAGE - 1), end = (addr + size) & ~(PAGE - 1);
    if (end <= start || uffd < 0 || !started)
        return; /* nothing whole, or no sampler yet to read its events */
    if (!access_on && !reg_ok(start, end - start, UFFDIO_REGISTER_MODE_WP))
        return; /* not anonymous memory: not sampled */
    pthread_mutex_lock(&blocks_lock);
    if (nblocks < MAX_BLOCKS)
        blocks[nblocks++] = (struct block){start, end, stack, 0, stride_default, now_ms(), 0};
    pthread_mutex_unlock(&blocks_lock);
}

/* A block old enough to sample: every stride-th chunk also registered for missing pages, and a
 * stash as large as the block (address space only: it holds just the armed pages). Holds
 * blocks_lock. */
static void sample_block(struct block *b) {
    b->tried = 1;
    uint64_t chunks = (b->end - b->start) / CHUNK, room = (uint64_t)(MAX_SAMPLED_CHUNKS - sampled_chunks);
    if (!chunks || !room)
        return;
    if ((chunks + b->stride - 1) / b->stride > room)
        b->stride = (chunks + room - 1) / room; /* fewer chunks of a big block, never too many */
    uint64_t len = b->end - b->start;
    void *stash = next_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stash == MAP_FAILED)
        return;
    if (!reg_ok((uint64_t)(uintptr_t)stash, len, UFFDIO_REGISTER_MODE_MISSING)) {
        next_munmap(stash, len);
        return;
    }
    b->stash = (uint64_t)(uintptr_t)stash;
    for (uint64_t c = b->start; c + CHUNK <= b->end; c += b->stride * CHUNK)
        reg_ok(c, CHUNK, UFFDIO_REGISTER_MODE_MISSING); /* else: never armed */
    sampled_chunks += (int)sampled_in(b);
}

/* The block that holds addr is about to be freed or moved: its armed pages go home (glibc may
 * reuse the memory, or mremap it, which would drop the registration and lose them), and it is
 * no longer watched, so no scan reads a reused range. */
void untrack(uint64_t addr) {
    if (uffd < 0)
        return;
    pthread_mutex_lock(&blocks_lock);
    for (int i = 0; i < nblocks; i++) {
        struct block *b = &blocks[i];
        if (addr <= b->start + PAGE && b->start < addr + PAGE) {
            disarm(b);
            struct uffdio_range r = {b->start, b->end - b->start};
            ioctl(uffd, UFFDIO_UNREGISTER, &r);
            if (b->stash) {
                next_munmap((void *)(uintptr_t)b->stash, b->end - b->start);
                sampled_chunks -= (int)sampled_in(b);
            }
            *b = blocks[--nblocks];
            break;
        }
    }
    pthread_mutex_unlock(&blocks_lock);
}

/* Writes since the last scan, every block, re-protected. Holds blocks_lock. */
static void scan_writes(void) {
    struct page_region vec[256];
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
}

static void handle_events(void);

/* Arm one chunk, the next in round robin from where the last one stopped: 1 if it did (with the
 * pages it moved in *moved: its pages still armed from before move nothing), 0 if there is
 * nothing to arm. Holds blocks_lock. */
static int arm_next(uint64_t *moved) {
    for (int tries = 0; tries <= nblocks && sampled_chunks; tries++) {
        if (cursor_block >= nblocks) {
            cursor_block = 0;
            cursor_chunk = 0;
        }
        struct block *b = &blocks[cursor_block];
        uint64_t c = b->start + cursor_chunk * b->stride * CHUNK;
        if (!b->stash || c + CHUNK > b->end) {
            cursor_block++;
            cursor_chunk = 0;
            continue;
        }
        *moved = move_pages_between(b->stash + (c - b->start), c, CHUNK, 0);
        emit_line("arm", CHUNK, (void *)(uintptr_t)c, b->stack);
        placement_heat(c, CHUNK / PAGE, 0);
        cursor_chunk++;
        return 1;
    }
    return 0;
}

/* One period's arming: blocks a period old get their sample; then chunks are armed round robin
 * until this period's allowance of moved pages is spent or every sampled chunk was visited,
 * each under the lock on its own, with the faults that are waiting served between chunks (a
 * thread blocked on an armed page must not wait for the whole round). The allowance halves (to
 * access_pages at least) after a period with access_pages faults or more, and doubles (to 4
 * budgets at most) after one that moved all of it with fewer faults: moving cold pages costs no
 * fault, so a mostly cold footprint is covered quickly, and a hot one is held near access_pages
 * faults a period. */
static long allow, faults, moved_last; /* faults: served this period (resolve) */
#define MAX_ALLOW_BUDGETS 4 /* the allowance grows to 4 budgets at most: the worst burst of faults */

static void arm(void) {
    uint64_t now = now_ms();
    pthread_mutex_lock(&blocks_lock);
    for (int i = 0; i < nblocks; i++)
        if (!blocks[i].tried && now - blocks[i].born_ms >= (uint64_t)period_ms)
            sample_block(&blocks[i]);
    int chunks = sampled_chunks;
    if (!allow)
        allow = access_pages;
    else if (faults >= access_pages)
        allow = allow / 2 > access_pages ? allow / 2 : access_pages;
    else if (moved_last >= allow && allow < MAX_ALLOW_BUDGETS * access_pages)
        allow *= 2; /* all of it moved and few faults: the pages were cold, cover more */
    faults = moved_last = 0;
    pthread_mutex_unlock(&blocks_lock);
    for (long budget = allow; budget > 0 && chunks-- > 0;) {
        uint64_t moved = 0;
        pthread_mutex_lock(&blocks_lock);
        int armed = arm_next(&moved);
        pthread_mutex_unlock(&blocks_lock);
        if (!armed)
            break;
        budget -= (long)moved;
        moved_last += (long)moved;
        handle_events();
    }
}

/* A fault on an armed (or never touched) page: bring it home, or give it a zero page if it was
 * never stashed; log it. Then the faulting thread runs on. */
static void resolve(uint64_t page) {
    pthread_mutex_lock(&blocks_lock);
    const struct block *owner = NULL;
    for (int i = 0; i < nblocks; i++)
        if (blocks[i].start <= page && page < blocks[i].end)
            owner = &blocks[i];
    int r = -1;
    errno = ENOENT;
    if (owner && owner->stash) {
        struct uffdio_move_arg m = {.dst = page, .src = owner->stash + (page - owner->start), .len = PAGE};
        r = ioctl(uffd, UFFDIO_MOVE_IOCTL, &m);
    }
    /* Zeros only for a page that was never stashed (ENOENT): never over a stashed one. Anything
     * else (already home, no longer watched, or EAGAIN: the program is changing its mappings
     * and the kernel's event for it is still unread): wake the thread, which faults again if it
     * must, and that fault is served after the event. */
    struct uffdio_zeropage z = {.range = {page, PAGE}};
    if (r && !(errno == ENOENT && ioctl(uffd, UFFDIO_ZEROPAGE, &z) == 0)) {
        struct uffdio_range w = {page, PAGE};
        ioctl(uffd, UFFDIO_WAKE, &w);
    }
    faults++;
    if (owner) {
        emit_line("access", PAGE, (void *)(uintptr_t)page, owner->stack);
        placement_heat(page, 1, 1);
    }
    pthread_mutex_unlock(&blocks_lock);
}

/* The program dropped pages (madvise DONTNEED): their stashed copies go too. */
static void dropped(uint64_t start, uint64_t end) {
    pthread_mutex_lock(&blocks_lock);
    for (int i = 0; i < nblocks; i++) {
        const struct block *b = &blocks[i];
        uint64_t lo = start > b->start ? start : b->start, hi = end < b->end ? end : b->end;
        if (b->stash && lo < hi) {
            /* the stash is registered too: dropping its pages while registered would send this
             * very thread an event to wait on */
            struct uffdio_range r = {b->stash + (lo - b->start), hi - lo};
            ioctl(uffd, UFFDIO_UNREGISTER, &r);
            madvise((void *)(uintptr_t)r.start, r.len, MADV_DONTNEED);
            reg_ok(r.start, r.len, UFFDIO_REGISTER_MODE_MISSING);
        }
    }
    pthread_mutex_unlock(&blocks_lock);
}

static void handle_events(void) {
    struct uffd_msg msgs[64];
    ssize_t n;
    while ((n = read(uffd, msgs, sizeof msgs)) > 0) {
        for (ssize_t i = 0; i < n / (ssize_t)sizeof msgs[0]; i++) {
            if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
                resolve(msgs[i].arg.pagefault.address & ~(PAGE - 1));
            else if (msgs[i].event == UFFD_EVENT_REMOVE)
                dropped(msgs[i].arg.remove.start, msgs[i].arg.remove.end);
        }
    }
}

void sampler_last_scan(void) {
    if (uffd < 0 || access_on)
        return;
    pthread_mutex_lock(&blocks_lock);
    scan_writes();
    pthread_mutex_unlock(&blocks_lock);
}

static void *sampler(void *unused) {
    (void)unused;
    busy = 1; /* this thread's own allocations are never logged */
    uint64_t next = now_ms() + (uint64_t)period_ms;
    for (;;) {
        uint64_t now = now_ms();
        struct pollfd p = {.fd = uffd, .events = POLLIN};
        if (poll(&p, 1, now < next ? (int)(next - now) : 0) > 0)
            handle_events(); /* every turn, even when behind: a blocked thread waits on these */
        if (now_ms() >= next) {
            if (access_on) {
                arm();
                placement_review();
            } else {
                pthread_mutex_lock(&blocks_lock);
                scan_writes();
                pthread_mutex_unlock(&blocks_lock);
            }
            next += (uint64_t)period_ms;
            if (next < now_ms())
                next = now_ms() + (uint64_t)period_ms; /* fell behind: skip, do not burst */
        }
    }
    return NULL;
}

/* fork(): every armed page home before the child copies the address space, since the child
 * inherits no registration and would read armed pages as zeros. The child does not sample. */
static void fork_prepare(void) {
    pthread_mutex_lock(&blocks_lock); /* also: no other thread holds it in the child */
    for (int i = 0; i < nblocks; i++)
        disarm(&blocks[i]);
}
static void fork_parent(void) { pthread_mutex_unlock(&blocks_lock); }
static void fork_child(void) {
    for (int i = 0; i < nblocks; i++)
        if (blocks[i].stash)
            next_munmap((void *)(uintptr_t)blocks[i].stash, blocks[i].end - blocks[i].start);
    nblocks = sampled_chunks = 0;
    close(uffd);
    uffd = -1;
    started = 1; /* never start a sampler here */
    pthread_mutex_unlock(&blocks_lock);
}

static void off(const char *what, const char *why) {
    fprintf(stderr, "nearfaas memshim: %s sampling is unavailable here (%s: %s; needs %s); %s\n", what, why,
            strerror(errno), access_on ? "userfaultfd with UFFDIO_MOVE, Linux >= 6.8"
                                       : "userfaultfd with asynchronous write-protect and PAGEMAP_SCAN, Linux >= 6.7",
            access_on ? "sampling writes only" : "logging allocations only");
}

static int open_uffd(uint64_t features) {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = {.api = UFFD_API, .features = features};
    if (fd >= 0 && ioctl(fd, UFFDIO_API, &api)) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* From the constructor, while the process may still make a userfaultfd (a jailed worker drops
 * the privilege later); the thread comes later or now (nearfaas_memshim_start). */
int sampler_prepare(long ms) {
    period_ms = ms;
    const char *pages = getenv("NEARFAAS_MEMSHIM_ACCESS_PAGES"), *stride = getenv("NEARFAAS_MEMSHIM_ACCESS_STRIDE");
    if (pages && *pages)
        access_pages = strtol(pages, NULL, 10);
    if (stride && *stride && strtoull(stride, NULL, 10) > 0)
        stride_default = strtoull(stride, NULL, 10);
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    uint64_t writes = FEATURE_WP_ASYNC | FEATURE_WP_UNPOPULATED;
    if (access_pages > 0) {
        access_on = 1;
        uffd = open_uffd(writes | FEATURE_MOVE | UFFD_FEATURE_EVENT_REMOVE);
        if (uffd < 0) {
            off("access", "userfaultfd");
            access_on = 0;
        }
    }
    if (uffd < 0)
        uffd = open_uffd(writes);
    if (uffd < 0 || pagemap_fd < 0) {
        off("write", uffd < 0 ? "userfaultfd" : "/proc/self/pagemap");
        if (uffd >= 0)
            close(uffd);
        uffd = -1;
        return -1;
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    return 0;
}

/* Starts the sampling thread. Exported: a process that must stay single-threaded for a while
 * (a worker entering its mount namespace: unshare refuses a threaded process) sets
 * NEARFAAS_MEMSHIM_DEFER=1 and calls this once it may have threads. 0: sampling; -1: not. */
int nearfaas_memshim_start(void) {
    if (uffd < 0)
        return -1;
    if (started)
        return 0;
    int was = busy;
    busy = 1;
    pthread_t thread;
    int err = pthread_create(&thread, NULL, sampler, NULL);
    busy = was;
    if (err) {
        errno = err;
        off(access_on ? "access" : "write", "pthread_create");
        return -1;
    }
    pthread_detach(thread);
    started = 1;
    return 0;
}
