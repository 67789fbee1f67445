/* An echo server on the MegaPipe C ABI: accepts into lightweight handles, echoes every read,
 * closes on EOF. Prints "port N", exits after `max_conns` connections have closed.
 * Usage: echo [max_conns] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "megapipe.h"

int main(int argc, char **argv) {
    int max_conns = argc > 1 ? atoi(argv[1]) : 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 128) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        perror("listen");
        return 1;
    }
    mp_channel *ch = mp_create(NULL);
    mp_handle listener;
    if (!ch || mp_register(ch, fd, 0, 0, &listener) || mp_accept(ch, listener, 0, 1)) {
        fprintf(stderr, "megapipe setup failed\n");
        return 1;
    }
    printf("port %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    int closed = 0;
    struct mp_event ev;
    while (closed < max_conns) {
        int r = mp_dispatch(ch, 10000, &ev);
        if (r <= 0) {
            fprintf(stderr, "dispatch: %s\n", r ? strerror(-r) : "timeout");
            return 1;
        }
        switch (ev.command) {
        case MP_ACCEPT:
            mp_read(ch, ev.new_handle, 0);
            break;
        case MP_READ:
            if (ev.error || ev.bytes == 0) {
                mp_close(ch, ev.handle);
            } else {
                /* The read buffer is recycled at the next dispatch: copy, free on MP_WRITE. */
                void *copy = malloc(ev.bytes);
                memcpy(copy, ev.data, ev.bytes);
                mp_write(ch, ev.handle, copy, ev.bytes);
                mp_read(ch, ev.handle, 0);
            }
            break;
        case MP_WRITE:
            free((void *)ev.data);
            break;
        case MP_CLOSE:
            closed++;
            break;
        }
    }
    uint64_t st[11];
    mp_stats(ch, st);
    printf("closed %d handles_open %llu buffers_out %llu\n", closed, (unsigned long long)st[0],
           (unsigned long long)st[3]);
    mp_destroy(ch);
    return 0;
}
