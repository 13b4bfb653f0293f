/* Embedding on CUDA against the CPU kernels: the gather and the table gradient in f32,
 * bf16 and f64, with contiguous and strided tables and ids, heavy repeats, big vocabularies
 * and 100k+ positions. Both devices sum an id's dy rows in double with the same grouping
 * (chunks of positions, kernels/embedding.h) and round once, so their gradients agree bit
 * for bit. Also bad ids
 * (found at their first position, before and after the forward), empty ids and mixed
 * devices. Skipped without a usable GPU. */
#include "cuda_util.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

/* The lookup on both devices and backward from one random dy; the CUDA twins keep the
 * layouts of table and ids. Compares the result and the table's gradient. */
static void check_embedding(tg_tensor *table, tg_tensor *ids, const char *what)
{
    tg_tape *cpu = table->tape, *gpu = tg_tape_create();
    tg_tensor *tc = tt_cuda_twin(gpu, table, !tg_is_contiguous(table));
    tg_tensor *ic = tt_cuda_twin(gpu, ids, !tg_is_contiguous(ids));
    tg_tensor *y = tg_embedding(cpu, table, ids), *yc = tg_embedding(gpu, tc, ic);
    cr_assert(y && yc, "%s: %s", what, tg_last_error());
    cu_assert_equal(gpu, what, yc, y);
    tg_tensor *dy = tt_randn(cpu, table->dtype, y->ndim, y->shape);
    cr_assert_eq(tg_backward_with_grad(cpu, y, dy), TG_OK, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_backward_with_grad(gpu, yc, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s: %s", what, tg_last_error());
    char grad_what[160];
    snprintf(grad_what, sizeof grad_what, "%s: dtable", what);
    cu_assert_equal(gpu, grad_what, tc->grad, table->grad);
    tg_tape_free(gpu);
}

static tg_tensor *random_table(tg_tape *tape, tg_dtype dtype, int64_t vocab, int64_t dim, bool strided)
{
    int64_t shape[2] = {vocab, dim};
    return strided ? tt_strided_leaf(tape, dtype, 2, shape) : tt_leaf(tape, dtype, 2, shape);
}

/* ids of the given shape, or, when strided, a non-contiguous view of that shape: every
 * other row of bigger ids, with the first two dimensions swapped when there are two. */
static tg_tensor *random_ids(tg_tape *tape, int ndim, const int64_t *shape, int32_t vocab, bool strided)
{
    if (!strided) return tt_ids(tape, ndim, shape, vocab);
    int64_t base_shape[TG_MAX_DIMS];
    memcpy(base_shape, shape, sizeof(int64_t) * (size_t)ndim);
    int along = ndim >= 2 ? 1 : 0; /* the axis that becomes shape[0] */
    if (ndim >= 2) base_shape[0] = shape[1];
    base_shape[along] = 2 * shape[0];
    tg_tensor *ids = tg_slice(tape, tt_ids(tape, ndim, base_shape, vocab), along, 1, INT64_MAX, 2);
    if (ndim >= 2) ids = tg_transpose(tape, ids, 0, 1);
    cr_assert(ids, "%s", tg_last_error());
    for (int i = 0; i < ndim; i++) cr_assert_eq(ids->shape[i], shape[i]);
    return ids;
}

/* ---- values and gradients ------------------------------------------------------------------ */

Test(cuda_embedding, matches_cpu_every_dtype_rank_and_layout)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int d = 0; d < 3; d++)
        for (int ndim = 1; ndim <= 3; ndim++)
            for (int layout = 0; layout < 4; layout++) { /* bit 0: strided table, bit 1: strided ids */
                tg_tape *cpu = tg_tape_create();
                int64_t vocab = tt_randint(1, 40), dim = tt_randint(1, 70), shape[3];
                for (int i = 0; i < ndim; i++) shape[i] = tt_randint(1, 9);
                tg_tensor *table = random_table(cpu, dtypes[d], vocab, dim, layout & 1);
                tg_tensor *ids = random_ids(cpu, ndim, shape, (int32_t)vocab, layout & 2);
                char what[128];
                snprintf(what, sizeof what, "%s V %lld D %lld ids rank %d layout %d", tg_dtype_name(dtypes[d]),
                         (long long)vocab, (long long)dim, ndim, layout);
                check_embedding(table, ids, what);
                tg_tape_free(cpu);
            }
}

Test(cuda_embedding, edge_sizes)
{
    tt_require_cuda();
    const int64_t cases[][3] = {/* V, D, positions */ {1, 1, 1}, {1, 1, 300}, {1, 33, 5}, {7, 1, 1000}, {300, 2, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tg_tape *cpu = tg_tape_create();
        tg_tensor *table = random_table(cpu, TG_F32, cases[c][0], cases[c][1], false);
        tg_tensor *ids = tt_ids(cpu, 1, &cases[c][2], (int32_t)cases[c][0]);
        char what[64];
        snprintf(what, sizeof what, "case %zu", c);
        check_embedding(table, ids, what);
        tg_tape_free(cpu);
    }
}

Test(cuda_embedding, large_vocabulary_and_many_positions)
{
    tt_require_cuda();
    const struct {
        int64_t vocab, dim, batch, length;
        int32_t bound; /* ids drawn below this: small bounds give long runs of one id */
        tg_dtype dtype;
    } cases[] = {
        {50000, 64, 8, 2000, 50000, TG_F32},  /* 16k positions, mostly distinct */
        {50000, 64, 16, 8000, 50, TG_F32},    /* 128k positions in 50 long runs */
        {1000, 97, 4, 30011, 1000, TG_BF16},  /* 120k positions, odd width */
        {70000, 8, 1, 150001, 70000, TG_F32}, /* past 2^16 ids: more than two radix digits */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tg_tape *cpu = tg_tape_create();
        tg_tensor *table = random_table(cpu, cases[c].dtype, cases[c].vocab, cases[c].dim, false);
        tg_tensor *ids = tt_ids(cpu, 2, (int64_t[]){cases[c].batch, cases[c].length}, cases[c].bound);
        char what[64];
        snprintf(what, sizeof what, "large case %zu", c);
        check_embedding(table, ids, what);
        tg_tape_free(cpu);
    }
}

Test(cuda_embedding, one_id_everywhere_sums_every_row_of_dy)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create();
    int64_t vocab = tt_randint(2, 100), n = tt_randint(100000, 130000);
    tg_tensor *table = random_table(cpu, TG_F32, vocab, tt_randint(1, 40), false);
    tg_tensor *ids = tg_full(cpu, TG_I32, TG_DEVICE_CPU, 1, &n, (double)tt_randint(0, vocab - 1));
    check_embedding(table, ids, "one id");
    tg_tape_free(cpu);
}

/* ---- determinism --------------------------------------------------------------------------------- */

Test(cuda_embedding, two_backward_runs_give_the_same_bits)
{
    tt_require_cuda();
    tg_tape *cpu = tg_tape_create();
    int64_t vocab = 3000, dim = 48, shape[2] = {32, 4096};
    tg_tensor *table = random_table(cpu, TG_F32, vocab, dim, false);
    tg_tensor *ids = tt_ids(cpu, 2, shape, 300); /* long runs */
    tg_tensor *dy = tt_randn(cpu, TG_F32, 3, (int64_t[]){shape[0], shape[1], dim});
    tg_tensor *grads[2];
    for (int run = 0; run < 2; run++) {
        tg_tape *gpu = tg_tape_create();
        tg_tensor *tc = tt_cuda_twin(gpu, table, false);
        tg_tensor *y = tg_embedding(gpu, tc, tt_cuda_twin(gpu, ids, false));
        cr_assert(y, "%s", tg_last_error());
        cr_assert_eq(tg_backward_with_grad(gpu, y, tt_cuda_twin(gpu, dy, false)), TG_OK, "%s", tg_last_error());
        grads[run] = cu_host(cpu, tc->grad);
        tg_tape_free(gpu);
    }
    cr_assert_eq(memcmp(tg_data(grads[0]), tg_data(grads[1]), (size_t)(vocab * dim) * sizeof(float)), 0,
                 "two backward runs differ (seed %llu)", (unsigned long long)tt_seed());
    tg_tape_free(cpu);
}

/* ---- empty ids ------------------------------------------------------------------------------------ */

Test(cuda_embedding, empty_ids_give_an_empty_result_and_a_zero_gradient)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t vocab = tt_randint(1, 20), dim = tt_randint(1, 9);
    tg_tensor *table = tt_cuda_twin(tape, random_table(tape, TG_F32, vocab, dim, false), false);
    tg_tensor *ids = tg_empty(tape, TG_I32, TG_DEVICE_CUDA, 2, (int64_t[]){3, 0});
    tg_tensor *y = tg_embedding(tape, table, ids);
    cr_assert(y && y->ndim == 3 && y->shape[0] == 3 && y->shape[1] == 0 && y->shape[2] == dim, "%s", tg_last_error());
    tg_tensor *dy = tg_empty(tape, TG_F32, TG_DEVICE_CUDA, 3, y->shape);
    cr_assert_eq(tg_backward_with_grad(tape, y, dy), TG_OK, "%s", tg_last_error());
    tg_tensor *h = cu_host(tape, table->grad);
    for (int64_t i = 0; i < vocab * dim; i++) cr_assert_eq(tg_get_flat(h, i), 0.0);
    tg_tape_free(tape);
}

/* ---- errors -------------------------------------------------------------------------------------- */

Test(cuda_embedding, bad_ids_are_found_at_their_first_position)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    const char *op = "tg_embedding";
    int64_t vocab = tt_randint(2, 50), shape[2] = {tt_randint(2, 40), tt_randint(2, 3000)};
    tg_tensor *table = tt_cuda_twin(tape, random_table(tape, TG_F32, vocab, 4, false), false);
    const int32_t values[3] = {(int32_t)vocab, -1, INT32_MAX};
    for (int k = 0; k < 3; k++)
        for (int strided = 0; strided < 2; strided++) {
            tg_tensor *ids = random_ids(tape, 2, shape, (int32_t)vocab, strided);
            /* two bad ids; the message names the first in row-major order */
            int64_t n = tg_numel(ids), first = tt_randint(0, n - 2), second = tt_randint(first + 1, n - 1);
            tg_set_flat(ids, second, -7);
            tg_set_flat(ids, first, values[k]);
            tg_tensor *ic = tt_cuda_twin(tape, ids, strided);
            char value[32], where[48], index[64];
            snprintf(value, sizeof value, "id %d", values[k]);
            snprintf(where, sizeof where, "position %lld", (long long)first);
            snprintf(index, sizeof index, "[%lld, %lld]", (long long)(first / shape[1]), (long long)(first % shape[1]));
            tt_state s = tt_snapshot(tape);
            tt_assert_failed_with(&s, tg_embedding(tape, table, ic), op, value, where, index, NULL);
        }
    tg_tensor *h = cu_host(tape, table->grad);
    for (int64_t i = 0; i < vocab * 4; i++) cr_assert_eq(tg_get_flat(h, i), 0.0);
    tg_tape_free(tape);
}

Test(cuda_embedding, ids_changed_after_the_forward_fail_the_backward)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    int64_t vocab = tt_randint(2, 30), n = tt_randint(2, 500);
    tg_tensor *table = tt_cuda_twin(tape, random_table(tape, TG_F32, vocab, 3, false), false);
    tg_tensor *ids = tt_cuda_twin(tape, tt_ids(tape, 1, &n, (int32_t)vocab), false);
    tg_tensor *y = tg_embedding(tape, table, ids);
    cr_assert(y, "%s", tg_last_error());
    tg_set_flat(ids, tt_randint(0, n - 1), (double)vocab);
    cr_assert_neq(tg_backward(tape, tg_sum_all(tape, y)), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_embedding") && strstr(tg_last_error(), "outside"), "got: %s",
              tg_last_error());
    tg_tape_free(tape);
}

Test(cuda_embedding, cpu_and_cuda_inputs_together_fail_cleanly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *table = random_table(tape, TG_F32, 5, 3, false);
    tg_tensor *ids = tt_ids(tape, 1, (int64_t[]){4}, 5);
    tg_tensor *table_c = tt_cuda_twin(tape, table, false), *ids_c = tt_cuda_twin(tape, ids, false);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_embedding(tape, table, ids_c), "tg_embedding", "device", "cpu", "cuda", NULL);
    tt_assert_failed_with(&s, tg_embedding(tape, table_c, ids), "tg_embedding", "device", "cpu", "cuda", NULL);
    for (int64_t i = 0; i < 15; i++) cr_assert_eq(tg_get_flat(table->grad, i), 0.0);
    tg_tape_free(tape);
}
