/* What flagent reads from its tasks: task keys, the workers' JSON events
 * and exit statuses. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scheduler/agent_task.h"

Test(agent_task, splits_a_task_key)
{
    agent_task_id id;

    cr_assert_eq(agent_task_key_parse("flps:task:j42:3:worker-17", &id),
                 FLPS_OK);
    cr_assert_str_eq(id.job, "j42");
    cr_assert_eq(id.attempt, 3);
    cr_assert_eq(id.role, AGENT_ROLE_WORKER);
    cr_assert_eq(id.index, 17);
    cr_assert_str_eq(id.name, "worker-17");
    cr_assert_eq(agent_task_key_parse("flps:task:j1:0:server-0", &id), FLPS_OK);
    cr_assert_eq(id.role, AGENT_ROLE_SERVER);
    cr_assert_str_eq(id.name, "server-0");
}

Test(agent_task, refuses_keys_of_any_other_shape)
{
    const char *bad[] = {"flps:task:j1:0:server",
                         "flps:task:j1:0:server-",
                         "flps:task:j1:0:shard-0",
                         "flps:task:j1:x:worker-0",
                         "flps:task:j1:-1:worker-0",
                         "flps:task::0:worker-0",
                         "flps:task:j1:worker-0",
                         "flps:job:j1:0:worker-0",
                         "flps:task:j/1:0:worker-0",
                         "flps:task:j1:0:worker-1x",
                         "flps:task:j1:0:worker-99999999999",
                         "flps:task:j1:0:worker-0:x",
                         "",
                         NULL};
    agent_task_id id;

    memset(&id, 0x5a, sizeof(id));
    for (int i = 0; bad[i] != NULL; i++)
        cr_assert_eq(agent_task_key_parse(bad[i], &id), FLPS_EINVAL,
                     "%s was accepted", bad[i]);
    cr_assert_eq(agent_task_key_parse(NULL, &id), FLPS_EINVAL);
    cr_assert_eq(id.job[0], 0x5a, "*out written on an error");
}

Test(agent_task, turns_progress_into_the_job_fields)
{
    agent_event ev;

    agent_event_parse("{\"event\":\"progress\",\"iter\":700,\"iterations\":"
                      "1500,\"loss\":0.41235,\"bytes_sent\":5500000,"
                      "\"dense_bytes\":260000000,\"elapsed\":8.125}",
                      &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_PROGRESS);
    cr_assert_eq(ev.nfields, 5);
    cr_assert_str_eq(ev.fields[0], "p_iteration");
    cr_assert_str_eq(ev.values[0], "700");
    cr_assert_str_eq(ev.fields[1], "p_loss");
    cr_assert_str_eq(ev.values[1], "0.41235");
    cr_assert_str_eq(ev.fields[2], "p_bytes_sent");
    cr_assert_str_eq(ev.values[2], "5500000");
    cr_assert_str_eq(ev.fields[3], "p_dense_bytes");
    cr_assert_str_eq(ev.values[3], "260000000");
    cr_assert_str_eq(ev.fields[4], "p_elapsed");
    cr_assert_str_eq(ev.values[4], "8.125");
}

Test(agent_task, turns_eval_into_the_test_accuracy)
{
    agent_event ev;

    agent_event_parse("{\"event\":\"eval\",\"iter\":100,\"test_accuracy\":"
                      "0.8768,\"test_loss\":0.35}",
                      &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_EVAL);
    cr_assert_eq(ev.nfields, 1);
    cr_assert_str_eq(ev.fields[0], "p_test_accuracy");
    cr_assert_str_eq(ev.values[0], "0.8768");
}

Test(agent_task, reads_flps_report_lines_as_flworkers)
{
    agent_event ev;

    /* What python/flps/report.py prints: the same keys in the same
     * order, plus the training accuracy. */
    agent_event_parse("{\"event\":\"progress\",\"iter\":50,\"iterations\":"
                      "500,\"loss\":1.0,\"bytes_sent\":100,\"dense_bytes\":"
                      "1000,\"accuracy\":0.5,\"elapsed\":2.5}",
                      &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_PROGRESS);
    cr_assert_eq(ev.nfields, 5);
    cr_assert_str_eq(ev.values[0], "50");
    cr_assert_str_eq(ev.values[1], "1");
    cr_assert_str_eq(ev.values[2], "100");
    cr_assert_str_eq(ev.values[3], "1000");
    cr_assert_str_eq(ev.values[4], "2.5");
    agent_event_parse("{\"event\":\"eval\",\"iter\":500,\"test_accuracy\":"
                      "0.75}",
                      &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_EVAL);
    cr_assert_str_eq(ev.values[0], "0.75");
}

Test(agent_task, tells_done_and_other_events_from_plain_lines)
{
    agent_event ev;

    agent_event_parse("{\"event\":\"done\",\"rank\":1,\"bytes_sent\":3}", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_DONE);
    agent_event_parse("{\"event\":\"start\",\"rank\":0}", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_OTHER);
    agent_event_parse("listening on tcp://127.0.0.1:5555", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_NONE);
    agent_event_parse("{\"rank\":0}", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_NONE);
    agent_event_parse("{\"event\":\"progress\",", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_NONE);
    agent_event_parse("{\"event\":7}", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_NONE);
    agent_event_parse("", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_NONE);
}

Test(agent_task, tells_a_profile_event_and_sets_no_field_for_it)
{
    agent_event ev;

    agent_event_parse("{\"event\":\"profile\",\"iteration\":25,"
                      "\"workers\":2,\"alpha\":0.0001,\"beta\":1e-9,"
                      "\"layers\":[{\"name\":\"fc1.weight\","
                      "\"numel\":200704,\"t_backward\":0.000312}]}",
                      &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_PROFILE);
    cr_assert_eq(ev.nfields, 0, "the line is stored as is, not as fields");
    agent_event_parse("{\"event\":\"profile\",\"layers\":[", &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_NONE, "half a line is no event");
}

Test(agent_task, skips_fields_that_are_not_numbers)
{
    agent_event ev;

    agent_event_parse("{\"event\":\"progress\",\"iter\":\"x\",\"loss\":1.5}",
                      &ev);
    cr_assert_eq(ev.kind, AGENT_EVENT_PROGRESS);
    cr_assert_eq(ev.nfields, 1);
    cr_assert_str_eq(ev.fields[0], "p_loss");
    cr_assert_str_eq(ev.values[0], "1.5");
}

static int status_of_child(int how)
{
    int status = 0;
    pid_t pid = fork();

    if (pid == 0) {
        if (how < 0)
            pause();
        _exit(how);
    }
    if (how < 0)
        kill(pid, -how);
    waitpid(pid, &status, 0);
    return status;
}

Test(agent_task, gives_exit_code_or_signal)
{
    int code = 99, sig = 99;

    agent_exit_fields(status_of_child(0), &code, &sig);
    cr_assert_eq(code, 0);
    cr_assert_eq(sig, 0);
    agent_exit_fields(status_of_child(3), &code, &sig);
    cr_assert_eq(code, 3);
    cr_assert_eq(sig, 0);
    agent_exit_fields(status_of_child(-SIGTERM), &code, &sig);
    cr_assert_eq(code, -1);
    cr_assert_eq(sig, SIGTERM);
}

Test(agent_task, names_are_1_to_63_of_the_key_safe_characters)
{
    char longest[AGENT_TASK_NAME_MAX + 2];

    cr_assert(agent_task_name_is_valid("gpu-node.7_a", 12));
    cr_assert(agent_task_name_is_valid("j:x", 1), "only n bytes are read");
    cr_assert_not(agent_task_name_is_valid("", 0));
    cr_assert_not(agent_task_name_is_valid("a:b", 3));
    cr_assert_not(agent_task_name_is_valid("a b", 3));
    cr_assert_not(agent_task_name_is_valid("a/b", 3));
    memset(longest, 'n', sizeof(longest));
    cr_assert(agent_task_name_is_valid(longest, AGENT_TASK_NAME_MAX));
    cr_assert_not(agent_task_name_is_valid(longest, AGENT_TASK_NAME_MAX + 1));
}

Test(agent_task, names_that_are_paths_or_options_are_refused)
{
    cr_assert_not(agent_task_name_is_valid("..", 2));
    cr_assert_not(agent_task_name_is_valid(".", 1));
    cr_assert_not(agent_task_name_is_valid("a..b", 4));
    cr_assert_not(agent_task_name_is_valid(".hidden", 7));
    cr_assert_not(agent_task_name_is_valid("-x", 2));
    cr_assert_not(agent_task_name_is_valid("_x", 2));
    cr_assert_not(agent_task_name_is_valid("j\n1", 3));
    cr_assert(agent_task_name_is_valid("a.b-c_d", 7));
    cr_assert(agent_task_name_is_valid("7", 1));
}

Test(agent_task, a_key_whose_job_id_is_a_path_is_refused)
{
    agent_task_id id;

    memset(&id, 0x5a, sizeof(id));
    cr_assert_eq(agent_task_key_parse("flps:task:..:0:worker-0", &id),
                 FLPS_EINVAL);
    cr_assert_eq(agent_task_key_parse("flps:task:-rf:0:server-0", &id),
                 FLPS_EINVAL);
    cr_assert_eq(agent_task_key_parse("flps:task:a\nb:0:server-0", &id),
                 FLPS_EINVAL);
    cr_assert_eq(id.job[0], 0x5a, "a refused key writes nothing");
}

Test(agent_task, endpoints_are_tcp_host_and_port_only)
{
    cr_assert(agent_task_endpoint_is_valid("tcp://127.0.0.1:5555"));
    cr_assert(agent_task_endpoint_is_valid("tcp://node-1.example:1"));
    cr_assert(agent_task_endpoint_is_valid("tcp://[::1]:65535"));
    cr_assert_not(agent_task_endpoint_is_valid(NULL));
    cr_assert_not(agent_task_endpoint_is_valid(""));
    cr_assert_not(agent_task_endpoint_is_valid("127.0.0.1:5555"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://127.0.0.1:0"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://127.0.0.1:65536"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://127.0.0.1:"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://:5555"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://a b:1"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://-x:1"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://h:1 --job x"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://h:1,tcp://k:2"));
    cr_assert_not(agent_task_endpoint_is_valid("tcp://[::1;]:1"));
}

Test(agent_task, the_last_error_line_skips_events_and_blank_lines)
{
    const char log[] =
        "loading fashion-mnist\n"
        "flworker: cannot open /data/x.gz: No such file or directory\n"
        "{\"event\":\"progress\",\"iter\":10,\"loss\":2.0}\n"
        "   \n"
        "{\"event\":\"done\",\"iterations\":10}\n\n";
    char out[256];

    cr_assert_eq(agent_last_error_line(log, strlen(log), out, sizeof(out)), 1);
    cr_assert_str_eq(out, "flworker: cannot open /data/x.gz: No such file "
                          "or directory");
}

Test(agent_task, the_last_error_line_is_cut_to_fit_and_may_be_the_only_one)
{
    char out[8];

    cr_assert_eq(
        agent_last_error_line("boom happened  \r\n", 17, out, sizeof(out)), 1);
    cr_assert_str_eq(out, "boom ha",
                     "cut to the buffer, trailing blanks "
                     "gone");
    cr_assert_eq(
        agent_last_error_line("no newline at end", 17, out, sizeof(out)), 1);
    cr_assert_str_eq(out, "no newl");
}

Test(agent_task, a_log_of_only_events_has_no_error_line)
{
    const char log[] = "{\"event\":\"start\"}\n{\"event\":\"done\"}\n";
    char out[64] = "stale";

    cr_assert_eq(agent_last_error_line(log, strlen(log), out, sizeof(out)), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(agent_last_error_line("", 0, out, sizeof(out)), 0);
}

Test(agent_task, the_last_error_line_drops_the_log_prefix_of_flps_programs)
{
    const char log[] = "2026-12-01T10:48:59.117Z ERROR flworker/0[2861]: "
                       "job.yaml: line 6: data_dir: file missing\n";
    char out[128];

    cr_assert_eq(agent_last_error_line(log, strlen(log), out, sizeof(out)), 1);
    cr_assert_str_eq(out, "job.yaml: line 6: data_dir: file missing");
    cr_assert_eq(
        agent_last_error_line("2026 was a year]: x\n", 20, out, sizeof(out)),
        1);
    cr_assert_str_eq(out, "2026 was a year]: x", "not a log prefix: kept");
}

/* agent_error_line on a string. */
static int error_line(const char *line, char *out, size_t outlen)
{
    return agent_error_line(line, strlen(line), out, outlen);
}

Test(agent_task, an_error_line_is_not_flps_chatter_nor_an_event)
{
    char out[64] = "untouched";

    cr_assert_eq(error_line("RuntimeError: boom  \r", out, sizeof(out)), 1);
    cr_assert_str_eq(out, "RuntimeError: boom");
    strcpy(out, "untouched");
    cr_assert_eq(error_line("2026-12-01T10:48:59.117Z INFO  "
                            "flworker/1[7]: iteration 5",
                            out, sizeof(out)),
                 0, "an INFO line of flps's log is no reason");
    cr_assert_eq(error_line("2026-12-01T10:48:59.117Z DEBUG "
                            "flps/0[7]: pulled",
                            out, sizeof(out)),
                 0);
    cr_assert_eq(
        error_line("{\"event\":\"progress\",\"iter\":3}", out, sizeof(out)), 0);
    cr_assert_eq(error_line("   ", out, sizeof(out)), 0);
    cr_assert_str_eq(out, "untouched", "out is written only for a line");
    cr_assert_eq(error_line("2026-12-01T10:48:59.117Z WARN  "
                            "flps/0[7]: disk full",
                            out, sizeof(out)),
                 1);
    cr_assert_str_eq(out, "disk full");
}

Test(agent_task, an_error_line_is_kept_whole_or_cut_between_characters)
{
    char line[1500], out[PROC_ERROR_LINE_MAX];
    size_t n;

    memset(line, 'x', 900);
    memcpy(line, "ValueError: ", 12);
    line[900] = '\0';
    cr_assert_eq(agent_error_line(line, 900, out, sizeof(out)), 1);
    cr_assert_eq(strlen(out), 900, "a line of 900 bytes is kept whole");
    cr_assert_eq(memcmp(out, line, 900), 0);
    /* 1,400 bytes of two-byte characters: cut before one, never in it. */
    for (n = 0; n < 1400; n += 2)
        memcpy(line + n, "\xc3\xa9", 2);
    line[1400] = '\0';
    cr_assert_eq(agent_error_line(line, 1400, out, sizeof(out)), 1);
    cr_assert_eq(strlen(out), PROC_ERROR_LINE_MAX - 2);
    cr_assert_eq((unsigned char)out[strlen(out) - 1], 0xa9);
}
