/* core/iter.c: row-by-row walk over an n-dimensional index space for several strided
 * operands at once (see tg_iter in internal.h). */
#include "internal.h"

#include <string.h>

void tg_iter_init(tg_iter *it, int ndim, const int64_t *shape, int n_operands, const int64_t *const *strides)
{
    memset(it, 0, sizeof *it);
    it->ndim = ndim;
    it->n_operands = n_operands;
    memcpy(it->shape, shape, sizeof(int64_t) * (size_t)ndim);
    for (int k = 0; k < n_operands; k++) {
        memcpy(it->strides[k], strides[k], sizeof(int64_t) * (size_t)ndim);
        it->row_stride[k] = strides[k][ndim - 1];
    }
    it->row_length = shape[ndim - 1];
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) it->empty = true;
}

bool tg_iter_next_row(tg_iter *it)
{
    for (int d = it->ndim - 2; d >= 0; d--) {
        it->index[d]++;
        if (it->index[d] < it->shape[d]) {
            for (int k = 0; k < it->n_operands; k++) it->offset[k] += it->strides[k][d];
            return true;
        }
        for (int k = 0; k < it->n_operands; k++) it->offset[k] -= it->strides[k][d] * (it->shape[d] - 1);
        it->index[d] = 0;
    }
    return false;
}

bool tg_broadcast_shape(int ndim_a, const int64_t *shape_a, int ndim_b, const int64_t *shape_b, int *ndim,
                        int64_t *shape)
{
    int n = ndim_a > ndim_b ? ndim_a : ndim_b;
    for (int i = 0; i < n; i++) {
        int ia = ndim_a - n + i, ib = ndim_b - n + i;
        int64_t da = ia >= 0 ? shape_a[ia] : 1, db = ib >= 0 ? shape_b[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        shape[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return true;
}

void tg_broadcast_strides(const tg_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int it = i - lead;
        strides[i] = it < 0 || (t->shape[it] == 1 && shape[i] != 1) ? 0 : t->strides[it];
    }
}
