/* CRC-32C (Castagnoli), the checksum of every write-ahead log record. */
#ifndef FLPS_PS_CRC32C_H
#define FLPS_PS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of len bytes at p, continuing from crc: pass 0 to start, and
 * the result of the previous call to checksum data given in pieces.
 * crc32c_update(0, "123456789", 9) is 0xE3069283. Pure; thread-safe. */
uint32_t crc32c_update(uint32_t crc, const void *p, size_t len);

#endif
