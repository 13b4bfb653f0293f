/* Embedding: gradient checks with repeated ids, values and gradients against naive
 * loops, a deterministic (position-order) scatter-add, and the bad-input matrix. */
#include "test_util.h"
#include "kernels/embedding.h" /* TG_EMBEDDING_GRAD_CHUNK */

#include <stdio.h>
#include <string.h>

static tg_tensor *embedding_loss(tg_tape *tape, tg_tensor *const *in, int n, void *user)
{
    (void)n;
    (void)user;
    return tg_sum_all(tape, tg_mul(tape, tg_embedding(tape, in[0], in[1]), in[2]));
}

/* ids' shape with D appended. */
static int out_shape(const tg_tensor *ids, int64_t dim, int64_t *shape)
{
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = dim;
    return ids->ndim + 1;
}

Test(embedding, gradcheck_rank_1_and_2_with_repeated_ids)
{
    for (int round = 0; round < 4; round++) {
        tg_tape *tape = tg_tape_create();
        int64_t vocab = tt_randint(1, 4), dim = tt_randint(1, 4), shape[TG_MAX_DIMS];
        /* more positions than rows: some id repeats */
        int64_t ids_shape[2] = {vocab + tt_randint(1, 4), tt_randint(1, 3)};
        tg_tensor *ids = tt_ids(tape, round % 2 ? 2 : 1, ids_shape, (int32_t)vocab);
        int64_t table_shape[2] = {vocab, dim};
        tg_tensor *table =
            round >= 2 ? tt_strided_leaf(tape, TG_F64, 2, table_shape) : tt_leaf(tape, TG_F64, 2, table_shape);
        tg_tensor *w = tt_randn(tape, TG_F64, out_shape(ids, dim, shape), shape);
        tg_tensor *inputs[3] = {table, ids, w};
        tt_gradcheck(round >= 2 ? "tg_embedding strided table" : "tg_embedding", embedding_loss, inputs, 3, NULL, NULL);
        tg_tape_free(tape);
    }
}

Test(embedding, values_and_gradient_match_naive_loops)
{
    tg_tape *tape = tg_tape_create();
    int64_t vocab = tt_randint(2, 9), dim = tt_randint(1, 6), shape[TG_MAX_DIMS];
    int64_t ids_shape[2] = {tt_randint(1, 5), tt_randint(5, 12)};
    tg_tensor *table = tt_leaf(tape, TG_F64, 2, (int64_t[]){vocab, dim});
    tg_tensor *ids = tt_ids(tape, 2, ids_shape, (int32_t)vocab);
    tg_set_flat(ids, 1, tg_get_flat(ids, 0)); /* at least one repeat */
    tg_tensor *w = tt_randn(tape, TG_F64, out_shape(ids, dim, shape), shape);
    tg_tensor *y = tg_embedding(tape, table, ids);
    cr_assert(y, "%s", tg_last_error());
    cr_assert(y->ndim == 3 && y->shape[0] == ids_shape[0] && y->shape[1] == ids_shape[1] && y->shape[2] == dim);
    cr_assert_eq(tg_backward(tape, tg_sum_all(tape, tg_mul(tape, y, w))), TG_OK, "%s", tg_last_error());
    double expected_grad[9][6] = {{0}};
    int64_t n = tg_numel(ids);
    for (int64_t p = 0; p < n; p++) {
        int64_t id = (int64_t)tg_get_flat(ids, p);
        for (int64_t d = 0; d < dim; d++) {
            cr_assert_eq(tg_get_flat(y, p * dim + d), tg_get(table, (int64_t[]){id, d}));
            expected_grad[id][d] += tg_get_flat(w, p * dim + d);
        }
    }
    for (int64_t v = 0; v < vocab; v++)
        for (int64_t d = 0; d < dim; d++)
            cr_assert_float_eq(tg_get(table->grad, (int64_t[]){v, d}), expected_grad[v][d], 1e-12, "row %lld",
                               (long long)v);
    tg_tape_free(tape);
}

Test(embedding, scatter_add_sums_chunks_of_positions_in_double_and_rounds_once)
{
    /* The documented grouping (kernels/embedding.h), which both devices follow to give the
     * same bits: per id, its positions in order are cut into chunks of
     * TG_EMBEDDING_GRAD_CHUNK, each summed in double from 0, the chunk sums added in order,
     * the total rounded once to f32. dy has large and small values so that the grouping
     * shows in the rounding; ids 0 and 1 get several chunks each. */
    tg_tape *tape = tg_tape_create();
    int64_t vocab = 3, dim = tt_randint(1, 4), n = tt_randint(1200, 1600);
    tg_tensor *table = tt_leaf(tape, TG_F32, 2, (int64_t[]){vocab, dim});
    tg_tensor *ids = tt_ids(tape, 1, (int64_t[]){n}, (int32_t)vocab);
    tg_tensor *dy = tt_randn(tape, TG_F32, 2, (int64_t[]){n, dim});
    for (int64_t i = 0; i < n * dim; i++) tg_set_flat(dy, i, tg_get_flat(dy, i) * (i % 7 == 0 ? 1e4 : 1.0));
    tg_tensor *y = tg_embedding(tape, table, ids);
    cr_assert_eq(tg_backward_with_grad(tape, y, dy), TG_OK, "%s", tg_last_error());
    for (int64_t v = 0; v < vocab; v++)
        for (int64_t d = 0; d < dim; d++) {
            double total = 0.0, chunk = 0.0;
            int64_t in_chunk = 0;
            for (int64_t p = 0; p < n; p++) {
                if ((int64_t)tg_get_flat(ids, p) != v) continue;
                chunk += tg_get_flat(dy, p * dim + d);
                if (++in_chunk == TG_EMBEDDING_GRAD_CHUNK) total += chunk, chunk = 0.0, in_chunk = 0;
            }
            if (in_chunk > 0) total += chunk;
            cr_assert_eq((float)tg_get(table->grad, (int64_t[]){v, d}), (float)total, "row %lld column %lld",
                         (long long)v, (long long)d);
        }
    tg_tape_free(tape);
}

Test(embedding, all_ids_equal_accumulates_every_row_of_dy)
{
    tg_tape *tape = tg_tape_create();
    int64_t vocab = tt_randint(2, 6), dim = tt_randint(1, 5), n = tt_randint(2, 10);
    int32_t chosen = (int32_t)tt_randint(0, vocab - 1);
    tg_tensor *table = tt_leaf(tape, TG_F64, 2, (int64_t[]){vocab, dim});
    tg_tensor *ids = tg_full(tape, TG_I32, TG_DEVICE_CPU, 1, (int64_t[]){n}, chosen);
    tg_tensor *dy = tt_randn(tape, TG_F64, 2, (int64_t[]){n, dim});
    cr_assert_eq(tg_backward_with_grad(tape, tg_embedding(tape, table, ids), dy), TG_OK, "%s", tg_last_error());
    for (int64_t v = 0; v < vocab; v++)
        for (int64_t d = 0; d < dim; d++) {
            double sum = 0;
            for (int64_t p = 0; v == chosen && p < n; p++) sum += tg_get(dy, (int64_t[]){p, d});
            cr_assert_float_eq(tg_get(table->grad, (int64_t[]){v, d}), sum, 1e-12);
        }
    tg_tape_free(tape);
}

Test(embedding, strided_ids_and_empty_ids)
{
    tg_tape *tape = tg_tape_create();
    int64_t vocab = tt_randint(2, 20), dim = tt_randint(1, 5);
    tg_tensor *table = tt_strided_leaf(tape, TG_F64, 2, (int64_t[]){vocab, dim});
    tg_tensor *base = tt_ids(tape, 2, (int64_t[]){tt_randint(3, 5), tt_randint(2, 6)}, (int32_t)vocab);
    tg_tensor *ids = tg_slice(tape, tg_transpose(tape, base, 0, 1), 1, 0, INT64_MAX, 2);
    cr_assert(ids && !tg_is_contiguous(ids), "%s", tg_last_error());
    tg_tensor *y = tg_embedding(tape, table, ids);
    cr_assert(y, "%s", tg_last_error());
    for (int64_t r = 0; r < ids->shape[0]; r++)
        for (int64_t c = 0; c < ids->shape[1]; c++) {
            int64_t id = (int64_t)tg_get(base, (int64_t[]){2 * c, r});
            for (int64_t d = 0; d < dim; d++)
                cr_assert_eq(tg_get(y, (int64_t[]){r, c, d}), tg_get(table, (int64_t[]){id, d}));
        }
    tg_tensor *none = tg_embedding(tape, table, tg_empty(tape, TG_I32, TG_DEVICE_CPU, 1, (int64_t[]){0}));
    cr_assert(none && none->ndim == 2 && none->shape[0] == 0 && none->shape[1] == dim, "%s", tg_last_error());
    tg_tape_free(tape);
}

Test(embedding, f32_and_bf16_match_f64)
{
    tg_tape *tape = tg_tape_create();
    int64_t vocab = tt_randint(2, 30), dim = tt_randint(1, 16);
    tg_tensor *table64 = tt_randn(tape, TG_F64, 2, (int64_t[]){vocab, dim});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){tt_randint(1, 4), tt_randint(1, 8)}, (int32_t)vocab);
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    const double tolerance[2] = {1e-5, 1e-2};
    tg_tensor *ref = tg_embedding(tape, table64, ids);
    for (int d = 0; d < 2; d++) {
        tg_tensor *y = tg_embedding(tape, tg_to_dtype(tape, table64, dtypes[d]), ids);
        cr_assert(y && y->dtype == dtypes[d], "%s", tg_last_error());
        cr_assert_lt(tt_rel_error(y, ref), tolerance[d], "%s", tg_dtype_name(dtypes[d]));
    }
    tg_tape_free(tape);
}

/* ---- bad input ---------------------------------------------------------------------- */

Test(embedding, bad_inputs_fail_cleanly)
{
    tg_tape *tape = tg_tape_create();
    const char *op = "tg_embedding";
    tg_tensor *table = tt_leaf(tape, TG_F32, 2, (int64_t[]){5, 3});
    tg_tensor *ids = tt_ids(tape, 2, (int64_t[]){2, 4}, 5);
    tg_tensor *flat_table = tt_randn(tape, TG_F32, 1, (int64_t[]){15});
    tg_tensor *cube_table = tt_randn(tape, TG_F32, 3, (int64_t[]){5, 3, 1});
    tg_tensor *float_ids = tt_randn(tape, TG_F32, 1, (int64_t[]){4});
    tg_tensor *int_table = tt_ids(tape, 2, (int64_t[]){5, 3}, 5);
    tg_tensor *empty_table = tt_randn(tape, TG_F32, 2, (int64_t[]){0, 3});
    tg_tensor *deep_ids = tt_ids(tape, 6, (int64_t[]){1, 1, 1, 1, 1, 2}, 5);
    tg_tensor *cuda_table = tt_fake_cuda(tape, table), *cuda_ids = tt_fake_cuda(tape, ids);
    tg_tensor *bad = tt_ids(tape, 2, (int64_t[]){2, 4}, 5);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_embedding(NULL, table, ids), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, NULL, ids), op, "table", "NULL", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, table, NULL), op, "ids", "NULL", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, flat_table, ids), op, "2 dimensions", "[15]", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, cube_table, ids), op, "2 dimensions", "[5, 3, 1]", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, table, float_ids), op, "i32", "f32", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, int_table, ids), op, "float", "i32", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, table, cuda_ids), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, cuda_table, ids), op, "device", "cuda", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, cuda_table, cuda_ids), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, table, deep_ids), op, "dimensions", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, empty_table, ids), op, "V = 0", "position 0", NULL);

    /* a bad id anywhere: the message names it, its position and V */
    int64_t position = tt_randint(4, 7); /* in the second row, so index and position differ */
    int32_t values[3] = {5, -1, 1000000};
    for (int k = 0; k < 3; k++) {
        tg_copy(bad, ids);
        tg_set_flat(bad, position, values[k]);
        char value[32], where[48], index[48];
        snprintf(value, sizeof value, "id %d", values[k]);
        snprintf(where, sizeof where, "position %lld", (long long)position);
        snprintf(index, sizeof index, "[%lld, %lld]", (long long)position / 4, (long long)position % 4);
        tt_assert_failed_with(&s, tg_embedding(tape, table, bad), op, value, where, index, "V = 5", NULL);
    }
    for (int64_t i = 0; i < 15; i++) cr_assert_eq(tg_get_flat(table->grad, i), 0.0);
    tg_tape_free(tape);
}
