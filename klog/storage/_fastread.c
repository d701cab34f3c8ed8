/*
 * klog.storage._fastread: the sequential reader's case of PartitionLog.read, in C.
 *
 * What it owns: PartitionLog.read and FetchDataInfo.readinto as C methods (read_method,
 * readinto_method) in front of the Python ones, for the case a consumer or follower reading
 * a partition in order hits on every fetch: the fetch offset is a boundary the segment
 * remembered from the previous read (LogSegment._boundaries) and the offset index tells
 * where the region of whole batches ends. Over chained index entries (one per batch, see
 * LogSegment._chained_from) that takes no system call; otherwise the entry guessed from
 * the entries' spacing is confirmed by one 27-byte header read, as LogSegment.read does.
 * Anything else -- a first read, the end of the log, a gap, small batches, an index that
 * disagrees, an error -- declines before changing anything, and the Python method runs,
 * which stays the reference (tests compare both on the same logs).
 *
 * Why C: a 64 KiB read() costs about 6 us here and a system call about 0.3 us; the Python
 * steps of this path cost about as much as the read, with nothing left to remove in
 * Python (see benchmarks/RESULTS.md).
 *
 * The attributes it reads are slots of PartitionLog, LogSegment and OffsetIndex (their
 * __slots__), read at the offsets their member descriptors give, and it builds
 * FetchDataInfo and LogOffsetMetadata the way the Python code does (object.__new__ + slot
 * writes, tuple.__new__): there is no second copy of any state. configure() and
 * read_method() hand it the classes once, at import, and check the slots are there.
 */
#define _GNU_SOURCE /* preadv2, RWF_NOWAIT */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_slots.h"

#include <errno.h>
#include <limits.h>
#include <sys/uio.h>
#include <stdint.h>
#include <unistd.h>

/* Kafka's v2 batch header: baseOffset int64 @0, batchLength int32 @8, magic int8 @16,
 * lastOffsetDelta int32 @23. LOG_OVERHEAD = offset + length fields; 61 = the header. */
#define HEAD_SIZE 27
#define MAGIC_AT 16
#define MAGIC_V2 2
#define LOG_OVERHEAD 12
#define RECORD_BATCH_OVERHEAD 61
#define INDEX_ENTRY_SIZE 8

/* FetchDataInfo's slots, in the order set_region writes them. */
enum {
    F_METADATA, F_PATH, F_FD, F_POSITION, F_SIZE, F_INCOMPLETE, F_ABORTED, F_LAST, F_COUNT
};
static const char *const fetch_fields[F_COUNT] = {
    "fetch_offset_metadata", "path", "fd", "position", "size",
    "first_entry_incomplete", "aborted_transactions", "last_offset",
};

static PyTypeObject *fetch_type = NULL;    /* FetchDataInfo (a slots dataclass) */
static PyTypeObject *metadata_type = NULL; /* LogOffsetMetadata (a NamedTuple) */
static Py_ssize_t fetch_offsets[F_COUNT];
static Py_ssize_t boundary_cache_size = 32;

/* The attributes read, as slots of PartitionLog, LogSegment and OffsetIndex (their
 * __slots__); read at the offsets their member descriptors give. */
enum { L_LOCK, L_END, L_START, L_BASES, L_SEGMENTS, L_COUNT };
static const char *const log_fields[L_COUNT] = {
    "_lock", "_log_end_offset", "_log_start_offset", "_base_offsets", "_segments",
};
enum { S_BOUNDARIES, S_FD, S_PATH, S_BASE, S_SIZE, S_INDEX, S_CHAINED, S_COUNT };
static const char *const segment_fields[S_COUNT] = {
    "_boundaries", "_fd", "log_path", "base_offset", "_size", "_offset_index", "_chained_from",
};
enum { I_MMAP, I_ENTRIES, I_COUNT };
static const char *const index_fields[I_COUNT] = {"_mmap", "_entries"};

static PyTypeObject *segment_type = NULL, *index_type = NULL;
static Py_ssize_t log_offsets[L_COUNT], segment_offsets[S_COUNT], index_offsets[I_COUNT];

/* How reads went, for tests and diagnosis (read_stats()). */
static unsigned long long reads_chained = 0, reads_with_header = 0, reads_first_batch = 0,
                          reads_declined = 0;

/* threading.RLock's type and its acquire/release method descriptors, called directly (the
 * method lookup is a fifth of the lock's cost); other lock types are called by name. */
static PyTypeObject *rlock_type = NULL;
static PyObject *rlock_acquire = NULL, *rlock_release = NULL;

/* lock.acquire() or lock.release(): a new reference to its result, NULL on error. */
static PyObject *call_lock(PyObject *lock, PyObject *descr, PyObject *name)
{
    if (descr != NULL && Py_IS_TYPE(lock, rlock_type))
        return PyObject_Vectorcall(descr, &lock, 1, NULL);
    return PyObject_CallMethodNoArgs(lock, name);
}

/* Interned names. */
static PyObject *s_acquire, *s_release, *s_max_offset, *s_min_one_message,
    *s_include_aborted_txns;

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* An int slot's value; 0 when unset or not an int that fits. */
static int as_long(PyObject *v, long long *out)
{
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* A new FetchDataInfo for a region, as values.py's _region builds it (``pos``: the
 * region's position as an int object, shared by the metadata and the region). */
static PyObject *new_region(PyObject *start_offset, PyObject *segment_base, PyObject *pos,
                            PyObject *path, PyObject *fd, long long size, long long last)
{
    PyObject *values[F_COUNT] = {NULL};
    PyObject *metadata = metadata_type->tp_alloc(metadata_type, 3);
    if (metadata == NULL)
        return NULL;
    PyTuple_SET_ITEM(metadata, 0, Py_NewRef(start_offset));
    PyTuple_SET_ITEM(metadata, 1, Py_NewRef(segment_base));
    PyTuple_SET_ITEM(metadata, 2, Py_NewRef(pos));
    values[F_METADATA] = metadata;
    values[F_PATH] = Py_NewRef(path);
    values[F_FD] = Py_NewRef(fd);
    values[F_POSITION] = Py_NewRef(pos);
    values[F_SIZE] = PyLong_FromLongLong(size);
    values[F_INCOMPLETE] = Py_NewRef(Py_False);
    values[F_ABORTED] = Py_NewRef(Py_None);
    values[F_LAST] = PyLong_FromLongLong(last);
    PyObject *info = NULL;
    if (values[F_SIZE] != NULL && values[F_LAST] != NULL)
        info = fetch_type->tp_alloc(fetch_type, 0);
    if (info == NULL) {
        for (int i = 0; i < F_COUNT; i++)
            Py_XDECREF(values[i]);
        return NULL;
    }
    /* A new object's slots are NULL: store the references directly. */
    for (int i = 0; i < F_COUNT; i++)
        *(PyObject **)((char *)info + fetch_offsets[i]) = values[i];
    return info;
}

/* (a, b, c, d) of ints; NULL on error. */
static PyObject *int_tuple4(long long a, long long b, long long c, long long d)
{
    PyObject *t = PyTuple_New(4);
    if (t == NULL)
        return NULL;
    long long v[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (item == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

/* An offset index entry's position and relative offset (``ix``: the index's bytes). */
#define POS(i) ((long long)be32(ix + (i) * INDEX_ENTRY_SIZE + 4))
#define REL(i) ((long long)(int32_t)be32(ix + (i) * INDEX_ENTRY_SIZE))

/* The last entry in [lo, hi] whose position is <= ``limit`` (positions grow), or lo - 1. */
static long long last_entry_within(const unsigned char *ix, long long lo, long long hi,
                                   long long limit)
{
    if (POS(lo) > limit)
        return lo - 1;
    while (lo < hi) {
        long long mid = lo + (hi - lo + 1) / 2;
        if (POS(mid) <= limit)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The work under the log's lock. Returns a new FetchDataInfo, Py_None (new ref) to
 * decline, or NULL with an exception set. */
static PyObject *read_locked(PyObject *log, PyObject *start_obj, long long start,
                             long long max_bytes, PyObject *max_offset, int min_one_message)
{
    long long log_end, log_start;
    if (!as_long(SLOT(log, log_offsets, L_END), &log_end) ||
        !as_long(SLOT(log, log_offsets, L_START), &log_start))
        goto decline;
    if (start >= log_end || start < log_start || max_bytes < 0)
        goto decline; /* the empty answer and the errors are the Python path's */
    if (max_offset != Py_None) {
        /* A limit at or past the log end holds nothing back (PartitionLog.read). */
        int overflow = 0;
        long long limit = PyLong_AsLongLongAndOverflow(max_offset, &overflow);
        if (PyErr_Occurred() || (overflow <= 0 && limit < log_end))
            goto decline;
    }

    PyObject *bases = SLOT(log, log_offsets, L_BASES);
    PyObject *segments = SLOT(log, log_offsets, L_SEGMENTS);
    if (bases == NULL || !PyList_CheckExact(bases) || PyList_GET_SIZE(bases) == 0 ||
        segments == NULL || !PyDict_CheckExact(segments))
        goto decline;
    PyObject *active_base = PyList_GET_ITEM(bases, PyList_GET_SIZE(bases) - 1);
    int overflow = 0;
    long long active_base_value = PyLong_AsLongLongAndOverflow(active_base, &overflow);
    if (overflow || PyErr_Occurred() || start < active_base_value)
        goto decline;
    PyObject *segment = PyDict_GetItemWithError(segments, active_base);
    if (segment == NULL || !PyObject_TypeCheck(segment, segment_type))
        goto decline;
    Py_INCREF(segment);

    PyObject *result = NULL;
    PyObject *position_obj = NULL;
    Py_buffer view = {0};
    int have_view = 0;

    /* Strong references: the GIL may be let go during the header read. */
    PyObject *boundaries = Py_XNewRef(SLOT(segment, segment_offsets, S_BOUNDARIES));
    PyObject *fd_obj = Py_XNewRef(SLOT(segment, segment_offsets, S_FD));
    PyObject *path = Py_XNewRef(SLOT(segment, segment_offsets, S_PATH));
    PyObject *seg_base_obj = Py_XNewRef(SLOT(segment, segment_offsets, S_BASE));
    long long seg_size, seg_base;
    if (boundaries == NULL || !PyDict_CheckExact(boundaries) || fd_obj == NULL ||
        !PyLong_CheckExact(fd_obj) || path == NULL ||
        !as_long(seg_base_obj, &seg_base) ||
        !as_long(SLOT(segment, segment_offsets, S_SIZE), &seg_size))
        goto done;

    /* The remembered boundary: (position, size of its batch, its last offset, index slot). */
    PyObject *known = PyDict_GetItemWithError(boundaries, start_obj);
    if (known == NULL || !PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 4)
        goto done;
    long long fields[4];
    for (int i = 0; i < 4; i++) {
        PyObject *v = PyTuple_GET_ITEM(known, i);
        if (!PyLong_CheckExact(v))
            goto done;
        fields[i] = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || PyErr_Occurred())
            goto done;
    }
    /* Kept: the dict entry may be replaced below. */
    position_obj = Py_NewRef(PyTuple_GET_ITEM(known, 0));
    long long position = fields[0], first_size = fields[1], last_offset = fields[2];
    long long slot = fields[3];
    if (first_size == 0)
        goto done; /* header not read yet */
    if (position >= seg_size)
        goto done;
    /* min_one_message: the first batch even when it is bigger than max_bytes. */
    if (max_bytes < first_size && !min_one_message)
        goto done;
    long long budget_end = position + (max_bytes >= first_size ? max_bytes : first_size);
    if (budget_end > seg_size)
        budget_end = seg_size;
    long long end = position + first_size;
    /* The offset index: where batches start. */
    const unsigned char *ix = NULL;
    long long entries = 0;
    PyObject *index = SLOT(segment, segment_offsets, S_INDEX);
    if (index != NULL && PyObject_TypeCheck(index, index_type)) {
        PyObject *map = SLOT(index, index_offsets, I_MMAP);
        if (map != NULL && map != Py_None &&
            as_long(SLOT(index, index_offsets, I_ENTRIES), &entries) && entries > 0) {
            if (PyObject_GetBuffer(map, &view, PyBUF_SIMPLE) < 0)
                goto done;
            have_view = 1;
            if (entries <= view.len / INDEX_ENTRY_SIZE)
                ix = (const unsigned char *)view.buf;
        }
    }
    /* Whether the first batch is a chained entry's own (LogSegment._chained_from): then the
     * batches from it on, their sizes and offsets, are read off the index alone. */
    long long chained_from;
    int chained = ix != NULL && 0 <= slot && slot < entries &&
                  as_long(SLOT(segment, segment_offsets, S_CHAINED), &chained_from) &&
                  chained_from <= slot && POS(slot) == position &&
                  seg_base + REL(slot) == last_offset &&
                  (slot + 1 < entries ? POS(slot + 1) == end : end == seg_size);

    /* The region ends at ``jump``, where the batch that does not fit starts; then the
     * region's last offset, and that batch's size, last offset and index slot. */
    long long jump, region_last, next_size, next_last, next_slot;
    if (end >= budget_end) {
        /* The first batch alone; over a chain, the next read's start is known too. */
        reads_first_batch++;
        if (chained && slot + 1 < entries) {
            long long stop = slot + 2 < entries ? POS(slot + 2) : seg_size;
            if (end < stop && stop <= seg_size && REL(slot) < REL(slot + 1)) {
                jump = end;
                region_last = last_offset;
                next_size = stop - end;
                next_last = seg_base + REL(slot + 1);
                next_slot = slot + 1;
                goto found;
            }
        }
        result = new_region(start_obj, seg_base_obj, position_obj, path, fd_obj, first_size,
                            last_offset);
        goto done;
    }
    if (ix == NULL || slot < 0 || slot + 1 >= entries)
        goto done;
    /* The last entry whose batch starts inside the budget: the batches before it fit. */
    long long last_inside = last_entry_within(ix, slot + 1, entries - 1, budget_end);
    if (last_inside <= slot)
        goto done; /* no entry inside: the Python path walks the headers */
    jump = POS(last_inside);
    if (jump < end)
        goto done;
    if (chained) {
        long long stop = last_inside + 1 < entries ? POS(last_inside + 1) : seg_size;
        if (stop <= budget_end)
            goto done; /* the rest of the segment fits: the Python path's case */
        if (!(REL(last_inside - 1) < REL(last_inside) && stop <= seg_size &&
              stop - jump >= RECORD_BATCH_OVERHEAD))
            goto done;
        reads_chained++;
        region_last = seg_base + REL(last_inside - 1);
        next_size = stop - jump;
        next_last = seg_base + REL(last_inside);
        next_slot = last_inside;
        goto found;
    }

    /* Otherwise that entry's batch header says whether it fits, and whether the batch
     * before it ends with the previous entry's offset (then that is the region's last
     * offset; see LogSegment._extend). */
    long long previous = REL(last_inside - 1);
    int fd = (int)PyLong_AsLong(fd_obj);
    if (fd < 0 && PyErr_Occurred())
        goto done;
    unsigned char head[HEAD_SIZE];
    ssize_t got = -1;
#ifdef RWF_NOWAIT
    /* From the page cache without letting go of the GIL (letting go and taking it back
     * costs about as much as the read); only a read that would wait for the disk goes
     * the way os.pread does, with the GIL let go. */
    struct iovec iov = {head, HEAD_SIZE};
    do {
        got = preadv2(fd, &iov, 1, (off_t)jump, RWF_NOWAIT);
    } while (got < 0 && errno == EINTR);
#endif
    if (got != HEAD_SIZE) {
        Py_BEGIN_ALLOW_THREADS
        do {
            got = pread(fd, head, HEAD_SIZE, (off_t)jump);
        } while (got < 0 && errno == EINTR);
        Py_END_ALLOW_THREADS
    }
    if (got != HEAD_SIZE || head[MAGIC_AT] != MAGIC_V2)
        goto done;
    long long base = (int64_t)be64(head);
    long long length = (int32_t)be32(head + 8);
    long long delta = (int32_t)be32(head + 23);
    long long next_end = jump + length + LOG_OVERHEAD;
    if (!(next_end > budget_end && next_end <= seg_size &&
          length + LOG_OVERHEAD >= RECORD_BATCH_OVERHEAD && base == seg_base + previous + 1 &&
          base > last_offset))
        goto done;
    reads_with_header++;
    region_last = base - 1;
    next_size = next_end - jump;
    next_last = base + delta;
    next_slot = last_inside;

found:;
    /* The next sequential read starts at the batch that did not fit (LogSegment._remember). */
    PyObject *next = int_tuple4(jump, next_size, next_last, next_slot);
    PyObject *key = PyLong_FromLongLong(region_last + 1);
    if (next == NULL || key == NULL) {
        Py_XDECREF(next);
        Py_XDECREF(key);
        goto done; /* declines: the Python path meets the same shortage and reports it */
    }
    if (PyDict_GET_SIZE(boundaries) >= boundary_cache_size)
        PyDict_Clear(boundaries);
    int stored = PyDict_SetItem(boundaries, key, next);
    Py_DECREF(next);
    Py_DECREF(key);
    if (stored < 0)
        goto done;
    result = new_region(start_obj, seg_base_obj, position_obj, path, fd_obj, jump - position,
                        region_last);
    goto done;

done:
    if (have_view)
        PyBuffer_Release(&view);
    Py_XDECREF(boundaries);
    Py_XDECREF(fd_obj);
    Py_XDECREF(path);
    Py_XDECREF(seg_base_obj);
    Py_XDECREF(position_obj);
    Py_DECREF(segment);
    if (result != NULL)
        return result;
    if (PyErr_Occurred())
        PyErr_Clear(); /* declining: the Python path reports whatever is wrong */
    Py_RETURN_NONE;

decline:
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_RETURN_NONE;
}

/* func(self, *args, **kw) for a method's vectorcall arguments: how both C methods hand a
 * call on to the Python method, arguments as they came (Python raises any TypeError). */
static PyObject *call_with_self(PyObject *func, PyObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[8];
    PyObject **stack = small;
    if (1 + nargs + nkw > 8) {
        stack = PyMem_Malloc((1 + nargs + nkw) * sizeof(PyObject *));
        if (stack == NULL)
            return PyErr_NoMemory();
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++)
        stack[i + 1] = args[i];
    PyObject *out = PyObject_Vectorcall(func, stack, 1 + nargs, kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return out;
}

/* PartitionLog.read in Python (the reference, and every case read_fast declines). */
static PyObject *python_read = NULL;

/* The fast path: a new FetchDataInfo, Py_None (new ref) to decline, NULL on error. */
static PyObject *read_fast(PyObject *log, PyObject *start_obj, PyObject *max_bytes_obj,
                           PyObject *max_offset, int min_one_message)
{
    if (python_read == NULL || !PyLong_CheckExact(start_obj) ||
        !PyLong_CheckExact(max_bytes_obj) || (max_offset != Py_None && !PyLong_Check(max_offset)))
        Py_RETURN_NONE;
    int overflow = 0;
    long long start = PyLong_AsLongLongAndOverflow(start_obj, &overflow);
    if (overflow || PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    long long max_bytes = PyLong_AsLongLongAndOverflow(max_bytes_obj, &overflow);
    if (overflow || PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *lock = SLOT(log, log_offsets, L_LOCK);
    if (lock == NULL)
        Py_RETURN_NONE;
    Py_INCREF(lock);
    PyObject *acquired = call_lock(lock, rlock_acquire, s_acquire);
    if (acquired == NULL) {
        Py_DECREF(lock);
        return NULL;
    }
    Py_DECREF(acquired);
    PyObject *result = read_locked(log, start_obj, start, max_bytes, max_offset,
                                   min_one_message);
    /* Release whatever happened, keeping read_locked's exception if it raised. */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *released = call_lock(lock, rlock_release, s_release);
    Py_DECREF(lock);
    if (released == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        Py_XDECREF(result);
        return NULL;
    }
    Py_DECREF(released);
    PyErr_Restore(type, value, traceback);
    return result;
}

/* PartitionLog.read(self, start_offset, max_bytes, max_offset=None, min_one_message=True,
 * include_aborted_txns=False): the fast path when it applies, else the Python method with
 * the same arguments. */
static PyObject *read_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *slots[5] = {NULL, NULL, Py_None, Py_True, Py_False};
    int usable = python_read != NULL && nargs >= 2 && nargs <= 5;
    for (Py_ssize_t i = 0; usable && i < nargs; i++)
        slots[i] = args[i];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; usable && i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int at = -1;
        if (name == s_max_offset || PyUnicode_Compare(name, s_max_offset) == 0)
            at = 2;
        else if (name == s_min_one_message || PyUnicode_Compare(name, s_min_one_message) == 0)
            at = 3;
        else if (name == s_include_aborted_txns ||
                 PyUnicode_Compare(name, s_include_aborted_txns) == 0)
            at = 4;
        if (at < nargs) /* unknown or given twice: Python raises the TypeError */
            usable = 0;
        else
            slots[at] = args[nargs + i];
    }
    if (PyErr_Occurred())
        return NULL;
    if (usable) {
        int aborted = PyObject_IsTrue(slots[4]);
        int min_one = PyObject_IsTrue(slots[3]);
        if (aborted < 0 || min_one < 0)
            return NULL;
        if (!aborted) {
            PyObject *info = read_fast(self, slots[0], slots[1], slots[2], min_one);
            if (info != Py_None)
                return info; /* a region, or NULL with an exception */
            Py_DECREF(info);
        }
    }
    reads_declined++;
    if (python_read == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "klog.storage._fastread is not configured");
        return NULL;
    }
    return call_with_self(python_read, self, args, nargs, kwnames);
}

static PyMethodDef read_def = {
    "read", (PyCFunction)(void (*)(void))read_method, METH_FASTCALL | METH_KEYWORDS,
    "read(start_offset, max_bytes, max_offset=None, min_one_message=True,\n"
    "     include_aborted_txns=False) -> FetchDataInfo\n\n"
    "PartitionLog.read: a sequential reader's read of the active segment in C\n"
    "(klog/storage/_fastread.c), every other case by the Python method (python_read)."};

PyDoc_STRVAR(read_method_doc,
"read_method(PartitionLog, python_read) -> method descriptor\n\n"
"PartitionLog.read with the fast path in front of python_read (the Python method).");

static PyObject *make_read_method(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read_method(PartitionLog, python_read)");
        return NULL;
    }
    if (segment_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    Py_ssize_t offsets[L_COUNT];
    if (slot_offsets((PyTypeObject *)args[0], log_fields, L_COUNT, offsets) < 0)
        return NULL;
    memcpy(log_offsets, offsets, sizeof(offsets));
    Py_INCREF(args[1]);
    Py_XSETREF(python_read, args[1]);
    return PyDescr_NewMethod((PyTypeObject *)args[0], &read_def);
}

/* FetchDataInfo.readinto in Python (the reference, and every case readinto_method
 * passes on: no descriptor, a short read, an error, a buffer too small). */
static PyObject *python_readinto = NULL;

/* pread of exactly ``size`` bytes, first from the page cache with the GIL held, then as
 * os.pread does with it let go; 1 when all were read, 0 otherwise (errno kept or 0). */
static int pread_exact(int fd, char *into, Py_ssize_t size, long long position)
{
    Py_ssize_t done = 0;
    ssize_t got = -1;
#ifdef RWF_NOWAIT
    struct iovec iov = {into, (size_t)size};
    do {
        got = preadv2(fd, &iov, 1, (off_t)position, RWF_NOWAIT);
    } while (got < 0 && errno == EINTR);
    if (got > 0)
        done = got;
#endif
    if (done < size) {
        Py_BEGIN_ALLOW_THREADS
        while (done < size) {
            got = pread(fd, into + done, (size_t)(size - done), (off_t)(position + done));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break;
            done += got;
        }
        Py_END_ALLOW_THREADS
    }
    return done == size;
}

/* FetchDataInfo.readinto(buf): the region read into buf in one pread; the bytes read. */
static PyObject *readinto_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    if (python_readinto == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "klog.storage._fastread is not configured");
        return NULL;
    }
    if (nargs == 1 && kwnames == NULL && fetch_type != NULL &&
        PyObject_TypeCheck(self, fetch_type)) {
        PyObject *fd_obj = *(PyObject **)((char *)self + fetch_offsets[F_FD]);
        PyObject *size_obj = *(PyObject **)((char *)self + fetch_offsets[F_SIZE]);
        PyObject *pos_obj = *(PyObject **)((char *)self + fetch_offsets[F_POSITION]);
        if (fd_obj != NULL && size_obj != NULL && pos_obj != NULL && PyLong_CheckExact(fd_obj) &&
            PyLong_CheckExact(size_obj) && PyLong_CheckExact(pos_obj)) {
            int overflow = 0;
            long fd = PyLong_AsLong(fd_obj);
            Py_ssize_t size = PyLong_AsSsize_t(size_obj);
            long long position = PyLong_AsLongLongAndOverflow(pos_obj, &overflow);
            Py_buffer view;
            if (PyErr_Occurred() || overflow || fd < 0 || fd > INT_MAX || size <= 0 ||
                position < 0) {
                PyErr_Clear();
            }
            else if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
                PyErr_Clear(); /* the Python method reports what is wrong with buf */
            }
            else {
                int ok = view.len >= size && pread_exact((int)fd, view.buf, size, position);
                PyBuffer_Release(&view);
                if (ok)
                    return PyLong_FromSsize_t(size);
            }
        }
    }
    return call_with_self(python_readinto, self, args, nargs, kwnames);
}

static PyMethodDef readinto_def = {
    "readinto", (PyCFunction)(void (*)(void))readinto_method, METH_FASTCALL | METH_KEYWORDS,
    "readinto(buf) -> int\n\n"
    "FetchDataInfo.readinto: the region read into buf (at least size bytes) with one pread\n"
    "(klog/storage/_fastread.c); the number of bytes read."};

PyDoc_STRVAR(readinto_method_doc,
"readinto_method(FetchDataInfo, python_readinto) -> method descriptor\n\n"
"FetchDataInfo.readinto in C in front of python_readinto (the Python method).");

static PyObject *make_readinto_method(PyObject *module, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "readinto_method(FetchDataInfo, python_readinto)");
        return NULL;
    }
    Py_INCREF(args[1]);
    Py_XSETREF(python_readinto, args[1]);
    return PyDescr_NewMethod((PyTypeObject *)args[0], &readinto_def);
}

PyDoc_STRVAR(read_stats_doc,
"read_stats() -> dict\n\n"
"Reads since start-up by how PartitionLog.read answered: 'chained' (index only),\n"
"'header' (one header read), 'first_batch' (the first batch alone), 'python' (declined).");

static PyObject *read_stats(PyObject *module, PyObject *unused)
{
    return Py_BuildValue("{sKsKsKsK}", "chained", reads_chained, "header", reads_with_header,
                         "first_batch", reads_first_batch, "python", reads_declined);
}

PyDoc_STRVAR(configure_doc,
"configure(FetchDataInfo, LogOffsetMetadata, boundary_cache_size, LogSegment, OffsetIndex)\n\n"
"The classes the read path builds and reads (checked: the fields it uses must be object\n"
"slots). Then read_method(PartitionLog, python_read).");

static PyObject *configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyType_Check(args[0]) || !PyType_Check(args[1]) ||
        !PyLong_Check(args[2]) || !PyType_Check(args[3]) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "configure(FetchDataInfo, LogOffsetMetadata, "
                                         "boundary_cache_size, LogSegment, OffsetIndex)");
        return NULL;
    }
    PyTypeObject *fetch = (PyTypeObject *)args[0];
    PyTypeObject *metadata = (PyTypeObject *)args[1];
    PyTypeObject *segment = (PyTypeObject *)args[3];
    PyTypeObject *index = (PyTypeObject *)args[4];
    if (!PyType_IsSubtype(metadata, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "LogOffsetMetadata must be a tuple type");
        return NULL;
    }
    Py_ssize_t f_offsets[F_COUNT], s_offsets[S_COUNT], i_offsets[I_COUNT];
    if (slot_offsets(fetch, fetch_fields, F_COUNT, f_offsets) < 0 ||
        slot_offsets(segment, segment_fields, S_COUNT, s_offsets) < 0 ||
        slot_offsets(index, index_fields, I_COUNT, i_offsets) < 0)
        return NULL;
    Py_ssize_t cache = PyLong_AsSsize_t(args[2]);
    if (cache < 1) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "boundary_cache_size must be positive");
        return NULL;
    }
    Py_XSETREF(fetch_type, (PyTypeObject *)Py_NewRef(fetch));
    Py_XSETREF(metadata_type, (PyTypeObject *)Py_NewRef(metadata));
    Py_XSETREF(segment_type, (PyTypeObject *)Py_NewRef(segment));
    Py_XSETREF(index_type, (PyTypeObject *)Py_NewRef(index));
    memcpy(fetch_offsets, f_offsets, sizeof(f_offsets));
    memcpy(segment_offsets, s_offsets, sizeof(s_offsets));
    memcpy(index_offsets, i_offsets, sizeof(i_offsets));
    boundary_cache_size = cache;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"read_method", (PyCFunction)(void (*)(void))make_read_method, METH_FASTCALL, read_method_doc},
    {"readinto_method", (PyCFunction)(void (*)(void))make_readinto_method, METH_FASTCALL,
     readinto_method_doc},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, configure_doc},
    {"read_stats", read_stats, METH_NOARGS, read_stats_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastread",
    "The sequential reader's case of PartitionLog.read, in C (see the source's header).", -1,
    methods, NULL, NULL, NULL, NULL,
};

#define INTERN(var, text)                                                                     \
    do {                                                                                      \
        var = PyUnicode_InternFromString(text);                                               \
        if (var == NULL)                                                                      \
            return NULL;                                                                      \
    } while (0)

PyMODINIT_FUNC PyInit__fastread(void)
{
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    PyObject *threading = PyImport_ImportModule("_thread");
    if (threading == NULL)
        return NULL;
    rlock_type = (PyTypeObject *)PyObject_GetAttrString(threading, "RLock");
    Py_DECREF(threading);
    if (rlock_type == NULL)
        return NULL;
    if (!PyType_Check(rlock_type)) {
        PyErr_SetString(PyExc_TypeError, "_thread.RLock is not a type");
        return NULL;
    }
    rlock_acquire = PyObject_GetAttr((PyObject *)rlock_type, s_acquire);
    rlock_release = PyObject_GetAttr((PyObject *)rlock_type, s_release);
    if (rlock_acquire == NULL || rlock_release == NULL)
        return NULL;
    INTERN(s_max_offset, "max_offset");
    INTERN(s_min_one_message, "min_one_message");
    INTERN(s_include_aborted_txns, "include_aborted_txns");
    return PyModule_Create(&module_def);
}
