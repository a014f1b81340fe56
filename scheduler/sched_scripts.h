/* The Lua scripts of flsched's store: every change of docs/redis-schema.md
 * that touches more than one key (or reads before it writes) runs as one
 * of these, so Redis applies it atomically with no WATCH and no retry. The
 * store registers them all with rconn_script_add when it connects. */
#ifndef FLPS_SCHED_SCRIPTS_H
#define FLPS_SCHED_SCRIPTS_H

typedef enum {
    /* KEYS job, events; ARGV event JSON without seq, list cap. Returns
     * the event's seq, or 0 (nothing written) when the job hash does not
     * exist. */
    SCHED_SCRIPT_EVENT = 0,
    /* KEYS seq, jobs, queue; ARGV event JSON, cap, priority, then the
     * hash's field/value pairs (id and seq filled in by the script).
     * Returns the job's number. */
    SCHED_SCRIPT_SUBMIT,
    /* KEYS leader, job, job tasks, queue, events; ARGV check the leader
     * (0/1), leader id, job id, attempt, now, event JSON, cap, fields per
     * task, the transport chosen (job's transport_used), then per task its
     * key, node and field/value pairs. Returns 1 when placed. */
    SCHED_SCRIPT_PLACE,
    /* KEYS job, job tasks, events; ARGV attempt, now, summary, event JSON,
     * cap. Returns 1 when the RUNNING attempt succeeded. */
    SCHED_SCRIPT_SUCCEED,
    /* KEYS job, job tasks, events, queue; ARGV attempt, restarts and
     * max_restarts (as read), restart (0/1), reason, now, event JSON, cap,
     * job id, restarts and attempt after a restart. Returns 1 when done, 0
     * when the job is not RUNNING at attempt, -1 when restarts or
     * max_restarts changed (read again). */
    SCHED_SCRIPT_FAIL,
    /* KEYS job, job tasks, events, queue; ARGV now, event JSON if RUNNING,
     * event JSON if QUEUED, cap, job id. Returns 0 no job, 1 neither QUEUED
     * nor RUNNING, 2 cancelled. */
    SCHED_SCRIPT_CANCEL,
    /* KEYS leader, plan, job, events; ARGV leader id, previous version,
     * new version ("" = only profile_seen), plan, created_at, profile_seen,
     * event JSON, cap. Returns 1 when written. */
    SCHED_SCRIPT_PLAN_PUT,
    /* KEYS node, alive; ARGV from state, to state, want alive (0/1).
     * Returns 1 when moved. */
    SCHED_SCRIPT_NODE_MOVE,
    /* KEYS leader; ARGV id, lease ms. Returns 1 when renewed. */
    SCHED_SCRIPT_LEASE_RENEW,
    /* KEYS leader; ARGV id. Returns 1 when deleted. */
    SCHED_SCRIPT_LEASE_RELEASE,
    SCHED_SCRIPT_COUNT
} sched_script;

/* The script's Lua text (static, never NULL for a valid id). */
const char *sched_script_lua(sched_script s);

#endif
