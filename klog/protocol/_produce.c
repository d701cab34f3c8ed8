/*
 * klog.protocol._produce: Produce requests (v3-v11) decoded and their responses encoded, in C.
 *
 * What it owns: the C twins of klog/protocol/produce.py's decode_produce_request and
 * encode_produce_response, for the path every produced batch takes. Same grammar, same
 * results: decode builds the same kio entities (the classes for the version, built as
 * produce.py's _maker builds them: allocated, then their slots written), with each
 * partition's records a memoryview slice of the caller's buffer; encode writes the same
 * bytes, record errors (v8+) and KIP-951's CurrentLeader and NodeEndpoints (v10+) included.
 * Both decline -- return None, having changed nothing -- on anything else: a truncated or
 * malformed request, a tagged field in a request, a value out of range or of another type.
 * produce.py then runs its Python code, which stays the reference and raises the precise
 * error (tests compare both on the same inputs).
 *
 * Why C: on this path decoding cost a produce request ~47,000 instructions and encoding
 * its answer ~18,000 of the ~270,000 the broker spends per small request (callgrind),
 * with nothing left to take out in Python (see benchmarks/RESULTS.md, session 9).
 *
 * configure() hands over kio's three classes of a version and PartitionResponse once, at
 * first use, and checks their fields are object slots; a version not configured is
 * declined.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_slots.h"

#include <stdint.h>
#include <string.h>

#define MIN_VERSION 3
#define MAX_VERSION 11
#define FLEXIBLE_FROM 9
#define RECORD_ERRORS_FROM 8 /* KIP-467 */
#define CURRENT_LEADER_FROM 10 /* KIP-951 */
#define VERSIONS (MAX_VERSION - MIN_VERSION + 1)

/* kio's entities of one version: the classes and their slots' offsets. */
enum { R_TXN, R_ACKS, R_TIMEOUT, R_TOPICS, R_COUNT };
static const char *const request_fields[R_COUNT] = {
    "transactional_id", "acks", "timeout", "topic_data"};
enum { T_NAME, T_PARTITIONS, T_COUNT };
static const char *const topic_fields[T_COUNT] = {"name", "partition_data"};
enum { P_INDEX, P_RECORDS, P_COUNT };
static const char *const partition_fields[P_COUNT] = {"index", "records"};

struct entities {
    PyTypeObject *request, *topic, *partition;
    Py_ssize_t request_at[R_COUNT], topic_at[T_COUNT], partition_at[P_COUNT];
};
static struct entities versions[VERSIONS];
static PyObject *timeout_of = NULL; /* produce._timeout: ms -> datetime.timedelta */

/* PartitionResponse's slots, read by encode. */
enum { PR_INDEX, PR_ERROR, PR_BASE, PR_APPEND_TIME, PR_LOG_START, PR_MESSAGE, PR_RECORD_ERRORS,
       PR_CURRENT_LEADER, PR_COUNT };
static const char *const response_fields[PR_COUNT] = {
    "index", "error_code", "base_offset", "log_append_time_ms", "log_start_offset",
    "error_message", "record_errors", "current_leader"};
static PyTypeObject *response_type = NULL;
static Py_ssize_t response_at[PR_COUNT];

/* A new instance of ``type`` with its ``n`` slots set to ``values`` (references stolen, also
 * on failure); NULL on error. A new object's slots are NULL: they are stored directly. */
static PyObject *build(PyTypeObject *type, const Py_ssize_t *at, PyObject **values, int n)
{
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) {
        for (int i = 0; i < n; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        SLOT(obj, at, i) = values[i];
    return obj;
}

static PyObject *configure(PyObject *module, PyObject *args)
{
    int version;
    PyObject *request, *topic, *partition, *timeout_fn, *response;
    if (!PyArg_ParseTuple(args, "iO!O!O!OO!", &version, &PyType_Type, &request, &PyType_Type,
                          &topic, &PyType_Type, &partition, &timeout_fn, &PyType_Type, &response))
        return NULL;
    if (version < MIN_VERSION || version > MAX_VERSION) {
        PyErr_Format(PyExc_ValueError, "Produce v%d is not handled here", version);
        return NULL;
    }
    struct entities e;
    e.request = (PyTypeObject *)request;
    e.topic = (PyTypeObject *)topic;
    e.partition = (PyTypeObject *)partition;
    Py_ssize_t at[PR_COUNT];
    if (slot_offsets(e.request, request_fields, R_COUNT, e.request_at) < 0 ||
        slot_offsets(e.topic, topic_fields, T_COUNT, e.topic_at) < 0 ||
        slot_offsets(e.partition, partition_fields, P_COUNT, e.partition_at) < 0 ||
        slot_offsets((PyTypeObject *)response, response_fields, PR_COUNT, at) < 0)
        return NULL;
    if (!PyCallable_Check(timeout_fn)) {
        PyErr_SetString(PyExc_TypeError, "timeout_of must be callable");
        return NULL;
    }
    struct entities *slot = &versions[version - MIN_VERSION];
    Py_INCREF(request);
    Py_INCREF(topic);
    Py_INCREF(partition);
    Py_XDECREF(slot->request);
    Py_XDECREF(slot->topic);
    Py_XDECREF(slot->partition);
    *slot = e;
    Py_INCREF(timeout_fn);
    Py_XSETREF(timeout_of, timeout_fn);
    Py_INCREF(response);
    Py_XSETREF(response_type, (PyTypeObject *)response);
    memcpy(response_at, at, sizeof at);
    Py_RETURN_NONE;
}

/* --- decode ------------------------------------------------------------------------------ */

/* Reading stops at the first irregularity: ``ok`` goes to 0 and every later read yields 0. */
struct reader {
    const unsigned char *p;
    Py_ssize_t pos, end;
    int ok;
};

static inline int need(struct reader *r, Py_ssize_t n)
{
    if (!r->ok || n > r->end - r->pos) {
        r->ok = 0;
        return 0;
    }
    return 1;
}

static inline int32_t i16(struct reader *r)
{
    if (!need(r, 2))
        return 0;
    const unsigned char *p = r->p + r->pos;
    r->pos += 2;
    return (int16_t)(uint16_t)((p[0] << 8) | p[1]);
}

static inline int32_t i32(struct reader *r)
{
    if (!need(r, 4))
        return 0;
    const unsigned char *p = r->p + r->pos;
    r->pos += 4;
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
}

/* An unsigned varint of at most 5 bytes (as produce.py's _uvarint). */
static inline int64_t uvarint(struct reader *r)
{
    int64_t value = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (!need(r, 1))
            return 0;
        unsigned char byte = r->p[r->pos++];
        value |= (int64_t)(byte & 0x7F) << shift;
        if (byte < 0x80)
            return value;
    }
    r->ok = 0;
    return 0;
}

/* A length (or count) field: int16 / int32 in v3-v8; uvarint (length + 1) in v9. */
static inline int64_t string_length(struct reader *r, int flexible)
{
    return flexible ? uvarint(r) - 1 : i16(r);
}

static inline int64_t count_field(struct reader *r, int flexible)
{
    return flexible ? uvarint(r) - 1 : i32(r);
}

/* ``length`` bytes as a str (strict UTF-8); NULL with ok = 0 when they do not fit or do not
 * decode (the Python path raises for both), NULL with ok = 1 on a real error. */
static PyObject *text(struct reader *r, int64_t length)
{
    if (length < 0 || !need(r, (Py_ssize_t)length))
        return NULL;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p + r->pos, (Py_ssize_t)length, NULL);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        r->ok = 0;
        return NULL;
    }
    r->pos += (Py_ssize_t)length;
    return s;
}

/* A tagged-field section: only an empty one is the common case (none is defined). */
static inline void no_tags(struct reader *r)
{
    if (uvarint(r) != 0)
        r->ok = 0;
}

/* The partitions of one topic, as a tuple of entities; NULL (ok = 0: declined). */
static PyObject *partitions(struct reader *r, PyObject *body, const struct entities *e,
                            int flexible)
{
    int64_t count = count_field(r, flexible);
    /* index + records length (+ tags): bound the count before allocating for it */
    Py_ssize_t min_item = flexible ? 4 + 1 + 1 : 4 + 4;
    if (!r->ok || count < 0 || count > (r->end - r->pos) / min_item) {
        r->ok = 0;
        return NULL;
    }
    PyObject *tuple = PyTuple_New((Py_ssize_t)count);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int32_t index = i32(r);
        int64_t size = flexible ? uvarint(r) - 1 : i32(r);
        if (!r->ok || size < -1 || (size >= 0 && !need(r, (Py_ssize_t)size)))
            goto declined;
        PyObject *records;
        if (size == -1) {
            records = Py_NewRef(Py_None);
        } else {
            records = PySequence_GetSlice(body, r->pos, r->pos + (Py_ssize_t)size);
            if (records == NULL)
                goto failed;
            r->pos += (Py_ssize_t)size;
        }
        if (flexible) {
            no_tags(r);
            if (!r->ok) {
                Py_DECREF(records);
                goto declined;
            }
        }
        PyObject *values[P_COUNT] = {PyLong_FromLong(index), records};
        if (values[0] == NULL) {
            Py_DECREF(records);
            goto failed;
        }
        PyObject *entity = build(e->partition, e->partition_at, values, P_COUNT);
        if (entity == NULL)
            goto failed;
        PyTuple_SET_ITEM(tuple, i, entity);
    }
    return tuple;
declined:
    r->ok = 0;
failed:
    Py_DECREF(tuple);
    return NULL;
}

/* decode(version, body) -> the ProduceRequest entity, or None (declined). */
static PyObject *decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode(version, body)");
        return NULL;
    }
    long version = PyLong_AsLong(args[0]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    PyObject *body = args[1];
    if (version < MIN_VERSION || version > MAX_VERSION || !PyMemoryView_Check(body))
        Py_RETURN_NONE;
    const struct entities *e = &versions[version - MIN_VERSION];
    if (e->request == NULL)
        Py_RETURN_NONE;
    Py_buffer *view = PyMemoryView_GET_BUFFER(body);
    if (view->ndim != 1 || view->itemsize != 1 || !PyBuffer_IsContiguous(view, 'C') ||
        (view->format != NULL && strcmp(view->format, "B") != 0))
        Py_RETURN_NONE;
    int flexible = version >= FLEXIBLE_FROM;
    struct reader r = {(const unsigned char *)view->buf, 0, view->len, 1};
    PyObject *values[R_COUNT] = {NULL};
    PyObject *topics = NULL;

    int64_t length = string_length(&r, flexible);
    if (!r.ok || length < -1)
        goto declined;
    if (length == -1) {
        values[R_TXN] = Py_NewRef(Py_None);
    } else if ((values[R_TXN] = text(&r, length)) == NULL) {
        goto declined_or_failed;
    }
    int32_t acks = i16(&r);
    int32_t timeout_ms = i32(&r);
    int64_t count = count_field(&r, flexible);
    /* name length + partitions count (+ tags) */
    Py_ssize_t min_topic = flexible ? 1 + 1 + 1 : 2 + 4;
    if (!r.ok || count < 0 || count > (r.end - r.pos) / min_topic)
        goto declined;
    topics = PyTuple_New((Py_ssize_t)count);
    if (topics == NULL)
        goto failed;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *name = text(&r, string_length(&r, flexible));
        if (name == NULL)
            goto declined_or_failed;
        PyObject *parts = partitions(&r, body, e, flexible);
        if (parts == NULL) {
            Py_DECREF(name);
            goto declined_or_failed;
        }
        if (flexible) {
            no_tags(&r);
            if (!r.ok) {
                Py_DECREF(name);
                Py_DECREF(parts);
                goto declined;
            }
        }
        PyObject *topic_values[T_COUNT] = {name, parts};
        PyObject *topic = build(e->topic, e->topic_at, topic_values, T_COUNT);
        if (topic == NULL)
            goto failed;
        PyTuple_SET_ITEM(topics, i, topic);
    }
    if (flexible) {
        no_tags(&r);
        if (!r.ok)
            goto declined;
    }
    values[R_ACKS] = PyLong_FromLong(acks);
    if (values[R_ACKS] == NULL)
        goto failed;
    PyObject *ms = PyLong_FromLong(timeout_ms);
    if (ms == NULL)
        goto failed;
    values[R_TIMEOUT] = PyObject_CallOneArg(timeout_of, ms);
    Py_DECREF(ms);
    if (values[R_TIMEOUT] == NULL)
        goto failed;
    values[R_TOPICS] = topics;
    return build(e->request, e->request_at, values, R_COUNT);

declined_or_failed:
    if (PyErr_Occurred())
        goto failed;
declined:
    Py_XDECREF(topics);
    for (int i = 0; i < R_COUNT; i++)
        Py_XDECREF(values[i]);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(topics);
    for (int i = 0; i < R_COUNT; i++)
        Py_XDECREF(values[i]);
    return NULL;
}

/* --- encode ------------------------------------------------------------------------------ */

struct out {
    unsigned char *p;
    Py_ssize_t len, cap;
    int ok;
};

static int grow(struct out *o, Py_ssize_t n)
{
    if (!o->ok)
        return 0;
    if (o->len + n <= o->cap)
        return 1;
    Py_ssize_t cap = o->cap * 2 > o->len + n ? o->cap * 2 : o->len + n + 256;
    unsigned char *p = PyMem_Realloc(o->p, (size_t)cap);
    if (p == NULL) {
        o->ok = 0;
        PyErr_NoMemory();
        return 0;
    }
    o->p = p;
    o->cap = cap;
    return 1;
}

static void put_be(struct out *o, uint64_t v, int bytes)
{
    if (!grow(o, bytes))
        return;
    for (int i = bytes - 1; i >= 0; i--) {
        o->p[o->len + i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
    o->len += bytes;
}

static void put_uvarint(struct out *o, uint64_t v)
{
    while (v > 0x7F) {
        put_be(o, (v & 0x7F) | 0x80, 1);
        v >>= 7;
    }
    put_be(o, v, 1);
}

/* A str or None as a (compact) nullable string; 0 to decline. */
static int put_string(struct out *o, PyObject *s, int flexible)
{
    if (s == Py_None) {
        if (flexible)
            put_be(o, 0, 1);
        else
            put_be(o, 0xFFFF, 2);
        return 1;
    }
    if (!PyUnicode_Check(s))
        return 0;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL) {
        PyErr_Clear(); /* e.g. a lone surrogate: the Python encoder raises */
        return 0;
    }
    if (flexible)
        put_uvarint(o, (uint64_t)n + 1);
    else if (n > 0x7FFF)
        return 0;
    else
        put_be(o, (uint64_t)n, 2);
    if (!grow(o, n))
        return 0;
    memcpy(o->p + o->len, utf8, (size_t)n);
    o->len += n;
    return 1;
}

/* An int within [lo, hi] into *out; 0 to decline. */
static int int_in(PyObject *v, long long lo, long long hi, long long *out)
{
    if (v == NULL || !PyLong_Check(v))
        return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (x < lo || x > hi)
        return 0;
    *out = x;
    return 1;
}

static int put_count(struct out *o, Py_ssize_t n, int flexible);

/* The record errors of a partition (v8+): a sequence of (int32 batch index, str or None)
 * tuples; 0 to decline. */
static int put_record_errors(struct out *o, PyObject *record_errors, int flexible)
{
    if (record_errors != NULL && PyTuple_CheckExact(record_errors) &&
        PyTuple_GET_SIZE(record_errors) == 0) /* the usual case: none */
        return put_count(o, 0, flexible);
    PyObject *seq = record_errors == NULL ? NULL : PySequence_Fast(record_errors, "");
    if (seq == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int ok = put_count(o, n, flexible);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long long batch_index;
        ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 &&
             int_in(PyTuple_GET_ITEM(item, 0), INT32_MIN, INT32_MAX, &batch_index);
        if (ok) {
            put_be(o, (uint64_t)batch_index, 4);
            ok = put_string(o, PyTuple_GET_ITEM(item, 1), flexible);
        }
        if (ok && flexible)
            put_be(o, 0, 1);
        ok = ok && o->ok;
    }
    Py_DECREF(seq);
    return ok;
}

/* A partition's tagged fields: none, or (v10+) its CurrentLeader as tag 0 unless it is
 * None or the default (-1, -1), which Kafka's writer leaves out; 0 to decline. */
static int put_partition_tags(struct out *o, PyObject *leader, long version)
{
    long long id = -1, epoch = -1;
    if (version >= CURRENT_LEADER_FROM && leader != NULL && leader != Py_None) {
        if (!PyTuple_Check(leader) || PyTuple_GET_SIZE(leader) != 2 ||
            !int_in(PyTuple_GET_ITEM(leader, 0), INT32_MIN, INT32_MAX, &id) ||
            !int_in(PyTuple_GET_ITEM(leader, 1), INT32_MIN, INT32_MAX, &epoch))
            return 0;
    }
    if (id == -1 && epoch == -1) {
        put_be(o, 0, 1);
        return o->ok;
    }
    put_be(o, 1, 1); /* one tagged field */
    put_be(o, 0, 1); /* tag 0 */
    put_be(o, 9, 1); /* its size: two int32 and its own empty tags */
    put_be(o, (uint64_t)id, 4);
    put_be(o, (uint64_t)epoch, 4);
    put_be(o, 0, 1);
    return o->ok;
}

static int put_partition(struct out *o, PyObject *p, long version)
{
    int flexible = version >= FLEXIBLE_FROM;
    if (!Py_IS_TYPE(p, response_type))
        return 0;
    long long index, error, base, append_time, log_start;
    if (!int_in(SLOT(p, response_at, PR_INDEX), INT32_MIN, INT32_MAX, &index) ||
        !int_in(SLOT(p, response_at, PR_ERROR), INT16_MIN, INT16_MAX, &error) ||
        !int_in(SLOT(p, response_at, PR_BASE), INT64_MIN, INT64_MAX, &base) ||
        !int_in(SLOT(p, response_at, PR_APPEND_TIME), INT64_MIN, INT64_MAX, &append_time) ||
        !int_in(SLOT(p, response_at, PR_LOG_START), INT64_MIN, INT64_MAX, &log_start))
        return 0;
    put_be(o, (uint64_t)index, 4);
    put_be(o, (uint64_t)error, 2);
    put_be(o, (uint64_t)base, 8);
    put_be(o, (uint64_t)append_time, 8);
    if (version >= 5)
        put_be(o, (uint64_t)log_start, 8);
    if (version >= RECORD_ERRORS_FROM) {
        if (!put_record_errors(o, SLOT(p, response_at, PR_RECORD_ERRORS), flexible))
            return 0;
        PyObject *message = SLOT(p, response_at, PR_MESSAGE);
        if (message == NULL || !put_string(o, message, flexible))
            return 0;
    }
    if (flexible && !put_partition_tags(o, SLOT(p, response_at, PR_CURRENT_LEADER), version))
        return 0;
    return o->ok;
}

/* The response's tagged fields (v9+): none, or (v10+) NodeEndpoints as tag 0 from a list
 * of (node_id, host, port, rack) tuples; 0 to decline. */
static int put_response_tags(struct out *o, PyObject *nodes, long version)
{
    if (nodes == Py_None || version < CURRENT_LEADER_FROM) {
        put_be(o, 0, 1);
        return o->ok;
    }
    PyObject *seq = PySequence_Fast(nodes, "");
    if (seq == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    struct out field = {NULL, 0, 0, 1}; /* the field's bytes, to be preceded by their size */
    int ok = n > 0 && put_count(&field, n, 1);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *node = PySequence_Fast_GET_ITEM(seq, i);
        long long id, port;
        ok = PyTuple_Check(node) && PyTuple_GET_SIZE(node) == 4 &&
             int_in(PyTuple_GET_ITEM(node, 0), INT32_MIN, INT32_MAX, &id) &&
             PyTuple_GET_ITEM(node, 1) != Py_None &&
             int_in(PyTuple_GET_ITEM(node, 2), INT32_MIN, INT32_MAX, &port);
        if (ok) {
            put_be(&field, (uint64_t)id, 4);
            ok = put_string(&field, PyTuple_GET_ITEM(node, 1), 1);
        }
        if (ok) {
            put_be(&field, (uint64_t)port, 4);
            ok = put_string(&field, PyTuple_GET_ITEM(node, 3), 1);
        }
        if (ok)
            put_be(&field, 0, 1); /* the endpoint's own tagged fields: none */
        ok = ok && field.ok;
    }
    Py_DECREF(seq);
    if (ok) {
        put_be(o, 1, 1); /* one tagged field */
        put_be(o, 0, 1); /* tag 0 */
        put_uvarint(o, (uint64_t)field.len);
        if (grow(o, field.len)) {
            memcpy(o->p + o->len, field.p, (size_t)field.len);
            o->len += field.len;
        }
        ok = o->ok;
    }
    PyMem_Free(field.p);
    return ok;
}

static int put_count(struct out *o, Py_ssize_t n, int flexible)
{
    if (flexible)
        put_uvarint(o, (uint64_t)n + 1);
    else if (n > INT32_MAX)
        return 0;
    else
        put_be(o, (uint64_t)n, 4);
    return o->ok;
}

/* encode(version, topics, throttle_time_ms, node_endpoints) -> the ProduceResponse body, or
 * None (declined). ``topics``: a sequence of (name, sequence of PartitionResponse);
 * ``node_endpoints``: None, or a list of (node_id, host, port, rack) tuples (v10+). */
static PyObject *encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "encode(version, topics, throttle_time_ms, node_endpoints)");
        return NULL;
    }
    long version = PyLong_AsLong(args[0]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    long long throttle;
    if (version < MIN_VERSION || version > MAX_VERSION || response_type == NULL ||
        !int_in(args[2], INT32_MIN, INT32_MAX, &throttle))
        Py_RETURN_NONE;
    int flexible = version >= FLEXIBLE_FROM;
    PyObject *topics = PySequence_Fast(args[1], "topics must be a sequence");
    if (topics == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    struct out o = {NULL, 0, 0, 1};
    Py_ssize_t n_topics = PySequence_Fast_GET_SIZE(topics);
    int ok = put_count(&o, n_topics, flexible);
    for (Py_ssize_t i = 0; ok && i < n_topics; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(topics, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            ok = 0;
            break;
        }
        ok = put_string(&o, PyTuple_GET_ITEM(item, 0), flexible);
        PyObject *parts = ok ? PySequence_Fast(PyTuple_GET_ITEM(item, 1), "") : NULL;
        if (parts == NULL) {
            PyErr_Clear();
            ok = 0;
            break;
        }
        Py_ssize_t n_parts = PySequence_Fast_GET_SIZE(parts);
        ok = put_count(&o, n_parts, flexible);
        for (Py_ssize_t j = 0; ok && j < n_parts; j++)
            ok = put_partition(&o, PySequence_Fast_GET_ITEM(parts, j), version);
        Py_DECREF(parts);
        if (ok && flexible)
            put_be(&o, 0, 1);
        ok = ok && o.ok;
    }
    Py_DECREF(topics);
    if (ok) {
        put_be(&o, (uint64_t)throttle, 4);
        ok = flexible ? put_response_tags(&o, args[3], version) : o.ok;
    }
    PyObject *result = NULL;
    if (ok)
        result = PyBytes_FromStringAndSize((const char *)o.p, o.len);
    else if (!PyErr_Occurred())
        result = Py_NewRef(Py_None);
    PyMem_Free(o.p);
    return result;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(version, request_cls, topic_cls, partition_cls, timeout_of, "
     "partition_response_cls): the classes decode builds and encode reads."},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "decode(version, body) -> ProduceRequest entity, or None to leave it to Python."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(version, topics, throttle_time_ms, node_endpoints) -> ProduceResponse body, or "
     "None to leave it to Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_produce",
    "Produce requests decoded and responses encoded in C (see produce.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__produce(void) { return PyModule_Create(&module_def); }
