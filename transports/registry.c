/* The registry of transports: the ones this build compiled, as the header
 * CMake generates lists them. */
#include "transports/registry.h"

#include <string.h>

#include "transports/transport_list.h"

/* Each entry_NAME.c defines one entry. */
#define TR_DECLARE(n) extern const transport_entry transport_entry_##n;
TRANSPORT_LIST(TR_DECLARE)
#undef TR_DECLARE

static const transport_entry *const tr_built[] = {
#define TR_ENTRY(n) &transport_entry_##n,
    TRANSPORT_LIST(TR_ENTRY)
#undef TR_ENTRY
};

const transport_entry *transport_registry_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < sizeof(tr_built) / sizeof(*tr_built);
         i++)
        if (strcmp(tr_built[i]->name, name) == 0)
            return tr_built[i];
    return NULL;
}
