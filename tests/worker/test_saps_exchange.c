/* The exchange of decentralized training (worker/peer_net.c,
 * worker/peer_sync.c, worker/peer_saps.c), on loopback in one process:
 * the probe's schedule, the shared mask, members refused without the
 * job's secret, and workers in threads that average exactly the masked
 * values with the peer the matching names, agree on every matching, end
 * in the consensus, and go on without a worker that stops or never
 * joins. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/tcplisten.h"
#include "compress/codec.h"
#include "flps.h"
#include "proto/creds.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "worker/client_metrics.h"
#include "worker/peer_net.h"
#include "worker/saps_peers.h"

#define MAXW 8
#define NT 2
static const size_t numel[NT] = {1000, 37};

/* n free loopback endpoints, comma-separated, into list. */
static void free_endpoints(uint32_t n, char *list, size_t len)
{
    int fds[MAXW];
    size_t at = 0;

    list[0] = '\0';
    for (uint32_t i = 0; i < n; i++) {
        char bound[64];

        cr_assert_eq(
            tcplisten_open("127.0.0.1:0", 1, &fds[i], bound, sizeof(bound)),
            FLPS_OK);
        at += (size_t)snprintf(list + at, len - at, "%stcp://%s", i ? "," : "",
                               bound);
    }
    for (uint32_t i = 0; i < n; i++)
        close(fds[i]);
}

/* A credentials file for this process's workers (as flrun makes one). */
static void use_credentials(const char *secret_hex)
{
    static char path[64];
    flps_creds c;
    char why[256];

    snprintf(path, sizeof(path), "/tmp/saps-creds-%d", (int)getpid());
    cr_assert_eq(creds_generate(0, &c, why, sizeof(why)), FLPS_OK, "%s", why);
    if (secret_hex != NULL)
        snprintf(c.secret, sizeof(c.secret), "%s", secret_hex);
    cr_assert_eq(creds_write(path, &c, 1, why, sizeof(why)), FLPS_OK, "%s",
                 why);
    setenv(CREDS_ENV, path, 1);
}

Test(saps_exchange, the_probe_schedule_pairs_every_two_workers_once)
{
    for (uint32_t m = 0; m <= 40; m++) {
        static uint8_t seen[40][40];
        uint32_t mate[40];

        memset(seen, 0, sizeof(seen));
        cr_assert_eq(saps_probe_rounds(m), m < 2 ? 0 : m - 1 + m % 2);
        for (uint32_t k = 0; k < saps_probe_rounds(m); k++) {
            uint32_t idle = 0;

            saps_probe_pairs(m, k, mate);
            for (uint32_t i = 0; i < m; i++) {
                if (mate[i] == SAPS_NO_PEER) {
                    idle++;
                    continue;
                }
                cr_assert_lt(mate[i], m);
                cr_assert_neq(mate[i], i);
                cr_assert_eq(mate[mate[i]], i, "pairs are disjoint");
                cr_assert_eq(seen[i][mate[i]], 0, "m %u: %u-%u twice", m, i,
                             mate[i]);
                seen[i][mate[i]] = 1;
            }
            cr_assert_eq(idle, m % 2, "m %u round %u: %u idle", m, k, idle);
        }
        for (uint32_t i = 0; i < m; i++)
            for (uint32_t j = 0; j < m; j++)
                cr_assert_eq(seen[i][j], i != j, "m %u: %u-%u never", m, i, j);
        saps_probe_pairs(m, saps_probe_rounds(m), mate);
        for (uint32_t i = 0; i < m; i++)
            cr_assert_eq(mate[i], SAPS_NO_PEER, "no round past the last");
    }
}

Test(saps_exchange, the_mask_is_a_function_of_the_seed_round_and_tensor)
{
    uint64_t bm[(1000 + 63) / 64];
    uint32_t a[10], b[10], c[10];

    codec_randk_indices(1000, 10, saps_mask_seed(7, 3, 0), bm, a);
    codec_randk_indices(1000, 10, saps_mask_seed(7, 3, 0), bm, b);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "the same draw everywhere");
    for (int i = 1; i < 10; i++)
        cr_assert_gt(a[i], a[i - 1], "distinct and ascending");
    codec_randk_indices(1000, 10, saps_mask_seed(7, 4, 0), bm, c);
    cr_assert_neq(memcmp(a, c, sizeof(a)), 0, "another round, another mask");
    cr_assert_neq(saps_mask_seed(7, 3, 0), saps_mask_seed(7, 3, 1));
    cr_assert_neq(saps_mask_seed(7, 3, 0), saps_mask_seed(8, 3, 0));
}

Test(saps_exchange, a_message_without_the_jobs_secret_is_refused)
{
    char list[256], ep[2][128], why[512];
    const char *eps[2];
    peer_net *net[2] = {NULL, NULL};
    peer_msg *m = NULL;
    peer_net_stats st;
    float v[3] = {1, 2, 3};

    use_credentials(NULL);
    free_endpoints(2, list, sizeof(list));
    sscanf(list, "%127[^,],%127s", ep[0], ep[1]);
    eps[0] = ep[0];
    eps[1] = ep[1];
    for (uint32_t r = 0; r < 2; r++) {
        peer_net_cfg c = {.job = "j",
                          .rank = r,
                          .workers = 2,
                          .endpoints = eps,
                          .kind = TRANSPORT_KIND_ZMQ,
                          .max_values = 16};
        cr_assert_eq(peer_net_create(&c, &net[r], why, sizeof(why)), FLPS_OK,
                     "%s", why);
    }
    /* A member's message arrives, values and all. */
    cr_assert_eq(peer_net_send(net[0], 1, PEER_VALUES, 5, 0, v, 3), FLPS_OK);
    cr_assert_eq(
        peer_net_take(net[1], PEER_VALUES, 5, 0, 0, flps_mono_s() + 10, &m),
        FLPS_OK);
    cr_assert_eq(m->n, 3);
    cr_assert_eq(m->from, 0);
    cr_assert_float_eq(m->val[2], 3.0f, 0);
    peer_msg_free(m);
    m = NULL;
    /* One from a process with another secret (on the same endpoint) is
     * refused in its handshake and counted. */
    {
        flps_creds other;
        transport *t = NULL;
        uint32_t peer;
        proto_msg pm;
        proto_frame pf[PROTO_MAX_FRAMES];
        transport_frame tf[2];
        void *hdr = NULL;
        size_t hl = 0, nf = 0;
        proto_buf *hb, *pb = proto_buf_create(sizeof(v));

        memcpy(proto_buf_data(pb), v, sizeof(v));
        cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
        cr_assert_eq(creds_generate(0, &other, why, sizeof(why)), FLPS_OK);
        cr_assert_eq(transport_set_credentials(t, &other, 0, why, sizeof(why)),
                     FLPS_OK, "%s", why);
        cr_assert_eq(transport_connect(t, ep[1], &peer), FLPS_OK);
        memset(&pm, 0, sizeof(pm));
        pm.op = PROTO_OP_PEER;
        snprintf(pm.job, sizeof(pm.job), "j");
        pm.rank = 0;
        pm.part = PEER_VALUES;
        pm.iter = 6;
        pm.codec = PROTO_CODEC_DENSE;
        pm.n = 3;
        pm.val = proto_buf_data(pb);
        snprintf(pm.auth, sizeof(pm.auth), "%064d", 0);
        pm.cid = 42;
        cr_assert_eq(proto_msg_encode(&pm, &hdr, &hl, pf, &nf), FLPS_OK);
        hb = proto_buf_wrap(hdr, hl);
        tf[0] = (transport_frame){hb, 0, hl};
        tf[1] = (transport_frame){pb, 0, sizeof(v)};
        cr_assert_eq(transport_send(t, peer, tf, 2), FLPS_OK);
        cr_assert_eq(peer_net_take(net[1], PEER_VALUES, 6, 0, PEER_ANY,
                                   flps_mono_s() + 1, &m),
                     FLPS_ETIMEDOUT);
        proto_buf_release(hb);
        proto_buf_release(pb);
        transport_destroy(t);
    }
    peer_net_get_stats(net[1], &st);
    cr_assert_eq(st.auth_refused, 1, "refused %llu",
                 (unsigned long long)st.auth_refused);
    cr_assert_eq(peer_net_send(net[0], 0, PEER_VALUES, 0, 0, v, 3), FLPS_EINVAL,
                 "not to itself");
    peer_net_destroy(net[0]);
    peer_net_destroy(net[1]);
}

/* ---- workers in threads ---- */

typedef struct wk {
    uint32_t rank, workers, rounds;
    uint32_t stop_after; /* leave after this many rounds (0: never) */
    uint64_t reprobe;    /* bandwidth_reprobe (0: only at create) */
    const char *peers;
    const char *select;
    float data[NT][1000];
    float before[NT][1000];
    flps_saps_round_info info[64];
    flps_saps_consensus_info cons;
    float avg[NT][1000];
    flps_saps_stats st;
    uint8_t alive_at_end[MAXW];
    flps_err rc;
} wk;

/* run_workers' start-up faults: the ranks that never start (a bit each),
 * the rank that starts late_ms late (MAXW: none), and the join deadline
 * of all (0: the default). */
static uint32_t absent_ranks, late_rank = MAXW, late_ms, join_ms;
/* Each round of the others takes at least this long (a slow trainer). */
static uint32_t round_ms;

static void *run_worker(void *arg)
{
    wk *k = arg;
    flps_tensor t[NT];
    flps_saps_config c;
    flps_saps *s = NULL;
    float *avg[NT] = {k->avg[0], k->avg[1]};

    for (int i = 0; i < NT; i++) {
        t[i].name = i ? "b" : "w";
        t[i].numel = numel[i];
        t[i].data = k->data[i];
    }
    flps_saps_config_init(&c);
    c.job = "saps-test";
    c.rank = k->rank;
    c.workers = k->workers;
    c.peers = k->peers;
    c.tensors = t;
    c.ntensors = NT;
    c.density = 0.05;
    c.peer_selection = k->select;
    c.seed = 11;
    c.sync_every = 4;
    c.deadline_ms = 1000;
    c.probe_bytes = 4096;
    c.bandwidth_reprobe = k->reprobe;
    c.join_deadline_ms = join_ms;
    if (absent_ranks & (1u << k->rank)) {
        k->rc = FLPS_ESTATE; /* never started */
        return NULL;
    }
    if (k->rank == late_rank)
        usleep(late_ms * 1000u);
    k->rc = flps_saps_create(&c, &s);
    if (k->rc != FLPS_OK)
        return NULL;
    for (uint32_t r = 0; r < k->rounds; r++) {
        if (k->stop_after != 0 && r == k->stop_after) {
            flps_saps_destroy(s);
            return NULL;
        }
        memcpy(k->before, k->data, sizeof(k->data));
        if (round_ms != 0)
            usleep(round_ms * 1000u);
        k->rc = flps_saps_round(s, r, &k->info[r]);
        if (k->rc != FLPS_OK)
            goto out;
    }
    k->rc = flps_saps_consensus(s, k->rounds, avg, &k->cons);
    for (uint32_t w = 0; w < k->workers; w++)
        k->alive_at_end[w] = (uint8_t)flps_saps_is_alive(s, w);
out:
    flps_saps_get_stats(s, &k->st);
    flps_saps_destroy(s);
    return NULL;
}

/* bandwidth_reprobe of the workers run_workers starts (0: none). */
static uint64_t reprobe_every;

/* n workers, each starting from its own values, for rounds rounds. */
static wk *run_workers(uint32_t n, uint32_t rounds, const char *select,
                       uint32_t leaver, uint32_t leave_after)
{
    static char list[MAXW * 40];
    wk *k = calloc(n, sizeof(*k));
    pthread_t th[MAXW];

    use_credentials(NULL);
    free_endpoints(n, list, sizeof(list));
    for (uint32_t i = 0; i < n; i++) {
        k[i].rank = i;
        k[i].workers = n;
        k[i].rounds = rounds;
        k[i].peers = list;
        k[i].select = select;
        k[i].stop_after = i == leaver ? leave_after : 0;
        k[i].reprobe = reprobe_every;
        for (int t = 0; t < NT; t++)
            for (size_t j = 0; j < numel[t]; j++)
                k[i].data[t][j] = (float)(i * 1000 + j) + 0.25f * (float)t;
        cr_assert_eq(pthread_create(&th[i], NULL, run_worker, &k[i]), 0);
    }
    for (uint32_t i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    return k;
}

Test(saps_exchange, peers_average_exactly_the_masked_values, .timeout = 60)
{
    /* One round, so each worker's values before it are the start ones. */
    wk *k = run_workers(4, 1, "random", MAXW, 0);
    uint64_t bm[(1000 + 63) / 64];
    uint32_t idx[50];

    for (uint32_t i = 0; i < 4; i++) {
        uint32_t p = k[i].info[0].peer;

        cr_assert_eq(k[i].rc, FLPS_OK, "worker %u: %s", i,
                     flps_strerror(k[i].rc));
        cr_assert_lt(p, 4u, "four workers: every one has a peer");
        cr_assert_eq(k[p].info[0].peer, i, "the peers agree");
        cr_assert(k[i].info[0].exchanged);
        cr_assert_eq(k[i].info[0].matching_hash, k[0].info[0].matching_hash);
        for (int t = 0; t < NT; t++) {
            size_t kk = codec_count_for(
                &(codec_spec){.kind = CODEC_RANDK, .density = 0.05}, numel[t]);
            size_t in = 0;

            codec_randk_indices(numel[t], kk,
                                saps_mask_seed(11, 0, (uint32_t)t), bm, idx);
            for (size_t j = 0; j < numel[t]; j++) {
                float mine = (float)(i * 1000 + j) + 0.25f * (float)t;
                float theirs = (float)(p * 1000 + j) + 0.25f * (float)t;
                int masked = in < kk && idx[in] == j;

                in += masked;
                if (masked)
                    cr_assert_float_eq(k[i].data[t][j], 0.5f * (mine + theirs),
                                       1e-3, "t %d j %zu", t, j);
                else
                    cr_assert_eq(k[i].data[t][j], mine, "t %d j %zu", t, j);
            }
        }
    }
    free(k);
}

Test(saps_exchange,
     every_worker_computes_the_same_matchings_and_ends_in_the_consensus,
     .timeout = 120)
{
    wk *k = run_workers(5, 24, "adaptive", MAXW, 0);
    double mean0 = 0, dist = 0;

    for (uint32_t i = 0; i < 5; i++) {
        cr_assert_eq(k[i].rc, FLPS_OK, "worker %u: %s", i,
                     flps_strerror(k[i].rc));
        for (uint32_t r = 0; r < 24; r++) {
            cr_assert_eq(k[i].info[r].matching_hash, k[0].info[r].matching_hash,
                         "round %u", r);
            if (k[i].info[r].peer != UINT32_MAX)
                cr_assert_eq(k[k[i].info[r].peer].info[r].peer, i);
        }
        cr_assert_eq(k[i].st.matching_digest, k[0].st.matching_digest);
        cr_assert_eq(k[i].st.rounds, 24);
        cr_assert_eq(k[i].st.exchanges + k[i].st.idle, 24,
                     "odd: one idle per round, none skipped");
        cr_assert_gt(k[i].st.probe_bytes, 0);
        mean0 += k[i].data[0][0] / 5.0;
    }
    /* The coordinator holds the average of the five models. */
    cr_assert_eq(k[0].cons.coordinator, 0);
    cr_assert_eq(k[0].cons.averaged, 5);
    cr_assert_float_eq(k[0].avg[0][0], mean0, 1e-2);
    for (uint32_t i = 0; i < 5; i++) {
        double sq = 0;

        for (int t = 0; t < NT; t++)
            for (size_t j = 0; j < numel[t]; j++) {
                double d = k[i].data[t][j] - k[0].avg[t][j];
                sq += d * d;
            }
        dist += sqrt(sq) / 5.0;
    }
    cr_assert_float_eq(k[0].cons.distance, dist, 1e-3 * dist);
    free(k);
}

Test(saps_exchange, the_others_go_on_without_a_worker_that_stops,
     .timeout = 120)
{
    /* Worker 2 leaves after 5 rounds; the agreement before round 8 (sync
     * every 4) leaves it out. */
    wk *k = run_workers(4, 16, "random", 2, 5);

    for (uint32_t i = 0; i < 4; i++) {
        if (i == 2)
            continue;
        cr_assert_eq(k[i].rc, FLPS_OK, "worker %u: %s", i,
                     flps_strerror(k[i].rc));
        cr_assert_eq(k[i].st.dead, 1);
        cr_assert_eq(k[i].alive_at_end[2], 0);
        cr_assert_eq(k[i].alive_at_end[i], 1);
        cr_assert_lt(k[i].st.skipped, 4, "skipped at most until the check");
        for (uint32_t r = 8; r < 16; r++) {
            cr_assert_neq(k[i].info[r].peer, 2, "round %u", r);
            cr_assert_eq(k[i].info[r].alive, 3);
            cr_assert_eq(k[i].info[r].matching_hash,
                         k[0].info[r].matching_hash);
        }
    }
    cr_assert_eq(k[0].cons.averaged, 3);
    free(k);
}

/* The three workers other than 3 went on without it from the start. */
static void assert_three_went_on_without_3(const wk *k, uint32_t rounds)
{
    for (uint32_t i = 0; i < 3; i++) {
        cr_assert_eq(k[i].rc, FLPS_OK, "worker %u: %s", i,
                     flps_strerror(k[i].rc));
        cr_assert_eq(k[i].st.dead, 1);
        cr_assert_eq(k[i].alive_at_end[3], 0);
        cr_assert_eq(k[i].st.exchanges + k[i].st.idle, rounds,
                     "three workers: a pair and one idle a round, nobody "
                     "waiting for worker 3");
        for (uint32_t r = 0; r < rounds; r++) {
            cr_assert_neq(k[i].info[r].peer, 3, "round %u", r);
            cr_assert_eq(k[i].info[r].alive, 3);
            cr_assert_eq(k[i].info[r].matching_hash,
                         k[0].info[r].matching_hash);
        }
    }
    cr_assert_eq(k[0].cons.averaged, 3);
}

Test(saps_exchange, the_others_go_on_without_a_worker_that_never_joins,
     .timeout = 120)
{
    wk *k;

    absent_ranks = 1u << 3;
    join_ms = 1500;
    k = run_workers(4, 8, "random", MAXW, 0);
    assert_three_went_on_without_3(k, 8);
    free(k);
}

Test(saps_exchange, a_worker_that_comes_after_the_others_went_on_stops,
     .timeout = 120)
{
    wk *k;

    /* Worker 3 starts half a second after the others' join deadline,
     * while they train (30 rounds of 0.1 s): it joins (their hellos wait
     * for it), probes and reaches the agreement after they have left it:
     * alone, it must not train. */
    late_rank = 3;
    late_ms = 1500;
    join_ms = 1000;
    round_ms = 100;
    k = run_workers(4, 30, "random", MAXW, 0);
    assert_three_went_on_without_3(k, 30);
    cr_assert_eq(k[3].rc, FLPS_ESTATE, "the late worker: %s",
                 flps_strerror(k[3].rc));
    free(k);
}

Test(saps_exchange, without_most_workers_nobody_goes_on, .timeout = 120)
{
    wk *k;

    /* Two of four: not most of them, so neither of two halves cut apart
     * could go on; both fail at the join deadline. */
    absent_ranks = 1u << 2 | 1u << 3;
    join_ms = 1500;
    k = run_workers(4, 8, "random", MAXW, 0);
    for (uint32_t i = 0; i < 2; i++)
        cr_assert_eq(k[i].rc, FLPS_ETIMEDOUT, "worker %u: %s", i,
                     flps_strerror(k[i].rc));
    free(k);
}

Test(saps_exchange, a_reprobe_measures_again_between_the_same_rounds,
     .timeout = 120)
{
    wk *once = run_workers(4, 12, "adaptive", MAXW, 0), *k;

    /* Rounds 5 and 10 probe again: three probes in all. */
    reprobe_every = 5;
    k = run_workers(4, 12, "adaptive", MAXW, 0);
    for (uint32_t i = 0; i < 4; i++) {
        double ratio =
            (double)k[i].st.probe_bytes / (double)once[i].st.probe_bytes;

        cr_assert_eq(k[i].rc, FLPS_OK, "worker %u: %s", i,
                     flps_strerror(k[i].rc));
        cr_assert_eq(once[i].rc, FLPS_OK);
        cr_assert(ratio > 2.9 && ratio < 3.1,
                  "worker %u: %llu probe bytes against %llu with one probe", i,
                  (unsigned long long)k[i].st.probe_bytes,
                  (unsigned long long)once[i].st.probe_bytes);
        cr_assert_eq(k[i].st.matching_digest, k[0].st.matching_digest);
        cr_assert_eq(k[i].st.exchanges, 12, "nobody skipped for a probe");
    }
    free(once);
    free(k);
}

/* The value of the sample line that starts with prefix (the series' name
 * and labels, then a blank) in text; NAN when there is none. */
static double metric_in(const char *text, const char *prefix)
{
    for (const char *at = strstr(text, prefix); at != NULL;
         at = strstr(at + 1, prefix))
        if (at == text || at[-1] == '\n')
            return strtod(at + strlen(prefix), NULL);
    return NAN;
}

Test(saps_exchange, the_rounds_feed_the_workers_metrics, .timeout = 120)
{
    char bound[128], *text = NULL;
    size_t len = 0;
    double exchanged = 0, sent = 0;
    wk *k;

    cr_assert_eq(flps_metrics_serve("127.0.0.1:0", bound, sizeof(bound)),
                 FLPS_OK);
    k = run_workers(4, 10, "random", MAXW, 0);
    /* The four workers are threads of this process: one exporter. */
    for (uint32_t i = 0; i < 4; i++) {
        cr_assert_eq(k[i].rc, FLPS_OK);
        exchanged += (double)k[i].st.exchanges;
        sent += (double)k[i].st.bytes_sent;
    }
    cr_assert_eq(client_metrics_render(&text, &len), FLPS_OK);
    cr_assert_eq(
        metric_in(text, "flworker_saps_rounds_total{result=\"exchanged\"} "),
        exchanged, "%s", text);
    cr_assert_eq(exchanged, 40);
    cr_assert_gt(metric_in(text, "flworker_saps_round_bytes "), 0);
    cr_assert_gt(metric_in(text, "flworker_saps_peer_bandwidth_bytes "), 0);
    cr_assert_float_eq(metric_in(text, "flworker_saps_consensus_distance "),
                       k[0].cons.distance, 1e-6 * k[0].cons.distance);
    /* The rounds' bytes are counted as sent (the probe's and the final
     * gather's are not rounds'). */
    cr_assert_gt(metric_in(text, "flworker_sent_bytes_total "), 0);
    cr_assert_leq(metric_in(text, "flworker_sent_bytes_total "), sent);
    free(text);
    free(k);
}
