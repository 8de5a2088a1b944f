/* gapk: native graph kernels in the style of the GAP benchmark suite (PageRank, BFS) on R-MAT
 * (Kronecker) graphs, for the memory-tier experiments (docs/memory.md, "Native graph kernels").
 *
 *   gapk pagerank --scale 24 [--edge-factor 16] [--iters 20] [--seed 1]
 *   gapk bfs      --scale 24 [--edge-factor 16] [--roots 16] [--seed 1]
 *   gapk pagerank --edges FILE --vertices N --print      (a given graph; one score a line, then the JSON)
 *   gapk bfs      --edges FILE --vertices N --print      (the parents of a search from vertex 0, then the JSON)
 *   gapk ... --setup-only                               (build the graph, skip the kernel)
 *
 * One JSON line on stdout, as nearfaas.bench.memory_workloads prints: name, seconds (the kernel),
 * setup_s, input_bytes (the graph's arrays), answer, kernel_start_ns / kernel_end_ns
 * (CLOCK_MONOTONIC, the allocation shim's clock).
 *
 * Why these choices:
 * - The graph is Graph500's R-MAT, (a, b, c) = (0.57, 0.19, 0.19), vertex ids scrambled by a
 *   permutation, duplicate edges and self loops kept: the generator the Python function case
 *   (memory_workloads.rmat_graph) uses, so the two differ in language, not in input.
 * - The graph is directed and both directions are built, as GAP's builder does for a directed
 *   graph: PageRank pulls along incoming edges (no atomics), BFS pushes along outgoing ones.
 *   Vertex ids are 32-bit (scale <= 30), offsets 64-bit.
 * - PageRank runs a fixed number of iterations (a stable run time to measure), damping 0.85; a
 *   vertex without out-edges keeps its rank (divided by max(out-degree, 1)), as the scipy
 *   version does.
 * - BFS is top-down from each root in turn (roots: vertices with out-edges, picked by the seed);
 *   the answer is the total of vertices reached.
 * - Each array is its own malloc, so the shim attributes the offsets, the neighbours, the ranks
 *   and the frontier to different call sites (Porter's hints are per allocation site).
 *
 * Known caveats: no direction-optimising BFS (GAP's default switches to bottom-up on large
 * frontiers); the edge list is held while the CSR is built (8 bytes an edge, freed before the
 * kernel).
 */
#define _GNU_SOURCE
/* Under callgrind (--instr-atstart=no --cache-sim=yes) only the kernel is simulated: the graph's
 * generation and build run uninstrumented, ~10x faster than cachegrind's whole-run simulation.
 * Without valgrind's header the marks are absent and the JSON says so (callgrind_marks: false). */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define KERNEL_BEGIN() CALLGRIND_START_INSTRUMENTATION
#define KERNEL_END() CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_MARKS 1
#endif
#endif
#ifndef CALLGRIND_MARKS
#define KERNEL_BEGIN() ((void)0)
#define KERNEL_END() ((void)0)
#define CALLGRIND_MARKS 0
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int64_t n, m;
    int64_t *out_off, *in_off; /* n + 1 each */
    int32_t *out_nbr, *in_nbr; /* m each */
} graph_t;

static void die(const char *what) {
    fprintf(stderr, "gapk: %s\n", what);
    exit(2);
}

static void *xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "gapk: cannot allocate %zu bytes for %s\n", bytes, what);
        exit(3);
    }
    return p;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* R-MAT edges: for each of `scale` bits, a quadrant drawn with 16 bits of randomness (four levels
 * per 64-bit draw); a = 0.57, b = c = 0.19 in 1/65536ths. */
static void rmat_edges(int scale, int64_t m, uint64_t seed, int32_t *src, int32_t *dst) {
    const uint32_t A = 37355, AB = 37355 + 12452, ABC = 37355 + 2 * 12452; /* 0.57, 0.76, 0.95 of 65536 */
    int64_t n = (int64_t)1 << scale;
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    for (int64_t e = 0; e < m; e++) {
        uint32_t u = 0, v = 0;
        uint64_t r = 0;
        for (int bit = 0; bit < scale; bit++) {
            if (bit % 4 == 0) r = splitmix(&s);
            uint32_t q = (uint32_t)(r & 0xffff);
            r >>= 16;
            if (q >= A && q < AB) v |= 1u << bit;            /* b: right */
            else if (q >= AB && q < ABC) u |= 1u << bit;     /* c: down */
            else if (q >= ABC) { u |= 1u << bit; v |= 1u << bit; } /* d */
        }
        src[e] = (int32_t)u;
        dst[e] = (int32_t)v;
    }
    /* scramble ids (Fisher-Yates), as Graph500 does, so high-degree vertices are not all low ids */
    int32_t *perm = xmalloc((size_t)n * sizeof *perm, "the vertex permutation");
    for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix(&s) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t e = 0; e < m; e++) {
        src[e] = perm[src[e]];
        dst[e] = perm[dst[e]];
    }
    free(perm);
}

/* CSR of the edges grouped by `key`, neighbours `val`, neighbours sorted within a vertex. */
static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void csr(int64_t n, int64_t m, const int32_t *key, const int32_t *val, int64_t **off_out, int32_t **nbr_out) {
    int64_t *off = xmalloc((size_t)(n + 1) * sizeof *off, "CSR offsets");
    int32_t *nbr = xmalloc((size_t)m * sizeof *nbr, "CSR neighbours");
    memset(off, 0, (size_t)(n + 1) * sizeof *off);
    for (int64_t e = 0; e < m; e++) off[key[e] + 1]++;
    for (int64_t i = 0; i < n; i++) off[i + 1] += off[i];
    int64_t *fill = xmalloc((size_t)n * sizeof *fill, "CSR fill cursors");
    memcpy(fill, off, (size_t)n * sizeof *fill);
    for (int64_t e = 0; e < m; e++) nbr[fill[key[e]]++] = val[e];
    free(fill);
    for (int64_t i = 0; i < n; i++) qsort(nbr + off[i], (size_t)(off[i + 1] - off[i]), sizeof *nbr, cmp_i32);
    *off_out = off;
    *nbr_out = nbr;
}

static void build(graph_t *g, int64_t n, int64_t m, int32_t *src, int32_t *dst) {
    g->n = n;
    g->m = m;
    csr(n, m, src, dst, &g->out_off, &g->out_nbr);
    csr(n, m, dst, src, &g->in_off, &g->in_nbr);
}

static int64_t read_edges(const char *path, int64_t n, int32_t **src, int32_t **dst) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gapk: cannot open --edges %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (fseek(f, 0, SEEK_END) != 0) die("cannot size the --edges file");
    long bytes = ftell(f);
    rewind(f);
    if (bytes < 0 || bytes % 16) die("--edges must hold int64 (source, destination) pairs: its size is not a multiple of 16 bytes");
    int64_t m = bytes / 16;
    *src = xmalloc((size_t)m * sizeof **src, "edge sources");
    *dst = xmalloc((size_t)m * sizeof **dst, "edge destinations");
    for (int64_t e = 0; e < m; e++) {
        int64_t pair[2];
        if (fread(pair, sizeof pair, 1, f) != 1) die("short read of --edges");
        if (pair[0] < 0 || pair[0] >= n || pair[1] < 0 || pair[1] >= n) {
            fprintf(stderr, "gapk: edge %" PRId64 " (%" PRId64 ", %" PRId64 ") lies outside --vertices %" PRId64 "\n", e, pair[0], pair[1], n);
            exit(2);
        }
        (*src)[e] = (int32_t)pair[0];
        (*dst)[e] = (int32_t)pair[1];
    }
    fclose(f);
    return m;
}

static double pagerank(const graph_t *g, int iters, double **scores_out) {
    const double d = 0.85;
    int64_t n = g->n;
    double *rank = xmalloc((size_t)n * sizeof *rank, "ranks");
    double *contrib = xmalloc((size_t)n * sizeof *contrib, "outgoing contributions");
    for (int64_t v = 0; v < n; v++) rank[v] = 1.0 / (double)n;
    for (int it = 0; it < iters; it++) {
        for (int64_t u = 0; u < n; u++) {
            int64_t deg = g->out_off[u + 1] - g->out_off[u];
            contrib[u] = rank[u] / (double)(deg > 0 ? deg : 1);
        }
        for (int64_t v = 0; v < n; v++) {
            double sum = 0.0;
            for (int64_t e = g->in_off[v]; e < g->in_off[v + 1]; e++) sum += contrib[g->in_nbr[e]];
            rank[v] = (1.0 - d) / (double)n + d * sum;
        }
    }
    double total = 0.0;
    for (int64_t v = 0; v < n; v++) total += rank[v];
    free(contrib);
    *scores_out = rank;
    return total;
}

/* top-down BFS from root; parent[v] = -1 if unreached; returns the number reached */
static int64_t bfs(const graph_t *g, int32_t root, int32_t *parent, int32_t *queue) {
    for (int64_t v = 0; v < g->n; v++) parent[v] = -1;
    int64_t head = 0, tail = 0;
    parent[root] = root;
    queue[tail++] = root;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int64_t e = g->out_off[u]; e < g->out_off[u + 1]; e++) {
            int32_t v = g->out_nbr[e];
            if (parent[v] < 0) {
                parent[v] = u;
                queue[tail++] = v;
            }
        }
    }
    return tail;
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        fprintf(stderr, "gapk: %s %s: give an integer from %ld to %ld\n", flag, s, lo, hi);
        exit(2);
    }
    return x;
}

static void usage(void) {
    fprintf(stderr,
            "usage: gapk pagerank|bfs [--scale S] [--edge-factor F] [--iters N] [--roots K] [--seed X]\n"
            "                         [--edges FILE --vertices N [--print]] [--setup-only]\n"
            "  a generated R-MAT graph of 2^S vertices and F*2^S edges (S 4..30, F 1..64),\n"
            "  or a given one: FILE of int64 (source, destination) pairs over N vertices\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    const char *name = argv[1];
    int is_pr = strcmp(name, "pagerank") == 0, is_bfs = strcmp(name, "bfs") == 0;
    if (!is_pr && !is_bfs) usage();
    long scale = 16, ef = 16, iters = 20, roots = 16, seed = 1, vertices = 0;
    const char *edges = NULL;
    int print = 0, setup_only = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--print")) { print = 1; continue; }
        if (!strcmp(a, "--setup-only")) { setup_only = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--scale")) scale = parse_long(a, v, 4, 30);
        else if (!strcmp(a, "--edge-factor")) ef = parse_long(a, v, 1, 64);
        else if (!strcmp(a, "--iters")) iters = parse_long(a, v, 1, 1000);
        else if (!strcmp(a, "--roots")) roots = parse_long(a, v, 1, 4096);
        else if (!strcmp(a, "--seed")) seed = parse_long(a, v, 0, 1L << 40);
        else if (!strcmp(a, "--vertices")) vertices = parse_long(a, v, 1, 1L << 30);
        else if (!strcmp(a, "--edges")) edges = v;
        else usage();
        i++;
    }
    if (edges && !vertices) die("--edges needs --vertices N (the number of vertices the ids run over)");
    uint64_t t0 = now_ns();
    int32_t *src, *dst;
    int64_t n, m;
    if (edges) {
        n = vertices;
        m = read_edges(edges, n, &src, &dst);
    } else {
        n = (int64_t)1 << scale;
        m = (int64_t)ef << scale;
        src = xmalloc((size_t)m * sizeof *src, "edge sources");
        dst = xmalloc((size_t)m * sizeof *dst, "edge destinations");
        rmat_edges((int)scale, m, (uint64_t)seed, src, dst);
    }
    graph_t g;
    build(&g, n, m, src, dst);
    free(src);
    free(dst);
    double setup_s = (double)(now_ns() - t0) * 1e-9;
    double input_bytes = 2.0 * ((double)(n + 1) * sizeof(int64_t) + (double)m * sizeof(int32_t));
    uint64_t start = now_ns(), end = start;
    double answer = 0.0;
    if (!setup_only) {
        KERNEL_BEGIN();
        if (is_pr) {
            double *scores;
            answer = pagerank(&g, (int)iters, &scores);
            KERNEL_END();
            end = now_ns();
            if (print)
                for (int64_t v = 0; v < n; v++) printf("%.17g\n", scores[v]);
            free(scores);
        } else {
            int32_t *parent = xmalloc((size_t)n * sizeof *parent, "BFS parents");
            int32_t *queue = xmalloc((size_t)n * sizeof *queue, "BFS queue");
            if (edges) {
                answer = (double)bfs(&g, 0, parent, queue);
            } else {
                uint64_t s = (uint64_t)seed * 7919 + 3;
                for (long r = 0, tries = 0; r < roots && tries < 100 * roots; tries++) {
                    int32_t root = (int32_t)(splitmix(&s) % (uint64_t)n);
                    if (g.out_off[root + 1] == g.out_off[root]) continue; /* GAP skips roots without edges */
                    answer += (double)bfs(&g, root, parent, queue);
                    r++;
                }
            }
            KERNEL_END();
            end = now_ns();
            if (print)
                for (int64_t v = 0; v < n; v++) printf("%d\n", parent[v]);
            free(parent);
            free(queue);
        }
    }
    printf("{\"name\": \"native-%s\", \"scale\": %ld, \"vertices\": %" PRId64 ", \"edges\": %" PRId64
           ", \"seconds\": %.9f, \"setup_s\": %.6f, \"input_bytes\": %.0f, \"answer\": %.17g, \"setup_only\": %s"
           ", \"kernel_start_ns\": %" PRIu64 ", \"kernel_end_ns\": %" PRIu64 ", \"iters\": %ld, \"roots\": %ld, \"callgrind_marks\": %s}\n",
           name, edges ? 0L : scale, n, m, (double)(end - start) * 1e-9, setup_s, input_bytes, answer,
           setup_only ? "true" : "false", start, end, is_pr ? iters : 0L, is_bfs ? roots : 0L, CALLGRIND_MARKS ? "true" : "false");
    free(g.out_off);
    free(g.out_nbr);
    free(g.in_off);
    free(g.in_nbr);
    return 0;
}
