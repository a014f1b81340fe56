/* Reference-counted byte buffers shared by a sender and its transport. */
#include "proto/buf.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/alloc.h"

struct proto_buf {
    atomic_size_t refs;
    size_t len;
    void *data;
    void *owned; /* separately allocated data (wrap), or NULL */
    alignas(16) unsigned char inline_data[];
};

proto_buf *proto_buf_create(size_t len)
{
    proto_buf *b = flps_malloc(sizeof(*b) + len);

    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = len;
    b->data = b->inline_data;
    b->owned = NULL;
    return b;
}

proto_buf *proto_buf_wrap(void *data, size_t len)
{
    proto_buf *b = flps_malloc(sizeof(*b));

    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = len;
    b->data = data;
    b->owned = data;
    return b;
}

void *proto_buf_data(const proto_buf *b)
{
    return b->data;
}

size_t proto_buf_len(const proto_buf *b)
{
    return b->len;
}

int proto_buf_holds(const proto_buf *b, const void *p, size_t len)
{
    const char *base, *q = p;

    if (b == NULL || p == NULL)
        return 0;
    base = b->data;
    return q >= base && len <= b->len && (size_t)(q - base) <= b->len - len;
}

proto_buf *proto_buf_hold(proto_buf *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

size_t proto_buf_refs(const proto_buf *b)
{
    return atomic_load_explicit(&((proto_buf *)b)->refs, memory_order_acquire);
}

int proto_buf_is_unique(const proto_buf *b)
{
    return atomic_load_explicit(&((proto_buf *)b)->refs,
                                memory_order_acquire) == 1;
}

void proto_buf_release(proto_buf *b)
{
    if (b == NULL)
        return;
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        free(b->owned);
        flps_free(b);
    }
}
