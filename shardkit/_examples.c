/* The compiled twin of `shardkit.example.decode_batch`'s per-record work: a batch of `tf.train.Example`s in the
 * plain form, scanned and their int64 and float values decoded into the arrays' buffers, in one call.
 *
 * `example.py` stays the reference: `_plain_features` is the scan, `_unpack_varints` and the rest of
 * `decode_batch` the decoding, and every record this takes is one the Python path takes, with the same values,
 * every record this refuses (None: "not plain") one it refuses with NotPlainExample
 * (tests/test_plain_decode.py runs both on the same records). `example.compiled_decoder()` says whether it is
 * used; SHARDKIT_PURE_PYTHON=1 forces Python. A plain CPython extension, optional: without a C compiler the
 * install skips it and the Python path runs.
 *
 * decode_plain(records, names, tags, lengths) -> (count, [(buffer, width), ...]) | None | NotImplemented
 *
 *   records  a sequence (or iterable) of bytes, one Example each; NotImplemented when one is not bytes
 *   names    the wanted features' names (bytes), no two alike
 *   tags     each one's Feature oneof tag: 0x1A int64_list, 0x12 float_list
 *   lengths  each one's count of values a record (FixedLenFeature), or -1 (VarLenFeature, made dense with -1)
 *
 * Each buffer is a bytearray of count x width native int64 or float32 values, row by row; width is the
 * length, or for -1 the largest count of any record. None when a record is not in the plain form.
 *
 * Lengths. The Python scan reads a length of any size (Python ints). Any length that reaches past the end of
 * the record makes it refuse the record sooner or later (a cut-short value, an index past the end, or a
 * position that cannot match), so here such a length refuses it at once, and lengths of 2^64 or more need no
 * exact value: they saturate to UINT64_MAX, which is past every end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TAG_INT64 0x1A /* Feature.int64_list = 3, length-delimited */
#define TAG_FLOAT 0x12 /* Feature.float_list = 2 */
#define MAX_VARINT 10  /* protobuf's longest varint, a negative int64 */

typedef struct {
    const char *name;
    Py_ssize_t name_size;
    int tag;
    Py_ssize_t length; /* -1: as long as the longest record's */
} Wanted;

typedef struct {
    const uint8_t *start; /* NULL: not found in this record */
    size_t size;
} Span;

/* A varint at d[*pos] (end exclusive), as example._varint reads it: its value, UINT64_MAX when 2^64 or more.
 * 0 when it runs past the end. */
static int read_varint(const uint8_t *d, size_t end, size_t *pos, uint64_t *out) {
    uint64_t value = 0;
    int shift = 0, big = 0;
    while (*pos < end) {
        uint64_t b = d[(*pos)++], bits = b & 0x7F;
        if (shift < 64) {
            if (shift > 57 && (bits >> (64 - shift)))
                big = 1;
            value |= bits << shift;
            shift += 7;
        } else if (bits) {
            big = 1;
        }
        if (b < 0x80) {
            *out = big ? UINT64_MAX : value;
            return 1;
        }
    }
    return 0;
}

/* A length at d[pos] that ends inside the record; else the record is refused (see "Lengths" above). */
#define TAKE_LENGTH(n)                                                        \
    do {                                                                      \
        if (!read_varint(d, end, &pos, &(n)) || (n) > (uint64_t)(end - pos))  \
            return 0;                                                         \
    } while (0)

/* d[pos] is `byte`, inside the record */
#define AT(byte) (pos < end && d[pos] == (byte))

static Py_ssize_t wanted_index(const Wanted *wanted, Py_ssize_t n_wanted, const uint8_t *key, size_t size) {
    for (Py_ssize_t i = 0; i < n_wanted; i++)
        if ((size_t)wanted[i].name_size == size && memcmp(wanted[i].name, key, size) == 0)
            return i;
    return -1;
}

/* example._plain_features and decode_batch's checks of its result, on one record: found[i] the packed values of
 * wanted[i]. 0 when the record is not in the plain form. */
static int scan_record(const uint8_t *d, size_t end, const Wanted *wanted, Py_ssize_t n_wanted, Span *found) {
    size_t pos = 0;
    uint64_t n;
    for (Py_ssize_t i = 0; i < n_wanted; i++)
        found[i].start = NULL;
    while (pos < end) {
        if (d[pos++] != 0x0A) /* Example.features */
            return 0;
        TAKE_LENGTH(n);
        size_t features_end = pos + n;
        while (pos < features_end) {
            if (d[pos++] != 0x0A) /* Features.feature, a map entry */
                return 0;
            TAKE_LENGTH(n);
            size_t entry_end = pos + n;
            if (!AT(0x0A)) /* its key */
                return 0;
            pos++;
            TAKE_LENGTH(n);
            const uint8_t *key = d + pos;
            size_t key_size = n;
            pos += n;
            if (!AT(0x12)) /* its value, a Feature */
                return 0;
            pos++;
            TAKE_LENGTH(n);
            if (pos + n != entry_end)
                return 0;
            Py_ssize_t i = wanted_index(wanted, n_wanted, key, key_size);
            if (i >= 0) {
                if (found[i].start != NULL || pos == entry_end)
                    return 0; /* a repeated key (the last would win) or a Feature of no kind */
                if (d[pos++] != wanted[i].tag)
                    return 0;
                TAKE_LENGTH(n);
                if (pos + n != entry_end)
                    return 0;
                if (n) {
                    if (d[pos++] != 0x0A) /* the list's values, packed */
                        return 0;
                    TAKE_LENGTH(n);
                    if (pos + n != entry_end)
                        return 0;
                }
                found[i].start = d + pos;
                found[i].size = entry_end - pos;
            }
            pos = entry_end;
        }
        if (pos != features_end)
            return 0;
    }
    for (Py_ssize_t i = 0; i < n_wanted; i++)
        if (found[i].start == NULL) /* a feature missing */
            return 0;
    return 1;
}

/* How many values a span of packed values holds; -1 when it is not whole: floats not a multiple of 4 bytes, or
 * varints that end cut short or run longer than protobuf's ten bytes (example._unpack_varints' refusals). */
static Py_ssize_t value_count(const Span *s, int tag) {
    if (tag == TAG_FLOAT)
        return s->size % 4 ? -1 : (Py_ssize_t)(s->size / 4);
    Py_ssize_t count = 0;
    int more = 0; /* continuation bytes of the varint being read */
    for (size_t k = 0; k < s->size; k++) {
        if (s->start[k] & 0x80) {
            if (++more >= MAX_VARINT)
                return -1;
        } else {
            count++;
            more = 0;
        }
    }
    return more ? -1 : count;
}

/* The values of a whole span (value_count >= 0) into out: int64 as protobuf's two's complement (the bits past
 * 64 of a tenth byte dropped, as numpy's shift in _unpack_varints drops them), float32 as written. */
static void decode_span(const Span *s, int tag, char *out) {
    if (tag == TAG_FLOAT) {
#if PY_LITTLE_ENDIAN
        memcpy(out, s->start, s->size);
#else
        for (size_t k = 0; k < s->size; k += 4) {
            out[k] = s->start[k + 3], out[k + 1] = s->start[k + 2];
            out[k + 2] = s->start[k + 1], out[k + 3] = s->start[k];
        }
#endif
        return;
    }
    int64_t *values = (int64_t *)out;
    uint64_t value = 0;
    int shift = 0;
    for (size_t k = 0; k < s->size; k++) {
        uint8_t b = s->start[k];
        value |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *values++ = (int64_t)value;
            value = 0;
            shift = 0;
        } else {
            shift += 7;
        }
    }
}

/* Every record scanned and counted: spans[r * n_wanted + i], counts likewise, widths[i]. 0 when one is not plain. */
static int scan_batch(const uint8_t *const *data, const size_t *sizes, Py_ssize_t n_records, const Wanted *wanted,
                      Py_ssize_t n_wanted, Span *spans, Py_ssize_t *counts, Py_ssize_t *widths) {
    for (Py_ssize_t i = 0; i < n_wanted; i++)
        widths[i] = wanted[i].length < 0 ? 0 : wanted[i].length;
    for (Py_ssize_t r = 0; r < n_records; r++) {
        Span *found = spans + r * n_wanted;
        if (!scan_record(data[r], sizes[r], wanted, n_wanted, found))
            return 0;
        for (Py_ssize_t i = 0; i < n_wanted; i++) {
            Py_ssize_t count = value_count(&found[i], wanted[i].tag);
            if (count < 0 || (wanted[i].length >= 0 && count != wanted[i].length))
                return 0;
            if (count > widths[i])
                widths[i] = count;
            counts[r * n_wanted + i] = count;
        }
    }
    return 1;
}

/* Each record's values of feature i into its row of out (4- or 8-byte items), the rest of the row -1. */
static void fill_feature(Py_ssize_t i, Py_ssize_t n_records, const Wanted *wanted, Py_ssize_t n_wanted,
                         const Span *spans, const Py_ssize_t *counts, Py_ssize_t width, char *out) {
    size_t item = wanted[i].tag == TAG_FLOAT ? 4 : 8;
    for (Py_ssize_t r = 0; r < n_records; r++) {
        char *row = out + (size_t)r * width * item;
        Py_ssize_t count = counts[r * n_wanted + i];
        decode_span(&spans[r * n_wanted + i], wanted[i].tag, row);
        for (Py_ssize_t k = count; k < width; k++) {
            if (item == 4) {
                float pad = -1.0f;
                memcpy(row + k * 4, &pad, 4);
            } else {
                int64_t pad = -1;
                memcpy(row + k * 8, &pad, 8);
            }
        }
    }
}

static int parse_wanted(PyObject *names, PyObject *tags, PyObject *lengths, Wanted *wanted, Py_ssize_t n_wanted) {
    for (Py_ssize_t i = 0; i < n_wanted; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            return 0;
        }
        wanted[i].name = PyBytes_AS_STRING(name);
        wanted[i].name_size = PyBytes_GET_SIZE(name);
        long tag = PyLong_AsLong(PyTuple_GET_ITEM(tags, i));
        if (tag == -1 && PyErr_Occurred())
            return 0;
        if (tag != TAG_INT64 && tag != TAG_FLOAT) {
            PyErr_SetString(PyExc_ValueError, "tags must be 0x1A (int64_list) or 0x12 (float_list)");
            return 0;
        }
        wanted[i].tag = (int)tag;
        wanted[i].length = PyLong_AsSsize_t(PyTuple_GET_ITEM(lengths, i));
        if (wanted[i].length == -1 && PyErr_Occurred())
            return 0;
        if (wanted[i].length < -1) {
            PyErr_SetString(PyExc_ValueError, "lengths must be -1 or at least 0");
            return 0;
        }
    }
    return 1;
}

static PyObject *decode_plain(PyObject *self, PyObject *args) {
    PyObject *records, *names, *tags, *lengths;
    if (!PyArg_ParseTuple(args, "OO!O!O!:decode_plain", &records, &PyTuple_Type, &names, &PyTuple_Type, &tags,
                          &PyTuple_Type, &lengths))
        return NULL;
    Py_ssize_t n_wanted = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(tags) != n_wanted || PyTuple_GET_SIZE(lengths) != n_wanted) {
        PyErr_SetString(PyExc_ValueError, "names, tags and lengths must be as long");
        return NULL;
    }
    /* A tuple of our own holds every record while the GIL is released: a list could lose them to another thread. */
    PyObject *seq = PySequence_Tuple(records);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n_records = PyTuple_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *result = NULL, *buffers = NULL;
    Wanted *wanted = PyMem_Calloc(n_wanted ? n_wanted : 1, sizeof(Wanted));
    Py_ssize_t *widths = PyMem_Calloc(n_wanted ? n_wanted : 1, sizeof(Py_ssize_t));
    const uint8_t **data = PyMem_Calloc(n_records ? n_records : 1, sizeof(*data));
    size_t *sizes = PyMem_Calloc(n_records ? n_records : 1, sizeof(size_t));
    Span *spans = NULL;
    Py_ssize_t *counts = NULL;
    size_t cells = (size_t)n_records * (size_t)n_wanted;
    if (n_wanted && (size_t)n_records > PY_SSIZE_T_MAX / sizeof(Span) / (size_t)n_wanted) {
        PyErr_NoMemory();
        goto done;
    }
    spans = PyMem_Calloc(cells ? cells : 1, sizeof(Span));
    counts = PyMem_Calloc(cells ? cells : 1, sizeof(Py_ssize_t));
    if (!wanted || !widths || !data || !sizes || !spans || !counts) {
        PyErr_NoMemory();
        goto done;
    }
    if (!parse_wanted(names, tags, lengths, wanted, n_wanted))
        goto done;
    for (Py_ssize_t r = 0; r < n_records; r++) {
        if (!PyBytes_Check(items[r])) { /* the Python path reads it */
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        data[r] = (const uint8_t *)PyBytes_AS_STRING(items[r]);
        sizes[r] = (size_t)PyBytes_GET_SIZE(items[r]);
    }
    int plain;
    Py_BEGIN_ALLOW_THREADS
    plain = scan_batch(data, sizes, n_records, wanted, n_wanted, spans, counts, widths);
    Py_END_ALLOW_THREADS
    if (!plain) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    buffers = PyList_New(n_wanted);
    if (buffers == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n_wanted; i++) {
        size_t item = wanted[i].tag == TAG_FLOAT ? 4 : 8;
        if (widths[i] && (size_t)n_records > (size_t)PY_SSIZE_T_MAX / item / (size_t)widths[i]) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject *buffer = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n_records * widths[i] * item));
        if (buffer == NULL)
            goto done;
        PyObject *pair = Py_BuildValue("(Nn)", buffer, widths[i]);
        if (pair == NULL)
            goto done;
        PyList_SET_ITEM(buffers, i, pair);
        char *out = PyByteArray_AS_STRING(buffer);
        Py_BEGIN_ALLOW_THREADS
        fill_feature(i, n_records, wanted, n_wanted, spans, counts, widths[i], out);
        Py_END_ALLOW_THREADS
    }
    result = Py_BuildValue("(nO)", n_records, buffers);
done:
    Py_XDECREF(buffers);
    PyMem_Free(wanted);
    PyMem_Free(widths);
    PyMem_Free(data);
    PyMem_Free(sizes);
    PyMem_Free(spans);
    PyMem_Free(counts);
    Py_DECREF(seq);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------
 * TFRecord framing: the compiled twin of `records.read_records`' per-record work.
 *
 * split_frames(buffer, check_crc) -> (payloads, end, problem)
 *
 * The whole records at the start of `buffer` (bytes-like), each [length u64le][masked CRC32C of the length]
 * [data][masked CRC32C of the data], checked in read_records' order: the length's CRC once its 12 bytes are
 * there, then the data's once the record is whole. `payloads` are their data (bytes), `end` the offset where
 * the first record not taken starts, `problem` 0 (the buffer ends there, maybe inside that record), 1 (that
 * record's length fails its CRC) or 2 (its data fails its CRC). read_records turns those into its errors and
 * reads on from `end`; it stays the reference (tests/test_records.py runs both on the same files).
 */

#include "crc32c.h" /* crc32c_best, crc32c_software, masked_crc: shared with wikiprep/_speedups.c */

static uint64_t load_u64le(const uint8_t *d) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | d[i];
    return v;
}

static uint32_t load_u32le(const uint8_t *d) {
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}

static PyObject *split_frames(PyObject *self, PyObject *args) {
    Py_buffer view;
    int check_crc;
    if (!PyArg_ParseTuple(args, "y*p:split_frames", &view, &check_crc))
        return NULL;
    const uint8_t *d = view.buf;
    size_t size = (size_t)view.len, pos = 0;
    int problem = 0;
    PyObject *payloads = PyList_New(0), *result = NULL;
    if (payloads == NULL)
        goto done;
    while (size - pos >= 12) {
        uint64_t length = load_u64le(d + pos);
        if (check_crc && masked_crc(d + pos, 8) != load_u32le(d + pos + 8)) {
            problem = 1;
            break;
        }
        if (length > size - pos - 12 || size - pos - 12 - length < 4)
            break; /* the record goes on past the buffer */
        const uint8_t *data = d + pos + 12;
        if (check_crc && masked_crc(data, (size_t)length) != load_u32le(data + length)) {
            problem = 2;
            break;
        }
        PyObject *payload = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)length);
        if (payload == NULL || PyList_Append(payloads, payload) < 0) {
            Py_XDECREF(payload);
            goto done;
        }
        Py_DECREF(payload);
        pos += 16 + (size_t)length;
    }
    result = Py_BuildValue("(Oni)", payloads, (Py_ssize_t)pos, problem);
done:
    Py_XDECREF(payloads);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *masked_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:masked_crc32c", &view))
        return NULL;
    uint32_t c = masked_crc(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *crc32c_kind(PyObject *self, PyObject *noargs) {
    return PyUnicode_FromString(crc32c_best == crc32c_software ? "table" : "sse4.2");
}

static PyMethodDef methods[] = {
    {"decode_plain", decode_plain, METH_VARARGS,
     "decode_plain(records, names, tags, lengths) -> (count, [(buffer, width), ...]), None (a record not in the "
     "plain form) or NotImplemented (a record not bytes): shardkit.example.decode_batch's per-record work."},
    {"split_frames", split_frames, METH_VARARGS,
     "split_frames(buffer, check_crc) -> (payloads, end, problem): the whole TFRecords at the start of buffer, "
     "checked (see records.read_records); problem 1: a bad length CRC at end, 2: a bad data CRC at end."},
    {"masked_crc32c", masked_crc32c, METH_VARARGS, "masked_crc32c(data) -> the TFRecord masked CRC32C of data."},
    {"crc32c_kind", crc32c_kind, METH_NOARGS, "crc32c_kind() -> 'sse4.2' or 'table': how CRC32C is computed here."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_examples",
                                    "The compiled batch decoder of shardkit.example (see decode_batch) and TFRecord framing of shardkit.records.", -1, methods};

PyMODINIT_FUNC PyInit__examples(void) {
    crc32c_init();
    return PyModule_Create(&module);
}
