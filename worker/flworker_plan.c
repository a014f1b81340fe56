/* Following compression: auto's plan file: change detection, a bounded
 * read, services/plan.h's parser, the check against the model (no I/O),
 * applying it to the client. */
#include "worker/flworker_plan.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "compress/codec.h"
#include "services/event.h"
#include "services/plan.h"

#define FLW_PLAN_MAX_BYTES (1 << 20)

static int stat_changed(const struct stat *a, const struct stat *b)
{
    return a->st_dev != b->st_dev || a->st_ino != b->st_ino ||
           a->st_size != b->st_size || a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
           a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

/* Read the whole file into a fresh NUL-terminated buffer (caller frees);
 * NULL on error with why filled in. */
static char *read_small_file(const char *path, char *why, size_t whylen)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;

    if (f == NULL) {
        snprintf(why, whylen, "cannot open it: %s", strerror(errno));
        return NULL;
    }
    buf = malloc(FLW_PLAN_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    n = fread(buf, 1, FLW_PLAN_MAX_BYTES + 1, f);
    if (ferror(f) || n > FLW_PLAN_MAX_BYTES || memchr(buf, '\0', n) != NULL) {
        snprintf(why, whylen, "%s",
                 ferror(f)                ? "cannot read it"
                 : n > FLW_PLAN_MAX_BYTES ? "it is over 1 MiB"
                                          : "it holds a NUL byte");
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Check a parsed plan against the model: the same tensors in the same
 * order with the same sizes; on success write each tensor's codec spec
 * (specs[i], 32 bytes each) and the number of sparse layers. */
static int plan_fits(const plan *p, model *m, char (*specs)[32],
                     size_t *nsparse, char *why, size_t whylen)
{
    size_t nt = model_num_tensors(m), sparse = 0;

    if (p->nlayers != nt) {
        snprintf(why, whylen, "has %zu layers, the model has %zu", p->nlayers,
                 nt);
        return 0;
    }
    for (size_t i = 0; i < nt; i++) {
        const plan_layer *l = &p->layers[i];
        const model_tensor *t = model_tensor_at(m, i);
        codec_spec cs = plan_layer_spec(l);

        if (strcmp(l->name, t->name) != 0 || l->numel != t->numel) {
            snprintf(why, whylen,
                     "layer %zu is %s with %llu elements, the model's is %s "
                     "with %zu",
                     i, l->name, (unsigned long long)l->numel, t->name,
                     t->numel);
            return 0;
        }
        if (codec_spec_format(&cs, specs[i], sizeof(specs[i])) != FLPS_OK) {
            snprintf(why, whylen, "layer %s: its codec does not fit %zu bytes",
                     t->name, sizeof(specs[i]));
            return 0;
        }
        sparse += l->kind != CODEC_DENSE;
    }
    *nsparse = sparse;
    return 1;
}

static void print_plan_event(long long version, uint64_t iter)
{
    event ev = {.kind = EVENT_PLAN};

    ev.plan.version = (uint64_t)version;
    ev.plan.iteration = iter;
    (void)event_write(stdout, &ev);
}

/* The plan file's plan, checked against m, with the codec spec of each
 * tensor and how many are sparse; NULL (why says why) when it is missing,
 * broken or does not fit. Caller frees the plan and *specs. */
static plan *plan_load_file(const char *path, model *m, char (**specs)[32],
                            size_t *nsparse, char *why, size_t whylen)
{
    char *text = read_small_file(path, why, whylen);
    plan *p = NULL;

    if (text == NULL)
        return NULL;
    if (plan_parse(text, &p, why, whylen) != FLPS_OK)
        goto fail;
    *specs = calloc(model_num_tensors(m), sizeof(**specs));
    if (*specs == NULL) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    if (!plan_fits(p, m, *specs, nsparse, why, whylen))
        goto fail;
    free(text);
    return p;

fail:
    free(*specs);
    *specs = NULL;
    plan_free(p);
    free(text);
    return NULL;
}

int flw_plan_check(flw_plan *pw, flps_client *client, model *m, uint64_t iter)
{
    struct stat st;
    char why[256], (*specs)[32] = NULL;
    size_t nt = model_num_tensors(m), nsparse = 0;
    long long version;
    plan *p;
    int ok = 1;

    if (pw->path == NULL || stat(pw->path, &st) != 0)
        return 1; /* no plan yet is normal */
    if (pw->seen && !stat_changed(&st, &pw->st))
        return 1;
    pw->st = st;
    pw->seen = 1;
    p = plan_load_file(pw->path, m, &specs, &nsparse, why, sizeof(why));
    if (p == NULL) {
        log_warn("plan %s ignored: %s; keeping plan v%lld", pw->path, why,
                 pw->version);
        return 1;
    }
    version = p->version > LLONG_MAX ? LLONG_MAX : (long long)p->version;
    if (version <= pw->version) {
        log_warn("plan %s ignored: version %lld is not newer than v%lld",
                 pw->path, version, pw->version);
        goto out;
    }
    for (size_t i = 0; i < nt; i++) {
        flps_err rc =
            flps_client_set_layer_codec(client, (uint32_t)i, specs[i]);
        if (rc != FLPS_OK) {
            log_error("plan v%lld: cannot set %s of layer %s: %s", version,
                      specs[i], model_tensor_at(m, i)->name, flps_strerror(rc));
            ok = 0;
            goto out;
        }
    }
    pw->version = version;
    log_info("plan v%lld applied: %zu layers sparse, %zu dense", version,
             nsparse, nt - nsparse);
    print_plan_event(version, iter);
out:
    plan_free(p);
    free(specs);
    return ok;
}
