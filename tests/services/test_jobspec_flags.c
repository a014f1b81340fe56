/* Tests for services/jobspec_flags.c: the job file's keys as a launcher's
 * flags, the command after "--", and the job text a file and flags make. */
#include "services/jobspec_flags.h"

#include <criterion/criterion.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

#define ERRLEN 1100

/* What a command line said, taken as flrun takes it. */
typedef struct said {
    int rc; /* 1 a job; -1 a flag refused, -2 the text, -3 the job */
    jobspec_flags f;
    char *text; /* the job text (owned) */
    jobspec s;
    char err[ERRLEN];
} said;

static said *last; /* freed by the suite's fini */

static void said_fini(void)
{
    if (last != NULL)
        flps_free(last->text);
    free(last);
    last = NULL;
}

/* getopt_long over argv (NULL-terminated) with the flags' options, as
 * flrun and flsubmit run it (a word getopt refuses and the words it
 * leaves checked as flsubmit checks them); the job text for file (NULL =
 * no job file, unless argv names one: flrun's and flsubmit's FILE is
 * then read, here taken as empty), parsed as flrun does, its message
 * explained. */
static said *say(char **argv, const char *file)
{
    struct option opts[JOBSPEC_FLAGS_KEYS + 1];
    jobspec_where where = {0};
    char msg[ERRLEN], letter[3] = "-";
    const char *operand = NULL;
    size_t n, len;
    int c, nargs, argc = 0;
    said *r;

    said_fini();
    last = r = calloc(1, sizeof(*r));
    cr_assert_not_null(r);
    while (argv[argc] != NULL)
        argc++;
    jobspec_flags_init(&r->f);
    n = jobspec_flags_options(&r->f, opts, JOBSPEC_FLAGS_KEYS);
    cr_assert_gt(n, 0);
    memset(&opts[n], 0, sizeof(opts[n]));
    nargs = jobspec_flags_split(&r->f, argc, argv);
    optind = 0; /* a fresh scan: GNU getopt starts over */
    opterr = 0;
    while ((c = getopt_long(nargs, argv, ":" JOBSPEC_FLAGS_SHORT, opts,
                            NULL)) != -1) {
        int got;

        if (c == '?' || c == ':') {
            letter[1] = optopt > 0 && optopt < 0x80 ? (char)optopt : '\0';
            cr_assert_eq(
                jobspec_flags_refuse_word(letter[1] ? letter : argv[optind - 1],
                                          c == ':', r->err, ERRLEN),
                FLPS_ECONFIG);
            return r->rc = -1, r;
        }
        got = jobspec_flags_take(&r->f, c, optarg, r->err, ERRLEN);
        cr_assert_neq(got, 0, "getopt gave %d for %s", c, argv[optind - 1]);
        if (got < 0)
            return r->rc = -1, r;
    }
    if (jobspec_flags_operands(&r->f, argc, nargs, argv, optind, &operand,
                               r->err, ERRLEN) != FLPS_OK)
        return r->rc = -1, r;
    if (operand != NULL && file == NULL)
        file = "";
    if (jobspec_flags_text(&r->f, file, file ? strlen(file) : 0, &r->text, &len,
                           r->err, ERRLEN) != FLPS_OK)
        return r->rc = -2, r;
    cr_assert_eq(strlen(r->text), len);
    if (jobspec_load_text("job.yaml", r->text, len, &r->s, msg, sizeof(msg),
                          &where) != FLPS_OK) {
        jobspec_flags_explain(&r->f, &where, msg, r->err, ERRLEN);
        return r->rc = -3, r;
    }
    return r->rc = 1, r;
}

TestSuite(jobspec_flags, .fini = said_fini);

Test(jobspec_flags, every_key_but_command_and_env_is_a_flag_spelled_with_dashes)
{
    jobspec_flags f;
    struct option opts[JOBSPEC_FLAGS_KEYS];
    size_t n;
    int batch = 0, workers = 0;

    jobspec_flags_init(&f);
    n = jobspec_flags_options(&f, opts, JOBSPEC_FLAGS_KEYS);
    cr_assert_gt(n, 30, "the whole key table: %zu", n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_null(strchr(opts[i].name, '_'), "%s", opts[i].name);
        cr_assert_neq(strcmp(opts[i].name, "command"), 0);
        cr_assert_neq(strcmp(opts[i].name, "env"), 0);
        cr_assert_eq(opts[i].has_arg, required_argument);
        batch += strcmp(opts[i].name, "batch-size") == 0;
        workers += strcmp(opts[i].name, "workers") == 0;
    }
    cr_assert_eq(batch, 1);
    cr_assert_eq(workers, 1);
    cr_assert_eq(jobspec_flags_options(&f, opts, 3), 0, "no room: none");
}

Test(jobspec_flags, takes_short_and_long_flags_and_leaves_other_options)
{
    jobspec_flags f;
    char err[ERRLEN];

    jobspec_flags_init(&f);
    cr_assert_eq(jobspec_flags_take(&f, 'n', "4", err, sizeof(err)), 1);
    cr_assert_eq(jobspec_flags_take(&f, 's', "2", err, sizeof(err)), 1);
    cr_assert_eq(jobspec_flags_take(&f, 'q', NULL, err, sizeof(err)), 0,
                 "not a flag: the caller's own option");
    cr_assert_eq(
        jobspec_flags_take(&f, JOBSPEC_FLAGS_VAL + 999, "x", err, sizeof(err)),
        0);
    cr_assert(jobspec_flags_given(&f));
}

Test(jobspec_flags, refuses_a_bad_value_naming_the_flag_as_the_file_would)
{
    char *workers[] = {"flrun", "-n", "0", NULL};
    char *comp[] = {"flrun", "--compression", "gtop:0.01", NULL};
    char *batch[] = {"flrun", "--batch-size", "8x", NULL};
    char *dir[] = {"flrun", "--data-dir", "/d\xff", NULL};
    said *r;

    cr_assert_eq(say(workers, NULL)->rc, -1);
    cr_assert_str_eq(last->err, "--workers: '0' is out of range; expected an "
                                "integer from 1 to 1024");
    r = say(comp, NULL);
    cr_assert_eq(r->rc, -1);
    cr_assert_not_null(strstr(r->err, "--compression: 'gtop:0.01' is not a "
                                      "codec; expected one of dense, "),
                       "%s", r->err);
    cr_assert_not_null(strstr(r->err, "did you mean 'gtopk:0.01'?"), "%s",
                       r->err);
    cr_assert_eq(say(batch, NULL)->rc, -1);
    cr_assert_not_null(strstr(last->err, "--batch-size: '8x' "), "%s",
                       last->err);
    cr_assert_eq(say(dir, NULL)->rc, -1);
    cr_assert_str_eq(last->err, "--data-dir: the value is not UTF-8 text");
}

Test(jobspec_flags, a_job_said_on_the_command_line_alone_needs_no_file_or_model)
{
    char *argv[] = {"flrun",      "-n",       "4",
                    "-s",         "1",        "--compression",
                    "gtopk:0.01", "--",       "/usr/bin/python3",
                    "-u",         "train.py", "--lr",
                    "0.1",        NULL};
    const char *words[8];
    said *r = say(argv, NULL);

    cr_assert_eq(r->rc, 1, "%s\n%s", r->err, r->text);
    cr_assert_eq(r->f.command_argc, 5);
    cr_assert_str_eq(r->s.name, "train", "named after the script: %s", r->text);
    cr_assert_eq(r->s.workers, 4);
    cr_assert_eq(r->s.servers, 1);
    cr_assert_eq(r->s.compression, CODEC_GTOPK);
    cr_assert_float_eq(r->s.density, 0.01, 1e-12);
    cr_assert_eq(r->s.model, JOBSPEC_MODEL_NONE);
    cr_assert_str_eq(jobspec_model_name(r->s.model), "none");
    cr_assert_eq(r->s.command_argc, 5);
    jobspec_words(r->s.command, r->s.command_argc, words, 8);
    cr_assert_str_eq(words[0], "/usr/bin/python3");
    cr_assert_str_eq(words[3], "--lr", "the program's own options stay its");
}

Test(jobspec_flags, a_built_in_job_of_flags_alone_is_named_after_its_model)
{
    char *argv[] = {"flrun", "-n",           "2",  "--model",
                    "mlp",   "--iterations", "50", NULL};
    said *r = say(argv, NULL);

    cr_assert_eq(r->rc, 1, "%s", r->err);
    cr_assert_str_eq(r->s.name, "mlp");
    cr_assert_eq(r->s.model, JOBSPEC_MODEL_MLP);
    cr_assert_eq(r->s.iterations, 50);
    cr_assert_eq(r->s.command_argc, 0);
}

Test(jobspec_flags, a_built_in_job_without_a_model_is_refused)
{
    char *argv[] = {"flrun", "-n", "2", NULL};
    said *r = say(argv, NULL);

    cr_assert_eq(r->rc, -3);
    cr_assert_not_null(strstr(r->err, "missing required key 'model'"), "%s",
                       r->err);
    cr_assert_not_null(strstr(r->err, "a command: job may leave it out"), "%s",
                       r->err);
}

Test(jobspec_flags, the_files_own_errors_keep_their_line_numbers)
{
    static const char file[] = "# a job\n"
                               "name: from-file\n"
                               "model: mlp\n"
                               "workers: 8\n"
                               "compression: dense   # for now\n"
                               "iterations: 300\n"
                               "lr: 0.1\n"
                               "momentum: 2\n";
    char *argv[] = {"flrun",    "-n",     "3", "--compression",
                    "topk:0.1", "--seed", "9", NULL};
    said *r = say(argv, file);

    cr_assert_eq(r->rc, -3);
    cr_assert_not_null(strstr(r->err, "job.yaml: line 8: momentum: '2'"),
                       "%s\n%s", r->err, r->text);
}

Test(jobspec_flags, flags_win_over_a_block_file_and_keys_it_lacks_are_added)
{
    static const char file[] = "name: from-file\n"
                               "model: cnn\n"
                               "workers: 8\n"
                               "command:\n"
                               "- /bin/old\n"
                               "- x\n"
                               "compression: dense   # for now\n"
                               "iterations: 300";
    char *argv[] = {"flrun",    "-n",     "3", "--compression",
                    "topk:0.1", "--seed", "9", "--",
                    "/bin/new", "a b",    NULL};
    const char *words[4];
    said *r = say(argv, file);

    cr_assert_eq(r->rc, 1, "%s\n%s", r->err, r->text);
    cr_assert_str_eq(r->s.name, "from-file", "the file's name stays");
    cr_assert_eq(r->s.model, JOBSPEC_MODEL_CNN);
    cr_assert_eq(r->s.workers, 3);
    cr_assert_eq(r->s.compression, CODEC_TOPK);
    cr_assert_eq(r->s.iterations, 300);
    cr_assert_eq(r->s.seed, 9, "added at the end of the file: %s", r->text);
    cr_assert_eq(r->s.command_argc, 2);
    jobspec_words(r->s.command, r->s.command_argc, words, 4);
    cr_assert_str_eq(words[0], "/bin/new");
    cr_assert_str_eq(words[1], "a b");
    cr_assert_eq(r->f.line[0], 0, "name is the file's");
    /* Line 8 is still iterations; the added key comes after it. */
    cr_assert_not_null(strstr(r->text, "\niterations: 300\nseed: \"9\"\n"),
                       "%s", r->text);
}

Test(jobspec_flags, a_file_with_non_ascii_text_a_bom_and_crlf_takes_the_flags)
{
    /* libyaml counts characters: the bytes of "é" must not shift where
     * a value is replaced. */
    static const char file[] = "\xef\xbb\xbf# caf\xc3\xa9 \xc3\xa9t\xc3\xa9\r\n"
                               "name: j\r\n"
                               "model: mlp # \xc3\xa9\xc3\xa9\xc3\xa9\r\n"
                               "workers: 22\r\n"
                               "command: [\"caf\xc3\xa9\", x]\r\n"
                               "lr: 0.5\r\n";
    char *argv[] = {"flrun", "-n", "3", "--", "/bin/new", NULL};
    said *r = say(argv, file);

    cr_assert_eq(r->rc, 1, "%s\n%s", r->err, r->text);
    cr_assert_eq(r->s.workers, 3);
    cr_assert_eq(r->s.command_argc, 1);
    cr_assert_float_eq(r->s.lr, 0.5, 1e-12);
    cr_assert_not_null(strstr(r->text, "\r\nworkers: \"3\"\r\ncommand: "
                                       "[\"/bin/new\"]\r\nlr: 0.5\r\n"),
                       "%s", r->text);
}

Test(jobspec_flags, flags_win_over_a_json_file)
{
    static const char *const files[] = {
        "{\"name\": \"j\", \"model\": \"mlp\", \"workers\": 8,}\n",
        "{\"name\":\"j\",\"model\":\"mlp\"}"};
    char *argv[] = {"flrun", "-n", "2", "--lr", "0.5", NULL};

    for (size_t i = 0; i < 2; i++) {
        said *r = say(argv, files[i]);

        cr_assert_eq(r->rc, 1, "%s\n%s", r->err, r->text);
        cr_assert_eq(r->s.workers, 2);
        cr_assert_float_eq(r->s.lr, 0.5, 1e-12);
    }
}

Test(jobspec_flags, any_command_word_reads_back_as_given)
{
    char *argv[] = {"flrun",
                    "--",
                    "/bin/echo",
                    "say \"hi\"",
                    "back\\slash",
                    "tab\there",
                    "line\nbreak",
                    "caf\xc3\xa9",
                    "ls\xe2\x80\xa8sep",
                    "# not a comment",
                    "{[,]}",
                    "",
                    NULL};
    const char *words[16];
    said *r = say(argv, NULL);

    cr_assert_eq(r->rc, 1, "%s\n%s", r->err, r->text);
    cr_assert_eq(r->s.command_argc, 10);
    jobspec_words(r->s.command, r->s.command_argc, words, 16);
    for (size_t i = 0; i < 10; i++)
        cr_assert_str_eq(words[i], argv[i + 2], "word %zu in %s", i, r->text);
    cr_assert_str_eq(r->s.name, "echo");
}

Test(jobspec_flags, a_command_that_is_not_one_is_refused_before_any_text)
{
    char *empty[] = {"flrun", "--", "", "x", NULL};
    char *bytes[] = {"flrun", "--", "/bin/x", "\xc3", NULL};

    cr_assert_eq(say(empty, NULL)->rc, -2);
    cr_assert_not_null(strstr(last->err, "the command after --: the program "
                                         "(the first word) is empty"),
                       "%s", last->err);
    cr_assert_eq(say(bytes, NULL)->rc, -2);
    cr_assert_str_eq(last->err,
                     "the command after --: word 2 is not UTF-8 text");
}

Test(jobspec_flags, an_error_about_an_added_flag_names_the_flag)
{
    static const char want[] = "--density-warmup: compression 'dense' has no "
                               "selection density";
    char *argv[] = {"flrun", "--density-warmup", "100", NULL};
    said *r = say(argv, "name: j\nmodel: mlp\n");

    cr_assert_eq(r->rc, -3);
    cr_assert_eq(strncmp(r->err, want, strlen(want)), 0, "%s", r->err);
}

Test(jobspec_flags, a_file_that_is_no_mapping_is_left_for_the_parser_to_refuse)
{
    static const char file[] = "- a list\n- not a job\n";
    char *argv[] = {"flrun", "-n", "2", NULL};
    said *r = say(argv, file);

    cr_assert_eq(r->rc, -3);
    cr_assert_str_eq(r->text, file);
    cr_assert_not_null(strstr(r->err, "must be a mapping"), "%s", r->err);
}

Test(jobspec_flags, names_a_job_after_its_script_module_or_program)
{
    char *py_m[] = {"x", "--", "python3.11", "-m", "pkg.sub.train", NULL};
    char *sh[] = {"x", "--", "./scripts/run job.sh", NULL};
    char *code[] = {"x", "--", "python3", "-c", "print(1)", NULL};
    char *dots[] = {"x", "--", "/opt/..hidden..x.bin", NULL};
    char *named[] = {"x", "--name", "mine", "--", "python3", "t.py", NULL};
    char *named2[] = {"x", "--name", "my-job", "--", "python3", "t.py", NULL};
    char *space[] = {"x", "--", "./bin/my prog", NULL};
    char *cnn[] = {"x", "--model", "cnn", NULL};
    struct {
        char **argv;
        const char *name;
    } cases[] = {{py_m, "train"},    {sh, "run-job"}, {code, "python3"},
                 {dots, "hidden.x"}, {named, "mine"}, {named2, "my-job"},
                 {space, "my-prog"}, {cnn, "cnn"}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        said *r = say(cases[i].argv, NULL);

        cr_assert_eq(r->rc, 1, "%s", r->err);
        cr_assert_str_eq(r->s.name, cases[i].name);
    }
}

Test(jobspec_flags, splits_at_the_first_double_dash_only)
{
    char *argv[] = {"flrun", "-n", "2", "--", "prog", "--", "x", NULL};
    char *none[] = {"flrun", "job.yaml", NULL};
    jobspec_flags f;

    jobspec_flags_init(&f);
    cr_assert_eq(jobspec_flags_split(&f, 7, argv), 3);
    cr_assert_eq(f.command_argc, 3);
    cr_assert_str_eq(f.command[1], "--", "the program's own -- stays");
    jobspec_flags_init(&f);
    cr_assert_eq(jobspec_flags_split(&f, 2, none), 2);
    cr_assert_eq(f.command_argc, 0);
    cr_assert_not(jobspec_flags_given(&f));
}

Test(jobspec_flags, help_lists_the_short_flags_and_every_long_one)
{
    flps_strbuf b = FLPS_STRBUF_INIT;

    cr_assert_eq(jobspec_flags_help(&b), FLPS_OK);
    cr_assert_not_null(strstr(b.data, "-n/--workers N"), "%s", b.data);
    cr_assert_not_null(strstr(b.data, "-s/--servers N"), "%s", b.data);
    cr_assert_not_null(strstr(b.data, "--batch-size"), "%s", b.data);
    cr_assert_not_null(strstr(b.data, "--time-limit"), "%s", b.data);
    cr_assert_not_null(strstr(b.data, "--compression,"), "%s", b.data);
    cr_assert_null(strstr(b.data, "--command"), "%s", b.data);
    cr_assert_null(strstr(b.data, "--env"), "%s", b.data);
    cr_assert_null(strstr(strstr(b.data, "--workers") + 1, "--workers"),
                   "--workers once: %s", b.data);
    /* In the job file's order. */
    cr_assert_eq(strncmp(b.data, "  --name, --model, ", 19), 0, "%s", b.data);
    for (const char *l = b.data; *l != '\0';) {
        const char *nl = strchr(l, '\n');

        cr_assert_not_null(nl);
        cr_assert_leq(nl - l, 78, "a line over 78 columns: %.*s", (int)(nl - l),
                      l);
        l = nl + 1;
    }
    flps_strbuf_fini(&b);
}

/* flsubmit submit's words, which it reads here as flrun reads its own. */

Test(jobspec_flags, makes_the_job_text_of_the_torchrun_words)
{
    char *argv[] = {
        "flsubmit",      "-n",         "4",  "-s",      "1",
        "--compression", "gtopk:0.01", "--", "python3", "/src/train.py",
        "--lr",          "0.1",        NULL};
    said *r = say(argv, NULL);

    cr_assert_eq(r->rc, 1, "%s", r->err);
    cr_assert_str_eq(r->text, "name: \"train\"\n"
                              "workers: \"4\"\n"
                              "servers: \"1\"\n"
                              "compression: \"gtopk:0.01\"\n"
                              "command: [\"python3\", \"/src/train.py\", "
                              "\"--lr\", \"0.1\"]\n");
}

Test(jobspec_flags, the_text_parses_to_the_job_the_words_say)
{
    char *argv[] = {"flsubmit", "-n2",          "--servers=2", "--batch-size",
                    "64",       "--batch-size", "32",          "--mode",
                    "async",    "--model",      "mlp",         "--",
                    "python3",  "-m",           "pkg.fmnist",  "x y",
                    NULL};
    const char *words[8];
    said *r = say(argv, NULL);

    cr_assert_eq(r->rc, 1, "%s\n%s", r->err, r->text);
    cr_assert_str_eq(r->s.name, "fmnist");
    cr_assert_eq(r->s.workers, 2);
    cr_assert_eq(r->s.servers, 2);
    cr_assert_eq(r->s.batch_size, 32, "the last value wins");
    cr_assert_eq(r->s.mode, JOBSPEC_MODE_ASYNC);
    cr_assert_eq(r->s.command_argc, 4);
    cr_assert_eq(jobspec_words(r->s.command, r->s.command_argc, words, 8), 4);
    cr_assert_str_eq(words[3], "x y", "an argument stays one word");
}

/* msg about line of field, explained against r's flags. */
static const char *explained(said *r, unsigned long line, const char *field,
                             const char *msg, int *named)
{
    jobspec_where where = {0};

    where.line = line;
    snprintf(where.field, sizeof(where.field), "%s", field);
    *named = jobspec_flags_explain(&r->f, &where, msg, r->err, ERRLEN);
    return r->err;
}

Test(jobspec_flags, knows_which_flag_wrote_each_line)
{
    char *argv[] = {"flsubmit", "-n",       "4",  "--lr", "0.1", "--lr",
                    "0.2",      "--name=x", "--", "p",    NULL};
    said *r = say(argv, NULL);
    int named;

    cr_assert_eq(r->rc, 1, "%s", r->err);
    /* name: x / workers / lr / command: */
    cr_assert_str_eq(explained(r, 1, "name", "line 1: name: bad", &named),
                     "--name: bad");
    cr_assert(named);
    cr_assert_str_eq(explained(r, 2, "workers", "line 2: workers: bad", &named),
                     "--workers: bad", "-n is --workers");
    cr_assert_str_eq(explained(r, 3, "lr", "line 3: lr: bad", &named),
                     "--lr: bad");
    cr_assert_str_eq(explained(r, 4, "command", "line 4: command: bad", &named),
                     "the command after --: bad", "command: is no --flag's");
    cr_assert_str_eq(explained(r, 5, "env", "line 5: env: bad", &named),
                     "line 5: env: bad");
    cr_assert_not(named);
    cr_assert_str_eq(explained(r, 0, "lr", "lr: bad", &named), "lr: bad");
    cr_assert_not(named);
    cr_assert_str_eq(explained(r, 99, "lr", "line 99: lr: bad", &named),
                     "line 99: lr: bad");
    cr_assert_not(named);
    cr_assert_not_null(strstr(r->text, "lr: \"0.2\"\n"), "%s", r->text);
}

Test(jobspec_flags, refuses_words_that_say_no_job)
{
    char *py[] = {"flsubmit", "-n", "2", "train.py", NULL};
    char *two[] = {"flsubmit", "-n", "2", "job.yaml", "x", NULL};
    char *lr[] = {"flsubmit", "--lr", NULL};
    char *x[] = {"flsubmit", "-x", "1", NULL};
    char *dash[] = {"flsubmit", "-n", "1", "--", NULL};
    char *cmd[] = {"flsubmit", "--command", "x", NULL};
    char *env[] = {"flsubmit", "--env", "A=1", NULL};
    char *under[] = {"flsubmit", "--batch_size=32", NULL};
    char *bad_lr[] = {"flsubmit", "--lr", "\xff", NULL};
    char *bad_cmd[] = {"flsubmit", "--", "python3", "caf\xe9.py", NULL};
    static const char after[] = "'x' after the job file job.yaml: a program "
                                "and its arguments go after --";
    jobspec_flags f;
    const char *file = (const char *)0x5A;
    char *text = (char *)0x5A, err[ERRLEN];
    size_t len = 0x5A;

    cr_assert_eq(say(py, NULL)->rc, -1);
    cr_assert_str_eq(last->err, "'train.py': the program and its arguments go "
                                "after '--' (-n 2 -- python3 train.py)");
    cr_assert_eq(say(two, NULL)->rc, -1);
    cr_assert_eq(strncmp(last->err, after, strlen(after)), 0, "%s", last->err);
    cr_assert_eq(say(lr, NULL)->rc, -1);
    cr_assert_str_eq(last->err, "--lr needs a value");
    cr_assert_eq(say(x, NULL)->rc, -1);
    cr_assert(strncmp(last->err, "-x is not a flag of a job", 25) == 0, "%s",
              last->err);
    cr_assert_eq(say(dash, NULL)->rc, -1);
    cr_assert(strncmp(last->err, "nothing after --", 16) == 0, "%s", last->err);
    cr_assert_eq(say(cmd, NULL)->rc, -1);
    cr_assert(strstr(last->err, "go after '--'") != NULL, "%s", last->err);
    cr_assert_eq(say(env, NULL)->rc, -1);
    cr_assert(strstr(last->err, "job file") != NULL, "%s", last->err);
    cr_assert_eq(say(under, NULL)->rc, -1);
    cr_assert_str_eq(last->err, "--batch_size is spelled --batch-size: a flag "
                                "has '-' where its key has '_'");
    cr_assert_eq(say(bad_lr, NULL)->rc, -1);
    cr_assert(strstr(last->err, "--lr") != NULL &&
                  strstr(last->err, "UTF-8") != NULL,
              "%s", last->err);
    cr_assert_eq(say(bad_cmd, NULL)->rc, -2);
    cr_assert(strstr(last->err, "UTF-8") != NULL, "%s", last->err);

    /* Untouched on error. */
    jobspec_flags_init(&f);
    cr_assert_eq(jobspec_flags_split(&f, 4, bad_cmd), 1);
    cr_assert_eq(jobspec_flags_text(&f, NULL, 0, &text, &len, err, ERRLEN),
                 FLPS_ECONFIG);
    cr_assert_eq(text, (char *)0x5A);
    cr_assert_eq(len, 0x5A);
    jobspec_flags_init(&f);
    cr_assert_eq(jobspec_flags_operands(&f, 4, 4, py, 3, &file, err, ERRLEN),
                 FLPS_ECONFIG);
    cr_assert_eq(file, (const char *)0x5A);
}

Test(jobspec_flags, fails_cleanly_whichever_allocation_fails)
{
    char *argv[] = {"flsubmit", "-n",      "4",    "--lr", "0.1",
                    "--",       "python3", "t.py", NULL};
    static const char file[] = "name: j\nmodel: mlp\nlr: 0.5\n";
    jobspec_flags f;

    for (int with_file = 0; with_file < 2; with_file++) {
        said *r = say(argv, with_file ? file : NULL);

        cr_assert_eq(r->rc, 1, "%s", r->err);
        f = r->f;
        for (unsigned long n = 1; n < 64; n++) {
            char *text = NULL, err[ERRLEN];
            size_t len;
            flps_err rc;

            flps_alloc_fail_at(n);
            rc = jobspec_flags_text(&f, with_file ? file : NULL,
                                    with_file ? strlen(file) : 0, &text, &len,
                                    err, ERRLEN);
            flps_alloc_fail_at(0);
            cr_assert(rc == FLPS_OK || rc == FLPS_ENOMEM, "n=%lu: %d", n, rc);
            if (rc == FLPS_OK)
                cr_assert_str_eq(text, r->text, "n=%lu", n);
            flps_free(text);
        }
    }
}
