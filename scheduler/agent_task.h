/* What flagent reads from its tasks, as pure functions: task keys, the
 * JSON events a worker prints, and exit statuses. No I/O. */
#ifndef FLPS_SCHED_AGENT_TASK_H
#define FLPS_SCHED_AGENT_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef enum {
    AGENT_ROLE_SERVER = 0,
    AGENT_ROLE_WORKER,
} agent_role;

/* The longest job or node name: they are parts of Redis keys. */
#define AGENT_TASK_NAME_MAX 63

/* Whether the n bytes at s (not necessarily NUL-terminated) are a job or
 * node name: services/safeid.h's rule ([A-Za-z0-9][A-Za-z0-9._-]{0,62},
 * no ".."), so never a ':' that would split a key, never a path of its
 * own and never an option. */
int agent_task_name_is_valid(const char *s, size_t n);

/* Whether s is a server endpoint a worker may be given as an argument:
 * "tcp://HOST:PORT" with HOST a name or IPv4 address of [A-Za-z0-9.-]
 * (not starting with '-') or an IPv6 address in brackets, and PORT
 * 1..65535; at most 200 bytes. */
int agent_task_endpoint_is_valid(const char *s);

/* The parts of a task key "flps:task:{job}:{attempt}:{role}-{index}". */
typedef struct agent_task_id {
    char job[AGENT_TASK_NAME_MAX + 1];
    uint32_t attempt;
    agent_role role;
    uint32_t index;
    char name[32]; /* "{role}-{index}", the logs stream's task field */
} agent_task_id;

/* Split a task key. The job id follows agent_task_name_is_valid; attempt and
 * index are decimal. Errors: FLPS_EINVAL for any other text (*out is
 * written only on FLPS_OK). */
flps_err agent_task_key_parse(const char *key, agent_task_id *out);

/* The worker event lines (services/event.h, docs/events.md) as flagent
 * acts on them. */
typedef enum {
    AGENT_EVENT_NONE = 0, /* not a JSON object with an "event" */
    AGENT_EVENT_OTHER,    /* "start" and anything else */
    AGENT_EVENT_PROGRESS,
    AGENT_EVENT_EVAL,
    AGENT_EVENT_DONE,
    AGENT_EVENT_PROFILE, /* the per-layer profile (rank 0, once) */
} agent_event_kind;

#define AGENT_EVENT_MAX_FIELDS 5

/* One event and the job-hash fields it sets: progress sets p_iteration,
 * p_loss, p_bytes_sent, p_dense_bytes and p_elapsed (those present); eval
 * sets p_test_accuracy. Values are decimal text as the event gave them.
 * done and profile set no field here: flagent stores their line as is. */
typedef struct agent_event {
    agent_event_kind kind;
    int nfields;
    const char *fields[AGENT_EVENT_MAX_FIELDS]; /* static strings */
    char values[AGENT_EVENT_MAX_FIELDS][40];
} agent_event;

/* Read one line a worker printed with event_read. Never fails: a line
 * that is not an event gives AGENT_EVENT_NONE; a field of the wrong type
 * sets nothing. */
void agent_event_parse(const char *line, agent_event *out);

/* The longest error line kept whole (longer ones are cut at a character
 * boundary): what a job's reason quotes. */
#define PROC_ERROR_LINE_MAX 1024

/* Whether the len bytes of line (one line a process printed on its
 * stderr, without its newline) say why it may have failed: not blank, not
 * a worker's JSON event, and not an INFO or DEBUG line of flps's own log.
 * When so, out gets the line without trailing blanks and without the
 * time/level/program prefix of flps's log lines, cut at a character
 * boundary to outlen - 1 bytes, and 1 is returned; else 0 (out
 * untouched). Never does I/O. */
int agent_error_line(const char *line, size_t len, char *out, size_t outlen);

/* The line that most likely says why a process failed, from len bytes of
 * its output: the last one agent_error_line takes. 1 when there is one
 * (out written), 0 otherwise (out is ""). Never does I/O. */
int agent_last_error_line(const char *text, size_t len, char *out,
                          size_t outlen);

/* The task-hash fields for a wait status: exit_code is the exit status,
 * or -1 when a signal ended the process; signal is the signal's number,
 * or 0 when it exited. */
void agent_exit_fields(int status, int *exit_code, int *signal);

#endif
