/* flsubmit's commands: requests to flsched, answers checked and printed,
 * failures turned into one clear line and a documented exit code. */
#include "cli/submit_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/submit_doctor.h"
#include "cli/submit_render.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/strbuf.h"
#include "services/jobspec.h"
#include "services/jsonout.h"

#define SUBMIT_POLL_MS 500L
#define SUBMIT_RETRY_MS 30000L
#define SUBMIT_LOG_PAGE 1000

/* What a request is about, for the error messages. */
typedef enum {
    CALL_OTHER = 0, /* list, nodes */
    CALL_SUBMIT,    /* subject is the job file */
    CALL_JOB,       /* subject is a job id */
    CALL_CANCEL,    /* subject is a job id */
    CALL_PLAN,      /* subject is a job id */
    CALL_LOGS,      /* subject is a job id */
} call_kind;

typedef struct call {
    call_kind kind;
    const char *subject;
    const char *method;
    const char *path;
    const void *body;
    size_t len;
} call;

/* The message of a failed call, and whether waiting could fix it. */
typedef struct call_error {
    char msg[1024];
    int transient;
} call_error;

static void say(submit_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(submit_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    fputs("flsubmit: ", ctx->err);
    va_start(ap, fmt);
    vfprintf(ctx->err, fmt, ap);
    va_end(ap);
    fputc('\n', ctx->err);
    fflush(ctx->err);
}

static int stopped(const submit_ctx *ctx)
{
    return ctx->stop != NULL && *ctx->stop;
}

/* Sleep ms, returning early when SIGINT arrives (nanosleep is not
 * restarted: the handler is installed without SA_RESTART). */
static void nap(const submit_ctx *ctx, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    if (!stopped(ctx))
        nanosleep(&ts, NULL);
}

int submit_cli_exit_for_status(long status)
{
    switch (status) {
    case 400:
    case 413:
        return SUBMIT_EXIT_REFUSED;
    case 401:
    case 403:
        return SUBMIT_EXIT_AUTH;
    case 404:
        return SUBMIT_EXIT_NOT_FOUND;
    case 409:
        return SUBMIT_EXIT_CONFLICT;
    case 422:
        return SUBMIT_EXIT_UNPLACEABLE;
    default:
        return status >= 200 && status < 300 ? SUBMIT_EXIT_OK
                                             : SUBMIT_EXIT_BAD_REPLY;
    }
}

int submit_cli_exit_for_err(flps_err err)
{
    switch (err) {
    case FLPS_OK:
        return SUBMIT_EXIT_OK;
    case FLPS_ECLOSED:
    case FLPS_EIO:
    case FLPS_ECONFIG: /* TLS: cannot talk to it safely as configured */
        return SUBMIT_EXIT_UNREACHABLE;
    case FLPS_ETIMEDOUT:
        return SUBMIT_EXIT_TIMEOUT;
    case FLPS_EINVAL:
        return SUBMIT_EXIT_USAGE;
    case FLPS_ENOMEM:
        return SUBMIT_EXIT_INTERNAL;
    default:
        return SUBMIT_EXIT_BAD_REPLY;
    }
}

/* The server's message in an error body, or a printable excerpt of a body
 * that is not the documented {"error": ...}. */
static void server_message(const submit_reply *r, char *buf, size_t len)
{
    char *msg = NULL;
    size_t n = 0;

    if (submit_render_error_body(r->body, r->len, &msg) == FLPS_OK) {
        snprintf(buf, len, "%s", msg);
        flps_free(msg);
        return;
    }
    if (r->len == 0) {
        snprintf(buf, len, "no message");
        return;
    }
    /* Keep one short line: a proxy's HTML page or a stack trace must not
     * flood the terminal or move the cursor. */
    for (size_t i = 0; i < r->len && n + 4 < len && i < 200; i++) {
        unsigned char c = (unsigned char)r->body[i];

        buf[n++] = c >= 0x20 && c < 0x7f ? (char)c : ' ';
    }
    if (r->len > 200 && n + 4 < len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
}

/* The "state" of an error body (a 409 names the state the job is in). */
static int reply_state(const submit_reply *r, char *buf, size_t len)
{
    json_t *o = json_loadb(r->body, r->len, 0, NULL);
    const char *st = json_string_value(json_object_get(o, "state"));
    int ok = st != NULL && *st != '\0';

    if (ok)
        snprintf(buf, len, "%s", st);
    json_decref(o);
    return ok;
}

/* Does the API document this failure for this call? A 404 to GET /v1/jobs
 * means the URL is not flsched, not that a job is unknown, so it must not
 * exit like an unknown id. */
static int status_fits_call(call_kind kind, int rc)
{
    switch (rc) {
    case SUBMIT_EXIT_REFUSED:
    case SUBMIT_EXIT_UNPLACEABLE:
        return kind == CALL_SUBMIT;
    case SUBMIT_EXIT_NOT_FOUND:
        return kind != CALL_SUBMIT && kind != CALL_OTHER;
    case SUBMIT_EXIT_CONFLICT:
        return kind == CALL_CANCEL;
    default:
        return 1;
    }
}

/* The message for a status the call did not expect. */
static void status_message(const submit_ctx *ctx, const call *c,
                           const submit_reply *r, call_error *e)
{
    const char *url = submit_http_base_url(ctx->http);
    char smsg[512], state[32];

    server_message(r, smsg, sizeof(smsg));
    /* A status the API does not document for this call gets the generic
     * message of the default case. */
    switch (status_fits_call(c->kind, submit_cli_exit_for_status(r->status))
                ? r->status
                : 0) {
    case 400:
        snprintf(e->msg, sizeof(e->msg), "the scheduler refused %s: %s",
                 c->subject, smsg);
        return;
    case 413:
        snprintf(e->msg, sizeof(e->msg),
                 "the scheduler refused %s: the file is too large (limit "
                 "1 MiB): %s",
                 c->subject, smsg);
        return;
    case 401:
    case 403:
        snprintf(e->msg, sizeof(e->msg),
                 "the scheduler at %s refused the request (HTTP %ld: %s); %s",
                 url, r->status, smsg,
                 ctx->token_set ? "FLPS_TOKEN does not match the token in "
                                  "flsched's --token-file"
                                : "set FLPS_TOKEN to the token in flsched's "
                                  "--token-file");
        return;
    case 404:
        /* The server's "no job ID" would only repeat the id. */
        if (c->kind == CALL_PLAN && strncmp(smsg, "no job ", 7) != 0)
            snprintf(e->msg, sizeof(e->msg),
                     "no plan for job %s yet: the scheduler plans jobs with "
                     "compression: auto once their workers have measured "
                     "a warm-up",
                     c->subject);
        else
            snprintf(e->msg, sizeof(e->msg),
                     "unknown job %s: the scheduler at %s has no such job; "
                     "`flsubmit list` shows the jobs",
                     c->subject, url);
        return;
    case 409:
        if (reply_state(r, state, sizeof(state)))
            snprintf(e->msg, sizeof(e->msg),
                     "cannot cancel job %s: it has already finished (%s)",
                     c->subject, state);
        else
            snprintf(e->msg, sizeof(e->msg),
                     "cannot cancel job %s: it has already finished",
                     c->subject);
        return;
    case 422:
        snprintf(e->msg, sizeof(e->msg),
                 "the scheduler refused %s: %s; see `flsubmit nodes`",
                 c->subject, smsg);
        return;
    default:
        e->transient = r->status >= 500;
        snprintf(e->msg, sizeof(e->msg),
                 "the scheduler at %s answered %s %s with HTTP %ld: %s%s", url,
                 c->method, c->path, r->status, smsg,
                 r->status == 404 ? "; is that address really flsched?" : "");
        return;
    }
}

/* Send the call and parse a 2xx answer as a JSON object. Returns the exit
 * code; on SUBMIT_EXIT_OK the caller owns *out, otherwise e says why. */
static int api_try(submit_ctx *ctx, const call *c, json_t **out, call_error *e)
{
    submit_reply r = {0};
    json_error_t jerr;
    json_t *j;
    flps_err err;
    int rc;

    e->msg[0] = '\0';
    e->transient = 0;
    err =
        submit_http_request(ctx->http, c->method, c->path, c->body, c->len, &r);
    if (err != FLPS_OK) {
        rc = submit_cli_exit_for_err(err);
        /* A TLS set-up error does not get better by retrying. */
        e->transient = err != FLPS_ECONFIG && (rc == SUBMIT_EXIT_UNREACHABLE ||
                                               rc == SUBMIT_EXIT_TIMEOUT);
        snprintf(e->msg, sizeof(e->msg), "%s%s",
                 submit_http_last_error(ctx->http),
                 err == FLPS_ECLOSED ? "; is flsched running? set --scheduler "
                                       "or FLPS_SCHEDULER"
                                     : "");
        return rc;
    }
    rc = submit_cli_exit_for_status(r.status);
    if (rc != SUBMIT_EXIT_OK && !status_fits_call(c->kind, rc))
        rc = SUBMIT_EXIT_BAD_REPLY;
    if (rc != SUBMIT_EXIT_OK) {
        status_message(ctx, c, &r, e);
        goto out;
    }
    j = json_loadb(r.body, r.len, 0, &jerr);
    if (!json_is_object(j)) {
        if (j == NULL)
            snprintf(e->msg, sizeof(e->msg),
                     "the scheduler at %s sent a malformed reply to %s %s: "
                     "not JSON (%s at line %d, column %d); is that address "
                     "really flsched?",
                     submit_http_base_url(ctx->http), c->method, c->path,
                     jerr.text, jerr.line, jerr.column);
        else
            snprintf(e->msg, sizeof(e->msg),
                     "the scheduler at %s sent a malformed reply to %s %s: "
                     "expected a JSON object",
                     submit_http_base_url(ctx->http), c->method, c->path);
        json_decref(j);
        rc = SUBMIT_EXIT_BAD_REPLY;
        goto out;
    }
    *out = j;
out:
    submit_reply_fini(&r);
    return rc;
}

/* api_try, printing the error. */
static int api(submit_ctx *ctx, const call *c, json_t **out)
{
    call_error e;
    int rc = api_try(ctx, c, out, &e);

    if (rc != SUBMIT_EXIT_OK)
        say(ctx, "%s", e.msg);
    return rc;
}

/* A reply that is JSON but not what the API documents. */
static int bad_shape(submit_ctx *ctx, const call *c, const char *what)
{
    say(ctx, "the scheduler at %s sent a malformed reply to %s %s: %s",
        submit_http_base_url(ctx->http), c->method, c->path, what);
    return SUBMIT_EXIT_BAD_REPLY;
}

/* One line of JSON, reals in their shortest form (0.25048, not
 * 0.25047999999999998). */
static int print_json(submit_ctx *ctx, const json_t *j)
{
    char *text = NULL;

    if (jsonout_dumps(j, &text) != FLPS_OK) {
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
    }
    if (fprintf(ctx->out, "%s\n", text) < 0) {
        say(ctx, "cannot write the output: %s", strerror(errno));
        flps_free(text);
        return SUBMIT_EXIT_INTERNAL;
    }
    flps_free(text);
    return SUBMIT_EXIT_OK;
}

static int render_failed(submit_ctx *ctx, flps_err err)
{
    say(ctx, "cannot format the answer: %s", flps_strerror(err));
    return SUBMIT_EXIT_INTERNAL;
}

/* Print what a renderer made, or say it ran out of memory. text is read
 * here, after the renderer wrote it: passing the string itself would read
 * it before the renderer runs (argument evaluation is unsequenced). */
static int print_rendered(submit_ctx *ctx, flps_err err, char **text)
{
    if (err != FLPS_OK)
        return render_failed(ctx, err);
    fputs(*text, ctx->out);
    flps_free(*text);
    *text = NULL;
    return SUBMIT_EXIT_OK;
}

/* "/v1/jobs/ID" + suffix, the id escaped. */
static int job_path(submit_ctx *ctx, const char *id, const char *suffix,
                    char *buf, size_t len)
{
    char *esc = NULL;
    int n;

    if (submit_http_escape(id, &esc) != FLPS_OK) {
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
    }
    n = snprintf(buf, len, "/v1/jobs/%s%s", esc, suffix);
    flps_free(esc);
    if (n < 0 || (size_t)n >= len) {
        say(ctx, "job id '%.40s...' is too long", id);
        return SUBMIT_EXIT_USAGE;
    }
    return SUBMIT_EXIT_OK;
}

/* The whole job file, read before anything is sent. */
static int read_job_file(submit_ctx *ctx, const char *file, char **data,
                         size_t *len)
{
    struct stat st;
    flps_strbuf buf = FLPS_STRBUF_INIT;
    size_t n;
    ssize_t got;
    int fd = open(file, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        goto fail_errno;
    if (fstat(fd, &st) != 0)
        goto fail_errno;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        goto fail_errno;
    }
    for (;;) {
        if (flps_strbuf_reserve(&buf, 4096) != FLPS_OK) {
            errno = ENOMEM;
            goto fail_errno;
        }
        /* Read into the room past len, short of the NUL's byte. */
        got = read(fd, buf.data + buf.len, buf.cap - buf.len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            goto fail_errno;
        if (got == 0)
            break;
        buf.len += (size_t)got;
    }
    close(fd);
    buf.data[buf.len] = '\0';
    n = buf.len;
    *data = flps_strbuf_take(&buf); /* not NULL: reserve succeeded */
    *len = n;
    return SUBMIT_EXIT_OK;

fail_errno:
    say(ctx, "cannot read the job file %s: %s; nothing was sent", file,
        strerror(errno));
    flps_strbuf_fini(&buf);
    if (fd >= 0)
        close(fd);
    return SUBMIT_EXIT_FILE;
}

/* An unknown model is refused here, before anything is sent, with the
 * parser's message (which lists the models). Every other check is the
 * scheduler's: it may know keys this flsubmit does not. */
static int check_model(submit_ctx *ctx, const char *file, const char *data,
                       size_t len)
{
    jobspec spec;
    jobspec_where where = {0};
    char err[1024];

    if (jobspec_parse_where(data, len, &spec, err, sizeof(err), &where) ==
            FLPS_ECONFIG &&
        strcmp(where.field, "model") == 0) {
        say(ctx, "%s: %s; nothing was sent", file, err);
        return SUBMIT_EXIT_REFUSED;
    }
    return SUBMIT_EXIT_OK;
}

int submit_cli_submit(submit_ctx *ctx, const char *file)
{
    call c = {CALL_SUBMIT, file, "POST", "/v1/jobs", NULL, 0};
    json_t *job = NULL;
    const char *id;
    char *data = NULL;
    size_t len = 0;
    int rc;

    rc = read_job_file(ctx, file, &data, &len);
    if (rc == SUBMIT_EXIT_OK)
        rc = check_model(ctx, file, data, len);
    if (rc != SUBMIT_EXIT_OK) {
        flps_free(data);
        return rc;
    }
    c.body = data;
    c.len = len;
    rc = api(ctx, &c, &job);
    flps_free(data);
    if (rc != SUBMIT_EXIT_OK)
        return rc;
    id = json_string_value(json_object_get(job, "id"));
    if (id == NULL) {
        rc = bad_shape(ctx, &c, "the job object has no string \"id\"");
    } else if (ctx->json) {
        rc = print_json(ctx, job);
    } else {
        /* The id alone on stdout, so ID=$(flsubmit submit f.yaml) works. */
        fprintf(ctx->out, "%s\n", id);
        if (ctx->err_is_tty)
            fprintf(ctx->err,
                    "submitted %s as %s; follow it with: flsubmit watch %s\n",
                    json_is_string(json_object_get(job, "name"))
                        ? json_string_value(json_object_get(job, "name"))
                        : file,
                    id, id);
    }
    json_decref(job);
    return rc;
}

int submit_cli_list(submit_ctx *ctx)
{
    call c = {CALL_OTHER, NULL, "GET", "/v1/jobs", NULL, 0};
    json_t *page = NULL, *jobs;
    char *text = NULL;
    int rc = api(ctx, &c, &page);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    jobs = json_object_get(page, "jobs");
    if (!json_is_array(jobs))
        rc = bad_shape(ctx, &c, "no \"jobs\" array");
    else if (ctx->json)
        rc = print_json(ctx, page);
    else
        rc = print_rendered(ctx, submit_render_jobs(jobs, flps_wall_s(), &text),
                            &text);
    json_decref(page);
    return rc;
}

/* GET /v1/jobs/{id}, checked to be a job object. */
static int get_job(submit_ctx *ctx, const call *c, json_t **out, call_error *e)
{
    json_t *job = NULL;
    int rc = api_try(ctx, c, &job, e);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (!json_is_string(json_object_get(job, "state"))) {
        snprintf(e->msg, sizeof(e->msg),
                 "the scheduler at %s sent a malformed reply to %s %s: the "
                 "job object has no string \"state\"",
                 submit_http_base_url(ctx->http), c->method, c->path);
        json_decref(job);
        return SUBMIT_EXIT_BAD_REPLY;
    }
    *out = job;
    return SUBMIT_EXIT_OK;
}

/* Call c on "/v1/jobs/ID" + suffix (c->path is path, len bytes; c->subject
 * the id), printing any error. On SUBMIT_EXIT_OK the caller owns *out. */
static int job_api(submit_ctx *ctx, const call *c, const char *suffix,
                   char *path, size_t len, json_t **out)
{
    int rc = job_path(ctx, c->subject, suffix, path, len);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    return api(ctx, c, out);
}

/* get_job on "/v1/jobs/ID" (c->path is path, len bytes), printing any
 * error. On SUBMIT_EXIT_OK the caller owns *out. */
static int job_get(submit_ctx *ctx, const call *c, char *path, size_t len,
                   json_t **out)
{
    call_error e;
    int rc = job_path(ctx, c->subject, "", path, len);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    rc = get_job(ctx, c, out, &e);
    if (rc != SUBMIT_EXIT_OK)
        say(ctx, "%s", e.msg);
    return rc;
}

int submit_cli_status(submit_ctx *ctx, const char *id)
{
    char path[512];
    call c = {CALL_JOB, id, "GET", path, NULL, 0};
    json_t *job = NULL;
    char *text = NULL;
    int rc = job_get(ctx, &c, path, sizeof(path), &job);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (ctx->json)
        rc = print_json(ctx, job);
    else
        rc = print_rendered(ctx, submit_render_status(job, &text), &text);
    json_decref(job);
    return rc;
}

static int term_width(const submit_ctx *ctx)
{
    struct winsize ws;

    if (ioctl(fileno(ctx->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/* The watch loop's memory between polls. */
typedef struct watch_state {
    char state[32];
    double attempt;
    int decile;        /* last tenth of progress printed (non-TTY) */
    int line_open;     /* a TTY progress line waits for its newline */
    double fail_since; /* monotonic time of the first failed poll, or < 0 */
} watch_state;

static void end_line(submit_ctx *ctx, watch_state *w)
{
    if (w->line_open) {
        fputc('\n', ctx->out);
        w->line_open = 0;
    }
}

/* Print what changed since the last poll. */
static int watch_show(submit_ctx *ctx, watch_state *w, const json_t *job)
{
    const char *state = json_string_value(json_object_get(job, "state"));
    json_t *a = json_object_get(job, "attempt");
    double attempt = json_is_number(a) ? json_number_value(a) : 0;
    char *text = NULL;
    flps_err err;
    int decile;

    if (strcmp(state, w->state) != 0 || attempt != w->attempt) {
        if (!submit_render_state_is_final(state)) {
            end_line(ctx, w);
            err = submit_render_state_line(job, &text);
            if (err != FLPS_OK)
                return render_failed(ctx, err);
            fprintf(ctx->out, "%s\n", text);
            flps_free(text);
        }
        snprintf(w->state, sizeof(w->state), "%s", state);
        w->attempt = attempt;
        w->decile = -1;
    }
    if (strcmp(state, "RUNNING") != 0)
        return SUBMIT_EXIT_OK;
    decile = (int)floor(submit_render_fraction(job) * 10);
    if (!ctx->out_is_tty && decile <= w->decile)
        return SUBMIT_EXIT_OK;
    err = submit_render_progress(job, ctx->out_is_tty ? term_width(ctx) : 0,
                                 &text);
    if (err != FLPS_OK)
        return render_failed(ctx, err);
    if (ctx->out_is_tty) {
        /* Redraw in place; ESC[K clears what a longer line left. */
        fprintf(ctx->out, "\r%s\033[K", text);
        w->line_open = 1;
    } else {
        fprintf(ctx->out, "%s\n", text);
        w->decile = decile;
    }
    flps_free(text);
    fflush(ctx->out);
    return SUBMIT_EXIT_OK;
}

int submit_cli_watch(submit_ctx *ctx, const char *id)
{
    char path[512];
    call c = {CALL_JOB, id, "GET", path, NULL, 0};
    watch_state w = {.attempt = -1, .decile = -1, .fail_since = -1};
    long poll = ctx->poll_ms > 0 ? ctx->poll_ms : SUBMIT_POLL_MS;
    long retry = ctx->retry_ms > 0 ? ctx->retry_ms : SUBMIT_RETRY_MS;
    json_t *job = NULL;
    const char *state;
    char *text = NULL;
    call_error e;
    int rc = job_path(ctx, id, "", path, sizeof(path));

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    for (;;) {
        double t0 = flps_mono_s(), spent;

        if (stopped(ctx)) {
            end_line(ctx, &w);
            say(ctx,
                "stopped watching %s; the job goes on (flsubmit cancel "
                "%s stops it)",
                id, id);
            return SUBMIT_EXIT_INTERRUPTED;
        }
        rc = get_job(ctx, &c, &job, &e);
        if (rc != SUBMIT_EXIT_OK) {
            /* A scheduler restart or a leader change is not the end of
             * the job: ride it out for a while, say so once. */
            if (!e.transient ||
                (w.fail_since >= 0 &&
                 (flps_mono_s() - w.fail_since) * 1000 > retry)) {
                end_line(ctx, &w);
                say(ctx, "%s", e.msg);
                return rc;
            }
            if (w.fail_since < 0) {
                w.fail_since = flps_mono_s();
                end_line(ctx, &w);
                say(ctx, "%s; retrying for up to %ld s", e.msg, retry / 1000);
            }
            nap(ctx, poll);
            continue;
        }
        w.fail_since = -1;
        state = json_string_value(json_object_get(job, "state"));
        if (!ctx->json) {
            rc = watch_show(ctx, &w, job);
            if (rc != SUBMIT_EXIT_OK)
                break;
        }
        if (submit_render_state_is_final(state)) {
            if (ctx->json) {
                rc = print_json(ctx, job);
            } else {
                end_line(ctx, &w);
                rc = print_rendered(ctx, submit_render_summary(job, &text),
                                    &text);
            }
            if (rc == SUBMIT_EXIT_OK && strcmp(state, "SUCCEEDED") != 0)
                rc = SUBMIT_EXIT_JOB_FAILED;
            break;
        }
        json_decref(job);
        job = NULL;
        spent = (flps_mono_s() - t0) * 1000;
        if (spent < poll)
            nap(ctx, poll - (long)spent);
    }
    json_decref(job);
    return rc;
}

int submit_cli_cancel(submit_ctx *ctx, const char *id)
{
    char path[512];
    call c = {CALL_CANCEL, id, "DELETE", path, NULL, 0};
    json_t *job = NULL;
    char *text = NULL;
    int rc = job_api(ctx, &c, "", path, sizeof(path), &job);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (ctx->json)
        rc = print_json(ctx, job);
    else
        rc = print_rendered(ctx, submit_render_state_line(job, &text), &text);
    if (!ctx->json && rc == SUBMIT_EXIT_OK)
        fputc('\n', ctx->out);
    json_decref(job);
    return rc;
}

static int job_is_active(const json_t *job)
{
    const char *st = json_string_value(json_object_get(job, "state"));

    return st != NULL &&
           (strcmp(st, "QUEUED") == 0 || strcmp(st, "RUNNING") == 0);
}

/* GET /v1/jobs, checked to hold a "jobs" array, printing any error. On
 * SUBMIT_EXIT_OK the caller owns *page and *jobs is borrowed from it. */
static int get_jobs(submit_ctx *ctx, json_t **page, json_t **jobs)
{
    call c = {CALL_OTHER, NULL, "GET", "/v1/jobs", NULL, 0};
    int rc = api(ctx, &c, page);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    *jobs = json_object_get(*page, "jobs");
    if (!json_is_array(*jobs)) {
        json_decref(*page);
        return bad_shape(ctx, &c, "no \"jobs\" array");
    }
    return SUBMIT_EXIT_OK;
}

int submit_cli_cancel_latest(submit_ctx *ctx)
{
    json_t *page = NULL, *jobs = NULL, *job;
    char id[64] = "";
    int rc = get_jobs(ctx, &page, &jobs);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    /* The list is in submission order: the last active one is latest. */
    for (size_t i = json_array_size(jobs); i-- > 0 && id[0] == '\0';) {
        job = json_array_get(jobs, i);
        if (job_is_active(job) && json_is_string(json_object_get(job, "id")))
            snprintf(id, sizeof(id), "%s",
                     json_string_value(json_object_get(job, "id")));
    }
    json_decref(page);
    if (id[0] == '\0') {
        say(ctx, "no queued or running job to cancel; `flsubmit list` shows "
                 "the jobs");
        return SUBMIT_EXIT_NOT_FOUND;
    }
    return submit_cli_cancel(ctx, id);
}

int submit_cli_cancel_all(submit_ctx *ctx)
{
    json_t *page = NULL, *jobs = NULL, *job, *done;
    char path[512], *text = NULL;
    call_error e;
    size_t i, n = 0;
    int rc = get_jobs(ctx, &page, &jobs), worst = SUBMIT_EXIT_OK;

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    json_array_foreach(jobs, i, job)
    {
        const char *id = json_string_value(json_object_get(job, "id"));
        call c = {CALL_CANCEL, id, "DELETE", path, NULL, 0};

        if (!job_is_active(job) || id == NULL)
            continue;
        rc = job_path(ctx, id, "", path, sizeof(path));
        if (rc == SUBMIT_EXIT_OK)
            rc = api_try(ctx, &c, &done, &e);
        else
            e.msg[0] = '\0';
        if (rc == SUBMIT_EXIT_CONFLICT)
            continue; /* it finished between the list and the cancel */
        if (rc != SUBMIT_EXIT_OK) {
            if (e.msg[0] != '\0')
                say(ctx, "%s", e.msg);
            if (worst == SUBMIT_EXIT_OK)
                worst = rc;
            continue;
        }
        n++;
        if (ctx->json)
            rc = print_json(ctx, done);
        else
            rc = print_rendered(ctx, submit_render_state_line(done, &text),
                                &text);
        if (!ctx->json && rc == SUBMIT_EXIT_OK)
            fputc('\n', ctx->out);
        json_decref(done);
        if (rc != SUBMIT_EXIT_OK && worst == SUBMIT_EXIT_OK)
            worst = rc;
    }
    json_decref(page);
    if (n == 0 && worst == SUBMIT_EXIT_OK && !ctx->json)
        fprintf(ctx->out, "No queued or running jobs.\n");
    return worst;
}

/* Is the job final? For logs --follow; errors are printed. */
static int job_is_final(submit_ctx *ctx, const char *id, int *final)
{
    char path[512];
    call c = {CALL_LOGS, id, "GET", path, NULL, 0};
    json_t *job = NULL;
    int rc = job_get(ctx, &c, path, sizeof(path), &job);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    *final = submit_render_state_is_final(
        json_string_value(json_object_get(job, "state")));
    json_decref(job);
    return SUBMIT_EXIT_OK;
}

/* Print one page of log lines; *n is how many there were. */
int submit_cli_is_event_line(const char *line)
{
    json_t *o;
    int yes;

    if (line == NULL || line[0] != '{')
        return 0;
    o = json_loads(line, 0, NULL);
    yes = json_is_string(json_object_get(o, "event"));
    json_decref(o);
    return yes;
}

static int print_log_page(submit_ctx *ctx, const call *c, json_t *lines,
                          int events, size_t *n)
{
    json_t *line;
    char *text = NULL;
    size_t i;
    int rc = SUBMIT_EXIT_OK;

    json_array_foreach(lines, i, line)
    {
        if (!json_is_object(line))
            return bad_shape(ctx, c, "a log line is not an object");
        /* The workers' events are for their agent, not for people. */
        if (!events && submit_cli_is_event_line(
                           json_string_value(json_object_get(line, "line"))))
            continue;
        if (ctx->json)
            rc = print_json(ctx, line);
        else
            rc =
                print_rendered(ctx, submit_render_log_line(line, &text), &text);
        if (rc != SUBMIT_EXIT_OK)
            return rc;
    }
    fflush(ctx->out);
    *n = json_array_size(lines);
    return SUBMIT_EXIT_OK;
}

int submit_cli_logs(submit_ctx *ctx, const char *id, int follow, int events)
{
    char path[1024], suffix[512], cursor[256] = "";
    call c = {CALL_LOGS, id, "GET", path, NULL, 0};
    long poll = ctx->poll_ms > 0 ? ctx->poll_ms : SUBMIT_POLL_MS;
    json_t *page = NULL, *lines, *next;
    int final = 0, rc = SUBMIT_EXIT_OK;
    char *esc = NULL;
    size_t n = 0;

    while (!stopped(ctx)) {
        if (cursor[0] != '\0') {
            if (submit_http_escape(cursor, &esc) != FLPS_OK) {
                say(ctx, "out of memory");
                return SUBMIT_EXIT_INTERNAL;
            }
            snprintf(suffix, sizeof(suffix), "/logs?after=%s&limit=%d", esc,
                     SUBMIT_LOG_PAGE);
            flps_free(esc);
        } else {
            snprintf(suffix, sizeof(suffix), "/logs?limit=%d", SUBMIT_LOG_PAGE);
        }
        rc = job_api(ctx, &c, suffix, path, sizeof(path), &page);
        if (rc != SUBMIT_EXIT_OK)
            return rc;
        lines = json_object_get(page, "lines");
        if (!json_is_array(lines)) {
            json_decref(page);
            return bad_shape(ctx, &c, "no \"lines\" array");
        }
        rc = print_log_page(ctx, &c, lines, events, &n);
        next = json_object_get(page, "next");
        /* A page that does not move the cursor ends the draining, so a
         * server that ignores `after` cannot make us print forever. */
        if (n > 0 && (!json_is_string(next) || json_string_length(next) == 0 ||
                      strcmp(json_string_value(next), cursor) == 0))
            n = 0;
        else if (json_is_string(next) && json_string_length(next) > 0)
            snprintf(cursor, sizeof(cursor), "%s", json_string_value(next));
        json_decref(page);
        if (rc != SUBMIT_EXIT_OK)
            return rc;
        if (n > 0)
            continue; /* more may be waiting: drain before sleeping */
        if (!follow || final)
            return SUBMIT_EXIT_OK;
        /* Checked after an empty page, then one more page is read: the
         * last lines of a job are written before it becomes final. */
        rc = job_is_final(ctx, id, &final);
        if (rc != SUBMIT_EXIT_OK)
            return rc;
        if (!final)
            nap(ctx, poll);
    }
    return SUBMIT_EXIT_INTERRUPTED;
}

int submit_cli_nodes(submit_ctx *ctx)
{
    call c = {CALL_OTHER, NULL, "GET", "/v1/nodes", NULL, 0};
    json_t *page = NULL, *nodes;
    char *text = NULL;
    int rc = api(ctx, &c, &page);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    nodes = json_object_get(page, "nodes");
    if (!json_is_array(nodes))
        rc = bad_shape(ctx, &c, "no \"nodes\" array");
    else if (ctx->json)
        rc = print_json(ctx, page);
    else
        rc = print_rendered(
            ctx, submit_render_nodes(nodes, flps_wall_s(), &text), &text);
    json_decref(page);
    return rc;
}

int submit_cli_plan(submit_ctx *ctx, const char *id)
{
    char path[512];
    call c = {CALL_PLAN, id, "GET", path, NULL, 0};
    json_t *plan = NULL;
    char *text = NULL;
    int rc = job_api(ctx, &c, "/plan", path, sizeof(path), &plan);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (ctx->json)
        rc = print_json(ctx, plan);
    else
        rc = print_rendered(ctx, submit_render_plan(plan, id, &text), &text);
    json_decref(plan);
    return rc;
}

const char *submit_cli_closest(const char *word, const char *const *words,
                               size_t n)
{
    size_t wl = strlen(word), best_d = (size_t)-1;
    const char *best = NULL;

    if (wl > 32)
        return NULL;
    for (size_t k = 0; k < n; k++) {
        /* Levenshtein distance over two rows; words are short. */
        size_t cl = strlen(words[k]), prev[34], cur[34];

        if (cl > 32)
            continue;
        for (size_t j = 0; j <= cl; j++)
            prev[j] = j;
        for (size_t i = 1; i <= wl; i++) {
            cur[0] = i;
            for (size_t j = 1; j <= cl; j++) {
                size_t sub = prev[j - 1] + (word[i - 1] != words[k][j - 1]);
                size_t del = prev[j] + 1, ins = cur[j - 1] + 1;

                cur[j] = sub < del ? (sub < ins ? sub : ins)
                                   : (del < ins ? del : ins);
            }
            memcpy(prev, cur, (cl + 1) * sizeof(prev[0]));
        }
        if (prev[cl] < best_d) {
            best_d = prev[cl];
            best = words[k];
        }
    }
    if (best == NULL || best_d > 2 || best_d * 2 >= wl)
        return NULL;
    return best;
}

/* What --job FILE asks of the nodes. */
static int doctor_job(submit_ctx *ctx, const char *file, submit_doctor_job *job)
{
    jobspec spec;
    char err[1024], *data = NULL;
    size_t len = 0;
    int rc = read_job_file(ctx, file, &data, &len);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (jobspec_parse(data, len, &spec, err, sizeof(err)) != FLPS_OK) {
        flps_free(data);
        say(ctx, "%s: %s", file, err);
        return SUBMIT_EXIT_REFUSED;
    }
    flps_free(data);
    job->given = 1;
    job->rdma = spec.transport == JOBSPEC_TRANSPORT_RDMA;
    job->rdma_auto = spec.transport == JOBSPEC_TRANSPORT_AUTO;
    job->synthetic = spec.dataset == JOBSPEC_DATASET_SYNTHETIC;
    return SUBMIT_EXIT_OK;
}

int submit_cli_doctor(submit_ctx *ctx, const char *job_file)
{
    call c = {CALL_OTHER, NULL, "GET", "/v1/info", NULL, 0};
    submit_doctor_job job = {0};
    json_t *info = NULL;
    char names[256] = "", *text = NULL;
    call_error e;
    int rc = SUBMIT_EXIT_OK, failed = 0;
    flps_err err;

    if (job_file != NULL)
        rc = doctor_job(ctx, job_file, &job);
    if (rc != SUBMIT_EXIT_OK)
        return rc;
    rc = api_try(ctx, &c, &info, &e);
    if (rc != SUBMIT_EXIT_OK) {
        /* Nothing else can be checked without the scheduler. */
        json_t *o = json_pack("{s:b,s:[{s:s,s:b,s:s}]}", "ok", 0, "checks",
                              "check", "scheduler", "ok", 0, "message", e.msg);

        if (ctx->json && o != NULL)
            print_json(ctx, o);
        else
            fprintf(ctx->out, "%-5s %-10s %s\n", "FAIL", "scheduler", e.msg);
        json_decref(o);
        say(ctx, "doctor: 1 check failed: scheduler");
        return rc;
    }
    err = submit_doctor_report(info, submit_http_base_url(ctx->http), &job,
                               ctx->json, &text, &failed, names, sizeof(names));
    json_decref(info);
    rc = print_rendered(ctx, err, &text);
    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (failed > 0) {
        say(ctx, "doctor: %d check%s failed: %s", failed,
            failed == 1 ? "" : "s", names);
        return SUBMIT_EXIT_CHECK_FAILED;
    }
    return SUBMIT_EXIT_OK;
}
