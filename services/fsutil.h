/* Small file-system helpers shared by the daemons. */
#ifndef FLPS_SERVICES_FSUTIL_H
#define FLPS_SERVICES_FSUTIL_H

/* Create directory path and its missing parents (mode 0700, less the
 * umask), like mkdir -p; existing ones keep their mode. Returns 0, or -1 with
 * errno set by the mkdir that failed. */
int flps_mkdirs(const char *path);

#endif
