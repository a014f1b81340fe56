/* Per-job uids: the records under --job-uids-dir, the job's directories,
 * and acting on files as the job. */
#include "scheduler/agent_uids.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/readfile.h"
#include "services/fsutil.h"
#include "services/safeid.h"

#define UIDS_PATH 4096
#define UIDS_HOLDERS 16 /* agents of one machine holding one job */
#define UIDS_DIRS 16    /* directories of one job */
#define UIDS_TREE_DEPTH 64
#define UIDS_FILE_MAX 65536

/* One agent holding a job: its process (pid and start time, so a reused
 * pid is not taken for it) and its work dir, which is how a restarted
 * agent knows its own. */
typedef struct uid_holder {
    long long pid;
    unsigned long long start;
    char work_dir[UIDS_PATH];
} uid_holder;

/* One record: the file {dir}/{uid}. Its text, one item a line:
 *   job CLUSTER JOB
 *   holder PID START WORK_DIR
 *   dir PATH                  (a directory made the uid's, given back
 *                              when the uid is freed) */
typedef struct uid_record {
    uint32_t uid;
    char cluster[256];
    char job[64];
    size_t nholders, ndirs;
    uid_holder holders[UIDS_HOLDERS];
    char dirs[UIDS_DIRS][UIDS_PATH];
} uid_record;

/* A job this agent holds. */
typedef struct uid_held {
    struct uid_held *next;
    char job[64];
    uid_t uid;
} uid_held;

struct agent_uids {
    char dir[UIDS_PATH];
    uint32_t first, last;
    char cluster[256];
    char work_dir[UIDS_PATH];
    char ckpt_root[UIDS_PATH];
    long long pid;
    unsigned long long start;
    int lock_fd;
    uid_held *held;
    uid_record rec; /* scratch for one record (large) */
};

/* ---- Processes ---- */

/* The start time of pid (field 22 of /proc/PID/stat), 0 when it is gone. */
static unsigned long long proc_start(long long pid)
{
    char path[64], buf[1024], *p;
    unsigned long long start = 0;

    snprintf(path, sizeof(path), "/proc/%lld/stat", pid);
    if (!flps_read_file(path, buf, sizeof(buf)))
        return 0;
    p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (p == NULL)
        return 0;
    /* Fields 3.. follow, each after a space: find the 22nd. */
    for (int field = 3; field <= 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p + 1, "%llu", &start) != 1)
        return 0;
    return start;
}

static int holder_alive(const uid_holder *h)
{
    return h->start != 0 && proc_start(h->pid) == h->start;
}

/* Kill every process running as uid, from a child that becomes uid:
 * kill(-1) reaches exactly the processes that uid may signal. Twice, for
 * one forked while the first went round. */
static void kill_uid(uid_t uid)
{
    /* kill(-1) as root would stop the whole machine: never for root, the
     * agent's own uid or "no uid". */
    if (uid == 0 || uid == (uid_t)-1 || uid == geteuid() || uid == getuid())
        return;
    for (int round = 0; round < 2; round++) {
        pid_t pid = fork();
        int st;

        if (pid == 0) {
            uid_t r, e, s;

            if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
                setresuid(uid, uid, uid) != 0 || getresuid(&r, &e, &s) != 0 ||
                r != uid || e != uid || s != uid)
                _exit(1);
            kill(-1, SIGKILL);
            _exit(0);
        }
        if (pid < 0) {
            log_warn("job uids: cannot fork to stop the processes of uid "
                     "%u: %s",
                     (unsigned)uid, strerror(errno));
            return;
        }
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
    }
}

/* ---- Directories ---- */

/* Give the directory open as fd and everything under it to uid:gid,
 * without following a link: a job's tree may hold links to anywhere. */
static int chown_fd_tree(int fd, uid_t uid, gid_t gid, int depth)
{
    struct dirent *de;
    struct stat top;
    DIR *d;
    int rc = 0, dfd;

    if (fchown(fd, uid, gid) != 0 || fstat(fd, &top) != 0)
        return -1;
    if (depth >= UIDS_TREE_DEPTH)
        return -1;
    dfd = dup(fd);
    if (dfd < 0)
        return -1;
    d = fdopendir(dfd);
    if (d == NULL) {
        close(dfd);
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        int sub;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* gone meanwhile */
        if (!S_ISDIR(st.st_mode) || st.st_dev != top.st_dev) {
            if (fchownat(fd, de->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
                rc = -1;
            continue;
        }
        sub = openat(fd, de->d_name,
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0 || chown_fd_tree(sub, uid, gid, depth + 1) != 0)
            rc = -1;
        if (sub >= 0)
            close(sub);
    }
    closedir(d);
    return rc;
}

/* path (a directory in the agent's own work dir or checkpoint root) made,
 * or made over, uid's with mode 0700. */
static flps_err own_dir(const char *path, uid_t uid, char *errbuf,
                        size_t errlen)
{
    struct stat st;
    int fd;

    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        char parent[UIDS_PATH], *slash;

        /* The parent (the work dir or checkpoint root) may not exist yet:
         * it is the agent's, made as the work dir is. */
        snprintf(parent, sizeof(parent), "%s", path);
        slash = strrchr(parent, '/');
        if (slash != NULL && slash != parent)
            *slash = '\0';
        if (errno != ENOENT || flps_mkdirs(parent) != 0 ||
            (mkdir(path, 0700) != 0 && errno != EEXIST))
            return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                                   "cannot create %s: %s", path,
                                   strerror(errno));
    }
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        flps_err rc = flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                                      "cannot open the directory %s: %s", path,
                                      strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if ((st.st_uid != uid || st.st_gid != (gid_t)uid) &&
        chown_fd_tree(fd, uid, (gid_t)uid, 0) != 0) {
        close(fd);
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                               "cannot give %s to uid %u: %s", path,
                               (unsigned)uid, strerror(errno));
    }
    if (fchmod(fd, 0700) != 0) {
        close(fd);
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS, "chmod %s: %s", path,
                               strerror(errno));
    }
    close(fd);
    return FLPS_OK;
}

/* A freed uid's directory back to the agent. */
static void disown_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return; /* removed meanwhile: nothing of the job left there */
    if (chown_fd_tree(fd, geteuid(), getegid(), 0) != 0)
        log_warn("job uids: cannot give all of %s back to the agent: %s", path,
                 strerror(errno));
    fchmod(fd, 0700);
    close(fd);
}

/* ---- Records ---- */

static void record_path(const agent_uids *u, uint32_t uid, char *out,
                        size_t len)
{
    snprintf(out, len, "%s/%" PRIu32, u->dir, uid);
}

/* Parse text (NUL-terminated) into *r; 0 when it is not a record. */
static int record_parse(char *text, uint32_t uid, uid_record *r)
{
    char *save = NULL;

    memset(r, 0, offsetof(uid_record, holders));
    r->uid = uid;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');

        if (sp == NULL)
            return 0;
        *sp++ = '\0';
        if (strcmp(line, "job") == 0) {
            char *sp2 = strchr(sp, ' ');
            if (sp2 == NULL || (size_t)(sp2 - sp) >= sizeof(r->cluster) ||
                strlen(sp2 + 1) >= sizeof(r->job))
                return 0;
            *sp2 = '\0';
            snprintf(r->cluster, sizeof(r->cluster), "%s", sp);
            snprintf(r->job, sizeof(r->job), "%s", sp2 + 1);
        } else if (strcmp(line, "holder") == 0 && r->nholders < UIDS_HOLDERS) {
            uid_holder *h = &r->holders[r->nholders];
            int off = 0;
            if (sscanf(sp, "%lld %llu %n", &h->pid, &h->start, &off) != 2 ||
                off == 0 || strlen(sp + off) >= sizeof(h->work_dir))
                return 0;
            snprintf(h->work_dir, sizeof(h->work_dir), "%s", sp + off);
            r->nholders++;
        } else if (strcmp(line, "dir") == 0 && r->ndirs < UIDS_DIRS) {
            if (strlen(sp) >= sizeof(r->dirs[0]))
                return 0;
            snprintf(r->dirs[r->ndirs++], sizeof(r->dirs[0]), "%s", sp);
        }
    }
    return r->job[0] != '\0';
}

/* Read the record of uid into u->rec: 1 read, 0 none, -1 unreadable (it
 * still counts as held, so the uid is not handed out). */
static int record_read(agent_uids *u, uint32_t uid)
{
    char path[UIDS_PATH + 16], *text;
    ssize_t n;
    int fd, ok;

    record_path(u, uid, path, sizeof(path));
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    text = flps_malloc(UIDS_FILE_MAX);
    if (text == NULL) {
        close(fd);
        return -1;
    }
    n = read(fd, text, UIDS_FILE_MAX - 1);
    close(fd);
    ok = n > 0;
    if (ok) {
        text[n] = '\0';
        ok = record_parse(text, uid, &u->rec);
    }
    flps_free(text);
    return ok ? 1 : -1;
}

/* Write u->rec (renamed into place); 0 on success. */
static int record_write(agent_uids *u)
{
    const uid_record *r = &u->rec;
    char path[UIDS_PATH + 16], tmp[UIDS_PATH + 32];
    FILE *f;
    int fd, ok;

    record_path(u, r->uid, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    f = fdopen(fd, "w");
    if (f == NULL) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    fprintf(f, "job %s %s\n", r->cluster, r->job);
    for (size_t i = 0; i < r->nholders; i++)
        fprintf(f, "holder %lld %llu %s\n", r->holders[i].pid,
                r->holders[i].start, r->holders[i].work_dir);
    for (size_t i = 0; i < r->ndirs; i++)
        fprintf(f, "dir %s\n", r->dirs[i]);
    ok = fflush(f) == 0 && fsync(fd) == 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Free u->rec's uid: its processes killed, its directories given back,
 * the record removed. */
static void record_free(agent_uids *u)
{
    char path[UIDS_PATH + 16];

    kill_uid(u->rec.uid);
    for (size_t i = 0; i < u->rec.ndirs; i++)
        disown_dir(u->rec.dirs[i]);
    record_path(u, u->rec.uid, path, sizeof(path));
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("job uids: cannot remove %s: %s", path, strerror(errno));
    log_info("job uids: uid %u of job %s freed", (unsigned)u->rec.uid,
             u->rec.job);
}

/* Drop u->rec's holders that are gone; 1 when none is left. */
static int record_prune(uid_record *r)
{
    size_t k = 0;

    for (size_t i = 0; i < r->nholders; i++)
        if (holder_alive(&r->holders[i]))
            r->holders[k++] = r->holders[i];
    r->nholders = k;
    return k == 0;
}

static void lock(agent_uids *u)
{
    while (flock(u->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
}

static void unlock(agent_uids *u)
{
    flock(u->lock_fd, LOCK_UN);
}

/* Every record, each read into u->rec in turn and passed to fn (under
 * the lock); fn returns 0 to go on. */
static void record_each(agent_uids *u, int (*fn)(agent_uids *u, void *arg),
                        void *arg)
{
    DIR *d = opendir(u->dir);
    struct dirent *de;

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        uint64_t id;

        if (flps_parse_u64(NULL, de->d_name, u->first, u->last, &id, NULL, 0) !=
            FLPS_OK)
            continue; /* ".lock", a temporary file, another range's */
        if (record_read(u, (uint32_t)id) == 1 && fn(u, arg) != 0)
            break;
    }
    closedir(d);
}

/* ---- Open and close ---- */

static int remember(agent_uids *u, const char *job, uid_t uid)
{
    uid_held *h = flps_calloc(1, sizeof(*h));

    if (h == NULL)
        return -1;
    snprintf(h->job, sizeof(h->job), "%s", job);
    h->uid = uid;
    h->next = u->held;
    u->held = h;
    return 0;
}

/* At open: a record of this cluster held by this work dir's agent before
 * is taken back; one whose agents are all gone is freed. */
static int adopt_or_collect(agent_uids *u, void *arg)
{
    uid_record *r = &u->rec;
    int mine = 0, changed = 0;

    (void)arg;
    for (size_t i = 0; i < r->nholders; i++) {
        uid_holder *h = &r->holders[i];
        if (strcmp(h->work_dir, u->work_dir) == 0 &&
            strcmp(r->cluster, u->cluster) == 0 && !holder_alive(h)) {
            h->pid = u->pid;
            h->start = u->start;
            mine = changed = 1;
        }
    }
    if (mine && remember(u, r->job, (uid_t)r->uid) == 0) {
        log_info("job uids: took uid %u of job %s back", (unsigned)r->uid,
                 r->job);
    }
    if (record_prune(r)) {
        record_free(u);
        return 0;
    }
    if (changed && record_write(u) != 0)
        log_warn("job uids: cannot update the record of uid %u: %s",
                 (unsigned)r->uid, strerror(errno));
    return 0;
}

flps_err agent_uids_open(const agent_uids_cfg *cfg, agent_uids **out,
                         char *errbuf, size_t errlen)
{
    agent_uids *u;
    char lockp[UIDS_PATH + 16];

    if (geteuid() != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "per-job uids need flagent to run as root");
    if (strchr(cfg->work_dir, '\n') != NULL ||
        strchr(cfg->ckpt_root, '\n') != NULL ||
        strchr(cfg->cluster, ' ') != NULL || strlen(cfg->dir) >= UIDS_PATH ||
        strlen(cfg->cluster) >= sizeof(u->cluster))
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "a work dir or checkpoint root with a "
                               "newline in its name cannot be recorded");
    u = flps_calloc(1, sizeof(*u));
    if (u == NULL)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    snprintf(u->dir, sizeof(u->dir), "%s", cfg->dir);
    snprintf(u->cluster, sizeof(u->cluster), "%s", cfg->cluster);
    snprintf(u->work_dir, sizeof(u->work_dir), "%s", cfg->work_dir);
    snprintf(u->ckpt_root, sizeof(u->ckpt_root), "%s", cfg->ckpt_root);
    u->first = cfg->first;
    u->last = cfg->last;
    u->pid = (long long)getpid();
    u->start = proc_start(u->pid);
    snprintf(lockp, sizeof(lockp), "%s/.lock", u->dir);
    if (flps_mkdirs(u->dir) != 0 || chmod(u->dir, 0700) != 0 ||
        (u->lock_fd = open(lockp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                           0600)) < 0) {
        flps_err rc =
            flps_errbuf_set(errbuf, errlen, FLPS_ESYS, "--job-uids-dir %s: %s",
                            u->dir, strerror(errno));
        flps_free(u);
        return rc;
    }
    if (setgroups(0, NULL) != 0) {
        flps_err rc = flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                                      "setgroups: %s", strerror(errno));
        close(u->lock_fd);
        flps_free(u);
        return rc;
    }
    lock(u);
    record_each(u, adopt_or_collect, NULL);
    unlock(u);
    *out = u;
    return FLPS_OK;
}

void agent_uids_close(agent_uids *u)
{
    if (u == NULL)
        return;
    while (u->held != NULL)
        agent_uids_release(u, u->held->job);
    close(u->lock_fd);
    flps_free(u);
}

/* ---- Holding and releasing ---- */

uid_t agent_uids_of(const agent_uids *u, const char *job)
{
    for (const uid_held *h = u->held; h != NULL; h = h->next)
        if (strcmp(h->job, job) == 0)
            return h->uid;
    return (uid_t)-1;
}

/* What record_each looks for in hold: the record of a job. */
typedef struct find_job {
    const char *job;
    uint32_t found; /* its uid; 0 when none */
} find_job;

static int match_job(agent_uids *u, void *arg)
{
    find_job *f = arg;

    if (strcmp(u->rec.job, f->job) != 0 ||
        strcmp(u->rec.cluster, u->cluster) != 0)
        return 0;
    f->found = u->rec.uid;
    return 1;
}

/* Whether uid id can be handed out: no record (one whose agents are all
 * gone is freed here), and no user or group of that number. */
static int uid_is_free(agent_uids *u, uint32_t id)
{
    char buf[4096];
    struct passwd pw, *pwp = NULL;
    struct group gr, *grp = NULL;
    int r = record_read(u, id);

    if (r < 0)
        return 0;
    if (r == 1) {
        if (!record_prune(&u->rec))
            return 0;
        record_free(u);
    }
    if (getpwuid_r((uid_t)id, &pw, buf, sizeof(buf), &pwp) == 0 && pwp != NULL)
        return 0;
    if (getgrgid_r((gid_t)id, &gr, buf, sizeof(buf), &grp) == 0 && grp != NULL)
        return 0;
    return 1;
}

/* Where the search for job's uid starts: for flsched's job ids ("j" and
 * the job's number) first + number, so every machine of the cluster
 * gives the job the same uid (their shards may share the job's checkpoint
 * directory on shared storage) unless that uid is taken there; for other
 * ids a hash of the id. */
static uint32_t preferred_uid(const agent_uids *u, const char *job)
{
    uint64_t size = (uint64_t)u->last - u->first + 1, n = 0;

    if (job[0] != 'j' ||
        flps_parse_u64(NULL, job + 1, 0, UINT64_MAX, &n, NULL, 0) != FLPS_OK) {
        n = 1469598103934665603ull; /* FNV-1a */
        for (const char *c = job; *c != '\0'; c++)
            n = (n ^ (unsigned char)*c) * 1099511628211ull;
    }
    return (uint32_t)(u->first + n % size);
}

/* The directory of job under root into out; 0 when it does not fit. */
static int job_dir(const char *root, const char *job, char *out, size_t len)
{
    return snprintf(out, len, "%s/%s", root, job) < (int)len;
}

/* Add dir to u->rec's directories (once). */
static void record_add_dir(uid_record *r, const char *dir)
{
    for (size_t i = 0; i < r->ndirs; i++)
        if (strcmp(r->dirs[i], dir) == 0)
            return;
    if (r->ndirs < UIDS_DIRS)
        snprintf(r->dirs[r->ndirs++], sizeof(r->dirs[0]), "%s", dir);
}

/* Under the lock: the record of job in u->rec, this agent among its
 * holders and dirs among its directories, written. */
static flps_err hold_record(agent_uids *u, const char *job, const char *dirs[],
                            size_t ndirs, char *errbuf, size_t errlen)
{
    find_job f = {job, 0};
    uid_record *r = &u->rec;
    int held = 0;

    record_each(u, match_job, &f);
    if (f.found != 0) {
        record_prune(r);
        for (size_t i = 0; i < r->nholders; i++)
            held |= r->holders[i].pid == u->pid;
    } else {
        uint32_t id = preferred_uid(u, job);
        uint64_t tried = 1, size = (uint64_t)u->last - u->first + 1;

        while (!uid_is_free(u, id)) {
            if (tried++ == size)
                return flps_errbuf_set(
                    errbuf, errlen, FLPS_ESTATE,
                    "every uid of --job-uids %" PRIu32 "-%" PRIu32
                    " is held by a job (or is a user's or group's); widen "
                    "the range",
                    u->first, u->last);
            id = id == u->last ? u->first : id + 1;
        }
        kill_uid((uid_t)id); /* strays of a job that had it long ago */
        memset(r, 0, offsetof(uid_record, holders));
        r->uid = id;
        snprintf(r->cluster, sizeof(r->cluster), "%s", u->cluster);
        snprintf(r->job, sizeof(r->job), "%s", job);
        log_info("job uids: job %s runs as uid %u (gid %u)", job, (unsigned)id,
                 (unsigned)id);
    }
    if (!held) {
        if (r->nholders >= UIDS_HOLDERS)
            return flps_errbuf_set(errbuf, errlen, FLPS_ESTATE,
                                   "job %s is held by %d agents of this "
                                   "machine already",
                                   job, UIDS_HOLDERS);
        r->holders[r->nholders].pid = u->pid;
        r->holders[r->nholders].start = u->start;
        snprintf(r->holders[r->nholders].work_dir,
                 sizeof(r->holders[0].work_dir), "%s", u->work_dir);
        r->nholders++;
    }
    for (size_t i = 0; i < ndirs; i++)
        record_add_dir(r, dirs[i]);
    if (record_write(u) != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                               "cannot write the record of uid %u in %s: %s",
                               (unsigned)r->uid, u->dir, strerror(errno));
    return FLPS_OK;
}

flps_err agent_uids_hold(agent_uids *u, const char *job, int server, uid_t *uid,
                         char *errbuf, size_t errlen)
{
    char work[UIDS_PATH], ckpt[UIDS_PATH];
    const char *dirs[2] = {work, ckpt};
    size_t ndirs = server && strcmp(u->work_dir, u->ckpt_root) != 0 ? 2 : 1;
    flps_err rc;

    if (!safeid_is_valid_str(job) ||
        !job_dir(u->work_dir, job, work, sizeof(work)) ||
        !job_dir(u->ckpt_root, job, ckpt, sizeof(ckpt)))
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "'%.80s' is not a job id", job);
    lock(u);
    rc = hold_record(u, job, dirs, ndirs, errbuf, errlen);
    for (size_t i = 0; rc == FLPS_OK && i < ndirs; i++)
        rc = own_dir(dirs[i], (uid_t)u->rec.uid, errbuf, errlen);
    unlock(u);
    if (rc != FLPS_OK)
        return rc;
    if (agent_uids_of(u, job) == (uid_t)-1 &&
        remember(u, job, (uid_t)u->rec.uid) != 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ENOMEM, "out of memory");
    *uid = (uid_t)u->rec.uid;
    return FLPS_OK;
}

void agent_uids_release(agent_uids *u, const char *job_id)
{
    char job[64];
    find_job f = {job, 0};
    uid_held **pp = &u->held;

    /* job_id may be the held entry's own name, freed below. */
    snprintf(job, sizeof(job), "%s", job_id);
    while (*pp != NULL && strcmp((*pp)->job, job) != 0)
        pp = &(*pp)->next;
    if (*pp == NULL)
        return;
    {
        uid_held *h = *pp;
        *pp = h->next;
        flps_free(h);
    }
    lock(u);
    record_each(u, match_job, &f);
    if (f.found != 0) {
        uid_record *r = &u->rec;
        size_t k = 0;

        for (size_t i = 0; i < r->nholders; i++)
            if (r->holders[i].pid != u->pid)
                r->holders[k++] = r->holders[i];
        r->nholders = k;
        if (record_prune(r))
            record_free(u);
        else if (record_write(u) != 0)
            log_warn("job uids: cannot update the record of uid %u: %s",
                     (unsigned)r->uid, strerror(errno));
    }
    unlock(u);
}

void agent_uids_sweep(agent_uids *u, int (*keep)(void *arg, const char *job),
                      void *arg)
{
    uid_held *h = u->held;

    while (h != NULL) {
        uid_held *next = h->next;
        if (!keep(arg, h->job))
            agent_uids_release(u, h->job);
        h = next;
    }
}

/* ---- Acting as the job ---- */

int agent_uids_enter(uid_t uid)
{
    setfsgid((gid_t)uid);
    setfsuid(uid);
    /* setfsuid reports the old value, never an error: ask again. */
    if ((uid_t)setfsuid((uid_t)-1) != uid) {
        agent_uids_leave();
        return -1;
    }
    return 0;
}

void agent_uids_leave(void)
{
    setfsuid(geteuid());
    setfsgid(getegid());
}

int agent_uids_reachable(const char *path, char *blocker, size_t len)
{
    char buf[UIDS_PATH];
    size_t n = strlen(path);

    if (n == 0 || n >= sizeof(buf))
        return 1;
    memcpy(buf, path, n + 1);
    for (;;) {
        struct stat st;
        char *slash;

        if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode) &&
            (st.st_mode & S_IXOTH) == 0) {
            snprintf(blocker, len, "%s", buf);
            return 0;
        }
        slash = strrchr(buf, '/');
        if (slash == NULL || slash == buf)
            return 1;
        *slash = '\0';
    }
}
