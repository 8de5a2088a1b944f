/* stream_bad.c — a misbehaving stream function for the tests: an element 1 traps
 * (unreachable), an element 2 spins forever (fuel or the epoch timeout stops it), an element 3
 * spins a while (2M iterations) and is counted; anything else is counted, and finish replies with
 * the count. */
#include "nf.h"

#define BUF_SIZE 4096
static nf_u8 buf[BUF_SIZE] __attribute__((aligned(16)));
static nf_u32 count;
static volatile nf_u32 sink;

NF_EXPORT("nf_stream_buf") int nf_stream_buf(void) { return (int)(unsigned long)buf; }
NF_EXPORT("nf_stream_buf_size") int nf_stream_buf_size(void) { return BUF_SIZE; }
NF_EXPORT("nf_stream_init") int nf_stream_init(int k) { (void)k; count = 0; return 0; }

NF_EXPORT("nf_stream_feed") int nf_stream_feed(int len) {
    for (int i = 0; i + 4 <= len; i += 4) {
        nf_u32 x = (nf_u32)buf[i] | (nf_u32)buf[i + 1] << 8 | (nf_u32)buf[i + 2] << 16 |
                   (nf_u32)buf[i + 3] << 24;
        if (x == 1) __builtin_trap();
        if (x == 2)
            for (;;) sink++;
        if (x == 3) /* a while, and back: many of these add up past a request's budget */
            for (nf_u32 j = 0; j < 2000000; j++) sink++;
        count++;
    }
    return 0;
}

NF_EXPORT("nf_stream_finish") int nf_stream_finish(void) {
    nf_put_u32le(buf, count);
    return 4;
}
