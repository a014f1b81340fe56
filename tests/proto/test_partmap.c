/* Tests for proto/partmap.c: the exact map of a small layout, coverage,
 * balance, determinism, argument errors and allocation failures. */
#include "proto/partmap.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define ASSERT_NO_LEAKS()                                                      \
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,                        \
                 "memory leaked (see the LeakSanitizer report)")
#else
#define ASSERT_NO_LEAKS() ((void)0)
#endif

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Every element of every tensor lies in exactly one part, parts are ordered
 * by (tensor, offset), first_part points at each tensor's first part, and
 * shard_load is the sum of the owned parts' sizes. */
static void check_map(const partmap *pm, const uint64_t *numel, uint32_t nt,
                      uint32_t nshards, uint32_t part_size)
{
    uint64_t *load = calloc(nshards, sizeof(*load));
    uint32_t p = 0;

    cr_assert_not_null(load);
    cr_assert_eq(pm->ntensors, nt);
    cr_assert_eq(pm->nshards, nshards);
    for (uint32_t t = 0; t < nt; t++) {
        uint64_t next = 0; /* the first element not yet covered */
        cr_assert_eq(pm->first_part[t], p, "tensor %u starts at part %u", t, p);
        while (p < pm->nparts && pm->parts[p].tensor == t) {
            const partmap_part *q = &pm->parts[p];
            cr_assert_eq(q->offset, next,
                         "part %u starts at %llu, not right after the "
                         "previous part (%llu): a gap or an overlap",
                         p, (unsigned long long)q->offset,
                         (unsigned long long)next);
            cr_assert(q->numel >= 1 && q->numel <= part_size);
            cr_assert_lt(q->shard, nshards);
            /* Only a tensor's last part may be short. */
            if (q->offset + q->numel < numel[t])
                cr_assert_eq(q->numel, part_size);
            next += q->numel;
            load[q->shard] += q->numel;
            p++;
        }
        cr_assert_eq(next, numel[t], "tensor %u is covered up to %llu of %llu",
                     t, (unsigned long long)next, (unsigned long long)numel[t]);
    }
    cr_assert_eq(p, pm->nparts, "parts left over after the last tensor");
    for (uint32_t s = 0; s < nshards; s++)
        cr_assert_eq(pm->shard_load[s], load[s], "load of shard %u", s);
    free(load);
}

static void assert_balanced(const partmap *pm, uint32_t part_size)
{
    uint64_t lo = UINT64_MAX, hi = 0;

    for (uint32_t s = 0; s < pm->nshards; s++) {
        if (pm->shard_load[s] < lo)
            lo = pm->shard_load[s];
        if (pm->shard_load[s] > hi)
            hi = pm->shard_load[s];
    }
    cr_assert_leq(hi - lo, part_size,
                  "loads differ by %llu, more than a part (%u)",
                  (unsigned long long)(hi - lo), part_size);
}

Test(partmap, builds_the_hand_computed_map_of_a_small_layout)
{
    /* Tensors of 10, 7 and 3 elements, part_size 4, 2 shards.
     * Cutting:  p0 = t0[0,4)  p1 = t0[4,8)  p2 = t0[8,10)
     *           p3 = t1[0,4)  p4 = t1[4,7)
     *           p5 = t2[0,3)
     * Largest first, ties by lower id: p0(4) p1(4) p3(4) p4(3) p5(3) p2(2).
     * Onto the least-loaded shard, ties by lower shard (loads s0/s1):
     *   p0 -> s0 (4/0)   p1 -> s1 (4/4)   p3 -> s0 (8/4)
     *   p4 -> s1 (8/7)   p5 -> s1 (8/10)  p2 -> s0 (10/10) */
    const uint64_t numel[] = {10, 7, 3};
    const partmap_part want[] = {
        {0, 0, 4, 0}, {0, 4, 4, 1}, {0, 8, 2, 0},
        {1, 0, 4, 0}, {1, 4, 3, 1}, {2, 0, 3, 1},
    };
    partmap pm;

    cr_assert_eq(partmap_build(numel, 3, 2, 4, &pm), FLPS_OK);
    cr_assert_eq(pm.nparts, 6);
    for (uint32_t i = 0; i < 6; i++) {
        cr_assert_eq(pm.parts[i].tensor, want[i].tensor, "part %u", i);
        cr_assert_eq(pm.parts[i].offset, want[i].offset, "part %u", i);
        cr_assert_eq(pm.parts[i].numel, want[i].numel, "part %u", i);
        cr_assert_eq(pm.parts[i].shard, want[i].shard, "part %u", i);
    }
    cr_assert_eq(pm.first_part[0], 0);
    cr_assert_eq(pm.first_part[1], 3);
    cr_assert_eq(pm.first_part[2], 5);
    cr_assert_eq(pm.shard_load[0], 10);
    cr_assert_eq(pm.shard_load[1], 10);
    check_map(&pm, numel, 3, 2, 4);
    partmap_fini(&pm);
    cr_assert_null(pm.parts, "fini clears the map");
    cr_assert_eq(pm.nparts, 0);
}

Test(partmap, one_shard_owns_every_part)
{
    const uint64_t numel[] = {5, 1};
    partmap pm;

    cr_assert_eq(partmap_build(numel, 2, 1, 2, &pm), FLPS_OK);
    cr_assert_eq(pm.nparts, 4);
    for (uint32_t i = 0; i < pm.nparts; i++)
        cr_assert_eq(pm.parts[i].shard, 0);
    cr_assert_eq(pm.shard_load[0], 6);
    check_map(&pm, numel, 2, 1, 2);
    partmap_fini(&pm);
}

Test(partmap, more_shards_than_parts_leaves_the_last_shards_empty)
{
    const uint64_t numel[] = {3};
    partmap pm;

    cr_assert_eq(partmap_build(numel, 1, 4, 2, &pm), FLPS_OK);
    cr_assert_eq(pm.nparts, 2);
    cr_assert_eq(pm.parts[0].shard, 0);
    cr_assert_eq(pm.parts[1].shard, 1);
    cr_assert_eq(pm.shard_load[0], 2);
    cr_assert_eq(pm.shard_load[1], 1);
    cr_assert_eq(pm.shard_load[2], 0);
    cr_assert_eq(pm.shard_load[3], 0);
    partmap_fini(&pm);
}

Test(partmap, a_tensor_of_exactly_one_part_size_is_one_part)
{
    const uint64_t numel[] = {4, 8, 4096};
    partmap pm;

    cr_assert_eq(partmap_build(numel, 3, 3, 4, &pm), FLPS_OK);
    cr_assert_eq(pm.nparts, 1 + 2 + 1024);
    check_map(&pm, numel, 3, 3, 4);
    assert_balanced(&pm, 4);
    partmap_fini(&pm);
}

Test(partmap, random_layouts_are_covered_exactly_once_and_balanced)
{
    uint64_t seed = 7;

    for (int trial = 0; trial < 300; trial++) {
        uint32_t nt = 1 + (uint32_t)(rng_next(&seed) % 12);
        uint32_t nshards = 1 + (uint32_t)(rng_next(&seed) % 9);
        uint32_t part_size = 1 + (uint32_t)(rng_next(&seed) % 64);
        uint64_t numel[12];
        partmap pm;

        for (uint32_t t = 0; t < nt; t++)
            numel[t] = 1 + rng_next(&seed) % (rng_next(&seed) % 2 ? 10 : 900);
        cr_assert_eq(partmap_build(numel, nt, nshards, part_size, &pm),
                     FLPS_OK);
        check_map(&pm, numel, nt, nshards, part_size);
        assert_balanced(&pm, part_size);
        partmap_fini(&pm);
    }
}

Test(partmap, is_a_pure_function_of_its_arguments)
{
    const uint64_t numel[] = {1000, 3, 77, 4096, 1, 513};
    partmap a, b;

    cr_assert_eq(partmap_build(numel, 6, 3, 64, &a), FLPS_OK);
    cr_assert_eq(partmap_build(numel, 6, 3, 64, &b), FLPS_OK);
    cr_assert_eq(a.nparts, b.nparts);
    cr_assert_eq(memcmp(a.parts, b.parts, a.nparts * sizeof(*a.parts)), 0);
    cr_assert_eq(
        memcmp(a.shard_load, b.shard_load, a.nshards * sizeof(*a.shard_load)),
        0);
    cr_assert_eq(
        memcmp(a.first_part, b.first_part, a.ntensors * sizeof(*a.first_part)),
        0);
    partmap_fini(&a);
    partmap_fini(&b);
}

Test(partmap, refuses_empty_layouts_and_zero_sizes)
{
    const uint64_t numel[] = {10, 0, 3};
    partmap pm, sentinel;

    memset(&pm, 0xA5, sizeof(pm));
    memcpy(&sentinel, &pm, sizeof(pm));
    cr_assert_eq(partmap_build(numel, 0, 2, 4, &pm), FLPS_EINVAL, "no tensors");
    cr_assert_eq(partmap_build(NULL, 1, 2, 4, &pm), FLPS_EINVAL, "no layout");
    cr_assert_eq(partmap_build(numel, 2, 2, 4, &pm), FLPS_EINVAL,
                 "a tensor of zero elements");
    cr_assert_eq(partmap_build(numel, 1, 0, 4, &pm), FLPS_EINVAL,
                 "zero shards");
    cr_assert_eq(partmap_build(numel, 1, 2, 0, &pm), FLPS_EINVAL,
                 "zero part_size");
    cr_assert_eq(memcmp(&pm, &sentinel, sizeof(pm)), 0,
                 "a refused build leaves *out untouched");
}

Test(partmap, refuses_a_layout_of_more_than_2_to_the_32_parts)
{
    const uint64_t numel[] = {(uint64_t)UINT32_MAX + 1};
    partmap pm;

    cr_assert_eq(partmap_build(numel, 1, 1, 1, &pm), FLPS_EINVAL);
}

Test(partmap, fini_of_a_cleared_map_does_nothing)
{
    partmap pm;

    memset(&pm, 0, sizeof(pm));
    partmap_fini(&pm);
    partmap_fini(NULL);
}

Test(partmap, fails_every_allocation_in_turn_with_enomem_and_no_leak)
{
    const uint64_t numel[] = {10, 7, 3};
    unsigned long n;
    partmap pm;

    for (n = 1;; n++) {
        flps_err rc;
        memset(&pm, 0xA5, sizeof(pm));
        flps_alloc_fail_at(n);
        rc = partmap_build(numel, 3, 2, 4, &pm);
        flps_alloc_fail_at(0);
        if (rc == FLPS_OK)
            break;
        cr_assert_eq(rc, FLPS_ENOMEM, "allocation %lu failed: got %s", n,
                     flps_errname(rc));
        {
            partmap sentinel;
            memset(&sentinel, 0xA5, sizeof(sentinel));
            cr_assert_eq(memcmp(&pm, &sentinel, sizeof(pm)), 0,
                         "allocation %lu failed: *out was written", n);
        }
        ASSERT_NO_LEAKS();
    }
    cr_assert_eq(n, 5, "partmap_build makes four allocations");
    check_map(&pm, numel, 3, 2, 4);
    partmap_fini(&pm);
    ASSERT_NO_LEAKS();
}

/* Pieces keep the placement of part_size and cut each part into pieces
 * of at most piece elements on the same shard, in (tensor, offset) order. */
Test(partmap, pieces_keep_placement)
{
    const uint64_t numel[] = {300000, 70000, 10};
    partmap whole, pm;

    cr_assert_eq(partmap_build(numel, 3, 2, 1u << 20, &whole), FLPS_OK);
    cr_assert_eq(partmap_build_pieces(numel, 3, 2, 1u << 20, 65536, &pm),
                 FLPS_OK);
    /* 300000 -> 5 pieces, 70000 -> 2, 10 -> 1 */
    cr_assert_eq(pm.nparts, 8);
    cr_assert_eq(pm.first_part[0], 0);
    cr_assert_eq(pm.first_part[1], 5);
    cr_assert_eq(pm.first_part[2], 7);
    for (uint32_t t = 0; t < 3; t++) {
        uint32_t end = t + 1 < 3 ? pm.first_part[t + 1] : pm.nparts;
        uint64_t off = 0;
        for (uint32_t i = pm.first_part[t]; i < end; i++) {
            cr_assert_eq(pm.parts[i].tensor, t);
            cr_assert_eq(pm.parts[i].offset, off);
            cr_assert(pm.parts[i].numel >= 1 && pm.parts[i].numel <= 65536);
            /* every piece lives where its whole part was placed */
            cr_assert_eq(pm.parts[i].shard,
                         whole.parts[whole.first_part[t]].shard);
            off += pm.parts[i].numel;
        }
        cr_assert_eq(off, numel[t]);
    }
    for (uint32_t s = 0; s < 2; s++)
        cr_assert_eq(pm.shard_load[s], whole.shard_load[s]);
    partmap_fini(&pm);
    partmap_fini(&whole);
}

Test(partmap, pieces_no_smaller_than_parts_change_nothing)
{
    const uint64_t numel[] = {1000, 70000};
    partmap a, b;

    cr_assert_eq(partmap_build(numel, 2, 3, 4096, &a), FLPS_OK);
    cr_assert_eq(partmap_build_pieces(numel, 2, 3, 4096, 65536, &b), FLPS_OK);
    cr_assert_eq(a.nparts, b.nparts);
    for (uint32_t i = 0; i < a.nparts; i++) {
        cr_assert_eq(a.parts[i].offset, b.parts[i].offset);
        cr_assert_eq(a.parts[i].numel, b.parts[i].numel);
        cr_assert_eq(a.parts[i].shard, b.parts[i].shard);
    }
    cr_assert_eq(partmap_build_pieces(numel, 2, 3, 4096, 0, &b), FLPS_EINVAL);
    partmap_fini(&a);
    partmap_fini(&b);
    cr_assert_eq(partmap_piece_size(1, 1u << 24), PARTMAP_DENSE_PIECE);
    cr_assert_eq(partmap_piece_size(0, 1u << 24), 1u << 24);
    cr_assert_eq(partmap_piece_size(1, 1000), 1000);
}

/* Every element of every tensor in exactly one part, in (tensor, offset)
 * order, each part within one tensor and at most piece long. */
static void assert_covers(const partmap *pm, const uint64_t *numel, uint32_t nt,
                          uint32_t piece)
{
    uint32_t q = 0;

    for (uint32_t t = 0; t < nt; t++) {
        uint64_t off = 0;
        cr_assert_eq(pm->first_part[t], q);
        while (off < numel[t]) {
            cr_assert_lt(q, pm->nparts);
            cr_assert_eq(pm->parts[q].tensor, t);
            cr_assert_eq(pm->parts[q].offset, off);
            cr_assert_gt(pm->parts[q].numel, 0);
            cr_assert_leq(pm->parts[q].numel, piece);
            off += pm->parts[q].numel;
            q++;
        }
        cr_assert_eq(off, numel[t]);
    }
    cr_assert_eq(q, pm->nparts);
}

Test(partmap, the_even_map_gives_every_shard_the_same_elements_within_one)
{
    /* The MLP: 784-300-100-10. Parts placed largest first leave one shard
     * of 4 with 68592 elements; the even map gives each 66652 or 66653. */
    const uint64_t mlp[] = {235200, 300, 30000, 100, 1000, 10};
    const uint64_t odd[] = {7, 1, 1, 13, 2, 100003, 5};
    partmap pm, lpt;
    uint64_t lo = UINT64_MAX, hi = 0;

    cr_assert_eq(partmap_build_pieces(mlp, 6, 4, 65536, 16384, &lpt), FLPS_OK);
    for (uint32_t s = 0; s < 4; s++)
        hi = lpt.shard_load[s] > hi ? lpt.shard_load[s] : hi;
    cr_assert_eq(hi, 68592, "the old map's heaviest shard");
    partmap_fini(&lpt);
    cr_assert_eq(partmap_build_even(mlp, 6, 4, 8192, &pm), FLPS_OK);
    assert_covers(&pm, mlp, 6, 8192);
    for (uint32_t s = 0; s < 4; s++)
        cr_assert(pm.shard_load[s] == 66652 || pm.shard_load[s] == 66653,
                  "shard %u has %llu", s, (unsigned long long)pm.shard_load[s]);
    /* Shards own runs in order: a part's shard never goes down. */
    for (uint32_t i = 1; i < pm.nparts; i++)
        cr_assert_geq(pm.parts[i].shard, pm.parts[i - 1].shard);
    partmap_fini(&pm);

    for (uint32_t S = 1; S <= 9; S++)
        for (uint32_t piece = 1; piece <= 64; piece *= 4) {
            uint64_t total = 0, sum = 0;
            lo = UINT64_MAX;
            hi = 0;
            cr_assert_eq(partmap_build_even(odd, 7, S, piece, &pm), FLPS_OK);
            assert_covers(&pm, odd, 7, piece);
            for (uint32_t t = 0; t < 7; t++)
                total += odd[t];
            for (uint32_t s = 0; s < S; s++) {
                sum += pm.shard_load[s];
                lo = pm.shard_load[s] < lo ? pm.shard_load[s] : lo;
                hi = pm.shard_load[s] > hi ? pm.shard_load[s] : hi;
            }
            cr_assert_eq(sum, total);
            cr_assert_leq(hi - lo, 1, "%u shards, piece %u: %llu..%llu", S,
                          piece, (unsigned long long)lo,
                          (unsigned long long)hi);
            partmap_fini(&pm);
        }
}

/* Each tensor's share of a run is cut into the fewest pieces that fit,
 * all within one value of each other: no small tail that costs a round
 * trip of its own. */
Test(partmap, the_even_map_cuts_each_share_into_equal_pieces)
{
    const uint64_t mlp[] = {200704, 256, 32768, 128, 1280, 10};
    const uint64_t odd[] = {7, 1, 1, 13, 2, 100003, 5};
    const struct {
        const uint64_t *numel;
        uint32_t nt, shards, piece;
    } cases[] = {{mlp, 6, 4, 4096}, {mlp, 6, 3, 8192}, {mlp, 6, 1, 4096},
                 {odd, 7, 5, 16},   {odd, 7, 2, 1},    {odd, 7, 9, 100}};
    partmap pm;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        cr_assert_eq(partmap_build_even(cases[c].numel, cases[c].nt,
                                        cases[c].shards, cases[c].piece, &pm),
                     FLPS_OK);
        assert_covers(&pm, cases[c].numel, cases[c].nt, cases[c].piece);
        for (uint32_t i = 0; i < pm.nparts;) {
            uint32_t j = i, lo = UINT32_MAX, hi = 0;
            uint64_t len = 0;
            while (j < pm.nparts && pm.parts[j].tensor == pm.parts[i].tensor &&
                   pm.parts[j].shard == pm.parts[i].shard) {
                len += pm.parts[j].numel;
                lo = pm.parts[j].numel < lo ? pm.parts[j].numel : lo;
                hi = pm.parts[j].numel > hi ? pm.parts[j].numel : hi;
                j++;
            }
            cr_assert_eq(j - i, (len + cases[c].piece - 1) / cases[c].piece,
                         "case %zu: %llu values of tensor %u on shard %u in "
                         "%u pieces",
                         c, (unsigned long long)len, pm.parts[i].tensor,
                         pm.parts[i].shard, j - i);
            cr_assert_leq(hi - lo, 1, "case %zu: pieces of %u..%u values", c,
                          lo, hi);
            i = j;
        }
        partmap_fini(&pm);
    }
    /* The bench MLP's first shard: 58786 or 58787 values of fc1.weight,
     * 15 pieces of 3919 or 3920, not 14 of 4096 and one of 1442. */
    cr_assert_eq(partmap_build_even(mlp, 6, 4, 4096, &pm), FLPS_OK);
    cr_assert_eq(pm.first_part[1], 15 + 15 + 15 + 6);
    cr_assert(pm.parts[0].numel == 3919 || pm.parts[0].numel == 3920, "%u",
              pm.parts[0].numel);
    partmap_fini(&pm);
}

Test(partmap, a_large_models_even_piece_grows_to_64_pieces_a_shard)
{
    /* The bench MLP and examples/torch/cnn.py's CNN. */
    const uint64_t mlp[] = {200704, 256, 32768, 128, 1280, 10};
    const uint64_t cnn[] = {800, 32, 51200, 64, 3211264, 1024, 10240, 10};
    const uint64_t one[] = {786432};
    partmap pm;

    cr_assert_eq(partmap_clear_piece(mlp, 6, 4, 65536), 4096,
                 "15 pieces a shard: the small piece stays");
    cr_assert_eq(partmap_clear_piece(mlp, 6, 1, 65536), 4096);
    /* 818,658 values a shard: 12,792 each for 64, rounded up. */
    cr_assert_eq(partmap_clear_piece(cnn, 8, 4, 65536), 16384);
    cr_assert_eq(partmap_clear_piece(cnn, 8, 16, 65536), 4096);
    cr_assert_eq(partmap_clear_piece(cnn, 8, 1, 65536), PARTMAP_DENSE_PIECE,
                 "never past the dense piece");
    cr_assert_eq(partmap_clear_piece(one, 1, 1, 65536), 12288,
                 "a multiple of 4096");
    cr_assert_eq(partmap_clear_piece(cnn, 8, 4, 1000), 1000,
                 "never past the part size");
    cr_assert_eq(partmap_clear_piece(mlp, 6, 0, 65536), 4096);
    /* The CNN over 4 shards: at most 64 pieces a shard. */
    cr_assert_eq(partmap_build_even(cnn, 8, 4, 16384, &pm), FLPS_OK);
    for (uint32_t s = 0; s < 4; s++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < pm.nparts; i++)
            n += pm.parts[i].shard == s;
        cr_assert(n > 32 && n <= 64, "shard %u takes %u pieces", s, n);
    }
    partmap_fini(&pm);
}

Test(partmap, the_even_map_refuses_what_partmap_build_refuses)
{
    const uint64_t numel[] = {10, 0};
    partmap pm;

    cr_assert_eq(partmap_build_even(numel, 1, 0, 4, &pm), FLPS_EINVAL);
    cr_assert_eq(partmap_build_even(numel, 1, 2, 0, &pm), FLPS_EINVAL);
    cr_assert_eq(partmap_build_even(numel, 0, 2, 4, &pm), FLPS_EINVAL);
    cr_assert_eq(partmap_build_even(numel, 2, 2, 4, &pm), FLPS_EINVAL,
                 "a zero-size tensor");
    cr_assert_eq(partmap_build_even(NULL, 1, 2, 4, &pm), FLPS_EINVAL);
    /* More shards than elements: some own nothing, none is lost. */
    cr_assert_eq(partmap_build_even(numel, 1, 16, 4, &pm), FLPS_OK);
    assert_covers(&pm, numel, 1, 4);
    partmap_fini(&pm);
}
