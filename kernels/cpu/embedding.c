/* kernels/cpu/embedding.c: row gathers and scatter-adds on strided CPU tensors, in
 * double through tg_load/tg_store. Positions of ids are visited in row-major order. */
#include "kernels/embedding.h"

#include <stdlib.h>

/* The id at ids offset `at` (ids is i32). */
static int64_t id_at(const tg_tensor *ids, int64_t at) { return ((const int32_t *)tg_bytes(ids))[at]; }

tg_status tg_cpu_embedding_find_bad_id(const tg_tensor *ids, int64_t vocab, int64_t *bad_position, int64_t *bad_id)
{
    *bad_position = -1;
    tg_iter it;
    tg_iter_init(&it, ids->ndim, ids->shape, 1, (const int64_t *[]){ids->strides});
    if (it.empty) return TG_OK;
    int64_t position = 0;
    do {
        for (int64_t j = 0; j < it.row_length; j++, position++) {
            int64_t id = id_at(ids, it.offset[0] + j * it.row_stride[0]);
            if (id >= 0 && id < vocab) continue;
            *bad_position = position;
            *bad_id = id;
            return TG_OK;
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

/* dst[d] ← src[d] for d < n: one row of D values. */
static void row_copy(char *dst, tg_dtype dst_dtype, int64_t dst_at, int64_t dst_step, const char *src,
                     tg_dtype src_dtype, int64_t src_at, int64_t src_step, int64_t n)
{
    for (int64_t d = 0; d < n; d++)
        tg_store(dst, dst_dtype, dst_at + d * dst_step, tg_load(src, src_dtype, src_at + d * src_step));
}

/* The walks below visit the positions p of ids together with the offset of row p of
 * out or dy, whose leading strides index the same space as ids' strides. */

tg_status tg_cpu_embedding_fwd(const tg_tensor *table, const tg_tensor *ids, tg_tensor *out)
{
    tg_iter it;
    tg_iter_init(&it, ids->ndim, ids->shape, 2, (const int64_t *[]){ids->strides, out->strides});
    if (it.empty) return TG_OK;
    const int64_t dim = table->shape[1], out_step = out->strides[out->ndim - 1];
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            int64_t id = id_at(ids, it.offset[0] + j * it.row_stride[0]);
            row_copy(tg_bytes(out), out->dtype, it.offset[1] + j * it.row_stride[1], out_step, tg_bytes(table),
                     table->dtype, id * table->strides[0], table->strides[1], dim);
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

/* The dy row offsets of every position, grouped by id (a counting sort, stable: within
 * an id, in position order). *first gets vocab + 1 group starts. Fails, having written
 * nothing, on an id outside [0, vocab). */
static tg_status group_rows_by_id(const tg_tensor *dy, const tg_tensor *ids, int64_t vocab, int64_t **first,
                                  int64_t **rows)
{
    tg_iter it;
    const int64_t *strides[2] = {ids->strides, dy->strides};
    int64_t n = tg_numel(ids), *start = calloc((size_t)vocab + 1, sizeof *start);
    int64_t *grouped = malloc((size_t)n * sizeof *grouped);
    if (!start || !grouped) {
        free(start), free(grouped);
        return tg_set_error(TG_ERR_NOMEM, "tg_embedding backward: out of host memory for %lld positions", (long long)n);
    }
    for (int pass = 0; pass < 2; pass++) { /* counts, then places */
        tg_iter_init(&it, ids->ndim, ids->shape, 2, strides);
        do {
            for (int64_t j = 0; j < it.row_length; j++) {
                int64_t id = id_at(ids, it.offset[0] + j * it.row_stride[0]);
                if (id < 0 || id >= vocab) { /* the ids changed after the forward checked them */
                    free(start), free(grouped);
                    return tg_set_error(TG_ERR_INVALID, "tg_embedding backward: id %lld is outside [0, %lld)",
                                        (long long)id, (long long)vocab);
                }
                if (pass == 0)
                    start[id + 1]++;
                else
                    grouped[start[id]++] = it.offset[1] + j * it.row_stride[1];
            }
        } while (tg_iter_next_row(&it));
        if (pass == 0) {
            for (int64_t v = 0; v < vocab; v++) start[v + 1] += start[v];
        } else { /* placing moved start[v] to the end of v's group, which is where v + 1 starts */
            for (int64_t v = vocab; v > 0; v--) start[v] = start[v - 1];
            start[0] = 0;
        }
    }
    *first = start, *rows = grouped;
    return TG_OK;
}

tg_status tg_cpu_embedding_bwd(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable)
{
    if (tg_numel(ids) == 0) return TG_OK;
    const int64_t vocab = dtable->shape[0], dim = dtable->shape[1], dy_step = dy->strides[dy->ndim - 1];
    int64_t *first, *rows;
    tg_status status = group_rows_by_id(dy, ids, vocab, &first, &rows);
    if (status != TG_OK) return status;
    double *chunk = malloc((size_t)dim * sizeof *chunk), *total = malloc((size_t)dim * sizeof *total);
    if (dim > 0 && (!chunk || !total)) {
        free(first), free(rows), free(chunk), free(total);
        return tg_set_error(TG_ERR_NOMEM, "tg_embedding backward: out of host memory");
    }
    const char *dy_data = tg_bytes(dy);
    for (int64_t v = 0; v < vocab; v++) {
        if (first[v] == first[v + 1]) continue; /* no position has this id: its row stays zero */
        for (int64_t d = 0; d < dim; d++) total[d] = 0.0;
        for (int64_t begin = first[v]; begin < first[v + 1]; begin += TG_EMBEDDING_GRAD_CHUNK) {
            int64_t end =
                first[v + 1] - begin > TG_EMBEDDING_GRAD_CHUNK ? begin + TG_EMBEDDING_GRAD_CHUNK : first[v + 1];
            for (int64_t d = 0; d < dim; d++) chunk[d] = 0.0;
            for (int64_t j = begin; j < end; j++)
                for (int64_t d = 0; d < dim; d++) chunk[d] += tg_load(dy_data, dy->dtype, rows[j] + d * dy_step);
            for (int64_t d = 0; d < dim; d++) total[d] += chunk[d];
        }
        for (int64_t d = 0; d < dim; d++)
            tg_store(tg_bytes(dtable), dtable->dtype, v * dtable->strides[0] + d * dtable->strides[1], total[d]);
    }
    free(first), free(rows), free(chunk), free(total);
    return TG_OK;
}
