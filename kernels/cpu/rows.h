/* kernels/cpu/rows.h: a strided row of a tensor read into doubles (or floats) and written
 * back, with one dtype switch per row instead of one per element (f32 and f64 get plain
 * loops the compiler vectorises, and bf16 too in the float rows; other dtypes go through
 * tg_load and tg_store). */
#ifndef TAPEGRAD_KERNELS_CPU_ROWS_H
#define TAPEGRAD_KERNELS_CPU_ROWS_H

#include "core/internal.h"

/* n elements of t from element offset `at`, `step` apart, as doubles. */
static inline void tg_load_row(const tg_tensor *t, int64_t at, int64_t step, int64_t n, double *out)
{
    const char *base = tg_bytes(t);
    switch (t->dtype) {
    case TG_F32:
        for (int64_t i = 0; i < n; i++) out[i] = ((const float *)base)[at + i * step];
        break;
    case TG_F64:
        for (int64_t i = 0; i < n; i++) out[i] = ((const double *)base)[at + i * step];
        break;
    default:
        for (int64_t i = 0; i < n; i++) out[i] = tg_load(base, t->dtype, at + i * step);
    }
}

/* The inverse of tg_load_row: each value rounded once to t's dtype. */
static inline void tg_store_row(tg_tensor *t, int64_t at, int64_t step, int64_t n, const double *values)
{
    char *base = tg_bytes(t);
    switch (t->dtype) {
    case TG_F32:
        for (int64_t i = 0; i < n; i++) ((float *)base)[at + i * step] = (float)values[i];
        break;
    case TG_F64:
        for (int64_t i = 0; i < n; i++) ((double *)base)[at + i * step] = values[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) tg_store(base, t->dtype, at + i * step, values[i]);
    }
}

/* n elements of t from element offset `at`, `step` apart, as floats (for the float32 paths
 * of f32, bf16 and f16 storage: every such value is a float exactly). */
static inline void tg_load_row_float(const tg_tensor *t, int64_t at, int64_t step, int64_t n, float *out)
{
    const char *base = tg_bytes(t);
    if (t->dtype == TG_F32) {
        const float *p = (const float *)base + at;
        for (int64_t i = 0; i < n; i++) out[i] = p[i * step];
    } else if (t->dtype == TG_BF16) {
        const uint16_t *p = (const uint16_t *)base + at;
        for (int64_t i = 0; i < n; i++) out[i] = tg_bf16_bits_to_float(p[i * step]);
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = (float)tg_load(base, t->dtype, at + i * step);
    }
}

/* The inverse of tg_load_row_float: each value rounded once to t's dtype. */
static inline void tg_store_row_float(tg_tensor *t, int64_t at, int64_t step, int64_t n, const float *values)
{
    char *base = tg_bytes(t);
    if (t->dtype == TG_F32) {
        float *p = (float *)base + at;
        for (int64_t i = 0; i < n; i++) p[i * step] = values[i];
    } else if (t->dtype == TG_BF16) {
        uint16_t *p = (uint16_t *)base + at;
        for (int64_t i = 0; i < n; i++) p[i * step] = tg_float_to_bf16_bits(values[i]);
    } else {
        for (int64_t i = 0; i < n; i++) tg_store(base, t->dtype, at + i * step, values[i]);
    }
}

#endif
