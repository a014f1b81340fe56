/* libFuzzer target: the job-file parser (jobspec_parse: YAML, the text
 * flrun and flsubmit read). Any text is either accepted as a job that
 * satisfies the documented bounds or refused with a message; never a
 * crash, never time beyond linear (the nesting and size bounds are checked
 * before libyaml sees the text). */
#include <stdint.h>

#include "tests/fuzz/fuzz_jobspec_check.h"
#include "tests/fuzz/fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jobspec spec;
    char err[1024];
    flps_err rc;

    if (size == 0)
        return 0;
    err[0] = '\0';
    rc = jobspec_parse((const char *)data, size, &spec, err, sizeof(err));
    if (rc == FLPS_OK)
        fuzz_check_accepted(&spec);
    else if (rc == FLPS_ECONFIG)
        fuzz_check_refusal(err, sizeof(err));
    else
        fuzz_check(rc == FLPS_ENOMEM, "an error other than ECONFIG/ENOMEM");
    return 0;
}
