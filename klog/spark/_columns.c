/*
 * klog.spark._columns: the records of one v2 batch straight into Arrow column buffers.
 *
 * What it owns: decode_v2(), the C twin of klog/protocol/records/v2.py's
 * decode_record_fields (spark/columns.py's Python path) for the common case of
 * spark-export (no headers wanted). It walks the records section of a v2 batch (already
 * decompressed) with v2.py's grammar as klog/_v2records.h writes it in C (the same checks,
 * the same messages), and returns the
 * key, value, offset and timestamp columns as the buffers pyarrow.Array.from_buffers takes
 * (validity bitmap, int32 offsets, data; int64 values), so no Python object is made per
 * record. The Python loop stays the reference and the fallback (headers wanted, or no C
 * compiler at build time); tests run both on the same batches and compare.
 *
 * Why C: the Python loop costs 2-4 us per record, most of a cold export's Python CPU on
 * two cores where Spark's JVM wants the other core (see benchmarks/RESULTS.md).
 *
 * A malformed record raises ValueError with the message the Python loop puts in its
 * CorruptRecordError (spark/columns.py raises that). Nothing is kept of a batch that fails.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_v2records.h"

/* One binary column being built: validity bitmap (made at the first null), int32 offsets,
 * data. */
typedef struct {
    PyObject *validity; /* bytes, or NULL while there is no null */
    PyObject *offsets;  /* bytes of (count + 1) int32 */
    PyObject *data;     /* bytes of at most the records section's size */
    Py_ssize_t size;    /* bytes of data used */
    Py_ssize_t nulls;
} binary_column;

static int column_init(binary_column *c, Py_ssize_t count, Py_ssize_t capacity)
{
    c->validity = NULL;
    c->size = 0;
    c->nulls = 0;
    c->offsets = PyBytes_FromStringAndSize(NULL, (count + 1) * (Py_ssize_t)sizeof(int32_t));
    c->data = PyBytes_FromStringAndSize(NULL, capacity);
    if (c->offsets == NULL || c->data == NULL)
        return -1;
    ((int32_t *)PyBytes_AS_STRING(c->offsets))[0] = 0;
    return 0;
}

static void column_clear(binary_column *c)
{
    Py_CLEAR(c->validity);
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->data);
}

/* Row `row` of the column: NULL for a null, else `size` bytes at `from`. */
static int column_add(binary_column *c, Py_ssize_t row, Py_ssize_t count, const uint8_t *from,
                      Py_ssize_t size)
{
    int32_t *offsets = (int32_t *)PyBytes_AS_STRING(c->offsets);
    if (from == NULL) {
        if (c->validity == NULL) {
            c->validity = PyBytes_FromStringAndSize(NULL, (count + 7) / 8);
            if (c->validity == NULL)
                return -1;
            memset(PyBytes_AS_STRING(c->validity), 0xFF, (count + 7) / 8);
        }
        uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(c->validity);
        bits[row >> 3] &= (uint8_t) ~(1u << (row & 7));
        c->nulls++;
    } else {
        memcpy(PyBytes_AS_STRING(c->data) + c->size, from, size);
        c->size += size;
    }
    offsets[row + 1] = (int32_t)c->size;
    return 0;
}

static PyObject *column_result(binary_column *c)
{
    if (_PyBytes_Resize(&c->data, c->size) < 0)
        return NULL;
    PyObject *validity = c->validity != NULL ? c->validity : Py_None;
    return Py_BuildValue("(OnOO)", validity, c->nulls, c->offsets, c->data);
}

PyDoc_STRVAR(decode_v2_doc,
"decode_v2(data, count, base_offset, base_timestamp, log_append_time, start, end)\n"
"    -> (rows, past_end, key, value, offsets, timestamps)\n\n"
"The records of a v2 batch's (decompressed) records section whose offsets are in\n"
"[start, end), as Arrow buffers: key and value are (validity bytes or None, null count,\n"
"int32 offsets bytes, data bytes); offsets and timestamps (milliseconds) are int64 bytes.\n"
"past_end: an offset >= end was met (reading stopped there). ValueError on a malformed\n"
"record, with the message of klog.spark.columns' CorruptRecordError.");

static PyObject *decode_v2(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "decode_v2 takes 7 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long long base_ts = PyLong_AsLongLong(args[3]);
    int log_append = PyObject_IsTrue(args[4]);
    long long start = PyLong_AsLongLong(args[5]);
    long long end = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred() || log_append < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (count < 0 || count > view.len) { /* every record takes more than one byte */
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "batch at offset %lld claims %zd records in %zd bytes",
                     base_offset, count, view.len);
        return NULL;
    }
    v2_walk w;
    v2_walk_init(&w, view.buf, view.len);
    binary_column keys = {0}, values = {0};
    PyObject *offsets_bytes = NULL, *timestamps_bytes = NULL, *result = NULL;
    if (column_init(&keys, count, view.len) < 0 || column_init(&values, count, view.len) < 0)
        goto done;
    offsets_bytes = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    timestamps_bytes = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (offsets_bytes == NULL || timestamps_bytes == NULL)
        goto done;
    int64_t *offsets = (int64_t *)PyBytes_AS_STRING(offsets_bytes);
    int64_t *timestamps = (int64_t *)PyBytes_AS_STRING(timestamps_bytes);

    Py_ssize_t rows = 0;
    int past_end = 0;
    v2_record r;
    for (Py_ssize_t index = 0; index < count; index++) {
        w.index = index;
        if (v2_next_record(&w, &r) < 0)
            goto corrupt;
        long long offset = base_offset + r.offset_delta;
        if (offset < start)
            continue;
        if (offset >= end) {
            past_end = 1;
            break;
        }
        if (column_add(&keys, rows, count, r.key_size < 0 ? NULL : w.d + r.key_pos,
                       (Py_ssize_t)r.key_size) < 0 ||
            column_add(&values, rows, count, r.value_size < 0 ? NULL : w.d + r.value_pos,
                       (Py_ssize_t)r.value_size) < 0)
            goto done;
        offsets[rows] = offset;
        /* Wrapping, never undefined: a corrupt delta gives a wrong time, not a crash. */
        timestamps[rows] =
            log_append ? base_ts : (int64_t)((uint64_t)base_ts + (uint64_t)r.timestamp_delta);
        rows++;
    }
    if (!past_end && v2_end(&w) < 0)
        goto corrupt;
    if (_PyBytes_Resize(&offsets_bytes, rows * (Py_ssize_t)sizeof(int64_t)) < 0 ||
        _PyBytes_Resize(&timestamps_bytes, rows * (Py_ssize_t)sizeof(int64_t)) < 0)
        goto done;
    PyObject *key_column = column_result(&keys);
    PyObject *value_column = key_column != NULL ? column_result(&values) : NULL;
    if (value_column != NULL)
        result = Py_BuildValue("(nOOOOO)", rows, past_end ? Py_True : Py_False, key_column,
                               value_column, offsets_bytes, timestamps_bytes);
    Py_XDECREF(key_column);
    Py_XDECREF(value_column);
    goto done;
corrupt: {
    /* v2.walk_records' message, the batch named by its offset (as decode_record_fields) */
    PyObject *text = v2_message(&w, count, "offset", base_offset);
    if (text != NULL) {
        PyErr_SetObject(PyExc_ValueError, text);
        Py_DECREF(text);
    }
}
done:
    column_clear(&keys);
    column_clear(&values);
    Py_XDECREF(offsets_bytes);
    Py_XDECREF(timestamps_bytes);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_v2", (PyCFunction)(void (*)(void))decode_v2, METH_FASTCALL, decode_v2_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "klog.spark._columns",
    "The records of a v2 batch straight into Arrow column buffers (see _columns.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void)
{
    return PyModule_Create(&module_def);
}
