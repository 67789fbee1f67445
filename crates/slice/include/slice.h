/* slice.h: the C ABI of the Bessemer slice library (libbessemer_slice.so).
 *
 * A slice is one receive and one send queue shared with bessemerd's SlicePort. Frames live
 * in a shared packet area: received frames are read in place, frames to send are written
 * in place (no copy between the application and the slice). The daemon takes a sent frame
 * into its pipeline in place too, and a packet the pipeline sends back to this slice
 * arrives in the very frame it was sent in, at the offset where its data now starts (zero
 * copy both ways; packets from other ports are copied once, into the daemon's copy frames).
 * Protocol version 2 (a library of version 1 refuses a version-2 daemon, and vice versa).
 * See docs/slices.md.
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

/* One packet: byte offset of its first byte in the packet area and its length. It lies in
 * one frame, not necessarily at the frame's start. */
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
/* First byte of the packet d names; writable up to its frame's end (for a frame from
 * bslice_alloc_tx, d.len bytes: at least 2048). */
uint8_t *bslice_frame(bslice *s, bslice_desc d);
/* Gives received frames back to the daemon (with the offsets they were received with). */
void bslice_release(bslice *s, const bslice_desc *ds, uint32_t n);

/* Takes up to n empty send frames; returns how many. Each starts 256 bytes into its frame
 * (headroom for headers the pipeline may prepend) with len = the room to the frame's end
 * (3840). A packet may also start elsewhere in its frame on a multiple of 64 bytes, e.g.
 * at the frame's start (offset - offset % bslice_frame_size()) for up to a whole frame. */
uint32_t bslice_alloc_tx(bslice *s, bslice_desc *out, uint32_t n);
/* Queues filled send frames; returns how many were queued (the rest remain yours). */
uint32_t bslice_send_batch(bslice *s, const bslice_desc *ds, uint32_t n);
/* Returns unsent send frames to the library's spare list. */
void bslice_free_tx(bslice *s, const bslice_desc *ds, uint32_t n);

/* Waits for a frame: busy-polls spin_us, then sleeps on the eventfd up to timeout_ms
 * (negative: forever). 1 = a frame is ready, 0 = timed out, -1 = the daemon left. */
int bslice_wait(bslice *s, uint32_t spin_us, int timeout_ms);
/* Frame size in bytes (4096: headroom and packet). */
uint32_t bslice_frame_size(const bslice *s);
/* Copies the application's counters into out. */
void bslice_counters(const bslice *s, bslice_stats *out);

#ifdef __cplusplus
}
#endif

#endif
