/* services/plural: the noun that agrees with a count. */
#include <criterion/criterion.h>
#include <math.h>

#include "services/plural.h"

Test(plural, takes_the_singular_for_exactly_one)
{
    cr_assert_str_eq(plural_word(1, "server", "servers"), "server");
    cr_assert_str_eq(plural_word(1u, "process", "processes"), "process");
    cr_assert_str_eq(plural_word(1.0, "CPU", "CPUs"), "CPU");
}

Test(plural, takes_the_plural_for_every_other_count)
{
    cr_assert_str_eq(plural_word(0, "server", "servers"), "servers");
    cr_assert_str_eq(plural_word(2, "server", "servers"), "servers");
    cr_assert_str_eq(plural_word(0.5, "CPU", "CPUs"), "CPUs");
    cr_assert_str_eq(plural_word(1.5, "CPU", "CPUs"), "CPUs");
    cr_assert_str_eq(plural_word(NAN, "CPU", "CPUs"), "CPUs");
    cr_assert_str_eq(plural_word(4294967297.0, "job", "jobs"), "jobs");
}
