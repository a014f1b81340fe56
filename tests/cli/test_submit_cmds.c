/* Tests of cli/submit_cmds.c: the one table of flsubmit's commands and
 * options, and the pages and completion scripts made from it. */
#include "cli/submit_cmds.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "services/jobspec_flags.h"

#define FLSUBMIT FLPS_BIN_DIR "/flsubmit"

static char *script(const char *shell)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(submit_cmds_completion(shell, &b), FLPS_OK);
    return flps_strbuf_take(&b);
}

/* Does text hold word with no word character on either side? */
static int has_word(const char *text, const char *word)
{
    size_t n = strlen(word);

    for (const char *p = strstr(text, word); p != NULL;
         p = strstr(p + 1, word)) {
        char before = p > text ? p[-1] : ' ', after = p[n];

        if (strchr(" '|(){,\n\t", before) != NULL &&
            strchr(" '|()},[:\n\t", after) != NULL)
            return 1;
    }
    return 0;
}

/* Every command's name and every option's --name and -letter in text. */
static void assert_lists_everything(const char *text, const char *what)
{
    const submit_command *cmds;
    const submit_option *opts;
    size_t nc, no;
    char w[64];

    cmds = submit_cmds_commands(&nc);
    opts = submit_cmds_options(&no);
    for (size_t i = 0; i < nc; i++)
        cr_assert(has_word(text, cmds[i].name), "%s lacks command %s", what,
                  cmds[i].name);
    for (size_t i = 0; i < no; i++) {
        snprintf(w, sizeof(w), "--%s", opts[i].name);
        cr_assert(has_word(text, w), "%s lacks option %s", what, w);
        if (opts[i].letter == 0)
            continue;
        snprintf(w, sizeof(w), "-%c", opts[i].letter);
        cr_assert(has_word(text, w), "%s lacks option %s", what, w);
    }
}

Test(submit_cmds, the_completion_scripts_list_every_command_and_option)
{
    char *bash = script("bash"), *zsh = script("zsh");

    assert_lists_everything(bash, "the bash script");
    assert_lists_everything(zsh, "the zsh script");
    /* -o's formats, and the job's flags after submit. */
    cr_assert(strstr(bash, "'json yaml wide'") != NULL);
    cr_assert(strstr(zsh, "(json yaml wide)") != NULL);
    cr_assert(has_word(bash, "--compression") &&
              has_word(zsh, "--compression"));
    flps_free(bash);
    flps_free(zsh);
}

Test(submit_cmds, the_global_page_lists_every_command_and_option)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(submit_cmds_usage(&b, "  0    success\n"), FLPS_OK);
    assert_lists_everything(b.data, "--help");
    cr_assert(strstr(b.data, "      --version        print flsubmit's "
                             "version and exit\n") != NULL,
              "%s", b.data);
    cr_assert(strstr(b.data, "  -o, --output FORMAT  json or yaml") != NULL,
              "%s", b.data);
    flps_strbuf_fini(&b);
}

Test(submit_cmds, a_commands_page_lists_its_own_options_and_outputs)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(submit_cmds_command_usage(submit_cmds_find("logs"), &b),
                 FLPS_OK);
    cr_assert(strstr(b.data, "-f, --follow") != NULL, "%s", b.data);
    cr_assert(strstr(b.data, "-e, --events") != NULL, "%s", b.data);
    cr_assert_null(strstr(b.data, "--all"), "%s", b.data);
    cr_assert(strstr(b.data, "-o json or yaml prints each line object\n") !=
                  NULL,
              "%s", b.data);
    cr_assert_null(strstr(b.data, "-o wide"), "%s", b.data);
    flps_strbuf_clear(&b);
    cr_assert_eq(submit_cmds_command_usage(submit_cmds_find("nodes"), &b),
                 FLPS_OK);
    cr_assert(strstr(b.data, "-o wide adds FREE-CPUS") != NULL, "%s", b.data);
    cr_assert(strstr(b.data, "-o json or yaml prints the API's {\"nodes\": "
                             "[...]}.\n") != NULL,
              "%s", b.data);
    flps_strbuf_fini(&b);
}

Test(submit_cmds, the_table_maps_getopt_values_both_ways)
{
    const submit_option *opts;
    size_t n;

    opts = submit_cmds_options(&n);
    cr_assert_eq(n, SUBMIT_OPT_COUNT);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(submit_cmds_opt_by_val(submit_cmds_opt_val(&opts[i])),
                     &opts[i]);
        cr_assert_eq(submit_cmds_option(opts[i].id), &opts[i]);
    }
    cr_assert_null(submit_cmds_opt_by_val('z'));
    cr_assert(submit_cmds_takes(submit_cmds_find("cancel"),
                                submit_cmds_option(SUBMIT_OPT_ALL)));
    cr_assert(!submit_cmds_takes(submit_cmds_find("status"),
                                 submit_cmds_option(SUBMIT_OPT_ALL)));
    cr_assert(submit_cmds_takes(submit_cmds_find("status"),
                                submit_cmds_option(SUBMIT_OPT_OUTPUT)));
    cr_assert_null(submit_cmds_find("stauts"));
}

Test(submit_cmds, another_shell_is_refused)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(submit_cmds_completion("fish", &b), FLPS_EINVAL);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(submit_cmds_completion(NULL, &b), FLPS_EINVAL);
}

Test(submit_cmds, submit_offers_the_job_flags_of_the_key_table)
{
    static const char *const has[] = {
        "-n",     "-s",           "--workers",     "--servers",
        "--name", "--batch-size", "--compression", "--model"};
    flps_strbuf b = FLPS_STRBUF_INIT, flags = FLPS_STRBUF_INIT;
    char *bash = script("bash"), *line;

    /* submit's page lists the flags as flrun --help does. */
    cr_assert_eq(submit_cmds_command_usage(submit_cmds_find("submit"), &b),
                 FLPS_OK);
    cr_assert_eq(jobspec_flags_help(&flags), FLPS_OK);
    cr_assert_not_null(strstr(b.data, flags.data), "%s", b.data);
    /* Completion after submit: -n, -s and a --KEY per key of the job
     * file but command and env, each once. */
    line = strstr(bash, "    submit)\n        opts+=' ");
    cr_assert_not_null(line, "%s", bash);
    line = strchr(line, '\n') + 1; /* the opts+= line alone */
    line[strcspn(line, "\n")] = '\0';
    for (size_t i = 0; i < sizeof(has) / sizeof(has[0]); i++)
        cr_assert(has_word(line, has[i]), "%s lacks %s", line, has[i]);
    cr_assert_not(has_word(line, "--command"), "%s", line);
    cr_assert_not(has_word(line, "--env"), "%s", line);
    cr_assert_null(strstr(strstr(line, "--workers") + 1, "--workers"), "%s",
                   line);
    flps_strbuf_fini(&b);
    flps_strbuf_fini(&flags);
    flps_free(bash);
}

/* Run `sh -c cmd` and return its stdout (caller frees). */
static char *run_sh(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    flps_strbuf b = FLPS_STRBUF_INIT;
    char buf[4096];
    size_t n;

    cr_assert_not_null(p);
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
        flps_strbuf_append(&b, buf, n);
    *status = pclose(p);
    flps_strbuf_puts(&b, "");
    return flps_strbuf_take(&b);
}

/* Write the script for shell to a file; its path (static). */
static const char *script_file(const char *shell)
{
    static char path[64] = "/tmp/flsubmit-comp-XXXXXX";
    char *text = script(shell);
    int fd;

    memcpy(path + strlen(path) - 6, "XXXXXX", 6);
    fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    flps_free(text);
    return path;
}

Test(submit_cmds, the_binary_prints_the_scripts_the_table_makes)
{
    char *want = script("bash"), *got;
    int status;

    got = run_sh(FLSUBMIT " completion bash", &status);
    cr_assert_eq(status, 0);
    cr_assert_str_eq(got, want);
    flps_free(got);
    flps_free(want);
    got = run_sh(FLSUBMIT " completion zsh", &status);
    want = script("zsh");
    cr_assert_str_eq(got, want);
    flps_free(got);
    flps_free(want);
    got = run_sh(FLSUBMIT " completion fish 2>&1", &status);
    cr_assert_eq(WEXITSTATUS(status), 64, "%s", got);
    cr_assert(strstr(got, "bash or zsh") != NULL, "%s", got);
    flps_free(got);
}

/* What bash completes for the words of line (the last is the word being
 * completed), with `flsubmit list` answering two jobs. */
static char *complete_bash(const char *path, const char *line)
{
    char cmd[2048];
    int status;
    char *out;

    snprintf(cmd, sizeof(cmd),
             "bash --norc -c 'source %s\n"
             "flsubmit() { printf \"ID NAME\\nj1 a\\nj7 b\\n\"; }\n"
             "COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
             "_flsubmit 2>/dev/null; echo \"${COMPREPLY[*]}\"'",
             path, line);
    out = run_sh(cmd, &status);
    cr_assert_eq(status, 0, "%s", cmd);
    out[strcspn(out, "\n")] = '\0';
    return out;
}

#define expect_bash(path, line, want)                                          \
    do {                                                                       \
        char *got_ = complete_bash(path, line);                                \
        cr_assert_str_eq(got_, want, "for: %s", line);                         \
        flps_free(got_);                                                       \
    } while (0)

Test(submit_cmds, bash_completes_commands_options_formats_and_job_ids)
{
    const char *path = script_file("bash");
    const submit_command *cmds;
    const submit_option *opts;
    size_t nc, no;
    int status;
    char cmd[256], *out;

    snprintf(cmd, sizeof(cmd), "bash -n %s", path);
    out = run_sh(cmd, &status);
    cr_assert_eq(status, 0, "the script is bash");
    flps_free(out);
    expect_bash(path, "flsubmit st", "status");
    expect_bash(path, "flsubmit -o \"\"", "json yaml wide");
    expect_bash(path, "flsubmit status \"\"", "j1 j7");
    expect_bash(path, "flsubmit cancel \"\"", "latest j1 j7");
    expect_bash(path, "flsubmit completion \"\"", "bash zsh");
    expect_bash(path, "flsubmit logs --f", "--follow");
    expect_bash(path, "flsubmit submit --compr", "--compression");
    expect_bash(path, "flsubmit submit -s \"\"", "");
    /* After each command, each option it takes. */
    cmds = submit_cmds_commands(&nc);
    opts = submit_cmds_options(&no);
    for (size_t i = 0; i < nc; i++)
        for (size_t k = 0; k < no; k++) {
            char line[128], *got;

            snprintf(line, sizeof(line), "flsubmit %s --%s", cmds[i].name,
                     opts[k].name);
            got = complete_bash(path, line);
            if (submit_cmds_takes(&cmds[i], &opts[k]))
                cr_assert(has_word(got, line + strlen(cmds[i].name) + 10),
                          "%s -> %s", line, got);
            else
                cr_assert(!has_word(got, line + strlen(cmds[i].name) + 10),
                          "%s -> %s", line, got);
            flps_free(got);
        }
    unlink(path);
}

Test(submit_cmds, zsh_reads_the_script_and_registers_it)
{
    const char *path;
    char cmd[512], *out;
    int status;

    if (access("/usr/bin/zsh", X_OK) != 0 && access("/bin/zsh", X_OK) != 0)
        cr_skip_test("zsh is not installed");
    path = script_file("zsh");
    snprintf(cmd, sizeof(cmd), "zsh -n %s", path);
    out = run_sh(cmd, &status);
    cr_assert_eq(status, 0, "the script is zsh");
    flps_free(out);
    snprintf(cmd, sizeof(cmd),
             "zsh -f -c 'autoload -U compinit; compinit -u -D; source %s; "
             "print ${_comps[flsubmit]}'",
             path);
    out = run_sh(cmd, &status);
    cr_assert_eq(status, 0);
    cr_assert_str_eq(out, "_flsubmit\n");
    flps_free(out);
    unlink(path);
}
