/* Tests for ps/crc32c.c: the CRC-32C of the write-ahead log records. */
#include "ps/crc32c.h"

#include <criterion/criterion.h>
#include <string.h>

Test(crc32c, matches_the_standard_check_value)
{
    cr_assert_eq(crc32c_update(0, "123456789", 9), 0xE3069283u);
}

Test(crc32c, matches_the_rfc_3720_test_vectors)
{
    unsigned char buf[32];

    memset(buf, 0, sizeof(buf));
    cr_assert_eq(crc32c_update(0, buf, sizeof(buf)), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof(buf));
    cr_assert_eq(crc32c_update(0, buf, sizeof(buf)), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)i;
    cr_assert_eq(crc32c_update(0, buf, sizeof(buf)), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (unsigned char)(31 - i);
    cr_assert_eq(crc32c_update(0, buf, sizeof(buf)), 0x113FDB5Cu);
}

Test(crc32c, of_nothing_is_the_value_passed_in)
{
    cr_assert_eq(crc32c_update(0, "", 0), 0);
    cr_assert_eq(crc32c_update(0x12345678u, "", 0), 0x12345678u);
}

Test(crc32c, given_in_pieces_equals_the_crc_of_the_whole)
{
    const char *text = "write-ahead log record header and payload";
    size_t len = strlen(text);
    uint32_t whole = crc32c_update(0, text, len);

    for (size_t cut = 0; cut <= len; cut++)
        cr_assert_eq(
            crc32c_update(crc32c_update(0, text, cut), text + cut, len - cut),
            whole, "cut at %zu", cut);
}

Test(crc32c, changes_with_any_single_bit)
{
    unsigned char buf[16] = "0123456789abcde";
    uint32_t base = crc32c_update(0, buf, sizeof(buf));

    for (size_t i = 0; i < sizeof(buf) * 8; i++) {
        buf[i / 8] ^= (unsigned char)(1u << (i % 8));
        cr_assert_neq(crc32c_update(0, buf, sizeof(buf)), base, "bit %zu", i);
        buf[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
}
