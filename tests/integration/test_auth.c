/* The authenticated data plane (issue 12) on real flps shards: a client
 * without the job's secret, or with a wrong one, reads nothing, writes
 * nothing and cannot lock the real workers out by registering first; a
 * member pushing as a rank it does not own is refused and the owner's
 * training is bit for bit what it is without the attacks; a restarted
 * worker takes its rank over; and the secret appears in no log line. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flps.h"
#include "member.h"
#include "proto/creds.h"
#include "proto/msg.h"
#include "proto/transport.h"
#include "spawn.h"

#define WAIT_MS 10000
#define NUMEL 128
#define ITERS 6

/* Send m on t to peer. A stranger (the shard refuses its handshake) may
 * learn of the refusal already: FLPS_EAUTH, nothing sent. */
static void send_as(transport *t, uint32_t peer, const proto_msg *m,
                    int stranger)
{
    flps_err rc;
    proto_frame f[PROTO_MAX_FRAMES];
    transport_frame tf[PROTO_MAX_FRAMES];
    void *hdr = NULL;
    size_t hlen, nf;
    proto_buf *b[PROTO_MAX_FRAMES];

    cr_assert_eq(proto_msg_encode(m, &hdr, &hlen, f, &nf), FLPS_OK);
    for (size_t i = 0; i < nf; i++) {
        b[i] = proto_buf_create(f[i].len ? f[i].len : 1);
        memcpy(proto_buf_data(b[i]), f[i].data, f[i].len);
        tf[i].buf = b[i];
        tf[i].off = 0;
        tf[i].len = f[i].len;
    }
    rc = transport_send(t, peer, tf, nf);
    if (stranger && rc == FLPS_EAUTH)
        cr_assert_neq(strstr(t->errmsg, "FLPS_CREDENTIALS_FILE"), NULL, "%s",
                      t->errmsg);
    else
        cr_assert_eq(rc, FLPS_OK, "%s: %s", flps_errname(rc), t->errmsg);
    for (size_t i = 0; i < nf; i++)
        proto_buf_release(b[i]);
    free(hdr);
}

static void send_msg(transport *t, uint32_t peer, const proto_msg *m)
{
    send_as(t, peer, m, 0);
}

/* The next message on t within ms, decoded into *m: 1; none: 0. */
static int recv_within(transport *t, int ms, proto_msg *m)
{
    transport_rx *rx = NULL;
    char why[256];
    flps_err rc = transport_recv(t, ms, &rx);

    if (rc == FLPS_ETIMEDOUT)
        return 0;
    cr_assert_eq(rc, FLPS_OK);
    cr_assert_eq(proto_msg_decode(rx->frames, rx->nframes, m, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    m->idx = NULL;
    m->val = NULL;
    m->rej = NULL;
    transport_rx_release(rx);
    return 1;
}

/* A stranger's connector t: within ms, not an answer but the refusal of
 * its handshake (FLPS_EAUTH), which says what to do. */
static void refused_within(transport *t, int ms)
{
    transport_rx *rx = NULL;
    flps_err rc = transport_recv(t, ms, &rx);

    if (rc == FLPS_OK)
        transport_rx_release(rx);
    cr_assert_eq(rc, FLPS_EAUTH, "%s: %s", flps_errname(rc), t->errmsg);
    cr_assert_neq(strstr(t->errmsg, "FLPS_CREDENTIALS_FILE"), NULL, "%s",
                  t->errmsg);
}

/* The one answer to a request: an ERROR of status want, and nothing else
 * after it (no parameters, no update). */
static void expect_refusal(transport *t, flps_err want, const char *text)
{
    proto_msg r;

    cr_assert(recv_within(t, WAIT_MS, &r), "no answer");
    cr_assert_eq(r.op, PROTO_OP_ERROR, "got %s", proto_op_name(r.op));
    cr_assert_eq(r.status, (uint32_t)want, "status %u: %s", r.status, r.text);
    cr_assert_neq(strstr(r.text, text), NULL, "%s", r.text);
    proto_msg_fini(&r);
    cr_assert(!recv_within(t, 300, &r), "a second answer (%s) came",
              proto_op_name(r.op));
}

static proto_msg base_msg(uint8_t op, const char *secret, uint64_t cid)
{
    proto_msg m;

    memset(&m, 0, sizeof(m));
    m.op = op;
    strcpy(m.job, "authjob");
    if (secret != NULL)
        snprintf(m.auth, sizeof(m.auth), "%s", secret);
    m.cid = cid;
    return m;
}

/* A REGISTER of a layout other than the real workers' (so a shard it
 * configured would refuse them with ELAYOUT). */
static proto_msg bad_register(proto_tensor *t, const char *secret)
{
    proto_msg m = base_msg(PROTO_OP_REGISTER, secret, 77);

    m.cfg.nshards = 1;
    m.cfg.workers = 1;
    m.cfg.part_size = 64;
    m.cfg.mode = PROTO_MODE_SSGD;
    m.cfg.agg = PROTO_AGG_DENSE;
    m.cfg.density = 1;
    m.cfg.lr = 0.1;
    strcpy(m.cfg.compression, "dense");
    strcpy(t->name, "evil");
    t->numel = 4096;
    m.tensors = t;
    m.ntensors = 1;
    return m;
}

/* Two strangers to the shard at endpoint: a transport without
 * credentials (*none, its peer *p1) and one with other's (*wrong, *p2). */
static void open_strangers(const char *endpoint, const flps_creds *other,
                           transport **none, uint32_t *p1, transport **wrong,
                           uint32_t *p2)
{
    char why[256];

    cr_assert_eq(transport_zmq_create(none), FLPS_OK);
    cr_assert_eq(transport_connect(*none, endpoint, p1), FLPS_OK);
    cr_assert_eq(transport_zmq_create(wrong), FLPS_OK);
    cr_assert_eq(transport_set_credentials(*wrong, other, 0, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(transport_connect(*wrong, endpoint, p2), FLPS_OK);
}

static void job_start(job_run *j, const char *endpoint)
{
    job_start_sized(j, endpoint, "authjob", NUMEL, 64, "dense");
}

/* Whether the file at path holds needle. */
static int file_holds(const char *path, const char *needle)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "r");
    size_t n;

    cr_assert_not_null(f, "%s", path);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

/* Stop a shard and check it exited cleanly (status 0: no sanitizer
 * report either). */
static void stop_clean(test_shard *s, const char *log)
{
    int st = test_shard_stop(s, SIGTERM);

    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the shard did not exit cleanly; see %s", log);
}

static void start_shard(test_shard *s, const char *log, const char *creds)
{
    const char *with[] = {"--job",
                          "authjob",
                          "--shard",
                          "0",
                          "--shards",
                          "1",
                          "--credentials-file",
                          creds,
                          NULL};
    const char *without[] = {"--job",    "authjob", "--shard", "0",
                             "--shards", "1",       NULL};

    cr_assert_eq(test_shard_start(s, log, creds ? with : without), 0, "see %s",
                 log);
}

Test(auth, strangers_and_non_owners_change_nothing, .timeout = 120)
{
    char dir[] = "/tmp/flps-auth-XXXXXX", path[200], log[200], reflog[200];
    char why[256];
    flps_creds cr, other;
    test_shard s, ref;
    transport *t;
    uint32_t peer;
    proto_tensor evil;
    proto_msg m;
    job_run real, plain;
    float before[NUMEL];
    struct stat st;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/creds", dir);
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    snprintf(reflog, sizeof(reflog), "%s/ref.log", dir);
    cr_assert_eq(creds_generate(0, &cr, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_eq(creds_generate(0, &other, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(creds_write(path, &cr, 0, why, sizeof(why)), FLPS_OK, "%s",
                 why);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    start_shard(&s, log, path);
    start_shard(&ref, reflog, NULL);
    cr_assert(file_holds(log, "data plane authenticated (job secret)"));
    cr_assert(file_holds(reflog, "data plane NOT authenticated"));

    /* A connection without the secret, or with another, is refused in
     * its handshake (PLAIN): not one of its messages is answered. */
    {
        transport *none, *wrong;
        uint32_t p1, p2;
        proto_msg r;
        open_strangers(s.endpoint, &other, &none, &p1, &wrong, &p2);
        m = bad_register(&evil, NULL);
        send_as(none, p1, &m, 1);
        m = bad_register(&evil, other.secret);
        send_as(wrong, p2, &m, 1);
        refused_within(none, 1500);
        refused_within(wrong, 500);
        cr_assert(!recv_within(none, 300, &r), "answered without a secret");
        cr_assert(!recv_within(wrong, 300, &r), "answered a wrong secret");
        transport_destroy(none);
        transport_destroy(wrong);
    }

    /* Past the handshake (as over RDMA, which has none), every request
     * still carries the secret. Before any worker: registering first,
     * with no secret or a wrong one, configures nothing. */
    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    cr_assert_eq(transport_set_credentials(t, &cr, 0, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(transport_connect(t, s.endpoint, &peer), FLPS_OK);
    m = bad_register(&evil, NULL);
    send_msg(t, peer, &m);
    expect_refusal(t, FLPS_EAUTH, "serves only its members");
    m = bad_register(&evil, other.secret);
    send_msg(t, peer, &m);
    expect_refusal(t, FLPS_EAUTH, "wrong credentials");

    /* The real worker registers its own layout: not locked out. */
    job_start(&plain, ref.endpoint); /* the same job, unattacked */
    cr_assert_eq(setenv(CREDS_ENV, path, 1), 0);
    job_start(&real, s.endpoint);
    for (uint64_t it = 0; it < ITERS; it++) {
        job_step(&real, it);
        job_step(&plain, it);
        memcpy(before, real.w, sizeof(before));

        /* No secret, a wrong one: PULL, PUSH, CHECKPOINT are refused,
         * with no parameters sent. */
        for (int k = 0; k < 2; k++) {
            const char *sec = k == 0 ? NULL : other.secret;
            const char *why_text =
                k == 0 ? "serves only its members" : "wrong credentials";
            float vals[64];
            m = base_msg(PROTO_OP_PULL, sec, 5);
            send_msg(t, peer, &m);
            expect_refusal(t, FLPS_EAUTH, why_text);
            m = base_msg(PROTO_OP_PUSH, sec, 5);
            for (int i = 0; i < 64; i++)
                vals[i] = 1000.0f;
            m.iter = it + 1;
            m.codec = PROTO_CODEC_DENSE;
            m.n = 64;
            m.val = vals;
            send_msg(t, peer, &m);
            expect_refusal(t, FLPS_EAUTH, why_text);
            m = base_msg(PROTO_OP_CHECKPOINT, sec, 5);
            send_msg(t, peer, &m);
            expect_refusal(t, FLPS_EAUTH, why_text);
        }
        /* A member (the right secret) pushing and pulling as rank 0,
         * which another client registered: refused. */
        {
            float vals[64];
            for (int i = 0; i < 64; i++)
                vals[i] = -1000.0f;
            m = base_msg(PROTO_OP_PUSH, cr.secret, 5);
            m.part = 1;
            m.iter = it + 1;
            m.codec = PROTO_CODEC_DENSE;
            m.n = 64;
            m.val = vals;
            send_msg(t, peer, &m);
            expect_refusal(t, FLPS_EAUTH, "bound to another client");
            m = base_msg(PROTO_OP_PULL, cr.secret, 5);
            send_msg(t, peer, &m);
            expect_refusal(t, FLPS_EAUTH, "bound to another client");
        }
        /* The model is bit for bit what the worker holds. */
        cr_assert_eq(flps_client_pull(real.c), FLPS_OK, "%s",
                     flps_client_last_error(real.c));
        cr_assert_eq(memcmp(before, real.w, sizeof(before)), 0,
                     "the model changed under the attacks");
    }
    /* And the whole run equals the unattacked one, bit for bit. */
    cr_assert_eq(memcmp(real.w, plain.w, sizeof(real.w)), 0);

    /* A restarted worker (a new client, the same credentials) takes rank
     * 0 over and trains on from where the job is. */
    flps_client_destroy(real.c);
    job_start(&real, s.endpoint);
    cr_assert_eq(memcmp(real.w, plain.w, sizeof(real.w)), 0,
                 "the restarted worker did not get the model");
    jobs_step_same(&real, &plain, ITERS, ITERS + 2);
    flps_client_destroy(real.c);
    flps_client_destroy(plain.c);
    unsetenv(CREDS_ENV);
    transport_destroy(t);

    stop_clean(&s, log);
    stop_clean(&ref, reflog);
    cr_assert(file_holds(log, "taken over by a new client"));
    cr_assert(file_holds(log, "refused"));
    /* Neither secret in any log line. */
    cr_assert(!file_holds(log, cr.secret), "the secret is in %s", log);
    cr_assert(!file_holds(log, other.secret));
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}

Test(auth, a_bad_credentials_file_stops_the_shard_with_the_reason,
     .timeout = 60)
{
    char dir[] = "/tmp/flps-authbad-XXXXXX", path[200], log[200];
    const char *args[] = {"--job",
                          "authjob",
                          "--shard",
                          "0",
                          "--shards",
                          "1",
                          "--credentials-file",
                          path,
                          NULL};
    test_shard s;
    FILE *f;
    int st;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/creds", dir);
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "secret=%s\n",
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    fclose(f);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_neq(test_shard_start(&s, log, args), 0);
    waitpid(s.pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    cr_assert(file_holds(log, "chmod 600"));
    cr_assert(!file_holds(log, "00112233445566778899aabbccddeeff"));
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}

/* Whether any process's command line holds needle. */
static int some_argv_holds(const char *needle)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int found = 0;

    cr_assert_not_null(d);
    while (!found && (e = readdir(d)) != NULL) {
        char path[300], buf[8192];
        ssize_t n;
        int fd;

        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
        fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == '\0')
                buf[i] = ' ';
        buf[n] = '\0';
        found = strstr(buf, needle) != NULL;
    }
    closedir(d);
    return found;
}

Test(auth, a_flrun_job_runs_authenticated_and_shows_its_secret_nowhere,
     .timeout = 300)
{
    char dir[] = "/tmp/flps-authrun-XXXXXX", job[200], logs[200], out[200];
    char creds_path[260], why[256], cmd[1024];
    const char *const args[] = {"--log-dir", logs, job, NULL};
    flps_creds cr;
    struct stat st;
    int status = -1, scans = 0;
    pid_t pid;
    FILE *f;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(job, sizeof(job), "%s/job.yaml", dir);
    snprintf(logs, sizeof(logs), "%s/logs", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(creds_path, sizeof(creds_path), "%s/credentials", logs);
    f = fopen(job, "w");
    cr_assert_not_null(f);
    fputs("name: authrun\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
          "servers: 2\niterations: 300\ncompression: topk:0.01\n"
          "eval_every: 0\n",
          f);
    fclose(f);
    pid = test_spawn("flrun", args, out, NULL, NULL, 0);
    cr_assert_gt(pid, 0);
    /* While it runs: the file is there, private, and no process has the
     * secret on its command line. */
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (scans == 0 && stat(creds_path, &st) == 0 &&
            creds_load(creds_path, &cr, why, sizeof(why)) == FLPS_OK)
            scans = 1;
        if (scans > 0) {
            cr_assert(!some_argv_holds(cr.secret),
                      "the secret is on a command line");
            scans++;
        }
        usleep(50000);
    }
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "flrun failed; see %s", out);
    cr_assert_gt(scans, 1, "the job ran too briefly to look at it");
    cr_assert_eq(stat(creds_path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert(file_holds(out, "\"data_plane\":\"authenticated"),
              "the summary does not say so; see %s", out);
    snprintf(cmd, sizeof(cmd), "%s/flps-0.log", logs);
    cr_assert(file_holds(cmd, "data plane authenticated"));
    /* No log, summary or other file of the run holds the secret. */
    snprintf(cmd, sizeof(cmd),
             "grep -rl --exclude=credentials '%s' %s >/dev/null", cr.secret,
             dir);
    cr_assert_neq(system(cmd), 0, "a file of the run holds the secret");
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The model_hash of flrun's summary in path, into hash[17]; 0 if none. */
static int summary_hash(const char *path, char hash[17])
{
    char line[8192];
    int found = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *h = strstr(line, "\"model_hash\":\"");
        if (h != NULL && strlen(h) >= 14 + 16) {
            memcpy(hash, h + 14, 16);
            hash[16] = '\0';
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* One flrun of a small dense job with encryption: enc in dir/<enc>;
 * its output's path in out, its model hash in hash. */
static void run_with_encryption(const char *dir, const char *enc, char *out,
                                size_t outlen, char hash[17])
{
    char sub[256], job[300], logs[300], cmd[600];
    const char *const args[] = {"--log-dir", logs, job, NULL};
    int status = -1;
    pid_t pid;
    FILE *f;

    snprintf(sub, sizeof(sub), "%s/%s", dir, enc);
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(job, sizeof(job), "%s/job.yaml", sub);
    snprintf(logs, sizeof(logs), "%s/logs", sub);
    snprintf(out, outlen, "%s/out", sub);
    f = fopen(job, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "name: enc-%s\nmodel: mlp\ndataset: synthetic\nworkers: 2\n"
            "servers: 2\niterations: 40\ncompression: dense\n"
            "eval_every: 0\nencryption: %s\n",
            enc, enc);
    fclose(f);
    pid = test_spawn("flrun", args, out, NULL, NULL, 0);
    cr_assert_gt(pid, 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "flrun failed; see %s", out);
    cr_assert(summary_hash(out, hash), "no model_hash in %s", out);
    snprintf(cmd, sizeof(cmd), "%s/credentials", logs);
    cr_assert_eq(file_holds(cmd, "curve_"),
                 strcmp(enc, "true") == 0 && creds_have_curve(),
                 "the credentials' CURVE keys do not follow encryption: %s",
                 enc);
}

Test(auth, encryption_false_runs_authenticated_in_the_clear_to_the_same_model,
     .timeout = 300)
{
    char dir[] = "/tmp/flps-authenc-XXXXXX", off[300], on[300], log[400];
    char hoff[17], hon[17];

    cr_assert_not_null(mkdtemp(dir));
    run_with_encryption(dir, "false", off, sizeof(off), hoff);
    cr_assert(file_holds(off, "\"data_plane\":\"authenticated\""),
              "the summary does not say authenticated only; see %s", off);
    cr_assert(file_holds(off, "not encrypted (the job file says "
                              "encryption: false)"),
              "flrun does not say why it is not encrypted; see %s", off);
    snprintf(log, sizeof(log), "%s/false/logs/flps-0.log", dir);
    cr_assert(file_holds(log, "authenticated (job secret), not encrypted"),
              "the shard does not say so; see %s", log);
    if (!creds_have_curve()) {
        cr_log_warn("this libzmq has no CURVE: only encryption: false ran");
        return;
    }
    run_with_encryption(dir, "true", on, sizeof(on), hon);
    cr_assert(file_holds(on, "\"data_plane\":\"authenticated+curve\""),
              "see %s", on);
    snprintf(log, sizeof(log), "%s/true/logs/flps-0.log", dir);
    cr_assert(file_holds(log, "and encrypted (CURVE)"), "see %s", log);
    /* Encryption changes the bytes on the wire, not the arithmetic. */
    cr_assert_str_eq(hoff, hon, "the model differs with encryption");
    snprintf(log, sizeof(log), "rm -rf %s", dir);
    cr_assert_eq(system(log), 0);
}

Test(auth, with_curve_a_client_without_the_job_keys_gets_nothing,
     .timeout = 120)
{
    char dir[] = "/tmp/flps-authcurve-XXXXXX", path[200], log[200];
    char reflog[200], why[256];
    flps_creds cr, other;
    test_shard s, ref;
    transport *plain_t, *wrong_t;
    uint32_t p1, p2;
    proto_tensor tensor;
    proto_msg m, r;
    job_run real, plain;

    if (!creds_have_curve())
        cr_skip_test("this libzmq has no CURVE");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/creds", dir);
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    snprintf(reflog, sizeof(reflog), "%s/ref.log", dir);
    cr_assert_eq(creds_generate(1, &cr, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_eq(creds_generate(1, &other, why, sizeof(why)), FLPS_OK);
    /* The stranger knows the server's public key, and even the secret:
     * without the job's client key pair it still gets nothing. */
    memcpy(other.server_public, cr.server_public, sizeof(cr.server_public));
    memcpy(other.secret, cr.secret, sizeof(cr.secret));
    cr_assert_eq(creds_write(path, &cr, 0, why, sizeof(why)), FLPS_OK);
    start_shard(&s, log, path);
    start_shard(&ref, reflog, NULL);
    cr_assert(file_holds(log, "encrypted (CURVE)"));

    open_strangers(s.endpoint, &other, &plain_t, &p1, &wrong_t, &p2);
    m = bad_register(&tensor, cr.secret);
    send_as(plain_t, p1, &m, 1);
    send_as(wrong_t, p2, &m, 1);
    refused_within(plain_t, 1500);
    refused_within(wrong_t, 1500);
    cr_assert(!recv_within(plain_t, 300, &r), "a client without CURVE got "
                                              "an answer");
    cr_assert(!recv_within(wrong_t, 300, &r), "a client with another key "
                                              "got an answer");

    /* The job trains as it does unattacked, bit for bit. */
    job_start(&plain, ref.endpoint);
    cr_assert_eq(setenv(CREDS_ENV, path, 1), 0);
    job_start(&real, s.endpoint);
    /* A stranger's send now says it is refused instead of waiting for a
     * connection that never comes. */
    send_as(plain_t, p1, &m, 1);
    send_as(wrong_t, p2, &m, 1);
    for (uint64_t it = 0; it < ITERS; it++) {
        job_step(&real, it);
        job_step(&plain, it);
    }
    cr_assert_eq(memcmp(real.w, plain.w, sizeof(real.w)), 0);
    cr_assert(!recv_within(plain_t, 200, &r));
    cr_assert(!recv_within(wrong_t, 200, &r));
    flps_client_destroy(real.c);
    flps_client_destroy(plain.c);
    unsetenv(CREDS_ENV);
    transport_destroy(plain_t);
    transport_destroy(wrong_t);
    stop_clean(&s, log);
    stop_clean(&ref, reflog);
    cr_assert(file_holds(log, "in the CURVE handshake"),
              "the refused handshakes are not logged; see %s", log);
    {
        /* Both strangers, counted in the shard's last line. */
        static char buf[1 << 16];
        FILE *f = fopen(log, "r");
        size_t n;
        const char *at;
        unsigned long long refused = 0;
        cr_assert_not_null(f);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        at = strstr(buf, " messages and ");
        cr_assert_not_null(at, "no count in the last line; see %s", log);
        cr_assert_eq(sscanf(at,
                            " messages and %llu connections (CURVE "
                            "handshake refused)",
                            &refused),
                     1);
        cr_assert_geq(refused, 2, "%llu handshakes refused; see %s", refused,
                      log);
    }
    cr_assert(!file_holds(log, cr.secret));
    cr_assert(!file_holds(log, cr.server_secret));
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}

#define PROBES 11

/* The requests of a job A that has read job B's id and knows how its
 * shard answers: registrations, pulls and pushes of parts that may or may
 * not exist, as ranks that may or may not exist, an INIT, a CHECKPOINT,
 * and a job id of control bytes and invalid UTF-8. All with secret. */
static void probe(transport *t, uint32_t peer, const char *secret,
                  proto_msg *sent, int stranger)
{
    float vals[64];
    proto_tensor evil, same;

    for (int i = 0; i < 64; i++)
        vals[i] = 1000.0f;
    for (int k = 0; k < PROBES; k++) {
        proto_msg m = base_msg(PROTO_OP_PULL, secret, 99);
        switch (k) {
        case 0:
            m = bad_register(&evil, secret);
            break;
        case 1: /* B's own layout */
            m = bad_register(&same, secret);
            strcpy(same.name, "w");
            same.numel = NUMEL;
            break;
        case 2:
        case 3:
        case 4:
            m.part = (uint32_t)(k == 4 ? 7 : k - 2);
            break;
        case 5:
        case 6:
        case 7: /* two PUSHes (a part held, one not) and an INIT */
            m = base_msg(k == 7 ? PROTO_OP_INIT : PROTO_OP_PUSH, secret, 99);
            m.part = k == 6 ? 99 : 0;
            m.iter = k == 7 ? 0 : 1;
            m.codec = PROTO_CODEC_DENSE;
            m.n = 64;
            m.val = vals;
            break;
        case 8:
            m = base_msg(PROTO_OP_CHECKPOINT, secret, 99);
            break;
        case 9:
            m.rank = 5;
            break;
        default:
            strcpy(m.job, "evil\n\x1b[31m\xff\xfe job");
            break;
        }
        send_as(t, peer, &m, stranger);
        sent[k] = m;
        sent[k].tensors = NULL;
        sent[k].val = NULL;
    }
}

/* Whether every byte of the file at path is printable ASCII, a newline
 * or part of valid UTF-8 (no ESC, no 0xff). */
static int file_is_clean_text(const char *path)
{
    static unsigned char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    size_t n;

    cr_assert_not_null(f, "%s", path);
    n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        if (buf[i] == '\n' || (buf[i] >= 0x20 && buf[i] < 0x7f))
            continue;
        if (buf[i] >= 0xc2 && buf[i] <= 0xdf)
            len = 1;
        else if (buf[i] >= 0xe0 && buf[i] <= 0xef)
            len = 2;
        else if (buf[i] >= 0xf0 && buf[i] <= 0xf4)
            len = 3;
        else
            return 0;
        for (size_t j = 1; j <= len; j++)
            if (i + j >= n || (buf[i + j] & 0xc0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

Test(auth, job_a_learns_nothing_of_job_b_from_its_shard, .timeout = 120)
{
    char dir[] = "/tmp/flps-authab-XXXXXX", path[200], log[200], why[256];
    flps_creds b, a, past;
    test_shard s;
    transport *t;
    uint32_t peer;
    proto_msg sent[PROBES], r;
    job_run real;
    float before[NUMEL];

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/creds", dir);
    snprintf(log, sizeof(log), "%s/shard.log", dir);
    cr_assert_eq(creds_generate(0, &b, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_eq(creds_generate(0, &a, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(creds_write(path, &b, 0, why, sizeof(why)), FLPS_OK);
    start_shard(&s, log, path);
    /* Job B's worker registers its layout and trains. */
    cr_assert_eq(setenv(CREDS_ENV, path, 1), 0);
    job_start(&real, s.endpoint);
    job_step(&real, 0);
    job_step(&real, 1);
    cr_assert_eq(flps_client_pull(real.c), FLPS_OK);
    memcpy(before, real.w, sizeof(before));

    /* A's own credentials: its connection is refused in the handshake,
     * and not one of its 11 requests is answered. */
    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    cr_assert_eq(transport_set_credentials(t, &a, 0, why, sizeof(why)), FLPS_OK,
                 "%s", why);
    cr_assert_eq(transport_connect(t, s.endpoint, &peer), FLPS_OK);
    probe(t, peer, a.secret, sent, 1);
    refused_within(t, 1500);
    cr_assert(!recv_within(t, 300, &r), "job A's request was answered (%s)",
              proto_op_name(r.op));
    transport_destroy(t);

    /* Past the handshake (as over RDMA, which checks nothing before a
     * message), A's secret in every request: each gets the same refusal,
     * which names nothing of B: neither its job nor its layout or state. */
    past = b;
    cr_assert_eq(transport_zmq_create(&t), FLPS_OK);
    cr_assert_eq(transport_set_credentials(t, &past, 0, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(transport_connect(t, s.endpoint, &peer), FLPS_OK);
    probe(t, peer, a.secret, sent, 0);
    for (int k = 0; k < PROBES; k++) {
        cr_assert(recv_within(t, WAIT_MS, &r), "probe %d not answered", k);
        cr_assert_eq(r.op, PROTO_OP_ERROR, "probe %d: %s", k,
                     proto_op_name(r.op));
        cr_assert_eq(r.status, (uint32_t)FLPS_EAUTH, "probe %d: %s: %s", k,
                     flps_errname((flps_err)r.status), r.text);
        cr_assert_str_eq(r.text,
                         "wrong credentials: not a member of this shard's "
                         "job",
                         "probe %d", k);
        cr_assert_str_eq(r.job, sent[k].job,
                         "probe %d: the reply names a job it was not sent", k);
        proto_msg_fini(&r);
    }
    cr_assert(!recv_within(t, 300, &r), "a second answer came");
    transport_destroy(t);

    /* B's model is what its worker holds; B's log is clean text. */
    cr_assert_eq(flps_client_pull(real.c), FLPS_OK);
    cr_assert_eq(memcmp(before, real.w, sizeof(before)), 0);
    flps_client_destroy(real.c);
    unsetenv(CREDS_ENV);
    stop_clean(&s, log);
    cr_assert(file_holds(log, "PLAIN handshake"),
              "the refused handshake is not logged; see %s", log);
    cr_assert(file_is_clean_text(log), "control bytes or invalid UTF-8 in %s",
              log);
    {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}
