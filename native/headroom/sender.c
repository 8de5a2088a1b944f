/* A user-space stand-in for Linux pktgen (thesis §4.3): UDP datagrams of --size bytes sent in
 * bursts of --burst with sendmmsg, on --threads threads, for --duration seconds. --delay is
 * pktgen's "delay": the time allotted to one burst, measured from the burst's start (not a gap
 * between bursts). A burst that ends early waits out the rest: --wait spin busy-waits on the
 * clock, as pktgen's generator thread does, so the thread holds its core; --wait sleep sleeps,
 * so the process's CPU time (getrusage) shows how much of the core the sending really took.
 *
 * Prints one JSON object on stdout: packets attempted/accepted by the kernel, bytes, bursts, the
 * wall time, the per-burst send time (median and mean, the thesis's t_burst) and CPU time.
 * What arrives is counted by the receiver (receiver.c), not here.
 *
 * Sends are non-blocking (MSG_DONTWAIT): a full socket buffer or queue drops the rest of the
 * burst (counted in send_errors) instead of putting the thread to sleep, so time spent waiting
 * for a slow link is never mistaken for time spent sending. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_UDP_PAYLOAD 65507  /* 65535 - 20 (IPv4 header) - 8 (UDP header) */
#define VLEN 1024              /* the kernel's UIO_MAXIOV: most messages one sendmmsg takes */
#define MAX_SAMPLES (1 << 19)  /* per-thread burst-time samples kept for the median */

static struct {
    struct sockaddr_in dest;
    long size, burst, threads;
    uint64_t delay_ns, t0, end;
    int spin;
} cfg;

struct worker {
    pthread_t tid;
    uint64_t attempted, sent, errors, bursts, send_ns, cpu_ns, last_ns, nsamples;
    uint64_t *samples;
    int err;  /* errno of a fatal error, 0 if none */
};

static uint64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void wait_until(uint64_t t) {
    if (cfg.spin) {
        while (now_ns(CLOCK_MONOTONIC) < t)
            ;  /* pktgen's spin(): the core stays busy, the time is free for other work */
    } else {
        struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
}

static void *run(void *arg) {
    struct worker *w = arg;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&cfg.dest, sizeof cfg.dest) < 0) {
        w->err = errno;
        return NULL;
    }
    int sndbuf = 4 << 20;  /* room for a burst of large datagrams; root may exceed wmem_max */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    /* One payload buffer for every datagram (pktgen clone_skb's spirit: no per-packet user
     * allocation); the kernel still builds an skb per datagram. */
    char *payload = malloc((size_t)cfg.size);
    struct iovec iov = {.iov_base = payload, .iov_len = (size_t)cfg.size};
    size_t vlen = cfg.burst < VLEN ? (size_t)cfg.burst : VLEN;
    struct mmsghdr *msgs = calloc(vlen, sizeof *msgs);
    if (!payload || !msgs) {
        w->err = ENOMEM;
        return NULL;
    }
    memset(payload, 0x5a, (size_t)cfg.size);
    for (size_t i = 0; i < vlen; i++) {
        msgs[i].msg_hdr.msg_iov = &iov;
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    wait_until(cfg.t0);
    uint64_t cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID), start;
    while ((start = now_ns(CLOCK_MONOTONIC)) < cfg.end) {
        long left = cfg.burst;
        while (left > 0) {
            int n = sendmmsg(fd, msgs, (unsigned)(left < (long)vlen ? left : (long)vlen), MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EAGAIN || errno == ENOBUFS || errno == ECONNREFUSED || errno == EINTR) {
                    w->errors += (uint64_t)left;  /* queue full or nobody listening: drop the rest */
                    break;
                }
                w->err = errno;
                goto out;
            }
            w->sent += (uint64_t)n;
            left -= n;
        }
        uint64_t done = now_ns(CLOCK_MONOTONIC);
        w->attempted += (uint64_t)cfg.burst;
        w->send_ns += done - start;
        if (w->nsamples < MAX_SAMPLES)
            w->samples[w->nsamples++] = done - start;
        w->bursts++;
        if (cfg.delay_ns) {
            uint64_t next = start + cfg.delay_ns;
            wait_until(next < cfg.end ? next : cfg.end);
        }
    }
out:
    w->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    w->last_ns = now_ns(CLOCK_MONOTONIC);
    close(fd);
    free(msgs);
    free(payload);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static long parse_long(const char *name, const char *v, long lo, long hi, const char *fix) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "sender: --%s %s is out of range: %s\n", name, v, fix);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    const char *dest = "127.0.0.1", *wait = "spin";
    long port = 0, delay = 0;
    double duration = 1.0;
    cfg.size = 1472, cfg.burst = 1, cfg.threads = 1;
    static const struct option opts[] = {
        {"dest", 1, 0, 'd'}, {"port", 1, 0, 'p'}, {"size", 1, 0, 's'}, {"burst", 1, 0, 'b'}, {"delay", 1, 0, 'D'},
        {"threads", 1, 0, 't'}, {"duration", 1, 0, 'T'}, {"wait", 1, 0, 'w'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': dest = optarg; break;
        case 'p': port = parse_long("port", optarg, 1, 65535, "give the receiver's UDP port, 1-65535"); break;
        case 's': cfg.size = parse_long("size", optarg, 1, MAX_UDP_PAYLOAD, "a UDP payload is 1 to 65507 bytes"); break;
        case 'b': cfg.burst = parse_long("burst", optarg, 1, 1000000, "packets per burst, 1 to 1000000"); break;
        case 'D': delay = parse_long("delay", optarg, 0, 10000000000L, "nanoseconds per burst, 0 to 10 s"); break;
        case 't': cfg.threads = parse_long("threads", optarg, 1, 256, "sender threads, 1 to 256"); break;
        case 'T': {
            char *end;
            duration = strtod(optarg, &end);
            if (*end || !(duration >= 0.01 && duration <= 3600)) {
                fprintf(stderr, "sender: --duration %s: give seconds between 0.01 and 3600\n", optarg);
                return 2;
            }
            break;
        }
        case 'w': wait = optarg; break;
        default:
            fprintf(stderr, "usage: sender --dest IP --port N [--size B] [--burst N] [--delay NS] [--threads N] "
                            "[--duration S] [--wait spin|sleep]\n");
            return 2;
        }
    }
    if (!port) {
        fprintf(stderr, "sender: --port is required (the receiver's UDP port)\n");
        return 2;
    }
    if (strcmp(wait, "spin") && strcmp(wait, "sleep")) {
        fprintf(stderr, "sender: --wait %s: choose spin (pktgen's busy wait) or sleep\n", wait);
        return 2;
    }
    cfg.spin = !strcmp(wait, "spin");
    cfg.delay_ns = (uint64_t)delay;
    cfg.dest.sin_family = AF_INET;
    cfg.dest.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, dest, &cfg.dest.sin_addr) != 1) {
        fprintf(stderr, "sender: --dest %s is not an IPv4 address\n", dest);
        return 2;
    }
    prctl(PR_SET_TIMERSLACK, 1UL);  /* --wait sleep: wake on time, not up to 50 us late */

    struct worker *ws = calloc((size_t)cfg.threads, sizeof *ws);
    if (!ws)
        return 1;
    /* Every thread starts at the same instant, a little after all of them exist. */
    cfg.t0 = now_ns(CLOCK_MONOTONIC) + 5000000ull;
    cfg.end = cfg.t0 + (uint64_t)(duration * 1e9);
    for (long i = 0; i < cfg.threads; i++) {
        ws[i].samples = malloc(MAX_SAMPLES * sizeof(uint64_t));
        if (!ws[i].samples || pthread_create(&ws[i].tid, NULL, run, &ws[i])) {
            fprintf(stderr, "sender: cannot start thread %ld\n", i);
            return 1;
        }
    }
    uint64_t attempted = 0, sent = 0, errors = 0, bursts = 0, send_ns = 0, cpu_ns = 0, last = cfg.t0, n = 0;
    for (long i = 0; i < cfg.threads; i++) {
        pthread_join(ws[i].tid, NULL);
        if (ws[i].err) {
            fprintf(stderr, "sender: thread %ld failed: %s\n", i, strerror(ws[i].err));
            return 1;
        }
        attempted += ws[i].attempted, sent += ws[i].sent, errors += ws[i].errors, bursts += ws[i].bursts;
        send_ns += ws[i].send_ns, cpu_ns += ws[i].cpu_ns, n += ws[i].nsamples;
        if (ws[i].last_ns > last)
            last = ws[i].last_ns;
    }
    uint64_t *all = malloc((n ? n : 1) * sizeof(uint64_t)), k = 0;
    for (long i = 0; i < cfg.threads; i++)
        for (uint64_t j = 0; j < ws[i].nsamples; j++)
            all[k++] = ws[i].samples[j];
    qsort(all, n, sizeof *all, cmp_u64);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("{\"size\": %ld, \"burst\": %ld, \"delay_ns\": %ld, \"threads\": %ld, \"wait\": \"%s\", "
           "\"duration_s\": %.6f, \"wall_s\": %.6f, \"bursts\": %llu, \"attempted_packets\": %llu, "
           "\"sent_packets\": %llu, \"sent_bytes\": %llu, \"send_errors\": %llu, "
           "\"t_burst_median_ns\": %llu, \"t_burst_p90_ns\": %llu, \"t_burst_mean_ns\": %.1f, "
           "\"thread_cpu_s\": %.6f, \"cpu_user_s\": %.6f, \"cpu_sys_s\": %.6f}\n",
           cfg.size, cfg.burst, delay, cfg.threads, wait, duration, (last - cfg.t0) / 1e9,
           (unsigned long long)bursts, (unsigned long long)attempted, (unsigned long long)sent,
           (unsigned long long)(sent * (uint64_t)cfg.size), (unsigned long long)errors,
           (unsigned long long)(n ? all[n / 2] : 0), (unsigned long long)(n ? all[n * 9 / 10] : 0),
           bursts ? (double)send_ns / (double)bursts : 0.0, cpu_ns / 1e9, user, sys);
    return 0;
}
