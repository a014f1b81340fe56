/* Tests of the worker event lines: the writer prints what flworker's
 * printf calls printed, byte for byte; the reader decodes every field,
 * refuses wrong types with a reason and passes unknown fields by; the
 * tables of docs/events.md are the schema's. */
#include "services/event.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

#define DOC_PATH FLPS_SOURCE_DIR "/docs/events.md"
#define DOC_BEGIN "<!-- begin: event tables (event_doc_table) -->\n"
#define DOC_END "<!-- end: event tables -->"

/* ev as event_write prints it (caller frees). */
static char *written(const event *ev)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    cr_assert_not_null(f);
    cr_assert_eq(event_write(f, ev), FLPS_OK);
    fclose(f);
    return buf;
}

static flps_err read_line(const char *line, unsigned flags, event *ev,
                          char *why, size_t whylen)
{
    return event_read(line, strlen(line), flags, ev, why, whylen);
}

Test(event, writes_progress_as_flworker_printed_it)
{
    event ev = {.kind = EVENT_PROGRESS,
                .progress = {.iter = 15,
                             .iterations = 1500,
                             .loss = 2.302585,
                             .bytes_sent = 123456,
                             .dense_bytes = 9876543210ULL,
                             .elapsed = 1.23456}};
    char *s = written(&ev);

    cr_assert_str_eq(s, "{\"event\":\"progress\",\"iter\":15,\"iterations\":"
                        "1500,\"loss\":2.30259,\"bytes_sent\":123456,"
                        "\"dense_bytes\":9876543210,\"elapsed\":1.235}\n");
    free(s);
    /* fedavg's, with its clients in the place it always had. */
    ev.progress.clients = 3;
    EVENT_SET(&ev.progress, progress, clients);
    s = written(&ev);
    cr_assert_str_eq(s, "{\"event\":\"progress\",\"iter\":15,\"iterations\":"
                        "1500,\"clients\":3,\"loss\":2.30259,\"bytes_sent\":"
                        "123456,\"dense_bytes\":9876543210,\"elapsed\":"
                        "1.235}\n");
    free(s);
}

Test(event, writes_done_with_its_layers_as_flworker_printed_it)
{
    event_done_layer layers[2] = {
        {.name = "fc1.weight", .bytes_sent = 10, .elements_sent = 2},
        {.name = "fc1.bias", .wait_seconds = 0.25}};
    event ev = {.kind = EVENT_DONE,
                .done = {.rank = 1,
                         .iterations = 100,
                         .bytes_sent = 5,
                         .bytes_received = 6,
                         .dense_bytes = 7,
                         .backend = "cpu",
                         .overlap = 1,
                         .compute_seconds = 1.5,
                         .model_hash = "00ab00cd00ef0012",
                         .layers = {layers, 2},
                         .seconds = 2}};
    char *s;

    EVENT_SET(&ev.done, done, backend);
    EVENT_SET(&ev.done, done, overlap);
    EVENT_SET(&ev.done, done, compute_seconds);
    EVENT_SET(&ev.done, done, model_hash);
    EVENT_SET(&ev.done, done, layers);
    s = written(&ev);
    cr_assert_str_eq(
        s, "{\"event\":\"done\",\"rank\":1,\"iterations\":100,\"bytes_sent\":"
           "5,\"bytes_received\":6,\"dense_bytes\":7,\"resends\":0,"
           "\"backend\":\"cpu\",\"overlap\":true,\"compute_seconds\":1.500000,"
           "\"model_hash\":\"00ab00cd00ef0012\",\"layers\":[{\"name\":"
           "\"fc1.weight\",\"bytes_sent\":10,\"elements_sent\":2,"
           "\"wait_seconds\":0.000000},{\"name\":\"fc1.bias\",\"bytes_sent\":"
           "0,\"elements_sent\":0,\"wait_seconds\":0.250000}],\"seconds\":"
           "2.000}\n");
    free(s);
}

Test(event, writes_profile_and_partition_arrays)
{
    event_profile_layer pl[1] = {
        {.name = "fc1.weight", .numel = 200704, .t_backward = 0.000312}};
    uint64_t samples[3] = {10, 0, 7};
    event prof = {.kind = EVENT_PROFILE,
                  .profile = {.iteration = 25,
                              .workers = 2,
                              .alpha = 5e-05,
                              .beta = 1.0 / 3e9,
                              .layers = {pl, 1}}};
    event part = {
        .kind = EVENT_PARTITION,
        .partition = {.clients = 3, .skew = 0.5, .samples = {samples, 3}}};
    char *s = written(&prof);

    cr_assert_str_eq(s, "{\"event\":\"profile\",\"iteration\":25,\"workers\":"
                        "2,\"alpha\":5e-05,\"beta\":3.33333333e-10,\"layers\":"
                        "[{\"name\":\"fc1.weight\",\"numel\":200704,"
                        "\"t_backward\":0.000312}]}\n");
    free(s);
    s = written(&part);
    cr_assert_str_eq(s, "{\"event\":\"partition\",\"clients\":3,\"skew\":"
                        "0.500000,\"samples\":[10,0,7]}\n");
    free(s);
    part.partition.samples.n = 0;
    s = written(&part);
    cr_assert_not_null(strstr(s, "\"samples\":[]}"), "%s", s);
    free(s);
}

Test(event, escapes_strings_and_writes_no_nan)
{
    event ev = {.kind = EVENT_DONE}, back;
    char why[128], *s;

    ev.done.backend = "a\"b\\c\n\x01";
    EVENT_SET(&ev.done, done, backend);
    ev.done.seconds = 0.0 / 0.0;
    s = written(&ev);
    cr_assert_not_null(strstr(s, "\"backend\":\"a\\\"b\\\\c\\n\\u0001\""), "%s",
                       s);
    cr_assert_not_null(strstr(s, "\"seconds\":null}"), "%s", s);
    cr_assert_eq(read_line(s, 0, &back, why, sizeof(why)), FLPS_EINVAL);
    cr_assert_str_eq(back.done.backend, ev.done.backend);
    cr_assert_not(EVENT_HAS(&back.done, done, seconds), "null is absent");
    cr_assert_str_eq(why, "done: lacks seconds");
    event_fini(&back);
    free(s);
}

Test(event, refuses_to_write_no_event)
{
    event ev = {.kind = EVENT_UNKNOWN};
    FILE *f = fopen("/dev/null", "w");

    cr_assert_eq(event_write(f, &ev), FLPS_EINVAL);
    ev.kind = EVENT_NONE;
    cr_assert_eq(event_write(f, &ev), FLPS_EINVAL);
    fclose(f);
}

Test(event, reads_every_field_back)
{
    const char line[] =
        "{\"event\":\"done\",\"rank\":0,\"iterations\":20,\"rounds\":20,"
        "\"bytes_sent\":1,\"bytes_received\":2,\"dense_bytes\":3,"
        "\"resends\":4,\"test_accuracy\":0.8768,\"backend\":\"cpu\","
        "\"overlap\":false,\"layers\":[{\"name\":\"w\",\"bytes_sent\":9,"
        "\"elements_sent\":8,\"wait_seconds\":0.5}],\"seconds\":1.5}";
    char why[128];
    event ev;

    cr_assert_eq(read_line(line, EVENT_READ_STRICT, &ev, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_str_eq(why, "");
    cr_assert_eq(ev.kind, EVENT_DONE);
    cr_assert_eq(ev.done.iterations, 20);
    cr_assert(EVENT_HAS(&ev.done, done, rounds));
    cr_assert_eq(ev.done.resends, 4);
    cr_assert_float_eq(ev.done.test_accuracy, 0.8768, 1e-12);
    cr_assert_str_eq(ev.done.backend, "cpu");
    cr_assert(EVENT_HAS(&ev.done, done, overlap));
    cr_assert_eq(ev.done.overlap, 0);
    cr_assert_not(EVENT_HAS(&ev.done, done, model_hash));
    cr_assert_eq(ev.done.layers.n, 1);
    cr_assert_str_eq(ev.done.layers.v[0].name, "w");
    cr_assert_eq(ev.done.layers.v[0].elements_sent, 8);
    cr_assert_float_eq(ev.done.seconds, 1.5, 1e-12);
    event_fini(&ev);
    cr_assert_eq(ev.kind, EVENT_NONE);
    event_fini(&ev);
    event_fini(NULL);
}

Test(event, writes_what_it_read_as_it_read_it)
{
    const char *lines[] = {
        "{\"event\":\"start\",\"rank\":3,\"samples\":15000,\"params\":"
        "235146,\"start_iteration\":0}\n",
        "{\"event\":\"eval\",\"iter\":600,\"test_accuracy\":0.8512,"
        "\"test_loss\":0.4123,\"elapsed_s\":12.345}\n",
        "{\"event\":\"plan\",\"version\":2,\"iteration\":300}\n",
        "{\"event\":\"partition\",\"clients\":2,\"skew\":0.000000,"
        "\"samples\":[30000,30000]}\n",
        NULL};

    for (int i = 0; lines[i] != NULL; i++) {
        char why[128], *s;
        event ev;

        cr_assert_eq(
            read_line(lines[i], EVENT_READ_STRICT, &ev, why, sizeof(why)),
            FLPS_OK, "%s: %s", lines[i], why);
        s = written(&ev);
        cr_assert_str_eq(s, lines[i]);
        free(s);
        event_fini(&ev);
    }
}

Test(event, tells_lines_that_are_no_event)
{
    const char *lines[] = {"",
                           "listening on tcp://127.0.0.1:5555",
                           "metrics on 127.0.0.1:9100",
                           " {\"event\":\"start\"}",
                           "{\"event\":\"progress\",",
                           "{\"event\":7}",
                           "{\"rank\":0}",
                           "[\"event\"]",
                           "{\"event\":\"eval\",\"event\":\"done\"}",
                           NULL};

    for (int i = 0; lines[i] != NULL; i++) {
        char why[128];
        event ev;

        cr_assert_eq(read_line(lines[i], 0, &ev, why, sizeof(why)), FLPS_EPROTO,
                     "%s", lines[i]);
        cr_assert_eq(ev.kind, EVENT_NONE);
        cr_assert_not_null(strstr(why, "not an event line"), "%s", why);
        event_fini(&ev);
    }
}

Test(event, refuses_a_field_of_the_wrong_type_and_keeps_the_rest)
{
    char why[128];
    event ev;

    cr_assert_eq(read_line("{\"event\":\"progress\",\"iter\":\"x\",\"loss\":"
                           "1.5,\"bytes_sent\":-3,\"dense_bytes\":2.5}",
                           0, &ev, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(ev.kind, EVENT_PROGRESS);
    cr_assert_str_eq(why,
                     "progress.iter: wants a whole number >= 0, not a string");
    cr_assert_not(EVENT_HAS(&ev.progress, progress, iter));
    cr_assert_eq(ev.progress.iter, 0);
    cr_assert_not(EVENT_HAS(&ev.progress, progress, bytes_sent),
                  "a negative count is refused");
    cr_assert_not(EVENT_HAS(&ev.progress, progress, dense_bytes),
                  "a count with a fraction is refused");
    cr_assert(EVENT_HAS(&ev.progress, progress, loss));
    cr_assert_float_eq(ev.progress.loss, 1.5, 1e-12);
    event_fini(&ev);
}

Test(event, an_array_with_one_bad_item_is_refused_whole)
{
    char why[160];
    event ev;

    cr_assert_eq(read_line("{\"event\":\"partition\",\"clients\":2,\"skew\":"
                           "0,\"samples\":[1,\"2\"]}",
                           0, &ev, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_str_eq(why, "partition.samples[1]: wants a whole number >= 0, "
                          "not a string");
    cr_assert_not(EVENT_HAS(&ev.partition, partition, samples));
    cr_assert_null(ev.partition.samples.v);
    event_fini(&ev);
    cr_assert_eq(read_line("{\"event\":\"profile\",\"iteration\":1,"
                           "\"workers\":1,\"alpha\":1,\"beta\":1,\"layers\":"
                           "[{\"name\":\"a\",\"numel\":1,\"t_backward\":1},"
                           "{\"name\":\"b\",\"numel\":1}]}",
                           0, &ev, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_str_eq(why, "profile.layers[1]: lacks t_backward");
    cr_assert_not(EVENT_HAS(&ev.profile, profile, layers));
    event_fini(&ev);
}

Test(event, an_event_without_its_required_fields_is_still_that_event)
{
    char why[128];
    event ev;

    cr_assert_eq(read_line("{\"event\":\"done\",\"rank\":1,\"bytes_sent\":3}",
                           0, &ev, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_eq(ev.kind, EVENT_DONE);
    cr_assert_str_eq(why, "done: lacks iterations");
    cr_assert(EVENT_HAS(&ev.done, done, bytes_sent));
    cr_assert_eq(ev.done.bytes_sent, 3);
    event_fini(&ev);
}

Test(event, unknown_fields_and_events_pass_unless_strict)
{
    const char line[] = "{\"event\":\"plan\",\"version\":1,\"iteration\":2,"
                        "\"planner\":\"lags\"}";
    char why[128];
    event ev;

    cr_assert_eq(read_line(line, 0, &ev, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(ev.plan.version, 1);
    event_fini(&ev);
    cr_assert_eq(read_line(line, EVENT_READ_STRICT, &ev, why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_str_eq(why, "plan: unknown field \"planner\"");
    cr_assert_eq(ev.plan.iteration, 2, "the known fields are still read");
    event_fini(&ev);

    cr_assert_eq(read_line("{\"event\":\"checkpoint\",\"iter\":5}", 0, &ev, why,
                           sizeof(why)),
                 FLPS_OK);
    cr_assert_eq(ev.kind, EVENT_UNKNOWN);
    cr_assert_str_eq(event_kind_name(ev.kind), "");
    event_fini(&ev);
    cr_assert_eq(read_line("{\"event\":\"checkpoint\"}", EVENT_READ_STRICT, &ev,
                           why, sizeof(why)),
                 FLPS_EINVAL);
    cr_assert_str_eq(why, "unknown event \"checkpoint\"");
    event_fini(&ev);
}

Test(event, a_failed_allocation_is_enomem_and_leaves_nothing)
{
    char why[128];
    event ev;

    flps_alloc_fail_at(1);
    cr_assert_eq(read_line("{\"event\":\"partition\",\"clients\":1,\"skew\":"
                           "0,\"samples\":[4]}",
                           0, &ev, why, sizeof(why)),
                 FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    cr_assert_eq(ev.kind, EVENT_NONE);
    event_fini(&ev);
}

Test(event, names_its_kinds_as_lines_spell_them)
{
    cr_assert_str_eq(event_kind_name(EVENT_PROGRESS), "progress");
    cr_assert_str_eq(event_kind_name(EVENT_DONE), "done");
    cr_assert_str_eq(event_kind_name(EVENT_NONE), "");
}

/* The whole file, NUL-terminated (caller flps_frees it). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    flps_strbuf b = FLPS_STRBUF_INIT;
    char chunk[4096];
    size_t n;

    cr_assert_not_null(f, "cannot open %s", path);
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        flps_strbuf_append(&b, chunk, n);
    fclose(f);
    return flps_strbuf_take(&b);
}

Test(event, docs_events_md_has_the_schemas_tables)
{
    char *doc = slurp(DOC_PATH), *begin, *end, *want;
    flps_strbuf b;

    flps_strbuf_init(&b);
    cr_assert_eq(event_doc_table(&b), FLPS_OK);
    want = flps_strbuf_take(&b);
    begin = strstr(doc, DOC_BEGIN);
    cr_assert_not_null(begin, "docs/events.md lacks the line %s", DOC_BEGIN);
    begin += strlen(DOC_BEGIN);
    end = strstr(begin, DOC_END);
    cr_assert_not_null(end, "docs/events.md lacks the line %s", DOC_END);
    *end = '\0';
    if (strcmp(begin, want) != 0) {
        FILE *f = fopen("events-tables.md", "w");

        if (f != NULL) {
            fputs(want, f);
            fclose(f);
        }
    }
    cr_assert_str_eq(begin, want,
                     "docs/events.md's tables are not the schema's; the "
                     "schema's are in events-tables.md (working directory)");
    flps_free(want);
    flps_free(doc);
}
