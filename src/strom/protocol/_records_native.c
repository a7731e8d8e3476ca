/* The record walks of strom.protocol.records in C: the native record codec.
 *
 * Three functions with exactly the arguments, results and errors of their pure-Python
 * specification, strom/protocol/_records_py.py (read its module docstring first: the rules
 * of a record walk and the error messages are stated there, and the differential tests in
 * tests/unit/protocol/test_record_codec.py hold both implementations to the same answers):
 *
 *   scan(buf, start, end, count, ts_low, ts_high, no_timestamp, keys_required, error)
 *       -> (max_ts_delta, [bad timestamp indexes], [null key indexes], value_bytes)
 *   decode(buf, start, end, count, base_offset, base_ts, ts_type, max_ts, error, record)
 *       -> [record(offset, timestamp, key, value, [(header key, header value)])]
 *   columns(segments, lo, hi, with_headers, error)
 *       -> (rows, offsets, timestamps_us, timestamp_types, key validity, key offsets, key data,
 *           value validity, value offsets, value data[, header list validity, header list
 *           offsets, header key offsets, header key data, header value validity, header value
 *           offsets, header value data])
 *   murmur2(buf) -> Kafka's Utils.murmur2, signed 32 bits
 *   encode(keys, values, partitions, null_key_partition, timestamp_ms, max_batch_bytes, crc)
 *       -> {partition: [record batch bytes, ...]}  (Arrow columns in, no object per row)
 *
 * One pass over the records' bytes; no Python object per record except where the caller asks
 * for objects (decode). Buffers are read through the buffer protocol (bytes, bytearray,
 * memoryview, cramjam's Buffer), never copied. Column buffers are bytes objects in the
 * machine's byte order, the layout Arrow wraps without a copy (pyarrow.Array.from_buffers).
 *
 * Built by setup.py as an optional extension: without a compiler strom runs on the Python
 * walk, which gives the same answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

static const char PREMATURE[] = "incorrect declared batch size, premature end of records";
static const char MALFORMED_VARINT[] = "found invalid record structure: malformed varint";

/* ---- varints (strom/protocol/varint.py: read_raw_varint) ---------------------------------- */

/* The still zigzag-encoded varint at *pos, bounded by end: at most 10 bytes, the tenth
 * carrying only bit 63. 0, or -1 when it runs past end or is too long. */
static inline int read_raw(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < end && b[p] < 0x80) {
        *out = b[p];
        *pos = p + 1;
        return 0;
    }
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (p >= end)
            return -1;
        uint8_t c = b[p++];
        if (shift == 63 && c > 1)
            return -1;
        result |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80)
            break;
        shift += 7;
    }
    *out = result;
    *pos = p;
    return 0;
}

static inline int64_t unzigzag(uint64_t raw)
{
    return (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
}

/* ---- strict UTF-8 (what Python's "utf-8" codec accepts: no surrogates, no overlongs) ------ */

static int utf8_valid(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c == 0xE0) {
            more = 2;
            lo = 0xA0;
        }
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
            more = 2;
        else if (c == 0xED) {
            more = 2;
            hi = 0x9F;
        }
        else if (c == 0xF0) {
            more = 3;
            lo = 0x90;
        }
        else if (c >= 0xF1 && c <= 0xF3)
            more = 3;
        else if (c == 0xF4) {
            more = 3;
            hi = 0x8F;
        }
        else
            return 0;
        if (n - i <= more)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* ---- one record ----------------------------------------------------------------------------- */

typedef struct {
    int64_t ts_delta;
    uint64_t offset_raw;    /* offsetDelta, still zigzag-encoded */
    Py_ssize_t key_pos;
    Py_ssize_t key_len;     /* -1: null */
    Py_ssize_t value_pos;
    Py_ssize_t value_len;   /* -1: null */
    Py_ssize_t headers_pos; /* the first header (after the count) */
    int64_t header_count;
} record_t;

/* Walk the record at *ppos (rules 1-6 of _records_py); strict: the scan's rules (offsetDelta
 * == index, no null header key). 0, or -1 with the error set. */
static int walk_one(const uint8_t *b, Py_ssize_t *ppos, Py_ssize_t end, Py_ssize_t index,
                    int strict, PyObject *error, record_t *r)
{
    Py_ssize_t pos = *ppos;
    uint64_t raw;
    if (pos >= end) {
        PyErr_SetString(error, PREMATURE);
        return -1;
    }
    if (read_raw(b, &pos, end, &raw) < 0)
        goto bad_varint;
    if ((raw & 1) || raw < 12 || (raw >> 1) > (uint64_t)(end - pos)) {
        PyErr_Format(error, "invalid record size at record %zd", index);
        return -1;
    }
    Py_ssize_t rec_end = pos + (Py_ssize_t)(raw >> 1);
    pos += 1; /* attributes */
    if (read_raw(b, &pos, rec_end, &raw) < 0)
        goto bad_varint;
    r->ts_delta = unzigzag(raw);
    if (read_raw(b, &pos, rec_end, &raw) < 0)
        goto bad_varint;
    r->offset_raw = raw;
    if (strict && raw != ((uint64_t)index << 1)) {
        PyErr_Format(error, "record %zd has offset delta %lld: inner offsets must be 0..n-1",
                     index, (long long)unzigzag(raw));
        return -1;
    }
    if (read_raw(b, &pos, rec_end, &raw) < 0) /* key */
        goto bad_varint;
    if (!(raw & 1)) {
        if ((raw >> 1) >= (uint64_t)(rec_end - pos)) {
            PyErr_Format(error, "record %zd ends inside its key", index);
            return -1;
        }
        r->key_pos = pos;
        r->key_len = (Py_ssize_t)(raw >> 1);
        pos += r->key_len;
    }
    else {
        r->key_pos = pos;
        r->key_len = -1;
        if (pos >= rec_end) {
            PyErr_Format(error, "record %zd ends inside its key", index);
            return -1;
        }
    }
    if (read_raw(b, &pos, rec_end, &raw) < 0) /* value */
        goto bad_varint;
    if (!(raw & 1)) {
        if ((raw >> 1) >= (uint64_t)(rec_end - pos)) {
            PyErr_Format(error, "record %zd ends inside its value", index);
            return -1;
        }
        r->value_pos = pos;
        r->value_len = (Py_ssize_t)(raw >> 1);
        pos += r->value_len;
    }
    else {
        r->value_pos = pos;
        r->value_len = -1;
        if (pos >= rec_end) {
            PyErr_Format(error, "record %zd ends inside its value", index);
            return -1;
        }
    }
    if (b[pos] == 0) { /* no headers: the common case */
        pos += 1;
        r->headers_pos = pos;
        r->header_count = 0;
    }
    else {
        if (read_raw(b, &pos, rec_end, &raw) < 0)
            goto bad_varint;
        int64_t count = unzigzag(raw);
        if (count < 0) {
            PyErr_Format(error, "record %zd has an invalid header count %lld", index,
                         (long long)count);
            return -1;
        }
        r->headers_pos = pos;
        r->header_count = count;
        for (int64_t h = 0; h < count; h++) {
            if (read_raw(b, &pos, rec_end, &raw) < 0)
                goto bad_varint;
            if (raw & 1) {
                if (strict) {
                    PyErr_Format(error, "record %zd has a header with a null key", index);
                    return -1;
                }
            }
            else {
                if ((raw >> 1) > (uint64_t)(rec_end - pos))
                    goto header_past;
                Py_ssize_t size = (Py_ssize_t)(raw >> 1);
                if (!utf8_valid(b + pos, size)) {
                    PyErr_Format(error, "record %zd has a header key that is not UTF-8", index);
                    return -1;
                }
                pos += size;
            }
            if (read_raw(b, &pos, rec_end, &raw) < 0)
                goto bad_varint;
            if (!(raw & 1)) {
                if ((raw >> 1) > (uint64_t)(rec_end - pos))
                    goto header_past;
                pos += (Py_ssize_t)(raw >> 1);
            }
        }
    }
    if (pos != rec_end) {
        PyErr_Format(error, "record %zd: its fields do not add up to its length", index);
        return -1;
    }
    *ppos = pos;
    return 0;
bad_varint:
    PyErr_SetString(error, MALFORMED_VARINT);
    return -1;
header_past:
    PyErr_Format(error, "record %zd: a header runs past the record", index);
    return -1;
}

/* The next header of an already walked record: key (len -1 null) and value (len -1 null). */
static inline void next_header(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t *key_pos,
                               Py_ssize_t *key_len, Py_ssize_t *value_pos, Py_ssize_t *value_len)
{
    uint64_t raw = 0;
    read_raw(b, pos, PY_SSIZE_T_MAX, &raw);
    *key_pos = *pos;
    *key_len = (raw & 1) ? -1 : (Py_ssize_t)(raw >> 1);
    if (*key_len > 0)
        *pos += *key_len;
    read_raw(b, pos, PY_SSIZE_T_MAX, &raw);
    *value_pos = *pos;
    *value_len = (raw & 1) ? -1 : (Py_ssize_t)(raw >> 1);
    if (*value_len > 0)
        *pos += *value_len;
}

static int record_position(const record_t *r, int64_t base_offset, int64_t base_ts,
                           Py_ssize_t index, PyObject *error, int64_t *offset, int64_t *ts)
{
    if (__builtin_add_overflow(base_offset, unzigzag(r->offset_raw), offset) ||
        __builtin_add_overflow(base_ts, r->ts_delta, ts)) {
        PyErr_Format(error, "record %zd: offset or timestamp out of range", index);
        return -1;
    }
    return 0;
}

static int trailing(Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, PyObject *error)
{
    if (pos != end) {
        PyErr_Format(error, "incorrect declared batch size: %zd bytes after record %zd",
                     end - pos, count - 1);
        return -1;
    }
    return 0;
}

/* ---- argument helpers ------------------------------------------------------------------------ */

static int get_view(PyObject *obj, Py_buffer *view, Py_ssize_t start, Py_ssize_t end)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (start < 0 || start > end || end > view->len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "records [%zd, %zd) outside a buffer of %zd bytes",
                     start, end, view->len);
        return -1;
    }
    return 0;
}

static int as_i64(PyObject *obj, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int as_ssize(PyObject *obj, Py_ssize_t *out)
{
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* ---- scan ------------------------------------------------------------------------------------ */

static PyObject *scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "scan() takes 9 arguments");
        return NULL;
    }
    Py_ssize_t start, end, count;
    int64_t ts_low, ts_high, no_ts;
    if (as_ssize(args[1], &start) < 0 || as_ssize(args[2], &end) < 0 ||
        as_ssize(args[3], &count) < 0 || as_i64(args[4], &ts_low) < 0 ||
        as_i64(args[5], &ts_high) < 0 || as_i64(args[6], &no_ts) < 0)
        return NULL;
    int keys_required = PyObject_IsTrue(args[7]);
    if (keys_required < 0)
        return NULL;
    PyObject *error = args[8];
    Py_buffer view;
    if (get_view(args[0], &view, start, end) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    PyObject *bad = PyList_New(0), *nulls = PyList_New(0);
    if (bad == NULL || nulls == NULL)
        goto fail;
    int64_t max_delta = INT64_MIN;
    long long value_bytes = 0;
    Py_ssize_t pos = start;
    record_t r;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (walk_one(b, &pos, end, i, 1, error, &r) < 0)
            goto fail;
        if (r.key_len < 0 && keys_required) {
            PyObject *n = PyLong_FromSsize_t(i);
            if (n == NULL || PyList_Append(nulls, n) < 0) {
                Py_XDECREF(n);
                goto fail;
            }
            Py_DECREF(n);
        }
        if (r.value_len > 0)
            value_bytes += r.value_len;
        if (r.ts_delta > max_delta)
            max_delta = r.ts_delta;
        if ((r.ts_delta < ts_low || r.ts_delta > ts_high) && r.ts_delta != no_ts) {
            PyObject *n = PyLong_FromSsize_t(i);
            if (n == NULL || PyList_Append(bad, n) < 0) {
                Py_XDECREF(n);
                goto fail;
            }
            Py_DECREF(n);
        }
    }
    if (trailing(pos, end, count, error) < 0)
        goto fail;
    PyBuffer_Release(&view);
    return Py_BuildValue("(LNNL)", (long long)max_delta, bad, nulls, value_bytes);
fail:
    Py_XDECREF(bad);
    Py_XDECREF(nulls);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---- decode ---------------------------------------------------------------------------------- */

static PyObject *bytes_or_none(const uint8_t *b, Py_ssize_t pos, Py_ssize_t len)
{
    if (len < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)b + pos, len);
}

static PyObject *headers_list(const uint8_t *b, const record_t *r)
{
    PyObject *list = PyList_New((Py_ssize_t)r->header_count);
    if (list == NULL)
        return NULL;
    Py_ssize_t pos = r->headers_pos;
    for (int64_t h = 0; h < r->header_count; h++) {
        Py_ssize_t kp, kl, vp, vl;
        next_header(b, &pos, &kp, &kl, &vp, &vl);
        PyObject *key = PyUnicode_DecodeUTF8((const char *)b + kp, kl < 0 ? 0 : kl, "strict");
        PyObject *value = key == NULL ? NULL : bytes_or_none(b, vp, vl);
        PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, key, value);
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)h, pair);
    }
    return list;
}

/* Building the record objects: calling the class runs its Python __init__ per record, the
 * largest cost of a decode. A slots class (strom's Record: a dataclass with slots=True whose
 * __init__ only assigns its five fields) is instead allocated and its five slots filled
 * directly, as its __init__ would; any other class is called. The slot offsets come from the
 * class's member descriptors, looked up once per class. */
static PyObject *slots_cls = NULL;   /* the class the offsets below belong to (borrowed) */
static Py_ssize_t slot_offsets[5];
static int slots_usable = 0;
static const char *const FIELD_NAMES[5] = {"offset", "timestamp", "key", "value", "headers"};

static void find_slots(PyObject *cls)
{
    slots_cls = cls;
    slots_usable = 0;
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_alloc == NULL)
        return;
    for (int k = 0; k < 5; k++) {
        PyObject *descr = PyObject_GetAttrString(cls, FIELD_NAMES[k]);
        if (descr == NULL) {
            PyErr_Clear();
            return;
        }
        int member = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (member)
            slot_offsets[k] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!member)
            return;
    }
    slots_usable = 1;
}

/* A new record from five new references (stolen, also on failure). */
static PyObject *new_record(PyObject *cls, PyObject *fields[5])
{
    if (cls != slots_cls)
        find_slots(cls);
    PyObject *rec;
    if (slots_usable) {
        rec = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
        if (rec != NULL) {
            for (int k = 0; k < 5; k++)
                *(PyObject **)((char *)rec + slot_offsets[k]) = fields[k];
            return rec;
        }
    }
    else
        rec = PyObject_Vectorcall(cls, fields, 5, NULL);
    for (int k = 0; k < 5; k++)
        Py_DECREF(fields[k]);
    return rec;
}

static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "decode() takes 10 arguments");
        return NULL;
    }
    Py_ssize_t start, end, count;
    int64_t base_offset, base_ts, ts_type, max_ts;
    if (as_ssize(args[1], &start) < 0 || as_ssize(args[2], &end) < 0 ||
        as_ssize(args[3], &count) < 0 || as_i64(args[4], &base_offset) < 0 ||
        as_i64(args[5], &base_ts) < 0 || as_i64(args[6], &ts_type) < 0 ||
        as_i64(args[7], &max_ts) < 0)
        return NULL;
    PyObject *error = args[8], *record_cls = args[9];
    Py_buffer view;
    if (get_view(args[0], &view, start, end) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    Py_ssize_t pos = start;
    record_t r;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t offset, ts;
        if (walk_one(b, &pos, end, i, 0, error, &r) < 0 ||
            record_position(&r, base_offset, base_ts, i, error, &offset, &ts) < 0)
            goto fail;
        PyObject *fields[5];
        fields[0] = PyLong_FromLongLong(offset);
        fields[1] = PyLong_FromLongLong(ts_type == 1 ? max_ts : ts);
        fields[2] = bytes_or_none(b, r.key_pos, r.key_len);
        fields[3] = bytes_or_none(b, r.value_pos, r.value_len);
        fields[4] = headers_list(b, &r);
        if (!(fields[0] && fields[1] && fields[2] && fields[3] && fields[4])) {
            for (int k = 0; k < 5; k++)
                Py_XDECREF(fields[k]);
            goto fail;
        }
        PyObject *rec = new_record(record_cls, fields);
        if (rec == NULL)
            goto fail;
        int failed = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (failed < 0)
            goto fail;
    }
    if (trailing(pos, end, count, error) < 0)
        goto fail;
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---- columns --------------------------------------------------------------------------------- */

/* A bytes object being filled: capacity grows by doubling, trimmed at the end. */
typedef struct {
    PyObject *obj;
    Py_ssize_t len;
    Py_ssize_t cap;
} out_t;

static int out_init(out_t *o, Py_ssize_t cap)
{
    o->len = 0;
    o->cap = cap < 16 ? 16 : cap;
    o->obj = PyBytes_FromStringAndSize(NULL, o->cap);
    return o->obj == NULL ? -1 : 0;
}

static inline char *out_reserve(out_t *o, Py_ssize_t n)
{
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap;
        while (cap < o->len + n)
            cap *= 2;
        if (_PyBytes_Resize(&o->obj, cap) < 0)
            return NULL;
        o->cap = cap;
    }
    char *p = PyBytes_AS_STRING(o->obj) + o->len;
    o->len += n;
    return p;
}

static PyObject *out_finish(out_t *o)
{
    PyObject *obj = o->obj;
    o->obj = NULL;
    if (_PyBytes_Resize(&obj, o->len) < 0)
        return NULL;
    return obj;
}

/* A binary / string column: validity bits, int32 offsets, data. */
typedef struct {
    out_t valid;
    out_t offsets;
    out_t data;
    Py_ssize_t rows;
    Py_ssize_t nulls;
} binary_t;

static int binary_init(binary_t *c, Py_ssize_t rows_cap, Py_ssize_t data_cap)
{
    c->rows = 0;
    c->nulls = 0;
    c->valid.obj = c->offsets.obj = c->data.obj = NULL;
    if (out_init(&c->valid, rows_cap / 8 + 1) < 0 || out_init(&c->offsets, 4 * (rows_cap + 1)) < 0 ||
        out_init(&c->data, data_cap) < 0)
        return -1;
    int32_t *first = (int32_t *)out_reserve(&c->offsets, 4);
    *first = 0;
    return 0;
}

static void binary_clear(binary_t *c)
{
    Py_CLEAR(c->valid.obj);
    Py_CLEAR(c->offsets.obj);
    Py_CLEAR(c->data.obj);
}

/* One row: present (data of len bytes appended) or null. The row's validity byte is zeroed when
 * the row starts a new byte, so bits past the last row stay 0. */
static inline int binary_row(binary_t *c, int present, const uint8_t *data, Py_ssize_t len)
{
    Py_ssize_t n = c->rows;
    if ((n & 7) == 0) {
        char *v = out_reserve(&c->valid, 1);
        if (v == NULL)
            return -1;
        *v = 0;
    }
    if (present) {
        PyBytes_AS_STRING(c->valid.obj)[n >> 3] |= (char)(1 << (n & 7));
        if (len > 0) {
            char *d = out_reserve(&c->data, len);
            if (d == NULL)
                return -1;
            memcpy(d, data, (size_t)len);
        }
    }
    else
        c->nulls++;
    int32_t *off = (int32_t *)out_reserve(&c->offsets, 4);
    if (off == NULL)
        return -1;
    *off = (int32_t)c->data.len;
    c->rows++;
    return 0;
}

/* As binary_row, for the list column of headers: offsets count header entries, no data. */
static inline int list_row(binary_t *c, int present, Py_ssize_t end)
{
    Py_ssize_t n = c->rows;
    if ((n & 7) == 0) {
        char *v = out_reserve(&c->valid, 1);
        if (v == NULL)
            return -1;
        *v = 0;
    }
    if (present)
        PyBytes_AS_STRING(c->valid.obj)[n >> 3] |= (char)(1 << (n & 7));
    else
        c->nulls++;
    int32_t *off = (int32_t *)out_reserve(&c->offsets, 4);
    if (off == NULL)
        return -1;
    *off = (int32_t)end;
    c->rows++;
    return 0;
}

/* Appends validity (or None), offsets and, when with_data, data to tuple slots from *k. */
static int binary_finish(binary_t *c, PyObject *tuple, Py_ssize_t *k, int with_validity,
                         int with_data)
{
    PyObject *valid;
    if (!with_validity)
        Py_CLEAR(c->valid.obj);
    else {
        if (c->nulls == 0) {
            Py_CLEAR(c->valid.obj);
            valid = Py_NewRef(Py_None);
        }
        else if ((valid = out_finish(&c->valid)) == NULL)
            return -1;
        PyTuple_SET_ITEM(tuple, (*k)++, valid);
    }
    PyObject *offsets = out_finish(&c->offsets);
    if (offsets == NULL)
        return -1;
    PyTuple_SET_ITEM(tuple, (*k)++, offsets);
    if (with_data) {
        PyObject *data = out_finish(&c->data);
        if (data == NULL)
            return -1;
        PyTuple_SET_ITEM(tuple, (*k)++, data);
    }
    else
        Py_CLEAR(c->data.obj);
    return 0;
}

typedef struct {
    PyObject *obj;
    Py_ssize_t start, end, count;
    int64_t base_offset, base_ts, ts_type, max_ts;
} segment_t;

static int parse_segment(PyObject *item, segment_t *s)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 8) {
        PyErr_SetString(PyExc_TypeError, "a segment is a tuple of 8");
        return -1;
    }
    s->obj = PyTuple_GET_ITEM(item, 0);
    if (as_ssize(PyTuple_GET_ITEM(item, 1), &s->start) < 0 ||
        as_ssize(PyTuple_GET_ITEM(item, 2), &s->end) < 0 ||
        as_ssize(PyTuple_GET_ITEM(item, 3), &s->count) < 0 ||
        as_i64(PyTuple_GET_ITEM(item, 4), &s->base_offset) < 0 ||
        as_i64(PyTuple_GET_ITEM(item, 5), &s->base_ts) < 0 ||
        as_i64(PyTuple_GET_ITEM(item, 6), &s->ts_type) < 0 ||
        as_i64(PyTuple_GET_ITEM(item, 7), &s->max_ts) < 0)
        return -1;
    if (s->ts_type < INT32_MIN || s->ts_type > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timestamp type out of int32 range");
        return -1;
    }
    return 0;
}

#define MAX_COLUMN_BYTES ((Py_ssize_t)INT32_MAX)

static PyObject *columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "columns() takes 5 arguments");
        return NULL;
    }
    int64_t lo, hi;
    if (as_i64(args[1], &lo) < 0 || as_i64(args[2], &hi) < 0)
        return NULL;
    int with_headers = PyObject_IsTrue(args[3]);
    if (with_headers < 0)
        return NULL;
    PyObject *error = args[4];
    PyObject *seq = PySequence_Fast(args[0], "segments must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nseg = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);

    /* Capacities: at most one row per 7 bytes of records (a length byte and 6 bytes at least),
     * key and value data within the records' bytes; walked only up to the first segment that
     * would pass 2 GiB (the error is raised when the walk reaches it, as the Python walk
     * does). */
    Py_ssize_t rows_cap = 0, bytes_cap = 0, usable = nseg;
    for (Py_ssize_t i = 0; i < nseg; i++) {
        segment_t s;
        if (parse_segment(items[i], &s) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_ssize_t size = s.end - s.start;
        if (size < 0)
            size = 0;
        if (bytes_cap + size > MAX_COLUMN_BYTES) {
            usable = i;
            break;
        }
        bytes_cap += size;
        Py_ssize_t rows = s.count < 0 ? 0 : s.count;
        if (rows > size / 7 + 1)
            rows = size / 7 + 1;
        rows_cap += rows;
    }
    out_t offsets = {NULL, 0, 0}, stamps = {NULL, 0, 0}, types = {NULL, 0, 0};
    binary_t keys, values, lists, hkeys, hvalues;
    keys.valid.obj = keys.offsets.obj = keys.data.obj = NULL;
    values.valid.obj = values.offsets.obj = values.data.obj = NULL;
    lists.valid.obj = lists.offsets.obj = lists.data.obj = NULL;
    hkeys.valid.obj = hkeys.offsets.obj = hkeys.data.obj = NULL;
    hvalues.valid.obj = hvalues.offsets.obj = hvalues.data.obj = NULL;
    PyObject *result = NULL;
    if (out_init(&offsets, 8 * rows_cap) < 0 || out_init(&stamps, 8 * rows_cap) < 0 ||
        out_init(&types, 4 * rows_cap) < 0 || binary_init(&keys, rows_cap, bytes_cap) < 0 ||
        binary_init(&values, rows_cap, bytes_cap) < 0)
        goto done;
    if (with_headers && (binary_init(&lists, rows_cap, 0) < 0 || binary_init(&hkeys, 64, 256) < 0 ||
                         binary_init(&hvalues, 64, 256) < 0))
        goto done;

    for (Py_ssize_t i = 0; i < nseg; i++) {
        if (i == usable) {
            PyErr_SetString(error, "records of more than 2 GiB in one decode");
            goto done;
        }
        segment_t s;
        if (parse_segment(items[i], &s) < 0)
            goto done;
        Py_buffer view;
        if (get_view(s.obj, &view, s.start, s.end) < 0)
            goto done;
        const uint8_t *b = (const uint8_t *)view.buf;
        Py_ssize_t pos = s.start;
        record_t r;
        int failed = 0;
        for (Py_ssize_t n = 0; n < s.count && !failed; n++) {
            int64_t offset, ts;
            if (walk_one(b, &pos, s.end, n, 0, error, &r) < 0 ||
                record_position(&r, s.base_offset, s.base_ts, n, error, &offset, &ts) < 0) {
                failed = 1;
                break;
            }
            if (offset < lo || offset >= hi)
                continue;
            if (s.ts_type == 1)
                ts = s.max_ts;
            int64_t *po = (int64_t *)out_reserve(&offsets, 8);
            int64_t *pt = po ? (int64_t *)out_reserve(&stamps, 8) : NULL;
            int32_t *pk = pt ? (int32_t *)out_reserve(&types, 4) : NULL;
            if (pk == NULL) {
                failed = 1;
                break;
            }
            *po = offset;
            *pt = (int64_t)((uint64_t)ts * 1000u); /* wraps as int64 arithmetic does */
            *pk = (int32_t)s.ts_type;
            if (binary_row(&keys, r.key_len >= 0, b + r.key_pos, r.key_len) < 0 ||
                binary_row(&values, r.value_len >= 0, b + r.value_pos, r.value_len) < 0) {
                failed = 1;
                break;
            }
            if (with_headers) {
                Py_ssize_t hpos = r.headers_pos;
                for (int64_t h = 0; h < r.header_count && !failed; h++) {
                    Py_ssize_t kp, kl, vp, vl;
                    next_header(b, &hpos, &kp, &kl, &vp, &vl);
                    if (binary_row(&hkeys, 1, b + kp, kl < 0 ? 0 : kl) < 0 ||
                        binary_row(&hvalues, vl >= 0, b + vp, vl) < 0)
                        failed = 1;
                }
                if (failed || list_row(&lists, r.header_count > 0, hkeys.rows) < 0)
                    failed = 1;
            }
        }
        if (!failed && trailing(pos, s.end, s.count, error) < 0)
            failed = 1;
        PyBuffer_Release(&view);
        if (failed)
            goto done;
    }

    result = PyTuple_New(with_headers ? 17 : 10);
    if (result == NULL)
        goto done;
    Py_ssize_t k = 0;
    PyObject *rows = PyLong_FromSsize_t(offsets.len / 8);
    if (rows == NULL)
        goto fail_result;
    PyTuple_SET_ITEM(result, k++, rows);
    out_t *plain[3] = {&offsets, &stamps, &types};
    for (int j = 0; j < 3; j++) {
        PyObject *obj = out_finish(plain[j]);
        if (obj == NULL)
            goto fail_result;
        PyTuple_SET_ITEM(result, k++, obj);
    }
    if (binary_finish(&keys, result, &k, 1, 1) < 0 || binary_finish(&values, result, &k, 1, 1) < 0)
        goto fail_result;
    if (with_headers &&
        (binary_finish(&lists, result, &k, 1, 0) < 0 || binary_finish(&hkeys, result, &k, 0, 1) < 0 ||
         binary_finish(&hvalues, result, &k, 1, 1) < 0))
        goto fail_result;
    goto done;
fail_result:
    Py_CLEAR(result);
done:
    Py_XDECREF(offsets.obj);
    Py_XDECREF(stamps.obj);
    Py_XDECREF(types.obj);
    binary_clear(&keys);
    binary_clear(&values);
    binary_clear(&lists);
    binary_clear(&hkeys);
    binary_clear(&hvalues);
    Py_DECREF(seq);
    return result;
}

/* ---- murmur2 and encode: Arrow columns into record batches ---------------------------------- */

static inline uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Kafka's Utils.murmur2 (the Java client's key hash): 32-bit arithmetic wraps as Java's int. */
static uint32_t murmur2_of(const uint8_t *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t tail = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < tail; i += 4) {
        uint32_t k = load_le32(data + i) * m;
        k ^= k >> 24;
        h = (h * m) ^ (k * m);
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[tail + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[tail + 1] << 8;
        /* fall through */
    case 1:
        h ^= data[tail];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2_of((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* Bytes of the varint of the non-negative (already zigzagged) u. */
static inline int uvarint_size(uint64_t u)
{
    int n = 1;
    while (u > 0x7F) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_uvarint(uint8_t *w, uint64_t u)
{
    while (u > 0x7F) {
        *w++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *w++ = (uint8_t)u;
    return w;
}

/* A key or value field: length varint (-1 null) and bytes. */
static inline int64_t field_size(int32_t len)
{
    return len < 0 ? 1 : uvarint_size((uint64_t)len << 1) + (int64_t)len;
}

/* A key or value: its length as a zigzag varint (-1, one byte 0x01, for null), then its bytes. */
static inline uint8_t *put_field(uint8_t *w, const uint8_t *data, int32_t len)
{
    if (len < 0) {
        *w++ = 1;
        return w;
    }
    w = put_uvarint(w, (uint64_t)len << 1);
    if (len > 0)
        memcpy(w, data, (size_t)len);
    return w + len;
}

/* The record at index of its batch, its length varint included (_records_py._record_size). */
static inline int64_t record_size(int64_t index, int32_t klen, int32_t vlen)
{
    int64_t body = 2 + uvarint_size((uint64_t)index << 1) + field_size(klen) + field_size(vlen) + 1;
    return uvarint_size((uint64_t)body << 1) + body;
}

static inline void put_be(uint8_t *w, uint64_t v, int bytes)
{
    for (int k = bytes - 1; k >= 0; k--) {
        w[k] = (uint8_t)v;
        v >>= 8;
    }
}

#define ENCODE_HEADER 61
#define BATCH_LENGTH_BASE (ENCODE_HEADER - 12)
#define INDEX_BOUND ((long long)1 << 60) /* array offsets and lengths: 4 * (first + rows + 1)
                                          * stays inside 64 unsigned bits */

/* One Arrow binary column as read once: per row the start in data and the length (-1 null).
 * Every offset and validity bit is read exactly once, checked, and kept here, so no later step
 * reads the caller's offsets again (another thread may write a bytearray while the GIL is
 * released or a CRC callback runs: the data may then change, never the bounds). */
typedef struct {
    PyObject *tuple;
    long long offset, rows;
    Py_buffer views[3];
    int held[3];
    const uint8_t *data;
    int32_t *start;
    int32_t *len;
} column_t;

static void column_clear(column_t *c)
{
    for (int k = 0; k < 3; k++)
        if (c->held[k]) {
            PyBuffer_Release(&c->views[k]);
            c->held[k] = 0;
        }
    PyMem_Free(c->start);
    PyMem_Free(c->len);
    c->start = c->len = NULL;
}

/* The shape of a column: a 5-tuple whose offset and length are in [0, 2**60]. */
static int column_shape(PyObject *obj, const char *name, column_t *c)
{
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 5) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a tuple (validity, offsets, data, offset, length)", name);
        return -1;
    }
    c->tuple = obj;
    PyObject *offset = PyNumber_Index(PyTuple_GET_ITEM(obj, 3));
    if (offset == NULL)
        return -1;
    PyObject *length = PyNumber_Index(PyTuple_GET_ITEM(obj, 4));
    if (length == NULL) {
        Py_DECREF(offset);
        return -1;
    }
    int o1, o2;
    c->offset = PyLong_AsLongLongAndOverflow(offset, &o1);
    c->rows = PyLong_AsLongLongAndOverflow(length, &o2);
    int failed = 0;
    if (PyErr_Occurred())
        failed = 1;
    else if (o1 || o2 || c->offset < 0 || c->rows < 0 || c->offset > INDEX_BOUND ||
             c->rows > INDEX_BOUND) {
        PyErr_Format(PyExc_ValueError, "%s: array offset %S and length %S must be in [0, 2**60]",
                     name, offset, length);
        failed = 1;
    }
    Py_DECREF(offset);
    Py_DECREF(length);
    return failed ? -1 : 0;
}

/* Read the column's buffers once (module rule order: bitmap, offsets buffer, each offset, the
 * last against the data); runs without the GIL after taking the views. */
static int column_read(column_t *c, const char *name)
{
    PyObject *items[3] = {PyTuple_GET_ITEM(c->tuple, 0), PyTuple_GET_ITEM(c->tuple, 1),
                          PyTuple_GET_ITEM(c->tuple, 2)};
    for (int k = 0; k < 3; k++) {
        if (items[k] == Py_None && k != 1)
            continue;
        if (PyObject_GetBuffer(items[k], &c->views[k], PyBUF_SIMPLE) < 0)
            return -1;
        c->held[k] = 1;
    }
    long long first = c->offset, rows = c->rows;
    const uint8_t *bits = c->held[0] ? (const uint8_t *)c->views[0].buf : NULL;
    if (bits != NULL && (long long)c->views[0].len * 8 < first + rows) {
        PyErr_Format(PyExc_ValueError,
                     "%s: a validity bitmap of %zd bytes is too short for %lld rows", name,
                     c->views[0].len, first + rows);
        return -1;
    }
    /* unsigned: 4 * (2**61 + 1) passes 2**63 */
    if ((unsigned long long)c->views[1].len < 4 * (unsigned long long)(first + rows + 1)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: an offsets buffer of %zd bytes is too short for %lld offsets", name,
                     c->views[1].len, first + rows + 1);
        return -1;
    }
    Py_ssize_t data_len = c->held[2] ? c->views[2].len : 0;
    static const uint8_t no_data[1] = {0};
    c->data = c->held[2] ? (const uint8_t *)c->views[2].buf : no_data;
    size_t n = (size_t)rows;
    c->start = PyMem_Malloc(n ? n * sizeof(int32_t) : 1);
    c->len = PyMem_Malloc(n ? n * sizeof(int32_t) : 1);
    if (c->start == NULL || c->len == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const uint8_t *offs = (const uint8_t *)c->views[1].buf + 4 * first;
    long long bad = -1; /* the offset index that broke a rule */
    int32_t bad_value = 0, previous = 0, kind = 0;
    Py_BEGIN_ALLOW_THREADS
    previous = (int32_t)load_le32(offs);
    if (previous < 0) {
        bad = 0;
        bad_value = previous;
        kind = 1;
    }
    for (long long i = 0; i < rows && bad < 0; i++) {
        int32_t next = (int32_t)load_le32(offs + 4 * (i + 1));
        if (next < 0) {
            bad = i + 1;
            bad_value = next;
            kind = 1;
            break;
        }
        if (next < previous) {
            bad = i + 1;
            bad_value = next;
            kind = 2;
            break;
        }
        long long bit = first + i;
        int present = bits == NULL || (bits[bit >> 3] >> (bit & 7)) & 1;
        c->start[i] = previous;
        c->len[i] = present ? next - previous : -1;
        previous = next;
    }
    Py_END_ALLOW_THREADS
    if (kind == 1) {
        PyErr_Format(PyExc_ValueError, "%s: offset %lld is negative (%d)", name, first + bad,
                     (int)bad_value);
        return -1;
    }
    if (kind == 2) {
        PyErr_Format(PyExc_ValueError, "%s: offsets decrease at %lld (%d, then %d)", name,
                     first + bad, (int)previous, (int)bad_value);
        return -1;
    }
    if ((Py_ssize_t)previous > data_len) {
        PyErr_Format(PyExc_ValueError, "%s: offset %lld points past the data (%d > %zd bytes)",
                     name, first + rows, (int)previous, data_len);
        return -1;
    }
    return 0;
}

/* The 61-byte header of a batch of count records and size bytes in all; CRC left 0. */
static void write_header(uint8_t *out, int64_t size, int32_t count, int64_t timestamp)
{
    put_be(out, 0, 8);                                    /* baseOffset */
    put_be(out + 8, (uint64_t)(size - 12), 4);            /* batchLength */
    put_be(out + 12, (uint64_t)-1, 4);                    /* partitionLeaderEpoch */
    out[16] = 2;                                          /* magic */
    put_be(out + 17, 0, 4);                               /* crc: filled last */
    put_be(out + 21, 0, 2);                               /* attributes */
    put_be(out + 23, (uint64_t)(uint32_t)(count - 1), 4); /* lastOffsetDelta */
    put_be(out + 27, (uint64_t)timestamp, 8);             /* baseTimestamp */
    put_be(out + 35, (uint64_t)timestamp, 8);             /* maxTimestamp */
    put_be(out + 43, (uint64_t)-1, 8);                    /* producerId */
    put_be(out + 51, (uint64_t)-1, 2);                    /* producerEpoch */
    put_be(out + 53, (uint64_t)-1, 4);                    /* baseSequence */
    put_be(out + 57, (uint64_t)(uint32_t)count, 4);       /* recordsCount */
}

/* One record at index of its batch; returns the position after it. */
static inline uint8_t *write_record(uint8_t *w, uint64_t index, const uint8_t *key, int32_t klen,
                                    const uint8_t *value, int32_t vlen)
{
    int64_t body = 2 + uvarint_size(index << 1) + field_size(klen) + field_size(vlen) + 1;
    w = put_uvarint(w, (uint64_t)body << 1);
    *w++ = 0; /* attributes */
    *w++ = 0; /* timestampDelta 0: every record has the batch's timestamp */
    w = put_uvarint(w, index << 1);
    w = put_field(w, key, klen);
    w = put_field(w, value, vlen);
    *w++ = 0; /* no headers */
    return w;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* An integer argument converted as operator.index; *overflow set when it does not fit 64 bits. */
static PyObject *index_arg(PyObject *obj, long long *value, int *overflow)
{
    PyObject *idx = PyNumber_Index(obj);
    if (idx == NULL)
        return NULL;
    *value = PyLong_AsLongLongAndOverflow(idx, overflow);
    if (*value == -1 && PyErr_Occurred()) {
        Py_DECREF(idx);
        return NULL;
    }
    return idx;
}

typedef struct {
    int64_t size;   /* the whole batch */
    int32_t count;  /* records */
    int32_t slot;   /* the partition's slot */
    uint8_t *out;   /* the bytes object's buffer */
    PyObject *obj;  /* the bytes object (owned until handed to a list) */
} batch_t;

/* encode: two sequential passes over the rows, none over a partition's scattered rows (reading
 * the rows partition by partition cost ~40 % more per row: each pass over a partition touches
 * the whole data for an eighth of it).
 *   1. (no GIL) each row's partition, mapped to a slot (the partition itself when partitions
 *      are few for the rows, else its rank among the partitions present), and the batches it
 *      fills: per slot the open batch's count and size, closed when the next record would pass
 *      the cap; batches are listed as they close;
 *   2. (GIL) the batches ordered by slot (closing order kept), each a new bytes object of its
 *      exact size with its header written;
 *   3. (no GIL) the records written in row order, each at its slot's cursor;
 *   4. (GIL) the CRC of each batch by crc(batch), the dict of lists. */
static PyObject *encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode() takes 7 arguments");
        return NULL;
    }
    PyObject *crc = args[6];
    PyObject *nums[4] = {NULL, NULL, NULL, NULL};
    long long v[4];
    int ovf[4];
    column_t keys_c, values_c;
    memset(&keys_c, 0, sizeof keys_c);
    memset(&values_c, 0, sizeof values_c);
    column_t *keys = args[0] == Py_None ? NULL : &keys_c, *values = &values_c;
    int32_t *slot_of = NULL, *present = NULL, *open_count = NULL;
    int64_t *open_size = NULL;
    Py_ssize_t *first = NULL, *cursor_batch = NULL;
    uint8_t **cursor = NULL;
    int32_t *cursor_index = NULL;
    batch_t *closed = NULL, *batches = NULL;
    Py_ssize_t nbatches = 0, nslots = 0;
    PyObject *result = NULL;

    for (int k = 0; k < 4; k++)
        if ((nums[k] = index_arg(args[2 + k], &v[k], &ovf[k])) == NULL)
            goto done;
    long long partitions = v[0], null_key = v[1];
    int64_t timestamp = v[2];
    if (ovf[0] || partitions < 1 || partitions > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "partitions %S outside [1, 2147483647]", nums[0]);
        goto done;
    }
    if (ovf[1] || null_key < 0 || null_key >= partitions) {
        PyErr_Format(PyExc_ValueError, "null_key_partition %S outside [0, %lld)", nums[1],
                     partitions);
        goto done;
    }
    if (ovf[2]) {
        PyErr_Format(PyExc_ValueError, "timestamp_ms %S outside 64 bits", nums[2]);
        goto done;
    }
    if (ovf[3]) {
        PyErr_Format(PyExc_ValueError, "max_batch_bytes %S outside 64 bits", nums[3]);
        goto done;
    }
    int64_t cap = v[3] < INT32_MAX ? v[3] : INT32_MAX;
    if ((keys != NULL && column_shape(args[0], "keys", keys) < 0) ||
        column_shape(args[1], "values", values) < 0)
        goto done;
    Py_ssize_t n = (Py_ssize_t)values->rows;
    if (keys != NULL && keys->rows != values->rows) {
        PyErr_Format(PyExc_ValueError, "%lld keys for %lld values", keys->rows, values->rows);
        goto done;
    }
    if ((keys != NULL && column_read(keys, "keys") < 0) || column_read(values, "values") < 0)
        goto done;

    /* 1a. each row's partition (and the one record-size rule), in row order */
    slot_of = PyMem_Malloc(n ? (size_t)n * sizeof(int32_t) : 1);
    closed = PyMem_Malloc(n ? (size_t)n * sizeof(batch_t) : 1); /* a batch holds a row at least */
    if (slot_of == NULL || closed == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t too_big = -1;
    int64_t too_big_size = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t klen = keys == NULL ? -1 : keys->len[i];
        int64_t size = record_size(0, klen, values->len[i]);
        if (BATCH_LENGTH_BASE + size > INT32_MAX) {
            too_big = i;
            too_big_size = size;
            break;
        }
        if (klen < 0)
            slot_of[i] = (int32_t)null_key;
        else
            slot_of[i] = (int32_t)((murmur2_of(keys->data + keys->start[i], klen) & 0x7FFFFFFFu) %
                                   (uint32_t)partitions);
    }
    Py_END_ALLOW_THREADS
    if (too_big >= 0) {
        PyErr_Format(PyExc_ValueError, "row %zd: a record of %lld bytes does not fit a batch",
                     too_big, (long long)too_big_size);
        goto done;
    }

    /* 1b. slots: the partition itself when the partitions are few for the rows, else the rank
     * of the partition among those present (then rows < partitions <= 2**31 - 1) */
    if (partitions <= (long long)n + 65536) {
        nslots = (Py_ssize_t)partitions;
    }
    else {
        present = PyMem_Malloc(n ? (size_t)n * sizeof(int32_t) : 1);
        if (present == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(present, slot_of, (size_t)n * sizeof(int32_t));
        qsort(present, (size_t)n, sizeof(int32_t), cmp_i32);
        for (Py_ssize_t i = 0; i < n; i++)
            if (nslots == 0 || present[nslots - 1] != present[i])
                present[nslots++] = present[i];
        for (Py_ssize_t i = 0; i < n; i++) {
            int32_t *hit = bsearch(&slot_of[i], present, (size_t)nslots, sizeof(int32_t), cmp_i32);
            slot_of[i] = (int32_t)(hit - present);
        }
    }
    size_t slots = nslots ? (size_t)nslots : 1;
    open_count = PyMem_Calloc(slots, sizeof(int32_t));
    open_size = PyMem_Calloc(slots, sizeof(int64_t));
    first = PyMem_Calloc(slots + 1, sizeof(Py_ssize_t));
    cursor_batch = PyMem_Calloc(slots, sizeof(Py_ssize_t));
    cursor = PyMem_Calloc(slots, sizeof(uint8_t *));
    cursor_index = PyMem_Calloc(slots, sizeof(int32_t));
    if (!open_count || !open_size || !first || !cursor_batch || !cursor || !cursor_index) {
        PyErr_NoMemory();
        goto done;
    }

    /* 1c. the batches, listed as they close */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t s = slot_of[i];
        int64_t rs = record_size(open_count[s], keys == NULL ? -1 : keys->len[i], values->len[i]);
        if (open_count[s] > 0 && open_size[s] + rs > cap) {
            closed[nbatches++] = (batch_t){open_size[s], open_count[s], s, NULL, NULL};
            open_count[s] = 0;
            rs = record_size(0, keys == NULL ? -1 : keys->len[i], values->len[i]);
        }
        if (open_count[s] == 0)
            open_size[s] = ENCODE_HEADER;
        open_count[s]++;
        open_size[s] += rs;
    }
    for (Py_ssize_t s = 0; s < nslots; s++)
        if (open_count[s] > 0)
            closed[nbatches++] = (batch_t){open_size[s], open_count[s], (int32_t)s, NULL, NULL};
    Py_END_ALLOW_THREADS

    /* 2. the batches by slot, closing order kept; their bytes objects and headers */
    batches = PyMem_Calloc(nbatches ? (size_t)nbatches : 1, sizeof(batch_t));
    if (batches == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t b = 0; b < nbatches; b++)
        first[closed[b].slot + 1]++;
    for (Py_ssize_t s = 0; s < nslots; s++)
        first[s + 1] += first[s];
    for (Py_ssize_t s = 0; s < nslots; s++)
        cursor_batch[s] = first[s];
    for (Py_ssize_t b = 0; b < nbatches; b++)
        batches[cursor_batch[closed[b].slot]++] = closed[b];
    for (Py_ssize_t b = 0; b < nbatches; b++) {
        batch_t *t = &batches[b];
        if ((t->obj = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)t->size)) == NULL)
            goto done;
        t->out = (uint8_t *)PyBytes_AS_STRING(t->obj);
        write_header(t->out, t->size, t->count, timestamp);
    }

    /* 3. the records, in row order, each at its slot's cursor */
    for (Py_ssize_t s = 0; s < nslots; s++) {
        cursor_batch[s] = first[s];
        if (first[s] < first[s + 1])
            cursor[s] = batches[first[s]].out + ENCODE_HEADER;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t s = slot_of[i];
        if (cursor_index[s] == batches[cursor_batch[s]].count) {
            cursor_batch[s]++;
            cursor_index[s] = 0;
            cursor[s] = batches[cursor_batch[s]].out + ENCODE_HEADER;
        }
        int32_t klen = keys == NULL ? -1 : keys->len[i], vlen = values->len[i];
        cursor[s] = write_record(cursor[s], (uint64_t)cursor_index[s]++,
                                 klen > 0 ? keys->data + keys->start[i] : NULL, klen,
                                 values->data + values->start[i], vlen);
    }
    Py_END_ALLOW_THREADS

    /* 4. CRCs, and {partition: [batch, ...]} in ascending partition order */
    result = PyDict_New();
    if (result == NULL)
        goto done;
    for (Py_ssize_t s = 0; s < nslots; s++) {
        if (first[s] == first[s + 1])
            continue;
        PyObject *list = PyList_New(first[s + 1] - first[s]);
        if (list == NULL)
            goto fail;
        for (Py_ssize_t b = first[s]; b < first[s + 1]; b++) {
            PyObject *sum = PyObject_CallOneArg(crc, batches[b].obj);
            unsigned long value = sum == NULL ? 0 : PyLong_AsUnsignedLongMask(sum);
            Py_XDECREF(sum);
            if (sum == NULL || (value == (unsigned long)-1 && PyErr_Occurred())) {
                Py_DECREF(list);
                goto fail;
            }
            put_be(batches[b].out + 17, (uint64_t)(value & 0xFFFFFFFFu), 4);
            PyList_SET_ITEM(list, b - first[s], batches[b].obj); /* the list owns it now */
            batches[b].obj = NULL;
        }
        PyObject *key = PyLong_FromLong(present == NULL ? (long)s : (long)present[s]);
        int failed = key == NULL || PyDict_SetItem(result, key, list) < 0;
        Py_XDECREF(key);
        Py_DECREF(list);
        if (failed)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    for (int k = 0; k < 4; k++)
        Py_XDECREF(nums[k]);
    if (batches != NULL)
        for (Py_ssize_t b = 0; b < nbatches; b++)
            Py_XDECREF(batches[b].obj);
    column_clear(&keys_c);
    column_clear(&values_c);
    PyMem_Free(slot_of);
    PyMem_Free(present);
    PyMem_Free(open_count);
    PyMem_Free(open_size);
    PyMem_Free(first);
    PyMem_Free(cursor_batch);
    PyMem_Free(cursor);
    PyMem_Free(cursor_index);
    PyMem_Free(closed);
    PyMem_Free(batches);
    return result;
}

/* ---- module ---------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "Validate a batch's records without decoding them (strom.protocol._records_py.scan)."},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "Decode a batch's records into objects (strom.protocol._records_py.decode)."},
    {"columns", (PyCFunction)(void (*)(void))columns, METH_FASTCALL,
     "Decode batches' records into Arrow column buffers (strom.protocol._records_py.columns)."},
    {"murmur2", (PyCFunction)murmur2, METH_O,
     "Kafka's Utils.murmur2 of a buffer, signed 32 bits (strom.protocol._records_py.murmur2)."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "Arrow key/value columns into record batches per partition "
     "(strom.protocol._records_py.encode)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_records_native",
    "The native record codec of strom.protocol.records (see _records_native.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__records_native(void)
{
    return PyModule_Create(&module);
}
