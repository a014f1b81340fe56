/* Tests for common/quote.c: untrusted bytes shown as printable ASCII, cut
 * with an ellipsis, and whole messages kept as valid UTF-8. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/quote.h"

Test(quote, printable_ascii_is_kept_and_everything_else_escaped)
{
    const char in[] = "ab\\c\n\r\t\x1b[2J\x7f\xff\xc3\xa9";
    char out[128];
    size_t n = flps_quote(out, sizeof(out), in, sizeof(in) - 1);

    cr_assert_str_eq(out, "ab\\\\c\\n\\r\\t\\x1b[2J\\x7f\\xff\\xc3\\xa9");
    cr_assert_eq(n, strlen(out));
}

Test(quote, a_nul_byte_inside_the_input_is_escaped_not_an_end)
{
    char out[32];

    flps_quote(out, sizeof(out), "a\0b", 3);
    cr_assert_str_eq(out, "a\\x00b");
}

Test(quote, what_does_not_fit_ends_in_an_ellipsis_never_half_an_escape)
{
    static const struct {
        const char *in;
        size_t cap;
        const char *out;
    } cases[] = {
        /* "abc" + "\xff" is 7 of 9: no room for a second escape and the
         * dots, so no escape at all. */
        {"abc\xff\xff\xff", 10, "abc..."},
        {"abcdefghijkl", 10, "abcdef..."},
        {"abcdefghi", 10, "abcdefghi"}, /* what fits whole is not cut */
        {"abc", 1, ""},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[10];
        flps_quote(out, cases[i].cap, cases[i].in, strlen(cases[i].in));
        cr_assert_str_eq(out, cases[i].out, "case %zu", i);
    }
}

Test(quote, a_string_longer_than_its_bound_is_cut_with_an_ellipsis)
{
    char out[64];

    flps_quote_str(out, sizeof(out), "job\nname", 4);
    cr_assert_str_eq(out, "job\\n...");
    flps_quote_str(out, sizeof(out), "job", 4);
    cr_assert_str_eq(out, "job");
    flps_quote_str(out, sizeof(out), NULL, 4);
    cr_assert_str_eq(out, "");
}

Test(quote, clean_text_keeps_valid_utf8_and_escapes_the_rest)
{
    char buf[128];
    size_t n;

    /* é, a 3-byte and a 4-byte character stay; a lone continuation byte,
     * an overlong '/', a surrogate and a cut sequence are escaped. */
    n = flps_text_clean(buf, 0, sizeof(buf), 1,
                        "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \x80 "
                        "\xc0\xaf \xed\xa0\x80 \\ \n\xe2\x82");
    buf[n] = '\0';
    cr_assert_str_eq(buf, "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\x80 "
                          "\\xc0\\xaf \\xed\\xa0\\x80 \\ \\n\\xe2\\x82");
}

Test(quote, clean_text_stops_before_the_reserve_and_never_splits_a_sequence)
{
    char buf[8];
    size_t n;

    memcpy(buf, "ab", 2);
    n = flps_text_clean(buf, 2, sizeof(buf), 2, "cd\xe2\x82\xac");
    cr_assert_eq(n, 4, "the 3-byte character does not fit in the 2 left");
    n = flps_text_clean(buf, 2, sizeof(buf), 2, "\n\n");
    cr_assert_eq(n, 6);
    cr_assert_eq(memcmp(buf, "ab\\n\\n", 6), 0);
}
