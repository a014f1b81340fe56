/* The tests' side of the NVML stub (tests/fakes/nvml_stub.c): write its
 * state file, read a key back, advance its virtual time. Header-only, for
 * the tests of every folder; FLPS_NVML_STUB is the stub's path (CMake). */
#ifndef FLPS_TESTS_NVML_STUB_CTL_H
#define FLPS_TESTS_NVML_STUB_CTL_H

#include <criterion/criterion.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct stub_ctl {
    char dir[256];   /* a temporary directory for the state and records */
    char state[300]; /* dir/state */
} stub_ctl;

/* A state file holding text ("key value" lines: nvml_stub.c's header),
 * named by FLPS_NVML_STUB_STATE for this process and its children. */
static inline void stub_init(stub_ctl *c, const char *text)
{
    const char *tmp = getenv("TMPDIR");
    FILE *f;

    snprintf(c->dir, sizeof(c->dir), "%s/flps-nvml-XXXXXX", tmp ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(c->dir));
    snprintf(c->state, sizeof(c->state), "%s/state", c->dir);
    f = fopen(c->state, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    /* The stub's device is every process's, as /dev/nvidia* is: the job
     * uids a root flagent runs tasks as read and set it too. */
    cr_assert_eq(chmod(c->dir, 0755), 0);
    cr_assert_eq(chmod(c->state, 0666), 0);
    setenv("FLPS_NVML_STUB_STATE", c->state, 1);
}

/* The value of key in the state now ("" when absent), into buf. Read
 * under the stub's lock: a process of the stub rewriting the state must
 * not be seen half-way (its file empty between truncate and write). */
static inline const char *stub_get(const stub_ctl *c, const char *key,
                                   char *buf, size_t len)
{
    FILE *f = fopen(c->state, "r");
    char line[1024];
    size_t k = strlen(key);

    buf[0] = '\0';
    cr_assert_not_null(f);
    flock(fileno(f), LOCK_SH);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, k) == 0 && line[k] == ' ') {
            size_t n = strcspn(line + k + 1, "\n");

            n = n < len - 1 ? n : len - 1;
            memcpy(buf, line + k + 1, n);
            buf[n] = '\0';
        }
    fclose(f);
    return buf;
}

static inline double stub_num(const stub_ctl *c, const char *key)
{
    char buf[64];

    return strtod(stub_get(c, key, buf, sizeof(buf)), NULL);
}

/* Set key to value in the state (as a GPU's state changes under the
 * process: another program setting clocks, a GPU lost). */
static inline void stub_set(const stub_ctl *c, const char *key,
                            const char *value)
{
    FILE *f = fopen(c->state, "r");
    char line[1024], *text = NULL;
    size_t len = 0, k = strlen(key);
    FILE *out = open_memstream(&text, &len);

    cr_assert_not_null(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (!(strncmp(line, key, k) == 0 && line[k] == ' '))
            fputs(line, out);
    fclose(f);
    fprintf(out, "%s %s\n", key, value);
    fclose(out);
    f = fopen(c->state, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    free(text);
}

/* Every GPU's counter advances by its power over seconds of virtual
 * time. */
static inline void stub_advance(double seconds)
{
    void *h = dlopen(FLPS_NVML_STUB, RTLD_NOW | RTLD_LOCAL);
    void *sym;
    void (*fn)(double);

    cr_assert_not_null(h, "%s", dlerror());
    sym = dlsym(h, "flps_nvml_stub_advance");
    cr_assert_not_null(sym);
    memcpy(&fn, &sym, sizeof(fn));
    fn(seconds);
    dlclose(h);
}

static inline void stub_fini(stub_ctl *c)
{
    char cmd[300];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    cr_assert_eq(system(cmd), 0);
    unsetenv("FLPS_NVML_STUB_STATE");
}

#endif
