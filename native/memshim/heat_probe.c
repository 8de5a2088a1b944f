/* The sampler's test program: two 64-page blocks from two call sites; for PHASE_MS it
 * writes only block A (every page, over and over), then only block B, then only reads block A,
 * then touches neither. It prints
 * "phase <name> <t_ns>" at each boundary (CLOCK_MONOTONIC, as the shim's log) and the blocks'
 * addresses, so a test can check that the sampled writes fall in the right block at the right time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGES 64
#define PHASE_MS 300

static unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

__attribute__((noinline)) static char *site_a(void) { return malloc(PAGES * 4096); }
__attribute__((noinline)) static char *site_b(void) { return malloc(PAGES * 4096); }

static unsigned long read_for(volatile const char *block, unsigned long long ms) {
    unsigned long sum = 0;
    unsigned long long end = now_ns() + ms * 1000000ULL;
    while (now_ns() < end)
        for (int i = 0; i < PAGES; i++)
            sum += (unsigned char)block[i * 4096 + 100];
    return sum;
}

static void write_for(volatile char *block, unsigned long long ms) {
    unsigned long long end = now_ns() + ms * 1000000ULL;
    while (now_ns() < end)
        for (int i = 0; i < PAGES; i++)
            block[i * 4096 + 100] += 1;
}

int main(void) {
    char *a = site_a(), *b = site_b();
    printf("blocks %p %p %d\n", (void *)a, (void *)b, PAGES * 4096);
    printf("phase a %llu\n", now_ns());
    write_for(a, PHASE_MS);
    printf("phase b %llu\n", now_ns());
    write_for(b, PHASE_MS);
    printf("phase read %llu\n", now_ns());
    unsigned long sum = read_for(a, PHASE_MS);
    printf("phase idle %llu\n", now_ns());
    struct timespec rest = {0, PHASE_MS * 1000000L};
    nanosleep(&rest, NULL);
    printf("phase end %llu\n", now_ns());
    printf("sum %lu\n", sum); /* what A held: the writes of phase a, read back through the stash */
    free(a);
    free(b);
    return 0;
}
