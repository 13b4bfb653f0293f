/* Data parallelism over NCCL on one GPU (tapegrad/dist.h): the sum of k ranks' gradients
 * in rank order, each addition rounded to the store's dtype, against the same sum on the
 * host; a world of one NCCL rank started from the environment, whose collectives leave
 * values and gradients bit for bit as they were; training steps with the all-reduce, run
 * directly and replayed from a CUDA graph that holds it, bit for bit equal to steps without
 * it; and the mistakes a user makes refused with the call named. Skipped without a GPU or
 * without NCCL in the build. (Several ranks need several GPUs: NCCL takes one rank per GPU.) */
#define _POSIX_C_SOURCE 200809L /* setenv, mkstemp */

#include "cuda_util.h"

#ifdef TG_HAVE_NCCL
#include "kernels/nccl.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static double uniform(double low, double high) { return low + (high - low) * tg_rng_uniform(tt_rng()); }

static void require_nccl(void)
{
    tt_require_cuda();
    if (!tg_dist_nccl_built()) cr_skip_test("this build has no NCCL");
}

/* A world of one NCCL rank from the environment, its id file in a fresh temporary path. */
static tg_dist *nccl_world_of_one(tg_dist_mode mode, char *id_file, size_t size)
{
    snprintf(id_file, size, "/tmp/tg_nccl_id_%ld_%llu", (long)getpid(), (unsigned long long)tg_rng_next(tt_rng()));
    cr_assert_eq(setenv("TG_WORLD_SIZE", "1", 1), 0);
    cr_assert_eq(setenv("TG_RANK", "0", 1), 0);
    cr_assert_eq(setenv("TG_DIST_INIT_FILE", id_file, 1), 0);
    tg_dist_options options = tg_dist_defaults();
    options.mode = mode;
    options.timeout_s = 60;
    tg_dist *dist = tg_dist_init(&options);
    cr_assert(dist, "%s", tg_last_error());
    cr_assert_eq(tg_dist_rank(dist), 0);
    cr_assert_eq(tg_dist_world_size(dist), 1);
    return dist;
}

#ifdef TG_HAVE_NCCL
/* The host's rank-order sum of k slices of n, each addition rounded to dtype. */
static void host_sum_in_order(void *out, const char *slices, int k, int64_t n, tg_dtype dtype)
{
    const size_t bytes = (size_t)n * tg_dtype_size(dtype);
    memcpy(out, slices, bytes);
    for (int r = 1; r < k; r++)
        for (int64_t i = 0; i < n; i++) {
            double sum =
                dtype == TG_F64
                    ? tg_load(out, dtype, i) + tg_load(slices + (size_t)r * bytes, dtype, i)
                    : (double)((float)tg_load(out, dtype, i) + (float)tg_load(slices + (size_t)r * bytes, dtype, i));
            tg_store(out, dtype, i, sum);
        }
}
#endif

Test(cuda_dist, the_rank_order_sum_matches_the_host)
{
    require_nccl();
#ifdef TG_HAVE_NCCL
    const tg_dtype dtypes[] = {TG_F32, TG_BF16, TG_F16, TG_F64};
    for (size_t d = 0; d < 4; d++) {
        const tg_dtype dtype = dtypes[d];
        const int k = (int)tt_randint(1, 6);
        const int64_t n = tt_randint(1, 5000);
        const size_t bytes = (size_t)n * tg_dtype_size(dtype);
        char *slices = malloc(bytes * (size_t)k), *want = malloc(bytes), *got = malloc(bytes);
        for (int64_t i = 0; i < n * k; i++) tg_store(slices, dtype, i, uniform(-4, 4) * pow(2.0, tt_randint(-6, 6)));
        host_sum_in_order(want, slices, k, n, dtype);
        void *device_slices, *device_out;
        cr_assert_eq(tg_device_alloc(TG_DEVICE_CUDA, bytes * (size_t)k, &device_slices), TG_OK);
        cr_assert_eq(tg_device_alloc(TG_DEVICE_CUDA, bytes, &device_out), TG_OK);
        cr_assert_eq(tg_device_memcpy(device_slices, slices, bytes * (size_t)k, TG_COPY_HOST_TO_DEVICE), TG_OK);
        cr_assert_eq(tg_cuda_sum_in_order(device_out, device_slices, k, n, dtype), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_device_memcpy(got, device_out, bytes, TG_COPY_DEVICE_TO_HOST), TG_OK);
        for (int64_t i = 0; i < n; i++)
            cr_assert(!memcmp(got + (size_t)i * tg_dtype_size(dtype), want + (size_t)i * tg_dtype_size(dtype),
                              tg_dtype_size(dtype)),
                      "%s, %d slices of %lld: element %lld is %.9g on the GPU, %.9g on the host", tg_dtype_name(dtype),
                      k, (long long)n, (long long)i, tg_load(got, dtype, i), tg_load(want, dtype, i));
        tg_device_free(TG_DEVICE_CUDA, device_slices, bytes * (size_t)k);
        tg_device_free(TG_DEVICE_CUDA, device_out, bytes);
        free(slices), free(want), free(got);
    }
#endif
}

/* A CUDA store of a few random tensors, with random gradients. */
static tg_params *random_store(tg_dtype dtype)
{
    tg_params *params = tg_params_create(TG_DEVICE_CUDA);
    cr_assert(params, "%s", tg_last_error());
    tg_rng rng;
    tg_rng_seed(&rng, tt_seed());
    for (int i = 0, count = (int)tt_randint(1, 4); i < count; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        const int64_t shape[2] = {tt_randint(1, 9), tt_randint(1, 70)};
        tg_tensor *w = tg_params_add(params, name, dtype, 2, shape);
        cr_assert(w, "%s", tg_last_error());
        cr_assert_eq(tg_fill_normal(w, &rng, 0, 1), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_fill_normal(w->grad, &rng, 0, 1), TG_OK, "%s", tg_last_error());
    }
    return params;
}

/* The store's values and gradients, copied to the host. */
static char *snapshot(tg_params *params)
{
    const size_t bytes = (size_t)tg_params_numel(params) * tg_dtype_size(tg_params_get(params, 0)->dtype);
    char *copy = malloc(2 * bytes);
    cr_assert_eq(tg_device_memcpy(copy, tg_params_data(params), bytes, TG_COPY_DEVICE_TO_HOST), TG_OK);
    cr_assert_eq(tg_device_memcpy(copy + bytes, tg_params_grad(params), bytes, TG_COPY_DEVICE_TO_HOST), TG_OK);
    return copy;
}

static void collectives_change_nothing(tg_dist_mode mode, tg_dtype dtype)
{
    require_nccl();
    char id_file[128];
    tg_dist *dist = nccl_world_of_one(mode, id_file, sizeof id_file);
    cr_assert_eq(access(id_file, F_OK), 0, "rank 0 leaves NCCL's id in TG_DIST_INIT_FILE");
    tg_params *params = random_store(dtype);
    char *before = snapshot(params);
    const size_t bytes = (size_t)tg_params_numel(params) * tg_dtype_size(dtype);
    cr_assert_eq(tg_dist_check_params(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_broadcast_params(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_allreduce_grads(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_allreduce_grads(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_check_same_values(dist, params), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_barrier(dist), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_sync(dist), TG_OK, "%s", tg_last_error());
    double sums[3] = {uniform(-1, 1), uniform(-1, 1), 7}, kept[3];
    memcpy(kept, sums, sizeof sums);
    cr_assert_eq(tg_dist_allreduce_sum(dist, sums, 3), TG_OK, "%s", tg_last_error());
    cr_assert(!memcmp(kept, sums, sizeof sums), "one rank's sum is its own values");
    char *after = snapshot(params);
    cr_assert(!memcmp(before, after, bytes), "%s: the values changed", tg_dtype_name(dtype));
    cr_assert(!memcmp(before + bytes, after + bytes, bytes), "%s, mode %d: one rank's sum changed the gradients",
              tg_dtype_name(dtype), (int)mode);
    free(before), free(after);
    tg_params_free(params);
    tg_dist_finalize(dist);
    cr_assert_neq(access(id_file, F_OK), 0, "rank 0 removes the id file at finalize");
}

Test(cuda_dist, one_rank_changes_nothing_f32_deterministic)
{
    collectives_change_nothing(TG_DIST_DETERMINISTIC, TG_F32);
}
Test(cuda_dist, one_rank_changes_nothing_bf16_deterministic)
{
    collectives_change_nothing(TG_DIST_DETERMINISTIC, TG_BF16);
}
Test(cuda_dist, one_rank_changes_nothing_f32_fast) { collectives_change_nothing(TG_DIST_FAST, TG_F32); }
Test(cuda_dist, one_rank_changes_nothing_bf16_fast) { collectives_change_nothing(TG_DIST_FAST, TG_BF16); }

enum { LAYERS = 2, D_MODEL = 32, VOCAB = 16, BATCH = 3, SEQ = 24, STEPS = 5 };

typedef struct {
    tg_params *params;
    tg_mamba *model;
    tg_optim *optim;
    tg_tape *tape;
    tg_tensor *ids, *targets;
    tg_dist *dist; /* NULL: no all-reduce */
} trainer;

static trainer trainer_new(uint64_t seed, tg_dist *dist)
{
    trainer t = {.dist = dist};
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_mamba_config config = {.vocab_size = VOCAB, .d_model = D_MODEL, .n_layer = LAYERS, .dtype = TG_F32};
    const int64_t shape[2] = {BATCH, SEQ};
    tg_optim_config oc = tg_adamw_config(3e-3);
    oc.max_grad_norm = 1.0;
    cr_assert((t.params = tg_params_create(TG_DEVICE_CUDA)) && (t.model = tg_mamba_create(&config, t.params, &rng)) &&
                  (t.optim = tg_optim_create(t.params, &oc)) && (t.tape = tg_tape_create()) &&
                  (t.ids = tg_tensor_new(TG_I32, TG_DEVICE_CUDA, 2, shape)) &&
                  (t.targets = tg_tensor_new(TG_I32, TG_DEVICE_CUDA, 2, shape)),
              "%s", tg_last_error());
    if (dist) {
        cr_assert_eq(tg_dist_check_params(dist, t.params), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_dist_broadcast_params(dist, t.params), TG_OK, "%s", tg_last_error());
    }
    return t;
}

static void trainer_free(trainer *t)
{
    tg_tensor_free(t->ids);
    tg_tensor_free(t->targets);
    tg_tape_free(t->tape);
    tg_optim_free(t->optim);
    tg_mamba_free(t->model);
    tg_params_free(t->params);
}

static tg_status queue_step(trainer *t)
{
    tg_tensor *loss = tg_mamba_loss(t->tape, t->model, t->ids, t->targets, TG_IGNORE_INDEX);
    tg_status status = loss ? tg_backward(t->tape, loss) : TG_ERR_INVALID;
    if (status == TG_OK && t->dist) status = tg_dist_allreduce_grads(t->dist, t->params);
    if (status == TG_OK) status = tg_optim_step(t->optim, 1);
    if (status == TG_OK) status = tg_params_zero_grad(t->params);
    return status;
}

/* Steps with the all-reduce (the second captured, then replayed) equal steps without it. */
static void steps_with_the_allreduce(tg_dist_mode mode)
{
    require_nccl();
    char id_file[128];
    tg_dist *dist = nccl_world_of_one(mode, id_file, sizeof id_file);
    const uint64_t seed = tg_rng_next(tt_rng());
    trainer plain = trainer_new(seed, NULL), reduced = trainer_new(seed, dist);
    tg_graph *graph = NULL;
    for (int step = 0; step < STEPS; step++) {
        int32_t ids[BATCH * SEQ], targets[BATCH * SEQ];
        for (int i = 0; i < BATCH * SEQ; i++)
            ids[i] = (int32_t)tt_randint(0, VOCAB - 1), targets[i] = (int32_t)tt_randint(0, VOCAB - 1);
        for (trainer *t = &plain; t; t = t == &plain ? &reduced : NULL) {
            cr_assert_eq(tg_copy_from_host(t->ids, ids, TG_I32), TG_OK, "%s", tg_last_error());
            cr_assert_eq(tg_copy_from_host(t->targets, targets, TG_I32), TG_OK, "%s", tg_last_error());
        }
        cr_assert_eq(queue_step(&plain), TG_OK, "%s", tg_last_error());
        tg_tape_reset(plain.tape);
        if (step == 1) {
            cr_assert_eq(tg_graph_begin(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
            cr_assert_eq(queue_step(&reduced), TG_OK, "a step with the all-reduce in a capture: %s", tg_last_error());
            graph = tg_graph_end();
            cr_assert(graph, "%s", tg_last_error());
            tg_tape_reset(reduced.tape);
        }
        if (graph) {
            cr_assert_eq(tg_graph_replay(graph), TG_OK, "%s", tg_last_error());
        } else {
            cr_assert_eq(queue_step(&reduced), TG_OK, "%s", tg_last_error());
            tg_tape_reset(reduced.tape);
        }
    }
    cr_assert_eq(tg_dist_sync(dist), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_device_check_errors(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_dist_check_same_values(dist, reduced.params), TG_OK, "%s", tg_last_error());
    tg_tape *tape = tg_tape_create();
    for (size_t i = 0; i < tg_params_count(plain.params); i++) {
        const tg_tensor *a = tg_params_get(plain.params, i), *b = tg_params_get(reduced.params, i);
        cr_assert(cu_bitwise_equal(tape, a, b), "%s: steps with one rank's all-reduce differ (mode %d, seed %llu)",
                  a->name, (int)mode, (unsigned long long)tt_seed());
    }
    tg_tape_free(tape);
    tg_graph_free(graph);
    trainer_free(&plain);
    trainer_free(&reduced);
    tg_dist_finalize(dist);
}

Test(cuda_dist, steps_with_a_deterministic_allreduce_in_a_graph_equal_plain_ones)
{
    steps_with_the_allreduce(TG_DIST_DETERMINISTIC);
}
Test(cuda_dist, steps_with_a_fast_allreduce_in_a_graph_equal_plain_ones) { steps_with_the_allreduce(TG_DIST_FAST); }

Test(cuda_dist, the_first_deterministic_allreduce_cannot_be_captured)
{
    require_nccl();
    char id_file[128];
    tg_dist *dist = nccl_world_of_one(TG_DIST_DETERMINISTIC, id_file, sizeof id_file);
    tg_params *params = random_store(TG_F32);
    cr_assert_eq(tg_graph_begin(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    cr_assert_neq(tg_dist_allreduce_grads(dist, params), TG_OK);
    cr_assert(strstr(tg_last_error(), "tg_dist_allreduce_grads") && strstr(tg_last_error(), "outside the capture"),
              "%s", tg_last_error());
    tg_graph_free(tg_graph_end());
    cr_assert_eq(tg_dist_allreduce_grads(dist, params), TG_OK, "after the capture: %s", tg_last_error());
    tg_params_free(params);
    tg_dist_finalize(dist);
}

Test(cuda_dist, a_cpu_store_is_refused_by_nccl_ranks)
{
    require_nccl();
    char id_file[128];
    tg_dist *dist = nccl_world_of_one(TG_DIST_DETERMINISTIC, id_file, sizeof id_file);
    tg_params *params = tg_params_create(TG_DEVICE_CPU);
    const int64_t n = 5;
    cr_assert(tg_params_add(params, "w", TG_F32, 1, &n));
    cr_assert_eq(tg_dist_allreduce_grads(dist, params), TG_ERR_DEVICE);
    cr_assert(strstr(tg_last_error(), "tg_dist_allreduce_grads") && strstr(tg_last_error(), "CPU") &&
                  strstr(tg_last_error(), "mpirun"),
              "%s", tg_last_error());
    tg_params_free(params);
    tg_dist_finalize(dist);
}
