/* Datasets for the training runtime: the Fashion-MNIST IDX loader, a
 * synthetic Gaussian-cluster set, and the seeded IID split by worker. */
#include "worker/dataset.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/rng.h"
#include "worker/partition.h"

#define FMNIST_IMAGES_MAGIC 0x00000803u
#define FMNIST_LABELS_MAGIC 0x00000801u
#define FMNIST_SIDE 28u
#define FMNIST_CLASSES 10u
/* Mean and std of the training set's pixels scaled to [0, 1]. */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

/* Uniform in (0, 1]: never 0, so log() below stays finite. */
static double ds_rng_unit(uint64_t *state)
{
    return ((flps_splitmix64(state) >> 11) + 1) * 0x1.0p-53;
}

/* One standard normal sample (Box-Muller; the second value is dropped to
 * keep the generator state the only state). */
static double ds_rng_normal(uint64_t *state)
{
    double u1 = ds_rng_unit(state);
    double u2 = ds_rng_unit(state);

    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint32_t ds_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

/* An IDX header decoded from its bytes: magic, then one big-endian count
 * per dimension. */
typedef struct {
    uint32_t magic;
    uint32_t dims[3];
} ds_idx_header;

static void ds_idx_decode(const unsigned char *bytes, size_t ndims,
                          ds_idx_header *h)
{
    h->magic = ds_be32(bytes);
    for (size_t i = 0; i < ndims; i++)
        h->dims[i] = ds_be32(bytes + 4 + 4 * i);
}

static flps_err ds_open(const char *path, gzFile *out)
{
    gzFile gz = gzopen(path, "rb");

    if (gz == NULL) {
        /* gzopen leaves errno from open(2), or 0 if zlib ran out of memory. */
        log_error("dataset: cannot open %s: %s", path,
                  errno ? strerror(errno) : "out of memory");
        return FLPS_EIO;
    }
    gzbuffer(gz, 1u << 17);
    *out = gz;
    return FLPS_OK;
}

/* Read exactly len bytes. A short read is a truncated file (FLPS_EPROTO),
 * as is a corrupt gzip stream; a failing read(2) is FLPS_EIO. what names the
 * part being read, for the log line. */
static flps_err ds_read(gzFile gz, const char *path, const char *what,
                        void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t done = 0;

    while (done < len) {
        size_t want = len - done;
        int got;

        if (want > (1u << 30))
            want = 1u << 30;
        got = gzread(gz, p + done, (unsigned)want);
        if (got <= 0) {
            int zerr = Z_OK;
            const char *msg = gzerror(gz, &zerr);

            if (zerr == Z_ERRNO) {
                log_error("dataset: %s: read failed in %s: %s", path, what,
                          strerror(errno));
                return FLPS_EIO;
            }
            if (zerr != Z_OK && zerr != Z_BUF_ERROR) {
                log_error("dataset: %s: corrupt gzip data in %s: %s", path,
                          what, msg);
                return FLPS_EPROTO;
            }
            log_error("dataset: %s: truncated in %s: expected %zu bytes, "
                      "the file ends after %zu",
                      path, what, len, done);
            return FLPS_EPROTO;
        }
        done += (size_t)got;
    }
    return FLPS_OK;
}

/* The declared counts must account for the whole file: trailing bytes mean
 * the header lies about the sizes. */
static flps_err ds_expect_eof(gzFile gz, const char *path)
{
    unsigned char extra;
    int got = gzread(gz, &extra, 1);

    if (got > 0) {
        log_error("dataset: %s: trailing bytes after the declared data", path);
        return FLPS_EPROTO;
    }
    if (got < 0) {
        int zerr = Z_OK;
        const char *msg = gzerror(gz, &zerr);

        log_error("dataset: %s: error at end of data: %s", path, msg);
        return zerr == Z_ERRNO ? FLPS_EIO : FLPS_EPROTO;
    }
    return FLPS_OK;
}

/* Open an idx file of ndims dimensions, read its header into *h and check
 * its magic; kind ("images", "labels") is for the log line. On FLPS_OK the
 * caller owns *gz (gzclose). */
static flps_err ds_open_idx(const char *path, size_t ndims, uint32_t magic,
                            const char *kind, gzFile *gz, ds_idx_header *h)
{
    unsigned char hdr[4 + 4 * 3];
    gzFile f = NULL;
    flps_err rc = ds_open(path, &f);

    if (rc != FLPS_OK)
        return rc;
    rc = ds_read(f, path, "the header", hdr, 4 + 4 * ndims);
    if (rc != FLPS_OK)
        goto fail;
    ds_idx_decode(hdr, ndims, h);
    if (h->magic != magic) {
        log_error("dataset: %s: bad magic 0x%08x, expected 0x%08x (idx%zu "
                  "unsigned-byte %s)",
                  path, h->magic, magic, ndims, kind);
        rc = FLPS_EPROTO;
        goto fail;
    }
    *gz = f;
    return FLPS_OK;

fail:
    gzclose(f);
    return rc;
}

/* Read an idx3 image file into freshly allocated normalised floats. */
static flps_err ds_read_images(const char *path, float **x, size_t *n)
{
    unsigned char chunk[1u << 14];
    float lut[256];
    ds_idx_header h;
    gzFile gz = NULL;
    float *buf = NULL;
    size_t total, done = 0;
    flps_err rc;

    rc = ds_open_idx(path, 3, FMNIST_IMAGES_MAGIC, "images", &gz, &h);
    if (rc != FLPS_OK)
        return rc;
    rc = FLPS_EPROTO;
    if (h.dims[1] != FMNIST_SIDE || h.dims[2] != FMNIST_SIDE) {
        log_error("dataset: %s: images are %ux%u, expected %ux%u", path,
                  h.dims[1], h.dims[2], FMNIST_SIDE, FMNIST_SIDE);
        goto out;
    }
    if (h.dims[0] == 0) {
        log_error("dataset: %s: declares no images", path);
        goto out;
    }
    total = (size_t)h.dims[0] * FMNIST_SIDE * FMNIST_SIDE;
    rc = FLPS_ENOMEM;
    buf = flps_malloc(total * sizeof(*buf));
    if (buf == NULL) {
        log_error("dataset: %s: no memory for %u images", path, h.dims[0]);
        goto out;
    }
    for (int p = 0; p < 256; p++)
        lut[p] = ((float)p / 255.0f - FMNIST_MEAN) / FMNIST_STD;
    while (done < total) {
        size_t len =
            total - done < sizeof(chunk) ? total - done : sizeof(chunk);

        rc = ds_read(gz, path, "the pixels", chunk, len);
        if (rc != FLPS_OK)
            goto out;
        for (size_t i = 0; i < len; i++)
            buf[done + i] = lut[chunk[i]];
        done += len;
    }
    rc = ds_expect_eof(gz, path);
    if (rc != FLPS_OK)
        goto out;
    *x = buf;
    *n = h.dims[0];
    buf = NULL;

out:
    flps_free(buf);
    gzclose(gz);
    return rc;
}

/* Read an idx1 label file holding exactly n labels, each below classes. */
static flps_err ds_read_labels(const char *path, size_t n, const char *images,
                               uint8_t **y)
{
    ds_idx_header h;
    gzFile gz = NULL;
    uint8_t *buf = NULL;
    flps_err rc;

    rc = ds_open_idx(path, 1, FMNIST_LABELS_MAGIC, "labels", &gz, &h);
    if (rc != FLPS_OK)
        return rc;
    rc = FLPS_EPROTO;
    if (h.dims[0] != n) {
        log_error("dataset: %s declares %u labels but %s has %zu images", path,
                  h.dims[0], images, n);
        goto out;
    }
    rc = FLPS_ENOMEM;
    buf = flps_malloc(n);
    if (buf == NULL) {
        log_error("dataset: %s: no memory for %zu labels", path, n);
        goto out;
    }
    rc = ds_read(gz, path, "the labels", buf, n);
    if (rc != FLPS_OK)
        goto out;
    rc = ds_expect_eof(gz, path);
    if (rc != FLPS_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] >= FMNIST_CLASSES) {
            log_error("dataset: %s: label %zu is %u, expected 0..%u", path, i,
                      buf[i], FMNIST_CLASSES - 1);
            rc = FLPS_EPROTO;
            goto out;
        }
    }
    *y = buf;
    buf = NULL;

out:
    flps_free(buf);
    gzclose(gz);
    return rc;
}

flps_err dataset_load_fmnist(const char *dir, const char *split, dataset *out)
{
    char images[4096], labels[4096];
    const char *prefix;
    dataset ds = {0};
    flps_err rc;
    int ni, nl;

    if (dir == NULL || split == NULL || out == NULL)
        return FLPS_EINVAL;
    if (strcmp(split, "train") == 0) {
        prefix = "train";
    } else if (strcmp(split, "test") == 0) {
        prefix = "t10k";
    } else {
        log_error("dataset: unknown Fashion-MNIST split '%s' (train or test)",
                  split);
        return FLPS_EINVAL;
    }
    ni = snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", dir,
                  prefix);
    nl = snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", dir,
                  prefix);
    if (ni < 0 || nl < 0 || (size_t)ni >= sizeof(images) ||
        (size_t)nl >= sizeof(labels)) {
        log_error("dataset: directory name too long: %s", dir);
        return FLPS_EINVAL;
    }
    rc = ds_read_images(images, &ds.x, &ds.n);
    if (rc != FLPS_OK)
        return rc;
    rc = ds_read_labels(labels, ds.n, images, &ds.y);
    if (rc != FLPS_OK) {
        flps_free(ds.x);
        return rc;
    }
    ds.dim = FMNIST_SIDE * FMNIST_SIDE;
    ds.classes = FMNIST_CLASSES;
    *out = ds;
    return FLPS_OK;
}

/* Class centres are N(0, 1) per feature and samples add N(0, 0.5^2) noise,
 * so for dim >= 10 or so the classes are nearly separable; sample i has label
 * i % classes, so every contiguous window is close to balanced. */
flps_err dataset_synthetic(size_t n, size_t dim, size_t classes, uint64_t seed,
                           dataset *out)
{
    uint64_t rng = seed;
    float *centres = NULL;
    dataset ds = {0};

    if (out == NULL || n == 0 || dim == 0 || classes == 0 || classes > 256)
        return FLPS_EINVAL;
    if (dim > SIZE_MAX / sizeof(float) / (n > classes ? n : classes))
        return FLPS_EINVAL;
    centres = flps_malloc(classes * dim * sizeof(*centres));
    ds.x = flps_malloc(n * dim * sizeof(*ds.x));
    ds.y = flps_malloc(n);
    if (centres == NULL || ds.x == NULL || ds.y == NULL) {
        flps_free(centres);
        dataset_fini(&ds);
        return FLPS_ENOMEM;
    }
    for (size_t i = 0; i < classes * dim; i++)
        centres[i] = (float)ds_rng_normal(&rng);
    for (size_t i = 0; i < n; i++) {
        size_t c = i % classes;

        ds.y[i] = (uint8_t)c;
        for (size_t j = 0; j < dim; j++)
            ds.x[i * dim + j] =
                centres[c * dim + j] + 0.5f * (float)ds_rng_normal(&rng);
    }
    flps_free(centres);
    ds.n = n;
    ds.dim = dim;
    ds.classes = classes;
    *out = ds;
    return FLPS_OK;
}

void dataset_fini(dataset *ds)
{
    if (ds == NULL)
        return;
    flps_free(ds->x);
    flps_free(ds->y);
    memset(ds, 0, sizeof(*ds));
}

flps_err dataset_split_iid(size_t n, uint32_t workers, uint32_t rank,
                           uint64_t seed, uint32_t **idx, size_t *count)
{
    uint32_t *perm, *slice;
    size_t base, extra, start, len;
    flps_err rc;

    if (idx == NULL || count == NULL || workers == 0 || rank >= workers ||
        (uint64_t)n > (uint64_t)UINT32_MAX + 1)
        return FLPS_EINVAL;
    /* Every rank cuts its slice of the same seeded permutation, so the
     * slices partition it without any communication. */
    rc = partition_permutation(n, seed, &perm);
    if (rc != FLPS_OK)
        return rc;
    base = n / workers;
    extra = n % workers;
    start = rank * base + (rank < extra ? rank : extra);
    len = base + (rank < extra);
    slice = flps_malloc(len * sizeof(*slice));
    if (slice == NULL) {
        flps_free(perm);
        return FLPS_ENOMEM;
    }
    if (len > 0)
        memcpy(slice, perm + start, len * sizeof(*slice));
    flps_free(perm);
    *idx = slice;
    *count = len;
    return FLPS_OK;
}

void dataset_copy_sample(const dataset *ds, size_t s, float *x, uint8_t *y,
                         size_t b)
{
    memcpy(x + b * ds->dim, ds->x + s * ds->dim, ds->dim * sizeof(float));
    y[b] = ds->y[s];
}
