/* The compute backend with real processes: a worker asked for a backend it
 * does not have (not built in, or unknown) stops with status 2 before it
 * loads its data or trains, naming the cause and the fix; --backend
 * overrides the job file; the backend a job ran on is in flworker's done
 * line and flrun's summary. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "runcmd.h"
#include "services/jobspec.h"
#include "spawn.h"
#include "worker/backend.h"

/* Stopping "at once" against waiting on a peer: the client's waits run
 * for minutes, so anything under this bound did not wait. */
#define FAST_S 30.0

#define NOT_BUILT_CUDA                                                         \
    "backend cuda is not built into this flworker (built: cpu); build flps "   \
    "where the CUDA toolkit is installed so cmake finds it"

typedef struct scene {
    char dir[64];
    char job[128];
} scene;

/* A one-worker, one-shard synthetic job; extra is more of the job file. */
static void scene_init(scene *s, const char *extra)
{
    FILE *f;

    snprintf(s->dir, sizeof(s->dir), "/tmp/flps-backend-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir));
    snprintf(s->job, sizeof(s->job), "%s/job.yaml", s->dir);
    f = fopen(s->job, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "name: bk\nmodel: mlp\ndataset: synthetic\nworkers: 1\n"
            "servers: 1\niterations: 20\neval_every: 0\n"
            "compression: topk:0.01\n%s",
            extra);
    fclose(f);
}

static void scene_fini(scene *s)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
    cr_assert_eq(system(cmd), 0);
}

static void run_timed(const char *cmd, run_result *r, double *secs)
{
    double t0 = flps_mono_s();

    run_cmd(cmd, r);
    *secs = flps_mono_s() - t0;
}

/* The expected message names this build's backends: where it has cuda
 * there is nothing to refuse. */
static void skip_if_cuda_is_built(void)
{
    if (worker_backend_find("cuda") != NULL)
        cr_skip_test("this flworker has the cuda backend");
}

/* flworker against an endpoint nothing listens on: a worker that got as
 * far as connecting would wait for minutes. */
static void run_worker(const scene *s, const char *args, run_result *r,
                       double *secs)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd),
             "%s/flworker --job %s --rank 0 --servers tcp://127.0.0.1:9 %s",
             FLPS_BIN_DIR, s->job, args);
    run_timed(cmd, r, secs);
}

/* Stopped before the data set: rank 0 prints its partition event right
 * after loading it, and every event before training starts. */
static void expect_stopped_before_the_data(const run_result *r, double secs)
{
    cr_assert_eq(r->status, 2, "%s", r->err);
    cr_assert_lt(secs, FAST_S, "flworker took %.1f s", secs);
    cr_assert_str_eq(r->out, "", "no event: %s", r->out);
    cr_assert_null(strstr(r->err, "backend cpu:"), "%s", r->err);
}

Test(backend_choice, flworker_with_backend_cuda_exits_2_before_its_data)
{
    scene s;
    run_result r;
    double secs;

    skip_if_cuda_is_built();
    scene_init(&s, "");
    run_worker(&s, "--backend cuda", &r, &secs);
    expect_stopped_before_the_data(&r, secs);
    cr_assert_not_null(strstr(r.err, NOT_BUILT_CUDA), "%s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "one line: %s",
                 r.err);
    run_free(&r);
    scene_fini(&s);
}

Test(backend_choice,
     a_job_file_with_backend_cuda_stops_flworker_before_its_data)
{
    scene s;
    run_result r;
    double secs;

    skip_if_cuda_is_built();
    scene_init(&s, "backend: cuda\n");
    run_worker(&s, "", &r, &secs);
    expect_stopped_before_the_data(&r, secs);
    cr_assert_not_null(strstr(r.err, NOT_BUILT_CUDA), "%s", r.err);
    run_free(&r);
    scene_fini(&s);
}

Test(backend_choice, an_unknown_backend_name_is_refused_with_the_known_ones)
{
    scene s;
    run_result r;
    double secs;
    char built[128], want[256];

    scene_init(&s, "");
    run_worker(&s, "--backend tpu", &r, &secs);
    expect_stopped_before_the_data(&r, secs);
    snprintf(want, sizeof(want),
             "unknown backend 'tpu'; flps knows cpu, cuda (built into this "
             "flworker: %s)",
             worker_backend_list(built, sizeof(built)));
    cr_assert_not_null(strstr(r.err, want), "%s", r.err);
    run_free(&r);
    scene_fini(&s);
}

Test(backend_choice, flrun_with_backend_cuda_fails_fast_and_names_the_backend)
{
    scene s;
    char cmd[512];
    run_result r;
    double secs;

    skip_if_cuda_is_built();
    scene_init(&s, "backend: cuda\n");
    snprintf(cmd, sizeof(cmd), "%s/flrun --log-dir %s/logs %s", FLPS_BIN_DIR,
             s.dir, s.job);
    run_timed(cmd, &r, &secs);
    cr_assert_neq(r.status, 0, "%s", r.err);
    cr_assert_lt(secs, FAST_S, "flrun took %.1f s", secs);
    cr_assert_not_null(strstr(r.err, NOT_BUILT_CUDA), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "exit status 2"), "%s", r.err);
    cr_assert_null(r.summary, "no summary: %s", r.out);
    cr_assert_null(strstr(r.out, "\"progress\""), "no training: %s", r.out);
    run_free(&r);
    scene_fini(&s);
}

/* The done event (a JSON line) in out. */
static json_t *done_event(const char *out)
{
    return next_event(&out, "done");
}

Test(backend_choice, backend_cpu_on_the_command_line_overrides_the_job_file)
{
    scene s;
    test_shard shard;
    const char *args[] = {"--job", "bk", "--shard", "0", "--shards", "1", NULL};
    char log[160], cmd[512];
    run_result r;
    json_t *done;

    /* Whether or not cuda is built, --backend cpu wins over the file. */
    scene_init(&s, "backend: cuda\n");
    snprintf(log, sizeof(log), "%s/shard.log", s.dir);
    cr_assert_eq(test_shard_start(&shard, log, args), 0);
    snprintf(cmd, sizeof(cmd),
             "%s/flworker --job %s --rank 0 --servers %s --backend cpu",
             FLPS_BIN_DIR, s.job, shard.endpoint);
    run_cmd(cmd, &r);
    cr_assert_eq(test_shard_stop(&shard, SIGTERM), 0);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "backend cpu: OpenBLAS, 1 thread"), "%s",
                       r.err);
    cr_assert_null(strstr(r.err, "backend cuda"), "%s", r.err);
    done = done_event(r.out);
    cr_assert_not_null(done, "%s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(done, "backend")),
                     "cpu");
    cr_assert_eq(json_integer_value(json_object_get(done, "iterations")), 20);
    json_decref(done);
    run_free(&r);
    scene_fini(&s);
}

static void expect_summary_backend_cpu(const char *extra)
{
    scene s;
    char cmd[512];
    run_result r;
    json_t *b;

    scene_init(&s, extra);
    snprintf(cmd, sizeof(cmd), "%s/flrun --quiet --log-dir %s/logs %s",
             FLPS_BIN_DIR, s.dir, s.job);
    run_cmd(cmd, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_not_null(r.summary, "%s", r.out);
    b = json_object_get(r.summary, "backend");
    cr_assert(json_is_string(b) && strcmp(json_string_value(b), "cpu") == 0,
              "%s", r.out);
    run_free(&r);
    scene_fini(&s);
}

Test(backend_choice, flrun_names_the_backend_in_its_summary)
{
    expect_summary_backend_cpu("backend: cpu\n");
}

Test(backend_choice, a_fedavg_job_names_its_backend_too)
{
    /* fedavg's rounds run in their own loop, with their own done line. */
    expect_summary_backend_cpu("mode: fedavg\nrounds: 2\nlocal_steps: 2\n");
}

Test(backend_choice, every_backend_the_job_file_accepts_is_one_flworker_knows)
{
    /* The job file's words (services/jobspec_keys.c) and the registry's
     * known names (worker/backend.c) are two lists: they must agree, or a
     * job could ask for a backend no flworker has a message for. */
    size_t n = 0;

    for (unsigned i = 0;; i++) {
        const char *name = jobspec_backend_name((jobspec_backend)i);

        if (strcmp(name, "unknown") == 0)
            break;
        cr_assert(worker_backend_is_known(name), "%s", name);
        n++;
    }
    cr_assert_eq(n, 2, "cpu and cuda");
    for (size_t i = 0; i < worker_backend_count(); i++) {
        const char *name = worker_backend_at(i)->name;
        int found = 0;

        for (unsigned j = 0; j < n; j++)
            found |=
                strcmp(jobspec_backend_name((jobspec_backend)j), name) == 0;
        cr_assert(found, "built backend %s is not a job-file word", name);
    }
}
