/* The one factory for every transport: what `transport: zmq | rdma | auto`
 * makes on this node. Names come from transports/names.h, the transports
 * from the registry, the node's RDMA facts from rdma/probe.h. */
#include "transports/select.h"

#include <stdio.h>
#include <string.h>

#include "rdma/probe.h"
#include "transports/registry.h"

typedef struct tk_row {
    const char *name, *label, *what;
    const char *unbuilt; /* NULL: every build has it */
} tk_row;

static const tk_row tk_rows[] = {
#define TK_ROW(kind, name, label, what, unbuilt)                               \
    [TRANSPORT_KIND_##kind] = {name, label, what, unbuilt},
    TRANSPORT_NAME_MAP(TK_ROW)
#undef TK_ROW
};

#define TK_COUNT (sizeof(tk_rows) / sizeof(tk_rows[0]))

/* The names table's row of k, or NULL outside the enum. */
static const tk_row *tk_row_of(transport_kind k)
{
    return (unsigned)k < TK_COUNT ? &tk_rows[k] : NULL;
}

const char *transport_kind_name(transport_kind k)
{
    const tk_row *r = tk_row_of(k);

    return r != NULL ? r->name : "unknown";
}

const char *transport_kind_what(transport_kind k)
{
    const tk_row *r = tk_row_of(k);

    return r != NULL ? r->what : "unknown";
}

int transport_kind_parse(const char *name, transport_kind *out)
{
    for (size_t i = 0; name != NULL && i < TK_COUNT; i++)
        if (strcmp(name, tk_rows[i].name) == 0) {
            if (out != NULL)
                *out = (transport_kind)i;
            return 1;
        }
    return 0;
}

char *transport_kind_choices(char *buf, size_t len)
{
    size_t n = 0;

    if (buf == NULL || len == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < TK_COUNT && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s",
                              i == 0              ? ""
                              : i + 1 == TK_COUNT ? " or "
                                                  : ", ",
                              tk_rows[i].name);
    return buf;
}

int transport_is_built(transport_kind k)
{
    const tk_row *r = tk_row_of(k);

    return r != NULL &&
           (r->unbuilt == NULL || transport_registry_find(r->name) != NULL);
}

/* FLPS_ECONFIG with why saying that this build lacks kind k (which is in
 * the enum) and what to do. */
static flps_err not_built(transport_kind k, char *why, size_t whylen)
{
    if (tk_rows[k].unbuilt == NULL) /* a table row without its reason */
        return flps_errbuf_set(why, whylen, FLPS_ECONFIG,
                               "this build has no %s transport",
                               tk_rows[k].label);
    return flps_errbuf_set(why, whylen, FLPS_ECONFIG, "%s", tk_rows[k].unbuilt);
}

/* Make kind k through the registry. */
static flps_err make(transport_kind k, const transport_select *o,
                     const rdma_probe *node, transport **out, char *why,
                     size_t whylen)
{
    const transport_entry *e = transport_registry_find(transport_kind_name(k));

    if (e == NULL)
        return not_built(k, why, whylen);
    return e->create(o, node, out, why, whylen);
}

/* Could RDMA run here? FLPS_OK, or FLPS_ECONFIG with the cause and the fix
 * in reason. p receives the node's probe. */
static flps_err rdma_feasible(const transport_select *o, rdma_probe *p,
                              char *reason, size_t len)
{
    flps_err rc = rdma_probe_run(o->sysfs_root, p);

    reason[0] = '\0';
    if (rc != FLPS_OK)
        return flps_errbuf_set(reason, len, rc, "the sysfs root is too long");
    if (!rdma_probe_usable(p, 0, reason, len))
        return FLPS_ECONFIG;
    if (!transport_is_built(TRANSPORT_KIND_RDMA))
        return not_built(TRANSPORT_KIND_RDMA, reason, len);
    return FLPS_OK;
}

/* auto's line for a fallback: the cause, without its fix (auto has
 * applied it already). */
static void auto_zmq_line(char *reason, char *why, size_t whylen)
{
    if (strstr(reason, "; ") != NULL)
        *strstr(reason, "; ") = '\0';
    flps_errbuf_set(why, whylen, FLPS_OK, "transport: auto: %s, because %s",
                    tk_rows[TRANSPORT_KIND_ZMQ].label, reason);
}

static void auto_rdma_line(const rdma_probe *p, char *why, size_t whylen)
{
    char ports[256];

    flps_errbuf_set(why, whylen, FLPS_OK,
                    "transport: auto: %s, because this node has an ACTIVE "
                    "RDMA port (%s)",
                    tk_rows[TRANSPORT_KIND_RDMA].label,
                    rdma_probe_active_list(p, ports, sizeof(ports)));
}

static flps_err check_kind(const transport_select *o, char *why, size_t whylen)
{
    char choices[64];

    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (o == NULL)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "transport: no options given");
    if (tk_row_of(o->kind) == NULL)
        return flps_errbuf_set(
            why, whylen, FLPS_EINVAL, "transport: unknown kind %d; use %s",
            (int)o->kind, transport_kind_choices(choices, sizeof(choices)));
    return FLPS_OK;
}

flps_err transport_resolve(const transport_select *o, transport_kind *chosen,
                           char *why, size_t whylen)
{
    char reason[768];
    rdma_probe p;
    flps_err rc = check_kind(o, why, whylen);

    if (rc != FLPS_OK)
        return rc;
    if (o->kind == TRANSPORT_KIND_ZMQ) {
        if (chosen != NULL)
            *chosen = TRANSPORT_KIND_ZMQ;
        return FLPS_OK;
    }
    rc = rdma_feasible(o, &p, reason, sizeof(reason));
    if (rc != FLPS_OK && o->kind == TRANSPORT_KIND_RDMA)
        return flps_errbuf_set(why, whylen, rc, "transport: rdma: %s", reason);
    if (o->kind == TRANSPORT_KIND_AUTO) {
        if (rc == FLPS_OK)
            auto_rdma_line(&p, why, whylen);
        else
            auto_zmq_line(reason, why, whylen);
    }
    if (chosen != NULL)
        *chosen = rc == FLPS_OK ? TRANSPORT_KIND_RDMA : TRANSPORT_KIND_ZMQ;
    return FLPS_OK;
}

flps_err transport_create_for(const transport_select *o, transport **out,
                              transport_kind *chosen, char *why, size_t whylen)
{
    char reason[768];
    rdma_probe p;
    transport *t = NULL;
    flps_err rc = check_kind(o, why, whylen);

    if (rc != FLPS_OK)
        return rc;
    if (out == NULL)
        return flps_errbuf_set(why, whylen, FLPS_EINVAL,
                               "transport: nowhere to put it");
    if (o->kind == TRANSPORT_KIND_ZMQ) {
        rc = make(TRANSPORT_KIND_ZMQ, o, NULL, &t, why, whylen);
        goto done;
    }
    rc = rdma_feasible(o, &p, reason, sizeof(reason));
    if (rc == FLPS_OK)
        rc = make(TRANSPORT_KIND_RDMA, o, &p, &t, reason, sizeof(reason));
    if (rc == FLPS_OK) {
        if (o->kind == TRANSPORT_KIND_AUTO)
            auto_rdma_line(&p, why, whylen);
        goto done;
    }
    if (o->kind == TRANSPORT_KIND_RDMA)
        return flps_errbuf_set(why, whylen, rc, "transport: rdma: %s", reason);
    rc = make(TRANSPORT_KIND_ZMQ, o, NULL, &t, why, whylen);
    if (rc != FLPS_OK)
        return rc;
    auto_zmq_line(reason, why, whylen);
    *out = t;
    if (chosen != NULL)
        *chosen = TRANSPORT_KIND_ZMQ;
    return FLPS_OK;
done:
    if (rc != FLPS_OK)
        return rc;
    *out = t;
    if (chosen != NULL)
        *chosen = o->kind == TRANSPORT_KIND_ZMQ ? TRANSPORT_KIND_ZMQ
                                                : TRANSPORT_KIND_RDMA;
    return FLPS_OK;
}
