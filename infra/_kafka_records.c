/* A Kafka record batch's records (message format v2) read in C, for infra/kafka_records.py.
 *
 * kafka-python reads each record in Python: nine varints and four slices, 3.3 µs a record in process
 * (bench/results/record-reader.json), 13 % of the detect worker's decode process's py-spy samples at
 * 10,240 ranks (issue #25). This reads the same
 * fields with the same rules (zigzag varints, key/value as bytes or None, headers as (str, bytes|None)
 * pairs, each record's length checked against what was read) and builds the same record objects.
 *
 * records(record_cls, buffer, pos, count, base_offset, first_timestamp, max_timestamp, log_append,
 *         timestamp_type) -> (records, pos, error)
 *   record_cls        kafka-python's DefaultRecord (called with its seven arguments)
 *   log_append        true for a LOG_APPEND_TIME batch: every record takes the batch's max_timestamp;
 *                     else a record's timestamp is first_timestamp + its delta
 *   error             None, or why the record after the last one returned is malformed (a str; the
 *                     caller raises it after handing out the good ones, as kafka-python does)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    const unsigned char *data;
    Py_ssize_t len;
    Py_ssize_t pos;
    const char *error;
} Reader;

static int varint(Reader *r, int64_t *out) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->pos >= r->len) {
            r->error = "record runs past the end of its batch";
            return -1;
        }
        unsigned char b = r->data[r->pos++];
        if (shift == 63 && (b & 0x7e)) break;
        result |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((result >> 1) ^ (~(result & 1) + 1));
            return 0;
        }
    }
    r->error = "Out of int64 range";
    return -1;
}

/* bytes of `n` from the reader, None for n < 0; NULL with r->error on overrun */
static PyObject *nullable_bytes(Reader *r, int64_t n) {
    if (n < 0) Py_RETURN_NONE;
    if (n > r->len - r->pos) {
        r->error = "record runs past the end of its batch";
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)r->data + r->pos, (Py_ssize_t)n);
    r->pos += (Py_ssize_t)n;
    return out;
}

static PyObject *headers_of(Reader *r) {
    int64_t count;
    if (varint(r, &count) < 0) return NULL;
    if (count < 0) {
        r->error = "Found invalid number of record headers";
        return NULL;
    }
    PyObject *headers = PyList_New(0);
    if (!headers) return NULL;
    for (int64_t i = 0; i < count; i++) {
        int64_t key_len, value_len;
        if (varint(r, &key_len) < 0) goto fail;
        if (key_len < 0) {
            r->error = "Invalid negative header key size";
            goto fail;
        }
        if (key_len > r->len - r->pos) {
            r->error = "record runs past the end of its batch";
            goto fail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)r->data + r->pos, (Py_ssize_t)key_len, "strict");
        if (!key) goto fail;
        r->pos += (Py_ssize_t)key_len;
        if (varint(r, &value_len) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *value = nullable_bytes(r, value_len);
        if (!value) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (!pair || PyList_Append(headers, pair) < 0) {
            Py_XDECREF(pair);
            goto fail;
        }
        Py_DECREF(pair);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* one record, or NULL: with r->error set (malformed) or a Python exception (memory, bad UTF-8) */
static PyObject *record(Reader *r, PyObject *cls, long long base_offset, long long first_ts,
                        long long max_ts, int log_append, PyObject *ts_type) {
    int64_t length, attrs, ts_delta, offset_delta, key_len, value_len;
    if (varint(r, &length) < 0) return NULL;
    Py_ssize_t start = r->pos;
    if (varint(r, &attrs) < 0 || varint(r, &ts_delta) < 0 || varint(r, &offset_delta) < 0) return NULL;
    if (varint(r, &key_len) < 0) return NULL;
    PyObject *key = nullable_bytes(r, key_len);
    if (!key) return NULL;
    PyObject *value = NULL, *headers = NULL, *out = NULL;
    if (varint(r, &value_len) < 0) goto done;
    value = nullable_bytes(r, value_len);
    if (!value) goto done;
    headers = headers_of(r);
    if (!headers) goto done;
    if (r->pos - start != length) {
        r->error = "Invalid record size: the record's length and the bytes read differ";
        goto done;
    }
    {
        PyObject *size = PyLong_FromLongLong((long long)length);
        PyObject *offset = PyLong_FromLongLong(base_offset + (long long)offset_delta);
        PyObject *ts = PyLong_FromLongLong(log_append ? max_ts : first_ts + (long long)ts_delta);
        if (size && offset && ts) {
            PyObject *args[7] = {size, offset, ts, ts_type, key, value, headers};
            out = PyObject_Vectorcall(cls, args, 7, NULL);
        }
        Py_XDECREF(size);
        Py_XDECREF(offset);
        Py_XDECREF(ts);
    }
done:
    Py_DECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    return out;
}

static PyObject *records(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cls, *ts_type;
    Py_buffer buf;
    Py_ssize_t pos, count;
    long long base_offset, first_ts, max_ts;
    int log_append;
    if (!PyArg_ParseTuple(args, "Oy*nnLLLpO", &cls, &buf, &pos, &count, &base_offset, &first_ts, &max_ts,
                          &log_append, &ts_type))
        return NULL;
    PyObject *out = NULL, *error = NULL, *list = PyList_New(0);
    if (!list) goto done;
    Reader r = {buf.buf, buf.len, pos, NULL};
    if (pos < 0 || pos > buf.len) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t at = r.pos;
        PyObject *rec = record(&r, cls, base_offset, first_ts, max_ts, log_append, ts_type);
        if (!rec) {
            if (r.error) {
                error = PyUnicode_FromString(r.error);
            } else if (PyErr_ExceptionMatches(PyExc_ValueError)) {  /* a header key that is not UTF-8 */
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_NormalizeException(&type, &value, &tb);
                error = PyObject_Repr(value);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
            } else {
                goto done;  /* out of memory: raised as it is */
            }
            if (!error) goto done;
            r.pos = at;  /* the malformed record is not consumed */
            break;
        }
        int failed = PyList_Append(list, rec);
        Py_DECREF(rec);
        if (failed) goto done;
    }
    out = Py_BuildValue("(OnO)", list, r.pos, error ? error : Py_None);
done:
    Py_XDECREF(list);
    Py_XDECREF(error);
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef methods[] = {
    {"records", records, METH_VARARGS, "A record batch's records from `pos`: (records, pos, error)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kafka_records", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kafka_records(void) { return PyModule_Create(&module); }
