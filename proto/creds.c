/* The credentials file: parsing (no I/O), loading with its permission
 * checks, and making and writing new credentials. */
#include "proto/creds.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

typedef struct creds_key {
    const char *name;
    size_t off;   /* where the value goes in flps_creds */
    size_t cap;   /* its buffer */
    int is_curve; /* a Z85 key of CREDS_KEY_LEN, else the hex secret */
} creds_key;

static const creds_key creds_keys[] = {
    {"secret", offsetof(flps_creds, secret), CREDS_SECRET_MAX + 1, 0},
    {"curve_server_public", offsetof(flps_creds, server_public),
     CREDS_KEY_LEN + 1, 1},
    {"curve_server_secret", offsetof(flps_creds, server_secret),
     CREDS_KEY_LEN + 1, 1},
    {"curve_client_public", offsetof(flps_creds, client_public),
     CREDS_KEY_LEN + 1, 1},
    {"curve_client_secret", offsetof(flps_creds, client_secret),
     CREDS_KEY_LEN + 1, 1},
};
#define CREDS_NKEYS (sizeof(creds_keys) / sizeof(creds_keys[0]))

static int is_hex(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
           (ch >= 'A' && ch <= 'F');
}

/* The Z85 alphabet (ZeroMQ RFC 32). */
static int is_z85(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
           (ch >= 'A' && ch <= 'Z') ||
           (ch != '\0' && strchr(".-:+=^!/*?&<>()[]{}@%$#", ch) != NULL);
}

static flps_err parse_value(const creds_key *k, const char *v, size_t n,
                            flps_creds *c, unsigned line, char *errbuf,
                            size_t errlen)
{
    char *dst = (char *)c + k->off;

    if (k->is_curve) {
        if (n != CREDS_KEY_LEN)
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "line %u: %s must be a CURVE key of %d "
                                   "Z85 characters (got %zu)",
                                   line, k->name, CREDS_KEY_LEN, n);
        for (size_t i = 0; i < n; i++)
            if (!is_z85(v[i]))
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "line %u: %s is not a Z85 key", line,
                                       k->name);
    } else {
        if (n < CREDS_SECRET_MIN || n > CREDS_SECRET_MAX || n % 2 != 0)
            return flps_errbuf_set(
                errbuf, errlen, FLPS_ECONFIG,
                "line %u: secret must be an even number of %d to %d hex "
                "digits (got %zu characters)",
                line, CREDS_SECRET_MIN, CREDS_SECRET_MAX, n);
        for (size_t i = 0; i < n; i++)
            if (!is_hex(v[i]))
                return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                       "line %u: secret is not hexadecimal",
                                       line);
    }
    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (!k->is_curve && ch >= 'A' && ch <= 'F')
            ch = (char)(ch - 'A' + 'a');
        dst[i] = ch;
    }
    dst[n] = '\0';
    return FLPS_OK;
}

flps_err creds_parse(const char *text, size_t len, flps_creds *out,
                     char *errbuf, size_t errlen)
{
    flps_creds c;
    unsigned seen = 0, line = 0;
    size_t pos = 0;
    flps_err rc = FLPS_OK;

    memset(&c, 0, sizeof(c));
    if (len > CREDS_FILE_MAX) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "credentials of %zu bytes, more than %d", len,
                             CREDS_FILE_MAX);
        goto out;
    }
    while (pos < len) {
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        const char *eq;
        size_t klen;
        unsigned k;

        pos += n + (nl ? 1 : 0);
        line++;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        while (n > 0 && (*s == ' ' || *s == '\t')) {
            s++;
            n--;
        }
        if (n == 0 || *s == '#')
            continue;
        if (memchr(s, '\0', n) != NULL) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                 "line %u holds a NUL byte", line);
            goto out;
        }
        eq = memchr(s, '=', n);
        if (eq == NULL) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                 "line %u is not key=value", line);
            goto out;
        }
        klen = (size_t)(eq - s);
        while (klen > 0 && (s[klen - 1] == ' ' || s[klen - 1] == '\t'))
            klen--;
        for (k = 0; k < CREDS_NKEYS; k++)
            if (strlen(creds_keys[k].name) == klen &&
                memcmp(creds_keys[k].name, s, klen) == 0)
                break;
        if (k == CREDS_NKEYS) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                 "line %u: unknown key '%.*s' (known: secret, "
                                 "curve_server_public, curve_server_secret, "
                                 "curve_client_public, curve_client_secret)",
                                 line, (int)(klen > 40 ? 40 : klen), s);
            goto out;
        }
        if (seen & (1u << k)) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                 "line %u: %s given twice", line,
                                 creds_keys[k].name);
            goto out;
        }
        {
            const char *v = eq + 1;
            size_t vn = n - (size_t)(v - s);
            while (vn > 0 && (*v == ' ' || *v == '\t')) {
                v++;
                vn--;
            }
            rc = parse_value(&creds_keys[k], v, vn, &c, line, errbuf, errlen);
            if (rc != FLPS_OK)
                goto out;
        }
        seen |= 1u << k;
    }
    if (!(seen & 1u)) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "no secret= line (a job's credentials hold at "
                             "least its secret)");
        goto out;
    }
    if ((seen & 0x1eu) != 0 && (seen & 0x1eu) != 0x1eu) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "CURVE needs all four of curve_server_public, "
                             "curve_server_secret, curve_client_public and "
                             "curve_client_secret, or none");
        goto out;
    }
    c.has_curve = (seen & 0x1eu) == 0x1eu;
    *out = c;
out:
    creds_wipe(&c);
    return rc;
}

flps_err creds_load(const char *path, flps_creds *out, char *errbuf,
                    size_t errlen)
{
    char buf[CREDS_FILE_MAX + 1];
    struct stat st;
    size_t got = 0;
    flps_err rc;
    int fd;

    if (path == NULL || path[0] == '\0')
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "no credentials file named");
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                               "cannot open credentials file %.200s: %s", path,
                               strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "cannot stat credentials file %.200s: %s", path,
                             strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "credentials file %.200s is not a regular file",
                             path);
        goto out;
    }
    if ((st.st_mode & 077) != 0) {
        rc = flps_errbuf_set(
            errbuf, errlen, FLPS_ECONFIG,
            "credentials file %.200s has mode %04o: its group or others may "
            "read or write it; make it private (chmod 600) and give it only "
            "to the job's processes",
            path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    if (st.st_size > CREDS_FILE_MAX) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                             "credentials file %.200s has %lld bytes, more "
                             "than %d: not a credentials file",
                             path, (long long)st.st_size, CREDS_FILE_MAX);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                 "cannot read credentials file %.200s: %s",
                                 path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got == sizeof(buf))
            break;
    }
    {
        char why[256];
        rc = creds_parse(buf, got, out, why, sizeof(why));
        if (rc != FLPS_OK)
            flps_errbuf_set(errbuf, errlen, rc, "credentials file %.200s: %s",
                            path, why);
    }
out:
    explicit_bzero(buf, sizeof(buf));
    close(fd);
    return rc;
}

flps_err creds_load_env(flps_creds *out, int *found, char *errbuf,
                        size_t errlen)
{
    const char *path = getenv(CREDS_ENV);

    *found = 0;
    if (path == NULL || path[0] == '\0') {
        memset(out, 0, sizeof(*out));
        return FLPS_OK;
    }
    *found = 1;
    return creds_load(path, out, errbuf, errlen);
}

int creds_have_curve(void)
{
    return zmq_has("curve") != 0;
}

flps_err creds_generate(int curve, flps_creds *out, char *errbuf, size_t errlen)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[32];
    size_t got = 0;
    flps_creds c;

    memset(&c, 0, sizeof(c));
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return flps_errbuf_set(errbuf, errlen, FLPS_ESYS, "getrandom: %s",
                                   strerror(errno));
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(raw); i++) {
        c.secret[2 * i] = hex[raw[i] >> 4];
        c.secret[2 * i + 1] = hex[raw[i] & 15];
    }
    explicit_bzero(raw, sizeof(raw));
    if (curve) {
        if (!creds_have_curve())
            return flps_errbuf_set(errbuf, errlen, FLPS_ECONFIG,
                                   "this libzmq was built without CURVE "
                                   "(zmq_has(\"curve\") is 0): no encrypted "
                                   "data plane; rebuild libzmq with "
                                   "libsodium or run without CURVE keys");
        if (zmq_curve_keypair(c.server_public, c.server_secret) != 0 ||
            zmq_curve_keypair(c.client_public, c.client_secret) != 0) {
            creds_wipe(&c);
            return flps_errbuf_set(errbuf, errlen, FLPS_ESYS,
                                   "zmq_curve_keypair: %s",
                                   zmq_strerror(zmq_errno()));
        }
        c.has_curve = 1;
    }
    *out = c;
    creds_wipe(&c);
    return FLPS_OK;
}

flps_err creds_format(const flps_creds *c, char *buf, size_t buflen)
{
    int n;

    if (c->has_curve)
        n = snprintf(buf, buflen,
                     "# flps job credentials: keep private (0600)\n"
                     "secret=%s\ncurve_server_public=%s\n"
                     "curve_server_secret=%s\ncurve_client_public=%s\n"
                     "curve_client_secret=%s\n",
                     c->secret, c->server_public, c->server_secret,
                     c->client_public, c->client_secret);
    else
        n = snprintf(buf, buflen,
                     "# flps job credentials: keep private (0600)\n"
                     "secret=%s\n",
                     c->secret);
    return n < 0 || (size_t)n >= buflen ? FLPS_EINVAL : FLPS_OK;
}

flps_err creds_write(const char *path, const flps_creds *c, int replace,
                     char *errbuf, size_t errlen)
{
    char text[CREDS_FILE_MAX], tmp[4200];
    const char *target = path;
    size_t len, off = 0;
    flps_err rc = FLPS_OK;
    int fd;

    if (creds_format(c, text, sizeof(text)) != FLPS_OK)
        return flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                               "credentials too long");
    len = strlen(text);
    if (replace) {
        if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
            rc = flps_errbuf_set(errbuf, errlen, FLPS_EINVAL,
                                 "credentials path too long");
            goto out;
        }
        unlink(tmp);
        target = tmp;
    }
    fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
              0600);
    if (fd < 0) {
        rc = flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                             "cannot create credentials file %.200s: %s",
                             target, strerror(errno));
        goto out;
    }
    /* umask may only remove bits; make sure of 0600 either way. */
    if (fchmod(fd, 0600) != 0)
        rc = FLPS_EIO;
    while (rc == FLPS_OK && off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = FLPS_EIO;
        else
            off += (size_t)n;
    }
    if (rc == FLPS_OK && fsync(fd) != 0)
        rc = FLPS_EIO;
    if (close(fd) != 0 && rc == FLPS_OK)
        rc = FLPS_EIO;
    if (rc == FLPS_OK && replace && rename(tmp, path) != 0)
        rc = FLPS_EIO;
    if (rc != FLPS_OK) {
        flps_errbuf_set(errbuf, errlen, FLPS_EIO,
                        "cannot write credentials file %.200s: %s", path,
                        strerror(errno));
        unlink(target);
    }
out:
    explicit_bzero(text, sizeof(text));
    return rc;
}

int creds_secret_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = 0;

    if (la != lb || la == 0)
        return 0;
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

flps_err creds_instance_id(uint64_t *out)
{
    uint64_t v = 0;

    while (v == 0) {
        ssize_t n = getrandom(&v, sizeof(v), 0);
        if (n < 0 && errno != EINTR)
            return FLPS_ESYS;
        if (n != (ssize_t)sizeof(v))
            v = 0;
    }
    *out = v;
    return FLPS_OK;
}

void creds_wipe(flps_creds *c)
{
    explicit_bzero(c, sizeof(*c));
}
