/* kernels/cpu/embedding.c: row gathers and scatter-adds on strided CPU tensors, in
 * double through tg_load/tg_store. Positions of ids are visited in row-major order. */
#include "kernels/embedding.h"

/* The id at ids offset `at` (ids is i32). */
static int64_t id_at(const tg_tensor *ids, int64_t at)
{
    return ((const int32_t *)tg_bytes(ids))[at];
}

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

/* dst[d] ← src[d] (or += src[d] when add) for d < n: one row of D values. */
static void row_copy(char *dst, tg_dtype dst_dtype, int64_t dst_at, int64_t dst_step, const char *src,
                     tg_dtype src_dtype, int64_t src_at, int64_t src_step, int64_t n, bool add)
{
    for (int64_t d = 0; d < n; d++) {
        int64_t to = dst_at + d * dst_step;
        double v = tg_load(src, src_dtype, src_at + d * src_step);
        tg_store(dst, dst_dtype, to, add ? tg_load(dst, dst_dtype, to) + v : v);
    }
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
                     table->dtype, id * table->strides[0], table->strides[1], dim, false);
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}

tg_status tg_cpu_embedding_bwd(const tg_tensor *dy, const tg_tensor *ids, tg_tensor *dtable)
{
    tg_iter it;
    tg_iter_init(&it, ids->ndim, ids->shape, 2, (const int64_t *[]){ids->strides, dy->strides});
    if (it.empty) return TG_OK;
    const int64_t vocab = dtable->shape[0], dim = dtable->shape[1], dy_step = dy->strides[dy->ndim - 1];
    do {
        for (int64_t j = 0; j < it.row_length; j++) {
            int64_t id = id_at(ids, it.offset[0] + j * it.row_stride[0]);
            if (id < 0 || id >= vocab) /* the ids changed after the forward checked them */
                return tg_set_error(TG_ERR_INVALID, "tg_embedding backward: id %lld is outside [0, %lld)", (long long)id,
                                (long long)vocab);
            row_copy(tg_bytes(dtable), dtable->dtype, id * dtable->strides[0], dtable->strides[1], tg_bytes(dy),
                     dy->dtype, it.offset[1] + j * it.row_stride[1], dy_step, dim, true);
        }
    } while (tg_iter_next_row(&it));
    return TG_OK;
}
