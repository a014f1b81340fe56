/* flsubmit doctor's checks over flsched's /v1/info, without I/O. */
#include "cli/submit_doctor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/submit_render.h"
#include "common/alloc.h"
#include "common/strbuf.h"
#include "services/jsonout.h"

typedef struct report {
    json_t *checks; /* [{"check","ok","message"}] */
    int failed;
    char *names;
    size_t names_len;
} report;

static void add(report *r, const char *check, int ok, const char *msg)
{
    json_array_append_new(r->checks, json_pack("{s:s,s:b,s:s}", "check", check,
                                               "ok", ok, "message", msg));
    if (ok)
        return;
    if (r->names != NULL) {
        size_t n = strlen(r->names);

        snprintf(r->names + n, r->names_len - n, "%s%s", r->failed ? ", " : "",
                 check);
    }
    r->failed++;
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static int num(const json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);

    if (!json_is_number(v))
        return 0;
    *out = json_number_value(v);
    return 1;
}

/* The nodes an agent keeps alive. */
static int node_is_alive(const json_t *n)
{
    return json_is_true(json_object_get(n, "alive")) && str(n, "state") &&
           strcmp(str(n, "state"), "READY") == 0;
}

static void check_scheduler(report *r, const json_t *info, const char *url)
{
    char msg[512];
    const char *v = str(info, "version");

    snprintf(msg, sizeof(msg), "flsched %s answers at %s", v ? v : "(unknown)",
             url);
    add(r, "scheduler", 1, msg);
}

static int check_redis(report *r, const json_t *info)
{
    json_t *redis = json_object_get(info, "redis");
    const char *v = str(redis, "version"), *err = str(redis, "error");
    char msg[700];

    if (json_is_true(json_object_get(redis, "ok"))) {
        snprintf(msg, sizeof(msg), "Redis %s answers flsched",
                 v ? v : "(unknown version)");
        add(r, "redis", 1, msg);
        return 1;
    }
    snprintf(msg, sizeof(msg),
             "flsched cannot reach its Redis (%s); start redis-server, or "
             "fix flsched's --redis URL and password",
             err ? err : "no answer");
    add(r, "redis", 0, msg);
    return 0;
}

/* "n1 (4 CPUs, 8 GiB, 0 GPUs)" */
static void node_line(flps_strbuf *b, const json_t *n)
{
    char mem[32];
    double cpus = 0, memory = 0, gpus = 0;

    num(n, "cpus", &cpus);
    num(n, "memory", &memory);
    num(n, "gpus", &gpus);
    submit_render_bytes_iec(memory, mem, sizeof(mem));
    flps_strbuf_printf(b, "%s (%g CPUs, %s, %g GPUs)", str(n, "name"), cpus,
                       mem, gpus);
}

static size_t check_agents(report *r, const json_t *nodes)
{
    flps_strbuf b = FLPS_STRBUF_INIT, lost = FLPS_STRBUF_INIT;
    size_t i, alive = 0, nlost = 0;
    json_t *n;
    char *text;

    json_array_foreach(nodes, i, n)
    {
        if (str(n, "name") == NULL)
            continue;
        if (node_is_alive(n)) {
            flps_strbuf_puts(&b, alive++ ? ", " : "");
            node_line(&b, n);
        } else {
            flps_strbuf_printf(&lost, "%s%s", nlost++ ? ", " : "",
                               str(n, "name"));
        }
    }
    if (alive == 0) {
        flps_strbuf_clear(&b);
        flps_strbuf_printf(&b,
                           "no agent is alive%s%s%s; start flagent on each "
                           "node with the scheduler's --redis URL",
                           nlost ? " (" : "",
                           nlost && lost.data ? lost.data : "",
                           nlost ? " LOST)" : "");
    } else if (nlost > 0) {
        flps_strbuf_printf(&b, "; LOST: %s", lost.data);
    }
    text = flps_strbuf_take(&b);
    flps_strbuf_fini(&lost);
    if (text == NULL) {
        add(r, "agents", 0, "out of memory");
        return 0;
    }
    if (alive > 0) {
        char head[32];
        flps_strbuf m = FLPS_STRBUF_INIT;
        char *msg;

        snprintf(head, sizeof(head), "%zu alive: ", alive);
        flps_strbuf_printf(&m, "%s%s", head, text);
        msg = flps_strbuf_take(&m);
        add(r, "agents", 1, msg ? msg : "alive");
        flps_free(msg);
    } else {
        add(r, "agents", 0, text);
    }
    flps_free(text);
    return alive;
}

/* The facts object of an alive node, or NULL after reporting that the
 * agent publishes none. */
static const json_t *facts_of(const json_t *n)
{
    const json_t *f = json_object_get(n, "facts");

    return json_is_object(f) ? f : NULL;
}

/* A node's problem for one check: what is wrong (without the node's
 * name) and what to do. Nodes with the same problem are named together,
 * and each fix is said once. */
typedef struct problem {
    char what[300];
    char fix[300];
    char ok[200]; /* for a node that passes: what it has, shown beside its
                     name ("" says nothing more) */
} problem;

/* Run one per-node check over the alive nodes: fn leaves p->what "" when
 * the node passes. */
typedef void (*node_check)(const json_t *info, const json_t *facts, problem *p);

static void per_node(report *r, const json_t *info, const char *check,
                     const char *ok_what, node_check fn)
{
    const json_t *nodes = json_object_get(info, "nodes");
    json_t *found = json_object(), *fixes = json_object(), *n, *v;
    flps_strbuf msg = FLPS_STRBUF_INIT, good = FLPS_STRBUF_INIT;
    const char *what;
    size_t i, ngood = 0;
    char *text;

    json_array_foreach(nodes, i, n)
    {
        const json_t *f;
        problem p = {"", "", ""};

        if (!node_is_alive(n) || str(n, "name") == NULL)
            continue;
        f = facts_of(n);
        if (f == NULL) {
            snprintf(p.what, sizeof(p.what),
                     "its agent publishes no node checks");
            snprintf(p.fix, sizeof(p.fix), "upgrade flagent there");
        } else {
            fn(info, f, &p);
        }
        if (p.what[0] == '\0') {
            flps_strbuf_printf(&good, "%s%s", ngood++ ? ", " : "",
                               str(n, "name"));
            if (p.ok[0] != '\0')
                flps_strbuf_printf(&good, " (%s)", p.ok);
            continue;
        }
        v = json_object_get(found, p.what);
        if (v == NULL) {
            v = json_array();
            json_object_set_new(found, p.what, v);
        }
        json_array_append_new(v, json_string(str(n, "name")));
        json_object_set_new(fixes, p.fix, json_true());
    }
    if (json_object_size(found) == 0) {
        flps_strbuf_printf(&msg, "%s on %s", ok_what,
                           good.data ? good.data : "-");
    } else {
        int first = 1;

        json_object_foreach(found, what, v)
        {
            json_t *name;
            size_t k;

            flps_strbuf_printf(&msg, "%s%s on ", first ? "" : "; ", what);
            json_array_foreach(v, k, name) flps_strbuf_printf(
                &msg, "%s%s", k ? ", " : "", json_string_value(name));
            first = 0;
        }
        json_object_foreach(fixes, what, v)
            flps_strbuf_printf(&msg, "; %s", what);
    }
    text = flps_strbuf_take(&msg);
    add(r, check, json_object_size(found) == 0, text ? text : "out of memory");
    flps_free(text);
    flps_strbuf_fini(&good);
    json_decref(found);
    json_decref(fixes);
}

static void dataset_problem(const json_t *info, const json_t *f, problem *p)
{
    const char *missing = str(f, "dataset_missing");
    const char *dir = str(f, "dataset_dir");

    (void)info;
    if (missing == NULL || *missing == '\0')
        return;
    snprintf(p->what, sizeof(p->what),
             "the Fashion-MNIST file %s is missing from %s", missing,
             dir ? dir : "the agent's data directory");
    snprintf(p->fix, sizeof(p->fix),
             "install it with `apt-get install dataset-fashion-mnist`, or "
             "start flagent with --data-dir at a copy");
}

/* "unlimited" or "8 MiB (8388608 bytes)": a memlock limit with its exact
 * number, as ulimit -l and the limits files take bytes or KiB. */
static void memlock_text(double memlock, char *buf, size_t len)
{
    char iec[32];

    if (memlock < 0) {
        snprintf(buf, len, "unlimited");
        return;
    }
    submit_render_bytes_iec(memlock, iec, sizeof(iec));
    snprintf(buf, len, "%s (%.0f bytes)", iec, memlock);
}

/* A node fit for transport: rdma has a device with an ACTIVE port (an
 * agent from before rdma_active_ports counts devices only) and lets its
 * processes lock SUBMIT_DOCTOR_MIN_MEMLOCK. */
static void rdma_problem(const json_t *info, const json_t *f, problem *p)
{
    double devs = 0, active = 0, memlock = 0;
    int have_active = num(f, "rdma_active_ports", &active);
    const char *ports = str(f, "rdma_ports"), *detail = str(f, "rdma_detail");
    char have[64], want[64];

    (void)info;
    num(f, "rdma_devices", &devs);
    if (devs < 1) {
        snprintf(p->what, sizeof(p->what),
                 "no RDMA device (/sys/class/infiniband is empty)");
        snprintf(p->fix, sizeof(p->fix),
                 "run the job on nodes with RDMA NICs (check with "
                 "ibv_devinfo), or use transport: zmq or auto");
        return;
    }
    if (have_active && active < 1) {
        snprintf(p->what, sizeof(p->what), "no RDMA port is ACTIVE (%s)",
                 detail && *detail ? detail : "no port state read");
        snprintf(p->fix, sizeof(p->fix),
                 "check the cable and the subnet manager (ibstat, "
                 "ibv_devinfo), or use transport: zmq or auto");
        return;
    }
    /* memlock: bytes, or -1 for unlimited. */
    if (!num(f, "memlock", &memlock))
        memlock = 0;
    memlock_text(memlock, have, sizeof(have));
    if (memlock >= 0 && memlock < (double)SUBMIT_DOCTOR_MIN_MEMLOCK) {
        memlock_text((double)SUBMIT_DOCTOR_MIN_MEMLOCK, want, sizeof(want));
        snprintf(p->what, sizeof(p->what),
                 "flagent may lock only %s of memory (RLIMIT_MEMLOCK; RDMA "
                 "needs at least %s)",
                 have, want);
        snprintf(p->fix, sizeof(p->fix),
                 "raise it: ulimit -l unlimited, or LimitMEMLOCK=infinity in "
                 "flagent's service, and IPC_LOCK for its container (Helm: "
                 "agent.rdma.enabled=true)");
        return;
    }
    snprintf(p->ok, sizeof(p->ok), "%s%smemlock %s",
             ports && *ports ? ports : "", ports && *ports ? ", " : "", have);
}

/* The skew of a node's clock against flsched's, both measured against
 * Redis's clock: the node's agent publishes its own offset from Redis's
 * TIME at each heartbeat, and /v1/info gives flsched's. */
static void clock_problem(const json_t *info, const json_t *f, problem *p)
{
    double off = 0, sched = 0, skew;

    if (!num(f, "clock_offset", &off) ||
        !num(json_object_get(info, "redis"), "clock_offset", &sched))
        return;
    skew = off - sched;
    if (fabs(skew) <= SUBMIT_DOCTOR_MAX_SKEW_S)
        return;
    snprintf(p->what, sizeof(p->what),
             "the clock is %.1f s %s flsched's (more than %.0f s)", fabs(skew),
             skew > 0 ? "ahead of" : "behind", SUBMIT_DOCTOR_MAX_SKEW_S);
    snprintf(p->fix, sizeof(p->fix),
             "run NTP (chrony or systemd-timesyncd) on every node");
}

/* transport: auto never fails a check: it says which alive nodes would
 * run RDMA and which not, since a job placed on any of the latter runs on
 * ZeroMQ. */
static void check_rdma_auto(report *r, const json_t *nodes)
{
    flps_strbuf yes = FLPS_STRBUF_INIT, no = FLPS_STRBUF_INIT;
    flps_strbuf msg = FLPS_STRBUF_INIT;
    const json_t *n;
    size_t i, nyes = 0, nno = 0;
    char *text;

    json_array_foreach(nodes, i, n)
    {
        const json_t *f = facts_of(n);
        problem p = {"", "", ""};

        if (!node_is_alive(n) || str(n, "name") == NULL)
            continue;
        if (f != NULL)
            rdma_problem(NULL, f, &p);
        if (f != NULL && p.what[0] == '\0')
            flps_strbuf_printf(&yes, "%s%s (%s)", nyes++ ? ", " : "",
                               str(n, "name"), p.ok);
        else
            flps_strbuf_printf(&no, "%s%s", nno++ ? ", " : "", str(n, "name"));
    }
    flps_strbuf_printf(&msg,
                       "transport: auto: RDMA on %s; ZeroMQ for a job "
                       "placed on %s",
                       yes.data ? yes.data : "no node",
                       no.data ? no.data : "no node");
    text = flps_strbuf_take(&msg);
    add(r, "rdma", 1, text ? text : "out of memory");
    flps_free(text);
    flps_strbuf_fini(&yes);
    flps_strbuf_fini(&no);
}

/* Lines of the text report: "OK    redis       message". */
static void render_text(flps_strbuf *b, const json_t *checks, int failed)
{
    size_t i, n = json_array_size(checks);
    json_t *c;

    json_array_foreach(checks, i, c)
    {
        flps_strbuf_printf(b, "%-5s %-10s %s\n",
                           json_is_true(json_object_get(c, "ok")) ? "OK"
                                                                  : "FAIL",
                           str(c, "check"), str(c, "message"));
    }
    if (failed == 0)
        flps_strbuf_printf(b, "All %zu checks passed.\n", n);
    else
        flps_strbuf_printf(b, "%d of %zu checks failed.\n", failed, n);
}

flps_err submit_doctor_report(const json_t *info, const char *url,
                              const submit_doctor_job *job, int json,
                              char **out, int *failed, char *failed_names,
                              size_t names_len)
{
    report r = {json_array(), 0, failed_names, names_len};
    const json_t *nodes;
    flps_strbuf b = FLPS_STRBUF_INIT;
    flps_err rc;
    char *s;

    if (!json_is_object(info)) {
        json_decref(r.checks);
        return FLPS_EINVAL;
    }
    if (r.checks == NULL)
        return FLPS_ENOMEM;
    if (failed_names != NULL && names_len > 0)
        failed_names[0] = '\0';
    check_scheduler(&r, info, url);
    nodes = json_object_get(info, "nodes");
    if (check_redis(&r, info)) {
        if (!json_is_array(nodes))
            add(&r, "agents", 0,
                "the scheduler's /v1/info has no \"nodes\"; is it as new as "
                "this flsubmit?");
        else if (check_agents(&r, nodes) > 0) {
            char ok[64];

            if (job->given && job->synthetic)
                add(&r, "dataset", 1,
                    "not needed: the job uses the synthetic dataset");
            else
                per_node(&r, info, "dataset", "Fashion-MNIST present",
                         dataset_problem);
            if (job->given && job->rdma)
                per_node(&r, info, "rdma",
                         "an ACTIVE RDMA port and memlock limit fit",
                         rdma_problem);
            else if (job->given && job->rdma_auto)
                check_rdma_auto(&r, nodes);
            snprintf(ok, sizeof(ok), "within %.0f s of flsched's",
                     SUBMIT_DOCTOR_MAX_SKEW_S);
            per_node(&r, info, "clocks", ok, clock_problem);
        }
    }
    if (json) {
        json_t *o =
            json_pack("{s:b,s:O}", "ok", r.failed == 0, "checks", r.checks);

        rc = o != NULL ? jsonout_append(&b, o) : FLPS_ENOMEM;
        json_decref(o);
    } else {
        render_text(&b, r.checks, r.failed);
        rc = flps_strbuf_error(&b);
    }
    json_decref(r.checks);
    if (json)
        flps_strbuf_puts(&b, "\n");
    s = flps_strbuf_take(&b);
    if (rc != FLPS_OK || s == NULL) {
        flps_free(s);
        return rc != FLPS_OK ? rc : FLPS_ENOMEM;
    }
    *out = s;
    *failed = r.failed;
    return FLPS_OK;
}
