/* nf.h — the nearfaas fast-path lambda ABI for C (see docs/fastpath.md, "Lambda ABI").
 *
 * A lambda is a wasm32 module that exports:
 *   memory                  its one linear memory (wasm-ld exports it by default)
 *   nf_buffer()      -> i32 address of its I/O buffer
 *   nf_buffer_size() -> i32 the buffer's size in bytes
 *   nf_handle(len)   -> i32 request payload in buffer[0..len]; reply written into the buffer;
 *                           returns the reply length, a negative number (BAD_REQUEST), or
 *                           NF_EXTERNAL after writing [len u32 LE][bytes to send] into the buffer
 *   nf_resume(len)   -> i32 optional: the external reply is in buffer[0..len]; same convention
 *
 * The lambdas here are freestanding (no libc, -nostdlib -mbulk-memory): they import nothing.
 * memcpy/memmove/memset come from __builtin_* and lower to memory.copy / memory.fill.
 */
#ifndef NF_H
#define NF_H

typedef unsigned char nf_u8;
typedef unsigned int nf_u32;

#define NF_EXTERNAL (-2)    /* nf_handle/nf_resume: make an external call */
#define NF_BAD_REQUEST (-1) /* any negative other than NF_EXTERNAL: BAD_REQUEST */

/* Export a function under `name` (the export name is kept by wasm-ld --strip-all).
 *
 * Lambda coalescing (λ-NIC §5.1; the Makefile's coalesced.wasm): built with -DNF_ENTRY=web2,
 * a lambda's exports become "web2.nf_handle", "web2.nf_buffer", ... and its C symbols
 * web2__nf_handle, ..., so several lambdas link into one module (one entry each); binaryen then
 * folds the code they share. Deploy such a lambda with "entry": "web2" (docs/fastpath.md). */
#ifdef NF_ENTRY
#define NF_XSTR2(x) #x
#define NF_XSTR(x) NF_XSTR2(x)
#define NF_CAT2(a, b) a##__##b
#define NF_CAT(a, b) NF_CAT2(a, b)
#define nf_handle NF_CAT(NF_ENTRY, nf_handle)
#define nf_resume NF_CAT(NF_ENTRY, nf_resume)
#define nf_buffer NF_CAT(NF_ENTRY, nf_buffer)
#define nf_buffer_size NF_CAT(NF_ENTRY, nf_buffer_size)
#define NF_EXPORT(name) __attribute__((export_name(NF_XSTR(NF_ENTRY) "." name), used, visibility("default")))
#else
#define NF_EXPORT(name) __attribute__((export_name(name), used, visibility("default")))
#endif

/* Defines the static I/O buffer `nf_buf` of `size` bytes and the two exports that describe it.
 * Use once per lambda, at file scope. */
#define NF_DEFINE_BUFFER(size)                                                                  \
    enum { NF_BUF_SIZE = (size) };                                                              \
    static nf_u8 nf_buf[(size)] __attribute__((aligned(16)));                                   \
    NF_EXPORT("nf_buffer") int nf_buffer(void) { return (int)(unsigned long)nf_buf; }           \
    NF_EXPORT("nf_buffer_size") int nf_buffer_size(void) { return (int)(size); }

/* The default buffer: a UDP datagram's largest payload (65,507 - 4 id bytes) fits. */
#define NF_DEFAULT_BUFFER_SIZE 65536

/* ---- small freestanding helpers ------------------------------------------------------------ */

#define nf_memcpy(d, s, n) __builtin_memcpy((d), (s), (n))
#define nf_memmove(d, s, n) __builtin_memmove((d), (s), (n))
#define nf_memset(d, c, n) __builtin_memset((d), (c), (n))

static inline int nf_strlen(const char *s) {
    int n = 0;
    while (s[n]) n++;
    return n;
}

/* Writes the decimal form of v at dst (no NUL); returns the number of digits (1..10). */
static inline int nf_utoa(nf_u32 v, nf_u8 *dst) {
    nf_u8 tmp[10];
    int n = 0;
    do {
        tmp[n++] = (nf_u8)('0' + v % 10u);
        v /= 10u;
    } while (v);
    for (int i = 0; i < n; i++) dst[i] = tmp[n - 1 - i];
    return n;
}

/* Parses an unsigned decimal from p[0..len): returns the number of digits consumed (0 if none or
 * on overflow of 32 bits); the value goes to *out. */
static inline int nf_atou(const nf_u8 *p, int len, nf_u32 *out) {
    unsigned long long v = 0;
    int i = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9') {
        v = v * 10u + (nf_u32)(p[i] - '0');
        if (v > 0xFFFFFFFFull) return 0;
        i++;
    }
    *out = (nf_u32)v;
    return i;
}

/* Stores v little-endian at dst (the NF_EXTERNAL length prefix). */
static inline void nf_put_u32le(nf_u8 *dst, nf_u32 v) {
    dst[0] = (nf_u8)v;
    dst[1] = (nf_u8)(v >> 8);
    dst[2] = (nf_u8)(v >> 16);
    dst[3] = (nf_u8)(v >> 24);
}

static inline int nf_starts_with(const nf_u8 *p, int len, const char *lit) {
    int n = nf_strlen(lit);
    if (len < n) return 0;
    for (int i = 0; i < n; i++)
        if (p[i] != (nf_u8)lit[i]) return 0;
    return 1;
}

#endif /* NF_H */
