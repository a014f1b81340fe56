/* What a fuzz target without set-up of its own starts with: libFuzzer's
 * entry points declared, an initializer that silences the library's
 * logging before the first input (fuzz_quiet.h), and the check that stops
 * the run, keeping the input, on a broken invariant. */
#ifndef FLPS_TESTS_FUZZ_TARGET_H
#define FLPS_TESTS_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_quiet.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

/* Abort with what (the invariant that broke) and where, unless ok. */
#define fuzz_require(ok, what) fuzz_require_at((ok), (what), __FILE__, __LINE__)

static inline void fuzz_require_at(int ok, const char *what, const char *file,
                                   int line)
{
    if (ok)
        return;
    fprintf(stderr, "%s:%d: broken invariant: %s\n", file, line, what);
    abort();
}

#endif
