/* Benchmark of the math: one training step (forward + backward, batch 32,
 * one thread) of the MLP and of the CNN, ours against PyTorch's on the same
 * models, measured in the same run. PyTorch runs in a /usr/bin/python3
 * child (Debian's python3-torch); where it cannot be imported, ours is
 * measured alone and the JSON says so. Prints progress, a table, and as
 * its last line one JSON object.
 *
 * Usage: bench_model [--rounds R] [--no-torch]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "worker/dataset.h"
#include "worker/model.h"

#define BENCH_BATCH 32
#define BENCH_WARMUP 3
#define BENCH_PYTHON "/usr/bin/python3"

/* The same two models as worker/model.c builds for flworker, the same
 * loss, and a step as a training loop does it (zero the grads, forward,
 * backward; no input grad), on one thread. It prints one line:
 * "TORCH <version> <mlp ms> <cnn ms>", or "NOTORCH <why>". */
static const char bench_torch_script[] =
    "import statistics, sys, time\n"
    "try:\n"
    "    import torch\n"
    "    import torch.nn as nn\n"
    "    import torch.nn.functional as F\n"
    "except Exception as e:\n"
    "    print('NOTORCH', type(e).__name__, str(e).replace('\\n', ' '))\n"
    "    sys.exit(0)\n"
    "torch.set_num_threads(1)\n"
    "torch.manual_seed(1)\n"
    "rounds, batch, warmup = (int(a) for a in sys.argv[1:4])\n"
    "x = torch.randn(batch, 1, 28, 28)\n"
    "y = torch.randint(0, 10, (batch,))\n"
    "mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),\n"
    "                    nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))\n"
    "cnn = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(),\n"
    "                    nn.MaxPool2d(2), nn.Conv2d(32, 64, 5, padding=2),\n"
    "                    nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),\n"
    "                    nn.Linear(3136, 1024), nn.ReLU(),\n"
    "                    nn.Linear(1024, 10))\n"
    "def bench(m):\n"
    "    def step():\n"
    "        m.zero_grad()\n"
    "        F.cross_entropy(m(x), y).backward()\n"
    "    for _ in range(warmup):\n"
    "        step()\n"
    "    ts = []\n"
    "    for _ in range(rounds):\n"
    "        t = time.perf_counter()\n"
    "        step()\n"
    "        ts.append(time.perf_counter() - t)\n"
    "    return statistics.median(ts) * 1e3\n"
    "print('TORCH', torch.__version__, bench(mlp), bench(cnn))\n";

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Median of rounds timed steps of m after a warm-up, in milliseconds. */
static double bench_steps(model *m, const dataset *ds, int rounds, double *ts)
{
    float loss;

    for (int r = 0; r < BENCH_WARMUP + rounds; r++) {
        double t0 = flps_mono_s();

        if (model_train_step(m, ds->x, ds->y, BENCH_BATCH, &loss, NULL, NULL) !=
            FLPS_OK) {
            fprintf(stderr, "bench_model: a training step failed\n");
            exit(1);
        }
        if (r >= BENCH_WARMUP)
            ts[r - BENCH_WARMUP] = (flps_mono_s() - t0) * 1e3;
    }
    qsort(ts, (size_t)rounds, sizeof(*ts), bench_cmp_double);
    return rounds % 2 ? ts[rounds / 2]
                      : 0.5 * (ts[rounds / 2 - 1] + ts[rounds / 2]);
}

/* Run the PyTorch script with rounds; on success fill version and the two
 * medians and return 1. Otherwise return 0 with why filled in. */
static int bench_torch(int rounds, char *version, size_t vlen, double *mlp_ms,
                       double *cnn_ms, char *why, size_t whylen)
{
    char out[1024], arg_r[16], arg_b[16], arg_w[16], ver[64];
    size_t len = 0;
    ssize_t n;
    int fds[2], st;
    pid_t pid;

    snprintf(arg_r, sizeof(arg_r), "%d", rounds);
    snprintf(arg_b, sizeof(arg_b), "%d", BENCH_BATCH);
    snprintf(arg_w, sizeof(arg_w), "%d", BENCH_WARMUP);
    if (pipe(fds) != 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        return 0;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return 0;
    }
    if (pid == 0) {
        char *const argv[] = {"python3", "-c",  (char *)bench_torch_script,
                              arg_r,     arg_b, arg_w,
                              NULL};

        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(BENCH_PYTHON, argv);
        printf("NOTORCH cannot run %s: %s\n", BENCH_PYTHON, strerror(errno));
        fflush(stdout);
        _exit(127);
    }
    close(fds[1]);
    while (len + 1 < sizeof(out) &&
           (n = read(fds[0], out + len, sizeof(out) - 1 - len)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
    close(fds[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    out[strcspn(out, "\n")] = '\0';
    if (sscanf(out, "TORCH %63s %lf %lf", ver, mlp_ms, cnn_ms) == 3) {
        snprintf(version, vlen, "%s", ver);
        return 1;
    }
    snprintf(why, whylen, "%.400s",
             strncmp(out, "NOTORCH ", 8) == 0 ? out + 8
             : out[0]                         ? out
                                              : "no output from python3");
    return 0;
}

/* s with the characters JSON needs escaped replaced by spaces. */
static void bench_json_safe(char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            *s = ' ';
}

int main(int argc, char **argv)
{
    const size_t hidden[2] = {256, 128};
    const model_cnn_shape shape = model_cnn_shape_fmnist();
    int rounds = 21, use_torch = 1, have_torch = 0;
    double mlp_ms, cnn_ms, tmlp = 0, tcnn = 0, *ts;
    char err[160], version[64] = "", why[512] = "";
    model *mlp = NULL, *cnn = NULL;
    dataset ds = {0};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            if (flps_parse_int("--rounds", argv[++i], 1, 100000, &rounds, err,
                               sizeof(err)) != FLPS_OK) {
                fprintf(stderr, "bench_model: %s\n", err);
                return 2;
            }
        } else if (strcmp(argv[i], "--no-torch") == 0) {
            use_torch = 0;
        } else {
            fprintf(stderr, "usage: %s [--rounds R] [--no-torch]\n", argv[0]);
            return 2;
        }
    }
    ts = malloc((size_t)rounds * sizeof(*ts));
    if (ts == NULL ||
        dataset_synthetic(BENCH_BATCH, 784, 10, 1, &ds) != FLPS_OK ||
        model_create_mlp(784, hidden, 2, 10, BENCH_BATCH, 1, &mlp) != FLPS_OK ||
        model_create_cnn(&shape, BENCH_BATCH, 1, &cnn) != FLPS_OK) {
        fprintf(stderr, "bench_model: cannot build the models\n");
        return 1;
    }
    printf("bench_model: forward+backward, batch %d, one thread, median of "
           "%d steps after %d warm-up\n",
           BENCH_BATCH, rounds, BENCH_WARMUP);
    fflush(stdout);
    mlp_ms = bench_steps(mlp, &ds, rounds, ts);
    printf("  ours   mlp 784-256-128-10   %9.3f ms\n", mlp_ms);
    fflush(stdout);
    cnn_ms = bench_steps(cnn, &ds, rounds, ts);
    printf("  ours   cnn (%zu params) %9.3f ms\n", model_num_params(cnn),
           cnn_ms);
    fflush(stdout);
    if (use_torch)
        have_torch = bench_torch(rounds, version, sizeof(version), &tmlp, &tcnn,
                                 why, sizeof(why));
    else
        snprintf(why, sizeof(why), "--no-torch");
    if (have_torch) {
        printf("  torch  mlp 784-256-128-10   %9.3f ms  (ours / torch %.2f)\n",
               tmlp, mlp_ms / tmlp);
        printf("  torch  cnn                  %9.3f ms  (ours / torch %.2f)\n",
               tcnn, cnn_ms / tcnn);
    } else {
        printf("  PyTorch not measured (%s): ours alone\n", why);
    }
    bench_json_safe(why);
    bench_json_safe(version);
    printf("{\"bench\":\"model\",\"batch\":%d,\"threads\":1,\"rounds\":%d,"
           "\"mlp_ms\":%.4f,\"cnn_ms\":%.4f",
           BENCH_BATCH, rounds, mlp_ms, cnn_ms);
    if (have_torch)
        printf(",\"torch\":\"%s\",\"torch_mlp_ms\":%.4f,\"torch_cnn_ms\":%.4f,"
               "\"mlp_over_torch\":%.3f,\"cnn_over_torch\":%.3f}\n",
               version, tmlp, tcnn, mlp_ms / tmlp, cnn_ms / tcnn);
    else
        printf(",\"torch\":null,\"torch_mlp_ms\":null,\"torch_cnn_ms\":null,"
               "\"mlp_over_torch\":null,\"cnn_over_torch\":null,"
               "\"note\":\"measured ours alone: PyTorch not available (%s)\"}"
               "\n",
               why);
    model_destroy(mlp);
    model_destroy(cnn);
    dataset_fini(&ds);
    free(ts);
    return 0;
}
