/* libFuzzer target: the worker event-line reader (services/event.h) that
 * flrun and flagent run on every line a worker prints. The input is one
 * line, in a buffer of exactly its length. What must hold: a known result
 * code, kind NONE exactly when the line is no event, a reason exactly when
 * the line is refused; a strict read that passes passes the lenient one
 * too; and a well-formed event written back reads strictly and writes the
 * same text again (the writer's output keeps to the reader's schema). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/event.h"
#include "tests/fuzz/fuzz_quiet.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define fuzz_check(cond, what)                                                 \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_event: %s\n", what);                         \
            abort();                                                           \
        }                                                                      \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

/* ev as event_write prints it (caller frees); NULL when memory ran out. */
static char *written(const event *ev)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (f == NULL)
        return NULL;
    fuzz_check(event_write(f, ev) == FLPS_OK, "a read event was not written");
    fclose(f);
    return text;
}

/* The writer's text of a well-formed event reads back strictly, and the
 * same text comes out again. */
static void check_round_trip(const event *ev)
{
    char why[256];
    char *once = written(ev), *twice;
    event back;

    if (once == NULL)
        return;
    fuzz_check(once[strlen(once) - 1] == '\n', "a line without its newline");
    fuzz_check(event_read(once, strlen(once) - 1, EVENT_READ_STRICT, &back, why,
                          sizeof(why)) == FLPS_OK,
               "the writer's line breaks the schema");
    fuzz_check(back.kind == ev->kind, "the kind changed when read back");
    twice = written(&back);
    fuzz_check(twice == NULL || strcmp(once, twice) == 0,
               "written, read and written again, the line changed");
    event_fini(&back);
    free(once);
    free(twice);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size ? size : 1), why[256], swhy[256];
    event ev, strict;
    flps_err rc, src;

    if (line == NULL)
        return 0;
    memcpy(line, data, size);
    rc = event_read(line, size, 0, &ev, why, sizeof(why));
    src =
        event_read(line, size, EVENT_READ_STRICT, &strict, swhy, sizeof(swhy));
    fuzz_check(rc == FLPS_OK || rc == FLPS_EPROTO || rc == FLPS_EINVAL ||
                   rc == FLPS_ENOMEM,
               "an unexpected result code");
    fuzz_check((ev.kind == EVENT_NONE) ==
                   (rc == FLPS_EPROTO || rc == FLPS_ENOMEM),
               "kind NONE and the code disagree");
    fuzz_check(memchr(why, '\0', sizeof(why)) != NULL, "why unterminated");
    fuzz_check((why[0] != '\0') == (rc != FLPS_OK && rc != FLPS_ENOMEM),
               "a reason without a refusal, or a refusal without one");
    fuzz_check(strict.kind == ev.kind || src == FLPS_ENOMEM ||
                   rc == FLPS_ENOMEM,
               "strict and lenient reads see different kinds");
    fuzz_check(src != FLPS_OK || rc == FLPS_OK,
               "a strict pass is a lenient refusal");
    if (rc == FLPS_OK && ev.kind != EVENT_UNKNOWN)
        check_round_trip(&ev);
    event_fini(&strict);
    event_fini(&ev);
    free(line);
    return 0;
}
