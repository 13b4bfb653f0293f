/* tests/dist/dist_check.c: data-parallel training over MPI, run by ctest under mpirun with 2
 * and 3 ranks (tests/CMakeLists.txt). Not a Criterion program: Criterion runs each test in a
 * forked child, and MPI does not survive a fork. Each rank checks, and rank 0 reports:
 *   - the world: every rank's number, the size asked for;
 *   - models that differ (one rank's store has an extra parameter) are refused on every rank;
 *   - deterministic mode: N ranks, each stepping on its shard of every global batch, hold
 *     after every step the same bits as a model trained in one process on the N shards'
 *     gradients added in rank order, and the same bits as each other;
 *   - fast mode (MPI's own all-reduce): within float rounding of that, and identical ranks.
 * Exit 0 when every check held on every rank.
 *   mpirun -np N dist_check N
 * With "hang" after N, rank 1 stops answering (sleeps) while the others wait for it in an
 * all-reduce with a 2 s timeout: they must fail with a message and exit 3 (tests/dist/hang.sh). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "tapegrad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { STEPS = 6, ROWS_PER_RANK = 3, LEN = 12, VOCAB = 8 };

static int failures;
static int rank_of_this;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "rank %d: ", rank_of_this);                                                                \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, " (%s)\n", tg_last_error());                                                               \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

typedef struct {
    tg_params *params;
    tg_mamba *model;
    tg_optim *opt;
} trainer;

static trainer trainer_new(uint64_t seed, bool extra_parameter)
{
    tg_mamba_config config = {.vocab_size = VOCAB, .d_model = 16, .n_layer = 2, .d_state = 4, .scan_chunk = 5};
    tg_rng rng;
    tg_rng_seed(&rng, seed);
    trainer t = {tg_params_create(TG_DEVICE_CPU), NULL, NULL};
    t.model = tg_mamba_create(&config, t.params, &rng);
    if (extra_parameter) tg_params_add(t.params, "extra", TG_F32, 1, (int64_t[]){3});
    return t;
}

static void trainer_optim(trainer *t)
{
    tg_optim_config oc = tg_adamw_config(1e-2);
    oc.max_grad_norm = 0.5;
    t->opt = tg_optim_create(t->params, &oc);
}

static void trainer_free(trainer *t)
{
    tg_optim_free(t->opt);
    tg_mamba_free(t->model);
    tg_params_free(t->params);
}

/* The global batch of `step` (every rank draws the same one), N·ROWS_PER_RANK rows. */
static void global_batch(int step, int world, int32_t *inputs, int32_t *targets)
{
    tg_rng data;
    tg_rng_seed(&data, 1000 + (uint64_t)step);
    const tg_selective_copy_config task = {.vocab = VOCAB, .n_copy = 3};
    tg_task_selective_copy_batch(&task, &data, world * ROWS_PER_RANK, LEN, inputs, targets);
}

/* The gradients of rows [first, first + ROWS_PER_RANK) of the batch, into the store's. */
static void backward_on_shard(trainer *t, const int32_t *inputs, const int32_t *targets, int first)
{
    tg_tape *tape = tg_tape_create();
    const int64_t shape[2] = {ROWS_PER_RANK, LEN};
    tg_tensor *ids = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, shape, inputs + first * LEN);
    tg_tensor *want = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 2, shape, targets + first * LEN);
    tg_tensor *loss = tg_mamba_loss(tape, t->model, ids, want, TG_IGNORE_INDEX);
    CHECK(loss && tg_backward(tape, loss) == TG_OK, "the backward failed");
    tg_tape_free(tape);
}

static size_t store_bytes(const trainer *t) { return sizeof(float) * (size_t)tg_params_numel(t->params); }

/* One process's step on all N shards: each shard's gradients alone, added in rank order. */
static void reference_step(trainer *t, int world, const int32_t *inputs, const int32_t *targets)
{
    const int64_t n = tg_params_numel(t->params);
    float *sum = malloc(store_bytes(t));
    for (int r = 0; r < world; r++) {
        tg_params_zero_grad(t->params);
        backward_on_shard(t, inputs, targets, r * ROWS_PER_RANK);
        const float *g = tg_params_grad(t->params);
        for (int64_t i = 0; i < n; i++) sum[i] = r ? sum[i] + g[i] : g[i];
    }
    memcpy(tg_params_grad(t->params), sum, store_bytes(t));
    free(sum);
    CHECK(tg_optim_step(t->opt, world) == TG_OK, "the reference step failed");
    tg_params_zero_grad(t->params);
}

/* Trains a distributed model and the one-process reference side by side; with `exact` their
 * parameters must be the same bits after every step, else within rounding. */
static void train_beside_reference(tg_dist *dist, bool exact)
{
    const int world = tg_dist_world_size(dist), rank = tg_dist_rank(dist);
    /* Each rank initialises from its own seed: the broadcast must make them equal. */
    trainer mine = trainer_new(7 + (uint64_t)rank, false), reference = trainer_new(7, false);
    CHECK(tg_dist_check_params(dist, mine.params) == TG_OK, "the same model refused");
    CHECK(tg_dist_broadcast_params(dist, mine.params) == TG_OK, "the broadcast failed");
    CHECK(!memcmp(tg_params_data(mine.params), tg_params_data(reference.params), store_bytes(&mine)),
          "after the broadcast the parameters are not rank 0's");
    trainer_optim(&mine);
    trainer_optim(&reference);
    int32_t *inputs = malloc(sizeof(int32_t) * (size_t)(world * ROWS_PER_RANK * LEN));
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)(world * ROWS_PER_RANK * LEN));
    for (int step = 0; step < STEPS; step++) {
        global_batch(step, world, inputs, targets);
        backward_on_shard(&mine, inputs, targets, rank * ROWS_PER_RANK);
        CHECK(tg_dist_allreduce_grads(dist, mine.params) == TG_OK, "the all-reduce failed");
        CHECK(tg_optim_step(mine.opt, world) == TG_OK, "the step failed");
        tg_params_zero_grad(mine.params);
        reference_step(&reference, world, inputs, targets);
        CHECK(tg_dist_check_same_values(dist, mine.params) == TG_OK, "step %d: the ranks' parameters differ", step);
        const float *a = tg_params_data(mine.params), *b = tg_params_data(reference.params);
        double worst = 0;
        for (int64_t i = 0; i < tg_params_numel(mine.params); i++)
            worst = fmax(worst, fabs((double)a[i] - b[i]) / (1e-6 + fabs((double)b[i])));
        if (exact)
            CHECK(!memcmp(a, b, store_bytes(&mine)), "step %d: not the one-process run's bits (worst %.3g)", step,
                  worst);
        else
            CHECK(worst < 1e-4, "step %d: %.3g from the one-process run", step, worst);
    }
    free(inputs), free(targets);
    trainer_free(&mine);
    trainer_free(&reference);
}

/* Rank 1 hangs; the others' all-reduce must give up after the timeout. */
static int hang(void)
{
    tg_dist_options options = tg_dist_defaults();
    options.timeout_s = 2;
    tg_dist *dist = tg_dist_init(&options);
    if (!dist) return 1;
    trainer t = trainer_new(1, false);
    if (tg_dist_rank(dist) == 1) {
        struct timespec long_time = {120, 0};
        nanosleep(&long_time, NULL);
        return 0;
    }
    if (tg_dist_allreduce_grads(dist, t.params) == TG_OK) return 1;
    fprintf(stderr, "dist_check: %s\n", tg_last_error());
    return 3; /* the launcher then stops rank 1 */
}

int main(int argc, char **argv)
{
    const int asked = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2 && !strcmp(argv[2], "hang")) return hang();
    tg_dist *dist = tg_dist_init(NULL);
    if (!dist) {
        fprintf(stderr, "dist_check: %s\n", tg_last_error());
        return 1;
    }
    rank_of_this = tg_dist_rank(dist);
    const int world = tg_dist_world_size(dist);
    CHECK(world == asked, "a world of %d ranks, %d asked for", world, asked);

    /* The last rank's model has one parameter more: every rank must refuse. */
    trainer odd = trainer_new(1, rank_of_this == world - 1);
    const tg_status status = tg_dist_check_params(dist, odd.params);
    char expected[32];
    snprintf(expected, sizeof expected, "rank %d", world - 1);
    CHECK(status == TG_ERR_INVALID && strstr(tg_last_error(), expected), "different models were not refused");
    trainer_free(&odd);

    /* Sums of a few doubles, in rank order. */
    double values[2] = {0.1 * rank_of_this, 1.0}, want = 0.0;
    for (int r = 0; r < world; r++) want = r ? want + 0.1 * r : 0.0;
    CHECK(tg_dist_allreduce_sum(dist, values, 2) == TG_OK && values[0] == want && values[1] == world,
          "the sum of doubles: %g and %g", values[0], values[1]);

    train_beside_reference(dist, true);
    tg_dist_options fast_options = tg_dist_defaults();
    fast_options.mode = TG_DIST_FAST;
    tg_dist *fast = tg_dist_init(&fast_options);
    CHECK(fast != NULL, "a second handle in fast mode");
    if (fast) train_beside_reference(fast, false);

    /* Every rank's verdict, so that rank 0 reports for all. */
    int all_failures = failures;
    tg_dist_barrier(dist);
    if (rank_of_this == 0) printf("dist_check: %d ranks, %s\n", world, failures ? "FAILED" : "passed on rank 0");
    tg_dist_finalize(fast);
    tg_dist_finalize(dist);
    return all_failures ? 1 : 0;
}
