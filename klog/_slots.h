/* Slots of Python classes read and written from C, shared by klog's C extensions.
 *
 * The extensions build kio's entities and klog's own __slots__ classes directly: they look
 * up each named slot's offset once (slot_offsets, at configure time) and then read or store
 * the slot at that offset (SLOT), without attribute lookups on the hot path. Only plain
 * object slots (T_OBJECT_EX, what __slots__ creates) are accepted, so a class whose field
 * became a property is refused at configure time instead of being written through. */
#ifndef KLOG_SLOTS_H
#define KLOG_SLOTS_H

#include <Python.h>
#include <structmember.h>

/* A slot's value (borrowed; NULL when unset). */
#define SLOT(obj, offsets, i) (*(PyObject **)((char *)(obj) + (offsets)[i]))

/* The offsets of ``names``' slots in ``type``; -1 with TypeError when one is not a slot. */
static inline int slot_offsets(PyTypeObject *type, const char *const *names, int n,
                               Py_ssize_t *out)
{
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString((PyObject *)type, names[i]);
        if (descr == NULL)
            return -1;
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok)
            out[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, names[i]);
            return -1;
        }
    }
    return 0;
}

#endif
