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
#include "services/event.h"
#include "services/jobspec.h"
#include "services/jsonout.h"
#include "services/plural.h"
#include "services/textguard.h"
#include "services/yamlout.h"

#define SUBMIT_POLL_MS 500L
#define SUBMIT_RETRY_MS 30000L
#define SUBMIT_LOG_PAGE 1000
/* Room for any message of the job-file parser, which writes into its
 * caller's buffer: it quotes a value cut at JOBSPEC_SHOW_MAX bytes and
 * lists the keys at most, so its longest message is far shorter. */
#define SUBMIT_SPEC_ERR 4096

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
    const jobspec_flags *flags; /* a submit with the job's flags, or NULL */
} call;

/* The message of a failed call, and whether waiting could fix it. The
 * message grows to fit: a server's text is shown whole, however long. */
typedef struct call_error {
    flps_strbuf msg;
    int transient;
} call_error;

#define CALL_ERROR_INIT                                                        \
    {                                                                          \
        FLPS_STRBUF_INIT, 0                                                    \
    }

/* Replace e's message with formatted text. */
#define err_set(e, ...)                                                        \
    (flps_strbuf_clear(&(e)->msg), flps_strbuf_printf(&(e)->msg, __VA_ARGS__))

/* e's message: "" when none was set, "out of memory" when it could not
 * be. Borrowed until e changes. */
static const char *err_text(const call_error *e)
{
    if (flps_strbuf_error(&e->msg) != FLPS_OK)
        return "out of memory";
    return e->msg.data != NULL ? e->msg.data : "";
}

static void err_fini(call_error *e)
{
    flps_strbuf_fini(&e->msg);
}

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

/* A body that is not the documented {"error": ...} is shown as its first
 * SUBMIT_EXCERPT bytes, made printable. */
#define SUBMIT_EXCERPT 200

/* The server's message in an error body, whole, or a printable excerpt
 * of a body that is not the documented {"error": ...}. NULL when out of
 * memory. Ownership: the caller owns the result (flps_free). */
static char *server_message(const submit_reply *r)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    char *msg = NULL;

    if (submit_render_error_body(r->body, r->len, &msg) == FLPS_OK)
        return msg;
    if (r->len == 0)
        return flps_strdup("no message");
    /* Keep one short line: a proxy's HTML page or a stack trace must not
     * flood the terminal or move the cursor. */
    for (size_t i = 0; i < r->len && i < SUBMIT_EXCERPT; i++) {
        unsigned char c = (unsigned char)r->body[i];
        char ch = c >= 0x20 && c < 0x7f ? (char)c : ' ';

        flps_strbuf_append(&b, &ch, 1);
    }
    if (r->len > SUBMIT_EXCERPT)
        flps_strbuf_puts(&b, "...");
    return flps_strbuf_take(&b);
}

/* The "state" of an error body (a 409 names the state the job is in), or
 * NULL. Ownership: the caller owns the result (flps_free). */
static char *reply_state(const submit_reply *r)
{
    json_t *o = json_loadb(r->body, r->len, 0, NULL);
    const char *st = json_string_value(json_object_get(o, "state"));
    char *copy = st != NULL && *st != '\0' ? flps_strdup(st) : NULL;

    json_decref(o);
    return copy;
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

/* msg (the server's message about a job given flags) with its "line N:
 * KEY:" put as the flag that wrote line N ("--compression: 'x' is not a
 * codec ..."), or NULL when it is about no flag's line. Ownership: the
 * caller owns the result (flps_free). */
static char *flag_message(const jobspec_flags *flags, const submit_reply *r,
                          const char *msg)
{
    json_t *o = json_loadb(r->body, r->len, 0, NULL);
    json_t *line = json_object_get(o, "line");
    const char *field = json_string_value(json_object_get(o, "field"));
    jobspec_where where = {0};
    size_t len = strlen(msg) + 64; /* room for the longest --FLAG: */
    char *out = NULL;

    if (json_is_integer(line) && json_integer_value(line) > 0 &&
        field != NULL) {
        where.line = (unsigned long)json_integer_value(line);
        snprintf(where.field, sizeof(where.field), "%s", field);
        out = flps_malloc(len);
        if (out != NULL &&
            !jobspec_flags_explain(flags, &where, msg, out, len)) {
            flps_free(out);
            out = NULL;
        }
    }
    json_decref(o);
    return out;
}

/* The message for a status the call did not expect. */
static void status_message(const submit_ctx *ctx, const call *c,
                           const submit_reply *r, call_error *e)
{
    const char *url = submit_http_base_url(ctx->http);
    char *smsg = server_message(r), *state = NULL, *fmsg = NULL;
    const char *msg = smsg != NULL ? smsg : "out of memory";

    /* A job said in flags: the message about a line names its flag. */
    if (c->flags != NULL && smsg != NULL) {
        fmsg = flag_message(c->flags, r, smsg);
        if (fmsg != NULL)
            msg = fmsg;
    }

    /* A status the API does not document for this call gets the generic
     * message of the default case. */
    switch (status_fits_call(c->kind, submit_cli_exit_for_status(r->status))
                ? r->status
                : 0) {
    case 400:
        err_set(e, "the scheduler refused %s: %s", c->subject, msg);
        break;
    case 413:
        err_set(e,
                "the scheduler refused %s: the file is too large (limit "
                "1 MiB): %s",
                c->subject, msg);
        break;
    case 401:
    case 403:
        err_set(e, "the scheduler at %s refused the request (HTTP %ld: %s); %s",
                url, r->status, msg,
                ctx->token_set ? "FLPS_TOKEN does not match the token in "
                                 "flsched's --token-file"
                               : "set FLPS_TOKEN to the token in flsched's "
                                 "--token-file");
        break;
    case 404:
        /* The server's "no job ID" would only repeat the id. */
        if (c->kind == CALL_PLAN && strncmp(msg, "no job ", 7) != 0)
            err_set(e,
                    "no plan for job %s yet: the scheduler plans jobs with "
                    "compression: auto once their workers have measured "
                    "a warm-up",
                    c->subject);
        else
            err_set(e,
                    "unknown job %s: the scheduler at %s has no such job; "
                    "`flsubmit list` shows the jobs",
                    c->subject, url);
        break;
    case 409:
        state = reply_state(r);
        if (state != NULL)
            err_set(e, "cannot cancel job %s: it has already finished (%s)",
                    c->subject, state);
        else
            err_set(e, "cannot cancel job %s: it has already finished",
                    c->subject);
        break;
    case 422:
        err_set(e, "the scheduler refused %s: %s; see `flsubmit nodes`",
                c->subject, msg);
        break;
    default:
        e->transient = r->status >= 500;
        err_set(e, "the scheduler at %s answered %s %s with HTTP %ld: %s%s",
                url, c->method, c->path, r->status, msg,
                r->status == 404 ? "; is that address really flsched?" : "");
        break;
    }
    flps_free(state);
    flps_free(fmsg);
    flps_free(smsg);
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

    flps_strbuf_clear(&e->msg);
    e->transient = 0;
    err =
        submit_http_request(ctx->http, c->method, c->path, c->body, c->len, &r);
    if (err != FLPS_OK) {
        rc = submit_cli_exit_for_err(err);
        /* A TLS set-up error does not get better by retrying. */
        e->transient = err != FLPS_ECONFIG && (rc == SUBMIT_EXIT_UNREACHABLE ||
                                               rc == SUBMIT_EXIT_TIMEOUT);
        err_set(e, "%s%s", submit_http_last_error(ctx->http),
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
            err_set(e,
                    "the scheduler at %s sent a malformed reply to %s %s: "
                    "not JSON (%s at line %d, column %d); is that address "
                    "really flsched?",
                    submit_http_base_url(ctx->http), c->method, c->path,
                    jerr.text, jerr.line, jerr.column);
        else
            err_set(e,
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
    call_error e = CALL_ERROR_INIT;
    int rc = api_try(ctx, c, out, &e);

    if (rc != SUBMIT_EXIT_OK)
        say(ctx, "%s", err_text(&e));
    err_fini(&e);
    return rc;
}

/* A reply that is JSON but not what the API documents. */
static int bad_shape(submit_ctx *ctx, const call *c, const char *what)
{
    say(ctx, "the scheduler at %s sent a malformed reply to %s %s: %s",
        submit_http_base_url(ctx->http), c->method, c->path, what);
    return SUBMIT_EXIT_BAD_REPLY;
}

/* One object as -o asked: a line of JSON, reals in their shortest form
 * (0.25048, not 0.25047999999999998), or a YAML document, "---" between
 * documents when a command prints several (logs, cancel --all). */
static int print_json(submit_ctx *ctx, const json_t *j)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    flps_err err;

    if (ctx->yaml && ctx->ndocs > 0)
        flps_strbuf_puts(&b, "---\n");
    if (ctx->yaml) {
        err = yamlout_append(&b, j);
    } else {
        err = jsonout_append(&b, j);
        flps_strbuf_puts(&b, "\n");
    }
    if (err != FLPS_OK || flps_strbuf_error(&b) != FLPS_OK) {
        flps_strbuf_fini(&b);
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
    }
    ctx->ndocs++;
    if (fwrite(b.data, 1, b.len, ctx->out) != b.len) {
        say(ctx, "cannot write the output: %s", strerror(errno));
        flps_strbuf_fini(&b);
        return SUBMIT_EXIT_INTERNAL;
    }
    flps_strbuf_fini(&b);
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

/* "/v1/jobs/ID" + suffix, the id escaped, as long as they make it.
 * Ownership: on SUBMIT_EXIT_OK the caller owns *path (flps_free). */
static int job_path(submit_ctx *ctx, const char *id, const char *suffix,
                    char **path)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    char *esc = NULL;

    if (submit_http_escape(id, &esc) != FLPS_OK) {
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
    }
    flps_strbuf_printf(&b, "/v1/jobs/%s%s", esc, suffix);
    flps_free(esc);
    *path = flps_strbuf_take(&b);
    if (*path == NULL) {
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
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

/* A file that is not UTF-8 text (a checkpoint, a UTF-16 or Latin-1 file)
 * and an unknown model are refused here, before anything is sent, naming
 * the file (or, for a job said in flags, --model): what it is instead, or
 * the parser's message (which lists the models). Every other check is the
 * scheduler's: it may know keys this flsubmit does not, and whether a job
 * needs a model: at all (a command: job's program brings its own). */
static int check_model(submit_ctx *ctx, const call *c)
{
    jobspec spec;
    jobspec_where where = {0};
    char err[SUBMIT_SPEC_ERR], named[SUBMIT_SPEC_ERR + 64];

    if (textguard_text(c->body, c->len, "the job file", err, sizeof(err),
                       NULL) != FLPS_OK) {
        say(ctx, "%s: %s; nothing was sent", c->subject, err);
        return SUBMIT_EXIT_REFUSED;
    }
    if (jobspec_parse_where(c->body, c->len, &spec, err, sizeof(err), &where) !=
            FLPS_ECONFIG ||
        strcmp(where.field, "model") != 0 || where.line == 0)
        return SUBMIT_EXIT_OK;
    if (c->flags != NULL &&
        jobspec_flags_explain(c->flags, &where, err, named, sizeof(named)))
        say(ctx, "%s; nothing was sent", named);
    else
        say(ctx, "%s: %s; nothing was sent", c->subject, err);
    return SUBMIT_EXIT_REFUSED;
}

/* Check the job text of c, send it, and print the new job's id (or the
 * job object). */
static int submit_call(submit_ctx *ctx, const call *c)
{
    json_t *job = NULL;
    const char *id;
    int rc = check_model(ctx, c);

    if (rc == SUBMIT_EXIT_OK)
        rc = api(ctx, c, &job);
    if (rc != SUBMIT_EXIT_OK)
        return rc;
    id = json_string_value(json_object_get(job, "id"));
    if (id == NULL) {
        rc = bad_shape(ctx, c, "the job object has no string \"id\"");
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
                        : c->subject,
                    id, id);
    }
    json_decref(job);
    return rc;
}

int submit_cli_submit(submit_ctx *ctx, const char *file, jobspec_flags *flags)
{
    call c = {CALL_SUBMIT, file != NULL ? file : "the job",
              "POST",      "/v1/jobs",
              NULL,        0,
              NULL};
    char err[SUBMIT_SPEC_ERR], *data = NULL, *text = NULL;
    size_t len = 0;
    flps_err ferr;
    int rc =
        file != NULL ? read_job_file(ctx, file, &data, &len) : SUBMIT_EXIT_OK;

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (!jobspec_flags_given(flags)) {
        /* The file as it is: flsched says what is wrong with it. */
        c.body = data;
        c.len = len;
    } else {
        ferr = jobspec_flags_text(flags, data, len, &text, &c.len, err,
                                  sizeof(err));
        if (ferr != FLPS_OK) {
            say(ctx, "%s; nothing was sent",
                ferr == FLPS_ENOMEM ? "out of memory" : err);
            flps_free(data);
            return ferr == FLPS_ENOMEM ? SUBMIT_EXIT_INTERNAL
                                       : SUBMIT_EXIT_REFUSED;
        }
        c.body = text;
        c.flags = flags;
    }
    rc = submit_call(ctx, &c);
    flps_free(text);
    flps_free(data);
    return rc;
}

int submit_cli_list(submit_ctx *ctx)
{
    call c = {CALL_OTHER, NULL, "GET", "/v1/jobs", NULL, 0, NULL};
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
        rc = print_rendered(
            ctx,
            (ctx->wide ? submit_render_jobs_wide
                       : submit_render_jobs)(jobs, flps_wall_s(), &text),
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
        err_set(e,
                "the scheduler at %s sent a malformed reply to %s %s: the "
                "job object has no string \"state\"",
                submit_http_base_url(ctx->http), c->method, c->path);
        json_decref(job);
        return SUBMIT_EXIT_BAD_REPLY;
    }
    *out = job;
    return SUBMIT_EXIT_OK;
}

/* METHOD "/v1/jobs/ID" + suffix, a call of kind about job id, printing
 * any error. On SUBMIT_EXIT_OK the caller owns *out. */
static int job_api(submit_ctx *ctx, call_kind kind, const char *method,
                   const char *id, const char *suffix, json_t **out)
{
    call c = {kind, id, method, NULL, NULL, 0, NULL};
    char *path = NULL;
    int rc = job_path(ctx, id, suffix, &path);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    c.path = path;
    rc = api(ctx, &c, out);
    flps_free(path);
    return rc;
}

/* get_job on "/v1/jobs/ID", a call of kind about job id, printing any
 * error. On SUBMIT_EXIT_OK the caller owns *out. */
static int job_get(submit_ctx *ctx, call_kind kind, const char *id,
                   json_t **out)
{
    call c = {kind, id, "GET", NULL, NULL, 0, NULL};
    call_error e = CALL_ERROR_INIT;
    char *path = NULL;
    int rc = job_path(ctx, id, "", &path);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    c.path = path;
    rc = get_job(ctx, &c, out, &e);
    if (rc != SUBMIT_EXIT_OK)
        say(ctx, "%s", err_text(&e));
    err_fini(&e);
    flps_free(path);
    return rc;
}

int submit_cli_status(submit_ctx *ctx, const char *id)
{
    json_t *job = NULL;
    char *text = NULL;
    int rc = job_get(ctx, CALL_JOB, id, &job);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    if (ctx->json)
        rc = print_json(ctx, job);
    else
        rc = print_rendered(ctx,
                            (ctx->wide ? submit_render_status_wide
                                       : submit_render_status)(job, &text),
                            &text);
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
    char *state; /* the last state seen, or NULL; owned */
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

    if (w->state == NULL || strcmp(state, w->state) != 0 ||
        attempt != w->attempt) {
        if (!submit_render_state_is_final(state)) {
            end_line(ctx, w);
            err = submit_render_state_line(job, &text);
            if (err != FLPS_OK)
                return render_failed(ctx, err);
            fprintf(ctx->out, "%s\n", text);
            flps_free(text);
        }
        flps_free(w->state);
        w->state = flps_strdup(state);
        if (w->state == NULL)
            return render_failed(ctx, FLPS_ENOMEM);
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

/* One poll of watch that failed with e: the exit code to stop with, or
 * -1 to poll again (a scheduler restart or a leader change is not the
 * end of the job: it is ridden out for a while, and said once). */
static int watch_failed(submit_ctx *ctx, watch_state *w, const call_error *e,
                        int rc, long retry)
{
    if (!e->transient || (w->fail_since >= 0 &&
                          (flps_mono_s() - w->fail_since) * 1000 > retry)) {
        end_line(ctx, w);
        say(ctx, "%s", err_text(e));
        return rc;
    }
    if (w->fail_since < 0) {
        w->fail_since = flps_mono_s();
        end_line(ctx, w);
        say(ctx, "%s; retrying for up to %ld s", err_text(e), retry / 1000);
    }
    return -1;
}

int submit_cli_watch(submit_ctx *ctx, const char *id)
{
    call c = {CALL_JOB, id, "GET", NULL, NULL, 0, NULL};
    watch_state w = {.attempt = -1, .decile = -1, .fail_since = -1};
    long poll = ctx->poll_ms > 0 ? ctx->poll_ms : SUBMIT_POLL_MS;
    long retry = ctx->retry_ms > 0 ? ctx->retry_ms : SUBMIT_RETRY_MS;
    json_t *job = NULL;
    const char *state;
    char *text = NULL, *path = NULL;
    call_error e = CALL_ERROR_INIT;
    int rc = job_path(ctx, id, "", &path);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    c.path = path;
    for (;;) {
        double t0 = flps_mono_s(), spent;

        if (stopped(ctx)) {
            end_line(ctx, &w);
            say(ctx,
                "stopped watching %s; the job goes on (flsubmit cancel "
                "%s stops it)",
                id, id);
            rc = SUBMIT_EXIT_INTERRUPTED;
            break;
        }
        rc = get_job(ctx, &c, &job, &e);
        if (rc != SUBMIT_EXIT_OK) {
            rc = watch_failed(ctx, &w, &e, rc, retry);
            if (rc >= 0)
                break;
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
    err_fini(&e);
    flps_free(w.state);
    flps_free(path);
    return rc;
}

int submit_cli_cancel(submit_ctx *ctx, const char *id)
{
    json_t *job = NULL;
    char *text = NULL;
    int rc = job_api(ctx, CALL_CANCEL, "DELETE", id, "", &job);

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
    call c = {CALL_OTHER, NULL, "GET", "/v1/jobs", NULL, 0, NULL};
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
    json_t *page = NULL, *jobs = NULL, *job, *id = NULL;
    int rc = get_jobs(ctx, &page, &jobs);

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    /* The list is in submission order: the last active one is latest. */
    for (size_t i = json_array_size(jobs); i-- > 0 && id == NULL;) {
        job = json_array_get(jobs, i);
        if (job_is_active(job) && json_is_string(json_object_get(job, "id")))
            id = json_object_get(job, "id");
    }
    if (id == NULL) {
        json_decref(page);
        say(ctx, "no queued or running job to cancel; `flsubmit list` shows "
                 "the jobs");
        return SUBMIT_EXIT_NOT_FOUND;
    }
    /* The id is the page's: it lives until the page goes. */
    rc = submit_cli_cancel(ctx, json_string_value(id));
    json_decref(page);
    return rc;
}

/* DELETE one job, not printing the error: e says it. On SUBMIT_EXIT_OK
 * the caller owns *done. */
static int cancel_one(submit_ctx *ctx, const char *id, json_t **done,
                      call_error *e)
{
    call c = {CALL_CANCEL, id, "DELETE", NULL, NULL, 0, NULL};
    char *path = NULL;
    int rc = job_path(ctx, id, "", &path);

    if (rc != SUBMIT_EXIT_OK) {
        flps_strbuf_clear(&e->msg); /* job_path said why */
        return rc;
    }
    c.path = path;
    rc = api_try(ctx, &c, done, e);
    flps_free(path);
    return rc;
}

int submit_cli_cancel_all(submit_ctx *ctx)
{
    json_t *page = NULL, *jobs = NULL, *job, *done;
    char *text = NULL;
    call_error e = CALL_ERROR_INIT;
    size_t i, n = 0;
    int rc = get_jobs(ctx, &page, &jobs), worst = SUBMIT_EXIT_OK;

    if (rc != SUBMIT_EXIT_OK)
        return rc;
    json_array_foreach(jobs, i, job)
    {
        const char *id = json_string_value(json_object_get(job, "id"));

        if (!job_is_active(job) || id == NULL)
            continue;
        rc = cancel_one(ctx, id, &done, &e);
        if (rc == SUBMIT_EXIT_CONFLICT)
            continue; /* it finished between the list and the cancel */
        if (rc != SUBMIT_EXIT_OK) {
            if (err_text(&e)[0] != '\0')
                say(ctx, "%s", err_text(&e));
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
    err_fini(&e);
    if (n == 0 && worst == SUBMIT_EXIT_OK && !ctx->json)
        fprintf(ctx->out, "No queued or running jobs.\n");
    return worst;
}

/* Is the job final? For logs --follow; errors are printed. */
static int job_is_final(submit_ctx *ctx, const char *id, int *final)
{
    json_t *job = NULL;
    int rc = job_get(ctx, CALL_LOGS, id, &job);

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
    event ev;
    int yes;

    if (line == NULL)
        return 0;
    event_read(line, strlen(line), 0, &ev, NULL, 0);
    yes = ev.kind != EVENT_NONE;
    event_fini(&ev);
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

/* Read and print the page of job id's log lines after cursor (NULL: from
 * the first line). *n is how many lines the page had (0 also when the page
 * does not move the cursor, so a server that ignores `after` cannot make
 * us print forever); *next is the page's cursor when it gives one (the
 * caller owns it, flps_free), else NULL. Errors are printed. */
static int logs_page(submit_ctx *ctx, const char *id, const char *cursor,
                     int events, size_t *n, char **next)
{
    call c = {CALL_LOGS, id, "GET", NULL, NULL, 0, NULL};
    flps_strbuf suffix = FLPS_STRBUF_INIT;
    json_t *page = NULL, *lines, *nx;
    char *esc = NULL, *path = NULL;
    int rc;

    *n = 0;
    *next = NULL;
    if (cursor != NULL && submit_http_escape(cursor, &esc) != FLPS_OK) {
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
    }
    if (esc != NULL)
        flps_strbuf_printf(&suffix, "/logs?after=%s&limit=%d", esc,
                           SUBMIT_LOG_PAGE);
    else
        flps_strbuf_printf(&suffix, "/logs?limit=%d", SUBMIT_LOG_PAGE);
    flps_free(esc);
    if (flps_strbuf_error(&suffix) != FLPS_OK) {
        flps_strbuf_fini(&suffix);
        say(ctx, "out of memory");
        return SUBMIT_EXIT_INTERNAL;
    }
    rc = job_path(ctx, id, suffix.data, &path);
    flps_strbuf_fini(&suffix);
    if (rc != SUBMIT_EXIT_OK)
        return rc;
    c.path = path;
    rc = api(ctx, &c, &page);
    if (rc != SUBMIT_EXIT_OK)
        goto out;
    lines = json_object_get(page, "lines");
    if (!json_is_array(lines)) {
        rc = bad_shape(ctx, &c, "no \"lines\" array");
        goto out;
    }
    rc = print_log_page(ctx, &c, lines, events, n);
    nx = json_object_get(page, "next");
    if (*n > 0 &&
        (!json_is_string(nx) || json_string_length(nx) == 0 ||
         (cursor != NULL && strcmp(json_string_value(nx), cursor) == 0))) {
        *n = 0;
    } else if (json_is_string(nx) && json_string_length(nx) > 0) {
        *next = flps_strdup(json_string_value(nx));
        if (*next == NULL && rc == SUBMIT_EXIT_OK) {
            say(ctx, "out of memory");
            rc = SUBMIT_EXIT_INTERNAL;
        }
    }
out:
    json_decref(page);
    flps_free(path);
    return rc;
}

int submit_cli_logs(submit_ctx *ctx, const char *id, int follow, int events)
{
    long poll = ctx->poll_ms > 0 ? ctx->poll_ms : SUBMIT_POLL_MS;
    char *cursor = NULL, *next;
    int final = 0, rc;
    size_t n = 0;

    for (;;) {
        if (stopped(ctx)) {
            rc = SUBMIT_EXIT_INTERRUPTED;
            break;
        }
        rc = logs_page(ctx, id, cursor, events, &n, &next);
        if (next != NULL) {
            flps_free(cursor);
            cursor = next;
        }
        if (rc != SUBMIT_EXIT_OK)
            break;
        if (n > 0)
            continue; /* more may be waiting: drain before sleeping */
        if (!follow || final)
            break;
        /* Checked after an empty page, then one more page is read: the
         * last lines of a job are written before it becomes final. */
        rc = job_is_final(ctx, id, &final);
        if (rc != SUBMIT_EXIT_OK)
            break;
        if (!final)
            nap(ctx, poll);
    }
    flps_free(cursor);
    return rc;
}

int submit_cli_nodes(submit_ctx *ctx)
{
    call c = {CALL_OTHER, NULL, "GET", "/v1/nodes", NULL, 0, NULL};
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
            ctx,
            (ctx->wide ? submit_render_nodes_wide
                       : submit_render_nodes)(nodes, flps_wall_s(), &text),
            &text);
    json_decref(page);
    return rc;
}

int submit_cli_plan(submit_ctx *ctx, const char *id)
{
    json_t *plan = NULL;
    char *text = NULL;
    int rc = job_api(ctx, CALL_PLAN, "GET", id, "/plan", &plan);

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
    char err[SUBMIT_SPEC_ERR], *data = NULL;
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
    call c = {CALL_OTHER, NULL, "GET", "/v1/info", NULL, 0, NULL};
    submit_doctor_job job = {0};
    json_t *info = NULL;
    char *names = NULL, *text = NULL;
    call_error e = CALL_ERROR_INIT;
    int rc = SUBMIT_EXIT_OK, failed = 0;
    flps_err err;

    if (job_file != NULL)
        rc = doctor_job(ctx, job_file, &job);
    if (rc != SUBMIT_EXIT_OK)
        return rc;
    rc = api_try(ctx, &c, &info, &e);
    if (rc != SUBMIT_EXIT_OK) {
        /* Nothing else can be checked without the scheduler. */
        json_t *o =
            json_pack("{s:b,s:[{s:s,s:b,s:s}]}", "ok", 0, "checks", "check",
                      "scheduler", "ok", 0, "message", err_text(&e));

        if (ctx->json && o != NULL)
            print_json(ctx, o);
        else
            fprintf(ctx->out, "%-5s %-10s %s\n", "FAIL", "scheduler",
                    err_text(&e));
        json_decref(o);
        err_fini(&e);
        say(ctx, "doctor: 1 check failed: scheduler");
        return rc;
    }
    err_fini(&e);
    err = submit_doctor_report(info, submit_http_base_url(ctx->http), &job,
                               ctx->json, &text, &failed, &names);
    json_decref(info);
    if (err == FLPS_OK && ctx->yaml) {
        /* The report's JSON, as YAML. */
        json_t *o = json_loads(text, 0, NULL);

        rc = o != NULL ? print_json(ctx, o) : render_failed(ctx, FLPS_ENOMEM);
        json_decref(o);
        flps_free(text);
    } else {
        rc = print_rendered(ctx, err, &text);
    }
    if (rc == SUBMIT_EXIT_OK && failed > 0) {
        say(ctx, "doctor: %d %s failed: %s", failed,
            plural_word(failed, "check", "checks"), names);
        rc = SUBMIT_EXIT_CHECK_FAILED;
    }
    flps_free(names);
    return rc;
}
