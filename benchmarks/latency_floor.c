/*
 * latency_floor: the least a Kafka broker must do for a producer, as a native baseline.
 *
 * A single-threaded epoll server speaking only what librdkafka's producer needs:
 * ApiVersions (v0-v3), Metadata (v1: one broker, every requested topic with one
 * partition led by it) and Produce (v3-v8: record batches appended as-is to one file,
 * per-partition offsets advanced by the batches' lastOffsetDelta + 1). Any other API
 * closes the connection, as does a malformed frame. Fetch v4 is listed in ApiVersions
 * (see `supported`) but not served.
 *
 * Per read(): every complete frame is handled, then all answers go out in one write();
 * a short write arms EPOLLOUT and pauses reading that connection until it drains.
 *
 * usage: latency_floor PORT_OR_0 DATA_FILE
 * Binds 127.0.0.1, prints the bound port as one line on stdout, serves until
 * SIGTERM/SIGINT, then exits 0.
 *
 * Build: gcc -O2 -Wall -Wextra -o latency_floor latency_floor.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FRAME (100 * 1024 * 1024)
#define IN_INITIAL (128 * 1024)
#define MAX_PARTITIONS 64
#define MAX_TOPIC_NAME 255
#define BATCH_HEADER 61 /* v2 record batch header through the records count */

#define API_PRODUCE 0
#define API_FETCH 1
#define API_METADATA 3
#define API_VERSIONS 18

#define ERR_UNKNOWN_SERVER -1
#define ERR_NONE 0
#define ERR_CORRUPT_MESSAGE 2
#define ERR_INVALID_TOPIC 17
#define ERR_UNSUPPORTED_VERSION 35
#define ERR_STORAGE 56

static volatile sig_atomic_t stopping;
static int data_fd = -1;
static int listen_port;

/* ---- per-(topic, partition) next offsets ---------------------------------------- */

struct partition {
    char topic[MAX_TOPIC_NAME + 1];
    size_t topic_len;
    int32_t index;
    int64_t next_offset;
};

static struct partition partitions[MAX_PARTITIONS];
static int partition_count;
static int table_full_reported;

static struct partition *find_partition(const uint8_t *name, size_t len, int32_t index)
{
    for (int i = 0; i < partition_count; i++) {
        struct partition *p = &partitions[i];
        if (p->index == index && p->topic_len == len && memcmp(p->topic, name, len) == 0)
            return p;
    }
    if (partition_count == MAX_PARTITIONS) {
        if (!table_full_reported) {
            fprintf(stderr,
                    "latency_floor: more than %d partitions produced to; "
                    "answering UNKNOWN_SERVER_ERROR for new ones\n",
                    MAX_PARTITIONS);
            table_full_reported = 1;
        }
        return NULL;
    }
    struct partition *p = &partitions[partition_count++];
    memcpy(p->topic, name, len);
    p->topic[len] = '\0';
    p->topic_len = len;
    p->index = index;
    p->next_offset = 0;
    return p;
}

/* ---- big-endian reading with bounds checks --------------------------------------- */

struct reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int bad; /* set on any read past the end or invalid value; reads then return 0 */
};

static int need(struct reader *r, size_t n)
{
    if (r->bad || r->len - r->pos < n) {
        r->bad = 1;
        return 0;
    }
    return 1;
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)((uint16_t)p[0] << 8 | p[1]); }

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int16_t rd_i16(struct reader *r)
{
    if (!need(r, 2))
        return 0;
    int16_t v = (int16_t)be16(r->p + r->pos);
    r->pos += 2;
    return v;
}

static int32_t rd_i32(struct reader *r)
{
    if (!need(r, 4))
        return 0;
    int32_t v = (int32_t)be32(r->p + r->pos);
    r->pos += 4;
    return v;
}

/* The ``n`` bytes after a length just read; *out is NULL and the result -1 for null (-1). */
static int rd_sized(struct reader *r, int32_t n, const uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (r->bad)
        return -1;
    if (n < 0) {
        if (n != -1)
            r->bad = 1;
        return -1;
    }
    if (!need(r, (size_t)n))
        return -1;
    *out = r->p + r->pos;
    *len = (size_t)n;
    r->pos += (size_t)n;
    return 0;
}

/* int16-length string. */
static int rd_string(struct reader *r, const uint8_t **out, size_t *len)
{
    return rd_sized(r, rd_i16(r), out, len);
}

/* int32-length bytes. */
static int rd_bytes(struct reader *r, const uint8_t **out, size_t *len)
{
    return rd_sized(r, rd_i32(r), out, len);
}

static uint32_t rd_uvarint(struct reader *r)
{
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (!need(r, 1))
            return 0;
        uint8_t b = r->p[r->pos++];
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = 1;
    return 0;
}

static void skip_tagged_fields(struct reader *r)
{
    uint32_t count = rd_uvarint(r);
    for (uint32_t i = 0; i < count && !r->bad; i++) {
        rd_uvarint(r); /* tag */
        uint32_t size = rd_uvarint(r);
        if (need(r, size))
            r->pos += size;
    }
}

/* ---- output buffer with big-endian writing --------------------------------------- */

struct buf {
    uint8_t *p;
    size_t len;
    size_t off; /* bytes already written to the socket */
    size_t cap;
};

static void reserve(struct buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n)
        cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        fprintf(stderr, "latency_floor: out of memory\n");
        exit(1);
    }
    b->p = p;
    b->cap = cap;
}

static void put_i8(struct buf *b, int8_t v)
{
    reserve(b, 1);
    b->p[b->len++] = (uint8_t)v;
}

static void put_i16(struct buf *b, int16_t v)
{
    reserve(b, 2);
    uint16_t u = (uint16_t)v;
    b->p[b->len++] = (uint8_t)(u >> 8);
    b->p[b->len++] = (uint8_t)u;
}

static void set_i32(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)(u >> 24);
    p[1] = (uint8_t)(u >> 16);
    p[2] = (uint8_t)(u >> 8);
    p[3] = (uint8_t)u;
}

static void put_i32(struct buf *b, int32_t v)
{
    reserve(b, 4);
    set_i32(b->p + b->len, v);
    b->len += 4;
}

static void put_i64(struct buf *b, int64_t v)
{
    put_i32(b, (int32_t)(uint32_t)((uint64_t)v >> 32));
    put_i32(b, (int32_t)(uint32_t)(uint64_t)v);
}

static void put_uvarint(struct buf *b, uint32_t v)
{
    while (v >= 0x80) {
        put_i8(b, (int8_t)(uint8_t)(v | 0x80));
        v >>= 7;
    }
    put_i8(b, (int8_t)(uint8_t)v);
}

static void put_string(struct buf *b, const uint8_t *s, size_t len)
{
    put_i16(b, (int16_t)len);
    reserve(b, len);
    memcpy(b->p + b->len, s, len);
    b->len += len;
}

/* ---- connections ------------------------------------------------------------------ */

struct conn {
    int fd;
    int want_out; /* EPOLLOUT armed (reading paused) */
    uint8_t *in;
    size_t in_len;
    size_t in_cap;
    struct buf out;
};

static int epfd;

static void conn_close(struct conn *c)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out.p);
    free(c);
}

static int set_events(struct conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    return epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* ---- API handlers: each appends one whole response frame, or returns -1 --------- */

/* Fetch is advertised, never served (a Fetch request closes the connection): librdkafka
 * enables v2 record batches (its MsgVer2 feature) only if the broker lists Produce v3 and
 * Fetch v4; without Fetch it would produce legacy v0 message sets. */
static const struct {
    int16_t key, min, max;
} supported[] = {
    {API_PRODUCE, 3, 8},
    {API_FETCH, 4, 4},
    {API_METADATA, 1, 1},
    {API_VERSIONS, 0, 3},
};
#define N_SUPPORTED ((int)(sizeof supported / sizeof supported[0]))

static void api_versions(struct buf *o, int16_t version)
{
    if (version > 3) { /* v0 layout, UNSUPPORTED_VERSION, and the list */
        put_i16(o, ERR_UNSUPPORTED_VERSION);
        put_i32(o, N_SUPPORTED);
        for (int i = 0; i < N_SUPPORTED; i++) {
            put_i16(o, supported[i].key);
            put_i16(o, supported[i].min);
            put_i16(o, supported[i].max);
        }
        return;
    }
    put_i16(o, ERR_NONE);
    if (version >= 3)
        put_uvarint(o, N_SUPPORTED + 1);
    else
        put_i32(o, N_SUPPORTED);
    for (int i = 0; i < N_SUPPORTED; i++) {
        put_i16(o, supported[i].key);
        put_i16(o, supported[i].min);
        put_i16(o, supported[i].max);
        if (version >= 3)
            put_uvarint(o, 0); /* entry's tagged fields */
    }
    if (version >= 1)
        put_i32(o, 0); /* throttle_time_ms */
    if (version >= 3)
        put_uvarint(o, 0); /* body's tagged fields */
}

static int metadata_v1(struct reader *r, struct buf *o)
{
    static const uint8_t host[] = "127.0.0.1";
    put_i32(o, 1); /* brokers */
    put_i32(o, 0); /* node_id */
    put_string(o, host, sizeof host - 1);
    put_i32(o, listen_port);
    put_i16(o, -1); /* rack: null */
    put_i32(o, 0);  /* controller_id */

    int32_t n = rd_i32(r);
    if (r->bad || n < -1)
        return -1;
    if (n < 0)
        n = 0; /* null: "all topics" -- we know none */
    put_i32(o, n);
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *name;
        size_t len;
        if (rd_string(r, &name, &len) < 0)
            return -1;
        put_i16(o, ERR_NONE);
        put_string(o, name, len);
        put_i8(o, 0);  /* is_internal */
        put_i32(o, 1); /* partitions */
        put_i16(o, ERR_NONE);
        put_i32(o, 0); /* partition_index */
        put_i32(o, 0); /* leader_id */
        put_i32(o, 1); /* replica_nodes */
        put_i32(o, 0);
        put_i32(o, 1); /* isr_nodes */
        put_i32(o, 0);
    }
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Validates the v2 batches of one partition's records; returns their offset count or -1. */
static int64_t batches_offset_count(const uint8_t *p, size_t len)
{
    int64_t count = 0;
    size_t pos = 0;
    if (len == 0)
        return -1;
    while (pos < len) {
        if (len - pos < BATCH_HEADER)
            return -1;
        int32_t batch_length = (int32_t)be32(p + pos + 8);
        if (batch_length < BATCH_HEADER - 12 || (size_t)batch_length > len - pos - 12)
            return -1;
        if (p[pos + 16] != 2) /* magic */
            return -1;
        int32_t last_offset_delta = (int32_t)be32(p + pos + 23);
        if (last_offset_delta < 0)
            return -1;
        count += (int64_t)last_offset_delta + 1;
        pos += (size_t)batch_length + 12;
    }
    return count;
}

static int produce(struct reader *r, struct buf *o, int16_t version, size_t frame_start)
{
    const uint8_t *s;
    size_t slen;
    rd_string(r, &s, &slen); /* transactional_id */
    int16_t acks = rd_i16(r);
    rd_i32(r); /* timeout_ms */
    int32_t topics = rd_i32(r);
    if (r->bad || topics < 0)
        return -1;
    put_i32(o, topics);
    for (int32_t t = 0; t < topics; t++) {
        const uint8_t *name;
        size_t name_len;
        if (rd_string(r, &name, &name_len) < 0)
            return -1;
        put_string(o, name, name_len);
        int32_t parts = rd_i32(r);
        if (r->bad || parts < 0)
            return -1;
        put_i32(o, parts);
        for (int32_t i = 0; i < parts; i++) {
            int32_t index = rd_i32(r);
            const uint8_t *records;
            size_t records_len;
            rd_bytes(r, &records, &records_len);
            if (r->bad)
                return -1;
            int16_t error = ERR_NONE;
            int64_t base_offset = -1;
            int64_t count = records ? batches_offset_count(records, records_len) : -1;
            struct partition *p = NULL;
            if (name_len == 0 || name_len > MAX_TOPIC_NAME)
                error = ERR_INVALID_TOPIC;
            else if (count < 0)
                error = ERR_CORRUPT_MESSAGE;
            else if (!(p = find_partition(name, name_len, index)))
                error = ERR_UNKNOWN_SERVER;
            else if (write_all(data_fd, records, records_len) < 0) {
                fprintf(stderr, "latency_floor: write to data file: %s\n", strerror(errno));
                error = ERR_STORAGE;
            } else {
                base_offset = p->next_offset;
                p->next_offset += count;
            }
            put_i32(o, index);
            put_i16(o, error);
            put_i64(o, base_offset);
            put_i64(o, -1); /* log_append_time_ms */
            if (version >= 5)
                put_i64(o, 0); /* log_start_offset */
            if (version >= 8) {
                put_i32(o, 0);  /* record_errors: empty */
                put_i16(o, -1); /* error_message: null */
            }
        }
    }
    put_i32(o, 0); /* throttle_time_ms */
    if (acks == 0)
        o->len = frame_start; /* no answer */
    return 0;
}

static int handle_frame(struct conn *c, const uint8_t *p, size_t size)
{
    struct reader r = {.p = p, .len = size};
    int16_t api_key = rd_i16(&r);
    int16_t version = rd_i16(&r);
    int32_t correlation_id = rd_i32(&r);
    const uint8_t *client_id;
    size_t client_id_len;
    rd_string(&r, &client_id, &client_id_len);
    if (r.bad)
        return -1;

    struct buf *o = &c->out;
    size_t start = o->len;
    put_i32(o, 0); /* size, set below */
    put_i32(o, correlation_id);
    int rc;
    switch (api_key) {
    case API_VERSIONS: /* response header v0 at every version */
        if (version == 3)
            skip_tagged_fields(&r); /* request header v2 */
        rc = version < 0 || r.bad ? -1 : 0;
        if (rc == 0)
            api_versions(o, version);
        break;
    case API_METADATA:
        rc = version == 1 ? metadata_v1(&r, o) : -1;
        break;
    case API_PRODUCE:
        rc = version >= 3 && version <= 8 ? produce(&r, o, version, start) : -1;
        break;
    default:
        rc = -1;
    }
    if (rc < 0) {
        o->len = start;
        return -1;
    }
    if (o->len > start)
        set_i32(o->p + start, (int32_t)(o->len - start - 4));
    return 0;
}

/* Writes what is pending; arms EPOLLOUT (and pauses reading) on a short write. */
static int flush_out(struct conn *c)
{
    struct buf *o = &c->out;
    while (o->off < o->len) {
        ssize_t n = write(c->fd, o->p + o->off, o->len - o->off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        o->off += (size_t)n;
        if (o->off < o->len)
            break; /* short: the socket buffer is full */
    }
    if (o->off == o->len) {
        o->off = o->len = 0;
        if (c->want_out) {
            c->want_out = 0;
            return set_events(c, EPOLLIN);
        }
    } else if (!c->want_out) {
        c->want_out = 1;
        return set_events(c, EPOLLOUT);
    }
    return 0;
}

/* One read(), every complete frame in the buffer handled, answers written at once. */
static int on_readable(struct conn *c)
{
    if (c->in_len >= 4) { /* a partial frame waits: make room for the whole of it */
        size_t want = 4 + (size_t)be32(c->in); /* already validated */
        if (want > c->in_cap) {
            uint8_t *p = realloc(c->in, want);
            if (!p)
                return -1;
            c->in = p;
            c->in_cap = want;
        }
    }
    ssize_t n;
    do
        n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    if (n == 0)
        return -1; /* peer closed */
    c->in_len += (size_t)n;

    size_t pos = 0;
    while (c->in_len - pos >= 4) {
        int32_t size = (int32_t)be32(c->in + pos);
        if (size < 0 || size > MAX_FRAME)
            return -1;
        if (c->in_len - pos - 4 < (size_t)size)
            break;
        if (handle_frame(c, c->in + pos + 4, (size_t)size) < 0)
            return -1;
        pos += 4 + (size_t)size;
    }
    if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    if (c->out.len > c->out.off && !c->want_out)
        return flush_out(c);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static void accept_all(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                perror("latency_floor: accept");
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        uint8_t *in = malloc(IN_INITIAL);
        if (!c || !in) {
            free(c);
            free(in);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->in = in;
        c->in_cap = IN_INITIAL;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            perror("latency_floor: epoll_ctl");
            free(in);
            free(c);
            close(fd);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT_OR_0 DATA_FILE\n", argv[0]);
        return 2;
    }
    char *end;
    long port = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || port < 0 || port > 65535) {
        fprintf(stderr, "latency_floor: bad port: %s\n", argv[1]);
        return 2;
    }
    data_fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (data_fd < 0) {
        fprintf(stderr, "latency_floor: %s: %s\n", argv[2], strerror(errno));
        return 1;
    }

    /* SIGTERM/SIGINT are blocked except inside epoll_pwait, so none is missed. */
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &waitmask);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGINT);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        perror("latency_floor: socket");
        return 1;
    }
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 128) < 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen) < 0) {
        perror("latency_floor: bind/listen");
        return 1;
    }
    listen_port = ntohs(addr.sin_port);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        perror("latency_floor: epoll_create1");
        return 1;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0) {
        perror("latency_floor: epoll_ctl");
        return 1;
    }
    printf("%d\n", listen_port);
    fflush(stdout);

    struct epoll_event events[64];
    while (!stopping) {
        int n = epoll_pwait(epfd, events, 64, -1, &waitmask);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("latency_floor: epoll_pwait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                accept_all(lfd);
                continue;
            }
            uint32_t ev = events[i].events;
            int rc;
            if (c->want_out)
                rc = ev & (EPOLLOUT | EPOLLERR | EPOLLHUP) ? flush_out(c) : 0;
            else
                rc = ev & (EPOLLIN | EPOLLERR | EPOLLHUP) ? on_readable(c) : 0;
            if (rc < 0)
                conn_close(c);
        }
    }
    close(data_fd);
    return 0;
}
