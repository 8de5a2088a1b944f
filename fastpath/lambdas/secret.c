/* secret.c — isolation test, victim side: each call copies the payload (up to 64 bytes) into a
 * static `secret` buffer and replies "ok". nf_secret_addr() exports the buffer's address in ITS
 * linear memory, so a test can ask snoop.wasm to read the same address in snoop's memory and
 * show that it sees snoop's own bytes, never the secret. */
#include "nf.h"

#define SECRET_SIZE 64

NF_DEFINE_BUFFER(4096)

static nf_u8 secret[SECRET_SIZE] __attribute__((aligned(16)));

NF_EXPORT("nf_secret_addr") int nf_secret_addr(void) { return (int)(unsigned long)secret; }

NF_EXPORT("nf_handle") int nf_handle(int len) {
    if (len < 0) return NF_BAD_REQUEST;
    int n = len < SECRET_SIZE ? len : SECRET_SIZE;
    nf_memset(secret, 0, SECRET_SIZE);
    nf_memcpy(secret, nf_buf, (unsigned)n);
    nf_buf[0] = 'o';
    nf_buf[1] = 'k';
    return 2;
}
