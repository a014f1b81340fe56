/* Task keys, worker events and exit statuses for flagent. */
#include "scheduler/agent_task.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/numparse.h"
#include "services/safeid.h"

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
    snprintf(id.name, sizeof(id.name), "%s-%u",
             id.role == AGENT_ROLE_SERVER ? "server" : "worker", id.index);
    *out = id;
    return FLPS_OK;
}

/* Copy a JSON number into the event as decimal text; reals with enough
 * digits to read back what flworker printed (it prints at most 6 after
 * the point). */
static void add_field(agent_event *ev, json_t *obj, const char *key,
                      const char *field)
{
    json_t *v = json_object_get(obj, key);
    char *slot;

    if (ev->nfields >= AGENT_EVENT_MAX_FIELDS)
        return;
    slot = ev->values[ev->nfields];
    if (json_is_integer(v))
        snprintf(slot, sizeof(ev->values[0]), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
    else if (json_is_real(v))
        snprintf(slot, sizeof(ev->values[0]), "%.10g", json_real_value(v));
    else
        return;
    ev->fields[ev->nfields++] = field;
}

void agent_event_parse(const char *line, agent_event *out)
{
    json_t *o;
    const char *name;

    memset(out, 0, sizeof(*out));
    out->kind = AGENT_EVENT_NONE;
    if (line == NULL || line[0] != '{')
        return;
    o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
    if (o == NULL)
        return;
    name = json_string_value(json_object_get(o, "event"));
    if (!json_is_object(o) || name == NULL) {
        json_decref(o);
        return;
    }
    if (strcmp(name, "progress") == 0) {
        out->kind = AGENT_EVENT_PROGRESS;
        add_field(out, o, "iter", "p_iteration");
        add_field(out, o, "loss", "p_loss");
        add_field(out, o, "bytes_sent", "p_bytes_sent");
        add_field(out, o, "dense_bytes", "p_dense_bytes");
        add_field(out, o, "elapsed", "p_elapsed");
    } else if (strcmp(name, "eval") == 0) {
        out->kind = AGENT_EVENT_EVAL;
        add_field(out, o, "test_accuracy", "p_test_accuracy");
    } else if (strcmp(name, "done") == 0) {
        out->kind = AGENT_EVENT_DONE;
    } else if (strcmp(name, "profile") == 0) {
        out->kind = AGENT_EVENT_PROFILE;
    } else {
        out->kind = AGENT_EVENT_OTHER;
    }
    json_decref(o);
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
 * nothing the job's reason needs, and they take its room. */
static const char *skip_log_prefix(const char *line)
{
    const char *z = strchr(line, 'Z'), *end;

    if (strlen(line) < 25 || line[4] != '-' || line[10] != 'T' || z == NULL ||
        z - line != 23 || z[1] != ' ')
        return line;
    end = strstr(z, "]: ");
    return end != NULL ? end + 3 : line;
}

int agent_last_error_line(const char *text, size_t len, char *out,
                          size_t outlen)
{
    size_t end = len;

    if (outlen == 0)
        return 0;
    out[0] = '\0';
    while (end > 0) {
        size_t start = end, n;
        char line[1024];
        agent_event ev;

        while (start > 0 && text[start - 1] != '\n')
            start--;
        n = end - start;
        while (n > 0 &&
               (text[start + n - 1] == ' ' || text[start + n - 1] == '\t' ||
                text[start + n - 1] == '\r'))
            n--;
        /* start == 0 with a full buffer may be a cut line; still the best
         * there is when nothing after it qualifies. */
        if (n > 0) {
            size_t k = n < sizeof(line) - 1 ? n : sizeof(line) - 1;

            memcpy(line, text + start, k);
            line[k] = '\0';
            agent_event_parse(line, &ev);
            if (ev.kind == AGENT_EVENT_NONE) {
                snprintf(out, outlen, "%s", skip_log_prefix(line));
                return 1;
            }
        }
        end = start > 0 ? start - 1 : 0;
    }
    return 0;
}
