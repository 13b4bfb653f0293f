/* tests/checkpoint_files.h: taking safetensors files apart and putting them together again,
 * for tests that feed the loader damaged or mismatched checkpoints. Independent of the
 * library's reader and writer: its own parsing (through cJSON) and its own CRC-32. Files
 * put together again are sealed (their whole-file CRC brought up to date), so that an edit
 * reaches the loader's other checks. */
#ifndef TAPEGRAD_TESTS_CHECKPOINT_FILES_H
#define TAPEGRAD_TESTS_CHECKPOINT_FILES_H

#include "test_util.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *bytes;
    size_t size;
} cf_blob;

static inline cf_blob cf_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    cf_blob b = {NULL, (size_t)ftell(f)};
    fseek(f, 0, SEEK_SET);
    b.bytes = malloc(b.size + 1);
    cr_assert(b.bytes && fread(b.bytes, 1, b.size, f) == b.size);
    fclose(f);
    return b;
}

static inline void cf_write(const char *path, const void *bytes, size_t size)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot create %s", path);
    cr_assert_eq(fwrite(bytes, 1, size, f), size);
    fclose(f);
}

static inline uint64_t cf_header_length(cf_blob b)
{
    uint64_t n;
    memcpy(&n, b.bytes, 8);
    return n;
}

/* The header as a cJSON tree. */
static inline cJSON *cf_header(cf_blob b)
{
    cJSON *root = cJSON_ParseWithLength((const char *)b.bytes + 8, (size_t)cf_header_length(b));
    cr_assert(root, "the test's own file does not parse");
    return root;
}

/* CRC-32 as zlib computes it, bit by bit. */
static inline uint32_t cf_crc32(const unsigned char *bytes, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= bytes[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* Where the 8 hex digits of "file_crc32" lie in a file (0 when the header holds no such
 * entry of 8 characters, or more than one). */
static inline size_t cf_file_crc_at(cf_blob b)
{
    static const char key[] = "\"file_crc32\":\"";
    const size_t k = sizeof key - 1, end = 8 + (size_t)cf_header_length(b);
    size_t at = 0;
    int found = 0;
    for (size_t i = 8; i + k + 9 <= end && end <= b.size; i++)
        if (!memcmp(b.bytes + i, key, k) && b.bytes[i + k + 8] == '"') at = i + k, found++;
    return found == 1 ? at : 0;
}

/* The whole file's CRC-32 with its own digits read as "00000000", as the loader checks it. */
static inline uint32_t cf_file_crc(cf_blob b, size_t at)
{
    unsigned char saved[8];
    memcpy(saved, b.bytes + at, 8);
    memset(b.bytes + at, '0', 8);
    uint32_t crc = cf_crc32(b.bytes, b.size);
    memcpy(b.bytes + at, saved, 8);
    return crc;
}

/* Brings a version 2 file's "file_crc32" up to date (files without one are left as they are). */
static inline void cf_seal(cf_blob b)
{
    size_t at = cf_file_crc_at(b);
    if (!at) return;
    char digits[9];
    snprintf(digits, sizeof digits, "%08x", cf_file_crc(b, at));
    memcpy(b.bytes + at, digits, 8);
}

/* A file from a header tree (printed and padded) and a data section, sealed. */
static inline cf_blob cf_assemble(cJSON *root, const unsigned char *data, size_t data_size)
{
    char *json = cJSON_PrintUnformatted(root);
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    cf_blob b = {malloc(8 + padded + data_size + 1), 8 + padded + data_size};
    uint64_t length = padded;
    memcpy(b.bytes, &length, 8);
    memcpy(b.bytes + 8, json, n);
    memset(b.bytes + 8 + n, ' ', padded - n);
    if (data_size) memcpy(b.bytes + 8 + padded, data, data_size);
    free(json);
    cf_seal(b);
    return b;
}

/* The same file with its header edited by `edit` and its data section kept. */
static inline cf_blob cf_edit_header(cf_blob b, void (*edit)(cJSON *root))
{
    cJSON *root = cf_header(b);
    edit(root);
    size_t start = 8 + (size_t)cf_header_length(b);
    cf_blob out = cf_assemble(root, b.bytes + start, b.size - start);
    cJSON_Delete(root);
    return out;
}

static inline char *cf_strdup(const char *s)
{
    char *copy = malloc(strlen(s) + 1);
    cr_assert(copy);
    return strcpy(copy, s);
}

/* ---- a file as a list of tensors, to add, drop or rename some and write it again ---------- */

typedef struct {
    cJSON *entry; /* a copy of the header entry (dtype, shape; offsets are redone) */
    char *name;
    unsigned char *bytes;
    size_t size;
} cf_tensor;

typedef struct {
    cJSON *metadata;
    cf_tensor tensors[512];
    int count;
} cf_file;

static inline cf_file cf_split(cf_blob b)
{
    cf_file f = {0};
    cJSON *root = cf_header(b);
    const unsigned char *data = b.bytes + 8 + cf_header_length(b);
    cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        if (!strcmp(item->string, "__metadata__")) {
            f.metadata = cJSON_Duplicate(item, true);
            continue;
        }
        cr_assert_lt(f.count, 512);
        cf_tensor *t = &f.tensors[f.count++];
        cJSON *offsets = cJSON_GetObjectItem(item, "data_offsets");
        size_t begin = (size_t)cJSON_GetArrayItem(offsets, 0)->valuedouble;
        size_t end = (size_t)cJSON_GetArrayItem(offsets, 1)->valuedouble;
        t->entry = cJSON_Duplicate(item, true);
        t->name = cf_strdup(item->string);
        t->size = end - begin;
        t->bytes = malloc(t->size + 1);
        memcpy(t->bytes, data + begin, t->size);
    }
    cJSON_Delete(root);
    return f;
}

static inline int cf_find(const cf_file *f, const char *name)
{
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->tensors[i].name, name)) return i;
    return -1;
}

static inline void cf_drop(cf_file *f, const char *name)
{
    int i = cf_find(f, name);
    cr_assert_geq(i, 0, "no tensor %s to drop", name);
    cJSON_Delete(f->tensors[i].entry);
    free(f->tensors[i].name);
    free(f->tensors[i].bytes);
    f->tensors[i] = f->tensors[--f->count];
}

/* Adds a copy of tensor `from` under a new name. */
static inline void cf_copy_as(cf_file *f, const char *from, const char *name)
{
    int i = cf_find(f, from);
    cr_assert_geq(i, 0);
    cf_tensor *t = &f->tensors[f->count++];
    *t = f->tensors[i];
    t->entry = cJSON_Duplicate(f->tensors[i].entry, true);
    t->name = cf_strdup(name);
    t->bytes = malloc(t->size + 1);
    memcpy(t->bytes, f->tensors[i].bytes, t->size);
}

/* Writes the tensors back to back in list order, with the CRC-32 brought up to date. */
static inline cf_blob cf_join(const cf_file *f)
{
    size_t data_size = 0;
    for (int i = 0; i < f->count; i++) data_size += f->tensors[i].size;
    unsigned char *data = malloc(data_size + 1);
    cJSON *root = cJSON_CreateObject();
    if (f->metadata) {
        cJSON *metadata = cJSON_Duplicate(f->metadata, true);
        cJSON_AddItemToObject(root, "__metadata__", metadata);
    }
    size_t at = 0;
    for (int i = 0; i < f->count; i++) {
        const cf_tensor *t = &f->tensors[i];
        cJSON *entry = cJSON_Duplicate(t->entry, true);
        cJSON_DeleteItemFromObject(entry, "data_offsets");
        double offsets[2] = {(double)at, (double)(at + t->size)};
        cJSON_AddItemToObject(entry, "data_offsets", cJSON_CreateDoubleArray(offsets, 2));
        cJSON_AddItemToObject(root, t->name, entry);
        memcpy(data + at, t->bytes, t->size);
        at += t->size;
    }
    cJSON *metadata = cJSON_GetObjectItem(root, "__metadata__");
    if (metadata && cJSON_GetObjectItem(metadata, "data_crc32")) {
        char crc[9];
        snprintf(crc, sizeof crc, "%08x", cf_crc32(data, data_size));
        cJSON_ReplaceItemInObject(metadata, "data_crc32", cJSON_CreateString(crc));
    }
    cf_blob b = cf_assemble(root, data, data_size);
    cJSON_Delete(root);
    free(data);
    return b;
}

static inline void cf_free(cf_file *f)
{
    for (int i = 0; i < f->count; i++) {
        cJSON_Delete(f->tensors[i].entry);
        free(f->tensors[i].name);
        free(f->tensors[i].bytes);
    }
    cJSON_Delete(f->metadata);
    f->count = 0;
}

#endif
