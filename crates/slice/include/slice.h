/* slice.h: the C ABI of the Bessemer slice library (libbessemer_slice.so).
 *
 * A slice is one receive and one send queue shared with bessemerd's SlicePort. Frames live
 * in a shared packet area: received frames are read in place, frames to send are written
 * in place (no copy between the application and the slice). See docs/slices.md.
 *
 *   bslice *s = bslice_attach("/tmp/bessemer_slice_s0", 5000);
 *   bslice_desc d[32];
 *   if (bslice_wait(s, 50, 100) == 1) {
 *       uint32_t n = bslice_recv_batch(s, d, 32);
 *       ... bslice_frame(s, d[i]) points at d[i].len bytes ...
 *       bslice_release(s, d, n);
 *   }
 *   n = bslice_alloc_tx(s, d, 32);    fill bslice_frame(s, d[i]), set d[i].len
 *   sent = bslice_send_batch(s, d, n); bslice_free_tx(s, d + sent, n - sent);
 *   bslice_detach(s);
 *
 * A handle is used by one thread at a time.
 */
#ifndef BESSEMER_SLICE_H
#define BESSEMER_SLICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An attached slice (opaque). */
typedef struct bslice bslice;

/* One frame: byte offset in the packet area and packet length. */
typedef struct bslice_desc {
    uint32_t offset;
    uint32_t len;
} bslice_desc;

/* The application's own counters. */
typedef struct bslice_counters {
    uint64_t rx_packets;
    uint64_t rx_bytes;
    uint64_t tx_packets;
    uint64_t tx_bytes;
    uint64_t rx_invalid;
    uint64_t sleeps;
} bslice_stats;

/* Attaches to the SlicePort listening at `path` ('@name' = abstract socket), waiting up to
 * timeout_ms for the daemon's hello. NULL on failure: bslice_last_error() says why. */
bslice *bslice_attach(const char *path, uint32_t timeout_ms);
/* The last attach error on this thread ("" if none). */
const char *bslice_last_error(void);
/* Detaches: the daemon reclaims every frame the application held. */
void bslice_detach(bslice *s);

/* Receives up to n frames into out; returns how many. */
uint32_t bslice_recv_batch(bslice *s, bslice_desc *out, uint32_t n);
/* First byte of a frame (bslice_frame_size() bytes are writable). */
uint8_t *bslice_frame(bslice *s, bslice_desc d);
/* Gives received frames back to the daemon. */
void bslice_release(bslice *s, const bslice_desc *ds, uint32_t n);

/* Takes up to n empty send frames (len = frame size); returns how many. */
uint32_t bslice_alloc_tx(bslice *s, bslice_desc *out, uint32_t n);
/* Queues filled send frames; returns how many were queued (the rest remain yours). */
uint32_t bslice_send_batch(bslice *s, const bslice_desc *ds, uint32_t n);
/* Returns unsent send frames to the library's spare list. */
void bslice_free_tx(bslice *s, const bslice_desc *ds, uint32_t n);

/* Waits for a frame: busy-polls spin_us, then sleeps on the eventfd up to timeout_ms
 * (negative: forever). 1 = a frame is ready, 0 = timed out, -1 = the daemon left. */
int bslice_wait(bslice *s, uint32_t spin_us, int timeout_ms);
/* Frame size in bytes. */
uint32_t bslice_frame_size(const bslice *s);
/* Copies the application's counters into out. */
void bslice_counters(const bslice *s, bslice_stats *out);

#ifdef __cplusplus
}
#endif

#endif
