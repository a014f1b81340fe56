/* The daemons started as root with --user nobody (flps, flsched, flagent):
 * once up, every thread of each is nobody with nogroup and no
 * supplementary group (/proc/PID/task/T/status), it still serves, and it
 * logged the drop in one line; a user that does not exist, or a work dir
 * that is root's, stops it at start with the reason. Needs root. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../scheduler/redis_fixture.h"
#include "spawn.h"

static char dir[64];
static pid_t daemon_pid;
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
    char cmd[128];

    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        waitpid(daemon_pid, NULL, 0);
        daemon_pid = 0;
    }
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
