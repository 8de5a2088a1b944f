/* The far end of the headroom rig (econ/headroom.py): counts the UDP datagrams that arrive, so
 * throughput is what was delivered, not what the sender attempted. It copies every datagram
 * into user space, as a real consumer would.
 *
 * Prints {"port": N, "rcvbuf": B} once it is listening, then counts until its stdin closes
 * (the caller is done, or died), drains what is already queued and prints
 * {"packets": N, "bytes": N, "cpu_s": S}. --max-seconds bounds its life in any case. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define VLEN 64
#define SLOT 65536  /* the largest UDP payload fits */

static uint64_t packets, bytes;
static struct mmsghdr msgs[VLEN];

/* Receive everything queued now; returns 0 when the socket is empty, -1 on a real error. */
static int drain(int fd) {
    for (;;) {
        int n = recvmmsg(fd, msgs, VLEN, MSG_DONTWAIT, NULL);
        if (n < 0)
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        for (int i = 0; i < n; i++)
            bytes += msgs[i].msg_len;
        packets += (uint64_t)n;
    }
}

int main(int argc, char **argv) {
    const char *bind_ip = "127.0.0.1";
    long port = 0, rcvbuf = 64L << 20;
    double max_s = 600;
    static const struct option opts[] = {
        {"bind", 1, 0, 'b'}, {"port", 1, 0, 'p'}, {"rcvbuf", 1, 0, 'r'}, {"max-seconds", 1, 0, 'm'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'b': bind_ip = optarg; break;
        case 'p': port = atol(optarg); break;
        case 'r': rcvbuf = atol(optarg); break;
        case 'm': max_s = atof(optarg); break;
        default:
            fprintf(stderr, "usage: receiver [--bind IP] [--port N] [--rcvbuf BYTES] [--max-seconds S]\n");
            return 2;
        }
    }
    if (port < 0 || port > 65535 || rcvbuf < 4096 || rcvbuf > (1L << 30) || !(max_s > 0)) {
        fprintf(stderr, "receiver: --port 0-65535, --rcvbuf 4096 B-1 GiB, --max-seconds > 0\n");
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (fd < 0 || inet_pton(AF_INET, bind_ip, &addr.sin_addr) != 1) {
        fprintf(stderr, "receiver: cannot open a UDP socket on %s: %s\n", bind_ip, strerror(errno));
        return 1;
    }
    int rb = (int)rcvbuf;  /* a deep queue: bursts must not be lost to a momentarily busy receiver */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rb, sizeof rb) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rb, sizeof rb);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        fprintf(stderr, "receiver: cannot bind %s:%ld: %s\n", bind_ip, port, strerror(errno));
        return 1;
    }
    socklen_t len = sizeof addr;
    getsockname(fd, (struct sockaddr *)&addr, &len);
    socklen_t olen = sizeof rb;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rb, &olen);
    static char slots[VLEN][SLOT];
    static struct iovec iov[VLEN];
    for (int i = 0; i < VLEN; i++) {
        iov[i] = (struct iovec){.iov_base = slots[i], .iov_len = SLOT};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    printf("{\"port\": %u, \"rcvbuf\": %d}\n", ntohs(addr.sin_port), rb);
    fflush(stdout);

    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = STDIN_FILENO, .events = POLLIN}};
    for (;;) {
        if (poll(pfd, 2, 100) < 0 && errno != EINTR)
            break;
        if ((pfd[0].revents & POLLIN) && drain(fd) < 0) {
            fprintf(stderr, "receiver: recvmmsg: %s\n", strerror(errno));
            return 1;
        }
        if (pfd[1].revents) {
            char b[64];
            if (read(STDIN_FILENO, b, sizeof b) <= 0)
                break;  /* stdin closed: the run is over */
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 > max_s)
            break;
    }
    drain(fd);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"packets\": %llu, \"bytes\": %llu, \"cpu_s\": %.6f}\n", (unsigned long long)packets,
           (unsigned long long)bytes,
           ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
    return 0;
}
