/* flagent's command line: every flag, the defaults, sizes, and a clear
 * message for each mistake. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/agent_config.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static flps_err parse(int argc, char **argv, agent_config *cfg, char *err)
{
    err[0] = '\0';
    return agent_config_parse(argc, argv, cfg, err, 512);
}

Test(agent_config, keeps_checkpoints_under_a_shared_root_when_given_one)
{
    char *argv[] = {"flagent",     "--redis",
                    "redis://h",   "--name",
                    "n1",          "--cpus",
                    "2",           "--memory",
                    "1Gi",         "--gpus",
                    "0",           "--work-dir",
                    "/w",          "--checkpoint-root",
                    "/shared/ckpt"};
    agent_config cfg;
    char err[512];

    cr_assert_eq(parse(ARGC(argv), argv, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.work_dir, "/w");
    cr_assert_str_eq(cfg.ckpt_root, "/shared/ckpt");
}

Test(agent_config, reads_every_flag)
{
    char *argv[] = {"flagent",     "--redis",    "redis://10.0.0.1:6380",
                    "--name",      "gpu-node.7", "--cpus",
                    "32",          "--memory",   "256Gi",
                    "--gpus",      "8",          "--address",
                    "10.0.0.7",    "--work-dir", "/var/lib/flagent",
                    "--heartbeat", "0.5"};
    agent_config cfg;
    char err[512];

    cr_assert_eq(parse(ARGC(argv), argv, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.redis_url, "redis://10.0.0.1:6380");
    cr_assert_str_eq(cfg.name, "gpu-node.7");
    cr_assert_float_eq(cfg.cpus, 32, 1e-12);
    cr_assert_eq(cfg.memory, 256ULL << 30);
    cr_assert_eq(cfg.gpus, 8);
    cr_assert_str_eq(cfg.address, "10.0.0.7");
    cr_assert_str_eq(cfg.work_dir, "/var/lib/flagent");
    cr_assert_float_eq(cfg.heartbeat, 0.5, 1e-12);
    cr_assert_eq(agent_config_ttl_ms(&cfg), 1000, "TTL is 2 heartbeats");
    cr_assert_str_eq(cfg.ckpt_root, "/var/lib/flagent",
                     "checkpoints default to the work dir");
    cr_assert_eq(cfg.help, 0);
}

Test(agent_config, fills_in_the_defaults)
{
    char *argv[] = {"flagent", "--redis", "redis://h", "--name",
                    "n1",      "--cpus",  "4",         "--memory",
                    "1000",    "--gpus",  "0"};
    agent_config cfg;
    char err[512];

    setenv("TMPDIR", "/scratch", 1);
    cr_assert_eq(parse(ARGC(argv), argv, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.address, "127.0.0.1");
    cr_assert_float_eq(cfg.heartbeat, 2.0, 1e-12);
    cr_assert_eq(agent_config_ttl_ms(&cfg), 4000);
    cr_assert_str_eq(cfg.work_dir, "/scratch/flagent-n1");
    cr_assert_eq(cfg.memory, 1000);
    cr_assert_eq(cfg.gpus, 0);
    unsetenv("TMPDIR");
    cr_assert_eq(parse(ARGC(argv), argv, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.work_dir, "/tmp/flagent-n1");
}

Test(agent_config, reads_sizes_in_powers_of_1000_and_1024)
{
    static const struct {
        const char *text;
        unsigned long long bytes;
    } ok[] = {
        {"1", 1},
        {"2K", 2000},
        {"3M", 3000000},
        {"4G", 4000000000ULL},
        {"5T", 5000000000000ULL},
        {"2Ki", 2048},
        {"512Mi", 512ULL << 20},
        {"16Gi", 16ULL << 30},
        {"1Ti", 1ULL << 40},
    };
    char *argv[] = {"flagent", "--redis",  "redis://h", "--name", "n", "--cpus",
                    "1",       "--memory", NULL,        "--gpus", "0"};
    agent_config cfg;
    char err[512];

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        argv[8] = (char *)ok[i].text;
        cr_assert_eq(parse(ARGC(argv), argv, &cfg, err), FLPS_OK, "%s: %s",
                     ok[i].text, err);
        cr_assert_eq(cfg.memory, ok[i].bytes, "%s gave %llu", ok[i].text,
                     (unsigned long long)cfg.memory);
    }
}

/* Each bad command line is refused with a message holding `says`. */
static void refused(int argc, char **argv, const char *says)
{
    agent_config cfg;
    char err[512];

    memset(&cfg, 0x5a, sizeof(cfg));
    cr_assert_eq(parse(argc, argv, &cfg, err), FLPS_ECONFIG,
                 "accepted; expected an error saying '%s'", says);
    cr_assert_not_null(strstr(err, says), "message '%s' lacks '%s'", err, says);
    cr_assert_eq(cfg.name[0], 0x5a, "*out written on an error");
}

Test(agent_config, names_each_missing_required_flag)
{
    char *all[] = {"flagent", "--redis",  "redis://h", "--name", "n", "--cpus",
                   "1",       "--memory", "1Gi",       "--gpus", "0"};
    const char *flag[] = {"--redis", "--name", "--cpus", "--memory", "--gpus"};

    for (int drop = 0; drop < 5; drop++) {
        char *argv[11];
        int argc = 0;
        for (int i = 0; i < 11; i++)
            if (i != 1 + 2 * drop && i != 2 + 2 * drop)
                argv[argc++] = all[i];
        refused(argc, argv, flag[drop]);
    }
}

Test(agent_config, refuses_bad_values_with_the_flag_and_the_value)
{
    static const char *const cases[][3] = {
        {"--memory", "12Q", "--memory: '12Q' is not a size"},
        {"--memory", "0", "--memory: '0'"},
        {"--memory", "-1", "--memory: '-1'"},
        {"--memory", "1ki", "--memory: '1ki'"},
        {"--cpus", "0", "--cpus: '0' is not a number of CPUs > 0"},
        {"--cpus", "-2", "--cpus: '-2'"},
        {"--cpus", "nan", "--cpus: 'nan'"},
        {"--cpus", "two", "--cpus: 'two'"},
        {"--gpus", "-1", "--gpus: '-1'"},
        {"--name", "a:b", "--name: 'a:b' is not a node name"},
        {"--name", "", "--name: ''"},
        {"--address", "0.0.0.0", "--address: '0.0.0.0'"},
        {"--address", "node7", "--address: 'node7' is not an IPv4 address"},
        {"--heartbeat", "0", "--heartbeat: '0'"},
        {"--heartbeat", "nan", "--heartbeat: 'nan'"},
        {"--heartbeat", "2s", "--heartbeat: '2s'"},
    };
    char *argv[] = {"flagent", "--redis", "redis://h", "--name", "n",
                    "--cpus",  "1",       "--memory",  "1Gi",    "--gpus",
                    "0",       NULL,      NULL};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        argv[11] = (char *)cases[i][0];
        argv[12] = (char *)cases[i][1];
        refused(ARGC(argv), argv, cases[i][2]);
    }
}

Test(agent_config, refuses_unknown_options_missing_values_and_stray_words)
{
    char *unknown[] = {"flagent", "--redis", "redis://h", "--nodes", "3"};
    char *novalue[] = {"flagent", "--redis"};
    char *stray[] = {"flagent", "--redis", "redis://h", "--name",
                     "n",       "--cpus",  "1",         "--memory",
                     "1Gi",     "--gpus",  "0",         "extra"};

    refused(ARGC(unknown), unknown, "unknown option '--nodes'");
    refused(ARGC(novalue), novalue, "--redis needs a value");
    refused(ARGC(stray), stray, "unexpected argument 'extra'");
}

Test(agent_config, help_needs_no_other_flag)
{
    char *argv[] = {"flagent", "--help"};
    agent_config cfg;
    char err[512];

    cr_assert_eq(parse(ARGC(argv), argv, &cfg, err), FLPS_OK);
    cr_assert_eq(cfg.help, 1);
    cr_assert_not_null(strstr(agent_config_usage(), "--heartbeat"));
}

Test(agent_config, can_parse_twice_in_one_process)
{
    char *a[] = {"flagent", "--redis",  "redis://h", "--name", "a", "--cpus",
                 "1",       "--memory", "1",         "--gpus", "0"};
    char *b[] = {"flagent", "--name", "b", "--redis",  "redis://h", "--gpus",
                 "1",       "--cpus", "2", "--memory", "2"};
    agent_config cfg;
    char err[512];

    cr_assert_eq(parse(ARGC(a), a, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_eq(parse(ARGC(b), b, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.name, "b");
    cr_assert_float_eq(cfg.cpus, 2, 1e-12);
}

/* flag with value first, on a command line otherwise good: refused with
 * says as soon as the parser reaches it. */
static void refuses_flag(const char *flag, const char *value, const char *says)
{
    char *argv[] = {"flagent",   (char *)flag, (char *)value, "--redis",
                    "redis://h", "--name",     "n",           "--cpus",
                    "1",         "--memory",   "1Gi",         "--gpus",
                    "0"};

    refused(ARGC(argv), argv, says);
}

Test(agent_config, says_what_a_flag_accepts)
{
    refuses_flag("--gpus", "70000",
                 "--gpus: '70000' is out of range: expected an integer from 0 "
                 "to 65536");
    refuses_flag("--gpus", "+1", "--gpus: '+1' is not an integer");
    refuses_flag("--heartbeat", "7200",
                 "--heartbeat: '7200' is out of range: expected a number from "
                 "0.1 to 3600");
    refuses_flag("--heartbeat", " 2", "--heartbeat: ' 2' is not a number");
    refuses_flag("--cpus", "+1", "--cpus: '+1' is not a number of CPUs > 0");
    refuses_flag("--cpus", "2000000",
                 "--cpus: '2000000' is not a number of CPUs");
    refuses_flag("--work-dir", "",
                 "--work-dir: give a directory path shorter than 896 "
                 "characters");
    refuses_flag("--checkpoint-root", "",
                 "--checkpoint-root: give a directory path shorter than 896");
}

Test(agent_config, serves_its_own_metrics_only_when_asked)
{
    char *off[] = {"flagent", "--redis",  "redis://h", "--name", "n1", "--cpus",
                   "1",       "--memory", "1Gi",       "--gpus", "0"};
    char *on[] = {"flagent", "--redis",   "redis://h",    "--name", "n1",
                  "--cpus",  "1",         "--memory",     "1Gi",    "--gpus",
                  "0",       "--metrics", "10.0.0.7:9101"};
    agent_config cfg;
    char err[512];

    cr_assert_eq(parse(ARGC(off), off, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.metrics, "", "off by default");
    cr_assert_eq(parse(ARGC(on), on, &cfg, err), FLPS_OK, "%s", err);
    cr_assert_str_eq(cfg.metrics, "10.0.0.7:9101");
    refuses_flag("--metrics", "",
                 "--metrics: '' is not HOST:PORT (e.g. 127.0.0.1:9101; port "
                 "0 picks a free one)");
}

Test(agent_config, refuses_a_node_name_that_is_a_path_or_an_option)
{
    refuses_flag("--name", "..",
                 "--name: '..' is not a node name; use 1 to 63 characters "
                 "from A-Z a-z 0-9 _ . -, starting with a letter or digit, "
                 "without '..'");
    refuses_flag("--name", "-n1", "--name: '-n1' is not a node name");
}

/* The job uids the flags extra (NULL-ended) give: "off", or
 * "FIRST-LAST in DIR". */
static const char *job_uids_with(const char *a, const char *b, const char *c,
                                 const char *d)
{
    char *argv[16] = {"flagent", "--redis", "redis://h", "--name",
                      "n1",      "--cpus",  "1",         "--memory",
                      "1Gi",     "--gpus",  "0"};
    const char *extra[] = {a, b, c, d};
    static char out[1200];
    agent_config cfg;
    char err[512];
    int argc = 11;

    for (int i = 0; i < 4 && extra[i] != NULL; i++)
        argv[argc++] = (char *)extra[i];
    cr_assert_eq(parse(argc, argv, &cfg, err), FLPS_OK, "%s", err);
    if (!cfg.job_uids)
        return "off";
    snprintf(out, sizeof(out), "%u-%u in %s", cfg.job_uid_first,
             cfg.job_uid_last, cfg.job_uids_dir);
    return out;
}

Test(agent_config, gives_each_job_a_uid_of_its_own_by_default)
{
    cr_assert_str_eq(job_uids_with(NULL, NULL, NULL, NULL),
                     "60000-60999 in /var/lib/flps/job-uids");
    cr_assert_str_eq(job_uids_with("--job-uids", "61000-61999",
                                   "--job-uids-dir", "/run/uids"),
                     "61000-61999 in /run/uids");
    cr_assert_str_eq(job_uids_with("--job-uids", "off", NULL, NULL), "off");
    /* --user: the agent gives its own uid up, and with it the others. */
    cr_assert_str_eq(job_uids_with("--user", "nobody", NULL, NULL), "off");
}

Test(agent_config, refuses_a_job_uid_range_that_is_not_one)
{
    static const char *const bad[] = {"60000",         "60999-60000",
                                      "0-999",         "999-2000",
                                      "1000-2000000",  "a-b",
                                      "-60000",        "60000-",
                                      "60000-60999-1", "4000000001-4000000002"};
    char *argv[] = {"flagent", "--redis",    "redis://h", "--name", "n",
                    "--cpus",  "1",          "--memory",  "1Gi",    "--gpus",
                    "0",       "--job-uids", NULL,        NULL,     NULL};
    char want[128];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        argv[12] = (char *)bad[i];
        snprintf(want, sizeof(want), "--job-uids: '%s' is not FIRST-LAST",
                 bad[i]);
        refused(13, argv, want);
    }
    argv[12] = "60000-60009";
    argv[13] = "--user";
    argv[14] = "nobody";
    refused(15, argv, "--job-uids needs flagent to stay root");
}
