/* snoop.c — isolation test, attacker side: the payload is a decimal address; the reply is the
 * 16 bytes at that address of snoop's OWN linear memory (raw bytes). There is no way to name
 * another lambda's memory: given secret.wasm's nf_secret_addr(), snoop reads its own (zero)
 * bytes there. An address whose 16 bytes are not all inside snoop's memory traps (TRAP), as
 * any out-of-bounds access does. A payload that is not a decimal number -> -1 (BAD_REQUEST). */
#include "nf.h"

#define SNOOP_LEN 16

NF_DEFINE_BUFFER(4096)

NF_EXPORT("nf_handle") int nf_handle(int len) {
    if (len <= 0 || len > 10) return NF_BAD_REQUEST;
    nf_u32 addr;
    if (nf_atou(nf_buf, len, &addr) != len) return NF_BAD_REQUEST;
    const volatile nf_u8 *p = (const volatile nf_u8 *)(unsigned long)addr;
    nf_u8 got[SNOOP_LEN];
    for (int i = 0; i < SNOOP_LEN; i++) got[i] = p[i];
    nf_memcpy(nf_buf, got, SNOOP_LEN);
    return SNOOP_LEN;
}
