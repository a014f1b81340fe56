/* A job's data-plane credentials: the per-job secret every member sends
 * to the shards, and the optional ZeroMQ CURVE keys. Read from a
 * credentials file (0600, one key=value per line) whose path travels in
 * FLPS_CREDENTIALS_FILE, never on a command line; made by flrun and
 * flsched for each job. No value is ever put in a log line or an error
 * message: messages name the file, the line and the key only. */
#ifndef FLPS_PROTO_CREDS_H
#define FLPS_PROTO_CREDS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* The environment variable holding a credentials file's path. */
#define CREDS_ENV "FLPS_CREDENTIALS_FILE"

/* A secret is 32..128 hex digits (16..64 bytes; generated ones are 64). */
#define CREDS_SECRET_MIN 32
#define CREDS_SECRET_MAX 128
/* A CURVE key in Z85 text. */
#define CREDS_KEY_LEN 40
/* The largest credentials file read (a few lines; anything larger is not
 * one). */
#define CREDS_FILE_MAX 4096

typedef struct flps_creds {
    char secret[CREDS_SECRET_MAX + 1]; /* lower-case hex; "" if none */
    /* CURVE: all four set or none. The shard is the server with the
     * server key pair; every client uses the job's client key pair and
     * the server's public key. */
    int has_curve;
    char server_public[CREDS_KEY_LEN + 1];
    char server_secret[CREDS_KEY_LEN + 1];
    char client_public[CREDS_KEY_LEN + 1];
    char client_secret[CREDS_KEY_LEN + 1];
} flps_creds;

/* Parse the text of a credentials file (len bytes; parsing only, no I/O).
 * Lines: blank, `# comment`, or `key=value` with key one of secret,
 * curve_server_public, curve_server_secret, curve_client_public,
 * curve_client_secret. A file with no secret, an unknown or repeated key,
 * a value of the wrong length or alphabet, or some but not all CURVE keys
 * is refused: FLPS_ECONFIG with the line and key in errbuf (never the
 * value). *out written only on FLPS_OK. */
flps_err creds_parse(const char *text, size_t len, flps_creds *out,
                     char *errbuf, size_t errlen);

/* Read and parse the file at path. Refused (FLPS_ECONFIG, with what to do
 * in errbuf): a file that is missing or unreadable, not a regular file,
 * larger than CREDS_FILE_MAX, or that its group or others may read or
 * write (chmod 600). */
flps_err creds_load(const char *path, flps_creds *out, char *errbuf,
                    size_t errlen);

/* Load the file named by $FLPS_CREDENTIALS_FILE. *found is 0 (and *out
 * zeroed, FLPS_OK) when the variable is unset or empty; 1 when a file was
 * named, which must then load. */
flps_err creds_load_env(flps_creds *out, int *found, char *errbuf,
                        size_t errlen);

/* Make new credentials: a random 64-hex-digit secret (the kernel's
 * getrandom) and, when curve is non-zero, two CURVE key pairs.
 * FLPS_ECONFIG when curve is asked and libzmq lacks CURVE (errbuf says
 * so); FLPS_ESYS when no randomness could be had. */
flps_err creds_generate(int curve, flps_creds *out, char *errbuf,
                        size_t errlen);

/* The file's text for c (at most CREDS_FILE_MAX bytes) into buf. */
flps_err creds_format(const flps_creds *c, char *buf, size_t buflen);

/* Write c to path, created 0600 (O_EXCL unless replace is non-zero, then
 * written to a temporary and renamed), fsynced. FLPS_EIO with errbuf. */
flps_err creds_write(const char *path, const flps_creds *c, int replace,
                     char *errbuf, size_t errlen);

/* Whether a and b are the same secret, in time that does not depend on
 * where they differ (b may be attacker-chosen; its length is not
 * hidden). */
int creds_secret_equal(const char *a, const char *b);

/* 1 when this libzmq has CURVE (zmq_has("curve")). */
int creds_have_curve(void);

/* A random non-zero 64-bit client instance id (the header's cid).
 * FLPS_ESYS when no randomness could be had. */
flps_err creds_instance_id(uint64_t *out);

/* Overwrite c's keys and secret (before freeing memory that held them). */
void creds_wipe(flps_creds *c);

#endif
