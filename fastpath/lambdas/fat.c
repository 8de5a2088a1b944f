/* fat.c — test lambda: an instance that keeps 15 MiB of linear memory resident. Every call
 * writes one byte to each 4 KiB page of a 15 MiB global array (global state persists across
 * calls, so the pages stay touched while the instance lives); the reply is "fat". The red
 * team's N2 stand-in (round 5): a stack of such lambdas must not grow the executor past its
 * --pool-memory budget (fastpath/tests/pool.rs). */
#include "nf.h"

NF_DEFINE_BUFFER(4096)

enum { FAT_BYTES = 15 << 20 };
static nf_u8 fat[FAT_BYTES];

NF_EXPORT("nf_handle") int nf_handle(int len) {
    (void)len;
    for (int i = 0; i < FAT_BYTES; i += 4096) fat[i] += 1;
    nf_buf[0] = 'f';
    nf_buf[1] = 'a';
    nf_buf[2] = 't';
    return 3;
}
