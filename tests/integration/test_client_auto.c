/* compression "auto" against real flps shards: a codec per layer, changed
 * mid-run with flps_client_set_layer_codec, must keep the replicas equal
 * to the shards' model and to a hand simulation of top-k with error
 * feedback; and flworker must print its profile and follow a plan file. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flps.h"
#include "runcmd.h"
#include "spawn.h"

#define NT 3
#define NW 2
/* Part size 4 so both shards own parts: t0 = 10 -> 4,4,2; t1 = 7 -> 4,3;
 * t2 = 3 -> 3. All below 4096 elements: every layer starts dense. */
static const size_t numel[NT] = {10, 7, 3};

typedef struct worker {
    float *data[NT];
    flps_tensor tensors[NT];
    flps_client *c;
} worker;

static void start_shards(test_shard *s, int n, const char *job, char *dir)
{
    char log[160], shards[16], idx[16];

    cr_assert_not_null(mkdtemp(dir));
    snprintf(shards, sizeof(shards), "%d", n);
    for (int i = 0; i < n; i++) {
        const char *args[] = {"--job",    job,    "--shard", idx,
                              "--shards", shards, NULL};
        snprintf(idx, sizeof(idx), "%d", i);
        snprintf(log, sizeof(log), "%s/s%d.log", dir, i);
        cr_assert_eq(test_shard_start(&s[i], log, args), 0,
                     "shard %d did not start", i);
    }
}

static void worker_init(worker *w, const char *job, uint32_t rank,
                        uint32_t workers, const char *const *servers,
                        uint32_t nservers, const char *compression, double lr)
{
    flps_client_config cfg;
    static const char *names[NT] = {"a.weight", "a.bias", "b.weight"};

    for (int t = 0; t < NT; t++) {
        w->data[t] = calloc(numel[t], sizeof(float));
        cr_assert_not_null(w->data[t]);
        for (size_t i = 0; i < numel[t]; i++)
            w->data[t][i] =
                rank == 0 ? (float)(t * 100 + (int)i) * 0.5f : -999.0f;
        w->tensors[t].name = names[t];
        w->tensors[t].numel = numel[t];
        w->tensors[t].data = w->data[t];
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = job;
    cfg.rank = rank;
    cfg.workers = workers;
    cfg.servers = servers;
    cfg.nservers = nservers;
    cfg.tensors = w->tensors;
    cfg.ntensors = NT;
    cfg.part_size = 4;
    cfg.compression = compression;
    cfg.lr = lr;
    cfg.momentum = 0;
    cfg.retry_ms = 300;
    cfg.deadline_ms = 20000;
    cr_assert_eq(flps_client_create(&cfg, &w->c), FLPS_OK,
                 "client %u could not register with the shards", rank);
}

static void worker_fini(worker *w)
{
    flps_client_destroy(w->c);
    for (int t = 0; t < NT; t++)
        free(w->data[t]);
}

/* Multiples of 1/4 in [-1.5, 1.5]: every sum below is exact in float. */
static float grad_of(int r, uint64_t it, int t, size_t i)
{
    return (float)(((int)i * 7 + t * 3 + r * 5 + (int)it * 11) % 13 - 6) *
           0.25f;
}

/* The test's own model of a worker: residual per layer, and the k of the
 * layer's codec (numel = dense). */
typedef struct sim {
    float r[NW][NT][16];
    size_t k[NT];
} sim;

/* Exact top-k of |a| with ties to the lower index: mark the chosen. */
static void sim_topk(const float *a, size_t n, size_t k, int *chosen)
{
    memset(chosen, 0, n * sizeof(*chosen));
    for (size_t q = 0; q < k; q++) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (!chosen[i] && (best == n || fabsf(a[i]) > fabsf(a[best])))
                best = i;
        chosen[best] = 1;
    }
}

/* One iteration on every worker and in the simulation; returns what the
 * workers' stats say they sent (pairs) in it, summed over workers. */
static uint64_t step(worker *w, sim *s, uint64_t it, float **expect, double lr)
{
    const float scale = (float)(lr / NW);
    uint64_t before = 0, after = 0;
    flps_client_stats st;

    for (int r = 0; r < NW; r++) {
        flps_client_get_stats(w[r].c, &st);
        before += st.elements_sent;
    }
    for (int r = 0; r < NW; r++) {
        for (int t = NT - 1; t >= 0; t--) {
            float g[16];
            for (size_t i = 0; i < numel[t]; i++)
                g[i] = grad_of(r, it, t, i);
            cr_assert_eq(flps_client_push(w[r].c, (uint32_t)t, g, it), FLPS_OK,
                         "%s", flps_client_last_error(w[r].c));
        }
    }
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_wait(w[r].c, it), FLPS_OK, "%s",
                     flps_client_last_error(w[r].c));
    for (int r = 0; r < NW; r++) {
        flps_client_get_stats(w[r].c, &st);
        after += st.elements_sent;
    }
    /* The shard sums the pushed pairs in rank order and sends
     * -(lr/W * sum) for every index anyone pushed. */
    for (int t = 0; t < NT; t++) {
        float acc[16] = {0};
        int touched[16] = {0};
        for (int r = 0; r < NW; r++) {
            float a[16];
            int chosen[16];
            for (size_t i = 0; i < numel[t]; i++)
                a[i] = s->r[r][t][i] + grad_of(r, it, t, i);
            sim_topk(a, numel[t], s->k[t], chosen);
            for (size_t i = 0; i < numel[t]; i++) {
                if (chosen[i]) {
                    acc[i] += a[i];
                    touched[i] = 1;
                    s->r[r][t][i] = 0;
                } else {
                    s->r[r][t][i] = a[i];
                }
            }
        }
        for (size_t i = 0; i < numel[t]; i++)
            if (touched[i])
                expect[t][i] += -(scale * acc[i]);
    }
    return after - before;
}

static void assert_replicas(worker *w, float **expect)
{
    for (int r = 0; r < NW; r++)
        for (int t = 0; t < NT; t++)
            for (size_t i = 0; i < numel[t]; i++)
                cr_assert_eq(w[r].data[t][i], expect[t][i],
                             "rank %d tensor %d element %zu: %g, expected %g",
                             r, t, i, (double)w[r].data[t][i],
                             (double)expect[t][i]);
}

static void set_codec_everywhere(worker *w, uint32_t t, const char *spec)
{
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_set_layer_codec(w[r].c, t, spec), FLPS_OK,
                     "rank %d: %s", r, flps_client_last_error(w[r].c));
}

Test(
    client_auto,
    a_layer_switched_from_topk_to_dense_keeps_replicas_exact_and_flushes_its_residual,
    .timeout = 60)
{
    char dir[] = "/tmp/flps-auto-XXXXXX";
    test_shard s[2];
    const char *servers[2];
    worker w[NW];
    float *expect[NT];
    sim sm;
    const double lr = 0.5;
    uint64_t it = 0, sent;

    start_shards(s, 2, "auto", dir);
    servers[0] = s[0].endpoint;
    servers[1] = s[1].endpoint;
    for (uint32_t r = 0; r < NW; r++)
        worker_init(&w[r], "auto", r, NW, servers, 2, "auto", lr);
    for (int r = 0; r < NW; r++)
        cr_assert_eq(flps_client_init(w[r].c), FLPS_OK, "%s",
                     flps_client_last_error(w[r].c));
    memset(&sm, 0, sizeof(sm));
    for (int t = 0; t < NT; t++) {
        expect[t] = calloc(numel[t], sizeof(float));
        for (size_t i = 0; i < numel[t]; i++)
            expect[t][i] = (float)(t * 100 + (int)i) * 0.5f;
        sm.k[t] = numel[t]; /* small layers start dense */
    }
    assert_replicas(w, expect);

    /* Dense from the start: every element of every layer is a pair. */
    sent = step(w, &sm, it++, expect, lr);
    cr_assert_eq(sent, NW * (10 + 7 + 3), "dense layers send all pairs");
    assert_replicas(w, expect);

    /* Layer 0 to top-k: 5 of its 10 pairs, the rest kept as residual. */
    set_codec_everywhere(w, 0, "topk:0.5");
    sm.k[0] = 5;
    for (int k = 0; k < 4; k++) {
        sent = step(w, &sm, it++, expect, lr);
        cr_assert_eq(sent, NW * (5 + 7 + 3));
        assert_replicas(w, expect);
    }
    {
        float left = 0;
        for (int r = 0; r < NW; r++)
            for (size_t i = 0; i < numel[0]; i++)
                left += fabsf(sm.r[r][0][i]);
        cr_assert_gt(left, 0, "the test needs a residual to carry over");
    }

    /* Back to dense: the next push sends residual + gradient, all of it. */
    set_codec_everywhere(w, 0, "dense");
    sm.k[0] = numel[0];
    sent = step(w, &sm, it++, expect, lr);
    cr_assert_eq(sent, NW * (10 + 7 + 3));
    assert_replicas(w, expect);

    /* Conservation: the residual is flushed, so everything accumulated was
     * sent: the model is the initial one minus lr/W times every gradient
     * (all sums exact: quarters times a quarter). */
    for (int t = 0; t < NT; t++) {
        for (size_t i = 0; i < numel[t]; i++) {
            float total = 0, want;
            for (uint64_t j = 0; j < it; j++)
                for (int r = 0; r < NW; r++)
                    total += grad_of(r, j, t, i);
            want = (float)(t * 100 + (int)i) * 0.5f - (float)(lr / NW) * total;
            cr_assert_eq(w[0].data[t][i], want,
                         "tensor %d element %zu: %g, everything sent gives %g",
                         t, i, (double)w[0].data[t][i], (double)want);
        }
    }

    /* What the shards hold, read back by a full pull. */
    for (int t = 0; t < NT; t++)
        memset(w[1].data[t], 0, numel[t] * sizeof(float));
    cr_assert_eq(flps_client_pull(w[1].c), FLPS_OK);
    assert_replicas(w, expect);

    for (int r = 0; r < NW; r++)
        worker_fini(&w[r]);
    cr_assert_eq(test_shard_stop(&s[0], SIGTERM), 0);
    cr_assert_eq(test_shard_stop(&s[1], SIGTERM), 0);
    for (int t = 0; t < NT; t++)
        free(expect[t]);
}

Test(client_auto,
     set_layer_codec_is_refused_outside_auto_jobs_and_for_other_codecs,
     .timeout = 60)
{
    char dir1[] = "/tmp/flps-auto-XXXXXX", dir2[] = "/tmp/flps-auto-XXXXXX";
    test_shard s1, s2;
    const char *servers[1];
    worker w;
    float g[16] = {1, -2, 3};

    start_shards(&s1, 1, "plain", dir1);
    servers[0] = s1.endpoint;
    worker_init(&w, "plain", 0, 1, servers, 1, "topk:0.5", 0.5);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "dense"), FLPS_ESTATE);
    cr_assert_str_eq(flps_client_last_error(w.c), "", "not a sticky error");
    worker_fini(&w);
    cr_assert_eq(test_shard_stop(&s1, SIGTERM), 0);

    start_shards(&s2, 1, "auto1", dir2);
    servers[0] = s2.endpoint;
    worker_init(&w, "auto1", 0, 1, servers, 1, "auto", 0.5);
    cr_assert_eq(flps_client_init(w.c), FLPS_OK);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "qsgd:4"), FLPS_EINVAL);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "gtopk:0.1"), FLPS_EINVAL);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "topk:0"), FLPS_EINVAL);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "topk:1.5"), FLPS_EINVAL);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "auto"), FLPS_EINVAL);
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, NULL), FLPS_EINVAL);
    cr_assert_eq(flps_client_set_layer_codec(w.c, NT, "dense"), FLPS_EINVAL);
    cr_assert_str_eq(flps_client_last_error(w.c), "", "not a sticky error");
    /* The refused calls changed nothing: layer 0 is still dense. */
    for (int t = NT - 1; t >= 0; t--)
        cr_assert_eq(flps_client_push(w.c, (uint32_t)t, g, 0), FLPS_OK);
    cr_assert_eq(flps_client_wait(w.c, 0), FLPS_OK);
    {
        flps_client_stats st;
        flps_client_get_stats(w.c, &st);
        cr_assert_eq(st.elements_sent, 10 + 7 + 3);
    }
    cr_assert_eq(flps_client_set_layer_codec(w.c, 0, "topk:0.3"), FLPS_OK);
    worker_fini(&w);
    cr_assert_eq(test_shard_stop(&s2, SIGTERM), 0);
}

Test(client_auto, large_layers_start_on_topk_and_the_network_is_measured,
     .timeout = 60)
{
    char dir[] = "/tmp/flps-auto-XXXXXX";
    test_shard s;
    const char *servers[1];
    flps_tensor tensors[2];
    flps_client_config cfg;
    flps_client *c = NULL;
    flps_client_stats st;
    float *big = calloc(4096, sizeof(float)), *small = calloc(4095, 4);
    float *g = calloc(4096, sizeof(float));
    double alpha = 0, beta = 0;

    cr_assert(big && small && g);
    for (size_t i = 0; i < 4096; i++) {
        big[i] = (float)i;
        g[i] = (float)(i % 97) - 48.0f;
    }
    start_shards(&s, 1, "auto2", dir);
    servers[0] = s.endpoint;
    tensors[0] = (flps_tensor){"big.weight", 4096, big};
    tensors[1] = (flps_tensor){"small.weight", 4095, small};
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = "auto2";
    cfg.workers = 1;
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.tensors = tensors;
    cfg.ntensors = 2;
    cfg.part_size = 1000;
    cfg.compression = "auto";
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    cr_assert_eq(flps_client_create(&cfg, &c), FLPS_OK);
    cr_assert_eq(flps_client_init(c), FLPS_OK);
    cr_assert_eq(flps_client_measure_network(c, &alpha, &beta), FLPS_OK, "%s",
                 flps_client_last_error(c));
    cr_assert_gt(alpha, 0);
    cr_assert_gt(beta, 0);
    cr_assert_lt(alpha, 1, "a loopback round trip is far below a second");
    for (size_t i = 0; i < 4096; i++)
        cr_assert_eq(big[i], (float)i, "the measuring pulls keep the model");

    cr_assert_eq(flps_client_push(c, 1, g, 0), FLPS_OK);
    cr_assert_eq(flps_client_push(c, 0, g, 0), FLPS_OK);
    cr_assert_eq(flps_client_measure_network(c, &alpha, &beta), FLPS_ESTATE,
                 "not while a push waits for its update");
    cr_assert_eq(flps_client_wait(c, 0), FLPS_OK);
    flps_client_get_stats(c, &st);
    cr_assert_eq(st.elements_sent, 40 + 4095,
                 "4096 elements: topk:0.01 (k = 40); 4095: dense");
    flps_client_destroy(c);
    cr_assert_eq(test_shard_stop(&s, SIGTERM), 0);
    free(big);
    free(small);
    free(g);
}

/* ---- flworker ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* The first stdout line of flworker that is an ev event, parsed; NULL
 * when there is none. Caller owns it. */
static json_t *find_event(const char *out, const char *ev)
{
    const char *p = out;

    return next_event(&p, ev);
}

static const char *const mlp_names[] = {"fc1.weight", "fc1.bias",
                                        "fc2.weight", "fc2.bias",
                                        "fc3.weight", "fc3.bias"};
static const long long mlp_numel[] = {200704, 256, 32768, 128, 1280, 10};

/* Start one shard of job name, run flworker on job with --plan plan, and
 * return its result. */
static void run_worker(const char *dir, const char *name, const char *plan,
                       run_result *r)
{
    char job[160], log[160], cmd[1024];
    test_shard s;
    const char *args[] = {"--job", name, "--shard", "0", "--shards", "1", NULL};

    snprintf(job, sizeof(job), "%s/%s.yaml", dir, name);
    snprintf(log, sizeof(log), "%s/%s-shard.log", dir, name);
    cr_assert_eq(test_shard_start(&s, log, args), 0);
    snprintf(cmd, sizeof(cmd),
             "%s/flworker --job %s --rank 0 --servers %s --plan %s",
             FLPS_BIN_DIR, job, s.endpoint, plan);
    run_cmd(cmd, r);
    cr_assert_eq(test_shard_stop(&s, SIGTERM), 0);
}

Test(client_auto, flworker_prints_its_profile_and_follows_the_plan_file,
     .timeout = 120)
{
    char dir[] = "/tmp/flps-autow-XXXXXX", path[160], plan[160];
    run_result r;
    json_t *prof, *ev, *layers;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/autow.yaml", dir);
    write_file(path, "name: autow\nmodel: mlp\ndataset: synthetic\n"
                     "workers: 1\nservers: 1\niterations: 60\n"
                     "compression: auto\n");
    snprintf(plan, sizeof(plan), "%s/plan.json", dir);
    write_file(plan,
               "{\"version\":3,\"layers\":["
               "{\"name\":\"fc1.weight\",\"numel\":200704,\"codec\":\"topk\","
               "\"density\":0.0123},"
               "{\"name\":\"fc1.bias\",\"numel\":256,\"codec\":\"dense\","
               "\"density\":1},"
               "{\"name\":\"fc2.weight\",\"numel\":32768,\"codec\":\"topk\","
               "\"density\":0.05},"
               "{\"name\":\"fc2.bias\",\"numel\":128,\"codec\":\"dense\","
               "\"density\":1},"
               "{\"name\":\"fc3.weight\",\"numel\":1280,\"codec\":\"dense\","
               "\"density\":1},"
               "{\"name\":\"fc3.bias\",\"numel\":10,\"codec\":\"dense\","
               "\"density\":1}],"
               "\"predicted_iteration_seconds\":0.01,"
               "\"dense_iteration_seconds\":0.02}\n");
    run_worker(dir, "autow", plan, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);

    prof = find_event(r.out, "profile");
    cr_assert_not_null(prof, "no profile event in %s", r.out);
    cr_assert_eq(json_integer_value(json_object_get(prof, "iteration")), 25);
    cr_assert_eq(json_integer_value(json_object_get(prof, "workers")), 1);
    cr_assert_gt(json_number_value(json_object_get(prof, "alpha")), 0);
    cr_assert_gt(json_number_value(json_object_get(prof, "beta")), 0);
    layers = json_object_get(prof, "layers");
    cr_assert_eq(json_array_size(layers), 6);
    for (size_t i = 0; i < 6; i++) {
        json_t *l = json_array_get(layers, i);
        cr_assert_str_eq(json_string_value(json_object_get(l, "name")),
                         mlp_names[i]);
        cr_assert_eq(json_integer_value(json_object_get(l, "numel")),
                     mlp_numel[i]);
        cr_assert_gt(json_number_value(json_object_get(l, "t_backward")), 0,
                     "layer %s", mlp_names[i]);
    }
    json_decref(prof);

    ev = find_event(r.out, "plan");
    cr_assert_not_null(ev, "no plan event in %s", r.out);
    cr_assert_eq(json_integer_value(json_object_get(ev, "version")), 3);
    cr_assert_eq(json_integer_value(json_object_get(ev, "iteration")), 0);
    json_decref(ev);
    cr_assert_not_null(strstr(r.err, "plan v3 applied: 2 layers sparse, 4 "
                                     "dense"),
                       "%s", r.err);
    run_free(&r);
}

Test(client_auto, flworker_ignores_a_broken_or_mismatched_plan_and_trains_on,
     .timeout = 120)
{
    char dir[] = "/tmp/flps-autob-XXXXXX", path[160], plan[160];
    run_result r;
    json_t *ev;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/autob.yaml", dir);
    write_file(path, "name: autob\nmodel: mlp\ndataset: synthetic\n"
                     "workers: 1\nservers: 1\niterations: 30\n"
                     "compression: auto\n");
    snprintf(plan, sizeof(plan), "%s/plan.json", dir);
    write_file(plan, "{\"version\":2,\"layers\":[{\"name\":\"fc1.wei");
    run_worker(dir, "autob", plan, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(find_event(r.out, "plan"));
    cr_assert_not_null(strstr(r.err, "ignored: not valid JSON"), "%s", r.err);
    ev = find_event(r.out, "done");
    cr_assert_not_null(ev);
    json_decref(ev);
    run_free(&r);

    /* Right names, one wrong size: refused as a whole. */
    write_file(plan, "{\"version\":2,\"layers\":["
                     "{\"name\":\"fc1.weight\",\"numel\":200704,\"codec\":"
                     "\"dense\",\"density\":1},"
                     "{\"name\":\"fc1.bias\",\"numel\":256,\"codec\":\"dense\","
                     "\"density\":1},"
                     "{\"name\":\"fc2.weight\",\"numel\":32769,\"codec\":"
                     "\"dense\",\"density\":1},"
                     "{\"name\":\"fc2.bias\",\"numel\":128,\"codec\":\"dense\","
                     "\"density\":1},"
                     "{\"name\":\"fc3.weight\",\"numel\":1280,\"codec\":"
                     "\"dense\",\"density\":1},"
                     "{\"name\":\"fc3.bias\",\"numel\":10,\"codec\":\"dense\","
                     "\"density\":1}],"
                     "\"predicted_iteration_seconds\":0.01,"
                     "\"dense_iteration_seconds\":0.01}");
    run_worker(dir, "autob", plan, &r);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert_null(find_event(r.out, "plan"));
    cr_assert_not_null(strstr(r.err, "fc2.weight with 32769"), "%s", r.err);
    run_free(&r);
}
