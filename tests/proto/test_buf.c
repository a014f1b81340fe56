/* Tests for proto/buf.c: sizes and alignment, reference counting, and the
 * uniqueness test a pool of reply buffers relies on. */
#include "proto/buf.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

Test(proto_buf, a_new_buffer_is_aligned_sized_and_unique)
{
    proto_buf *b = proto_buf_create(100);

    cr_assert_not_null(b);
    cr_assert_eq((uintptr_t)proto_buf_data(b) % 16, 0);
    cr_assert_eq(proto_buf_len(b), 100);
    cr_assert(proto_buf_is_unique(b));
    memset(proto_buf_data(b), 0xab, 100);
    proto_buf_release(b);
}

Test(proto_buf, is_unique_only_while_nobody_else_holds_it)
{
    proto_buf *b = proto_buf_create(8);

    cr_assert_eq(proto_buf_hold(b), b);
    cr_assert(!proto_buf_is_unique(b), "a second holder (a send in flight)");
    proto_buf_hold(b);
    proto_buf_release(b);
    cr_assert(!proto_buf_is_unique(b));
    proto_buf_release(b);
    cr_assert(proto_buf_is_unique(b), "back to the owner alone");
    proto_buf_release(b);
}

Test(proto_buf, wraps_malloced_data_and_frees_it_at_the_last_release)
{
    void *d = malloc(32);
    proto_buf *b;

    cr_assert_not_null(d);
    b = proto_buf_wrap(d, 32);
    cr_assert_not_null(b);
    cr_assert_eq(proto_buf_data(b), d);
    cr_assert_eq(proto_buf_len(b), 32);
    cr_assert(proto_buf_is_unique(b));
    proto_buf_release(b); /* frees d; LeakSanitizer would say otherwise */
    proto_buf_release(NULL);
}

Test(proto_buf, out_of_memory_gives_null)
{
    void *d = malloc(4);

    flps_alloc_fail_at(1);
    cr_assert_null(proto_buf_create(16));
    flps_alloc_fail_at(1);
    cr_assert_null(proto_buf_wrap(d, 4), "data stays the caller's");
    flps_alloc_fail_at(0);
    free(d);
}
