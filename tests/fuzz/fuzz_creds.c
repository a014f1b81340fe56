/* libFuzzer target: the credentials parser (creds_parse, what creds_load
 * runs on a credentials file's bytes). What must hold: an accepted set has
 * a secret of 32..128 lower-case hex digits, an even number, and all four
 * CURVE keys (40 Z85 characters each) or none; written out by creds_format
 * it reads back the same; a refusal is FLPS_ECONFIG with a message, and
 * that message never holds a value the text gave a key (the header's
 * promise: messages name the line and the key only). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/creds.h"
#include "tests/fuzz/fuzz_target.h"

/* Values shorter than this are not looked for in messages: short runs of
 * hex or Z85 occur in any text (line numbers, key names). */
#define FUZZ_VALUE_MIN 12

static int is_hex_lower(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int is_z85(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr(".-:+=^!/*?&<>()[]{}@%$#", c) != NULL);
}

static void check_key(const char *k, int set)
{
    size_t n = strnlen(k, CREDS_KEY_LEN + 1);

    fuzz_require(n == (set ? CREDS_KEY_LEN : 0u),
                 set ? "a CURVE key not of 40 characters"
                     : "a CURVE key in a set without CURVE");
    for (size_t i = 0; i < n; i++)
        fuzz_require(is_z85(k[i]), "a CURVE key outside the Z85 alphabet");
}

static void check_accepted(const flps_creds *c)
{
    size_t n = strnlen(c->secret, sizeof(c->secret));

    fuzz_require(n < sizeof(c->secret), "a secret without its terminator");
    fuzz_require(n >= CREDS_SECRET_MIN && n <= CREDS_SECRET_MAX && n % 2 == 0,
                 "a secret of a bad length");
    for (size_t i = 0; i < n; i++)
        fuzz_require(is_hex_lower(c->secret[i]),
                     "a secret not in lower-case hex");
    fuzz_require(c->has_curve == 0 || c->has_curve == 1,
                 "has_curve not 0 or 1");
    check_key(c->server_public, c->has_curve);
    check_key(c->server_secret, c->has_curve);
    check_key(c->client_public, c->has_curve);
    check_key(c->client_secret, c->has_curve);
}

static void roundtrip(const flps_creds *c)
{
    char text[CREDS_FILE_MAX];
    flps_creds back;

    fuzz_require(creds_format(c, text, sizeof(text)) == FLPS_OK,
                 "accepted credentials do not format");
    fuzz_require(creds_parse(text, strlen(text), &back, NULL, 0) == FLPS_OK,
                 "formatted credentials do not parse");
    fuzz_require(strcmp(back.secret, c->secret) == 0 &&
                     back.has_curve == c->has_curve &&
                     strcmp(back.server_public, c->server_public) == 0 &&
                     strcmp(back.server_secret, c->server_secret) == 0 &&
                     strcmp(back.client_public, c->client_public) == 0 &&
                     strcmp(back.client_secret, c->client_secret) == 0,
                 "credentials read back differently");
    creds_wipe(&back);
}

/* Whether needle (n bytes) occurs in text before a line's first '=': the
 * key part, which a message may quote. */
static int in_a_key(const char *text, size_t len, const char *needle, size_t n)
{
    size_t start = 0;

    while (start < len) {
        const char *s = text + start;
        const char *nl = memchr(s, '\n', len - start);
        size_t line = nl ? (size_t)(nl - s) : len - start;
        const char *eq = memchr(s, '=', line);
        size_t klen = eq ? (size_t)(eq - s) : line;

        for (size_t i = 0; i + n <= klen; i++)
            if (memcmp(s + i, needle, n) == 0)
                return 1;
        start += line + 1;
    }
    return 0;
}

/* No message quotes a value: every run after a '=' that could be a
 * secret or a key (FUZZ_VALUE_MIN or more hex or Z85 characters) is
 * absent from err, unless the text also has it in a key. */
static void check_no_value_in(const char *err, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        size_t n = 0;

        if (text[i] != '=')
            continue;
        while (i + 1 + n < len && is_z85(text[i + 1 + n]) &&
               text[i + 1 + n] != '=')
            n++;
        if (n >= FUZZ_VALUE_MIN &&
            memmem(err, strlen(err), text + i + 1, n) != NULL)
            fuzz_require(in_a_key(text, len, text + i + 1, n),
                         "a refusal's message quotes a value");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    flps_creds c;
    char err[512];
    flps_err rc;

    err[0] = '\0';
    rc = creds_parse(text, size, &c, err, sizeof(err));
    if (rc == FLPS_OK) {
        check_accepted(&c);
        roundtrip(&c);
        creds_wipe(&c);
        return 0;
    }
    fuzz_require(rc == FLPS_ECONFIG, "an error other than ECONFIG");
    fuzz_require(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0',
                 "a refusal without a message");
    check_no_value_in(err, text, size);
    return 0;
}
