/* Porter's placement engine, inside the worker (issue 18): each large allocation goes to the
 * fast tier (DRAM) or the slow one (CXL) as the function's hint file says, within the DRAM this
 * worker may use; during the call, the sampler's access counts promote hot slow blocks and demote
 * cold fast ones. The same rule as the simulator's "porter+migration" policy
 * (src/nearfaas/memory/tiersim.py), applied to live allocations.
 *
 * Inputs (environment, read once at start; the node writes them, src/nearfaas/memory/placement.py):
 *   NEARFAAS_MEMSHIM_HINTS       a file of lines "<stack16hex> <dram|slow> <confidence>"
 *   NEARFAAS_MEMSHIM_DRAM_BYTES  this worker's share of the node's DRAM budget (default: no cap)
 *   NEARFAAS_MEMSHIM_SLOW_NODE   the NUMA node that is the slow tier; absent: decisions are only
 *                                recorded (one NUMA node here: there is nowhere to move a page)
 *   NEARFAAS_MEMSHIM_FAST_NODE   the one that is DRAM (default 0)
 *
 * The ladder, per allocation:
 *   1. hinted slow                       → slow
 *   2. hinted dram, or no hint (a new call site: the paper's default, DRAM for the best SLO)
 *                                        → fast if it fits in the budget, else slow
 * Each decision is a log line "<t_ns> fast|slow <size> <addr> <stack>". Every REVIEW_PERIODS
 * sampling periods (with access sampling on): a slow block whose sampled pages were accessed at
 * least PROMOTE_AT of the times they were armed is promoted ("promote" line) if it fits,
 * demoting first fast blocks whose armed pages saw no access at all ("demote"). With a slow
 * node the moves are real (mbind with MPOL_MF_MOVE); without one they are the record.
 *
 * Worked example: budget 64 MiB, hint {A: dram, B: slow}; A allocates 48 MiB → fast; B 32 MiB →
 * slow; an unhinted C 32 MiB → slow (48 + 32 > 64). C turns out hot and A cold: at the review A
 * is demoted and C promoted (fast bytes 32 MiB).
 *
 * Known caveats:
 * - Decided per block at allocation (the paper's granularity: objects), not per page.
 * - The mbind path needs two NUMA nodes and is not exercised on this machine (one node).
 * - Confidence is recorded in the file but not used: a stack's tier is the majority of its runs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "memshim.h"

#define MAX_HINTS 1024
#define MAX_PLACED 4096
#define REVIEW_PERIODS 4
#define PROMOTE_AT 0.25
#define DEMOTE_MIN_ARMED 32 /* pages armed with no access before a fast block counts as cold */
#define MPOL_BIND 2
#define MPOL_MF_MOVE 2

struct hint {
    uint64_t stack;
    int slow;
};
struct placed {
    uint64_t addr, size, stack;
    int slow;
    uint64_t hits, armed; /* sampled accesses and pages armed since the last review */
};

static struct hint hints[MAX_HINTS];
static int nhints, on;
static struct placed placed[MAX_PLACED];
static int nplaced;
static uint64_t budget = UINT64_MAX, fast_bytes;
static long slow_node = -1, fast_node = 0;
static int reviews;
static pthread_mutex_t place_lock = PTHREAD_MUTEX_INITIALIZER;

int placement_on(void) { return on; }

static void move_to(uint64_t addr, uint64_t size, long node) {
    if (slow_node < 0 || node < 0 || node >= 64)
        return;
    uint64_t start = (addr + PAGE - 1) & ~(PAGE - 1), end = (addr + size) & ~(PAGE - 1);
    unsigned long mask = 1UL << node;
    if (end > start)
        syscall(SYS_mbind, start, end - start, MPOL_BIND, &mask, 64, MPOL_MF_MOVE);
}

/* Reads the hint file with read(2) into a static buffer: the constructor must not depend on
 * stdio. A malformed line is skipped (the node writes these files; a torn one is not fatal). */
static void load_hints(const char *path) {
    static char text[MAX_HINTS * 48];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return;
    text[n] = 0;
    for (char *line = text, *next; line && *line && nhints < MAX_HINTS; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *end;
        uint64_t stack = strtoull(line, &end, 16);
        if (end != line + 16 || *end != ' ')
            continue;
        if (strncmp(end + 1, "dram", 4) == 0)
            hints[nhints++] = (struct hint){stack, 0};
        else if (strncmp(end + 1, "slow", 4) == 0)
            hints[nhints++] = (struct hint){stack, 1};
    }
}

/* fork(): the child must not inherit the lock held by a thread it does not have. */
static void lock_place(void) { pthread_mutex_lock(&place_lock); }
static void unlock_place(void) { pthread_mutex_unlock(&place_lock); }

void placement_init(void) {
    const char *path = getenv("NEARFAAS_MEMSHIM_HINTS"), *bytes = getenv("NEARFAAS_MEMSHIM_DRAM_BYTES"),
               *node = getenv("NEARFAAS_MEMSHIM_SLOW_NODE"), *fast = getenv("NEARFAAS_MEMSHIM_FAST_NODE");
    if (path && *path)
        load_hints(path);
    if (bytes && *bytes)
        budget = strtoull(bytes, NULL, 10);
    if (node && *node)
        slow_node = strtol(node, NULL, 10);
    if (fast && *fast)
        fast_node = strtol(fast, NULL, 10);
    on = (path && *path) || (bytes && *bytes);
    if (on)
        pthread_atfork(lock_place, unlock_place, unlock_place);
}

static int hinted_slow(uint64_t stack) {
    for (int i = 0; i < nhints; i++)
        if (hints[i].stack == stack)
            return hints[i].slow;
    return 0;
}

void place(uint64_t addr, size_t size, uint64_t stack) {
    pthread_mutex_lock(&place_lock);
    int slow = hinted_slow(stack) || fast_bytes + size > budget;
    if (!slow)
        fast_bytes += size;
    if (nplaced < MAX_PLACED)
        placed[nplaced++] = (struct placed){addr, size, stack, slow, 0, 0};
    pthread_mutex_unlock(&place_lock);
    if (slow)
        move_to(addr, size, slow_node);
    emit_line(slow ? "slow" : "fast", size, (void *)(uintptr_t)addr, stack);
}

void unplace(uint64_t addr) {
    pthread_mutex_lock(&place_lock);
    for (int i = 0; i < nplaced; i++) {
        if (placed[i].addr == addr) {
            if (!placed[i].slow)
                fast_bytes -= placed[i].size;
            placed[i] = placed[--nplaced];
            break;
        }
    }
    pthread_mutex_unlock(&place_lock);
}

/* From the sampler: `pages` armed at addr (accessed = 0), or one armed page accessed (1). */
void placement_heat(uint64_t addr, uint64_t pages, int accessed) {
    pthread_mutex_lock(&place_lock);
    for (int i = 0; i < nplaced; i++) {
        if (placed[i].addr <= addr && addr < placed[i].addr + placed[i].size) {
            if (accessed)
                placed[i].hits++;
            else
                placed[i].armed += pages;
            break;
        }
    }
    pthread_mutex_unlock(&place_lock);
}

static int hot(const struct placed *p) { return p->armed && (double)p->hits >= PROMOTE_AT * (double)p->armed; }
static int cold(const struct placed *p) { return p->armed >= DEMOTE_MIN_ARMED && p->hits == 0; }

/* Once a sampling period, from the sampler thread: every REVIEW_PERIODS, promote what proved
 * hot, demoting what proved cold to make room; then a fresh window. */
void placement_review(void) {
    if (!on || ++reviews % REVIEW_PERIODS)
        return;
    pthread_mutex_lock(&place_lock);
    for (int i = 0; i < nplaced; i++) {
        struct placed *p = &placed[i];
        if (!p->slow || !hot(p))
            continue;
        for (int j = 0; j < nplaced && fast_bytes + p->size > budget; j++) {
            struct placed *q = &placed[j];
            if (!q->slow && cold(q)) {
                q->slow = 1;
                fast_bytes -= q->size;
                move_to(q->addr, q->size, slow_node);
                emit_line("demote", q->size, (void *)(uintptr_t)q->addr, q->stack);
            }
        }
        if (fast_bytes + p->size <= budget) {
            p->slow = 0;
            fast_bytes += p->size;
            move_to(p->addr, p->size, fast_node);
            emit_line("promote", p->size, (void *)(uintptr_t)p->addr, p->stack);
        }
    }
    for (int i = 0; i < nplaced; i++)
        placed[i].hits = placed[i].armed = 0;
    pthread_mutex_unlock(&place_lock);
}
