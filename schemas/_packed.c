/* Packed contract records (a JSON array of event objects, or one object) straight to columns, in C.
 *
 * Why: detect's decode built a msgspec struct per event and then Python lists from the structs, ~3 µs an
 * event above what a plain consumer pays to parse the same bytes (issue #25). This reader fills one
 * buffer per field of a fixed schema while it scans the bytes: no Python object per event, but one str
 * per text value (a value seen lately in its column shares the str made for it).
 *
 * It is strict and declines (returns None) whatever it cannot vouch for, and the caller then reads those
 * records as before (msgspec, then event by event, which finds and dead-letters the bad elements alone):
 * an unknown or duplicate key, a string with an escape or a control character, invalid UTF-8, a number
 * outside int64 (or outside +-2**53 where a float is due), a float where an int is due, an exponent past
 * +-300, a value of another JSON type than the field's, whitespace before the record or anything after it,
 * an empty or oversized array. So it accepts a subset of what msgspec accepts, and what it accepts it reads as msgspec does.
 *
 * read(raws, paths, kinds, max_elements) -> (counts, columns) | None
 *   paths: the schema's fields, dotted ("phases.data_ms"), parents before children; kinds: one byte a path:
 *   'i' int64, 'f' float64, 's' text, 'b' bool (int64 0/1), 'o' object, 'l' list of objects, 'n' must be
 *   absent or null. counts: a bytearray, int64 elements per record. columns: per path (values, states):
 *   values a bytearray of int64/float64 (for 'l' the item count per row, for 'o' and 'n' empty) or a list of
 *   str/None for 's'; states a bytearray, one uint8 a row: 0 missing, 1 a value, 2 null. A field's rows are its
 *   level's: the elements for top-level fields, the list items for a list's fields.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

enum { ST_MISSING = 0, ST_VALUE = 1, ST_NULL = 2 };
enum { OK = 0, DECLINE = 1, FAIL = 2 }; /* FAIL: a Python exception is set */
#define MAX_NODES 256
#define MAX_CHILDREN 64
#define MAX_NUMBER 64

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

/* A str made from `len` bytes at `bytes` (in a record of `raws`, which the call holds). */
typedef struct {
    PyObject *str;
    const char *bytes;
    Py_ssize_t len;
} Made;

#define RECENT 64 /* slots a text field keeps: a column's few distinct values (types, kernel keys) all fit */

typedef struct {
    Made slot[RECENT];
} Recent;

typedef struct {
    const char *name; /* last path component, UTF-8, owned by the path str */
    Py_ssize_t name_len;
    char kind;
    int children[MAX_CHILDREN];
    const char *names[MAX_CHILDREN]; /* the children's names, side by side for the key lookup */
    Py_ssize_t name_lens[MAX_CHILDREN];
    int nchildren;
    Buf values, states;
    PyObject *strings;      /* 's': list */
    Recent *recent; /* 's': the strs made lately, by a hash of their bytes (equal values share one) */
} Node;

typedef struct {
    Node nodes[MAX_NODES + 1]; /* nodes[0]: the element (an object) */
    int nnodes;
} Schema;

/* Room for `n` more bytes in `b` (the rare path of the puts below, kept out of line). */
static int __attribute__((noinline)) buf_grow(Buf *b, Py_ssize_t n) {
    Py_ssize_t cap = b->cap ? b->cap * 2 : 1024;
    while (cap < b->len + n) cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (!data) {
        PyErr_NoMemory();
        return FAIL;
    }
    b->data = data;
    b->cap = cap;
    return OK;
}

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (b->len + n > b->cap && buf_grow(b, n)) return FAIL;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return OK;
}

/* A row's state and value: fixed sizes, so the copies are single moves. */
static inline int put_state(Node *n, uint8_t s) {
    Buf *b = &n->states;
    if (b->len + 1 > b->cap && buf_grow(b, 1)) return FAIL;
    b->data[b->len++] = (char)s;
    return OK;
}

static inline int put_i64(Node *n, int64_t v) {
    Buf *b = &n->values;
    if (b->len + 8 > b->cap && buf_grow(b, 8)) return FAIL;
    memcpy(b->data + b->len, &v, 8);
    b->len += 8;
    return OK;
}

static inline int put_f64(Node *n, double v) {
    Buf *b = &n->values;
    if (b->len + 8 > b->cap && buf_grow(b, 8)) return FAIL;
    memcpy(b->data + b->len, &v, 8);
    b->len += 8;
    return OK;
}

/* Whether `n` bytes at `a` and at `b` are equal (keys are short: no call to memcmp). */
static inline int same(const char *a, const char *b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* A row of `n` (and of its descendants, for an object) that has no value. */
static int put_absent(Schema *s, Node *n, uint8_t state) {
    if (put_state(n, state)) return FAIL;
    switch (n->kind) {
    case 'i': case 'b': case 'l': return put_i64(n, 0);
    case 'f': return put_f64(n, 0.0);
    case 's': return PyList_Append(n->strings, Py_None) ? FAIL : OK;
    case 'o':
        for (int i = 0; i < n->nchildren; i++)
            if (put_absent(s, &s->nodes[n->children[i]], ST_MISSING)) return FAIL;
        return OK;
    default: return OK;
    }
}

static const char *ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* A string's raw bytes (between the quotes); NULL: declined (an escape, a control character, no end). */
static const char *string_at(const char *p, const char *end, const char **start, Py_ssize_t *len) {
    if (p >= end || *p != '"') return NULL;
    const char *q = ++p;
    while (q < end) {
        unsigned char c = (unsigned char)*q;
        if (c == '"') {
            *start = p;
            *len = q - p;
            return q + 1;
        }
        if (c == '\\' || c < 0x20) return NULL;
        q++;
    }
    return NULL;
}

/* A JSON number by the grammar; *is_int: no fraction and no exponent. NULL: not a number. */
static const char *number_at(const char *p, const char *end, int *is_int, const char **start) {
    *start = p;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        const char *digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p - digits > 3) return NULL; /* exponent past +-999: declined */
        long e = strtol(digits, NULL, 10);
        if (e > 300) return NULL;
    }
    return p;
}

/* An integer literal as int64; DECLINE on overflow. */
static int to_i64(const char *s, const char *e, int64_t *out) {
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    uint64_t v = 0;
    if (e - s > 19) return DECLINE; /* past int64 (the grammar has no leading zeros) */
    for (; s < e; s++) v = v * 10u + (uint64_t)(*s - '0'); /* 19 digits fit in uint64 */
    if (v > (neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX)) return DECLINE;
    *out = neg ? (int64_t)(0u - v) : (int64_t)v;
    return OK;
}

static const long double POW10L[] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
                                      1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
                                      1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A float literal (by the grammar) as the nearest double, as msgspec reads it; DECLINE: not finite, or the
 * C library's number format is not JSON's. Most literals take the exact fast path (at most 15 significant
 * digits and a power of ten up to 22: one correctly rounded IEEE operation on two exact doubles); the others
 * go to strtod (correctly rounded in glibc), not PyOS_string_to_double, which resets the x87 control word on
 * every call and cost four times the rest of the reader. */
static int to_f64(const char *s, const char *e, double *out) {
    const char *p = s;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t mantissa = 0;
    int digits = 0, scale = 0, exact = 1;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (digits || *p != '0') digits++;
        if (digits > 15) exact = 0;
        mantissa = mantissa * 10u + (uint64_t)(*p - '0');
    }
    if (p < e && *p == '.') {
        for (p++; p < e && *p >= '0' && *p <= '9'; p++) {
            if (digits || *p != '0') digits++;
            if (digits > 15) exact = 0;
            mantissa = mantissa * 10u + (uint64_t)(*p - '0');
            scale--;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int sign = 1, x = 0;
        if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
        for (; p < e; p++) x = x * 10 + (*p - '0'); /* at most 3 digits (number_at) */
        scale += sign * x;
    }
    if (exact && scale >= -22 && scale <= 22) {
        double v = (double)mantissa; /* < 10**15: exact */
        v = scale < 0 ? v / POW10[-scale] : v * POW10[scale];
        *out = neg ? -v : v;
        return OK;
    }
#if defined(__x86_64__) && LDBL_MANT_DIG == 64
    /* Up to 19 digits and a power of ten up to 27, both exact in x87's 64-bit mantissa: one operation rounds
     * the value to 64 bits (r). Rounding is monotonic and a midpoint M between two doubles is exact in 64
     * bits, so unless r is such a midpoint, r and the value lie on the same side of every M, and r rounded to
     * a double is the value rounded to a double. A midpoint goes to strtod. */
    if (digits <= 19 && scale >= -27 && scale <= 27) {
        long double r = scale < 0 ? (long double)mantissa / POW10L[-scale] : (long double)mantissa * POW10L[scale];
        union {
            long double ld;
            uint64_t bits[2];
        } u = {.ld = r};
        if ((u.bits[0] & 0x7FFu) != 0x400u) {
            double v = (double)r;
            *out = neg ? -v : v;
            return OK;
        }
    }
#endif
    char tmp[MAX_NUMBER + 1];
    if (e - s > MAX_NUMBER || localeconv()->decimal_point[0] != '.' || localeconv()->decimal_point[1]) return DECLINE;
    memcpy(tmp, s, (size_t)(e - s));
    tmp[e - s] = 0;
    char *stop;
    errno = 0;
    double v = strtod(tmp, &stop);
    if (*stop || !isfinite(v) || errno == ERANGE) return DECLINE;
    *out = v;
    return OK;
}

static int is_literal(const char *p, const char *end, const char *word, Py_ssize_t n) {
    return end - p >= n && memcmp(p, word, (size_t)n) == 0;
}

/* After an item of an array or an object (at *pp): 1 at `close` (passed), 0 at a comma (passed, and the
 * whitespace after it), -1 at anything else (to decline). */
static int next_item(const char **pp, const char *end, char close) {
    const char *p = ws(*pp, end);
    if (p < end && *p == ',') {
        *pp = ws(p + 1, end);
        return 0;
    }
    if (p < end && *p == close) {
        *pp = p + 1;
        return 1;
    }
    return -1;
}

static int read_object(Schema *s, Node *obj, const char **pp, const char *end);

/* One value of `n` at *pp (after whitespace). */
static int read_value(Schema *s, Node *n, const char **pp, const char *end) {
    const char *p = *pp;
    if (p >= end) return DECLINE;
    if (*p == 'n') {
        if (!is_literal(p, end, "null", 4)) return DECLINE;
        *pp = p + 4;
        return put_absent(s, n, ST_NULL);
    }
    switch (n->kind) {
    case 'i': case 'f': {
        int is_int;
        const char *start;
        const char *q = number_at(p, end, &is_int, &start);
        if (!q) return DECLINE;
        if (n->kind == 'i') {
            int64_t v;
            if (!is_int || to_i64(start, q, &v)) return DECLINE;
            if (put_state(n, ST_VALUE) || put_i64(n, v)) return FAIL;
        } else {
            double v;
            if (is_int) {
                int64_t i;
                if (to_i64(start, q, &i) || i > (1LL << 53) || i < -(1LL << 53)) return DECLINE;
                v = (double)i;
            } else {
                if (to_f64(start, q, &v)) return DECLINE;
            }
            if (put_state(n, ST_VALUE) || put_f64(n, v)) return FAIL;
        }
        *pp = q;
        return OK;
    }
    case 'b': {
        int64_t v;
        if (is_literal(p, end, "true", 4)) {
            v = 1;
            *pp = p + 4;
        } else if (is_literal(p, end, "false", 5)) {
            v = 0;
            *pp = p + 5;
        } else {
            return DECLINE;
        }
        return put_state(n, ST_VALUE) || put_i64(n, v) ? FAIL : OK;
    }
    case 's': {
        const char *start;
        Py_ssize_t len;
        const char *q = string_at(p, end, &start, &len);
        if (!q) return DECLINE;
        uint32_t h = 2166136261u; /* FNV-1a */
        for (Py_ssize_t i = 0; i < len; i++) h = (h ^ (unsigned char)start[i]) * 16777619u;
        Made *made = &n->recent->slot[h % RECENT];
        PyObject *str;
        if (made->str && made->len == len && memcmp(made->bytes, start, (size_t)len) == 0) {
            str = Py_NewRef(made->str);
        } else {
            str = PyUnicode_DecodeUTF8(start, len, "strict");
            if (!str) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return FAIL;
                PyErr_Clear();
                return DECLINE;
            }
            Py_XSETREF(made->str, Py_NewRef(str));
            made->bytes = start;
            made->len = len;
        }
        int rc = PyList_Append(n->strings, str);
        Py_DECREF(str);
        if (rc || put_state(n, ST_VALUE)) return FAIL;
        *pp = q;
        return OK;
    }
    case 'o':
        if (put_state(n, ST_VALUE)) return FAIL;
        return read_object(s, n, pp, end);
    case 'l': {
        if (*p != '[') return DECLINE;
        p = ws(p + 1, end);
        int64_t count = 0;
        if (p < end && *p == ']') {
            p++;
        } else {
            for (int more = 0; more == 0;) {
                int rc = read_object(s, n, &p, end);
                if (rc) return rc;
                count++;
                if ((more = next_item(&p, end, ']')) < 0) return DECLINE;
            }
        }
        if (put_state(n, ST_VALUE) || put_i64(n, count)) return FAIL;
        *pp = p;
        return OK;
    }
    default: /* 'n': present and not null */
        return DECLINE;
    }
}

/* An object whose keys are `obj`'s children (at *pp, after whitespace); a row for every child. */
static int read_object(Schema *s, Node *obj, const char **pp, const char *end) {
    const char *p = *pp;
    if (p >= end || *p != '{') return DECLINE;
    p = ws(p + 1, end);
    uint64_t seen = 0;
    int next = 0;
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            const char *key;
            Py_ssize_t key_len;
            p = string_at(p, end, &key, &key_len);
            if (!p) return DECLINE;
            /* keys mostly come in the order of the last object's: try the one after the last match first */
            int found = -1;
            for (int k = 0, i = next; k < obj->nchildren; k++, i = i + 1 == obj->nchildren ? 0 : i + 1) {
                if (obj->name_lens[i] == key_len && same(obj->names[i], key, key_len)) {
                    found = i;
                    break;
                }
            }
            next = found + 1 == obj->nchildren ? 0 : found + 1;
            if (found < 0 || (seen >> found) & 1u) return DECLINE; /* unknown or duplicate */
            seen |= (uint64_t)1 << found;
            p = ws(p, end);
            if (p >= end || *p != ':') return DECLINE;
            p = ws(p + 1, end);
            int rc = read_value(s, &s->nodes[obj->children[found]], &p, end);
            if (rc) return rc;
            if ((rc = next_item(&p, end, '}')) < 0) return DECLINE;
            if (rc == 1) break;
        }
    }
    for (int i = 0; i < obj->nchildren; i++)
        if (!((seen >> i) & 1u) && put_absent(s, &s->nodes[obj->children[i]], ST_MISSING)) return FAIL;
    *pp = p;
    return OK;
}

static void schema_free(Schema *s) {
    for (int i = 0; i <= s->nnodes; i++) {
        Node *n = &s->nodes[i];
        PyMem_Free(n->values.data);
        PyMem_Free(n->states.data);
        Py_CLEAR(n->strings);
        if (n->recent) {
            for (int j = 0; j < RECENT; j++) Py_CLEAR(n->recent->slot[j].str);
            PyMem_Free(n->recent);
        }
    }
}

/* The schema from `paths` and `kinds`; -1 with an exception set when they do not make one. */
static int schema_build(Schema *s, PyObject *paths, const char *kinds, Py_ssize_t nkinds) {
    Py_ssize_t n = PyTuple_GET_SIZE(paths);
    if (n != nkinds || n > MAX_NODES) {
        PyErr_SetString(PyExc_ValueError, "one kind a path, at most 256 paths");
        return -1;
    }
    s->nodes[0].kind = 'o';
    for (Py_ssize_t i = 0; i < n; i++) {
        Node *node = &s->nodes[i + 1];
        s->nnodes = (int)i + 1;
        PyObject *path = PyTuple_GET_ITEM(paths, i);
        Py_ssize_t len;
        const char *text = PyUnicode_Check(path) ? PyUnicode_AsUTF8AndSize(path, &len) : NULL;
        if (!text) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "paths must be str");
            return -1;
        }
        const char *dot = NULL;
        for (const char *c = text + len - 1; c >= text; c--)
            if (*c == '.') {
                dot = c;
                break;
            }
        int parent = 0;
        if (dot) {
            parent = -1;
            for (Py_ssize_t j = 0; j < i; j++) {
                PyObject *other = PyTuple_GET_ITEM(paths, j);
                Py_ssize_t olen;
                const char *otext = PyUnicode_AsUTF8AndSize(other, &olen);
                if (olen == dot - text && memcmp(otext, text, (size_t)olen) == 0) parent = (int)j + 1;
            }
            if (parent < 0 || (s->nodes[parent].kind != 'o' && s->nodes[parent].kind != 'l')) {
                PyErr_Format(PyExc_ValueError, "%U: its parent must come before it, as an object or list", path);
                return -1;
            }
        }
        node->name = dot ? dot + 1 : text;
        node->name_len = dot ? len - (dot + 1 - text) : len;
        node->kind = kinds[i];
        if (!strchr("ifsboln", node->kind) || node->kind == 0) {
            PyErr_Format(PyExc_ValueError, "%U: unknown kind", path);
            return -1;
        }
        if (node->kind == 's') {
            if (!(node->strings = PyList_New(0))) return -1;
            if (!(node->recent = PyMem_Calloc(1, sizeof(Recent)))) {
                PyErr_NoMemory();
                return -1;
            }
        }
        Node *up = &s->nodes[parent];
        if (up->nchildren >= MAX_CHILDREN) {
            PyErr_SetString(PyExc_ValueError, "at most 64 fields an object");
            return -1;
        }
        up->names[up->nchildren] = node->name;
        up->name_lens[up->nchildren] = node->name_len;
        up->children[up->nchildren++] = (int)i + 1;
    }
    return 0;
}

static PyObject *bytes_of(Buf *b) { return PyByteArray_FromStringAndSize(b->data ? b->data : "", b->len); }

static PyObject *packed_read(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *raws, *paths;
    const char *kinds;
    Py_ssize_t nkinds, max_elements;
    if (!PyArg_ParseTuple(args, "O!O!y#n", &PyList_Type, &raws, &PyTuple_Type, &paths, &kinds, &nkinds,
                          &max_elements))
        return NULL;
    Schema *s = PyMem_Calloc(1, sizeof(Schema));
    if (!s) return PyErr_NoMemory();
    PyObject *result = NULL;
    Buf counts = {0};
    int rc = OK;
    if (schema_build(s, paths, kinds, nkinds)) {
        rc = FAIL;
        goto done;
    }
    Py_ssize_t nraws = PyList_GET_SIZE(raws);
    for (Py_ssize_t r = 0; r < nraws && rc == OK; r++) {
        PyObject *raw = PyList_GET_ITEM(raws, r);
        if (!PyBytes_Check(raw)) {
            rc = DECLINE;
            break;
        }
        const char *p = PyBytes_AS_STRING(raw);
        const char *end = p + PyBytes_GET_SIZE(raw);
        int64_t count = 0;
        if (p < end && *p == '[') { /* no whitespace before the record: pyarrow's landing read takes none */
            p = ws(p + 1, end);
            for (int more = 0; more == 0;) {
                if (count >= max_elements) {
                    rc = DECLINE;
                    break;
                }
                if ((rc = read_object(s, &s->nodes[0], &p, end))) break;
                count++;
                if ((more = next_item(&p, end, ']')) < 0) rc = DECLINE;
            }
        } else {
            rc = read_object(s, &s->nodes[0], &p, end);
            count = 1;
        }
        if (rc == OK && ws(p, end) != end) rc = DECLINE;
        if (rc == OK && buf_put(&counts, &count, 8)) rc = FAIL;
    }
    if (rc != OK) goto done;
    PyObject *columns = PyDict_New();
    if (!columns) {
        rc = FAIL;
        goto done;
    }
    for (int i = 1; i <= s->nnodes; i++) {
        Node *n = &s->nodes[i];
        PyObject *values = n->kind == 's' ? Py_NewRef(n->strings) : bytes_of(&n->values);
        PyObject *states = bytes_of(&n->states);
        PyObject *pair = values && states ? PyTuple_Pack(2, values, states) : NULL;
        Py_XDECREF(values);
        Py_XDECREF(states);
        if (!pair || PyDict_SetItem(columns, PyTuple_GET_ITEM(paths, i - 1), pair)) {
            Py_XDECREF(pair);
            Py_DECREF(columns);
            rc = FAIL;
            goto done;
        }
        Py_DECREF(pair);
    }
    PyObject *counted = bytes_of(&counts);
    if (counted) result = PyTuple_Pack(2, counted, columns);
    Py_XDECREF(counted);
    Py_DECREF(columns);
    if (!result) rc = FAIL;
done:
    schema_free(s);
    PyMem_Free(s);
    PyMem_Free(counts.data);
    if (rc == FAIL) {
        Py_XDECREF(result);
        return NULL;
    }
    if (rc == DECLINE) Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"read", packed_read, METH_VARARGS,
     "read(raws, paths, kinds, max_elements) -> (counts, {path: (values, states)}) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "schemas._packed",
    .m_doc = "Packed contract records straight to columns (schemas/packed_columns.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__packed(void) { return PyModule_Create(&module); }
