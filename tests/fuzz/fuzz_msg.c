/* libFuzzer target: the wire message decoder (proto_msg_decode and
 * proto_msg_decode_ex) on arbitrary frames. Whatever it accepts must
 * encode again and decode to the same message: a decoded message the
 * encoder cannot write, or one that reads differently the second time,
 * is a bug as much as a crash is. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_target.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_msg: %s\n", what);
        abort();
    }
}

/* Ops whose codec field says how values are laid out; for the others
 * (header only) the field means nothing and is not encoded. Likewise a
 * tensor list means something, and is encoded, only in a REGISTER. */
static int has_values(uint8_t op)
{
    return op == PROTO_OP_PUSH || op == PROTO_OP_UPDATE ||
           op == PROTO_OP_INIT || op == PROTO_OP_PULL_REPLY;
}

static void roundtrip(const proto_msg *m)
{
    proto_frame f[PROTO_MAX_FRAMES];
    size_t nf = 0, hlen = 0;
    void *hdr = NULL;
    proto_msg d;
    char err[256] = "";

    check(proto_msg_encode(m, &hdr, &hlen, f, &nf) == FLPS_OK,
          "a decoded message does not encode");
    check(proto_msg_decode(f, nf, &d, err, sizeof(err)) == FLPS_OK,
          "a re-encoded message does not decode");
    if (!(d.op == m->op && d.rank == m->rank && d.part == m->part &&
          d.iter == m->iter && d.version == m->version &&
          (d.codec == m->codec || !has_values(m->op)) && d.n == m->n &&
          (d.nrej == m->nrej || m->op != PROTO_OP_UPDATE) &&
          d.nsegs == m->nsegs &&
          (d.ntensors == m->ntensors || m->op != PROTO_OP_REGISTER) &&
          (d.status == m->status ||
           (m->op != PROTO_OP_ACK && m->op != PROTO_OP_ERROR)) &&
          strcmp(d.job, m->job) == 0))
        fprintf(stderr,
                "fuzz_msg: first  %s rank %u part %u iter %llu ver %llu "
                "codec %u n %u nrej %u nsegs %u nt %u status %u job '%s'\n"
                "fuzz_msg: second %s rank %u part %u iter %llu ver %llu "
                "codec %u n %u nrej %u nsegs %u nt %u status %u job '%s'\n",
                proto_op_name(m->op), m->rank, m->part,
                (unsigned long long)m->iter, (unsigned long long)m->version,
                m->codec, m->n, m->nrej, m->nsegs, m->ntensors, m->status,
                m->job, proto_op_name(d.op), d.rank, d.part,
                (unsigned long long)d.iter, (unsigned long long)d.version,
                d.codec, d.n, d.nrej, d.nsegs, d.ntensors, d.status, d.job);
    check(d.op == m->op && d.rank == m->rank && d.part == m->part &&
              d.iter == m->iter && d.version == m->version &&
              (d.codec == m->codec || !has_values(m->op)) && d.n == m->n &&
              (d.nrej == m->nrej || m->op != PROTO_OP_UPDATE) &&
              d.nsegs == m->nsegs &&
              (d.ntensors == m->ntensors || m->op != PROTO_OP_REGISTER) &&
              (d.status == m->status ||
               (m->op != PROTO_OP_ACK && m->op != PROTO_OP_ERROR)) &&
              strcmp(d.job, m->job) == 0,
          "a re-encoded message decodes to another one");
    check(strcmp(d.auth, m->auth) == 0 && d.cid == m->cid,
          "the credentials (auth, cid) changed in a round trip");
    if (m->n > 0 && m->val != NULL)
        check(memcmp(d.val, m->val, (size_t)m->n * sizeof(float)) == 0,
              "values changed in a round trip");
    if (m->n > 0 && m->idx != NULL)
        check(memcmp(d.idx, m->idx, (size_t)m->n * sizeof(uint32_t)) == 0,
              "indices changed in a round trip");
    if (m->op == PROTO_OP_UPDATE && m->nrej > 0)
        check(memcmp(d.rej, m->rej, (size_t)m->nrej * sizeof(uint32_t)) == 0,
              "rejected indices changed in a round trip");
    for (uint32_t i = 0; m->op == PROTO_OP_REGISTER && i < m->ntensors; i++)
        check(d.tensors[i].numel == m->tensors[i].numel &&
                  strcmp(d.tensors[i].name, m->tensors[i].name) == 0,
              "a tensor changed in a round trip");
    proto_msg_fini(&d);
    free(hdr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    fuzz_msg fm;

    while (fuzz_next(data, size, &pos, &fm)) {
        proto_msg m;
        char err[256] = "";
        unsigned flags =
            fm.peer & 1u ? PROTO_DECODE_UPDATE_VALUES_UNCHECKED : 0u;
        flps_err rc;

        /* An empty frame has no data, as an encoder's frames of no pairs
         * have none (NULL): the decoder must never offset such a pointer. */
        for (size_t i = 0; i < fm.nframes; i++)
            if (fm.frames[i].len == 0)
                fm.frames[i].data = NULL;
        rc = proto_msg_decode_ex(fm.frames, fm.nframes, flags, &m, err,
                                 sizeof(err));

        if (rc == FLPS_OK) {
            check(fm.nframes <= PROTO_MAX_FRAMES, "a fifth frame accepted");
            /* Unchecked values may be NaN, which the encoder's peer, the
             * checked decoder, refuses by design. */
            if (flags == 0)
                roundtrip(&m);
            proto_msg_fini(&m);
        } else if (rc != FLPS_ENOMEM) {
            check(err[0] != '\0', "a refusal without a reason");
        }
        fuzz_msg_free(&fm);
    }
    return 0;
}
