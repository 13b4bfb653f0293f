/* optim/optim.c: SGD with momentum and AdamW over a tg_params store, with parameter groups.
 *
 * The state buffers (moments or momentum, and an f32 master copy for bf16/f16 stores) are
 * flat and laid out like the store, so parameter i's state sits at the same offset as its
 * data. A step measures the gradient norm when clipping is on (one read of the gradients),
 * folds 1/micro-batches and the clip factor into one gradient scale, and runs one fused
 * update over all parameters. Groups reach the kernel as a table of short ranges, each of
 * one group (kernels/optim.h), rebuilt only when a group changes.
 *
 * The scalars (configuration, step counter, the step's learning rates and clip factor) are
 * a tg_optim_scalars. On the CPU the host's copy is the one; on CUDA the device's copy is,
 * and the step works out its values there (two launches, no waiting), so that a captured
 * CUDA graph of a step replays with each step's own values. The host writes the device's
 * configuration when it changes, and reads the counters when asked for them. */
#define _POSIX_C_SOURCE 200809L /* fnmatch */
#include "optim/internal.h"

#include "kernels/optim.h"
#include "tapegrad/optim.h"
#include "tapegrad/params.h"

#include <fnmatch.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tg_optim_update_kernel adamw_update[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_adamw, TG_CUDA_KERNEL(tg_cuda_adamw));
static const tg_optim_update_kernel sgd_update[TG_DEVICE_COUNT] = TG_KERNELS(tg_cpu_sgd, TG_CUDA_KERNEL(tg_cuda_sgd));
static const tg_sum_squares_kernel sum_squares[TG_DEVICE_COUNT] =
    TG_KERNELS(tg_cpu_sum_squares, TG_CUDA_KERNEL(tg_cuda_sum_squares));
static const tg_convert_kernel convert[TG_DEVICE_COUNT] = TG_KERNELS(tg_cpu_convert, TG_CUDA_KERNEL(tg_cuda_convert));

struct tg_optim {
    tg_params *params;
    tg_optim_config config;
    tg_device device;
    tg_dtype param_dtype, state_dtype;
    size_t n_params; /* the store's size when the optimizer was made */
    int64_t numel;
    int *group_of; /* per parameter */
    tg_optim_group groups[TG_OPTIM_MAX_GROUPS];
    int n_groups;
    void *state[2];         /* AdamW: exp_avg, exp_avg_sq; SGD: momentum (NULL without) */
    float *master;          /* bf16/f16 stores only */
    tg_optim_range *ranges; /* on the device; rebuilt when ranges_stale */
    int64_t n_ranges;
    size_t ranges_bytes;
    bool ranges_stale;
    struct retired_ranges *retired;   /* CUDA: earlier tables, which captured graphs may still read */
    tg_optim_scalars scalars;         /* the CPU's; on CUDA the configuration's host copy */
    tg_optim_scalars *device_scalars; /* CUDA: the scalars the steps keep */
    double *partials;                 /* CUDA: scratch for the gradient norm's partial sums */
};

/* A replaced table of ranges on a CUDA device: a step captured in a graph before the
 * change names it in its kernel's arguments, so it lives as long as the optimizer. */
struct retired_ranges {
    tg_optim_range *table;
    size_t bytes;
    struct retired_ranges *next;
};

tg_optim_config tg_adamw_config(double lr)
{
    return (tg_optim_config){
        .kind = TG_OPTIM_ADAMW, .lr = lr, .weight_decay = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

tg_optim_config tg_sgd_config(double lr, double momentum)
{
    return (tg_optim_config){.kind = TG_OPTIM_SGD, .lr = lr, .momentum = momentum};
}

const char *tg_optim_kind_name(tg_optim_kind kind)
{
    return kind == TG_OPTIM_SGD ? "sgd" : kind == TG_OPTIM_ADAMW ? "adamw" : "unknown";
}

/* ---- the default group rule ---------------------------------------------------------- */

static bool part_is(const char *part, size_t n, const char *word)
{
    return strlen(word) == n && !strncmp(part, word, n);
}

static bool part_contains(const char *part, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++)
        if (!strncmp(part + i, word, w)) return true;
    return false;
}

bool tg_optim_default_no_decay(const char *name)
{
    if (!name) {
        tg_set_error(TG_ERR_INVALID, "tg_optim_default_no_decay: name is NULL");
        return false;
    }
    const char *part = name;
    for (;;) {
        const char *dot = strchr(part, '.');
        size_t n = dot ? (size_t)(dot - part) : strlen(part);
        if (part_contains(part, n, "norm") || part_contains(part, n, "embed") || part_is(part, n, "ln") ||
            (n >= 3 && !strncmp(part, "ln_", 3)))
            return true;
        if (!dot) /* the last part */
            return part_is(part, n, "bias") || (n >= 5 && !strncmp(part + n - 5, "_bias", 5)) ||
                   part_is(part, n, "A_log") || part_is(part, n, "D");
        part = dot + 1;
    }
}

/* ---- creation ---------------------------------------------------------------------------- */

static bool check_config(const char *op, const tg_optim_config *c)
{
    const tg_schedule *s = &c->schedule;
    const char *problem = NULL;
    if (c->kind != TG_OPTIM_SGD && c->kind != TG_OPTIM_ADAMW)
        problem = "kind must be TG_OPTIM_SGD or TG_OPTIM_ADAMW";
    else if (!(c->lr >= 0) || !isfinite(c->lr))
        problem = "lr must be finite and >= 0";
    else if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        problem = "weight_decay must be finite and >= 0";
    else if (!(c->max_grad_norm >= 0) || !isfinite(c->max_grad_norm))
        problem = "max_grad_norm must be finite and >= 0 (0: no clipping)";
    else if (c->kind == TG_OPTIM_SGD && !(c->momentum >= 0 && c->momentum < 1))
        problem = "momentum must be in [0, 1)";
    else if (c->kind == TG_OPTIM_SGD && c->nesterov && c->momentum == 0)
        problem = "nesterov needs momentum > 0";
    else if (c->kind == TG_OPTIM_ADAMW && !(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1))
        problem = "beta1 and beta2 must be in [0, 1)";
    else if (c->kind == TG_OPTIM_ADAMW && (!(c->eps > 0) || !isfinite(c->eps)))
        problem = "eps must be finite and > 0";
    else if (isnan(tg_schedule_factor(s, 0)))
        problem = "the schedule is invalid: kind, warmup_steps >= 0, total_steps >= warmup_steps, min_factor in [0, 1]";
    if (!problem) return true;
    tg_set_error(TG_ERR_INVALID, "%s: %s (lr %g, weight_decay %g, momentum %g, beta1 %g, beta2 %g, eps %g)", op,
                 problem, c->lr, c->weight_decay, c->momentum, c->beta1, c->beta2, c->eps);
    return false;
}

/* A zeroed buffer of numel elements of dtype on the store's device. */
static void *new_buffer(tg_optim *opt, tg_dtype dtype)
{
    size_t bytes = (size_t)opt->numel * tg_dtype_size(dtype);
    void *data = NULL;
    if (tg_device_alloc(opt->device, bytes, &data) != TG_OK) return NULL;
    if (tg_device_zero(opt->device, data, bytes) != TG_OK) {
        tg_device_free(opt->device, data, bytes);
        return NULL;
    }
    return data;
}

static bool make_state(tg_optim *opt)
{
    int n = opt->config.kind == TG_OPTIM_ADAMW ? 2 : opt->config.momentum > 0 ? 1 : 0;
    for (int k = 0; k < n; k++)
        if (!(opt->state[k] = new_buffer(opt, opt->state_dtype))) return false;
    bool low_precision = opt->param_dtype == TG_BF16 || opt->param_dtype == TG_F16;
    if (low_precision && !(opt->master = new_buffer(opt, TG_F32))) return false;
    return tg_optim_sync_master(opt) == TG_OK;
}

/* The configuration part of the scalars, from the config and the groups. */
static void fill_configuration(tg_optim *opt)
{
    tg_optim_scalars *s = &opt->scalars;
    s->base_lr = opt->config.lr;
    s->beta1 = opt->config.beta1;
    s->beta2 = opt->config.beta2;
    s->max_grad_norm = opt->config.max_grad_norm;
    s->schedule = opt->config.schedule;
    for (int g = 0; g < TG_OPTIM_MAX_GROUPS; g++) {
        s->lr_scale[g] = g < opt->n_groups ? opt->groups[g].lr_scale : 0.0;
        s->weight_decay[g] = g < opt->n_groups ? opt->groups[g].weight_decay : 0.0;
    }
}

/* Brings the configuration up to date wherever the steps read it (on CUDA: a copy to the
 * device, which waits; never during a capture). */
static tg_status publish_configuration(tg_optim *opt)
{
    fill_configuration(opt);
    if (!opt->device_scalars) return TG_OK;
    return tg_device_memcpy(opt->device_scalars, &opt->scalars, offsetof(tg_optim_scalars, step),
                            TG_COPY_HOST_TO_DEVICE);
}

/* The counters as the steps left them (on CUDA: copied from the device, which waits). */
static tg_optim_scalars counters(const tg_optim *opt)
{
    tg_optim_scalars s = opt->scalars;
    if (opt->device_scalars && tg_device_memcpy(&s, opt->device_scalars, sizeof s, TG_COPY_DEVICE_TO_HOST) != TG_OK) {
        s.step = -1, s.skipped = -1, s.last_norm = NAN;
    }
    return s;
}

/* The device's scalars and norm scratch, for a CUDA store. */
static bool make_device_scalars(tg_optim *opt)
{
    if (opt->device == TG_DEVICE_CPU) return true;
    if (tg_device_alloc(opt->device, sizeof(tg_optim_scalars), (void **)&opt->device_scalars) != TG_OK ||
        tg_device_alloc(opt->device, TG_OPTIM_NORM_BLOCKS * sizeof(double), (void **)&opt->partials) != TG_OK)
        return false;
    fill_configuration(opt);
    return tg_device_memcpy(opt->device_scalars, &opt->scalars, sizeof opt->scalars, TG_COPY_HOST_TO_DEVICE) == TG_OK;
}

tg_optim *tg_optim_create(tg_params *params, const tg_optim_config *config)
{
    const char *op = "tg_optim_create";
    if (!params || !config) {
        tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", op, !params ? "params" : "config");
        return NULL;
    }
    if (tg_params_count(params) == 0) {
        tg_set_error(TG_ERR_INVALID, "%s: the store has no parameters (add them before the optimizer)", op);
        return NULL;
    }
    if (!check_config(op, config)) return NULL;
    tg_optim *opt = calloc(1, sizeof *opt);
    if (!opt || !(opt->group_of = malloc(tg_params_count(params) * sizeof(int)))) {
        free(opt);
        tg_set_error(TG_ERR_NOMEM, "%s: out of memory", op);
        return NULL;
    }
    const tg_tensor *first = tg_params_get(params, 0);
    opt->params = params;
    opt->config = *config;
    opt->device = first->device;
    opt->param_dtype = first->dtype;
    opt->state_dtype = first->dtype == TG_F64 ? TG_F64 : TG_F32;
    opt->n_params = tg_params_count(params);
    opt->numel = tg_params_numel(params);
    opt->groups[TG_OPTIM_GROUP_DECAY] = (tg_optim_group){1.0, config->weight_decay};
    opt->groups[TG_OPTIM_GROUP_NO_DECAY] = (tg_optim_group){1.0, 0.0};
    opt->n_groups = 2;
    for (size_t i = 0; i < opt->n_params; i++)
        opt->group_of[i] =
            tg_optim_default_no_decay(tg_params_get(params, i)->name) ? TG_OPTIM_GROUP_NO_DECAY : TG_OPTIM_GROUP_DECAY;
    opt->ranges_stale = true;
    opt->scalars.last_norm = NAN;
    fill_configuration(opt);
    if (!make_state(opt) || !make_device_scalars(opt)) {
        char message[1024];
        snprintf(message, sizeof message, "%s", tg_last_error());
        tg_optim_free(opt);
        tg_set_error(TG_ERR_NOMEM, "%s: cannot allocate the optimizer state for %lld elements: %s", op,
                     (long long)tg_params_numel(params), message);
        return NULL;
    }
    return opt;
}

void tg_optim_free(tg_optim *opt)
{
    if (!opt) return;
    for (int k = 0; k < 2; k++)
        tg_device_free(opt->device, opt->state[k], (size_t)opt->numel * tg_dtype_size(opt->state_dtype));
    tg_device_free(opt->device, opt->master, (size_t)opt->numel * sizeof(float));
    tg_device_free(opt->device, opt->ranges, opt->ranges_bytes);
    for (struct retired_ranges *r = opt->retired, *next; r; r = next) {
        next = r->next;
        tg_device_free(opt->device, r->table, r->bytes);
        free(r);
    }
    tg_device_free(opt->device, opt->device_scalars, sizeof(tg_optim_scalars));
    tg_device_free(opt->device, opt->partials, TG_OPTIM_NORM_BLOCKS * sizeof(double));
    free(opt->group_of);
    free(opt);
}

/* ---- the step ------------------------------------------------------------------------------ */

bool tg_optim_matches_store(const char *op, const tg_optim *opt)
{
    if (tg_params_count(opt->params) == opt->n_params && tg_params_numel(opt->params) == opt->numel) return true;
    tg_set_error(TG_ERR_STATE,
                 "%s: the store now has %zu parameters (%lld elements) but the optimizer was made for %zu (%lld): "
                 "add every parameter before creating the optimizer",
                 op, tg_params_count(opt->params), (long long)tg_params_numel(opt->params), opt->n_params,
                 (long long)opt->numel);
    return false;
}

/* Runs of parameters of one group, cut into pieces of at most TG_OPTIM_CHUNK elements. */
static int64_t count_ranges(const tg_optim *opt)
{
    int64_t n = 0;
    for (size_t i = 0; i < opt->n_params;) {
        int64_t run = 0;
        size_t j = i;
        for (; j < opt->n_params && opt->group_of[j] == opt->group_of[i]; j++)
            run += tg_numel(tg_params_get(opt->params, j));
        n += (run + TG_OPTIM_CHUNK - 1) / TG_OPTIM_CHUNK;
        i = j;
    }
    return n;
}

static void fill_ranges(const tg_optim *opt, tg_optim_range *ranges)
{
    int64_t n = 0, begin = 0;
    for (size_t i = 0; i < opt->n_params;) {
        int64_t run = 0;
        size_t j = i;
        for (; j < opt->n_params && opt->group_of[j] == opt->group_of[i]; j++)
            run += tg_numel(tg_params_get(opt->params, j));
        for (int64_t at = 0; at < run; at += TG_OPTIM_CHUNK) {
            int64_t length = run - at < TG_OPTIM_CHUNK ? run - at : TG_OPTIM_CHUNK;
            ranges[n++] = (tg_optim_range){begin + at, (int32_t)length, opt->group_of[i]};
        }
        begin += run;
        i = j;
    }
}

/* Sets the current table aside (CUDA) or frees it (CPU); false when out of memory. */
static bool retire_ranges(tg_optim *opt)
{
    if (!opt->ranges || opt->device == TG_DEVICE_CPU) {
        tg_device_free(opt->device, opt->ranges, opt->ranges_bytes);
        return true;
    }
    struct retired_ranges *r = malloc(sizeof *r);
    if (!r) return false;
    *r = (struct retired_ranges){opt->ranges, opt->ranges_bytes, opt->retired};
    opt->retired = r;
    return true;
}

static tg_status build_ranges(tg_optim *opt)
{
    int64_t n = count_ranges(opt);
    size_t bytes = (size_t)n * sizeof(tg_optim_range);
    tg_optim_range *host = malloc(bytes), *table = host;
    if (!host) return tg_set_error(TG_ERR_NOMEM, "tg_optim_step: out of memory for %lld group ranges", (long long)n);
    fill_ranges(opt, host);
    if (opt->device != TG_DEVICE_CPU) { /* the kernel reads the table from device memory */
        void *device_table = NULL;
        tg_status status = tg_device_alloc(opt->device, bytes, &device_table);
        if (status == TG_OK && (status = tg_device_memcpy(device_table, host, bytes, TG_COPY_HOST_TO_DEVICE)) != TG_OK)
            tg_device_free(opt->device, device_table, bytes);
        free(host);
        if (status != TG_OK) return status;
        table = device_table;
    }
    if (!retire_ranges(opt)) {
        tg_device_free(opt->device, table, bytes);
        return tg_set_error(TG_ERR_NOMEM, "tg_optim_step: out of memory to keep the replaced group ranges");
    }
    opt->ranges = table;
    opt->n_ranges = n;
    opt->ranges_bytes = bytes;
    opt->ranges_stale = false;
    return TG_OK;
}

/* The step's scalars: on the CPU here and now; on CUDA queued on the device. On the CPU a
 * skipped step is also an error, since the host knows it at once. */
static tg_status prepare_step(const char *op, tg_optim *opt, int micro_batches)
{
    const bool clip = opt->config.max_grad_norm > 0;
    const void *grad = tg_params_grad(opt->params);
    if (opt->device_scalars) {
#ifdef TG_HAVE_CUDA
        return tg_cuda_optim_prepare(opt->device_scalars, grad, opt->param_dtype, opt->numel, micro_batches, clip,
                                     opt->n_groups, opt->partials);
#endif
    }
    double sum = 0.0;
    if (clip) {
        tg_status status = TG_DISPATCH(op, sum_squares, opt->device, grad, opt->param_dtype, opt->numel, &sum);
        if (status != TG_OK) return status;
    }
    tg_optim_prepare(&opt->scalars, sum, micro_batches, clip, false, opt->n_groups);
    if (!opt->scalars.skip) return TG_OK;
    return tg_set_error(TG_ERR_STATE, "%s: the gradient norm is %g at step %lld; parameters left unchanged", op,
                        opt->scalars.last_norm, (long long)opt->scalars.step);
}

tg_status tg_optim_step(tg_optim *opt, int micro_batches)
{
    const char *op = "tg_optim_step";
    if (!opt) return tg_set_error(TG_ERR_INVALID, "%s: opt is NULL", op);
    if (micro_batches < 1)
        return tg_set_error(TG_ERR_INVALID, "%s: micro_batches must be >= 1, not %d", op, micro_batches);
    if (!tg_optim_matches_store(op, opt)) return TG_ERR_STATE;
    const tg_optim_config *c = &opt->config;
    tg_status status = TG_OK;
    if (opt->ranges_stale && (status = build_ranges(opt)) != TG_OK) return status;
    if ((status = prepare_step(op, opt, micro_batches)) != TG_OK) return status;
    tg_optim_update u = {.param = tg_params_data(opt->params),
                         .grad = tg_params_grad(opt->params),
                         .master = opt->master,
                         .state0 = opt->state[0],
                         .state1 = opt->state[1],
                         .param_dtype = opt->param_dtype,
                         .state_dtype = opt->state_dtype,
                         .ranges = opt->ranges,
                         .n_ranges = opt->n_ranges,
                         .scalars = opt->device_scalars ? opt->device_scalars : &opt->scalars,
                         .eps = c->eps,
                         .momentum = c->momentum,
                         .nesterov = c->nesterov};
    const tg_optim_update_kernel *table = c->kind == TG_OPTIM_ADAMW ? adamw_update : sgd_update;
    return TG_DISPATCH(op, table, opt->device, &u);
}

/* ---- accessors ---------------------------------------------------------------------------- */

/* opt is an optimizer; else the error names op. */
static bool check_optim(const char *op, const tg_optim *opt)
{
    if (opt) return true;
    tg_set_error(TG_ERR_INVALID, "%s: opt is NULL", op);
    return false;
}

int64_t tg_optim_step_count(const tg_optim *opt)
{
    return check_optim("tg_optim_step_count", opt) ? counters(opt).step : -1;
}

int64_t tg_optim_skipped_steps(const tg_optim *opt)
{
    return check_optim("tg_optim_skipped_steps", opt) ? counters(opt).skipped : -1;
}

tg_status tg_optim_set_step_count(tg_optim *opt, int64_t step)
{
    opt->scalars.step = step;
    if (!opt->device_scalars) return TG_OK;
    return tg_device_memcpy((char *)opt->device_scalars + offsetof(tg_optim_scalars, step), &step, sizeof step,
                            TG_COPY_HOST_TO_DEVICE);
}

double tg_optim_lr(const tg_optim *opt)
{
    if (!check_optim("tg_optim_lr", opt)) return NAN;
    return opt->config.lr * tg_schedule_factor(&opt->config.schedule, counters(opt).step);
}

double tg_optim_last_grad_norm(const tg_optim *opt)
{
    return check_optim("tg_optim_last_grad_norm", opt) ? counters(opt).last_norm : NAN;
}

const tg_optim_config *tg_optim_get_config(const tg_optim *opt)
{
    return check_optim("tg_optim_get_config", opt) ? &opt->config : NULL;
}

tg_params *tg_optim_params(const tg_optim *opt) { return opt->params; }

tg_status tg_optim_set_lr(tg_optim *opt, double lr)
{
    if (!opt) return tg_set_error(TG_ERR_INVALID, "tg_optim_set_lr: opt is NULL");
    if (!(lr >= 0) || !isfinite(lr))
        return tg_set_error(TG_ERR_INVALID, "tg_optim_set_lr: lr must be finite and >= 0, not %g", lr);
    double before = opt->config.lr;
    opt->config.lr = lr;
    tg_status status = publish_configuration(opt);
    if (status != TG_OK) { /* the device kept the old rate: so does the host */
        opt->config.lr = before;
        fill_configuration(opt);
    }
    return status;
}

tg_status tg_optim_sync_master(tg_optim *opt)
{
    if (!opt) return tg_set_error(TG_ERR_INVALID, "tg_optim_sync_master: opt is NULL");
    if (!opt->master) return TG_OK;
    if (!tg_optim_matches_store("tg_optim_sync_master", opt)) return TG_ERR_STATE;
    return TG_DISPATCH("tg_optim_sync_master", convert, opt->device, opt->master, TG_F32, tg_params_data(opt->params),
                       opt->param_dtype, opt->numel);
}

int tg_optim_buffers(const tg_optim *opt, tg_optim_buffer *out)
{
    int n = 0;
    if (opt->config.kind == TG_OPTIM_ADAMW) {
        out[n++] = (tg_optim_buffer){"exp_avg", opt->state[0], opt->state_dtype};
        out[n++] = (tg_optim_buffer){"exp_avg_sq", opt->state[1], opt->state_dtype};
    } else if (opt->state[0]) {
        out[n++] = (tg_optim_buffer){"momentum", opt->state[0], opt->state_dtype};
    }
    if (opt->master) out[n++] = (tg_optim_buffer){"master", opt->master, TG_F32};
    return n;
}

/* ---- groups ---------------------------------------------------------------------------------- */

static bool check_group(const char *op, tg_optim_group group)
{
    if (group.lr_scale >= 0 && isfinite(group.lr_scale) && group.weight_decay >= 0 && isfinite(group.weight_decay))
        return true;
    tg_set_error(TG_ERR_INVALID, "%s: lr_scale and weight_decay must be finite and >= 0 (got %g and %g)", op,
                 group.lr_scale, group.weight_decay);
    return false;
}

int tg_optim_add_group(tg_optim *opt, tg_optim_group group)
{
    const char *op = "tg_optim_add_group";
    if (!opt) {
        tg_set_error(TG_ERR_INVALID, "%s: opt is NULL", op);
        return -1;
    }
    if (!check_group(op, group)) return -1;
    if (opt->n_groups == TG_OPTIM_MAX_GROUPS) {
        tg_set_error(TG_ERR_INVALID, "%s: all %d groups are in use", op, TG_OPTIM_MAX_GROUPS);
        return -1;
    }
    opt->groups[opt->n_groups++] = group;
    if (publish_configuration(opt) == TG_OK) return opt->n_groups - 1;
    opt->n_groups--; /* the device kept the old configuration: so does the host */
    fill_configuration(opt);
    return -1;
}

static bool check_index(const char *op, const tg_optim *opt, int index)
{
    if (!opt) {
        tg_set_error(TG_ERR_INVALID, "%s: opt is NULL", op);
        return false;
    }
    if (index >= 0 && index < opt->n_groups) return true;
    tg_set_error(TG_ERR_INVALID, "%s: index %d names no group (there are %d)", op, index, opt->n_groups);
    return false;
}

tg_status tg_optim_set_group(tg_optim *opt, int index, tg_optim_group group)
{
    const char *op = "tg_optim_set_group";
    if (!check_index(op, opt, index) || !check_group(op, group)) return tg_last_status();
    tg_optim_group before = opt->groups[index];
    opt->groups[index] = group;
    tg_status status = publish_configuration(opt);
    if (status != TG_OK) { /* the device kept the old configuration: so does the host */
        opt->groups[index] = before;
        fill_configuration(opt);
    }
    return status;
}

tg_status tg_optim_get_group(const tg_optim *opt, int index, tg_optim_group *group)
{
    if (!check_index("tg_optim_get_group", opt, index)) return tg_last_status();
    if (!group) return tg_set_error(TG_ERR_INVALID, "tg_optim_get_group: group is NULL");
    *group = opt->groups[index];
    return TG_OK;
}

tg_status tg_optim_assign(tg_optim *opt, const char *pattern, int group, size_t *matched)
{
    const char *op = "tg_optim_assign";
    if (!check_optim(op, opt)) return tg_last_status();
    if (group < 0 || group >= opt->n_groups)
        return tg_set_error(TG_ERR_INVALID, "%s: group %d does not exist (there are %d)", op, group, opt->n_groups);
    if (!pattern) return tg_set_error(TG_ERR_INVALID, "%s: pattern is NULL", op);
    size_t count = 0;
    for (size_t i = 0; i < opt->n_params; i++)
        if (fnmatch(pattern, tg_params_get(opt->params, i)->name, 0) == 0) count++;
    if (matched) *matched = count;
    if (count == 0) return tg_set_error(TG_ERR_INVALID, "%s: pattern '%s' matches no parameter", op, pattern);
    for (size_t i = 0; i < opt->n_params; i++)
        if (fnmatch(pattern, tg_params_get(opt->params, i)->name, 0) == 0) opt->group_of[i] = group;
    opt->ranges_stale = true;
    return TG_OK;
}

int tg_optim_group_of(const tg_optim *opt, const char *name)
{
    const char *op = "tg_optim_group_of";
    if (!check_optim(op, opt)) return -1;
    if (!name) {
        tg_set_error(TG_ERR_INVALID, "%s: name is NULL", op);
        return -1;
    }
    for (size_t i = 0; i < opt->n_params; i++)
        if (!strcmp(tg_params_get(opt->params, i)->name, name)) return opt->group_of[i];
    tg_set_error(TG_ERR_INVALID, "%s: name '%s' is not a parameter of the optimizer's store", op, name);
    return -1;
}
