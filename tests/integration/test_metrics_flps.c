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
#include "spawn.h"

/* Start flps with args and read its two stdout lines: "listening on EP"
 * and "metrics on HOST:PORT". Returns 0 on success. */
static int start_with_metrics(test_shard *s, const char *log_path,
                              const char *const *args, char *mbound,
                              size_t mlen)
{
    int pfd[2];
    char *argv[32];
    int a = 0;
    FILE *f;
    char l1[256], l2[256];

    if (pipe(pfd) != 0)
        return -1;
    argv[a++] = (char *)FLPS_BIN_DIR "/flps";
    for (int i = 0; args[i] != NULL && a < 31; i++)
        argv[a++] = (char *)args[i];
    argv[a] = NULL;
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(pfd[1], STDOUT_FILENO);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        close(pfd[0]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    f = fdopen(pfd[0], "r");
    if (f == NULL || fgets(l1, sizeof(l1), f) == NULL ||
        strncmp(l1, "listening on ", 13) != 0 ||
        fgets(l2, sizeof(l2), f) == NULL ||
        strncmp(l2, "metrics on ", 11) != 0) {
        if (f != NULL)
            fclose(f);
        return -1;
    }
    fclose(f);
    l1[strcspn(l1, "\n")] = '\0';
    l2[strcspn(l2, "\n")] = '\0';
    snprintf(s->endpoint, sizeof(s->endpoint), "%s", l1 + 13);
    snprintf(mbound, mlen, "%s", l2 + 11);
    return 0;
}

typedef struct scrape {
    long status;
    char *body;
    size_t len;
} scrape;

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    scrape *r = arg;
    char *nb = realloc(r->body, r->len + size * n + 1);

    if (nb == NULL)
        return 0;
    memcpy(nb + r->len, p, size * n);
    r->len += size * n;
    nb[r->len] = '\0';
    r->body = nb;
    return size * n;
}

static void get(const char *mbound, const char *path, scrape *r)
{
    CURL *c = curl_easy_init();
    char url[256];
    CURLcode cc;

    memset(r, 0, sizeof(*r));
    snprintf(url, sizeof(url), "http://%s%s", mbound, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    cc = curl_easy_perform(c);
    cr_assert_eq(cc, CURLE_OK, "%s: %s", url, curl_easy_strerror(cc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->body == NULL)
        r->body = calloc(1, 1);
    curl_easy_cleanup(c);
}

/* The value of the sample line "name value", or -1 if absent. */
static double sample(const char *text, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
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
        const char *args[] = {"--job",
                              "m",
                              "--shard",
                              "0",
                              "--shards",
                              "1",
                              "--checkpoint-dir",
                              ck,
                              "--metrics",
                              "127.0.0.1:0",
                              NULL};
        cr_assert_eq(start_with_metrics(&s, log, args, mbound, sizeof(mbound)),
                     0, "flps did not print both lines; see %s", log);
    }
    cr_assert_eq(strncmp(mbound, "127.0.0.1:", 10), 0, "%s", mbound);

    get(mbound, "/healthz", &r);
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
        get(mbound, "/metrics", &r);
        cr_assert_eq(r.status, 200);
        if (sample(r.body, "flps_pushes_total") == NPARTS * ITERS &&
            sample(r.body, "flps_pulls_total") >= 1 &&
            sample(r.body, "flps_checkpoints_total") >= 1)
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
    cr_assert_eq(sample(r.body, "flps_updates_total"), NPARTS * ITERS);
    cr_assert_eq(sample(r.body, "flps_parts_owned"), NPARTS);
    cr_assert_eq(sample(r.body, "flps_elements_received_total"), NUMEL * ITERS);
    cr_assert_eq(sample(r.body, "flps_elements_sent_total"), NUMEL * ITERS);
    cr_assert_gt(sample(r.body, "flps_received_bytes_total"),
                 NUMEL * ITERS * 4);
    cr_assert_gt(sample(r.body, "flps_sent_bytes_total"), NUMEL * ITERS * 4);
    cr_assert_eq(sample(r.body, "flps_iteration_close_seconds_count"),
                 NPARTS * ITERS, "one observation per part per iteration");
    cr_assert_eq(
        sample(r.body, "flps_iteration_close_seconds_bucket{le=\"+Inf\"}"),
        NPARTS * ITERS);
    cr_assert_eq(sample(r.body, "flps_rejected_total{reason=\"FLPS_ELATE\"}"),
                 0, "every reason is there from the start, at 0");
    cr_assert_eq(sample(r.body, "flps_rejected_total{reason=\"FLPS_EDUP\"}"),
                 0);
    cr_assert_eq(sample(r.body, "flps_rejected_total{reason=\"FLPS_OK\"}"), -1,
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
