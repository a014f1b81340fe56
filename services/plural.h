/* The noun that goes with a count in a message people read: "1 server",
 * "2 servers", "0 GPUs", "1 process". One helper, so no message prints
 * "1 servers". */
#ifndef FLPS_SERVICES_PLURAL_H
#define FLPS_SERVICES_PLURAL_H

/* one when n is exactly 1, else many (0, 2, 0.5 and 1.5 take the plural,
 * as English does). Both strings are borrowed and returned as given:
 *     printf("%u %s", w, plural_word(w, "worker", "workers"));
 * Never fails; a NaN takes the plural. */
const char *plural_word(double n, const char *one, const char *many);

#endif
