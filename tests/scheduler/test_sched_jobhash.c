/* The job hash's one table: the fields a submit writes (names, order,
 * values), reading them back, and the API's job JSON. No Redis: replies
 * are parsed from RESP text by hiredis' reader. */
#include "scheduler/sched_jobhash.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

typedef struct pairs {
    char names[1024];
    char resp[8192];
    size_t n, off;
} pairs;

static flps_err collect(void *arg, const char *field, const char *value,
                        size_t len)
{
    pairs *p = arg;

    strcat(p->names, p->n ? " " : "");
    strcat(p->names, field);
    p->off += (size_t)snprintf(p->resp + p->off, sizeof(p->resp) - p->off,
                               "$%zu\r\n%s\r\n$%zu\r\n%.*s\r\n", strlen(field),
                               field, len, (int)len, value);
    p->n++;
    return FLPS_OK;
}

/* An HGETALL reply holding the pairs (caller frees). */
static redisReply *reply_of(const pairs *p, const char *extra, size_t nextra)
{
    redisReader *rd = redisReaderCreate();
    char head[32];
    void *r = NULL;

    snprintf(head, sizeof(head), "*%zu\r\n", 2 * (p->n + nextra));
    redisReaderFeed(rd, head, strlen(head));
    redisReaderFeed(rd, p->resp, p->off);
    if (extra != NULL)
        redisReaderFeed(rd, extra, strlen(extra));
    cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK);
    cr_assert_not_null(r);
    redisReaderFree(rd);
    return r;
}

static sched_job sample(void)
{
    sched_job j;

    memset(&j, 0, sizeof(j));
    strcpy(j.id, "j7");
    strcpy(j.name, "two");
    j.state = SCHED_QUEUED;
    j.priority = 3;
    j.seq = 7;
    j.submitted_at = 1000.25;
    j.max_restarts = 1;
    j.workers = 2;
    j.servers = 1;
    j.iterations = 500;
    j.time_limit = 60;
    j.per_worker = (sched_res){1500, 2ULL << 30, 1};
    j.per_server = (sched_res){1000, 512ULL << 20, 0};
    j.spec = "name: two\n";
    strcpy(j.transport, "auto");
    return j;
}

Test(sched_jobhash, a_submit_writes_the_documented_fields_in_order)
{
    sched_job j = sample();
    pairs p = {0};

    cr_assert_eq(sched_jobhash_write(&j, collect, &p), FLPS_OK);
    cr_assert_str_eq(p.names,
                     "id name state priority seq submitted_at attempt "
                     "restarts max_restarts reason spec workers servers "
                     "iterations time_limit cpus_per_worker memory_per_worker "
                     "gpus_per_worker cpus_per_server memory_per_server "
                     "transport compression placement credentials");
    cr_assert_not_null(strstr(p.resp, "$15\r\ncpus_per_worker\r\n$3\r\n1.5"));
    cr_assert_not_null(strstr(p.resp, "submitted_at\r\n$7\r\n1000.25"));
    cr_assert_not_null(strstr(p.resp, "state\r\n$6\r\nQUEUED"));
    cr_assert_not_null(strstr(p.resp, "time_limit\r\n$2\r\n60"));
}

Test(sched_jobhash, reads_back_what_it_wrote_and_the_reported_progress)
{
    static const char progress[] = "$6\r\np_loss\r\n$4\r\n0.25\r\n"
                                   "$9\r\np_elapsed\r\n$1\r\n3\r\n";
    sched_job j = sample(), back;
    pairs p = {0};
    redisReply *r;

    cr_assert_eq(sched_jobhash_write(&j, collect, &p), FLPS_OK);
    r = reply_of(&p, progress, 2);
    cr_assert_eq(sched_jobhash_read(r, &back), FLPS_OK);
    freeReplyObject(r);
    cr_assert_str_eq(back.id, "j7");
    cr_assert_str_eq(back.name, "two");
    cr_assert_eq(back.state, SCHED_QUEUED);
    cr_assert_eq(back.priority, 3);
    cr_assert_eq(back.seq, 7);
    cr_assert_eq(back.submitted_at, 1000.25);
    cr_assert_eq(back.iterations, 500);
    cr_assert_eq(back.per_worker.mcpus, 1500);
    cr_assert_eq(back.per_worker.memory, 2ULL << 30);
    cr_assert_eq(back.per_server.memory, 512ULL << 20);
    cr_assert_str_eq(back.spec, "name: two\n");
    cr_assert_str_eq(back.transport, "auto");
    cr_assert_str_eq(back.transport_used, "", "chosen only at placement");
    cr_assert_null(back.summary);
    cr_assert(back.have_progress);
    cr_assert_eq(back.p_mask, (1u << 1) | (1u << 5), "loss and elapsed");
    cr_assert_eq(back.p_loss, 0.25);
    cr_assert_eq(back.p_elapsed, 3);
    sched_job_fini(&back);
}

Test(sched_jobhash, refuses_a_hash_without_a_valid_state)
{
    pairs p = {0};
    redisReply *r;
    sched_job back;

    collect(&p, "id", "j1", 2);
    collect(&p, "state", "DONE", 4);
    r = reply_of(&p, NULL, 0);
    memset(&back, 0x5a, sizeof(back));
    cr_assert_eq(sched_jobhash_read(r, &back), FLPS_EPROTO);
    cr_assert_eq(back.id[0], 0x5a, "out untouched on error");
    freeReplyObject(r);
}

Test(sched_jobhash, shows_the_api_fields_in_order_with_their_groups)
{
    sched_job j = sample();
    json_t *o;
    char *text;

    j.p_mask = 1u << 0;
    j.have_progress = 1;
    j.p_iteration = 700;
    j.summary = "{\"iterations\":700}";
    o = sched_jobhash_json(&j);
    text = json_dumps(o, JSON_COMPACT);
    cr_assert_str_eq(
        text,
        "{\"id\":\"j7\",\"name\":\"two\",\"state\":\"QUEUED\",\"priority\":3,"
        "\"submitted_at\":1000.25,\"started_at\":null,\"finished_at\":null,"
        "\"attempt\":0,\"restarts\":0,\"max_restarts\":1,\"reason\":\"\","
        "\"workers\":2,\"servers\":1,\"iterations\":500,\"time_limit\":60,"
        "\"resources\":{\"cpus_per_worker\":1.5,\"memory_per_worker\":"
        "2147483648,\"gpus_per_worker\":1,\"cpus_per_server\":1,"
        "\"memory_per_server\":536870912},\"progress\":{\"iteration\":700},"
        "\"transport\":\"auto\",\"transport_used\":\"\"}",
        "the summary shows only once SUCCEEDED");
    free(text);
    json_decref(o);
    j.state = SCHED_SUCCEEDED;
    o = sched_jobhash_json(&j);
    cr_assert_not_null(json_object_get(o, "summary"));
    json_decref(o);
}

Test(sched_jobhash, progress_bytes_are_summed_over_the_workers)
{
    sched_job j = sample();
    sched_task tasks[3];
    json_t *o, *pr;

    memset(tasks, 0, sizeof(tasks));
    snprintf(tasks[0].role, sizeof(tasks[0].role), "server");
    tasks[0].have_bytes = 1; /* a server's bytes are not the job's */
    tasks[0].p_bytes_sent = 1e9;
    for (int i = 1; i < 3; i++) {
        snprintf(tasks[i].role, sizeof(tasks[i].role), "worker");
        tasks[i].have_bytes = 1;
        tasks[i].p_bytes_sent = 1000 * i;
        tasks[i].p_dense_bytes = 100000;
    }
    j.p_mask = 1u << 3;
    j.have_progress = 1;
    j.p_bytes_sent = 1000; /* rank 0's, as the job hash holds it */
    o = sched_jobhash_json(&j);
    j.tasks = tasks;
    j.ntasks = 3;
    sched_jobhash_sum_progress(&j, o);
    pr = json_object_get(o, "progress");
    cr_assert_eq(json_number_value(json_object_get(pr, "bytes_sent")), 3000);
    cr_assert_eq(json_number_value(json_object_get(pr, "dense_bytes")), 200000);
    json_decref(o);
    /* No worker reported bytes: rank 0's progress stays as it is. */
    tasks[1].have_bytes = tasks[2].have_bytes = 0;
    o = sched_jobhash_json(&j);
    sched_jobhash_sum_progress(&j, o);
    pr = json_object_get(o, "progress");
    cr_assert_eq(json_number_value(json_object_get(pr, "bytes_sent")), 1000);
    json_decref(o);
    j.tasks = NULL;
    j.ntasks = 0;
}

Test(sched_jobhash, the_credentials_are_written_but_never_read_back_or_shown)
{
    static const char creds[] =
        "secret=00112233445566778899aabbccddeeff00112233445566778899aabbccdd"
        "eeff\n";
    sched_job j = sample(), back;
    pairs p = {0};
    redisReply *r;
    json_t *o;
    char *text;

    j.credentials = (char *)creds;
    cr_assert_eq(sched_jobhash_write(&j, collect, &p), FLPS_OK);
    cr_assert_not_null(strstr(p.resp, "credentials\r\n$72\r\nsecret=0011"));
    r = reply_of(&p, NULL, 0);
    cr_assert_eq(sched_jobhash_read(r, &back), FLPS_OK);
    freeReplyObject(r);
    cr_assert_null(back.credentials, "flsched keeps no copy");
    sched_job_fini(&back);
    j.state = SCHED_SUCCEEDED;
    o = sched_jobhash_json(&j);
    text = json_dumps(o, JSON_COMPACT);
    cr_assert_null(strstr(text, "credentials"), "%s", text);
    cr_assert_null(strstr(text, "00112233445566778899"), "%s", text);
    free(text);
    json_decref(o);
}
