/* A Redis connection for flsched and flagent: URL parsing, connect with
 * timeouts, clear errors, and reconnection on the next call after a loss.
 * Commands are never retried behind the caller's back (an INCR or RPUSH
 * sent twice would do its work twice): a failed call fails, and the caller
 * decides. */
#ifndef FLPS_SCHED_RCONN_H
#define FLPS_SCHED_RCONN_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "common/err.h"

typedef struct rconn rconn;

/* Parse "redis://[:PASSWORD@]HOST[:PORT][/DB]" or the same with
 * "rediss://" (TLS) (PORT default 6379, DB default 0). Errors: FLPS_EINVAL
 * with a message in errbuf. */
flps_err rconn_parse_url(const char *url, char *host, size_t hostlen, int *port,
                         char *password, size_t pwlen, int *db, char *errbuf,
                         size_t errlen);

/* url with any password replaced by "***" (for logs and messages: a
 * password is never printed). Always NUL-terminates out. */
void rconn_redact_url(const char *url, char *out, size_t len);

/* Whether url is a rediss:// (TLS) URL. */
int rconn_url_is_tls(const char *url);

/* Create a connection to url; connects at once (timeout_ms for connect and
 * for each command). A server that cannot be reached is not an error here:
 * the handle is returned and the first command reports it (so a daemon can
 * start before Redis and wait for it).
 * Credentials: "redis://USER:PASSWORD@..." authenticates as an ACL user,
 * "redis://:PASSWORD@..." with the password alone. A URL without a
 * password takes it from the environment: the first line of the file
 * named by FLPS_REDIS_PASSWORD_FILE, else FLPS_REDIS_PASSWORD (and the
 * user from FLPS_REDIS_USER), so no secret need be on a command line.
 * (A daemon that starts other processes removes FLPS_REDIS_PASSWORD from
 * its environment once its connections exist: flagent does.) Credentials
 * Redis refuses
 * (WRONGPASS, NOAUTH) make every command fail with FLPS_ECONFIG: retrying
 * cannot help, and a daemon should stop with the reason.
 * TLS: a "rediss://" URL speaks TLS (1.2 or 1.3) to Redis's tls-port and
 * verifies its certificate and host name against the CA certificates in
 * the PEM file FLPS_REDIS_CA names (unset: the system's CAs), read at
 * every connect. A certificate that does not verify is FLPS_ECONFIG, as
 * wrong credentials; the TLS I/O is rtls.c's, the protocol hiredis's.
 * Errors: FLPS_EINVAL (bad URL), FLPS_EIO (the password file cannot be
 * read), FLPS_ENOMEM. Caller owns *out. Not thread-safe: one thread per
 * rconn. */
flps_err rconn_create(const char *url, int timeout_ms, rconn **out);
void rconn_destroy(rconn *rc);

/* Run one command (printf-style as redisCommand; use %b for binary values).
 * On FLPS_OK *reply is the reply (caller frees with freeReplyObject); a
 * Redis error reply gives FLPS_EREMOTE (message in rconn_error). Connection
 * problems give FLPS_EIO (and the next call reconnects). The message of the
 * last failure: rconn_error(). */
flps_err rconn_cmd(rconn *rc, redisReply **reply, const char *fmt, ...);

/* Same with an argument vector (binary-safe). */
flps_err rconn_cmdv(rconn *rc, redisReply **reply, int argc, const char **argv,
                    const size_t *argvlen);

/* Server-side Lua scripts, run with EVALSHA so a script's text crosses the
 * network once per connection, not once per call. Register lua (borrowed
 * until rconn_destroy: a string literal) and get its id in *id. The
 * connection loads every registered script with SCRIPT LOAD when it
 * connects (again after each reconnect), and when Redis answers NOSCRIPT
 * (its cache was emptied by a restart or SCRIPT FLUSH) it loads the script
 * and runs the command once more: a NOSCRIPT reply means nothing ran.
 * Errors: FLPS_EINVAL (NULL or too many scripts). */
flps_err rconn_script_add(rconn *rc, const char *lua, int *id);

/* EVALSHA script id with argv[0..nkeys-1] as KEYS and the rest as ARGV
 * (argvlen NULL: NUL-terminated strings). Replies and errors as
 * rconn_cmd; FLPS_EPROTO when Redis answers SCRIPT LOAD oddly. */
flps_err rconn_script_run(rconn *rc, redisReply **reply, int id, int nkeys,
                          int argc, const char **argv, const size_t *argvlen);

/* Check the connection with PING (reconnecting if needed). */
flps_err rconn_ping(rconn *rc);

/* "HOST:PORT" of the server, and the last error ("" if none). */
const char *rconn_address(const rconn *rc);
const char *rconn_error(const rconn *rc);

#endif
