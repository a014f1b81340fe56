/* flpod: the entry program of the pods flsched's kubernetes launcher
 * makes. It runs the pod's real program (flps, flworker, or a job's own
 * command) and
 *   - gives it the job's credentials as a private file: a Secret volume
 *     is readable by the pod's group, which a credentials file must not
 *     be, so the Secret's copy is written 0600 into $TMPDIR and named by
 *     FLPS_CREDENTIALS_FILE;
 *   - passes every line it prints on to the pod's log (pods/log, where
 *     flsched and kubectl logs read it);
 *   - reports a worker's event lines (progress, eval, profile, done) to
 *     flsched's API with the job's own token (POST /v1/jobs/ID/report),
 *     so a training pod needs no Redis, and writes the compression plan
 *     flsched answers with to FLPS_PLAN_FILE, where the worker follows it;
 *   - forwards SIGTERM, and exits as its program did.
 *
 * usage: flpod [--] PROGRAM [ARG...]
 * Environment: FLPS_POD_SECRETS (the Secret's directory, default
 * /etc/flps/job: credentials, token), FLPS_SCHEDULER (flsched's URL),
 * FLPS_SCHEDULER_CA, FLPS_JOB_ID, FLPS_TASK (worker-R, server-I),
 * FLPS_ATTEMPT, FLPS_PLAN_FILE, TMPDIR. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/strbuf.h"
#include "proto/creds.h"
#include "scheduler/agent_task.h"
#include "services/procs.h"
#include "services/workerenv.h"

/* Events are sent at most this often, and a done event at once. */
#define FLPOD_SEND_EVERY_S 1.0
/* Lines kept while flsched cannot be reached; older progress goes. */
#define FLPOD_KEEP_MAX 1000
#define FLPOD_TIMEOUT_MS 5000L

extern char **environ;

/* The signal to pass on: the one piece of global state, as a handler can
 * reach nothing else. */
static volatile sig_atomic_t flpod_signal;

static void on_signal(int sig)
{
    flpod_signal = sig;
}

typedef struct flpod {
    proc p;
    CURL *curl;
    char url[1024];
    char auth[512];
    const char *ca;
    const char *task;
    long attempt;
    json_t *pending; /* event lines not yet sent */
    double last_send;
    int reporting;
    const char *plan_file;   /* FLPS_PLAN_FILE; NULL: no plans */
    json_int_t plan_version; /* of the plan written there */
    flps_strbuf answer;      /* the last report's answer */
} flpod;

static void say(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "flpod: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

/* The first line of dir/name into buf; 0 when there is no such file. */
static int read_secret(const char *dir, const char *name, char *buf, size_t len)
{
    char path[PATH_MAX];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 1;
}

/* The Secret's credentials as a 0600 file of this pod's own, named by
 * FLPS_CREDENTIALS_FILE for the program. 0 on a fatal problem (said). */
static int private_credentials(const char *dir)
{
    char text[CREDS_FILE_MAX + 1], path[PATH_MAX], why[256];
    const char *tmp = getenv("TMPDIR");
    flps_creds c;
    int ok;

    if (!read_secret(dir, "credentials", text, sizeof(text)))
        return 1; /* a job without credentials runs without */
    ok = creds_parse(text, strlen(text), &c, why, sizeof(why)) == FLPS_OK;
    explicit_bzero(text, sizeof(text));
    if (!ok) {
        say("the job's credentials in %s are malformed: %s", dir, why);
        return 0;
    }
    snprintf(path, sizeof(path), "%s/flpod-credentials",
             tmp && tmp[0] ? tmp : "/tmp");
    ok = creds_write(path, &c, 1, why, sizeof(why)) == FLPS_OK;
    creds_wipe(&c);
    if (!ok) {
        say("%s%s", why, "");
        return 0;
    }
    setenv(CREDS_ENV, path, 1);
    return 1;
}

/* Reports are on for a worker of a job whose Secret holds a token, when
 * flsched's URL is known. */
static void setup_reports(flpod *f, const char *dir)
{
    const char *url = getenv("FLPS_SCHEDULER"), *job = getenv("FLPS_JOB_ID");
    const char *att = getenv("FLPS_ATTEMPT");
    char token[256];
    size_t n;

    f->task = getenv("FLPS_TASK");
    if (url == NULL || url[0] == '\0' || job == NULL || f->task == NULL ||
        strncmp(f->task, "worker-", 7) != 0 ||
        !read_secret(dir, "token", token, sizeof(token)))
        return;
    n = strcspn(token, "\r\n");
    token[n] = '\0';
    snprintf(f->auth, sizeof(f->auth), "Authorization: Bearer %s", token);
    explicit_bzero(token, sizeof(token));
    snprintf(f->url, sizeof(f->url), "%s%sv1/jobs/%s/report", url,
             url[strlen(url) - 1] == '/' ? "" : "/", job);
    f->attempt = att != NULL ? strtol(att, NULL, 10) : 0;
    f->ca = getenv("FLPS_SCHEDULER_CA");
    f->plan_file = getenv("FLPS_PLAN_FILE");
    f->curl = curl_easy_init();
    f->pending = json_array();
    f->reporting = f->curl != NULL && f->pending != NULL;
}

static size_t keep_answer(char *d, size_t s, size_t n, void *arg)
{
    flps_strbuf *b = arg;

    return flps_strbuf_append(b, d, s * n) == FLPS_OK ? s * n : 0;
}

/* A newer plan in flsched's answer goes where the worker follows it: a
 * temporary file renamed into place, so it never reads half of one. */
static void take_plan(flpod *f)
{
    json_t *a = json_loads(f->answer.data ? f->answer.data : "", 0, NULL);
    json_t *plan = json_object_get(a, "plan");
    json_int_t v = json_integer_value(json_object_get(a, "plan_version"));
    char tmp[PATH_MAX];

    if (f->plan_file != NULL && json_is_object(plan) && v > f->plan_version) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", f->plan_file);
        if (json_dump_file(plan, tmp, JSON_COMPACT) == 0 &&
            rename(tmp, f->plan_file) == 0) {
            f->plan_version = v;
            fprintf(stderr, "flpod: compression plan v%lld written to %s\n",
                    (long long)v, f->plan_file);
        }
    }
    json_decref(a);
}

/* POST the pending lines; they are dropped once flsched took them (or
 * said the attempt is over). */
static void send_pending(flpod *f)
{
    struct curl_slist *h = NULL;
    json_t *body;
    char *text;
    long status = 0;

    if (!f->reporting || json_array_size(f->pending) == 0)
        return;
    f->last_send = flps_mono_s();
    body = json_pack("{s:s,s:I,s:O,s:I}", "task", f->task, "attempt",
                     (json_int_t)f->attempt, "lines", f->pending,
                     "plan_version", f->plan_version);
    text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (text == NULL)
        return;
    h = curl_slist_append(h, f->auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_reset(f->curl);
    curl_easy_setopt(f->curl, CURLOPT_URL, f->url);
    curl_easy_setopt(f->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(f->curl, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(f->curl, CURLOPT_TIMEOUT_MS, FLPOD_TIMEOUT_MS);
    curl_easy_setopt(f->curl, CURLOPT_NOSIGNAL, 1L);
    flps_strbuf_clear(&f->answer);
    curl_easy_setopt(f->curl, CURLOPT_WRITEFUNCTION, keep_answer);
    curl_easy_setopt(f->curl, CURLOPT_WRITEDATA, &f->answer);
    if (f->ca != NULL && f->ca[0] != '\0')
        curl_easy_setopt(f->curl, CURLOPT_CAINFO, f->ca);
    if (curl_easy_perform(f->curl) == CURLE_OK)
        curl_easy_getinfo(f->curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    free(text);
    if (status == 200)
        take_plan(f);
    if (status == 200 || status == 409 || status == 400) {
        json_array_clear(f->pending);
        if (status != 200)
            say("flsched refused the report (HTTP %s)%s",
                status == 409 ? "409: the attempt is over" : "400", "");
    }
}

/* A line of the program's stdout: to the pod's log, and a worker's
 * events to the pending report. */
static void on_stdout(void *arg, proc *p, const char *line)
{
    flpod *f = arg;
    agent_event ev;

    (void)p;
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (!f->reporting || line[0] != '{')
        return;
    agent_event_parse(line, &ev);
    if (ev.kind == AGENT_EVENT_NONE || ev.kind == AGENT_EVENT_OTHER)
        return;
    if (json_array_size(f->pending) >= FLPOD_KEEP_MAX)
        json_array_remove(f->pending, 0);
    json_array_append_new(f->pending, json_string(line));
    if (ev.kind == AGENT_EVENT_DONE ||
        flps_mono_s() - f->last_send >= FLPOD_SEND_EVERY_S)
        send_pending(f);
}

static void on_stderr(void *arg, proc *p, const char *line)
{
    (void)arg;
    (void)p;
    fputs(line, stderr);
    fputc('\n', stderr);
    fflush(stderr);
}

/* Pass lines on until the program ends; its wait status into *status. As
 * the pod's first process, flpod also reaps what else ends. */
static void run(flpod *f, int *status)
{
    for (;;) {
        struct pollfd pf[2] = {{f->p.out_fd, POLLIN, 0},
                               {f->p.err_fd, POLLIN, 0}};
        int st, sig = flpod_signal;
        pid_t w;

        if (sig != 0) {
            flpod_signal = 0;
            kill(f->p.pid, sig);
        }
        if (poll(pf, 2, 200) > 0) {
            if (pf[0].revents)
                proc_read_lines(&f->p, on_stdout, f);
            if (pf[1].revents)
                proc_read_err_lines(&f->p, on_stderr, f);
        }
        if (f->reporting && json_array_size(f->pending) > 0 &&
            flps_mono_s() - f->last_send >= FLPOD_SEND_EVERY_S)
            send_pending(f);
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
            if (w == f->p.pid) {
                *status = st;
                /* What is in the pipes now; a grandchild may hold them. */
                proc_read_lines(&f->p, on_stdout, f);
                proc_read_err_lines(&f->p, on_stderr, f);
                return;
            }
        }
        if (w < 0 && errno == ECHILD) {
            *status = 0;
            return;
        }
    }
}

int main(int argc, char **argv)
{
    const char *dir = getenv("FLPS_POD_SECRETS");
    char prog[PATH_MAX], why[512];
    struct sigaction sa;
    proc_opts po;
    flpod f;
    int status = 0, first = 1;

    if (argc > 1 && strcmp(argv[1], "--") == 0)
        first = 2;
    if (first >= argc || strcmp(argv[1], "--help") == 0) {
        fprintf(argc > 1 ? stdout : stderr,
                "usage: flpod [--] PROGRAM [ARG...]\n"
                "Runs PROGRAM as a pod of flsched's kubernetes launcher: "
                "its credentials\nfrom the job's Secret as a private file, "
                "its lines to the pod's log,\na worker's events to "
                "flsched (docs/deploy.md).\n");
        return first >= argc ? 2 : 0;
    }
    memset(&f, 0, sizeof(f));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (dir == NULL || dir[0] == '\0')
        dir = "/etc/flps/job";
    if (!private_credentials(dir))
        return 2;
    setup_reports(&f, dir);
    if (workerenv_find_program(argv[first], environ, prog, sizeof(prog), why,
                               sizeof(why)) != FLPS_OK) {
        say("%s%s", why, "");
        return 127;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    memset(&po, 0, sizeof(po));
    po.pipe_stderr = 1;
    argv[first] = prog;
    if (proc_start_opts(&f.p, "program", argv + first, &po) != FLPS_OK)
        return 127;
    run(&f, &status);
    /* The last events (done above all) before the pod ends. */
    for (int i = 0; i < 3 && f.reporting && json_array_size(f.pending) > 0;
         i++) {
        if (i > 0)
            sleep(1);
        send_pending(&f);
    }
    if (f.curl != NULL)
        curl_easy_cleanup(f.curl);
    json_decref(f.pending);
    flps_strbuf_fini(&f.answer);
    explicit_bzero(f.auth, sizeof(f.auth));
    curl_global_cleanup();
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
