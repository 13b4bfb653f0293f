/* Whole training steps captured as CUDA graphs (tapegrad/graph.h): replays give the same
 * parameters, bit for bit, as the same steps run directly (f32 and bf16 stores, clipping
 * and a schedule, new batches each step); a captured step that found a bad id or a norm
 * that is not finite changes nothing and says so; a capture that waits for the device
 * fails clearly and leaves the library usable; the graph's memory is its own while it
 * lives and goes back when it is freed. Skipped without a GPU. */
#include "cuda_util.h"

#include "kernels/cuda_api.h"

#include <stdio.h>
#include <stdlib.h>

enum { LAYERS = 2, D_MODEL = 32, VOCAB = 16, BATCH = 3, SEQ = 24, STEPS = 6 };

/* A Mamba LM, its AdamW (clipping, warm-up + cosine) and the step's device inputs. */
typedef struct {
    tg_params *params;
    tg_mamba *model;
    tg_optim *optim;
    tg_tape *tape;
    tg_tensor *ids, *targets;
} trainer;

static trainer trainer_new(tg_dtype dtype, uint64_t seed, double max_grad_norm)
{
    trainer t = {0};
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    tg_mamba_config config = {.vocab_size = VOCAB, .d_model = D_MODEL, .n_layer = LAYERS, .dtype = dtype};
    const int64_t shape[2] = {BATCH, SEQ};
    tg_optim_config oc = tg_adamw_config(3e-3);
    oc.weight_decay = 0.1;
    oc.max_grad_norm = max_grad_norm;
    oc.schedule = (tg_schedule){TG_SCHEDULE_COSINE, .warmup_steps = 2, .total_steps = STEPS, .min_factor = 0.1};
    cr_assert((t.params = tg_params_create(TG_DEVICE_CUDA)) && (t.model = tg_mamba_create(&config, t.params, &rng)) &&
                  (t.optim = tg_optim_create(t.params, &oc)) && (t.tape = tg_tape_create()) &&
                  (t.ids = tg_tensor_new(TG_I32, TG_DEVICE_CUDA, 2, shape)) &&
                  (t.targets = tg_tensor_new(TG_I32, TG_DEVICE_CUDA, 2, shape)),
              "%s", tg_last_error());
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

/* Queues forward, loss, backward, AdamW and the zeroing of the gradients on t's inputs. */
static tg_status queue_step(trainer *t)
{
    tg_tensor *loss = tg_mamba_loss(t->tape, t->model, t->ids, t->targets, TG_IGNORE_INDEX);
    tg_status status = loss ? tg_backward(t->tape, loss) : TG_ERR_INVALID;
    if (status == TG_OK) status = tg_optim_step(t->optim, 1);
    if (status == TG_OK) status = tg_params_zero_grad(t->params);
    return status;
}

static void set_batch(trainer *t, const int32_t *ids, const int32_t *targets)
{
    cr_assert_eq(tg_copy_from_host(t->ids, ids, TG_I32), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_copy_from_host(t->targets, targets, TG_I32), TG_OK, "%s", tg_last_error());
}

static tg_graph *capture(trainer *t)
{
    cr_assert_eq(tg_graph_begin(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    cr_assert(tg_graph_capturing());
    cr_assert_eq(queue_step(t), TG_OK, "a step during the capture: %s", tg_last_error());
    tg_graph *graph = tg_graph_end();
    cr_assert(graph, "%s", tg_last_error());
    cr_assert(!tg_graph_capturing());
    cr_assert(tg_graph_node_count(graph) > 10, "a whole step is many kernels, not %zu", tg_graph_node_count(graph));
    tg_tape_reset(t->tape);
    return graph;
}

/* Random ids in [0, VOCAB) for STEPS batches; ignored targets here and there. */
static void random_batches(int32_t *ids, int32_t *targets)
{
    for (int i = 0; i < STEPS * BATCH * SEQ; i++) {
        ids[i] = (int32_t)tt_randint(0, VOCAB - 1);
        targets[i] = tt_randint(0, 9) == 0 ? TG_IGNORE_INDEX : (int32_t)tt_randint(0, VOCAB - 1);
    }
}

/* The same steps on two identical models: one runs each step directly, the other runs
 * the first directly and replays a graph captured from the second for the rest. */
static void replay_matches_direct(tg_dtype dtype)
{
    tt_require_cuda();
    const uint64_t seed = tg_rng_next(tt_rng());
    trainer direct = trainer_new(dtype, seed, 1.0), graphed = trainer_new(dtype, seed, 1.0);
    int32_t *ids = malloc(sizeof(int32_t) * STEPS * BATCH * SEQ),
            *targets = malloc(sizeof(int32_t) * STEPS * BATCH * SEQ);
    random_batches(ids, targets);
    tg_graph *graph = NULL;
    for (int step = 0; step < STEPS; step++) {
        const int32_t *step_ids = ids + step * BATCH * SEQ, *step_targets = targets + step * BATCH * SEQ;
        set_batch(&direct, step_ids, step_targets);
        cr_assert_eq(queue_step(&direct), TG_OK, "%s", tg_last_error());
        tg_tape_reset(direct.tape);
        set_batch(&graphed, step_ids, step_targets);
        if (step == 1) graph = capture(&graphed);
        if (graph) {
            cr_assert_eq(tg_graph_replay(graph), TG_OK, "%s", tg_last_error());
        } else {
            cr_assert_eq(queue_step(&graphed), TG_OK, "%s", tg_last_error());
            tg_tape_reset(graphed.tape);
        }
    }
    cr_assert_eq(tg_synchronize(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_device_check_errors(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_optim_step_count(graphed.optim), STEPS, "the replays must count as steps");
    cr_assert_eq(tg_optim_skipped_steps(graphed.optim), 0);
    tg_tape *tape = tg_tape_create();
    for (size_t i = 0; i < tg_params_count(direct.params); i++) {
        const tg_tensor *a = tg_params_get(direct.params, i), *b = tg_params_get(graphed.params, i);
        cr_assert(cu_bitwise_equal(tape, a, b), "%s (%s): replayed steps differ from direct ones (seed %llu)", a->name,
                  tg_dtype_name(dtype), (unsigned long long)tt_seed());
    }
    /* and the parameters moved: the replays did train */
    trainer fresh = trainer_new(dtype, seed, 1.0);
    cr_assert(!cu_bitwise_equal(tape, tg_params_get(fresh.params, 2), tg_params_get(graphed.params, 2)));
    trainer_free(&fresh);
    tg_tape_free(tape);
    tg_graph_free(graph);
    trainer_free(&direct);
    trainer_free(&graphed);
    free(ids), free(targets);
}

Test(cuda_graph, replayed_f32_steps_equal_direct_ones_bit_for_bit) { replay_matches_direct(TG_F32); }
Test(cuda_graph, replayed_bf16_steps_equal_direct_ones_bit_for_bit) { replay_matches_direct(TG_BF16); }

/* An f32 trainer, random batches (for STEPS steps; the caller frees them) and the first step
 * run directly, as before a capture. */
static trainer trainer_after_one_step(int32_t **ids, int32_t **targets)
{
    trainer t = trainer_new(TG_F32, tg_rng_next(tt_rng()), 1.0);
    *ids = malloc(sizeof(int32_t) * STEPS * BATCH * SEQ);
    *targets = malloc(sizeof(int32_t) * STEPS * BATCH * SEQ);
    random_batches(*ids, *targets);
    set_batch(&t, *ids, *targets);
    cr_assert_eq(queue_step(&t), TG_OK, "%s", tg_last_error());
    tg_tape_reset(t.tape);
    return t;
}

/* The host bytes of every parameter (for "nothing changed"). */
static void *params_bytes(tg_params *params)
{
    size_t n = (size_t)tg_params_numel(params) * tg_dtype_size(tg_params_get(params, 0)->dtype);
    void *bytes = malloc(n);
    cr_assert_eq(tg_device_memcpy(bytes, tg_params_data(params), n, TG_COPY_DEVICE_TO_HOST), TG_OK);
    return bytes;
}

Test(cuda_graph, a_bad_id_in_a_replayed_step_changes_nothing_and_is_reported)
{
    tt_require_cuda();
    int32_t *ids, *targets;
    trainer t = trainer_after_one_step(&ids, &targets);
    tg_graph *graph = capture(&t);
    cr_assert_eq(tg_graph_replay(graph), TG_OK);
    const int64_t steps = tg_optim_step_count(t.optim);
    void *before = params_bytes(t.params);
    const int position = (int)tt_randint(0, BATCH * SEQ - 1), bad = tt_randint(0, 1) ? VOCAB + 3 : -2;
    ids[position] = bad;
    set_batch(&t, ids, targets);
    cr_assert_eq(tg_graph_replay(graph), TG_OK, "the replay itself is queued: %s", tg_last_error());
    cr_assert_eq(tg_device_check_errors(TG_DEVICE_CUDA), TG_ERR_INVALID);
    char value[16], where[32];
    snprintf(value, sizeof value, "%d", bad);
    snprintf(where, sizeof where, "position %d", position);
    cr_assert(strstr(tg_last_error(), "tg_embedding") && strstr(tg_last_error(), value) &&
                  strstr(tg_last_error(), where),
              "%s", tg_last_error());
    cr_assert_eq(tg_device_check_errors(TG_DEVICE_CUDA), TG_OK, "the record is cleared once reported");
    void *after = params_bytes(t.params);
    cr_assert(memcmp(before, after, (size_t)tg_params_numel(t.params) * sizeof(float)) == 0,
              "a step with a bad id must change nothing");
    cr_assert_eq(tg_optim_step_count(t.optim), steps);
    cr_assert_eq(tg_optim_skipped_steps(t.optim), 1);
    /* a good batch trains again */
    ids[position] = 0;
    set_batch(&t, ids, targets);
    cr_assert_eq(tg_graph_replay(graph), TG_OK);
    cr_assert_eq(tg_optim_step_count(t.optim), steps + 1);
    free(before), free(after), free(ids), free(targets);
    tg_graph_free(graph);
    trainer_free(&t);
}

Test(cuda_graph, a_step_whose_norm_is_not_finite_changes_nothing_on_cuda)
{
    tt_require_cuda();
    tg_params *params = tg_params_create(TG_DEVICE_CUDA);
    const int64_t n = 1000;
    tg_tensor *w = tg_params_add(params, "w", TG_F32, 1, &n);
    cr_assert(w && tg_fill(w, 0.5) == TG_OK, "%s", tg_last_error());
    tg_optim_config oc = tg_adamw_config(0.1);
    oc.max_grad_norm = 1.0;
    tg_optim *opt = tg_optim_create(params, &oc);
    cr_assert(opt, "%s", tg_last_error());
    tg_tape *tape = tg_tape_create();
    float *grad = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) grad[i] = (float)(tt_randint(-1000, 1000) / 1000.0);
    grad[tt_randint(0, n - 1)] = tt_randint(0, 1) ? NAN : INFINITY;
    cr_assert_eq(tg_copy_from_host(w->grad, grad, TG_F32), TG_OK);
    cr_assert_eq(tg_optim_step(opt, 1), TG_OK, "on CUDA the step does not wait to find out: %s", tg_last_error());
    float *values = malloc(sizeof(float) * (size_t)n);
    cr_assert_eq(tg_copy_to_host(w, values, TG_F32), TG_OK);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(values[i], 0.5f, "parameter %lld changed", (long long)i);
    cr_assert_eq(tg_optim_skipped_steps(opt), 1);
    cr_assert_eq(tg_optim_step_count(opt), 0);
    cr_assert(!isfinite(tg_optim_last_grad_norm(opt)));
    free(grad), free(values);
    tg_tape_free(tape);
    tg_optim_free(opt);
    tg_params_free(params);
}

Test(cuda_graph, a_capture_that_waits_for_the_device_fails_clearly)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    const int64_t n = 64;
    tg_tensor *x = tg_full(tape, TG_F32, TG_DEVICE_CUDA, 1, &n, 2.0);
    cr_assert(x, "%s", tg_last_error());
    cr_assert_eq(tg_graph_begin(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_graph_begin(TG_DEVICE_CUDA), TG_ERR_STATE, "a second capture at once");
    cr_assert(strstr(tg_last_error(), "tg_graph_begin"), "%s", tg_last_error());
    tg_tensor *y = tg_exp(tape, x);
    cr_assert(y, "a kernel is captured: %s", tg_last_error());
    float values[64];
    cr_assert_neq(tg_copy_to_host(y, values, TG_F32), TG_OK, "a copy to the host cannot be captured");
    cr_assert(strstr(tg_last_error(), "copy to the host"), "%s", tg_last_error());
    cr_assert_null(tg_graph_end());
    cr_assert(strstr(tg_last_error(), "tg_graph_end") && strstr(tg_last_error(), "copy to the host"), "%s",
              tg_last_error());
    cr_assert(!tg_graph_capturing());
    /* the library works as before */
    tg_tensor *z = tg_exp(tape, x);
    cr_assert(z && tg_copy_to_host(z, values, TG_F32) == TG_OK, "%s", tg_last_error());
    for (int64_t i = 0; i < n; i++) cr_assert_float_eq(values[i], expf(2.0f), 1e-5f);
    cr_assert_null(tg_graph_end(), "no capture runs now");
    cr_assert_eq(tg_graph_replay(NULL), TG_ERR_INVALID);
    tg_tape_free(tape);
}

Test(cuda_graph, the_graph_keeps_its_memory_until_freed)
{
    tt_require_cuda();
    int32_t *ids, *targets;
    trainer t = trainer_after_one_step(&ids, &targets);
    tg_memory_stats base;
    tg_memory_stats_get(TG_DEVICE_CUDA, &base);
    tg_graph *graph = capture(&t);
    tg_memory_stats held;
    tg_memory_stats_get(TG_DEVICE_CUDA, &held);
    cr_assert(held.bytes_in_use > base.bytes_in_use, "the graph's blocks count as in use (%zu, before %zu)",
              held.bytes_in_use, base.bytes_in_use);
    /* tensors made after the capture never share the graph's blocks: fill one of every
     * size a step uses, replay, and find them unchanged */
    enum { KEPT = 40 };
    tg_tensor *kept[KEPT];
    for (int i = 0; i < KEPT; i++) {
        const int64_t numel = (int64_t)1 << (i % 20);
        kept[i] = tg_tensor_new(TG_F32, TG_DEVICE_CUDA, 1, &numel);
        cr_assert(kept[i] && tg_fill(kept[i], (double)i) == TG_OK, "%s", tg_last_error());
    }
    for (int r = 0; r < 3; r++) cr_assert_eq(tg_graph_replay(graph), TG_OK);
    for (int i = 0; i < KEPT; i++) {
        const int64_t numel = tg_numel(kept[i]);
        float *values = malloc(sizeof(float) * (size_t)numel);
        cr_assert_eq(tg_copy_to_host(kept[i], values, TG_F32), TG_OK, "%s", tg_last_error());
        for (int64_t j = 0; j < numel; j++)
            cr_assert(values[j] == (float)i, "tensor %d of %lld elements was overwritten by a replay (element %lld)", i,
                      (long long)numel, (long long)j);
        free(values);
        tg_tensor_free(kept[i]);
    }
    tg_graph_free(graph);
    tg_memory_stats freed;
    tg_memory_stats_get(TG_DEVICE_CUDA, &freed);
    cr_assert_eq(freed.bytes_in_use, base.bytes_in_use, "freeing the graph gives its blocks back (%zu, before %zu)",
                 freed.bytes_in_use, base.bytes_in_use);
    free(ids), free(targets);
    trainer_free(&t);
}

/* The first parameter's values on the host. */
static float *first_parameter(tg_params *params)
{
    const tg_tensor *p = tg_params_get(params, 0);
    float *values = malloc(sizeof(float) * (size_t)tg_numel(p));
    cr_assert_eq(tg_copy_to_host(p, values, TG_F32), TG_OK, "%s", tg_last_error());
    return values;
}

/* Takes every cached device block of 512 bytes to 4 KiB and zeroes it; the caller frees the
 * tensors. A block given back by mistake then holds zeros, whoever still reads it. */
enum { ZEROED_PER_SIZE = 512, ZEROED_SIZES = 8 };
static void zero_the_small_cached_blocks(tg_tensor **zeroed)
{
    for (int i = 0; i < ZEROED_PER_SIZE * ZEROED_SIZES; i++) {
        const int64_t numel = 128 * (1 + i % ZEROED_SIZES);
        zeroed[i] = tg_tensor_new(TG_F32, TG_DEVICE_CUDA, 1, &numel);
        cr_assert(zeroed[i] && tg_fill(zeroed[i], 0.0) == TG_OK, "%s", tg_last_error());
    }
}

/* tg_optim_assign after a capture: the next direct step takes the new groups (a group that
 * does not learn leaves the parameter alone), while the graph captured before keeps its own
 * table of groups (the parameter learns again when it replays). The table the direct step
 * replaced must outlive the graph: every small free block is zeroed before the replay, so a
 * table given back would read as empty, and the replay would move nothing. */
Test(cuda_graph, a_graph_captured_before_an_assign_keeps_its_groups)
{
    tt_require_cuda();
    int32_t *ids, *targets;
    trainer t = trainer_after_one_step(&ids, &targets);
    tg_graph *graph = capture(&t);
    const int frozen = tg_optim_add_group(t.optim, (tg_optim_group){.lr_scale = 0.0, .weight_decay = 0.0});
    cr_assert_geq(frozen, 0, "%s", tg_last_error());
    size_t matched = 0;
    cr_assert_eq(tg_optim_assign(t.optim, tg_params_get(t.params, 0)->name, frozen, &matched), TG_OK, "%s",
                 tg_last_error());
    cr_assert_eq(matched, 1);
    const int64_t numel = tg_numel(tg_params_get(t.params, 0));
    float *before = first_parameter(t.params);
    set_batch(&t, ids + BATCH * SEQ, targets + BATCH * SEQ);
    cr_assert_eq(queue_step(&t), TG_OK, "a direct step after the assign: %s", tg_last_error());
    tg_tape_reset(t.tape);
    float *direct = first_parameter(t.params);
    cr_assert(memcmp(before, direct, sizeof(float) * (size_t)numel) == 0,
              "a parameter in a group with lr_scale 0 must not move in a direct step");
    set_batch(&t, ids + 2 * BATCH * SEQ, targets + 2 * BATCH * SEQ);
    tg_tensor **zeroed = malloc(sizeof(tg_tensor *) * ZEROED_PER_SIZE * ZEROED_SIZES);
    zero_the_small_cached_blocks(zeroed);
    cr_assert_eq(tg_graph_replay(graph), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_device_check_errors(TG_DEVICE_CUDA), TG_OK, "%s", tg_last_error());
    float *replayed = first_parameter(t.params);
    int64_t moved = 0;
    for (int64_t i = 0; i < numel; i++) moved += replayed[i] != direct[i];
    cr_assert(moved > 0, "the graph captured before the assign keeps the parameter in its old group");
    for (int i = 0; i < ZEROED_PER_SIZE * ZEROED_SIZES; i++) tg_tensor_free(zeroed[i]);
    free(zeroed), free(before), free(direct), free(replayed), free(ids), free(targets);
    tg_graph_free(graph);
    trainer_free(&t);
}
