/* counter.c — test lambda: a global counter incremented on every call; the reply is the count
 * in decimal ("1", "2", ...). Proves that an instance's state persists across calls (and is
 * reset when the instance is rebuilt, swapped or removed). The payload is ignored. */
#include "nf.h"

NF_DEFINE_BUFFER(4096)

static nf_u32 calls;

NF_EXPORT("nf_handle") int nf_handle(int len) {
    (void)len;
    calls++;
    return nf_utoa(calls, nf_buf);
}
