/* CRC-32C (Castagnoli) and TFRecord's masked CRC, for the two optional C extensions that frame records:
 * shardkit/_examples.c (reading them back) and wikiprep/_speedups.c (writing them). Header-only, every
 * function static: each extension holds its own copy, and neither needs the other to be built.
 *
 * The module's init calls crc32c_init() once: it fills the tables, then takes SSE4.2's crc32 instruction
 * where the CPU has it, unless SHARDKIT_CRC32C_TABLE is set (so that the tests run the portable path on any
 * machine). crc32c_best is what the extension calls; crc32c_software stays callable for comparisons.
 */
#ifndef SHARDKIT_CRC32C_H
#define SHARDKIT_CRC32C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc32c_tables[8][256];

static void crc32c_tables_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* the Castagnoli polynomial, reflected */
        crc32c_tables[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc32c_tables[t][n] = (crc32c_tables[t - 1][n] >> 8) ^ crc32c_tables[0][crc32c_tables[t - 1][n] & 0xFF];
}

/* Slicing by 8: eight bytes a step, on any platform (the words are read little-endian whatever the CPU). */
static uint32_t crc32c_software(const uint8_t *d, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, d, 4);
        memcpy(&hi, d + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc32c_tables[7][lo & 0xFF] ^ crc32c_tables[6][(lo >> 8) & 0xFF] ^ crc32c_tables[5][(lo >> 16) & 0xFF] ^
            crc32c_tables[4][lo >> 24] ^ crc32c_tables[3][hi & 0xFF] ^ crc32c_tables[2][(hi >> 8) & 0xFF] ^
            crc32c_tables[1][(hi >> 16) & 0xFF] ^ crc32c_tables[0][hi >> 24];
        d += 8;
        n -= 8;
    }
    while (n--)
        c = crc32c_tables[0][(c ^ *d++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHARDKIT_CRC32C_INSTRUCTION 1
/* SSE4.2's crc32 instruction computes the same CRC-32C, eight bytes an instruction. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const uint8_t *d, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, d, 8);
        c = __builtin_ia32_crc32di(c, v);
        d += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *d++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static uint32_t (*crc32c_best)(const uint8_t *, size_t) = crc32c_software;

static void crc32c_init(void) {
    crc32c_tables_init();
#ifdef SHARDKIT_CRC32C_INSTRUCTION
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2") && !getenv("SHARDKIT_CRC32C_TABLE"))
        crc32c_best = crc32c_sse42;
#endif
}

/* TFRecord's masked CRC of d[0:n]: the CRC rotated right by 15 bits, plus a constant. */
static inline uint32_t masked_crc(const uint8_t *d, size_t n) {
    uint32_t c = crc32c_best(d, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

#endif /* SHARDKIT_CRC32C_H */
