/* Tests of the flsubmit binary against a fake flsched on loopback: what it
 * sends, what it prints, and its exit codes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/submit_cli.h"
#include "fake_sched.h"

#define FLSUBMIT FLPS_BIN_DIR "/flsubmit"
#define RUN_TIMEOUT_S 30

typedef struct sub_result {
    int status; /* exit code, -1 if it did not exit */
    char *out, *err;
} sub_result;

static char *slurp_fd(int fd)
{
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t got;

    lseek(fd, 0, SEEK_SET);
    while ((got = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)got;
        if (cap - n < 2)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    close(fd);
    return buf;
}

/* Wait for pid, killing it after RUN_TIMEOUT_S. */
static int wait_exit(pid_t pid)
{
    int st = 0;

    for (int i = 0; i < RUN_TIMEOUT_S * 100; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    cr_assert_fail("flsubmit ran for over %d s", RUN_TIMEOUT_S);
    return -1;
}

/* The child's environment: only what the test sets, so a developer's
 * FLPS_TOKEN or proxy settings cannot change the results. */
static void child_env(const char *url, const char *token)
{
    clearenv();
    setenv("PATH", "/usr/bin:/bin", 1);
    if (url != NULL)
        setenv("FLPS_SCHEDULER", url, 1);
    if (token != NULL)
        setenv("FLPS_TOKEN", token, 1);
}

/* Run flsubmit ARGS... with FLPS_SCHEDULER=url (NULL: unset) and
 * FLPS_TOKEN=token (NULL: unset), stdout and stderr captured. */
static void run_flsubmit(sub_result *r, const char *url, const char *token,
                         const char *const *args)
{
    char out_path[] = "/tmp/flsubmit-out-XXXXXX";
    char err_path[] = "/tmp/flsubmit-err-XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    const char *argv[16] = {"flsubmit"};
    size_t n = 1;
    pid_t pid;

    cr_assert(out_fd >= 0 && err_fd >= 0);
    unlink(out_path);
    unlink(err_path);
    while (args[n - 1] != NULL && n < 15) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        child_env(url, token);
        dup2(out_fd, STDOUT_FILENO);
        dup2(err_fd, STDERR_FILENO);
        execv(FLSUBMIT, (char *const *)argv);
        _exit(127);
    }
    r->status = wait_exit(pid);
    r->out = slurp_fd(out_fd);
    r->err = slurp_fd(err_fd);
}

#define RUN(r, url, token, ...)                                                \
    run_flsubmit(r, url, token, (const char *const[]){__VA_ARGS__, NULL})

static void sub_free(sub_result *r)
{
    free(r->out);
    free(r->err);
}

static int contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

#define assert_contains(hay, needle)                                           \
    cr_assert(contains(hay, needle), "expected \"%s\" in:\n%s", needle, hay)

/* A job file of len bytes, which may hold NULs. */
static char *write_job_bytes(const void *data, size_t len)
{
    static char path[64];
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/flsubmit-job-XXXXXX");
    close(mkstemp(path));
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    return path;
}

static char *write_job_file(const char *text)
{
    return write_job_bytes(text, strlen(text));
}

static const char *job_file_text = "name: mlp\nmodel: mlp\nworkers: 2\n";

static const char *job_queued =
    "{\"id\": \"j5\", \"name\": \"mlp\", \"state\": \"QUEUED\","
    " \"priority\": 0, \"submitted_at\": 1764430000.1, \"started_at\": null,"
    " \"finished_at\": null, \"attempt\": 0, \"restarts\": 0,"
    " \"max_restarts\": 0, \"reason\": \"\", \"workers\": 2, \"servers\": 1,"
    " \"iterations\": 1000, \"progress\": null, \"tasks\": []}";

Test(flsubmit, submit_sends_the_file_bytes_and_prints_the_job_id)
{
    fake_sched fs;
    sub_result r;
    char *file = write_job_file(job_file_text);
    fake_req q;

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "j5\n", "only the id, for ID=$(flsubmit submit)");
    cr_assert_eq(fake_nreqs(&fs), 1);
    q = fake_req_at(&fs, 0);
    cr_assert_str_eq(q.method, "POST");
    cr_assert_str_eq(q.path, "/v1/jobs");
    cr_assert_eq(q.len, strlen(job_file_text));
    cr_assert_eq(memcmp(q.body, job_file_text, q.len), 0,
                 "the file is sent as it is");
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

Test(flsubmit, submit_json_prints_the_created_job_object)
{
    fake_sched fs;
    sub_result r;
    char *file = write_job_file(job_file_text);
    json_t *j;

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    RUN(&r, fs.url, NULL, "--json", "submit", file);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    j = json_loads(r.out, 0, NULL);
    cr_assert_not_null(j, "stdout is JSON: %s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "j5");
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")), "QUEUED");
    json_decref(j);
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

Test(flsubmit, the_token_from_FLPS_TOKEN_arrives_as_a_bearer_header)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, "{\"jobs\": []}");
    RUN(&r, fs.url, "tok-123", "list");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(fake_req_at(&fs, 0).auth, "Bearer tok-123");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "list");
    cr_assert_str_eq(fake_req_at(&fs, 1).auth, "",
                     "no FLPS_TOKEN, no Authorization header");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_refused_job_file_exits_2_with_the_servers_message)
{
    fake_sched fs;
    sub_result r;
    char *file = write_job_file("name: mlp\nworkers: 0\n");

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 400,
                   "{\"error\": \"line 2: workers: '0' is out of range; "
                   "expected 1..1024\", \"line\": 2, \"field\": \"workers\"}");
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED);
    cr_assert_eq(SUBMIT_EXIT_REFUSED, 2, "the documented code");
    cr_assert_str_eq(r.out, "", "no id on stdout");
    assert_contains(r.err, "the scheduler refused");
    assert_contains(r.err,
                    "line 2: workers: '0' is out of range; expected 1..1024");
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

Test(flsubmit, a_missing_job_file_exits_7_before_any_request)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    RUN(&r, fs.url, NULL, "submit", "/nonexistent/job.yaml");
    cr_assert_eq(r.status, SUBMIT_EXIT_FILE);
    cr_assert_eq(SUBMIT_EXIT_FILE, 7);
    assert_contains(r.err, "cannot read the job file /nonexistent/job.yaml: "
                           "No such file or directory; nothing was sent");
    cr_assert_eq(fake_nreqs(&fs), 0, "nothing reached the scheduler");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "submit", "/tmp");
    cr_assert_eq(r.status, SUBMIT_EXIT_FILE, "a directory is not a job file");
    assert_contains(r.err, "Is a directory");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, impossible_resources_exit_6_and_point_at_the_nodes)
{
    fake_sched fs;
    sub_result r;
    char *file = write_job_file(job_file_text);

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 422,
                   "{\"error\": \"needs 64 CPUs per worker; the largest node "
                   "has 16\"}");
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, SUBMIT_EXIT_UNPLACEABLE);
    cr_assert_eq(SUBMIT_EXIT_UNPLACEABLE, 6);
    assert_contains(r.err, "needs 64 CPUs per worker; the largest node has 16");
    assert_contains(r.err, "flsubmit nodes");
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

Test(flsubmit, an_unknown_id_exits_3_and_names_the_id)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j999", 404,
                   "{\"error\": \"no job j999\"}");
    RUN(&r, fs.url, NULL, "status", "j999");
    cr_assert_eq(r.status, SUBMIT_EXIT_NOT_FOUND);
    cr_assert_eq(SUBMIT_EXIT_NOT_FOUND, 3);
    assert_contains(r.err, "unknown job j999");
    cr_assert_str_eq(r.out, "");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, an_id_is_escaped_into_one_path_segment)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    RUN(&r, fs.url, NULL, "status", "../nodes");
    cr_assert_eq(r.status, SUBMIT_EXIT_NOT_FOUND);
    cr_assert_str_eq(fake_req_at(&fs, 0).path, "/v1/jobs/..%2Fnodes");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_refused_token_exits_4_and_says_how_to_set_one)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 401,
                   "{\"error\": \"missing or wrong bearer token\"}");
    RUN(&r, fs.url, NULL, "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_AUTH);
    cr_assert_eq(SUBMIT_EXIT_AUTH, 4);
    assert_contains(r.err, "missing or wrong bearer token");
    assert_contains(r.err, "set FLPS_TOKEN");
    sub_free(&r);
    RUN(&r, fs.url, "wrong", "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_AUTH);
    assert_contains(r.err, "FLPS_TOKEN does not match");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, cancel_sends_a_DELETE_and_prints_the_cancelled_job)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "DELETE", "/v1/jobs/j5", 200,
                   "{\"id\": \"j5\", \"name\": \"mlp\", \"state\": "
                   "\"CANCELLED\"}");
    RUN(&r, fs.url, NULL, "cancel", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(fake_req_at(&fs, 0).method, "DELETE");
    cr_assert_str_eq(fake_req_at(&fs, 0).path, "/v1/jobs/j5");
    cr_assert_str_eq(r.out, "Job j5 (mlp) CANCELLED\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, cancelling_a_finished_job_exits_5)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "DELETE", "/v1/jobs/j5", 409,
                   "{\"error\": \"job j5 already finished: SUCCEEDED\","
                   " \"state\": \"SUCCEEDED\"}");
    RUN(&r, fs.url, NULL, "cancel", "j5");
    cr_assert_eq(r.status, SUBMIT_EXIT_CONFLICT);
    cr_assert_eq(SUBMIT_EXIT_CONFLICT, 5);
    cr_assert_str_eq(r.err,
                     "flsubmit: cannot cancel job j5: it has already "
                     "finished (SUCCEEDED)\n",
                     "the cause once");
    sub_free(&r);
    fake_stop(&fs);
}

static const char *job_succeeded =
    "{\"id\": \"j5\", \"name\": \"mlp\", \"state\": \"SUCCEEDED\","
    " \"submitted_at\": 1764430000.1, \"started_at\": 1764430001.5,"
    " \"finished_at\": 1764430019.0, \"attempt\": 0, \"restarts\": 0,"
    " \"max_restarts\": 0, \"reason\": \"\", \"workers\": 2, \"servers\": 1,"
    " \"iterations\": 1000,"
    " \"progress\": {\"iteration\": 1000, \"loss\": 0.3,"
    " \"test_accuracy\": 0.86, \"bytes_sent\": 20000000,"
    " \"dense_bytes\": 900000000, \"elapsed\": 17.0},"
    " \"summary\": {\"test_accuracy\": 0.8768, \"iterations\": 1000,"
    " \"bytes_sent\": 117780755, \"bytes_received\": 160458157,"
    " \"dense_bytes\": 5648375789, \"wall_seconds\": 17.5},"
    " \"tasks\": [{\"task\": \"server-0\", \"node\": \"n1\","
    " \"state\": \"EXITED\", \"endpoint\": \"tcp://127.0.0.1:40111\"}]}";

Test(flsubmit, status_json_prints_the_job_object_with_its_summary)
{
    fake_sched fs;
    sub_result r;
    json_t *j, *sum;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j5", 200, job_succeeded);
    RUN(&r, fs.url, NULL, "status", "j5", "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_eq(strchr(r.out, '\n'), r.out + strlen(r.out) - 1,
                 "one object on one line");
    j = json_loads(r.out, 0, NULL);
    cr_assert(json_is_object(j), "stdout is one JSON object: %s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "j5");
    cr_assert_str_eq(json_string_value(json_object_get(j, "name")), "mlp");
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")),
                     "SUCCEEDED");
    sum = json_object_get(j, "summary");
    cr_assert_float_eq(json_number_value(json_object_get(sum, "test_accuracy")),
                       0.8768, 1e-12);
    cr_assert_eq(json_integer_value(json_object_get(sum, "bytes_sent")),
                 117780755);
    json_decref(j);
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, status_shows_the_job_its_summary_and_placement)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j5", 200, job_succeeded);
    RUN(&r, fs.url, NULL, "status", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "ID:          j5\n");
    assert_contains(r.out, "State:       SUCCEEDED\n");
    assert_contains(r.out, "Submitted:   2025-11-29 15:26:40 UTC\n");
    assert_contains(r.out, "  test accuracy    87.68%\n");
    assert_contains(r.out, "  TASK       NODE   STATE    ENDPOINT\n"
                           "  server-0   n1     EXITED   "
                           "tcp://127.0.0.1:40111\n");
    sub_free(&r);
    fake_stop(&fs);
}

static const char *job_running_at(int iteration)
{
    static char buf[4][1024];
    static int k;
    char *b = buf[k++ % 4];

    snprintf(b, sizeof(buf[0]),
             "{\"id\": \"j5\", \"name\": \"mlp\", \"state\": \"RUNNING\","
             " \"attempt\": 0, \"restarts\": 0, \"max_restarts\": 0,"
             " \"reason\": \"\", \"workers\": 2, \"servers\": 1,"
             " \"iterations\": 1000,"
             " \"progress\": {\"iteration\": %d, \"loss\": 0.5,"
             " \"test_accuracy\": 0.8, \"bytes_sent\": %d,"
             " \"dense_bytes\": %d, \"elapsed\": %d},"
             " \"tasks\": [{\"task\": \"server-0\", \"node\": \"n1\","
             " \"state\": \"RUNNING\"}, {\"task\": \"worker-0\","
             " \"node\": \"n1\", \"state\": \"RUNNING\"},"
             " {\"task\": \"worker-1\", \"node\": \"n2\","
             " \"state\": \"RUNNING\"}]}",
             iteration, iteration * 1000, iteration * 100000, iteration / 100);
    return b;
}

Test(flsubmit, watch_follows_a_job_through_RUNNING_to_SUCCEEDED)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5", 200, job_queued,
                   job_running_at(0), job_running_at(500), job_running_at(520),
                   job_succeeded, (const char *)NULL);
    RUN(&r, fs.url, NULL, "watch", "j5");
    cr_assert_eq(r.status, 0, "SUCCEEDED exits 0; stderr: %s", r.err);
    /* Not a terminal: a line per state and per tenth of progress (520 is
     * in the same tenth as 500, so it prints nothing), then the summary. */
    cr_assert_str_eq(
        r.out,
        "QUEUED     waiting for 2 workers and 1 server to be placed\n"
        "RUNNING    attempt 0 on n1, n2\n"
        "RUNNING    [....................]   0.0%  iter 0/1000  loss 0.5000  "
        "acc 80.00%  sent 0 B  ETA -\n"
        "RUNNING    [##########..........]  50.0%  iter 500/1000  "
        "loss 0.5000  acc 80.00%  sent 500.0 KB (1.00% of dense)  ETA 5s\n"
        "Job j5 (mlp) SUCCEEDED\n"
        "  iterations       1000\n"
        "  test accuracy    87.68%\n"
        "  bytes sent       117.8 MB (2.09% of dense 5.6 GB)\n"
        "  bytes received   160.5 MB\n"
        "  wall time        17.5s\n");
    cr_assert_eq(fake_nreqs(&fs), 5, "one poll per state seen");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, watch_polls_about_every_500_ms)
{
    fake_sched fs;
    sub_result r;
    struct timespec t0, t1;
    double s;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5", 200, job_running_at(100),
                   job_running_at(200), job_running_at(300), job_succeeded,
                   (const char *)NULL);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    RUN(&r, fs.url, NULL, "watch", "j5");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s = (double)(t1.tv_sec - t0.tv_sec) +
        (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_assert_eq(r.status, 0);
    cr_assert(s > 1.4 && s < 6.0, "4 polls, 3 waits of 500 ms: %.2f s", s);
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, watch_of_a_failed_job_exits_1_with_the_reason)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j5", 200,
                   "{\"id\": \"j5\", \"name\": \"mlp\", \"state\": \"FAILED\","
                   " \"reason\": \"worker-1 on n2 exited with status 1\","
                   " \"iterations\": 1000}");
    RUN(&r, fs.url, NULL, "watch", "j5");
    cr_assert_eq(r.status, SUBMIT_EXIT_JOB_FAILED);
    cr_assert_eq(SUBMIT_EXIT_JOB_FAILED, 1);
    cr_assert_str_eq(
        r.out, "Job j5 (mlp) FAILED: worker-1 on n2 exited with status 1\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, watch_rides_out_a_scheduler_that_fails_for_a_moment)
{
    fake_sched fs;
    sub_result r;
    fake_route *route;
    char want[256];

    fake_start(&fs);
    route = fake_route_seq(&fs, "GET", "/v1/jobs/j5", 200, job_running_at(100),
                           "{\"error\": \"no leader\"}",
                           "{\"error\": \"no leader\"}", job_succeeded,
                           (const char *)NULL);
    route->statuses[1] = 503;
    route->statuses[2] = 503;
    RUN(&r, fs.url, NULL, "watch", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    snprintf(want, sizeof(want),
             "flsubmit: the scheduler at %s answered GET /v1/jobs/j5 with "
             "HTTP 503: no leader; retrying for up to 30 s\n",
             fs.url);
    cr_assert_str_eq(r.err, want, "said once");
    assert_contains(r.out, "Job j5 (mlp) SUCCEEDED\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, watch_json_prints_only_the_final_job_object)
{
    fake_sched fs;
    sub_result r;
    json_t *j;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5", 200, job_running_at(10),
                   job_succeeded, (const char *)NULL);
    RUN(&r, fs.url, NULL, "--json", "watch", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    j = json_loads(r.out, 0, NULL);
    cr_assert(json_is_object(j), "stdout is exactly one object: %s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(j, "state")),
                     "SUCCEEDED");
    cr_assert(json_is_object(json_object_get(j, "summary")));
    json_decref(j);
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, watch_on_a_terminal_redraws_one_progress_line_in_place)
{
    fake_sched fs;
    char buf[16384];
    size_t n = 0;
    ssize_t got;
    int master, st;
    pid_t pid;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5", 200, job_running_at(100),
                   job_running_at(200), job_succeeded, (const char *)NULL);
    pid = forkpty(&master, NULL, NULL, NULL);
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        child_env(fs.url, NULL);
        execl(FLSUBMIT, "flsubmit", "watch", "j5", (char *)NULL);
        _exit(127);
    }
    /* Read until the child closes the terminal (EIO on Linux). */
    while (n < sizeof(buf) - 1 &&
           ((got = read(master, buf + n, sizeof(buf) - 1 - n)) > 0 ||
            (got < 0 && errno == EINTR)))
        if (got > 0)
            n += (size_t)got;
    buf[n] = '\0';
    waitpid(pid, &st, 0);
    close(master);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "output:\n%s", buf);
    /* forkpty's terminal has no size: 80 columns, the compact line. */
    assert_contains(buf, "\r[#.........]  10.0% 100/1000 loss 0.5000 acc");
    assert_contains(buf, "\r[##........]  20.0% 200/1000 loss 0.5000 acc");
    assert_contains(buf, "\033[K");
    assert_contains(buf, "Job j5 (mlp) SUCCEEDED");
    fake_stop(&fs);
}

Test(flsubmit, an_unreachable_scheduler_gives_the_clear_message_and_exit_8)
{
    sub_result r;
    char url[64], want[256];
    int fd;
    uint16_t port = fake_dead_port(&fd);

    snprintf(url, sizeof(url), "http://127.0.0.1:%u", (unsigned)port);
    snprintf(want, sizeof(want),
             "flsubmit: cannot reach the scheduler at %s: connection refused; "
             "is flsched running? set --scheduler or FLPS_SCHEDULER\n",
             url);
    RUN(&r, url, NULL, "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_UNREACHABLE);
    cr_assert_eq(SUBMIT_EXIT_UNREACHABLE, 8);
    cr_assert_str_eq(r.err, want);
    sub_free(&r);
    /* --scheduler wins over FLPS_SCHEDULER. */
    RUN(&r, "http://127.0.0.1:9/never-used", NULL, "--scheduler", url, "nodes");
    cr_assert_eq(r.status, SUBMIT_EXIT_UNREACHABLE);
    cr_assert_str_eq(r.err, want);
    sub_free(&r);
    close(fd);
}

Test(flsubmit, malformed_json_from_the_server_is_reported_not_crashed_on)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, "{\"jobs\": [{\"id\": ");
    fake_route_add(&fs, "GET", "/v1/nodes", 200, "{\"nodes\": 7}");
    fake_route_add(&fs, "GET", "/v1/jobs/j5", 200, "[1, 2]");
    RUN(&r, fs.url, NULL, "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_BAD_REPLY);
    cr_assert_eq(SUBMIT_EXIT_BAD_REPLY, 10);
    assert_contains(r.err, "sent a malformed reply to GET /v1/jobs: not JSON");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "nodes");
    cr_assert_eq(r.status, SUBMIT_EXIT_BAD_REPLY);
    assert_contains(r.err, "malformed reply to GET /v1/nodes: no \"nodes\" "
                           "array");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "watch", "j5");
    cr_assert_eq(r.status, SUBMIT_EXIT_BAD_REPLY);
    assert_contains(r.err, "expected a JSON object");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_server_error_exits_10_with_its_message)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 503,
                   "{\"error\": \"redis is unreachable\"}");
    RUN(&r, fs.url, NULL, "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_BAD_REPLY);
    assert_contains(r.err, "answered GET /v1/jobs with HTTP 503: redis is "
                           "unreachable");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_404_to_a_list_means_the_url_is_not_flsched)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    RUN(&r, fs.url, NULL, "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_BAD_REPLY,
                 "not exit 3: no id was given");
    assert_contains(r.err, "answered GET /v1/jobs with HTTP 404");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, list_prints_a_table_of_the_jobs)
{
    fake_sched fs;
    sub_result r;
    char body[4096];

    snprintf(body, sizeof(body), "{\"jobs\": [%s, %s]}", job_succeeded,
             job_queued);
    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, body);
    RUN(&r, fs.url, NULL, "list");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "ID   NAME   STATE       PROGRESS    ACCURACY   "
                           "RESTARTS   AGE\n");
    assert_contains(r.out, "j5   mlp    SUCCEEDED   1000/1000   87.68%     "
                           "0/0        ");
    assert_contains(r.out, "j5   mlp    QUEUED      0/1000      -          "
                           "0/0        ");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, logs_page_through_the_cursor_the_server_gives)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5/logs", 200,
                   "{\"lines\": [{\"id\": \"1-0\", \"task\": \"server-0\","
                   " \"line\": \"listening on tcp://127.0.0.1:4000\"},"
                   " {\"id\": \"2-0\", \"task\": \"worker-0\","
                   " \"line\": \"iter 1\"}], \"next\": \"2-0\"}",
                   "{\"lines\": [{\"id\": \"3-0\", \"task\": \"worker-1\","
                   " \"line\": \"iter 2\"}], \"next\": \"3-0\"}",
                   "{\"lines\": [], \"next\": \"3-0\"}", (const char *)NULL);
    RUN(&r, fs.url, NULL, "logs", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "[server-0] listening on tcp://127.0.0.1:4000\n"
                            "[worker-0] iter 1\n"
                            "[worker-1] iter 2\n");
    cr_assert_eq(fake_nreqs(&fs), 3);
    cr_assert_str_eq(fake_req_at(&fs, 0).query, "limit=1000");
    cr_assert_str_eq(fake_req_at(&fs, 1).query, "after=2-0&limit=1000");
    cr_assert_str_eq(fake_req_at(&fs, 2).query, "after=3-0&limit=1000");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, logs_follow_keeps_reading_until_the_job_is_final)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5/logs", 200,
                   "{\"lines\": [{\"id\": \"1-0\", \"task\": \"worker-0\","
                   " \"line\": \"a\"}], \"next\": \"1-0\"}",
                   "{\"lines\": [], \"next\": \"1-0\"}",
                   "{\"lines\": [{\"id\": \"2-0\", \"task\": \"worker-0\","
                   " \"line\": \"b\"}], \"next\": \"2-0\"}",
                   "{\"lines\": [], \"next\": \"2-0\"}", (const char *)NULL);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5", 200, job_running_at(10),
                   job_succeeded, (const char *)NULL);
    RUN(&r, fs.url, NULL, "logs", "--follow", "j5", "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out,
                     "{\"id\":\"1-0\",\"task\":\"worker-0\",\"line\":\"a\"}\n"
                     "{\"id\":\"2-0\",\"task\":\"worker-0\",\"line\":\"b\"}\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, nodes_prints_a_table)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/nodes", 200,
                   "{\"nodes\": [{\"name\": \"n1\", \"address\": "
                   "\"127.0.0.1\", \"cpus\": 8, \"memory\": 17179869184,"
                   " \"gpus\": 0, \"state\": \"READY\", \"last_heartbeat\": "
                   "1.0, \"used\": {\"cpus\": 2, \"memory\": 1073741824,"
                   " \"gpus\": 0}}]}");
    RUN(&r, fs.url, NULL, "nodes");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "NAME   ADDRESS     STATE   CPUS   MEMORY         "
                           "GPUS   HEARTBEAT\n"
                           "n1     127.0.0.1   READY   2/8    1 GiB/16 GiB   "
                           "0/0    ");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, plan_prints_the_layers_and_a_missing_plan_exits_3)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j5/plan", 200,
                   "{\"version\": 1, \"predicted_iteration_seconds\": 0.5,"
                   " \"layers\": [{\"name\": \"fc1\", \"numel\": 1000,"
                   " \"codec\": \"topk\", \"density\": 0.05}]}");
    RUN(&r, fs.url, NULL, "plan", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "Plan for j5 (version 1): predicted 0.500 s per "
                            "iteration\n"
                            "LAYER   NUMEL   CODEC   DENSITY\n"
                            "fc1     1000    topk    5.00%\n");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "plan", "j6");
    cr_assert_eq(r.status, SUBMIT_EXIT_NOT_FOUND);
    assert_contains(r.err, "no plan for job j6");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_bad_command_line_exits_64_and_sends_nothing)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    RUN(&r, fs.url, NULL, "frobnicate");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    cr_assert_eq(SUBMIT_EXIT_USAGE, 64);
    assert_contains(r.err, "unknown command 'frobnicate'");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "status");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    assert_contains(r.err, "status needs a job ID");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "list", "extra");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    sub_free(&r);
    RUN(&r, fs.url, NULL, "status", "j1", "--follow");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    sub_free(&r);
    cr_assert_eq(fake_nreqs(&fs), 0);
    fake_stop(&fs);
}

Test(flsubmit, help_lists_every_command_and_exit_code)
{
    sub_result r;

    RUN(&r, NULL, NULL, "--help");
    cr_assert_eq(r.status, 0);
    assert_contains(r.out, "submit FILE");
    assert_contains(r.out, "logs ID [--follow]");
    assert_contains(r.out, "  2    the scheduler refused the job file");
    assert_contains(r.out, "  8    cannot reach the scheduler");
    assert_contains(r.out, "FLPS_TOKEN");
    assert_contains(r.out, "      --version        print flsubmit's version");
    assert_contains(r.out, "-o, --output FORMAT");
    assert_contains(r.out, "completion bash | zsh");
    sub_free(&r);
}

Test(flsubmit, each_command_has_its_own_help_page)
{
    sub_result r;

    RUN(&r, NULL, NULL, "cancel", "--help");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "usage: flsubmit [--scheduler URL] [--json] cancel "
                           "ID | latest | --all\n");
    assert_contains(r.out, "-a, --all");
    cr_assert(!contains(r.out, "exit codes:"), "not the global page:\n%s",
              r.out);
    cr_assert(!contains(r.out, "submit FILE"), "only cancel's page");
    sub_free(&r);
    RUN(&r, NULL, NULL, "--help", "logs");
    cr_assert_eq(r.status, 0);
    assert_contains(r.out, "logs ID [--follow] [--events]\n");
    assert_contains(r.out, "--events");
    sub_free(&r);
    RUN(&r, NULL, NULL, "-h", "stauts");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE, "help of no such command");
    assert_contains(r.err, "did you mean 'status'?");
    sub_free(&r);
}

Test(flsubmit, a_mistyped_command_gets_the_closest_one_suggested)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    RUN(&r, fs.url, NULL, "stauts", "j1");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    cr_assert_str_eq(r.err, "flsubmit: unknown command 'stauts'; did you "
                            "mean 'status'?\nrun 'flsubmit --help' for the "
                            "commands\n");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "frobnicate");
    cr_assert(!contains(r.err, "did you mean"),
              "nothing is close to frobnicate: %s", r.err);
    sub_free(&r);
    cr_assert_eq(fake_nreqs(&fs), 0);
    fake_stop(&fs);
}

Test(flsubmit, closest_suggests_only_a_likely_typo)
{
    const char *words[] = {"submit", "status", "list", "logs", "nodes"};

    cr_assert_str_eq(submit_cli_closest("sumbit", words, 5), "submit");
    cr_assert_str_eq(submit_cli_closest("lst", words, 5), "list");
    cr_assert_str_eq(submit_cli_closest("node", words, 5), "nodes");
    cr_assert_null(submit_cli_closest("ls", words, 5),
                   "two edits of two letters is a different word");
    cr_assert_null(submit_cli_closest("frobnicate", words, 5));
    cr_assert_null(submit_cli_closest("", words, 5));
}

Test(flsubmit, json_prints_reals_in_their_shortest_round_trip_form)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j5", 200,
                   "{\"id\": \"j5\", \"state\": \"SUCCEEDED\", \"summary\":"
                   " {\"test_accuracy\": 0.25048, \"wall_seconds\": 17.0,"
                   " \"bytes_sent\": 1200}}");
    RUN(&r, fs.url, NULL, "status", "j5", "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out,
                     "{\"id\":\"j5\",\"state\":\"SUCCEEDED\",\"summary\":"
                     "{\"test_accuracy\":0.25048,\"wall_seconds\":17.0,"
                     "\"bytes_sent\":1200}}\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, an_unknown_model_is_refused_before_anything_is_sent)
{
    fake_sched fs;
    sub_result r;
    char *file = write_job_file("name: x\nmodel: resnet50\nworkers: 2\n");

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED);
    assert_contains(r.err, "line 2: model: 'resnet50' is not accepted; "
                           "expected one of mlp, cnn");
    assert_contains(r.err, "nothing was sent");
    cr_assert_str_eq(r.out, "");
    cr_assert_eq(fake_nreqs(&fs), 0, "refused before it could queue");
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

static const char *log_page_with_event =
    "{\"lines\": [{\"id\": \"1-0\", \"task\": \"worker-0\","
    " \"line\": \"loading fashion-mnist\"},"
    " {\"id\": \"2-0\", \"task\": \"worker-0\", \"line\":"
    " \"{\\\"event\\\":\\\"progress\\\",\\\"iter\\\":10}\"},"
    " {\"id\": \"3-0\", \"task\": \"worker-0\","
    " \"line\": \"{not an event}\"}], \"next\": \"3-0\"}";

Test(flsubmit, logs_hide_the_workers_event_lines_unless_events)
{
    fake_sched fs;
    sub_result r;
    const char *empty = "{\"lines\": [], \"next\": \"3-0\"}";

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5/logs", 200, log_page_with_event,
                   empty, log_page_with_event, empty, (const char *)NULL);
    RUN(&r, fs.url, NULL, "logs", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "[worker-0] loading fashion-mnist\n"
                            "[worker-0] {not an event}\n");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "logs", "j5", "--events");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "[worker-0] {\"event\":\"progress\",\"iter\":10}\n");
    sub_free(&r);
    fake_stop(&fs);
}

static const char *jobs_mixed =
    "{\"jobs\": [{\"id\": \"j1\", \"state\": \"RUNNING\"},"
    " {\"id\": \"j2\", \"state\": \"SUCCEEDED\"},"
    " {\"id\": \"j3\", \"state\": \"QUEUED\"},"
    " {\"id\": \"j4\", \"state\": \"FAILED\"}]}";

Test(flsubmit, cancel_latest_stops_the_newest_job_still_queued_or_running)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, jobs_mixed);
    fake_route_add(&fs, "DELETE", "/v1/jobs/j3", 200,
                   "{\"id\": \"j3\", \"name\": \"b\", \"state\": "
                   "\"CANCELLED\"}");
    RUN(&r, fs.url, NULL, "cancel", "latest");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "Job j3 (b) CANCELLED\n");
    cr_assert_eq(fake_nreqs(&fs), 2);
    cr_assert_str_eq(fake_req_at(&fs, 1).method, "DELETE");
    cr_assert_str_eq(fake_req_at(&fs, 1).path, "/v1/jobs/j3");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, cancel_latest_with_nothing_to_cancel_exits_3)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200,
                   "{\"jobs\": [{\"id\": \"j2\", \"state\": \"SUCCEEDED\"}]}");
    RUN(&r, fs.url, NULL, "cancel", "latest");
    cr_assert_eq(r.status, SUBMIT_EXIT_NOT_FOUND);
    assert_contains(r.err, "no queued or running job to cancel");
    cr_assert_eq(fake_nreqs(&fs), 1, "no DELETE");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, cancel_all_stops_every_queued_and_running_job)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, jobs_mixed);
    fake_route_add(&fs, "DELETE", "/v1/jobs/j1", 200,
                   "{\"id\": \"j1\", \"name\": \"a\", \"state\": "
                   "\"CANCELLED\"}");
    /* j3 finished between the list and the cancel: skipped, not an error. */
    fake_route_add(&fs, "DELETE", "/v1/jobs/j3", 409,
                   "{\"error\": \"job j3 already finished: SUCCEEDED\","
                   " \"state\": \"SUCCEEDED\"}");
    RUN(&r, fs.url, NULL, "cancel", "--all");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "Job j1 (a) CANCELLED\n");
    cr_assert_str_eq(r.err, "");
    cr_assert_eq(fake_nreqs(&fs), 3, "the list and two DELETEs");
    cr_assert_str_eq(fake_req_at(&fs, 1).path, "/v1/jobs/j1");
    cr_assert_str_eq(fake_req_at(&fs, 2).path, "/v1/jobs/j3");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "cancel", "--all", "j1");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE, "--all takes no ID");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, an_unknown_id_is_said_once)
{
    fake_sched fs;
    sub_result r;
    char want[256];

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/jobs/j99", 404,
                   "{\"error\": \"no job j99\"}");
    RUN(&r, fs.url, NULL, "status", "j99");
    cr_assert_eq(r.status, SUBMIT_EXIT_NOT_FOUND);
    snprintf(want, sizeof(want),
             "flsubmit: unknown job j99: the scheduler at %s has no such "
             "job; `flsubmit list` shows the jobs\n",
             fs.url);
    cr_assert_str_eq(r.err, want);
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_long_server_message_is_shown_whole)
{
    static char reply[3000];
    char msg[2100];
    fake_sched fs;
    sub_result r;
    char *file = write_job_file(job_file_text);

    /* 2,000 characters, then a tail that would be lost to any cut. */
    memset(msg, 'x', 2000);
    snprintf(msg + 2000, sizeof(msg) - 2000, " the end");
    snprintf(reply, sizeof(reply), "{\"error\": \"line 3: %s\"}", msg);
    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 400, reply);
    fake_route_add(&fs, "GET", "/v1/jobs", 503, reply);
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED, "stderr: %s", r.err);
    assert_contains(r.err, msg);
    sub_free(&r);
    RUN(&r, fs.url, NULL, "list");
    cr_assert_eq(r.status, SUBMIT_EXIT_BAD_REPLY, "stderr: %s", r.err);
    assert_contains(r.err, msg);
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

Test(flsubmit, a_long_job_id_and_log_cursor_travel_whole)
{
    static char page1[1024], page2[1024], jobs[1024], path[256], logs[256];
    char id[121], cursor[301], want[512];
    fake_sched fs;
    sub_result r;

    memset(id, 'i', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    memset(cursor, '7', sizeof(cursor) - 1);
    cursor[sizeof(cursor) - 1] = '\0';
    snprintf(path, sizeof(path), "/v1/jobs/%s", id);
    snprintf(logs, sizeof(logs), "/v1/jobs/%s/logs", id);
    snprintf(page1, sizeof(page1),
             "{\"lines\": [{\"id\": \"%s\", \"task\": \"worker-0\","
             " \"line\": \"iter 1\"}], \"next\": \"%s\"}",
             cursor, cursor);
    snprintf(page2, sizeof(page2), "{\"lines\": [], \"next\": \"%s\"}", cursor);
    snprintf(jobs, sizeof(jobs),
             "{\"jobs\": [{\"id\": \"%s\", \"state\": \"RUNNING\"}]}", id);
    fake_start(&fs);
    fake_route_seq(&fs, "GET", logs, 200, page1, page2, (const char *)NULL);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, jobs);
    fake_route_add(&fs, "DELETE", path, 200,
                   "{\"id\": \"x\", \"state\": \"CANCELLED\"}");
    RUN(&r, fs.url, NULL, "logs", id);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "[worker-0] iter 1\n");
    snprintf(want, sizeof(want), "after=%s&limit=1000", cursor);
    cr_assert_str_eq(fake_req_at(&fs, 1).query, want,
                     "the whole cursor goes back");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "cancel", "latest");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(fake_req_at(&fs, 3).method, "DELETE");
    cr_assert_str_eq(fake_req_at(&fs, 3).path, path, "the whole id");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, a_binary_or_non_utf8_job_file_is_named_as_such_and_not_sent)
{
    static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    static const char latin1[] = "name: caf\xe9\nmodel: mlp\n";
    fake_sched fs;
    sub_result r;
    char *file;

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    file = write_job_bytes(png, sizeof(png) - 1);
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED, "stderr: %s", r.err);
    assert_contains(r.err, file);
    assert_contains(r.err, "the job file is binary, not YAML or JSON text "
                           "(byte 0 is 0x89); nothing was sent");
    cr_assert_null(strstr(r.err, "empty"), "%s", r.err);
    sub_free(&r);
    unlink(file);
    file = write_job_bytes(latin1, sizeof(latin1) - 1);
    RUN(&r, fs.url, NULL, "submit", file);
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED, "stderr: %s", r.err);
    assert_contains(r.err, "line 1, column 10: byte 9 (0xE9) is not UTF-8; "
                           "the job file must be UTF-8 text");
    sub_free(&r);
    unlink(file);
    cr_assert_eq(fake_nreqs(&fs), 0, "nothing was sent");
    fake_stop(&fs);
}

static const char *nodes_one =
    "{\"nodes\": [{\"name\": \"n1\", \"address\": \"127.0.0.1\", \"cpus\": 8,"
    " \"memory\": 17179869184, \"gpus\": 0, \"state\": \"READY\","
    " \"last_heartbeat\": 1.0, \"used\": {\"cpus\": 2,"
    " \"memory\": 1073741824, \"gpus\": 0}}]}";

Test(flsubmit, output_yaml_prints_the_objects_as_yaml)
{
    static const char *logs[] = {
        "{\"lines\": [{\"id\": \"1-0\", \"task\": \"worker-0\", \"line\":"
        " \"iter 1\"}, {\"id\": \"2-0\", \"task\": \"worker-1\", \"line\":"
        " \"true\"}], \"next\": \"2-0\"}",
        "{\"lines\": [], \"next\": \"2-0\"}"};
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_seq(&fs, "GET", "/v1/jobs/j5/logs", 200, logs[0], logs[1],
                   (const char *)NULL);
    fake_route_add(&fs, "GET", "/v1/nodes", 200, nodes_one);
    RUN(&r, fs.url, NULL, "nodes", "-o", "yaml");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "nodes:\n"
                            "- name: n1\n"
                            "  address: '127.0.0.1'\n"
                            "  cpus: 8\n"
                            "  memory: 17179869184\n"
                            "  gpus: 0\n"
                            "  state: READY\n"
                            "  last_heartbeat: 1.0\n"
                            "  used:\n"
                            "    cpus: 2\n"
                            "    memory: 1073741824\n"
                            "    gpus: 0\n");
    sub_free(&r);
    /* Several objects: one document each, "---" between. */
    RUN(&r, fs.url, NULL, "--output=yaml", "logs", "j5");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "id: '1-0'\ntask: worker-0\nline: iter 1\n"
                            "---\n"
                            "id: '2-0'\ntask: worker-1\nline: 'true'\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, output_json_is_what_json_prints)
{
    fake_sched fs;
    sub_result a, b;

    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/nodes", 200, nodes_one);
    RUN(&a, fs.url, NULL, "nodes", "--json");
    RUN(&b, fs.url, NULL, "-ojson", "nodes");
    cr_assert_eq(b.status, 0, "stderr: %s", b.err);
    cr_assert_str_eq(a.out, b.out);
    sub_free(&a);
    sub_free(&b);
    fake_stop(&fs);
}

Test(flsubmit, output_wide_adds_columns_to_list_status_and_nodes)
{
    fake_sched fs;
    sub_result r;
    char body[4096];

    snprintf(body, sizeof(body), "{\"jobs\": [%s]}", job_queued);
    fake_start(&fs);
    fake_route_add(&fs, "GET", "/v1/nodes", 200, nodes_one);
    fake_route_add(&fs, "GET", "/v1/jobs", 200, body);
    fake_route_add(&fs, "GET", "/v1/jobs/j5", 200, job_queued);
    RUN(&r, fs.url, NULL, "nodes", "-o", "wide");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "   FREE-CPUS   FREE-MEMORY   FREE-GPUS   "
                           "LAST-HEARTBEAT\n");
    assert_contains(r.out, "6           15 GiB        0           "
                           "1970-01-01 00:00:01 UTC\n");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "list", "-o", "wide");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "   WORKERS   SERVERS   PRIORITY   TRANSPORT   "
                           "SENT   NODES\n");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "status", "j5", "-o", "wide");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "Time limit:  none\n");
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, an_output_a_command_does_not_have_is_a_usage_error)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    RUN(&r, fs.url, NULL, "watch", "j5", "-o", "wide");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    assert_contains(r.err, "watch has no -o wide (list, status and nodes "
                           "have)");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "list", "-o", "xml");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    assert_contains(r.err, "-o takes json, yaml or wide, not 'xml'");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "list", "-o");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    assert_contains(r.err, "--output needs a FORMAT");
    sub_free(&r);
    cr_assert_eq(fake_nreqs(&fs), 0);
    fake_stop(&fs);
}

Test(flsubmit, submit_sends_a_job_said_torchrun_style)
{
    fake_sched fs;
    sub_result r;
    fake_req q;
    static const char want[] = "name: \"train\"\n"
                               "workers: \"4\"\n"
                               "servers: \"1\"\n"
                               "compression: \"gtopk:0.01\"\n"
                               "command: [\"python3\", \"train.py\", "
                               "\"--json\"]\n";

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    RUN(&r, fs.url, NULL, "submit", "-n", "4", "-s", "1", "--compression",
        "gtopk:0.01", "--", "python3", "train.py", "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "j5\n");
    q = fake_req_at(&fs, 0);
    cr_assert_str_eq(q.path, "/v1/jobs");
    cr_assert_eq(q.len, strlen(want), "%.*s", (int)q.len, q.body);
    cr_assert_eq(memcmp(q.body, want, q.len), 0, "%.*s", (int)q.len, q.body);
    sub_free(&r);
    /* flsubmit's own options among the job's: --json is flsubmit's before
     * "--", and -s before `submit` is still --scheduler. */
    RUN(&r, NULL, NULL, "-s", fs.url, "submit", "--json", "-s", "1", "-n", "2",
        "--", "python3", "t.py");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "\"id\":\"j5\"");
    q = fake_req_at(&fs, 1);
    cr_assert(strstr(q.body, "servers: \"1\"\n") != NULL, "%s", q.body);
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, submit_takes_a_job_file_and_flags_together_as_flrun_does)
{
    fake_sched fs;
    sub_result r;
    char *file = write_job_file("name: mlp\n"
                                "model: mlp\n"
                                "workers: 8   # all of them\n"
                                "lr: 0.1\n");
    fake_req q;
    char said[160];
    static const char want[] = "name: mlp\n"
                               "model: mlp\n"
                               "workers: \"2\"   # all of them\n"
                               "lr: \"0.05\"\n"
                               "seed: \"7\"\n";

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    RUN(&r, fs.url, NULL, "submit", file, "-n", "2", "--lr", "0.05",
        "--seed=7");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "j5\n");
    q = fake_req_at(&fs, 0);
    cr_assert_eq(q.len, strlen(want), "%.*s", (int)q.len, q.body);
    cr_assert_eq(memcmp(q.body, want, q.len), 0, "%.*s", (int)q.len, q.body);
    sub_free(&r);
    /* The flags before the file, flsubmit's own among them. */
    RUN(&r, NULL, NULL, "submit", "-s", "1", "--scheduler", fs.url, file,
        "--json");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    assert_contains(r.out, "\"id\":\"j5\"");
    q = fake_req_at(&fs, 1);
    cr_assert(strstr(q.body, "lr: 0.1\nservers: \"1\"\n") != NULL, "%s",
              q.body);
    sub_free(&r);
    fake_stop(&fs);
    /* The scheduler's refusal of a line a flag wrote names the flag. */
    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 400,
                   "{\"error\": \"line 4: lr: '9' is too large\", "
                   "\"line\": 4, \"field\": \"lr\"}");
    RUN(&r, fs.url, NULL, "submit", file, "--lr", "9");
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED, "stderr: %s", r.err);
    snprintf(said, sizeof(said),
             "flsubmit: the scheduler refused %s: --lr: '9' is too large\n",
             file);
    cr_assert_str_eq(r.err, said);
    sub_free(&r);
    unlink(file);
    fake_stop(&fs);
}

Test(flsubmit, a_refused_flag_is_named_as_given)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    /* Line 3 of the text is --compression's; a scheduler that takes
     * fewer codecs than this flsubmit refuses a value it let through. */
    fake_route_add(&fs, "POST", "/v1/jobs", 400,
                   "{\"error\": \"line 3: compression: 'gtopk:0.01' is not "
                   "accepted; expected dense, topk:D\", \"line\": 3,"
                   " \"field\": \"compression\"}");
    RUN(&r, fs.url, NULL, "submit", "-n", "2", "--compression", "gtopk:0.01",
        "--", "python3", "t.py");
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED, "stderr: %s", r.err);
    cr_assert_str_eq(r.err, "flsubmit: the scheduler refused the job: "
                            "--compression: 'gtopk:0.01' is not accepted; "
                            "expected dense, topk:D\n");
    sub_free(&r);
    /* A value flsubmit's own parser refuses is named so, and not sent. */
    RUN(&r, fs.url, NULL, "submit", "-n", "2", "--compression", "gtop:0.01",
        "--", "python3", "t.py");
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED, "stderr: %s", r.err);
    assert_contains(r.err, "flsubmit: --compression: 'gtop:0.01' is not a "
                           "codec");
    assert_contains(r.err, "nothing was sent");
    cr_assert_eq(fake_nreqs(&fs), 1);
    sub_free(&r);
    fake_stop(&fs);
}

Test(flsubmit, words_that_say_no_job_are_refused_before_anything_is_sent)
{
    fake_sched fs;
    sub_result r;

    fake_start(&fs);
    fake_route_add(&fs, "POST", "/v1/jobs", 201, job_queued);
    RUN(&r, fs.url, NULL, "submit", "-n", "2", "train.py");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    assert_contains(r.err, "'train.py': the program and its arguments go "
                           "after '--'");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "submit", "-n", "2", "--model", "resnet", "--",
        "python3", "t.py");
    cr_assert_eq(r.status, SUBMIT_EXIT_REFUSED);
    assert_contains(r.err, "flsubmit: --model: 'resnet' is not accepted; "
                           "expected one of mlp, cnn");
    assert_contains(r.err, "nothing was sent");
    sub_free(&r);
    RUN(&r, fs.url, NULL, "submit", "--follow", "-n", "2", "--", "p");
    cr_assert_eq(r.status, SUBMIT_EXIT_USAGE);
    assert_contains(r.err, "--follow is not an option of submit");
    sub_free(&r);
    cr_assert_eq(fake_nreqs(&fs), 0);
    fake_stop(&fs);
}
