/* topk_stream.c — a WebAssembly stream function (docs/fastpath.md, "WebAssembly stream
 * functions"): Top-K of u32 elements by sorted insertion, the same network as the native
 * `topk` variant `insertion` (K registers, largest first; every element walks all K cells, each
 * keeping the larger and passing the smaller on; branch-free, no early exit).
 *
 * Stream ABI: nf_stream_buf()/nf_stream_buf_size() describe the input buffer;
 * nf_stream_init(k) resets the state; nf_stream_feed(len) consumes buf[0..len] (u32 LE
 * elements, len a multiple of 4); nf_stream_finish() writes the reply elements (u32 LE) into
 * the buffer and returns their length in bytes. A negative return is BAD_REQUEST.
 */
#include "nf.h"

#define MAX_K 4096
#define BUF_SIZE 65536

static nf_u8 buf[BUF_SIZE] __attribute__((aligned(16)));
static nf_u32 regs[MAX_K];
static nf_u32 k;
static unsigned long long seen; /* elements fed (the first min(seen, k) registers are valid) */

NF_EXPORT("nf_stream_buf") int nf_stream_buf(void) { return (int)(unsigned long)buf; }
NF_EXPORT("nf_stream_buf_size") int nf_stream_buf_size(void) { return BUF_SIZE; }

NF_EXPORT("nf_stream_init") int nf_stream_init(int kk) {
    if (kk < 1 || kk > MAX_K) return NF_BAD_REQUEST;
    k = (nf_u32)kk;
    seen = 0;
    nf_memset(regs, 0, sizeof regs);
    return 0;
}

NF_EXPORT("nf_stream_feed") int nf_stream_feed(int len) {
    if (len < 0 || len > BUF_SIZE || (len & 3) || k == 0) return NF_BAD_REQUEST;
    const nf_u8 *p = buf;
    for (int i = 0; i < len; i += 4) {
        nf_u32 x = (nf_u32)p[i] | (nf_u32)p[i + 1] << 8 | (nf_u32)p[i + 2] << 16 |
                   (nf_u32)p[i + 3] << 24;
        for (nf_u32 j = 0; j < k; j++) {
            nf_u32 r = regs[j];
            nf_u32 hi = r > x ? r : x;
            x = r > x ? x : r;
            regs[j] = hi;
        }
    }
    seen += (unsigned long long)(len / 4);
    return 0;
}

NF_EXPORT("nf_stream_finish") int nf_stream_finish(void) {
    nf_u32 n = seen < k ? (nf_u32)seen : k;
    for (nf_u32 j = 0; j < n; j++) nf_put_u32le(buf + 4 * j, regs[j]);
    return (int)(4 * n);
}
