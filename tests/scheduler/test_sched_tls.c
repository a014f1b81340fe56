/* flsched serving its API over HTTPS (--tls-cert, --tls-key) against a
 * real redis-server, with a throwaway CA made by tests/scheduler/
 * gen_certs.sh: flsubmit verifies it with --ca (or FLPS_SCHEDULER_CA) and
 * fails with what to set when the CA is missing or wrong, a plain-HTTP
 * request gets no API answer, /metrics and /healthz answer over HTTPS, and
 * a key others can read is refused. And flsched and flagent reaching a
 * Redis that speaks TLS only (rediss://, --redis-ca). */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "redis_tls_fixture.h"
#include "tests/flood.h"

#define FLSCHED FLPS_BIN_DIR "/flsched"
#define FLSUBMIT FLPS_BIN_DIR "/flsubmit"

static test_redis srv;
static char dir[64];
static char ca[128], other_ca[128], cert[128], key[128];
static pid_t sched_pid;
static int sched_port;

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void setup(void)
{
    char cmd[256];

    snprintf(dir, sizeof(dir), "/tmp/flps-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    /* Passable: as root, flagent's job uids reach its work dir here. */
    cr_assert_eq(chmod(dir, 0711), 0);
    snprintf(cmd, sizeof(cmd), "sh %s/tests/scheduler/gen_certs.sh %s",
             FLPS_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0,
                 "gen_certs.sh failed: is the openssl CLI installed "
                 "(scripts/deps.sh)?");
    path_in(ca, sizeof(ca), "ca.pem");
    path_in(other_ca, sizeof(other_ca), "other-ca.pem");
    path_in(cert, sizeof(cert), "server.pem");
    path_in(key, sizeof(key), "server.key");
    cr_assert_eq(test_redis_start(&srv), 0, "redis-server did not start");
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void teardown(void)
{
    char cmd[256];

    if (sched_pid > 0) {
        kill(sched_pid, SIGTERM);
        waitpid(sched_pid, NULL, 0);
        sched_pid = 0;
    }
    test_redis_stop(&srv);
    curl_global_cleanup();
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, srv.dir);
    if (system(cmd) != 0) {
        /* A temporary directory left behind is no test failure. */
    }
}

TestSuite(sched_tls, .init = setup, .fini = teardown, .timeout = 60);

/* Run argv (NULL-terminated) with stdout to out_fd (-1: /dev/null) and
 * stderr captured; its exit status (-1 if killed). *err: stderr text,
 * caller frees. */
static int run_capture(const char *const *argv, char **err, int out_fd)
{
    char path[] = "/tmp/flps-tls-err-XXXXXX";
    int fd = mkstemp(path), st = 0;
    pid_t pid;
    FILE *f;
    long n;

    cr_assert(fd >= 0);
    unlink(path);
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(out_fd >= 0 ? out_fd : null, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 3000 && waitpid(pid, &st, WNOHANG) != pid; i++)
        usleep(10000);
    if (kill(pid, 0) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        cr_assert_fail("%s ran for over 30 s", argv[0]);
    }
    f = fdopen(fd, "r");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *err = calloc(1, (size_t)n + 1);
    if (n > 0 && fread(*err, 1, (size_t)n, f) != (size_t)n)
        cr_assert_fail("cannot read back stderr");
    fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Start flsched with TLS (tls set) or plain HTTP; wait for "listening on". */
static void start_sched(int tls)
{
    const char *argv[12] = {FLSCHED, "--redis", srv.url, "--listen",
                            "127.0.0.1:0"};
    int a = 5, pfd[2];
    char line[256];
    FILE *f;

    if (tls) {
        argv[a++] = "--tls-cert";
        argv[a++] = cert;
        argv[a++] = "--tls-key";
        argv[a++] = key;
    }
    argv[a] = NULL;
    cr_assert_eq(pipe(pfd), 0);
    sched_pid = fork();
    cr_assert(sched_pid >= 0);
    if (sched_pid == 0) {
        char log[128];
        int fd;

        path_in(log, sizeof(log), "flsched.log");
        fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(pfd[1], STDOUT_FILENO);
        if (fd >= 0)
            dup2(fd, STDERR_FILENO);
        close(pfd[0]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    f = fdopen(pfd[0], "r");
    cr_assert_not_null(fgets(line, sizeof(line), f), "flsched did not start");
    fclose(f);
    cr_assert_eq(strncmp(line, "listening on 127.0.0.1:", 23), 0, "%s", line);
    sched_port = atoi(line + 23);
    cr_assert_gt(sched_port, 0);
}

static char *url(const char *scheme)
{
    static char u[64];

    snprintf(u, sizeof(u), "%s://127.0.0.1:%d", scheme, sched_port);
    return u;
}

/* flsubmit --scheduler URL [--ca CA] list; its exit status. */
static int flsubmit_list(const char *u, const char *cafile, char **err,
                         int out_fd)
{
    const char *argv[8] = {FLSUBMIT, "--scheduler", u};
    int a = 3;

    if (cafile != NULL) {
        argv[a++] = "--ca";
        argv[a++] = cafile;
    }
    argv[a++] = "list";
    argv[a] = NULL;
    return run_capture(argv, err, out_fd);
}

Test(sched_tls, flsubmit_talks_to_the_api_over_https_with_the_ca)
{
    char *err = NULL, out_path[] = "/tmp/flps-tls-out-XXXXXX", buf[512];
    int out_fd = mkstemp(out_path), rc;
    ssize_t n;

    cr_assert(out_fd >= 0);
    unlink(out_path);
    start_sched(1);
    rc = flsubmit_list(url("https"), ca, &err, out_fd);
    cr_assert_eq(rc, 0, "flsubmit list over https: exit %d: %s", rc, err);
    free(err);
    lseek(out_fd, 0, SEEK_SET);
    n = read(out_fd, buf, sizeof(buf) - 1);
    close(out_fd);
    cr_assert_geq(n, 0);
    buf[n] = '\0';
    cr_assert(strstr(buf, "No jobs.") != NULL,
              "an API answer was printed: '%s'", buf);

    /* The same through the environment. */
    setenv("FLPS_SCHEDULER_CA", ca, 1);
    rc = flsubmit_list(url("https"), NULL, &err, -1);
    unsetenv("FLPS_SCHEDULER_CA");
    cr_assert_eq(rc, 0, "FLPS_SCHEDULER_CA: exit %d: %s", rc, err);
    free(err);
}

Test(sched_tls, flsubmit_without_the_ca_fails_and_says_what_to_set)
{
    char *err = NULL;
    int rc;

    start_sched(1);
    rc = flsubmit_list(url("https"), NULL, &err, -1);
    cr_assert_eq(rc, 8, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "cannot verify") != NULL, "%s", err);
    cr_assert(strstr(err, "--ca FILE") != NULL, "%s", err);
    cr_assert(strstr(err, "FLPS_SCHEDULER_CA") != NULL, "%s", err);
    free(err);
}

Test(sched_tls, flsubmit_with_a_wrong_ca_fails_and_names_it)
{
    char *err = NULL;
    int rc;

    start_sched(1);
    rc = flsubmit_list(url("https"), other_ca, &err, -1);
    cr_assert_eq(rc, 8, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "cannot verify") != NULL, "%s", err);
    cr_assert(strstr(err, "is --ca (FLPS_SCHEDULER_CA) the CA") != NULL, "%s",
              err);
    free(err);

    rc = flsubmit_list(url("https"), "/nonexistent/ca.pem", &err, -1);
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "cannot read the CA file /nonexistent/ca.pem") !=
                  NULL,
              "%s", err);
    free(err);
}

Test(sched_tls, a_plain_http_client_gets_no_api_answer)
{
    static const char req[] =
        "GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    struct sockaddr_in a;
    char got[4096], *err = NULL;
    size_t n = 0;
    int fd, rc;

    start_sched(1);
    /* flsubmit with an http:// URL says to use https://. */
    rc = flsubmit_list(url("http"), NULL, &err, -1);
    cr_assert_eq(rc, 8, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "without an HTTP answer") != NULL, "%s", err);
    cr_assert(strstr(err, "https://") != NULL, "%s", err);
    free(err);

    /* A raw request: whatever comes back is no HTTP response. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)sched_port);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(write(fd, req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        cr_assert_eq(poll(&p, 1, 10000), 1,
                     "the server kept a plain-text connection open");
        r = read(fd, got + n, sizeof(got) - 1 - n);
        if (r <= 0)
            break; /* closed (or reset): the answer a TLS server gives */
        n += (size_t)r;
        if (n == sizeof(got) - 1)
            break;
    }
    close(fd);
    got[n] = '\0';
    cr_assert(memmem(got, n, "HTTP/1.", 7) == NULL,
              "a plain request got an HTTP answer: %s", got);
    cr_assert(memmem(got, n, "jobs", 4) == NULL);
}

typedef struct body {
    char p[8192];
    size_t n;
} body;

static size_t on_data(char *d, size_t sz, size_t nm, void *arg)
{
    body *b = arg;
    size_t n = sz * nm;

    if (n > sizeof(b->p) - 1 - b->n)
        n = sizeof(b->p) - 1 - b->n;
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = '\0';
    return sz * nm;
}

static long https_get(const char *path, body *b)
{
    CURL *c = curl_easy_init();
    char u[128];
    long code = 0;

    memset(b, 0, sizeof(*b));
    snprintf(u, sizeof(u), "%s%s", url("https"), path);
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    cr_assert_eq(curl_easy_perform(c), CURLE_OK, "GET %s", u);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    return code;
}

Test(sched_tls, metrics_and_healthz_answer_over_https)
{
    body b;

    start_sched(1);
    cr_assert_eq(https_get("/healthz", &b), 200, "%s", b.p);
    cr_assert(strstr(b.p, "ok") != NULL, "%s", b.p);
    cr_assert_eq(https_get("/metrics", &b), 200);
    cr_assert(strstr(b.p, "# TYPE") != NULL, "not Prometheus text: %s", b.p);
    cr_assert_eq(https_get("/v1/jobs", &b), 200, "%s", b.p);
}

Test(sched_tls, an_https_client_to_a_plain_scheduler_is_told_to_use_http)
{
    char *err = NULL;
    int rc;

    start_sched(0);
    rc = flsubmit_list(url("https"), ca, &err, -1);
    cr_assert_eq(rc, 8, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "TLS handshake") != NULL, "%s", err);
    cr_assert(strstr(err, "use an http:// URL") != NULL, "%s", err);
    free(err);
}

Test(sched_tls, a_key_others_can_read_is_refused_and_nothing_starts)
{
    const char *argv[] = {FLSCHED,       "--redis",    srv.url, "--listen",
                          "127.0.0.1:0", "--tls-cert", cert,    "--tls-key",
                          key,           NULL};
    const char *half[] = {FLSCHED,       "--redis",    srv.url, "--listen",
                          "127.0.0.1:0", "--tls-cert", cert,    NULL};
    const char *notpem[] = {FLSCHED,       "--redis",    srv.url, "--listen",
                            "127.0.0.1:0", "--tls-cert", cert,    "--tls-key",
                            "/dev/null",   NULL};
    char *err = NULL, msg[256];
    int rc;

    cr_assert_eq(chmod(key, 0640), 0);
    rc = run_capture(argv, &err, -1);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
    snprintf(msg, sizeof(msg), "chmod 600 %s", key);
    cr_assert(strstr(err, msg) != NULL, "%s", err);
    cr_assert(strstr(err, "mode 0640") != NULL, "%s", err);
    cr_assert(strstr(err, "PRIVATE KEY") == NULL, "no key text in messages");
    free(err);

    rc = run_capture(half, &err, -1);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "--tls-cert and --tls-key go together") != NULL, "%s",
              err);
    free(err);

    rc = run_capture(notpem, &err, -1);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "not a regular file") != NULL ||
                  strstr(err, "no PEM") != NULL,
              "%s", err);
    free(err);
}

Test(sched_tls, a_certificate_that_is_not_the_keys_is_refused)
{
    char wrong[128], *err = NULL;
    const char *argv[] = {FLSCHED,       "--redis",    srv.url, "--listen",
                          "127.0.0.1:0", "--tls-cert", cert,    "--tls-key",
                          wrong,         NULL};
    int rc;

    /* The CA's key is a key, but not the certificate's. */
    path_in(wrong, sizeof(wrong), "ca.key");
    rc = run_capture(argv, &err, -1);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "--tls-cert and --tls-key are a certificate and "
                          "its private key") != NULL,
              "%s", err);
    free(err);
}

/* Start a daemon (argv NULL-terminated), stdout and stderr to log. */
static pid_t spawn_logged(const char *const *argv, const char *log)
{
    pid_t pid = fork();

    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static int file_has(const char *path, const char *needle)
{
    char buf[16384];
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

Test(sched_tls, flsched_and_flagent_reach_a_tls_only_redis)
{
    test_redis_tls rs;
    char slog[128], alog[128], work[128],
        *err = NULL, out_path[] = "/tmp/flps-tls-out-XXXXXX";
    char line[256] = "";
    int out_fd = mkstemp(out_path), seen = 0, pfd[2];
    pid_t agent;

    cr_assert(out_fd >= 0);
    unlink(out_path);
    cr_assert_eq(test_redis_tls_start(&rs, ""), 0, "TLS redis-server");
    path_in(slog, sizeof(slog), "flsched-rediss.log");
    path_in(alog, sizeof(alog), "flagent-rediss.log");
    path_in(work, sizeof(work), "agent-work");
    {
        const char *argv[] = {FLSCHED,       "--redis",    rs.r.url, "--listen",
                              "127.0.0.1:0", "--redis-ca", rs.ca,    NULL};
        FILE *f;

        cr_assert_eq(pipe(pfd), 0);
        sched_pid = fork();
        cr_assert(sched_pid >= 0);
        if (sched_pid == 0) {
            int fd = open(slog, O_WRONLY | O_CREAT | O_APPEND, 0600);
            dup2(pfd[1], STDOUT_FILENO);
            if (fd >= 0)
                dup2(fd, STDERR_FILENO);
            close(pfd[0]);
            execv(argv[0], (char *const *)argv);
            _exit(127);
        }
        close(pfd[1]);
        f = fdopen(pfd[0], "r");
        cr_assert_not_null(fgets(line, sizeof(line), f),
                           "flsched did not start over rediss://");
        fclose(f);
        sched_port = atoi(line + 23);
    }
    {
        const char *argv[] = {FLPS_BIN_DIR "/flagent",
                              "--redis",
                              rs.r.url,
                              "--redis-ca",
                              rs.ca,
                              "--name",
                              "tlsnode",
                              "--cpus",
                              "2",
                              "--memory",
                              "1Gi",
                              "--gpus",
                              "0",
                              "--work-dir",
                              work,
                              NULL};
        agent = spawn_logged(argv, alog);
    }
    for (int i = 0; i < 100 && !seen; i++) {
        char buf[4096];
        ssize_t n;
        const char *argv[] = {FLSUBMIT, "--scheduler", url("http"), "nodes",
                              NULL};

        cr_assert_eq(ftruncate(out_fd, 0), 0);
        lseek(out_fd, 0, SEEK_SET);
        cr_assert_eq(run_capture(argv, &err, out_fd), 0, "%s", err);
        free(err);
        lseek(out_fd, 0, SEEK_SET);
        n = read(out_fd, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        seen = strstr(buf, "tlsnode") != NULL;
        if (!seen)
            usleep(100000);
    }
    close(out_fd);
    kill(agent, SIGTERM);
    waitpid(agent, NULL, 0);
    cr_assert(seen, "flagent's node never showed up through flsched");
    cr_assert(file_has(slog, "Redis at rediss://127.0.0.1:"), "flsched log");

    /* flsched with a CA that did not sign Redis's certificate stops at
     * once, with the reason. */
    kill(sched_pid, SIGTERM);
    waitpid(sched_pid, NULL, 0);
    sched_pid = 0;
    {
        const char *argv[] = {FLSCHED,       "--redis",    rs.r.url, "--listen",
                              "127.0.0.1:0", "--redis-ca", other_ca, NULL};
        int rc = run_capture(argv, &err, -1);

        cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
        cr_assert(strstr(err, "does not verify") != NULL, "%s", err);
        cr_assert(strstr(err, "FLPS_REDIS_CA (--redis-ca)") != NULL, "%s", err);
        free(err);
    }
    test_redis_tls_stop(&rs);
}

/* Plain-text connections each make libmicrohttpd complain: flsched logs at
 * most 5 such lines a second, so a flood cannot fill its log. */
Test(sched_tls, plain_text_floods_are_logged_at_a_bounded_rate)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    char log[128], buf[65536];
    double t0, took;
    size_t n;
    FILE *f;
    int lines = 0;

    start_sched(1);
    t0 = flps_mono_s();
    for (int i = 0; i < 60; i++) {
        struct sockaddr_in a;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        char c;

        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)sched_port);
        cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        cr_assert_eq(write(fd, req, sizeof(req) - 1),
                     (ssize_t)(sizeof(req) - 1));
        while (read(fd, &c, 1) > 0)
            ; /* until the server closes it */
        close(fd);
    }
    usleep(200000);
    took = flps_mono_s() - t0;
    path_in(log, sizeof(log), "flsched.log");
    f = fopen(log, "r");
    cr_assert_not_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (char *p = buf; (p = strstr(p, "WARN")) != NULL; p++)
        lines++;
    cr_assert_gt(lines, 0, "the refusals are logged");
    cr_assert_leq(lines, 5 * ((int)took + 2),
                  "%d warning lines in %.1f s for 60 connections", lines, took);
}

/* ---- the certificate: renewed on disk, checked at start ---- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The Expire date a client sees on a connection of c after it did a
 * request ("" when none), as OpenSSL prints it ("Dec  7 05:37:02 2026
 * GMT"): curl's certificate info. */
static void seen_expiry(CURL *c, char *out, size_t len)
{
    struct curl_certinfo *ci = NULL;

    out[0] = '\0';
    if (curl_easy_getinfo(c, CURLINFO_CERTINFO, &ci) != CURLE_OK ||
        ci == NULL || ci->num_of_certs < 1)
        return;
    for (struct curl_slist *s = ci->certinfo[0]; s != NULL; s = s->next)
        if (strncmp(s->data, "Expire date:", 12) == 0)
            snprintf(out, len, "%s", s->data + 12);
}

/* What openssl says of a certificate file's end ("notAfter=..."). */
static void file_expiry(const char *pem, char *out, size_t len)
{
    char cmd[300];
    FILE *p;

    snprintf(cmd, sizeof(cmd), "openssl x509 -noout -enddate -in %s", pem);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    cr_assert_not_null(fgets(out, (int)len, p));
    pclose(p);
    out[strcspn(out, "\n")] = '\0';
    memmove(out, out + 9, strlen(out + 9) + 1); /* past "notAfter=" */
}

/* A GET /healthz over HTTPS on c (a new connection when fresh); the status,
 * and in *connects how many connections it opened. */
static long healthz_on(CURL *c, int fresh, long *connects)
{
    char u[128];
    long code = 0;
    body b;

    memset(&b, 0, sizeof(b));
    snprintf(u, sizeof(u), "%s/healthz", url("https"));
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    curl_easy_setopt(c, CURLOPT_CERTINFO, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, fresh ? 1L : 0L);
    if (curl_easy_perform(c) != CURLE_OK)
        return 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, connects);
    return code;
}

/* Put src in place of dst as a renewal tool would: a new file renamed
 * over the old one. */
static void replace_file(const char *src, const char *dst)
{
    char tmp[160], cmd[400];

    snprintf(tmp, sizeof(tmp), "%s.new", dst);
    snprintf(cmd, sizeof(cmd), "cp -p %s %s", src, tmp);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(rename(tmp, dst), 0);
}

Test(sched_tls, a_renewed_certificate_is_served_without_a_restart_or_a_drop,
     .timeout = 60)
{
    char renewed[128], renewed_key[128], want[128], seen[128], log[128];
    CURL *kept = curl_easy_init(), *fresh = curl_easy_init();
    long connects = -1;
    body b;

    start_sched(1);
    cr_assert_eq(healthz_on(kept, 0, &connects), 200);
    seen_expiry(kept, seen, sizeof(seen));
    file_expiry(cert, want, sizeof(want));
    cr_assert_str_eq(seen, want, "the certificate served at start");

    /* Renewed on disk: a new key and certificate, renamed into place. */
    path_in(renewed, sizeof(renewed), "renewed.pem");
    path_in(renewed_key, sizeof(renewed_key), "renewed.key");
    replace_file(renewed_key, key);
    replace_file(renewed, cert);
    file_expiry(renewed, want, sizeof(want));
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(healthz_on(fresh, 1, &connects), 200);
        seen_expiry(fresh, seen, sizeof(seen));
        if (strcmp(seen, want) == 0)
            break;
        sleep_ms(100);
    }
    cr_assert_str_eq(seen, want,
                     "a new connection is not served the "
                     "renewed certificate");
    /* The connection opened before is still there, and still works. */
    cr_assert_eq(healthz_on(kept, 0, &connects), 200);
    cr_assert_eq(connects, 0, "the connection kept alive was dropped");
    path_in(log, sizeof(log), "flsched.log");
    cr_assert(file_has(log, "http: renewed: serving the certificate"));
    /* SIGHUP reads the files again at once. */
    cr_assert_eq(kill(sched_pid, SIGHUP), 0);
    for (int i = 0; i < 50 && !file_has(log, "asked to reload: serving"); i++)
        sleep_ms(100);
    cr_assert(file_has(log, "asked to reload: serving the certificate"));
    cr_assert_eq(https_get("/v1/info", &b), 200);
    cr_assert(strstr(b.p, "\"reloads\": 2") != NULL ||
                  strstr(b.p, "\"reloads\":2") != NULL,
              "%s", b.p);
    curl_easy_cleanup(kept);
    curl_easy_cleanup(fresh);
}

/* flsched started with the certificate name (in the test's dir) and the
 * key server.key; its log once it listens. */
static const char *start_with(const char *name)
{
    static char text[16384];
    char log[128];
    FILE *f;
    size_t n;

    path_in(cert, sizeof(cert), name);
    path_in(log, sizeof(log), "flsched.log");
    unlink(log);
    start_sched(1);
    kill(sched_pid, SIGTERM);
    waitpid(sched_pid, NULL, 0);
    sched_pid = 0;
    f = fopen(log, "r");
    cr_assert_not_null(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

Test(sched_tls, an_expired_early_or_misnamed_certificate_is_logged_at_start)
{
    const char *log;

    log = start_with("expired.pem");
    cr_assert(strstr(log, "expired on 2020-01-02 00:00:00 UTC: clients "
                          "refuse it") != NULL,
              "%s", log);
    log = start_with("future.pem");
    cr_assert(strstr(log, "is not valid before 2099-01-01 00:00:00 UTC") !=
                  NULL,
              "%s", log);
    log = start_with("elsewhere.pem");
    cr_assert(strstr(log,
                     "does not name 127.0.0.1, the address this server "
                     "listens on (it is for DNS:elsewhere.example)") != NULL,
              "%s", log);
    log = start_with("soon.pem");
    cr_assert(strstr(log, "days: renew it") != NULL, "%s", log);
    cr_assert(strstr(log, "expires on ") != NULL, "%s", log);
    log = start_with("server.pem");
    cr_assert(strstr(log, "http: serving the certificate") != NULL, "%s", log);
    cr_assert_null(strstr(log, "expired on"), "%s", log);
    cr_assert_null(strstr(log, "not valid before"), "%s", log);
    cr_assert_null(strstr(log, "does not name"), "%s", log);
}

Test(sched_tls, stalled_handshakes_do_not_keep_clients_from_the_api,
     .timeout = 60)
{
    char bound[64];
    CURL *c = curl_easy_init();
    atomic_int stop = 0;
    long connects;
    pthread_t th;
    flood f;
    int served = 0;
    char got[128] = "";

    start_sched(1);
    cr_assert_eq(healthz_on(c, 1, &connects), 200, "the client's first");
    snprintf(bound, sizeof(bound), "127.0.0.1:%d", sched_port);
    /* 300 connections that never begin their handshake, opened again as
     * soon as they are closed. */
    f = (flood){bound, "", &stop, 0};
    cr_assert_eq(pthread_create(&th, NULL, flood_main, &f), 0);
    sleep_ms(2000);
    for (int i = 0; i < 20; i++) {
        long code = healthz_on(c, 1, &connects);

        served += code == 200;
        snprintf(got + strlen(got), sizeof(got) - strlen(got), " %ld", code);
        sleep_ms(200);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    curl_easy_cleanup(c);
    cr_assert_eq(served, 20,
                 "%d of 20 requests served beside 300 stalled handshakes "
                 "(statuses:%s)",
                 served, got);
}
