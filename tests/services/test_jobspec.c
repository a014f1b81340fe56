/* Tests for services/jobspec.c: parsing, defaults, messages, files. */
#include "services/jobspec.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"

#define ERRLEN 1024

static const char full_yaml[] =
    "# every key, none at its default\n"
    "name: full-job_1.x\n"
    "model: cnn\n"
    "dataset: synthetic\n"
    "data_dir: /tmp/somewhere\n"
    "partition: dirichlet:0.5\n"
    "workers: 8\n"
    "servers: 3\n"
    "mode: ssp:4\n"
    "iterations: 600\n"
    "rounds: 20\n"
    "local_steps: 5\n"
    "client_fraction: 0.25\n"
    "clients: 100\n"
    "round_deadline: 12.5\n"
    "batch_size: 64\n"
    "lr: 0.1\n"
    "momentum: 0.5\n"
    "compression: gtopk:0.01   # the paper's setting\n"
    "transport: rdma\n"
    "seed: 42\n"
    "eval_every: 0\n"
    "part_size: 4096\n"
    "checkpoint_interval: 30.5\n"
    "max_restarts: 3\n"
    "priority: 7\n"
    "cpus_per_worker: 2.5\n"
    "memory_per_worker: 3Gi\n"
    "gpus_per_worker: 1\n"
    "cpus_per_server: 0.5\n"
    "memory_per_server: 256M\n"
    "time_limit: 600\n";

static flps_err parse(const char *text, jobspec *out, char *err)
{
    return jobspec_parse(text, strlen(text), out, err, ERRLEN);
}

/* Parse text that must fail: FLPS_ECONFIG, *out untouched, and every
 * needle (NULL-terminated list) in the message. */
static void expect_error(const char *text, ...)
{
    jobspec spec, sentinel;
    char err[ERRLEN] = "";
    va_list ap;
    const char *needle;

    memset(&spec, 0xA5, sizeof(spec));
    memcpy(&sentinel, &spec, sizeof(spec));
    cr_assert_eq(parse(text, &spec, err), FLPS_ECONFIG, "accepted:\n%s", text);
    cr_assert_eq(memcmp(&spec, &sentinel, sizeof(spec)), 0,
                 "a failed parse must leave *out untouched");
    cr_assert_eq(strchr(err, '\n'), NULL, "one line: %s", err);
    va_start(ap, text);
    while ((needle = va_arg(ap, const char *)) != NULL)
        cr_assert_neq(strstr(err, needle), NULL, "message lacks \"%s\": %s",
                      needle, err);
    va_end(ap);
}

static void parse_ok(const char *text, jobspec *out)
{
    char err[ERRLEN] = "";

    cr_assert_eq(parse(text, out, err), FLPS_OK, "rejected: %s\n%s", err, text);
}

Test(jobspec, parses_a_full_file_with_every_key)
{
    jobspec s;

    parse_ok(full_yaml, &s);
    cr_assert_str_eq(s.name, "full-job_1.x");
    cr_assert_eq(s.model, JOBSPEC_MODEL_CNN);
    cr_assert_eq(s.dataset, JOBSPEC_DATASET_SYNTHETIC);
    cr_assert_str_eq(s.data_dir, "/tmp/somewhere");
    cr_assert_eq(s.partition, JOBSPEC_PARTITION_DIRICHLET);
    cr_assert_eq(s.dirichlet_alpha, 0.5);
    cr_assert_eq(s.workers, 8);
    cr_assert_eq(s.servers, 3);
    cr_assert_eq(s.mode, JOBSPEC_MODE_SSP);
    cr_assert_eq(s.staleness, 4);
    cr_assert_eq(s.iterations, 600);
    cr_assert_eq(s.rounds, 20);
    cr_assert_eq(s.local_steps, 5);
    cr_assert_eq(s.client_fraction, 0.25);
    cr_assert_eq(s.clients, 100);
    cr_assert_eq(s.round_deadline, 12.5);
    cr_assert_eq(s.batch_size, 64);
    cr_assert_eq(s.lr, 0.1);
    cr_assert_eq(s.momentum, 0.5);
    cr_assert_eq(s.compression, CODEC_GTOPK);
    cr_assert_eq(s.density, 0.01);
    cr_assert_eq(s.transport, JOBSPEC_TRANSPORT_RDMA);
    cr_assert_eq(s.seed, 42);
    cr_assert_eq(s.eval_every, 0);
    cr_assert_eq(s.part_size, 4096);
    cr_assert_eq(s.checkpoint_interval, 30.5);
    cr_assert_eq(s.max_restarts, 3);
    cr_assert_eq(s.priority, 7);
    cr_assert_eq(s.cpus_per_worker, 2.5);
    cr_assert_eq(s.memory_per_worker, 3ULL << 30);
    cr_assert_eq(s.gpus_per_worker, 1);
    cr_assert_eq(s.cpus_per_server, 0.5);
    cr_assert_eq(s.memory_per_server, 256000000ULL);
    cr_assert_eq(s.time_limit, 600.0);
}

Test(jobspec, applies_the_documented_defaults_to_keys_left_out)
{
    jobspec s;

    parse_ok("name: tiny\nmodel: mlp\n", &s);
    cr_assert_str_eq(s.name, "tiny");
    cr_assert_eq(s.model, JOBSPEC_MODEL_MLP);
    cr_assert_eq(s.dataset, JOBSPEC_DATASET_FASHION_MNIST);
    cr_assert_str_eq(s.data_dir, "/usr/share/datasets/fashion-mnist");
    cr_assert_eq(s.partition, JOBSPEC_PARTITION_IID);
    cr_assert_eq(s.workers, 1);
    cr_assert_eq(s.servers, 1);
    cr_assert_eq(s.mode, JOBSPEC_MODE_SSGD);
    cr_assert_eq(s.staleness, 0);
    cr_assert_eq(s.iterations, 1000);
    cr_assert_eq(s.rounds, 10);
    cr_assert_eq(s.local_steps, 10);
    cr_assert_eq(s.client_fraction, 1.0);
    cr_assert_eq(s.clients, 0, "0: one client per worker");
    cr_assert_eq(s.round_deadline, 0.0, "0: wait for every client");
    cr_assert_eq(s.batch_size, 32);
    cr_assert_eq(s.lr, 0.05);
    cr_assert_eq(s.momentum, 0.9);
    cr_assert_eq(s.compression, CODEC_DENSE);
    cr_assert_eq(s.density, 1.0);
    cr_assert_eq(s.qsgd_bits, 0);
    cr_assert_eq(s.transport, JOBSPEC_TRANSPORT_ZMQ);
    cr_assert_eq(s.seed, 1);
    cr_assert_eq(s.eval_every, 100);
    cr_assert_eq(s.part_size, 65536);
    cr_assert_eq(s.checkpoint_interval, 0.0);
    cr_assert_eq(s.max_restarts, 0);
    cr_assert_eq(s.priority, 0);
    cr_assert_eq(s.cpus_per_worker, 1.0);
    cr_assert_eq(s.memory_per_worker, 1ULL << 30, "1Gi");
    cr_assert_eq(s.gpus_per_worker, 0);
    cr_assert_eq(s.cpus_per_server, 1.0);
    cr_assert_eq(s.memory_per_server, 512ULL << 20, "512Mi");
    cr_assert_eq(s.time_limit, 0.0);
}

Test(jobspec, servers_auto_puts_a_shard_beside_each_worker)
{
    jobspec s;

    parse_ok("name: j\nmodel: mlp\nservers: auto\nworkers: 6\n", &s);
    cr_assert_eq(s.servers, 6);
    cr_assert_eq(s.servers_auto, 1);
    parse_ok("name: j\nmodel: mlp\nservers: 3\nworkers: 6\n", &s);
    cr_assert_eq(s.servers, 3);
    cr_assert_eq(s.servers_auto, 0);
    expect_error("name: j\nmodel: mlp\nservers: auto\nworkers: 300\n",
                 "servers: auto", "at most 256 servers", NULL);
    /* auto is a word: 0 is still out of range. */
    expect_error("name: j\nmodel: mlp\nservers: 0\n", "servers", NULL);
}

Test(jobspec, reads_the_json_form_of_a_job_file)
{
    jobspec s;

    parse_ok("{\n"
             "  \"name\": \"json-job\",\n"
             "  \"model\": \"mlp\",\n"
             "  \"workers\": 4,\n"
             "  \"lr\": 0.05,\n"
             "  \"momentum\": 0,\n"
             "  \"compression\": \"topk:0.001\",\n"
             "  \"seed\": 18446744073709551615\n"
             "}\n",
             &s);
    cr_assert_str_eq(s.name, "json-job");
    cr_assert_eq(s.workers, 4);
    cr_assert_eq(s.momentum, 0.0);
    cr_assert_eq(s.compression, CODEC_TOPK);
    cr_assert_eq(s.density, 0.001);
    cr_assert_eq(s.seed, UINT64_MAX);
}

Test(jobspec, reads_compact_json_without_spaces)
{
    jobspec s;

    parse_ok("{\"name\":\"c\",\"model\":\"cnn\",\"batch_size\":16}", &s);
    cr_assert_eq(s.model, JOBSPEC_MODEL_CNN);
    cr_assert_eq(s.batch_size, 16);
}

Test(jobspec, accepts_quoted_values_comments_and_a_document_marker)
{
    jobspec s;

    parse_ok("---\n# a comment\nname: 'q'  # trailing\nmodel: \"mlp\"\n"
             "workers: '12'\n...\n",
             &s);
    cr_assert_str_eq(s.name, "q");
    cr_assert_eq(s.workers, 12);
}

Test(jobspec, parses_every_codec_form_with_its_density_or_bits)
{
    static const struct {
        const char *text;
        codec_kind comp;
        double density;
        uint32_t bits;
    } cases[] = {
        {"dense", CODEC_DENSE, 1.0, 0},
        {"topk:0.01", CODEC_TOPK, 0.01, 0},
        {"gtopk:0.001", CODEC_GTOPK, 0.001, 0},
        {"randk:0.5", CODEC_RANDK, 0.5, 0},
        {"dgc:1", CODEC_DGC, 1.0, 0},
        {"topk:1e-3", CODEC_TOPK, 0.001, 0},
        {"qsgd:1", CODEC_QSGD, 1.0, 1},
        {"qsgd:4", CODEC_QSGD, 1.0, 4},
        {"qsgd:8", CODEC_QSGD, 1.0, 8},
        {"fp16", CODEC_FP16, 1.0, 0},
        {"auto", CODEC_AUTO, 1.0, 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[128];
        char back[64];
        jobspec s, again;

        snprintf(text, sizeof(text), "name: c\nmodel: mlp\ncompression: %s\n",
                 cases[i].text);
        parse_ok(text, &s);
        cr_assert_eq(s.compression, cases[i].comp, "%s", cases[i].text);
        cr_assert_eq(s.density, cases[i].density, "%s", cases[i].text);
        cr_assert_eq(s.qsgd_bits, cases[i].bits, "%s", cases[i].text);

        /* The canonical text reads back to the same setting. */
        jobspec_comp_format(&s, back, sizeof(back));
        snprintf(text, sizeof(text), "name: c\nmodel: mlp\ncompression: %s\n",
                 back);
        parse_ok(text, &again);
        cr_assert_eq(again.compression, s.compression, "%s", back);
        cr_assert_eq(again.density, s.density, "%s", back);
        cr_assert_eq(again.qsgd_bits, s.qsgd_bits, "%s", back);
    }
}

Test(jobspec, formats_compression_in_its_shortest_canonical_text)
{
    jobspec s;
    char buf[32];

    parse_ok("name: c\nmodel: mlp\ncompression: gtopk:0.0100\n", &s);
    jobspec_comp_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "gtopk:0.01");
    parse_ok("name: c\nmodel: mlp\ncompression: qsgd:4\n", &s);
    jobspec_comp_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "qsgd:4");
    parse_ok("name: c\nmodel: mlp\n", &s);
    jobspec_comp_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "dense");
    parse_ok("name: c\nmodel: mlp\ncompression: topk:0.001\n", &s);
    jobspec_comp_format(&s, buf, 5);
    cr_assert_str_eq(buf, "topk", "a short buffer is cut and terminated");
}

Test(jobspec, names_every_enum_value)
{
    cr_assert_str_eq(jobspec_model_name(JOBSPEC_MODEL_MLP), "mlp");
    cr_assert_str_eq(jobspec_model_name(JOBSPEC_MODEL_CNN), "cnn");
    cr_assert_str_eq(jobspec_mode_name(JOBSPEC_MODE_SSGD), "ssgd");
    cr_assert_str_eq(jobspec_mode_name(JOBSPEC_MODE_ASYNC), "async");
    cr_assert_str_eq(jobspec_mode_name(JOBSPEC_MODE_SSP), "ssp");
    cr_assert_str_eq(jobspec_mode_name(JOBSPEC_MODE_FEDAVG), "fedavg");
    cr_assert_str_eq(codec_kind_name(CODEC_DENSE), "dense");
    cr_assert_str_eq(codec_kind_name(CODEC_TOPK), "topk");
    cr_assert_str_eq(codec_kind_name(CODEC_GTOPK), "gtopk");
    cr_assert_str_eq(codec_kind_name(CODEC_RANDK), "randk");
    cr_assert_str_eq(codec_kind_name(CODEC_DGC), "dgc");
    cr_assert_str_eq(codec_kind_name(CODEC_QSGD), "qsgd");
    cr_assert_str_eq(codec_kind_name(CODEC_FP16), "fp16");
    cr_assert_str_eq(codec_kind_name(CODEC_AUTO), "auto");
    cr_assert_str_eq(jobspec_dataset_name(JOBSPEC_DATASET_FASHION_MNIST),
                     "fashion-mnist");
    cr_assert_str_eq(jobspec_dataset_name(JOBSPEC_DATASET_SYNTHETIC),
                     "synthetic");
    cr_assert_str_eq(jobspec_partition_name(JOBSPEC_PARTITION_IID), "iid");
    cr_assert_str_eq(jobspec_partition_name(JOBSPEC_PARTITION_DIRICHLET),
                     "dirichlet");
    cr_assert_str_eq(jobspec_transport_name(JOBSPEC_TRANSPORT_ZMQ), "zmq");
    cr_assert_str_eq(jobspec_transport_name(JOBSPEC_TRANSPORT_RDMA), "rdma");
    cr_assert_str_eq(codec_kind_name((codec_kind)99), "unknown");
    cr_assert_str_eq(jobspec_mode_name((jobspec_mode)99), "unknown");
}

Test(jobspec, accepts_every_mode_and_partition_form)
{
    jobspec s;

    parse_ok("name: m\nmodel: mlp\nmode: async\n", &s);
    cr_assert_eq(s.mode, JOBSPEC_MODE_ASYNC);
    parse_ok("name: m\nmodel: mlp\nmode: ssp:0\n", &s);
    cr_assert_eq(s.mode, JOBSPEC_MODE_SSP);
    cr_assert_eq(s.staleness, 0);
    parse_ok("name: m\nmodel: mlp\nmode: fedavg\nrounds: 3\n"
             "local_steps: 2\nclient_fraction: 1\n",
             &s);
    cr_assert_eq(s.mode, JOBSPEC_MODE_FEDAVG);
    cr_assert_eq(s.rounds, 3);
    parse_ok("name: m\nmodel: mlp\nmode: fedavg\n", &s);
    cr_assert_eq(s.rounds, 10, "fedavg takes the default of 10 rounds");
    parse_ok("name: m\nmodel: mlp\nmode: ssgd\nrounds: 0\n", &s);
    cr_assert_eq(s.rounds, 0, "rounds is accepted, unused, outside fedavg");
    parse_ok("name: m\nmodel: mlp\npartition: iid\n", &s);
    cr_assert_eq(s.partition, JOBSPEC_PARTITION_IID);
    parse_ok("name: m\nmodel: mlp\npartition: dirichlet:2\n", &s);
    cr_assert_eq(s.dirichlet_alpha, 2.0);
}

/* ---- Messages -------------------------------------------------------- */

Test(jobspec, suggests_the_closest_key_for_a_typo)
{
    expect_error("name: a\nmodel: mlp\nwrokers: 4\n", "line 3",
                 "unknown key 'wrokers'", "did you mean 'workers'?",
                 "accepted keys: name, model,", "priority", NULL);
    expect_error("name: a\nmodel: mlp\nbatch-size: 4\n", "line 3",
                 "did you mean 'batch_size'?", NULL);
}

Test(jobspec, lists_the_accepted_keys_for_a_key_far_from_all_of_them)
{
    jobspec s;
    char err[ERRLEN] = "";

    expect_error("name: a\nmodel: mlp\ncolour: blue\n", "line 3",
                 "unknown key 'colour'", "accepted keys: name, model", NULL);
    cr_assert_eq(parse("name: a\nmodel: mlp\ncolour: blue\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_eq(strstr(err, "did you mean"), NULL, "%s", err);
}

Test(jobspec, rejects_integers_out_of_range)
{
    expect_error("name: a\nmodel: mlp\n\n\nworkers: 0\n", "line 5: workers",
                 "'0' is out of range", "expected an integer from 1 to 1024",
                 NULL);
    expect_error("name: a\nmodel: mlp\nworkers: 1025\n", "line 3: workers",
                 "out of range", NULL);
    expect_error("name: a\nmodel: mlp\nservers: 257\n", "line 3: servers",
                 "from 1 to 256", NULL);
    expect_error("name: a\nmodel: mlp\nbatch_size: 65537\n",
                 "line 3: batch_size", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\niterations: 0\n", "line 3: iterations",
                 "out of range", NULL);
    expect_error("name: a\nmodel: mlp\npart_size: 4294967296\n",
                 "line 3: part_size", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\nseed: 18446744073709551616\n",
                 "line 3: seed", "out of range", NULL);
}

Test(jobspec, rejects_numbers_with_trailing_garbage)
{
    expect_error("name: a\nmodel: mlp\nbatch_size: 32x\n",
                 "line 3: batch_size: '32x' is not an integer",
                 "expected an integer from 1 to 65536", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: 4.0\n", "line 3: workers",
                 "not an integer", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: 0x10\n", "line 3: workers",
                 "not an integer", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: ' 4'\n", "line 3: workers",
                 "not an integer", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: +4\n", "line 3: workers",
                 "not an integer", NULL);
    expect_error("name: a\nmodel: mlp\nlr: 0.05x\n", "line 3: lr",
                 "'0.05x' is not a number", "expected a number > 0", NULL);
    expect_error("name: a\nmodel: mlp\nlr: 0x1p-3\n", "line 3: lr",
                 "not a number", NULL);
}

Test(jobspec, rejects_negative_numbers_for_unsigned_fields)
{
    expect_error("name: a\nmodel: mlp\nseed: -1\n", "line 3: seed",
                 "'-1' is negative", "from 0 to", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: -4\n", "line 3: workers",
                 "is negative", NULL);
}

Test(jobspec, rejects_nan_and_infinity_for_reals)
{
    expect_error("name: a\nmodel: mlp\nlr: nan\n", "line 3: lr",
                 "'nan' is not a finite number", NULL);
    expect_error("name: a\nmodel: mlp\nlr: .inf\n", "line 3: lr",
                 "not a finite number", NULL);
    expect_error("name: a\nmodel: mlp\nmomentum: -.Inf\n", "line 3: momentum",
                 "not a finite number", NULL);
    expect_error("name: a\nmodel: mlp\ncheckpoint_interval: infinity\n",
                 "line 3: checkpoint_interval", "not a finite number", NULL);
    expect_error("name: a\nmodel: mlp\nlr: 1e999\n", "line 3: lr",
                 "out of range", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: topk:nan\n",
                 "line 3: compression", "density 'nan'", "not a finite number",
                 NULL);
}

Test(jobspec, rejects_reals_out_of_range)
{
    expect_error("name: a\nmodel: mlp\nlr: 0\n", "line 3: lr",
                 "'0' is out of range", "a number > 0", NULL);
    expect_error("name: a\nmodel: mlp\nmomentum: 1\n", "line 3: momentum",
                 "out of range", "0 <= M < 1", NULL);
    expect_error("name: a\nmodel: mlp\nmomentum: -0.1\n", "line 3: momentum",
                 "out of range", NULL);
    expect_error("name: a\nmodel: mlp\nclient_fraction: 0\n",
                 "line 3: client_fraction", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\nclient_fraction: 1.5\n",
                 "line 3: client_fraction", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\nclients: 10001\n", "line 3: clients",
                 "out of range", "an integer from 0 to 10000", NULL);
    expect_error("name: a\nmodel: mlp\ncheckpoint_interval: -1\n",
                 "line 3: checkpoint_interval", "out of range", NULL);
}

Test(jobspec, rejects_a_codec_parameter_out_of_range)
{
    expect_error("name: a\nmodel: mlp\n\n\n\n\n\n\ncompression: topk:2\n",
                 "line 9: compression: 'topk:2' has density 2 out of range; "
                 "expected topk:D with 0 < D <= 1",
                 NULL);
    expect_error("name: a\nmodel: mlp\ncompression: gtopk:0\n",
                 "line 3: compression", "density 0 out of range",
                 "gtopk:D with 0 < D <= 1", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: randk:-0.5\n",
                 "line 3: compression", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: dgc:abc\n",
                 "line 3: compression", "density 'abc' which is not a number",
                 NULL);
    expect_error("name: a\nmodel: mlp\ncompression: qsgd:9\n",
                 "line 3: compression", "'qsgd:9' has bits 9 out of range",
                 "BITS from 1 to 8", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: qsgd:0\n",
                 "line 3: compression", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: qsgd:4.5\n",
                 "line 3: compression", "not an integer", NULL);
}

Test(jobspec, rejects_a_codec_missing_or_given_a_needless_parameter)
{
    expect_error("name: a\nmodel: mlp\ncompression: topk\n",
                 "line 3: compression", "'topk' needs a density",
                 "topk:D with 0 < D <= 1", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: qsgd\n",
                 "line 3: compression", "needs a bit width", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: dense:0.5\n",
                 "line 3: compression", "dense takes no parameter", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: 'topk:'\n",
                 "line 3: compression", "density ''", "not a number", NULL);
}

Test(jobspec, names_the_codecs_for_an_unknown_one_and_suggests_the_closest)
{
    expect_error("name: a\nmodel: mlp\n\n\n\n\ncompression: gtop:0.01\n",
                 "line 7: compression: 'gtop:0.01' is not a codec; expected "
                 "one of dense, topk:D, gtopk:D, randk:D, dgc:D, qsgd:BITS, "
                 "fp16, sign, auto",
                 "did you mean 'gtopk:0.01'?", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: zstd\n",
                 "line 3: compression", "'zstd' is not a codec", NULL);
}

Test(jobspec, rejects_unknown_words_for_enumerated_keys)
{
    expect_error("name: a\nmodel: resnet\n", "line 2: model",
                 "'resnet' is not accepted", "one of mlp, cnn", NULL);
    expect_error("name: a\nmodel: MLP\n", "line 2: model",
                 "did you mean 'mlp'?", NULL);
    expect_error("name: a\nmodel: mlp\ndataset: mnist\n", "line 3: dataset",
                 "one of fashion-mnist, synthetic", NULL);
    expect_error("name: a\nmodel: mlp\ntransport: tcp\n", "line 3: transport",
                 "one of zmq, rdma, auto", NULL);
    expect_error("name: a\nmodel: mlp\nmode: sync\n", "line 3: mode",
                 "'sync' is not a mode", "did you mean 'async'?", NULL);
    expect_error("name: a\nmodel: mlp\nmode: ssp\n", "line 3: mode",
                 "needs a staleness bound", NULL);
    expect_error("name: a\nmodel: mlp\nmode: ssp:-1\n", "line 3: mode",
                 "staleness '-1' which is negative", NULL);
    expect_error("name: a\nmodel: mlp\nmode: async:3\n", "line 3: mode",
                 "async takes no parameter", NULL);
    expect_error("name: a\nmodel: mlp\npartition: dirichlet:0\n",
                 "line 3: partition", "alpha 0 out of range", "A > 0", NULL);
    expect_error("name: a\nmodel: mlp\npartition: dirichlet\n",
                 "line 3: partition", "needs a concentration alpha", NULL);
    expect_error("name: a\nmodel: mlp\npartition: noniid\n",
                 "line 3: partition", "is not a partition", NULL);
}

Test(jobspec, fedavg_needs_at_least_one_round)
{
    expect_error("name: a\nmodel: mlp\nmode: fedavg\nrounds: 0\n",
                 "line 4: rounds", "mode fedavg (line 3)", "from 1 to", NULL);
}

Test(jobspec, rejects_a_duplicate_key)
{
    expect_error("model: mlp\nmodel: cnn\nname: a\n",
                 "line 2: duplicate key 'model'", "first given on line 1",
                 NULL);
}

Test(jobspec, reports_each_missing_required_key)
{
    expect_error("model: mlp\n", "missing required key 'name'", NULL);
    expect_error("name: a\n", "missing required key 'model'", "one of mlp, cnn",
                 NULL);
}

Test(jobspec, rejects_a_bad_name)
{
    expect_error("name: 'my job'\nmodel: mlp\n", "line 1: name", "contains ' '",
                 NULL);
    expect_error("name: ''\nmodel: mlp\n", "line 1: name", "is empty", NULL);
    expect_error("name: "
                 "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij"
                 "abcd\nmodel: mlp\n",
                 "line 1: name", "too long", "1 to 63", NULL);
    expect_error("name: \"a\\0b\"\nmodel: mlp\n", "line 1: name",
                 "NUL character", NULL);

    jobspec s;
    parse_ok("name: "
             "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc"
             "\nmodel: mlp\n",
             &s);
    cr_assert_eq(strlen(s.name), 63);
}

Test(jobspec, rejects_a_data_dir_that_does_not_fit)
{
    char text[600];

    snprintf(text, sizeof(text), "name: a\nmodel: mlp\ndata_dir: /%0300d\n", 0);
    expect_error(text, "line 3: data_dir", "too long", "1 to 255 bytes", NULL);
}

Test(jobspec, reports_yaml_syntax_errors_with_line_and_column)
{
    expect_error("name: a\nmodel: mlp\nworkers: 4: 5\n", "line 3, column 11",
                 "YAML syntax error", "mapping values are not allowed", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: [4\n", "line 4, column",
                 "YAML syntax error", NULL);
    expect_error("{\"name\": \"a\" \"model\": \"mlp\"}", "line 1, column",
                 "YAML syntax error", NULL);
    expect_error("name: a\nmodel: mlp\n  workers: 4\n", "line 3, column",
                 "YAML syntax error", NULL);
    expect_error("name: a\nmodel: 'mlp\n", "YAML syntax error", "line 2", NULL);
}

Test(jobspec, rejects_a_document_that_is_not_a_mapping)
{
    expect_error("just a string\n", "line 1", "must be a mapping",
                 "found a single value", NULL);
    expect_error("- name: a\n- model: mlp\n", "line 1", "must be a mapping",
                 "found a list", NULL);
}

Test(jobspec, rejects_a_nested_value_where_a_single_value_belongs)
{
    expect_error("name: a\nmodel: mlp\nworkers:\n  count: 4\n",
                 "line 4: workers", "found a mapping", "from 1 to 1024", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: [4]\n", "line 3: workers",
                 "found a list", NULL);
    expect_error("name: a\nmodel: mlp\ncompression: [topk, 0.01]\n",
                 "line 3: compression", "found a list", NULL);
    expect_error("name: a\nmodel: mlp\n? [x]\n: 1\n", "line 3",
                 "a key must be a plain word", NULL);
}

Test(jobspec, rejects_a_key_given_no_value)
{
    expect_error("name: a\nmodel: mlp\nworkers:\n", "line 3: workers",
                 "no value", "from 1 to 1024", NULL);
    expect_error("name: a\nmodel: ~\n", "line 2: model", "no value", NULL);
}

Test(jobspec, rejects_aliases_and_a_second_document)
{
    expect_error("name: &n a\nmodel: mlp\nseed: *n\n", "line 3: seed",
                 "aliases", NULL);
    expect_error("name: a\nmodel: mlp\n---\nname: b\nmodel: mlp\n", "line 3",
                 "second YAML document", NULL);
}

Test(jobspec, rejects_an_empty_file)
{
    expect_error("", "the job file is empty", NULL);
    expect_error("# only a comment\n\n", "the job file is empty", NULL);
    expect_error("---\n", "the job file is empty", NULL);
}

Test(jobspec, reports_invalid_utf8_with_its_byte_offset)
{
    expect_error("name: a\nmodel: \xff\n", "byte 15", "UTF-8", NULL);
}

Test(jobspec, survives_a_missing_or_tiny_error_buffer)
{
    jobspec s;
    char err[8];

    cr_assert_eq(jobspec_parse("x: 1", 4, &s, NULL, 0), FLPS_ECONFIG);
    cr_assert_eq(jobspec_parse("x: 1", 4, &s, err, sizeof(err)), FLPS_ECONFIG);
    cr_assert_eq(strlen(err), sizeof(err) - 1, "cut and terminated");
    cr_assert_eq(jobspec_parse(NULL, 4, &s, NULL, 0), FLPS_EINVAL);
    cr_assert_eq(jobspec_parse("x: 1", 4, NULL, NULL, 0), FLPS_EINVAL);
}

Test(jobspec, reads_only_the_given_length_of_text)
{
    const char text[] = "name: a\nmodel: mlp\nworkers: 4x";
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(jobspec_parse(text, sizeof(text) - 2, &s, err, sizeof(err)),
                 FLPS_OK, "%s", err);
    cr_assert_eq(s.workers, 4);
}

/* ---- Files ----------------------------------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/flps-jobspec-XXXXXX");
    cr_assert_neq(mkdtemp(tmpdir), NULL);
}

static void remove_tmpdir(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    cr_assert_neq(f, NULL, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void make_dataset(const char *dir)
{
    static const char *const files[] = {
        "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    char path[256];

    cr_assert_eq(mkdir(dir, 0755), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        write_file(path, "");
    }
}

Test(jobspec, load_names_a_missing_file_and_the_system_error,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    char err[ERRLEN] = "";
    jobspec s, sentinel;

    memset(&s, 0x5A, sizeof(s));
    sentinel = s;
    snprintf(path, sizeof(path), "%s/nope.yaml", tmpdir);
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_EIO);
    cr_assert_neq(strstr(err, path), NULL, "%s", err);
    cr_assert_neq(strstr(err, "No such file or directory"), NULL, "%s", err);
    cr_assert_eq(memcmp(&s, &sentinel, sizeof(s)), 0);
}

Test(jobspec, load_names_the_missing_dataset_file_and_how_to_install_it,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    char text[256];
    char err[ERRLEN] = "";
    jobspec s, sentinel;

    memset(&s, 0x5A, sizeof(s));
    sentinel = s;
    snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
    snprintf(text, sizeof(text),
             "name: a\nmodel: mlp\ndataset: fashion-mnist\n"
             "data_dir: %s/no-such-dir\n",
             tmpdir);
    write_file(path, text);
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_ECONFIG);
    cr_assert_neq(strstr(err, path), NULL, "%s", err);
    cr_assert_neq(strstr(err, "line 4: data_dir"), NULL, "%s", err);
    cr_assert_neq(strstr(err, "no-such-dir/train-images-idx3-ubyte.gz"), NULL,
                  "%s", err);
    cr_assert_neq(strstr(err, "apt-get install dataset-fashion-mnist"), NULL,
                  "%s", err);
    cr_assert_eq(memcmp(&s, &sentinel, sizeof(s)), 0);
}

Test(jobspec, load_names_the_one_dataset_file_that_is_missing,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128], dir[128], gone[192], text[256];
    char err[ERRLEN] = "";
    jobspec s;

    snprintf(dir, sizeof(dir), "%s/fm", tmpdir);
    make_dataset(dir);
    snprintf(gone, sizeof(gone), "%s/t10k-labels-idx1-ubyte.gz", dir);
    cr_assert_eq(unlink(gone), 0);
    snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
    snprintf(text, sizeof(text), "name: a\nmodel: mlp\ndata_dir: %s/\n", dir);
    write_file(path, text);
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_ECONFIG);
    cr_assert_neq(strstr(err, gone), NULL, "%s", err);
}

Test(jobspec, load_accepts_a_data_dir_holding_the_four_files,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128], dir[128], text[256];
    char err[ERRLEN] = "";
    jobspec s;

    snprintf(dir, sizeof(dir), "%s/fm", tmpdir);
    make_dataset(dir);
    snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
    snprintf(text, sizeof(text), "name: a\nmodel: cnn\ndata_dir: %s\n", dir);
    write_file(path, text);
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_OK, "%s", err);
    cr_assert_eq(s.model, JOBSPEC_MODEL_CNN);
    cr_assert_str_eq(s.data_dir, dir);
}

Test(jobspec, load_skips_the_dataset_check_for_synthetic_data,
     .init = make_tmpdir, .fini = remove_tmpdir)
{
    char path[128];
    char err[ERRLEN] = "";
    jobspec s;

    snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
    write_file(path, "name: a\nmodel: mlp\ndataset: synthetic\n"
                     "data_dir: /no/such/dir\n");
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_OK, "%s", err);
}

Test(jobspec, a_command_job_needs_no_model_and_no_dataset_unless_it_names_one)
{
    static const char plain[] = "name: a\ncommand: [prog]\n";
    static const char named[] = "name: a\ncommand: [prog]\n"
                                "data_dir: /no/such/dir\n";
    static const char cnn[] = "name: a\nmodel: cnn\ncommand: prog\n";
    char err[ERRLEN] = "";
    jobspec s;

    /* Its program builds its own model and reads its own data. */
    cr_assert_eq(jobspec_load_text("j", plain, strlen(plain), &s, err,
                                   sizeof(err), NULL),
                 FLPS_OK, "%s", err);
    cr_assert_eq(s.model, JOBSPEC_MODEL_NONE);
    cr_assert_str_eq(jobspec_model_name(s.model), "none");
    /* A data_dir: it names is checked, as flworker's is. */
    cr_assert_eq(jobspec_load_text("j", named, strlen(named), &s, err,
                                   sizeof(err), NULL),
                 FLPS_ECONFIG);
    cr_assert_neq(strstr(err, "j: line 3: data_dir"), NULL, "%s", err);
    cr_assert_eq(jobspec_parse(cnn, strlen(cnn), &s, err, sizeof(err)), FLPS_OK,
                 "%s", err);
    cr_assert_eq(s.model, JOBSPEC_MODEL_CNN, "a model given is kept");
}

Test(jobspec, load_text_prefixes_errors_with_the_name_and_says_where)
{
    static const char body[] = "name: a\nmodel: mlp\nworkers: 0\n";
    char err[ERRLEN] = "";
    jobspec_where where = {0};
    jobspec s;

    cr_assert_eq(jobspec_load_text("the command line", body, strlen(body), &s,
                                   err, sizeof(err), &where),
                 FLPS_ECONFIG);
    cr_assert_str_eq(err, "the command line: line 3: workers: '0' is out of "
                          "range; expected an integer from 1 to 1024");
    cr_assert_eq(where.line, 3);
    cr_assert_str_eq(where.field, "workers");
}

Test(jobspec, load_prefixes_parse_errors_with_the_path, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    char path[128];
    char err[ERRLEN] = "";
    jobspec s;

    snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
    write_file(path, "name: a\nmodel: mlp\nworkers: 0\n");
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_ECONFIG);
    cr_assert_eq(strncmp(err, path, strlen(path)), 0, "%s", err);
    cr_assert_neq(strstr(err, ": line 3: workers: '0' is out of range"), NULL,
                  "%s", err);
}

Test(jobspec, load_refuses_a_file_over_one_mebibyte, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    char path[128];
    char err[ERRLEN] = "";
    jobspec s;
    FILE *f;

    snprintf(path, sizeof(path), "%s/big.yaml", tmpdir);
    f = fopen(path, "w");
    cr_assert_neq(f, NULL);
    fputs("name: a\nmodel: mlp\n", f);
    for (int i = 0; i < (1 << 20) / 8; i++)
        fputs("#.......\n", f);
    fclose(f);
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_ECONFIG);
    cr_assert_neq(strstr(err, "1 MiB"), NULL, "%s", err);
    cr_assert_neq(strstr(err, path), NULL, "%s", err);
}

Test(jobspec, load_reports_a_failed_allocation, .init = make_tmpdir,
     .fini = remove_tmpdir)
{
    char path[128];
    char err[ERRLEN] = "";
    jobspec s, sentinel;

    memset(&s, 0x5A, sizeof(s));
    sentinel = s;
    snprintf(path, sizeof(path), "%s/job.yaml", tmpdir);
    write_file(path, "name: a\nmodel: mlp\ndataset: synthetic\n");
    flps_alloc_fail_at(1);
    cr_assert_eq(jobspec_load(path, &s, err, sizeof(err)), FLPS_ENOMEM);
    flps_alloc_fail_at(0);
    cr_assert_eq(memcmp(&s, &sentinel, sizeof(s)), 0);
}

/* ---- Examples -------------------------------------------------------- */

Test(jobspec, parses_every_example_job_file)
{
    const char *dir = FLPS_SOURCE_DIR "/examples";
    DIR *d = opendir(dir);
    struct dirent *e;
    int seen = 0;

    cr_assert_neq(d, NULL, "%s", dir);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        char path[512];
        char text[8192];
        char err[ERRLEN] = "";
        size_t len;
        jobspec s;
        FILE *f;

        if (n < 5 || strcmp(e->d_name + n - 5, ".yaml") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        f = fopen(path, "r");
        cr_assert_neq(f, NULL, "%s", path);
        len = fread(text, 1, sizeof(text), f);
        fclose(f);
        cr_assert_lt(len, sizeof(text), "%s is unexpectedly large", path);
        cr_assert_eq(jobspec_parse(text, len, &s, err, sizeof(err)), FLPS_OK,
                     "%s: %s", path, err);
        seen++;
    }
    closedir(d);
    cr_assert_geq(seen, 3, "the three fmnist-mlp examples at least");
}

Test(jobspec, example_files_hold_the_documented_settings)
{
    static const struct {
        const char *file;
        const char *comp;
    } ex[] = {
        {"fmnist-mlp-dense.yaml", "dense"},
        {"fmnist-mlp-gtopk.yaml", "gtopk:0.01"},
        {"fmnist-mlp-topk.yaml", "topk:0.01"},
    };

    for (size_t i = 0; i < 3; i++) {
        char path[512];
        char text[8192];
        char err[ERRLEN] = "";
        char comp[32];
        size_t len;
        jobspec s;
        FILE *f;

        snprintf(path, sizeof(path), "%s/examples/%s", FLPS_SOURCE_DIR,
                 ex[i].file);
        f = fopen(path, "r");
        cr_assert_neq(f, NULL, "%s", path);
        len = fread(text, 1, sizeof(text), f);
        fclose(f);
        cr_assert_eq(jobspec_parse(text, len, &s, err, sizeof(err)), FLPS_OK,
                     "%s: %s", path, err);
        jobspec_comp_format(&s, comp, sizeof(comp));
        cr_assert_str_eq(comp, ex[i].comp, "%s", path);
        cr_assert_eq(s.model, JOBSPEC_MODEL_MLP);
        cr_assert_eq(s.dataset, JOBSPEC_DATASET_FASHION_MNIST);
        cr_assert_eq(s.partition, JOBSPEC_PARTITION_IID);
        cr_assert_eq(s.workers, 4);
        cr_assert_eq(s.servers, 2);
        cr_assert_eq(s.mode, JOBSPEC_MODE_SSGD);
        cr_assert_eq(s.iterations, 1500);
        cr_assert_eq(s.batch_size, 32);
        cr_assert_eq(s.lr, 0.05);
        cr_assert_eq(s.momentum, 0.9);
        cr_assert_eq(s.transport, JOBSPEC_TRANSPORT_ZMQ);
        cr_assert_eq(s.seed, 1);
        cr_assert_eq(s.eval_every, 250);
    }
}

/* ---- Resources ------------------------------------------------------- */

Test(jobspec, reads_sizes_in_bytes_and_with_every_suffix)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } ok[] = {
        {"0", 0},
        {"1048576", 1048576},
        {"2K", 2000},
        {"3M", 3000000},
        {"4G", 4000000000ULL},
        {"5T", 5000000000000ULL},
        {"2Ki", 2048},
        {"3Mi", 3ULL << 20},
        {"4Gi", 4ULL << 30},
        {"5Ti", 5ULL << 40},
        {"1.5Gi", 3ULL << 29},
        {"1.5K", 1500},
        {"0.0001K", 0},
        {"16Ti", 16ULL << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 7;

        cr_assert_eq(jobspec_size_parse(ok[i].text, &v), FLPS_OK, "%s",
                     ok[i].text);
        cr_assert_eq(v, ok[i].bytes, "%s: %llu", ok[i].text,
                     (unsigned long long)v);
    }
}

Test(jobspec, refuses_sizes_that_are_not_sizes)
{
    const char *bad[] = {
        "",    "G",    "1g",   "1 Gi",       "1GiB",
        "-1",  "1.5",  "1.Gi", ".5Gi",       "+1K",
        "1e3", "0x10", "1KiK", "16777216Ti", "18446744073709551616",
        NULL};
    for (int i = 0; bad[i] != NULL; i++) {
        uint64_t v = 7;

        cr_assert_eq(jobspec_size_parse(bad[i], &v), FLPS_EINVAL, "'%s'",
                     bad[i]);
        cr_assert_eq(v, 7, "'%s' wrote *out", bad[i]);
    }
    cr_assert_eq(jobspec_size_parse(NULL, NULL), FLPS_EINVAL);
}

Test(jobspec, rejects_bad_resource_values_naming_the_key)
{
    expect_error("name: a\nmodel: mlp\ncpus_per_worker: 0\n",
                 "line 3: cpus_per_worker", "'0' is out of range",
                 "a number of CPUs > 0", NULL);
    expect_error("name: a\nmodel: mlp\ncpus_per_server: many\n",
                 "line 3: cpus_per_server", "is not a number", NULL);
    expect_error("name: a\nmodel: mlp\nmemory_per_worker: 1GB\n",
                 "line 3: memory_per_worker", "'1GB' is not a size",
                 "suffix K, M, G, T", "Ki, Mi, Gi, Ti", NULL);
    expect_error("name: a\nmodel: mlp\nmemory_per_server: -5M\n",
                 "line 3: memory_per_server", "is negative", NULL);
    expect_error("name: a\nmodel: mlp\nmemory_per_server: 99999999Ti\n",
                 "line 3: memory_per_server", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\ngpus_per_worker: 1.5\n",
                 "line 3: gpus_per_worker", "is not an integer",
                 "from 0 to 1024", NULL);
    expect_error("name: a\nmodel: mlp\ngpus_per_worker: 1025\n",
                 "line 3: gpus_per_worker", "out of range", NULL);
    expect_error("name: a\nmodel: mlp\ntime_limit: -1\n", "line 3: time_limit",
                 "out of range", "0 = no limit", NULL);
    expect_error("name: a\nmodel: mlp\ntime_limit: forever\n",
                 "line 3: time_limit", "is not a number", NULL);
    expect_error("name: a\nmodel: mlp\ncpu_per_worker: 2\n",
                 "unknown key 'cpu_per_worker'",
                 "did you mean 'cpus_per_worker'?", "time_limit", NULL);
}

/* ---- Where an error is ----------------------------------------------- */

static void expect_where(const char *text, unsigned long line,
                         const char *field)
{
    jobspec s;
    jobspec_where w;
    char err[ERRLEN] = "";

    memset(&w, 0x5A, sizeof(w));
    cr_assert_eq(
        jobspec_parse_where(text, strlen(text), &s, err, sizeof(err), &w),
        FLPS_ECONFIG, "accepted:\n%s", text);
    cr_assert_eq(w.line, line, "line %lu, not %lu, for: %s", w.line, line, err);
    cr_assert_str_eq(w.field, field, "for: %s", err);
}

Test(jobspec, reports_the_line_and_key_of_an_error)
{
    expect_where("name: a\nmodel: mlp\n\nworkers: 0\n", 4, "workers");
    expect_where("name: a\nmodel: mlp\ncolour: blue\n", 3, "colour");
    expect_where("name: a\nmodel: mlp\nmemory_per_worker: lots\n", 3,
                 "memory_per_worker");
    expect_where("name: a\nmodel: mlp\nworkers:\n  - 1\n", 4, "workers");
    expect_where("name: a\nworkers: 2\n", 0, "model");
    expect_where("model: mlp\n", 0, "name");
    expect_where("name: a\nmodel: mlp\nmode: fedavg\nrounds: 0\n", 4, "rounds");
    expect_where("name: a\nmodel: mlp\nmodel: cnn\n", 3, "model");
    expect_where("name: a\nmodel: [mlp\n", 3, "");
    expect_where("- a\n- b\n", 1, "");
    expect_where("", 0, "");
}

Test(jobspec, where_is_untouched_on_success_and_other_errors)
{
    jobspec s;
    jobspec_where w;

    memset(&w, 0x5A, sizeof(w));
    cr_assert_eq(
        jobspec_parse_where("name: a\nmodel: mlp\n", 19, &s, NULL, 0, &w),
        FLPS_OK);
    cr_assert_eq(w.line, 0x5A5A5A5A5A5A5A5AUL);
    cr_assert_eq(jobspec_parse_where(NULL, 3, &s, NULL, 0, &w), FLPS_EINVAL);
    cr_assert_eq(w.line, 0x5A5A5A5A5A5A5A5AUL);
    cr_assert_eq(
        jobspec_parse_where("name: a\nmodel: x\n", 17, &s, NULL, 0, NULL),
        FLPS_ECONFIG, "a NULL where is allowed");
}

/* ---- The key table --------------------------------------------------- */

Test(jobspec, parses_the_lr_schedule_and_suggests_the_closest_one)
{
    jobspec s;

    parse_ok("name: a\nmodel: mlp\n", &s);
    cr_assert_eq(s.lr_schedule, JOBSPEC_LR_CONSTANT, "the default");
    parse_ok("name: a\nmodel: mlp\nlr_schedule: cosine\n", &s);
    cr_assert_eq(s.lr_schedule, JOBSPEC_LR_COSINE);
    expect_error("name: a\nmodel: mlp\nlr_schedule: cosin\n",
                 "line 3: lr_schedule: 'cosin' is not accepted; expected one "
                 "of constant, cosine; did you mean 'cosine'?",
                 NULL);
    cr_assert_str_eq(jobspec_lr_schedule_name(JOBSPEC_LR_CONSTANT), "constant");
    cr_assert_str_eq(jobspec_lr_schedule_name(JOBSPEC_LR_COSINE), "cosine");
    cr_assert_str_eq(jobspec_lr_schedule_name((jobspec_lr_schedule)7),
                     "unknown");
}

Test(jobspec, parses_the_sign_codec_and_formats_it_back)
{
    jobspec s;
    char buf[32];

    parse_ok("name: a\nmodel: mlp\ncompression: sign\n", &s);
    cr_assert_eq(s.compression, CODEC_SIGN);
    cr_assert_float_eq(s.density, 1.0, 0.0);
    cr_assert_eq(s.qsgd_bits, 0);
    cr_assert_str_eq(codec_kind_name(CODEC_SIGN), "sign");
    jobspec_comp_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "sign");
    expect_error("name: a\nmodel: mlp\ncompression: sign:1\n",
                 "line 3: compression", "sign takes no parameter", NULL);
    s.compression = (codec_kind)42;
    jobspec_comp_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "unknown");
}

Test(jobspec, reads_every_enum_name_back_to_its_value)
{
    static const struct {
        const char *line;
        size_t offset;
        unsigned value;
    } cases[] = {
        {"model: cnn", offsetof(jobspec, model), JOBSPEC_MODEL_CNN},
        {"dataset: synthetic", offsetof(jobspec, dataset),
         JOBSPEC_DATASET_SYNTHETIC},
        {"transport: rdma", offsetof(jobspec, transport),
         JOBSPEC_TRANSPORT_RDMA},
        {"transport: auto", offsetof(jobspec, transport),
         JOBSPEC_TRANSPORT_AUTO},
        {"mode: async", offsetof(jobspec, mode), JOBSPEC_MODE_ASYNC},
        {"mode: fedavg", offsetof(jobspec, mode), JOBSPEC_MODE_FEDAVG},
        {"compression: fp16", offsetof(jobspec, compression), CODEC_FP16},
        {"compression: auto", offsetof(jobspec, compression), CODEC_AUTO},
        {"compression: dgc:0.5", offsetof(jobspec, compression), CODEC_DGC},
        {"partition: dirichlet:1", offsetof(jobspec, partition),
         JOBSPEC_PARTITION_DIRICHLET},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[128];
        jobspec s;
        unsigned got;

        snprintf(text, sizeof(text), "name: a\n%s%s\n",
                 strncmp(cases[i].line, "model", 5) == 0 ? "" : "model: mlp\n",
                 cases[i].line);
        parse_ok(text, &s);
        memcpy(&got, (const char *)&s + cases[i].offset, sizeof(got));
        cr_assert_eq(got, cases[i].value, "%s", cases[i].line);
    }
}

Test(jobspec, lists_every_key_in_table_order_for_an_unknown_key)
{
    expect_error("name: a\nmodel: mlp\ncolour: blue\n",
                 "line 3: unknown key 'colour'; accepted keys: name, model, "
                 "dataset, data_dir, partition, workers, servers, mode, "
                 "iterations, rounds, local_steps, client_fraction, "
                 "clients, round_deadline, straggler_fraction, "
                 "straggler_slowdown, saps_density, peer_selection, "
                 "bandwidth_threshold, connectivity_window, "
                 "bandwidth_reprobe, peer_deadline, batch_size, lr, momentum, "
                 "lr_schedule, compression, density_warmup, "
                 "density_warmup_start, transport, seed, eval_every, "
                 "part_size, overlap, backend, gpu_clock, "
                 "gpu_clock_slowdown, "
                 "checkpoint_interval, max_restarts, priority, "
                 "cpus_per_worker, memory_per_worker, gpus_per_worker, "
                 "cpus_per_server, memory_per_server, time_limit",
                 NULL);
}

Test(jobspec, reads_gpu_clock_and_its_slowdown_as_the_worker_will)
{
    jobspec s;

    parse_ok("name: a\nmodel: mlp\n", &s);
    cr_assert_str_eq(s.gpu_clock, "default");
    cr_assert_str_eq(s.gpu_clock_slowdown, "5%");
    parse_ok("name: a\nmodel: mlp\ngpu_clock: auto\n"
             "gpu_clock_slowdown: 0.1\n",
             &s);
    cr_assert_str_eq(s.gpu_clock, "auto");
    cr_assert_str_eq(s.gpu_clock_slowdown, "0.1");
    parse_ok("name: a\nmodel: mlp\ngpu_clock: 01410\n", &s);
    cr_assert_str_eq(s.gpu_clock, "1410", "stored as the worker reads it");
    parse_ok("name: a\nmodel: mlp\ngpu_clock: max\n", &s);
    cr_assert_str_eq(s.gpu_clock, "max");
    expect_error("name: a\nmodel: mlp\ngpu_clock: fast\n",
                 "line 3: gpu_clock: 'fast' is not default, max, auto or a "
                 "clock in MHz; expected default (leave it), max, auto",
                 NULL);
    expect_error("name: a\nmodel: mlp\ngpu_clock: 99\n",
                 "line 3: gpu_clock: '99' is not", "from 100 to 10000", NULL);
    expect_error("name: a\nmodel: mlp\ngpu_clock: 1410MHz\n",
                 "line 3: gpu_clock: '1410MHz' is not", NULL);
    expect_error("name: a\nmodel: mlp\ngpu_clock: 1 410\n",
                 "line 3: gpu_clock: '1 410' contains ' '", NULL);
    expect_error("name: a\nmodel: mlp\ngpu_clock_slowdown: 5\n",
                 "line 3: gpu_clock_slowdown: '5' is not a percentage below "
                 "100% or a fraction below 1; expected a percentage (5%)",
                 NULL);
    expect_error("name: a\nmodel: mlp\ngpu_clock_slowdown: -1%\n",
                 "line 3: gpu_clock_slowdown: '-1%' contains '-'", NULL);
}

Test(jobspec, rejects_a_nul_character_inside_a_quoted_value)
{
    expect_error("name: \"a\\0b\"\nmodel: mlp\n",
                 "line 1: name: 'a?b' contains a NUL character", NULL);
}

Test(jobspec, rejects_a_real_that_underflows)
{
    expect_error("name: a\nmodel: mlp\nlr: 1e-400\n",
                 "line 3: lr: '1e-400' is out of range", NULL);
}

Test(jobspec, refuses_a_mebibyte_of_nested_brackets_at_once)
{
    size_t n = ((size_t)1 << 20) - 16;
    char *s = malloc(n + 1), err[ERRLEN] = "";
    jobspec spec;
    jobspec_where where;
    struct timespec t0, t1;

    cr_assert_not_null(s);
    memset(s, '[', n);
    s[n] = '\0';
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(jobspec_parse_where(s, n, &spec, err, sizeof(err), &where),
                 FLPS_ECONFIG);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* libyaml alone took minutes on this text. */
    cr_assert_lt((double)(t1.tv_sec - t0.tv_sec) +
                     (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
                 0.5);
    cr_assert_neq(strstr(err, "nests lists or mappings ('[', '{') 1048560 "
                              "deep; at most 8 levels are accepted"),
                  NULL, "%s", err);
    cr_assert_eq(where.line, 1);
    free(s);
}

Test(jobspec, refuses_nesting_the_byte_scan_cannot_see)
{
    /* The scan does not follow single quotes, so each ']' in quotes
     * closes a '[' and it counts depth 1 here; the parser still stops at
     * the limit. */
    expect_error("name: a\nmodel: mlp\n"
                 "y: [']', [']', [']', [']', [']', [']', [']', [']', [']', "
                 "[']', 1]]]]]]]]]]\n",
                 "line 3: lists or mappings nested more than 8 deep", NULL);
    expect_error("name: a\nmodel: mlp\nx: \"\\\"\" # '\n"
                 "y: [[[[[[[[[[1]]]]]]]]]]\n",
                 "line 4: the job file nests lists or mappings", NULL);
}

Test(jobspec, refuses_text_over_one_mebibyte_before_parsing)
{
    size_t n = ((size_t)1 << 20) + 1;
    char *s = malloc(n), err[ERRLEN] = "";
    jobspec spec;

    cr_assert_not_null(s);
    memset(s, '#', n);
    cr_assert_eq(jobspec_parse(s, n, &spec, err, sizeof(err)), FLPS_ECONFIG);
    cr_assert_str_eq(err, "the job file is 1048577 bytes; at most 1048576 are "
                          "accepted");
    free(s);
}

Test(jobspec, a_list_value_still_gets_its_own_message)
{
    expect_error("name: a\nmodel: [mlp]\n",
                 "line 2: model: found a list where a single value belongs",
                 NULL);
}

Test(jobspec, refuses_a_name_that_is_a_path_or_an_option)
{
    expect_error("name: ..\nmodel: mlp\n",
                 "line 1: name: '..' must start "
                 "with a letter or digit and hold no '..'",
                 NULL);
    expect_error("name: a..b\nmodel: mlp\n", "hold no '..'", NULL);
    expect_error("name: -rf\nmodel: mlp\n", "must start with a letter", NULL);
    expect_error("name: .hidden\nmodel: mlp\n", "must start with a letter",
                 NULL);
}

Test(jobspec, quotes_a_non_ascii_character_of_a_name_whole)
{
    expect_error("name: j\xc3\xb6\x62\nmodel: mlp\n",
                 "line 1: name: 'j\xc3\xb6\x62' contains the non-ASCII "
                 "character '\xc3\xb6'; expected a name of",
                 NULL);
    expect_error("name: \xe2\x82\xac\nmodel: mlp\n",
                 "contains the non-ASCII character '\xe2\x82\xac'", NULL);
}

Test(jobspec, a_long_value_is_never_cut_inside_a_character)
{
    char text[400], err[ERRLEN] = "";
    jobspec spec;
    size_t n = 0;

    n += (size_t)snprintf(text, sizeof(text), "name: ");
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\xc3\xb6");
    snprintf(text + n, sizeof(text) - n, "\nmodel: mlp\n");
    cr_assert_eq(parse(text, &spec, err), FLPS_ECONFIG);
    /* Every byte of the message is ASCII or part of a whole "ö". */
    for (const unsigned char *p = (const unsigned char *)err; *p; p++) {
        if (*p == 0xc3) {
            cr_assert_eq(p[1], 0xb6, "a cut character in: %s", err);
            p++;
        } else {
            cr_assert_lt(*p, 0x80, "a stray byte in: %s", err);
        }
    }
}

Test(jobspec, refuses_a_cpu_share_below_what_placement_counts)
{
    jobspec s;

    expect_error("name: a\nmodel: mlp\ncpus_per_worker: 0.0001\n",
                 "line 3: cpus_per_worker: '0.0001' is out of range",
                 "at least 0.001", NULL);
    expect_error("name: a\nmodel: mlp\ncpus_per_server: 0.0009\n",
                 "line 3: cpus_per_server: '0.0009' is out of range", NULL);
    parse_ok("name: a\nmodel: mlp\ncpus_per_worker: 0.001\n", &s);
    cr_assert_eq(s.cpus_per_worker, 0.001);
}

/* ---- command: and env: ---- */

#define CMD_BASE "name: c\nmodel: mlp\n"

static void words_of(const char *buf, uint32_t n, const char **out)
{
    cr_assert_eq(jobspec_words(buf, n, out, JOBSPEC_WORDS_MAX), n);
}

static flps_err parse_text(const char *text, jobspec *s, char *err)
{
    err[0] = '\0';
    return jobspec_parse(text, strlen(text), s, err, ERRLEN);
}

Test(jobspec, no_command_means_flworker_and_no_env)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE, &s, err), FLPS_OK, "%s", err);
    cr_assert_eq(s.command_argc, 0);
    cr_assert_eq(s.env_count, 0);
}

Test(jobspec, a_command_list_keeps_every_word_as_written)
{
    jobspec s;
    char err[ERRLEN];
    const char *w[JOBSPEC_WORDS_MAX];

    cr_assert_eq(parse_text(CMD_BASE "command: [python3, 'my train.py', "
                                     "--lr, '', \"a'b\"]\n",
                            &s, err),
                 FLPS_OK, "%s", err);
    cr_assert_eq(s.command_argc, 5);
    words_of(s.command, s.command_argc, w);
    cr_assert_str_eq(w[0], "python3");
    cr_assert_str_eq(w[1], "my train.py");
    cr_assert_str_eq(w[2], "--lr");
    cr_assert_str_eq(w[3], "", "an empty argument stays an argument");
    cr_assert_str_eq(w[4], "a'b");
}

Test(jobspec, a_command_string_is_split_like_a_shell_without_expansion)
{
    jobspec s;
    char err[ERRLEN];
    const char *w[JOBSPEC_WORDS_MAX];

    cr_assert_eq(
        parse_text(CMD_BASE
                   "command: >-\n  python3  'a b' \"c \\\"d\\\" $HOME\""
                   " e\\ f *.py ''\n",
                   &s, err),
        FLPS_OK, "%s", err);
    cr_assert_eq(s.command_argc, 6, "%u words", s.command_argc);
    words_of(s.command, s.command_argc, w);
    cr_assert_str_eq(w[0], "python3");
    cr_assert_str_eq(w[1], "a b");
    cr_assert_str_eq(w[2], "c \"d\" $HOME", "no variable is expanded");
    cr_assert_str_eq(w[3], "e f");
    cr_assert_str_eq(w[4], "*.py", "no glob is expanded");
    cr_assert_str_eq(w[5], "");
}

Test(jobspec, a_command_with_an_open_quote_is_refused_with_its_line)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE "command: python3 'train.py\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "line 3: command:"), "%s", err);
    cr_assert_not_null(strstr(err, "without its closing '"), "%s", err);
}

Test(jobspec, a_command_whose_program_is_empty_is_refused)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE "command: ['', x]\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "program"), "%s", err);
}

Test(jobspec, a_command_list_holding_a_list_is_refused)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE "command: [python3, [a, b]]\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "command: found a list"), "%s", err);
}

Test(jobspec, a_command_of_more_than_128_words_is_refused)
{
    char text[4096] = CMD_BASE "command: [p";
    jobspec s;
    char err[ERRLEN];

    for (int i = 0; i < 128; i++)
        strcat(text, ", x");
    strcat(text, "]\n");
    cr_assert_eq(parse_text(text, &s, err), FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "129 words are more than 128"), "%s", err);
}

Test(jobspec, a_command_of_more_than_4095_bytes_is_refused)
{
    static char text[8192];
    jobspec s;
    char err[ERRLEN];
    size_t n;

    snprintf(text, sizeof(text), CMD_BASE "command: p ");
    n = strlen(text);
    memset(text + n, 'a', 4100);
    text[n + 4100] = '\n';
    cr_assert_eq(parse_text(text, &s, err), FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "too long"), "%s", err);
}

Test(jobspec, env_as_a_mapping_or_a_string_gives_name_value_entries)
{
    jobspec s;
    char err[ERRLEN];
    const char *w[JOBSPEC_WORDS_MAX];

    cr_assert_eq(parse_text(CMD_BASE "env:\n  OMP_NUM_THREADS: 1\n"
                                     "  MY_NOTE: 'a = b'\n",
                            &s, err),
                 FLPS_OK, "%s", err);
    cr_assert_eq(s.env_count, 2);
    words_of(s.env, s.env_count, w);
    cr_assert_str_eq(w[0], "OMP_NUM_THREADS=1");
    cr_assert_str_eq(w[1], "MY_NOTE=a = b");
    cr_assert_eq(parse_text(CMD_BASE "env: \"A=1 B='x y'\"\n", &s, err),
                 FLPS_OK, "%s", err);
    cr_assert_eq(s.env_count, 2);
    words_of(s.env, s.env_count, w);
    cr_assert_str_eq(w[0], "A=1");
    cr_assert_str_eq(w[1], "B=x y");
}

Test(jobspec, env_may_not_set_what_the_launcher_sets)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE "env:\n  FLPS_RANK: 3\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "FLPS_RANK is set by the launcher"), "%s",
                       err);
    cr_assert(jobspec_env_is_reserved("FLPS_SERVERS", 12));
    cr_assert(jobspec_env_is_reserved("FLPS_DATA_DIR", 13));
    cr_assert(!jobspec_env_is_reserved("FLPS_SERVERSX", 13));
    cr_assert(!jobspec_env_is_reserved("HOME", 4));
}

Test(jobspec, env_names_must_be_variable_names_and_given_once)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE "env:\n  1X: a\n", &s, err), FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "'1X' is not a variable name"), "%s", err);
    cr_assert_eq(parse_text(CMD_BASE "env:\n  A-B: a\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "not a variable name"), "%s", err);
    cr_assert_eq(parse_text(CMD_BASE "env: NOEQUALS\n", &s, err), FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "not a variable name"), "%s", err);
    cr_assert_eq(parse_text(CMD_BASE "env: A=1 A=2\n", &s, err), FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "A is given twice"), "%s", err);
    cr_assert_eq(parse_text(CMD_BASE "env:\n  A: [1, 2]\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "env: found a list"), "%s", err);
}

Test(jobspec, a_second_command_replaces_nothing_it_is_a_duplicate)
{
    jobspec s;
    char err[ERRLEN];

    cr_assert_eq(parse_text(CMD_BASE "command: a\ncommand: [b]\n", &s, err),
                 FLPS_ECONFIG);
    cr_assert_not_null(strstr(err, "duplicate key 'command'"), "%s", err);
}

Test(jobspec, transport_names_are_the_transport_kinds_of_proto)
{
    /* flsched and flrun pass the job's choice on as --transport NAME, which
     * proto's transport_kind_parse reads. */
    cr_assert_str_eq(jobspec_transport_name(JOBSPEC_TRANSPORT_ZMQ), "zmq");
    cr_assert_str_eq(jobspec_transport_name(JOBSPEC_TRANSPORT_RDMA), "rdma");
    cr_assert_str_eq(jobspec_transport_name(JOBSPEC_TRANSPORT_AUTO), "auto");
}

/* A true/false key at offset off of jobspec: on by default, false is 0,
 * anything else refused with the words it takes. */
static void check_on_by_default(const char *key, size_t off)
{
    jobspec s;
    char text[128], want[160];

    parse_ok("name: a\nmodel: cnn\n", &s);
    cr_assert_eq(*(const uint32_t *)((const char *)&s + off), 1,
                 "%s: the default is on", key);
    snprintf(text, sizeof(text), "name: a\nmodel: cnn\n%s: false\n", key);
    parse_ok(text, &s);
    cr_assert_eq(*(const uint32_t *)((const char *)&s + off), 0, "%s", key);
    snprintf(text, sizeof(text), "name: a\nmodel: cnn\n%s: true\n", key);
    parse_ok(text, &s);
    cr_assert_eq(*(const uint32_t *)((const char *)&s + off), 1, "%s", key);
    snprintf(text, sizeof(text), "name: a\nmodel: cnn\n%s: 2\n", key);
    snprintf(want, sizeof(want),
             "line 3: %s: '2' is not accepted; expected one of false, true",
             key);
    expect_error(text, want, NULL);
}

Test(jobspec, overlap_is_on_by_default_and_takes_true_or_false)
{
    check_on_by_default("overlap", offsetof(jobspec, overlap));
    expect_error("name: a\nmodel: cnn\noverlap: flase\n",
                 "line 3: overlap: 'flase' is not accepted; expected one of "
                 "false, true; did you mean 'false'?",
                 NULL);
}

Test(jobspec, encryption_is_on_by_default_and_takes_true_or_false)
{
    check_on_by_default("encryption", offsetof(jobspec, encryption));
}

Test(jobspec, backend_is_cpu_by_default_and_takes_cpu_or_cuda)
{
    jobspec s;

    parse_ok("name: a\nmodel: cnn\n", &s);
    cr_assert_eq(s.backend, JOBSPEC_BACKEND_CPU, "the default is cpu");
    cr_assert_str_eq(jobspec_backend_name(s.backend), "cpu");
    /* The parser takes every backend flps knows; whether this build has
     * it is flworker's to check. */
    parse_ok("name: a\nmodel: cnn\nbackend: cuda\n", &s);
    cr_assert_eq(s.backend, JOBSPEC_BACKEND_CUDA);
    cr_assert_str_eq(jobspec_backend_name(s.backend), "cuda");
    parse_ok("name: a\nmodel: mlp\nbackend: cpu\n", &s);
    cr_assert_eq(s.backend, JOBSPEC_BACKEND_CPU);
    cr_assert_str_eq(jobspec_backend_name((jobspec_backend)7), "unknown");
    expect_error("name: a\nmodel: cnn\nbackend: gpu\n",
                 "line 3: backend: 'gpu' is not accepted; expected one of "
                 "cpu, cuda",
                 NULL);
    expect_error("name: a\nmodel: cnn\nbackend: CUDA\n",
                 "line 3: backend: 'CUDA' is not accepted; expected one of "
                 "cpu, cuda",
                 NULL);
}

/* ---- density_warmup ---- */

#define WARM_BASE "name: w\nmodel: mlp\niterations: 1500\n"

Test(jobspec, reads_a_density_warm_up_and_defaults_its_start)
{
    jobspec s;

    parse_ok(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: 300\n", &s);
    cr_assert_eq(s.density_warmup, 300);
    cr_assert_eq(s.density_warmup_start, 0.25, "the documented default");
    parse_ok(WARM_BASE "compression: topk:0.01\ndensity_warmup: 1500\n"
                       "density_warmup_start: 1\n",
             &s);
    cr_assert_eq(s.density_warmup, 1500, "as long as the job at most");
    cr_assert_eq(s.density_warmup_start, 1.0);
    parse_ok(WARM_BASE "compression: dgc:0.001\ndensity_warmup: 1\n"
                       "density_warmup_start: 0.002\n",
             &s);
    cr_assert_eq(s.density_warmup_start, 0.002);
    parse_ok(WARM_BASE "compression: auto\ndensity_warmup: 100\n", &s);
    cr_assert_eq(s.density_warmup, 100);
    parse_ok("name: w\nmodel: mlp\n", &s);
    cr_assert_eq(s.density_warmup, 0, "no warm-up unless asked");
    /* 0 is no warm-up, accepted with any codec and mode. */
    parse_ok(WARM_BASE "compression: dense\nmode: async\ndensity_warmup: 0\n",
             &s);
    cr_assert_eq(s.density_warmup, 0);
}

Test(jobspec, refuses_a_density_warm_up_out_of_bounds)
{
    expect_error(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: 1501\n",
                 "line 5", "density_warmup", "more than iterations (1500)",
                 "from 0 to 1500", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: -1\n",
                 "density_warmup", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: 1e2\n",
                 "density_warmup", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: 10\n"
                           "density_warmup_start: 0\n",
                 "line 6", "density_warmup_start", "0 < S <= 1", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: 10\n"
                           "density_warmup_start: 1.5\n",
                 "density_warmup_start", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.001\ndensity_warmup: 10\n"
                           "density_warmup_start: nan\n",
                 "density_warmup_start", NULL);
}

Test(jobspec, refuses_a_start_not_above_the_codecs_density)
{
    expect_error(WARM_BASE "compression: topk:0.5\ndensity_warmup: 10\n",
                 "line 5", "density_warmup_start: 0.25 is not above",
                 "'topk:0.5'", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.1\ndensity_warmup: 10\n"
                           "density_warmup_start: 0.1\n",
                 "line 6", "density_warmup_start: 0.1 is not above", NULL);
}

Test(jobspec, refuses_a_density_warm_up_where_nothing_follows_it)
{
    const char *codecs[] = {"dense", "fp16", "randk:0.01", "qsgd:4", "sign"};

    for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text),
                 WARM_BASE "compression: %s\ndensity_warmup: 10\n", codecs[i]);
        expect_error(text, "line 5", "density_warmup: compression",
                     "no selection density", "topk:D, gtopk:D, dgc:D or auto",
                     NULL);
    }
    expect_error(WARM_BASE "compression: topk:0.01\nmode: async\n"
                           "density_warmup: 10\n",
                 "line 6", "mode 'async'", "only ssgd", NULL);
    expect_error(WARM_BASE "compression: topk:0.01\nmode: ssp:2\n"
                           "density_warmup: 10\n",
                 "mode 'ssp'", NULL);
    expect_error(WARM_BASE "compression: topk:0.01\nmode: fedavg\n"
                           "density_warmup: 10\n",
                 "mode 'fedavg'", NULL);
}

Test(jobspec, takes_a_density_warm_up_for_a_command_job_with_every_check)
{
    jobspec s;
    char err[ERRLEN];

    /* flps.torch follows it through FLPS_DENSITY_WARMUP (workerenv). */
    parse_ok(WARM_BASE "compression: gtopk:0.01\ndensity_warmup: 50\n"
                       "density_warmup_start: 0.5\n"
                       "command: [python3, train.py]\n",
             &s);
    cr_assert_gt(s.command_argc, 0);
    cr_assert_eq(s.density_warmup, 50);
    cr_assert_eq(s.density_warmup_start, 0.5);
    parse_ok(WARM_BASE "compression: auto\ndensity_warmup: 100\n"
                       "command: [python3, train.py]\n",
             &s);
    cr_assert_eq(s.density_warmup, 100);
    /* The other checks hold for a command: job as for flworker. */
    expect_error(WARM_BASE "compression: topk:0.01\nmode: async\n"
                           "density_warmup: 10\ncommand: [python3, t.py]\n",
                 "line 6", "mode 'async'", "only ssgd", NULL);
    expect_error(WARM_BASE "compression: fp16\ndensity_warmup: 10\n"
                           "command: [python3, t.py]\n",
                 "line 5", "no selection density", NULL);
    expect_error(WARM_BASE "compression: topk:0.5\ndensity_warmup: 10\n"
                           "command: [python3, t.py]\n",
                 "density_warmup_start: 0.25 is not above", NULL);
    expect_error(WARM_BASE "compression: gtopk:0.01\ndensity_warmup: 1501\n"
                           "command: [python3, t.py]\n",
                 "more than iterations (1500)", NULL);
    /* The job file's keys set them; env: may not. */
    cr_assert_eq(
        parse_text(CMD_BASE "env:\n  FLPS_DENSITY_WARMUP: 5\n", &s, err),
        FLPS_ECONFIG);
    cr_assert_not_null(
        strstr(err, "FLPS_DENSITY_WARMUP is set by the launcher"), "%s", err);
    cr_assert(jobspec_env_is_reserved("FLPS_DENSITY_WARMUP_START", 25));
}

Test(jobspec, the_warm_up_example_holds_its_documented_setting)
{
    char path[512], text[8192], err[ERRLEN] = "", comp[32];
    size_t len;
    jobspec s;
    FILE *f;

    snprintf(path, sizeof(path), "%s/examples/fmnist-mlp-gtopk-warmup.yaml",
             FLPS_SOURCE_DIR);
    f = fopen(path, "r");
    cr_assert_neq(f, NULL, "%s", path);
    len = fread(text, 1, sizeof(text), f);
    fclose(f);
    cr_assert_eq(jobspec_parse(text, len, &s, err, sizeof(err)), FLPS_OK,
                 "%s: %s", path, err);
    jobspec_comp_format(&s, comp, sizeof(comp));
    cr_assert_str_eq(comp, "gtopk:0.001");
    cr_assert_eq(s.density_warmup, 1000);
    cr_assert_eq(s.density_warmup_start, 0.01);
    cr_assert_eq(s.iterations, 1500);
    cr_assert_eq(s.workers, 4);
    cr_assert_eq(s.servers, 2);
}

Test(jobspec, tells_the_keys_the_file_gives_from_its_defaults)
{
    const char *text = "name: g\nmodel: mlp\ncompression: dense\n";
    jobspec s;
    char buf[64];

    cr_assert_eq(jobspec_parse(text, strlen(text), &s, NULL, 0), FLPS_OK);
    cr_assert(jobspec_is_given(&s, "compression"), "given, though default");
    cr_assert_not(jobspec_is_given(&s, "mode"));
    cr_assert_not(jobspec_is_given(&s, "no_such_key"));
    cr_assert_not(jobspec_is_given(NULL, "compression"));
    jobspec_given_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "name,model,compression");
    jobspec_given_format(&s, buf, 12);
    cr_assert_str_eq(buf, "name,model", "a key is listed whole or not at all");
    cr_assert_eq(jobspec_give(&s, "mode"), FLPS_OK);
    cr_assert(jobspec_is_given(&s, "mode"));
    cr_assert_eq(jobspec_give(&s, "modes"), FLPS_EINVAL);
}

Test(jobspec, tells_whether_what_the_workers_ran_differs_from_the_file)
{
    const char *text = "name: r\nmodel: mlp\ncompression: gtopk:0.01\n"
                       "mode: ssp:2\n";
    const char *bare = "name: r\nmodel: mlp\n";
    jobspec s, b;
    char job[64];

    cr_assert_eq(jobspec_parse(text, strlen(text), &s, NULL, 0), FLPS_OK);
    cr_assert_eq(jobspec_parse(bare, strlen(bare), &b, NULL, 0), FLPS_OK);
    cr_assert_eq(
        jobspec_ran_differs(&s, "compression", "gtopk:0.010", job, sizeof(job)),
        0, "one setting, two spellings");
    cr_assert_str_eq(job, "gtopk:0.01");
    cr_assert_eq(
        jobspec_ran_differs(&s, "compression", "dense", job, sizeof(job)), 1);
    cr_assert_eq(jobspec_ran_differs(&s, "mode", "ssp:2", job, sizeof(job)), 0);
    cr_assert_str_eq(job, "ssp:2");
    cr_assert_eq(jobspec_ran_differs(&s, "mode", "ssgd", NULL, 0), 1);
    cr_assert_eq(jobspec_ran_differs(&s, "mode", "", NULL, 0), 0,
                 "nothing said, nothing to hold against the file");
    /* A key the file leaves out is the program's; "mixed" never is. */
    cr_assert_eq(jobspec_ran_differs(&b, "compression", "topk:0.1", NULL, 0),
                 0);
    cr_assert_eq(jobspec_ran_differs(&b, "mode", "mixed", NULL, 0), 1);
    cr_assert_eq(jobspec_ran_differs(&s, "lr", "0.1", job, sizeof(job)), 0);
}

Test(jobspec, reads_the_federated_strategy_keys)
{
    jobspec s;
    char buf[64];

    parse_ok("name: m\nmodel: mlp\nmode: fedavg\npartition: shards:2\n"
             "local_epochs: 3\nprox_mu: 0.01\nserver_optimizer: momentum:0.9\n"
             "server_lr: 0.5\n",
             &s);
    cr_assert_eq(s.partition, JOBSPEC_PARTITION_SHARDS);
    cr_assert_eq(s.partition_shards, 2);
    cr_assert_eq(s.local_epochs, 3);
    cr_assert_eq(s.prox_mu, 0.01);
    cr_assert_eq(s.server_optimizer, JOBSPEC_SERVER_OPT_MOMENTUM);
    cr_assert_eq(s.server_momentum, 0.9);
    cr_assert_eq(s.server_lr, 0.5);
    jobspec_partition_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "shards:2");
    jobspec_server_opt_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "momentum:0.9");
    parse_ok("name: m\nmodel: mlp\nmode: fedavg\nserver_optimizer: adam\n", &s);
    cr_assert_eq(s.server_optimizer, JOBSPEC_SERVER_OPT_ADAM);
    cr_assert_eq(s.server_momentum, 0.0);
    jobspec_server_opt_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "adam");
    parse_ok("name: m\nmodel: mlp\n", &s);
    cr_assert_eq(s.server_optimizer, JOBSPEC_SERVER_OPT_SGD, "the default");
    cr_assert_eq(s.server_lr, 1.0);
    cr_assert_eq(s.prox_mu, 0.0);
    cr_assert_eq(s.local_epochs, 0);
    jobspec_server_opt_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "sgd");
    jobspec_partition_format(&s, buf, sizeof(buf));
    cr_assert_str_eq(buf, "iid");
}

Test(jobspec, refuses_a_federated_strategy_outside_fedavg_and_bad_values)
{
    expect_error("name: a\nmodel: mlp\nprox_mu: 0.01\n", "line 3: prox_mu",
                 "only mode fedavg", "'ssgd'", NULL);
    expect_error("name: a\nmodel: mlp\nmode: async\n"
                 "server_optimizer: momentum:0.9\n",
                 "line 4: server_optimizer", "only mode fedavg", NULL);
    expect_error("name: a\nmodel: mlp\nmode: fedavg\ncompression: gtopk:0.01\n"
                 "server_optimizer: adam\n",
                 "line 5: server_optimizer", "gtopk", "topk:D", NULL);
    expect_error("name: a\nmodel: mlp\nmode: fedavg\n"
                 "server_optimizer: momentum:1\n",
                 "server_optimizer", "0 <= B < 1", NULL);
    expect_error(
        "name: a\nmodel: mlp\nmode: fedavg\nserver_optimizer: momentum\n",
        "server_optimizer", "needs a momentum B", NULL);
    expect_error(
        "name: a\nmodel: mlp\nmode: fedavg\nserver_optimizer: nesterov\n",
        "server_optimizer", "sgd, momentum:B, adam", NULL);
    expect_error("name: a\nmodel: mlp\nmode: fedavg\nserver_lr: 0\n",
                 "server_lr", NULL);
    expect_error("name: a\nmodel: mlp\npartition: shards:0\n", "partition",
                 "shards:N", NULL);
    expect_error("name: a\nmodel: mlp\nmode: fedavg\nprox_mu: -1\n", "prox_mu",
                 NULL);
}

/* ---- mode saps (decentralized SAPS-PSGD) ---- */

Test(jobspec, a_saps_job_takes_its_keys_and_runs_no_shard)
{
    jobspec s;

    parse_ok("name: a\nmodel: mlp\nworkers: 8\nmode: saps\n", &s);
    cr_assert_eq(s.mode, JOBSPEC_MODE_SAPS);
    cr_assert_eq(s.servers, 0, "no shard holds the model");
    cr_assert_eq(s.local_steps, 1, "one step between exchanges unless given");
    cr_assert_float_eq(s.saps_density, 0.01, 1e-12);
    cr_assert_eq(s.peer_selection, JOBSPEC_PEERS_ADAPTIVE);
    cr_assert_eq(s.bandwidth_threshold, -1.0, "auto");
    cr_assert_eq(s.connectivity_window, 10);
    cr_assert_eq(s.bandwidth_reprobe, 0);
    cr_assert_float_eq(s.peer_deadline, 10.0, 1e-12);
    parse_ok("name: a\nmodel: mlp\nworkers: 4\nmode: saps\nservers: 0\n"
             "local_steps: 4\nsaps_density: 0.05\npeer_selection: ring\n"
             "bandwidth_threshold: 50M\nconnectivity_window: 3\n"
             "bandwidth_reprobe: 200\npeer_deadline: 2.5\n",
             &s);
    cr_assert_eq(s.local_steps, 4);
    cr_assert_float_eq(s.saps_density, 0.05, 1e-12);
    cr_assert_eq(s.peer_selection, JOBSPEC_PEERS_RING);
    cr_assert_float_eq(s.bandwidth_threshold, 50e6, 1e-3);
    cr_assert_eq(s.connectivity_window, 3);
    cr_assert_eq(s.bandwidth_reprobe, 200);
    cr_assert_float_eq(s.peer_deadline, 2.5, 1e-12);
    cr_assert_str_eq(jobspec_mode_name(s.mode), "saps");
    cr_assert_str_eq(jobspec_peer_selection_name(s.peer_selection), "ring");
    /* Other modes keep their servers and local_steps defaults. */
    parse_ok("name: a\nmodel: mlp\n", &s);
    cr_assert_eq(s.servers, 1);
    cr_assert_eq(s.local_steps, 10);
}

Test(jobspec, refuses_what_a_saps_job_cannot_run)
{
    expect_error("name: a\nmodel: mlp\nworkers: 4\nmode: saps\nservers: 2\n",
                 "line 5: servers", "runs no shard", NULL);
    expect_error("name: a\nmodel: mlp\nservers: 0\n", "line 3: servers",
                 "out of range for mode ssgd", "0 for mode saps", NULL);
    expect_error("name: a\nmodel: mlp\nmode: saps\n", "workers",
                 "exchanges between workers", NULL);
    expect_error("name: a\nmodel: mlp\nworkers: 2\nmode: saps\n"
                 "compression: topk:0.01\n",
                 "line 5: compression", "saps_density", NULL);
    expect_error("name: a\nmodel: mlp\nsaps_density: 0\n", "saps_density",
                 "out of range", NULL);
    expect_error("name: a\nmodel: mlp\npeer_selection: fastest\n",
                 "peer_selection", "one of adaptive, random, ring", NULL);
    expect_error("name: a\nmodel: mlp\nbandwidth_threshold: fast\n",
                 "bandwidth_threshold", "is not a size", "auto", NULL);
    expect_error("name: a\nmodel: mlp\nconnectivity_window: 1\n",
                 "connectivity_window", "from 2", NULL);
    expect_error("name: a\nmodel: mlp\npeer_deadline: 0\n", "peer_deadline",
                 "out of range", NULL);
}
