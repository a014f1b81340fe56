/* Tests of cli/submit_render.c: fixed JSON in, exact text out. */
#include "cli/submit_render.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"

static json_t *parse(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);

    cr_assert_not_null(j, "fixture parses: %s", err.text);
    return j;
}

/* Render with f and compare with the exact expected text. */
#define expect_render(call, expected)                                          \
    do {                                                                       \
        char *out_ = NULL;                                                     \
        cr_assert_eq(call, FLPS_OK);                                           \
        cr_assert_str_eq(out_, expected);                                      \
        flps_free(out_);                                                       \
    } while (0)

static const char *job_running_half =
    "{\"id\": \"j42\", \"name\": \"fmnist-gtopk\", \"state\": \"RUNNING\","
    " \"iterations\": 1500, \"restarts\": 0, \"max_restarts\": 0,"
    " \"progress\": {\"iteration\": 750, \"loss\": 0.41,"
    " \"test_accuracy\": 0.84, \"bytes_sent\": 5500000,"
    " \"dense_bytes\": 260000000, \"elapsed\": 8.0}}";

static const char *job_succeeded =
    "{\"id\": \"j42\", \"name\": \"fmnist-gtopk\", \"state\": \"SUCCEEDED\","
    " \"iterations\": 1500, \"restarts\": 0, \"max_restarts\": 0,"
    " \"reason\": \"\", \"started_at\": 1764430001.5,"
    " \"finished_at\": 1764430019.0,"
    " \"progress\": {\"iteration\": 1500, \"loss\": 0.3,"
    " \"test_accuracy\": 0.87, \"bytes_sent\": 29000000,"
    " \"dense_bytes\": 1400000000, \"elapsed\": 17.0},"
    " \"summary\": {\"test_accuracy\": 0.8768, \"iterations\": 1500,"
    " \"bytes_sent\": 117780755, \"bytes_received\": 160458157,"
    " \"dense_bytes\": 5648375789, \"wall_seconds\": 17.5}}";

Test(submit_render, bytes_use_the_si_units_flrun_prints)
{
    char buf[32];
    struct {
        double in;
        const char *out;
    } cases[] = {
        {0, "0 B"},          {999, "999 B"},          {1000, "1.0 KB"},
        {5500000, "5.5 MB"}, {117780755, "117.8 MB"}, {5648375789.0, "5.6 GB"},
        {999960, "1.0 MB"},  {2.5e12, "2.5 TB"},      {-1, "-"},
        {NAN, "-"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        submit_render_bytes(cases[i].in, buf, sizeof(buf));
        cr_expect_str_eq(buf, cases[i].out, "%g bytes", cases[i].in);
    }
}

Test(submit_render, node_memory_uses_iec_units_without_a_useless_zero)
{
    char buf[32];
    struct {
        double in;
        const char *out;
    } cases[] = {
        {1023, "1023 B"},          {1024, "1 KiB"},
        {536870912, "512 MiB"},    {1610612736, "1.5 GiB"},
        {17179869184.0, "16 GiB"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        submit_render_bytes_iec(cases[i].in, buf, sizeof(buf));
        cr_expect_str_eq(buf, cases[i].out, "%g bytes", cases[i].in);
    }
}

Test(submit_render, a_small_buffer_is_truncated_not_overrun)
{
    char buf[4] = "xxx";

    submit_render_bytes(117780755, buf, sizeof(buf));
    cr_assert_str_eq(buf, "117");
    submit_render_duration(3720, buf, sizeof(buf));
    cr_assert_str_eq(buf, "1h0");
}

Test(submit_render, durations_read_like_kubectl_ages)
{
    char buf[32];
    struct {
        double in;
        const char *out;
    } cases[] = {
        {0, "0s"},       {59.4, "59s"},     {59.6, "1m00s"}, {125, "2m05s"},
        {3720, "1h02m"}, {273600, "3d04h"}, {-1, "-"},       {INFINITY, "-"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        submit_render_duration(cases[i].in, buf, sizeof(buf));
        cr_expect_str_eq(buf, cases[i].out, "%g s", cases[i].in);
    }
}

Test(submit_render, the_progress_line_at_zero_shows_an_empty_bar_and_no_eta)
{
    json_t *job =
        parse("{\"id\": \"j1\", \"state\": \"RUNNING\", \"iterations\": 1000,"
              " \"progress\": {\"iteration\": 0, \"loss\": 2.3026,"
              " \"bytes_sent\": 0, \"dense_bytes\": 0, \"elapsed\": 0.5}}");

    expect_render(submit_render_progress(job, 0, &out_),
                  "RUNNING    [....................]   0.0%  iter 0/1000  "
                  "loss 2.3026  acc -  sent 0 B  ETA -");
    cr_assert_eq(submit_render_fraction(job), 0.0);
    json_decref(job);
}

Test(submit_render, the_progress_line_at_half_shows_half_a_bar_and_the_eta)
{
    json_t *job = parse(job_running_half);

    expect_render(submit_render_progress(job, 0, &out_),
                  "RUNNING    [##########..........]  50.0%  iter 750/1500  "
                  "loss 0.4100  acc 84.00%  sent 5.5 MB (2.12% of dense)  "
                  "ETA 8s");
    cr_assert_float_eq(submit_render_fraction(job), 0.5, 1e-12);
    json_decref(job);
}

Test(submit_render, the_progress_line_at_the_end_takes_the_summarys_numbers)
{
    json_t *job = parse(job_succeeded);

    expect_render(submit_render_progress(job, 0, &out_),
                  "SUCCEEDED  [####################] 100.0%  iter 1500/1500  "
                  "loss 0.3000  acc 87.68%  sent 117.8 MB (2.09% of dense)  "
                  "ETA 0s");
    cr_assert_eq(submit_render_fraction(job), 1.0);
    json_decref(job);
}

Test(submit_render, the_eta_extrapolates_the_time_per_iteration)
{
    json_t *job = parse("{\"state\": \"RUNNING\", \"iterations\": 1500,"
                        " \"progress\": {\"iteration\": 100, \"loss\": 1,"
                        " \"elapsed\": 10}}");

    expect_render(submit_render_progress(job, 0, &out_),
                  "RUNNING    [#...................]   6.7%  iter 100/1500  "
                  "loss 1.0000  acc -  sent -  ETA 2m20s");
    json_decref(job);
}

Test(submit_render, missing_fields_show_as_dashes_instead_of_zeros)
{
    json_t *job = parse("{\"id\": \"j1\", \"state\": \"QUEUED\"}");

    expect_render(submit_render_progress(job, 0, &out_),
                  "QUEUED     [....................]   0.0%  iter -/?  loss -  "
                  "acc -  sent -  ETA -");
    json_decref(job);
}

Test(submit_render, null_and_string_numbers_from_redis_are_understood)
{
    json_t *job = parse("{\"state\": \"RUNNING\", \"iterations\": \"200\","
                        " \"progress\": {\"iteration\": \"50\", \"loss\": null,"
                        " \"test_accuracy\": \"\", \"bytes_sent\": \"2000\","
                        " \"elapsed\": \"5\"}}");

    expect_render(submit_render_progress(job, 0, &out_),
                  "RUNNING    [#####...............]  25.0%  iter 50/200  "
                  "loss -  acc -  sent 2.0 KB  ETA 15s");
    json_decref(job);
}

Test(submit_render, a_restarted_job_shows_its_restarts)
{
    json_t *job = parse("{\"state\": \"RUNNING\", \"iterations\": 10,"
                        " \"restarts\": 1, \"max_restarts\": 3,"
                        " \"progress\": {\"iteration\": 10, \"loss\": 0.5}}");

    expect_render(submit_render_progress(job, 0, &out_),
                  "RUNNING    [####################] 100.0%  iter 10/10  "
                  "loss 0.5000  acc -  sent -  ETA 0s  restarts 1/3");
    json_decref(job);
}

Test(submit_render, iterations_past_the_total_do_not_overflow_the_bar)
{
    json_t *job = parse("{\"state\": \"RUNNING\", \"iterations\": 10,"
                        " \"progress\": {\"iteration\": 15}}");

    expect_render(submit_render_progress(job, 0, &out_),
                  "RUNNING    [####################] 100.0%  iter 15/10  "
                  "loss -  acc -  sent -  ETA 0s");
    json_decref(job);
}

Test(submit_render, a_narrow_terminal_gets_the_compact_line_with_the_eta)
{
    json_t *job = parse(job_running_half);

    expect_render(submit_render_progress(job, 80, &out_),
                  "[#####.....]  50.0% 750/1500 loss 0.4100 acc 84.00% ETA 8s "
                  "sent 5.5 MB (2.12%)");
    expect_render(submit_render_progress(job, 200, &out_),
                  "RUNNING    [##########..........]  50.0%  iter 750/1500  "
                  "loss 0.4100  acc 84.00%  sent 5.5 MB (2.12% of dense)  "
                  "ETA 8s");
    json_decref(job);
}

Test(submit_render, a_very_narrow_terminal_cuts_the_line_so_it_never_wraps)
{
    json_t *job = parse(job_running_half);
    char *out = NULL;

    cr_assert_eq(submit_render_progress(job, 30, &out), FLPS_OK);
    cr_assert_str_eq(out, "[#####.....]  50.0% 750/1500 ");
    cr_assert_eq(strlen(out), 29);
    flps_free(out);
    json_decref(job);
}

Test(submit_render, the_summary_of_a_succeeded_job_has_flruns_fields)
{
    json_t *job = parse(job_succeeded);

    expect_render(submit_render_summary(job, &out_),
                  "Job j42 (fmnist-gtopk) SUCCEEDED\n"
                  "  iterations       1500\n"
                  "  test accuracy    87.68%\n"
                  "  bytes sent       117.8 MB (2.09% of dense 5.6 GB)\n"
                  "  bytes received   160.5 MB\n"
                  "  wall time        17.5s\n");
    json_decref(job);
}

Test(submit_render, the_summary_says_what_ran_each_mismatch_and_each_gap)
{
    json_t *job =
        parse("{\"id\": \"j7\", \"name\": \"mine\", \"state\": \"SUCCEEDED\","
              " \"summary\": {\"test_accuracy\": null, \"iterations\": 5,"
              " \"compression\": \"dense\", \"mode\": \"ssgd\","
              " \"optimizer\": \"Adam\", \"mismatch\": [\"compression: the job "
              "file says gtopk:0.01, the workers ran dense\"],"
              " \"not_reported\": [\"test_accuracy\", \"done\"]}}");

    expect_render(submit_render_summary(job, &out_),
                  "Job j7 (mine) SUCCEEDED\n"
                  "  iterations       5\n"
                  "  test accuracy    not reported\n"
                  "  compression      dense\n"
                  "  mode             ssgd\n"
                  "  optimizer        Adam\n"
                  "  MISMATCH         compression: the job file says "
                  "gtopk:0.01, the workers ran dense\n"
                  "  not reported     test_accuracy, done\n");
    json_decref(job);
}

Test(submit_render, the_summary_gives_the_energy_and_the_gpu_clock)
{
    json_t *job =
        parse("{\"id\": \"j8\", \"name\": \"green\", \"state\": \"SUCCEEDED\","
              " \"summary\": {\"test_accuracy\": 0.9, \"iterations\": 600,"
              " \"joules_per_iteration\": 31.25,"
              " \"gpu_joules_per_iteration\": 28, \"energy_method\":"
              " \"counter\", \"gpu_clock\": \"1680\"}}");

    expect_render(submit_render_summary(job, &out_),
                  "Job j8 (green) SUCCEEDED\n"
                  "  iterations       600\n"
                  "  test accuracy    90.00%\n"
                  "  energy           31.2 J/iteration\n"
                  "  gpu clock        1680 MHz\n");
    json_decref(job);
}

Test(submit_render, a_saps_summary_gives_the_consensus_and_the_matrix)
{
    json_t *job =
        parse("{\"id\": \"j5\", \"name\": \"gossip\", \"state\": \"SUCCEEDED\","
              " \"summary\": {\"test_accuracy\": 0.91, \"iterations\": 300,"
              " \"mode\": \"saps\", \"consensus_accuracy\": 0.934,"
              " \"consensus_distance\": 0.2041, \"consensus_workers\": 3,"
              " \"exchanges\": 600, \"slow_exchange_share\": 0.05,"
              " \"workers_lost\": [2], \"bandwidth_mbps\": [[0, 812.4, 640.25],"
              " [812.4, 0, 701.9], [640.2, 701.9, 0]]}}");

    expect_render(submit_render_summary(job, &out_),
                  "Job j5 (gossip) SUCCEEDED\n"
                  "  iterations       300\n"
                  "  test accuracy    91.00%\n"
                  "  mode             saps\n"
                  "  consensus acc.   93.40% (the workers' average model)\n"
                  "  consensus dist.  0.2041 (mean over 3 workers)\n"
                  "  exchanges        600, 5.0% over slow links\n"
                  "  workers lost     2 (the others went on)\n"
                  "  bandwidth MB/s         0      1      2\n"
                  "                 0       -  812.4  640.2\n"
                  "                 1   812.4      -  701.9\n"
                  "                 2   640.2  701.9      -\n");
    json_decref(job);
}

Test(submit_render, the_summary_of_a_failed_job_gives_the_reason_and_how_far)
{
    json_t *job = parse(
        "{\"id\": \"j7\", \"name\": \"mlp\", \"state\": \"FAILED\","
        " \"reason\": \"worker-2 on n1 exited with status 1\","
        " \"restarts\": 1, \"max_restarts\": 1, \"iterations\": 1000,"
        " \"started_at\": 100, \"finished_at\": 162.4,"
        " \"progress\": {\"iteration\": 500, \"loss\": 0.5, \"elapsed\": 60}}");

    expect_render(submit_render_summary(job, &out_),
                  "Job j7 (mlp) FAILED: worker-2 on n1 exited with status 1\n"
                  "  restarts         1/1\n"
                  "  last progress    [##########..........]  50.0%  "
                  "iter 500/1000  loss 0.5000  acc -  sent -\n"
                  "  ran for          1m02s\n");
    json_decref(job);
}

Test(submit_render, the_summary_of_a_job_cancelled_in_the_queue_is_one_line)
{
    json_t *job = parse("{\"id\": \"j9\", \"name\": \"x\","
                        " \"state\": \"CANCELLED\", \"started_at\": null}");

    expect_render(submit_render_summary(job, &out_), "Job j9 (x) CANCELLED\n");
    json_decref(job);
}

Test(submit_render, state_lines_say_what_a_state_means)
{
    json_t *queued = parse("{\"id\": \"j1\", \"state\": \"QUEUED\","
                           " \"workers\": 4, \"servers\": 1}");
    json_t *requeued =
        parse("{\"id\": \"j1\", \"state\": \"QUEUED\", \"restarts\": 1,"
              " \"max_restarts\": 3,"
              " \"reason\": \"worker-2 on n1 exited with status 1\"}");
    json_t *running =
        parse("{\"id\": \"j1\", \"state\": \"RUNNING\", \"attempt\": 1,"
              " \"tasks\": [{\"task\": \"server-0\", \"node\": \"n2\"},"
              " {\"task\": \"worker-0\", \"node\": \"n1\"},"
              " {\"task\": \"worker-1\", \"node\": \"n2\"}]}");
    json_t *done = parse("{\"id\": \"j1\", \"name\": \"x\","
                         " \"state\": \"CANCELLED\"}");

    expect_render(submit_render_state_line(queued, &out_),
                  "QUEUED     waiting for 4 workers and 1 server to be placed");
    expect_render(
        submit_render_state_line(requeued, &out_),
        "QUEUED     restart 1/3: worker-2 on n1 exited with status 1");
    expect_render(submit_render_state_line(running, &out_),
                  "RUNNING    attempt 1 on n2, n1");
    expect_render(submit_render_state_line(done, &out_),
                  "Job j1 (x) CANCELLED");
    json_decref(queued);
    json_decref(requeued);
    json_decref(running);
    json_decref(done);
}

Test(submit_render, counts_of_one_take_the_singular)
{
    json_t *job = parse("{\"id\": \"j1\", \"state\": \"QUEUED\","
                        " \"workers\": 1, \"servers\": 1}");
    char *out = NULL;

    expect_render(submit_render_state_line(job, &out_),
                  "QUEUED     waiting for 1 worker and 1 server to be placed");
    cr_assert_eq(submit_render_status(job, &out), FLPS_OK);
    cr_assert(strstr(out, "Tasks:       1 worker, 1 server\n") != NULL, "%s",
              out);
    flps_free(out);
    json_decref(job);
}

Test(submit_render, the_job_table_aligns_columns_like_kubectl)
{
    json_t *jobs = parse(
        "[{\"id\": \"j41\", \"name\": \"fmnist-mlp-dense\","
        " \"state\": \"SUCCEEDED\", \"iterations\": 1500, \"restarts\": 0,"
        " \"max_restarts\": 0, \"submitted_at\": 1000,"
        " \"summary\": {\"iterations\": 1500, \"test_accuracy\": 0.8768}},"
        " {\"id\": \"j42\", \"name\": \"fmnist-gtopk\", \"state\": \"RUNNING\","
        " \"iterations\": 1500, \"restarts\": 1, \"max_restarts\": 3,"
        " \"submitted_at\": 1900,"
        " \"progress\": {\"iteration\": 700, \"test_accuracy\": 0.84}},"
        " {\"id\": \"j43\", \"name\": \"x\", \"state\": \"QUEUED\","
        " \"iterations\": 1000, \"restarts\": 0, \"max_restarts\": 0,"
        " \"submitted_at\": \"1990.5\"}]");

    expect_render(
        submit_render_jobs(jobs, 2000, &out_),
        "ID    NAME               STATE       PROGRESS    ACCURACY   RESTARTS"
        "   AGE\n"
        "j41   fmnist-mlp-dense   SUCCEEDED   1500/1500   87.68%     0/0     "
        "   16m40s\n"
        "j42   fmnist-gtopk       RUNNING     700/1500    84.00%     1/3     "
        "   1m40s\n"
        "j43   x                  QUEUED      0/1000      -          0/0     "
        "   10s\n");
    json_decref(jobs);
}

Test(submit_render, an_empty_job_list_says_so)
{
    json_t *jobs = parse("[]");

    expect_render(submit_render_jobs(jobs, 0, &out_), "No jobs.\n");
    json_decref(jobs);
}

Test(submit_render, the_node_table_shows_used_over_total)
{
    json_t *nodes =
        parse("[{\"name\": \"n1\", \"address\": \"10.0.0.1\", \"cpus\": 8,"
              " \"memory\": 17179869184, \"gpus\": 1, \"state\": \"READY\","
              " \"last_heartbeat\": 998.5,"
              " \"used\": {\"cpus\": 3, \"memory\": 3758096384, \"gpus\": 0}},"
              " {\"name\": \"n2\", \"address\": \"10.0.0.2\", \"cpus\": \"16\","
              " \"memory\": \"68719476736\", \"gpus\": 0, \"state\": \"LOST\","
              " \"last_heartbeat\": \"880\"}]");

    expect_render(submit_render_nodes(nodes, 1000, &out_),
                  "NAME   ADDRESS    STATE   CPUS   MEMORY           GPUS   "
                  "HEARTBEAT\n"
                  "n1     10.0.0.1   READY   3/8    3.5 GiB/16 GiB   0/1    "
                  "2s ago\n"
                  "n2     10.0.0.2   LOST    ?/16   ?/64 GiB         ?/0    "
                  "2m00s ago\n");
    json_decref(nodes);
}

Test(submit_render, the_plan_lists_each_layers_codec_and_density)
{
    json_t *plan =
        parse("{\"version\": 3, \"predicted_iteration_seconds\": 0.0123,"
              " \"layers\": [{\"name\": \"fc1.weight\", \"numel\": 200704,"
              " \"codec\": \"topk\", \"density\": 0.01},"
              " {\"name\": \"fc1.bias\", \"numel\": 256, \"codec\": \"dense\","
              " \"density\": 1}]}");

    expect_render(submit_render_plan(plan, "j42", &out_),
                  "Plan for j42 (version 3): predicted 0.012 s per iteration\n"
                  "LAYER        NUMEL    CODEC   DENSITY\n"
                  "fc1.weight   200704   topk    1.00%\n"
                  "fc1.bias     256      dense   100.00%\n");
    json_decref(plan);
}

Test(submit_render, a_log_line_is_prefixed_with_its_task)
{
    json_t *line = parse("{\"id\": \"1-0\", \"task\": \"worker-0\","
                         " \"line\": \"iter 10 loss 2.1\"}");

    expect_render(submit_render_log_line(line, &out_),
                  "[worker-0] iter 10 loss 2.1\n");
    json_decref(line);
}

Test(submit_render, an_error_body_gives_the_message_and_where)
{
    const char *named = "{\"error\": \"line 3: workers: '0' is out of range\","
                        " \"line\": 3, \"field\": \"workers\"}";
    const char *bare = "{\"error\": \"bad value\", \"line\": 7,"
                       " \"field\": \"lr\"}";
    const char *plain = "{\"error\": \"no such job\"}";

    expect_render(submit_render_error_body(named, strlen(named), &out_),
                  "line 3: workers: '0' is out of range");
    expect_render(submit_render_error_body(bare, strlen(bare), &out_),
                  "bad value (line 7, field lr)");
    expect_render(submit_render_error_body(plain, strlen(plain), &out_),
                  "no such job");
}

Test(submit_render, an_error_body_that_is_not_the_documented_json_is_refused)
{
    char *out = (char *)"untouched";

    cr_assert_eq(submit_render_error_body("<html>", 6, &out), FLPS_EPROTO);
    cr_assert_eq(submit_render_error_body("{\"error\": 3}", 12, &out),
                 FLPS_EPROTO);
    cr_assert_eq(submit_render_error_body("", 0, &out), FLPS_EPROTO);
    cr_assert_str_eq(out, "untouched", "*out is written only on success");
}

Test(submit_render, inputs_of_the_wrong_type_are_refused)
{
    json_t *arr = parse("[]"), *obj = parse("{}");
    char *out = NULL;

    cr_assert_eq(submit_render_progress(arr, 0, &out), FLPS_EINVAL);
    cr_assert_eq(submit_render_summary(NULL, &out), FLPS_EINVAL);
    cr_assert_eq(submit_render_jobs(obj, 0, &out), FLPS_EINVAL);
    cr_assert_eq(submit_render_nodes(obj, 0, &out), FLPS_EINVAL);
    cr_assert_eq(submit_render_plan(arr, "j1", &out), FLPS_EINVAL);
    cr_assert_null(out);
    json_decref(arr);
    json_decref(obj);
}

Test(submit_render, final_states_are_exactly_the_three_documented)
{
    cr_assert(submit_render_state_is_final("SUCCEEDED"));
    cr_assert(submit_render_state_is_final("FAILED"));
    cr_assert(submit_render_state_is_final("CANCELLED"));
    cr_assert_not(submit_render_state_is_final("RUNNING"));
    cr_assert_not(submit_render_state_is_final("QUEUED"));
    cr_assert_not(submit_render_state_is_final(NULL));
}

Test(submit_render, every_allocation_failure_is_reported_and_leaks_nothing)
{
    json_t *job = parse(job_succeeded);
    json_t *jobs = json_pack("[O]", job);

    /* Each renderer fails cleanly whichever allocation fails, then works. */
    for (unsigned long n = 1; n <= 8; n++) {
        char *out = NULL;
        flps_err rc;

        flps_alloc_fail_at(n);
        rc = submit_render_jobs(jobs, 0, &out);
        flps_alloc_fail_at(0);
        cr_assert(rc == FLPS_OK || rc == FLPS_ENOMEM);
        if (rc == FLPS_OK)
            flps_free(out);
        else
            cr_assert_null(out);

        flps_alloc_fail_at(n);
        rc = submit_render_summary(job, &out);
        flps_alloc_fail_at(0);
        cr_assert(rc == FLPS_OK || rc == FLPS_ENOMEM);
        if (rc == FLPS_OK)
            flps_free(out);
        out = NULL;
    }
    flps_alloc_fail_at(1);
    {
        char *out = NULL;

        cr_assert_eq(submit_render_status(job, &out), FLPS_ENOMEM);
        cr_assert_null(out);
    }
    flps_alloc_fail_at(0);
    json_decref(jobs);
    json_decref(job);
}

Test(submit_render, long_names_and_endpoints_are_shown_whole)
{
    char name[301], endpoint[400], text[1200];
    json_t *jobs, *job;
    char *out = NULL;

    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    snprintf(endpoint, sizeof(endpoint), "tcp://%s.example:4000", name);
    snprintf(text, sizeof(text),
             "[{\"id\": \"j1\", \"name\": \"%s\", \"state\": \"RUNNING\"}]",
             name);
    jobs = parse(text);
    cr_assert_eq(submit_render_jobs(jobs, 0, &out), FLPS_OK);
    cr_assert(strstr(out, name) != NULL, "the whole name in:\n%s", out);
    flps_free(out);
    snprintf(text, sizeof(text),
             "{\"id\": \"j1\", \"state\": \"RUNNING\", \"tasks\": [{\"task\": "
             "\"server-0\", \"node\": \"n1\", \"endpoint\": \"%s\"}]}",
             endpoint);
    job = parse(text);
    cr_assert_eq(submit_render_status(job, &out), FLPS_OK);
    cr_assert(strstr(out, endpoint) != NULL, "the whole endpoint in:\n%s", out);
    flps_free(out);
    json_decref(jobs);
    json_decref(job);
}

Test(submit_render, the_wide_job_table_adds_size_transport_bytes_and_nodes)
{
    json_t *jobs = parse(
        "[{\"id\": \"j42\", \"name\": \"g\", \"state\": \"RUNNING\","
        " \"iterations\": 1500, \"restarts\": 0, \"max_restarts\": 3,"
        " \"submitted_at\": 100, \"workers\": 4, \"servers\": 2,"
        " \"priority\": 5, \"transport\": \"auto\", \"transport_used\":"
        " \"rdma\", \"progress\": {\"iteration\": 750, \"bytes_sent\":"
        " 5500000, \"dense_bytes\": 260000000}, \"tasks\": [{\"task\":"
        " \"server-0\", \"node\": \"n2\"}, {\"task\": \"worker-0\", \"node\":"
        " \"n1\"}, {\"task\": \"worker-1\", \"node\": \"n2\"}]}]");

    expect_render(submit_render_jobs_wide(jobs, 195, &out_),
                  "ID    NAME   STATE     PROGRESS   ACCURACY   RESTARTS   AGE "
                  "    WORKERS   SERVERS   PRIORITY   TRANSPORT   SENT        "
                  "     NODES\n"
                  "j42   g      RUNNING   750/1500   -          0/3        "
                  "1m35s   4         2         5          rdma        5.5 MB "
                  "(2.12%)   n2,n1\n");
    expect_render(submit_render_jobs(jobs, 195, &out_),
                  "ID    NAME   STATE     PROGRESS   ACCURACY   RESTARTS   "
                  "AGE\n"
                  "j42   g      RUNNING   750/1500   -          0/3        "
                  "1m35s\n");
    json_decref(jobs);
}

Test(submit_render, the_wide_status_adds_settings_and_exit_codes)
{
    json_t *job = parse(
        "{\"id\": \"j1\", \"state\": \"FAILED\", \"workers\": 1, \"servers\":"
        " 1, \"transport\": \"zmq\", \"time_limit\": 3600, \"resources\":"
        " {\"cpus_per_worker\": 1, \"memory_per_worker\": 536870912,"
        " \"gpus_per_worker\": 0, \"cpus_per_server\": 0.5,"
        " \"memory_per_server\": 1073741824}, \"tasks\": [{\"task\":"
        " \"server-0\", \"node\": \"n1\", \"state\": \"EXITED\","
        " \"exit_code\": 0}, {\"task\": \"worker-0\", \"node\": \"n1\","
        " \"state\": \"EXITED\", \"exit_code\": -1, \"signal\": 9}]}");
    char *out = NULL;

    cr_assert_eq(submit_render_status_wide(job, &out), FLPS_OK);
    cr_assert(strstr(out, "Tasks:       1 worker, 1 server\n"
                          "Transport:   zmq\n"
                          "Resources:   per worker 1 CPU, 512 MiB, 0 GPUs; "
                          "per server 0.5 CPUs, 1 GiB\n"
                          "Time limit:  1h00m\n") != NULL,
              "%s", out);
    cr_assert(strstr(out,
                     "  TASK       NODE   STATE    ENDPOINT   EXIT\n"
                     "  server-0   n1     EXITED   -          0\n"
                     "  worker-0   n1     EXITED   -          signal 9\n") !=
                  NULL,
              "%s", out);
    flps_free(out);
    cr_assert_eq(submit_render_status(job, &out), FLPS_OK);
    cr_assert_null(strstr(out, "   EXIT\n"), "only wide has EXIT:\n%s", out);
    cr_assert_null(strstr(out, "Resources:"), "%s", out);
    flps_free(out);
    json_decref(job);
}

Test(submit_render, the_wide_node_table_adds_what_is_free_and_when_seen)
{
    json_t *nodes =
        parse("[{\"name\": \"n1\", \"address\": \"10.0.0.1\", \"cpus\": 16,"
              " \"memory\": 68719476736, \"gpus\": 2, \"state\": \"READY\","
              " \"last_heartbeat\": 1764430000, \"used\": {\"cpus\": 4.5,"
              " \"memory\": 2684354560, \"gpus\": 2}}]");

    expect_render(submit_render_nodes_wide(nodes, 1764430001, &out_),
                  "NAME   ADDRESS    STATE   CPUS     MEMORY           GPUS   "
                  "HEARTBEAT   FREE-CPUS   FREE-MEMORY   FREE-GPUS   "
                  "LAST-HEARTBEAT\n"
                  "n1     10.0.0.1   READY   4.5/16   2.5 GiB/64 GiB   2/2    "
                  "1s ago      11.5        61.5 GiB      0           "
                  "2025-11-29 15:26:40 UTC\n");
    json_decref(nodes);
}
