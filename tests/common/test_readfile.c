/* Tests for common/readfile.c: whole files, first lines, numbers, and what
 * each says of a file that is missing, too long or not a number. */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "common/readfile.h"
#include "tests/fakes/fake_sysfs.h"

static fake_sysfs dir;

static void dir_up(void)
{
    fake_sysfs_init(&dir, 0);
}

static void dir_down(void)
{
    fake_sysfs_fini(&dir);
}

TestSuite(readfile, .init = dir_up, .fini = dir_down);

/* dir/name holding text; its path into path. */
static const char *file(const char *name, const char *text, char *path,
                        size_t len)
{
    snprintf(path, len, "%s/%s", dir.root, name);
    fake_sysfs_write(path, text);
    return path;
}

Test(readfile, reads_a_whole_file_and_says_when_it_did_not_fit)
{
    char path[512], buf[8];

    cr_assert_eq(flps_read_file(file("a", "two\nlines\n", path, sizeof(path)),
                                buf, sizeof(buf)),
                 0);
    cr_assert_eq(errno, EFBIG);
    cr_assert_str_eq(buf, "two\nlin", "the part that fitted");
    cr_assert_eq(flps_read_file(file("b", "1234567", path, sizeof(path)), buf,
                                sizeof(buf)),
                 1, "exactly len - 1 bytes fit");
    cr_assert_str_eq(buf, "1234567");
    cr_assert_eq(
        flps_read_file(file("c", "", path, sizeof(path)), buf, sizeof(buf)), 1);
    cr_assert_str_eq(buf, "");
}

Test(readfile, a_missing_file_is_enoent_and_leaves_an_empty_buffer)
{
    char path[512], buf[16] = "junk";

    snprintf(path, sizeof(path), "%s/none", dir.root);
    cr_assert_eq(flps_read_file(path, buf, sizeof(buf)), 0);
    cr_assert_eq(errno, ENOENT);
    cr_assert_str_eq(buf, "");
    strcpy(buf, "junk");
    cr_assert_eq(flps_read_line(path, buf, sizeof(buf)), 0);
    cr_assert_str_eq(buf, "");
}

Test(readfile, the_first_line_comes_without_newline_or_trailing_blanks)
{
    char path[512], buf[16];

    cr_assert_eq(
        flps_read_line(file("s", "4: ACTIVE  \nmore\n", path, sizeof(path)),
                       buf, sizeof(buf)),
        1);
    cr_assert_str_eq(buf, "4: ACTIVE");
    cr_assert_eq(flps_read_line(file("l", "a line longer than the buffer\n",
                                     path, sizeof(path)),
                                buf, sizeof(buf)),
                 1);
    cr_assert_str_eq(buf, "a line longer t", "cut to fit");
}

Test(readfile, reads_a_counter_and_refuses_what_is_not_one)
{
    char path[512];
    uint64_t v = 7;

    cr_assert_eq(
        flps_read_u64(file("n", "262143328850\n", path, sizeof(path)), &v), 1);
    cr_assert_eq(v, 262143328850ull);
    v = 7;
    cr_assert_eq(flps_read_u64(file("x", "12x\n", path, sizeof(path)), &v), 0);
    cr_assert_eq(errno, EINVAL);
    cr_assert_eq(flps_read_u64(file("m", "-1\n", path, sizeof(path)), &v), 0);
    cr_assert_eq(flps_read_u64(file("e", "\n", path, sizeof(path)), &v), 0);
    cr_assert_eq(
        flps_read_u64(
            file("o", "99999999999999999999999\n", path, sizeof(path)), &v),
        0);
    cr_assert_eq(v, 7, "a refusal writes nothing");
}
