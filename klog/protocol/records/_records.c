/*
 * klog.protocol.records._records: the produce path's record check of a v2 batch, in C.
 *
 * What it owns: check_v2(), the C twin of klog/protocol/records/validate.py's
 * check_records. It walks the records section of a v2 batch (already decompressed) with
 * the grammar of klog/protocol/records/v2.py's walk_records, written once in C in
 * klog/_v2records.h (same order of reads, same checks, same messages), and applies
 * LogValidator's per-record rules on top: offset deltas 0..n-1 in order, a key on every
 * record when the topic is compacted, and every record's CreateTime timestamp within the
 * range the topic's timestamp limits allow (-1 excepted). Every record is judged, and each
 * one that breaks a rule is remembered with the first rule it breaks (KIP-467's record
 * errors: a client fails exactly those records). Nothing is allocated per valid record and
 * no Python object is made until the walk is over; the walk runs without the GIL (the
 * bytes are pinned by the buffer protocol), so a worker thread checking a big batch does
 * not hold up the event loop. The Python code stays the reference and the fallback (no C
 * compiler, or KLOG_PURE_PYTHON=1); tests run both on the same inputs and compare.
 *
 * Why C: every produced batch is checked; the Python walk costs ~1 us per record, which
 * would double the broker's CPU per GB of small records (benchmarks/RESULTS.md).
 *
 * check_v2(records, count, offset_rule, require_keys, batch_position, base_timestamp,
 * timestamp_range): the two rules are switched by truth values; ``timestamp_range`` is None
 * or (low, high), int64 values. Result: (min_timestamp_delta, max_timestamp_delta) when the
 * records are valid (the path of every produced batch: a pair, nothing more to unpack);
 * else (1, message, None) for a malformed section (CorruptRecordError), and for a
 * well-formed one that breaks a rule (2, message, record_errors) (InvalidRecordError) or,
 * when some timestamp is out of range, (3, message, record_errors)
 * (InvalidTimestampError), ``record_errors`` a list of (index, message) in index order and
 * ``message`` the summary the reference gives. The caller raises.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "_v2records.h"

/* Below this many bytes the GIL is kept: releasing it costs more than the walk. */
#define RELEASE_GIL_FROM 65536


#define NO_TIMESTAMP (-1)

/* LogValidator's rules, judged only for a section that decodes. */
enum rule {
    OFFSET_DELTA = 1, /* record %index has offset delta %value */
    NO_KEY,           /* record %index has no key */
    TIMESTAMP,        /* record %index has timestamp %value, out of range */
};

typedef struct {
    int64_t index, value;
    int rule;
} record_error;

/* What the walk found beyond the grammar: the offenders, in index order. */
typedef struct {
    record_error *errors; /* PyMem_Raw: usable without the GIL */
    int64_t count, capacity;
    int timestamps; /* one of them broke the timestamp rule */
    int no_memory;
} offenders;

static void add(offenders *o, int64_t index, int rule, int64_t value)
{
    if (o->no_memory)
        return;
    if (o->count == o->capacity) {
        int64_t capacity = o->capacity ? o->capacity * 2 : 16;
        record_error *grown = PyMem_RawRealloc(o->errors, (size_t)capacity * sizeof *grown);
        if (grown == NULL) {
            o->no_memory = 1;
            return;
        }
        o->errors = grown;
        o->capacity = capacity;
    }
    o->errors[o->count++] = (record_error){index, value, rule};
    if (rule == TIMESTAMP)
        o->timestamps = 1;
}

/* The walk: the first malformation stops it (the offenders found so far do not count:
 * the whole section must decode before a rule is judged, as the reference decides). */
static void check(v2_walk *w, int64_t count, int offsets, int keys, int64_t base_timestamp,
                  int check_timestamps, int64_t low, int64_t high, offenders *o,
                  int64_t *min_ts, int64_t *max_ts)
{
    v2_record r;
    *min_ts = 0;
    *max_ts = 0;
    for (int64_t index = 0; index < count; index++) {
        w->index = index;
        if (v2_next_record(w, &r) < 0)
            return;
        if (index == 0 || r.timestamp_delta < *min_ts)
            *min_ts = r.timestamp_delta;
        if (index == 0 || r.timestamp_delta > *max_ts)
            *max_ts = r.timestamp_delta;
        if (offsets && r.offset_delta != index) {
            add(o, index, OFFSET_DELTA, r.offset_delta);
        } else if (keys && r.key_size < 0) {
            add(o, index, NO_KEY, 0);
        } else if (check_timestamps) {
            /* Java's long arithmetic: the sum wraps around */
            int64_t timestamp = (int64_t)((uint64_t)base_timestamp + (uint64_t)r.timestamp_delta);
            if (timestamp != NO_TIMESTAMP && (timestamp < low || timestamp > high))
                add(o, index, TIMESTAMP, timestamp);
        }
    }
    v2_end(w);
}

static PyObject *rule_message(const record_error *e, long long at, long long low, long long high)
{
    long long i = (long long)e->index, value = (long long)e->value;
    switch (e->rule) {
    case OFFSET_DELTA:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has offset delta %lld: the records of a "
            "batch must have offset deltas 0, 1, 2, ... in order", i, at, value);
    case NO_KEY:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has no key: a compacted topic cannot "
            "accept a record without a key", i, at);
    default:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has timestamp %lld, outside [%lld, %lld], "
            "the range the topic's timestamp limits allow now", i, at, value, low, high);
    }
}

/* The (2 or 3, summary, [(index, message), ...]) answer for the offenders. */
static PyObject *refusal(const offenders *o, long long count, long long at, long long low,
                         long long high)
{
    PyObject *list = PyList_New((Py_ssize_t)o->count);
    if (list == NULL)
        return NULL;
    for (int64_t k = 0; k < o->count; k++) {
        PyObject *text = rule_message(&o->errors[k], at, low, high);
        PyObject *item = text == NULL ? NULL : Py_BuildValue("(LN)", (long long)o->errors[k].index,
                                                             text);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, item);
    }
    PyObject *summary = PyUnicode_FromFormat(
        "%lld of the %lld records of batch at position %lld were refused; the first: %U",
        (long long)o->count, count, at, PyTuple_GET_ITEM(PyList_GET_ITEM(list, 0), 1));
    if (summary == NULL) {
        Py_DECREF(list);
        return NULL;
    }
    return Py_BuildValue("(iNN)", o->timestamps ? 3 : 2, summary, list);
}

PyDoc_STRVAR(check_v2_doc,
             "check_v2(records, count, offset_rule, require_keys, batch_position,\n"
             "base_timestamp, timestamp_range)\n--\n\n"
             "Check the records section of a v2 batch: (min_ts_delta, max_ts_delta) if valid,\n"
             "(1, message, None) if malformed, (2 or 3, message, record_errors) if a rule is\n"
             "broken (see validate.check_records, the reference).");

static PyObject *check_v2(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "check_v2 takes 7 arguments");
        return NULL;
    }
    long long count = PyLong_AsLongLong(args[1]);
    int offsets = PyObject_IsTrue(args[2]);
    int keys = PyObject_IsTrue(args[3]);
    long long at = PyLong_AsLongLong(args[4]);
    long long base_timestamp = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred() || offsets < 0 || keys < 0)
        return NULL;
    int check_timestamps = args[6] != Py_None;
    long long low = 0, high = 0;
    if (check_timestamps && !PyArg_ParseTuple(args[6], "LL", &low, &high))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    v2_walk w;
    v2_walk_init(&w, view.buf, (int64_t)view.len);
    offenders o = {NULL, 0, 0, 0, 0};
    int64_t min_ts, max_ts;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        check(&w, count, offsets, keys, base_timestamp, check_timestamps, low, high, &o,
              &min_ts, &max_ts);
        Py_END_ALLOW_THREADS
    } else {
        check(&w, count, offsets, keys, base_timestamp, check_timestamps, low, high, &o,
              &min_ts, &max_ts);
    }
    PyBuffer_Release(&view);
    PyObject *result;
    if (w.failure != V2_OK) {
        PyObject *text = v2_message(&w, count, "position", at);
        if (text == NULL && !PyErr_Occurred())
            text = PyUnicode_FromString("?");
        result = text == NULL ? NULL : Py_BuildValue("(iNO)", 1, text, Py_None);
    } else if (o.no_memory) {
        result = PyErr_NoMemory();
    } else if (o.count) {
        result = refusal(&o, count, at, low, high);
    } else { /* the good path, every produced batch: a pair, no format string to parse */
        PyObject *low_delta = PyLong_FromLongLong((long long)min_ts);
        PyObject *high_delta = low_delta == NULL ? NULL : PyLong_FromLongLong((long long)max_ts);
        result = high_delta == NULL ? NULL : PyTuple_Pack(2, low_delta, high_delta);
        Py_XDECREF(low_delta);
        Py_XDECREF(high_delta);
    }
    PyMem_RawFree(o.errors);
    return result;
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
