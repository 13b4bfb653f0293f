/* tests/test_util.h: helpers shared by the Criterion tests.
 *
 * Random inputs are fresh on every run: the seed comes from the clock unless
 * TG_TEST_SEED is set, and every failure message prints it so a run can be replayed. */
#ifndef TAPEGRAD_TEST_UTIL_H
#define TAPEGRAD_TEST_UTIL_H

#include <criterion/criterion.h>
#include <tapegrad.h>

/* The generator for this test process (seeded once, lazily). */
tg_rng *tt_rng(void);
uint64_t tt_seed(void);
/* A uniform integer in [low, high]. */
int64_t tt_randint(int64_t low, int64_t high);

/* A tape tensor of normal(0, 1) values (never all zeros). */
tg_tensor *tt_randn(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape);
/* The same, marked as a leaf that requires a gradient. */
tg_tensor *tt_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape);
/* A non-contiguous leaf with the given shape: a strided view (every other element along
 * the last dimension, and the first two dimensions swapped when ndim ≥ 2) of a larger
 * random tensor. */
tg_tensor *tt_strided_leaf(tg_tape *tape, tg_dtype dtype, int ndim, const int64_t *shape);
/* A new tape whose arena is filled with NaNs, so an output a kernel forgot to write shows. */
tg_tape *tt_dirty_tape(void);
/* Random i32 ids in [0, bound). */
tg_tensor *tt_ids(tg_tape *tape, int ndim, const int64_t *shape, int32_t bound);

/* Runs tg_gradcheck with the given tolerances and asserts it passed; `what` names the
 * case in the failure message. opts may be NULL for the defaults. */
void tt_gradcheck(const char *what, tg_gradcheck_fn fn, tg_tensor *const *inputs, int n_inputs, void *user,
                  const tg_gradcheck_options *opts);

/* Relative error ‖a − b‖ / ‖b‖ over all elements (same shape, any dtypes/layouts). */
double tt_rel_error(const tg_tensor *a, const tg_tensor *b);
/* ‖t‖ and ‖a − b‖ (Euclidean, over all elements, in double; any device). */
double tt_norm(const tg_tensor *t);
double tt_distance(const tg_tensor *a, const tg_tensor *b);
/* A contiguous f64 CPU copy of t's values (any device and layout), or of their absolute
 * values when `absolute`: a new tensor with no tie to t on the tape. */
tg_tensor *tt_f64_copy(tg_tape *tape, const tg_tensor *t, bool absolute);
/* Every parameter gradient of the store as doubles, in store order (any device; the caller
 * frees the array). */
double *tt_params_grads(tg_params *params);

/* ---- bad-input checks ---------------------------------------------------------------
 * Snapshot the tape, call the op, then assert it failed cleanly:
 *
 *   tt_state s = tt_snapshot(tape);
 *   tg_tensor *y = tg_add(tape, a, NULL);
 *   tt_assert_failed(&s, y, "tg_add");
 *
 * "Cleanly": NULL result, the message names the op (and any `also` words, e.g. shapes),
 * and the tape holds the same nodes and bytes as before. */
typedef struct {
    tg_tape *tape;
    size_t nodes;
    size_t bytes;
} tt_state;
tt_state tt_snapshot(tg_tape *tape);
void tt_assert_failed(const tt_state *before, const void *result, const char *op);
/* As above, and the message must contain each of the NULL-terminated words. */
void tt_assert_failed_with(const tt_state *before, const void *result, const char *op, ...);
/* For functions returning a status. */
void tt_assert_status_failed(const tt_state *before, tg_status status, const char *op);

/* ---- CUDA ------------------------------------------------------------------------------
 * GPU tests start with tt_require_cuda(), which skips the test (cr_skip) when this build
 * or machine has no usable GPU. */
void tt_require_cuda(void);
/* A copy of x on the device, as a leaf that requires a gradient when x does: the CUDA
 * twin of a CPU input, for CPU-vs-CUDA comparisons. Keeps x's strides when keep_layout
 * (a strided CPU view gives an equally strided CUDA view of a same-sized buffer). */
tg_tensor *tt_cuda_twin(tg_tape *tape, tg_tensor *x, bool keep_layout);

/* A copy of the tensor struct that claims to live on CUDA while its data stays on the
 * host: ops must reject it in their checks, before touching any data (on any machine). */
tg_tensor *tt_fake_cuda(tg_tape *tape, const tg_tensor *x);

#endif
