/* Compiled speed-ups of wikiprep's BERT instance writer: the same bytes as the pure-Python paths, faster.
 *
 * What is here, each the twin of a Python function that stays the reference (`wikiprep/speedups.py` says
 * which one is used; WIKIPREP_PURE_PYTHON=1 forces Python; tests/test_speedups.py runs both and compares):
 *
 *   Generator      instances.generate + the layout's encoder (+ frame_record): google-research/bert's
 *                  pairing and masking loop, driven by a copy of a random.Random's Mersenne Twister state,
 *                  writing finished records (standard or remask TFRecords, framed) or rows (HDF5's, and
 *                  LDDL's Parquet's, framed) in bulk.
 *   shuffle        random.Random.shuffle of an int64 array, on such a state.
 *   copy_shuffled  the copy-out: spilled framed records in shuffled order, with their index lines, in blocks.
 *   row_columns    parquet.row_columns: framed rows as the Arrow buffers of LDDL's columns (tokens as text), and
 *                  as the standard layout's arrays (a finishing part's figures).
 *   LineTokenizer  instances._tokenize_lines: read_corpus's loop over lines (document breaks, sentences) with
 *                  the tokenizer's chunk ids from a table here; a printable-ASCII chunk missing from it is
 *                  computed here (FullTokenizer._chunk_ids), the others go back to FullTokenizer.
 *   crc32c         CRC-32C (Castagnoli), for the TFRecord framing.
 *
 * The random numbers. CPython's random.Random is MT19937 (Modules/_randommodule.c), consumed as:
 * getrandbits(k) for 1 <= k <= 32 takes one 32-bit word and keeps its top k bits (word >> (32 - k));
 * randbelow(n) (randint, shuffle) draws getrandbits(bit_length(n)) until the value is below n; random()
 * takes two words a, b: ((a >> 5) * 67108864 + (b >> 6)) / 9007199254740992. The words below are the
 * same function of the same state, so every draw equals the Python one; the state goes back to Python
 * afterwards (`state()`), where the final shuffle continues from it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------
 * Mersenne Twister, as CPython's _randommodule.c */

#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t mt[MT_N];
    int index;
} MT;

static void __attribute__((noinline)) mt_twist(MT *s) {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y, *mt = s->mt;
    int kk;
    for (kk = 0; kk < MT_N - MT_M; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    for (; kk < MT_N - 1; kk++) {
        y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
        mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
    s->index = 0;
}

/* genrand_uint32: the next 32-bit word */
static inline uint32_t mt_next(MT *s) {
    if (s->index >= MT_N)
        mt_twist(s);
    uint32_t y = s->mt[s->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* random.random() */
static inline double mt_random(MT *s) {
    uint32_t a = mt_next(s) >> 5, b = mt_next(s) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* random.Random._randbelow(n), n >= 1: getrandbits(n.bit_length()) until below n */
static inline uint32_t mt_below(MT *s, uint32_t n) {
    int shift = __builtin_clz(n); /* 32 - bit_length(n) */
    uint32_t r = mt_next(s) >> shift;
    while (r >= n)
        r = mt_next(s) >> shift;
    return r;
}

/* The internal state of random.Random.getstate() (its second item): 624 words, then the index. */
static int mt_from_tuple(MT *s, PyObject *state) {
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != MT_N + 1) {
        PyErr_SetString(PyExc_TypeError, "state: a tuple of 625 ints, as random.Random.getstate()[1]");
        return -1;
    }
    for (int i = 0; i < MT_N; i++) {
        unsigned long w = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(state, i));
        if (w == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        s->mt[i] = (uint32_t)w;
    }
    long index = PyLong_AsLong(PyTuple_GET_ITEM(state, MT_N));
    if (index == -1 && PyErr_Occurred())
        return -1;
    if (index < 0 || index > MT_N) {
        PyErr_SetString(PyExc_ValueError, "state: index out of range");
        return -1;
    }
    s->index = (int)index;
    return 0;
}

static PyObject *mt_to_tuple(const MT *s) {
    PyObject *t = PyTuple_New(MT_N + 1);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < MT_N; i++) {
        PyObject *w = PyLong_FromUnsignedLong(s->mt[i]);
        if (w == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, w);
    }
    PyObject *index = PyLong_FromLong(s->index);
    if (index == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    PyTuple_SET_ITEM(t, MT_N, index);
    return t;
}

/* ------------------------------------------------------------------------------------------------
 * CRC-32C and TFRecord's masked CRC (crc32c_best, crc32c_software, masked_crc): shared with shardkit/_examples.c */

#include "../shardkit/crc32c.h"

/* ------------------------------------------------------------------------------------------------
 * A growable byte buffer, and protobuf varints */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_append(Buf *b, const void *p, size_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static PyObject *buf_bytes(const Buf *b) { return PyBytes_FromStringAndSize(b->len ? b->data : "", (Py_ssize_t)b->len); }

static inline size_t vlen(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline char *vput(char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

static inline char *put_le32(char *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        *p++ = (char)(v >> (8 * i));
    return p;
}

static inline char *put_le64(char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        *p++ = (char)(v >> (8 * i));
    return p;
}

/* A tf.train.Example map entry {name, Feature} whose list holds `packed` bytes of values, as
 * shardkit.example.encode_example writes it: 0x0a len {0x0a len name, 0x12 len {tag len {0x0a len packed}}},
 * the innermost field left out when there are no values. `tag` 0x1a: int64_list, 0x12: float_list. */
#define TAG_INT64 0x1a
#define TAG_FLOAT 0x12

static inline size_t entry_size(size_t name_len, size_t packed) {
    size_t inner = packed ? 1 + vlen(packed) + packed : 0;
    size_t feature = 1 + vlen(inner) + inner;
    size_t entry = 1 + vlen(name_len) + name_len + 1 + vlen(feature) + feature;
    return 1 + vlen(entry) + entry;
}

/* Everything of the entry before its packed values; the caller writes those `packed` bytes next. */
static inline char *entry_head(char *p, const char *name, size_t name_len, size_t packed, char tag) {
    size_t inner = packed ? 1 + vlen(packed) + packed : 0;
    size_t feature = 1 + vlen(inner) + inner;
    size_t entry = 1 + vlen(name_len) + name_len + 1 + vlen(feature) + feature;
    *p++ = 0x0a;
    p = vput(p, entry);
    *p++ = 0x0a;
    p = vput(p, name_len);
    memcpy(p, name, name_len);
    p += name_len;
    *p++ = 0x12;
    p = vput(p, feature);
    *p++ = tag;
    p = vput(p, inner);
    if (packed) {
        *p++ = 0x0a;
        p = vput(p, packed);
    }
    return p;
}

#define NAME(s) s, (sizeof(s) - 1)

/* ------------------------------------------------------------------------------------------------
 * The generator */

/* The encoders here, by the code a layout gives (wikiprep.layouts: Layout.compiled_code; a layout without one
 * is never written here). Rows are the spilled form of the layouts written in columns (HDF5, and framed, LDDL's
 * Parquet). */
enum { LAYOUT_STANDARD = 0, LAYOUT_REMASK = 1, LAYOUT_ROWS = 2 };

typedef struct {
    PyObject_HEAD
    MT mt;
    Py_buffer tokens, starts, doc_first, doc_len, replacements, continuation, lengths, masked, random_next;
    int held; /* how many of the buffers above are held, in that order */
    /* Optional: the source of each (shuffled) document, and the instances counted per source (a mixture's). */
    Py_buffer doc_source, source_instances;
    int held_sources; /* how many of these two are held */
    int layout, framed, fixed, whole_word;
    Py_ssize_t seq, max_pred, dupe, n_docs, n_replacements, n_continuation;
    double mlm_prob, short_prob;
    int32_t cls, sep, mask;
    char pad_position[10];
    size_t pad_position_len;
    PyObject *misfit_error;
    Py_ssize_t pass, doc; /* the next document to make instances of */
    int64_t offset;       /* bytes made so far: the end offsets returned count from 0 */
    /* scratch, each max_seq_length long */
    int32_t *tok, *cand, *chosen, *positions, *labels, *word_starts, *words, *others;
    unsigned char *is_masked;
    uint32_t *vcode; /* per vocab id: its varint's bytes (ids below 2**28: at most 4), zero-padded to 4 */
    unsigned char *vsize; /* and their count */
    Buf out, ends;
} Generator;

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes, got %zd", what, itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void generator_release(Generator *g) {
    Py_buffer *views[] = {&g->tokens, &g->starts, &g->doc_first, &g->doc_len, &g->replacements,
                          &g->continuation, &g->lengths, &g->masked, &g->random_next};
    for (int i = 0; i < g->held; i++)
        PyBuffer_Release(views[i]);
    g->held = 0;
    if (g->held_sources > 0)
        PyBuffer_Release(&g->doc_source);
    if (g->held_sources > 1)
        PyBuffer_Release(&g->source_instances);
    g->held_sources = 0;
}

static void generator_dealloc(Generator *g) {
    generator_release(g);
    Py_XDECREF(g->misfit_error);
    PyMem_Free(g->tok);
    PyMem_Free(g->cand);
    PyMem_Free(g->chosen);
    PyMem_Free(g->positions);
    PyMem_Free(g->labels);
    PyMem_Free(g->word_starts);
    PyMem_Free(g->words);
    PyMem_Free(g->others);
    PyMem_Free(g->is_masked);
    PyMem_Free(g->vcode);
    PyMem_Free(g->vsize);
    buf_free(&g->out);
    buf_free(&g->ends);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static int generator_init(Generator *g, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"tokens", "sentence_starts", "doc_first", "doc_len", "state", "layout",
                             "max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob",
                             "dupe_factor", "fixed_mask_count", "do_whole_word_mask", "cls_id", "sep_id",
                             "mask_id", "replacements", "continuation", "lengths", "masked", "random_next",
                             "framed", "pad_position", "misfit_error", "doc_source", "source_instances", NULL};
    PyObject *tokens, *starts, *doc_first, *doc_len, *state, *replacements, *continuation, *lengths, *masked;
    PyObject *random_next, *misfit_error, *doc_source = Py_None, *source_instances = Py_None;
    const char *pad_position;
    Py_ssize_t pad_position_len;
    int cls, sep, mask;
    if (g->held || g->tok != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Generator is initialized once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOinnddnppiiiOOOOOpy#O|$OO:Generator", kwlist, &tokens,
                                     &starts, &doc_first, &doc_len, &state, &g->layout, &g->seq, &g->max_pred,
                                     &g->mlm_prob, &g->short_prob, &g->dupe, &g->fixed, &g->whole_word, &cls, &sep,
                                     &mask, &replacements, &continuation, &lengths, &masked, &random_next,
                                     &g->framed, &pad_position, &pad_position_len, &misfit_error, &doc_source,
                                     &source_instances))
        return -1;
    if ((doc_source == Py_None) != (source_instances == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "Generator: doc_source and source_instances go together");
        return -1;
    }
    if (g->layout < LAYOUT_STANDARD || g->layout > LAYOUT_ROWS) {
        PyErr_SetString(PyExc_ValueError, "layout: 0 standard, 1 remask, 2 rows");
        return -1;
    }
    if (g->seq < 5 || g->seq > INT32_MAX || g->max_pred < 0 || g->max_pred > INT32_MAX || g->dupe < 1) {
        PyErr_SetString(PyExc_ValueError, "max_seq_length, max_predictions_per_seq or dupe_factor out of range");
        return -1;
    }
    if (pad_position_len < 1 || pad_position_len > 10) {
        PyErr_SetString(PyExc_ValueError, "pad_position: a varint");
        return -1;
    }
    memcpy(g->pad_position, pad_position, pad_position_len);
    g->pad_position_len = (size_t)pad_position_len;
    g->cls = cls;
    g->sep = sep;
    g->mask = mask;
    if (mt_from_tuple(&g->mt, state) < 0)
        return -1;
    struct {
        PyObject *obj;
        Py_buffer *view;
        Py_ssize_t itemsize;
        int writable;
        const char *what;
    } wanted[] = {{tokens, &g->tokens, 4, 0, "tokens"},
                  {starts, &g->starts, 8, 0, "sentence_starts"},
                  {doc_first, &g->doc_first, 8, 0, "doc_first"},
                  {doc_len, &g->doc_len, 8, 0, "doc_len"},
                  {replacements, &g->replacements, 4, 0, "replacements"},
                  {continuation, &g->continuation, 1, 0, "continuation"},
                  {lengths, &g->lengths, 8, 1, "lengths"},
                  {masked, &g->masked, 8, 1, "masked"},
                  {random_next, &g->random_next, 8, 1, "random_next"}};
    for (int i = 0; i < 9; i++) {
        if (get_buffer(wanted[i].obj, wanted[i].view, wanted[i].itemsize, wanted[i].writable, wanted[i].what) < 0)
            return -1;
        g->held = i + 1;
    }
    g->n_docs = g->doc_first.len / 8;
    g->n_replacements = g->replacements.len / 4;
    g->n_continuation = g->continuation.len;
    if (g->doc_len.len / 8 != g->n_docs || g->n_docs < 1 || g->n_docs > UINT32_MAX || g->n_replacements < 1 ||
        g->n_replacements > UINT32_MAX || g->lengths.len / 8 != g->seq + 1 || g->masked.len / 8 != g->max_pred + 1 ||
        g->random_next.len / 8 != 2) {
        PyErr_SetString(PyExc_ValueError, "Generator: inconsistent sizes");
        return -1;
    }
    if (doc_source != Py_None) {
        if (get_buffer(doc_source, &g->doc_source, 4, 0, "doc_source") < 0)
            return -1;
        g->held_sources = 1;
        if (get_buffer(source_instances, &g->source_instances, 8, 1, "source_instances") < 0)
            return -1;
        g->held_sources = 2;
        const int32_t *DS = g->doc_source.buf;
        Py_ssize_t n_sources = g->source_instances.len / 8;
        int bad = g->doc_source.len / 4 != g->n_docs;
        for (Py_ssize_t d = 0; d < g->n_docs && !bad; d++)
            bad = DS[d] < 0 || DS[d] >= n_sources;
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "Generator: doc_source needs a source below len(source_instances) "
                                              "for every document");
            return -1;
        }
    }
    /* Every document's sentences and every sentence's tokens must lie inside the corpus: checked once here, so
     * the loop reads no memory it does not own whatever the caller passed. */
    const int64_t *S = g->starts.buf, *DF = g->doc_first.buf, *DL = g->doc_len.buf;
    Py_ssize_t n_starts = g->starts.len / 8, n_tokens = g->tokens.len / 4;
    for (Py_ssize_t s = 0; s + 1 < n_starts; s++)
        if (S[s] < 0 || S[s + 1] <= S[s] || S[s + 1] > n_tokens) {
            PyErr_SetString(PyExc_ValueError, "Generator: sentence_starts must rise within the tokens");
            return -1;
        }
    for (Py_ssize_t d = 0; d < g->n_docs; d++)
        if (DF[d] < 0 || DL[d] < 1 || DL[d] > UINT32_MAX || DF[d] + DL[d] > n_starts - 1) {
            PyErr_SetString(PyExc_ValueError, "Generator: a document outside the sentences");
            return -1;
        }
    /* continuation has a flag per vocab id: every id must be below its length */
    const int32_t *T = g->tokens.buf, *R = g->replacements.buf;
    Py_ssize_t n_vocab = g->n_continuation;
    int bad = n_vocab < 1 || n_vocab > (1 << 28) || cls < 0 || cls >= n_vocab || sep < 0 || sep >= n_vocab ||
              mask < 0 || mask >= n_vocab;
    for (Py_ssize_t t = 0; t < n_tokens && !bad; t++)
        bad = T[t] < 0 || T[t] >= n_vocab;
    for (Py_ssize_t r = 0; r < g->n_replacements && !bad; r++)
        bad = R[r] < 0 || R[r] >= n_vocab;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "Generator: a token id outside the vocabulary (continuation's length)");
        return -1;
    }
    g->vcode = PyMem_Malloc((size_t)n_vocab * 4);
    g->vsize = PyMem_Malloc((size_t)n_vocab);
    if (g->vcode == NULL || g->vsize == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t id = 0; id < n_vocab; id++) {
        char code[8] = {0};
        g->vsize[id] = (unsigned char)(vput(code, (uint64_t)id) - code);
        memcpy(&g->vcode[id], code, 4);
    }
    Py_INCREF(misfit_error);
    g->misfit_error = misfit_error;
    size_t n = (size_t)g->seq + 1;
    g->tok = PyMem_Calloc(n, 4);
    g->cand = PyMem_Calloc(n, 4);
    g->chosen = PyMem_Calloc(n, 4);
    g->positions = PyMem_Calloc(n, 4);
    g->labels = PyMem_Calloc(n, 4);
    g->word_starts = PyMem_Calloc(n, 4);
    g->words = PyMem_Calloc(n, 4);
    g->others = PyMem_Calloc(n, 4);
    g->is_masked = PyMem_Calloc(n, 1);
    if (!g->tok || !g->cand || !g->chosen || !g->positions || !g->labels || !g->word_starts || !g->words ||
        !g->others || !g->is_masked) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static inline size_t ids_size(const Generator *g, const int32_t *ids, Py_ssize_t n) {
    size_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        size += g->vsize[ids[i]];
    return size;
}

/* Token ids as varints, from the vocab's table: 4 bytes stored, the varint's length kept (the buffer has room). */
static inline char *put_id(const Generator *g, char *p, int32_t id) {
    memcpy(p, &g->vcode[id], 4);
    return p + g->vsize[id];
}

static inline char *put_ids(const Generator *g, char *p, const int32_t *ids, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        p = put_id(g, p, ids[i]);
    return p;
}

static inline size_t ints_size(const int32_t *v, Py_ssize_t n) {
    size_t size = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        size += vlen((uint32_t)v[i]);
    return size;
}

static inline char *put_ints(char *p, const int32_t *v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        p = vput(p, (uint32_t)v[i]);
    return p;
}

static inline char *put_float_weights(char *p, Py_ssize_t m, Py_ssize_t total) {
    static const char one[4] = {0x00, 0x00, (char)0x80, 0x3f}; /* 1.0f, little-endian */
    for (Py_ssize_t i = 0; i < m; i++, p += 4)
        memcpy(p, one, 4);
    memset(p, 0, 4 * (size_t)(total - m));
    return p + 4 * (total - m);
}

/* Room for a record of `size` bytes in g->out, with its frame and 4 bytes of slack (put_id stores 4):
 * where its first byte goes. */
static char *record_room(Generator *g, size_t size) {
    if (buf_reserve(&g->out, size + 20) < 0)
        return NULL;
    return g->out.data + g->out.len + (g->framed ? 12 : 0);
}

/* InstanceEncoder.encode: the standard layout's Example, written after g->out (framing room left); its size. */
static Py_ssize_t standard_record(Generator *g, Py_ssize_t n, Py_ssize_t len_a, Py_ssize_t m, int is_random) {
    Py_ssize_t seq = g->seq, pred = g->max_pred, pad = seq - n, pad_pred = pred - m;
    size_t ids = ids_size(g, g->tok, n) + (size_t)pad;
    size_t label_ids = ids_size(g, g->labels, m) + (size_t)pad_pred;
    size_t positions = ints_size(g->positions, m) + (size_t)pad_pred;
    size_t body = entry_size(9, ids) + entry_size(10, seq) + entry_size(13, label_ids) + entry_size(19, positions) +
                  entry_size(17, 4 * (size_t)pred) + entry_size(20, 1) + entry_size(11, seq);
    char *p = record_room(g, 1 + vlen(body) + body), *start = p;
    if (p == NULL)
        return -1;
    *p++ = 0x0a;
    p = vput(p, body);
    p = entry_head(p, NAME("input_ids"), ids, TAG_INT64);
    p = put_ids(g, p, g->tok, n);
    memset(p, 0, pad);
    p += pad;
    p = entry_head(p, NAME("input_mask"), seq, TAG_INT64);
    memset(p, 1, n);
    memset(p + n, 0, pad);
    p += seq;
    p = entry_head(p, NAME("masked_lm_ids"), label_ids, TAG_INT64);
    p = put_ids(g, p, g->labels, m);
    memset(p, 0, pad_pred);
    p += pad_pred;
    p = entry_head(p, NAME("masked_lm_positions"), positions, TAG_INT64);
    p = put_ints(p, g->positions, m);
    memset(p, 0, pad_pred);
    p += pad_pred;
    p = entry_head(p, NAME("masked_lm_weights"), 4 * (size_t)pred, TAG_FLOAT);
    p = put_float_weights(p, m, pred);
    p = entry_head(p, NAME("next_sentence_labels"), 1, TAG_INT64);
    *p++ = (char)(is_random ? 1 : 0);
    p = entry_head(p, NAME("segment_ids"), seq, TAG_INT64);
    memset(p, 0, len_a + 2);
    memset(p + len_a + 2, 1, n - len_a - 2);
    memset(p + n, 0, pad);
    p += seq;
    return p - start;
}

/* remask.RemaskEncoder.encode: Graphcore's static-mask layout (the masked tokens first). */
static Py_ssize_t remask_record(Generator *g, Py_ssize_t n, Py_ssize_t len_a, Py_ssize_t m, int is_random) {
    Py_ssize_t seq = g->seq, pred = g->max_pred, gap = pred - m, tail = seq - pred - (n - m), n_others = n - m;
    Py_ssize_t first_b = len_a + 2; /* positions from here on are segment 1 */
    int32_t *others = g->others;
    Py_ssize_t k = 0;
    for (Py_ssize_t q = 0; q < n; q++)
        if (!g->is_masked[q])
            others[k++] = (int32_t)q;
    size_t pad_len = g->pad_position_len;
    size_t listed = ints_size(g->positions, m);
    size_t ids = (size_t)(gap + tail);
    for (Py_ssize_t i = 0; i < m; i++)
        ids += g->vsize[g->tok[g->positions[i]]];
    for (Py_ssize_t i = 0; i < n_others; i++)
        ids += g->vsize[g->tok[others[i]]];
    size_t input_position = listed + pad_len * (size_t)gap + ints_size(others, n_others) + pad_len * (size_t)tail;
    size_t labels = ids_size(g, g->labels, m) + (size_t)gap;
    size_t body = entry_size(9, ids) + entry_size(14, input_position) + entry_size(18, vlen(m)) +
                  entry_size(13, labels) + entry_size(13, labels) + entry_size(19, listed) +
                  entry_size(17, 4 * (size_t)pred) + entry_size(20, 1) + entry_size(11, seq) +
                  entry_size(17, vlen(pred + n - m));
    char *p = record_room(g, 1 + vlen(body) + body), *start = p;
    if (p == NULL)
        return -1;
    *p++ = 0x0a;
    p = vput(p, body);
    p = entry_head(p, NAME("input_ids"), ids, TAG_INT64);
    for (Py_ssize_t i = 0; i < m; i++)
        p = put_id(g, p, g->tok[g->positions[i]]);
    memset(p, 0, gap);
    p += gap;
    for (Py_ssize_t i = 0; i < n_others; i++)
        p = put_id(g, p, g->tok[others[i]]);
    memset(p, 0, tail);
    p += tail;
    p = entry_head(p, NAME("input_position"), input_position, TAG_INT64);
    p = put_ints(p, g->positions, m);
    for (Py_ssize_t i = 0; i < gap; i++, p += pad_len)
        memcpy(p, g->pad_position, pad_len);
    p = put_ints(p, others, n_others);
    for (Py_ssize_t i = 0; i < tail; i++, p += pad_len)
        memcpy(p, g->pad_position, pad_len);
    p = entry_head(p, NAME("mask_padding_index"), vlen(m), TAG_INT64);
    p = vput(p, m);
    for (int twice = 0; twice < 2; twice++) {
        p = entry_head(p, twice ? "masked_lm_ids" : "masked_labels", 13, labels, TAG_INT64);
        p = put_ids(g, p, g->labels, m);
        memset(p, 0, gap);
        p += gap;
    }
    p = entry_head(p, NAME("masked_lm_positions"), listed, TAG_INT64);
    p = put_ints(p, g->positions, m);
    p = entry_head(p, NAME("masked_lm_weights"), 4 * (size_t)pred, TAG_FLOAT);
    p = put_float_weights(p, m, pred);
    p = entry_head(p, NAME("next_sentence_labels"), 1, TAG_INT64);
    *p++ = (char)(is_random ? 1 : 0);
    p = entry_head(p, NAME("segment_ids"), seq, TAG_INT64);
    for (Py_ssize_t i = 0; i < m; i++)
        *p++ = (char)(g->positions[i] >= first_b);
    memset(p, 0, gap);
    p += gap;
    for (Py_ssize_t i = 0; i < n_others; i++)
        *p++ = (char)(others[i] >= first_b);
    memset(p, 0, tail);
    p += tail;
    p = entry_head(p, NAME("seq_padding_index"), vlen(pred + n - m), TAG_INT64);
    p = vput(p, pred + n - m);
    return p - start;
}

/* hdf5.InstanceRows.encode: head <6i (n, len_a, m, is_random, bytes of ids, bytes of masked ids), the
 * positions as native int32s, then the ids and the masked ids as varints. */
static Py_ssize_t row(Generator *g, Py_ssize_t n, Py_ssize_t len_a, Py_ssize_t m, int is_random) {
    size_t ids = ids_size(g, g->tok, n), label_ids = ids_size(g, g->labels, m);
    char *p = record_room(g, 24 + 4 * (size_t)m + ids + label_ids), *start = p;
    if (p == NULL)
        return -1;
    p = put_le32(p, (uint32_t)n);
    p = put_le32(p, (uint32_t)len_a);
    p = put_le32(p, (uint32_t)m);
    p = put_le32(p, (uint32_t)(is_random ? 1 : 0));
    p = put_le32(p, (uint32_t)ids);
    p = put_le32(p, (uint32_t)label_ids);
    memcpy(p, g->positions, 4 * (size_t)m);
    p += 4 * m;
    p = put_ids(g, p, g->tok, n);
    p = put_ids(g, p, g->labels, m);
    return p - start;
}

static inline int is_continuation(const Generator *g, int32_t id) {
    return id < g->n_continuation && ((const unsigned char *)g->continuation.buf)[id];
}

/* create_masked_lm_predictions and the record of one instance: g->tok holds [CLS] A [SEP] B [SEP] (n tokens). */
static int emit_instance(Generator *g, Py_ssize_t n, Py_ssize_t len_a, int is_random) {
    MT *mt = &g->mt;
    int32_t *tok = g->tok, *cand = g->cand;
    double x = (double)n * g->mlm_prob;
    double rounded = round(x); /* Python's round(): halves to even */
    if (fabs(x - rounded) == 0.5)
        rounded = 2.0 * round(x / 2.0);
    Py_ssize_t num = (Py_ssize_t)rounded;
    if (num < 1)
        num = 1;
    if (num > g->max_pred)
        num = g->max_pred;
    if (g->fixed && n - g->seq + g->max_pred > num) /* Graphcore: at most seq - max_pred tokens unmasked */
        num = n - g->seq + g->max_pred;
    Py_ssize_t n_cand = 0;
    for (Py_ssize_t q = 1; q <= len_a; q++) /* every position but [CLS] and the two [SEP]s */
        cand[n_cand++] = (int32_t)q;
    for (Py_ssize_t q = len_a + 2; q < n - 1; q++)
        cand[n_cand++] = (int32_t)q;
    const int32_t *chosen;
    Py_ssize_t n_chosen;
    if (!g->whole_word) {
        for (Py_ssize_t i = n_cand - 1; i >= 1; i--) { /* draws: shuffle(cand_indexes) */
            uint32_t j = mt_below(mt, (uint32_t)(i + 1));
            int32_t t = cand[i];
            cand[i] = cand[j];
            cand[j] = t;
        }
        chosen = cand;
        n_chosen = num < n_cand ? num : n_cand;
    } else {
        /* Words: a ## piece joins the previous word, even across the [SEP] between A and B. */
        int32_t *starts = g->word_starts, *words = g->words, *picked = g->chosen;
        Py_ssize_t n_words = 0;
        for (Py_ssize_t i = 0; i < n_cand; i++)
            if (i == 0 || !is_continuation(g, tok[cand[i]]))
                starts[n_words++] = (int32_t)i;
        starts[n_words] = (int32_t)n_cand;
        for (Py_ssize_t w = 0; w < n_words; w++)
            words[w] = (int32_t)w;
        for (Py_ssize_t i = n_words - 1; i >= 1; i--) { /* draws: shuffle(cand_indexes) */
            uint32_t j = mt_below(mt, (uint32_t)(i + 1));
            int32_t t = words[i];
            words[i] = words[j];
            words[j] = t;
        }
        n_chosen = 0;
        for (Py_ssize_t k = 0; k < n_words; k++) {
            if (n_chosen >= num)
                break;
            Py_ssize_t w0 = starts[words[k]], w1 = starts[words[k] + 1];
            if (n_chosen + w1 - w0 > num)
                continue; /* a whole word that does not fit is skipped */
            for (Py_ssize_t i = w0; i < w1; i++)
                picked[n_chosen++] = cand[i];
        }
        chosen = picked;
    }
    memset(g->is_masked, 0, (size_t)n);
    for (Py_ssize_t k = 0; k < n_chosen; k++)
        g->is_masked[chosen[k]] = 1;
    Py_ssize_t m = 0;
    for (Py_ssize_t q = 0; q < n; q++) /* sorted positions, and the original tokens there (before masking) */
        if (g->is_masked[q]) {
            g->positions[m] = (int32_t)q;
            g->labels[m++] = tok[q];
        }
    const int32_t *replacements = g->replacements.buf;
    for (Py_ssize_t k = 0; k < n_chosen; k++) { /* draws per masked token: 80% [MASK], 10% kept, 10% random */
        if (mt_random(mt) < 0.8)
            tok[chosen[k]] = g->mask;
        else if (mt_random(mt) < 0.5)
            ;
        else
            tok[chosen[k]] = replacements[mt_below(mt, (uint32_t)g->n_replacements)];
    }
    if (m > g->max_pred) { /* cannot happen (num <= max_pred): the tables below are that long */
        PyErr_SetString(PyExc_SystemError, "Generator: more masks than max_predictions_per_seq");
        return -1;
    }
    if (g->layout == LAYOUT_REMASK && n - m > g->seq - g->max_pred) {
        PyErr_Format(g->misfit_error,
                     "an instance of %zd tokens with %zd masks does not fit the remask layout "
                     "(max_seq_length=%zd, max_predictions_per_seq=%zd)",
                     n, m, g->seq, g->max_pred);
        return -1;
    }
    Py_ssize_t size = g->layout == LAYOUT_STANDARD ? standard_record(g, n, len_a, m, is_random)
                      : g->layout == LAYOUT_REMASK ? remask_record(g, n, len_a, m, is_random)
                                                   : row(g, n, len_a, m, is_random);
    if (size < 0 || buf_reserve(&g->ends, 8) < 0)
        return -1;
    char *p = g->out.data + g->out.len;
    if (g->framed) { /* shardkit.records.frame_record */
        put_le64(p, (uint64_t)size);
        put_le32(p + 8, masked_crc((unsigned char *)p, 8));
        put_le32(p + 12 + size, masked_crc((unsigned char *)p + 12, (size_t)size));
        size += 16;
    }
    g->out.len += (size_t)size;
    g->offset += size;
    memcpy(g->ends.data + g->ends.len, &g->offset, 8);
    g->ends.len += 8;
    ((int64_t *)g->lengths.buf)[n] += 1;
    ((int64_t *)g->masked.buf)[m] += 1;
    ((int64_t *)g->random_next.buf)[is_random ? 1 : 0] += 1;
    return 0;
}

/* The instances of one document in one dupe pass (create_instances_from_document). */
static int document_instances(Generator *g, Py_ssize_t d) {
    MT *mt = &g->mt;
    const int32_t *T = g->tokens.buf;
    const int64_t *S = g->starts.buf, *DF = g->doc_first.buf, *DL = g->doc_len.buf;
    int64_t max_num_tokens = g->seq - 3;
    int64_t first = DF[d], n_sent = DL[d], last = n_sent - 1;
    int64_t target = max_num_tokens;
    if (mt_random(mt) < g->short_prob) /* draw: short target, once per document and pass */
        target = 2 + mt_below(mt, (uint32_t)(max_num_tokens - 1));
    int64_t i = 0, chunk_n = 0, length = 0;
    while (i < n_sent) {
        int64_t s = first + i;
        length += S[s + 1] - S[s];
        chunk_n++;
        if (i == last || length >= target) {
            int64_t c0 = s - chunk_n + 1;
            int64_t a_end = chunk_n >= 2 ? 1 + (int64_t)mt_below(mt, (uint32_t)(chunk_n - 1)) : 1; /* draw: end of A */
            int64_t a0 = S[c0], a1 = S[c0 + a_end], b0, b1;
            int is_random;
            if (chunk_n == 1 || mt_random(mt) < 0.5) { /* draw: random next (none for a one-segment chunk) */
                is_random = 1;
                int64_t target_b = target - (a1 - a0);
                uint32_t r_doc = 0;
                for (int t = 0; t < 10; t++) { /* draws: random document; after 10 hits it may stay d */
                    r_doc = mt_below(mt, (uint32_t)g->n_docs);
                    if ((Py_ssize_t)r_doc != d)
                        break;
                }
                int64_t r_first = DF[r_doc];
                int64_t j = r_first + mt_below(mt, (uint32_t)DL[r_doc]); /* draw: first sentence of B */
                int64_t r_last = r_first + DL[r_doc] - 1;
                b0 = S[j];
                b1 = S[j + 1];
                while (b1 - b0 < target_b && j < r_last) {
                    j++;
                    b1 = S[j + 1];
                }
                i -= chunk_n - a_end; /* put the unused segments back */
            } else {
                is_random = 0;
                b0 = a1;
                b1 = S[s + 1];
            }
            /* Truncate the longer side (B on ties), one draw per removed token: front or back. */
            int64_t la = a1 - a0, lb = b1 - b0;
            while (la + lb > max_num_tokens) {
                if (la > lb) {
                    if (mt_random(mt) < 0.5)
                        a0++;
                    else
                        a1--;
                    la--;
                } else {
                    if (mt_random(mt) < 0.5)
                        b0++;
                    else
                        b1--;
                    lb--;
                }
            }
            int32_t *tok = g->tok;
            Py_ssize_t n = (Py_ssize_t)(la + lb + 3);
            tok[0] = g->cls;
            memcpy(tok + 1, T + a0, 4 * (size_t)la);
            tok[la + 1] = g->sep;
            memcpy(tok + la + 2, T + b0, 4 * (size_t)lb);
            tok[n - 1] = g->sep;
            if (emit_instance(g, n, (Py_ssize_t)la, is_random) < 0)
                return -1;
            if (g->held_sources) /* an instance's source is its document's, segment A's */
                ((int64_t *)g->source_instances.buf)[((const int32_t *)g->doc_source.buf)[d]] += 1;
            chunk_n = 0;
            length = 0;
        }
        i++;
    }
    return 0;
}

/* All n bytes written: with write(2) at the file's position when at < 0, else with pwrite(2) at `at`;
   EINTR retried after Python's signal handlers ran (a SIGTERM raises there). */
static int write_all_at(int fd, const char *p, size_t n, int64_t at) {
    while (n > 0) {
        ssize_t r = at < 0 ? write(fd, p, n) : pwrite(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR) {
            if (PyErr_CheckSignals() < 0)
                return -1;
            continue;
        }
        if (r < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        p += r;
        n -= (size_t)r;
        if (at >= 0)
            at += r;
    }
    return 0;
}

PyDoc_STRVAR(generator_run_doc,
             "run(fd, max_bytes) -> ends, or None when every pass is done\n\n"
             "The instances of the next documents, whole documents until at least max_bytes are made, written\n"
             "to file descriptor fd (the records, or rows, one after another); returns the int64 end offset of\n"
             "each, counted from the first record the generator made.");

static PyObject *generator_run(Generator *g, PyObject *args) {
    int fd;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "in:run", &fd, &max_bytes))
        return NULL;
    if (g->tok == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Generator not initialized");
        return NULL;
    }
    if (g->pass >= g->dupe)
        Py_RETURN_NONE;
    g->out.len = g->ends.len = 0;
    while (g->pass < g->dupe && (g->out.len < (size_t)max_bytes || g->out.len == 0)) {
        if (document_instances(g, g->doc) < 0)
            return NULL;
        if (++g->doc == g->n_docs) {
            g->doc = 0;
            g->pass++;
        }
    }
    if (write_all_at(fd, g->out.data, g->out.len, -1) < 0)
        return NULL;
    if (g->out.cap > 2 * (size_t)max_bytes + (1 << 20)) /* a long document made a large batch: give it back */
        buf_free(&g->out);
    return buf_bytes(&g->ends);
}

static PyObject *generator_state(Generator *g, PyObject *Py_UNUSED(ignored)) { return mt_to_tuple(&g->mt); }

static PyObject *generator_documents_done(Generator *g, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(g->pass * g->n_docs + g->doc);
}

static PyMethodDef generator_methods[] = {
    {"run", (PyCFunction)generator_run, METH_VARARGS, generator_run_doc},
    {"state", (PyCFunction)generator_state, METH_NOARGS,
     "The Mersenne Twister state now, as random.Random.getstate()[1]."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef generator_getset[] = {
    {"documents_done", (getter)generator_documents_done, NULL, "documents done, over all dupe passes", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyDoc_STRVAR(generator_doc,
             "Generator(tokens, sentence_starts, doc_first, doc_len, state, layout, max_seq_length,\n"
             "          max_predictions_per_seq, masked_lm_prob, short_seq_prob, dupe_factor, fixed_mask_count,\n"
             "          do_whole_word_mask, cls_id, sep_id, mask_id, replacements, continuation, lengths,\n"
             "          masked, random_next, framed, pad_position, misfit_error, *, doc_source=None,\n"
             "          source_instances=None)\n\n"
             "instances.generate and a layout's encoder in one loop (see instances._spill_compiled).");

static PyTypeObject GeneratorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wikiprep._speedups.Generator",
    .tp_basicsize = sizeof(Generator),
    .tp_dealloc = (destructor)generator_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = generator_doc,
    .tp_methods = generator_methods,
    .tp_getset = generator_getset,
    .tp_init = (initproc)generator_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------------
 * shuffle, gather, crc32c */

static PyObject *shuffle(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *state, *items;
    if (!PyArg_ParseTuple(args, "OO:shuffle", &state, &items))
        return NULL;
    MT mt;
    if (mt_from_tuple(&mt, state) < 0)
        return NULL;
    Py_buffer view;
    if (get_buffer(items, &view, 8, 1, "items") < 0)
        return NULL;
    int64_t *x = view.buf;
    Py_ssize_t n = view.len / 8;
    if (n > (Py_ssize_t)UINT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "shuffle: at most 2**32 - 1 items");
        return NULL;
    }
    for (Py_ssize_t i = n - 1; i >= 1; i--) {
        uint32_t j = mt_below(&mt, (uint32_t)(i + 1));
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    PyBuffer_Release(&view);
    return mt_to_tuple(&mt);
}

PyDoc_STRVAR(shuffle_doc, "shuffle(state, items) -> state\n\n"
                          "random.Random.shuffle of the int64 array `items` in place, from the Mersenne Twister\n"
                          "`state` (random.Random.getstate()[1]); returns the state after it.");

static int pread_all(int fd, char *p, size_t n, int64_t at) {
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR) {
            if (PyErr_CheckSignals() < 0)
                return -1;
            continue;
        }
        if (r <= 0) {
            if (r == 0)
                errno = EIO; /* the spill is shorter than its offsets say */
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        p += r;
        n -= (size_t)r;
        at += r;
    }
    return 0;
}

#define STREAM_CHUNK (1 << 16)

typedef struct {          /* a bucket: consecutive records of one output, in output order */
    Py_ssize_t writer, first_k, count;
    int64_t bytes;        /* their size */
    int64_t streamed;     /* bytes appended to its stream so far (step 1) */
    char *tail;           /* the stream's last, partial chunk (STREAM_CHUNK bytes) */
    int64_t *chunks;      /* where its full chunks went in the file */
    Py_ssize_t n_chunks, chunks_cap;
} Bucket;

static PyObject *copy_shuffled(PyObject *Py_UNUSED(module), PyObject *args) {
    int fd;
    PyObject *offsets_obj, *order_obj, *emit;
    Py_ssize_t n_out, bucket_bytes;
    int indexed = 1;
    if (!PyArg_ParseTuple(args, "iOOnnO|p:copy_shuffled", &fd, &offsets_obj, &order_obj, &n_out, &bucket_bytes, &emit,
                          &indexed))
        return NULL;
    if (n_out < 1 || bucket_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "copy_shuffled: n_out >= 1, bucket_bytes >= 1");
        return NULL;
    }
    Py_buffer offsets, order;
    if (get_buffer(offsets_obj, &offsets, 8, 0, "offsets") < 0)
        return NULL;
    if (get_buffer(order_obj, &order, 8, 0, "order") < 0) {
        PyBuffer_Release(&offsets);
        return NULL;
    }
    const int64_t *off = offsets.buf, *ord = order.buf;
    Py_ssize_t n = order.len / 8;
    PyObject *result = NULL;
    int32_t *bucket_of = NULL;
    int64_t *arrival = NULL;
    unsigned char *seen = NULL;
    Bucket *buckets = NULL;
    Py_ssize_t n_buckets = 0, buckets_cap = 0;
    char *read_buf = NULL, *region = NULL;
    Buf index = {0};
    if (offsets.len / 8 != n + 1 || off[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "copy_shuffled: offsets must hold len(order) + 1 values from 0");
        goto done;
    }
    bucket_of = PyMem_Malloc((size_t)(n ? n : 1) * 4);
    arrival = PyMem_Malloc((size_t)(n ? n : 1) * 8);
    seen = PyMem_Calloc((size_t)n + 1, 1);
    if (!bucket_of || !arrival || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t largest = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i + 1] < off[i]) {
            PyErr_SetString(PyExc_ValueError, "copy_shuffled: offsets must not fall");
            goto done;
        }
        if (off[i + 1] - off[i] > largest)
            largest = off[i + 1] - off[i];
    }
    /* The buckets: each output's records in output order (record k goes to output k mod n_out), cut into runs
     * of about bucket_bytes. */
    for (Py_ssize_t j = 0; j < n_out; j++) {
        Bucket *cur = NULL;
        for (Py_ssize_t k = j; k < n; k += n_out) {
            int64_t inst = ord[k];
            if (inst < 0 || inst >= n || seen[inst]) {
                PyErr_SetString(PyExc_ValueError, "copy_shuffled: order must be a permutation of the records");
                goto done;
            }
            seen[inst] = 1;
            int64_t size = off[inst + 1] - off[inst];
            if (cur == NULL || (cur->count > 0 && cur->bytes + size > bucket_bytes)) {
                if (n_buckets == buckets_cap) {
                    buckets_cap = buckets_cap ? 2 * buckets_cap : 64;
                    Bucket *more = PyMem_Realloc(buckets, (size_t)buckets_cap * sizeof(Bucket));
                    if (more == NULL) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    buckets = more;
                }
                cur = &buckets[n_buckets++];
                memset(cur, 0, sizeof(Bucket));
                cur->writer = j;
                cur->first_k = k;
            }
            bucket_of[inst] = (int32_t)(cur - buckets);
            cur->count++;
            cur->bytes += size;
            if (n_buckets > INT32_MAX) {
                PyErr_SetString(PyExc_ValueError, "copy_shuffled: too many buckets");
                goto done;
            }
        }
    }
    /* Step 1: read the spill from its start, append each record to its bucket's stream, and write the streams'
     * full chunks back into the same file as a log from its start. The log never passes what has been read:
     * every byte logged was read before (the rest is in the buckets' tails). */
    size_t read_cap = (size_t)(largest > (1 << 22) ? largest : (1 << 22));
    read_buf = PyMem_Malloc(read_cap);
    if (read_buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t log_end = 0;
    for (Py_ssize_t first = 0; first < n;) {
        Py_ssize_t last = first + 1;
        while (last < n && off[last + 1] - off[first] <= (int64_t)read_cap)
            last++;
        if (pread_all(fd, read_buf, (size_t)(off[last] - off[first]), off[first]) < 0)
            goto done;
        for (Py_ssize_t i = first; i < last; i++) {
            Bucket *b = &buckets[bucket_of[i]];
            const char *p = read_buf + (off[i] - off[first]);
            size_t left = (size_t)(off[i + 1] - off[i]);
            arrival[i] = b->streamed;
            while (left > 0) {
                if (b->tail == NULL && (b->tail = PyMem_Malloc(STREAM_CHUNK)) == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                size_t used = (size_t)(b->streamed % STREAM_CHUNK), take = STREAM_CHUNK - used;
                if (take > left)
                    take = left;
                memcpy(b->tail + used, p, take);
                p += take;
                left -= take;
                b->streamed += (int64_t)take;
                if (b->streamed % STREAM_CHUNK == 0) { /* a full chunk: to the log */
                    if (b->n_chunks == b->chunks_cap) {
                        b->chunks_cap = b->chunks_cap ? 2 * b->chunks_cap : 16;
                        int64_t *more = PyMem_Realloc(b->chunks, (size_t)b->chunks_cap * 8);
                        if (more == NULL) {
                            PyErr_NoMemory();
                            goto done;
                        }
                        b->chunks = more;
                    }
                    if (write_all_at(fd, b->tail, STREAM_CHUNK, log_end) < 0)
                        goto done;
                    b->chunks[b->n_chunks++] = log_end;
                    log_end += STREAM_CHUNK;
                }
            }
        }
        first = last;
    }
    PyMem_Free(read_buf);
    read_buf = NULL;
    /* Step 2: each bucket's stream back in memory, its records put in output order, handed to emit. */
    int64_t biggest = 0;
    for (Py_ssize_t b = 0; b < n_buckets; b++)
        if (buckets[b].bytes > biggest)
            biggest = buckets[b].bytes;
    region = PyMem_Malloc((size_t)biggest + 1);
    if (region == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t writer_offset = 0;
    for (Py_ssize_t bi = 0; bi < n_buckets; bi++) {
        Bucket *b = &buckets[bi];
        if (bi > 0 && buckets[bi - 1].writer != b->writer)
            writer_offset = 0;
        for (Py_ssize_t c = 0; c < b->n_chunks; c++)
            if (pread_all(fd, region + c * STREAM_CHUNK, STREAM_CHUNK, b->chunks[c]) < 0)
                goto done;
        memcpy(region + b->n_chunks * STREAM_CHUNK, b->tail, (size_t)(b->streamed % STREAM_CHUNK));
        PyMem_Free(b->tail);
        b->tail = NULL;
        index.len = 0;
        size_t o = 0;
        PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)b->bytes);
        if (data == NULL)
            goto done;
        char *out = PyBytes_AS_STRING(data);
        for (Py_ssize_t c = 0, k = b->first_k; c < b->count; c++, k += n_out) {
            int64_t inst = ord[k];
            size_t size = (size_t)(off[inst + 1] - off[inst]);
            memcpy(out + o, region + arrival[inst], size);
            o += size;
            if (indexed) {
                if (buf_reserve(&index, 48) < 0) {
                    Py_DECREF(data);
                    goto done;
                }
                index.len += (size_t)snprintf(index.data + index.len, 48, "%lld %llu\n", (long long)writer_offset,
                                              (unsigned long long)size);
            }
            writer_offset += (int64_t)size;
        }
        PyObject *ret = PyObject_CallFunction(emit, "nNy#n", b->writer, data, index.data ? index.data : "",
                                              (Py_ssize_t)index.len, b->count);
        if (ret == NULL)
            goto done;
        Py_DECREF(ret);
    }
    result = Py_NewRef(Py_None);
done:
    if (buckets != NULL)
        for (Py_ssize_t b = 0; b < n_buckets; b++) {
            PyMem_Free(buckets[b].tail);
            PyMem_Free(buckets[b].chunks);
        }
    PyMem_Free(buckets);
    PyMem_Free(bucket_of);
    PyMem_Free(arrival);
    PyMem_Free(seen);
    PyMem_Free(read_buf);
    PyMem_Free(region);
    buf_free(&index);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&order);
    return result;
}

PyDoc_STRVAR(copy_shuffled_doc,
             "copy_shuffled(fd, offsets, order, n_out, bucket_bytes, emit, indexed=True)\n\n"
             "The copy-out of spilled records in shuffled order without a read per record: record i is bytes\n"
             "offsets[i]:offsets[i + 1] of `fd` (offsets from 0), and record order[k] goes to output k mod n_out.\n"
             "Calls emit(output, data, index_lines, count) with each output's records in order, about\n"
             "bucket_bytes at a time, and their index lines `offset length` (each output starting empty; none,\n"
             "b'', when not `indexed`).\n"
             "Overwrites the spill: its records are read once, front to back, and sorted into buckets of\n"
             "output order through a log written over the part already read.");

static inline uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get_le64(const unsigned char *p) {
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

/* ------------------------------------------------------------------------------------------------
 * Framed rows read back: hdf5.InstanceRows' rows, each framed as a TFRecord (LDDL's Parquet spills them, and a
 * dataset's staged shards hold them), as parquet.row_columns reads them. */

typedef struct {
    uint32_t n, len_a, m, is_random;
    const unsigned char *positions, *ids, *labels; /* m int32s; the n token ids and the m masked ids, as varints */
    size_t ids_len, labels_len;
} FramedRow;

/* The framed row at D[*at] (total bytes): its frame's two CRCs and its head's sizes checked, *at moved past it.
 * -1 with ValueError when it is cut short, fails a CRC or does not hold what its head says. */
static int next_row(const unsigned char *D, size_t total, size_t *at, FramedRow *r) {
    const unsigned char *f = D + *at;
    size_t left = total - *at;
    if (left < 16 || get_le64(f) > left - 16) {
        PyErr_SetString(PyExc_ValueError, "rows: a row cut short");
        return -1;
    }
    size_t length = (size_t)get_le64(f);
    const unsigned char *p = f + 12;
    if (masked_crc(f, 8) != get_le32(f + 8) || masked_crc(p, length) != get_le32(p + length)) {
        PyErr_SetString(PyExc_ValueError, "rows: a row whose checksum does not match");
        return -1;
    }
    if (length < 24)
        goto misfit;
    r->n = get_le32(p);
    r->len_a = get_le32(p + 4);
    r->m = get_le32(p + 8);
    r->is_random = get_le32(p + 12);
    r->ids_len = get_le32(p + 16);
    r->labels_len = get_le32(p + 20);
    if (r->is_random > 1 || r->m > r->n || (uint64_t)r->len_a + 3 > r->n ||
        24 + 4 * (uint64_t)r->m + r->ids_len + r->labels_len != length)
        goto misfit;
    r->positions = p + 24;
    r->ids = r->positions + 4 * (size_t)r->m;
    r->labels = r->ids + r->ids_len;
    *at += 16 + length;
    return 0;
misfit:
    PyErr_SetString(PyExc_ValueError, "rows: a row that does not hold what its head says");
    return -1;
}

/* Exactly k varints of p[0:len], each below `limit`, into out; -1 with ValueError else. */
static int get_ids(const unsigned char *p, size_t len, int32_t *out, uint32_t k, uint64_t limit) {
    size_t i = 0;
    for (uint32_t j = 0; j < k; j++) {
        uint64_t v = 0;
        int shift = 0;
        do {
            if (i == len || shift > 28)
                goto misfit;
            v |= (uint64_t)(p[i] & 0x7f) << shift;
            shift += 7;
        } while (p[i++] & 0x80);
        if (v >= limit)
            goto misfit;
        out[j] = (int32_t)v;
    }
    if (i == len)
        return 0;
misfit:
    PyErr_SetString(PyExc_ValueError, "rows: token ids that do not match the row's head or the vocabulary");
    return -1;
}

/* A row's ids, positions and masked ids decoded (tok: n, pos and lab: m), the positions checked below n; with
 * `unmask`, the masked ids put back at their positions. The scratch (one allocation: tok, pos, lab) grows to the
 * largest row. */
typedef struct {
    int32_t *tok, *pos, *lab;
    uint32_t cap;
} Scratch;

static int decode_row(const FramedRow *r, Scratch *s, uint64_t limit, int unmask) {
    if (r->n > s->cap) {
        int32_t *all = PyMem_Realloc(s->tok, 12 * (size_t)r->n);
        if (all == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->tok = all;
        s->pos = all + r->n;
        s->lab = all + 2 * (size_t)r->n;
        s->cap = r->n;
    }
    if (get_ids(r->ids, r->ids_len, s->tok, r->n, limit) < 0 ||
        get_ids(r->labels, r->labels_len, s->lab, r->m, limit) < 0)
        return -1;
    for (uint32_t k = 0; k < r->m; k++) {
        uint32_t q = get_le32(r->positions + 4 * k);
        if (q >= r->n) {
            PyErr_SetString(PyExc_ValueError, "rows: a masked position past the row's tokens");
            return -1;
        }
        s->pos[k] = (int32_t)q;
        if (unmask)
            s->tok[q] = s->lab[k];
    }
    return 0;
}

/* Where row `first` of the framed rows in D starts (the rows before it checked as they are passed); -1 else. */
static int skip_rows(const unsigned char *D, size_t total, size_t *at, Py_ssize_t first) {
    FramedRow row;
    for (Py_ssize_t k = 0; k < first; k++)
        if (next_row(D, total, at, &row) < 0)
            return -1;
    return 0;
}

/* A string column being filled: its int32 offsets and its bytes (Arrow's buffers). */
typedef struct {
    Buf offsets, data;
} Column;

static int column_end(Column *c) {
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "row_columns: a column of over 2 GiB (Arrow's int32 offsets)");
        return -1;
    }
    int32_t end = (int32_t)c->data.len;
    return buf_append(&c->offsets, &end, 4);
}

/* Tokens as text, a space between two: each token's bytes from text[start:end] (ends: int64s), 16 bytes copied at
 * once where the token is shorter and both buffers hold them (the extra bytes are overwritten or past the end). */
static int put_text(Column *c, const int32_t *ids, uint32_t k, const char *text, size_t text_len, const int64_t *E,
                    size_t longest) {
    if (buf_reserve(&c->data, (size_t)k * (longest + 1) + 16) < 0)
        return -1;
    char *p = c->data.data + c->data.len;
    for (uint32_t i = 0; i < k; i++) {
        int32_t id = ids[i];
        size_t start = (size_t)(id ? E[id - 1] : 0), len = (size_t)E[id] - start;
        if (len < 16 && start + 16 <= text_len)
            memcpy(p, text + start, 16);
        else
            memcpy(p, text + start, len);
        p += len;
        *p++ = ' ';
    }
    c->data.len = (size_t)(p - c->data.data) - (k ? 1 : 0);
    return column_end(c);
}

/* The standard layout's arrays of a block of rows (`batch`: input_ids, input_mask, segment_ids [count, seq] and
 * masked_lm_positions, masked_lm_ids [count, pred] int64s, masked_lm_weights [count, pred] float32s,
 * next_sentence_labels [count] int64s), zero-filled, and where each array's data starts. */
#define BATCH_ARRAYS 7

typedef struct {
    PyObject *arrays[BATCH_ARRAYS];
    int64_t *ids, *mask, *segments, *positions, *labels, *next;
    float *weights;
    Py_ssize_t seq, pred;
} Batch;

static int batch_new(Batch *b, Py_ssize_t count) {
    Py_ssize_t widths[BATCH_ARRAYS] = {b->seq, b->seq, b->seq, b->pred, b->pred, b->pred, 1};
    for (int a = 0; a < BATCH_ARRAYS; a++) {
        size_t size = (a == 5 ? 4 : 8) * (size_t)(count * widths[a]);
        if ((b->arrays[a] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size)) == NULL)
            return -1;
        memset(PyBytes_AS_STRING(b->arrays[a]), 0, size);
    }
    b->ids = (int64_t *)PyBytes_AS_STRING(b->arrays[0]);
    b->mask = (int64_t *)PyBytes_AS_STRING(b->arrays[1]);
    b->segments = (int64_t *)PyBytes_AS_STRING(b->arrays[2]);
    b->positions = (int64_t *)PyBytes_AS_STRING(b->arrays[3]);
    b->labels = (int64_t *)PyBytes_AS_STRING(b->arrays[4]);
    b->weights = (float *)PyBytes_AS_STRING(b->arrays[5]);
    b->next = (int64_t *)PyBytes_AS_STRING(b->arrays[6]);
    return 0;
}

/* Row r of the batch: its n tokens (A from 1 to len_a, B after the [SEP] at len_a + 1), its m masks. */
static void batch_row(Batch *b, Py_ssize_t r, const FramedRow *row, const Scratch *s, uint32_t m) {
    int64_t *ids = b->ids + r * b->seq, *mask = b->mask + r * b->seq, *segments = b->segments + r * b->seq;
    for (uint32_t i = 0; i < row->n; i++) {
        ids[i] = s->tok[i];
        mask[i] = 1;
        segments[i] = i >= row->len_a + 2;
    }
    for (uint32_t k = 0; k < m; k++) {
        b->positions[r * b->pred + k] = s->pos[k];
        b->labels[r * b->pred + k] = s->lab[k];
        b->weights[r * b->pred + k] = 1.0f;
    }
    b->next[r] = row->is_random;
}

static PyObject *row_columns(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer data, text, headers, ends_view, header_ends;
    Py_ssize_t first, count;
    int masks;
    PyObject *ends_obj, *header_ends_obj, *batch_dims = Py_None, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nny*Oy*Op|O:row_columns", &data, &first, &count, &text, &ends_obj, &headers,
                          &header_ends_obj, &masks, &batch_dims))
        return NULL;
    /* A, B, masked_lm_positions, masked_lm_labels: kept from call to call (the GIL is held throughout, and nothing
     * here calls back into Python), so that every block's columns are built in memory grown once: growing it
     * again for every block faulted in 60,000 fresh pages per 186,366 rows, two fifths of the call's time */
    static Column col[4];
    Buf num_tokens = {0}, random_next = {0};
    for (int c = 0; c < 4; c++)
        col[c].offsets.len = col[c].data.len = 0;
    Scratch s = {0};
    Batch batch = {{NULL}};
    int n_cols = masks ? 4 : 2, held = 0, with_batch = batch_dims != Py_None;
    if (with_batch && (!PyArg_ParseTuple(batch_dims, "nn", &batch.seq, &batch.pred) || batch.seq < 0 ||
                       batch.pred < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "row_columns: batch is (seq, pred), two counts");
        goto done;
    }
    if (get_buffer(ends_obj, &ends_view, 8, 0, "token_ends") < 0)
        goto done;
    held = 1;
    if (get_buffer(header_ends_obj, &header_ends, 8, 0, "header_ends") < 0)
        goto done;
    held = 2;
    const int64_t *E = ends_view.buf, *HE = header_ends.buf;
    Py_ssize_t n_vocab = ends_view.len / 8, n_headers = header_ends.len / 8;
    size_t longest = 0;
    for (Py_ssize_t id = 0; id < n_vocab; id++) {
        int64_t start = id ? E[id - 1] : 0;
        if (E[id] < start || E[id] > text.len) {
            PyErr_SetString(PyExc_ValueError, "row_columns: token_ends must rise within token_text");
            goto done;
        }
        if ((size_t)(E[id] - start) > longest)
            longest = (size_t)(E[id] - start);
    }
    for (Py_ssize_t h = 0; h < n_headers; h++)
        if (HE[h] < (h ? HE[h - 1] : 0) || HE[h] > headers.len) {
            PyErr_SetString(PyExc_ValueError, "row_columns: header_ends must rise within headers");
            goto done;
        }
    if (first < 0 || count < 0) {
        PyErr_SetString(PyExc_ValueError, "row_columns: first and count are counts of rows");
        goto done;
    }
    if (buf_reserve(&num_tokens, 2 * (size_t)count + 1) < 0 || buf_reserve(&random_next, (size_t)count / 8 + 1) < 0 ||
        (with_batch && batch_new(&batch, count) < 0))
        goto done;
    memset(random_next.data, 0, (size_t)count / 8 + 1);
    for (int c = 0; c < n_cols; c++)
        if (column_end(&col[c]) < 0) /* the offsets' leading 0 */
            goto done;
    const unsigned char *D = data.buf;
    size_t at = 0;
    FramedRow row;
    if (skip_rows(D, (size_t)data.len, &at, first) < 0)
        goto done;
    for (Py_ssize_t r = 0; r < count; r++) {
        if (next_row(D, (size_t)data.len, &at, &row) < 0 || decode_row(&row, &s, (uint64_t)n_vocab, !masks) < 0)
            goto done;
        if (with_batch && (row.n > (uint64_t)batch.seq || row.m > (uint64_t)batch.pred)) {
            PyErr_SetString(PyExc_ValueError, "row_columns: a row longer than the batch's seq tokens or pred masks");
            goto done;
        }
        num_tokens.data[2 * r] = (char)(row.n & 0xff); /* uint16: the layout refuses a longer --max-seq-length */
        num_tokens.data[2 * r + 1] = (char)((row.n >> 8) & 0xff);
        if (row.is_random)
            random_next.data[r / 8] |= (char)(1 << (r % 8));
        if (put_text(&col[0], s.tok + 1, row.len_a, text.buf, (size_t)text.len, E, longest) < 0 ||
            put_text(&col[1], s.tok + row.len_a + 2, row.n - row.len_a - 3, text.buf, (size_t)text.len, E,
                     longest) < 0)
            goto done;
        if (masks) { /* the positions after np.save's header for m uint16s, then the masked tokens' text */
            if ((Py_ssize_t)row.m >= n_headers) {
                PyErr_SetString(PyExc_ValueError, "row_columns: more masks than header_ends has headers");
                goto done;
            }
            int64_t h0 = row.m ? HE[row.m - 1] : 0;
            if (buf_append(&col[2].data, (const char *)headers.buf + h0, (size_t)(HE[row.m] - h0)) < 0 ||
                buf_reserve(&col[2].data, 2 * (size_t)row.m) < 0)
                goto done;
            for (uint32_t k = 0; k < row.m; k++) {
                col[2].data.data[col[2].data.len++] = (char)(s.pos[k] & 0xff);
                col[2].data.data[col[2].data.len++] = (char)((s.pos[k] >> 8) & 0xff);
            }
            if (column_end(&col[2]) < 0 || put_text(&col[3], s.lab, row.m, text.buf, (size_t)text.len, E, longest) < 0)
                goto done;
        }
        if (with_batch)
            batch_row(&batch, r, &row, &s, masks ? row.m : 0);
    }
    PyObject *columns = PyTuple_New(2 + 2 * n_cols);
    if (columns == NULL)
        goto done;
    PyTuple_SET_ITEM(columns, 0, PyBytes_FromStringAndSize(num_tokens.data, 2 * count));
    PyTuple_SET_ITEM(columns, 1, PyBytes_FromStringAndSize(random_next.data, (count + 7) / 8));
    for (int c = 0; c < n_cols; c++) {
        PyTuple_SET_ITEM(columns, 2 + 2 * c, buf_bytes(&col[c].offsets));
        PyTuple_SET_ITEM(columns, 3 + 2 * c, buf_bytes(&col[c].data));
    }
    for (Py_ssize_t i = 0; i < 2 + 2 * n_cols; i++)
        if (PyTuple_GET_ITEM(columns, i) == NULL) {
            Py_DECREF(columns);
            goto done;
        }
    if (!with_batch) {
        result = columns;
        goto done;
    }
    PyObject *arrays = PyTuple_New(BATCH_ARRAYS);
    if (arrays == NULL) {
        Py_DECREF(columns);
        goto done;
    }
    for (int a = 0; a < BATCH_ARRAYS; a++) {
        PyTuple_SET_ITEM(arrays, a, batch.arrays[a]);
        batch.arrays[a] = NULL;
    }
    result = PyTuple_Pack(2, columns, arrays);
    Py_DECREF(columns);
    Py_DECREF(arrays);
done:
    buf_free(&num_tokens);
    buf_free(&random_next);
    for (int a = 0; a < BATCH_ARRAYS; a++)
        Py_XDECREF(batch.arrays[a]);
    PyMem_Free(s.tok);
    if (held > 1)
        PyBuffer_Release(&header_ends);
    if (held > 0)
        PyBuffer_Release(&ends_view);
    PyBuffer_Release(&data);
    PyBuffer_Release(&text);
    PyBuffer_Release(&headers);
    return result;
}

PyDoc_STRVAR(row_columns_doc,
             "row_columns(data, first, count, token_text, token_ends, headers, header_ends, masks, batch=None)\n"
             "-> (num_tokens, random_next, A offsets, A data, B offsets, B data[, positions offsets, positions data,\n"
             "labels offsets, labels data]), or with batch=(seq, pred) (those, the standard layout's arrays)\n\n"
             "parquet.row_columns: framed rows first .. first + count - 1 of data as the Arrow buffers of LDDL's\n"
             "columns: uint16s, a validity-style bitmap, int32 offsets and bytes; token id i's text is\n"
             "token_text[token_ends[i - 1]:token_ends[i]], the positions follow np.save's header for their count m\n"
             "(headers[header_ends[m - 1]:header_ends[m]]). Without masks, A and B unmasked and no mask columns.\n"
             "With batch, also input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids (int64s),\n"
             "masked_lm_weights (float32s) and next_sentence_labels (int64s) of the same rows, zero-padded.");

static PyObject *crc32c(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer data;
    int software = 0;
    if (!PyArg_ParseTuple(args, "y*|p:crc32c", &data, &software))
        return NULL;
    uint32_t c = software ? crc32c_software(data.buf, (size_t)data.len) : crc32c_best(data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

PyDoc_STRVAR(crc32c_doc, "crc32c(data, software=False) -> int\n\n"
                         "CRC-32C of data (the CPU's instruction when it has one, unless `software` or\n"
                         "SHARDKIT_CRC32C_TABLE is set).");

/* ------------------------------------------------------------------------------------------------
 * LineTokenizer */

static PyObject *str_strip, *str_translate;

#define MAX_INPUT_CHARS_PER_WORD 200 /* tokenization.MAX_INPUT_CHARS_PER_WORD: a longer word is [UNK] */

static inline int isalnum_ascii(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* A printable-ASCII chunk's ids, by its bytes: open addressing, linear probing; keys and ids in one arena. */
typedef struct {
    uint64_t hash; /* 0: empty slot */
    uint32_t at;   /* the key's bytes in the arena, then its ids */
    uint16_t key_len, n_ids;
} Slot;

typedef struct {
    PyObject_HEAD
    PyObject *ids_of, *fill, *cache, *clean;
    Slot *slots;
    size_t cap, count, max_entries;
    Buf arena;
    /* FullTokenizer's vocabulary (token -> id), for computing a printable-ASCII chunk's ids here; NULL:
     * ask ids_of instead. */
    PyObject *vocab_ids;
    int lower, has_unk;
    Py_ssize_t max_len;
    int32_t unk_id;
} LineTokenizer;

static inline uint64_t chunk_hash(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h ? h : 1;
}

static int table_resize(LineTokenizer *t, size_t cap) {
    Slot *slots = PyMem_Calloc(cap, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].hash) {
            size_t j = (size_t)t->slots[i].hash & (cap - 1);
            while (slots[j].hash)
                j = (j + 1) & (cap - 1);
            slots[j] = t->slots[i];
        }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

static void table_clear(LineTokenizer *t) {
    PyMem_Free(t->slots);
    t->slots = NULL;
    t->cap = t->count = 0;
    buf_free(&t->arena);
}

static int table_insert(LineTokenizer *t, uint64_t h, const unsigned char *key, size_t key_len, const char *ids,
                        size_t ids_len) {
    if (key_len > UINT16_MAX || ids_len / 4 > UINT16_MAX)
        return 0; /* not kept: asked for again each time */
    if (t->count >= t->max_entries || t->arena.len + key_len + ids_len > UINT32_MAX)
        table_clear(t); /* full: emptied and refilled (FullTokenizer's policy) */
    if (2 * (t->count + 1) > t->cap && table_resize(t, t->cap ? 2 * t->cap : 1024) < 0)
        return -1;
    uint32_t at = (uint32_t)t->arena.len;
    if (buf_append(&t->arena, key, key_len) < 0 || buf_append(&t->arena, ids, ids_len) < 0)
        return -1;
    size_t j = (size_t)h & (t->cap - 1);
    while (t->slots[j].hash)
        j = (j + 1) & (t->cap - 1);
    t->slots[j].hash = h;
    t->slots[j].at = at;
    t->slots[j].key_len = (uint16_t)key_len;
    t->slots[j].n_ids = (uint16_t)(ids_len / 4);
    t->count++;
    return 0;
}

static int append_packed(PyObject *ids, Buf *out) {
    if (!PyBytes_Check(ids) || PyBytes_GET_SIZE(ids) % 4) {
        PyErr_SetString(PyExc_TypeError, "LineTokenizer: a chunk's ids must be packed int32 bytes");
        return -1;
    }
    return buf_append(out, PyBytes_AS_STRING(ids), (size_t)PyBytes_GET_SIZE(ids));
}

static int is_printable_ascii(const Py_UCS1 *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return 0;
    return 1;
}

/* A Python int as int32 in *out: 0, or -1 with OverflowError naming `what` (or the int's own error). */
static int as_int32(PyObject *value, const char *what, int32_t *out) {
    long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "LineTokenizer: %s does not fit in int32", what);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* The id of token p[0:n] (ASCII) in vocab_ids: 1 with *id set, 0 when absent, -1 on error. */
static int vocab_id(LineTokenizer *t, const char *p, Py_ssize_t n, int32_t *id) {
    PyObject *token = PyUnicode_FromStringAndSize(p, n);
    if (token == NULL)
        return -1;
    PyObject *value = PyDict_GetItemWithError(t->vocab_ids, token);
    Py_DECREF(token);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return as_int32(value, "a vocabulary id", id) < 0 ? -1 : 1;
}

/* FullTokenizer._wordpiece of one word (ASCII, 1..MAX_INPUT_CHARS_PER_WORD chars; the caller checks the
 * length): greedy longest-match-first, "##" before a piece not starting the word, the first piece at most
 * max_len characters, the others max_len - 2 (the window of the Python code). Appends the ids; 1 when some
 * position has no piece (the word is [UNK]: nothing appended), 0 when spelt, -1 on error. */
static int word_pieces(LineTokenizer *t, const char *word, Py_ssize_t n, Buf *out) {
    char piece[2 + MAX_INPUT_CHARS_PER_WORD];
    size_t before = out->len;
    Py_ssize_t start = 0;
    piece[0] = piece[1] = '#';
    while (start < n) {
        Py_ssize_t window = start == 0 ? t->max_len : t->max_len - 2;
        Py_ssize_t end = start + window < n ? start + window : n;
        int32_t id = 0;
        int found = 0;
        while (start < end) {
            if (start == 0) {
                found = vocab_id(t, word, end, &id);
            } else {
                memcpy(piece + 2, word + start, (size_t)(end - start));
                found = vocab_id(t, piece, 2 + end - start, &id);
            }
            if (found)
                break;
            end--;
        }
        if (found < 0)
            return -1;
        if (!found) {
            out->len = before;
            return 1;
        }
        if (buf_append(out, &id, 4) < 0)
            return -1;
        start = end;
    }
    return 0;
}

/* FullTokenizer._chunk_ids of a printable-ASCII chunk (no spaces): lower-cased when do_lower_case, split into
 * runs of letters and digits and single other characters (all punctuation to the original), each piece
 * WordPiece'd; a piece longer than MAX_INPUT_CHARS_PER_WORD, or one that cannot be spelt, is [UNK].
 * Appends the ids: 0; 1 when an [UNK] is needed and the vocabulary has none (nothing appended); -1 on error. */
static int ascii_chunk_wordpieces(LineTokenizer *t, const unsigned char *key, size_t n, Buf *out) {
    char word[MAX_INPUT_CHARS_PER_WORD];
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && isalnum_ascii(key[j]))
            j++;
        if (j == i)
            j = i + 1; /* one punctuation character */
        size_t len = j - i;
        int rc = 1;
        if (len <= MAX_INPUT_CHARS_PER_WORD) {
            for (size_t k = 0; k < len; k++) {
                unsigned char c = key[i + k];
                word[k] = (char)(t->lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
            }
            rc = word_pieces(t, word, (Py_ssize_t)len, out);
            if (rc < 0)
                return -1;
        }
        if (rc == 1) {
            if (!t->has_unk)
                return 1;
            if (buf_append(out, &t->unk_id, 4) < 0)
                return -1;
        }
        i = j;
    }
    return 0;
}

/* A printable-ASCII chunk, line[a:b] (its bytes at key): from the table, else computed (or ids_of(chunk)), then kept. */
static int ascii_chunk_ids(LineTokenizer *t, PyObject *line, const unsigned char *key, Py_ssize_t a, Py_ssize_t b,
                           Buf *out) {
    size_t n = (size_t)(b - a);
    uint64_t h = chunk_hash(key, n);
    if (t->cap) {
        size_t j = (size_t)h & (t->cap - 1);
        while (t->slots[j].hash) {
            Slot *s = &t->slots[j];
            if (s->hash == h && s->key_len == n && memcmp(t->arena.data + s->at, key, n) == 0)
                return buf_append(out, t->arena.data + s->at + n, 4 * (size_t)s->n_ids);
            j = (j + 1) & (t->cap - 1);
        }
    }
    if (t->vocab_ids != NULL) {
        size_t before = out->len;
        int rc = ascii_chunk_wordpieces(t, key, n, out);
        if (rc < 0)
            return -1;
        if (rc == 0)
            return table_insert(t, h, key, n, out->data + before, out->len - before);
        out->len = before; /* a word needing the [UNK] this vocabulary lacks: FullTokenizer raises the error */
    }
    PyObject *chunk = PyUnicode_Substring(line, a, b);
    if (chunk == NULL)
        return -1;
    PyObject *ids = PyObject_CallOneArg(t->ids_of, chunk);
    Py_DECREF(chunk);
    if (ids == NULL)
        return -1;
    int rc = append_packed(ids, out);
    if (rc == 0)
        rc = table_insert(t, h, key, n, PyBytes_AS_STRING(ids), (size_t)PyBytes_GET_SIZE(ids));
    Py_DECREF(ids);
    return rc;
}

/* Any other chunk: FullTokenizer.cache, else fill(chunk) (which caches it there). */
static int dict_chunk_ids(LineTokenizer *t, PyObject *chunk, Buf *out) {
    PyObject *ids = PyDict_GetItemWithError(t->cache, chunk);
    if (ids != NULL) {
        Py_INCREF(ids);
    } else {
        if (PyErr_Occurred())
            return -1;
        ids = PyObject_CallOneArg(t->fill, chunk);
        if (ids == NULL)
            return -1;
    }
    int rc = append_packed(ids, out);
    Py_DECREF(ids);
    return rc;
}


/* The ids of one line (FullTokenizer.encode_packed of line.strip()), appended to out; *blank when it strips to "". */
static int line_ids(LineTokenizer *t, PyObject *line, Buf *out, int *blank) {
    *blank = 0;
    if (!PyUnicode_Check(line)) {
        PyErr_SetString(PyExc_TypeError, "LineTokenizer: lines must be str");
        return -1;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(line);
    if (PyUnicode_IS_ASCII(line) && is_printable_ascii(PyUnicode_1BYTE_DATA(line), n)) {
        /* Printable ASCII: the only whitespace is ' ' and nothing is cleaned; strip and split on spaces here. */
        const Py_UCS1 *s = PyUnicode_1BYTE_DATA(line);
        Py_ssize_t i = 0;
        while (i < n && s[i] == ' ')
            i++;
        if (i == n) {
            *blank = 1;
            return 0;
        }
        while (i < n) {
            Py_ssize_t j = i;
            while (j < n && s[j] != ' ')
                j++;
            if (ascii_chunk_ids(t, line, s + i, i, j, out) < 0)
                return -1;
            i = j;
            while (i < n && s[i] == ' ')
                i++;
        }
        return 0;
    }
    /* Anything else: str's own strip, translate (the tokenizer's cleaning table) and split. */
    PyObject *stripped = PyObject_CallMethodNoArgs(line, str_strip);
    if (stripped == NULL)
        return -1;
    Py_ssize_t m = PyUnicode_GET_LENGTH(stripped);
    if (m == 0) {
        Py_DECREF(stripped);
        *blank = 1;
        return 0;
    }
    PyObject *cleaned;
    if (PyUnicode_IS_ASCII(stripped) && is_printable_ascii(PyUnicode_1BYTE_DATA(stripped), m)) {
        cleaned = stripped;
    } else {
        cleaned = PyObject_CallMethodOneArg(stripped, str_translate, t->clean);
        Py_DECREF(stripped);
        if (cleaned == NULL)
            return -1;
    }
    PyObject *chunks = PyUnicode_Split(cleaned, NULL, -1);
    Py_DECREF(cleaned);
    if (chunks == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(chunks); k++) {
        /* A chunk's ids depend on the chunk alone: a printable-ASCII one is looked up (or computed) as in a
         * printable-ASCII line. */
        PyObject *chunk = PyList_GET_ITEM(chunks, k);
        Py_ssize_t len = PyUnicode_GET_LENGTH(chunk);
        int rc = PyUnicode_IS_ASCII(chunk) && is_printable_ascii(PyUnicode_1BYTE_DATA(chunk), len)
                     ? ascii_chunk_ids(t, chunk, PyUnicode_1BYTE_DATA(chunk), 0, len, out)
                     : dict_chunk_ids(t, chunk, out);
        if (rc < 0) {
            Py_DECREF(chunks);
            return -1;
        }
    }
    Py_DECREF(chunks);
    return 0;
}

static PyObject *line_tokenizer_tokenize(LineTokenizer *t, PyObject *args) {
    PyObject *lines;
    long long n_tokens, n_sentences, last_doc;
    if (t->ids_of == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LineTokenizer not initialized");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!LLL:tokenize", &PyList_Type, &lines, &n_tokens, &n_sentences, &last_doc))
        return NULL;
    Buf tokens = {0}, sentence_ends = {0}, doc_starts = {0};
    PyObject *result = NULL;
    Py_INCREF(t);
    Py_INCREF(lines); /* ids_of and fill run Python code */
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lines); k++) {
        PyObject *line = PyList_GET_ITEM(lines, k);
        Py_INCREF(line);
        size_t before = tokens.len;
        int blank, rc = line_ids(t, line, &tokens, &blank);
        Py_DECREF(line);
        if (rc < 0)
            goto done;
        if (blank) {
            if (n_sentences > last_doc) { /* a blank line ends a non-empty document */
                last_doc = n_sentences;
                if (buf_append(&doc_starts, &last_doc, 8) < 0)
                    goto done;
            }
        } else if (tokens.len > before) { /* a line giving no tokens is skipped */
            n_tokens += (long long)(tokens.len - before) / 4;
            n_sentences++;
            if (buf_append(&sentence_ends, &n_tokens, 8) < 0)
                goto done;
        }
    }
    PyObject *ids = buf_bytes(&tokens), *s = ids ? buf_bytes(&sentence_ends) : NULL, *d = s ? buf_bytes(&doc_starts) : NULL;
    if (d == NULL) {
        Py_XDECREF(ids);
        Py_XDECREF(s);
        goto done;
    }
    result = Py_BuildValue("(NNN)", ids, s, d);
done:
    Py_DECREF(lines);
    Py_DECREF(t);
    buf_free(&tokens);
    buf_free(&sentence_ends);
    buf_free(&doc_starts);
    return result;
}

static int line_tokenizer_init(LineTokenizer *t, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"ids_of", "fill", "cache", "clean_table", "max_entries", "vocab_ids", "do_lower_case",
                             "max_len", "unk_id", NULL};
    PyObject *ids_of, *fill, *cache, *clean, *vocab_ids = Py_None, *unk = Py_None;
    Py_ssize_t max_entries, max_len = 0;
    int lower = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!On|$OpnO:LineTokenizer", kwlist, &ids_of, &fill,
                                     &PyDict_Type, &cache, &clean, &max_entries, &vocab_ids, &lower, &max_len, &unk))
        return -1;
    if (vocab_ids != Py_None && !PyDict_CheckExact(vocab_ids)) {
        PyErr_SetString(PyExc_TypeError, "LineTokenizer: vocab_ids must be a dict (token -> id) or None");
        return -1;
    }
    int32_t unk_id = 0;
    if (unk != Py_None && as_int32(unk, "unk_id", &unk_id) < 0)
        return -1;
    Py_XSETREF(t->vocab_ids, vocab_ids == Py_None ? NULL : Py_NewRef(vocab_ids));
    t->lower = lower;
    t->max_len = max_len;
    t->has_unk = unk != Py_None;
    t->unk_id = unk_id;
    Py_INCREF(ids_of);
    Py_INCREF(fill);
    Py_INCREF(cache);
    Py_INCREF(clean);
    Py_XSETREF(t->ids_of, ids_of);
    Py_XSETREF(t->fill, fill);
    Py_XSETREF(t->cache, cache);
    Py_XSETREF(t->clean, clean);
    table_clear(t);
    t->max_entries = max_entries > 0 ? (size_t)max_entries : 1;
    return 0;
}

static int line_tokenizer_traverse(LineTokenizer *t, visitproc visit, void *arg) {
    Py_VISIT(t->ids_of);
    Py_VISIT(t->fill);
    Py_VISIT(t->cache);
    Py_VISIT(t->clean);
    Py_VISIT(t->vocab_ids);
    return 0;
}

static int line_tokenizer_clear(LineTokenizer *t) {
    Py_CLEAR(t->ids_of);
    Py_CLEAR(t->fill);
    Py_CLEAR(t->cache);
    Py_CLEAR(t->clean);
    Py_CLEAR(t->vocab_ids);
    return 0;
}

static void line_tokenizer_dealloc(LineTokenizer *t) {
    PyObject_GC_UnTrack(t);
    line_tokenizer_clear(t);
    table_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMethodDef line_tokenizer_methods[] = {
    {"tokenize", (PyCFunction)line_tokenizer_tokenize, METH_VARARGS,
     "tokenize(lines, n_tokens, n_sentences, last_doc_start) -> (token_ids, sentence_ends, doc_starts)\n\n"
     "instances._tokenize_lines over a list of lines (see there)."},
    {NULL, NULL, 0, NULL}};

PyDoc_STRVAR(line_tokenizer_doc,
             "LineTokenizer(ids_of, fill, cache, clean_table, max_entries, *, vocab_ids=None, do_lower_case=False,\n"
             "              max_len=0, unk_id=None)\n\n"
             "read_corpus's loop over lines (instances._tokenize_lines) with FullTokenizer's chunk ids: a chunk\n"
             "of a printable-ASCII line from a table here, keyed by its bytes (at most max_entries, emptied when\n"
             "full); on a miss computed here from vocab_ids (FullTokenizer's lower-casing, punctuation split and\n"
             "WordPiece, max_len its longest token, unk_id the [UNK] id or None), or asked of ids_of(chunk) when\n"
             "vocab_ids is None or the chunk needs an [UNK] the vocabulary lacks (ids_of raises the error). Other\n"
             "chunks from `cache` (str -> packed int32s), asking fill(chunk) on a miss. Other lines are cleaned\n"
             "with str.translate(clean_table) first.");

static PyTypeObject LineTokenizerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wikiprep._speedups.LineTokenizer",
    .tp_basicsize = sizeof(LineTokenizer),
    .tp_dealloc = (destructor)line_tokenizer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = line_tokenizer_doc,
    .tp_traverse = (traverseproc)line_tokenizer_traverse,
    .tp_clear = (inquiry)line_tokenizer_clear,
    .tp_methods = line_tokenizer_methods,
    .tp_init = (initproc)line_tokenizer_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"shuffle", shuffle, METH_VARARGS, shuffle_doc},
    {"copy_shuffled", copy_shuffled, METH_VARARGS, copy_shuffled_doc},
    {"row_columns", row_columns, METH_VARARGS, row_columns_doc},
    {"crc32c", crc32c, METH_VARARGS, crc32c_doc},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "wikiprep._speedups",
    "Compiled twins of wikiprep's instance-writing loops (see _speedups.c); wikiprep.speedups picks them.", -1,
    module_methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc32c_init();
    str_strip = PyUnicode_InternFromString("strip");
    str_translate = PyUnicode_InternFromString("translate");
    if (str_strip == NULL || str_translate == NULL)
        return NULL;
    if (PyType_Ready(&GeneratorType) < 0 || PyType_Ready(&LineTokenizerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&GeneratorType);
    if (PyModule_AddObject(m, "Generator", (PyObject *)&GeneratorType) < 0) {
        Py_DECREF(&GeneratorType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&LineTokenizerType);
    if (PyModule_AddObject(m, "LineTokenizer", (PyObject *)&LineTokenizerType) < 0) {
        Py_DECREF(&LineTokenizerType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *hw = PyBool_FromLong(crc32c_best != crc32c_software);
    if (PyModule_AddObject(m, "CRC_INSTRUCTION", hw) < 0) {
        Py_XDECREF(hw);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
