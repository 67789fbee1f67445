/* megapipe.h - C ABI of the MegaPipe channel library (crates/megapipe, libmegapipe.so).
 *
 * One channel per thread, used only by the thread that created it. Every call except
 * mp_create/mp_destroy/mp_dispatch/mp_to_fd returns 0 or a negative errno. Requests are queued
 * and flushed to the kernel in batches (threshold, mp_flush, or when mp_dispatch runs dry).
 * See docs/megapipe.md for the semantics. */
#ifndef MEGAPIPE_H
#define MEGAPIPE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_channel mp_channel;
typedef uint64_t mp_handle;

enum mp_command {
    MP_ACCEPT = 1,     /* new_handle holds the accepted connection (cookie 0) */
    MP_READ = 2,       /* bytes received into data; 0 bytes: peer closed */
    MP_WRITE = 3,      /* all bytes sent, or fewer if the connection broke */
    MP_WRITEV = 4,
    MP_DISCONNECT = 5, /* sending side shut down */
    MP_CLOSE = 6,      /* handle freed; its last event */
    MP_CONNECT = 7,
};

struct mp_config {
    int32_t cpu;              /* pin the calling thread to this CPU; -1: unpinned */
    uint32_t batch_threshold; /* 0: 32 */
    uint32_t buffers;         /* receive buffers (power of two); 0: 1024 */
    uint32_t buffer_size;     /* bytes per buffer, the largest read; 0: 4096 */
};

struct mp_event {
    uint32_t command;     /* enum mp_command */
    int32_t error;        /* 0, or the errno of the failure */
    mp_handle handle;
    uint64_t cookie;
    uint64_t bytes;
    mp_handle new_handle; /* MP_ACCEPT */
    const uint8_t *data;  /* MP_READ: bytes, valid until the next mp_dispatch;
                             MP_WRITE/MP_WRITEV: the buffer written (first iovec), to free */
};

/* Channel life. NULL cfg: defaults. Returns NULL on failure (errno not set). */
mp_channel *mp_create(const struct mp_config *cfg);
void mp_destroy(mp_channel *ch);

/* Handles. The channel owns fd from here on. A listening fd with a non-zero cpu_mask
 * (including this channel's cpu) gets a partitioned SO_REUSEPORT listener steered to the
 * channel's cpu with SO_INCOMING_CPU; the fd itself must have SO_REUSEPORT set. */
int mp_register(mp_channel *ch, int fd, uint64_t cookie, uint64_t cpu_mask, mp_handle *out);
/* Cancels the handle's requests (no more events); *fd_out gets a regular fd back, -1 if the
 * handle was lightweight (then it is closed). */
int mp_unregister(mp_channel *ch, mp_handle h, int *fd_out);
int mp_set_cookie(mp_channel *ch, mp_handle h, uint64_t cookie);
/* Lightweight handle to regular fd (still owned by the channel); returns fd or -errno. */
int mp_to_fd(mp_channel *ch, mp_handle h);

/* Requests. count 0: keep accepting (re-armed by the channel after every end, 20 ms after an
 * error such as EMFILE; regular fds while the direct-descriptor table is full; a failed
 * accept is an MP_ACCEPT event with the error). size 0: a whole receive buffer. Buffers given
 * to mp_write/mp_writev must stay valid until their completion event. */
int mp_accept(mp_channel *ch, mp_handle listener, uint32_t count, int lightweight);
int mp_read(mp_channel *ch, mp_handle h, size_t size);
/* Beyond the seeds: one read that stays armed, an MP_READ per arrival, until EOF (0 bytes),
 * an error, or mp_stop_reading (ECANCELED). */
int mp_read_multishot(mp_channel *ch, mp_handle h);
int mp_stop_reading(mp_channel *ch, mp_handle h);
int mp_write(mp_channel *ch, mp_handle h, const void *buf, size_t len);
int mp_writev(mp_channel *ch, mp_handle h, const struct iovec *iov, int iovcnt);
int mp_disconnect(mp_channel *ch, mp_handle h);
int mp_close(mp_channel *ch, mp_handle h);
int mp_connect(mp_channel *ch, const struct sockaddr *addr, socklen_t len, uint64_t cookie,
               mp_handle *out);
int mp_flush(mp_channel *ch);

/* 1: *ev filled; 0: timeout_ms passed (-1 waits forever); <0: -errno. */
int mp_dispatch(mp_channel *ch, int timeout_ms, struct mp_event *ev);

/* Counters: handles_open, lightweight_open, ops_in_flight, buffers_out, syscalls, sqes, cqes,
 * events, accepted, cancelled, reads_without_buffer (the accept counters of the Rust Stats
 * are not in the C ABI). */
int mp_stats(mp_channel *ch, uint64_t out[11]);

#ifdef __cplusplus
}
#endif
#endif
