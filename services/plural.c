/* The noun that agrees with a count (see plural.h). */
#include "services/plural.h"

const char *plural_word(double n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}
