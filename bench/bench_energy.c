/* Energy per iteration of a program, read from the hardware's counters
 * through common/energy.c (NVML for GPUs, RAPL for CPU packages), at the
 * GPU clock asked for through common/gpuclock.c: the tool scripts/
 * gpu-check.sh measures with. Nothing is estimated: where nothing reports
 * energy it says why and exits 77.
 *
 *   bench_energy --list
 *       the devices that report energy, how, and the first GPU's
 *       supported clocks, as one JSON line (exit 77 and one line when
 *       there is none)
 *   bench_energy [--clock default|max|MHZ] [--record PATH] [--json FILE]
 *                -- CMD [ARG...]
 *       run CMD, passing its output through; energy is measured between
 *       the lines "@energy start" and "@energy stop N" it prints (N: the
 *       iterations in between); then the clock is restored and one JSON
 *       object written (to FILE, else as the last stdout line). Exit: the
 *       command's status.
 *   bench_energy --restore PATH
 *       restore the clocks a crashed run's record names.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/energy.h"
#include "common/gpuclock.h"

#define LINE_MAX_BYTES 4096

/* What a run measured between its two marks. */
typedef struct run_marks {
    int started, stopped;
    double t0, t1;
    double j0[ENERGY_MAX_DEVICES], j1[ENERGY_MAX_DEVICES];
    unsigned long iterations;
} run_marks;

static int usage(void)
{
    fprintf(stderr,
            "usage: bench_energy --list\n"
            "       bench_energy [--clock default|max|MHZ] [--record PATH] "
            "[--json FILE] -- CMD [ARG...]\n"
            "       bench_energy --restore PATH\n");
    return 2;
}

static json_t *devices_json(energy *e, const double *joules)
{
    json_t *arr = json_array();

    for (size_t i = 0; i < energy_count(e); i++) {
        const energy_device *d = energy_device_at(e, i);
        json_t *o = json_pack(
            "{s:s, s:s, s:s, s:s}", "name", d->name, "model", d->model, "kind",
            d->kind == ENERGY_KIND_GPU ? "gpu" : "cpu-package", "method",
            energy_method_name(d->method));

        if (joules != NULL)
            json_object_set_new(o, "joules", json_real(joules[i]));
        json_array_append_new(arr, o);
    }
    return arr;
}

static int do_list(void)
{
    energy *e = NULL;
    gpuclock *g = NULL;
    const unsigned *mhz;
    size_t n = 0;
    json_t *out, *clocks;
    char *text;

    if (energy_open(NULL, &e, NULL, 0) != FLPS_OK)
        return 1;
    if (energy_count(e) == 0) {
        printf("no device reports energy: %s\n", energy_why(e));
        energy_close(e);
        return 77;
    }
    clocks = json_array();
    if (gpuclock_open(NULL, &g, NULL, 0) == FLPS_OK &&
        gpuclock_supported(g, &mhz, &n) == FLPS_OK)
        for (size_t i = 0; i < n; i++)
            json_array_append_new(clocks, json_integer(mhz[i]));
    out = json_pack("{s:o, s:s, s:o}", "devices", devices_json(e, NULL),
                    "why_not_more", energy_why(e), "gpu0_clocks_mhz", clocks);
    text = json_dumps(out, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(out);
    gpuclock_close(g);
    energy_close(e);
    return 0;
}

static int do_restore(const char *path)
{
    char msg[1024] = "";
    size_t n = 0;
    flps_err rc =
        gpuclock_restore_from_record(path, NULL, &n, msg, sizeof(msg));

    if (rc != FLPS_OK) {
        fprintf(stderr, "bench_energy: %s\n", msg);
        return 1;
    }
    printf("bench_energy: restored the clocks of %zu GPU(s) from %s\n", n,
           path);
    return 0;
}

/* A line of the command's output: passed through; a mark reads energy. */
static void on_line(energy *e, run_marks *m, const char *line)
{
    fputs(line, stdout);
    fflush(stdout);
    if (strncmp(line, "@energy start", 13) == 0) {
        energy_read(e, m->j0, ENERGY_MAX_DEVICES);
        m->t0 = flps_mono_s();
        m->started = 1;
    } else if (strncmp(line, "@energy stop", 12) == 0 && m->started) {
        energy_read(e, m->j1, ENERGY_MAX_DEVICES);
        m->t1 = flps_mono_s();
        m->iterations = strtoul(line + 12, NULL, 10);
        m->stopped = 1;
    }
}

/* Read the command's output to its end, sampling power-integral devices
 * every ENERGY_POWER_SAMPLE_SECONDS meanwhile. */
static void pump(int fd, energy *e, run_marks *m)
{
    char buf[LINE_MAX_BYTES];
    size_t used = 0;

    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(ENERGY_POWER_SAMPLE_SECONDS * 1000));
        ssize_t got;

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            energy_sample(e);
            continue;
        }
        got = read(fd, buf + used, sizeof(buf) - 1 - used);
        if (got <= 0)
            break;
        used += (size_t)got;
        buf[used] = '\0';
        for (char *nl; (nl = strchr(buf, '\n')) != NULL;) {
            char c = nl[1];

            nl[1] = '\0';
            on_line(e, m, buf);
            nl[1] = c;
            used -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, used + 1);
        }
        if (used == sizeof(buf) - 1) { /* a line too long: pass it on */
            on_line(e, m, buf);
            used = 0;
        }
    }
    if (used > 0)
        on_line(e, m, buf);
}

static pid_t start(char **argv, int *fd)
{
    int p[2];
    pid_t pid;

    if (pipe(p) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        close(p[0]);
        close(p[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "bench_energy: cannot run %s: %s\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    close(p[1]);
    *fd = p[0];
    return pid;
}

static json_t *result_json(energy *e, const run_marks *m, const char *asked,
                           unsigned set_mhz, const char *clock_msg, int status)
{
    double j[ENERGY_MAX_DEVICES] = {0}, gpu = 0, total = 0;
    json_t *o;

    for (size_t i = 0; i < energy_count(e) && m->stopped; i++) {
        j[i] = m->j1[i] - m->j0[i];
        total += j[i];
        if (energy_device_at(e, i)->kind == ENERGY_KIND_GPU)
            gpu += j[i];
    }
    o = json_pack("{s:s, s:i, s:s, s:i, s:s}", "clock_asked", asked,
                  "clock_set_mhz", (int)set_mhz, "clock_message", clock_msg,
                  "exit_status", status, "why_not_more", energy_why(e));
    json_object_set_new(o, "devices", devices_json(e, m->stopped ? j : NULL));
    if (m->stopped && m->iterations > 0) {
        json_object_set_new(o, "iterations", json_integer(m->iterations));
        json_object_set_new(o, "seconds", json_real(m->t1 - m->t0));
        json_object_set_new(o, "joules", json_real(total));
        json_object_set_new(o, "joules_per_iteration",
                            json_real(total / m->iterations));
        json_object_set_new(o, "gpu_joules_per_iteration",
                            json_real(gpu / m->iterations));
        json_object_set_new(o, "seconds_per_iteration",
                            json_real((m->t1 - m->t0) / m->iterations));
    }
    return o;
}

/* Set the clock asked for: its MHz (0: default), or 0 with msg saying
 * why it runs at the default. */
static unsigned set_clock(gpuclock **g, const char *asked, const char *record,
                          char *msg, size_t msglen)
{
    gpuclock_spec spec;
    gpuclock_opts o = {NULL, NULL, record};
    unsigned mhz = 0;

    if (gpuclock_parse(asked, &spec, msg, msglen) != FLPS_OK ||
        spec.mode == GPUCLOCK_DEFAULT)
        return 0;
    if (spec.mode == GPUCLOCK_AUTO) {
        snprintf(msg, msglen, "bench_energy measures one clock per run");
        return 0;
    }
    if (gpuclock_open(&o, g, msg, msglen) != FLPS_OK ||
        gpuclock_apply(*g, &spec, &mhz, msg, msglen) != FLPS_OK)
        return 0;
    snprintf(msg, msglen, "set through NVML");
    return mhz;
}

static int do_run(char **cmd, const char *asked, const char *record,
                  const char *json_path)
{
    energy *e = NULL;
    gpuclock *g = NULL;
    run_marks m = {0};
    char msg[1024] = "";
    unsigned set_mhz;
    int fd = -1, status = 0, code;
    pid_t pid;
    json_t *out;

    if (energy_open(NULL, &e, msg, sizeof(msg)) != FLPS_OK) {
        fprintf(stderr, "bench_energy: %s\n", msg);
        return 1;
    }
    set_mhz = set_clock(&g, asked, record, msg, sizeof(msg));
    if (strcmp(asked, "default") != 0 && set_mhz == 0)
        fprintf(stderr, "bench_energy: %s\n", msg);
    signal(SIGPIPE, SIG_IGN);
    pid = start(cmd, &fd);
    if (pid < 0) {
        fprintf(stderr, "bench_energy: cannot start %s\n", cmd[0]);
        gpuclock_close(g);
        energy_close(e);
        return 1;
    }
    pump(fd, e, &m);
    close(fd);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    gpuclock_close(g); /* restores before anything else can fail */
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    out = result_json(e, &m, asked, set_mhz, msg, code);
    if (json_path != NULL)
        json_dump_file(out, json_path, JSON_INDENT(2));
    else {
        char *text = json_dumps(out, JSON_COMPACT);

        printf("%s\n", text);
        free(text);
    }
    json_decref(out);
    energy_close(e);
    return code;
}

int main(int argc, char **argv)
{
    const char *asked = "default", *record = NULL, *json_path = NULL;
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0 && argc == 2)
            return do_list();
        if (strcmp(argv[i], "--restore") == 0 && i + 1 < argc)
            return do_restore(argv[i + 1]);
        if (strcmp(argv[i], "--") == 0)
            break;
        if (i + 1 >= argc)
            return usage();
        if (strcmp(argv[i], "--clock") == 0)
            asked = argv[++i];
        else if (strcmp(argv[i], "--record") == 0)
            record = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            json_path = argv[++i];
        else
            return usage();
    }
    if (i + 1 >= argc)
        return usage();
    return do_run(argv + i + 1, asked, record, json_path);
}
