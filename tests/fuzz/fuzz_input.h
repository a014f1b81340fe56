/* The byte format the message and shard fuzz targets read, and the seed
 * generator writes: a sequence of messages, each
 *     u8 peer, u8 nframes, then nframes times (u16 length LE, bytes)
 * An input that ends mid-message ends the sequence. Every frame is copied
 * into a buffer of its own, of exactly its length (so AddressSanitizer
 * sees a read past its end) and aligned as transports deliver frames. */
#ifndef FLPS_TESTS_FUZZ_INPUT_H
#define FLPS_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"

/* One frame more than a message may have, so the refusal of a fifth
 * frame is reached too. */
#define FUZZ_MAX_FRAMES (PROTO_MAX_FRAMES + 1)

typedef struct fuzz_msg {
    uint32_t peer;
    size_t nframes;
    proto_frame frames[FUZZ_MAX_FRAMES];
    void *copies[FUZZ_MAX_FRAMES];
} fuzz_msg;

static void fuzz_msg_free(fuzz_msg *m)
{
    for (size_t i = 0; i < m->nframes; i++)
        free(m->copies[i]);
    m->nframes = 0;
}

/* Read the next message at *pos; 0 at the end of the input (or when a
 * copy could not be allocated). */
static int fuzz_next(const uint8_t *data, size_t size, size_t *pos, fuzz_msg *m)
{
    size_t p = *pos;

    memset(m, 0, sizeof(*m));
    if (size - p < 2)
        return 0;
    m->peer = data[p];
    m->nframes = (size_t)data[p + 1] % (FUZZ_MAX_FRAMES + 1);
    p += 2;
    for (size_t i = 0; i < m->nframes; i++) {
        size_t len;

        if (size - p < 2) {
            m->nframes = i;
            fuzz_msg_free(m);
            return 0;
        }
        len = (size_t)data[p] | (size_t)data[p + 1] << 8;
        p += 2;
        if (size - p < len) {
            m->nframes = i;
            fuzz_msg_free(m);
            return 0;
        }
        m->copies[i] = malloc(len ? len : 1);
        if (m->copies[i] == NULL) {
            m->nframes = i;
            fuzz_msg_free(m);
            return 0;
        }
        memcpy(m->copies[i], data + p, len);
        m->frames[i].data = m->copies[i];
        m->frames[i].len = len;
        p += len;
    }
    *pos = p;
    return 1;
}

#endif
