/* Every binary answers --version with its name and the library's version,
 * and exits 0 without starting anything. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "flps.h"

static void expect_version(const char *prog, const char *extra)
{
    char cmd[1024], line[256] = "", want[128];
    FILE *f;
    int status;

    snprintf(cmd, sizeof(cmd), "%s/%s %s --version 2>&1", FLPS_BIN_DIR, prog,
             extra);
    f = popen(cmd, "r");
    cr_assert_not_null(f);
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    status = pclose(f);
    snprintf(want, sizeof(want), "%s %s\n", prog, flps_version());
    cr_assert_str_eq(line, want, "%s printed '%s'", prog, line);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "%s --version exited with status %d", prog, status);
}

Test(version, every_binary_prints_its_name_and_version)
{
    const char *progs[] = {"flps",     "flworker", "flrun",
                           "flsubmit", "flsched",  "flagent"};

    for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++)
        expect_version(progs[i], "");
}

Test(version, wins_over_other_options_and_missing_required_ones)
{
    /* flsched needs --redis and --listen; flps needs --job: --version
     * alone must still answer, and an unknown option beside it too. */
    expect_version("flsched", "--bogus");
    expect_version("flps", "--shards 2");
}
