/*
 * klog.protocol.records._records: the produce path's record check of a v2 batch, in C.
 *
 * What it owns: check_v2(), the C twin of klog/protocol/records/validate.py's
 * check_records. It walks the records section of a v2 batch (already decompressed) with
 * the grammar of klog/protocol/records/v2.py's _walk_records -- same order of reads, same
 * checks, same messages -- and applies LogValidator's per-record rules on top (offset
 * deltas 0..n-1 in order; a key on every record when the topic is compacted). Nothing is
 * allocated per record and no Python object is made; the walk runs without the GIL (the
 * bytes are pinned by the buffer protocol), so a worker thread checking a big batch does
 * not hold up the event loop. The Python code stays the reference and the fallback (no C
 * compiler, or KLOG_PURE_PYTHON=1); tests run both on the same inputs and compare.
 *
 * Why C: every produced batch is checked; the Python walk costs ~1 us per record, which
 * would double the broker's CPU per GB of small records (benchmarks/RESULTS.md).
 *
 * Result: (0, None, min_timestamp_delta, max_timestamp_delta) when the records are valid,
 * else (1, message, 0, 0) for a malformed section (CorruptRecordError) or (2, message, 0,
 * 0) for a well-formed one that breaks a rule (InvalidRecordError). The caller raises.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#define MAX_VARINT_BYTES 5
#define MAX_VARLONG_BYTES 10
#define MIN_BODY_SIZE 6 /* attributes + four one-byte varints + header count */
/* Below this many bytes the GIL is kept: releasing it costs more than the walk. */
#define RELEASE_GIL_FROM 65536

enum failure {
    OK = 0,
    TRUNCATED,         /* record %index is truncated */
    BAD_LENGTH,        /* record %index has a bad length */
    VARINT_ENDS,       /* buffer ends inside a varint at position %a (%b bytes left) */
    VARINT_LONG,       /* varint at position %a is longer than 5 bytes */
    VARLONG_LONG,      /* varlong at position %a is longer than 10 bytes */
    OVERRUNS,          /* record %index overruns its length */
    DOES_NOT_FILL,     /* record %index does not fill its length */
    HEADER_COUNT,      /* invalid header count %a */
    HEADER_KEY,        /* invalid header key length %a */
    HEADER_VALUE,      /* header value of %a bytes overruns */
    TRAILING,          /* %a bytes after its records */
    /* rules (InvalidRecordError), reported only for a section that decodes */
    OFFSET_DELTA,      /* record %index has offset delta %a */
    NO_KEY,            /* record %index has no key */
};

typedef struct {
    const uint8_t *d;
    int64_t n;
    enum failure failure;
    int64_t index, a, b;
} walk;

/* An unsigned LEB128 of at most max_bytes at *pos (advanced), masked to 32 or 64 bits, as
 * klog.protocol.records.varint._read_unsigned reads it. 0, or -1 with w->failure set. */
static int read_unsigned(walk *w, int64_t *pos, int max_bytes, uint64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    int64_t p = *pos;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= w->n) {
            w->failure = VARINT_ENDS;
            w->a = *pos;
            w->b = w->n - *pos;
            return -1;
        }
        uint8_t byte = w->d[p++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pos = p;
            *out = max_bytes == MAX_VARINT_BYTES ? (value & 0xFFFFFFFFu) : value;
            return 0;
        }
        shift += 7;
    }
    w->failure = max_bytes == MAX_VARINT_BYTES ? VARINT_LONG : VARLONG_LONG;
    w->a = *pos;
    return -1;
}

static inline int64_t zigzag(uint64_t raw) { return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1); }

/* A varint as _walk_records reads one: the one- and two-byte forms inline (a byte missing
 * there is a truncated record), the reader for longer ones. ``at`` is where it starts;
 * *pos becomes its end. */
static inline int field(walk *w, int64_t at, int64_t *pos, int max_bytes, int64_t *out)
{
    if (at >= w->n)
        return w->failure = TRUNCATED, -1;
    uint8_t b = w->d[at];
    if (b < 0x80) {
        *pos = at + 1;
        *out = zigzag(b);
        return 0;
    }
    if (at + 1 >= w->n)
        return w->failure = TRUNCATED, -1;
    uint8_t b2 = w->d[at + 1];
    if (b2 < 0x80) {
        *pos = at + 2;
        *out = zigzag((uint64_t)(b & 0x7F) | ((uint64_t)b2 << 7));
        return 0;
    }
    uint64_t raw;
    *pos = at;
    if (read_unsigned(w, pos, max_bytes, &raw) < 0)
        return -1;
    *out = zigzag(raw);
    return 0;
}

/* v2._read_headers without building the headers. */
static int skip_headers(walk *w, int64_t *pos, int64_t stop)
{
    uint64_t raw;
    if (read_unsigned(w, pos, MAX_VARINT_BYTES, &raw) < 0)
        return -1;
    int64_t count = zigzag(raw);
    if (count < 0 || count * 2 > stop - *pos) {
        w->failure = HEADER_COUNT;
        w->a = count;
        return -1;
    }
    for (int64_t i = 0; i < count; i++) {
        if (read_unsigned(w, pos, MAX_VARINT_BYTES, &raw) < 0)
            return -1;
        int64_t key_length = zigzag(raw);
        if (key_length < 0 || *pos + key_length > stop) {
            w->failure = HEADER_KEY;
            w->a = key_length;
            return -1;
        }
        *pos += key_length;
        if (read_unsigned(w, pos, MAX_VARINT_BYTES, &raw) < 0)
            return -1;
        int64_t value_length = zigzag(raw);
        if (value_length >= 0) {
            if (*pos + value_length > stop) {
                w->failure = HEADER_VALUE;
                w->a = value_length;
                return -1;
            }
            *pos += value_length;
        }
    }
    return 0;
}

/* The walk: the first malformation stops it; the first rule broken is remembered and
 * reported only if the whole section decodes (as the Python reference decides). */
static void check(walk *w, int64_t count, int require_keys, int64_t *min_ts, int64_t *max_ts)
{
    int64_t pos = 0, end = w->n;
    enum failure rule = OK;
    int64_t rule_index = 0, rule_value = 0;
    *min_ts = 0;
    *max_ts = 0;
    for (int64_t index = 0; index < count; index++) {
        int64_t length, ts, delta, key, value, stop;
        w->index = index;
        if (field(w, pos, &pos, MAX_VARINT_BYTES, &length) < 0)
            return;
        stop = pos + length;
        if (stop > end || stop - pos < MIN_BODY_SIZE) {
            w->failure = BAD_LENGTH;
            return;
        }
        /* attributes (skipped), timestampDelta (a varlong) */
        if (field(w, pos + 1, &pos, MAX_VARLONG_BYTES, &ts) < 0)
            return;
        if (field(w, pos, &pos, MAX_VARINT_BYTES, &delta) < 0)
            return;
        if (field(w, pos, &pos, MAX_VARINT_BYTES, &key) < 0)
            return;
        if (key < 0)
            key = -1;
        else
            pos += key;
        if (field(w, pos, &pos, MAX_VARINT_BYTES, &value) < 0)
            return;
        if (value >= 0)
            pos += value;
        if (pos >= stop) {
            w->failure = OVERRUNS;
            return;
        }
        if (w->d[pos] == 0)
            pos += 1;
        else if (skip_headers(w, &pos, stop) < 0)
            return;
        if (pos != stop) {
            w->failure = DOES_NOT_FILL;
            return;
        }
        if (index == 0 || ts < *min_ts)
            *min_ts = ts;
        if (index == 0 || ts > *max_ts)
            *max_ts = ts;
        if (rule == OK) {
            if (delta != index) {
                rule = OFFSET_DELTA;
                rule_index = index;
                rule_value = delta;
            } else if (require_keys && key < 0) {
                rule = NO_KEY;
                rule_index = index;
            }
        }
    }
    if (pos != end) {
        w->failure = TRAILING;
        w->a = end - pos;
        return;
    }
    if (rule != OK) {
        w->failure = rule;
        w->index = rule_index;
        w->a = rule_value;
    }
}

static PyObject *message(const walk *w, long long count, long long at)
{
    long long i = (long long)w->index, a = (long long)w->a, b = (long long)w->b;
    switch (w->failure) {
    case TRUNCATED:
        return PyUnicode_FromFormat("record %lld of batch at position %lld is truncated", i, at);
    case BAD_LENGTH:
        return PyUnicode_FromFormat("record %lld of batch at position %lld has a bad length",
                                    i, at);
    case VARINT_ENDS:
        return PyUnicode_FromFormat(
            "buffer ends inside a varint at position %lld (%lld bytes left)", a, b);
    case VARINT_LONG:
        return PyUnicode_FromFormat("varint at position %lld is longer than 5 bytes", a);
    case VARLONG_LONG:
        return PyUnicode_FromFormat("varlong at position %lld is longer than 10 bytes", a);
    case OVERRUNS:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld overruns its length", i, at);
    case DOES_NOT_FILL:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld does not fill its length", i, at);
    case HEADER_COUNT:
        return PyUnicode_FromFormat(
            "invalid header count %lld in record %lld of batch at position %lld", a, i, at);
    case HEADER_KEY:
        return PyUnicode_FromFormat(
            "invalid header key length %lld in record %lld of batch at position %lld", a, i,
            at);
    case HEADER_VALUE:
        return PyUnicode_FromFormat(
            "header value of %lld bytes overruns record %lld of batch at position %lld", a, i,
            at);
    case TRAILING:
        return PyUnicode_FromFormat(
            "batch at position %lld has %lld bytes after its %lld records (incorrect "
            "declared batch size)", at, a, count);
    case OFFSET_DELTA:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has offset delta %lld: the records of a "
            "batch must have offset deltas 0, 1, 2, ... in order", i, at, a);
    case NO_KEY:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has no key: a compacted topic cannot "
            "accept a record without a key", i, at);
    default:
        return PyUnicode_FromString("?");
    }
}

PyDoc_STRVAR(check_v2_doc,
             "check_v2(records, count, require_keys, batch_position)\n--\n\n"
             "Check the records section of a v2 batch: (0, None, min_ts_delta, max_ts_delta)\n"
             "if valid, (1, message, 0, 0) if malformed, (2, message, 0, 0) if a rule is\n"
             "broken (see validate.check_records, the reference).");

static PyObject *check_v2(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "check_v2 takes 4 arguments");
        return NULL;
    }
    long long count = PyLong_AsLongLong(args[1]);
    int require_keys = PyObject_IsTrue(args[2]);
    long long at = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred() || require_keys < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    walk w = {(const uint8_t *)view.buf, (int64_t)view.len, OK, 0, 0, 0};
    int64_t min_ts, max_ts;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        check(&w, count, require_keys, &min_ts, &max_ts);
        Py_END_ALLOW_THREADS
    } else {
        check(&w, count, require_keys, &min_ts, &max_ts);
    }
    PyBuffer_Release(&view);
    if (w.failure == OK)
        return Py_BuildValue("(iOLL)", 0, Py_None, (long long)min_ts, (long long)max_ts);
    PyObject *text = message(&w, count, at);
    if (text == NULL)
        return NULL;
    return Py_BuildValue("(iNii)", w.failure >= OFFSET_DELTA ? 2 : 1, text, 0, 0);
}

static PyMethodDef methods[] = {
    {"check_v2", (PyCFunction)(void (*)(void))check_v2, METH_FASTCALL, check_v2_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "klog.protocol.records._records",
    "The produce path's record check of a v2 batch (the C twin of validate.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module_def); }
