/* What flsubmit doctor checks of a node, and flsched's placement of
 * transport: rdma | auto jobs reads, published by its agent: the dataset,
 * RDMA devices and their ACTIVE ports, the memlock limit, and the clock's
 * offset. */
#include "scheduler/agent_node_impl.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "rdma/probe.h"
#include "services/jobspec.h"

/* Redis's TIME and the agent's clock are read in one step, so the offset
 * is the agent's clock minus Redis's, off by at most the time the script
 * took to arrive. flsched publishes its own offset the same way, and the
 * doctor compares the two. The key lives as long as the alive key
 * times two, so a dead agent's facts go away. */
static const char facts_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"
    "redis.call('HSET', KEYS[1], 'reported_at', ARGV[1],\n"
    "  'clock_offset', string.format('%.6f', tonumber(ARGV[1]) - now),\n"
    "  'dataset_dir', ARGV[2], 'dataset_missing', ARGV[3],\n"
    "  'rdma_devices', ARGV[4], 'memlock', ARGV[5],\n"
    "  'rdma_active_ports', ARGV[7], 'rdma_ports', ARGV[8],\n"
    "  'rdma_detail', ARGV[9])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[6])\n"
    "return 1\n";

/* The first Fashion-MNIST file missing (or unreadable) under dir, into
 * buf; "" when all four are there. */
static void dataset_missing(const char *dir, char *buf, size_t len)
{
    const char *name;
    char path[AGENT_PATH_MAX + 64];
    struct stat st;

    buf[0] = '\0';
    for (size_t i = 0; (name = jobspec_fmnist_file(i)) != NULL; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            access(path, R_OK) != 0) {
            snprintf(buf, len, "%s", name);
            return;
        }
    }
}

void agent_facts_publish(agent_node *n)
{
    char key[160], now[40], missing[64], devs[16], memlock[32], ttl[32];
    char active[16], ports[512], detail[1024];
    const char *argv[] = {"EVAL", facts_lua, "1", key,    now,   NULL,  missing,
                          devs,   memlock,   ttl, active, ports, detail};
    rdma_probe p;

    snprintf(key, sizeof(key), "%s:facts", n->node_key);
    argv[5] = n->cfg.data_dir;
    dataset_missing(n->cfg.data_dir, missing, sizeof(missing));
    /* The probe reads $FLPS_SYSFS_ROOT when set, so a test agent can
     * stand for a node with devices. It cannot fail with a NULL root. */
    (void)rdma_probe_run(NULL, &p);
    snprintf(devs, sizeof(devs), "%zu", p.ndevs);
    snprintf(active, sizeof(active), "%zu", rdma_probe_active_ports(&p));
    rdma_probe_active_list(&p, ports, sizeof(ports));
    rdma_probe_describe(&p, detail, sizeof(detail));
    /* -1: unlimited, as the doctor reads it. */
    snprintf(memlock, sizeof(memlock), "%lld", (long long)p.memlock);
    snprintf(ttl, sizeof(ttl), "%lld", n->ttl_ms * 2);
    snprintf(now, sizeof(now), "%.6f", flps_wall_s());
    agent_node_redis_cmd(n, NULL, "publishing the node checks",
                         sizeof(argv) / sizeof(argv[0]), argv);
}
