/* The per-record walk of broker/log/log_validator.py, in C: a produce of 100-byte records costs
 * the broker well under a microsecond per record, and the same walk in Python doubled it.
 *
 * walk_records(buffer, start, end, count[, require_key]) -> None | (record_index, message) | [index]
 *
 * Checks that buffer[start:end] holds exactly `count` v2 records (Kafka's DefaultRecord: varint
 * length, int8 attributes, varlong timestamp delta, varint offset delta, key, value, headers),
 * that each record's fields fill its length exactly, and that record i has offset delta i: the
 * first record that breaks this is the answer, a tuple. With `require_key` (a compacted topic),
 * the walk goes on past keyless records and answers the list of their indexes (KIP-467: the
 * producer fails only those), unless a record breaks the format.
 * log_validator.walk_records_py is the reference implementation; the tests run both on the same
 * inputs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_varint.h"

static PyObject *fail(Py_ssize_t index, const char *message) {
    return Py_BuildValue("(ns)", index, message);
}

/* A varint-sized byte field (key, value, header value): -1 is null if `nullable`. */
static int skip_bytes(cursor *c, int nullable) {
    int64_t n;
    if (read_varint(c, 5, &n)) return -1;
    if (n < 0) return (n == -1 && nullable) ? 0 : -1;
    if (n > c->end - c->p) return -1;
    c->p += n;
    return 0;
}

static PyObject *walk_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end, count;
    int require_key = 0;
    if (!PyArg_ParseTuple(args, "y*nnn|p", &view, &start, &end, &count, &require_key)) return NULL;
    PyObject *result = NULL;
    if (start < 0 || end > view.len || start > end || count < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk_records: bad bounds");
        return NULL;
    }
    cursor c = {(const unsigned char *)view.buf + start, (const unsigned char *)view.buf + end};
    PyObject *keyless = NULL; /* created at the first keyless record only */
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        int64_t length, value;
        if (c.p >= c.end) { result = fail(i, "fewer records than the batch's record count"); goto done; }
        if (read_varint(&c, 5, &length) || length < 0 || length > c.end - c.p) {
            result = fail(i, "invalid record size"); goto done;
        }
        cursor r = {c.p, c.p + length};
        c.p += length;
        if (r.p >= r.end) { result = fail(i, "record too short for its attributes"); goto done; }
        r.p++; /* attributes */
        if (read_varint(&r, 10, &value)) { result = fail(i, "invalid timestamp delta"); goto done; }
        if (read_varint(&r, 5, &value)) { result = fail(i, "invalid offset delta"); goto done; }
        if (value != i) { result = fail(i, "offset delta does not match the record's position"); goto done; }
        if (require_key && r.p < r.end && *r.p == 0x01) {
            if (keyless == NULL && (keyless = PyList_New(0)) == NULL) goto done;
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(keyless, index)) { Py_XDECREF(index); goto done; }
            Py_DECREF(index);
        }
        if (skip_bytes(&r, 1)) { result = fail(i, "invalid key size"); goto done; }
        if (skip_bytes(&r, 1)) { result = fail(i, "invalid value size"); goto done; }
        int64_t headers;
        if (read_varint(&r, 5, &headers) || headers < 0 || headers > r.end - r.p) {
            result = fail(i, "invalid number of record headers"); goto done;
        }
        for (int64_t h = 0; h < headers; h++) {
            if (skip_bytes(&r, 0)) { result = fail(i, "invalid header key size"); goto done; }
            if (skip_bytes(&r, 1)) { result = fail(i, "invalid header value size"); goto done; }
        }
        if (r.p != r.end) { result = fail(i, "record fields do not fill the record's size"); goto done; }
    }
    if (c.p != c.end) { result = fail(count, "bytes remain after the batch's last record"); goto done; }
    result = keyless != NULL ? Py_NewRef(keyless) : Py_NewRef(Py_None);
done:
    Py_XDECREF(keyless);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS,
     "walk_records(buffer, start, end, count, require_key=False) -> None | (record_index, message)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
