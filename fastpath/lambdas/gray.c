/* gray.c — λ-NIC's image lambda: RGBA -> grayscale. The payload is width*height*4 bytes of RGBA
 * (row order does not matter); the reply is width*height bytes of luma
 *     Y = (77*R + 150*G + 29*B) >> 8        (alpha ignored; 77+150+29 = 256)
 * A payload whose length is not a multiple of 4 -> -1 (BAD_REQUEST). The buffer is 1 MiB
 * (a 256x256 RGBA image is 262,144 bytes; 512x512 fits exactly). The output is written in place
 * over the input: output byte i only overwrites input bytes < 4i+4 already consumed.
 *
 * Built twice: gray.wasm with -msimd128 (16 pixels per step, wasm SIMD) and gray_scalar.wasm
 * without (one pixel per step, as λ-NIC's Micro-C version). Both give identical bytes. */
#include "nf.h"
#ifdef __wasm_simd128__
#include <wasm_simd128.h>
#endif

#define GRAY_BUFFER_SIZE (1 << 20)

NF_DEFINE_BUFFER(GRAY_BUFFER_SIZE)

static inline nf_u8 luma(nf_u32 px) { /* wasm is little-endian: R is byte 0 */
    nf_u32 r = px & 0xFFu, g = (px >> 8) & 0xFFu, b = (px >> 16) & 0xFFu;
    return (nf_u8)((77u * r + 150u * g + 29u * b) >> 8);
}

#ifdef __wasm_simd128__
/* 4 pixels (one v128 of RGBA) -> 4 luma values in the u32 lanes */
static inline v128_t luma4(v128_t px) {
    const v128_t m = wasm_i32x4_splat(0xFF);
    v128_t r = wasm_v128_and(px, m);
    v128_t g = wasm_v128_and(wasm_u32x4_shr(px, 8), m);
    v128_t b = wasm_v128_and(wasm_u32x4_shr(px, 16), m);
    v128_t y = wasm_i32x4_add(wasm_i32x4_add(wasm_i32x4_mul(r, wasm_i32x4_splat(77)),
                                             wasm_i32x4_mul(g, wasm_i32x4_splat(150))),
                              wasm_i32x4_mul(b, wasm_i32x4_splat(29)));
    return wasm_u32x4_shr(y, 8);
}
#endif

NF_EXPORT("nf_handle") int nf_handle(int len) {
    if (len < 0 || len > NF_BUF_SIZE || (len & 3)) return NF_BAD_REQUEST;
    int pixels = len >> 2;
    nf_u8 *buf = nf_buf;
    int i = 0;
#ifdef __wasm_simd128__
    /* 16 pixels a step: all 64 input bytes are loaded before the 16 output bytes are stored */
    for (; i + 16 <= pixels; i += 16) {
        const nf_u8 *in = buf + 4 * i;
        v128_t y0 = luma4(wasm_v128_load(in)), y1 = luma4(wasm_v128_load(in + 16));
        v128_t y2 = luma4(wasm_v128_load(in + 32)), y3 = luma4(wasm_v128_load(in + 48));
        v128_t lo = wasm_u16x8_narrow_i32x4(y0, y1), hi = wasm_u16x8_narrow_i32x4(y2, y3);
        wasm_v128_store(buf + i, wasm_u8x16_narrow_i16x8(lo, hi));
    }
#endif
    for (; i < pixels; i++) {
        nf_u32 px;
        nf_memcpy(&px, buf + 4 * i, 4); /* one 32-bit load */
        buf[i] = luma(px);
    }
    return pixels;
}
