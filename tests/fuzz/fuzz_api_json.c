/* libFuzzer target: the scheduler API's JSON input. POST /v1/jobs hands
 * the request body (JSON or YAML; the CLI sends JSON) to
 * jobspec_parse_where before the API-wide lock is taken; a refusal
 * becomes a 400 whose JSON names the line and the field. The body here is
 * NUL-terminated as httpd delivers it. What must hold: an accepted job
 * satisfies the documented bounds; a refusal has a message, a line no
 * further than the body goes and a field that fits; never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_jobspec_check.h"
#include "tests/fuzz/fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jobspec spec;
    jobspec_where where;
    char err[1024];
    char *body;
    unsigned long lines = 1;
    flps_err rc;

    if (size == 0)
        return 0;
    body = malloc(size + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data, size);
    body[size] = '\0';
    /* Line breaks as YAML counts them: LF, CR, CR LF, and NEL, LS, PS. */
    for (size_t i = 0; i < size; i++) {
        if (data[i] == '\n' ||
            (data[i] == '\r' && (i + 1 == size || data[i + 1] != '\n')))
            lines++;
        else if (i + 1 < size && data[i] == 0xc2 && data[i + 1] == 0x85)
            lines++;
        else if (i + 2 < size && data[i] == 0xe2 && data[i + 1] == 0x80 &&
                 (data[i + 2] == 0xa8 || data[i + 2] == 0xa9))
            lines++;
    }
    err[0] = '\0';
    memset(&where, 0, sizeof(where));
    rc = jobspec_parse_where(body, size, &spec, err, sizeof(err), &where);
    if (rc == FLPS_OK) {
        fuzz_check_accepted(&spec);
    } else if (rc == FLPS_ECONFIG) {
        fuzz_check_refusal(err, sizeof(err));
        fuzz_check(where.line <= lines + 1, "an error line past the body");
        fuzz_check(memchr(where.field, '\0', sizeof(where.field)) != NULL,
                   "an error field without its terminator");
    } else {
        fuzz_check(rc == FLPS_ENOMEM, "an error other than ECONFIG/ENOMEM");
    }
    free(body);
    return 0;
}
