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

enum { TEXT, FLOAT64, INT64 };

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
    Column columns[N_COLUMNS];
    Py_ssize_t rows;
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

static int append_row(Scanner *s, Field *fields) {
    for (int c = 0; c < N_COLUMNS; c++) {
        Column *column = &s->columns[c];
        Field *field = &fields[c];
        if (set_valid(column, s->rows, field->present) < 0) return -1;
        switch (COLUMN_KINDS[c]) {
        case TEXT: {
            if (field->present) {
                const char *text = field->in_scratch ? s->scratch.data + field->scratch_offset : field->text;
                if (buffer_append(&column->data, text, field->length) < 0) return -1;
            }
            int64_t offset = (int64_t)column->data.size;
            if (buffer_append(&column->offsets, &offset, sizeof offset) < 0) return -1;
            break;
        }
        case FLOAT64: {
            double value = field->present ? field->number : 0.0;
            if (buffer_append(&column->data, &value, sizeof value) < 0) return -1;
            break;
        }
        default: {
            int64_t value = field->present ? field->integer : 0;
            if (buffer_append(&column->data, &value, sizeof value) < 0) return -1;
        }
        }
    }
    s->rows++;
    return 0;
}

static int read_event(Scanner *s) {
    Field fields[N_COLUMNS];
    for (int c = 0; c < N_COLUMNS; c++) fields[c].present = 0;
    s->scratch.size = 0;
    s->at++; /* '{' */
    if (read_members(s, fields, 0) < 0) return -1;
    return append_row(s, fields);
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

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

static const char *ARROW_FORMATS[] = {[TEXT] = "U", [FLOAT64] = "g", [INT64] = "l"}; /* large utf8, double, int64 */

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
    int index; /* which of COLUMN_NAMES */
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
    if (COLUMN_KINDS[self->index] == TEXT) {
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
    schema->format = ARROW_FORMATS[COLUMN_KINDS[self->index]];
    schema->name = COLUMN_NAMES[self->index];
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

/* {name: EventColumn} of a finished scan; its columns move into the objects. */
static PyObject *columns_dict(Scanner *s) {
    PyObject *columns = PyDict_New();
    for (int c = 0; c < N_COLUMNS && columns != NULL; c++) {
        EventColumn *column = PyObject_New(EventColumn, &EventColumnType);
        if (column == NULL) {
            Py_CLEAR(columns);
            break;
        }
        column->column = s->columns[c];
        memset(&s->columns[c], 0, sizeof s->columns[c]);
        column->index = c;
        column->rows = s->rows;
        column->exported = 0;
        if (PyDict_SetItemString(columns, COLUMN_NAMES[c], (PyObject *)column) < 0) Py_CLEAR(columns);
        Py_DECREF(column);
    }
    return columns;
}

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &end)) return NULL;
    if (start < 0 || end < start || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the text");
        return NULL;
    }
    Scanner s;
    memset(&s, 0, sizeof s);
    s.start = s.at = (const unsigned char *)view.buf + start;
    s.end = (const unsigned char *)view.buf + end;
    int64_t zero = 0;
    int status = 0;
    for (int c = 0; c < N_COLUMNS && status == 0; c++) { /* every buffer allocated, even with no rows */
        Column *column = &s.columns[c];
        status = buffer_reserve(&column->validity, 1) | buffer_reserve(&column->data, 8);
        if (status == 0 && COLUMN_KINDS[c] == TEXT) status = buffer_append(&column->offsets, &zero, sizeof zero);
    }
    if (status == 0) status = scan_events(&s);
    PyBuffer_Release(&view);
    free(s.scratch.data);
    PyObject *columns = status < 0 ? NULL : columns_dict(&s);
    for (int c = 0; c < N_COLUMNS; c++) column_free(&s.columns[c]); /* those not moved */
    if (columns == NULL) return NULL;
    return Py_BuildValue("(nN)", (Py_ssize_t)s.rows, columns);
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(text, start, end) -> (rows, {name: EventColumn}): the events array text[start:end] as Arrow "
     "columns; Unsupported when it is not read exactly."},
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
