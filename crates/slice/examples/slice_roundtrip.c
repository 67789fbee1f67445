/* slice_roundtrip: sends N frames on a slice and expects each back with its Ethernet
 * addresses swapped (the daemon runs PortInc -> MACSwap -> PortOut). Prints "ok N ...";
 * same=K counts the frames that came back in the very frame they were sent from (the
 * daemon passed them through its pipeline without a copy).
 *   cc -I crates/slice/include slice_roundtrip.c -L target/debug -lbessemer_slice
 *   ./a.out /tmp/bessemer_slice_s0 1000 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "slice.h"

static void fill(uint8_t *f, uint32_t i, uint32_t size) {
    for (uint32_t j = 0; j < size; j++) f[j] = (uint8_t)(i * 31 + j);
    const uint8_t hdr[12] = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2};
    memcpy(f, hdr, 12);
    f[12] = 0x08; f[13] = 0x00;
    f[14] = i >> 24; f[15] = i >> 16; f[16] = i >> 8; f[17] = i;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s PATH N\n", argv[0]); return 2; }
    uint32_t n = (uint32_t)atoi(argv[2]), size = 60, sent = 0, got = 0;
    bslice *s = bslice_attach(argv[1], 5000);
    if (!s) { fprintf(stderr, "attach: %s\n", bslice_last_error()); return 1; }
    uint8_t want[64], tmp[64];
    bslice_desc d[32];
    uint32_t *sent_at = calloc(n ? n : 1, sizeof *sent_at), same = 0;
    if (!sent_at) { fprintf(stderr, "out of memory\n"); return 1; }
    time_t start = time(NULL);
    while (got < n) {
        if (time(NULL) - start > 20) { fprintf(stderr, "timed out at %u\n", got); return 1; }
        if (sent < n) {
            uint32_t k = n - sent < 32 ? n - sent : 32;
            k = bslice_alloc_tx(s, d, k);
            for (uint32_t i = 0; i < k; i++) { fill(bslice_frame(s, d[i]), sent + i, size); d[i].len = size; }
            uint32_t q = bslice_send_batch(s, d, k);
            for (uint32_t i = 0; i < q; i++) sent_at[sent + i] = d[i].offset;
            bslice_free_tx(s, d + q, k - q);
            sent += q;
        }
        if (bslice_wait(s, 50, 10) < 0) { fprintf(stderr, "daemon left\n"); return 1; }
        uint32_t r = bslice_recv_batch(s, d, 32);
        for (uint32_t i = 0; i < r; i++, got++) {
            fill(tmp, got, size);
            memcpy(want, tmp + 6, 6); memcpy(want + 6, tmp, 6); memcpy(want + 12, tmp + 12, size - 12);
            if (d[i].len != size || memcmp(bslice_frame(s, d[i]), want, size) != 0) {
                fprintf(stderr, "frame %u came back wrong\n", got); return 1;
            }
            if (d[i].offset == sent_at[got]) same++;
        }
        bslice_release(s, d, r);
    }
    bslice_stats c;
    bslice_counters(s, &c);
    printf("ok %u rx=%llu tx=%llu same=%u\n", n, (unsigned long long)c.rx_packets,
           (unsigned long long)c.tx_packets, same);
    free(sent_at);
    bslice_detach(s);
    return 0;
}
