/*
 * klog.storage._cleaner: the log cleaner's hot loops in C.
 *
 * What it owns: the C twin of klog/storage/cleaner_py.py -- the offset map's table (24-byte
 * slots: a key's MD5 and its offset, open addressing) and the per-record work of cleaning a
 * decompressed v2 records section: putting keys into the table (map_records), deciding
 * which records a cleaning keeps and copying them (filter_records), and moving record
 * timestamps to a new base (rebase_timestamps). Same arguments, same results, same table
 * bytes as the Python reference (cleaner_py.py documents the layout and the probe order);
 * tests run both on the same inputs and compare. Records are read with the v2 grammar of
 * klog/_v2records.h (the twin of records/v2.py's walk_records), so a malformed section is
 * refused as every other reader refuses it, with the same words: ValueError (the caller
 * turns it into CorruptRecordError). Every record of a section is checked, also after the
 * map filled up.
 *
 * Why C: compaction decodes every record of the log, twice (the map, then the filter), and
 * hashes every key: in Python that is ~2 us per record, so a cleaner thread would hold the
 * GIL -- and the broker's request path with it -- for most of a cleaning. Here a section of
 * RELEASE_GIL_FROM bytes or more is walked without the GIL (its bytes and the table are
 * pinned by the buffer protocol), and nothing is allocated per record.
 *
 * MD5 is written here (RFC 1321) rather than linked: it is Kafka's key hash
 * (log.cleaner.hash.algorithm=MD5) and must run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_v2records.h"

#define ENTRY_SIZE 24
#define HASH_SIZE 16
#define RANDOM_PROBES 16
/* Below this many bytes the GIL is kept: releasing it costs more than the walk. */
#define RELEASE_GIL_FROM 16384

/* STATUS = CALL, a walk over LEN bytes, without the GIL from RELEASE_GIL_FROM bytes on (the
 * walk touches no Python object). A macro: the walks take jobs of different types. */
#define RUN_WALK(status, len, call)         \
    do {                                    \
        if ((len) >= RELEASE_GIL_FROM) {    \
            Py_BEGIN_ALLOW_THREADS          \
            (status) = (call);              \
            Py_END_ALLOW_THREADS            \
        } else {                            \
            (status) = (call);              \
        }                                   \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * MD5 (RFC 1321) */

static uint32_t md5_k[64];
static const uint8_t md5_s[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

static void md5_init_table(void)
{
    /* RFC 1321 3.4: K[i] = floor(2^32 * |sin(i + 1)|); exact in double precision. */
    for (int i = 0; i < 64; i++)
        md5_k[i] = (uint32_t)(fabs(sin((double)(i + 1))) * 4294967296.0);
}

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

static void md5_block(uint32_t h[4], const uint8_t *p)
{
    uint32_t m[16];
    for (int i = 0; i < 16; i++)
        m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        f += a + md5_k[i] + m[g];
        a = d;
        d = c;
        c = b;
        b += rotl32(f, md5_s[i]);
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void md5(const uint8_t *data, size_t len, uint8_t out[HASH_SIZE])
{
    uint32_t h[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    size_t full = len / 64;
    for (size_t i = 0; i < full; i++)
        md5_block(h, data + 64 * i);
    uint8_t tail[128];
    size_t rem = len - 64 * full;
    memset(tail, 0, sizeof tail);
    if (rem)
        memcpy(tail, data + 64 * full, rem);
    tail[rem] = 0x80;
    size_t padded = rem < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[padded - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(h, tail);
    if (padded == 128)
        md5_block(h, tail + 64);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(h[i] >> (8 * j));
}

/* ---------------------------------------------------------------------------------------
 * the table */

static inline uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline int slot_is_empty(const uint8_t *e)
{
    for (int i = 0; i < ENTRY_SIZE; i++)
        if (e[i])
            return 0;
    return 1;
}

/* Slot of the given attempt: double hashing for RANDOM_PROBES attempts, then linear. */
static inline uint64_t next_slot(uint64_t h1, uint64_t h2, int64_t attempt, uint64_t slots,
                                 uint64_t previous)
{
    if (attempt < RANDOM_PROBES)
        return (h1 + (uint64_t)attempt * h2) % slots;
    return (previous + 1) % slots;
}

/* 1 new entry, 0 overwritten, -1 no free slot. */
static int table_put_hash(uint8_t *table, uint64_t slots, const uint8_t *hash, int64_t offset)
{
    uint64_t h1 = load_le64(hash), h2 = load_le64(hash + 8) | 1, slot = 0;
    int64_t attempts = (int64_t)slots + RANDOM_PROBES;
    for (int64_t i = 0; i < attempts; i++) {
        slot = next_slot(h1, h2, i, slots, slot);
        uint8_t *e = table + slot * ENTRY_SIZE;
        if (slot_is_empty(e)) {
            memcpy(e, hash, HASH_SIZE);
            store_le64(e + HASH_SIZE, (uint64_t)offset);
            return 1;
        }
        if (memcmp(e, hash, HASH_SIZE) == 0) {
            store_le64(e + HASH_SIZE, (uint64_t)offset);
            return 0;
        }
    }
    return -1;
}

static int64_t table_get_hash(const uint8_t *table, uint64_t slots, const uint8_t *hash)
{
    uint64_t h1 = load_le64(hash), h2 = load_le64(hash + 8) | 1, slot = 0;
    int64_t attempts = (int64_t)slots + RANDOM_PROBES;
    for (int64_t i = 0; i < attempts; i++) {
        slot = next_slot(h1, h2, i, slots, slot);
        const uint8_t *e = table + slot * ENTRY_SIZE;
        if (slot_is_empty(e))
            return -1;
        if (memcmp(e, hash, HASH_SIZE) == 0)
            return (int64_t)load_le64(e + HASH_SIZE);
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------
 * records */

/* Raise walk_records' ValueError for w's failure; NULL. */
static PyObject *walk_failed(const v2_walk *w, long long count, long long batch_position)
{
    PyObject *message = v2_message(w, count, "position", batch_position);
    if (message != NULL) {
        PyErr_SetObject(PyExc_ValueError, message);
        Py_DECREF(message);
    }
    return NULL;
}

static inline int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* ---------------------------------------------------------------------------------------
 * Python functions */

static int get_table(PyObject *obj, Py_buffer *view, Py_ssize_t slots)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0)
        return -1;
    if (slots <= 0 || view->len < slots * ENTRY_SIZE) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "table smaller than its slots");
        return -1;
    }
    return 0;
}

/* The table and a batch's records section (or a key hash): both views or neither. */
static int get_table_and_data(PyObject *table_obj, Py_buffer *table, Py_ssize_t slots,
                              PyObject *data_obj, Py_buffer *data)
{
    if (get_table(table_obj, table, slots) < 0)
        return -1;
    if (PyObject_GetBuffer(data_obj, data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(table);
        return -1;
    }
    return 0;
}

static int get_table_and_hash(PyObject *table_obj, Py_buffer *table, Py_ssize_t slots,
                              PyObject *hash_obj, Py_buffer *hash)
{
    if (get_table_and_data(table_obj, table, slots, hash_obj, hash) < 0)
        return -1;
    if (hash->len != HASH_SIZE) {
        PyBuffer_Release(hash);
        PyBuffer_Release(table);
        PyErr_SetString(PyExc_ValueError, "a key hash has 16 bytes");
        return -1;
    }
    return 0;
}

static PyObject *py_md5(PyObject *self, PyObject *arg)
{
    Py_buffer data;
    uint8_t out[HASH_SIZE];
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    md5((const uint8_t *)data.buf, (size_t)data.len, out);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)out, HASH_SIZE);
}

static PyObject *py_table_put(PyObject *self, PyObject *args)
{
    PyObject *table_obj, *hash_obj;
    Py_ssize_t slots;
    long long offset;
    Py_buffer table, hash;
    if (!PyArg_ParseTuple(args, "OnOL", &table_obj, &slots, &hash_obj, &offset))
        return NULL;
    if (get_table_and_hash(table_obj, &table, slots, hash_obj, &hash) < 0)
        return NULL;
    int result = table_put_hash((uint8_t *)table.buf, (uint64_t)slots, hash.buf, offset);
    PyBuffer_Release(&hash);
    PyBuffer_Release(&table);
    return PyLong_FromLong(result);
}

static PyObject *py_table_get(PyObject *self, PyObject *args)
{
    PyObject *table_obj, *hash_obj;
    Py_ssize_t slots;
    Py_buffer table, hash;
    if (!PyArg_ParseTuple(args, "OnO", &table_obj, &slots, &hash_obj))
        return NULL;
    if (get_table_and_hash(table_obj, &table, slots, hash_obj, &hash) < 0)
        return NULL;
    int64_t result = table_get_hash((const uint8_t *)table.buf, (uint64_t)slots, hash.buf);
    PyBuffer_Release(&hash);
    PyBuffer_Release(&table);
    return PyLong_FromLongLong(result);
}

static PyObject *py_table_clear(PyObject *self, PyObject *arg)
{
    Py_buffer table;
    if (PyObject_GetBuffer(arg, &table, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    memset(table.buf, 0, (size_t)table.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&table);
    Py_RETURN_NONE;
}

/* The record number i at w->pos: its fields in *r, where it starts in *start, its end at
 * w->pos after. 0, or -1 with w->failure set. */
static inline int next_record(v2_walk *w, int64_t i, v2_record *r, int64_t *start)
{
    w->index = i;
    *start = w->pos;
    return v2_next_record(w, r);
}

typedef struct {
    uint8_t *table;
    uint64_t slots;
    int64_t size, max_size, count, base_offset, start_offset;
    /* out */
    int64_t read, last_put;
    int full;
} map_job;

static int run_map(v2_walk *w, map_job *j)
{
    uint8_t hash[HASH_SIZE];
    j->read = j->count;
    j->last_put = -1;
    j->full = 0;
    for (int64_t i = 0; i < j->count; i++) {
        v2_record r;
        int64_t start;
        if (next_record(w, i, &r, &start) < 0)
            return -1;
        if (j->full)
            continue; /* full: the rest is only checked, as walk_records checks it */
        int64_t offset = wrap_add(j->base_offset, r.offset_delta);
        if (r.key_size >= 0 && offset >= j->start_offset) {
            int added = -1;
            if (j->size < j->max_size) {
                md5(w->d + r.key_pos, (size_t)r.key_size, hash);
                added = table_put_hash(j->table, j->slots, hash, offset);
            }
            if (added < 0) {
                j->read = i;
                j->full = 1;
                continue;
            }
            j->size += added;
            j->last_put = offset;
        }
    }
    return v2_end(w);
}

static PyObject *py_map_records(PyObject *self, PyObject *args)
{
    PyObject *table_obj, *data_obj;
    Py_ssize_t slots;
    long long size, max_size, count, base_offset, start_offset, batch_position;
    Py_buffer table, data;
    if (!PyArg_ParseTuple(args, "OnLLOLLLL", &table_obj, &slots, &size, &max_size, &data_obj,
                          &count, &base_offset, &start_offset, &batch_position))
        return NULL;
    if (get_table_and_data(table_obj, &table, slots, data_obj, &data) < 0)
        return NULL;
    v2_walk w;
    v2_walk_init(&w, data.buf, data.len);
    map_job j = {(uint8_t *)table.buf, (uint64_t)slots, size, max_size, count, base_offset,
                 start_offset, 0, -1, 0};
    int status;
    RUN_WALK(status, data.len, run_map(&w, &j));
    PyBuffer_Release(&data);
    PyBuffer_Release(&table);
    if (status < 0)
        return walk_failed(&w, count, batch_position);
    return Py_BuildValue("(LLLO)", (long long)j.size, (long long)j.read, (long long)j.last_put,
                         j.full ? Py_True : Py_False);
}

typedef struct {
    const uint8_t *table;
    uint64_t slots;
    int64_t latest_offset, count, base_offset, base_timestamp;
    int retain_deletes;
    uint8_t *out;
    /* out */
    int64_t out_len, kept, max_ts, offset_of_max, max_offset, tomb_kept, tomb_removed, invalid;
} filter_job;

static int run_filter(v2_walk *w, filter_job *j)
{
    uint8_t hash[HASH_SIZE];
    int first_ts = 1;
    j->out_len = j->kept = j->tomb_kept = j->tomb_removed = j->invalid = 0;
    j->max_ts = j->offset_of_max = j->max_offset = -1;
    for (int64_t i = 0; i < j->count; i++) {
        v2_record r;
        int64_t start;
        if (next_record(w, i, &r, &start) < 0)
            return -1;
        int64_t offset = wrap_add(j->base_offset, r.offset_delta);
        int keep = 1;
        if (offset <= j->latest_offset) {
            if (r.key_size < 0) {
                j->invalid++;
                keep = 0;
            } else {
                md5(w->d + r.key_pos, (size_t)r.key_size, hash);
                int latest = offset >= table_get_hash(j->table, j->slots, hash);
                if (latest && r.value_size < 0 && !j->retain_deletes)
                    j->tomb_removed++;
                keep = latest && (r.value_size >= 0 || j->retain_deletes);
            }
        }
        if (!keep)
            continue;
        memcpy(j->out + j->out_len, w->d + start, (size_t)(w->pos - start));
        j->out_len += w->pos - start;
        j->kept++;
        if (r.value_size < 0)
            j->tomb_kept++;
        int64_t ts = wrap_add(j->base_timestamp, r.timestamp_delta);
        if (first_ts || ts > j->max_ts) {
            j->max_ts = ts;
            j->offset_of_max = offset;
            first_ts = 0;
        }
        if (offset > j->max_offset)
            j->max_offset = offset;
    }
    return v2_end(w);
}

static PyObject *py_filter_records(PyObject *self, PyObject *args)
{
    PyObject *table_obj, *data_obj;
    Py_ssize_t slots;
    long long latest_offset, count, base_offset, base_timestamp, batch_position;
    int retain_deletes;
    Py_buffer table, data;
    if (!PyArg_ParseTuple(args, "OnLOLLLpL", &table_obj, &slots, &latest_offset, &data_obj,
                          &count, &base_offset, &base_timestamp, &retain_deletes,
                          &batch_position))
        return NULL;
    if (get_table_and_data(table_obj, &table, slots, data_obj, &data) < 0)
        return NULL;
    uint8_t *out = malloc(data.len > 0 ? (size_t)data.len : 1);
    if (out == NULL) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&table);
        return PyErr_NoMemory();
    }
    v2_walk w;
    v2_walk_init(&w, data.buf, data.len);
    filter_job j = {(const uint8_t *)table.buf, (uint64_t)slots, latest_offset, count,
                    base_offset, base_timestamp, retain_deletes, out,
                    0, 0, 0, 0, 0, 0, 0, 0};
    int status;
    RUN_WALK(status, data.len, run_filter(&w, &j));
    PyBuffer_Release(&data);
    PyBuffer_Release(&table);
    if (status < 0) {
        free(out);
        return walk_failed(&w, count, batch_position);
    }
    PyObject *kept;
    if (j.kept == count) {
        kept = Py_None;
        Py_INCREF(kept);
    } else {
        kept = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)j.out_len);
    }
    free(out);
    if (kept == NULL)
        return NULL;
    return Py_BuildValue("(NLLLLLLL)", kept, (long long)j.kept, (long long)j.max_ts,
                         (long long)j.offset_of_max, (long long)j.max_offset,
                         (long long)j.tomb_kept, (long long)j.tomb_removed,
                         (long long)j.invalid);
}

static int put_varint_zigzag(uint8_t *out, uint64_t zz)
{
    int n = 0;
    while (zz >= 0x80) {
        out[n++] = (uint8_t)(zz | 0x80);
        zz >>= 7;
    }
    out[n++] = (uint8_t)zz;
    return n;
}

typedef struct {
    int64_t count, shift;
    uint8_t *out;
    size_t cap;
    int64_t out_len;
} rebase_job;

static int run_rebase(v2_walk *w, rebase_job *j)
{
    j->out_len = 0;
    for (int64_t i = 0; i < j->count; i++) {
        v2_record r;
        int64_t start;
        if (next_record(w, i, &r, &start) < 0)
            return -1;
        /* The record checked, its length and timestamp varints are read again for where
         * they end (v2_record does not keep it). */
        int64_t p = start;
        uint64_t raw;
        v2_read_unsigned(w, &p, V2_MAX_VARINT_BYTES, &raw);
        int64_t attributes_pos = p;
        p += 1;
        v2_read_unsigned(w, &p, V2_MAX_VARLONG_BYTES, &raw);
        int64_t delta = wrap_add(r.timestamp_delta, j->shift);
        uint8_t ts[V2_MAX_VARLONG_BYTES];
        int ts_len = put_varint_zigzag(ts, ((uint64_t)delta << 1) ^ (uint64_t)(delta >> 63));
        int64_t rest = w->pos - p;
        int64_t body = 1 + ts_len + rest;
        if ((size_t)j->out_len + (size_t)body + V2_MAX_VARINT_BYTES > j->cap)
            return -1; /* cannot happen: cap allows 16 bytes of growth per record */
        /* The body length is an int32 varint: zigzag of a non-negative value. */
        uint8_t *o = j->out + j->out_len;
        int n = put_varint_zigzag(o, (uint64_t)body << 1);
        o[n] = w->d[attributes_pos];
        memcpy(o + n + 1, ts, (size_t)ts_len);
        memcpy(o + n + 1 + ts_len, w->d + p, (size_t)rest);
        j->out_len += n + body;
    }
    return v2_end(w);
}

static PyObject *py_rebase_timestamps(PyObject *self, PyObject *args)
{
    PyObject *data_obj;
    long long count, shift, batch_position;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "OLLL", &data_obj, &count, &shift, &batch_position))
        return NULL;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    /* Each record grows by at most 9 bytes of timestamp and 4 of length, and no more
     * records than len / 7 can parse (a walk fails at the first that does not). */
    size_t most = (size_t)data.len / 7 + 1;
    size_t records = count < 0 ? 0 : ((size_t)count < most ? (size_t)count : most);
    size_t cap = (size_t)data.len + records * 16 + 16;
    uint8_t *out = malloc(cap);
    if (out == NULL) {
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }
    v2_walk w;
    v2_walk_init(&w, data.buf, data.len);
    rebase_job j = {count, shift, out, cap, 0};
    int status = run_rebase(&w, &j);
    PyBuffer_Release(&data);
    if (status < 0) {
        free(out);
        if (w.failure == V2_OK) {
            PyErr_SetString(PyExc_ValueError, "rebased records outgrew their buffer");
            return NULL;
        }
        return walk_failed(&w, count, batch_position);
    }
    PyObject *result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)j.out_len);
    free(out);
    return result;
}

static PyMethodDef methods[] = {
    {"md5", py_md5, METH_O, "MD5 digest of a buffer (16 bytes)."},
    {"table_put", py_table_put, METH_VARARGS, "Map a key hash to an offset: 1 new, 0 overwrite, -1 full."},
    {"table_get", py_table_get, METH_VARARGS, "The offset of a key hash, or -1."},
    {"table_clear", py_table_clear, METH_O, "Zero the table."},
    {"map_records", py_map_records, METH_VARARGS, "Put the keys of a records section."},
    {"filter_records", py_filter_records, METH_VARARGS, "The records a cleaning keeps."},
    {"rebase_timestamps", py_rebase_timestamps, METH_VARARGS, "Shift record timestamp deltas."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "klog.storage._cleaner",
    "The log cleaner's hot loops (C twin of klog/storage/cleaner_py.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cleaner(void)
{
    md5_init_table();
    return PyModule_Create(&module_def);
}
