/* flrun: run one whole job on this machine, no Redis needed: starts the
 * job's parameter servers and workers on free loopback ports, shows the
 * progress, stops everything cleanly, and prints one JSON summary as its
 * last line. */
#include "cli/flrun.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/gpuclock.h"
#include "common/log.h"
#include "common/tcplisten.h"
#include "proto/creds.h"
#include "services/cliver.h"
#include "services/jobspec_flags.h"
#include "services/plural.h"
#include "services/tasklog.h"
#include "services/workerenv.h"
#include "transports/select.h"

#define RUN_MAX_PROCS 1300

extern char **environ;

/* Set by the signal handler, read by the main loop (process-wide by
 * nature). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

/* Where things are: the job file, the run's directory, the binaries; and
 * the job's text, from the job file and the flags. */
typedef struct paths {
    const char *job;     /* what messages name: the file, or the flags */
    const char *job_arg; /* the JOB.yaml operand; NULL = none */
    jobspec_flags flags;
    char *job_text; /* owned */
    size_t job_len;
    char job_path[PATH_MAX + 32]; /* job_text in the run's directory */
    char logdir[PATH_MAX];
    char ckptdir[PATH_MAX + 16];
    char flps_bin[PATH_MAX];
    char worker_bin[PATH_MAX]; /* flworker, or a command: job's program */
} paths;

/* ---- What the processes print ----
 * Each worker's stdout and stderr come through pipes: its event lines
 * make the progress and the summary and go to its .events file; every other
 * line goes to its log and, as torchrun --tee and horovodrun do, onto flrun's
 * own stdout or stderr prefixed by its task's name ("[worker-1] ..."), the
 * format flsubmit logs shows (services/tasklog.h). The shards write their log
 * themselves; --verbose pipes and shows them too. */

/* procs[i]'s name in the logs: "server-0", "worker-3". */
static void task_name(const run *r, size_t i, char *buf, size_t len)
{
    if (i < r->nservers)
        tasklog_name(buf, len, 1, (uint32_t)i);
    else
        tasklog_name(buf, len, 0, (uint32_t)(i - r->nservers));
}

/* A line p printed that is no event: into its log, and onto to. */
static void show_line(run *r, proc *p, const char *line, FILE *to)
{
    size_t i = (size_t)(p - r->procs);
    char task[TASKLOG_NAME_MAX];

    if (r->logs[i] != NULL)
        fprintf(r->logs[i], "%s\n", line);
    if (r->quiet || (i < r->nservers && !r->verbose))
        return;
    task_name(r, i, task, sizeof(task));
    flrun_end_progress_line(r);
    fprintf(to, TASKLOG_LINE_FMT, task, line);
    fflush(to);
}

static void on_server_line(void *arg, proc *p, const char *line)
{
    run *r = arg;
    size_t i = (size_t)(p - r->procs);

    if (strncmp(line, "listening on ", 13) == 0 && i < r->nservers)
        snprintf(r->endpoints[i], sizeof(r->endpoints[i]), "%s", line + 13);
    if (r->verbose)
        show_line(r, p, line, stdout);
}

/* Append an event line of procs[i] to its .events file (its log's name
 * with .events for .log), opened at the first; nothing when it cannot be. */
static void keep_event(run *r, size_t i, const char *line)
{
    const char *log = r->procs[i].log_path;
    size_t n = strlen(log);
    char path[sizeof(r->procs[i].log_path) + 8];

    if (r->events[i] == NULL && n > 4 && strcmp(log + n - 4, ".log") == 0) {
        snprintf(path, sizeof(path), "%.*s.events", (int)(n - 4), log);
        r->events[i] = fopen(path, "ae");
        if (r->events[i] != NULL)
            setvbuf(r->events[i], NULL, _IOLBF, 0);
    }
    if (r->events[i] != NULL)
        fprintf(r->events[i], "%s\n", line);
}

static void on_worker_line(void *arg, proc *p, const char *line)
{
    run *r = arg;
    size_t i = (size_t)(p - r->procs);

    if (!flrun_on_worker_line(arg, p, line))
        show_line(arg, p, line, stdout);
    else
        keep_event(r, i, line);
}

static void on_err_line(void *arg, proc *p, const char *line)
{
    show_line(arg, p, line, stderr);
}

/* Read what procs[i] printed on both pipes. Returns whether one is still
 * open. */
static int read_output(run *r, size_t i)
{
    proc *p = &r->procs[i];

    proc_read_lines(p, i < r->nservers ? on_server_line : on_worker_line, r);
    proc_read_err_lines(p, on_err_line, r);
    return p->out_fd >= 0 || p->err_fd >= 0;
}

/* Start procs[i] with stdout and stderr piped to flrun, which appends the
 * lines to log (0600) as they come, so a failure's tail is there. */
static flps_err start_piped(run *r, size_t i, const char *name,
                            char *const argv[], char *const *envp,
                            const char *log)
{
    proc_opts o;
    flps_err rc;
    int fd;
    FILE *f;

    if (r->logs[i] != NULL) /* a shard started again */
        fclose(r->logs[i]);
    r->logs[i] = NULL;
    fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (f == NULL) {
        fprintf(stderr, "flrun: cannot open %s: %s\n", log, strerror(errno));
        if (fd >= 0)
            close(fd);
        return FLPS_ESYS;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    memset(&o, 0, sizeof(o));
    o.pipe_stderr = 1;
    o.envp = envp;
    rc = proc_start_opts(&r->procs[i], name, argv, &o);
    if (rc != FLPS_OK) {
        fclose(f);
        return rc;
    }
    snprintf(r->procs[i].log_path, sizeof(r->procs[i].log_path), "%s", log);
    r->logs[i] = f;
    return FLPS_OK;
}

/* Start shard i: on a free port, or with restore on the port it had
 * (the workers' connections find it again there) from the checkpoint
 * directory. */
static flps_err start_server(run *r, uint32_t i, const paths *pa, int restore)
{
    char shard[16], shards[16], interval[32], name[64], log[PATH_MAX + 32];
    char *args[20];
    int a = 0;

    snprintf(shard, sizeof(shard), "%u", i);
    snprintf(shards, sizeof(shards), "%u", r->spec.servers);
    snprintf(interval, sizeof(interval), "%.0f",
             r->spec.checkpoint_interval < 1 ? 1 : r->spec.checkpoint_interval);
    snprintf(name, sizeof(name), "flps shard %u", i);
    snprintf(log, sizeof(log), "%s/flps-%u.log", pa->logdir, i);
    args[a++] = (char *)pa->flps_bin;
    args[a++] = "--job";
    args[a++] = r->spec.name;
    args[a++] = "--shard";
    args[a++] = shard;
    args[a++] = "--shards";
    args[a++] = shards;
    args[a++] = "--listen";
    args[a++] = restore ? r->endpoints[i] : "tcp://127.0.0.1:0";
    args[a++] = "--transport";
    args[a++] = (char *)r->transport;
    if (r->spec.checkpoint_interval > 0) {
        args[a++] = "--checkpoint-dir";
        args[a++] = (char *)pa->ckptdir;
        args[a++] = "--checkpoint-interval";
        args[a++] = interval;
        if (restore)
            args[a++] = "--restore";
    }
    args[a] = NULL;
    if (r->verbose)
        return start_piped(r, i, name, args, NULL, log);
    return proc_start(&r->procs[i], name, args, log);
}

/* A shard that died while the job runs is started again from its
 * checkpoint and log when the job keeps them (checkpoint_interval), at
 * most FLRUN_SERVER_RESTARTS times in all; the workers resend what it had
 * not answered and go on. Returns 1 when restarted. */
#define FLRUN_SERVER_RESTARTS 3
static int restart_server(run *r, uint32_t i, const paths *pa)
{
    char how[96];

    if (r->spec.checkpoint_interval <= 0 ||
        r->server_restarts >= FLRUN_SERVER_RESTARTS)
        return 0;
    flrun_end_progress_line(r);
    proc_describe(r->procs[i].status, how, sizeof(how));
    fprintf(stderr,
            "flrun: %s (pid %d) stopped unexpectedly: %s; restarting it "
            "from its checkpoint on %s (restart %u of at most %d)\n",
            r->procs[i].name, (int)r->procs[i].pid, how, r->endpoints[i],
            r->server_restarts + 1, FLRUN_SERVER_RESTARTS);
    if (start_server(r, i, pa, 1) != FLPS_OK)
        return 0;
    r->server_restarts++;
    return 1;
}

/* The last line of a log that is not blank: the program's last error
 * (for Python, the exception after its traceback). Empty when none. */
static void last_error_line(const char *path, char *out, size_t len)
{
    char line[1024];
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        size_t n = strlen(line);

        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' ||
                         line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        if (n > 0)
            snprintf(out, len, "%s", line);
    }
    fclose(f);
}

static void report_death(run *r, proc *p)
{
    char how[96], reason[1024];

    flrun_end_progress_line(r);
    proc_describe(p->status, how, sizeof(how));
    fprintf(stderr,
            "flrun: %s (pid %d) stopped unexpectedly: %s; last lines "
            "of %s:\n",
            p->name, (int)p->pid, how, p->log_path);
    proc_print_tail(p->log_path, 12);
    last_error_line(p->log_path, reason, sizeof(reason));
    fprintf(stderr, "flrun: job %s failed: %s %s: %s\n", r->spec.name, p->name,
            how, reason[0] ? reason : "it printed no error");
}

/* The job's credentials: a new secret (and CURVE keys when libzmq has
 * them and the job runs over ZeroMQ) in a 0600 file of the run directory,
 * named to every process through FLPS_CREDENTIALS_FILE (inherited): the
 * shards then serve only this job's workers. Never on a command line. */
static int make_credentials(run *r, const char *logdir)
{
    char path[PATH_MAX + 32], why[512];
    flps_creds c;
    /* CURVE where it can run (over ZeroMQ, with a libzmq that has it) and
     * the job did not turn it off. */
    int curve = r->spec.encryption && strcmp(r->transport, "zmq") == 0 &&
                creds_have_curve();

    snprintf(path, sizeof(path), "%s/credentials", logdir);
    if (creds_generate(curve, &c, why, sizeof(why)) != FLPS_OK ||
        creds_write(path, &c, 1, why, sizeof(why)) != FLPS_OK) {
        creds_wipe(&c);
        fprintf(stderr, "flrun: %s\nnothing was started.\n", why);
        return -1;
    }
    r->data_plane = c.has_curve ? "authenticated+curve" : "authenticated";
    if (!c.has_curve && !r->quiet)
        fprintf(stderr,
                "flrun: the data plane is authenticated but not "
                "encrypted (%s)\n",
                !r->spec.encryption ? "the job file says encryption: false"
                : strcmp(r->transport, "zmq") != 0
                    ? "CURVE applies to ZeroMQ only"
                    : "this libzmq has no CURVE");
    creds_wipe(&c);
    if (setenv(CREDS_ENV, path, 1) != 0) {
        fprintf(stderr, "flrun: cannot set %s\n", CREDS_ENV);
        return -1;
    }
    return 0;
}

static int find_bin(const char *name, char *out, size_t len)
{
    const char *env = getenv("FLPS_BIN_DIR");
    char self[PATH_MAX];
    ssize_t n;

    if (env != NULL) {
        return snprintf(out, len, "%s/%s", env, name) < (int)len &&
               access(out, X_OK) == 0;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        char *slash;
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            if (snprintf(out, len, "%s/%s", self, name) < (int)len &&
                access(out, X_OK) == 0)
                return 1;
        }
    }
    return 0;
}

/* Start rank w of a command: job: the user's program (prog, resolved)
 * with the job's FLPS_* variables; its output piped to flrun. */
/* Where worker w records the GPU clocks it changes (gpu_clock:), in the
 * run's directory. */
static void clock_record(const char *logdir, uint32_t w, char *out, size_t len)
{
    snprintf(out, len, "%s/gpu_clock.rank%u", logdir, w);
}

/* The workers are gone: a worker that died before restoring the clocks
 * it changed (killed, crashed) left its record, from which they are
 * restored here. One that exited restored them and removed it. */
static void restore_clocks(const run *r, const char *logdir)
{
    char path[PATH_MAX + 32], msg[512];
    size_t n = 0;

    for (uint32_t w = 0; w < r->spec.workers; w++) {
        clock_record(logdir, w, path, sizeof(path));
        if (gpuclock_restore_from_record(path, NULL, &n, msg, sizeof(msg)) !=
            FLPS_OK)
            fprintf(stderr, "flrun: %s\n", msg);
        else if (n > 0)
            fprintf(stderr,
                    "flrun: restored the GPU clocks worker %u left set "
                    "(%zu GPUs)\n",
                    w, n);
    }
}

static flps_err start_command(run *r, uint32_t w, const char *prog,
                              const char *servers, const char *logdir)
{
    char record[PATH_MAX + 32];
    const char *words[JOBSPEC_WORDS_MAX + 1];
    char name[64], log[PATH_MAX + 32], bin_dir[PATH_MAX] = "";
    char **env = NULL;
    size_t n = jobspec_words(r->spec.command, r->spec.command_argc, words,
                             JOBSPEC_WORDS_MAX);
    workerenv we;
    flps_err rc;
    const char *dl = getenv("FLPS_DEADLINE_MS");

    if (find_bin("flps", bin_dir, sizeof(bin_dir)))
        *strrchr(bin_dir, '/') = '\0';
    memset(&we, 0, sizeof(we));
    we.job = r->spec.name;
    we.rank = w;
    we.servers = servers;
    we.plan_file = r->plan_path;
    we.bin_dir = bin_dir[0] ? bin_dir : NULL;
    /* A test (or a slow machine) may shorten (lengthen) the waits. */
    we.deadline_ms = dl != NULL ? strtoull(dl, NULL, 10) : 0;
    we.transport = r->transport;
    we.credentials_file = getenv(CREDS_ENV);
    we.peers = r->peers;
    clock_record(logdir, w, record, sizeof(record));
    we.gpu_clock_record = record;
    if (workerenv_build(&r->spec, &we, environ, &env) != FLPS_OK) {
        fprintf(stderr, "flrun: out of memory\n");
        return FLPS_ENOMEM;
    }
    words[0] = prog;
    words[n] = NULL;
    snprintf(name, sizeof(name), "worker rank %u (%.32s)", w,
             strrchr(prog, '/') ? strrchr(prog, '/') + 1 : prog);
    snprintf(log, sizeof(log), "%s/worker-%u.log", logdir, w);
    rc = start_piped(r, r->nprocs, name, (char *const *)words, env, log);
    workerenv_free(env);
    return rc;
}

static void usage(FILE *f)
{
    flps_strbuf flags = FLPS_STRBUF_INIT;

    jobspec_flags_help(&flags);
    fprintf(
        f,
        "usage: flrun [OPTIONS] [FLAGS] JOB.yaml\n"
        "       flrun [OPTIONS] -n WORKERS [-s SERVERS] [FLAGS] [JOB.yaml] "
        "-- PROGRAM [ARGS...]\n"
        "Runs a job's servers and workers on this machine (loopback), shows\n"
        "progress on stderr and prints a JSON summary as the last line of\n"
        "stdout. The job is the job file's, or one said on the command line:\n"
        "every job-file key is also a flag (--batch-size for batch_size), and\n"
        "a flag overrides the file's value; the words after -- are the job's\n"
        "command: (each worker rank runs it; model: is not needed then). A\n"
        "job file stays the way to say everything else (env:, ...).\n"
        "  flrun -n 4 -s 1 --compression gtopk:0.01 -- python3 train.py\n"
        "  flrun -n 2 --model mlp --iterations 200\n"
        "\n"
        "Each worker's stdout and stderr lines show as they come, as\n"
        "\"[worker-RANK] LINE\" on flrun's stdout and stderr (as flsubmit "
        "logs\n"
        "shows them), and stay in the log directory: worker-RANK.log\n"
        "(flworker-RANK.log for the built-in worker), their event lines\n"
        "in worker-RANK.events (flworker-RANK.events); the shards' in\n"
        "flps-N.log, shown as [server-N] with --verbose. A process that\n"
        "fails has the last lines of its log printed.\n"
        "\n"
        "options:\n"
        "  --log-dir DIR  the logs (default: a new directory under $TMPDIR\n"
        "                 or /tmp)\n"
        "  -q, --quiet    no header, progress or worker lines (the logs keep\n"
        "                 them)\n"
        "  -v, --verbose  the shards' lines too\n"
        "  -h, --help     this text\n"
        "  --version      flrun's version\n"
        "flags (each takes what its key takes: docs/job-file.md):\n"
        "%s",
        flags.data != NULL ? flags.data : "");
    flps_strbuf_fini(&flags);
}

/* Poll every open pipe once, for up to timeout_ms. */
static void pump(run *r, int timeout_ms)
{
    struct pollfd fds[2 * RUN_MAX_PROCS];
    size_t map[2 * RUN_MAX_PROCS], n = 0;

    for (size_t i = 0; i < r->nprocs; i++) {
        int fd[2] = {r->procs[i].out_fd, r->procs[i].err_fd};

        for (int k = 0; k < 2; k++) {
            if (fd[k] < 0)
                continue;
            fds[n].fd = fd[k];
            fds[n].events = POLLIN;
            fds[n].revents = 0;
            map[n++] = i;
        }
    }
    if (n == 0) {
        struct timespec ts = {0, (long)timeout_ms * 1000000L};
        nanosleep(&ts, NULL);
        return;
    }
    if (poll(fds, n, timeout_ms) <= 0)
        return;
    for (size_t k = 0; k < n; k++)
        if (fds[k].revents != 0)
            read_output(r, map[k]);
}

/* A flag's value refused, or the words before -- that are not one job
 * file: said, with nothing started. Returns the exit status 2. */
static int refuse(const char *fmt, const char *a, const char *b)
{
    fputs("flrun: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputs("\nnothing was started; flrun --help lists the flags\n", stderr);
    return 2;
}

/* Read the command line into r and pa: flrun's options, the job's flags,
 * at most one job file, and the command after --. Returns -1 to go on,
 * else the exit status (0 for --help, 2 for a usage error). */
static int parse_options(int argc, char **argv, run *r, paths *pa)
{
    static const struct option own[] = {
        {"log-dir", required_argument, NULL, 'l'},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
    };
    enum { NOWN = sizeof(own) / sizeof(own[0]) };
    struct option opts[NOWN + JOBSPEC_FLAGS_KEYS + 1];
    char why[1100];
    size_t n;
    int c, nargs;

    jobspec_flags_init(&pa->flags);
    memcpy(opts, own, sizeof(own));
    n = NOWN +
        jobspec_flags_options(&pa->flags, opts + NOWN, JOBSPEC_FLAGS_KEYS);
    memset(&opts[n], 0, sizeof(opts[n]));
    /* getopt never sees the command: its options are the program's. */
    nargs = jobspec_flags_split(&pa->flags, argc, argv);
    while ((c = getopt_long(nargs, argv, "hqv" JOBSPEC_FLAGS_SHORT, opts,
                            NULL)) != -1) {
        switch (c) {
        case 'l':
            snprintf(pa->logdir, sizeof(pa->logdir), "%s", optarg);
            break;
        case 'q':
            r->quiet = 1;
            break;
        case 'v':
            r->verbose = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            switch (
                jobspec_flags_take(&pa->flags, c, optarg, why, sizeof(why))) {
            case 1:
                break;
            case -1:
                return refuse("%s%s", why, "");
            default: /* getopt said what */
                fprintf(stderr, "flrun --help lists the options and flags\n");
                return 2;
            }
        }
    }
    if (jobspec_flags_operands(&pa->flags, argc, nargs, argv, optind,
                               &pa->job_arg, why, sizeof(why)) != FLPS_OK)
        return refuse("%s%s", why, "");
    if (pa->job_arg == NULL && !jobspec_flags_given(&pa->flags)) {
        usage(stderr);
        return 2;
    }
    pa->job = pa->job_arg != NULL ? pa->job_arg : "the command line";
    return -1;
}

/* transport: rdma that cannot run here stops now, before any process
 * starts or anything waits; auto is decided once for the whole job (every
 * process runs on this machine) and said. 0, or the exit status. */
static int choose_transport(run *r, const paths *pa)
{
    transport_select sel = {.kind = TRANSPORT_KIND_ZMQ};
    transport_kind chosen = TRANSPORT_KIND_ZMQ;
    char why[1024];

    transport_kind_parse(jobspec_transport_name(r->spec.transport), &sel.kind);
    if (transport_resolve(&sel, &chosen, why, sizeof(why)) != FLPS_OK) {
        fprintf(stderr, "flrun: %s: %s\nnothing was started.\n", pa->job, why);
        return 2;
    }
    if (why[0] != '\0')
        fprintf(stderr, "flrun: %s\n", why);
    r->transport = transport_kind_name(chosen);
    return 0;
}

/* The job: the job file's text (if one is given) with the flags in it,
 * parsed. 0, or the exit status (said on stderr). */
static int read_job(run *r, paths *pa)
{
    char errbuf[1024], msg[1100];
    char *file = NULL;
    size_t len = 0;
    jobspec_where where;
    flps_err rc = FLPS_OK;

    memset(&where, 0, sizeof(where));
    if (pa->job_arg != NULL)
        rc =
            jobspec_read_file(pa->job_arg, &file, &len, errbuf, sizeof(errbuf));
    if (rc == FLPS_OK)
        rc = jobspec_flags_text(&pa->flags, file, len, &pa->job_text,
                                &pa->job_len, errbuf, sizeof(errbuf));
    flps_free(file);
    if (rc == FLPS_OK)
        rc = jobspec_load_text(pa->job, pa->job_text, pa->job_len, &r->spec,
                               errbuf, sizeof(errbuf), &where);
    if (rc != FLPS_OK) {
        /* An error about a flag's value names the flag, not a line. */
        jobspec_flags_explain(&pa->flags, &where, errbuf, msg, sizeof(msg));
        fprintf(stderr, "flrun: %s\nnothing was started.\n", msg);
        return 2;
    }
    return 0;
}

/* Load the job and check it can run here: its transport, its size, the
 * binaries it needs. 0, or the exit status (said on stderr). */
static int load_job(run *r, paths *pa)
{
    char errbuf[1024];
    int rc;

    if ((rc = read_job(r, pa)) != 0)
        return rc;
    if ((rc = choose_transport(r, pa)) != 0)
        return rc;
    if (r->spec.servers > 256 ||
        r->spec.workers + r->spec.servers > RUN_MAX_PROCS) {
        fprintf(
            stderr,
            "flrun: %u %s and %u %s are more than one machine runs; "
            "use flsubmit on a cluster\n",
            r->spec.servers, plural_word(r->spec.servers, "server", "servers"),
            r->spec.workers, plural_word(r->spec.workers, "worker", "workers"));
        return 2;
    }
    if (!find_bin("flps", pa->flps_bin, sizeof(pa->flps_bin)) ||
        (r->spec.command_argc == 0 &&
         !find_bin("flworker", pa->worker_bin, sizeof(pa->worker_bin)))) {
        fprintf(stderr, "flrun: cannot find the flps and flworker binaries "
                        "next to flrun (or in $FLPS_BIN_DIR)\n");
        return 2;
    }
    if (r->spec.command_argc > 0) {
        const char *prog[1];

        jobspec_words(r->spec.command, 1, prog, 1);
        if (workerenv_find_program(prog[0], environ, pa->worker_bin,
                                   sizeof(pa->worker_bin), errbuf,
                                   sizeof(errbuf)) != FLPS_OK) {
            fprintf(stderr, "flrun: %s: %s\nnothing was started.\n", pa->job,
                    errbuf);
            return 2;
        }
    }
    return 0;
}

/* The job as it runs (the file with the flags in it), in the run's
 * directory: flworker reads it, and it says afterwards what ran. 0, or -1
 * (said). */
static int write_job(paths *pa)
{
    int fd, ok;

    snprintf(pa->job_path, sizeof(pa->job_path), "%s/flrun-job.yaml",
             pa->logdir);
    fd = open(pa->job_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ok =
        fd >= 0 && write(fd, pa->job_text, pa->job_len) == (ssize_t)pa->job_len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok) {
        fprintf(stderr, "flrun: cannot write %s: %s\n", pa->job_path,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* The run's directory (--log-dir, else a new one), its credentials and
 * (auto) the plan file's place. 0, or the exit status. */
static int prepare_dir(run *r, paths *pa)
{
    const char *tmp;

    if (pa->logdir[0] == '\0') {
        tmp = getenv("TMPDIR");
        snprintf(pa->logdir, sizeof(pa->logdir), "%s/flrun-%s-XXXXXX",
                 tmp ? tmp : "/tmp", r->spec.name);
        if (mkdtemp(pa->logdir) == NULL) {
            fprintf(stderr, "flrun: cannot create a log directory: %s\n",
                    strerror(errno));
            return 1;
        }
    } else if (mkdir(pa->logdir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "flrun: cannot create %s: %s\n", pa->logdir,
                strerror(errno));
        return 1;
    }
    snprintf(pa->ckptdir, sizeof(pa->ckptdir), "%s/checkpoints", pa->logdir);
    if (write_job(pa) != 0 || make_credentials(r, pa->logdir) != 0)
        return 1;
    if (r->spec.compression == CODEC_AUTO) {
        /* The workers start dense and apply the plan once this file
         * appears; one left by an earlier run in the same --log-dir would
         * be applied before this job's profile is in. */
        snprintf(r->plan_path, sizeof(r->plan_path), "%s/plan.json",
                 pa->logdir);
        if (unlink(r->plan_path) != 0 && errno != ENOENT) {
            fprintf(stderr, "flrun: cannot remove the old %s: %s\n",
                    r->plan_path, strerror(errno));
            return 1;
        }
    }
    return 0;
}

/* What the workers run, for the opening line: flworker's model and data
 * ("mlp on fashion-mnist"), or a command: job's words ("python3
 * train.py", cut short), whose model is its own. */
static void describe_work(const run *r, char *buf, size_t len)
{
    const char *words[JOBSPEC_WORDS_MAX];
    size_t n, used = 0;

    if (r->spec.command_argc == 0) {
        snprintf(buf, len, "%s on %s", jobspec_model_name(r->spec.model),
                 jobspec_dataset_name(r->spec.dataset));
        return;
    }
    n = jobspec_words(r->spec.command, r->spec.command_argc, words,
                      JOBSPEC_WORDS_MAX);
    buf[0] = '\0';
    for (size_t i = 0; i < n && used + 1 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "",
                                 words[i]);
    if (used >= len && len > 4)
        memcpy(buf + len - 4, "...", 4);
}

/* Signals, the process table, and the opening line. 0 when out of
 * memory (said). */
static int setup(run *r, const paths *pa)
{
    struct sigaction sa;
    char comp[64], work[160];

    r->tty = isatty(STDERR_FILENO);
    r->total = r->spec.mode == JOBSPEC_MODE_FEDAVG ? r->spec.rounds
                                                   : r->spec.iterations;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    r->procs = calloc(r->spec.servers + r->spec.workers, sizeof(*r->procs));
    r->logs = calloc(r->spec.servers + r->spec.workers, sizeof(*r->logs));
    r->events = calloc(r->spec.servers + r->spec.workers, sizeof(*r->events));
    r->rank_bytes = calloc(r->spec.workers, sizeof(*r->rank_bytes));
    if (r->procs == NULL || r->logs == NULL || r->events == NULL ||
        r->rank_bytes == NULL) {
        fprintf(stderr, "flrun: out of memory\n");
        return 0;
    }
    jobspec_comp_format(&r->spec, comp, sizeof(comp));
    describe_work(r, work, sizeof(work));
    if (!r->quiet)
        fprintf(
            stderr,
            "flrun: job %s: %s, %u %s, %u %s, mode %s, "
            "compression %s, %llu %s; logs in %s\n",
            r->spec.name, work, r->spec.workers,
            plural_word(r->spec.workers, "worker", "workers"), r->spec.servers,
            plural_word(r->spec.servers, "server", "servers"),
            jobspec_mode_name(r->spec.mode), comp, (unsigned long long)r->total,
            r->spec.mode == JOBSPEC_MODE_FEDAVG
                ? plural_word((double)r->total, "round", "rounds")
                : plural_word((double)r->total, "iteration", "iterations"),
            pa->logdir);
    return 1;
}

/* The shards, then a wait until each reported the port it bound. 0 when
 * all listen; -1 to stop the job (said). */
static int start_servers(run *r, const paths *pa)
{
    proc *dead;

    for (uint32_t i = 0; i < r->spec.servers; i++) {
        if (start_server(r, i, pa, 0) != FLPS_OK)
            return -1;
        r->nprocs++;
        r->nservers++;
    }
    for (;;) {
        uint32_t ready = 0;

        for (uint32_t i = 0; i < r->nservers; i++)
            ready += r->endpoints[i][0] != '\0';
        if (ready == r->nservers)
            return 0;
        if (interrupted)
            return -1;
        if ((dead = proc_reap(r->procs, r->nprocs)) != NULL) {
            report_death(r, dead);
            return -1;
        }
        if (flps_mono_s() - r->t0 > 30) {
            fprintf(stderr,
                    "flrun: the servers did not report their ports "
                    "within 30 s; see %s\n",
                    pa->logdir);
            return -1;
        }
        pump(r, 100);
    }
}

/* Rank w of flworker, on the shards of servers_arg. */
static flps_err start_flworker(run *r, uint32_t w, const paths *pa,
                               char *servers_arg)
{
    char rank[16], name[64], log[PATH_MAX + 32], record[PATH_MAX + 32];
    char *args[] = {(char *)pa->worker_bin,
                    "--job",
                    (char *)pa->job_path,
                    "--rank",
                    rank,
                    "--transport",
                    (char *)r->transport,
                    "--servers",
                    servers_arg,
                    "--gpu-clock-record",
                    record,
                    NULL,
                    NULL,
                    NULL};
    char **env = NULL;
    flps_err rc;

    snprintf(rank, sizeof(rank), "%u", w);
    clock_record(pa->logdir, w, record, sizeof(record));
    if (r->plan_path[0] != '\0') {
        args[11] = "--plan";
        args[12] = r->plan_path;
    }
    if (r->spec.mode == JOBSPEC_MODE_SAPS) {
        /* No shards: the workers' own endpoints instead. */
        args[7] = "--peers";
        args[8] = r->peers;
    }
    snprintf(name, sizeof(name), "flworker rank %u", w);
    snprintf(log, sizeof(log), "%s/flworker-%u.log", pa->logdir, w);
    /* The job file's env: applies to the built-in worker too. */
    if (r->spec.env_count > 0 &&
        workerenv_build_flworker(&r->spec, environ, &env) != FLPS_OK) {
        fprintf(stderr, "flrun: out of memory\n");
        return FLPS_ENOMEM;
    }
    rc = start_piped(r, r->nprocs, name, args, env, log);
    workerenv_free(env);
    return rc;
}

/* A saps job's workers' endpoints: a free loopback port each (all held
 * open until every one is found, so no two are the same), into
 * r->peers. Outside the kernel's ephemeral range (tcplisten_open_handoff):
 * a worker's own port-0 binds and connections cannot take another's port
 * before it binds it. 0, or -1 (said). */
static int pick_peers(run *r)
{
    flps_strbuf list = FLPS_STRBUF_INIT;
    int *fds = calloc(r->spec.workers, sizeof(*fds));
    uint32_t got = 0;
    int ok = fds != NULL;

    for (; ok && got < r->spec.workers; got++) {
        char bound[64];

        ok = tcplisten_open_handoff("127.0.0.1", 1, &fds[got], bound,
                                    sizeof(bound)) == FLPS_OK;
        if (ok)
            flps_strbuf_printf(&list, "%stcp://%s", got ? "," : "", bound);
        else
            break;
    }
    for (uint32_t i = 0; fds != NULL && i < got; i++)
        close(fds[i]);
    free(fds);
    if (!ok || flps_strbuf_error(&list) != FLPS_OK) {
        fprintf(stderr, "flrun: cannot find free ports for the workers\n");
        flps_strbuf_fini(&list);
        return -1;
    }
    r->peers = list.data; /* the strbuf's text, now the run's */
    return 0;
}

/* Every worker (flworker or a command: job's program) on the shards'
 * endpoints (a saps job: on each other's). 0, or -1 to stop the job. */
static int start_workers(run *r, const paths *pa)
{
    char servers_arg[256 * 130];
    flps_err rc;

    if (r->spec.mode == JOBSPEC_MODE_SAPS && pick_peers(r) != 0)
        return -1;

    servers_arg[0] = '\0';
    for (uint32_t i = 0; i < r->nservers; i++) {
        strcat(servers_arg, r->endpoints[i]);
        if (i + 1 < r->nservers)
            strcat(servers_arg, ",");
    }
    for (uint32_t w = 0; w < r->spec.workers; w++) {
        rc = r->spec.command_argc > 0
                 ? start_command(r, w, pa->worker_bin, servers_arg, pa->logdir)
                 : start_flworker(r, w, pa, servers_arg);
        if (rc != FLPS_OK)
            return -1;
        r->nprocs++;
    }
    return 0;
}

/* A saps job's worker w stopped unexpectedly: the others go on without
 * it (they agree it is gone and leave it out of their matchings), as long
 * as two are left to exchange; the summary names it. Returns 1 when the
 * job goes on. */
static int worker_lost(run *r, proc *p, size_t w)
{
    char how[96];

    if (r->spec.mode != JOBSPEC_MODE_SAPS || w >= r->spec.workers)
        return 0;
    if (r->lost == NULL)
        r->lost = calloc(r->spec.workers, 1);
    if (r->lost == NULL || r->lost[w] || r->spec.workers - r->nlost - 1 < 2)
        return 0;
    r->lost[w] = 1;
    r->nlost++;
    flrun_end_progress_line(r);
    proc_describe(p->status, how, sizeof(how));
    fprintf(stderr,
            "flrun: %s (pid %d) stopped unexpectedly: %s; mode saps goes on "
            "with the other %u workers (last lines of %s:)\n",
            p->name, (int)p->pid, how, r->spec.workers - r->nlost, p->log_path);
    proc_print_tail(p->log_path, 6);
    return 1;
}

/* Reap what ended: a shard is restarted where the job allows it; a
 * failed worker or shard stops the job, but for a saps job's worker
 * while two others remain. 0, or -1 to stop. */
static int reap(run *r, const paths *pa)
{
    proc *p;

    while ((p = proc_reap(r->procs, r->nprocs)) != NULL) {
        size_t idx = (size_t)(p - r->procs);

        /* Drain what it printed before judging its exit. */
        while (read_output(r, idx))
            pump(r, 10);
        if (interrupted)
            return -1;
        if (idx < r->nservers && restart_server(r, (uint32_t)idx, pa))
            continue;
        if (idx < r->nservers || !WIFEXITED(p->status) ||
            WEXITSTATUS(p->status) != 0) {
            if (idx >= r->nservers && worker_lost(r, p, idx - r->nservers))
                continue;
            report_death(r, p);
            return -1;
        }
    }
    return 0;
}

/* Run until every worker has finished: 0; -1 to stop the job. */
static int supervise(run *r, const paths *pa)
{
    for (;;) {
        uint32_t finished = 0;

        pump(r, 100);
        if (reap(r, pa) != 0)
            return -1;
        for (size_t i = r->nservers; i < r->nprocs; i++)
            finished += r->procs[i].exited && r->procs[i].out_fd < 0 &&
                        r->procs[i].err_fd < 0;
        if (finished == r->spec.workers)
            return 0;
        if (interrupted)
            return -1;
        if (r->spec.time_limit > 0 &&
            flps_mono_s() - r->t0 > r->spec.time_limit) {
            flrun_end_progress_line(r);
            fprintf(stderr,
                    "flrun: job %s failed: it ran past its time_limit of "
                    "%.0f s; raise time_limit or make the job shorter\n",
                    r->spec.name, r->spec.time_limit);
            return -1;
        }
    }
}

/* Every worker finished with status 0: stop the shards and print the
 * summary, which names what the workers did not report (a command: job's
 * program need not call flps.report). The exit status: 0. */
static int finish(run *r, const paths *pa)
{
    double wall;

    flrun_end_progress_line(r);
    proc_stop_all(r->procs, r->nprocs, 10000);
    restore_clocks(r, pa->logdir);
    wall = flps_mono_s() - r->t0;
    flrun_print_summary(r, wall);
    return 0;
}

/* Stop the job early (a failure, a signal). The exit status. */
static int stop(run *r, const paths *pa)
{
    flrun_end_progress_line(r);
    if (interrupted)
        fprintf(stderr, "flrun: interrupted; stopping %zu %s\n", r->nprocs,
                plural_word((double)r->nprocs, "process", "processes"));
    else
        fprintf(stderr, "flrun: stopping the job; logs are in %s\n",
                pa->logdir);
    proc_stop_all(r->procs, r->nprocs, 5000);
    restore_clocks(r, pa->logdir);
    return interrupted ? 130 : 1;
}

int main(int argc, char **argv)
{
    run r;
    paths pa;
    int status;

    if (flps_cli_version(argc, argv, "flrun"))
        return 0;
    memset(&r, 0, sizeof(r));
    memset(&pa, 0, sizeof(pa));
    status = parse_options(argc, argv, &r, &pa);
    if (status >= 0)
        return status;
    flps_log_setup("flrun", FLPS_LOG_INFO);
    status = load_job(&r, &pa);
    if (status == 0)
        status = prepare_dir(&r, &pa);
    if (status != 0) {
        flps_free(pa.job_text);
        return status;
    }
    if (!setup(&r, &pa)) {
        status = 1;
    } else {
        r.t0 = flps_mono_s();
        if (start_servers(&r, &pa) == 0 && start_workers(&r, &pa) == 0 &&
            supervise(&r, &pa) == 0)
            status = finish(&r, &pa);
        else
            status = stop(&r, &pa);
    }
    flrun_report_fini(&r);
    for (size_t i = 0; r.logs != NULL && i < r.nprocs; i++)
        if (r.logs[i] != NULL)
            fclose(r.logs[i]);
    for (size_t i = 0; r.events != NULL && i < r.nprocs; i++)
        if (r.events[i] != NULL)
            fclose(r.events[i]);
    free(r.logs);
    free(r.events);
    free(r.procs);
    free(r.rank_bytes);
    free(r.lost);
    flps_free(r.peers);
    flps_free(pa.job_text);
    return status;
}
