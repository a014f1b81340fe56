/* Reading small kernel and state files whole. */
#include "common/readfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int flps_read_file(const char *path, char *buf, size_t len)
{
    FILE *f;
    size_t n = 0;
    int whole = 0, err = 0;

    if (len == 0) {
        errno = EINVAL;
        return 0;
    }
    buf[0] = '\0';
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, len - 1, f);
    if (ferror(f))
        err = errno ? errno : EIO;
    else if (n < len - 1 || fgetc(f) == EOF)
        whole = 1;
    else
        err = EFBIG;
    fclose(f);
    buf[n] = '\0';
    errno = err;
    return whole;
}

int flps_read_line(const char *path, char *buf, size_t len)
{
    /* A sysfs attribute is one short line: reading a page is plenty. */
    char text[4096];
    size_t n;
    int ok = flps_read_file(path, text, sizeof(text));

    if (len == 0)
        return 0;
    buf[0] = '\0';
    if (!ok && errno != EFBIG)
        return 0;
    n = strcspn(text, "\n");
    while (n > 0 && text[n - 1] == ' ')
        n--;
    if (n > len - 1)
        n = len - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return 1;
}

int flps_read_u64(const char *path, uint64_t *out)
{
    char line[64], *end;
    unsigned long long v;

    if (!flps_read_line(path, line, sizeof(line)))
        return 0;
    errno = 0;
    v = strtoull(line, &end, 10);
    if (end == line || *end != '\0' || line[0] == '-' || errno != 0) {
        errno = errno ? errno : EINVAL;
        return 0;
    }
    *out = v;
    return 1;
}
