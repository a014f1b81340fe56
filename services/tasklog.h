/* How a line that one of a job's processes printed is shown to people:
 * "[worker-3] loss 0.41". One format for flrun's output and `flsubmit
 * logs`, so a job's lines read the same on this machine and on a
 * cluster. */
#ifndef FLPS_SERVICES_TASKLOG_H
#define FLPS_SERVICES_TASKLOG_H

#include <stddef.h>
#include <stdint.h>

/* printf format of one shown line: the task's name, then the line as the
 * process printed it (without its newline). */
#define TASKLOG_LINE_FMT "[%s] %s\n"

/* Room for a task's name. */
#define TASKLOG_NAME_MAX 32

/* A process's name in the logs: "server-INDEX" for shard INDEX,
 * "worker-INDEX" for worker rank INDEX. flagent's task keys end in it and
 * the logs stream's task field holds it. Always NUL-terminates buf
 * (len > 0). */
void tasklog_name(char *buf, size_t len, int server, uint32_t index);

#endif
