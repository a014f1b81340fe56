/* CRC-32C (Castagnoli), table-driven, one byte at a time. The table is
 * built at compile time from the reflected polynomial, so there is no
 * start-up step and no mutable state. The log writes one record per
 * acknowledged update and a restore reads each once, so a byte-wise table
 * is fast enough; hardware CRC instructions would tie the format to one
 * architecture's code path for no measurable gain here. */
#include "ps/crc32c.h"

#define CRC32C_POLY 0x82F63B78u /* 0x1EDC6F41 bit-reversed */

/* One step of the bitwise algorithm, eight times: the table entry of b. */
#define S1(c) (((c) >> 1) ^ (((c)&1u) ? CRC32C_POLY : 0u))
#define S8(b) S1(S1(S1(S1(S1(S1(S1(S1((uint32_t)(b)))))))))
#define R4(b) S8(b), S8((b) + 1), S8((b) + 2), S8((b) + 3)
#define R16(b) R4(b), R4((b) + 4), R4((b) + 8), R4((b) + 12)
#define R64(b) R16(b), R16((b) + 16), R16((b) + 32), R16((b) + 48)

static const uint32_t crc32c_table[256] = {R64(0), R64(64), R64(128), R64(192)};

uint32_t crc32c_update(uint32_t crc, const void *p, size_t len)
{
    const unsigned char *b = p;

    crc = ~crc;
    while (len-- > 0)
        crc = (crc >> 8) ^ crc32c_table[(crc ^ *b++) & 0xFFu];
    return ~crc;
}
