/* Tests for the core of common/: the string buffer (strbuf.c), the error
 * table and error-buffer formatter (err.c), the bounded number parser
 * (numparse.c) and the logger hook (log.c). */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/err.h"
#include "common/log.h"
#include "common/numparse.h"
#include "common/strbuf.h"
#include "flps.h"

/* ---- flps_strbuf ---- */

static void assert_empty(const flps_strbuf *b)
{
    cr_assert_null(b->data);
    cr_assert_eq(b->len, 0);
    cr_assert_eq(b->cap, 0);
    cr_assert_eq(b->failed, 0);
}

Test(strbuf, grows_across_many_appends_and_keeps_every_byte)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    for (int i = 0; i < 10000; i++)
        cr_assert_eq(flps_strbuf_append(&b, "abc", 3), FLPS_OK);
    cr_assert_eq(b.len, 30000);
    cr_assert_geq(b.cap, b.len + 1);
    for (size_t i = 0; i < b.len; i++)
        cr_assert_eq(b.data[i], "abc"[i % 3], "byte %zu", i);
    cr_assert_eq(b.data[b.len], '\0');
    cr_assert_eq(flps_strbuf_error(&b), FLPS_OK);
    flps_strbuf_fini(&b);
}

Test(strbuf, printf_longer_than_the_room_grows_to_fit)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    char big[1000];

    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert_eq(flps_strbuf_puts(&b, "x"), FLPS_OK);
    cr_assert_lt(b.cap, sizeof(big), "the first room is smaller than big");
    cr_assert_eq(flps_strbuf_printf(&b, "[%s]%d", big, 42), FLPS_OK);
    cr_assert_eq(b.len, 1 + 1 + 999 + 1 + 2);
    cr_assert_eq(strncmp(b.data, "x[yyy", 5), 0);
    cr_assert_str_eq(b.data + b.len - 3, "]42");
    flps_strbuf_fini(&b);
}

Test(strbuf, printf_that_exactly_fills_or_just_overflows_the_room)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    size_t room;
    char s[256];

    cr_assert_eq(flps_strbuf_puts(&b, "a"), FLPS_OK);
    room = b.cap - b.len - 1; /* bytes that fit beside the NUL */
    cr_assert_lt(room + 2, sizeof(s));
    memset(s, 'f', room);
    s[room] = '\0';
    cr_assert_eq(flps_strbuf_printf(&b, "%s", s), FLPS_OK);
    cr_assert_eq(b.len, 1 + room);
    cr_assert_eq(b.data[b.len], '\0');
    cr_assert_eq(b.data[b.len - 1], 'f');

    flps_strbuf_clear(&b);
    memset(s, 'g', room + 1);
    s[room + 1] = '\0';
    cr_assert_eq(flps_strbuf_printf(&b, "a%s", s), FLPS_OK);
    cr_assert_eq(b.len, room + 2);
    cr_assert_eq(b.data[0], 'a');
    cr_assert_eq(b.data[b.len - 1], 'g');
    cr_assert_eq(b.data[b.len], '\0');
    flps_strbuf_fini(&b);
}

Test(strbuf, append_keeps_embedded_nuls_and_counts_them)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(flps_strbuf_append(&b, "a\0b", 3), FLPS_OK);
    cr_assert_eq(flps_strbuf_append(&b, "\0", 1), FLPS_OK);
    cr_assert_eq(flps_strbuf_append(&b, NULL, 0), FLPS_OK, "empty is fine");
    cr_assert_eq(b.len, 4);
    cr_assert_eq(memcmp(b.data, "a\0b\0", 5), 0, "and a NUL after them");
    flps_strbuf_fini(&b);
}

Test(strbuf, a_failed_allocation_sticks_and_take_returns_null)
{
    flps_strbuf b;

    flps_strbuf_init(&b);
    flps_alloc_fail_at(1);
    cr_assert_eq(flps_strbuf_append(&b, "abc", 3), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    cr_assert_eq(flps_strbuf_error(&b), FLPS_ENOMEM);
    cr_assert_eq(flps_strbuf_append(&b, "x", 1), FLPS_ENOMEM,
                 "memory is back, but the buffer stays failed");
    cr_assert_eq(flps_strbuf_puts(&b, "x"), FLPS_ENOMEM);
    cr_assert_eq(flps_strbuf_printf(&b, "%d", 1), FLPS_ENOMEM);
    cr_assert_eq(flps_strbuf_reserve(&b, 1), FLPS_ENOMEM);
    cr_assert_eq(b.len, 0, "a failed append changes nothing");
    cr_assert_null(flps_strbuf_take(&b));
    assert_empty(&b);
}

Test(strbuf, a_failure_after_some_text_keeps_the_text_until_take)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    char big[200];

    memset(big, 'z', sizeof(big));
    cr_assert_eq(flps_strbuf_puts(&b, "kept"), FLPS_OK);
    flps_alloc_fail_at(1);
    cr_assert_eq(flps_strbuf_append(&b, big, sizeof(big)), FLPS_ENOMEM);
    cr_assert_eq(flps_strbuf_printf(&b, "%.*s", 150, big), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    cr_assert_str_eq(b.data, "kept", "still NUL-terminated after the text");
    cr_assert_eq(b.len, 4);
    cr_assert_null(flps_strbuf_take(&b), "take frees what a failure left");
    assert_empty(&b);
}

Test(strbuf, a_size_overflow_is_an_allocation_failure)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(flps_strbuf_puts(&b, "a"), FLPS_OK);
    cr_assert_eq(flps_strbuf_reserve(&b, SIZE_MAX), FLPS_ENOMEM);
    cr_assert_eq(flps_strbuf_error(&b), FLPS_ENOMEM);
    flps_strbuf_fini(&b);
    assert_empty(&b);
}

Test(strbuf, clear_empties_keeps_memory_and_forgets_a_failure)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    char *mem;

    cr_assert_eq(flps_strbuf_puts(&b, "hello"), FLPS_OK);
    mem = b.data;
    flps_strbuf_clear(&b);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(b.data, mem);
    cr_assert_str_eq(b.data, "");
    cr_assert_eq(flps_strbuf_reserve(&b, SIZE_MAX), FLPS_ENOMEM);
    flps_strbuf_clear(&b);
    cr_assert_eq(flps_strbuf_error(&b), FLPS_OK);
    cr_assert_eq(flps_strbuf_puts(&b, "again"), FLPS_OK);
    cr_assert_str_eq(b.data, "again");
    flps_strbuf_fini(&b);
}

Test(strbuf, take_hands_over_the_text_and_leaves_the_buffer_empty)
{
    flps_strbuf b = FLPS_STRBUF_INIT;
    char *s;

    s = flps_strbuf_take(&b);
    cr_assert_str_eq(s, "", "nothing appended gives an empty string");
    flps_free(s);
    assert_empty(&b);

    cr_assert_eq(flps_strbuf_printf(&b, "%s-%d", "job", 7), FLPS_OK);
    s = flps_strbuf_take(&b);
    cr_assert_str_eq(s, "job-7");
    assert_empty(&b);
    flps_free(s);

    cr_assert_eq(flps_strbuf_puts(&b, "reused"), FLPS_OK);
    cr_assert_str_eq(b.data, "reused");
    flps_strbuf_fini(&b);
    assert_empty(&b);
    flps_strbuf_fini(&b); /* twice is harmless */
    assert_empty(&b);
}

/* ---- flps_errbuf_set ---- */

Test(errbuf, formats_the_message_and_returns_the_code)
{
    char buf[64];

    cr_assert_eq(flps_errbuf_set(buf, sizeof(buf), FLPS_EIO, "%s: %d", "f", 3),
                 FLPS_EIO);
    cr_assert_str_eq(buf, "f: 3");
}

Test(errbuf, truncates_a_long_message_and_always_terminates)
{
    char buf[8];

    memset(buf, 'X', sizeof(buf));
    cr_assert_eq(
        flps_errbuf_set(buf, sizeof(buf), FLPS_EINVAL, "%s", "hello world"),
        FLPS_EINVAL);
    cr_assert_str_eq(buf, "hello w");
}

Test(errbuf, a_null_or_empty_buffer_writes_nothing)
{
    char buf[4] = "abc";

    cr_assert_eq(flps_errbuf_set(NULL, 100, FLPS_EPROTO, "x %d", 1),
                 FLPS_EPROTO);
    cr_assert_eq(flps_errbuf_set(buf, 0, FLPS_ESYS, "x %d", 1), FLPS_ESYS);
    cr_assert_str_eq(buf, "abc");
}

/* ---- flps_parse_* ---- */

Test(numparse, u64_bounds_are_inclusive)
{
    uint64_t v = 0;

    cr_assert_eq(flps_parse_u64("--port", "1", 1, 65535, &v, NULL, 0), FLPS_OK);
    cr_assert_eq(v, 1);
    cr_assert_eq(flps_parse_u64("--port", "65535", 1, 65535, &v, NULL, 0),
                 FLPS_OK);
    cr_assert_eq(v, 65535);
    cr_assert_eq(flps_parse_u64(NULL, "18446744073709551615", 0, UINT64_MAX, &v,
                                NULL, 0),
                 FLPS_OK);
    cr_assert_eq(v, UINT64_MAX);
    cr_assert_eq(flps_parse_u64(NULL, "007", 0, 10, &v, NULL, 0), FLPS_OK);
    cr_assert_eq(v, 7, "leading zeros are decimal, not octal");
}

Test(numparse, out_of_range_says_what_was_wanted)
{
    char err[128];
    uint64_t v = 99;

    cr_assert_eq(
        flps_parse_u64("--port", "70000", 1, 65535, &v, err, sizeof(err)),
        FLPS_EINVAL);
    cr_assert_str_eq(
        err, "--port: '70000' is out of range: expected an integer from 1 "
             "to 65535");
    cr_assert_eq(v, 99, "out untouched on error");
    cr_assert_eq(flps_parse_u64("--port", "0", 1, 65535, &v, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_eq(v, 99);
}

Test(numparse, a_non_number_says_so_with_and_without_a_name)
{
    char err[128];
    int v = 5;

    cr_assert_eq(flps_parse_int("--rank", "x", 0, 9, &v, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_str_eq(
        err, "--rank: 'x' is not an integer (expected an integer from 0 to 9)");
    cr_assert_eq(flps_parse_int(NULL, "4.0", 0, 9, &v, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_str_eq(err,
                     "'4.0' is not an integer (expected an integer from 0 to "
                     "9)");
    cr_assert_eq(flps_parse_int(NULL, NULL, 0, 9, &v, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_eq(v, 5);
}

Test(numparse, refuses_signs_hex_blanks_empty_and_overflow)
{
    static const char *const bad_u64[] = {"+1",
                                          "-1",
                                          "0x10",
                                          "0X10",
                                          " 5",
                                          "5 ",
                                          "\t5",
                                          "",
                                          "5x",
                                          "1e3",
                                          ".5",
                                          "18446744073709551616",
                                          "99999999999999999999999"};
    static const char *const bad_i64[] = {"0x10",
                                          " -5",
                                          "-5 ",
                                          "",
                                          "-",
                                          "--5",
                                          "9223372036854775808",
                                          "-9223372036854775809",
                                          "1.0"};
    uint64_t u = 42;
    int64_t i = 42;

    for (size_t k = 0; k < sizeof(bad_u64) / sizeof(bad_u64[0]); k++)
        cr_assert_eq(
            flps_parse_u64("n", bad_u64[k], 0, UINT64_MAX, &u, NULL, 0),
            FLPS_EINVAL, "'%s'", bad_u64[k]);
    for (size_t k = 0; k < sizeof(bad_i64) / sizeof(bad_i64[0]); k++)
        cr_assert_eq(
            flps_parse_i64("n", bad_i64[k], INT64_MIN, INT64_MAX, &i, NULL, 0),
            FLPS_EINVAL, "'%s'", bad_i64[k]);
    cr_assert_eq(u, 42);
    cr_assert_eq(i, 42);
}

Test(numparse, overflow_is_out_of_range_not_garbage)
{
    char err[160];
    uint64_t u;

    cr_assert_eq(flps_parse_u64("seed", "18446744073709551616", 0, UINT64_MAX,
                                &u, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_not_null(strstr(err, "is out of range"), "%s", err);
}

Test(numparse, signed_values_and_their_extremes)
{
    int64_t i = 0;
    int v = 0;

    cr_assert_eq(flps_parse_i64(NULL, "-5", -5, 5, &i, NULL, 0), FLPS_OK);
    cr_assert_eq(i, -5);
    cr_assert_eq(flps_parse_i64(NULL, "-6", -5, 5, &i, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(flps_parse_i64(NULL, "-9223372036854775808", INT64_MIN,
                                INT64_MAX, &i, NULL, 0),
                 FLPS_OK);
    cr_assert_eq(i, INT64_MIN);
    cr_assert_eq(
        flps_parse_int(NULL, "2147483647", INT_MIN, INT_MAX, &v, NULL, 0),
        FLPS_OK);
    cr_assert_eq(v, INT_MAX);
    cr_assert_eq(
        flps_parse_int(NULL, "2147483648", INT_MIN, INT_MAX, &v, NULL, 0),
        FLPS_EINVAL, "beyond int is out of range, never wrapped");
    cr_assert_eq(v, INT_MAX);
}

Test(numparse, doubles_accept_decimal_and_exponent_notation)
{
    double d = 0;

    cr_assert_eq(flps_parse_double(NULL, "5e-2", 0, 1, &d, NULL, 0), FLPS_OK);
    cr_assert_float_eq(d, 0.05, 1e-15);
    cr_assert_eq(flps_parse_double(NULL, ".5", 0, 1, &d, NULL, 0), FLPS_OK);
    cr_assert_eq(d, 0.5);
    cr_assert_eq(flps_parse_double(NULL, "-0.25", -1, 1, &d, NULL, 0), FLPS_OK);
    cr_assert_eq(d, -0.25);
    cr_assert_eq(flps_parse_double(NULL, "1", 0, 1, &d, NULL, 0), FLPS_OK,
                 "bounds are inclusive");
    cr_assert_eq(flps_parse_double(NULL, "0", 0, 1, &d, NULL, 0), FLPS_OK);
    cr_assert_eq(d, 0);
}

Test(numparse, doubles_refuse_nan_inf_hex_overflow_and_garbage)
{
    static const char *const bad[] = {
        "nan",    "NaN",    "-nan", "inf", "-inf", "infinity", "1e400",
        "-1e400", "0x1p-3", "0x10", "",    " 1",   "1 ",       "1x",
        ".",      "-",      "e5",   "1e",  "--1"};
    double d = 7;

    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        cr_assert_eq(
            flps_parse_double("lr", bad[k], -DBL_MAX, DBL_MAX, &d, NULL, 0),
            FLPS_EINVAL, "'%s'", bad[k]);
    cr_assert_eq(d, 7);
}

Test(numparse, double_messages_name_the_value_and_the_range)
{
    char err[128];
    double d;

    cr_assert_eq(flps_parse_double("lr", "2", 0, 1, &d, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_str_eq(err, "lr: '2' is out of range: expected a number from 0 "
                          "to 1");
    cr_assert_eq(flps_parse_double("lr", "abc", 0, 1, &d, err, sizeof(err)),
                 FLPS_EINVAL);
    cr_assert_str_eq(err, "lr: 'abc' is not a number (expected a number from "
                          "0 to 1)");
}

/* ---- error codes and version ---- */

Test(err, every_code_has_its_message_name_and_pinned_number)
{
    int n = 0;

#define CHECK_CODE(code, num, msg)                                             \
    cr_assert_eq((int)code, num);                                              \
    cr_assert_str_eq(flps_strerror(code), msg);                                \
    cr_assert_str_eq(flps_errname(code), #code);                               \
    n++;
    FLPS_ERR_MAP(CHECK_CODE)
#undef CHECK_CODE
    cr_assert_eq(n, FLPS_ERR_COUNT_);
    cr_assert_eq(n, 19);
}

Test(err, the_numbers_stay_where_bindings_expect_them)
{
    cr_assert_eq(FLPS_OK, 0);
    cr_assert_eq(FLPS_ENOMEM, 1);
    cr_assert_eq(FLPS_EINVAL, 2);
    cr_assert_eq(FLPS_EPROTO, 3);
    cr_assert_eq(FLPS_ETIMEDOUT, 4);
    cr_assert_eq(FLPS_ESYS, 5);
    cr_assert_eq(FLPS_ERANGE, 6);
    cr_assert_eq(FLPS_ENONFINITE, 7);
    cr_assert_eq(FLPS_ELATE, 8);
    cr_assert_eq(FLPS_EDUP, 9);
    cr_assert_eq(FLPS_EFUTURE, 10);
    cr_assert_eq(FLPS_EJOB, 11);
    cr_assert_eq(FLPS_ELAYOUT, 12);
    cr_assert_eq(FLPS_ESTATE, 13);
    cr_assert_eq(FLPS_EIO, 14);
    cr_assert_eq(FLPS_ECONFIG, 15);
    cr_assert_eq(FLPS_EREMOTE, 16);
    cr_assert_eq(FLPS_ECLOSED, 17);
    cr_assert_eq(FLPS_EAUTH, 18);
}

Test(err, an_unknown_number_still_gets_a_string)
{
    cr_assert_str_eq(flps_strerror((flps_err)999), "unknown error");
    cr_assert_str_eq(flps_errname((flps_err)999), "FLPS_E?");
    cr_assert_str_eq(flps_strerror((flps_err)-1), "unknown error");
}

Test(version, the_library_reports_the_header_version)
{
    char want[32];

    snprintf(want, sizeof(want), "%d.%d.%d", FLPS_VERSION_MAJOR,
             FLPS_VERSION_MINOR, FLPS_VERSION_PATCH);
    cr_assert_str_eq(flps_version(), want);
}

/* ---- flps_set_logger ---- */

typedef struct seen {
    int calls;
    flps_log_level level;
    char line[256];
} seen;

static void record(void *arg, flps_log_level level, const char *line)
{
    seen *s = arg;

    s->calls++;
    s->level = level;
    snprintf(s->line, sizeof(s->line), "%s", line);
}

static void ignore(void *arg, flps_log_level level, const char *line)
{
    (void)arg;
    (void)level;
    (void)line;
}

/* Run flps_log(WARN, text) with fd 2 pointed at a file; return what was
 * written there (caller frees). */
static char *stderr_of_warn(const char *text)
{
    char path[] = "/tmp/flps_test_core_XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    char *got = calloc(1, 4096);
    ssize_t n;

    cr_assert_geq(fd, 0);
    cr_assert_geq(saved, 0);
    cr_assert_not_null(got);
    unlink(path);
    cr_assert_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    flps_log(FLPS_LOG_WARN, "%s", text);
    cr_assert_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    n = pread(fd, got, 4095, 0);
    cr_assert_geq(n, 0);
    close(fd);
    return got;
}

Test(log, a_logger_gets_each_line_with_its_level_and_no_timestamp)
{
    seen s = {0};

    unsetenv("FLPS_LOG"); /* read at the first line: keep the default */
    flps_set_logger(record, &s);
    flps_log(FLPS_LOG_DEBUG, "below the default level");
    cr_assert_eq(s.calls, 0, "debug lines are dropped by default");
    flps_log(FLPS_LOG_WARN, "shard %d is %s", 3, "unreachable");
    cr_assert_eq(s.calls, 1);
    cr_assert_eq(s.level, FLPS_LOG_WARN);
    cr_assert_str_eq(s.line, "shard 3 is unreachable");
    log_error("second");
    cr_assert_eq(s.calls, 2);
    cr_assert_eq(s.level, FLPS_LOG_ERROR);
    cr_assert_str_eq(s.line, "second");
    flps_set_logger(NULL, NULL);
}

Test(log, null_restores_stderr)
{
    seen s = {0};
    char *out;

    unsetenv("FLPS_LOG");
    flps_set_logger(record, &s);
    flps_set_logger(NULL, NULL);
    out = stderr_of_warn("back on stderr");
    cr_assert_eq(s.calls, 0, "the old logger is not called any more");
    cr_assert_not_null(strstr(out, "WARN"), "%s", out);
    cr_assert_not_null(strstr(out, "back on stderr\n"), "%s", out);
    free(out);
}

Test(log, a_logger_that_does_nothing_silences_the_library)
{
    char *out;

    unsetenv("FLPS_LOG");
    flps_set_logger(ignore, NULL);
    out = stderr_of_warn("should not appear");
    cr_assert_str_eq(out, "");
    free(out);
    flps_set_logger(NULL, NULL);
}

Test(log, a_very_long_line_is_cut_not_overrun)
{
    seen s = {0};
    char big[3000];

    unsetenv("FLPS_LOG");
    memset(big, 'L', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    flps_set_logger(record, &s);
    flps_log(FLPS_LOG_ERROR, "%s", big);
    flps_set_logger(NULL, NULL);
    cr_assert_eq(s.calls, 1);
    cr_assert_eq(strspn(s.line, "L"), strlen(s.line), "only the text");
    cr_assert_gt(strlen(s.line), 200);
}

Test(log, a_very_long_line_on_stderr_still_ends_with_a_newline)
{
    char big[3000], *out;
    size_t n;

    unsetenv("FLPS_LOG");
    memset(big, 'L', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    out = stderr_of_warn(big);
    n = strlen(out);
    cr_assert_gt(n, 500);
    cr_assert_lt(n, sizeof(big), "cut to the line limit");
    cr_assert_eq(out[n - 1], '\n');
    cr_assert_eq(strchr(out, '\n'), out + n - 1, "one line");
    free(out);
}

Test(log, control_characters_in_a_message_are_escaped)
{
    seen s = {0};
    char *out;

    unsetenv("FLPS_LOG");
    flps_set_logger(record, &s);
    flps_log(FLPS_LOG_WARN, "job %s refused", "j1\nERROR forged\r\t\x1b[31m");
    flps_set_logger(NULL, NULL);
    cr_assert_str_eq(s.line, "job j1\\nERROR forged\\r\\t\\x1b[31m refused");
    out = stderr_of_warn("a\nb");
    cr_assert_not_null(strstr(out, "a\\nb\n"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "one line: %s", out);
    free(out);
}
