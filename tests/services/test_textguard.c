/* services/textguard: the byte scan that bounds size and nesting. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "services/textguard.h"

static size_t depth_of(const char *s, unsigned long *line)
{
    size_t d = 0;
    unsigned long l = 0;

    textguard_depth(s, strlen(s), &d, &l);
    if (line != NULL)
        *line = l;
    return d;
}

Test(textguard, measures_the_deepest_flow_nesting_and_its_line)
{
    unsigned long line;

    cr_assert_eq(depth_of("name: a\nmodel: mlp\n", &line), 0);
    cr_assert_eq(depth_of("{\"name\": \"a\"}", &line), 1);
    cr_assert_eq(line, 1);
    cr_assert_eq(depth_of("a: 1\nb: [1, {c: [2]}]\nd: [3]\n", &line), 3);
    cr_assert_eq(line, 2);
}

Test(textguard, brackets_in_double_quotes_and_comments_do_not_count)
{
    cr_assert_eq(depth_of("{\"n\": \"[[[[\\\"[[[\"}", NULL), 1);
    cr_assert_eq(depth_of("a: 1 # [[[[[[\n# {{{{\nb: [x]\n", NULL), 1);
    /* A '#' inside a word is not a comment: the brackets after it count. */
    cr_assert_eq(depth_of("a: x#[[\n", NULL), 2);
}

Test(textguard, closing_brackets_in_strings_do_not_hide_depth)
{
    /* Each "]" is inside a string, so the depth still grows by one per
     * "[". */
    cr_assert_eq(depth_of("[\"]\", [\"]\", [\"]\", [\"]\"]]]]", NULL), 4);
}

Test(textguard, refuses_deep_nesting_with_the_line_and_the_limit)
{
    char err[300];
    const char *deep = "name: a\nx: [[[[[[[[[[1]]]]]]]]]]\n";

    cr_assert_eq(textguard_check(deep, strlen(deep), 1000, 8, "the job file",
                                 err, sizeof(err)),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "line 2: the job file nests lists or mappings ('[', "
                          "'{') 10 deep; at most 8 levels are accepted (a job "
                          "file is one flat mapping of keys to values)");
    cr_assert_eq(textguard_check(deep, strlen(deep), 1000, 10, "the job file",
                                 err, sizeof(err)),
                 FLPS_OK);
}

Test(textguard, refuses_text_over_the_size_limit)
{
    char err[200];

    cr_assert_eq(
        textguard_check("abcdef", 6, 5, 8, "the body", err, sizeof(err)),
        FLPS_ECONFIG);
    cr_assert_str_eq(err, "the body is 6 bytes; at most 5 are accepted");
    cr_assert_eq(textguard_check(NULL, 1, 5, 8, NULL, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_eq(textguard_check(NULL, 0, 5, 8, NULL, err, sizeof(err)),
                 FLPS_OK);
}

Test(textguard, scans_a_mebibyte_of_brackets_in_well_under_a_second)
{
    size_t n = (size_t)1 << 20, d = 0;
    unsigned long line = 0;
    char *s = malloc(n);
    struct timespec t0, t1;

    cr_assert_not_null(s);
    memset(s, '[', n);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    textguard_depth(s, n, &d, &line);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_eq(d, n);
    cr_assert_lt((double)(t1.tv_sec - t0.tv_sec) +
                     (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
                 0.5);
    free(s);
}

/* textguard_text on len bytes of s; the message in err, the line in
 * *line. */
static flps_err text_of(const char *s, size_t len, char *err, size_t errlen,
                        unsigned long *line)
{
    return textguard_text(s, len, "the job file", err, errlen, line);
}

Test(textguard, utf8_text_passes_whatever_its_characters)
{
    static const char ok[] = "\xEF\xBB\xBFname: caf\xC3\xA9\n"
                             "# \xE2\x82\xAC, \xF0\x9F\x98\x80 and tabs\t\r\n";
    char err[256] = "";
    unsigned long line = 99;

    cr_assert_eq(text_of(ok, sizeof(ok) - 1, err, sizeof(err), &line), FLPS_OK,
                 "%s", err);
    cr_assert_eq(line, 0);
    cr_assert_eq(text_of("", 0, err, sizeof(err), NULL), FLPS_OK);
    cr_assert_eq(text_of(NULL, 0, err, sizeof(err), NULL), FLPS_OK);
    cr_assert_eq(text_of(NULL, 1, err, sizeof(err), NULL), FLPS_EINVAL);
}

Test(textguard, a_binary_file_is_named_as_binary)
{
    static const char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    static const char elf[] = "\x7f"
                              "ELF\x02\x01\x01\0\0\0";
    char err[256], noise[600];
    unsigned long line = 99;

    cr_assert_eq(text_of(png, sizeof(png) - 1, err, sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "the job file is binary, not YAML or JSON text "
                          "(byte 0 is 0x89)");
    cr_assert_eq(line, 0, "no line in a binary file");
    cr_assert_eq(text_of(elf, sizeof(elf) - 1, err, sizeof(err), NULL),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "the job file is binary, not YAML or JSON text "
                          "(byte 0 is 0x7F)");
    /* "---" then a NUL: libyaml read this as an empty file. */
    cr_assert_eq(text_of("---\n\0", 5, err, sizeof(err), NULL), FLPS_ECONFIG);
    cr_assert_str_eq(err, "the job file is binary, not YAML or JSON text "
                          "(byte 4 is 0x00)");
    /* No NUL, but mostly bytes that are not UTF-8 (compressed data). */
    for (size_t i = 0; i < sizeof(noise); i++)
        noise[i] = (char)(i % 3 ? 'a' : 0xFF);
    cr_assert_eq(text_of(noise, sizeof(noise), err, sizeof(err), NULL),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "the job file is binary, not YAML or JSON text "
                          "(byte 0 is 0xFF)");
}

Test(textguard, utf16_and_utf32_are_named_with_how_to_convert)
{
    char err[256];

    cr_assert_eq(text_of("\xFF\xFEn\0a\0", 6, err, sizeof(err), NULL),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "the job file is UTF-16 text (it starts with a "
                          "UTF-16 byte-order mark); it must be UTF-8: `iconv "
                          "-f UTF-16 -t UTF-8` converts it");
    cr_assert_eq(text_of("\xFE\xFF", 2, err, sizeof(err), NULL), FLPS_ECONFIG,
                 "a bare mark is not an empty file");
    cr_assert_eq(text_of("\xFF\xFE\0\0n\0\0\0", 8, err, sizeof(err), NULL),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "is UTF-32 text") != NULL, "%s", err);
}

Test(textguard, latin1_text_is_not_utf8_at_its_line_and_column)
{
    static const char latin1[] = "name: a\nmodel: mlp\n# caf\xE9\n";
    char err[256];
    unsigned long line = 0;

    cr_assert_eq(text_of(latin1, sizeof(latin1) - 1, err, sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "line 3, column 6: byte 24 (0xE9) is not UTF-8; the "
                          "job file must be UTF-8 text (was it saved as "
                          "Latin-1 or Windows-1252? `iconv -f LATIN1 -t "
                          "UTF-8` converts it)");
    cr_assert_eq(line, 3);
    /* Columns count characters: two-byte 'é' before the bad byte. */
    cr_assert_eq(text_of("\xC3\xA9\xC3\x28", 4, err, sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "line 1, column 2: byte 2 (0xC3) is not UTF-8") !=
                  NULL,
              "%s", err);
}

Test(textguard, overlong_forms_and_surrogates_are_not_utf8)
{
    static const char *const bad[] = {
        "a: \xC0\xAF\n",         /* overlong '/' */
        "a: \xE0\x80\xAF\n",     /* overlong, three bytes */
        "a: \xED\xA0\x80\n",     /* a UTF-16 surrogate */
        "a: \xF4\x90\x80\x80\n", /* past U+10FFFF */
        "a: \xE2\x82\n",         /* cut short */
    };
    char err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(text_of(bad[i], strlen(bad[i]), err, sizeof(err), NULL),
                     FLPS_ECONFIG, "case %zu", i);
        cr_assert(strstr(err, "line 1, column 4: byte 3 (0x") != NULL,
                  "%zu: %s", i, err);
    }
}

Test(textguard, a_control_character_in_text_is_named_where_it_is)
{
    char err[256];
    unsigned long line = 0;

    cr_assert_eq(text_of("name: a\nx: \x1b[1m\n", 15, err, sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "line 2, column 4: byte 11 (0x1B) is a control "
                          "character, which the job file cannot hold: it "
                          "must be YAML or JSON text");
    cr_assert_eq(line, 2);
}

Test(textguard, check_at_gives_the_line_of_what_it_refuses)
{
    char err[256];
    unsigned long line = 99;

    cr_assert_eq(textguard_check_at("a: 1\nb: [[[1]]]\n", 16, 1000, 2,
                                    "the job file", err, sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert_eq(line, 2, "the deepest bracket's line: %s", err);
    cr_assert_eq(textguard_check_at("a: 1\nb: \xE9\n", 9, 1000, 2,
                                    "the job file", err, sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert_eq(line, 2, "the bad byte's line: %s", err);
    cr_assert_eq(textguard_check_at("\0[[[", 4, 1000, 2, "the job file", err,
                                    sizeof(err), &line),
                 FLPS_ECONFIG);
    cr_assert(strstr(err, "is binary") != NULL, "binary before depth: %s", err);
    cr_assert_eq(line, 0);
    cr_assert_eq(textguard_check_at("a: 1\n", 5, 1000, 2, "the job file", err,
                                    sizeof(err), &line),
                 FLPS_OK);
    cr_assert_eq(line, 0);
}
