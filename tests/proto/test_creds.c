/* The credentials file: what is accepted, what is refused and why, and
 * that no refusal repeats a value. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/creds.h"

#define SECRET                                                                 \
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static flps_err parse(const char *text, flps_creds *c, char *why, size_t len)
{
    return creds_parse(text, strlen(text), c, why, len);
}

Test(creds, a_secret_with_comments_and_blank_lines_is_read)
{
    flps_creds c;
    char why[256] = "";

    cr_assert_eq(
        parse("# job j1\n\n  secret = " SECRET "  \r\n", &c, why, sizeof(why)),
        FLPS_OK, "%s", why);
    cr_assert_str_eq(c.secret, SECRET);
    cr_assert_eq(c.has_curve, 0);
    /* Upper-case hex reads as lower case: the same secret. */
    cr_assert_eq(
        parse("secret=0123456789ABCDEF0123456789ABCDEF", &c, why, sizeof(why)),
        FLPS_OK, "%s", why);
    cr_assert_str_eq(c.secret, "0123456789abcdef0123456789abcdef");
}

Test(creds, bad_lines_are_refused_without_their_values)
{
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "no secret= line"},
        {"# nothing\n", "no secret= line"},
        {"secret\n", "line 1 is not key=value"},
        {"secret=" SECRET "\nsecret=" SECRET "\n",
         "line 2: secret given twice"},
        {"secrte=" SECRET "\n", "unknown key 'secrte'"},
        {"secret=0123\n", "32 to 128 hex digits"},
        {"secret=" SECRET SECRET SECRET "\n", "32 to 128 hex digits"},
        {"secret=0123456789abcdef0123456789abcdefX\n", "32 to 128 hex digits"},
        {"secret=zz23456789abcdef0123456789abcdef\n", "not hexadecimal"},
        {"secret=" SECRET "\ncurve_server_public=abc\n", "40 Z85 characters"},
        {"secret=" SECRET
         "\ncurve_server_public=0123456789012345678901234567890123456789\n",
         "all four"},
    };
    char why[256];
    flps_creds c;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        memset(&c, 0x5a, sizeof(c));
        cr_assert_eq(parse(bad[i].text, &c, why, sizeof(why)), FLPS_ECONFIG,
                     "accepted: %s", bad[i].text);
        cr_assert_neq(strstr(why, bad[i].why), NULL, "case %zu: %s", i, why);
        cr_assert_null(strstr(why, "0123456789abcdef"), "a value: %s", why);
        cr_assert_eq(((unsigned char *)&c)[0], 0x5a, "out was written");
    }
}

Test(creds, generated_credentials_write_0600_and_read_back)
{
    char dir[] = "/tmp/flps-creds-XXXXXX", path[128], why[256];
    flps_creds a, b;
    struct stat st;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/c", dir);
    cr_assert_eq(creds_generate(creds_have_curve(), &a, why, sizeof(why)),
                 FLPS_OK, "%s", why);
    cr_assert_eq(strlen(a.secret), 64);
    cr_assert_eq(creds_write(path, &a, 0, why, sizeof(why)), FLPS_OK, "%s",
                 why);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    /* O_EXCL: an existing file is not overwritten unless asked. */
    cr_assert_eq(creds_write(path, &a, 0, why, sizeof(why)), FLPS_EIO);
    cr_assert_eq(creds_load(path, &b, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0);
    cr_assert_eq(creds_generate(0, &b, why, sizeof(why)), FLPS_OK);
    cr_assert_str_neq(a.secret, b.secret);
    cr_assert_eq(creds_write(path, &b, 1, why, sizeof(why)), FLPS_OK, "%s",
                 why);
    cr_assert_eq(creds_load(path, &a, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_str_eq(a.secret, b.secret);
    cr_assert_eq(a.has_curve, 0);
    unlink(path);
    rmdir(dir);
}

Test(creds, missing_readable_and_oversized_files_are_refused)
{
    char dir[] = "/tmp/flps-creds-XXXXXX", path[128], why[256];
    flps_creds c;
    FILE *f;

    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/c", dir);
    cr_assert_eq(creds_load(path, &c, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_neq(strstr(why, "cannot open credentials file"), NULL, "%s", why);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "secret=%s\n", SECRET);
    fclose(f);
    cr_assert_eq(chmod(path, 0640), 0);
    cr_assert_eq(creds_load(path, &c, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_neq(strstr(why, "mode 0640"), NULL, "%s", why);
    cr_assert_neq(strstr(why, "chmod 600"), NULL, "%s", why);
    cr_assert_null(strstr(why, SECRET));
    cr_assert_eq(chmod(path, 0604), 0);
    cr_assert_eq(creds_load(path, &c, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_eq(chmod(path, 0600), 0);
    cr_assert_eq(creds_load(path, &c, why, sizeof(why)), FLPS_OK, "%s", why);
    cr_assert_str_eq(c.secret, SECRET);
    /* A file larger than a credentials file can be. */
    f = fopen(path, "a");
    cr_assert_not_null(f);
    for (int i = 0; i < CREDS_FILE_MAX; i++)
        fputc('#', f);
    fclose(f);
    cr_assert_eq(creds_load(path, &c, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_neq(strstr(why, "not a credentials file"), NULL, "%s", why);
    /* A directory is not a file. */
    cr_assert_eq(creds_load(dir, &c, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_neq(strstr(why, "not a regular file"), NULL, "%s", why);
    unlink(path);
    rmdir(dir);
}

Test(creds, the_environment_names_the_file_or_nothing)
{
    flps_creds c;
    char why[256];
    int found = 7;

    unsetenv(CREDS_ENV);
    cr_assert_eq(creds_load_env(&c, &found, why, sizeof(why)), FLPS_OK);
    cr_assert_eq(found, 0);
    cr_assert_str_eq(c.secret, "");
    setenv(CREDS_ENV, "/nonexistent/flps-creds", 1);
    cr_assert_eq(creds_load_env(&c, &found, why, sizeof(why)), FLPS_ECONFIG);
    cr_assert_eq(found, 1);
    unsetenv(CREDS_ENV);
}

Test(creds, secrets_compare_whole)
{
    cr_assert(creds_secret_equal(SECRET, SECRET));
    cr_assert(!creds_secret_equal(SECRET, ""));
    cr_assert(!creds_secret_equal("", ""));
    cr_assert(!creds_secret_equal(SECRET, "0123456789abcdef"));
    cr_assert(!creds_secret_equal(
        SECRET,
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdee"));
}
