/* Task keys, worker events and exit statuses for flagent. */
#include "scheduler/agent_task.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/numparse.h"
#include "services/event.h"
#include "services/safeid.h"
#include "services/tasklog.h"

#define KEY_PREFIX "flps:task:"

/* A decimal field of a key: the n bytes at s (not NUL-terminated). */
static int parse_u32(const char *s, size_t n, uint32_t *out)
{
    char text[11];
    uint64_t v;

    if (n == 0 || n >= sizeof(text))
        return 0;
    memcpy(text, s, n);
    text[n] = '\0';
    if (flps_parse_u64(NULL, text, 0, UINT32_MAX, &v, NULL, 0) != FLPS_OK)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

int agent_task_name_is_valid(const char *s, size_t n)
{
    /* A job id from a key becomes a directory and an argument: ".." made
     * an agent write outside its work directory. */
    return safeid_is_valid(s, n);
}

int agent_task_endpoint_is_valid(const char *s)
{
    static const char host_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "abcdefghijklmnopqrstuvwxyz0123456789.-";
    const char *host, *colon;
    size_t hl, n;
    uint32_t port;

    if (s == NULL || strncmp(s, "tcp://", 6) != 0 || strlen(s) > 200)
        return 0;
    host = s + 6;
    colon = strrchr(host, ':');
    if (colon == NULL || colon == host)
        return 0;
    hl = (size_t)(colon - host);
    if (host[0] == '[') {
        /* An IPv6 address in brackets: hex digits, ':' and '.'. */
        if (hl < 3 || host[hl - 1] != ']' ||
            strspn(host + 1, "0123456789abcdefABCDEF:.") != hl - 2)
            return 0;
    } else if (strspn(host, host_chars) != hl || host[0] == '-') {
        return 0;
    }
    n = strlen(colon + 1);
    return n > 0 && n <= 5 && parse_u32(colon + 1, n, &port) && port > 0 &&
           port <= 65535;
}

flps_err agent_task_key_parse(const char *key, agent_task_id *out)
{
    agent_task_id id;
    const char *job, *c1, *c2, *dash, *end;
    size_t plen = strlen(KEY_PREFIX), rolelen;

    if (key == NULL || strncmp(key, KEY_PREFIX, plen) != 0)
        return FLPS_EINVAL;
    memset(&id, 0, sizeof(id));
    job = key + plen;
    end = job + strlen(job);
    c1 = strchr(job, ':');
    if (c1 == NULL || !agent_task_name_is_valid(job, (size_t)(c1 - job)))
        return FLPS_EINVAL;
    c2 = strchr(c1 + 1, ':');
    if (c2 == NULL || !parse_u32(c1 + 1, (size_t)(c2 - c1 - 1), &id.attempt))
        return FLPS_EINVAL;
    dash = strchr(c2 + 1, '-');
    if (dash == NULL)
        return FLPS_EINVAL;
    rolelen = (size_t)(dash - c2 - 1);
    if (rolelen == 6 && strncmp(c2 + 1, "server", 6) == 0)
        id.role = AGENT_ROLE_SERVER;
    else if (rolelen == 6 && strncmp(c2 + 1, "worker", 6) == 0)
        id.role = AGENT_ROLE_WORKER;
    else
        return FLPS_EINVAL;
    if (!parse_u32(dash + 1, (size_t)(end - dash - 1), &id.index))
        return FLPS_EINVAL;
    memcpy(id.job, job, (size_t)(c1 - job));
    tasklog_name(id.name, sizeof(id.name), id.role == AGENT_ROLE_SERVER,
                 id.index);
    *out = id;
    return FLPS_OK;
}

/* A field of the job hash: an event's value as decimal text; reals with
 * enough digits to read back what flworker printed (it prints at most 6
 * after the point). */
static void add_u64(agent_event *ev, const char *field, uint64_t v)
{
    snprintf(ev->values[ev->nfields], sizeof(ev->values[0]), "%" PRIu64, v);
    ev->fields[ev->nfields++] = field;
}

static void add_real(agent_event *ev, const char *field, double v)
{
    snprintf(ev->values[ev->nfields], sizeof(ev->values[0]), "%.10g", v);
    ev->fields[ev->nfields++] = field;
}

void agent_event_parse(const char *line, agent_event *out)
{
    event ev;

    memset(out, 0, sizeof(*out));
    out->kind = AGENT_EVENT_NONE;
    if (line == NULL)
        return;
    /* A line that breaks the schema still gives the fields it has right;
     * one with a field of the wrong type gives the others. */
    event_read(line, strlen(line), 0, &ev, NULL, 0);
    switch (ev.kind) {
    case EVENT_NONE:
        break;
    case EVENT_PROGRESS: {
        const event_progress *p = &ev.progress;

        out->kind = AGENT_EVENT_PROGRESS;
        if (EVENT_HAS(p, progress, iter))
            add_u64(out, "p_iteration", p->iter);
        if (EVENT_HAS(p, progress, loss))
            add_real(out, "p_loss", p->loss);
        if (EVENT_HAS(p, progress, bytes_sent))
            add_u64(out, "p_bytes_sent", p->bytes_sent);
        if (EVENT_HAS(p, progress, dense_bytes))
            add_u64(out, "p_dense_bytes", p->dense_bytes);
        if (EVENT_HAS(p, progress, elapsed))
            add_real(out, "p_elapsed", p->elapsed);
        break;
    }
    case EVENT_EVAL:
        out->kind = AGENT_EVENT_EVAL;
        if (EVENT_HAS(&ev.eval, eval, test_accuracy))
            add_real(out, "p_test_accuracy", ev.eval.test_accuracy);
        break;
    case EVENT_DONE:
        out->kind = AGENT_EVENT_DONE;
        break;
    case EVENT_PROFILE:
        out->kind = AGENT_EVENT_PROFILE;
        break;
    default:
        out->kind = AGENT_EVENT_OTHER;
        break;
    }
    event_fini(&ev);
}

void agent_exit_fields(int status, int *exit_code, int *signal)
{
    if (WIFEXITED(status)) {
        *exit_code = WEXITSTATUS(status);
        *signal = 0;
    } else if (WIFSIGNALED(status)) {
        *exit_code = -1;
        *signal = WTERMSIG(status);
    } else {
        *exit_code = -1;
        *signal = 0;
    }
}

/* Past the "2026-12-01T10:48:59.117Z ERROR flworker/0[2861]: " that
 * flps's own log lines (common/log.c) start with: the time and pid say
 * nothing the job's reason needs, and they take its room. *level is the
 * line's level word ("ERROR", "INFO "...; 5 bytes), or NULL when the line
 * is not one of flps's. */
static const char *skip_log_prefix(const char *line, const char **level)
{
    const char *z = strchr(line, 'Z'), *end;

    *level = NULL;
    if (strlen(line) < 25 || line[4] != '-' || line[10] != 'T' || z == NULL ||
        z - line != 23 || z[1] != ' ')
        return line;
    end = strstr(z, "]: ");
    if (end == NULL)
        return line;
    *level = z + 2;
    return end + 3;
}

/* n bytes of s (UTF-8) that end on a character boundary, n at most max. */
static size_t utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--; /* s[n] continues a character: cut before it */
    return n;
}

int agent_error_line(const char *line, size_t len, char *out, size_t outlen)
{
    char buf[PROC_ERROR_LINE_MAX];
    const char *text, *level;
    agent_event ev;
    size_t n = len, k;

    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' ||
                     line[n - 1] == '\r' || line[n - 1] == '\n'))
        n--;
    if (n == 0 || outlen == 0)
        return 0;
    k = utf8_cut(line, n, sizeof(buf) - 1);
    memcpy(buf, line, k);
    buf[k] = '\0';
    agent_event_parse(buf, &ev);
    if (ev.kind != AGENT_EVENT_NONE)
        return 0;
    text = skip_log_prefix(buf, &level);
    /* flps's own progress and chatter is not why a process failed. */
    if (level != NULL &&
        (strncmp(level, "INFO", 4) == 0 || strncmp(level, "DEBUG", 5) == 0))
        return 0;
    k = utf8_cut(text, strlen(text), outlen - 1);
    memcpy(out, text, k);
    out[k] = '\0';
    return 1;
}

int agent_last_error_line(const char *text, size_t len, char *out,
                          size_t outlen)
{
    size_t end = len;

    if (outlen == 0)
        return 0;
    out[0] = '\0';
    while (end > 0) {
        size_t start = end;

        while (start > 0 && text[start - 1] != '\n')
            start--;
        /* start == 0 with a full buffer may be a cut line; still the best
         * there is when nothing after it qualifies. */
        if (agent_error_line(text + start, end - start, out, outlen))
            return 1;
        end = start > 0 ? start - 1 : 0;
    }
    out[0] = '\0';
    return 0;
}
