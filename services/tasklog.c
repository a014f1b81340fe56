/* The names and line format of a job's output as people see it. */
#include "services/tasklog.h"

#include <stdio.h>

void tasklog_name(char *buf, size_t len, int server, uint32_t index)
{
    snprintf(buf, len, "%s-%u", server ? "server" : "worker", index);
}
