/* The union of spans, one pass over spans already sorted by group and then by start.
 *
 * tracekit.analysis.intervals sorts a frame of spans (polars sorts well) and hands its columns
 * here as int64 polars Series without nulls, read through the Arrow C stream interface
 * (tracekit/arrow_c_abi.h): group (each row's group index, or None for one group), start and end.
 * A span opens a merged one when it is the first of its group or starts after every earlier span
 * of its group has ended (a span that touches the one before joins it):
 *
 * merge_sorted(group, start, end) -> (first, end): for each merged span, the row it starts at
 *   and its end (the largest end of its rows), as int64 bytes;
 * covered_sorted(group, start, end) -> (first, covered): for each group, its first row and the
 *   time its union covers (the sum of its merged spans' lengths), as int64 bytes.
 *
 * Both are what intervals.merge_spans and intervals.covered_ns compute in polars queries, whose
 * fixed cost per query, not their rows, is most of a rank's interval arithmetic; the tests hold
 * the two roads equal. TypeError for a column that is not int64, holds a null, or differs in
 * length from the others.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../arrow_c_abi.h"

/* One column's values, copied out of its Arrow chunks into one array. */
typedef struct {
    int64_t *values;
    int64_t rows;
} Column;

typedef struct {
    Column group, start, end;
    int has_group;
} Columns;

static void column_free(Column *c) {
    free(c->values);
    c->values = NULL;
}

static void columns_release(Columns *c) {
    column_free(&c->group);
    column_free(&c->start);
    column_free(&c->end);
}

static int stream_error(const char *name, const char *what) {
    PyErr_Format(PyExc_TypeError, "%s: %s", name, what);
    return -1;
}

/* Reads ``series`` (anything with __arrow_c_stream__: an int64 polars Series without nulls) into
 * ``out``, one copy of its chunks' values (a memcpy: far less than the pass). */
static int column_read(PyObject *series, const char *name, Column *out) {
    PyObject *capsule = PyObject_CallMethod(series, "__arrow_c_stream__", NULL);
    if (capsule == NULL) return -1;
    struct ArrowArrayStream *stream = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (stream == NULL) {
        Py_DECREF(capsule);
        return -1;
    }
    int status = 0;
    struct ArrowSchema schema = {0};
    if (stream->get_schema(stream, &schema) != 0) status = stream_error(name, "no schema");
    else if (strcmp(schema.format, "l") != 0) status = stream_error(name, "not int64");
    if (schema.release) schema.release(&schema);
    size_t capacity = 0;
    out->rows = 0;
    while (status == 0) {
        struct ArrowArray chunk = {0};
        if (stream->get_next(stream, &chunk) != 0) {
            status = stream_error(name, "a chunk could not be read");
            break;
        }
        if (chunk.release == NULL) break; /* the end of the stream */
        if (chunk.null_count != 0) status = stream_error(name, "holds nulls");
        else if (chunk.length > 0) {
            if ((size_t)(out->rows + chunk.length) > capacity) {
                capacity = (size_t)(out->rows + chunk.length) * 2;
                int64_t *grown = realloc(out->values, capacity * 8);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    status = -1;
                } else out->values = grown;
            }
            if (status == 0) {
                memcpy(out->values + out->rows, (const int64_t *)chunk.buffers[1] + chunk.offset, (size_t)chunk.length * 8);
                out->rows += chunk.length;
            }
        }
        chunk.release(&chunk);
    }
    stream->release(stream);
    Py_DECREF(capsule);
    return status;
}

static int columns_open(Columns *c, PyObject *args) {
    PyObject *group, *start, *end;
    memset(c, 0, sizeof(*c));
    if (!PyArg_ParseTuple(args, "OOO", &group, &start, &end)) return -1;
    if (column_read(start, "start", &c->start) < 0 || column_read(end, "end", &c->end) < 0) return -1;
    c->has_group = group != Py_None;
    if (c->has_group && column_read(group, "group", &c->group) < 0) return -1;
    if (c->end.rows != c->start.rows || (c->has_group && c->group.rows != c->start.rows)) {
        PyErr_SetString(PyExc_TypeError, "group, start and end differ in length");
        return -1;
    }
    return 0;
}

/* Two int64 outputs of at most ``rows`` values each, returned as bytes of the ``used`` first. */
static PyObject *pair(int64_t *first, int64_t *second, int64_t used) {
    PyObject *a = PyBytes_FromStringAndSize((const char *)first, used * 8);
    PyObject *b = a ? PyBytes_FromStringAndSize((const char *)second, used * 8) : NULL;
    PyObject *result = b ? PyTuple_Pack(2, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return result;
}

/* One pass over the columns into two outputs of at most one value per row; returns how many it wrote. */
typedef int64_t (*Pass)(const Columns *c, int64_t *first, int64_t *second);

static int64_t merge_pass(const Columns *c, int64_t *firsts, int64_t *ends) {
    const int64_t *group = c->has_group ? c->group.values : NULL, *start = c->start.values, *end = c->end.values;
    int64_t merged = 0;
    for (int64_t i = 0; i < c->start.rows; i++) {
        int opens = merged == 0 || start[i] > ends[merged - 1] || (group && group[i] != group[i - 1]);
        if (opens) {
            firsts[merged] = i;
            ends[merged++] = end[i];
        } else if (end[i] > ends[merged - 1]) {
            ends[merged - 1] = end[i];
        }
    }
    return merged;
}

static int64_t covered_pass(const Columns *c, int64_t *firsts, int64_t *covered) {
    const int64_t *group = c->has_group ? c->group.values : NULL, *start = c->start.values, *end = c->end.values;
    int64_t groups = 0, rows = c->start.rows;
    int64_t opened = 0, reach = 0; /* the merged span being built: its start and end */
    for (int64_t i = 0; i < rows; i++) {
        int new_group = i == 0 || (group && group[i] != group[i - 1]);
        if (new_group || start[i] > reach) {
            if (i > 0) covered[groups - 1] += reach - opened;
            if (new_group) {
                firsts[groups] = i;
                covered[groups++] = 0;
            }
            opened = start[i];
            reach = end[i];
        } else if (end[i] > reach) {
            reach = end[i];
        }
    }
    if (rows > 0) covered[groups - 1] += reach - opened;
    return groups;
}

/* ``pass`` over the columns in ``args``, without the GIL; its two outputs as a pair of bytes. */
static PyObject *run_pass(PyObject *args, Pass pass) {
    Columns c;
    PyObject *result = NULL;
    int64_t *first = NULL, *second = NULL;
    if (columns_open(&c, args) == 0) {
        size_t bytes = (size_t)(c.start.rows > 0 ? c.start.rows : 1) * 8;
        first = malloc(bytes);
        second = malloc(bytes);
        if (first == NULL || second == NULL) {
            PyErr_NoMemory();
        } else {
            int64_t used;
            Py_BEGIN_ALLOW_THREADS
            used = pass(&c, first, second);
            Py_END_ALLOW_THREADS
            result = pair(first, second, used);
        }
    }
    free(first);
    free(second);
    columns_release(&c);
    return result;
}

static PyObject *merge_sorted(PyObject *self, PyObject *args) {
    (void)self;
    return run_pass(args, merge_pass);
}

static PyObject *covered_sorted(PyObject *self, PyObject *args) {
    (void)self;
    return run_pass(args, covered_pass);
}

static PyMethodDef METHODS[] = {
    {"merge_sorted", merge_sorted, METH_VARARGS,
     "merge_sorted(group, start, end) -> (first, end): the merged spans of sorted spans, as int64 bytes."},
    {"covered_sorted", covered_sorted, METH_VARARGS,
     "covered_sorted(group, start, end) -> (first, covered): each group's first row and union's time."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, .m_name = "_spans", .m_size = -1, .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__spans(void) { return PyModule_Create(&MODULE); }
