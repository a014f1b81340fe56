/* The certificate an HTTPS server of services/httpd.c serves: loaded with
 * GnuTLS from PEM, handed to every handshake through libmicrohttpd's
 * certificate callback, loaded again when its files change (or when asked:
 * SIGHUP) without closing a connection, and checked for its dates and
 * names, which are logged. Internal to services/httpd*.c. */
#ifndef FLPS_SERVICES_HTTPD_CERT_H
#define FLPS_SERVICES_HTTPD_CERT_H

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>

#include "common/err.h"
#include "services/httpd.h"

/* Warned about this long before it expires, then once a day. */
#define HTTPD_CERT_WARN_DAYS 30

typedef struct httpd_cert httpd_cert;

/* Load tls's PEM (copied; its paths are kept for reloads) and log what
 * the certificate is for and until when: an error line when it has
 * expired or is not valid yet, a warning when it expires within
 * HTTPD_CERT_WARN_DAYS or does not name host (the address the server
 * listens on; NULL or a wildcard address: not checked). Errors:
 * FLPS_ESYS (GnuTLS refuses the certificate or the key, or the key is not
 * the certificate's; logged), FLPS_ENOMEM. Caller owns *out. */
flps_err httpd_cert_create(const httpd_tls *tls, const char *host,
                           httpd_cert **out);

/* Free c and every certificate it served. NULL does nothing. Only once no
 * handshake can use it any more (the server is stopped). */
void httpd_cert_destroy(httpd_cert *c);

/* For the certificate callback: the chain and key to present now. They
 * stay valid for HTTPD_CERT_KEEP_S after a reload replaced them, far past
 * the header deadline that bounds a handshake. Thread-safe. */
#define HTTPD_CERT_KEEP_S 120.0
void httpd_cert_current(httpd_cert *c, gnutls_pcert_st **pcert, unsigned int *n,
                        gnutls_privkey_t *key);

/* Read the files again and serve what they hold from the next handshake
 * on: always when force, else only when either file changed (its inode,
 * size, or modification or change time, which a Kubernetes Secret update
 * changes too). A pair that cannot be read, or whose key is not the
 * certificate's, is logged and the one served kept: FLPS_EIO or
 * FLPS_ECONFIG. FLPS_OK also when nothing changed. Thread-safe; blocks on
 * file I/O. */
flps_err httpd_cert_reload(httpd_cert *c, int force);

/* Once a second or so (the server's watchdog): reload on a change, and
 * repeat the expiry warning once a day. */
void httpd_cert_tick(httpd_cert *c);

/* What is served now. Thread-safe. */
void httpd_cert_info_get(httpd_cert *c, httpd_cert_info *out);

#endif
