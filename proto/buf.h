/* Reference-counted byte buffers: payloads that a transport sends without
 * copying while their owner still holds them (for a resend). */
#ifndef FLPS_PROTO_BUF_H
#define FLPS_PROTO_BUF_H

#include <stddef.h>

typedef struct proto_buf proto_buf;

/* A new buffer of len bytes (16-byte aligned), refcount 1. NULL on OOM. */
proto_buf *proto_buf_create(size_t len);

/* Wrap malloc'd data of len bytes; takes ownership of data on success
 * (freed with free() at the last release). NULL on OOM (data untouched). */
proto_buf *proto_buf_wrap(void *data, size_t len);

void *proto_buf_data(const proto_buf *b);
size_t proto_buf_len(const proto_buf *b);

/* Whether the len bytes at p lie within b's data: which of a message's
 * buffers holds one of its frames. 0 for a NULL b or p. */
int proto_buf_holds(const proto_buf *b, const void *p, size_t len);

/* Take / drop a reference. Thread-safe. proto_buf_release(NULL) is a
 * no-op. */
proto_buf *proto_buf_hold(proto_buf *b);
void proto_buf_release(proto_buf *b);

/* Is the caller's the only reference? Then nobody else (a transport that
 * is still sending it) reads the data, and the caller may write it again:
 * what makes a pool of reply buffers safe. The answer is exact only while
 * the caller holds its reference and gives none away; it synchronises
 * with the release that dropped the last other reference, so writes after
 * a true answer never race with the reads before that release. */
int proto_buf_is_unique(const proto_buf *b);

/* How many references there are now: a snapshot, exact only for what the
 * caller's own references account for (the others may drop at any time,
 * never rise unless the caller gives one away). */
size_t proto_buf_refs(const proto_buf *b);

#endif
