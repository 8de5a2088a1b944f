/* The tier simulator's calibration (docs/memory.md): this machine's memory latency, by a
 * dependent pointer chase through a random cycle of cache lines, and its bandwidth, by the
 * STREAM triad. Prints one JSON object.
 *
 *   membench chase <MiB> <steps>   -> {"kind":"chase","mib":..,"steps":..,"seconds":..,"ns_per_access":..}
 *   membench triad <MiB> <repeats> -> {"kind":"triad","mib":..,"seconds":..,"gb_per_s":..}
 *   membench load <MiB> <percent> [nt|rw] -> memory traffic until SIGTERM, then {"kind":"load","gb_per_s":..,..}
 *
 * ``load`` is the co-runner of the latency experiment (nearfaas.bench.porter_latency): pinned to
 * the other core, it writes a buffer with non-temporal stores for <percent> of every millisecond,
 * so it takes DRAM bandwidth (raising what every other load waits) while leaving the last-level
 * cache to the kernel being measured (non-temporal stores bypass it; a reading co-runner would
 * evict the kernel's lines and change its miss count, not only its latency; ``rw`` is that
 * co-runner, for comparison: more traffic, and the confound).
 *
 * Why a random cycle of lines: each load depends on the last (no overlap) and the next line is
 * unpredictable (no prefetch), so beyond the last-level cache each step costs one memory latency.
 */
#define _GNU_SOURCE
#if defined(__SSE2__)
#include <emmintrin.h>
#define VEC __m128d
#define VEC_SET(x) _mm_set1_pd(x)
#define STREAM_STORE(p, v) _mm_stream_pd((p), (v))
#define STREAM_FENCE() _mm_sfence()
#else /* no SSE2 (arm64): plain stores; chase and triad, which the calibration uses, build everywhere */
typedef struct { double x, y; } vec2;
#define VEC vec2
#define VEC_SET(x) ((vec2){(x), (x)})
#define STREAM_STORE(p, v) ((p)[0] = (v).x, (p)[1] = (v).y)
#define STREAM_FENCE() ((void)0)
#endif
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LINE 64

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void *big(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    madvise(p, bytes, MADV_NOHUGEPAGE);  /* 4 KiB pages, as the simulator prices them */
    memset(p, 0, bytes);
    return p;
}

static int chase(size_t mib, uint64_t steps) {
    size_t bytes = mib << 20, lines = bytes / LINE;
    char *mem = big(bytes);
    size_t *order = malloc(lines * sizeof *order);
    if (!order)
        return 2;
    for (size_t i = 0; i < lines; i++)
        order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {  /* Fisher-Yates: one random cycle through every line */
        size_t j = next_rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        *(void **)(mem + order[i] * LINE) = mem + order[(i + 1) % lines] * LINE;
    free(order);
    void **p = (void **)mem;
    for (uint64_t i = 0; i < lines; i++)  /* one lap untimed: page tables and TLB warm */
        p = (void **)*p;
    double t0 = now();
    for (uint64_t i = 0; i < steps; i++)
        p = (void **)*p;
    double dt = now() - t0;
    printf("{\"kind\": \"chase\", \"mib\": %zu, \"steps\": %llu, \"seconds\": %.6f, \"ns_per_access\": %.3f, \"end\": %d}\n",
           mib, (unsigned long long)steps, dt, dt * 1e9 / (double)steps, p == NULL);
    return 0;
}

static int triad(size_t mib, int repeats) {
    size_t n = (mib << 20) / sizeof(double);
    double *a = big(n * sizeof(double)), *b = big(n * sizeof(double)), *c = big(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        b[i] = 1.0;
        c[i] = 2.0;
    }
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + 3.0 * c[i];
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    printf("{\"kind\": \"triad\", \"mib\": %zu, \"seconds\": %.6f, \"gb_per_s\": %.3f, \"check\": %.1f}\n", mib, best,
           3.0 * (double)n * sizeof(double) / best / 1e9, a[n / 2]);
    return 0;
}

static volatile sig_atomic_t stop;
static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static int load(size_t mib, int percent, int rw) {
    signal(SIGTERM, on_term);  /* first: a stop during the buffer's set-up still ends with the JSON */
    signal(SIGINT, on_term);
    size_t n = (mib << 20) / sizeof(double), half = n / 2;
    double *a = big(n * sizeof(double));
    const double slice = 1e-3, busy = slice * percent / 100.0;
    VEC v = VEC_SET(1.0);
    double bytes = 0.0, t_start = now(), busy_s = 0.0;
    size_t i = 0;
    while (!stop) {
        double t0 = now(), t = t0;
        while (t - t0 < busy) {
            /* the index wraps by a compare, not a %: a 64-bit division a store held the loop to a
             * seventh of the bandwidth (3.3 vs 22.3 GB/s here) */
            if (rw) {  /* read and write through the caches: more traffic, but it evicts others' lines */
                for (int k = 0; k < 4096; k++) {
                    size_t j = i + half;
                    a[i] = a[j >= n ? j - n : j] + 1.0;
                    i = i + 1 >= n ? 0 : i + 1;
                }
                bytes += 65536.0;
            } else {
                for (int k = 0; k < 4096; k += 2) {  /* 32 KiB a check of the clock */
                    STREAM_STORE(a + i, v);
                    i = i + 2 >= n ? 0 : i + 2;
                }
                bytes += 32768.0;
            }
            t = now();
        }
        busy_s += t - t0;
        while (!stop && now() - t0 < slice) {
            struct timespec nap = {0, 50000};  /* the idle share: asleep, leaving the core */
            if (percent < 100) nanosleep(&nap, NULL);
            else break;
        }
    }
    STREAM_FENCE();
    double dt = now() - t_start;
    printf("{\"kind\": \"load\", \"mode\": \"%s\", \"mib\": %zu, \"percent\": %d, \"seconds\": %.3f, \"busy_share\": %.3f, \"gb_per_s\": %.3f}\n",
           rw ? "rw" : "nt", mib, percent, dt, dt > 0 ? busy_s / dt : 0.0, dt > 0 ? bytes / dt / 1e9 : 0.0);
    return 0;
}

int main(int argc, char **argv) {
    int is_load = argc >= 4 && !strcmp(argv[1], "load");
    if ((argc != 4 && !(is_load && argc == 5)) || (strcmp(argv[1], "chase") && strcmp(argv[1], "triad") && !is_load)) {
        fprintf(stderr, "usage: membench chase <MiB> <steps> | membench triad <MiB> <repeats> | membench load <MiB> <percent> [nt|rw]\n");
        return 2;
    }
    if (is_load) {
        int rw = argc == 5 && !strcmp(argv[4], "rw");
        if (argc == 5 && !rw && strcmp(argv[4], "nt")) {
            fprintf(stderr, "membench: load mode must be nt (non-temporal stores) or rw (reads and writes)\n");
            return 2;
        }
        int percent = atoi(argv[3]);
        if (percent < 1 || percent > 100) {
            fprintf(stderr, "membench: load <percent> must be 1..100\n");
            return 2;
        }
        size_t lmib = strtoull(argv[2], NULL, 10);
        if (lmib < 1 || lmib > 16384) {
            fprintf(stderr, "membench: <MiB> must be 1..16384\n");
            return 2;
        }
        return load(lmib, percent, rw);
    }
    size_t mib = strtoull(argv[2], NULL, 10);
    if (mib < 1 || mib > 16384) {
        fprintf(stderr, "membench: <MiB> must be 1..16384\n");
        return 2;
    }
    return !strcmp(argv[1], "chase") ? chase(mib, strtoull(argv[3], NULL, 10)) : triad(mib, atoi(argv[3]));
}
