/* The GPU clock of a job (`gpu_clock: default | max | MHZ | auto`): the
 * value's parser, setting the clock through NVML (locked clocks, else
 * application clocks, whichever the GPU and the permissions allow) and
 * restoring it, an on-disk record of what was changed so a supervisor can
 * restore the clocks of a worker that crashed, and `auto`: measure joules
 * and seconds per iteration at a few supported clocks during the first
 * iterations and keep the lowest energy within gpu_clock_slowdown of the
 * fastest.
 *
 * Not thread-safe: one thread uses a gpuclock handle. */
#ifndef FLPS_COMMON_GPUCLOCK_H
#define FLPS_COMMON_GPUCLOCK_H

#include <stddef.h>

#include "common/err.h"

#define GPUCLOCK_MAX_DEVICES 16
#define GPUCLOCK_MAX_CLOCKS 256
/* gpu_clock_slowdown's default: 5% slower than the fastest at most. */
#define GPUCLOCK_SLOWDOWN_DEFAULT 0.05
/* A clock given in MHz must lie in this range (every GPU NVML drives). */
#define GPUCLOCK_MHZ_MIN 100
#define GPUCLOCK_MHZ_MAX 10000

/* --- the job file's value -------------------------------------------- */

typedef enum {
    GPUCLOCK_DEFAULT, /* leave the clocks alone */
    GPUCLOCK_MAX,     /* the highest supported graphics clock */
    GPUCLOCK_MHZ,     /* the supported clock nearest to mhz */
    GPUCLOCK_AUTO,    /* measured: gpuclock_auto below */
} gpuclock_mode;

typedef struct gpuclock_spec {
    gpuclock_mode mode;
    unsigned mhz; /* GPUCLOCK_MHZ only */
} gpuclock_spec;

/* Parse "default", "max", "auto" or a whole number of MHz in
 * [GPUCLOCK_MHZ_MIN, GPUCLOCK_MHZ_MAX] into *out (written only on
 * FLPS_OK). Errors: FLPS_EINVAL with errbuf e.g. "gpu_clock: 'fast' is not
 * default, max, auto or a clock in MHz (100 to 10000)". No I/O. */
flps_err gpuclock_parse(const char *text, gpuclock_spec *out, char *errbuf,
                        size_t errlen);

/* Parse gpu_clock_slowdown: a percentage ("5%", "2.5%") or a fraction
 * ("0.05") in [0, 1) into *out as a fraction. Errors: FLPS_EINVAL with
 * errbuf ("gpu_clock_slowdown: '5' is not a fraction below 1 or a
 * percentage (write 5% or 0.05)"). No I/O. */
flps_err gpuclock_parse_slowdown(const char *text, double *out, char *errbuf,
                                 size_t errlen);

/* "default", "max", "auto" or "1410": what gpuclock_parse reads back. */
char *gpuclock_spec_format(const gpuclock_spec *s, char *buf, size_t len);

/* --- setting and restoring ------------------------------------------- */

/* How a device's clock was changed: a set of these bits (both when auto
 * moved from one way to the other). */
#define GPUCLOCK_VIA_LOCKED 1u       /* nvmlDeviceSetGpuLockedClocks */
#define GPUCLOCK_VIA_APPLICATIONS 2u /* nvmlDeviceSetApplicationsClocks */

/* "locked", "applications", "locked+applications" or "none". */
const char *gpuclock_via_name(unsigned via);

typedef struct gpuclock_opts {
    /* NULL or "": $FLPS_NVML_LIBRARY or libnvidia-ml.so.1 */
    const char *nvml_library;
    const char *gpus; /* nvmldl_select's words; NULL: every GPU */
    /* Where the record of changed clocks is kept (the job's work
     * directory, one file per worker); NULL: no record (a crash then
     * leaves the clocks set until the driver resets them). A record
     * already there (a crashed run's) is restored at open. */
    const char *record_path;
} gpuclock_opts;

typedef struct gpuclock gpuclock;

/* Open NVML and the GPUs (gpuclock_count of them), with each one's
 * supported graphics clocks at its highest memory clock. Absent NVML or
 * GPUs is no error: there are 0 and gpuclock_why says why, and a later
 * set is refused with that line. Errors: FLPS_ENOMEM; FLPS_EINVAL (a GPU
 * list naming no GPU). Ownership: caller owns *out, and gpuclock_close
 * restores what was changed (as gpuclock_restore, logging a failure),
 * closes NVML and frees it (NULL: nothing). Does I/O. */
flps_err gpuclock_open(const gpuclock_opts *opts, gpuclock **out, char *errbuf,
                       size_t errlen);
size_t gpuclock_count(const gpuclock *g);
const char *gpuclock_why(const gpuclock *g); /* "" or the line */
void gpuclock_close(gpuclock *g);

/* The first GPU's supported graphics clocks in MHz, highest first, into
 * *mhz (borrowed until gpuclock_close) and *n. Errors: FLPS_ESTATE (no
 * GPU, or NVML lists no supported clock for it). */
flps_err gpuclock_supported(const gpuclock *g, const unsigned **mhz, size_t *n);

/* The clock of mhz[0..n) nearest to want (the higher on a tie); 0 when n
 * is 0. Pure. */
unsigned gpuclock_nearest(const unsigned *mhz, size_t n, unsigned want);

/* Run every GPU at the supported clock nearest to mhz: the record is
 * written first (so a crash in between still restores), then locked
 * clocks are tried, then application clocks (at the highest memory
 * clock). *set_mhz (may be NULL) gets the clock set on the first GPU.
 * Errors: FLPS_ESTATE when a GPU refuses (no permission, not supported,
 * or no GPU at all): whatever was changed is restored, the GPUs run at
 * their default clocks and msg holds one line saying so and why; FLPS_EIO
 * when the record cannot be written (nothing changed). Does I/O. */
flps_err gpuclock_set(gpuclock *g, unsigned mhz, unsigned *set_mhz, char *msg,
                      size_t msglen);

/* gpu_clock's default, max or MHZ (AUTO is FLPS_EINVAL: see
 * gpuclock_auto). default changes nothing and sets *set_mhz to 0. */
flps_err gpuclock_apply(gpuclock *g, const gpuclock_spec *spec,
                        unsigned *set_mhz, char *msg, size_t msglen);

/* Reset what this handle changed, then remove the record. Errors:
 * FLPS_ESYS (NVML refused a reset: the record stays, msg says which). */
flps_err gpuclock_restore(gpuclock *g, char *msg, size_t msglen);

/* --- the record (for the supervisor) --------------------------------- */

typedef struct gpuclock_record_dev {
    unsigned index;   /* NVML's index when it was written */
    char uuid[96];    /* "-" when NVML gave none */
    unsigned via;     /* GPUCLOCK_VIA_* bits: what to reset */
    unsigned mhz;     /* the graphics clock set */
    unsigned mem_mhz; /* the memory clock (applications only) */
} gpuclock_record_dev;

typedef struct gpuclock_record {
    long pid; /* the process that changed the clocks */
    size_t ndev;
    gpuclock_record_dev dev[GPUCLOCK_MAX_DEVICES];
} gpuclock_record;

/* The record as text, into buf (NUL-terminated, cut to len). Returns the
 * length the whole text needs (as snprintf). No I/O. */
size_t gpuclock_record_format(const gpuclock_record *r, char *buf, size_t len);

/* Read text (as gpuclock_record_format writes it) into *out. Errors:
 * FLPS_EPROTO with errbuf naming the line. No I/O. */
flps_err gpuclock_record_parse(const char *text, gpuclock_record *out,
                               char *errbuf, size_t errlen);

/* For a supervisor (flagent) after a worker exited: reset every clock the
 * record at path names (by UUID, else index), then remove the file.
 * nvml_library as in gpuclock_opts. *restored (may be NULL) gets how many
 * devices were reset. No file: FLPS_OK, 0 restored. Errors: FLPS_ESTATE
 * (the writer, the record's pid, is still running: restore only after it
 * was reaped), FLPS_EPROTO (unreadable record), FLPS_ESYS (NVML missing or
 * refused; the record stays for a later try), each with one line in msg.
 * Does I/O. */
flps_err gpuclock_restore_from_record(const char *path,
                                      const char *nvml_library,
                                      size_t *restored, char *msg,
                                      size_t msglen);

/* --- auto ------------------------------------------------------------ */

/* One measured clock: seconds and joules per iteration. */
typedef struct gpuclock_sample {
    unsigned mhz;
    double s_per_iter;
    double j_per_iter;
} gpuclock_sample;

/* The sample to keep: the lowest joules per iteration among those whose
 * seconds per iteration are at most (1 + slowdown) times the fastest's
 * (the higher clock on a tie). Samples with a non-finite or non-positive
 * time or energy are skipped. *best indexes s. Errors: FLPS_EINVAL (no
 * valid sample, or slowdown negative). Pure. */
flps_err gpuclock_auto_choose(const gpuclock_sample *s, size_t n,
                              double slowdown, size_t *best);

/* The clocks auto tries, from supported (any order): the highest, then
 * the supported clocks nearest to 92.5%, 85%, 77.5%, ... of it (the
 * sweet spot of DVFS studies lies in the upper range), want of them at
 * most, distinct, highest first, into out. Returns how many. Pure. */
size_t gpuclock_auto_candidates(const unsigned *supported, size_t n,
                                size_t want, unsigned *out);

#define GPUCLOCK_AUTO_MAX 8
#define GPUCLOCK_AUTO_CANDIDATES 5

typedef enum {
    GPUCLOCK_AUTO_WAIT, /* keep measuring at the current clock */
    GPUCLOCK_AUTO_SET,  /* set *mhz now, then restart the meter's window */
    GPUCLOCK_AUTO_DONE, /* set *mhz (the choice) and stop feeding */
} gpuclock_auto_action;

/* auto's walk over its candidates, fed by the energy meter's windows:
 * per candidate, `settle` windows are discarded (the clock change and the
 * GPU's ramp), then `measure` windows averaged. Caller's memory. */
typedef struct gpuclock_auto {
    unsigned cand[GPUCLOCK_AUTO_MAX];
    size_t ncand;
    double slowdown;
    unsigned settle, measure;
    size_t cur;       /* the candidate being measured */
    unsigned windows; /* windows seen at it */
    double sum_s, sum_j;
    gpuclock_sample samples[GPUCLOCK_AUTO_MAX];
    size_t nsamples;
    int done;
    unsigned chosen; /* valid when done */
} gpuclock_auto;

/* Candidates (at most GPUCLOCK_AUTO_MAX used), slowdown as a fraction;
 * settle 0 is allowed, measure 0 means 1. */
void gpuclock_auto_init(gpuclock_auto *a, const unsigned *cand, size_t n,
                        double slowdown, unsigned settle, unsigned measure);

/* The first step: SET the first candidate (DONE at once with 0, the
 * default, when there is none). */
gpuclock_auto_action gpuclock_auto_begin(gpuclock_auto *a, unsigned *mhz);

/* A window closed at the current candidate: WAIT, SET the next one, or
 * DONE with the choice (gpuclock_auto_choose over the samples; 0 when no
 * sample was valid: then restore the default with gpuclock_restore).
 * After DONE it keeps answering DONE with the choice. */
gpuclock_auto_action gpuclock_auto_feed(gpuclock_auto *a, double s_per_iter,
                                        double j_per_iter, unsigned *mhz);

#endif
