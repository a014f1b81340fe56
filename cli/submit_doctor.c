/* flsubmit doctor's checks over flsched's /v1/info, without I/O. */
#include "cli/submit_doctor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Within this many days of its end the certificate check says to renew. */
#define SUBMIT_DOCTOR_TLS_WARN_DAYS 30

#include "cli/submit_render.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/strbuf.h"
#include "services/jsonout.h"
#include "services/plural.h"

typedef struct report {
    json_t *checks; /* [{"check","ok","message"}] */
    int failed;
    flps_strbuf names; /* the failed checks, ", "-separated */
} report;

static void add(report *r, const char *check, int ok, const char *msg)
{
    json_array_append_new(r->checks, json_pack("{s:s,s:b,s:s}", "check", check,
                                               "ok", ok, "message", msg));
    if (ok)
        return;
    flps_strbuf_printf(&r->names, "%s%s", r->failed ? ", " : "", check);
    r->failed++;
}

/* add, with the message formatted; "out of memory" if it cannot be. */
static void addf(report *r, const char *check, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void addf(report *r, const char *check, int ok, const char *fmt, ...)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    va_list ap;
    char *msg;

    va_start(ap, fmt);
    flps_strbuf_vprintf(&b, fmt, ap);
    va_end(ap);
    msg = flps_strbuf_take(&b);
    add(r, check, ok, msg != NULL ? msg : "out of memory");
    flps_free(msg);
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
    const char *v = str(info, "version");

    addf(r, "scheduler", 1, "flsched %s answers at %s", v ? v : "(unknown)",
         url);
}

/* flsched's kubernetes launcher: the cluster runs a pod per shard and per
 * worker, so no agent, node dataset or clock is flsched's to check. 1 when
 * it is the launcher (its line added). */
static int check_kubernetes(report *r, const json_t *info)
{
    const json_t *l = json_object_get(info, "launcher");
    char msg[512];

    if (str(l, "kind") == NULL || strcmp(str(l, "kind"), "kubernetes") != 0)
        return 0;
    snprintf(msg, sizeof(msg),
             "kubernetes: %s per job in namespace %s (the JobSet CRD is %s), "
             "image %s unless the job file names one; the cluster places "
             "the pods",
             json_is_true(json_object_get(l, "jobset"))
                 ? "a JobSet"
                 : "Pods and a headless Service",
             str(l, "namespace") ? str(l, "namespace") : "?",
             json_is_true(json_object_get(l, "jobset")) ? "installed"
                                                        : "not installed",
             str(l, "image") ? str(l, "image") : "?");
    add(r, "launcher", 1, msg);
    return 1;
}

/* HTTPS: whom flsched's certificate names and until when, measured on
 * flsched's clock (its "time"). Expired or not yet valid fails; within
 * SUBMIT_DOCTOR_TLS_WARN_DAYS of its end it passes with "renew it". */
static void check_tls(report *r, const json_t *info)
{
    const json_t *tls = json_object_get(info, "tls");
    const char *names = str(tls, "names"), *cn = str(tls, "subject");
    double now = 0, from = 0, until = 0, days;
    char when[48], msg[900];

    if (!json_is_object(tls))
        return; /* plain HTTP */
    if (!num(info, "time", &now) || !num(tls, "not_before", &from) ||
        !num(tls, "not_after", &until)) {
        add(r, "tls", 0,
            "flsched's /v1/info says nothing of its certificate's "
            "dates; is it as new as this flsubmit?");
        return;
    }
    if (names == NULL || names[0] == '\0')
        names = cn != NULL && cn[0] != '\0' ? cn : "no name";
    if (now < from || until <= now) {
        flps_utc_text(now < from ? from : until, when, sizeof(when));
        snprintf(msg, sizeof(msg),
                 now < from ? "flsched's certificate (%s) is not valid before "
                              "%s; check the clocks or the certificate"
                            : "flsched's certificate (%s) expired on %s: renew "
                              "it; flsched serves the new one as soon as the "
                              "file changes",
                 names, when);
        add(r, "tls", 0, msg);
        return;
    }
    flps_utc_text(until, when, sizeof(when));
    days = (until - now) / 86400.0;
    snprintf(msg, sizeof(msg),
             "flsched's certificate (%s) expires on %s, in %.*f days%s", names,
             when, days < 10 ? 1 : 0, days,
             days < SUBMIT_DOCTOR_TLS_WARN_DAYS
                 ? ": renew it soon; flsched serves the new one as soon as "
                   "the file changes"
                 : "");
    add(r, "tls", 1, msg);
}

static int check_redis(report *r, const json_t *info)
{
    json_t *redis = json_object_get(info, "redis");
    const char *v = str(redis, "version"), *err = str(redis, "error");

    if (json_is_true(json_object_get(redis, "ok"))) {
        addf(r, "redis", 1, "Redis %s answers flsched",
             v ? v : "(unknown version)");
        return 1;
    }
    addf(r, "redis", 0,
         "flsched cannot reach its Redis (%s); start redis-server, or "
         "fix flsched's --redis URL and password",
         err ? err : "no answer");
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
    flps_strbuf_printf(b, "%s (%g %s, %s, %g %s)", str(n, "name"), cpus,
                       plural_word(cpus, "CPU", "CPUs"), mem, gpus,
                       plural_word(gpus, "GPU", "GPUs"));
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
        addf(r, "agents", 1, "%zu alive: %s", alive, text);
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
 * and each fix is said once. Each text grows to fit what the node
 * publishes (a data directory's path, its ports' states). */
typedef struct problem {
    flps_strbuf what;
    flps_strbuf fix;
    flps_strbuf ok; /* for a node that passes: what it has, shown beside
                       its name (empty says nothing more) */
} problem;

#define PROBLEM_INIT                                                           \
    {                                                                          \
        FLPS_STRBUF_INIT, FLPS_STRBUF_INIT, FLPS_STRBUF_INIT                   \
    }

static void problem_fini(problem *p)
{
    flps_strbuf_fini(&p->what);
    flps_strbuf_fini(&p->fix);
    flps_strbuf_fini(&p->ok);
}

/* The text of b: "" when empty, "out of memory" when it failed. */
static const char *text_of(const flps_strbuf *b)
{
    if (flps_strbuf_error(b) != FLPS_OK)
        return "out of memory";
    return b->data != NULL ? b->data : "";
}

/* Run one per-node check over the alive nodes: fn leaves p->what empty when
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
        problem p = PROBLEM_INIT;

        if (!node_is_alive(n) || str(n, "name") == NULL)
            continue;
        f = facts_of(n);
        if (f == NULL) {
            flps_strbuf_puts(&p.what, "its agent publishes no node checks");
            flps_strbuf_puts(&p.fix, "upgrade flagent there");
        } else {
            fn(info, f, &p);
        }
        if (p.what.len == 0 && !p.what.failed) {
            flps_strbuf_printf(&good, "%s%s", ngood++ ? ", " : "",
                               str(n, "name"));
            if (p.ok.len > 0 || p.ok.failed)
                flps_strbuf_printf(&good, " (%s)", text_of(&p.ok));
            problem_fini(&p);
            continue;
        }
        v = json_object_get(found, text_of(&p.what));
        if (v == NULL) {
            v = json_array();
            json_object_set_new(found, text_of(&p.what), v);
        }
        json_array_append_new(v, json_string(str(n, "name")));
        json_object_set_new(fixes, text_of(&p.fix), json_true());
        problem_fini(&p);
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
    flps_strbuf_printf(&p->what, "the Fashion-MNIST file %s is missing from %s",
                       missing, dir ? dir : "the agent's data directory");
    flps_strbuf_printf(
        &p->fix, "install it with `apt-get install dataset-fashion-mnist`, or "
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
        flps_strbuf_printf(&p->what,
                           "no RDMA device (/sys/class/infiniband is empty)");
        flps_strbuf_printf(&p->fix,
                           "run the job on nodes with RDMA NICs (check with "
                           "ibv_devinfo), or use transport: zmq or auto");
        return;
    }
    if (have_active && active < 1) {
        flps_strbuf_printf(&p->what, "no RDMA port is ACTIVE (%s)",
                           detail && *detail ? detail : "no port state read");
        flps_strbuf_printf(&p->fix,
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
        flps_strbuf_printf(
            &p->what,
            "flagent may lock only %s of memory (RLIMIT_MEMLOCK; RDMA "
            "needs at least %s)",
            have, want);
        flps_strbuf_printf(
            &p->fix,
            "raise it: ulimit -l unlimited, or LimitMEMLOCK=infinity in "
            "flagent's service, and IPC_LOCK for its container (Helm: "
            "agent.rdma.enabled=true)");
        return;
    }
    flps_strbuf_printf(&p->ok, "%s%smemlock %s", ports && *ports ? ports : "",
                       ports && *ports ? ", " : "", have);
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
    flps_strbuf_printf(
        &p->what, "the clock is %.1f s %s flsched's (more than %.0f s)",
        fabs(skew), skew > 0 ? "ahead of" : "behind", SUBMIT_DOCTOR_MAX_SKEW_S);
    flps_strbuf_printf(&p->fix,
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
        problem p = PROBLEM_INIT;

        if (!node_is_alive(n) || str(n, "name") == NULL)
            continue;
        if (f != NULL)
            rdma_problem(NULL, f, &p);
        if (f != NULL && p.what.len == 0 && !p.what.failed)
            flps_strbuf_printf(&yes, "%s%s (%s)", nyes++ ? ", " : "",
                               str(n, "name"), text_of(&p.ok));
        else
            flps_strbuf_printf(&no, "%s%s", nno++ ? ", " : "", str(n, "name"));
        problem_fini(&p);
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
        flps_strbuf_printf(b, "All %zu %s passed.\n", n,
                           plural_word((double)n, "check", "checks"));
    else
        flps_strbuf_printf(b, "%d of %zu %s failed.\n", failed, n,
                           plural_word((double)n, "check", "checks"));
}

flps_err submit_doctor_report(const json_t *info, const char *url,
                              const submit_doctor_job *job, int json,
                              char **out, int *failed, char **failed_names)
{
    report r = {json_array(), 0, FLPS_STRBUF_INIT};
    const json_t *nodes;
    flps_strbuf b = FLPS_STRBUF_INIT;
    flps_err rc;
    char *s, *names;

    if (!json_is_object(info)) {
        json_decref(r.checks);
        return FLPS_EINVAL;
    }
    if (r.checks == NULL)
        return FLPS_ENOMEM;
    check_scheduler(&r, info, url);
    check_tls(&r, info);
    nodes = json_object_get(info, "nodes");
    if (check_redis(&r, info) && !check_kubernetes(&r, info)) {
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
    names = flps_strbuf_take(&r.names);
    if (rc != FLPS_OK || s == NULL || names == NULL) {
        flps_free(s);
        flps_free(names);
        return rc != FLPS_OK ? rc : FLPS_ENOMEM;
    }
    *out = s;
    *failed = r.failed;
    if (failed_names != NULL)
        *failed_names = names;
    else
        flps_free(names);
    return FLPS_OK;
}
