/*
 * klog.protocol.records._records: the produce path's record check of a v2 batch, in C.
 *
 * What it owns: check_v2(), the C twin of klog/protocol/records/validate.py's
 * check_records. It walks the records section of a v2 batch (already decompressed) with
 * the grammar of klog/protocol/records/v2.py's walk_records, written once in C in
 * klog/_v2records.h (same order of reads, same checks, same messages), and applies
 * LogValidator's per-record rules on top (offset deltas 0..n-1 in order; a key on every
 * record when the topic is compacted). Nothing is
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

#include "_v2records.h"

/* Below this many bytes the GIL is kept: releasing it costs more than the walk. */
#define RELEASE_GIL_FROM 65536

/* LogValidator's rules (InvalidRecordError), reported only for a section that decodes. */
enum rule {
    OFFSET_DELTA = V2_FIRST_OWN, /* record %index has offset delta %a */
    NO_KEY,                      /* record %index has no key */
};

/* The walk: the first malformation stops it; the first rule broken is remembered and
 * reported only if the whole section decodes (as the Python reference decides). */
static void check(v2_walk *w, int64_t count, int require_keys, int64_t *min_ts,
                  int64_t *max_ts)
{
    int rule = V2_OK;
    int64_t rule_index = 0, rule_value = 0;
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
        if (rule == V2_OK) {
            if (r.offset_delta != index) {
                rule = OFFSET_DELTA;
                rule_index = index;
                rule_value = r.offset_delta;
            } else if (require_keys && r.key_size < 0) {
                rule = NO_KEY;
                rule_index = index;
            }
        }
    }
    if (v2_end(w) < 0)
        return;
    if (rule != V2_OK) {
        w->failure = rule;
        w->index = rule_index;
        w->a = rule_value;
    }
}

static PyObject *message(const v2_walk *w, long long count, long long at)
{
    long long i = (long long)w->index, a = (long long)w->a;
    switch (w->failure) {
    case OFFSET_DELTA:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has offset delta %lld: the records of a "
            "batch must have offset deltas 0, 1, 2, ... in order", i, at, a);
    case NO_KEY:
        return PyUnicode_FromFormat(
            "record %lld of batch at position %lld has no key: a compacted topic cannot "
            "accept a record without a key", i, at);
    default: {
        PyObject *text = v2_message(w, count, "position", at);
        return text != NULL || PyErr_Occurred() ? text : PyUnicode_FromString("?");
    }
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
    v2_walk w;
    v2_walk_init(&w, view.buf, (int64_t)view.len);
    int64_t min_ts, max_ts;
    if (view.len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        check(&w, count, require_keys, &min_ts, &max_ts);
        Py_END_ALLOW_THREADS
    } else {
        check(&w, count, require_keys, &min_ts, &max_ts);
    }
    PyBuffer_Release(&view);
    if (w.failure == V2_OK)
        return Py_BuildValue("(iOLL)", 0, Py_None, (long long)min_ts, (long long)max_ts);
    PyObject *text = message(&w, count, at);
    if (text == NULL)
        return NULL;
    return Py_BuildValue("(iNii)", w.failure >= V2_FIRST_OWN ? 2 : 1, text, 0, 0);
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
