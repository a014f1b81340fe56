/* Tests for worker/dataset.c: the real Fashion-MNIST files, malformed IDX
 * files, the synthetic set and the IID split. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/dataset.h"

static const char *fmnist_dir(void)
{
    const char *d = getenv("FLPS_FMNIST_DIR");

    return d != NULL ? d : "/usr/share/datasets/fashion-mnist";
}

static void check_split(const char *split, size_t want_n)
{
    dataset ds = {0};
    size_t per_class[10] = {0};
    double sum = 0.0, sum2 = 0.0, mean, std;

    cr_assert_eq(dataset_load_fmnist(fmnist_dir(), split, &ds), FLPS_OK);
    cr_assert_eq(ds.n, want_n);
    cr_assert_eq(ds.dim, 784);
    cr_assert_eq(ds.classes, 10);
    for (size_t i = 0; i < ds.n; i++) {
        cr_assert_lt(ds.y[i], 10);
        per_class[ds.y[i]]++;
    }
    for (size_t c = 0; c < 10; c++)
        cr_assert_eq(per_class[c], want_n / 10, "Fashion-MNIST is balanced");
    for (size_t i = 0; i < ds.n * ds.dim; i++) {
        sum += ds.x[i];
        sum2 += (double)ds.x[i] * ds.x[i];
    }
    mean = sum / (double)(ds.n * ds.dim);
    std = sqrt(sum2 / (double)(ds.n * ds.dim) - mean * mean);
    /* Pixel 0 maps to -0.2860 / 0.3530 and 255 to (1 - 0.2860) / 0.3530. */
    for (size_t i = 0; i < ds.n * ds.dim; i += 997) {
        cr_assert_geq(ds.x[i], -0.2860f / 0.3530f - 1e-5f);
        cr_assert_leq(ds.x[i], 0.714f / 0.3530f + 1e-5f);
    }
    if (strcmp(split, "train") == 0) {
        cr_assert_float_eq(mean, 0.0, 0.005, "train mean %g", mean);
        cr_assert_float_eq(std, 1.0, 0.005, "train std %g", std);
    } else {
        cr_assert_float_eq(mean, 0.0, 0.05, "test mean %g", mean);
        cr_assert_float_eq(std, 1.0, 0.05, "test std %g", std);
    }
    dataset_fini(&ds);
    cr_assert_null(ds.x, "fini zeroes the struct");
}

Test(dataset, loads_60000_normalised_training_images)
{
    check_split("train", 60000);
}

Test(dataset, loads_10000_test_images)
{
    check_split("test", 10000);
}

/* A scratch directory for hand-made IDX files, removed after each test. */
static char tmpdir[64];

static void make_tmpdir(void)
{
    strcpy(tmpdir, "/tmp/flps_test_dataset_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    const char *names[] = {"train-images-idx3-ubyte.gz",
                           "train-labels-idx1-ubyte.gz"};
    char path[128];

    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Write bytes as a gzip file; if cut is nonzero keep only the first cut
 * bytes of the compressed stream, as a download that stopped would. */
static void write_gz(const char *name, const unsigned char *bytes, size_t len,
                     size_t cut)
{
    char path[128];
    gzFile gz;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    gz = gzopen(path, "wb");
    cr_assert_not_null(gz);
    if (len > 0)
        cr_assert_eq(gzwrite(gz, bytes, (unsigned)len), (int)len);
    cr_assert_eq(gzclose(gz), Z_OK);
    if (cut > 0)
        cr_assert_eq(truncate(path, (off_t)cut), 0);
}

/* Write a train split of n images (rows x cols) and nl labels with the given
 * magics; images are pixel value i % 256, labels i % 10. */
static void write_split(uint32_t img_magic, uint32_t n, uint32_t rows,
                        uint32_t cols, uint32_t lbl_magic, uint32_t nl)
{
    size_t isz = 16 + (size_t)n * rows * cols, lsz = 8 + nl;
    unsigned char *img = malloc(isz), *lbl = malloc(lsz);

    cr_assert(img != NULL && lbl != NULL);
    put_be32(img, img_magic);
    put_be32(img + 4, n);
    put_be32(img + 8, rows);
    put_be32(img + 12, cols);
    for (size_t i = 16; i < isz; i++)
        img[i] = (unsigned char)(i % 256);
    put_be32(lbl, lbl_magic);
    put_be32(lbl + 4, nl);
    for (size_t i = 0; i < nl; i++)
        lbl[8 + i] = (unsigned char)(i % 10);
    write_gz("train-images-idx3-ubyte.gz", img, isz, 0);
    write_gz("train-labels-idx1-ubyte.gz", lbl, lsz, 0);
    free(img);
    free(lbl);
}

static flps_err load_tmp(dataset *out)
{
    return dataset_load_fmnist(tmpdir, "train", out);
}

Test(dataset, loads_a_small_well_formed_split_exactly, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    dataset ds = {0};

    write_split(0x803, 3, 28, 28, 0x801, 3);
    cr_assert_eq(load_tmp(&ds), FLPS_OK);
    cr_assert_eq(ds.n, 3);
    cr_assert_eq(ds.y[2], 2);
    /* Byte 16 + k of the file is pixel k and holds (16 + k) % 256. */
    cr_assert_float_eq(ds.x[0], (16.0f / 255.0f - 0.2860f) / 0.3530f, 1e-6);
    cr_assert_float_eq(ds.x[239], (255.0f / 255.0f - 0.2860f) / 0.3530f, 1e-6);
    dataset_fini(&ds);
}

Test(dataset, rejects_a_missing_file_with_eio, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    dataset ds = {.n = 77};

    cr_assert_eq(load_tmp(&ds), FLPS_EIO, "empty directory");
    write_split(0x803, 3, 28, 28, 0x801, 3);
    {
        char path[128];
        snprintf(path, sizeof(path), "%s/train-labels-idx1-ubyte.gz", tmpdir);
        cr_assert_eq(unlink(path), 0);
    }
    cr_assert_eq(load_tmp(&ds), FLPS_EIO, "images without labels");
    cr_assert_eq(dataset_load_fmnist("/nonexistent/flps", "test", &ds),
                 FLPS_EIO);
    cr_assert_eq(ds.n, 77, "out is written only on success");
}

Test(dataset, rejects_wrong_magic_numbers, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    dataset ds = {.n = 77};

    write_split(0x801, 3, 28, 28, 0x801, 3);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO, "labels magic on images");
    write_split(0x803, 3, 28, 28, 0x803, 3);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO, "images magic on labels");
    cr_assert_eq(ds.n, 77);
}

Test(dataset, rejects_images_that_are_not_28_by_28, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    dataset ds = {0};

    write_split(0x803, 2, 28, 27, 0x801, 2);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO);
    write_split(0x803, 0, 28, 28, 0x801, 0);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO, "no images at all");
}

Test(dataset, rejects_image_and_label_counts_that_differ, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    dataset ds = {0};

    write_split(0x803, 3, 28, 28, 0x801, 2);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO);
}

Test(dataset, rejects_a_label_outside_the_ten_classes, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    unsigned char lbl[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 10, 2};
    dataset ds = {0};

    write_split(0x803, 3, 28, 28, 0x801, 3);
    write_gz("train-labels-idx1-ubyte.gz", lbl, sizeof(lbl), 0);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO);
}

Test(dataset, rejects_files_shorter_than_their_header_says, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    unsigned char hdr[16];
    dataset ds = {0};

    write_split(0x803, 3, 28, 28, 0x801, 3);
    put_be32(hdr, 0x803);
    put_be32(hdr + 4, 3);
    put_be32(hdr + 8, 28);
    put_be32(hdr + 12, 28);
    write_gz("train-images-idx3-ubyte.gz", hdr, sizeof(hdr), 0);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO, "header without pixels");
    write_gz("train-images-idx3-ubyte.gz", hdr, 10, 0);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO, "half a header");
    write_gz("train-images-idx3-ubyte.gz", NULL, 0, 0);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO, "empty file");
}

Test(dataset, rejects_a_cut_off_gzip_stream, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    unsigned char *img;
    size_t isz = 16 + 50 * 784;
    uint64_t s = 5;
    dataset ds = {0};

    write_split(0x803, 50, 28, 28, 0x801, 50);
    /* Random pixels do not compress, so cutting the file loses pixels. */
    img = malloc(isz);
    cr_assert_not_null(img);
    put_be32(img, 0x803);
    put_be32(img + 4, 50);
    put_be32(img + 8, 28);
    put_be32(img + 12, 28);
    for (size_t i = 16; i < isz; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        img[i] = (unsigned char)(s >> 56);
    }
    write_gz("train-images-idx3-ubyte.gz", img, isz, isz / 2);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO);
    free(img);
}

Test(dataset, rejects_trailing_bytes_after_the_declared_data,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    dataset ds = {0};
    unsigned char lbl[8 + 4] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3, 4};

    write_split(0x803, 3, 28, 28, 0x801, 3);
    write_gz("train-labels-idx1-ubyte.gz", lbl, sizeof(lbl), 0);
    cr_assert_eq(load_tmp(&ds), FLPS_EPROTO);
}

Test(dataset, rejects_an_unknown_split_and_null_arguments)
{
    dataset ds = {0};

    cr_assert_eq(dataset_load_fmnist(fmnist_dir(), "valid", &ds), FLPS_EINVAL);
    cr_assert_eq(dataset_load_fmnist(NULL, "train", &ds), FLPS_EINVAL);
    cr_assert_eq(dataset_load_fmnist(fmnist_dir(), NULL, &ds), FLPS_EINVAL);
    cr_assert_eq(dataset_load_fmnist(fmnist_dir(), "train", NULL), FLPS_EINVAL);
    dataset_fini(NULL);
    dataset_fini(&ds);
}

Test(dataset, synthetic_sets_are_deterministic_by_seed)
{
    dataset a = {0}, b = {0}, c = {0};

    cr_assert_eq(dataset_synthetic(500, 16, 4, 99, &a), FLPS_OK);
    cr_assert_eq(dataset_synthetic(500, 16, 4, 99, &b), FLPS_OK);
    cr_assert_eq(dataset_synthetic(500, 16, 4, 100, &c), FLPS_OK);
    cr_assert_eq(a.n, 500);
    cr_assert_eq(a.dim, 16);
    cr_assert_eq(a.classes, 4);
    cr_assert(memcmp(a.x, b.x, 500 * 16 * sizeof(float)) == 0);
    cr_assert(memcmp(a.y, b.y, 500) == 0);
    cr_assert(memcmp(a.x, c.x, 500 * 16 * sizeof(float)) != 0);
    for (size_t i = 0; i < a.n; i++) {
        cr_assert_lt(a.y[i], 4);
        for (size_t j = 0; j < a.dim; j++)
            cr_assert(isfinite(a.x[i * a.dim + j]));
    }
    dataset_fini(&a);
    dataset_fini(&b);
    dataset_fini(&c);
    cr_assert_eq(dataset_synthetic(0, 16, 4, 1, &a), FLPS_EINVAL);
    cr_assert_eq(dataset_synthetic(10, 0, 4, 1, &a), FLPS_EINVAL);
    cr_assert_eq(dataset_synthetic(10, 16, 0, 1, &a), FLPS_EINVAL);
    cr_assert_eq(dataset_synthetic(10, 16, 257, 1, &a), FLPS_EINVAL);
    cr_assert_eq(dataset_synthetic(10, 16, 4, 1, NULL), FLPS_EINVAL);
}

/* Split n among workers; check sizes and that each index appears once. */
static void check_partition(size_t n, uint32_t workers, uint64_t seed)
{
    unsigned char *seen = calloc(n ? n : 1, 1);
    size_t total = 0;

    cr_assert_not_null(seen);
    for (uint32_t r = 0; r < workers; r++) {
        uint32_t *idx = NULL;
        size_t count = 0;

        cr_assert_eq(dataset_split_iid(n, workers, r, seed, &idx, &count),
                     FLPS_OK);
        cr_assert_not_null(idx);
        cr_assert(count == n / workers || count == n / workers + 1,
                  "rank %u got %zu of %zu", r, count, n);
        for (size_t i = 0; i < count; i++) {
            cr_assert_lt(idx[i], n);
            cr_assert_eq(seen[idx[i]], 0, "index %u given twice", idx[i]);
            seen[idx[i]] = 1;
        }
        total += count;
        free(idx);
    }
    cr_assert_eq(total, n, "every index is given out");
    free(seen);
}

Test(dataset, split_iid_gives_every_index_to_exactly_one_rank)
{
    check_partition(60000, 4, 1);
    check_partition(1001, 4, 2);
    check_partition(7, 3, 3);
    check_partition(2, 4, 4);
    check_partition(0, 2, 5);
    check_partition(10, 1, 6);
}

Test(dataset, split_iid_is_deterministic_by_seed)
{
    uint32_t *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    int sorted = 1;

    cr_assert_eq(dataset_split_iid(1000, 3, 1, 42, &a, &na), FLPS_OK);
    cr_assert_eq(dataset_split_iid(1000, 3, 1, 42, &b, &nb), FLPS_OK);
    cr_assert_eq(dataset_split_iid(1000, 3, 1, 43, &c, &nc), FLPS_OK);
    cr_assert_eq(na, nb);
    cr_assert(memcmp(a, b, na * sizeof(*a)) == 0);
    cr_assert_eq(na, nc);
    cr_assert(memcmp(a, c, na * sizeof(*a)) != 0, "another seed shuffles "
                                                  "differently");
    for (size_t i = 1; i < na; i++)
        sorted &= a[i - 1] < a[i];
    cr_assert_not(sorted, "the slice is shuffled, not a contiguous range");
    free(a);
    free(b);
    free(c);
}

Test(dataset, split_iid_rejects_bad_ranks)
{
    uint32_t *idx = (uint32_t *)&idx;
    size_t count = 5;

    cr_assert_eq(dataset_split_iid(10, 0, 0, 1, &idx, &count), FLPS_EINVAL);
    cr_assert_eq(dataset_split_iid(10, 2, 2, 1, &idx, &count), FLPS_EINVAL);
    cr_assert_eq(dataset_split_iid(10, 2, 0, 1, NULL, &count), FLPS_EINVAL);
    cr_assert_eq(dataset_split_iid(10, 2, 0, 1, &idx, NULL), FLPS_EINVAL);
    cr_assert_eq(idx, (uint32_t *)&idx);
    cr_assert_eq(count, 5);
}
