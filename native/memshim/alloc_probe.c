/* The memory shim's test program: makes known allocations from three call sites and prints
 * each one (op size addr site) on stdout, so a test can compare the shim's log with the truth.
 * Usage: alloc_probe SCALE   (sizes grow with SCALE; the call sites do not change) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>

__attribute__((noinline)) static void *site_a(size_t n) { return malloc(n); }
__attribute__((noinline)) static void *site_b(size_t n) { return calloc(4, n / 4); }
__attribute__((noinline)) static void *site_c(size_t n) {
    return mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

int main(int argc, char **argv) {
    size_t scale = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    setvbuf(stdout, NULL, _IONBF, 0);  /* stdio's own buffer is small anyway; unbuffered is clearer */
    void *small = malloc(64);  /* below the threshold: not logged */
    size_t na = 200000 * scale, nb = 400000 * scale, nc = 1048576 * scale;
    void *a = site_a(na);
    printf("malloc %zu %p A\n", na, a);
    void *b = site_b(nb);
    printf("calloc %zu %p B\n", nb, b);
    void *c = site_c(nc);
    printf("mmap %zu %p C\n", nc, c);
    memset(a, 1, na);
    memset(c, 1, nc);
    size_t ua = malloc_usable_size(a);
    printf("free %zu %p A\n", ua, a);  /* printed before the free: the pointer is dead after it */
    free(a);
    printf("munmap %zu %p C\n", nc, c);
    munmap(c, nc);
    size_t ub = malloc_usable_size(b);
    printf("free %zu %p B\n", ub, b);
    free(b);
    free(small);
    return 0;
}
