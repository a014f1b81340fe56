/* Per-job uids (scheduler/agent_uids.c): one uid per job and machine, its
 * directories that uid's alone, taken back by a restarted agent, freed
 * with every process of it killed and its files given back, links never
 * followed. Needs root: skipped otherwise. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scheduler/agent_uids.h"

#define FIRST 62100u

#define NEED_ROOT()                                                            \
    do {                                                                       \
        if (geteuid() != 0)                                                    \
            cr_skip_test("sets uids: run as root");                            \
    } while (0)

static char dir[64], recs[128], work_a[128], work_b[128];

static void setup(void)
{
    if (geteuid() != 0)
        return;
    snprintf(dir, sizeof(dir), "/tmp/flps-uids-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(chmod(dir, 0711), 0);
    snprintf(recs, sizeof(recs), "%s/records", dir);
    snprintf(work_a, sizeof(work_a), "%s/a", dir);
    snprintf(work_b, sizeof(work_b), "%s/b", dir);
    cr_assert_eq(mkdir(work_a, 0711), 0);
    cr_assert_eq(mkdir(work_b, 0711), 0);
}

static void teardown(void)
{
    char cmd[128];

    if (dir[0] == '\0')
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        /* Left in /tmp: no failure. */
    }
}

TestSuite(agent_uids, .init = setup, .fini = teardown, .timeout = 60);

static agent_uids *open_as(const char *work, uint32_t last)
{
    agent_uids_cfg c = {recs, FIRST, last, "127.0.0.1:6379", work, work};
    agent_uids *u = NULL;
    char err[512] = "";

    cr_assert_eq(agent_uids_open(&c, &u, err, sizeof(err)), FLPS_OK, "%s", err);
    return u;
}

static uid_t hold(agent_uids *u, const char *job)
{
    uid_t uid = 0;
    char err[512] = "";

    cr_assert_eq(agent_uids_hold(u, job, 1, &uid, err, sizeof(err)), FLPS_OK,
                 "%s", err);
    return uid;
}

static void assert_owner(const char *path, uid_t uid, mode_t mode)
{
    struct stat st;

    cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(st.st_uid, uid, "%s is uid %u's, not %u's", path,
                 (unsigned)st.st_uid, (unsigned)uid);
    cr_assert_eq(st.st_gid, (gid_t)uid, "%s: gid %u", path,
                 (unsigned)st.st_gid);
    if (mode != 0)
        cr_assert_eq(st.st_mode & 07777, mode, "%s: mode %o", path,
                     st.st_mode & 07777);
}

/* A process running as uid until killed; its pid. */
static pid_t stray(uid_t uid)
{
    int fds[2];
    char c = 0;
    pid_t pid;

    cr_assert_eq(pipe(fds), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
            _exit(1);
        if (write(fds[1], "u", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    /* Only once it runs as uid: a child still root when the release
     * went round would outlive it and hang the test. */
    close(fds[1]);
    cr_assert_eq(read(fds[0], &c, 1), 1, "the stray could not become uid %u",
                 (unsigned)uid);
    close(fds[0]);
    return pid;
}

/* Another agent, in a child process: of work, holding jobs (up to two,
 * NULL-ended), in cluster "127.0.0.1:6379". With fds (a pipe pair: {the
 * child's reply, the parent's go}), it writes the first job's uid to
 * fds[0], waits for a byte on fds[1], and releases what it holds;
 * without, it dies holding them, as a killed agent would. */
static pid_t other_agent(const char *work, const char *job1, const char *job2,
                         const int *fds)
{
    pid_t pid = fork();

    cr_assert_geq(pid, 0);
    if (pid == 0) {
        agent_uids_cfg c = {recs, FIRST, FIRST + 4, "127.0.0.1:6379",
                            work, work};
        const char *jobs[] = {job1, job2};
        agent_uids *v = NULL;
        uid_t uid = 0, first = 0;
        char err[256], go;

        if (agent_uids_open(&c, &v, err, sizeof(err)) != FLPS_OK)
            _exit(1);
        for (int i = 0; i < 2 && jobs[i] != NULL; i++) {
            if (agent_uids_hold(v, jobs[i], 0, &uid, err, sizeof(err)) !=
                FLPS_OK)
                _exit(1);
            if (i == 0)
                first = uid;
        }
        if (fds == NULL)
            _exit(0); /* dies holding them */
        if (write(fds[0], &first, sizeof(first)) != sizeof(first) ||
            read(fds[1], &go, 1) != 1)
            _exit(1);
        agent_uids_close(v);
        _exit(0);
    }
    return pid;
}

/* Wait for the other agent; it must have done as asked. */
static void other_agent_done(pid_t pid)
{
    int st = -1;

    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert_eq(st, 0, "the other agent failed");
}

Test(agent_uids, gives_each_job_its_own_uid_and_directory)
{
    char path[256];
    agent_uids *u;
    uid_t a, b;

    NEED_ROOT();
    u = open_as(work_a, FIRST + 4);
    a = hold(u, "j1");
    b = hold(u, "j2");
    cr_assert_eq(a, FIRST + 1, "jN's search starts at FIRST + N %% 5");
    cr_assert_eq(b, FIRST + 2, "a second job, a second uid");
    cr_assert_eq(hold(u, "j1"), a, "a job keeps its uid");
    cr_assert_eq(agent_uids_of(u, "j2"), b);
    cr_assert_eq(agent_uids_of(u, "j3"), (uid_t)-1);
    snprintf(path, sizeof(path), "%s/j1", work_a);
    assert_owner(path, a, 0700);
    snprintf(path, sizeof(path), "%s/j2", work_a);
    assert_owner(path, b, 0700);
    snprintf(path, sizeof(path), "%s/%u", recs, (unsigned)a);
    assert_owner(path, 0, 0600);
    assert_owner(recs, 0, 0700);
    agent_uids_close(u);
}

Test(agent_uids, a_freed_uid_has_no_process_left_and_no_file)
{
    char path[256], file[300];
    agent_uids *u;
    int st = 0;
    uid_t a;
    pid_t p;
    FILE *f;

    NEED_ROOT();
    u = open_as(work_a, FIRST + 4);
    a = hold(u, "j1");
    snprintf(path, sizeof(path), "%s/j1", work_a);
    snprintf(file, sizeof(file), "%s/model.bin", path);
    cr_assert_eq(agent_uids_enter(a), 0);
    f = fopen(file, "w"); /* made as the job: the job's */
    agent_uids_leave();
    cr_assert_not_null(f);
    fclose(f);
    assert_owner(file, a, 0);
    p = stray(a); /* a process the job left behind */
    agent_uids_release(u, "j1");
    cr_assert_eq(waitpid(p, &st, 0), p);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
              "the job's stray process still ran");
    assert_owner(path, 0, 0700);
    assert_owner(file, 0, 0);
    snprintf(path, sizeof(path), "%s/%u", recs, (unsigned)a);
    cr_assert_eq(access(path, F_OK), -1, "the record stayed");
    /* The next job gets the uid, and finds nothing of the last one. */
    cr_assert_eq(hold(u, "j6"), a);
    assert_owner(file, 0, 0);
    agent_uids_close(u);
}

Test(agent_uids, a_restarted_agent_takes_its_uids_back)
{
    agent_uids *u;

    NEED_ROOT();
    other_agent_done(other_agent(work_a, "j1", "j2", NULL));
    u = open_as(work_a, FIRST + 4);
    cr_assert_eq(agent_uids_of(u, "j1"), FIRST + 1,
                 "j1's uid was not taken back");
    cr_assert_eq(agent_uids_of(u, "j2"), FIRST + 2);
    cr_assert_eq(hold(u, "j1"), FIRST + 1);
    cr_assert_eq(hold(u, "j6"), FIRST + 3, "j6's first choice is j1's");
    agent_uids_close(u);
}

Test(agent_uids, frees_the_uids_of_an_agent_that_died)
{
    char path[256];
    agent_uids *u;

    NEED_ROOT();
    other_agent_done(other_agent(work_b, "j1", NULL, NULL));
    snprintf(path, sizeof(path), "%s/j1", work_b);
    assert_owner(path, FIRST + 1, 0700);
    /* Another agent of the machine: the dead one's uid is free again,
     * and its job's directory the dead agent's (root's). */
    u = open_as(work_a, FIRST + 4);
    assert_owner(path, 0, 0700);
    cr_assert_eq(hold(u, "j6"), FIRST + 1);
    agent_uids_close(u);
}

Test(agent_uids, two_agents_of_a_machine_give_a_job_one_uid)
{
    char path[256];
    int reply[2], go[2], fds[2];
    agent_uids *u;
    uid_t theirs = 0;
    pid_t p;

    NEED_ROOT();
    cr_assert_eq(pipe(reply), 0);
    cr_assert_eq(pipe(go), 0);
    fds[0] = reply[1];
    fds[1] = go[0];
    p = other_agent(work_b, "j1", NULL, fds);
    cr_assert_eq(read(reply[0], &theirs, sizeof(theirs)), sizeof(theirs));
    u = open_as(work_a, FIRST + 4);
    cr_assert_eq(hold(u, "j1"), theirs, "two uids for one job");
    /* Another cluster's j1 is another job. */
    {
        agent_uids_cfg c = {recs,   FIRST, FIRST + 4, "10.0.0.1:6379",
                            work_a, work_a};
        agent_uids *w = NULL;
        uid_t other = 0;
        char err[256];

        agent_uids_close(u);
        cr_assert_eq(agent_uids_open(&c, &w, err, sizeof(err)), FLPS_OK);
        cr_assert_eq(agent_uids_hold(w, "j1", 0, &other, err, sizeof(err)),
                     FLPS_OK, "%s", err);
        cr_assert_neq(other, theirs);
        agent_uids_close(w);
    }
    /* Released here, held there: the directory stays the job's. */
    snprintf(path, sizeof(path), "%s/j1", work_b);
    assert_owner(path, theirs, 0700);
    cr_assert_eq(write(go[1], "x", 1), 1);
    other_agent_done(p);
    assert_owner(path, 0, 0700);
    snprintf(path, sizeof(path), "%s/j1", work_a);
    assert_owner(path, 0, 0700);
}

Test(agent_uids, refuses_when_every_uid_is_held_or_a_users)
{
    agent_uids_cfg c = {recs, 65534, 65534, "127.0.0.1:6379", work_a, work_a};
    agent_uids *u;
    uid_t uid;
    char err[512] = "";

    NEED_ROOT();
    u = open_as(work_a, FIRST + 1);
    hold(u, "j1");
    hold(u, "j2");
    cr_assert_eq(agent_uids_hold(u, "j3", 0, &uid, err, sizeof(err)),
                 FLPS_ESTATE);
    cr_assert_not_null(strstr(err, "every uid of --job-uids 62100-62101 is "
                                   "held"),
                       "%s", err);
    cr_assert_eq(agent_uids_hold(u, "../x", 0, &uid, err, sizeof(err)),
                 FLPS_EINVAL);
    agent_uids_close(u);
    /* nobody (65534) is a user: never handed out. */
    cr_assert_eq(agent_uids_open(&c, &u, err, sizeof(err)), FLPS_OK);
    cr_assert_eq(agent_uids_hold(u, "j1", 0, &uid, err, sizeof(err)),
                 FLPS_ESTATE, "uid %u handed out", (unsigned)uid);
    agent_uids_close(u);
}

Test(agent_uids, never_follows_a_link_the_job_planted)
{
    char jobdir[256], link[300], outside[256], buf[16] = "";
    agent_uids *u;
    struct stat st;
    uid_t a;
    FILE *f;
    int fd;

    NEED_ROOT();
    u = open_as(work_a, FIRST + 4);
    a = hold(u, "j1");
    snprintf(jobdir, sizeof(jobdir), "%s/j1", work_a);
    snprintf(outside, sizeof(outside), "%s/precious", dir);
    f = fopen(outside, "w");
    cr_assert_not_null(f);
    fputs("mine", f);
    fclose(f);
    cr_assert_eq(chmod(outside, 0600), 0);
    cr_assert_eq(chown(outside, 4242, 4242), 0);
    snprintf(link, sizeof(link), "%s/plan.json", jobdir);
    cr_assert_eq(symlink(outside, link), 0);
    /* The agent writing into the job's directory as the job: the link
     * leads where the job cannot write. */
    cr_assert_eq(agent_uids_enter(a), 0);
    fd = open(link, O_WRONLY | O_TRUNC);
    agent_uids_leave();
    cr_assert_eq(fd, -1, "wrote through the job's link");
    /* Freed: the tree is given back without following the link. */
    agent_uids_release(u, "j1");
    cr_assert_eq(stat(outside, &st), 0);
    cr_assert_eq(st.st_uid, 4242, "the link was followed");
    f = fopen(outside, "r");
    cr_assert_not_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    cr_assert_str_eq(buf, "mine");
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert_eq(st.st_uid, 0, "the link itself is the agent's again");
    agent_uids_close(u);
}

Test(agent_uids, says_which_directory_the_job_uids_cannot_pass)
{
    char sub[256], blocker[256] = "";

    NEED_ROOT();
    snprintf(sub, sizeof(sub), "%s/closed/work", dir);
    cr_assert_eq(mkdir(sub, 0700) == 0 || errno == ENOENT, 1);
    snprintf(sub, sizeof(sub), "%s/closed", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(sub, sizeof(sub), "%s/closed/work", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(agent_uids_reachable(sub, blocker, sizeof(blocker)), 0);
    snprintf(sub, sizeof(sub), "%s/closed", dir);
    cr_assert_str_eq(blocker, sub);
    cr_assert_eq(agent_uids_reachable(work_a, blocker, sizeof(blocker)), 1);
}

Test(agent_uids, gives_a_job_the_same_uid_on_every_machine_when_it_can)
{
    agent_uids_cfg c = {recs,   FIRST, FIRST + 4, "10.0.0.1:6379",
                        work_b, work_b};
    agent_uids *u, *v = NULL;
    uid_t uid = 0;
    char err[256];

    NEED_ROOT();
    /* What another machine of the cluster would give j7: FIRST + 7 % 5. */
    u = open_as(work_a, FIRST + 4);
    cr_assert_eq(hold(u, "j7"), FIRST + 2);
    cr_assert_eq(hold(u, "j12"), FIRST + 3, "taken by j7: the next one");
    cr_assert_eq(hold(u, "report"), hold(u, "report"),
                 "an id of another "
                 "form keeps its uid");
    agent_uids_close(u);
    /* Another cluster's j7 on this machine: j7's uid is not free. */
    u = open_as(work_a, FIRST + 4);
    cr_assert_eq(hold(u, "j7"), FIRST + 2);
    cr_assert_eq(agent_uids_open(&c, &v, err, sizeof(err)), FLPS_OK);
    cr_assert_eq(agent_uids_hold(v, "j7", 0, &uid, err, sizeof(err)), FLPS_OK);
    cr_assert_eq(uid, FIRST + 3);
    agent_uids_close(v);
    agent_uids_close(u);
}
