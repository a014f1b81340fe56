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
