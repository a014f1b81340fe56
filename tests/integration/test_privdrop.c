/* The daemons started as root with --user nobody (flps, flsched, flagent):
 * once up, every thread of each is nobody with nogroup and no
 * supplementary group (/proc/PID/task/T/status), it still serves, and it
 * logged the drop in one line; a user that does not exist, or a work dir
 * that is root's, stops it at start with the reason. Needs root. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../scheduler/redis_fixture.h"
#include "spawn.h"

static char dir[64];
static pid_t daemon_pid;
static pid_t iso_agent, iso_sched; /* stopped at teardown */
static test_redis iso_srv;
static struct passwd nobody;

static void setup(void)
{
    struct passwd *pw;

    if (geteuid() != 0)
        return;
    pw = getpwnam("nobody");
    cr_assert_not_null(pw, "no user nobody on this machine");
    nobody = *pw;
    snprintf(dir, sizeof(dir), "/tmp/flps-privdrop-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    /* nobody must reach the directories made for it inside. */
    cr_assert_eq(chmod(dir, 0755), 0);
}

static void teardown(void)
{
    pid_t *pids[] = {&daemon_pid, &iso_agent, &iso_sched};
    char cmd[128];

    for (size_t i = 0; i < sizeof(pids) / sizeof(pids[0]); i++) {
        if (*pids[i] > 0) {
            kill(*pids[i], SIGTERM);
            waitpid(*pids[i], NULL, 0);
            *pids[i] = 0;
        }
    }
    if (iso_srv.pid > 0)
        test_redis_stop(&iso_srv);
    if (dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0) {
            /* Left in /tmp: no failure. */
        }
    }
}

TestSuite(privdrop, .init = setup, .fini = teardown, .timeout = 60);

#define NEED_ROOT()                                                            \
    do {                                                                       \
        if (geteuid() != 0)                                                    \
            cr_skip_test("starts daemons as root: run as root");               \
    } while (0)

/* Every task of pid: Uid and Gid lines all nobody's, Groups empty. The
 * number of tasks checked. */
static int assert_all_nobody(pid_t pid)
{
    char path[320], line[256];
    struct dirent *de;
    DIR *d;
    int tasks = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    while ((de = readdir(d)) != NULL) {
        char want_uid[64], want_gid[64];
        int uid_ok = 0, gid_ok = 0, groups_ok = 0;
        FILE *f;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)pid,
                 de->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue; /* the thread ended meanwhile */
        snprintf(want_uid, sizeof(want_uid), "Uid:\t%u\t%u\t%u\t%u\n",
                 nobody.pw_uid, nobody.pw_uid, nobody.pw_uid, nobody.pw_uid);
        snprintf(want_gid, sizeof(want_gid), "Gid:\t%u\t%u\t%u\t%u\n",
                 nobody.pw_gid, nobody.pw_gid, nobody.pw_gid, nobody.pw_gid);
        while (fgets(line, sizeof(line), f) != NULL) {
            if (strncmp(line, "Uid:", 4) == 0)
                uid_ok = strcmp(line, want_uid) == 0;
            else if (strncmp(line, "Gid:", 4) == 0)
                gid_ok = strcmp(line, want_gid) == 0;
            else if (strncmp(line, "Groups:", 7) == 0)
                groups_ok = line[7 + strspn(line + 7, " \t")] == '\n';
            if (!uid_ok && strncmp(line, "Uid:", 4) == 0)
                cr_assert_fail("task %s: %s", de->d_name, line);
            if (!gid_ok && strncmp(line, "Gid:", 4) == 0)
                cr_assert_fail("task %s: %s", de->d_name, line);
        }
        fclose(f);
        cr_assert(uid_ok && gid_ok, "task %s", de->d_name);
        cr_assert(groups_ok, "task %s kept supplementary groups", de->d_name);
        tasks++;
    }
    closedir(d);
    cr_assert_gt(tasks, 0);
    return tasks;
}

static int log_has(const char *log, const char *needle)
{
    char buf[32768];
    FILE *f = fopen(log, "r");
    size_t n;

    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static int count_in_log(const char *log, const char *needle)
{
    char buf[32768], *p;
    FILE *f = fopen(log, "r");
    size_t n;
    int k = 0;

    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (p = buf; (p = strstr(p, needle)) != NULL; p++)
        k++;
    return k;
}

#define DROPPED "dropped privileges: now user nobody"

Test(privdrop, a_shard_drops_to_nobody_after_binding_and_still_serves)
{
    const char *args[] = {
        "--job",  "j1",     "--shards",         "1",  "--shard", "0",
        "--user", "nobody", "--checkpoint-dir", NULL, NULL};
    char log[128], ckpt[128], ep[256];
    struct stat st;

    NEED_ROOT();
    snprintf(log, sizeof(log), "%s/flps.log", dir);
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", dir);
    args[9] = ckpt;
    cr_assert_eq(test_spawn_pid("flps", args, log, "listening on ", ep,
                                sizeof(ep), &daemon_pid),
                 0, "flps did not start");
    cr_assert(assert_all_nobody(daemon_pid) >= 2,
              "ZeroMQ's threads are nobody too");
    cr_assert_eq(count_in_log(log, DROPPED), 1, "one line about the drop");
    cr_assert_eq(stat(ckpt, &st), 0);
    cr_assert_eq(st.st_uid, nobody.pw_uid, "the checkpoint dir is nobody's");
    cr_assert(strncmp(ep, "tcp://127.0.0.1:", 16) == 0, "%s", ep);
}

Test(privdrop, flsched_drops_to_nobody_and_its_api_answers)
{
    test_redis srv;
    const char *args[] = {"--redis", NULL,     "--listen", "127.0.0.1:0",
                          "--user",  "nobody", NULL};
    char log[128], bound[128], cmd[256];

    NEED_ROOT();
    cr_assert_eq(test_redis_start(&srv), 0);
    args[1] = srv.url;
    snprintf(log, sizeof(log), "%s/flsched.log", dir);
    cr_assert_eq(test_spawn_pid("flsched", args, log, "listening on ", bound,
                                sizeof(bound), &daemon_pid),
                 0, "flsched did not start");
    assert_all_nobody(daemon_pid);
    cr_assert_eq(count_in_log(log, DROPPED), 1);
    snprintf(cmd, sizeof(cmd),
             "%s/flsubmit --scheduler http://%s list >/dev/null 2>&1",
             FLPS_BIN_DIR, bound);
    cr_assert_eq(system(cmd), 0, "the API answers after the drop");
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, NULL, 0);
    daemon_pid = 0;
    test_redis_stop(&srv);
}

Test(privdrop, flagent_drops_to_nobody_with_a_work_dir_made_for_it)
{
    test_redis srv;
    const char *args[] = {"--redis", NULL,     "--name",     "pd1",
                          "--cpus",  "1",      "--memory",   "1Gi",
                          "--gpus",  "0",      "--work-dir", NULL,
                          "--user",  "nobody", NULL};
    char log[128], work[128];
    struct stat st;
    int up = 0;

    NEED_ROOT();
    cr_assert_eq(test_redis_start(&srv), 0);
    args[1] = srv.url;
    snprintf(work, sizeof(work), "%s/agent-work", dir);
    args[11] = work;
    snprintf(log, sizeof(log), "%s/flagent.log", dir);
    cr_assert_eq(
        test_spawn_pid("flagent", args, log, NULL, NULL, 0, &daemon_pid), 0);
    for (int i = 0; i < 200 && !up; i++) {
        struct timespec ts = {0, 50 * 1000000L};
        up = log_has(log, DROPPED);
        if (!up)
            nanosleep(&ts, NULL);
    }
    cr_assert(up, "flagent did not log the drop");
    assert_all_nobody(daemon_pid);
    cr_assert_eq(stat(work, &st), 0);
    cr_assert_eq(st.st_uid, nobody.pw_uid);
    cr_assert_eq(kill(daemon_pid, 0), 0, "flagent runs on");
    kill(daemon_pid, SIGTERM);
    waitpid(daemon_pid, NULL, 0);
    daemon_pid = 0;
    test_redis_stop(&srv);
}

/* Run FLPS_BIN_DIR/bin args; its exit status, its stderr in err. */
static int run_err(const char *bin, const char *const *args, char *err,
                   size_t errlen)
{
    char log[128];
    pid_t pid;
    int st = 0;
    FILE *f;
    size_t n;

    snprintf(log, sizeof(log), "%s/refused-%s.log", dir, bin);
    unlink(log);
    cr_assert_eq(test_spawn_pid(bin, args, log, NULL, NULL, 0, &pid), 0);
    for (int i = 0; i < 1000 && waitpid(pid, &st, WNOHANG) != pid; i++)
        usleep(10000);
    if (kill(pid, 0) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_assert_fail("%s did not stop", bin);
    }
    f = fopen(log, "r");
    cr_assert_not_null(f);
    n = fread(err, 1, errlen - 1, f);
    err[n] = '\0';
    fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(privdrop, an_unknown_user_or_a_work_dir_of_root_stops_it_at_start)
{
    const char *shard[] = {"--job", "j1",     "--shards",       "1", "--shard",
                           "0",     "--user", "no-such-user-x", NULL};
    const char *agent[] = {"--redis",    "redis://127.0.0.1:1",
                           "--name",     "pd2",
                           "--cpus",     "1",
                           "--memory",   "1Gi",
                           "--gpus",     "0",
                           "--work-dir", NULL,
                           "--user",     "nobody",
                           NULL};
    char err[4096];

    NEED_ROOT();
    cr_assert_eq(run_err("flps", shard, err, sizeof(err)), 2, "%s", err);
    cr_assert(strstr(err, "--user no-such-user-x: no such user") != NULL, "%s",
              err);
    agent[11] = dir; /* exists, and is root's */
    cr_assert_eq(run_err("flagent", agent, err, sizeof(err)), 2, "%s", err);
    cr_assert(strstr(err, "chown nobody") != NULL, "%s", err);
}

/* ---- Isolation between jobs on a node (per-job uids) ---- */

#define JOB_UID_FIRST 62200u
#define JOB_UID_LAST 62209u
#define REDIS_PW "isolation-test-password-8f2c41d7"

/* A redis-cli command on the test's Redis, with its password. */
static const char *redis_cli(const char *args)
{
    return test_redis_cli(&iso_srv, REDIS_PW, args);
}

/* The pid of a task once it runs (its hash's pid field), 0 if never. */
static pid_t task_pid(const char *job, const char *task)
{
    char args[160];

    snprintf(args, sizeof(args), "HMGET flps:task:%s:0:%s state pid", job,
             task);
    for (int i = 0; i < 600; i++) {
        const char *r = redis_cli(args);
        if (strncmp(r, "RUNNING\n", 8) == 0)
            return (pid_t)atoi(r + 8);
        usleep(50000);
    }
    return 0;
}

/* The real, effective, saved and file-system uid of pid, when all four
 * are one; (uid_t)-1 otherwise. */
static uid_t uid_of(pid_t pid)
{
    char path[64], line[256];
    unsigned a, b, c, d;
    uid_t uid = (uid_t)-1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Uid:\t%u\t%u\t%u\t%u", &a, &b, &c, &d) == 4 &&
            a == b && b == c && c == d)
            uid = a;
    fclose(f);
    return uid;
}

/* Every value of a secret field ("secret=", "curve_*_secret=") in a
 * credentials file, one per line into out. */
static void secrets_of(const char *creds, char *out, size_t len)
{
    char line[512];
    FILE *f = fopen(creds, "r");
    size_t n = 0;

    cr_assert_not_null(f, "%s", creds);
    out[0] = '\0';
    while (fgets(line, sizeof(line), f) != NULL) {
        char *eq = strchr(line, '=');
        if (eq == NULL || strstr(line, "secret") == NULL ||
            strstr(line, "secret") > eq)
            continue;
        n += (size_t)snprintf(out + n, len - n, "%s", eq + 1);
    }
    fclose(f);
    cr_assert_gt(n, 0, "no secret in %s", creds);
}

/* Whether the bytes of path, opened as the caller, hold one of the
 * secrets (lines of secrets). 0 when it cannot be opened. */
static int holds_secret(const char *path, const char *secrets)
{
    static char buf[1 << 20];
    char one[256];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW);

    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[n] = '\0';
    for (const char *s = secrets; *s != '\0';) {
        size_t k = strcspn(s, "\n");
        snprintf(one, sizeof(one), "%.*s", (int)k, s);
        if (k > 0 && strstr(buf, one) != NULL)
            return 1;
        s += k + (s[k] == '\n');
    }
    return 0;
}

/* In a child that becomes uid: what of the other job (files, processes)
 * and which secret it can reach, one line each, into report. The child
 * walks every file under the roots and every process's environ and
 * command line. */
static void reach_as(uid_t uid, const char *const *roots,
                     const char *const *denied, pid_t other_task,
                     const char *secrets, char *report, size_t len)
{
    int pfd[2];
    pid_t pid;
    FILE *in;

    cr_assert_eq(pipe(pfd), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        FILE *out = fdopen(pfd[1], "w");
        char cmd[1024], path[4096];
        FILE *list;

        close(pfd[0]);
        /* The list of files, made as root: the child may not see them. */
        snprintf(cmd, sizeof(cmd),
                 "find %s %s %s -xdev -type f 2>/dev/null; "
                 "ls -d /proc/[0-9]*/environ /proc/[0-9]*/cmdline",
                 roots[0], roots[1], roots[2]);
        list = popen(cmd, "r");
        if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
            setresuid(uid, uid, uid) != 0)
            _exit(1);
        for (size_t i = 0; denied[i] != NULL; i++) {
            int fd = open(denied[i], O_RDONLY | O_NONBLOCK);
            if (fd >= 0) {
                fprintf(out, "opened %s\n", denied[i]);
                close(fd);
            }
        }
        if (kill(other_task, 0) == 0)
            fprintf(out, "may signal the other job's pid %d\n",
                    (int)other_task);
        while (list != NULL && fgets(path, sizeof(path), list) != NULL) {
            path[strcspn(path, "\n")] = '\0';
            if (holds_secret(path, secrets))
                fprintf(out, "secret in %s\n", path);
        }
        fclose(out);
        _exit(0);
    }
    close(pfd[1]);
    in = fdopen(pfd[0], "r");
    cr_assert_not_null(in);
    report[fread(report, 1, len - 1, in)] = '\0';
    fclose(in);
    waitpid(pid, NULL, 0);
}

static char *submit_job(const char *api, const char *name)
{
    static char id[32];
    char path[128], cmd[512];
    FILE *f, *p;

    snprintf(path, sizeof(path), "%s/%s.yaml", dir, name);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "name: %s\nmodel: mlp\nworkers: 1\nservers: 1\n"
            "iterations: 1000000\ncommand: [/bin/sh, -c, 'exec sleep 600']\n",
            name);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "%s/flsubmit --scheduler http://%s submit %s",
             FLPS_BIN_DIR, api, path);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    cr_assert_not_null(fgets(id, sizeof(id), p));
    pclose(p);
    id[strcspn(id, "\n")] = '\0';
    return id;
}

Test(privdrop, each_job_runs_as_a_uid_of_its_own_and_reaches_no_other_secret,
     .timeout = 120)
{
    char pwfile[128], log[128], slog[128], work[128], ckpt[128], uids[160];
    char bound[128], a[32], b[32], path[256], secrets[2048], report[8192];
    char denied_paths[8][256], environ_path[64], out[256];
    const char *denied[9], *roots[3];
    const char *sched_args[] = {"--redis", NULL,       "--redis-password-file",
                                pwfile,    "--listen", "127.0.0.1:0",
                                NULL};
    const char *agent_args[] = {"--redis",
                                NULL,
                                "--name",
                                "iso1",
                                "--cpus",
                                "4",
                                "--memory",
                                "4Gi",
                                "--gpus",
                                "0",
                                "--work-dir",
                                work,
                                "--checkpoint-root",
                                ckpt,
                                "--job-uids",
                                "62200-62209",
                                "--job-uids-dir",
                                uids,
                                "--heartbeat",
                                "1",
                                NULL};
    pid_t sched_pid, agent_pid, a_srv, a_wrk, b_srv, b_wrk;
    uid_t ua, ub;
    FILE *f;

    NEED_ROOT();
    cr_assert_eq(test_redis_start(&iso_srv), 0);
    {
        char cmd[160];
        snprintf(cmd, sizeof(cmd),
                 "redis-cli -p %d CONFIG SET requirepass %s >/dev/null",
                 iso_srv.port, REDIS_PW);
        cr_assert_eq(system(cmd), 0);
    }

    snprintf(pwfile, sizeof(pwfile), "%s/redis-password", dir);
    f = fopen(pwfile, "w");
    cr_assert_not_null(f);
    fputs(REDIS_PW "\n", f);
    fclose(f);
    cr_assert_eq(chmod(pwfile, 0600), 0);
    snprintf(work, sizeof(work), "%s/work", dir);
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", dir);
    snprintf(uids, sizeof(uids), "%s/job-uids", dir);
    sched_args[1] = iso_srv.url;
    agent_args[1] = iso_srv.url;
    snprintf(slog, sizeof(slog), "%s/flsched.log", dir);
    cr_assert_eq(test_spawn_pid("flsched", sched_args, slog, "listening on ",
                                bound, sizeof(bound), &sched_pid),
                 0);
    iso_sched = sched_pid;
    /* The agent gets the password as the chart once gave it. */
    setenv("FLPS_REDIS_PASSWORD", REDIS_PW, 1);
    snprintf(log, sizeof(log), "%s/flagent.log", dir);
    cr_assert_eq(
        test_spawn_pid("flagent", agent_args, log, NULL, NULL, 0, &agent_pid),
        0);
    iso_agent = agent_pid;
    unsetenv("FLPS_REDIS_PASSWORD");
    /* flsched refuses a job while no node is registered. */
    for (int i = 0;
         i < 200 && strcmp(redis_cli("EXISTS flps:node:iso1:alive"), "1") != 0;
         i++)
        usleep(50000);
    snprintf(a, sizeof(a), "%s", submit_job(bound, "iso-a"));
    snprintf(b, sizeof(b), "%s", submit_job(bound, "iso-b"));
    a_srv = task_pid(a, "server-0");
    a_wrk = task_pid(a, "worker-0");
    b_srv = task_pid(b, "server-0");
    b_wrk = task_pid(b, "worker-0");
    cr_assert(a_srv > 0 && a_wrk > 0 && b_srv > 0 && b_wrk > 0,
              "the jobs did not run; see %s", log);

    /* Each job's processes are one uid of the range, each job its own. */
    ua = uid_of(a_srv);
    ub = uid_of(b_srv);
    cr_assert(ua >= JOB_UID_FIRST && ua <= JOB_UID_LAST, "A runs as %u",
              (unsigned)ua);
    cr_assert(ub >= JOB_UID_FIRST && ub <= JOB_UID_LAST, "B runs as %u",
              (unsigned)ub);
    cr_assert_neq(ua, ub, "two jobs share uid %u", (unsigned)ua);
    cr_assert_eq(uid_of(a_wrk), ua, "A's worker is not A's uid");
    cr_assert_eq(uid_of(b_wrk), ub, "B's worker is not B's uid");
    snprintf(path, sizeof(path), "%s/%s", work, b);
    {
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_uid, ub);
        cr_assert_eq(st.st_mode & 0777, 0700);
        snprintf(path, sizeof(path), "%s/%s/worker-0.credentials", work, b);
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_uid, ub);
        cr_assert_eq(st.st_mode & 0777, 0600);
    }

    /* What A's uid reaches of B and of the agent's secrets: nothing. */
    snprintf(path, sizeof(path), "%s/%s/worker-0.credentials", work, b);
    secrets_of(path, secrets, sizeof(secrets));
    strncat(secrets, REDIS_PW "\n", sizeof(secrets) - strlen(secrets) - 1);
    snprintf(denied_paths[0], 256, "%s/%s/worker-0.credentials", work, b);
    snprintf(denied_paths[1], 256, "%s/%s/server-0.credentials", work, b);
    snprintf(denied_paths[2], 256, "%s/%s/job.yaml", work, b);
    snprintf(denied_paths[3], 256, "%s/%s/attempt-0/worker-0.log", work, b);
    snprintf(denied_paths[4], 256, "%s/%s/ckpt", ckpt, b);
    snprintf(denied_paths[5], 256, "%s", pwfile);
    snprintf(denied_paths[6], 256, "/proc/%d/environ", (int)agent_pid);
    snprintf(denied_paths[7], 256, "/proc/%d/environ", (int)b_wrk);
    for (int i = 0; i < 8; i++)
        denied[i] = denied_paths[i];
    denied[8] = NULL;
    roots[0] = dir;
    roots[1] = iso_srv.dir;
    roots[2] = "/tmp/.flps-none";
    reach_as(ua, roots, denied, b_wrk, secrets, report, sizeof(report));
    cr_assert_str_eq(report, "", "job A's uid reaches:\n%s", report);

    /* The agent's own environment no longer holds the password it was
     * given (unsetenv alone left it in /proc/PID/environ). */
    snprintf(environ_path, sizeof(environ_path), "/proc/%d/environ",
             (int)agent_pid);
    cr_assert_not(holds_secret(environ_path, REDIS_PW "\n"),
                  "the password is in flagent's environ");
    /* And Redis asks A's uid for the password it does not have. */
    snprintf(path, sizeof(path),
             "setpriv --reuid=%u --regid=%u --clear-groups redis-cli -p %d "
             "ping 2>&1",
             (unsigned)ua, (unsigned)ua, iso_srv.port);
    f = popen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(out, sizeof(out), f));
    pclose(f);
    cr_assert_not_null(strstr(out, "NOAUTH"), "%s", out);

    kill(agent_pid, SIGTERM);
    waitpid(agent_pid, NULL, 0);
    iso_agent = 0;
    /* Freed: no process of either uid is left. */
    cr_assert_eq(kill(a_wrk, 0), -1);
    cr_assert_eq(kill(b_srv, 0), -1);
}
