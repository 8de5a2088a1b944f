/* spin.c — test lambda: loops forever (until the executor's epoch deadline or fuel interrupts it:
 * status TIMEOUT). The volatile counter is a side effect the compiler must keep, so the loop
 * cannot be removed. */
#include "nf.h"

NF_DEFINE_BUFFER(4096)

static volatile nf_u32 spins;

NF_EXPORT("nf_handle") int nf_handle(int len) {
    (void)len;
    for (;;) spins++;
    return 0; /* not reached */
}
