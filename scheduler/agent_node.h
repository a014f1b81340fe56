/* The node agent behind flagent: registers the node in Redis, heartbeats,
 * and runs exactly the tasks of its desired set, reporting what happens to
 * them (docs/scheduler.md, "Task lifecycle (flagent)"; docs/flagent.md).
 * Single-threaded: one loop polls the children's output, reaps them and
 * talks to Redis. */
#ifndef FLPS_SCHED_AGENT_NODE_H
#define FLPS_SCHED_AGENT_NODE_H

#include <signal.h>
#include <stddef.h>

#include "common/err.h"
#include "scheduler/agent_config.h"

typedef struct agent_node agent_node;

/* The directory holding executable flps and flworker: $FLPS_BIN_DIR when
 * set, else the directory of the running program. Errors: FLPS_ECONFIG
 * when neither holds both (message in errbuf). *dir is written only on
 * FLPS_OK. */
flps_err agent_node_find_bins(char *dir, size_t len, char *errbuf,
                              size_t errlen);

/* Make the agent: creates cfg->work_dir (and its parents) and the Redis
 * connection; does not contact Redis yet. cfg and bin_dir are copied.
 * Errors: FLPS_ESYS (work dir, logged), FLPS_EINVAL (bad Redis URL,
 * logged), FLPS_ENOMEM. Caller owns *out. */
flps_err agent_node_create(const agent_config *cfg, const char *bin_dir,
                           agent_node **out);

/* Run the agent until *stop becomes non-zero (a signal handler sets it),
 * then stop every child (SIGTERM, SIGKILL after 10 s), report their exits
 * when Redis answers, and return FLPS_OK. Redis being away is not an
 * error: the agent logs it once, keeps its children running and retries
 * every second. Blocks. */
flps_err agent_node_run(agent_node *n, volatile sig_atomic_t *stop);

/* Free the agent. Children still running are killed (SIGKILL) and reaped;
 * agent_node_run has normally stopped them already. NULL does nothing. */
void agent_node_destroy(agent_node *n);

#endif
