/* Decentralized training (mode saps) under flrun: no shard starts, every
 * worker computes the same matchings (their done events' digests agree),
 * the bytes stay the exchanges', probes and the final gather; and a worker
 * killed mid-job leaves the others going on without it, its peer skipping
 * the exchange (or the next membership check finding it gone first), the
 * summary naming it; so does a worker lost before the others' join. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include "runcmd.h"

/* A new directory for a run's job file and logs. */
static void run_dir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/flrun-saps-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

/* The matchings digest rank w's log ends with ("matchings digest HEX"),
 * into out (17 bytes); 0 when its log has none. */
static int digest_of(const char *dir, uint64_t w, char *out)
{
    char path[160], *text, *at;
    int ok;

    snprintf(path, sizeof(path), "%s/logs/flworker-%llu.log", dir,
             (unsigned long long)w);
    text = slurp(path);
    at = strstr(text, "matchings digest ");
    ok = at != NULL && sscanf(at, "matchings digest %16[0-9a-f]", out) == 1;
    free(text);
    return ok;
}

Test(flrun_saps,
     runs_without_shards_and_every_worker_computes_the_same_matchings,
     .timeout = 300)
{
    char dir[64], digest[17] = "";
    run_result r;

    run_dir(dir, sizeof(dir));
    run_flrun_text(dir,
                   "name: saps-small\nmodel: mlp\nworkers: 5\nmode: saps\n"
                   "iterations: 300\nlocal_steps: 2\nlr: 0.02\n"
                   "lr_schedule: cosine\neval_every: 0\nseed: 3\n",
                   &r);
    cr_assert_eq(r.status, 0, "flrun failed:\n%s", r.err);
    cr_assert_not_null(r.summary, "no summary:\n%s", r.out);
    cr_assert_str_eq(json_string_value(json_object_get(r.summary, "mode")),
                     "saps");
    cr_assert_eq(num(r.summary, "rounds"), 150);
    cr_assert(json_is_true(json_object_get(r.summary, "matchings_agree")),
              "the workers' matchings differ:\n%s", r.out);
    cr_assert_eq(json_array_size(json_object_get(r.summary, "workers_lost")),
                 0);
    cr_assert_eq(num(r.summary, "consensus_workers"), 5);
    cr_assert_gt(num(r.summary, "consensus_accuracy"), 0.5);
    cr_assert_gt(num(r.summary, "test_accuracy"), 0.5);
    /* Five workers: one idle a round; every other round an exchange. */
    cr_assert_eq(num(r.summary, "exchanges") + num(r.summary, "idle_rounds") +
                     num(r.summary, "skipped_exchanges"),
                 5 * 150);
    cr_assert_eq(num(r.summary, "idle_rounds"), 150);
    cr_assert_leq(num(r.summary, "exchange_bytes") +
                      num(r.summary, "probe_bytes"),
                  num(r.summary, "bytes_sent"));
    /* Every worker's log says the same digest of its 150 matchings. */
    for (uint64_t w = 0; w < 5; w++) {
        char dg[17];

        cr_assert(digest_of(dir, w, dg), "rank %llu logged no digest",
                  (unsigned long long)w);
        if (w == 0)
            snprintf(digest, sizeof(digest), "%s", dg);
        cr_assert_str_eq(dg, digest, "rank %llu", (unsigned long long)w);
    }
    /* No shard ran: no flps-N.log, and rank 0 coordinated the consensus. */
    {
        char path[128];

        snprintf(path, sizeof(path), "%s/logs/flps-0.log", dir);
        cr_assert_neq(access(path, F_OK), 0, "a shard ran");
    }
    cr_assert_gt(num(r.summary, "consensus_distance"), 0);
    run_free(&r);
}

/* The pid of the flworker of rank w of the job at job_path, from /proc
 * (0 when none runs). */
static pid_t flworker_pid(const char *job_path, uint32_t w)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    char want_rank[16];
    pid_t found = 0;

    snprintf(want_rank, sizeof(want_rank), "%u", w);
    while (d != NULL && found == 0 && (e = readdir(d)) != NULL) {
        char path[300], buf[4096];
        const char *args[32];
        size_t n, na = 0;
        FILE *f;

        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (size_t i = 0; i < n && na < 32; i += strlen(buf + i) + 1)
            args[na++] = buf + i;
        for (size_t i = 0;
             na > 0 && strstr(args[0], "flworker") != NULL && i + 1 < na; i++) {
            if (strcmp(args[i], "--rank") == 0 &&
                strcmp(args[i + 1], want_rank) == 0) {
                for (size_t j = 0; j + 1 < na; j++)
                    if (strcmp(args[j], "--job") == 0 &&
                        strcmp(args[j + 1], job_path) == 0)
                        found = (pid_t)atoi(e->d_name);
            }
        }
    }
    if (d != NULL)
        closedir(d);
    return found;
}

/* flrun on job in the background (env: assignments before it, or ""),
 * its output in dir's out and err, the worker lines in dir/logs. */
static void start_flrun(const char *dir, const char *job, const char *env)
{
    char cmd[640];
    FILE *p;

    snprintf(cmd, sizeof(cmd),
             "%s%s/flrun --log-dir %s/logs %s >%s/out 2>%s/err &", env,
             FLPS_BIN_DIR, dir, job, dir, dir);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    pclose(p);
}

/* Whether the log at path holds needle. */
static int log_has(const char *path, const char *needle)
{
    char *text = slurp(path);
    int yes = strstr(text, needle) != NULL;

    free(text);
    return yes;
}

Test(flrun_saps, a_worker_killed_mid_job_leaves_the_others_going_on,
     .timeout = 300)
{
    char dir[64], job[128], log[160];
    run_result r;
    pid_t victim = 0;
    json_t *lost;

    run_dir(dir, sizeof(dir));
    write_job_text(dir,
                   "name: saps-kill\nmodel: mlp\nworkers: 4\nmode: saps\n"
                   "iterations: 4000\nlr: 0.02\nlr_schedule: cosine\n"
                   "peer_deadline: 2\neval_every: 0\n",
                   job, sizeof(job));
    start_flrun(dir, job, "");
    /* Rank 2 dies once training is on its way: a second after it joined
     * the others and agreed on the matrix (its log line saying so), of
     * some 10 s of rounds. */
    snprintf(log, sizeof(log), "%s/logs/flworker-2.log", dir);
    for (int i = 0; i < 1200 && victim == 0; i++) {
        char path[160];

        snprintf(path, sizeof(path), "%s/logs/flrun-job.yaml", dir);
        if (log_has(log, "saps: rank 2 of 4")) {
            usleep(1000000);
            victim = flworker_pid(path, 2);
        } else {
            usleep(100000);
        }
    }
    cr_assert_neq(victim, 0, "rank 2 never got to iteration 200");
    cr_assert_eq(kill(victim, SIGKILL), 0);
    /* flrun ends by itself, with the summary. */
    for (int i = 0; i < 2400; i++) {
        char path[160];
        char *out;
        int done;

        snprintf(path, sizeof(path), "%s/out", dir);
        out = slurp(path);
        done = strstr(out, "\"workers_lost\"") != NULL;
        free(out);
        if (done)
            break;
        usleep(100000);
    }
    {
        char path[160];
        char *last;

        snprintf(path, sizeof(path), "%s/out", dir);
        r.out = slurp(path);
        snprintf(path, sizeof(path), "%s/err", dir);
        r.err = slurp(path);
        last = strrchr(r.out, '{');
        r.summary = last ? json_loads(last, 0, NULL) : NULL;
    }
    cr_assert_not_null(r.summary, "no summary:\n%s\n%s", r.out, r.err);
    lost = json_object_get(r.summary, "workers_lost");
    cr_assert_eq(json_array_size(lost), 1, "%s", r.out);
    cr_assert_eq(json_integer_value(json_array_get(lost, 0)), 2);
    cr_assert_eq(num(r.summary, "consensus_workers"), 3,
                 "the consensus of the three that went on");
    cr_assert(json_is_true(json_object_get(r.summary, "matchings_agree")));
    /* Its peer in the next round skips the exchange after the deadline;
     * unless that round began with a membership check (every 10th), which
     * found it gone first: then nobody waited for it, no skip. */
    if (num(r.summary, "skipped_exchanges") == 0) {
        for (uint32_t w = 0; w < 4; w++) {
            char path[160], *text;

            if (w == 2)
                continue;
            snprintf(path, sizeof(path), "%s/logs/flworker-%u.log", dir, w);
            text = slurp(path);
            cr_assert_neq(strstr(text, "worker 2 is gone (it did not take "
                                       "part in the membership check"),
                          NULL,
                          "no skip, and no membership check found "
                          "worker 2 gone:\n%s",
                          text);
            cr_assert_eq(strstr(text, "did not answer"), NULL, "%s", text);
            free(text);
        }
    }
    cr_assert_gt(num(r.summary, "consensus_accuracy"), 0.6);
    cr_assert_neq(strstr(r.err, "mode saps goes on with the other 3 workers"),
                  NULL, "%s", r.err);
    cr_assert_neq(strstr(r.err, "worker 2 is gone"), NULL, "%s", r.err);
    run_free(&r);
}

Test(flrun_saps, a_worker_lost_before_the_join_leaves_the_others_going_on,
     .timeout = 300)
{
    char dir[64], job[128], yaml[160], out[160], *text;
    pid_t victim = 0;
    json_t *summary = NULL;
    int left_out = 0;

    run_dir(dir, sizeof(dir));
    write_job_text(dir,
                   "name: saps-early\nmodel: mlp\nworkers: 4\nmode: saps\n"
                   "iterations: 300\nlocal_steps: 2\nlr: 0.02\n"
                   "lr_schedule: cosine\neval_every: 0\n",
                   job, sizeof(job));
    /* The join deadline comes from FLPS_DEADLINE_MS (10 s here, 120 s by
     * default). */
    start_flrun(dir, job, "FLPS_DEADLINE_MS=10000 ");
    /* Rank 2 is stopped as soon as it exists, long before it can greet
     * the others (it loads Fashion-MNIST first), and killed once they have
     * gone on without it. */
    snprintf(yaml, sizeof(yaml), "%s/logs/flrun-job.yaml", dir);
    for (int i = 0; i < 6000 && victim == 0; i++) {
        victim = flworker_pid(yaml, 2);
        if (victim == 0)
            usleep(5000);
    }
    cr_assert_neq(victim, 0, "rank 2 never started");
    cr_assert_eq(kill(victim, SIGSTOP), 0);
    for (int i = 0; i < 600 && !left_out; i++) {
        char path[160];

        snprintf(path, sizeof(path), "%s/logs/flworker-0.log", dir);
        left_out = log_has(path, "1 of the job's 4 workers never joined");
        if (!left_out)
            usleep(100000);
    }
    cr_assert(left_out, "rank 0 did not go on without rank 2");
    cr_assert_eq(kill(victim, SIGKILL), 0);
    snprintf(out, sizeof(out), "%s/out", dir);
    for (int i = 0; i < 2400 && summary == NULL; i++) {
        char *last;

        text = slurp(out);
        last = strstr(text, "\"workers_lost\"") ? strrchr(text, '{') : NULL;
        summary = last ? json_loads(last, 0, NULL) : NULL;
        free(text);
        if (summary == NULL)
            usleep(100000);
    }
    cr_assert_not_null(summary, "flrun wrote no summary");
    cr_assert_eq(json_array_size(json_object_get(summary, "workers_lost")), 1);
    cr_assert_eq(json_integer_value(json_array_get(
                     json_object_get(summary, "workers_lost"), 0)),
                 2);
    cr_assert_eq(num(summary, "consensus_workers"), 3,
                 "the consensus of the three that went on");
    cr_assert(json_is_true(json_object_get(summary, "matchings_agree")));
    cr_assert_gt(num(summary, "consensus_accuracy"), 0.5);
    json_decref(summary);
}
