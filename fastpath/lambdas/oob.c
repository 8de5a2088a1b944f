/* oob.c — test lambda: traps (status TRAP). The first payload byte picks how:
 *   (empty) or 'r'  read  4 bytes at 0xFFFFFFF0, far beyond its linear memory  -> out of bounds
 *   'w'             write 4 bytes at 0xFFFFFFF0                                -> out of bounds
 *   'u'             __builtin_trap()                                           -> unreachable
 *   'd'             integer division by zero                                   -> divide by zero
 *   'o'             reply "ok" without trapping (to check the rebuilt instance works)
 */
#include "nf.h"

NF_DEFINE_BUFFER(4096)

static volatile nf_u32 zero; /* volatile: the compiler cannot fold the division */

NF_EXPORT("nf_handle") int nf_handle(int len) {
    nf_u8 mode = len > 0 ? nf_buf[0] : 'r';
    volatile int *far = (volatile int *)0xFFFFFFF0u;
    switch (mode) {
    case 'w':
        *far = 0x6e66;
        return 0;
    case 'u':
        __builtin_trap();
    case 'd':
        return (int)(1000u / zero);
    case 'o':
        nf_buf[0] = 'o';
        nf_buf[1] = 'k';
        return 2;
    default:
        return *far; /* 'r' and anything else */
    }
}
