/* Reading small kernel and state files whole (sysfs, powercap, a record
 * file): the one reader for the probes and records that need a line or a
 * number from a path. */
#ifndef FLPS_COMMON_READFILE_H
#define FLPS_COMMON_READFILE_H

#include <stddef.h>
#include <stdint.h>

/* The file at path into buf (len bytes, always NUL-terminated when len >
 * 0). Returns 1 when the whole file fitted, else 0 with errno (ENOENT, the
 * open's error, EFBIG when it did not fit: buf then holds its first len -
 * 1 bytes). Blocks on file I/O only. */
int flps_read_file(const char *path, char *buf, size_t len);

/* The first line of path, without its newline and trailing blanks, into
 * buf ("" when it cannot be read). Returns 1 when read, else 0 with
 * errno. */
int flps_read_line(const char *path, char *buf, size_t len);

/* The first line of path as a decimal unsigned number into *out (written
 * only on success). Returns 1, or 0 with errno (EINVAL: not a number). */
int flps_read_u64(const char *path, uint64_t *out);

#endif
