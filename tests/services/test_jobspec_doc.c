/* Tests that the key table of docs/job-file.md is the parser's: it equals
 * jobspec_doc_table's output, and every key in it is accepted (with its
 * documented default) while a key not in it is refused. */
#include "services/jobspec.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/strbuf.h"

#define DOC_PATH FLPS_SOURCE_DIR "/docs/job-file.md"
#define TABLE_HEAD "| key | type | default | accepted |\n"
#define REGEN_FILE "job-file-keys.md"
#define BASE "name: t\nmodel: mlp\n"

static char *generated_table(void)
{
    flps_strbuf b;
    char *s;

    flps_strbuf_init(&b);
    cr_assert_eq(jobspec_doc_table(&b), FLPS_OK);
    s = flps_strbuf_take(&b);
    cr_assert_not_null(s);
    return s;
}

static char *read_doc(void)
{
    FILE *f = fopen(DOC_PATH, "rb");
    char *buf;
    long n;

    cr_assert_not_null(f, "cannot open %s", DOC_PATH);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    cr_assert_geq(n, 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The table in doc: from its header line through the last line that
 * starts with '|' (newline included); NULL when there is no such header.
 * Caller frees. */
static char *doc_table(const char *doc)
{
    const char *start = strstr(doc, TABLE_HEAD);
    const char *end;
    char *t;

    if (start == NULL)
        return NULL;
    end = start;
    while (*end == '|') {
        const char *nl = strchr(end, '\n');

        end = nl != NULL ? nl + 1 : end + strlen(end);
    }
    t = malloc((size_t)(end - start) + 1);
    cr_assert_not_null(t);
    memcpy(t, start, (size_t)(end - start));
    t[end - start] = '\0';
    return t;
}

/* Cell col (0-based) of a table row, without surrounding blanks and
 * backticks, into out. */
static void cell(const char *row, int col, char *out, size_t len)
{
    const char *s = row + 1;
    const char *e;
    size_t n;

    for (int i = 0; i < col; i++) {
        s = strstr(s, " | ");
        cr_assert_not_null(s, "row has no column %d: %s", col, row);
        s += 2;
    }
    while (*s == ' ' || *s == '`')
        s++;
    if (*s == '|') { /* an empty cell: an empty default (no image) */
        out[0] = '\0';
        return;
    }
    e = strstr(s, " |");
    cr_assert_not_null(e, "row ends early: %s", row);
    while (e > s && (e[-1] == ' ' || e[-1] == '`'))
        e--;
    n = (size_t)(e - s);
    cr_assert_lt(n, len, "cell too long: %s", row);
    memcpy(out, s, n);
    out[n] = '\0';
}

/* The rows of the generated table after the two header lines. */
static const char *first_row(const char *table)
{
    const char *r = strchr(table, '\n');

    cr_assert_not_null(r);
    r = strchr(r + 1, '\n');
    cr_assert_not_null(r);
    return r + 1;
}

static const char *next_row(const char *row)
{
    const char *nl = strchr(row, '\n');

    return nl != NULL && nl[1] == '|' ? nl + 1 : NULL;
}

Test(jobspec_doc, the_key_table_in_the_docs_is_the_generated_one)
{
    char *doc = read_doc();
    char *want = generated_table();
    char *have = doc_table(doc);

    cr_assert_not_null(have, "%s has no line \"%.*s\"", DOC_PATH,
                       (int)strlen(TABLE_HEAD) - 1, TABLE_HEAD);
    if (strcmp(have, want) != 0) {
        FILE *f = fopen(REGEN_FILE, "w");
        char cwd[512] = "";

        if (f != NULL) {
            fputs(want, f);
            fclose(f);
        }
        if (getcwd(cwd, sizeof(cwd)) == NULL)
            cwd[0] = '\0';
        cr_assert_fail("the key table in docs/job-file.md is not what the "
                       "parser accepts; regenerate it: replace the table "
                       "with %s/%s (jobspec_doc_table's output):\n%s",
                       cwd, REGEN_FILE, want);
    }
    free(have);
    free(want);
    free(doc);
}

Test(jobspec_doc, every_key_in_the_table_is_accepted_with_its_default)
{
    char *table = generated_table();
    jobspec base, with;
    char err[1024] = "";
    int rows = 0;

    cr_assert_eq(jobspec_parse(BASE, strlen(BASE), &base, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    for (const char *r = first_row(table); r != NULL; r = next_row(r)) {
        char key[64], def[128], text[256];

        cell(r, 0, key, sizeof(key));
        cell(r, 2, def, sizeof(def));
        rows++;
        if (strcmp(def, "required") == 0) {
            /* The base file gives it; leaving it out must be refused. */
            cr_assert(strcmp(key, "name") == 0 || strcmp(key, "model") == 0,
                      "unexpected required key %s", key);
            snprintf(text, sizeof(text), "%s",
                     strcmp(key, "name") == 0 ? "model: mlp\n" : "name: t\n");
            cr_assert_eq(
                jobspec_parse(text, strlen(text), &with, err, sizeof(err)),
                FLPS_ECONFIG, "%s is required", key);
            cr_assert_neq(strstr(err, key), NULL, "%s", err);
            continue;
        }
        /* A list's or mapping's default ([] or {}) is YAML flow text;
         * quoted it would be one string. */
        if (def[0] == '[' || def[0] == '{')
            snprintf(text, sizeof(text), BASE "%s: %s\n", key, def);
        else
            snprintf(text, sizeof(text), BASE "%s: '%s'\n", key, def);
        cr_assert_eq(jobspec_parse(text, strlen(text), &with, err, sizeof(err)),
                     FLPS_OK, "%s: %s", key, err);
        cr_assert(jobspec_is_given(&with, key), "%s is given", key);
        /* which keys the file gives, not values */
        memcpy(with.given, base.given, sizeof(with.given));
        cr_assert_eq(memcmp(&base, &with, sizeof(base)), 0,
                     "%s: the documented default %s is not the default", key,
                     def);
    }
    cr_assert_gt(rows, 0);
    free(table);
}

Test(jobspec_doc, a_key_not_in_the_table_is_refused_and_the_message_lists_it)
{
    static const char text[] = BASE "no_such_key: 1\n";
    char *table = generated_table();
    char err[2048] = "";
    char keys[1024] = "";
    size_t n = 0;
    jobspec s;
    const char *list;

    cr_assert_eq(jobspec_parse(text, strlen(text), &s, err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert_neq(strstr(err, "unknown key 'no_such_key'"), NULL, "%s", err);
    for (const char *r = first_row(table); r != NULL; r = next_row(r)) {
        char key[64];

        cell(r, 0, key, sizeof(key));
        n += (size_t)snprintf(keys + n, sizeof(keys) - n, "%s%s",
                              n == 0 ? "" : ", ", key);
        cr_assert_lt(n, sizeof(keys));
    }
    list = strstr(err, "accepted keys: ");
    cr_assert_not_null(list, "%s", err);
    cr_assert_str_eq(list + strlen("accepted keys: "), keys,
                     "the message lists exactly the table's keys");
    free(table);
}

Test(jobspec_doc, appends_to_the_buffer_and_reports_a_failed_allocation)
{
    flps_strbuf b;

    cr_assert_eq(jobspec_doc_table(NULL), FLPS_EINVAL);
    flps_strbuf_init(&b);
    cr_assert_eq(flps_strbuf_puts(&b, "before\n"), FLPS_OK);
    cr_assert_eq(jobspec_doc_table(&b), FLPS_OK);
    cr_assert_eq(
        strncmp(b.data, "before\n" TABLE_HEAD, strlen("before\n" TABLE_HEAD)),
        0, "%s", b.data);
    flps_strbuf_fini(&b);

    flps_strbuf_init(&b);
    flps_alloc_fail_at(1);
    cr_assert_eq(jobspec_doc_table(&b), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    flps_strbuf_fini(&b);
}

Test(jobspec_doc, every_variable_a_command_gets_is_documented)
{
    static const char *const names[] = {
#define X(name, what) #name,
        JOBSPEC_WORKER_ENV(X)
#undef X
    };
    char *doc = read_doc();
    char row[96];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(row, sizeof(row), "\n| `%s` | ", names[i]);
        cr_assert_not_null(strstr(doc, row),
                           "docs/job-file.md has no row for %s in its table "
                           "of the variables a command: gets",
                           names[i]);
    }
    free(doc);
}
