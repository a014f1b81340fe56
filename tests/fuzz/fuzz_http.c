/* libFuzzer target: libflps's HTTP request parsing (common/minihttp.h), what
 * its metrics endpoint runs on the bytes any peer sends. What must hold:
 * the end of a head is within the input and just past an empty line; an
 * accepted request line has a method of 1..15 upper-case letters and a
 * path that starts with '/' and holds no query, space or control
 * character, both terminated, and one-digit versions; a refusal leaves
 * the output as it was; an answer's head always fits its buffer or says
 * it does not. */
#include <stdint.h>
#include <string.h>

#include "common/minihttp.h"
#include "tests/fuzz/fuzz_target.h"

static void check_request(const minihttp_request *r)
{
    size_t m = strnlen(r->method, sizeof(r->method));
    size_t p = strnlen(r->path, sizeof(r->path));

    fuzz_require(m > 0 && m < sizeof(r->method), "a method of a bad length");
    for (size_t i = 0; i < m; i++)
        fuzz_require(r->method[i] >= 'A' && r->method[i] <= 'Z',
                     "a method that is not upper-case letters");
    fuzz_require(p > 0 && p < sizeof(r->path), "a path of a bad length");
    fuzz_require(r->path[0] == '/', "a path that does not start with /");
    for (size_t i = 0; i < p; i++)
        fuzz_require((unsigned char)r->path[i] > 0x20 && r->path[i] != 0x7f &&
                         r->path[i] != '?',
                     "a path with a space, a control character or a query");
    fuzz_require(r->major >= 0 && r->major <= 9 && r->minor >= 0 &&
                     r->minor <= 9,
                 "a version that is not one digit each");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t end = minihttp_head_end(text, size);
    minihttp_request r, before;
    char head[256];
    flps_err rc;

    fuzz_require(end <= size, "a head that ends past the input");
    if (end > 0)
        fuzz_require(
            text[end - 1] == '\n' &&
                (text[end - 2] == '\n' ||
                 (end >= 3 && text[end - 2] == '\r' && text[end - 3] == '\n')),
            "a head that does not end with an empty line");
    memset(&r, 0x5a, sizeof(r));
    before = r;
    rc = minihttp_parse(text, end > 0 ? end : size, &r);
    if (rc == FLPS_OK)
        check_request(&r);
    else
        fuzz_require((rc == FLPS_EPROTO || rc == FLPS_ERANGE) &&
                         memcmp(&r, &before, sizeof(r)) == 0,
                     "a refusal that is not EPROTO or ERANGE, or wrote out");
    if (size >= 4) {
        int status = 100 + (int)(data[0] % 500);
        size_t n = minihttp_format_head(head, (size_t)data[1] % sizeof(head),
                                        status, "text/plain", size);

        fuzz_require(n == 0 || n == strlen(head), "a head of a wrong length");
    }
    return 0;
}
