/* The log cleaner's per-record work (broker/log/cleaner.py), in C: every record of a cleaned log
 * is read twice, once to map its key's latest offset and once to keep or drop it, and the same
 * loops in Python cost several times the rest of a cleaning.
 *
 * Both functions read a v2 records section (Kafka's DefaultRecord: varint length, int8
 * attributes, varlong timestamp delta, varint offset delta, key, value, headers) holding `count`
 * records, and raise ValueError when it does not parse. The offset map is a dict from map key to
 * offset: the key itself when it is at most 16 bytes, else `digest(key)` (the caller passes a
 * function returning the key's MD5, from hashlib).
 *
 * map_keys(buffer, count, base_offset, first_dirty, offsets, digest[, latest, latest_base]) -> None
 *     offsets[map key] = offset for every keyed record at or past `first_dirty`, in order. With
 *     `latest` (a bytearray, one bit per offset from `latest_base`), the bit of each mapped offset
 *     is set and that of the offset it replaces cleared: once the map is built, the set bits are
 *     the records that survive, so a batch with none (or only such) need not be read again.
 * count_latest(latest, start, end) -> the number of set bits in [start, end).
 * filter_records(buffer, count, base_offset, offsets, map_end, retain_deletes, digest)
 *     -> (kept, None) when every record stays, else (kept, the kept records' bytes)
 *     A record stays when it is at or past `map_end`, or it has a key whose mapped offset is not
 *     above its own and it has a value (or `retain_deletes`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_varint.h"

#define SHORT_KEY 16

typedef struct {
    Py_ssize_t start, end;     /* the record's bytes, its length varint included */
    int64_t delta;             /* offset delta */
    const unsigned char *key;  /* NULL: no key */
    Py_ssize_t key_len;
    int has_value;
} record;

/* The next record of `c`; an error message, or NULL. */
static const char *next_record(cursor *c, const unsigned char *base, record *rec) {
    int64_t length, value, key_len, value_len;
    rec->start = (Py_ssize_t)(c->p - base);
    if (read_varint(c, 5, &length) || length < 0 || length > c->end - c->p) return "invalid record size";
    cursor r = {c->p, c->p + length};
    c->p += length;
    rec->end = (Py_ssize_t)(c->p - base);
    if (r.p >= r.end) return "record too short";
    r.p++; /* attributes */
    if (read_varint(&r, 10, &value)) return "invalid timestamp delta";
    if (read_varint(&r, 5, &rec->delta)) return "invalid offset delta";
    if (read_varint(&r, 5, &key_len) || key_len < -1 || key_len > r.end - r.p) return "invalid key size";
    if (key_len < 0) {
        rec->key = NULL;
        rec->key_len = 0;
    } else {
        rec->key = r.p;
        rec->key_len = (Py_ssize_t)key_len;
        r.p += key_len;
    }
    if (read_varint(&r, 5, &value_len) || value_len < -1) return "invalid value size";
    rec->has_value = value_len >= 0;
    return NULL;
}

/* The offset map's key for a record's key (a new reference), or NULL with an exception set. */
static PyObject *map_key(const record *rec, PyObject *digest) {
    PyObject *key = PyBytes_FromStringAndSize((const char *)rec->key, rec->key_len);
    if (key == NULL || rec->key_len <= SHORT_KEY) return key;
    PyObject *hashed = PyObject_CallOneArg(digest, key);
    Py_DECREF(key);
    if (hashed != NULL && !PyBytes_Check(hashed)) {
        Py_DECREF(hashed);
        PyErr_SetString(PyExc_TypeError, "digest must return bytes");
        return NULL;
    }
    return hashed;
}

static int check_bounds(const Py_buffer *view, Py_ssize_t count) {
    if (count < 0 || count > view->len) {
        PyErr_SetString(PyExc_ValueError, "bad record count");
        return -1;
    }
    return 0;
}

/* Sets (1) or clears (0) the bit of `offset` in `bits`, when it has one. */
static void set_bit(Py_buffer *bits, long long base, long long offset, int on) {
    if (bits->buf == NULL || offset < base || (offset - base) / 8 >= bits->len) return;
    unsigned char *byte = (unsigned char *)bits->buf + (offset - base) / 8;
    unsigned char mask = (unsigned char)(1u << ((offset - base) % 8));
    *byte = on ? (unsigned char)(*byte | mask) : (unsigned char)(*byte & ~mask);
}

static PyObject *map_keys(PyObject *self, PyObject *args) {
    Py_buffer view, bits = {0};
    Py_ssize_t count;
    long long base_offset, first_dirty, latest_base = 0;
    PyObject *offsets, *digest;
    if (!PyArg_ParseTuple(args, "y*nLLO!O|w*L", &view, &count, &base_offset, &first_dirty, &PyDict_Type, &offsets,
                          &digest, &bits, &latest_base))
        return NULL;
    if (check_bounds(&view, count)) {
        PyBuffer_Release(&view);
        if (bits.buf != NULL) PyBuffer_Release(&bits);
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)view.buf;
    cursor c = {base, base + view.len};
    const char *error = NULL;
    int failed = 0;
    for (Py_ssize_t i = 0; i < count && !failed; i++) {
        record rec;
        if ((error = next_record(&c, base, &rec)) != NULL) break;
        long long offset = base_offset + rec.delta;
        if (rec.key == NULL || offset < first_dirty) continue;
        PyObject *key = map_key(&rec, digest);
        if (key == NULL) { failed = 1; break; }
        if (bits.buf != NULL) {
            PyObject *old = PyDict_GetItemWithError(offsets, key); /* borrowed */
            if (old != NULL) {
                long long replaced = PyLong_AsLongLong(old);
                if (replaced == -1 && PyErr_Occurred()) { Py_DECREF(key); failed = 1; break; }
                set_bit(&bits, latest_base, replaced, 0);
            } else if (PyErr_Occurred()) {
                Py_DECREF(key);
                failed = 1;
                break;
            }
            set_bit(&bits, latest_base, offset, 1);
        }
        PyObject *value = PyLong_FromLongLong(offset);
        failed = value == NULL || PyDict_SetItem(offsets, key, value) != 0;
        Py_DECREF(key);
        Py_XDECREF(value);
    }
    PyBuffer_Release(&view);
    if (bits.buf != NULL) PyBuffer_Release(&bits);
    if (failed) return NULL;
    if (error != NULL) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* 1 when the record stays, 0 when it goes, -1 with an exception set. */
static int keep(const record *rec, long long offset, PyObject *offsets, long long map_end, int retain_deletes,
                PyObject *digest) {
    if (offset >= map_end) return 1;
    if (rec->key == NULL || !(rec->has_value || retain_deletes)) return 0;
    PyObject *key = map_key(rec, digest);
    if (key == NULL) return -1;
    PyObject *latest = PyDict_GetItemWithError(offsets, key); /* borrowed */
    Py_DECREF(key);
    if (latest == NULL) return PyErr_Occurred() ? -1 : 1;
    long long mapped = PyLong_AsLongLong(latest);
    if (mapped == -1 && PyErr_Occurred()) return -1;
    return offset >= mapped;
}

static PyObject *filter_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, map_end;
    PyObject *offsets, *digest;
    int retain_deletes;
    if (!PyArg_ParseTuple(args, "y*nLO!LpO", &view, &count, &base_offset, &PyDict_Type, &offsets, &map_end,
                          &retain_deletes, &digest))
        return NULL;
    if (check_bounds(&view, count)) { PyBuffer_Release(&view); return NULL; }
    const unsigned char *base = (const unsigned char *)view.buf;
    cursor c = {base, base + view.len};
    /* the kept runs of consecutive records, as [start, end) pairs */
    Py_ssize_t *runs = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (size_t)(count > 0 ? count : 1));
    if (runs == NULL) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    Py_ssize_t nruns = 0, kept = 0, size = 0;
    const char *error = NULL;
    int failed = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record rec;
        if ((error = next_record(&c, base, &rec)) != NULL) break;
        int stays = keep(&rec, base_offset + rec.delta, offsets, map_end, retain_deletes, digest);
        if (stays < 0) { failed = 1; break; }
        if (!stays) continue;
        kept++;
        size += rec.end - rec.start;
        if (nruns > 0 && runs[2 * nruns - 1] == rec.start) {
            runs[2 * nruns - 1] = rec.end;
        } else {
            runs[2 * nruns] = rec.start;
            runs[2 * nruns + 1] = rec.end;
            nruns++;
        }
    }
    PyObject *result = NULL;
    if (failed) goto done;
    if (error != NULL) { PyErr_SetString(PyExc_ValueError, error); goto done; }
    if (kept == count) { result = Py_BuildValue("(nO)", kept, Py_None); goto done; }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) goto done;
    char *dst = PyBytes_AS_STRING(out);
    for (Py_ssize_t r = 0; r < nruns; r++) {
        Py_ssize_t n = runs[2 * r + 1] - runs[2 * r];
        memcpy(dst, base + runs[2 * r], (size_t)n);
        dst += n;
    }
    result = Py_BuildValue("(nN)", kept, out);
done:
    PyMem_Free(runs);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *count_latest(PyObject *self, PyObject *args) {
    Py_buffer bits;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &bits, &start, &end)) return NULL;
    if (start < 0 || start > end || (end + 7) / 8 > bits.len) {
        PyBuffer_Release(&bits);
        PyErr_SetString(PyExc_ValueError, "count_latest: bad bounds");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)bits.buf;
    Py_ssize_t n = 0, i = start;
    for (; i < end && i % 8; i++) n += (b[i / 8] >> (i % 8)) & 1;
    for (; i + 8 <= end; i += 8) n += __builtin_popcount(b[i / 8]);
    for (; i < end; i++) n += (b[i / 8] >> (i % 8)) & 1;
    PyBuffer_Release(&bits);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"count_latest", count_latest, METH_VARARGS, "count_latest(latest, start, end) -> set bits in [start, end)"},
    {"map_keys", map_keys, METH_VARARGS,
     "map_keys(buffer, count, base_offset, first_dirty, offsets, digest[, latest, latest_base]) -> None"},
    {"filter_records", filter_records, METH_VARARGS,
     "filter_records(buffer, count, base_offset, offsets, map_end, retain_deletes, digest) -> (kept, bytes | None)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cleaner", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cleaner(void) { return PyModule_Create(&module); }
