/* Messages as protocol version 2 wrote them (tests/support/msg_v2.h). */
#include "tests/support/msg_v2.h"

int msg_frames_as_version2(proto_frame *f, size_t nf, int sparse, int update,
                           const uint32_t *idx, uint32_t n, const uint32_t *rej,
                           uint32_t nrej)
{
    unsigned char *h = (unsigned char *)f[0].data;

    if (f[0].len < 4 || h[1] != 0xa1 || h[2] != 'v' || h[3] != 3)
        return 0;
    h[3] = 2;
    if (sparse) {
        f[1].data = n > 0 ? idx : NULL;
        f[1].len = (size_t)n * sizeof(uint32_t);
    }
    if (update) {
        f[nf - 1].data = nrej > 0 ? rej : NULL;
        f[nf - 1].len = (size_t)nrej * sizeof(uint32_t);
    }
    return 1;
}
