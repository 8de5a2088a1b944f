/* The tier simulator's calibration (docs/memory.md): this machine's memory latency, by a
 * dependent pointer chase through a random cycle of cache lines, and its bandwidth, by the
 * STREAM triad. Prints one JSON object.
 *
 *   membench chase <MiB> <steps>   -> {"kind":"chase","mib":..,"steps":..,"seconds":..,"ns_per_access":..}
 *   membench triad <MiB> <repeats> -> {"kind":"triad","mib":..,"seconds":..,"gb_per_s":..}
 *
 * Why a random cycle of lines: each load depends on the last (no overlap) and the next line is
 * unpredictable (no prefetch), so beyond the last-level cache each step costs one memory latency.
 */
#define _GNU_SOURCE
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

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "chase") && strcmp(argv[1], "triad"))) {
        fprintf(stderr, "usage: membench chase <MiB> <steps> | membench triad <MiB> <repeats>\n");
        return 2;
    }
    size_t mib = strtoull(argv[2], NULL, 10);
    if (mib < 1 || mib > 16384) {
        fprintf(stderr, "membench: <MiB> must be 1..16384\n");
        return 2;
    }
    return !strcmp(argv[1], "chase") ? chase(mib, strtoull(argv[3], NULL, 10)) : triad(mib, atoi(argv[3]));
}
