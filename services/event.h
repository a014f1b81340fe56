/* The worker event lines, typed: one struct per event made from
 * services/event_schema.h, the writer flworker prints them with and the
 * reader flrun and flagent decode them with. A line is one JSON object
 * whose "event" names the event, then its fields in schema order, e.g.
 *   {"event":"plan","version":2,"iteration":300}
 * docs/events.md lists every event and field. */
#ifndef FLPS_SERVICES_EVENT_H
#define FLPS_SERVICES_EVENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "common/strbuf.h"
#include "flps.h"
#include "services/event_schema.h"

typedef struct event_u64s {
    uint64_t *v;
    size_t n;
} event_u64s;

/* The C type of each schema TYPE. */
#define EVENT_CTYPE_U64 uint64_t
#define EVENT_CTYPE_F3 double
#define EVENT_CTYPE_F4 double
#define EVENT_CTYPE_F5 double
#define EVENT_CTYPE_F6 double
#define EVENT_CTYPE_G9 double
#define EVENT_CTYPE_BOOL int
#define EVENT_CTYPE_STR const char *
#define EVENT_CTYPE_U64S event_u64s
#define EVENT_CTYPE_DONE_LAYERS event_done_layers
#define EVENT_CTYPE_PROFILE_LAYERS event_profile_layers

/* Bit EVENT_BIT_<event>_<field> of a struct's has: the field is present
 * (set by the reader; set by a writer's caller for an OPT field it writes,
 * REQ fields are always written). */
#define EVENT_BIT_(e, f, type, need, doc) EVENT_BIT_##e##_##f,
#define EVENT_MEMBER_(e, f, type, need, doc) EVENT_CTYPE_##type f;
#define EVENT_STRUCT_(e)                                                       \
    enum { EVENT_FIELDS_##e(EVENT_BIT_, e) EVENT_NFIELDS_##e };                \
    typedef struct event_##e {                                                 \
        EVENT_FIELDS_##e(EVENT_MEMBER_, e) uint64_t has;                       \
    } event_##e

EVENT_STRUCT_(done_layer);
EVENT_STRUCT_(profile_layer);

typedef struct event_done_layers {
    event_done_layer *v;
    size_t n;
} event_done_layers;

typedef struct event_profile_layers {
    event_profile_layer *v;
    size_t n;
} event_profile_layers;

#define EVENT_KIND_STRUCT_(K, e, writers, readers, doc) EVENT_STRUCT_(e);
EVENT_KINDS(EVENT_KIND_STRUCT_)
#undef EVENT_KIND_STRUCT_

/* Whether field f of s (a struct event_<e>) is present; mark it present. */
#define EVENT_HAS(s, e, f) ((((s)->has) >> EVENT_BIT_##e##_##f) & 1u)
#define EVENT_SET(s, e, f) ((s)->has |= (uint64_t)1 << EVENT_BIT_##e##_##f)

typedef enum {
    EVENT_NONE = 0, /* not an event line: a log line, not JSON, ... */
#define EVENT_KIND_ENUM_(K, e, writers, readers, doc) EVENT_##K,
    EVENT_KINDS(EVENT_KIND_ENUM_)
#undef EVENT_KIND_ENUM_
        EVENT_UNKNOWN, /* an event this schema does not know */
} event_kind;

/* One event line, typed: kind says which member holds it. Strings and
 * arrays are borrowed from the caller for event_write; for event_read
 * they belong to the event until event_fini. */
typedef struct event {
    event_kind kind;
    union {
#define EVENT_KIND_MEMBER_(K, e, writers, readers, doc) event_##e e;
        EVENT_KINDS(EVENT_KIND_MEMBER_)
#undef EVENT_KIND_MEMBER_
    };
    void *json_; /* the reader's parsed line; NULL for a writer's event */
} event;

/* The event's name as lines spell it ("progress"); "" for EVENT_NONE and
 * EVENT_UNKNOWN. */
const char *event_kind_name(event_kind kind);

/* Write ev as one line (with its '\n') on f and flush it: "event" first,
 * then the REQ fields and the OPT fields whose has bit is set, in schema
 * order. Numbers as the schema's TYPE says (a number that is not finite
 * is written null, which readers take as absent); strings are escaped
 * (they must be UTF-8). Errors: FLPS_EINVAL (kind is no known event),
 * FLPS_EIO (f failed; part of the line may be out). */
flps_err event_write(FILE *f, const event *ev);

/* event_read flags. STRICT: also an unknown event or field is an error,
 * as the check of a writer wants; launchers read without it, so a newer
 * worker's additions pass them by. */
#define EVENT_READ_STRICT 1u

/* Decode one line (len bytes, no '\n' needed) into *out. Returns
 *   FLPS_OK      a well-formed event: every field present has its type,
 *                every REQ field is there (kind EVENT_UNKNOWN for an event
 *                this schema does not know, unless STRICT);
 *   FLPS_EPROTO  not an event line (kind EVENT_NONE): not one JSON object
 *                starting with '{', duplicate keys, or no string "event";
 *   FLPS_EINVAL  an event that breaks the schema: *out has its kind and
 *                the fields that are right; a field of the wrong type is
 *                left out (never read as 0), an absent REQ field is absent;
 *   FLPS_ENOMEM  out of memory (kind EVENT_NONE).
 * A null value is an absent field. why (whylen bytes) says what was wrong
 * with the first problem ("done.bytes_sent: wants a whole number >= 0,
 * not a string"); "" on FLPS_OK. Call event_fini after every read. No I/O. */
flps_err event_read(const char *line, size_t len, unsigned flags, event *out,
                    char *why, size_t whylen);

/* Free what event_read allocated; ev is EVENT_NONE afterwards. NULL and a
 * zeroed event are fine. */
void event_fini(event *ev);

/* A worker's done event gets the energy its libflps metered
 * (flps_client_energy): the joules per iteration where a window was
 * measured (the GPUs' and the packages' only where such a device was
 * metered), the method and the GPUs, and the GPU clock set where
 * gpu_clock asked for one or GPUs were metered (not while auto has not
 * chosen). Strings are borrowed from e until the event
 * is written. No I/O. */
void event_done_energy(event_done *d, const flps_energy *e);

/* Append the Markdown tables of docs/events.md (the events, then every
 * field) made from the schema. Errors: FLPS_ENOMEM (sticky in b). */
flps_err event_doc_table(flps_strbuf *b);

#endif
