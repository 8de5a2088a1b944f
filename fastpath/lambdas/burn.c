/* burn.c — a compute-heavy lambda whose length the caller chooses, with a checkable result:
 * the payload is "<rounds> <data>" (rounds in decimal ASCII, at most 9 digits, then one space);
 * a payload without the space or with a bad count -> BAD_REQUEST; the reply is the 16 hex digits of
 *     h = FNV-1a-64 offset; for r in 0..rounds: (for b in data: h = (h ^ b) * FNV prime); h ^= r
 * so a call costs about rounds x len(data) multiply steps, and any caller (tests, the fairness
 * benchmark) can recompute the answer. Used to show that preemptive slicing (src/slice.rs)
 * keeps a light lambda's latency bounded beside long calls, and that it preserves results. */
#include "nf.h"

NF_DEFINE_BUFFER(4096)

typedef unsigned long long nf_u64;

NF_EXPORT("nf_handle") int nf_handle(int len) {
    nf_u32 rounds = 0;
    int i = 0;
    for (; i < len && i < 10 && nf_buf[i] >= '0' && nf_buf[i] <= '9'; i++) rounds = rounds * 10u + (nf_u32)(nf_buf[i] - '0');
    if (i == 0 || i > 9 || i >= len || nf_buf[i] != ' ') return NF_BAD_REQUEST;
    const nf_u8 *data = nf_buf + i + 1;
    int n = len - i - 1;
    nf_u64 h = 0xcbf29ce484222325ULL;
    for (nf_u32 r = 0; r < rounds; r++) {
        for (int k = 0; k < n; k++) h = (h ^ data[k]) * 0x100000001b3ULL;
        h ^= r;
    }
    static const char hex[] = "0123456789abcdef";
    for (int k = 0; k < 16; k++) nf_buf[k] = (nf_u8)hex[(h >> (60 - 4 * k)) & 0xF];
    return 16;
}
