/* The HTTPS server's certificate: GnuTLS objects, reloads and checks. */
#include "services/httpd_cert.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <gnutls/x509.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"

#define CERT_CHAIN_MAX 16
#define CERT_DAY_S 86400.0

/* One certificate and key as loaded; replaced ones are kept a while for
 * the handshakes that took them (HTTPD_CERT_KEEP_S). */
typedef struct cert_gen {
    struct cert_gen *next; /* an older one */
    gnutls_pcert_st pcert[CERT_CHAIN_MAX];
    unsigned int n;
    gnutls_privkey_t key;
    double retired; /* flps_mono_s() when replaced; 0 while served */
    httpd_cert_info info;
} cert_gen;

/* lock guards cur, old and reloads, and is held only to read or swap
 * them: a handshake never waits on file I/O. reload_lock serializes whole
 * reloads (the watchdog's and a SIGHUP's), with the stats and next_warn. */
struct httpd_cert {
    pthread_mutex_t lock;
    pthread_mutex_t reload_lock;
    cert_gen *cur;
    cert_gen *old;
    char *cert_path, *key_path;
    struct stat cert_st, key_st; /* as last read */
    char host[256];              /* "" when not checked */
    double next_warn;            /* flps_mono_s() of the next warning */
    unsigned long reloads;
};

static void gen_free(cert_gen *g)
{
    if (g == NULL)
        return;
    for (unsigned int i = 0; i < g->n; i++)
        gnutls_pcert_deinit(&g->pcert[i]);
    if (g->key != NULL)
        gnutls_privkey_deinit(g->key);
    flps_free(g);
}

/* Whether key is the private key of the leaf's public key: both public
 * keys exported and compared (any algorithm GnuTLS knows). */
static int key_matches(cert_gen *g)
{
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t a = {NULL, 0}, b = {NULL, 0};
    int same = 0;

    if (gnutls_pubkey_init(&pub) == 0 &&
        gnutls_pubkey_import_privkey(pub, g->key, 0, 0) == 0 &&
        gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &a) == 0 &&
        gnutls_pubkey_export2(g->pcert[0].pubkey, GNUTLS_X509_FMT_DER, &b) == 0)
        same = a.size == b.size && memcmp(a.data, b.data, a.size) == 0;
    gnutls_free(a.data);
    gnutls_free(b.data);
    if (pub != NULL)
        gnutls_pubkey_deinit(pub);
    return same;
}

/* The leaf's dates, common name and subject alternative names. */
static void info_of(cert_gen *g, const char *host)
{
    httpd_cert_info *in = &g->info;
    gnutls_x509_crt_t crt;
    size_t len, off = 0;

    memset(in, 0, sizeof(*in));
    in->loaded = flps_wall_s();
    in->host_ok = 1;
    if (gnutls_x509_crt_init(&crt) != 0)
        return;
    if (gnutls_x509_crt_import(crt, &g->pcert[0].cert, GNUTLS_X509_FMT_DER) ==
        0) {
        in->not_before = (double)gnutls_x509_crt_get_activation_time(crt);
        in->not_after = (double)gnutls_x509_crt_get_expiration_time(crt);
        len = sizeof(in->subject);
        if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0,
                                          0, in->subject, &len) != 0)
            in->subject[0] = '\0';
        for (unsigned int i = 0;; i++) {
            unsigned char san[256];
            char text[INET6_ADDRSTRLEN];
            int type;

            len = sizeof(san) - 1;
            type =
                gnutls_x509_crt_get_subject_alt_name(crt, i, san, &len, NULL);
            if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
                break;
            if (type == GNUTLS_SAN_DNSNAME) {
                san[len] = '\0';
                snprintf(text, sizeof(text), "%.45s", (char *)san);
            } else if (type == GNUTLS_SAN_IPADDRESS &&
                       (len == 4 || len == 16)) {
                inet_ntop(len == 4 ? AF_INET : AF_INET6, san, text,
                          sizeof(text));
            } else {
                continue;
            }
            off += (size_t)snprintf(
                in->names + off,
                off < sizeof(in->names) ? sizeof(in->names) - off : 0,
                "%s%s:%s", off > 0 ? ", " : "",
                type == GNUTLS_SAN_DNSNAME ? "DNS" : "IP", text);
            if (off >= sizeof(in->names))
                break;
        }
        if (host != NULL && host[0] != '\0')
            in->host_ok = gnutls_x509_crt_check_hostname2(crt, host, 0) != 0;
    }
    gnutls_x509_crt_deinit(crt);
}

/* A certificate and key from PEM; NULL with the reason in why. */
static cert_gen *gen_load(const char *cert_pem, const char *key_pem,
                          const char *host, char *why, size_t len)
{
    gnutls_datum_t cd = {(unsigned char *)cert_pem,
                         (unsigned int)strlen(cert_pem)};
    gnutls_datum_t kd = {(unsigned char *)key_pem,
                         (unsigned int)strlen(key_pem)};
    cert_gen *g = flps_calloc(1, sizeof(*g));
    int rc;

    if (g == NULL) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    g->n = CERT_CHAIN_MAX;
    rc = gnutls_pcert_list_import_x509_raw(g->pcert, &g->n, &cd,
                                           GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0 || g->n == 0) {
        g->n = 0;
        snprintf(why, len, "the certificate: %s", gnutls_strerror(rc));
        goto fail;
    }
    rc = gnutls_privkey_init(&g->key);
    if (rc == 0)
        rc = gnutls_privkey_import_x509_raw(g->key, &kd, GNUTLS_X509_FMT_PEM,
                                            NULL, 0);
    if (rc < 0) {
        snprintf(why, len, "the key: %s", gnutls_strerror(rc));
        goto fail;
    }
    if (!key_matches(g)) {
        snprintf(why, len, "the key is not the certificate's");
        goto fail;
    }
    info_of(g, host);
    return g;
fail:
    gen_free(g);
    return NULL;
}

/* Say what is wrong with the certificate's dates, or that it expires
 * soon; 1 when something was said. */
static int warn_dates(const httpd_cert *c, const httpd_cert_info *in)
{
    char when[64];
    double now = flps_wall_s();

    if (now < in->not_before) {
        flps_utc_text(in->not_before, when, sizeof(when));
        log_error("http: the certificate %s is not valid before %s (in %.0f "
                  "s): clients refuse it; check this machine's clock or the "
                  "certificate",
                  c->cert_path ? c->cert_path : "", when, in->not_before - now);
        return 1;
    }
    flps_utc_text(in->not_after, when, sizeof(when));
    if (now >= in->not_after) {
        log_error("http: the certificate %s expired on %s: clients refuse "
                  "it; renew it (it is served as soon as the file changes)",
                  c->cert_path ? c->cert_path : "", when);
        return 1;
    }
    if (in->not_after - now < HTTPD_CERT_WARN_DAYS * CERT_DAY_S) {
        log_warn("http: the certificate %s expires on %s, in %.1f days: "
                 "renew it (it is served as soon as the file changes)",
                 c->cert_path ? c->cert_path : "", when,
                 (in->not_after - now) / CERT_DAY_S);
        return 1;
    }
    return 0;
}

/* Log what g is, and what is wrong with it. */
static void log_gen(const httpd_cert *c, const cert_gen *g, const char *how)
{
    const httpd_cert_info *in = &g->info;
    char from[64], until[64];

    flps_utc_text(in->not_before, from, sizeof(from));
    flps_utc_text(in->not_after, until, sizeof(until));
    log_info("http: %s the certificate %s for %s%s%s%s, valid from %s until "
             "%s",
             how, c->cert_path ? c->cert_path : "(given in memory)",
             in->subject[0] ? "CN " : "", in->subject,
             in->subject[0] && in->names[0] ? ", " : "",
             in->names[0] ? in->names : (in->subject[0] ? "" : "no name"), from,
             until);
    if (!in->host_ok)
        log_warn("http: the certificate %s does not name %s, the address "
                 "this server listens on (it is for %s): clients that reach "
                 "it as %s refuse it",
                 c->cert_path ? c->cert_path : "", c->host,
                 in->names[0] ? in->names : in->subject, c->host);
    warn_dates(c, in);
}

static void stat_or_zero(const char *path, struct stat *st)
{
    if (path == NULL || stat(path, st) != 0)
        memset(st, 0, sizeof(*st));
}

flps_err httpd_cert_create(const httpd_tls *tls, const char *host,
                           httpd_cert **out)
{
    httpd_cert *c = flps_calloc(1, sizeof(*c));
    char why[256];

    if (c == NULL)
        return FLPS_ENOMEM;
    if (host != NULL && strcmp(host, "0.0.0.0") != 0 && strcmp(host, "::") != 0)
        snprintf(c->host, sizeof(c->host), "%s", host);
    if ((tls->cert_path != NULL &&
         (c->cert_path = flps_strdup(tls->cert_path)) == NULL) ||
        (tls->key_path != NULL &&
         (c->key_path = flps_strdup(tls->key_path)) == NULL) ||
        pthread_mutex_init(&c->lock, NULL) != 0) {
        flps_free(c->cert_path);
        flps_free(c->key_path);
        flps_free(c);
        return FLPS_ENOMEM;
    }
    pthread_mutex_init(&c->reload_lock, NULL);
    c->cur = gen_load(tls->cert_pem, tls->key_pem, c->host, why, sizeof(why));
    if (c->cur == NULL) {
        log_error("http: cannot serve HTTPS: GnuTLS refuses %s; check that "
                  "--tls-cert and --tls-key are a certificate and its private "
                  "key",
                  why);
        httpd_cert_destroy(c);
        return FLPS_ESYS;
    }
    stat_or_zero(c->cert_path, &c->cert_st);
    stat_or_zero(c->key_path, &c->key_st);
    log_gen(c, c->cur, "serving");
    c->next_warn = flps_mono_s() + CERT_DAY_S;
    *out = c;
    return FLPS_OK;
}

void httpd_cert_destroy(httpd_cert *c)
{
    if (c == NULL)
        return;
    gen_free(c->cur);
    while (c->old != NULL) {
        cert_gen *g = c->old;
        c->old = g->next;
        gen_free(g);
    }
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->reload_lock);
    flps_free(c->cert_path);
    flps_free(c->key_path);
    flps_free(c);
}

void httpd_cert_current(httpd_cert *c, gnutls_pcert_st **pcert, unsigned int *n,
                        gnutls_privkey_t *key)
{
    pthread_mutex_lock(&c->lock);
    *pcert = c->cur->pcert;
    *n = c->cur->n;
    *key = c->cur->key;
    pthread_mutex_unlock(&c->lock);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev &&
           a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
           a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Serve g from now on; what it replaces is freed HTTPD_CERT_KEEP_S later. */
static void serve(httpd_cert *c, cert_gen *g)
{
    double now = flps_mono_s();
    cert_gen **pp;

    pthread_mutex_lock(&c->lock);
    c->cur->retired = now;
    c->cur->next = c->old;
    c->old = c->cur;
    c->cur = g;
    g->info.reloads = ++c->reloads;
    for (pp = &c->old; *pp != NULL;) {
        cert_gen *o = *pp;
        if (now - o->retired < HTTPD_CERT_KEEP_S) {
            pp = &o->next;
            continue;
        }
        *pp = o->next;
        gen_free(o);
    }
    pthread_mutex_unlock(&c->lock);
}

flps_err httpd_cert_reload(httpd_cert *c, int force)
{
    struct stat cs, ks;
    httpd_tls t;
    cert_gen *g;
    char why[512];
    flps_err rc;

    if (c->cert_path == NULL || c->key_path == NULL)
        return FLPS_EINVAL;
    pthread_mutex_lock(&c->reload_lock);
    stat_or_zero(c->cert_path, &cs);
    stat_or_zero(c->key_path, &ks);
    if (!force && same_file(&cs, &c->cert_st) && same_file(&ks, &c->key_st)) {
        pthread_mutex_unlock(&c->reload_lock);
        return FLPS_OK;
    }
    /* Remembered either way: a pair that does not load is said once per
     * change, not every second. */
    c->cert_st = cs;
    c->key_st = ks;
    rc = httpd_tls_load(c->cert_path, c->key_path, &t, why, sizeof(why));
    if (rc != FLPS_OK) {
        log_error("http: cannot load the renewed certificate: %s; still "
                  "serving the one before",
                  why);
        pthread_mutex_unlock(&c->reload_lock);
        return rc;
    }
    g = gen_load(t.cert_pem, t.key_pem, c->host, why, sizeof(why));
    httpd_tls_fini(&t);
    if (g == NULL) {
        log_error("http: cannot serve %s with %s: %s; still serving the "
                  "certificate before",
                  c->cert_path, c->key_path, why);
        pthread_mutex_unlock(&c->reload_lock);
        return FLPS_ECONFIG;
    }
    serve(c, g);
    log_gen(c, g, force ? "asked to reload: serving" : "renewed: serving");
    c->next_warn = flps_mono_s() + CERT_DAY_S;
    pthread_mutex_unlock(&c->reload_lock);
    return FLPS_OK;
}

void httpd_cert_tick(httpd_cert *c)
{
    httpd_cert_info in;

    if (c->cert_path != NULL && c->key_path != NULL)
        httpd_cert_reload(c, 0);
    pthread_mutex_lock(&c->reload_lock);
    if (flps_mono_s() >= c->next_warn) {
        c->next_warn = flps_mono_s() + CERT_DAY_S;
        httpd_cert_info_get(c, &in);
        warn_dates(c, &in);
    }
    pthread_mutex_unlock(&c->reload_lock);
}

void httpd_cert_info_get(httpd_cert *c, httpd_cert_info *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->cur->info;
    pthread_mutex_unlock(&c->lock);
}
