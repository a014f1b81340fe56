/* services/yamlout: JSON values as YAML that reads back as they were. */
#include "services/yamlout.h"

#include <criterion/criterion.h>
#include <string.h>
#include <yaml.h>

#include "common/alloc.h"

static char *yaml_of(const char *json)
{
    json_error_t jerr;
    json_t *j = json_loads(json, JSON_DECODE_ANY, &jerr);
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_not_null(j, "fixture: %s", jerr.text);
    cr_assert_eq(yamlout_append(&b, j), FLPS_OK);
    json_decref(j);
    return flps_strbuf_take(&b);
}

#define expect_yaml(json, want)                                                \
    do {                                                                       \
        char *got_ = yaml_of(json);                                            \
        cr_assert_str_eq(got_, want);                                          \
        flps_free(got_);                                                       \
    } while (0)

Test(yamlout, writes_block_style_in_insertion_order)
{
    expect_yaml("{\"id\": \"j5\", \"state\": \"QUEUED\", \"workers\": 2,"
                " \"lr\": 0.05, \"tasks\": [{\"task\": \"server-0\"}],"
                " \"progress\": null, \"summary\": {}, \"list\": []}",
                "id: j5\n"
                "state: QUEUED\n"
                "workers: 2\n"
                "lr: 0.05\n"
                "tasks:\n"
                "- task: server-0\n"
                "progress: null\n"
                "summary: {}\n"
                "list: []\n");
}

Test(yamlout, quotes_strings_that_would_read_back_as_other_types)
{
    expect_yaml("{\"a\": \"true\", \"b\": \"1\", \"c\": \"null\", \"d\": \"\","
                " \"e\": \"0x1F\", \"f\": \"12:30\", \"g\": \"no\","
                " \"h\": \"1.5e3\", \"i\": \".inf\", \"j\": \"-2\"}",
                "a: 'true'\nb: '1'\nc: 'null'\nd: ''\ne: '0x1F'\n"
                "f: '12:30'\ng: 'no'\nh: '1.5e3'\ni: '.inf'\nj: '-2'\n");
    /* Keys too: a key "1" or "y" must stay a string. */
    expect_yaml("{\"1\": 2, \"y\": true}", "'1': 2\n'y': true\n");
}

Test(yamlout, leaves_ordinary_strings_plain_and_special_ones_to_libyaml)
{
    expect_yaml("{\"c\": \"gtopk:0.01\", \"u\": \"caf\\u00e9\","
                " \"t\": \"a: b\", \"h\": \"#x\", \"s\": \" lead\","
                " \"q\": \"it's\", \"m\": \"-m\"}",
                "c: gtopk:0.01\nu: caf\xc3\xa9\nt: 'a: b'\nh: '#x'\n"
                "s: ' lead'\nq: it's\nm: -m\n");
}

Test(yamlout, writes_reals_shortest_and_whole_reals_as_reals)
{
    expect_yaml("[0.8768, 2.0, 1e-07, 3]", "- 0.8768\n- 2.0\n- 1e-07\n- 3\n");
}

Test(yamlout, never_folds_a_long_line)
{
    char json[3000], *got;

    snprintf(json, sizeof(json), "{\"line\": \"%0*d and the end\"}", 2000, 0);
    got = yaml_of(json);
    cr_assert_eq(strchr(got, '\n'), got + strlen(got) - 1, "one line: %.80s",
                 got);
    flps_free(got);
}

/* What libyaml reads back from text, as a plain scalar's or a quoted
 * scalar's style: the test's reader of a document's scalars, in order. */
static size_t scalars(const char *text, char out[][64], int quoted[],
                      size_t max)
{
    yaml_parser_t p;
    yaml_event_t ev;
    size_t n = 0;
    int done = 0;

    cr_assert(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    while (!done) {
        cr_assert(yaml_parser_parse(&p, &ev), "parses: %s", text);
        if (ev.type == YAML_SCALAR_EVENT && n < max) {
            snprintf(out[n], 64, "%s", (const char *)ev.data.scalar.value);
            quoted[n++] = ev.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return n;
}

Test(yamlout, every_string_reads_back_as_the_same_string)
{
    static const char *const words[] = {
        "x",     "true", "False", "~",          "null",  "",     "0",    "007",
        "1_000", "1e3",  ".5",    "+1",         "-.inf", "a b",  "a: b", "- x",
        "[x]",   "{x}",  "'q'",   "\"q\"",      "#c",    "x #c", "%x",   "@x",
        "`x",    "|",    ">",     "&a",         "*a",    "!t",   "?",    "<<",
        "=",     "y",    "Off",   "2025-01-02",
    };
    char got[128][64];
    int quoted[128];
    json_t *o = json_object();
    flps_strbuf b = FLPS_STRBUF_INIT;
    size_t n, nw = sizeof(words) / sizeof(words[0]);

    for (size_t i = 0; i < nw; i++) {
        char key[16];

        snprintf(key, sizeof(key), "k%zu", i);
        json_object_set_new(o, key, json_string(words[i]));
    }
    cr_assert_eq(yamlout_append(&b, o), FLPS_OK);
    n = scalars(b.data, got, quoted, 128);
    cr_assert_eq(n, 2 * nw, "%s", b.data);
    for (size_t i = 0; i < nw; i++) {
        cr_assert_str_eq(got[2 * i + 1], words[i], "%s", b.data);
        cr_assert(quoted[2 * i + 1] || !yamlout_needs_quotes(words[i]),
                  "'%s' must be quoted:\n%s", words[i], b.data);
    }
    flps_strbuf_fini(&b);
    json_decref(o);
}

Test(yamlout, refuses_null_and_fails_cleanly_without_memory)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    json_t *j = json_pack("{s:s,s:[i,i]}", "a", "b", "c", 1, 2);

    cr_assert_eq(yamlout_append(&b, NULL), FLPS_EINVAL);
    for (unsigned long n = 1; n < 20; n++) {
        flps_alloc_fail_at(n);
        yamlout_append(&b, j); /* any result, no crash, no leak */
        flps_alloc_fail_at(0);
        flps_strbuf_fini(&b);
    }
    json_decref(j);
}
