/* Tests of services/jsonout.c: compact JSON with shortest reals. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "common/alloc.h"
#include "services/jsonout.h"

static char *dump(json_t *j)
{
    char *s = NULL;

    cr_assert_eq(jsonout_dumps(j, &s), FLPS_OK);
    json_decref(j);
    return s;
}

Test(jsonout, prints_reals_in_their_shortest_round_trip_form)
{
    char *s = dump(json_pack("{s:f,s:f,s:f}", "acc", 0.25048, "lr", 0.1 + 0.2,
                             "d", 1e-300));

    cr_assert_str_eq(s, "{\"acc\":0.25048,\"lr\":0.30000000000000004,"
                        "\"d\":1e-300}");
    flps_free(s);
}

Test(jsonout, a_whole_real_stays_a_real_and_an_integer_stays_an_integer)
{
    char *s = dump(json_pack("{s:f,s:I,s:f}", "w", 60.0, "n", (json_int_t)60,
                             "neg", -2.5));
    json_t *back = json_loads(s, 0, NULL);

    cr_assert_str_eq(s, "{\"w\":60.0,\"n\":60,\"neg\":-2.5}");
    cr_assert(json_is_real(json_object_get(back, "w")));
    cr_assert(json_is_integer(json_object_get(back, "n")));
    json_decref(back);
    flps_free(s);
}

Test(jsonout, escapes_strings_and_keeps_key_order_and_nesting)
{
    char *s = dump(json_pack("{s:s,s:[b,b,n],s:{}}", "line",
                             "a \"q\" \\ \n\t\x01 é", "z", 1, 0, "e"));

    cr_assert_str_eq(s, "{\"line\":\"a \\\"q\\\" \\\\ \\n\\t\\u0001 é\","
                        "\"z\":[true,false,null],\"e\":{}}");
    flps_free(s);
}

Test(jsonout, every_real_reads_back_exactly)
{
    double xs[] = {0.1,     1.0 / 3, 123456.789, 5e-324, 1.7976931348623157e308,
                   -0.0001, 2.5e15};

    for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
        char *s = dump(json_real(xs[i]));
        json_t *back = json_loads(s, JSON_DECODE_ANY, NULL);

        cr_assert(json_is_real(back), "%s is a real", s);
        cr_assert_eq(json_real_value(back), xs[i], "%s", s);
        json_decref(back);
        flps_free(s);
    }
}

Test(jsonout, refuses_null_and_reports_out_of_memory)
{
    char *s = NULL;
    json_t *j = json_pack("{s:s}", "k", "v");

    cr_assert_eq(jsonout_dumps(NULL, &s), FLPS_EINVAL);
    flps_alloc_fail_at(1);
    cr_assert_eq(jsonout_dumps(j, &s), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    cr_assert_null(s, "nothing written on failure");
    json_decref(j);
}
