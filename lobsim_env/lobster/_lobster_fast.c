/* Optional compiled fast path of lobsim_env.lobster.files (inflating, parsing, validating) and .reconstruct.

Built by `pip install -e .` where a C compiler exists (pyproject.toml, tool.setuptools.ext-modules, optional);
without it the numpy code does all of this. The parsers return a status and never raise on bad data: on
anything they do not accept, the Python side takes the numpy path, which either parses the text the same
way or raises the named LobsterFormatError. So the errors are always the numpy path's own, and the arrays
are bit-identical to it (tests/test_lobster_fast.py compares both paths).

No numpy headers: arrays come in through the buffer protocol, allocated by the caller. The loops release
the GIL.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define HAVE_DLOPEN 1
#endif
#if defined(__SSE2__) && !defined(LOBSTER_FAST_PORTABLE)
#include <emmintrin.h>
#endif

#define OK 0
#define INVALID 1   /* parsed, but some value breaks a validation rule: the numpy validator names it */
#define FALLBACK 2  /* not plain `-?digits` fields in the expected shape: the numpy parser takes over */

#define TICK 100
#define DUMMY_ASK_PRICE 9999999999LL
#define DUMMY_BID_PRICE (-9999999999LL)
#define MAX_SIZE 1000000000000LL
#define MAX_DIGITS 18 /* 18 decimal digits always fit in int64; longer values go to the numpy path */
#define MAX_DECIMALS 18
#define MAX_SECOND_DIGITS 6

static const int64_t POW10[19] = {
    1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL, 100000000LL, 1000000000LL,
    10000000000LL, 100000000000LL, 1000000000000LL, 10000000000000LL, 100000000000000LL,
    1000000000000000LL, 10000000000000000LL, 100000000000000000LL, 1000000000000000000LL,
};

/* Unsigned digits at *pp; returns their count (0: none), or -1 when more than `max_digits`. */
static inline int digits(const char **pp, int64_t *value, int max_digits) {
    const unsigned char *p = (const unsigned char *)*pp;
    int64_t v = 0;
    int n = 0;
    unsigned d;
    while ((d = (unsigned)(p[n] - '0')) < 10) {
        if (n == max_digits) return -1;
        v = v * 10 + d;
        n++;
    }
    *pp = (const char *)(p + n);
    *value = v;
    return n;
}

/* `-?digits` followed by `sep`; advances past the separator. Returns 0, or -1 for anything else. */
static inline int field(const char **pp, int64_t *value, char sep) {
    const char *p = *pp;
    int neg = *p == '-';
    p += neg;
    int64_t v;
    if (digits(&p, &v, MAX_DIGITS) <= 0 || *p != sep) return -1;
    *value = neg ? -v : v;
    *pp = p + 1;
    return 0;
}

/* Set bits of x (no popcnt instruction is assumed: the build uses the interpreter's flags). */
static inline uint32_t bits_set(uint64_t x) {
    x -= (x >> 1) & 0x5555555555555555ULL;
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (uint32_t)((x * 0x0101010101010101ULL) >> 56);
}

/* Per 64 bytes at p (the caller makes them readable): bits of the separators (',' '\n'), of the newlines
   and of the minus signs; returns the bits of every other byte that is not a digit. */
static inline uint64_t classify(const char *p, uint64_t *sep, uint64_t *newline, uint64_t *minus) {
    uint64_t s = 0, nl = 0, m = 0, other = 0;
#if defined(__SSE2__) && !defined(LOBSTER_FAST_PORTABLE)
    const __m128i comma = _mm_set1_epi8(','), lf = _mm_set1_epi8('\n'), dash = _mm_set1_epi8('-');
    const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8('9');
    for (int i = 0; i < 4; i++) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(p + 16 * i));
        const __m128i hn = _mm_cmpeq_epi8(x, lf), hs = _mm_or_si128(_mm_cmpeq_epi8(x, comma), hn);
        const __m128i hm = _mm_cmpeq_epi8(x, dash);
        const __m128i digit = _mm_and_si128(_mm_cmpeq_epi8(_mm_max_epu8(x, zero), x),
                                            _mm_cmpeq_epi8(_mm_min_epu8(x, nine), x));
        const __m128i known = _mm_or_si128(_mm_or_si128(hs, hm), digit);
        s |= (uint64_t)(uint16_t)_mm_movemask_epi8(hs) << (16 * i);
        nl |= (uint64_t)(uint16_t)_mm_movemask_epi8(hn) << (16 * i);
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(hm) << (16 * i);
        other |= (uint64_t)(uint16_t)~_mm_movemask_epi8(known) << (16 * i);
    }
#else
    for (int i = 0; i < 64; i++) {
        const unsigned char c = (unsigned char)p[i];
        s |= (uint64_t)(c == ',' || c == '\n') << i;
        nl |= (uint64_t)(c == '\n') << i;
        m |= (uint64_t)(c == '-') << i;
        other |= (uint64_t)(c != ',' && c != '\n' && c != '-' && (c < '0' || c > '9')) << i;
    }
#endif
    *sep = s, *newline = nl, *minus = m;
    return other;
}

/* The orderbook rules of docs/lobster.md on one row of 4L values: 1 if any is broken. Each condition is
   the negation of what lobster._validate_book accepts, with its int64 wraparound done in uint64. */
static inline int bad_book_row(const int64_t *row, int levels) {
    int bad = 0;
    for (int side = 0; side < 4; side += 2) {
        const int ask = side == 0;
        const int64_t dummy = ask ? DUMMY_ASK_PRICE : DUMMY_BID_PRICE;
        int64_t prev = 0;
        for (int i = 0; i < levels; i++) {
            const int64_t p = row[4 * i + side], s = row[4 * i + side + 1];
            const int empty = p == dummy;
            const int off_grid = ((uint64_t)p - TICK >= (uint64_t)(DUMMY_ASK_PRICE - TICK)) | (p % TICK != 0);
            bad |= off_grid & !empty;
            bad |= (uint64_t)s >= (uint64_t)MAX_SIZE;
            bad |= (s == 0) != empty;
            if (i > 0) bad |= !(ask ? p > prev : p < prev) & !empty;
            prev = p;
        }
    }
    return bad | (row[2] >= row[0]);
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t nbytes, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (view->len != nbytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, view->len, nbytes);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define CHUNK 32768 /* text bytes whose separator offsets are listed at a time (a multiple of 64) */

/* parse_book(text, out: int64[R, 4 * levels], levels) -> (status, rows)

   Parses the lines of `text` (each ending in '\n') into the rows of out and checks the orderbook rules on
   each; returns OK, INVALID (parsed, some rule broken) or FALLBACK (a line that is not 4 * levels plain
   integers, or more lines than out has rows), and the rows parsed.

   Two passes per CHUNK bytes of text. The first classifies 64 bytes at a time (SSE2): every byte must be a
   digit, a separator (',' '\n') or a minus sign that starts a field, and no field may be empty; it lists
   the offsets of the separators, eight at a time without a branch per field. The second reads every field,
   the text between two listed separators, `-?digits` by the first pass: up to 8 digits (every price and
   size of the sample files but the 10-digit empty-level prices) are one unaligned load and three
   multiplies (SWAR). The fields are independent of each other, so the CPU overlaps them. */
static PyObject *parse_book(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer text, out;
    int levels;
    if (!PyArg_ParseTuple(args, "y*w*i", &text, &out, &levels)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t ncols = 4 * (Py_ssize_t)levels;
    uint32_t *offsets = NULL;
    if (levels < 1 || out.itemsize != 8 || out.len % (8 * ncols) != 0) {
        PyErr_Format(PyExc_ValueError, "parse_book: levels %d, out of %zd bytes", levels, out.len);
        goto done;
    }
    if (!(offsets = PyMem_RawMalloc((CHUNK + 64) * sizeof(uint32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    const char *t = text.buf;
    const Py_ssize_t len = text.len, fields = out.len / 8;
    int64_t *values = out.buf;
    Py_ssize_t f = 0, prev = -1; /* next field; the previous separator */
    int col = 0, shape = 1, bad = 0;        /* shape: ncols fields a line, ',' between, '\n' after the last */
    uint64_t malformed = 0, after_sep = 1, after_minus = 0, newlines = 0;
    Py_BEGIN_ALLOW_THREADS
    char pad[64];
    for (Py_ssize_t chunk = 0; chunk < len && shape; chunk += CHUNK) {
        const Py_ssize_t chunk_end = chunk + CHUNK < len ? chunk + CHUNK : len;
        uint32_t count = 0;
        for (Py_ssize_t block = chunk; block < chunk_end; block += 64) {
            const char *p = t + block;
            if (len - block < 64) { /* the last bytes, padded with digits */
                memset(pad, '0', 64), memcpy(pad, p, len - block);
                p = pad;
            }
            uint64_t sep, nl, minus;
            const uint64_t other = classify(p, &sep, &nl, &minus);
            newlines += bits_set(nl);
            const uint64_t starts = (sep << 1) | after_sep; /* first byte of each field */
            malformed |= other | (minus & ~starts) | (sep & starts) | (((minus << 1) | after_minus) & sep);
            after_sep = sep >> 63, after_minus = minus >> 63;
            const uint32_t base = (uint32_t)(block - chunk), n = bits_set(sep);
            uint32_t *o = offsets + count;
            for (int j = 0; j < 8; j++, sep &= sep - 1) o[j] = base + (uint32_t)__builtin_ctzll(sep | (1ULL << 63));
            if (n > 8)
                for (int j = 8; j < 16; j++, sep &= sep - 1) o[j] = base + (uint32_t)__builtin_ctzll(sep | (1ULL << 63));
            for (uint32_t j = 16; j < n; j++, sep &= sep - 1) o[j] = base + (uint32_t)__builtin_ctzll(sep);
            count += n;
        }
        if (count > fields - f) { /* more lines than rows left */
            shape = 0;
            break;
        }
        for (uint32_t j = 0; j < count; j++) {
            const Py_ssize_t end = chunk + offsets[j], start = prev + 1;
            prev = end;
            const int neg = t[start] == '-';
            const Py_ssize_t n = end - start - neg;
            uint64_t v = 0;
            if ((size_t)(n - 1) < 8 && end >= 8) {
                /* The n digits are the top bytes of the 8 before `end` (little-endian); digit - '0' is
                   digit ^ '0'; the multiplies combine pairs, then fours, then the eight. */
                uint64_t x;
                memcpy(&x, t + end - 8, 8);
                v = (x ^ 0x3030303030303030ULL) & (~0ULL << (8 * (8 - n)));
                v = (v * 10 + (v >> 8)) & 0x00FF00FF00FF00FFULL;
                v = (v * 100 + (v >> 16)) & 0x0000FFFF0000FFFFULL;
                v = (v * 10000 + (v >> 32)) & 0xFFFFFFFFULL;
            } else if (n >= 1 && n <= MAX_DIGITS) {
                for (Py_ssize_t i = end - n; i < end; i++) v = v * 10 + (uint64_t)(t[i] - '0');
            } else {
                shape = 0;
            }
            values[f + j] = neg ? -(int64_t)v : (int64_t)v;
            if (++col == ncols) { /* a '\n' ends each row; as many as rows: no '\n' anywhere else */
                col = 0;
                shape &= t[end] == '\n';
                bad |= bad_book_row(values + f + j + 1 - ncols, levels);
            }
        }
        f += count;
    }
    Py_END_ALLOW_THREADS
    /* Whole lines only: the text ends right after a '\n' that ended a row. */
    shape &= newlines == (uint64_t)(f / ncols);
    const int status = !shape || malformed || col != 0 || prev != len - 1 ? FALLBACK : bad ? INVALID : OK;
    result = Py_BuildValue("in", status, f / ncols);
done:
    PyMem_RawFree(offsets);
    PyBuffer_Release(&text);
    PyBuffer_Release(&out);
    return result;
}

/* lines(text) -> int: the number of '\n' in text. */
static PyObject *lines(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer text;
    if (!PyArg_ParseTuple(args, "y*", &text)) return NULL;
    const unsigned char *t = text.buf;
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < text.len; i++) n += t[i] == '\n';
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    return PyLong_FromSsize_t(n);
}

/* parse_messages(text, nrows, out: int64[6 * nrows]) -> OK | FALLBACK

   Lines `S.F,type,order_id,size,price,direction`, S 1-6 digits, F 1-18 digits; out holds the columns one
   after the other (time in ns after midnight, then the five integers). Validation is numpy's (cheap). The
   text must end in '\n': every digit loop then stops inside it, and each line starts inside it. */
static PyObject *parse_messages(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer text;
    PyObject *out_obj;
    Py_ssize_t nrows;
    if (!PyArg_ParseTuple(args, "y*nO", &text, &nrows, &out_obj)) return NULL;
    Py_buffer out;
    if (nrows < 0) {
        PyBuffer_Release(&text);
        return PyErr_Format(PyExc_ValueError, "nrows %zd", nrows);
    }
    if (get_buffer(out_obj, &out, 6 * nrows * (Py_ssize_t)sizeof(int64_t), 1, "out") < 0) {
        PyBuffer_Release(&text);
        return NULL;
    }
    const char *p = text.buf, *end = p + text.len;
    int64_t *col = (int64_t *)out.buf;
    int status = text.len > 0 && end[-1] == '\n' ? OK : FALLBACK;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < nrows && status == OK; r++) {
        int64_t seconds, frac;
        int nf;
        if (p == end || digits(&p, &seconds, MAX_SECOND_DIGITS) <= 0 || *p++ != '.' ||
            (nf = digits(&p, &frac, MAX_DECIMALS)) <= 0 || *p++ != ',') {
            status = FALLBACK;
            break;
        }
        /* As lobster._frac_to_ns: scaled up to 9 digits, rounded half up beyond. */
        int64_t ns = nf <= 9 ? frac * POW10[9 - nf] : (frac + POW10[nf - 9] / 2) / POW10[nf - 9];
        col[r] = seconds * 1000000000LL + ns;
        if (field(&p, &col[nrows + r], ',') < 0 || field(&p, &col[2 * nrows + r], ',') < 0 ||
            field(&p, &col[3 * nrows + r], ',') < 0 || field(&p, &col[4 * nrows + r], ',') < 0 ||
            field(&p, &col[5 * nrows + r], '\n') < 0)
            status = FALLBACK;
    }
    if (p != end) status = FALLBACK;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&text);
    return PyLong_FromLong(status);
}

/* replay(book, opening, kind, price, size, direction, out, undetermined, effect, level) -> None

   lobsim_env.lobster.reconstruct.replay's loop, one row at a time: message k applied to book row k-1 (the opening book
   for k = 0). book, out int64[M, W]; opening int64[W]; kind, direction int8[M]; price, size int64[M];
   undetermined bool[M, W] (zeroed by the caller); effect, level int8[M]. The effect codes are reconstruct.py's. */
enum { NO_EFFECT, SIZE_UP, INSERT, SIZE_DOWN, REMOVE, BEYOND_DEPTH, INCONSISTENT };

static PyObject *replay(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[10];
    Py_ssize_t m;
    int levels;
    if (!PyArg_ParseTuple(args, "niOOOOOOOOOO", &m, &levels, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9]))
        return NULL;
    if (levels < 1 || m < 0) return PyErr_Format(PyExc_ValueError, "levels %d, m %zd", levels, m);
    const Py_ssize_t w = 4 * levels;
    const Py_ssize_t sizes[10] = {m * w * 8, w * 8, m, m * 8, m * 8, m, m * w * 8, m * w, m, m};
    static const char *names[10] = {"book", "opening", "kind", "price", "size", "direction",
                                    "out", "undetermined", "effect", "level"};
    Py_buffer v[10];
    int got = 0;
    for (; got < 10; got++)
        if (get_buffer(objs[got], &v[got], sizes[got], got >= 6, names[got]) < 0) break;
    if (got < 10) {
        while (got--) PyBuffer_Release(&v[got]);
        return NULL;
    }
    const int64_t *book = v[0].buf, *opening = v[1].buf, *price = v[3].buf, *size = v[4].buf;
    const int8_t *kind = v[2].buf, *direction = v[5].buf;
    int64_t *out = v[6].buf;
    uint8_t *undetermined = v[7].buf;
    int8_t *effect = v[8].buf, *level = v[9].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < m; k++) {
        const int64_t *prev = k == 0 ? opening : book + (k - 1) * w;
        int64_t *row = out + k * w;
        memcpy(row, prev, w * sizeof(int64_t));
        const int ask = direction[k] == -1;
        const int base = ask ? 0 : 2;
        const int64_t px = price[k], sz = size[k];
        int ahead = 0; /* levels strictly better than the price (all of them counted, as reconstruct.py does) */
        for (int i = 0; i < levels; i++) ahead += ask ? prev[4 * i] < px : prev[4 * i + 2] > px;
        const int at = ahead < levels ? ahead : levels - 1;
        const int64_t *cell = prev + base + 4 * at;
        const int here = ahead < levels && cell[0] == px;
        const int adds = kind[k] == 1, dels = kind[k] >= 2 && kind[k] <= 4;
        int e = NO_EFFECT;
        if (adds) e = here ? SIZE_UP : INSERT;
        if (dels) e = !here || cell[1] < sz ? INCONSISTENT : cell[1] == sz ? REMOVE : SIZE_DOWN;
        if ((adds || dels) && ahead >= levels) e = BEYOND_DEPTH;
        effect[k] = (int8_t)e;
        level[k] = (int8_t)(e >= SIZE_UP && e <= REMOVE ? at : -1);
        int64_t *side = row + base;
        const int deep = 4 * (levels - 1);
        if (e == SIZE_UP) side[4 * at + 1] += sz;
        else if (e == SIZE_DOWN) side[4 * at + 1] -= sz;
        else if (e == INSERT) {
            for (int i = levels - 1; i > at; i--) side[4 * i] = side[4 * i - 4], side[4 * i + 1] = side[4 * i - 3];
            side[4 * at] = px, side[4 * at + 1] = sz;
        } else if (e == REMOVE) {
            for (int i = at; i < levels - 1; i++) side[4 * i] = side[4 * i + 4], side[4 * i + 1] = side[4 * i + 5];
            if (prev[base + deep + 1] > 0) { /* the deepest place was occupied: revealed from the file */
                side[deep] = book[k * w + base + deep], side[deep + 1] = book[k * w + base + deep + 1];
                undetermined[k * w + base + deep] = undetermined[k * w + base + deep + 1] = 1;
            } else {
                side[deep] = ask ? DUMMY_ASK_PRICE : DUMMY_BID_PRICE, side[deep + 1] = 0;
            }
        }
    }
    if (m > 0) memset(undetermined, 1, w);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 10; i++) PyBuffer_Release(&v[i]);
    Py_RETURN_NONE;
}

/* inflate(stream, out, crc) -> bool

   A zip member's raw DEFLATE stream inflated into `out` (the member's size exactly) by libdeflate, the
   system's shared library where there is one (loaded at the first call; nothing is needed to build this
   file): whole-buffer, several times faster than zlib. True if the result fills `out` exactly and has
   CRC-32 `crc` (the zip's); False otherwise and where libdeflate is not found: the caller then reads the
   member through zipfile (zlib), which names any error as it always did. */
typedef void *(*alloc_fn)(void);
typedef void (*free_fn)(void *);
typedef int (*decompress_fn)(void *, const void *, size_t, void *, size_t, size_t *);
typedef uint32_t (*crc32_fn)(uint32_t, const void *, size_t);
static struct {
    int tried;
    alloc_fn alloc;
    free_fn free;
    decompress_fn decompress;
    crc32_fn crc32;
} libdeflate;

static int load_libdeflate(void) {
#ifdef HAVE_DLOPEN
    if (!libdeflate.tried) {
        libdeflate.tried = 1;
        void *lib = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
        if (!lib) lib = dlopen("libdeflate.0.dylib", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            libdeflate.alloc = (alloc_fn)dlsym(lib, "libdeflate_alloc_decompressor");
            libdeflate.free = (free_fn)dlsym(lib, "libdeflate_free_decompressor");
            libdeflate.decompress = (decompress_fn)dlsym(lib, "libdeflate_deflate_decompress");
            libdeflate.crc32 = (crc32_fn)dlsym(lib, "libdeflate_crc32");
        }
    }
#endif
    return libdeflate.alloc && libdeflate.free && libdeflate.decompress && libdeflate.crc32;
}

static PyObject *inflate(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer stream, out;
    unsigned long crc;
    if (!PyArg_ParseTuple(args, "y*w*k", &stream, &out, &crc)) return NULL;
    void *d = load_libdeflate() ? libdeflate.alloc() : NULL;
    int ok = 0;
    if (d) {
        size_t got = 0;
        Py_BEGIN_ALLOW_THREADS
        ok = libdeflate.decompress(d, stream.buf, (size_t)stream.len, out.buf, (size_t)out.len, &got) == 0 &&
             got == (size_t)out.len && libdeflate.crc32(0, out.buf, got) == (uint32_t)crc;
        Py_END_ALLOW_THREADS
        libdeflate.free(d);
    }
    PyBuffer_Release(&stream);
    PyBuffer_Release(&out);
    return PyBool_FromLong(ok);
}

/* fast_inflate() -> bool: whether inflate() found libdeflate. */
static PyObject *fast_inflate(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyBool_FromLong(load_libdeflate());
}

static PyMethodDef methods[] = {
    {"inflate", inflate, METH_VARARGS, "Inflate a raw DEFLATE stream into a buffer with libdeflate, CRC-checked."},
    {"fast_inflate", fast_inflate, METH_NOARGS, "Whether libdeflate was found."},
    {"parse_book", parse_book, METH_VARARGS, "Parse and validate an orderbook text into int64 rows."},
    {"parse_messages", parse_messages, METH_VARARGS, "Parse a message text into six int64 columns."},
    {"lines", lines, METH_VARARGS, "Count the newlines of a text."},
    {"replay", replay, METH_VARARGS, "lobsim_env.lobster.reconstruct.replay's loop over every message."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lobster_fast", NULL, -1, methods, NULL, NULL, NULL, NULL};

/* lobster._API must equal API: a module built from an older version of this file is not used. */
#define API 2

PyMODINIT_FUNC PyInit__lobster_fast(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "API", API) < 0) Py_CLEAR(m);
    return m;
}
