/* A real flps shard started with --metrics: after a real client trains a
 * few iterations, a scrape of /metrics over HTTP has every family with the
 * counts the client caused, and promtool accepts it. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "flps.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "scrape.h"
#include "spawn.h"

/* flps serving job "m" as its one shard, with --metrics and the flags of
 * extra (NULL-terminated); test_shard_start_metrics's result. */
static int start_m(test_shard *s, const char *log, const char *const *extra,
                   char *mbound, size_t mlen)
{
    const char *args[32] = {"--job",    "m", "--shard",   "0",
                            "--shards", "1", "--metrics", "127.0.0.1:0"};
    int a = 8;

    for (int i = 0; extra[i] != NULL && a < 31; i++)
        args[a++] = extra[i];
    args[a] = NULL;
    return test_shard_start_metrics(s, log, args, mbound, mlen);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#define NUMEL 10
#define ITERS 3
#define NPARTS 3 /* 10 elements in parts of 4: 4, 4, 2 */

Test(metrics_flps, a_scrape_has_every_family_with_the_counts_a_client_caused,
     .timeout = 60)
{
    char dir[] = "/tmp/flps-metrics-XXXXXX", log[128], ck[128], mbound[256];
    const char *servers[1];
    float data[NUMEL] = {0}, grad[NUMEL];
    flps_tensor tensor = {"w", NUMEL, data};
    flps_client_config cfg;
    flps_client *c = NULL;
    test_shard s;
    scrape r;
    static const char *families[] = {
        "flps_pushes_total",         "flps_updates_total",
        "flps_pulls_total",          "flps_rejected_total",
        "flps_received_bytes_total", "flps_sent_bytes_total",
        "flps_checkpoints_total",    "flps_elements_received_total",
        "flps_elements_sent_total",  "flps_handshakes_refused_total",
        "flps_parts_owned",          "flps_iteration_close_seconds"};

    curl_global_init(CURL_GLOBAL_DEFAULT);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/flps.log", dir);
    snprintf(ck, sizeof(ck), "%s/ckpt", dir);
    {
        const char *extra[] = {"--checkpoint-dir", ck, NULL};
        cr_assert_eq(start_m(&s, log, extra, mbound, sizeof(mbound)), 0,
                     "flps did not print both lines; see %s", log);
    }
    cr_assert_eq(strncmp(mbound, "127.0.0.1:", 10), 0, "%s", mbound);

    scrape_get(mbound, "/healthz", &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body, "{\"status\":\"ok\"}");
    free(r.body);

    servers[0] = s.endpoint;
    memset(&cfg, 0, sizeof(cfg));
    cfg.job = "m";
    cfg.rank = 0;
    cfg.workers = 1;
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.tensors = &tensor;
    cfg.ntensors = 1;
    cfg.part_size = 4;
    cfg.compression = "dense";
    cfg.lr = 0.1;
    cfg.retry_ms = 300;
    cfg.deadline_ms = 20000;
    cr_assert_eq(flps_client_create(&cfg, &c), FLPS_OK);
    cr_assert_eq(flps_client_init(c), FLPS_OK, "%s", flps_client_last_error(c));
    for (uint64_t it = 0; it < ITERS; it++) {
        for (int i = 0; i < NUMEL; i++)
            grad[i] = (float)(i + (int)it);
        cr_assert_eq(flps_client_push(c, 0, grad, it), FLPS_OK, "%s",
                     flps_client_last_error(c));
        cr_assert_eq(flps_client_wait(c, it), FLPS_OK, "%s",
                     flps_client_last_error(c));
    }
    cr_assert_eq(flps_client_pull(c), FLPS_OK);
    cr_assert_eq(flps_client_checkpoint(c), FLPS_OK);

    /* The main loop copies the counters every 200 ms: poll a little. */
    for (int tries = 0;; tries++) {
        scrape_get(mbound, "/metrics", &r);
        cr_assert_eq(r.status, 200);
        if (scrape_sample(r.body, "flps_pushes_total") == NPARTS * ITERS &&
            scrape_sample(r.body, "flps_pulls_total") >= 1 &&
            scrape_sample(r.body, "flps_checkpoints_total") >= 1)
            break;
        cr_assert_lt(tries, 50, "the counters never arrived:\n%s", r.body);
        free(r.body);
        sleep_ms(100);
    }
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char type[128];
        snprintf(type, sizeof(type), "# TYPE %s ", families[i]);
        cr_assert(strstr(r.body, type) != NULL, "no %s in:\n%s", families[i],
                  r.body);
    }
    cr_assert_eq(scrape_sample(r.body, "flps_updates_total"), NPARTS * ITERS);
    cr_assert_eq(scrape_sample(r.body, "flps_parts_owned"), NPARTS);
    cr_assert_eq(scrape_sample(r.body, "flps_elements_received_total"),
                 NUMEL * ITERS);
    cr_assert_eq(scrape_sample(r.body, "flps_elements_sent_total"),
                 NUMEL * ITERS);
    cr_assert_gt(scrape_sample(r.body, "flps_received_bytes_total"),
                 NUMEL * ITERS * 4);
    cr_assert_gt(scrape_sample(r.body, "flps_sent_bytes_total"),
                 NUMEL * ITERS * 4);
    cr_assert_eq(scrape_sample(r.body, "flps_iteration_close_seconds_count"),
                 NPARTS * ITERS, "one observation per part per iteration");
    cr_assert_eq(
        scrape_sample(r.body,
                      "flps_iteration_close_seconds_bucket{le=\"+Inf\"}"),
        NPARTS * ITERS);
    cr_assert_eq(
        scrape_sample(r.body, "flps_rejected_total{reason=\"FLPS_ELATE\"}"), 0,
        "every reason is there from the start, at 0");
    cr_assert_eq(
        scrape_sample(r.body, "flps_rejected_total{reason=\"FLPS_EDUP\"}"), 0);
    cr_assert_eq(
        scrape_sample(r.body, "flps_rejected_total{reason=\"FLPS_OK\"}"), -1,
        "success is not a refusal");

    if (access("/usr/bin/promtool", X_OK) == 0) {
        FILE *p = popen("/usr/bin/promtool check metrics", "w");
        int st;
        cr_assert_not_null(p);
        fwrite(r.body, 1, r.len, p);
        st = pclose(p);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "promtool refused the scrape:\n%s", r.body);
    } else {
        cr_log_warn("promtool is not installed: the scrape was not linted");
    }
    free(r.body);

    flps_client_destroy(c);
    cr_assert_eq(test_shard_stop(&s, SIGTERM), 0);
    curl_global_cleanup();
}

Test(metrics_flps, a_taken_metrics_port_stops_flps_with_a_clear_error,
     .timeout = 30)
{
    char dir[] = "/tmp/flps-metrics-XXXXXX", log[128], ep[64], buf[4096];
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = 0;
    test_shard s;
    FILE *f;
    size_t n;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/flps.log", dir);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 1), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    {
        const char *args[] = {"--job", "m",         "--shard", "0", "--shards",
                              "1",     "--metrics", ep,        NULL};
        cr_assert_neq(test_shard_start(&s, log, args), 0,
                      "flps started although its metrics port is taken");
    }
    waitpid(s.pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1,
              "flps should exit 1, status %d", status);
    f = fopen(log, "r");
    cr_assert_not_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    cr_assert(strstr(buf, "Address already in use") != NULL &&
                  strstr(buf, "--metrics") != NULL,
              "the log does not say why:\n%s", buf);
    close(fd);
}

/* Wait (up to 10 s: counters are copied every 200 ms) for the count of
 * why to be want; the count then. */
static double conns_refused_reaching(const char *mbound, const char *why,
                                     double want)
{
    double v = -1;

    for (int tries = 0; tries < 100; tries++) {
        v = scrape_conns_refused(mbound, why);
        if (v >= want)
            break;
        sleep_ms(100);
    }
    return v;
}

/* A raw TCP connection from local address from (host order) to the
 * shard's endpoint; it never speaks. */
static int idle_from(const char *endpoint, uint32_t from)
{
    struct sockaddr_in a, me;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    const char *port = strrchr(endpoint, ':');

    cr_assert_geq(fd, 0);
    cr_assert_not_null(port);
    memset(&me, 0, sizeof(me));
    me.sin_family = AF_INET;
    me.sin_addr.s_addr = htonl(from);
    cr_assert_eq(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(port + 1));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* A connection that speaks: a transport whose CHECKPOINT is answered. */
static transport *speaker(const char *endpoint)
{
    transport *t;
    transport_rx *rx = NULL;
    uint32_t peer;
    proto_msg m;
    proto_frame f[PROTO_MAX_FRAMES];
    transport_frame tf;
    void *hdr = NULL;
    size_t hlen, nf;

    memset(&m, 0, sizeof(m));
    m.op = PROTO_OP_CHECKPOINT;
    strcpy(m.job, "m");
    cr_assert_eq(proto_msg_encode(&m, &hdr, &hlen, f, &nf), FLPS_OK);
    cr_assert_eq(nf, 1);
    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    cr_assert_eq(transport_connect(t, endpoint, &peer), FLPS_OK);
    tf.buf = proto_buf_create(hlen);
    memcpy(proto_buf_data(tf.buf), hdr, hlen);
    tf.off = 0;
    tf.len = hlen;
    cr_assert_eq(transport_send(t, peer, &tf, 1), FLPS_OK);
    proto_buf_release(tf.buf);
    free(hdr);
    cr_assert_eq(transport_recv(t, 10000, &rx), FLPS_OK, "no answer");
    transport_rx_release(rx);
    return t;
}

Test(metrics_flps, every_refused_connection_is_counted_once_by_why,
     .timeout = 120)
{
    char dir[] = "/tmp/flps-metrics-XXXXXX", log[128], mbound[256];
    const uint32_t one = INADDR_LOOPBACK, two = INADDR_LOOPBACK + 1;
    static const char *const why[] = {"connection_limit",
                                      "unauthenticated_limit", "address_limit",
                                      "not_admitted"};
    int raw[8], nraw = 0;
    transport *member[8];
    test_shard s;
    scrape r;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    cr_assert_not_null(mkdtemp(dir));
    snprintf(log, sizeof(log), "%s/flps.log", dir);
    {
        const char *extra[] = {"--max-connections",
                               "8",
                               "--max-unauthenticated",
                               "4",
                               "--max-unauthenticated-per-address",
                               "3",
                               "--handshake-timeout-ms",
                               "60000",
                               NULL};
        cr_assert_eq(start_m(&s, log, extra, mbound, sizeof(mbound)), 0,
                     "see %s", log);
    }
    /* Every reason from the first copy of the counters, at 0. */
    for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++)
        cr_assert_eq(conns_refused_reaching(mbound, why[i], 0), 0, "%s",
                     why[i]);

    /* Four idle connections from 127.0.0.1, three allowed: one closed. */
    for (int i = 0; i < 4; i++)
        raw[nraw++] = idle_from(s.endpoint, one);
    cr_assert_eq(conns_refused_reaching(mbound, "address_limit", 1), 1);
    /* Two from 127.0.0.2: five waiting, four allowed: one closed. */
    for (int i = 0; i < 2; i++)
        raw[nraw++] = idle_from(s.endpoint, two);
    cr_assert_eq(conns_refused_reaching(mbound, "unauthenticated_limit", 1), 1);
    /* The four left end without a word: not admitted. */
    for (int i = 0; i < nraw; i++)
        close(raw[i]);
    cr_assert_eq(conns_refused_reaching(mbound, "not_admitted", 4), 4);

    /* Eight connections that speak hold every slot; a ninth is closed
     * (the cap, which was not counted before). */
    for (int i = 0; i < 8; i++)
        member[i] = speaker(s.endpoint);
    raw[0] = idle_from(s.endpoint, one);
    cr_assert_eq(conns_refused_reaching(mbound, "connection_limit", 1), 1);
    close(raw[0]);
    for (int i = 0; i < 8; i++)
        transport_destroy(member[i]);
    sleep_ms(500);

    /* Each of the seven counted once, the members not at all. */
    cr_assert_eq(scrape_conns_refused(mbound, "connection_limit"), 1);
    cr_assert_eq(scrape_conns_refused(mbound, "unauthenticated_limit"), 1);
    cr_assert_eq(scrape_conns_refused(mbound, "address_limit"), 1);
    cr_assert_eq(scrape_conns_refused(mbound, "not_admitted"), 4);
    scrape_get(mbound, "/metrics", &r);
    cr_assert_eq(scrape_sample(r.body, "flps_handshakes_refused_total"), 0);
    free(r.body);
    cr_assert_eq(test_shard_stop(&s, SIGTERM), 0);
    curl_global_cleanup();
}
