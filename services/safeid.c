/* The rule for ids and names used in keys, paths and arguments. */
#include "services/safeid.h"

#include <string.h>

static int is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9');
}

int safeid_is_valid(const char *s, size_t n)
{
    if (s == NULL || n == 0 || n > SAFEID_MAX || !is_alnum(s[0]))
        return 0;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];

        if (!is_alnum(c) && c != '_' && c != '.' && c != '-')
            return 0;
        if (c == '.' && s[i - 1] == '.')
            return 0;
    }
    return 1;
}

int safeid_is_valid_str(const char *s)
{
    return s != NULL && safeid_is_valid(s, strnlen(s, SAFEID_MAX + 1));
}
