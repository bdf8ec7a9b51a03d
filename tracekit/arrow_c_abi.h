/* The Arrow C data and stream interfaces' structs (arrow.apache.org/docs/format/CDataInterface.html,
 * CStreamInterface.html), as the specification fixes them: the one definition tracekit's compiled
 * parts share (the event scanner hands its columns out through them, the span passes read polars
 * columns through them). */
#ifndef TRACEKIT_ARROW_C_ABI_H
#define TRACEKIT_ARROW_C_ABI_H

#include <stdint.h>

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

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

#endif
