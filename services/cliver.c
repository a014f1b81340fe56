/* --version for every binary. */
#include "services/cliver.h"

#include <stdio.h>
#include <string.h>

#include "flps.h"

int flps_cli_version(int argc, char *const *argv, const char *prog)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s %s\n", prog, flps_version());
            return 1;
        }
    }
    return 0;
}
