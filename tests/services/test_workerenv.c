/* Tests for services/workerenv.c: a command: worker's environment and
 * program. */
#include "services/workerenv.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define ERRLEN 1024

static jobspec parse(const char *text)
{
    jobspec s;
    char err[ERRLEN] = "";

    cr_assert_eq(jobspec_parse(text, strlen(text), &s, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    return s;
}

static size_t count(char **env, const char *name)
{
    size_t n = 0, l = strlen(name);

    for (size_t i = 0; env[i] != NULL; i++)
        n += strncmp(env[i], name, l) == 0 && env[i][l] == '=';
    return n;
}

Test(workerenv, sets_the_jobs_variables_over_the_launchers_and_adds_env)
{
    jobspec s = parse("name: j\nmodel: cnn\nworkers: 4\niterations: 700\n"
                      "lr: 0.1\nbatch_size: 16\nseed: 9\n"
                      "compression: gtopk:0.01\ndata_dir: /data/fm\n"
                      "command: [prog]\nenv:\n  MINE: yes\n"
                      "  PYTHONPATH: /mine\n");
    char *base[] = {"HOME=/root",
                    "FLPS_RANK=99",
                    "FLPS_SERVERS=tcp://x:1",
                    "PYTHONPATH=/inherited",
                    "FLPS_PYTHON_DIR=/repo/python",
                    NULL};
    workerenv w = {.job = "j-1", .rank = 2, .servers = "tcp://a:1,tcp://b:2"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, base, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "HOME"), "/root");
    cr_assert_str_eq(workerenv_get(env, "FLPS_JOB"), "j-1");
    cr_assert_str_eq(workerenv_get(env, "FLPS_RANK"), "2");
    cr_assert_eq(count(env, "FLPS_RANK"), 1, "the launcher's own is dropped");
    cr_assert_str_eq(workerenv_get(env, "FLPS_WORKERS"), "4");
    cr_assert_str_eq(workerenv_get(env, "FLPS_SERVERS"), "tcp://a:1,tcp://b:2");
    cr_assert_eq(count(env, "FLPS_SERVERS"), 1);
    cr_assert_str_eq(workerenv_get(env, "FLPS_ITERATIONS"), "700");
    cr_assert_str_eq(workerenv_get(env, "FLPS_LR"), "0.10000000000000001");
    cr_assert_str_eq(workerenv_get(env, "FLPS_BATCH"), "16");
    cr_assert_str_eq(workerenv_get(env, "FLPS_SEED"), "9");
    cr_assert_str_eq(workerenv_get(env, "FLPS_COMPRESSION"), "gtopk:0.01");
    cr_assert_str_eq(workerenv_get(env, "FLPS_DATA_DIR"), "/data/fm");
    cr_assert_str_eq(workerenv_get(env, "FLPS_MODEL"), "cnn");
    cr_assert_str_eq(workerenv_get(env, "FLPS_DEADLINE_MS"), "120000");
    cr_assert_null(workerenv_get(env, "FLPS_PLAN_FILE"), "no plan, no file");
    cr_assert_str_eq(workerenv_get(env, "FLPS_OVERLAP"), "true",
                     "the job file's default");
    cr_assert_str_eq(workerenv_get(env, "MINE"), "yes");
    cr_assert_str_eq(workerenv_get(env, "PYTHONPATH"),
                     "/repo/python:/mine:/inherited");
    cr_assert_eq(count(env, "PYTHONPATH"), 1);
    workerenv_free(env);
}

Test(workerenv, every_reserved_variable_is_set_with_a_plan_and_a_warm_up)
{
    static const char *const names[] = {
#define X(name, what) #name,
        JOBSPEC_WORKER_ENV(X)
#undef X
    };
    jobspec s = parse("name: j\nmodel: mlp\ncompression: auto\n"
                      "density_warmup: 10\n");
    char *base[] = {"FLPS_BUILD_DIR=/b", "FLPS_LIBRARY=/b/lib/libflps.so",
                    NULL};
    workerenv w = {.job = "j",
                   .rank = 0,
                   .servers = "tcp://a:1",
                   .plan_file = "/p",
                   .credentials_file = "/run/creds",
                   .metrics = "10.0.0.1:0",
                   .gpu_clock_record = "/w/gpu_clock.rank0"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, base, &env), FLPS_OK);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        cr_assert_eq(count(env, names[i]), 1, "%s is set once", names[i]);
    cr_assert_str_eq(workerenv_get(env, "FLPS_PLAN_FILE"), "/p");
    cr_assert_str_eq(workerenv_get(env, "FLPS_CREDENTIALS_FILE"), "/run/creds");
    cr_assert_str_eq(
        workerenv_get(env, "FLPS_LIBRARY"), "/b/lib/libflps.so",
        "without a build beside the launcher, its own is passed on");
    workerenv_free(env);
}

Test(workerenv, finds_the_library_of_the_build_it_runs_from)
{
    jobspec s = parse("name: j\nmodel: mlp\n");
    workerenv w = {.job = "j", .servers = "tcp://a:1", .bin_dir = FLPS_BIN_DIR};
    char **env = NULL;
    char want[1024];

    cr_assert_eq(workerenv_build(&s, &w, NULL, &env), FLPS_OK);
    cr_assert_not_null(workerenv_get(env, "FLPS_LIBRARY"));
    snprintf(want, sizeof(want), "%s/lib/libflps.so",
             workerenv_get(env, "FLPS_BUILD_DIR"));
    cr_assert_str_eq(workerenv_get(env, "FLPS_LIBRARY"), want);
    cr_assert_not_null(strstr(workerenv_get(env, "PYTHONPATH"), "/python"),
                       "the repository's package: %s",
                       workerenv_get(env, "PYTHONPATH"));
    workerenv_free(env);
}

Test(workerenv, finds_a_program_in_path_or_says_where_it_looked)
{
    char *env[] = {"PATH=/nonexistent:/bin:/usr/bin", NULL};
    char out[256], err[ERRLEN] = "";

    cr_assert_eq(
        workerenv_find_program("sh", env, out, sizeof(out), err, sizeof(err)),
        FLPS_OK, "%s", err);
    cr_assert(strcmp(out, "/bin/sh") == 0 || strcmp(out, "/usr/bin/sh") == 0,
              "%s", out);
    cr_assert_eq(workerenv_find_program("no-such-program-here", env, out,
                                        sizeof(out), err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "no program 'no-such-program-here' in PATH "
                                   "(/nonexistent:/bin:/usr/bin)"),
                       "%s", err);
    cr_assert_eq(workerenv_find_program("/nonexistent/prog", env, out,
                                        sizeof(out), err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "not an executable file"), "%s", err);
}

Test(workerenv, passes_the_transport_the_launcher_chose_or_the_job_files)
{
    jobspec s = parse("name: j\nmodel: mlp\ntransport: auto\n");
    workerenv w = {.job = "j", .servers = "tcp://a:1"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, NULL, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "FLPS_TRANSPORT"), "auto",
                     "no choice made: the job file's word");
    workerenv_free(env);
    w.transport = "zmq"; /* auto decided by the launcher */
    cr_assert_eq(workerenv_build(&s, &w, NULL, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "FLPS_TRANSPORT"), "zmq");
    cr_assert_eq(count(env, "FLPS_TRANSPORT"), 1);
    workerenv_free(env);
}

Test(workerenv, passes_a_density_warm_up_only_where_the_job_has_one)
{
    jobspec s = parse("name: j\nmodel: mlp\niterations: 300\n"
                      "compression: gtopk:0.01\ndensity_warmup: 50\n"
                      "density_warmup_start: 0.3\ncommand: [prog]\n");
    char *base[] = {"FLPS_DENSITY_WARMUP=7", "FLPS_DENSITY_WARMUP_START=0.9",
                    NULL};
    workerenv w = {.job = "j", .servers = "tcp://a:1"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, base, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "FLPS_DENSITY_WARMUP"), "50");
    cr_assert_str_eq(workerenv_get(env, "FLPS_DENSITY_WARMUP_START"),
                     "0.29999999999999999", "the exact double");
    cr_assert_eq(count(env, "FLPS_DENSITY_WARMUP"), 1,
                 "the launcher's own is dropped");
    cr_assert_eq(count(env, "FLPS_DENSITY_WARMUP_START"), 1);
    workerenv_free(env);
    /* Without a warm-up neither is set, not even the launcher's. */
    s = parse("name: j\nmodel: mlp\ncompression: gtopk:0.01\n"
              "command: [prog]\n");
    cr_assert_eq(workerenv_build(&s, &w, base, &env), FLPS_OK);
    cr_assert_null(workerenv_get(env, "FLPS_DENSITY_WARMUP"));
    cr_assert_null(workerenv_get(env, "FLPS_DENSITY_WARMUP_START"));
    workerenv_free(env);
}

Test(workerenv,
     a_job_without_a_model_sets_no_flps_model_and_python_is_unbuffered)
{
    jobspec s = parse("name: j\ncommand: [prog]\n");
    char *base[] = {"HOME=/root", NULL};
    char *mine[] = {"PYTHONUNBUFFERED=", NULL};
    workerenv w = {.job = "j", .rank = 0, .servers = "tcp://a:1"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, base, &env), FLPS_OK);
    cr_assert_null(workerenv_get(env, "FLPS_MODEL"));
    /* print() lines reach the launcher as they are printed. */
    cr_assert_str_eq(workerenv_get(env, "PYTHONUNBUFFERED"), "1");
    workerenv_free(env);
    cr_assert_eq(workerenv_build(&s, &w, mine, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "PYTHONUNBUFFERED"), "",
                     "the launcher's own choice stays");
    cr_assert_eq(count(env, "PYTHONUNBUFFERED"), 1);
    workerenv_free(env);
}

Test(workerenv, names_the_keys_the_job_file_gives_and_formats_the_mode)
{
    jobspec s = parse("name: j\nmodel: mlp\ncompression: gtopk:0.01\n"
                      "mode: ssp:3\nlr: 0.1\ncommand: [prog]\n");
    jobspec bare = parse("name: j\nmodel: mlp\n");
    workerenv w = {.job = "j", .rank = 0, .servers = "tcp://a:1"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, NULL, &env), FLPS_OK);
    /* In the table's order, whatever the file's. */
    cr_assert_str_eq(workerenv_get(env, "FLPS_JOB_KEYS"),
                     "name,model,mode,lr,compression,command");
    cr_assert_str_eq(workerenv_get(env, "FLPS_MODE"), "ssp:3");
    workerenv_free(env);
    cr_assert_eq(workerenv_build(&bare, &w, NULL, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "FLPS_JOB_KEYS"), "name,model",
                     "the rest are defaults: the program's to choose");
    cr_assert_str_eq(workerenv_get(env, "FLPS_COMPRESSION"), "dense");
    workerenv_free(env);
}

Test(workerenv, a_saps_program_gets_its_peers_and_the_saps_keys)
{
    jobspec s = parse("name: j\nmodel: mlp\nworkers: 2\nmode: saps\n"
                      "saps_density: 0.05\npeer_selection: random\n"
                      "bandwidth_threshold: 1M\npeer_deadline: 3\n");
    workerenv w = {.job = "j",
                   .rank = 1,
                   .servers = "",
                   .peers = "tcp://127.0.0.1:1,tcp://127.0.0.1:2"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, NULL, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "FLPS_PEERS"),
                     "tcp://127.0.0.1:1,tcp://127.0.0.1:2");
    cr_assert_str_eq(workerenv_get(env, "FLPS_SERVERS"), "");
    cr_assert_str_eq(workerenv_get(env, "FLPS_MODE"), "saps");
    cr_assert_str_eq(workerenv_get(env, "FLPS_SAPS_DENSITY"),
                     "0.050000000000000003");
    cr_assert_str_eq(workerenv_get(env, "FLPS_PEER_SELECTION"), "random");
    cr_assert_str_eq(workerenv_get(env, "FLPS_BANDWIDTH_THRESHOLD"), "1000000");
    cr_assert_str_eq(workerenv_get(env, "FLPS_LOCAL_STEPS"), "1");
    cr_assert_str_eq(workerenv_get(env, "FLPS_PEER_DEADLINE"), "3");
    workerenv_free(env);
    /* auto, and no peers where the launcher has none. */
    s = parse("name: j\nmodel: mlp\n");
    w.peers = NULL;
    cr_assert_eq(workerenv_build(&s, &w, NULL, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "FLPS_BANDWIDTH_THRESHOLD"), "auto");
    cr_assert_str_eq(workerenv_get(env, "FLPS_PEERS"), "");
    workerenv_free(env);
}

Test(workerenv, an_env_entry_takes_the_place_of_the_launchers_variable)
{
    jobspec s = parse("name: j\nworkers: 1\ncommand: [prog]\n"
                      "env:\n  OMP_NUM_THREADS: \"1\"\n");
    char *base[] = {"OMP_NUM_THREADS=8", "HOME=/root", NULL};
    workerenv w = {.job = "j", .rank = 0, .servers = "tcp://a:1"};
    char **env = NULL;

    cr_assert_eq(workerenv_build(&s, &w, base, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "OMP_NUM_THREADS"), "1",
                     "getenv takes the first entry: env:'s must be it");
    cr_assert_eq(count(env, "OMP_NUM_THREADS"), 1);
    cr_assert_str_eq(workerenv_get(env, "HOME"), "/root");
    workerenv_free(env);
}

Test(workerenv, the_built_in_worker_gets_the_launchers_environment_and_env)
{
    jobspec s = parse("name: j\nmodel: mlp\nworkers: 2\n"
                      "env:\n  OMP_NUM_THREADS: \"1\"\n  FLPS_LOG: error\n");
    jobspec none = parse("name: j\nmodel: mlp\nworkers: 2\n");
    char *base[] = {"HOME=/root", "OMP_NUM_THREADS=8", "PATH=/usr/bin", NULL};
    char **env = NULL;

    cr_assert_eq(workerenv_build_flworker(&s, base, &env), FLPS_OK);
    cr_assert_str_eq(workerenv_get(env, "HOME"), "/root");
    cr_assert_str_eq(workerenv_get(env, "PATH"), "/usr/bin");
    cr_assert_str_eq(workerenv_get(env, "OMP_NUM_THREADS"), "1");
    cr_assert_eq(count(env, "OMP_NUM_THREADS"), 1);
    cr_assert_str_eq(workerenv_get(env, "FLPS_LOG"), "error");
    cr_assert_null(workerenv_get(env, "FLPS_JOB"),
                   "flworker takes the job from its arguments");
    workerenv_free(env);
    env = NULL;
    cr_assert_eq(workerenv_build_flworker(&none, NULL, &env), FLPS_OK);
    cr_assert_not_null(env);
    cr_assert_null(env[0], "no launcher's variables and no env: nothing");
    workerenv_free(env);
    cr_assert_eq(workerenv_build_flworker(NULL, base, &env), FLPS_EINVAL);
}
