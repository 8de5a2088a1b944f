/* kv.c — λ-NIC's key-value lambda: a memcached (text protocol) client.
 *
 * nf_handle(len): the request payload is one line (a trailing "\n" or "\r\n" is ignored):
 *     GET <key>            ->  sends "get <key>\r\n"
 *     SET <key> <value>    ->  sends "set <key> 0 0 <n>\r\n<value>\r\n"
 *   The verb is upper case, followed by one space; <value> is the rest of the payload after
 *   the single space that follows the key (it may contain spaces, may be empty). The key is
 *   1..250 bytes, none of them a space or control character (<= 0x20, 0x7f). The buffer gets
 *   [len u32 LE][command] and nf_handle returns NF_EXTERNAL (-2). A malformed request -> -1
 *   (BAD_REQUEST). (Same rules as the native `kv` in fastpath/src/lambda.rs.)
 *
 * nf_resume(len): memcached's reply is in buffer[0..len]. It keeps no state between nf_handle
 * and nf_resume (the reply alone says what it is), so calls may interleave:
 *     "VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\nEND\r\n"  ->  "VALUE <data>"
 *     "END\r\n"                                                  ->  "NOT_FOUND"
 *     "STORED\r\n"                                               ->  "STORED"
 *     anything else (NOT_STORED, ERROR, SERVER_ERROR, truncated)  ->  -1 (BAD_REQUEST)
 */
#include "nf.h"

#define KV_MAX_KEY 250

/* 128 KiB: any datagram's payload (<= 65,503 bytes) plus the command's few header bytes, and a
 * GET reply of a value that large, fit. */
NF_DEFINE_BUFFER(128 * 1024)

static nf_u8 key_copy[KV_MAX_KEY];

static int verb_is(const nf_u8 *p, const char *v) {
    return p[0] == v[0] && p[1] == v[1] && p[2] == v[2];
}

static int is_key_byte(nf_u8 c) { return c > 0x20 && c != 0x7f; }

NF_EXPORT("nf_handle") int nf_handle(int len) {
    if (len < 0 || len > NF_BUF_SIZE) return NF_BAD_REQUEST;
    /* ignore one trailing line ending */
    if (len > 0 && nf_buf[len - 1] == '\n') len--;
    if (len > 0 && nf_buf[len - 1] == '\r') len--;
    if (len < 5 || nf_buf[3] != ' ') return NF_BAD_REQUEST;
    int is_get = verb_is(nf_buf, "GET"), is_set = verb_is(nf_buf, "SET");
    if (!is_get && !is_set) return NF_BAD_REQUEST;

    int k0 = 4, k1 = 4;
    while (k1 < len && nf_buf[k1] != ' ') {
        if (!is_key_byte(nf_buf[k1])) return NF_BAD_REQUEST;
        k1++;
    }
    int klen = k1 - k0;
    if (klen < 1 || klen > KV_MAX_KEY) return NF_BAD_REQUEST;
    nf_memcpy(key_copy, nf_buf + k0, (unsigned)klen);

    nf_u8 *cmd = nf_buf + 4; /* after the u32 LE length prefix */
    int n;
    if (is_get) {
        if (k1 != len) return NF_BAD_REQUEST; /* GET takes only a key */
        if (4 + 4 + klen + 2 > NF_BUF_SIZE) return NF_BAD_REQUEST;
        nf_memcpy(cmd, "get ", 4);
        nf_memcpy(cmd + 4, key_copy, (unsigned)klen);
        cmd[4 + klen] = '\r';
        cmd[4 + klen + 1] = '\n';
        n = 4 + klen + 2;
    } else {
        if (k1 >= len) return NF_BAD_REQUEST; /* SET needs the space before the value */
        int v0 = k1 + 1;
        nf_u32 vlen = (nf_u32)(len - v0);
        nf_u8 digits[10];
        int nd = nf_utoa(vlen, digits);
        int hdr = 4 + klen + 5 + nd + 2; /* "set " key " 0 0 " n "\r\n" */
        if (4 + hdr + (int)vlen + 2 > NF_BUF_SIZE) return NF_BAD_REQUEST;
        /* the value moves right, from v0 to 4 + hdr = v0 + 10 + nd (overlapping): memmove */
        nf_memmove(cmd + hdr, nf_buf + v0, vlen);
        nf_memcpy(cmd, "set ", 4);
        nf_memcpy(cmd + 4, key_copy, (unsigned)klen);
        nf_memcpy(cmd + 4 + klen, " 0 0 ", 5);
        nf_memcpy(cmd + 4 + klen + 5, digits, (unsigned)nd);
        cmd[hdr - 2] = '\r';
        cmd[hdr - 1] = '\n';
        cmd[hdr + vlen] = '\r';
        cmd[hdr + vlen + 1] = '\n';
        n = hdr + (int)vlen + 2;
    }
    nf_put_u32le(nf_buf, (nf_u32)n);
    return NF_EXTERNAL;
}

static int reply(const char *s) {
    int n = nf_strlen(s);
    nf_memcpy(nf_buf, s, (unsigned)n);
    return n;
}

/* Index of the first "\r\n" at or after `from`, or -1. */
static int find_crlf(int from, int len) {
    for (int i = from; i + 1 < len; i++)
        if (nf_buf[i] == '\r' && nf_buf[i + 1] == '\n') return i;
    return -1;
}

/* Skips one space-free token starting at *i (which must not be empty); returns 0 if empty. */
static int skip_token(int *i, int end) {
    int s = *i;
    while (*i < end && nf_buf[*i] != ' ') (*i)++;
    return *i > s;
}

NF_EXPORT("nf_resume") int nf_resume(int len) {
    if (len < 0 || len > NF_BUF_SIZE) return NF_BAD_REQUEST;
    if (len == 5 && nf_starts_with(nf_buf, len, "END\r\n")) return reply("NOT_FOUND");
    if (len == 8 && nf_starts_with(nf_buf, len, "STORED\r\n")) return reply("STORED");
    if (!nf_starts_with(nf_buf, len, "VALUE ")) return NF_BAD_REQUEST;

    int eol = find_crlf(6, len);
    if (eol < 0) return NF_BAD_REQUEST;
    int i = 6;
    if (!skip_token(&i, eol) || i >= eol) return NF_BAD_REQUEST; /* <key> */
    i++;
    if (!skip_token(&i, eol) || i >= eol) return NF_BAD_REQUEST; /* <flags> */
    i++;
    nf_u32 bytes;
    int nd = nf_atou(nf_buf + i, eol - i, &bytes);
    if (nd == 0) return NF_BAD_REQUEST;
    i += nd;
    if (i != eol && nf_buf[i] != ' ') return NF_BAD_REQUEST; /* optional " <cas>" follows */

    int d0 = eol + 2;
    /* <data> "\r\n" "END\r\n" must end the reply exactly */
    if ((unsigned long long)d0 + bytes + 7 != (unsigned long long)len) return NF_BAD_REQUEST;
    if (!nf_starts_with(nf_buf + d0 + bytes, 7, "\r\nEND\r\n")) return NF_BAD_REQUEST;
    if (6 + bytes > (nf_u32)NF_BUF_SIZE) return NF_BAD_REQUEST;
    nf_memmove(nf_buf + 6, nf_buf + d0, bytes); /* d0 >= 13 > 6: moves left */
    nf_memcpy(nf_buf, "VALUE ", 6);
    return 6 + (int)bytes;
}
