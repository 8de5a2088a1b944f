/* web.c — λ-NIC's web-server lambda: replies "<greeting>v<VERSION>: " followed by the request
 * payload (truncated so that the reply fits the buffer).
 *   web.wasm     -DVERSION=1                      "Hello from nearfaas fastpath v1: <payload>"
 *   web_v2.wasm  -DVERSION=2                      "Hello from nearfaas fastpath v2: <payload>"
 *   web2.wasm    -DLAMBDA_NAME='"lambda 2 "'       "Hello from nearfaas fastpath lambda 2 v1: ..."
 *   web3.wasm    -DLAMBDA_NAME='"lambda 3 "'       "Hello from nearfaas fastpath lambda 3 v1: ..."
 */
#include "nf.h"

#ifndef VERSION
#define VERSION 1
#endif
#ifndef LAMBDA_NAME
#define LAMBDA_NAME ""
#endif

#define NF_STR2(x) #x
#define NF_STR(x) NF_STR2(x)

static const char PREFIX[] = "Hello from nearfaas fastpath " LAMBDA_NAME "v" NF_STR(VERSION) ": ";
#define PREFIX_LEN ((int)sizeof(PREFIX) - 1)

NF_DEFINE_BUFFER(NF_DEFAULT_BUFFER_SIZE)

NF_EXPORT("nf_handle") int nf_handle(int len) {
    if (len < 0 || len > NF_BUF_SIZE) return NF_BAD_REQUEST;
    int keep = len;
    if (keep > NF_BUF_SIZE - PREFIX_LEN) keep = NF_BUF_SIZE - PREFIX_LEN;
    nf_memmove(nf_buf + PREFIX_LEN, nf_buf, (unsigned)keep);
    nf_memcpy(nf_buf, PREFIX, PREFIX_LEN);
    return PREFIX_LEN + keep;
}
