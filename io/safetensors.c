/* io/safetensors.c: parsing and checking a safetensors header (the JSON through cJSON).
 *
 * Nothing in a header is trusted: every field is checked for type and range before it is
 * used, sizes are computed with overflow checks, and the tensors must tile the data
 * section exactly, so a reader that passed these checks can copy each tensor's bytes
 * without further bounds checks. */
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    tg_dtype dtype;
    const char *name;
} st_dtypes[] = {{TG_F32, "F32"}, {TG_F64, "F64"}, {TG_BF16, "BF16"}, {TG_F16, "F16"}, {TG_I32, "I32"}};

#define N_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

const char *tg_st_dtype_name(tg_dtype dtype)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
    return "?";
}

static bool dtype_from_name(const char *name, tg_dtype *dtype)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (!strcmp(st_dtypes[i].name, name)) {
            *dtype = st_dtypes[i].dtype;
            return true;
        }
    return false;
}

/* A JSON number that is a whole number in [0, 2^53] (where doubles are exact). */
static bool as_count(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

const char *tg_st_name_problem(const char *name)
{
    if (!strcmp(name, "__metadata__")) return "is the name safetensors keeps for the metadata";
    const unsigned char *c = (const unsigned char *)name;
    while (*c) {
        /* one UTF-8 sequence: its length from the lead byte, then continuation bytes */
        const int more = *c < 0x80                           ? 0
                         : (*c & 0xe0) == 0xc0 && *c >= 0xc2 ? 1
                         : (*c & 0xf0) == 0xe0               ? 2
                         : (*c & 0xf8) == 0xf0 && *c <= 0xf4 ? 3
                                                             : -1;
        if (more < 0) return "is not valid UTF-8";
        if (*c < 0x20) return "holds a control character";
        for (int k = 1; k <= more; k++)
            if ((c[k] & 0xc0) != 0x80) return "is not valid UTF-8";
        c += more + 1;
    }
    return NULL;
}

/* Whether the JSON text holds the escape \u0000 (a backslash that is not itself escaped,
 * then u0000): cJSON would cut the string there, so "a\u0000b" would read as "a". */
static bool has_escaped_nul(const char *json, uint64_t length)
{
    size_t backslashes = 0;
    for (uint64_t i = 0; i < length; i++) {
        if (json[i] == '\\') {
            backslashes++;
            continue;
        }
        if (backslashes % 2 == 1 && json[i] == 'u' && i + 4 < length && !memcmp(json + i + 1, "0000", 4)) return true;
        backslashes = 0;
    }
    return false;
}

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        snprintf(problem, problem_size, __VA_ARGS__);                                                                  \
        return false;                                                                                                  \
    } while (0)

/* Reads one tensor entry {"dtype", "shape", "data_offsets"} and checks it on its own. */
static bool parse_tensor(const cJSON *entry, uint64_t data_size, tg_st_tensor *t, char *problem, size_t problem_size)
{
    t->name = entry->string;
    const char *wrong = tg_st_name_problem(t->name);
    if (wrong) FAIL("tensor name '%s' %s", t->name, wrong);
    if (!cJSON_IsObject(entry)) FAIL("tensor '%s' is not a JSON object", t->name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype)) FAIL("tensor '%s' has no \"dtype\" string", t->name);
    if (!dtype_from_name(dtype->valuestring, &t->dtype))
        FAIL("tensor '%s' has dtype \"%.32s\", which is not one of F32, F64, BF16, F16, I32", t->name,
             dtype->valuestring);
    int ndim = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (ndim < 0 || ndim > TG_MAX_DIMS)
        FAIL("tensor '%s' needs \"shape\": an array of at most %d sizes", t->name, TG_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1, value;
    const cJSON *item;
    int d = 0;
    cJSON_ArrayForEach(item, shape)
    {
        if (!as_count(item, &value) || value > INT64_MAX)
            FAIL("tensor '%s' has a shape entry that is not a size", t->name);
        t->shape[d++] = (int64_t)value;
        if (value && numel > UINT64_MAX / value) FAIL("tensor '%s' has a shape whose size overflows", t->name);
        numel *= value;
    }
    uint64_t begin, end, size = tg_dtype_size(t->dtype);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !as_count(cJSON_GetArrayItem(offsets, 0), &begin) || !as_count(cJSON_GetArrayItem(offsets, 1), &end))
        FAIL("tensor '%s' needs \"data_offsets\": [begin, end], two byte offsets", t->name);
    if (begin > end)
        FAIL("tensor '%s' has data_offsets [%llu, %llu] that end before they begin", t->name, (unsigned long long)begin,
             (unsigned long long)end);
    if (end > data_size)
        FAIL("tensor '%s' has data_offsets [%llu, %llu] outside the %llu-byte data section (truncated?)", t->name,
             (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
    if (numel > UINT64_MAX / size || end - begin != numel * size)
        FAIL("tensor '%s' has data_offsets [%llu, %llu] (%llu bytes), but %llu %s elements take %llu bytes", t->name,
             (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
             (unsigned long long)numel, dtype->valuestring, (unsigned long long)(numel * size));
    t->begin = begin;
    t->end = end;
    return true;
}

static bool check_metadata(const cJSON *metadata, char *problem, size_t problem_size)
{
    if (!cJSON_IsObject(metadata)) FAIL("\"__metadata__\" is not a JSON object");
    const cJSON *item;
    cJSON_ArrayForEach(item, metadata)
    {
        if (!cJSON_IsString(item)) FAIL("metadata \"%.64s\" is not a string", item->string);
    }
    return true;
}

static int by_offset(const void *a, const void *b)
{
    const tg_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const tg_st_tensor *)a)->name, ((const tg_st_tensor *)b)->name);
}

/* Sorted by offset, each tensor must start where the one before ended, and the last end
 * where the data section does. Names must be unique (JSON objects may repeat keys). */
static bool check_tiling(tg_st_header *h, char *problem, size_t problem_size)
{
    size_t n = h->count;
    tg_st_tensor *sorted = malloc((n ? n : 1) * sizeof *sorted);
    if (!sorted) FAIL("out of memory checking %zu tensors", n);
    memcpy(sorted, h->tensors, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(sorted[i].name, sorted[i - 1].name)) {
            snprintf(problem, problem_size, "tensor '%s' appears more than once", sorted[i].name);
            free(sorted);
            return false;
        }
    qsort(sorted, n, sizeof *sorted, by_offset);
    uint64_t at = 0;
    const char *previous = NULL;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const tg_st_tensor *t = &sorted[i];
        ok = t->begin == at;
        if (t->begin < at)
            snprintf(problem, problem_size,
                     "tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] start before byte %llu)", previous,
                     t->name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)at);
        else if (t->begin > at)
            snprintf(problem, problem_size, "bytes [%llu, %llu) of the data section belong to no tensor (before '%s')",
                     (unsigned long long)at, (unsigned long long)t->begin, t->name);
        at = t->end;
        previous = t->name;
    }
    if (ok && at != h->data_size) {
        snprintf(problem, problem_size, "bytes [%llu, %llu) of the data section belong to no tensor (after the last)",
                 (unsigned long long)at, (unsigned long long)h->data_size);
        ok = false;
    }
    free(sorted);
    return ok;
}

bool tg_st_parse_header(const char *json, uint64_t length, uint64_t data_size, tg_st_header *h, char *problem,
                        size_t problem_size)
{
    *h = (tg_st_header){.data_size = data_size};
    if (length == 0 || json[0] != '{') FAIL("the header does not start with '{'");
    if (has_escaped_nul(json, length))
        FAIL("the header holds an escaped NUL character (\\u0000), which no name or value may hold");
    const char *end = NULL;
    h->root = cJSON_ParseWithLengthOpts(json, (size_t)length, &end, false);
    if (!h->root) {
        uint64_t at = end && end >= json && end <= json + length ? (uint64_t)(end - json) : 0;
        FAIL("the header is not valid JSON (error near byte %llu of %llu)", (unsigned long long)at,
             (unsigned long long)length);
    }
    for (; end < json + length; end++) /* writers pad the header with spaces */
        if (*end != ' ' && *end != '\n' && *end != '\t' && *end != '\r') {
            tg_st_header_release(h);
            FAIL("the header has bytes after its JSON object (at byte %llu of %llu)", (unsigned long long)(end - json),
                 (unsigned long long)length);
        }
    if (!cJSON_IsObject(h->root)) {
        tg_st_header_release(h);
        FAIL("the header is not a JSON object");
    }
    size_t n = 0;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, h->root) n++;
    h->tensors = malloc((n ? n : 1) * sizeof *h->tensors);
    if (!h->tensors) {
        tg_st_header_release(h);
        FAIL("out of memory for %zu tensor entries", n);
    }
    cJSON_ArrayForEach(entry, h->root)
    {
        bool ok;
        if (!strcmp(entry->string, "__metadata__")) {
            ok = !h->metadata && check_metadata(entry, problem, problem_size);
            if (h->metadata) snprintf(problem, problem_size, "\"__metadata__\" appears more than once");
            h->metadata = entry;
        } else {
            ok = parse_tensor(entry, data_size, &h->tensors[h->count++], problem, problem_size);
        }
        if (!ok) {
            tg_st_header_release(h);
            return false;
        }
    }
    if (!check_tiling(h, problem, problem_size)) {
        tg_st_header_release(h);
        return false;
    }
    return true;
}

void tg_st_header_release(tg_st_header *h)
{
    cJSON_Delete(h->root);
    free(h->tensors);
    *h = (tg_st_header){0};
}

const char *tg_st_metadata(const tg_st_header *h, const char *key)
{
    const cJSON *item = h->metadata ? cJSON_GetObjectItemCaseSensitive(h->metadata, key) : NULL;
    return cJSON_IsString(item) ? item->valuestring : NULL;
}
