/* Optimizers on CUDA against the CPU: AdamW and momentum SGD steps (groups, clipping,
 * accumulation, a schedule) in f32, bf16 and f64; the gradient norm, its reproducibility
 * and clipping; the f32 master of a bf16 store. Skipped without a GPU. */
#include "cuda_util.h"
#include "optim_cases.h"

#include "optim/internal.h"

#include <math.h>

enum { STEPS = 5, MICRO = 2 };

/* ‖a − b‖ / ‖b‖ over n values. */
static double rel_error(const double *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / den);
}

/* The optimizer's f32 master copy (bf16 and f16 stores), copied to the host. */
static void master_to_host(const tg_optim *opt, int64_t n, float *out)
{
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int count = tg_optim_buffers(opt, buffers);
    for (int b = 0; b < count; b++)
        if (strcmp(buffers[b].name, "master") == 0) {
            cr_assert_eq(buffers[b].dtype, TG_F32);
            cr_assert_eq(tg_device_memcpy(out, buffers[b].data, (size_t)n * sizeof *out, TG_COPY_DEVICE_TO_HOST), TG_OK,
                         "%s", tg_last_error());
            return;
        }
    cr_assert_fail("the optimizer of a %s store has no master",
                   tg_dtype_name(tg_params_get(tg_optim_params(opt), 0)->dtype));
}

/* STEPS steps of the optimizer on a store of the device, from the given values and
 * per-step gradients (MICRO micro-batches' sum); the parameters after them into out, and
 * the master copy into master when it is not NULL. */
static void run(tg_device device, tg_dtype dtype, const tg_optim_config *config, const double *values,
                double *const *grads, double *out, float *master)
{
    tg_params *params = oc_store(dtype, device);
    oc_put(params, values, false);
    tg_optim *opt = tg_optim_create(params, config);
    cr_assert(opt, "%s", tg_last_error());
    int slow = tg_optim_add_group(opt, (tg_optim_group){0.25, 0.05});
    cr_assert_eq(tg_optim_assign(opt, "*.mixer.*", slow, NULL), TG_OK, "%s", tg_last_error());
    for (int step = 0; step < STEPS; step++) {
        oc_put(params, grads[step], true);
        cr_assert_eq(tg_optim_step(opt, MICRO), TG_OK, "%s: %s", tg_device_name(device), tg_last_error());
    }
    oc_get(params, out, false);
    if (master) master_to_host(opt, tg_params_numel(params), master);
    tg_optim_free(opt);
    tg_params_free(params);
}

static void compare(tg_optim_config config)
{
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F64};
    for (int d = 0; d < 3; d++) {
        tg_params *shape = oc_store(TG_F32, TG_DEVICE_CPU);
        int64_t n = tg_params_numel(shape);
        tg_params_free(shape);
        double *values = oc_random(n, 1.0, true), *grads[STEPS], *cpu = malloc((size_t)n * 8),
               *cuda = malloc((size_t)n * 8);
        for (int s = 0; s < STEPS; s++) grads[s] = oc_random(n, 2.0, true);
        run(TG_DEVICE_CPU, dtypes[d], &config, values, grads, cpu, NULL);
        run(TG_DEVICE_CUDA, dtypes[d], &config, values, grads, cuda, NULL);
        double error = rel_error(cuda, cpu, n), limit = cu_tolerance(dtypes[d]);
        cr_assert(error <= limit, "%s %s: CUDA vs CPU relative error %g, limit %g (seed %llu)",
                  config.kind == TG_OPTIM_ADAMW ? "adamw" : "sgd", tg_dtype_name(dtypes[d]), error, limit,
                  (unsigned long long)tt_seed());
        double moved = rel_error(cpu, values, n); /* the comparison means something only if they moved */
        cr_assert_gt(moved, 2 * limit, "%s: the parameters hardly moved (%g)", tg_dtype_name(dtypes[d]), moved);
        for (int s = 0; s < STEPS; s++) free(grads[s]);
        free(values), free(cpu), free(cuda);
    }
}

Test(cuda_optim, adamw_matches_cpu)
{
    tt_require_cuda();
    tg_optim_config config = tg_adamw_config(0.05);
    config.weight_decay = 0.1;
    config.max_grad_norm = 5.0;
    config.schedule = (tg_schedule){TG_SCHEDULE_COSINE, 2, STEPS, 0.1};
    compare(config);
}

Test(cuda_optim, momentum_sgd_matches_cpu)
{
    tt_require_cuda();
    /* lr 1: clipped to a norm of 5 over the whole store, steps of 0.1 left the bf16 run moving
     * less than twice its tolerance, too little for the comparison to mean anything. */
    tg_optim_config config = tg_sgd_config(1.0, 0.9);
    config.weight_decay = 0.01;
    config.max_grad_norm = 5.0;
    compare(config);
    config.nesterov = true;
    config.max_grad_norm = 0;
    compare(config);
}

Test(cuda_optim, grad_norm_matches_cpu_and_repeats_exactly)
{
    tt_require_cuda();
    const int64_t sizes[3] = {1, 4097, 3000000 + tt_randint(0, 1000)}; /* one block, a few, the capped grid */
    for (int k = 0; k < 3; k++) {
        int64_t n = sizes[k];
        double *g = oc_random(n, 1.0, true);
        tg_params *cpu = tg_params_create(TG_DEVICE_CPU), *cuda = tg_params_create(TG_DEVICE_CUDA);
        tg_tensor *a = tg_params_add(cpu, "w", TG_F32, 1, &n), *b = tg_params_add(cuda, "w", TG_F32, 1, &n);
        cr_assert(a && b, "%s", tg_last_error());
        tg_copy_from_host(a->grad, g, TG_F64), tg_copy_from_host(b->grad, g, TG_F64);
        double want, got, again;
        cr_assert_eq(tg_params_grad_norm(cpu, &want), TG_OK);
        cr_assert_eq(tg_params_grad_norm(cuda, &got), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_params_grad_norm(cuda, &again), TG_OK);
        cr_assert(fabs(got - want) <= 1e-13 * want, "n %lld: CUDA norm %.17g, CPU %.17g", (long long)n, got, want);
        cr_assert(got == again, "n %lld: the CUDA norm changed between runs", (long long)n);
        double max_norm = want / 3, after;
        cr_assert_eq(tg_params_clip_grad_norm(cuda, max_norm, NULL), TG_OK, "%s", tg_last_error());
        tg_params_grad_norm(cuda, &after);
        cr_assert(fabs(after - max_norm) <= 1e-6 * max_norm, "clipped to %.9g, max %.9g", after, max_norm);
        free(g);
        tg_params_free(cpu), tg_params_free(cuda);
    }
}

/* As on the CPU: a bf16 store's master equals an f32 store's parameters bit for bit (same
 * float maths), and the bf16 values are that master rounded. The masters are compared
 * themselves: an ulp between them shows in the bf16 values only where it crosses a
 * rounding boundary, in one run of many. Both optimizers, SGD with and without Nesterov. */
static void check_master_follows(const tg_optim_config *config)
{
    tg_params *shape = oc_store(TG_F32, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(shape);
    tg_params_free(shape);
    double *values = oc_random(n, 1.0, true), *grads[STEPS], *low = malloc((size_t)n * 8),
           *full = malloc((size_t)n * 8);
    float *master = malloc((size_t)n * sizeof *master);
    for (int s = 0; s < STEPS; s++) grads[s] = oc_random(n, 1.0, true);
    run(TG_DEVICE_CUDA, TG_BF16, config, values, grads, low, master);
    run(TG_DEVICE_CUDA, TG_F32, config, values, grads, full, NULL);
    const char *kind = config->kind == TG_OPTIM_ADAMW ? "adamw" : config->nesterov ? "nesterov sgd" : "sgd";
    for (int64_t i = 0; i < n; i++) {
        cr_assert(master[i] == (float)full[i], "%s, element %lld: master %.9g, the f32 run %.9g", kind, (long long)i,
                  master[i], full[i]);
        double rounded = tg_bf16_to_f32(tg_f32_to_bf16((float)full[i]));
        cr_assert_eq(low[i], rounded, "%s, element %lld: %.9g, the f32 run rounded %.9g", kind, (long long)i, low[i],
                     rounded);
    }
    for (int s = 0; s < STEPS; s++) free(grads[s]);
    free(values), free(low), free(full), free(master);
}

Test(cuda_optim, bf16_master_follows_the_f32_run)
{
    tt_require_cuda();
    tg_optim_config adamw = tg_adamw_config(1e-3);
    adamw.weight_decay = 0.1;
    check_master_follows(&adamw);
    tg_optim_config sgd = tg_sgd_config(0.1, 0.9);
    sgd.weight_decay = 0.01;
    check_master_follows(&sgd);
    sgd.nesterov = true;
    check_master_follows(&sgd);
}

Test(cuda_optim, steps_repeat_bit_for_bit)
{
    tt_require_cuda();
    tg_params *shape = oc_store(TG_F32, TG_DEVICE_CPU);
    int64_t n = tg_params_numel(shape);
    tg_params_free(shape);
    double *values = oc_random(n, 1.0, true), *grads[STEPS], *first = malloc((size_t)n * 8),
           *second = malloc((size_t)n * 8);
    for (int s = 0; s < STEPS; s++) grads[s] = oc_random(n, 1.0, true);
    tg_optim_config config = tg_adamw_config(1e-2);
    config.max_grad_norm = 1.0;
    run(TG_DEVICE_CUDA, TG_F32, &config, values, grads, first, NULL);
    run(TG_DEVICE_CUDA, TG_F32, &config, values, grads, second, NULL);
    cr_assert(memcmp(first, second, (size_t)n * 8) == 0, "two identical CUDA runs differ");
    for (int s = 0; s < STEPS; s++) free(grads[s]);
    free(values), free(first), free(second);
}
