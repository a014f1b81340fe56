/* A fake /sys/class/powercap for the energy module's RAPL reader: package
 * zones intel-rapl:N with name, energy_uj and max_energy_range_uj, and the
 * zones a real node has beside them (a core sub-zone, psys, an mmio copy
 * of package 0) that must not be counted. Header-only, over
 * tests/fakes/fake_sysfs.h's temporary root. */
#ifndef FLPS_TESTS_FAKE_POWERCAP_H
#define FLPS_TESTS_FAKE_POWERCAP_H

#include <inttypes.h>

#include "tests/fakes/fake_sysfs.h"

/* Zone `zone` (the directory intel-rapl:ZONE, or any name given as
 * dirname) named name, with its counter and range. */
static inline void fake_powercap_zone(fake_sysfs *s, const char *dirname,
                                      const char *name, uint64_t uj,
                                      uint64_t range)
{
    char dir[512], path[600], text[64];

    snprintf(dir, sizeof(dir), "%s/class/powercap/%s", s->root, dirname);
    fake_sysfs_mkdirs(dir);
    snprintf(path, sizeof(path), "%s/name", dir);
    snprintf(text, sizeof(text), "%s\n", name);
    fake_sysfs_write(path, text);
    snprintf(path, sizeof(path), "%s/energy_uj", dir);
    snprintf(text, sizeof(text), "%" PRIu64 "\n", uj);
    fake_sysfs_write(path, text);
    snprintf(path, sizeof(path), "%s/max_energy_range_uj", dir);
    snprintf(text, sizeof(text), "%" PRIu64 "\n", range);
    fake_sysfs_write(path, text);
}

/* Set a zone's counter (as the hardware advances it). */
static inline void fake_powercap_set(fake_sysfs *s, const char *dirname,
                                     uint64_t uj)
{
    char path[600], text[64];

    snprintf(path, sizeof(path), "%s/class/powercap/%s/energy_uj", s->root,
             dirname);
    snprintf(text, sizeof(text), "%" PRIu64 "\n", uj);
    fake_sysfs_write(path, text);
}

#endif
