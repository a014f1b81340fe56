/* The Lua scripts of flsched's store (what each takes: sched_scripts.h). */
#include "scheduler/sched_scripts.h"

#include <stddef.h>

/* What several scripts share, put in front of each: Redis runs every
 * script on its own, so one cannot call another.
 * event: the event's seq comes from the job hash, so it is unique and
 * ordered even though the list is trimmed; the JSON is built by flsched
 * without seq and the script puts seq first.
 * unassign: every task of a job's tasks set leaves its node's desired set
 * (the agents stop them). The node keys are derived, not passed in KEYS:
 * flsched runs against one Redis, not a cluster.
 * num: fields read as the C side reads them, absent or malformed = 0.
 * score: the queue score of docs/scheduler.md, printed as C's %.17g. */
#define LUA_PRELUDE                                                            \
    "local function num(v) return tonumber(v) or 0 end\n"                      \
    "local function event(jk, ek, text, cap)\n"                                \
    "  local s = redis.call('HINCRBY', jk, 'event_seq', 1)\n"                  \
    "  redis.call('RPUSH', ek, '{\"seq\":' .. s .. ',' .. "                    \
    "string.sub(text, 2))\n"                                                   \
    "  redis.call('LTRIM', ek, -tonumber(cap), -1)\n"                          \
    "  return s\n"                                                             \
    "end\n"                                                                    \
    "local function unassign(tk)\n"                                            \
    "  for _, k in ipairs(redis.call('SMEMBERS', tk)) do\n"                    \
    "    local node = redis.call('HGET', k, 'node')\n"                         \
    "    if node and node ~= '' then\n"                                        \
    "      redis.call('SREM', 'flps:node:' .. node .. ':tasks', k)\n"          \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local function job_is(jk, state, attempt)\n"                              \
    "  local v = redis.call('HMGET', jk, 'state', 'attempt')\n"                \
    "  return v[1] == state and num(v[2]) == tonumber(attempt)\n"              \
    "end\n"                                                                    \
    "local function score(p, s)\n"                                             \
    "  return string.format('%.17g', -num(p) * 4294967296 + num(s))\n"         \
    "end\n"

/* An event for a job that is gone (a late one: node_lost after the job
 * hash went) is dropped: HINCRBY would create a hash holding only
 * event_seq, which reads as a job with no state. */
static const char event_lua[] =
    LUA_PRELUDE "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
                "return event(KEYS[1], KEYS[2], ARGV[1], ARGV[2])\n";

/* The INCR and the job's keys in one step: numbers have no gaps and a
 * refused job takes none. */
static const char submit_lua[] = LUA_PRELUDE
    "local seq = redis.call('INCR', KEYS[1])\n"
    "local id = 'j' .. seq\n"
    "local jk = 'flps:job:' .. id\n"
    "local h = {}\n"
    "for i = 4, #ARGV - 1, 2 do\n"
    "  local f, v = ARGV[i], ARGV[i + 1]\n"
    "  if f == 'id' then v = id elseif f == 'seq' then v = tostring(seq) end\n"
    "  h[#h + 1] = f\n"
    "  h[#h + 1] = v\n"
    "end\n"
    "redis.call('HSET', jk, unpack(h))\n"
    "redis.call('ZADD', KEYS[2], seq, id)\n"
    "redis.call('ZADD', KEYS[3], score(ARGV[3], seq), id)\n"
    "event(jk, jk .. ':events', ARGV[1], ARGV[2])\n"
    "return seq\n";

/* Only the lease holder places, and only a job still QUEUED at the
 * attempt it planned for (a cancel may have come in between). */
static const char place_lua[] = LUA_PRELUDE
    "if ARGV[1] == '1' and redis.call('GET', KEYS[1]) ~= ARGV[2] then\n"
    "  return 0\n"
    "end\n"
    "if not job_is(KEYS[2], 'QUEUED', ARGV[4]) then return 0 end\n"
    "local nf = tonumber(ARGV[8])\n"
    "local i = 10\n"
    "while i + 1 + 2 * nf <= #ARGV do\n"
    "  local key, node = ARGV[i], ARGV[i + 1]\n"
    "  redis.call('DEL', key)\n"
    "  redis.call('HSET', key, unpack(ARGV, i + 2, i + 1 + 2 * nf))\n"
    "  redis.call('SADD', 'flps:node:' .. node .. ':tasks', key)\n"
    "  redis.call('SADD', KEYS[3], key)\n"
    "  i = i + 2 + 2 * nf\n"
    "end\n"
    "redis.call('HSET', KEYS[2], 'state', 'RUNNING', 'started_at', ARGV[5],\n"
    "           'transport_used', ARGV[9])\n"
    "redis.call('ZREM', KEYS[4], ARGV[3])\n"
    "event(KEYS[2], KEYS[5], ARGV[6], ARGV[7])\n"
    "return 1\n";

static const char succeed_lua[] = LUA_PRELUDE
    "if not job_is(KEYS[1], 'RUNNING', ARGV[1]) then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'SUCCEEDED', 'finished_at', "
    "ARGV[2], 'summary', ARGV[3])\n"
    "unassign(KEYS[2])\n"
    "event(KEYS[1], KEYS[3], ARGV[4], ARGV[5])\n"
    "return 1\n";

/* flsched chose restart or not, and wrote the event, from restarts and
 * max_restarts as it read them; -1 when those changed meanwhile, so it
 * reads again. The tasks leave their nodes before the set is emptied. */
static const char fail_lua[] = LUA_PRELUDE
    "local v = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'restarts',\n"
    "                     'max_restarts', 'priority', 'seq')\n"
    "if v[1] ~= 'RUNNING' or num(v[2]) ~= tonumber(ARGV[1]) then\n"
    "  return 0\n"
    "end\n"
    "if num(v[3]) ~= tonumber(ARGV[2]) or num(v[4]) ~= tonumber(ARGV[3]) then\n"
    "  return -1\n"
    "end\n"
    "unassign(KEYS[2])\n"
    "if ARGV[4] == '1' then\n"
    "  redis.call('HSET', KEYS[1], 'state', 'QUEUED', 'reason', ARGV[5],\n"
    "             'restarts', ARGV[10], 'attempt', ARGV[11])\n"
    "  redis.call('ZADD', KEYS[4], score(v[5], v[6]), ARGV[9])\n"
    "  redis.call('DEL', KEYS[2])\n"
    "else\n"
    "  redis.call('HSET', KEYS[1], 'state', 'FAILED', 'finished_at', "
    "ARGV[6],\n"
    "             'reason', ARGV[5])\n"
    "end\n"
    "event(KEYS[1], KEYS[3], ARGV[7], ARGV[8])\n"
    "return 1\n";

static const char cancel_lua[] = LUA_PRELUDE
    "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n"
    "local s = redis.call('HGET', KEYS[1], 'state')\n"
    "if s ~= 'QUEUED' and s ~= 'RUNNING' then return 1 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'CANCELLED', 'finished_at', "
    "ARGV[1],\n"
    "           'reason', 'cancelled')\n"
    "redis.call('ZREM', KEYS[4], ARGV[5])\n"
    "unassign(KEYS[2])\n"
    "event(KEYS[1], KEYS[3], s == 'RUNNING' and ARGV[2] or ARGV[3], ARGV[4])\n"
    "return 2\n";

/* Only the leader writes a plan, and only over the version it planned
 * from. */
static const char plan_put_lua[] = LUA_PRELUDE
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "if num(redis.call('HGET', KEYS[2], 'version')) ~= tonumber(ARGV[2]) "
    "then\n"
    "  return 0\n"
    "end\n"
    "if ARGV[3] ~= '' then\n"
    "  redis.call('HSET', KEYS[2], 'version', ARGV[3], 'plan', ARGV[4],\n"
    "             'created_at', ARGV[5], 'profile_seen', ARGV[6])\n"
    "else\n"
    "  redis.call('HSET', KEYS[2], 'profile_seen', ARGV[6])\n"
    "end\n"
    "event(KEYS[3], KEYS[4], ARGV[7], ARGV[8])\n"
    "return 1\n";

/* A node that heartbeats at the same moment stays READY: the alive key is
 * looked at in the same step as the state is changed. */
static const char node_move_lua[] =
    "local alive = redis.call('EXISTS', KEYS[2]) == 1 and '1' or '0'\n"
    "if redis.call('HGET', KEYS[1], 'state') ~= ARGV[1] or "
    "alive ~= ARGV[3] then\n"
    "  return 0\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'state', ARGV[2])\n"
    "return 1\n";

static const char renew_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

static const char release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

const char *sched_script_lua(sched_script s)
{
    static const char *const lua[SCHED_SCRIPT_COUNT] = {
        [SCHED_SCRIPT_EVENT] = event_lua,
        [SCHED_SCRIPT_SUBMIT] = submit_lua,
        [SCHED_SCRIPT_PLACE] = place_lua,
        [SCHED_SCRIPT_SUCCEED] = succeed_lua,
        [SCHED_SCRIPT_FAIL] = fail_lua,
        [SCHED_SCRIPT_CANCEL] = cancel_lua,
        [SCHED_SCRIPT_PLAN_PUT] = plan_put_lua,
        [SCHED_SCRIPT_NODE_MOVE] = node_move_lua,
        [SCHED_SCRIPT_LEASE_RENEW] = renew_lua,
        [SCHED_SCRIPT_LEASE_RELEASE] = release_lua,
    };

    if ((int)s < 0 || s >= SCHED_SCRIPT_COUNT)
        return NULL;
    return lua[s];
}
