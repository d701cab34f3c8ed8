/* The v2 record grammar in C, shared by klog's extensions that read v2 records.
 *
 * What it owns: the C twin of klog/protocol/records/v2.py's walk_records -- the varint
 * readers (varint.py's, masked and bounded alike), zigzag, and the walk of one record
 * (v2_next_record) with the same order of reads, the same checks and the same messages
 * (v2_message), so that every C reader of v2 records refuses what the Python reference
 * refuses, with its words. klog/protocol/records/_records.c (the produce path's record
 * check), klog/spark/_columns.c (Spark's export) and klog/storage/_cleaner.c (the log
 * cleaner) include it; each adds only what it does with a record's fields. Nothing here touches a Python object but v2_message, so a walk
 * may run without the GIL.
 *
 * Use: a v2_walk over the (decompressed) records section; v2_next_record once per record
 * (w->index is the record's number, for messages); v2_end after the last one. On -1,
 * w->failure says what and v2_message tells it.
 */
#ifndef KLOG_V2RECORDS_H
#define KLOG_V2RECORDS_H

#include <Python.h>

#include <stdint.h>

#define V2_MAX_VARINT_BYTES 5
#define V2_MAX_VARLONG_BYTES 10
#define V2_MIN_BODY_SIZE 6 /* attributes + four one-byte varints + header count */

enum v2_failure {
    V2_OK = 0,
    V2_TRUNCATED,     /* record %index is truncated */
    V2_BAD_LENGTH,    /* record %index has a bad length */
    V2_VARINT_ENDS,   /* buffer ends inside a varint at position %a (%b bytes left) */
    V2_VARINT_LONG,   /* varint at position %a is longer than 5 bytes */
    V2_VARLONG_LONG,  /* varlong at position %a is longer than 10 bytes */
    V2_OVERRUNS,      /* record %index overruns its length */
    V2_DOES_NOT_FILL, /* record %index does not fill its length */
    V2_HEADER_COUNT,  /* invalid header count %a */
    V2_HEADER_KEY,    /* invalid header key length %a */
    V2_HEADER_VALUE,  /* header value of %a bytes overruns */
    V2_TRAILING,      /* %a bytes after its records */
    V2_FIRST_OWN,     /* an includer numbers its own failures (rules) from here */
};

typedef struct {
    const uint8_t *d;
    int64_t n;
    int64_t pos;     /* where the next record starts */
    int64_t index;   /* the record being read */
    int failure;     /* an enum v2_failure, or an includer's own */
    int64_t a, b;    /* the failure's numbers */
} v2_walk;

/* One record's fields. Sizes are -1 for null (any negative length, as in Java); positions
 * are in the records section. */
typedef struct {
    int64_t timestamp_delta, offset_delta;
    int64_t key_pos, key_size, value_pos, value_size;
} v2_record;

static inline void v2_walk_init(v2_walk *w, const void *data, int64_t n)
{
    w->d = (const uint8_t *)data;
    w->n = n;
    w->pos = 0;
    w->index = 0;
    w->failure = V2_OK;
    w->a = w->b = 0;
}

static inline int64_t v2_zigzag(uint64_t raw) { return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1); }

/* An unsigned LEB128 of at most max_bytes at *pos (advanced), masked to 32 or 64 bits, as
 * klog.protocol.records.varint.read_unsigned reads it. 0, or -1 with w->failure set. */
static inline int v2_read_unsigned(v2_walk *w, int64_t *pos, int max_bytes, uint64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    int64_t p = *pos;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= w->n) {
            w->failure = V2_VARINT_ENDS;
            w->a = *pos;
            w->b = w->n - *pos;
            return -1;
        }
        uint8_t byte = w->d[p++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pos = p;
            *out = max_bytes == V2_MAX_VARINT_BYTES ? (value & 0xFFFFFFFFu) : value;
            return 0;
        }
        shift += 7;
    }
    w->failure = max_bytes == V2_MAX_VARINT_BYTES ? V2_VARINT_LONG : V2_VARLONG_LONG;
    w->a = *pos;
    return -1;
}

/* A zigzag varint as walk_records reads a record's fields: the one- and two-byte forms
 * inline (a byte missing there is a truncated record), the reader for longer ones. ``at``
 * is where it starts; *pos becomes its end. */
static inline int v2_field(v2_walk *w, int64_t at, int64_t *pos, int max_bytes, int64_t *out)
{
    if (at >= w->n)
        return w->failure = V2_TRUNCATED, -1;
    uint8_t b = w->d[at];
    if (b < 0x80) {
        *pos = at + 1;
        *out = v2_zigzag(b);
        return 0;
    }
    if (at + 1 >= w->n)
        return w->failure = V2_TRUNCATED, -1;
    uint8_t b2 = w->d[at + 1];
    if (b2 < 0x80) {
        *pos = at + 2;
        *out = v2_zigzag((uint64_t)(b & 0x7F) | ((uint64_t)b2 << 7));
        return 0;
    }
    uint64_t raw;
    *pos = at;
    if (v2_read_unsigned(w, pos, max_bytes, &raw) < 0)
        return -1;
    *out = v2_zigzag(raw);
    return 0;
}

/* v2._read_headers without building the headers. */
static inline int v2_skip_headers(v2_walk *w, int64_t *pos, int64_t stop)
{
    uint64_t raw;
    if (v2_read_unsigned(w, pos, V2_MAX_VARINT_BYTES, &raw) < 0)
        return -1;
    int64_t count = v2_zigzag(raw);
    if (count < 0 || count * 2 > stop - *pos) {
        w->failure = V2_HEADER_COUNT;
        w->a = count;
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        if (v2_read_unsigned(w, pos, V2_MAX_VARINT_BYTES, &raw) < 0)
            return -1;
        int64_t key_length = v2_zigzag(raw);
        if (key_length < 0 || *pos + key_length > stop) {
            w->failure = V2_HEADER_KEY;
            w->a = key_length;
            return -1;
        }
        *pos += key_length;
        if (v2_read_unsigned(w, pos, V2_MAX_VARINT_BYTES, &raw) < 0)
            return -1;
        int64_t value_length = v2_zigzag(raw);
        if (value_length >= 0) {
            if (*pos + value_length > stop) {
                w->failure = V2_HEADER_VALUE;
                w->a = value_length;
                return -1;
            }
            *pos += value_length;
        }
    }
    return 0;
}

/* The record at w->pos, wholly checked (its key and value lie in it); w->pos moves past
 * it. 0, or -1 with w->failure set. As in walk_records, a key or value that overruns the
 * record leaves pos past its end, which the check before the headers catches. */
static inline int v2_next_record(v2_walk *w, v2_record *r)
{
    int64_t pos = w->pos, length, stop;
    if (v2_field(w, pos, &pos, V2_MAX_VARINT_BYTES, &length) < 0)
        return -1;
    stop = pos + length;
    if (stop > w->n || stop - pos < V2_MIN_BODY_SIZE)
        return w->failure = V2_BAD_LENGTH, -1;
    /* attributes (unused in v2), timestampDelta (a varlong) */
    if (v2_field(w, pos + 1, &pos, V2_MAX_VARLONG_BYTES, &r->timestamp_delta) < 0 ||
        v2_field(w, pos, &pos, V2_MAX_VARINT_BYTES, &r->offset_delta) < 0 ||
        v2_field(w, pos, &pos, V2_MAX_VARINT_BYTES, &r->key_size) < 0)
        return -1;
    r->key_pos = pos;
    if (r->key_size < 0)
        r->key_size = -1;
    else
        pos += r->key_size;
    if (v2_field(w, pos, &pos, V2_MAX_VARINT_BYTES, &r->value_size) < 0)
        return -1;
    r->value_pos = pos;
    if (r->value_size < 0)
        r->value_size = -1;
    else
        pos += r->value_size;
    if (pos >= stop)
        return w->failure = V2_OVERRUNS, -1;
    if (w->d[pos] == 0)
        pos += 1;
    else if (v2_skip_headers(w, &pos, stop) < 0)
        return -1;
    if (pos != stop)
        return w->failure = V2_DOES_NOT_FILL, -1;
    w->pos = stop;
    return 0;
}

/* After the last record: nothing may follow it. 0, or -1 with w->failure set. */
static inline int v2_end(v2_walk *w)
{
    if (w->pos == w->n)
        return 0;
    w->failure = V2_TRAILING;
    w->a = w->n - w->pos;
    return -1;
}

/* walk_records' message for w's failure (a new str, or NULL with an exception set); the
 * batch is named "batch at {unit} {at}". NULL without an exception for a failure that is
 * the includer's own (>= V2_FIRST_OWN): it tells those. */
static inline PyObject *v2_message(const v2_walk *w, long long count, const char *unit, long long at)
{
    long long i = (long long)w->index, a = (long long)w->a, b = (long long)w->b;
    switch (w->failure) {
    case V2_TRUNCATED:
        return PyUnicode_FromFormat("record %lld of batch at %s %lld is truncated", i, unit,
                                    at);
    case V2_BAD_LENGTH:
        return PyUnicode_FromFormat("record %lld of batch at %s %lld has a bad length", i, unit,
                                    at);
    case V2_VARINT_ENDS:
        return PyUnicode_FromFormat(
            "buffer ends inside a varint at position %lld (%lld bytes left)", a, b);
    case V2_VARINT_LONG:
        return PyUnicode_FromFormat("varint at position %lld is longer than 5 bytes", a);
    case V2_VARLONG_LONG:
        return PyUnicode_FromFormat("varlong at position %lld is longer than 10 bytes", a);
    case V2_OVERRUNS:
        return PyUnicode_FromFormat("record %lld of batch at %s %lld overruns its length", i,
                                    unit, at);
    case V2_DOES_NOT_FILL:
        return PyUnicode_FromFormat("record %lld of batch at %s %lld does not fill its length",
                                    i, unit, at);
    case V2_HEADER_COUNT:
        return PyUnicode_FromFormat("invalid header count %lld in record %lld of batch at %s %lld",
                                    a, i, unit, at);
    case V2_HEADER_KEY:
        return PyUnicode_FromFormat(
            "invalid header key length %lld in record %lld of batch at %s %lld", a, i, unit, at);
    case V2_HEADER_VALUE:
        return PyUnicode_FromFormat(
            "header value of %lld bytes overruns record %lld of batch at %s %lld", a, i, unit,
            at);
    case V2_TRAILING:
        return PyUnicode_FromFormat(
            "batch at %s %lld has %lld bytes after its %lld records (incorrect declared batch "
            "size)", unit, at, a, count);
    default:
        return NULL;
    }
}

#endif
