/* io/safetensors.h: the safetensors container, read and written by io/checkpoint.c.
 *
 * A file is: 8 bytes, the header's length N (unsigned, little-endian); N bytes of JSON
 * (an object, padded with trailing spaces), mapping each tensor's name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} and the optional key
 * "__metadata__" to an object of string values; then the data section, in which each
 * tensor's bytes (row-major, little-endian) sit at [begin, end). The tensors tile the
 * data section exactly: no gaps, no overlaps, nothing after the last one. */
#ifndef TAPEGRAD_IO_SAFETENSORS_H
#define TAPEGRAD_IO_SAFETENSORS_H

#include "core/internal.h"

#include <cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Larger headers are refused before they are read (a corrupt length must not make the
 * reader allocate gigabytes); no model has names enough to need more. */
#define TG_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct {
    const char *name; /* points into the parsed JSON */
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into the data section */
} tg_st_tensor;

typedef struct {
    cJSON *root;
    const cJSON *metadata; /* the "__metadata__" object, or NULL */
    tg_st_tensor *tensors;
    size_t count;
    uint64_t data_size;
} tg_st_header;

/* Parses a header of `length` bytes that describes a data section of data_size bytes and
 * checks all of it: JSON, dtypes, shapes, offsets in range, tensors tiling the data
 * section, names unique, metadata values strings. On failure writes the problem (one
 * sentence, naming the tensor) into problem and returns false. */
bool tg_st_parse_header(const char *json, uint64_t length, uint64_t data_size, tg_st_header *header, char *problem,
                        size_t problem_size);
void tg_st_header_release(tg_st_header *header);
/* A metadata value (a string), or NULL when absent. */
const char *tg_st_metadata(const tg_st_header *header, const char *key);

/* The safetensors name of a dtype ("F32", "BF16"...). */
const char *tg_st_dtype_name(tg_dtype dtype);
/* Why a tensor name cannot go into a file (NULL when it can): "__metadata__", invalid
 * UTF-8 (other readers refuse the file) or a control character. Saving and loading apply
 * the same rule, so a file that saves is one that loads. */
const char *tg_st_name_problem(const char *name);

#ifdef __cplusplus
}
#endif
#endif
