/* Gang placement and the queue pass with backfill, with exact expected
 * placements worked out by hand from the rules in docs/scheduler.md. */
#include "scheduler/sched_place.h"

#include <criterion/criterion.h>
#include <string.h>

#include "common/alloc.h"

#define GI (1ULL << 30)

static sched_pnode node(double cpus, uint64_t mem, uint64_t gpus)
{
    sched_pnode n;

    memset(&n, 0, sizeof(n));
    n.cap.mcpus = sched_res_mcpus(cpus);
    n.cap.memory = mem;
    n.cap.gpus = gpus;
    n.ready = 1;
    return n;
}

static sched_pjob job(uint32_t servers, uint32_t workers, double wcpus,
                      double time_limit)
{
    sched_pjob j;

    memset(&j, 0, sizeof(j));
    j.servers = servers;
    j.workers = workers;
    j.per_server.mcpus = 1000;
    j.per_server.memory = GI / 2;
    j.per_worker.mcpus = sched_res_mcpus(wcpus);
    j.per_worker.memory = GI;
    j.time_limit = time_limit;
    return j;
}

static sched_res free_of(const sched_pnode *n)
{
    sched_res f = n->cap;

    f.mcpus -= n->used.mcpus;
    f.memory -= n->used.memory;
    f.gpus -= n->used.gpus;
    return f;
}

static void assert_nodes(const uint32_t *got, const uint32_t *want, size_t n,
                         const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s %zu on node %u, expected %u", what, i,
                     got[i], want[i]);
}

Test(sched_place, converts_cpus_to_thousandths_without_drift)
{
    cr_assert_eq(sched_res_mcpus(1.5), 1500);
    cr_assert_eq(sched_res_mcpus(0.1) * 10, sched_res_mcpus(1.0));
    cr_assert_eq(sched_res_mcpus(0), 0);
    cr_assert_eq(sched_res_mcpus(-2), 0);
}

Test(sched_place, places_a_job_that_fits_only_across_two_nodes)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_res free[2] = {free_of(&nodes[0]), free_of(&nodes[1])};
    sched_pjob j = job(1, 6, 1, 0);
    uint32_t srv[1], wrk[6];
    const uint32_t want_w[6] = {0, 0, 0, 1, 1, 1};
    int placed = -1;

    cr_assert_eq(sched_place_gang(nodes, free, 2, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    cr_assert_eq(srv[0], 0, "ties go to the first node in name order");
    assert_nodes(wrk, want_w, 6, "worker");
    cr_assert_eq(free[0].mcpus, 0);
    cr_assert_eq(free[1].mcpus, 1000);
    cr_assert_eq(free[0].memory, 16 * GI - GI / 2 - 3 * GI);
    cr_assert_eq(free[1].memory, 16 * GI - 3 * GI);
}

Test(sched_place, places_all_of_a_job_or_nothing)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_res free[2] = {free_of(&nodes[0]), free_of(&nodes[1])};
    sched_res before[2];
    sched_pjob j = job(1, 8, 1, 0); /* 9 CPUs on 8 */
    uint32_t srv[1] = {77}, wrk[8];
    int placed = -1;

    memset(wrk, 0x77, sizeof(wrk));
    memcpy(before, free, sizeof(free));
    cr_assert_eq(sched_place_gang(nodes, free, 2, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 0);
    cr_assert_eq(memcmp(before, free, sizeof(free)), 0,
                 "a job that does not fit takes nothing");
    cr_assert_eq(srv[0], 77, "and writes no placement");
    cr_assert_eq(wrk[7], 0x77777777u);
}

Test(sched_place, spreads_servers_over_nodes_by_count_then_free_cpus)
{
    sched_pnode nodes[3] = {node(8, 64 * GI, 0), node(4, 64 * GI, 0),
                            node(6, 64 * GI, 0)};
    sched_res free[3] = {free_of(&nodes[0]), free_of(&nodes[1]),
                         free_of(&nodes[2])};
    sched_pjob j = job(4, 2, 1, 0);
    uint32_t srv[4], wrk[2];
    /* s0: n1 (most free CPUs); s1: n3 (0 servers, 6 > 4); s2: n2; s3: all
     * hold one, n1 has most free (7). Workers pack onto n1. */
    const uint32_t want_s[4] = {0, 2, 1, 0}, want_w[2] = {0, 0};
    int placed = 0;

    cr_assert_eq(sched_place_gang(nodes, free, 3, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    assert_nodes(srv, want_s, 4, "server");
    assert_nodes(wrk, want_w, 2, "worker");
}

Test(sched_place, packs_workers_on_the_first_node_with_room_for_every_resource)
{
    sched_pnode nodes[3] = {node(16, 64 * GI, 0), node(16, 2 * GI, 4),
                            node(16, 64 * GI, 2)};
    sched_res free[3];
    sched_pjob j = job(1, 3, 1, 0);
    uint32_t srv[1], wrk[3];
    /* Workers need a GPU: n1 has none; n2 has memory for two (2Gi), so
     * n3 takes the third. The server goes to n1 (a tie on CPUs). */
    const uint32_t want_w[3] = {1, 1, 2};
    int placed = 0;

    j.per_worker.gpus = 1;
    for (int i = 0; i < 3; i++)
        free[i] = free_of(&nodes[i]);
    cr_assert_eq(sched_place_gang(nodes, free, 3, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    cr_assert_eq(srv[0], 0);
    assert_nodes(wrk, want_w, 3, "worker");
    cr_assert_eq(free[1].memory, 0);
    cr_assert_eq(free[2].gpus, 1);
}

Test(sched_place, skips_lost_nodes_and_counts_what_their_tasks_use)
{
    sched_pnode nodes[3] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0),
                            node(4, 16 * GI, 0)};
    sched_pjob j = job(1, 2, 1, 0);
    sched_pdecision d;
    uint32_t srv[1], wrk[2];
    const uint32_t want_w[2] = {2, 2};

    nodes[0].ready = 0;
    nodes[1].used.mcpus = 4000; /* full */
    d.server_node = srv;
    d.worker_node = wrk;
    cr_assert_eq(sched_place_queue(nodes, 3, NULL, 0, &j, 1, 0, &d, NULL),
                 FLPS_OK);
    cr_assert_eq(d.how, SCHED_PLACE_IN_ORDER);
    cr_assert_eq(srv[0], 2);
    assert_nodes(wrk, want_w, 2, "worker");
}

Test(sched_place, orders_the_queue_by_priority_then_submission)
{
    sched_pjob jobs[5];
    size_t order[5];
    const size_t want[5] = {3, 1, 4, 0, 2};
    const uint32_t prio[5] = {0, 5, 0, 9, 5};
    const uint64_t seq[5] = {1, 2, 3, 4, 5};

    for (int i = 0; i < 5; i++) {
        jobs[i] = job(1, 1, 1, 0);
        jobs[i].priority = prio[i];
        jobs[i].seq = seq[i];
    }
    sched_place_order(jobs, 5, order);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(order[i], want[i], "position %d holds job %zu", i,
                     order[i]);
}

Test(sched_place, places_in_order_and_a_big_head_keeps_later_jobs_waiting)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    /* Priority order: A (1+1) fits, B (1+7) needs the whole cluster and
     * nothing runs with a time_limit, C (1+1, no limit) would take what B
     * is reserved: it waits. */
    sched_pjob q[3] = {job(1, 1, 1, 0), job(1, 7, 1, 0), job(1, 1, 1, 0)};
    uint32_t srv[3][1], wrk[3][8];
    sched_pdecision d[3];
    sched_preserve r;
    const uint32_t want_aw[1] = {0};

    for (int i = 0; i < 3; i++) {
        d[i].server_node = srv[i];
        d[i].worker_node = wrk[i];
    }
    cr_assert_eq(sched_place_queue(nodes, 2, NULL, 0, q, 3, 0, d, &r), FLPS_OK);
    cr_assert_eq(d[0].how, SCHED_PLACE_IN_ORDER);
    cr_assert_eq(srv[0][0], 0);
    assert_nodes(wrk[0], want_aw, 1, "worker");
    cr_assert_eq(d[1].how, SCHED_PLACE_NO);
    cr_assert_eq(d[2].how, SCHED_PLACE_NO,
                 "C would delay B, which needs every CPU once A ends");
    cr_assert_eq(r.have, 1);
    cr_assert_eq(r.job, 1);
    cr_assert_eq(r.start, 0, "A has no time_limit: the start is unknown");
}

/* Two 4-CPU nodes; R runs on n1 (all 4 CPUs) until t=100; now = 10. */
typedef struct bf {
    sched_pnode nodes[2];
    sched_res held[2];
    sched_prun run;
} bf;

static void bf_init(bf *b)
{
    b->nodes[0] = node(4, 16 * GI, 0);
    b->nodes[1] = node(4, 16 * GI, 0);
    b->nodes[0].used.mcpus = 4000;
    b->nodes[0].used.memory = 4 * GI;
    memset(b->held, 0, sizeof(b->held));
    b->held[0] = b->nodes[0].used;
    b->run.held = b->held;
    b->run.end = 100;
}

Test(sched_place, does_not_backfill_a_job_that_would_delay_the_head)
{
    bf b;
    /* Head H: 1+7 (8 CPUs) can start at 100 on both nodes entirely. A: 1+1
     * with time_limit 200 ends at 210 > 100 and there is no remainder. */
    sched_pjob q[2] = {job(1, 7, 1, 0), job(1, 1, 1, 200)};
    uint32_t srv[2][1], wrk[2][8];
    sched_pdecision d[2];
    sched_preserve r;

    bf_init(&b);
    for (int i = 0; i < 2; i++) {
        d[i].server_node = srv[i];
        d[i].worker_node = wrk[i];
    }
    cr_assert_eq(sched_place_queue(b.nodes, 2, &b.run, 1, q, 2, 10, d, &r),
                 FLPS_OK);
    cr_assert_eq(d[0].how, SCHED_PLACE_NO);
    cr_assert_eq(r.have, 1);
    cr_assert_eq(r.start, 100.0);
    cr_assert_eq(d[1].how, SCHED_PLACE_NO,
                 "A fits now on n2 but would still run at 100");
}

Test(sched_place, backfills_a_job_that_ends_before_the_reservation)
{
    bf b;
    /* B: 1+1 with time_limit 50 ends at 60 <= 100: placed on n2 now. */
    sched_pjob q[3] = {job(1, 7, 1, 0), job(1, 1, 1, 50), job(1, 3, 1, 80)};
    uint32_t srv[3][1], wrk[3][8];
    sched_pdecision d[3];
    const uint32_t want_w[1] = {1};

    bf_init(&b);
    for (int i = 0; i < 3; i++) {
        d[i].server_node = srv[i];
        d[i].worker_node = wrk[i];
    }
    cr_assert_eq(sched_place_queue(b.nodes, 2, &b.run, 1, q, 3, 10, d, NULL),
                 FLPS_OK);
    cr_assert_eq(d[0].how, SCHED_PLACE_NO);
    cr_assert_eq(d[1].how, SCHED_PLACE_BACKFILL);
    cr_assert_eq(srv[1][0], 1);
    assert_nodes(wrk[1], want_w, 1, "worker");
    cr_assert_eq(d[2].how, SCHED_PLACE_NO,
                 "ends at 90 but B left only 2 CPUs free now");
}

Test(sched_place, places_a_job_without_time_limit_only_in_the_remainder)
{
    bf b;
    /* Head H: 1+5 (6 CPUs) at 100 takes n1 whole and 2 CPUs of n2, which
     * leaves 2 CPUs of n2 as the remainder. C (1+1, no limit) fits there;
     * D (1+1, no limit) then does not, though n2 still has 2 CPUs free
     * now; E (1+1, ends at 60) does. */
    sched_pjob q[4] = {job(1, 5, 1, 0), job(1, 1, 1, 0), job(1, 1, 1, 0),
                       job(1, 1, 1, 50)};
    uint32_t srv[4][1], wrk[4][8];
    sched_pdecision d[4];
    sched_preserve r;

    bf_init(&b);
    for (int i = 0; i < 4; i++) {
        d[i].server_node = srv[i];
        d[i].worker_node = wrk[i];
    }
    cr_assert_eq(sched_place_queue(b.nodes, 2, &b.run, 1, q, 4, 10, d, &r),
                 FLPS_OK);
    cr_assert_eq(d[0].how, SCHED_PLACE_NO);
    cr_assert_eq(r.start, 100.0);
    cr_assert_eq(d[1].how, SCHED_PLACE_BACKFILL);
    cr_assert_eq(srv[1][0], 1);
    cr_assert_eq(wrk[1][0], 1);
    cr_assert_eq(d[2].how, SCHED_PLACE_NO, "the remainder is used up");
    cr_assert_eq(d[3].how, SCHED_PLACE_BACKFILL);
    cr_assert_eq(srv[3][0], 1);
    cr_assert_eq(wrk[3][0], 1);
}

Test(sched_place, takes_the_earliest_end_that_frees_enough_for_the_head)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_res held[3][2];
    sched_prun run[3];
    sched_pjob head = job(1, 4, 1, 0); /* 5 CPUs */
    uint32_t srv[1], wrk[4];
    sched_pdecision d = {SCHED_PLACE_NO, srv, wrk};
    sched_preserve r;

    /* Three jobs hold 2, 2 and 4 CPUs, ending at 300, 50 and 200: free
     * grows to 2 at 50, 6 at 200. */
    memset(held, 0, sizeof(held));
    held[0][0].mcpus = 2000;
    held[1][0].mcpus = 2000;
    held[2][1].mcpus = 4000;
    nodes[0].used.mcpus = 4000;
    nodes[1].used.mcpus = 4000;
    run[0] = (sched_prun){held[0], 300};
    run[1] = (sched_prun){held[1], 50};
    run[2] = (sched_prun){held[2], 200};
    cr_assert_eq(sched_place_queue(nodes, 2, run, 3, &head, 1, 20, &d, &r),
                 FLPS_OK);
    cr_assert_eq(d.how, SCHED_PLACE_NO);
    cr_assert_eq(r.have, 1);
    cr_assert_eq(r.start, 200.0);
}

Test(sched_place, a_job_the_ready_nodes_can_never_hold_does_not_block_others)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_pjob q[2] = {job(1, 7, 1, 0), job(1, 1, 1, 0)};
    uint32_t srv[2][1], wrk[2][8];
    sched_pdecision d[2];
    sched_preserve r;

    nodes[0].ready = 0; /* H needs both nodes; n1 is LOST */
    for (int i = 0; i < 2; i++) {
        d[i].server_node = srv[i];
        d[i].worker_node = wrk[i];
    }
    cr_assert_eq(sched_place_queue(nodes, 2, NULL, 0, q, 2, 0, d, &r), FLPS_OK);
    cr_assert_eq(d[0].how, SCHED_PLACE_NO);
    cr_assert_eq(r.have, 0);
    cr_assert_eq(d[1].how, SCHED_PLACE_IN_ORDER);
    cr_assert_eq(srv[1][0], 1);
}

Test(sched_place, fits_ever_counts_every_registered_node_as_empty)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_pjob fits = job(1, 7, 1, 0), big = job(1, 8, 1, 0);
    int f = -1;

    nodes[0].ready = 0;
    nodes[1].used.mcpus = 4000;
    cr_assert_eq(sched_place_fits_ever(nodes, 2, &fits, &f), FLPS_OK);
    cr_assert_eq(f, 1, "a LOST or busy node still counts");
    cr_assert_eq(sched_place_fits_ever(nodes, 2, &big, &f), FLPS_OK);
    cr_assert_eq(f, 0);
    cr_assert_eq(sched_place_fits_ever(NULL, 0, &fits, &f), FLPS_OK);
    cr_assert_eq(f, 0, "nothing fits where no node is registered");
}

Test(sched_place, explains_which_key_makes_a_job_impossible)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 1), node(8, 8 * GI, 0)};
    sched_pjob j = job(1, 1, 1, 0);
    const char *field = NULL;
    char msg[256];

    j.per_worker.mcpus = 9000;
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "cpus_per_worker");
    cr_assert_not_null(strstr(msg, "needs 9.000 CPUs; the largest node has "
                                   "8.000"),
                       "%s", msg);
    j = job(1, 1, 1, 0);
    j.per_worker.gpus = 2;
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "gpus_per_worker");
    j = job(1, 1, 1, 0);
    j.per_server.memory = 32 * GI;
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "memory_per_server");
    cr_assert_not_null(strstr(msg, "32Gi"), "%s", msg);
    j = job(1, 12, 1, 0);
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "workers");
    cr_assert_not_null(strstr(msg, "2 registered nodes"), "%s", msg);
    j = job(13, 1, 1, 0);
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "servers");
    sched_place_explain(NULL, 0, &j, &field, msg, sizeof(msg));
    cr_assert_not_null(strstr(msg, "no node is registered"), "%s", msg);
}

Test(sched_place, reports_a_failed_allocation_and_changes_nothing)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_res free[2] = {free_of(&nodes[0]), free_of(&nodes[1])};
    sched_pjob j = job(1, 1, 1, 0);
    uint32_t srv[1] = {9}, wrk[1] = {9};
    sched_pdecision d = {SCHED_PLACE_NO, srv, wrk};
    int placed = -1, fits = -1;

    flps_alloc_fail_at(1);
    cr_assert_eq(sched_place_gang(nodes, free, 2, &j, srv, wrk, &placed),
                 FLPS_ENOMEM);
    cr_assert_eq(placed, -1);
    cr_assert_eq(free[0].mcpus, 4000);
    for (unsigned long n = 1; n <= 9; n++) {
        flps_alloc_fail_at(n);
        cr_assert_eq(sched_place_queue(nodes, 2, NULL, 0, &j, 1, 0, &d, NULL),
                     FLPS_ENOMEM, "allocation %lu", n);
    }
    flps_alloc_fail_at(2);
    cr_assert_eq(sched_place_fits_ever(nodes, 2, &j, &fits), FLPS_ENOMEM);
    cr_assert_eq(fits, -1);
    flps_alloc_fail_at(0);
    cr_assert_eq(sched_place_gang(NULL, free, 2, &j, srv, wrk, &placed),
                 FLPS_EINVAL);
}

Test(sched_place, a_tiny_cpu_share_never_rounds_to_nothing)
{
    cr_assert_eq(sched_res_mcpus(0.0001), 1);
    cr_assert_eq(sched_res_mcpus(1e-300), 1);
    cr_assert_eq(sched_res_mcpus(0.001), 1);
    cr_assert_eq(sched_res_mcpus(0.0016), 2);
}

Test(sched_place, a_thousand_workers_of_a_tiny_share_do_not_fit_one_small_node)
{
    /* 1000 workers at 0.0001 CPUs were 0 CPUs and fitted anywhere; each is
     * now 0.001, so with the server's 1 CPU they need 2 CPUs. */
    sched_pnode n = node(1.5, 1024 * GI, 0);
    sched_pjob j = job(1, 1000, 0.0001, 0);
    int fits = 1;

    j.per_worker.memory = 1;
    cr_assert_eq(sched_place_fits_ever(&n, 1, &j, &fits), FLPS_OK);
    cr_assert_eq(fits, 0, "placed on a node of 1.5 CPUs");
    n = node(2, 1024 * GI, 0);
    cr_assert_eq(sched_place_fits_ever(&n, 1, &j, &fits), FLPS_OK);
    cr_assert_eq(fits, 1, "fits exactly on 2 CPUs");
}

/* ---- transport: rdma ---- */

Test(sched_place, an_rdma_job_goes_only_to_nodes_with_an_active_port)
{
    /* n0 is the first in name order and has room, but no RDMA port. */
    sched_pnode nodes[3] = {node(8, 32 * GI, 0), node(4, 16 * GI, 0),
                            node(4, 16 * GI, 0)};
    sched_res free[3];
    sched_pjob j = job(2, 4, 1, 0);
    uint32_t srv[2], wrk[4];
    const uint32_t want_s[2] = {1, 2}, want_w[4] = {1, 1, 1, 2};
    int placed = -1;

    nodes[1].rdma = nodes[2].rdma = 1;
    for (int i = 0; i < 3; i++)
        free[i] = free_of(&nodes[i]);
    j.need_rdma = 1;
    cr_assert_eq(sched_place_gang(nodes, free, 3, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    assert_nodes(srv, want_s, 2, "server");
    assert_nodes(wrk, want_w, 4, "worker");
    cr_assert_eq(free[0].mcpus, 8000, "the node without RDMA is untouched");

    /* The same job over ZeroMQ packs onto n0 first. */
    for (int i = 0; i < 3; i++)
        free[i] = free_of(&nodes[i]);
    j.need_rdma = 0;
    cr_assert_eq(sched_place_gang(nodes, free, 3, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    cr_assert_eq(wrk[0], 0);
}

Test(sched_place, an_rdma_job_waits_when_the_rdma_nodes_are_full)
{
    sched_pnode nodes[2] = {node(8, 32 * GI, 0), node(2, 16 * GI, 0)};
    sched_res free[2];
    sched_pjob j = job(1, 2, 1, 0);
    uint32_t srv[1], wrk[2];
    int placed = -1, fits = -1;

    nodes[1].rdma = 1;
    free[0] = free_of(&nodes[0]);
    free[1] = free_of(&nodes[1]);
    j.need_rdma = 1;
    cr_assert_eq(sched_place_gang(nodes, free, 2, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 0, "1 + 2 CPUs do not fit the 2-CPU RDMA node");
    cr_assert_eq(sched_place_fits_ever(nodes, 2, &j, &fits), FLPS_OK);
    cr_assert_eq(fits, 0, "and never will: the big node has no RDMA");
}

Test(sched_place, explains_an_rdma_job_no_node_can_take)
{
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_pjob j = job(1, 1, 1, 0);
    const char *field = NULL;
    char msg[512];
    int fits = -1;

    j.need_rdma = 1;
    cr_assert_eq(sched_place_fits_ever(nodes, 2, &j, &fits), FLPS_OK);
    cr_assert_eq(fits, 0);
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "transport");
    cr_assert(strstr(msg, "none of the 2 registered nodes reports an ACTIVE "
                          "RDMA port") != NULL,
              "%s", msg);
    cr_assert(strstr(msg, "or set transport: zmq or auto") != NULL, "%s", msg);

    /* One RDMA node that is too small: the workers are to blame, counted
     * on the RDMA nodes only. */
    nodes[1].rdma = 1;
    j.workers = 8;
    sched_place_explain(nodes, 2, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "workers");
    cr_assert(strstr(msg, "the 1 registered node with an ACTIVE RDMA port "
                          "(4.000 CPUs") != NULL,
              "%s", msg);
}

Test(sched_place, the_queue_passes_an_rdma_head_over_for_a_zmq_job)
{
    /* Only n0 has RDMA and it is busy until t=100; the RDMA job waits as
     * the head, and a ZeroMQ job that fits n1 now is placed by backfill
     * (it takes nothing the head is reserved). */
    sched_pnode nodes[2] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_res held[2];
    sched_prun run;
    sched_pjob q[2] = {job(1, 1, 1, 0), job(1, 1, 1, 0)};
    uint32_t srv[2][1], wrk[2][1];
    sched_pdecision d[2];
    sched_preserve r;

    nodes[0].rdma = 1;
    nodes[0].used.mcpus = 4000;
    memset(held, 0, sizeof(held));
    held[0] = nodes[0].used;
    run.held = held;
    run.end = 100;
    q[0].need_rdma = 1;
    for (int i = 0; i < 2; i++) {
        d[i].server_node = srv[i];
        d[i].worker_node = wrk[i];
    }
    cr_assert_eq(sched_place_queue(nodes, 2, &run, 1, q, 2, 10, d, &r),
                 FLPS_OK);
    cr_assert_eq(d[0].how, SCHED_PLACE_NO, "n1 has room but no RDMA");
    cr_assert_eq(r.have, 1);
    cr_assert_eq(r.job, 0);
    cr_assert_eq(r.start, 100);
    cr_assert_eq(d[1].how, SCHED_PLACE_BACKFILL);
    cr_assert_eq(srv[1][0], 1);
    cr_assert_eq(wrk[1][0], 1);
}

Test(sched_place, servers_auto_puts_each_server_on_its_workers_node)
{
    sched_pnode nodes[4] = {node(4, 16 * GI, 0), node(4, 16 * GI, 0),
                            node(4, 16 * GI, 0), node(4, 16 * GI, 0)};
    sched_res free[4];
    sched_pjob j = job(4, 4, 1, 0);
    uint32_t srv[4], wrk[4];
    const uint32_t want[4] = {0, 1, 2, 3};
    int placed = -1;

    for (size_t i = 0; i < 4; i++)
        free[i] = free_of(&nodes[i]);
    /* Without the rule the workers pack onto node 0, the servers spread. */
    cr_assert_eq(sched_place_gang(nodes, free, 4, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    cr_assert(wrk[0] == 0 && wrk[1] == 0 && srv[1] == 1);
    for (size_t i = 0; i < 4; i++)
        free[i] = free_of(&nodes[i]);
    j.beside = 1;
    cr_assert_eq(sched_place_gang(nodes, free, 4, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    assert_nodes(srv, want, 4, "server");
    assert_nodes(wrk, want, 4, "worker");
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(free[i].mcpus, 2000, "node %zu keeps 2 CPUs", i);
}

Test(sched_place, servers_auto_pairs_double_up_where_nodes_are_few)
{
    /* 2 nodes of 5 CPUs, 4 pairs of 2 CPUs: two pairs on each; the node
     * with more room left takes the tie. */
    sched_pnode nodes[2] = {node(5, 16 * GI, 0), node(5, 16 * GI, 0)};
    sched_res free[2] = {free_of(&nodes[0]), free_of(&nodes[1])};
    sched_pjob j = job(4, 4, 1, 0);
    uint32_t srv[4], wrk[4];
    const uint32_t want[4] = {0, 1, 0, 1};
    int placed = -1;

    j.beside = 1;
    cr_assert_eq(sched_place_gang(nodes, free, 2, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 1);
    assert_nodes(srv, want, 4, "server");
    assert_nodes(wrk, want, 4, "worker");
    /* A third pair on a node has no room: a fifth would not fit, and a
     * job that does not fit leaves free as it was. */
    j = job(5, 5, 1, 0);
    j.beside = 1;
    free[0] = free_of(&nodes[0]);
    free[1] = free_of(&nodes[1]);
    cr_assert_eq(sched_place_gang(nodes, free, 2, &j, srv, wrk, &placed),
                 FLPS_OK);
    cr_assert_eq(placed, 0);
    cr_assert_eq(free[0].mcpus, 5000);
}

Test(sched_place, servers_auto_says_when_a_pair_fits_no_node)
{
    /* A worker (3 CPUs) fits, a server (1) fits, the two together do not;
     * apart, the servers take nodes 0-1 and the workers nodes 2-3. */
    sched_pnode nodes[4] = {node(3, 16 * GI, 0), node(3, 16 * GI, 0),
                            node(3, 16 * GI, 0), node(3, 16 * GI, 0)};
    sched_pjob j = job(2, 2, 3, 0);
    const char *field = NULL;
    char msg[512];
    int fits = -1;

    j.beside = 1;
    cr_assert_eq(sched_place_fits_ever(nodes, 4, &j, &fits), FLPS_OK);
    cr_assert_eq(fits, 0);
    sched_place_explain(nodes, 4, &j, &field, msg, sizeof(msg));
    cr_assert_str_eq(field, "servers");
    cr_assert(strstr(msg, "servers: auto") != NULL &&
                  strstr(msg, "4.000 CPUs") != NULL,
              "%s", msg);
    j.beside = 0;
    cr_assert_eq(sched_place_fits_ever(nodes, 4, &j, &fits), FLPS_OK);
    cr_assert_eq(fits, 1, "apart they fit");
}
