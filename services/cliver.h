/* --version for every binary: one line, the same everywhere. */
#ifndef FLPS_SERVICES_CLIVER_H
#define FLPS_SERVICES_CLIVER_H

/* If argv holds "--version" (before any "--"), print "PROG VERSION" (the
 * library's flps_version()) on stdout and return 1: the caller exits 0.
 * Otherwise return 0 and print nothing. Call it first in main, before the
 * real option parsing, so --version works whatever else is given. */
int flps_cli_version(int argc, char *const *argv, const char *prog);

#endif
