/* event_check: read event lines on stdin and check each against the
 * schema (services/event_schema.h) as a writer must keep to it: a known
 * event, every required field, every field of its type, no unknown field.
 * One line per input line on stdout, "ok" or why not; exit 0 when every
 * line was ok, 1 otherwise. python/tests/test_events.py runs it on the
 * lines flps.report and flps.auto print, so the C table stays the one
 * statement of the format. */
#include <stdio.h>
#include <string.h>

#include "services/event.h"

int main(void)
{
    char line[1 << 16], why[512];
    int bad = 0;

    while (fgets(line, sizeof(line), stdin) != NULL) {
        size_t len = strcspn(line, "\n");
        event ev;

        if (event_read(line, len, EVENT_READ_STRICT, &ev, why, sizeof(why)) ==
            FLPS_OK) {
            puts("ok");
        } else {
            printf("%s\n", why);
            bad = 1;
        }
        event_fini(&ev);
    }
    return bad;
}
