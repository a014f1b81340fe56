/* A real redis-server speaking TLS only, for tests: a throwaway CA and
 * server certificate from tests/scheduler/gen_certs.sh, and a TLS port
 * picked free (Redis cannot take port 0 for its tls-port, so a port that
 * was free a moment ago is tried, again on a lost race). */
#ifndef FLPS_TESTS_REDIS_TLS_FIXTURE_H
#define FLPS_TESTS_REDIS_TLS_FIXTURE_H

#include "redis_fixture.h"

typedef struct test_redis_tls {
    test_redis r;       /* pid, port (the TLS port), dir; url is rediss:// */
    char certs[64];     /* the directory of gen_certs.sh's files */
    char ca[128];       /* the CA that signed the server's certificate */
    char other_ca[128]; /* a CA that signed nothing of ours */
    char password[64];  /* requirepass, "" for none */
} test_redis_tls;

/* Make the certificates into t->certs; 0 on success. */
static inline int test_redis_tls_certs(test_redis_tls *t)
{
    char cmd[256];

    snprintf(t->certs, sizeof(t->certs), "/tmp/flps-certs-XXXXXX");
    if (mkdtemp(t->certs) == NULL)
        return -1;
    snprintf(cmd, sizeof(cmd), "sh %s/tests/scheduler/gen_certs.sh %s",
             FLPS_SOURCE_DIR, t->certs);
    if (system(cmd) != 0)
        return -1;
    snprintf(t->ca, sizeof(t->ca), "%s/ca.pem", t->certs);
    snprintf(t->other_ca, sizeof(t->other_ca), "%s/other-ca.pem", t->certs);
    return 0;
}

/* Start (or restart, keeping t->r.port when it is set) redis-server with
 * TLS only on t->r.port, bound to 127.0.0.1 and 127.0.0.2 (the
 * certificate names only the first); 0 when it accepts connections. */
static inline int test_redis_tls_exec(test_redis_tls *t)
{
    char port[16], cert[128], key[128];
    const int keep_port = t->r.port != 0;

    snprintf(cert, sizeof(cert), "%s/server.pem", t->certs);
    snprintf(key, sizeof(key), "%s/server.key", t->certs);
    for (int attempt = 0; attempt < 5; attempt++) {
        if (!keep_port)
            t->r.port = test_free_port();
        snprintf(port, sizeof(port), "%d", t->r.port);
        t->r.pid = fork();
        if (t->r.pid == 0) {
            const char *argv[32] = {"redis-server",
                                    "--port",
                                    "0",
                                    "--tls-port",
                                    port,
                                    "--tls-cert-file",
                                    cert,
                                    "--tls-key-file",
                                    key,
                                    "--tls-ca-cert-file",
                                    t->ca,
                                    "--tls-auth-clients",
                                    "no",
                                    "--bind",
                                    "127.0.0.1",
                                    "127.0.0.2",
                                    "--save",
                                    "",
                                    "--appendonly",
                                    "no",
                                    "--dir",
                                    t->r.dir};
            int a = 0;

            while (argv[a] != NULL)
                a++;

            if (t->password[0] != '\0') {
                argv[a++] = "--requirepass";
                argv[a++] = t->password;
            }
            argv[a] = NULL;
            if (freopen("/dev/null", "w", stdout) == NULL)
                _exit(126);
            execvp("redis-server", (char *const *)argv);
            _exit(127);
        }
        for (int i = 0; i < 200; i++) {
            struct timespec ts = {0, 20 * 1000000L};
            int status;
            if (test_port_accepts(t->r.port)) {
                snprintf(t->r.url, sizeof(t->r.url), "rediss://127.0.0.1:%d",
                         t->r.port);
                return 0;
            }
            if (waitpid(t->r.pid, &status, WNOHANG) == t->r.pid)
                break; /* lost the port race: retry */
            nanosleep(&ts, NULL);
        }
        if (keep_port)
            break;
    }
    return -1;
}

/* Certificates, then the server; password "" for none. */
static inline int test_redis_tls_start(test_redis_tls *t, const char *password)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->password, sizeof(t->password), "%s", password);
    snprintf(t->r.dir, sizeof(t->r.dir), "/tmp/flps-redis-XXXXXX");
    if (mkdtemp(t->r.dir) == NULL || test_redis_tls_certs(t) != 0)
        return -1;
    return test_redis_tls_exec(t);
}

/* SIGKILL and start again on the same port. */
static inline int test_redis_tls_restart(test_redis_tls *t)
{
    if (t->r.pid > 0) {
        kill(t->r.pid, SIGKILL);
        waitpid(t->r.pid, NULL, 0);
        t->r.pid = 0;
    }
    return test_redis_tls_exec(t);
}

static inline void test_redis_tls_stop(test_redis_tls *t)
{
    char cmd[256];

    test_redis_stop(&t->r);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", t->certs, t->r.dir);
    if (system(cmd) != 0) {
        /* Left behind in /tmp: no test failure. */
    }
}

#endif
