/* One pass over a Kineto trace's "traceEvents" array into the raw event columns of
 * tracekit.trace.columnar.RAW_SCHEMA, as Arrow buffers: no Python object per event or value.
 *
 * scan(text, start, end) reads the array's elements in text[start:end] (the bytes between '[' and
 * ']') and returns (rows, columns): columns maps each raw field to an EventColumn, an Arrow array
 * through the PyCapsule interface. It is strict: anything it does not read exactly as
 * tracekit.trace.columnar.read_objects would (an integer field holding text, a name that is not
 * text, a key with an escape, malformed JSON, nesting deeper than MAX_DEPTH) raises Unsupported,
 * and the caller reads the text the general way, which gives the
 * same table or the error that explains the file.
 *
 * scan_complete(text, start, end, gpu_categories) reads the same events and keeps only what
 * tracekit.trace.kineto keeps of them, as two tables of columns: the complete events (ph "X" with a
 * numeric ts and dur) and the ends of "ac2g" flow arrows, with the count of complete events left
 * out for lack of a ts or dur. It is kineto's slice reduction (_reduce there) done during the scan,
 * so no column of a dropped event is ever built; the property tests hold the two equal.
 *
 * Field rules (those of read_objects): ph, cat and name are text or null; pid and tid are text,
 * an integer written as its decimal digits, null for anything else; ts and dur are numbers or null;
 * id and the args' correlation, "External id", device and stream are int64, null for a fraction,
 * an integer past int64, true/false/null or a container. An element that is not an object is no
 * row; args that is not an object holds nothing. The last of repeated keys wins.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../arrow_c_abi.h"

#define MAX_DEPTH 512

static PyObject *Unsupported;

/* ---------- growable buffers ---------- */

typedef struct {
    char *data;
    size_t size, capacity;
} Buffer;

static int buffer_reserve(Buffer *b, size_t extra) {
    if (b->size + extra <= b->capacity) return 0;
    size_t capacity = b->capacity ? b->capacity : 4096;
    while (capacity < b->size + extra) capacity *= 2;
    char *data = realloc(b->data, capacity); /* plain malloc: Arrow's release may run without the GIL */
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static int buffer_append(Buffer *b, const void *bytes, size_t n) {
    if (buffer_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
    return 0;
}

/* A column: validity bitmap (one bit a row, LSB first), data, and for text the int64 offsets. */
typedef struct {
    Buffer validity, data, offsets;
    int64_t nulls;
} Column;

enum { TEXT, FLOAT64, INT64, INT32 };

enum {
    COL_PH, COL_CAT, COL_NAME, COL_PID, COL_TID, COL_TS, COL_DUR,
    COL_ID, COL_CORRELATION, COL_EXTERNAL_ID, COL_DEVICE, COL_STREAM, N_COLUMNS
};

static const char *COLUMN_NAMES[N_COLUMNS] = {
    "ph", "cat", "name", "pid", "tid", "ts", "dur",
    "id", "correlation", "external_id", "device", "stream",
};
static const int COLUMN_KINDS[N_COLUMNS] = {
    TEXT, TEXT, TEXT, TEXT, TEXT, FLOAT64, FLOAT64, INT64, INT64, INT64, INT64, INT64,
};

/* scan_complete's tables: a complete event's columns (kineto's slice events) and a flow end's. */
enum {
    EV_CAT, EV_NAME, EV_PID, EV_TID, EV_TS, EV_DUR, EV_CORRELATION, EV_EXTERNAL_ID, EV_DEVICE, EV_STREAM,
    EV_RAW_PID, EV_RAW_TID, EV_RAW_TS, N_EVENT_COLUMNS
};
static const char *EVENT_NAMES[N_EVENT_COLUMNS] = {
    "cat", "name", "pid", "tid", "ts", "dur", "correlation", "external_id", "device", "stream",
    "_pid", "_tid", "_ts",
};
static const int EVENT_KINDS[N_EVENT_COLUMNS] = {
    TEXT, TEXT, INT64, INT64, FLOAT64, FLOAT64, INT64, INT64, INT32, INT64, TEXT, TEXT, FLOAT64,
};
enum { FL_PID, FL_TID, FL_TS, FL_FLOW, N_FLOW_COLUMNS };
static const char *FLOW_NAMES[N_FLOW_COLUMNS] = {"_pid", "_tid", "_ts", "_flow"};
static const int FLOW_KINDS[N_FLOW_COLUMNS] = {TEXT, TEXT, FLOAT64, INT64};

#define MAX_COLUMNS N_EVENT_COLUMNS

/* Columns filled row by row, with their names and kinds. */
typedef struct {
    Column columns[MAX_COLUMNS];
    const char *const *names;
    const int *kinds;
    int width;
    Py_ssize_t rows;
} Table;

#define MAX_GPU_CATEGORIES 16

/* One event's fields while its object is read: a span of the text (or of scratch, for text that
 * held escapes), a number, or null. */
typedef struct {
    int present;
    int in_scratch; /* text: unescaped into the scratch buffer at scratch_offset, not a span of the input */
    const char *text;
    size_t scratch_offset;
    size_t length;
    double number;
    int64_t integer;
} Field;

typedef struct {
    const unsigned char *at, *end, *start;
    Buffer scratch; /* unescaped text of the current event's fields */
    int complete;   /* scan_complete: rows go to `events` and `flows`; else every event to `raw` */
    Table raw, events, flows;
    Py_ssize_t untimed; /* complete events without a numeric ts or dur, left out */
    const char *gpu_categories[MAX_GPU_CATEGORIES];
    Py_ssize_t gpu_category_lengths[MAX_GPU_CATEGORIES];
    int n_gpu_categories;
} Scanner;

static int fail(Scanner *s, const char *why) {
    PyErr_Format(Unsupported, "%s at byte %zd of the events", why, (Py_ssize_t)(s->at - s->start));
    return -1;
}

/* Byte classes, looked up rather than compared: STRING_STOP marks a byte that ends a plain run of
 * string text (a quote, a backslash, a control character, any non-ASCII byte), BLANK JSON's blanks. */
enum { STRING_STOP = 1, BLANK = 2 };
static unsigned char BYTE_CLASS[256];

static void init_byte_classes(void) {
    for (int c = 0; c < 256; c++) BYTE_CLASS[c] = (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') ? STRING_STOP : 0;
    BYTE_CLASS[' '] |= BLANK;
    BYTE_CLASS['\n'] |= BLANK;
    BYTE_CLASS['\r'] |= BLANK;
    BYTE_CLASS['\t'] |= BLANK;
}

/* Eight bytes at a time: nonzero when any byte of `word` ends a plain run of string text (the
 * classic bit tricks for "a byte below n" and "a byte equal to c", on 64-bit words). */
#define BYTES(c) (0x0101010101010101ULL * (uint64_t)(c))
static inline uint64_t string_stops(uint64_t word) {
    uint64_t quote = word ^ BYTES('"'), backslash = word ^ BYTES('\\');
    uint64_t below_space = (word - BYTES(0x20)) & ~word;
    uint64_t is_quote = (quote - BYTES(1)) & ~quote, is_backslash = (backslash - BYTES(1)) & ~backslash;
    return (below_space | is_quote | is_backslash | word) & BYTES(0x80); /* `word`: bytes >= 0x80 */
}

static inline void skip_blank(Scanner *s) {
    while (s->at < s->end && (BYTE_CLASS[*s->at] & BLANK)) s->at++;
}

/* ---------- strings ---------- */

/* Length of a valid UTF-8 sequence starting at p (its first byte >= 0x80), 0 when invalid. */
static int utf8_sequence(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    uint32_t code;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        code = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        code = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        code = c & 0x07;
    } else {
        return 0;
    }
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        code = (code << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && code < 0x800) || (n == 4 && (code < 0x10000 || code > 0x10FFFF))) return 0;
    if (code >= 0xD800 && code <= 0xDFFF) return 0;
    return n;
}

static int hex4(const unsigned char *p, uint32_t *out) {
    uint32_t value = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        value <<= 4;
        if (c >= '0' && c <= '9') value |= c - '0';
        else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
        else return -1;
    }
    *out = value;
    return 0;
}

static void put_utf8(Buffer *b, uint32_t code) {
    unsigned char out[4];
    size_t n;
    if (code < 0x80) {
        out[0] = (unsigned char)code;
        n = 1;
    } else if (code < 0x800) {
        out[0] = 0xC0 | (code >> 6);
        out[1] = 0x80 | (code & 0x3F);
        n = 2;
    } else if (code < 0x10000) {
        out[0] = 0xE0 | (code >> 12);
        out[1] = 0x80 | ((code >> 6) & 0x3F);
        out[2] = 0x80 | (code & 0x3F);
        n = 3;
    } else {
        out[0] = 0xF0 | (code >> 18);
        out[1] = 0x80 | ((code >> 12) & 0x3F);
        out[2] = 0x80 | ((code >> 6) & 0x3F);
        out[3] = 0x80 | (code & 0x3F);
        n = 4;
    }
    memcpy(b->data + b->size, out, n); /* the caller reserved room */
    b->size += n;
}

/* Read the string at s->at (its opening quote). With field != NULL, its text goes there: a span
 * of the input when it holds no escape, else its unescaped copy in the scratch buffer. */
static int read_string(Scanner *s, Field *field, int *escaped) {
    const unsigned char *p = s->at + 1, *begin = p;
    int has_escape = 0;
    while (1) {
        uint64_t word;
        while (s->end - p >= 8 && (memcpy(&word, p, 8), string_stops(word) == 0)) p += 8;
        while (p < s->end && !(BYTE_CLASS[*p] & STRING_STOP)) p++;
        if (p >= s->end) {
            s->at = p;
            return fail(s, "unterminated string");
        }
        if (*p == '"') break;
        if (*p == '\\') {
            has_escape = 1;
            if (p + 1 >= s->end) {
                s->at = p;
                return fail(s, "unterminated string");
            }
            p += (p[1] == 'u') ? 6 : 2;
            if (p > s->end) {
                s->at = s->end;
                return fail(s, "unterminated string");
            }
            continue;
        }
        if (*p < 0x20) {
            s->at = p;
            return fail(s, "control character in a string");
        }
        int n = utf8_sequence(p, s->end);
        if (n == 0) {
            s->at = p;
            return fail(s, "invalid UTF-8 in a string");
        }
        p += n;
    }
    const unsigned char *close = p;
    if (escaped) *escaped = has_escape;
    if (!has_escape) {
        if (field) {
            field->present = 1;
            field->in_scratch = 0;
            field->text = (const char *)begin;
            field->length = (size_t)(close - begin);
        }
        s->at = close + 1;
        return 0;
    }
    /* Escapes: check them all, and unescape when the text is wanted. */
    size_t mark = s->scratch.size;
    if (field && buffer_reserve(&s->scratch, (size_t)(close - begin)) < 0) return -1;
    for (p = begin; p < close;) {
        if (*p != '\\') {
            const unsigned char *run = p;
            while (p < close && *p != '\\') p++;
            if (field) buffer_append(&s->scratch, run, (size_t)(p - run));
            continue;
        }
        unsigned char kind = p[1];
        uint32_t code;
        switch (kind) {
        case '"': case '\\': case '/':
            code = kind;
            p += 2;
            break;
        case 'b': code = '\b'; p += 2; break;
        case 'f': code = '\f'; p += 2; break;
        case 'n': code = '\n'; p += 2; break;
        case 'r': code = '\r'; p += 2; break;
        case 't': code = '\t'; p += 2; break;
        case 'u':
            if (close - p < 6 || hex4(p + 2, &code) < 0) {
                s->at = p;
                return fail(s, "bad \\u escape");
            }
            p += 6;
            if (code >= 0xD800 && code <= 0xDBFF) {
                uint32_t low;
                if (close - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low) < 0 || low < 0xDC00 ||
                    low > 0xDFFF) {
                    s->at = p;
                    return fail(s, "unpaired surrogate escape");
                }
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                p += 6;
            } else if (code >= 0xDC00 && code <= 0xDFFF) {
                s->at = p;
                return fail(s, "unpaired surrogate escape");
            }
            break;
        default:
            s->at = p;
            return fail(s, "bad escape");
        }
        if (field) put_utf8(&s->scratch, code); /* an escape is never shorter than its UTF-8 */
    }
    if (field) { /* an offset, not a pointer: a later field's text may move the scratch buffer */
        field->present = 1;
        field->in_scratch = 1;
        field->scratch_offset = mark;
        field->length = s->scratch.size - mark;
    }
    s->at = close + 1;
    return 0;
}

/* ---------- numbers and other values ---------- */

typedef struct {
    int is_integer; /* no fraction and no exponent */
    int fits_int64;
    int64_t integer;
    double number;
} Number;

static int read_number(Scanner *s, Number *out) {
    const unsigned char *p = s->at, *begin = p;
    int negative = 0;
    uint64_t magnitude = 0;
    int overflow = 0;
    if (p < s->end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= s->end || *p < '0' || *p > '9') return fail(s, "bad number");
    if (*p == '0') {
        p++;
    } else {
        while (p < s->end && *p >= '0' && *p <= '9') {
            unsigned d = *p - '0';
            if (magnitude > (UINT64_MAX - d) / 10) overflow = 1;
            else magnitude = magnitude * 10 + d;
            p++;
        }
    }
    int is_integer = 1;
    if (p < s->end && *p == '.') {
        is_integer = 0;
        p++;
        if (p >= s->end || *p < '0' || *p > '9') return fail(s, "bad number");
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        is_integer = 0;
        p++;
        if (p < s->end && (*p == '+' || *p == '-')) p++;
        if (p >= s->end || *p < '0' || *p > '9') return fail(s, "bad number");
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < s->end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-'))
        return fail(s, "bad number"); /* a leading zero followed by digits, say */
    out->is_integer = is_integer;
    out->fits_int64 = is_integer && !overflow &&
                      (negative ? magnitude <= (uint64_t)INT64_MAX + 1 : magnitude <= (uint64_t)INT64_MAX);
    if (out->fits_int64) out->integer = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    if (is_integer && !overflow && magnitude <= (1ULL << 53)) {
        out->number = negative ? -(double)magnitude : (double)magnitude;
    } else {
        /* Correctly rounded, locale-independent: the double Python's float() gives. */
        char local[64];
        size_t length = (size_t)(p - begin);
        char *text = length < sizeof local ? local : malloc(length + 1);
        if (text == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(text, begin, length);
        text[length] = '\0';
        out->number = PyOS_string_to_double(text, NULL, NULL);
        if (text != local) free(text);
        if (out->number == -1.0 && PyErr_Occurred()) return -1; /* cannot happen: the grammar was checked */
        if (isinf(out->number)) return fail(s, "number out of a double's range");
    }
    s->at = p;
    return 0;
}

static int read_literal(Scanner *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->at) < n || memcmp(s->at, word, n) != 0) return fail(s, "bad literal");
    s->at += n;
    return 0;
}

/* Check and pass over any value. */
static int skip_value(Scanner *s, int depth) {
    skip_blank(s);
    if (s->at >= s->end) return fail(s, "missing value");
    switch (*s->at) {
    case '"':
        return read_string(s, NULL, NULL);
    case '{':
    case '[': {
        unsigned char close = *s->at == '{' ? '}' : ']';
        int object = close == '}';
        if (depth >= MAX_DEPTH) return fail(s, "nesting too deep");
        s->at++;
        skip_blank(s);
        if (s->at < s->end && *s->at == close) {
            s->at++;
            return 0;
        }
        while (1) {
            if (object) {
                skip_blank(s);
                if (s->at >= s->end || *s->at != '"') return fail(s, "expected a key");
                if (read_string(s, NULL, NULL) < 0) return -1;
                skip_blank(s);
                if (s->at >= s->end || *s->at != ':') return fail(s, "expected ':'");
                s->at++;
            }
            if (skip_value(s, depth + 1) < 0) return -1;
            skip_blank(s);
            if (s->at >= s->end) return fail(s, "unterminated container");
            if (*s->at == ',') {
                s->at++;
                continue;
            }
            if (*s->at == close) {
                s->at++;
                return 0;
            }
            return fail(s, "expected ',' or the container's end");
        }
    }
    case 't':
        return read_literal(s, "true", 4);
    case 'f':
        return read_literal(s, "false", 5);
    case 'n':
        return read_literal(s, "null", 4);
    default: {
        Number number;
        return read_number(s, &number);
    }
    }
}

/* ---------- typed fields ---------- */

enum { KEY_OTHER = -1, KEY_ARGS = -2 };

static int top_level_key(const unsigned char *key, size_t n) {
    switch (n) {
    case 2:
        if (memcmp(key, "ph", 2) == 0) return COL_PH;
        if (memcmp(key, "ts", 2) == 0) return COL_TS;
        if (memcmp(key, "id", 2) == 0) return COL_ID;
        break;
    case 3:
        if (memcmp(key, "cat", 3) == 0) return COL_CAT;
        if (memcmp(key, "pid", 3) == 0) return COL_PID;
        if (memcmp(key, "tid", 3) == 0) return COL_TID;
        if (memcmp(key, "dur", 3) == 0) return COL_DUR;
        break;
    case 4:
        if (memcmp(key, "name", 4) == 0) return COL_NAME;
        if (memcmp(key, "args", 4) == 0) return KEY_ARGS;
        break;
    }
    return KEY_OTHER;
}

static int args_key(const unsigned char *key, size_t n) {
    switch (n) {
    case 6:
        if (memcmp(key, "device", 6) == 0) return COL_DEVICE;
        if (memcmp(key, "stream", 6) == 0) return COL_STREAM;
        break;
    case 11:
        if (memcmp(key, "correlation", 11) == 0) return COL_CORRELATION;
        if (memcmp(key, "External id", 11) == 0) return COL_EXTERNAL_ID;
        break;
    }
    return KEY_OTHER;
}

/* Read a key; KEY_OTHER for one that holds an escape (no known key does; a match would need
 * unescaping, so such a key is Unsupported when it could be a known one). */
static int read_key(Scanner *s, int args) {
    if (s->at >= s->end || *s->at != '"') return fail(s, "expected a key"), -3;
    const unsigned char *begin = s->at + 1;
    int escaped;
    if (read_string(s, NULL, &escaped) < 0) return -3;
    if (escaped) return fail(s, "a key with an escape"), -3;
    size_t n = (size_t)(s->at - 1 - begin);
    return args ? args_key(begin, n) : top_level_key(begin, n);
}

/* A value for column `column`, by its kind; fields[column] takes it. */
static int read_field(Scanner *s, int column, Field *field) {
    skip_blank(s);
    if (s->at >= s->end) return fail(s, "missing value");
    unsigned char c = *s->at;
    field->present = 0;
    if (c == 'n') return read_literal(s, "null", 4);
    switch (COLUMN_KINDS[column]) {
    case TEXT:
        if (c == '"') return read_string(s, field, NULL);
        if (column == COL_PID || column == COL_TID) {
            if (c == '-' || (c >= '0' && c <= '9')) {
                Number number;
                const unsigned char *begin = s->at;
                if (read_number(s, &number) < 0) return -1;
                if (number.fits_int64) { /* its decimal digits, as str(int) writes them */
                    field->present = 1;
                    field->in_scratch = 0;
                    field->text = (const char *)begin;
                    field->length = (size_t)(s->at - begin);
                    if (field->length > 1 && begin[0] == '-' && begin[1] == '0') return fail(s, "negative zero");
                    return 0;
                }
                if (number.is_integer) return fail(s, "an integer past int64 as a pid or tid");
                return 0; /* a fraction: null */
            }
            return skip_value(s, 1); /* true/false or a container: null */
        }
        return fail(s, "ph, cat or name that is not text");
    case FLOAT64:
        if (c == '-' || (c >= '0' && c <= '9')) {
            Number number;
            if (read_number(s, &number) < 0) return -1;
            field->present = 1;
            field->number = number.number;
            return 0;
        }
        if (c == '"') return read_string(s, NULL, NULL); /* text: null */
        return skip_value(s, 1);
    default: /* INT64 */
        if (c == '-' || (c >= '0' && c <= '9')) {
            Number number;
            if (read_number(s, &number) < 0) return -1;
            if (number.fits_int64) {
                field->present = 1;
                field->integer = number.integer;
            }
            return 0;
        }
        if (c == '"') return fail(s, "an integer field holding text");
        return skip_value(s, 1);
    }
}

static int read_args(Scanner *s, Field *fields);

/* The members of an object whose '{' was just passed: known keys into `fields`, any other value
 * checked and passed over. `args`: the object is an event's args (its keys are the args' ones);
 * else it is the event itself, whose "args" member is read by read_args. */
static int read_members(Scanner *s, Field *fields, int args) {
    skip_blank(s);
    if (s->at < s->end && *s->at == '}') {
        s->at++;
        return 0;
    }
    while (1) {
        skip_blank(s);
        int column = read_key(s, args);
        if (column == -3) return -1;
        skip_blank(s);
        if (s->at >= s->end || *s->at != ':') return fail(s, "expected ':'");
        s->at++;
        int status;
        if (column >= 0) status = read_field(s, column, &fields[column]);
        else if (column == KEY_ARGS) status = read_args(s, fields);
        else status = skip_value(s, args ? 2 : 1);
        if (status < 0) return -1;
        skip_blank(s);
        if (s->at >= s->end) return fail(s, "unterminated object");
        if (*s->at == ',') {
            s->at++;
            continue;
        }
        if (*s->at == '}') {
            s->at++;
            return 0;
        }
        return fail(s, "expected ',' or '}'");
    }
}

static int read_args(Scanner *s, Field *fields) {
    for (int c = COL_CORRELATION; c <= COL_STREAM; c++) fields[c].present = 0;
    skip_blank(s);
    if (s->at >= s->end || *s->at != '{') return skip_value(s, 1); /* args that is not an object: none */
    s->at++;
    return read_members(s, fields, 1);
}

static int set_valid(Column *column, Py_ssize_t row, int valid) {
    if ((row & 7) == 0) {
        if (buffer_reserve(&column->validity, 1) < 0) return -1;
        column->validity.data[column->validity.size++] = 0;
    }
    if (valid) column->validity.data[row >> 3] |= (char)(1 << (row & 7));
    else column->nulls++;
    return 0;
}

static int put_text(Column *column, Py_ssize_t row, const char *text, size_t length, int valid) {
    if (set_valid(column, row, valid) < 0) return -1;
    if (valid && buffer_append(&column->data, text, length) < 0) return -1;
    int64_t offset = (int64_t)column->data.size;
    return buffer_append(&column->offsets, &offset, sizeof offset);
}

static int put_double(Column *column, Py_ssize_t row, double value, int valid) {
    if (set_valid(column, row, valid) < 0) return -1;
    if (!valid) value = 0.0;
    return buffer_append(&column->data, &value, sizeof value);
}

static int put_int64(Column *column, Py_ssize_t row, int64_t value, int valid) {
    if (set_valid(column, row, valid) < 0) return -1;
    if (!valid) value = 0;
    return buffer_append(&column->data, &value, sizeof value);
}

static int put_int32(Column *column, Py_ssize_t row, int64_t value, int valid) {
    if (set_valid(column, row, valid) < 0) return -1;
    int32_t narrow = valid ? (int32_t)value : 0;
    return buffer_append(&column->data, &narrow, sizeof narrow);
}

static const char *field_text(Scanner *s, const Field *field) {
    return field->in_scratch ? s->scratch.data + field->scratch_offset : field->text;
}

static int field_is(Scanner *s, const Field *field, const char *text, size_t length) {
    return field->present && field->length == length && memcmp(field_text(s, field), text, length) == 0;
}

/* The integer polars' non-strict cast reads from text: an optional sign, then one or more ASCII
 * digits, within int64; 0 (null) for anything else. */
static int text_integer(const char *p, size_t n, int64_t *out) {
    size_t i = 0;
    int negative = 0;
    if (n > 0 && (p[0] == '+' || p[0] == '-')) {
        negative = p[0] == '-';
        i = 1;
    }
    if (i == n) return 0;
    uint64_t magnitude = 0;
    for (; i < n; i++) {
        unsigned d = (unsigned char)p[i] - '0';
        if (d > 9 || magnitude > (UINT64_MAX - d) / 10) return 0;
        magnitude = magnitude * 10 + d;
    }
    if (negative ? magnitude > (uint64_t)INT64_MAX + 1 : magnitude > (uint64_t)INT64_MAX) return 0;
    *out = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    return 1;
}

static int put_field_text(Scanner *s, Column *column, Py_ssize_t row, const Field *field, int valid) {
    valid = valid && field->present;
    return put_text(column, row, valid ? field_text(s, field) : NULL, valid ? field->length : 0, valid);
}

static int put_field_integer_of_text(Scanner *s, Column *column, Py_ssize_t row, const Field *field) {
    int64_t value = 0;
    int valid = field->present && text_integer(field_text(s, field), field->length, &value);
    return put_int64(column, row, value, valid);
}

/* Every field of the event, as read, into `raw`. */
static int append_raw(Scanner *s, Field *fields) {
    Table *t = &s->raw;
    for (int c = 0; c < N_COLUMNS; c++) {
        Field *field = &fields[c];
        int status;
        switch (COLUMN_KINDS[c]) {
        case TEXT: status = put_field_text(s, &t->columns[c], t->rows, field, 1); break;
        case FLOAT64: status = put_double(&t->columns[c], t->rows, field->number, field->present); break;
        default: status = put_int64(&t->columns[c], t->rows, field->integer, field->present);
        }
        if (status < 0) return -1;
    }
    t->rows++;
    return 0;
}

static int is_gpu_category(Scanner *s, const Field *cat) {
    for (int i = 0; i < s->n_gpu_categories; i++)
        if (field_is(s, cat, s->gpu_categories[i], (size_t)s->gpu_category_lengths[i])) return 1;
    return 0;
}

/* What kineto keeps of the event (its _reduce): a complete event with a numeric ts and dur into
 * `events`, an "ac2g" flow end with an id into `flows`; a complete event without ts or dur counted. */
static int append_complete(Scanner *s, Field *fields) {
    Field *ph = &fields[COL_PH], *cat = &fields[COL_CAT];
    if (field_is(s, ph, "X", 1)) {
        if (!fields[COL_TS].present || !fields[COL_DUR].present) {
            s->untimed++;
            return 0;
        }
        Table *t = &s->events;
        Py_ssize_t row = t->rows;
        Column *c = t->columns;
        Field *device = &fields[COL_DEVICE];
        int unlinked = is_gpu_category(s, cat) && !fields[COL_CORRELATION].present;
        int narrow = device->present && device->integer >= INT32_MIN && device->integer <= INT32_MAX;
        static const char empty[1] = "";
        if (put_text(&c[EV_CAT], row, cat->present ? field_text(s, cat) : empty, cat->present ? cat->length : 0, 1) < 0 ||
            put_text(&c[EV_NAME], row, fields[COL_NAME].present ? field_text(s, &fields[COL_NAME]) : empty,
                     fields[COL_NAME].present ? fields[COL_NAME].length : 0, 1) < 0 ||
            put_field_integer_of_text(s, &c[EV_PID], row, &fields[COL_PID]) < 0 ||
            put_field_integer_of_text(s, &c[EV_TID], row, &fields[COL_TID]) < 0 ||
            put_double(&c[EV_TS], row, fields[COL_TS].number, 1) < 0 ||
            put_double(&c[EV_DUR], row, fields[COL_DUR].number, 1) < 0 ||
            put_int64(&c[EV_CORRELATION], row, fields[COL_CORRELATION].integer, fields[COL_CORRELATION].present) < 0 ||
            put_int64(&c[EV_EXTERNAL_ID], row, fields[COL_EXTERNAL_ID].integer, fields[COL_EXTERNAL_ID].present) < 0 ||
            put_int32(&c[EV_DEVICE], row, device->integer, narrow) < 0 ||
            put_int64(&c[EV_STREAM], row, fields[COL_STREAM].integer, fields[COL_STREAM].present) < 0 ||
            put_field_text(s, &c[EV_RAW_PID], row, &fields[COL_PID], unlinked) < 0 ||
            put_field_text(s, &c[EV_RAW_TID], row, &fields[COL_TID], unlinked) < 0 ||
            put_double(&c[EV_RAW_TS], row, fields[COL_TS].number, unlinked) < 0)
            return -1;
        t->rows++;
        return 0;
    }
    if (field_is(s, ph, "f", 1) && field_is(s, cat, "ac2g", 4) && fields[COL_ID].present) {
        Table *t = &s->flows;
        Py_ssize_t row = t->rows;
        Column *c = t->columns;
        if (put_field_text(s, &c[FL_PID], row, &fields[COL_PID], 1) < 0 ||
            put_field_text(s, &c[FL_TID], row, &fields[COL_TID], 1) < 0 ||
            put_double(&c[FL_TS], row, fields[COL_TS].number, fields[COL_TS].present) < 0 ||
            put_int64(&c[FL_FLOW], row, fields[COL_ID].integer, 1) < 0)
            return -1;
        t->rows++;
    }
    return 0;
}

static int read_event(Scanner *s) {
    Field fields[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++) fields[c].present = 0;
    s->scratch.size = 0;
    s->at++; /* '{' */
    if (read_members(s, fields, 0) < 0) return -1;
    return s->complete ? append_complete(s, fields) : append_raw(s, fields);
}

static int scan_events(Scanner *s) {
    skip_blank(s);
    if (s->at >= s->end) return 0;
    while (1) {
        skip_blank(s);
        if (s->at >= s->end) return fail(s, "missing event");
        if (*s->at == '{') {
            if (read_event(s) < 0) return -1;
        } else if (skip_value(s, 0) < 0) { /* not an object: no row */
            return -1;
        }
        skip_blank(s);
        if (s->at >= s->end) return 0;
        if (*s->at != ',') return fail(s, "expected ',' between events");
        s->at++;
    }
}

/* ---------- the Arrow C data interface ----------
 * https://arrow.apache.org/docs/format/CDataInterface.html: each scanned column leaves as its own
 * Arrow array, read by polars (or any Arrow consumer) through __arrow_c_array__ without a copy and
 * without pyarrow. One array a column, not one struct array of them all: a consumer keeps an
 * imported array's whole allocation while any of its values lives (polars' text views point into
 * the bytes they came from), so a few kept rows of one column must not hold every column. */

#define ARROW_FLAG_NULLABLE 2

static const char *ARROW_FORMATS[] = {[TEXT] = "U", [FLOAT64] = "g", [INT64] = "l", [INT32] = "i"}; /* large utf8, double, int64, int32 */

/* Give back a buffer's unused capacity before it is handed over, since a consumer may keep it long. */
static void buffer_shrink(Buffer *b) {
    if (b->capacity > b->size && b->size > 0) {
        char *data = realloc(b->data, b->size);
        if (data != NULL) {
            b->data = data;
            b->capacity = b->size;
        }
    }
}

static void column_free(Column *column) {
    free(column->validity.data);
    free(column->data.data);
    free(column->offsets.data);
    memset(column, 0, sizeof *column);
}

/* What one exported array owns, freed by its release. */
typedef struct {
    Column column;
    const void *buffers[3];
} Exported;

static void release_schema(struct ArrowSchema *schema) { schema->release = NULL; }

static void release_array(struct ArrowArray *array) {
    Exported *exported = array->private_data;
    column_free(&exported->column);
    free(exported);
    array->release = NULL;
}

typedef struct {
    PyObject_HEAD
    Column column;
    const char *name;
    int kind; /* TEXT, FLOAT64, INT64 or INT32 */
    int64_t rows;
    int exported;
} EventColumn;

static void capsule_release_schema(PyObject *capsule) {
    struct ArrowSchema *schema = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (schema != NULL && schema->release != NULL) schema->release(schema);
    free(schema);
}

static void capsule_release_array(PyObject *capsule) {
    struct ArrowArray *array = PyCapsule_GetPointer(capsule, "arrow_array");
    if (array != NULL && array->release != NULL) array->release(array);
    free(array);
}

/* The column moves into the exported array: a column is exported once. */
static struct ArrowArray *export_array(EventColumn *self) {
    struct ArrowArray *array = calloc(1, sizeof *array);
    Exported *exported = calloc(1, sizeof *exported);
    if (array == NULL || exported == NULL) {
        free(array);
        free(exported);
        return NULL;
    }
    exported->column = self->column;
    memset(&self->column, 0, sizeof self->column);
    Column *column = &exported->column;
    buffer_shrink(&column->validity);
    buffer_shrink(&column->data);
    buffer_shrink(&column->offsets);
    exported->buffers[0] = column->nulls ? column->validity.data : NULL;
    if (self->kind == TEXT) {
        exported->buffers[1] = column->offsets.data;
        exported->buffers[2] = column->data.data;
        array->n_buffers = 3;
    } else {
        exported->buffers[1] = column->data.data;
        array->n_buffers = 2;
    }
    array->length = self->rows;
    array->null_count = column->nulls;
    array->buffers = exported->buffers;
    array->release = release_array;
    array->private_data = exported;
    return array;
}

static PyObject *EventColumn_arrow_c_array(EventColumn *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", keywords, &requested)) return NULL;
    if (self->exported) {
        PyErr_SetString(PyExc_RuntimeError, "this event column was already exported");
        return NULL;
    }
    struct ArrowSchema *schema = calloc(1, sizeof *schema);
    if (schema == NULL) return PyErr_NoMemory();
    schema->format = ARROW_FORMATS[self->kind];
    schema->name = self->name;
    schema->flags = ARROW_FLAG_NULLABLE;
    schema->release = release_schema;
    PyObject *schema_capsule = PyCapsule_New(schema, "arrow_schema", capsule_release_schema);
    if (schema_capsule == NULL) {
        free(schema);
        return NULL;
    }
    struct ArrowArray *array = export_array(self);
    if (array == NULL) {
        Py_DECREF(schema_capsule);
        return PyErr_NoMemory();
    }
    self->exported = 1;
    PyObject *array_capsule = PyCapsule_New(array, "arrow_array", capsule_release_array);
    if (array_capsule == NULL) {
        array->release(array);
        free(array);
        Py_DECREF(schema_capsule);
        return NULL;
    }
    return Py_BuildValue("(NN)", schema_capsule, array_capsule);
}

static void EventColumn_dealloc(EventColumn *self) {
    column_free(&self->column);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef EVENT_COLUMN_METHODS[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))EventColumn_arrow_c_array, METH_VARARGS | METH_KEYWORDS,
     "The column as an Arrow array (PyCapsule interface); once."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EventColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.trace._eventscan.EventColumn",
    .tp_basicsize = sizeof(EventColumn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One raw event column of a scan, exported through the Arrow C data interface.",
    .tp_dealloc = (destructor)EventColumn_dealloc,
    .tp_methods = EVENT_COLUMN_METHODS,
};

/* ---------- Python ---------- */

/* {name: EventColumn} of a finished table; its columns move into the objects. */
static PyObject *columns_dict(Table *t) {
    PyObject *columns = PyDict_New();
    for (int c = 0; c < t->width && columns != NULL; c++) {
        EventColumn *column = PyObject_New(EventColumn, &EventColumnType);
        if (column == NULL) {
            Py_CLEAR(columns);
            break;
        }
        column->column = t->columns[c];
        memset(&t->columns[c], 0, sizeof t->columns[c]);
        column->name = t->names[c];
        column->kind = t->kinds[c];
        column->rows = t->rows;
        column->exported = 0;
        if (PyDict_SetItemString(columns, t->names[c], (PyObject *)column) < 0) Py_CLEAR(columns);
        Py_DECREF(column);
    }
    return columns;
}

/* Every buffer allocated, even with no rows. */
static int table_init(Table *t, const char *const *names, const int *kinds, int width) {
    t->names = names;
    t->kinds = kinds;
    t->width = width;
    int64_t zero = 0;
    for (int c = 0; c < width; c++) {
        Column *column = &t->columns[c];
        if (buffer_reserve(&column->validity, 1) < 0 || buffer_reserve(&column->data, 8) < 0) return -1;
        if (kinds[c] == TEXT && buffer_append(&column->offsets, &zero, sizeof zero) < 0) return -1;
    }
    return 0;
}

static void table_free(Table *t) {
    for (int c = 0; c < MAX_COLUMNS; c++) column_free(&t->columns[c]);
}

/* The events array text[start:end] through the scanner `s` (its tables ready); -1 with an error set. */
static int run_scan(Scanner *s, Py_buffer *view, Py_ssize_t start, Py_ssize_t end) {
    if (start < 0 || end < start || end > view->len) {
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the text");
        return -1;
    }
    s->start = s->at = (const unsigned char *)view->buf + start;
    s->end = (const unsigned char *)view->buf + end;
    return scan_events(s);
}

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &end)) return NULL;
    Scanner s;
    memset(&s, 0, sizeof s);
    int status = table_init(&s.raw, COLUMN_NAMES, COLUMN_KINDS, N_COLUMNS);
    if (status == 0) status = run_scan(&s, &view, start, end);
    PyBuffer_Release(&view);
    free(s.scratch.data);
    PyObject *columns = status < 0 ? NULL : columns_dict(&s.raw);
    table_free(&s.raw); /* the columns not moved */
    if (columns == NULL) return NULL;
    return Py_BuildValue("(nN)", s.raw.rows, columns);
}

/* The GPU categories (a tuple of str) into `s`: pointers into the str objects, which the caller holds. */
static int set_gpu_categories(Scanner *s, PyObject *categories) {
    if (!PyTuple_Check(categories) || PyTuple_GET_SIZE(categories) > MAX_GPU_CATEGORIES) {
        PyErr_Format(PyExc_ValueError, "gpu_categories must be a tuple of at most %d str", MAX_GPU_CATEGORIES);
        return -1;
    }
    s->n_gpu_categories = (int)PyTuple_GET_SIZE(categories);
    for (int i = 0; i < s->n_gpu_categories; i++) {
        s->gpu_categories[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(categories, i), &s->gpu_category_lengths[i]);
        if (s->gpu_categories[i] == NULL) return -1;
    }
    return 0;
}

static PyObject *scan_complete(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    PyObject *categories;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnO", &view, &start, &end, &categories)) return NULL;
    Scanner s;
    memset(&s, 0, sizeof s);
    s.complete = 1;
    int status = set_gpu_categories(&s, categories);
    if (status == 0) status = table_init(&s.events, EVENT_NAMES, EVENT_KINDS, N_EVENT_COLUMNS);
    if (status == 0) status = table_init(&s.flows, FLOW_NAMES, FLOW_KINDS, N_FLOW_COLUMNS);
    if (status == 0) status = run_scan(&s, &view, start, end);
    PyBuffer_Release(&view);
    free(s.scratch.data);
    PyObject *result = NULL;
    if (status == 0) {
        PyObject *events = columns_dict(&s.events);
        PyObject *flows = events == NULL ? NULL : columns_dict(&s.flows);
        if (flows == NULL) Py_XDECREF(events);
        else result = Py_BuildValue("(nNnNn)", s.events.rows, events, s.flows.rows, flows, s.untimed);
    }
    table_free(&s.events);
    table_free(&s.flows);
    return result;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(text, start, end) -> (rows, {name: EventColumn}): the events array text[start:end] as Arrow "
     "columns; Unsupported when it is not read exactly."},
    {"scan_complete", scan_complete, METH_VARARGS,
     "scan_complete(text, start, end, gpu_categories) -> (rows, {name: EventColumn}, flow_rows, "
     "{name: EventColumn}, untimed): the complete events and ac2g flow ends of text[start:end], as "
     "tracekit.trace.kineto keeps them; Unsupported when it is not read exactly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, .m_name = "_eventscan", .m_size = -1, .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__eventscan(void) {
    init_byte_classes();
    if (PyType_Ready(&EventColumnType) < 0) return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module == NULL) return NULL;
    Unsupported = PyErr_NewException("tracekit.trace._eventscan.Unsupported", PyExc_ValueError, NULL);
    if (Unsupported == NULL || PyModule_AddObject(module, "Unsupported", Unsupported) < 0) {
        Py_XDECREF(Unsupported);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(Unsupported);
    return module;
}
