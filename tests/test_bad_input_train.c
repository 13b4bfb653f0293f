/* tests/test_bad_input_train.c: the bad-input matrix over parameters, optimizers, schedules,
 * layers and the model, data sources, checkpoints and gradcheck (see bad_input.h). The
 * fixture's store, optimizer and generator are the targets: the harness proves that a
 * refused call changed none of them. */
#include "bad_input.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* a compound literal, which the formatter would spread over two lines */
// clang-format off
#define SHAPE(...) (int64_t[]){__VA_ARGS__}
// clang-format on

BI_TEST_SUITE(train)

/* ---- the parameter store --------------------------------------------------------------------- */

BAD_INPUT(tg_params_create, "device", "a device that does not exist")
{
    BI_EXPECT_NULL(f, tg_params_create((tg_device)9));
}

BAD_INPUT(tg_params_add, "params", "NULL") { BI_EXPECT_NULL(f, tg_params_add(NULL, "w", TG_F32, 1, SHAPE(3))); }

BAD_INPUT(tg_params_add, "name", "NULL") { BI_EXPECT_NULL(f, tg_params_add(f->params, NULL, TG_F32, 1, SHAPE(3))); }

BAD_INPUT(tg_params_add, "name", "empty") { BI_EXPECT_NULL(f, tg_params_add(f->params, "", TG_F32, 1, SHAPE(3))); }

BAD_INPUT(tg_params_add, "name", "taken")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "layer.bias", TG_F32, 1, SHAPE(3)));
}

BAD_INPUT(tg_params_add, "name", "a control character")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "layer\n.w", TG_F32, 1, SHAPE(3)));
}

BAD_INPUT(tg_params_add, "name", "the checkpoint metadata key")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "__metadata__", TG_F32, 1, SHAPE(3)));
}

BAD_INPUT(tg_params_add, "name", "an optimizer-state prefix")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "optim.exp_avg.layer.bias", TG_F32, 1, SHAPE(3)));
}

BAD_INPUT(tg_params_add, "dtype", "i32") { BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_I32, 1, SHAPE(3))); }

BAD_INPUT(tg_params_add, "dtype", "another float dtype than the store's")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_F64, 1, SHAPE(3)));
}

BAD_INPUT(tg_params_add, "shape", "a negative dimension")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_F32, 2, SHAPE(3, -1)));
}

BAD_INPUT(tg_params_add, "shape", "a byte size that overflows")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_F32, 2, SHAPE(INT64_MAX / 8, 3)));
}

BAD_INPUT(tg_params_add, "shape", "more elements than the store can ever hold")
{
    BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_F32, 1, SHAPE(INT64_MAX / 4 - 1)));
}

BAD_INPUT(tg_params_add, "ndim", "0") { BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_F32, 0, SHAPE(3))); }

BAD_INPUT(tg_params_add, "shape", "NULL") { BI_EXPECT_NULL(f, tg_params_add(f->params, "w2", TG_F32, 1, NULL)); }

BAD_INPUT(tg_params_count, "params", "NULL") { BI_EXPECT_VALUE(f, tg_params_count(NULL), 0); }

BAD_INPUT(tg_params_get, "index", "past the end") { BI_EXPECT_NULL(f, tg_params_get(f->params, 2)); }

BAD_INPUT(tg_params_get, "params", "NULL") { BI_EXPECT_NULL(f, tg_params_get(NULL, 0)); }

BAD_INPUT(tg_params_find, "name", "NULL") { BI_EXPECT_NULL(f, tg_params_find(f->params, NULL)); }

BAD_INPUT(tg_params_find, "params", "NULL") { BI_EXPECT_NULL(f, tg_params_find(NULL, "layer.bias")); }

BAD_INPUT(tg_params_find, "name", "not in the store") { BI_EXPECT_NULL(f, tg_params_find(f->params, "layer.gamma")); }

BAD_INPUT(tg_params_numel, "params", "NULL") { BI_EXPECT_VALUE(f, tg_params_numel(NULL), 0); }

BAD_INPUT(tg_params_zero_grad, "params", "NULL") { BI_EXPECT_STATUS(f, tg_params_zero_grad(NULL)); }

BAD_INPUT(tg_params_data, "params", "NULL") { BI_EXPECT_NULL(f, tg_params_data(NULL)); }

BAD_INPUT(tg_params_grad, "params", "NULL") { BI_EXPECT_NULL(f, tg_params_grad(NULL)); }

BAD_INPUT(tg_params_sgd_step, "lr", "NaN") { BI_EXPECT_STATUS(f, tg_params_sgd_step(f->params, NAN)); }

BAD_INPUT(tg_params_sgd_step, "lr", "infinite") { BI_EXPECT_STATUS(f, tg_params_sgd_step(f->params, -INFINITY)); }

BAD_INPUT(tg_params_sgd_step, "params", "NULL") { BI_EXPECT_STATUS(f, tg_params_sgd_step(NULL, 0.1)); }

BAD_INPUT(tg_params_grad_norm, "norm", "NULL") { BI_EXPECT_STATUS(f, tg_params_grad_norm(f->params, NULL)); }

BAD_INPUT(tg_params_grad_norm, "params", "NULL")
{
    double norm;
    BI_EXPECT_STATUS(f, tg_params_grad_norm(NULL, &norm));
}

BAD_INPUT(tg_params_clip_grad_norm, "max_norm", "zero")
{
    BI_EXPECT_STATUS(f, tg_params_clip_grad_norm(f->params, 0.0, NULL));
}

BAD_INPUT(tg_params_clip_grad_norm, "max_norm", "NaN")
{
    BI_EXPECT_STATUS(f, tg_params_clip_grad_norm(f->params, NAN, NULL));
}

BAD_INPUT(tg_params_clip_grad_norm, "params", "NULL")
{
    BI_EXPECT_STATUS(f, tg_params_clip_grad_norm(NULL, 1.0, NULL));
}

/* ---- optimizers ---------------------------------------------------------------------------------- */

BAD_INPUT(tg_optim_create, "params", "NULL")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    BI_EXPECT_NULL(f, tg_optim_create(NULL, &config));
}

BAD_INPUT(tg_optim_create, "config", "NULL") { BI_EXPECT_NULL(f, tg_optim_create(f->params, NULL)); }

BAD_INPUT(tg_optim_create, "lr", "NaN")
{
    tg_optim_config config = tg_adamw_config(NAN);
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "lr", "negative")
{
    tg_optim_config config = tg_sgd_config(-0.1, 0.9);
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "beta1", "1")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.beta1 = 1.0;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "beta2", "negative")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.beta2 = -0.5;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "eps", "zero")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.eps = 0.0;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "momentum", "NaN")
{
    tg_optim_config config = tg_sgd_config(0.1, NAN);
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "weight_decay", "infinite")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.weight_decay = INFINITY;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "max_grad_norm", "NaN")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.max_grad_norm = NAN;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "kind", "an optimizer that does not exist")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.kind = (tg_optim_kind)7;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "schedule", "warm-up longer than the schedule")
{
    tg_optim_config config = tg_adamw_config(1e-3);
    config.schedule = (tg_schedule){TG_SCHEDULE_COSINE, 100, 10, 0.1};
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "nesterov", "Nesterov without momentum")
{
    tg_optim_config config = tg_sgd_config(0.1, 0.0);
    config.nesterov = true;
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_step, "opt", "NULL") { BI_EXPECT_STATUS(f, tg_optim_step(NULL, 1)); }

BAD_INPUT(tg_optim_step, "micro_batches", "0") { BI_EXPECT_STATUS(f, tg_optim_step(f->optim, 0)); }

BAD_INPUT(tg_optim_step, "micro_batches", "negative") { BI_EXPECT_STATUS(f, tg_optim_step(f->optim, -4)); }

BAD_INPUT(tg_optim_step_count, "opt", "NULL") { BI_EXPECT_VALUE(f, tg_optim_step_count(NULL), -1); }

BAD_INPUT(tg_optim_skipped_steps, "opt", "NULL") { BI_EXPECT_VALUE(f, tg_optim_skipped_steps(NULL), -1); }

BAD_INPUT(tg_optim_lr, "opt", "NULL") { BI_EXPECT_NAN(f, tg_optim_lr(NULL)); }

BAD_INPUT(tg_optim_last_grad_norm, "opt", "NULL") { BI_EXPECT_NAN(f, tg_optim_last_grad_norm(NULL)); }

BAD_INPUT(tg_optim_get_config, "opt", "NULL") { BI_EXPECT_NULL(f, tg_optim_get_config(NULL)); }

BAD_INPUT(tg_optim_set_lr, "lr", "NaN") { BI_EXPECT_STATUS(f, tg_optim_set_lr(f->optim, NAN)); }

BAD_INPUT(tg_optim_set_lr, "lr", "negative") { BI_EXPECT_STATUS(f, tg_optim_set_lr(f->optim, -1.0)); }

BAD_INPUT(tg_optim_set_lr, "opt", "NULL") { BI_EXPECT_STATUS(f, tg_optim_set_lr(NULL, 0.1)); }

BAD_INPUT(tg_optim_sync_master, "opt", "NULL") { BI_EXPECT_STATUS(f, tg_optim_sync_master(NULL)); }

BAD_INPUT(tg_optim_add_group, "lr_scale", "NaN")
{
    BI_EXPECT_VALUE(f, tg_optim_add_group(f->optim, (tg_optim_group){NAN, 0.0}), -1);
}

BAD_INPUT(tg_optim_add_group, "weight_decay", "negative")
{
    BI_EXPECT_VALUE(f, tg_optim_add_group(f->optim, (tg_optim_group){1.0, -0.1}), -1);
}

BAD_INPUT(tg_optim_add_group, "opt", "NULL")
{
    BI_EXPECT_VALUE(f, tg_optim_add_group(NULL, (tg_optim_group){1.0, 0.0}), -1);
}

BAD_INPUT(tg_optim_add_group, "groups", "one past TG_OPTIM_MAX_GROUPS")
{
    for (int i = 2; i < TG_OPTIM_MAX_GROUPS; i++)
        cr_assert_eq(tg_optim_add_group(f->optim, (tg_optim_group){1.0, 0.0}), i, "%s", tg_last_error());
    BI_EXPECT_VALUE(f, tg_optim_add_group(f->optim, (tg_optim_group){1.0, 0.0}), -1);
}

BAD_INPUT(tg_optim_set_group, "index", "a group that does not exist")
{
    BI_EXPECT_STATUS(f, tg_optim_set_group(f->optim, 5, (tg_optim_group){1.0, 0.0}));
}

BAD_INPUT(tg_optim_set_group, "lr_scale", "infinite")
{
    BI_EXPECT_STATUS(f, tg_optim_set_group(f->optim, 0, (tg_optim_group){INFINITY, 0.0}));
}

BAD_INPUT(tg_optim_set_group, "opt", "NULL")
{
    BI_EXPECT_STATUS(f, tg_optim_set_group(NULL, 0, (tg_optim_group){1.0, 0.0}));
}

BAD_INPUT(tg_optim_get_group, "group", "NULL") { BI_EXPECT_STATUS(f, tg_optim_get_group(f->optim, 0, NULL)); }

BAD_INPUT(tg_optim_get_group, "index", "negative")
{
    tg_optim_group group;
    BI_EXPECT_STATUS(f, tg_optim_get_group(f->optim, -1, &group));
}

BAD_INPUT(tg_optim_assign, "pattern", "matching nothing")
{
    BI_EXPECT_STATUS(f, tg_optim_assign(f->optim, "decoder.*", TG_OPTIM_GROUP_NO_DECAY, NULL));
}

BAD_INPUT(tg_optim_assign, "pattern", "NULL")
{
    BI_EXPECT_STATUS(f, tg_optim_assign(f->optim, NULL, TG_OPTIM_GROUP_NO_DECAY, NULL));
}

BAD_INPUT(tg_optim_assign, "pattern", "an unclosed set")
{
    BI_EXPECT_STATUS(f, tg_optim_assign(f->optim, "layer.[bw", TG_OPTIM_GROUP_NO_DECAY, NULL));
}

BAD_INPUT(tg_optim_assign, "group", "a group that does not exist")
{
    BI_EXPECT_STATUS(f, tg_optim_assign(f->optim, "layer.*", 9, NULL));
}

BAD_INPUT(tg_optim_assign, "opt", "NULL") { BI_EXPECT_STATUS(f, tg_optim_assign(NULL, "layer.*", 0, NULL)); }

BAD_INPUT(tg_optim_group_of, "name", "not in the store")
{
    BI_EXPECT_VALUE(f, tg_optim_group_of(f->optim, "layer.gamma"), -1);
}

BAD_INPUT(tg_optim_group_of, "name", "NULL") { BI_EXPECT_VALUE(f, tg_optim_group_of(f->optim, NULL), -1); }

BAD_INPUT(tg_optim_group_of, "opt", "NULL") { BI_EXPECT_VALUE(f, tg_optim_group_of(NULL, "layer.bias"), -1); }

BAD_INPUT(tg_optim_default_no_decay, "name", "NULL") { BI_EXPECT_VALUE(f, tg_optim_default_no_decay(NULL), false); }

BAD_INPUT(tg_optim_create, "lr", "NaN from tg_adamw_config")
{
    tg_optim_config config = tg_adamw_config(NAN);
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

BAD_INPUT(tg_optim_create, "momentum", "1.5 from tg_sgd_config")
{
    tg_optim_config config = tg_sgd_config(0.1, 1.5);
    BI_EXPECT_NULL(f, tg_optim_create(f->params, &config));
}

/* ---- schedules ---------------------------------------------------------------------------------- */

BAD_INPUT(tg_schedule_factor, "schedule", "NULL") { BI_EXPECT_NAN(f, tg_schedule_factor(NULL, 3)); }

BAD_INPUT(tg_schedule_factor, "step", "negative")
{
    tg_schedule schedule = {TG_SCHEDULE_COSINE, 10, 100, 0.1};
    BI_EXPECT_NAN(f, tg_schedule_factor(&schedule, -1));
}

BAD_INPUT(tg_schedule_factor, "min_factor", "above 1")
{
    tg_schedule schedule = {TG_SCHEDULE_COSINE, 10, 100, 1.5};
    BI_EXPECT_NAN(f, tg_schedule_factor(&schedule, 3));
}

BAD_INPUT(tg_schedule_factor, "warmup_steps", "negative")
{
    tg_schedule schedule = {TG_SCHEDULE_CONSTANT, -5, 0, 0.0};
    BI_EXPECT_NAN(f, tg_schedule_factor(&schedule, 3));
}

BAD_INPUT(tg_schedule_factor, "kind", "a schedule that does not exist")
{
    tg_schedule schedule = {(tg_schedule_kind)4, 0, 0, 0.0};
    BI_EXPECT_NAN(f, tg_schedule_factor(&schedule, 3));
}

BAD_INPUT(tg_schedule_factor, "total_steps", "below the warm-up")
{
    tg_schedule schedule = {TG_SCHEDULE_COSINE, 10, 5, 0.0};
    BI_EXPECT_NAN(f, tg_schedule_factor(&schedule, 3));
}

/* ---- layers and the model ------------------------------------------------------------------------ */

BAD_INPUT(tg_nn_linear_init, "layer", "NULL")
{
    BI_EXPECT_STATUS(f, tg_nn_linear_init(NULL, f->params, "head", 4, 2, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "in_features", "0")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, "head", 0, 2, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "out_features", "negative")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, "head", 4, -2, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "prefix", "NULL")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, NULL, 4, 2, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "prefix", "a name the store already has")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, "layer", 4, 3, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "rng", "NULL")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, "head", 4, 2, true, TG_F32, NULL));
}

BAD_INPUT(tg_nn_linear_init, "dtype", "i32")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, "head", 4, 2, true, TG_I32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "params", "NULL")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, NULL, "head", 4, 2, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "in_features", "a weight whose size overflows")
{
    tg_nn_linear layer;
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->params, "head", INT64_MAX / 2, 4, false, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_embedding_init, "std", "negative")
{
    tg_nn_embedding layer;
    BI_EXPECT_STATUS(f, tg_nn_embedding_init(&layer, f->params, "embed", 8, 4, -1.0, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_embedding_init, "std", "NaN")
{
    tg_nn_embedding layer;
    BI_EXPECT_STATUS(f, tg_nn_embedding_init(&layer, f->params, "embed", 8, 4, NAN, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_embedding_init, "num_embeddings", "0")
{
    tg_nn_embedding layer;
    BI_EXPECT_STATUS(f, tg_nn_embedding_init(&layer, f->params, "embed", 0, 4, 0.02, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_embedding_init, "layer", "NULL")
{
    BI_EXPECT_STATUS(f, tg_nn_embedding_init(NULL, f->params, "embed", 8, 4, 0.02, TG_F32, &f->rng));
}

BAD_INPUT(tg_nn_embedding_init, "rng", "NULL")
{
    tg_nn_embedding layer;
    BI_EXPECT_STATUS(f, tg_nn_embedding_init(&layer, f->params, "embed", 8, 4, 0.02, TG_F32, NULL));
}

BAD_INPUT(tg_nn_rmsnorm_init, "eps", "negative")
{
    tg_nn_rmsnorm layer;
    BI_EXPECT_STATUS(f, tg_nn_rmsnorm_init(&layer, f->params, "norm", 4, -1e-5, TG_F32));
}

BAD_INPUT(tg_nn_rmsnorm_init, "dim", "0")
{
    tg_nn_rmsnorm layer;
    BI_EXPECT_STATUS(f, tg_nn_rmsnorm_init(&layer, f->params, "norm", 0, 1e-5, TG_F32));
}

BAD_INPUT(tg_nn_rmsnorm_init, "layer", "NULL")
{
    BI_EXPECT_STATUS(f, tg_nn_rmsnorm_init(NULL, f->params, "norm", 4, 1e-5, TG_F32));
}

BAD_INPUT(tg_nn_rmsnorm_init, "dtype", "f64 in an f32 store")
{
    tg_nn_rmsnorm layer;
    BI_EXPECT_STATUS(f, tg_nn_rmsnorm_init(&layer, f->params, "norm", 4, 1e-5, TG_F64));
}

static tg_mamba_config small_config(void) { return (tg_mamba_config){.vocab_size = 8, .d_model = 8, .n_layer = 1}; }

BAD_INPUT(tg_mamba_config_resolve, "config", "NULL")
{
    tg_mamba_config resolved;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(NULL, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "resolved", "NULL")
{
    tg_mamba_config config = small_config();
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, NULL));
}

BAD_INPUT(tg_mamba_config_resolve, "vocab_size", "0")
{
    tg_mamba_config config = small_config(), resolved;
    config.vocab_size = 0;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "d_model", "negative")
{
    tg_mamba_config config = small_config(), resolved;
    config.d_model = -8;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "n_layer", "negative")
{
    tg_mamba_config config = small_config(), resolved;
    config.n_layer = -1;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "expand", "products that overflow")
{
    tg_mamba_config config = small_config(), resolved;
    config.expand = INT64_MAX / 4;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "dtype", "i32")
{
    tg_mamba_config config = small_config(), resolved;
    config.dtype = TG_I32;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "dt_min", "above dt_max")
{
    tg_mamba_config config = small_config(), resolved;
    config.dt_min = 0.5, config.dt_max = 0.1;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "eps", "NaN")
{
    tg_mamba_config config = small_config(), resolved;
    config.eps = NAN;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "activations", "a choice that does not exist")
{
    tg_mamba_config config = small_config(), resolved;
    config.activations = (tg_mamba_activations)7;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "scan_chunk", "negative")
{
    tg_mamba_config config = small_config(), resolved;
    config.scan_chunk = -64;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_config_resolve, "embedding_std", "infinite")
{
    tg_mamba_config config = small_config(), resolved;
    config.embedding_std = INFINITY;
    BI_EXPECT_STATUS(f, tg_mamba_config_resolve(&config, &resolved));
}

BAD_INPUT(tg_mamba_create, "config", "NULL") { BI_EXPECT_NULL(f, tg_mamba_create(NULL, f->params, &f->rng)); }

BAD_INPUT(tg_mamba_create, "params", "NULL")
{
    tg_mamba_config config = small_config();
    BI_EXPECT_NULL(f, tg_mamba_create(&config, NULL, &f->rng));
}

BAD_INPUT(tg_mamba_create, "rng", "NULL")
{
    tg_mamba_config config = small_config();
    BI_EXPECT_NULL(f, tg_mamba_create(&config, f->params, NULL));
}

BAD_INPUT(tg_mamba_create, "d_state", "negative")
{
    tg_mamba_config config = small_config();
    config.d_state = -4;
    BI_EXPECT_NULL(f, tg_mamba_create(&config, f->params, &f->rng));
}

BAD_INPUT(tg_mamba_create, "dtype", "f64 in an f32 store")
{
    tg_mamba_config config = small_config();
    config.dtype = TG_F64;
    BI_EXPECT_NULL(f, tg_mamba_create(&config, f->params, &f->rng));
}

BAD_INPUT(tg_mamba_create, "params", "a store that already has the model's names")
{
    tg_mamba *model = bi_model(f);
    tg_mamba_config config = small_config();
    BI_EXPECT_NULL(f, tg_mamba_create(&config, model->params, &f->rng));
}

BAD_INPUT(tg_mamba_mixer_init, "d_state", "negative")
{
    tg_mamba_mixer mixer;
    tg_mamba_config config = small_config();
    config.d_state = -2;
    BI_EXPECT_STATUS(f, tg_mamba_mixer_init(&mixer, f->params, "mixer", &config, &f->rng));
}

BAD_INPUT(tg_mamba_mixer_init, "prefix", "a prefix whose names are taken (the first one free)")
{
    tg_mamba_mixer mixer;
    tg_mamba_config config = small_config();
    cr_assert(tg_params_add(bi_model(f)->params, "extra.out_proj.weight", TG_F32, 1, SHAPE(2)));
    BI_EXPECT_STATUS(f, tg_mamba_mixer_init(&mixer, f->model->params, "extra", &config, &f->rng));
}

BAD_INPUT(tg_nn_linear_init, "prefix", "a prefix whose bias is taken (the weight free)")
{
    tg_nn_linear layer;
    cr_assert(tg_params_add(bi_model(f)->params, "extra.bias", TG_F32, 1, SHAPE(2)));
    BI_EXPECT_STATUS(f, tg_nn_linear_init(&layer, f->model->params, "extra", 4, 2, true, TG_F32, &f->rng));
}

BAD_INPUT(tg_mamba_mixer_init, "mixer", "NULL")
{
    tg_mamba_config config = small_config(), resolved;
    cr_assert_eq(tg_mamba_config_resolve(&config, &resolved), TG_OK);
    BI_EXPECT_STATUS(f, tg_mamba_mixer_init(NULL, f->params, "mixer", &resolved, &f->rng));
}

BAD_INPUT(tg_mamba_mixer_init, "prefix", "NULL")
{
    tg_mamba_mixer mixer;
    tg_mamba_config config = small_config(), resolved;
    cr_assert_eq(tg_mamba_config_resolve(&config, &resolved), TG_OK);
    BI_EXPECT_STATUS(f, tg_mamba_mixer_init(&mixer, f->params, NULL, &resolved, &f->rng));
}

BAD_INPUT(tg_mamba_mixer_init, "rng", "NULL")
{
    tg_mamba_mixer mixer;
    tg_mamba_config config = small_config(), resolved;
    cr_assert_eq(tg_mamba_config_resolve(&config, &resolved), TG_OK);
    BI_EXPECT_STATUS(f, tg_mamba_mixer_init(&mixer, f->params, "mixer", &resolved, NULL));
}

/* ---- data ------------------------------------------------------------------------------------------ */

static const tg_selective_copy_config copy_task = {16, 4};
static const tg_induction_config induction_task = {16, false};

BAD_INPUT(tg_task_selective_copy_batch, "config", "NULL")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(NULL, &f->rng, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "rng", "NULL")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&copy_task, NULL, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "seq_len", "shorter than 2 n_copy")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&copy_task, &f->rng, 2, 7, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "vocab", "2")
{
    tg_selective_copy_config config = {2, 1};
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&config, &f->rng, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "n_copy", "0")
{
    tg_selective_copy_config config = {16, 0};
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&config, &f->rng, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "batch", "negative")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&copy_task, &f->rng, -2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "seq_len", "a batch whose size overflows")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&copy_task, &f->rng, INT64_MAX / 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "inputs", "NULL")
{
    int32_t targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&copy_task, &f->rng, 2, 12, NULL, targets));
}

BAD_INPUT(tg_task_selective_copy_batch, "vocab", "above the i32 ids")
{
    tg_selective_copy_config config = {(int64_t)1 << 40, 2};
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_selective_copy_batch(&config, &f->rng, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_induction_batch, "seq_len", "2")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_induction_batch(&induction_task, &f->rng, 2, 2, inputs, targets));
}

BAD_INPUT(tg_task_induction_batch, "vocab", "2")
{
    tg_induction_config config = {2, false};
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_induction_batch(&config, &f->rng, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_induction_batch, "targets", "NULL")
{
    int32_t inputs[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_induction_batch(&induction_task, &f->rng, 2, 12, inputs, NULL));
}

BAD_INPUT(tg_task_induction_batch, "rng", "NULL")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_induction_batch(&induction_task, NULL, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_induction_batch, "config", "NULL")
{
    int32_t inputs[2 * 12], targets[2 * 12];
    BI_EXPECT_STATUS(f, tg_task_induction_batch(NULL, &f->rng, 2, 12, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_fill, "inputs", "f32 instead of i32")
{
    tg_tensor *inputs = bi_randn(f, TG_F32, 2, SHAPE(2, 12)), *targets = bi_ids(f, 2, SHAPE(2, 12), 2);
    BI_EXPECT_STATUS(f, tg_task_selective_copy_fill(&copy_task, &f->rng, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_fill, "targets", "another shape")
{
    tg_tensor *inputs = bi_ids(f, 2, SHAPE(2, 12), 2), *targets = bi_ids(f, 2, SHAPE(2, 11), 2);
    BI_EXPECT_STATUS(f, tg_task_selective_copy_fill(&copy_task, &f->rng, inputs, targets));
}

BAD_INPUT(tg_task_selective_copy_fill, "inputs", "NULL")
{
    tg_tensor *targets = bi_ids(f, 2, SHAPE(2, 12), 2);
    BI_EXPECT_STATUS(f, tg_task_selective_copy_fill(&copy_task, &f->rng, NULL, targets));
}

BAD_INPUT(tg_task_selective_copy_fill, "inputs", "a strided view")
{
    tg_tensor *base = bi_ids(f, 2, SHAPE(12, 2), 2), *targets = bi_ids(f, 2, SHAPE(2, 12), 2);
    tg_tensor *inputs = tg_transpose(f->tape, base, 0, 1);
    BI_EXPECT_STATUS(f, tg_task_selective_copy_fill(&copy_task, &f->rng, inputs, targets));
}

BAD_INPUT(tg_task_induction_fill, "targets", "rank 3")
{
    tg_tensor *inputs = bi_ids(f, 2, SHAPE(2, 12), 2), *targets = bi_ids(f, 3, SHAPE(2, 12, 1), 2);
    BI_EXPECT_STATUS(f, tg_task_induction_fill(&induction_task, &f->rng, inputs, targets));
}

BAD_INPUT(tg_task_induction_fill, "inputs", "claims CUDA, data on the host")
{
    tg_tensor *inputs = bi_fake_device(f, bi_ids(f, 2, SHAPE(2, 12), 2)), *targets = bi_ids(f, 2, SHAPE(2, 12), 2);
    BI_EXPECT_STATUS(f, tg_task_induction_fill(&induction_task, &f->rng, inputs, targets));
}

BAD_INPUT(tg_task_induction_fill, "targets", "NULL")
{
    tg_tensor *inputs = bi_ids(f, 2, SHAPE(2, 12), 2);
    BI_EXPECT_STATUS(f, tg_task_induction_fill(&induction_task, &f->rng, inputs, NULL));
}

/* ---- text ----------------------------------------------------------------------------------------- */

BAD_INPUT(tg_text_load, "path", "NULL") { BI_EXPECT_NULL(f, tg_text_load(NULL, NULL)); }

BAD_INPUT(tg_text_load, "path", "a file that does not exist")
{
    f->expect_word = bi_path(f, "missing.txt");
    BI_EXPECT_NULL(f, tg_text_load(bi_path(f, "missing.txt"), NULL));
}

BAD_INPUT(tg_text_load, "path", "a directory")
{
    f->expect_word = f->dir;
    BI_EXPECT_NULL(f, tg_text_load(f->dir, NULL));
}

BAD_INPUT(tg_text_load, "path", "a FIFO (must not block)")
{
    const char *path = bi_path(f, "fifo");
    cr_assert_eq(mkfifo(path, 0600), 0);
    f->expect_word = path;
    BI_EXPECT_NULL(f, tg_text_load(path, NULL));
}

BAD_INPUT(tg_text_load, "path", "an empty file")
{
    const char *path = bi_path(f, "empty.txt");
    FILE *file = fopen(path, "w");
    cr_assert(file);
    fclose(file);
    f->expect_word = path;
    BI_EXPECT_NULL(f, tg_text_load(path, NULL));
}

BAD_INPUT(tg_text_load, "val_fraction", "1")
{
    tg_text_options options = tg_text_defaults();
    options.val_fraction = 1.0;
    BI_EXPECT_NULL(f, tg_text_load(f->checkpoint, &options));
}

BAD_INPUT(tg_text_from_memory, "data", "NULL") { BI_EXPECT_NULL(f, tg_text_from_memory(NULL, 5, NULL)); }

BAD_INPUT(tg_text_from_memory, "size", "0") { BI_EXPECT_NULL(f, tg_text_from_memory("abc", 0, NULL)); }

BAD_INPUT(tg_text_from_memory, "data", "invalid UTF-8")
{
    BI_EXPECT_NULL(f, tg_text_from_memory("ab\xff\xfe", 4, NULL));
}

BAD_INPUT(tg_text_from_memory, "data", "a truncated UTF-8 sequence")
{
    BI_EXPECT_NULL(f, tg_text_from_memory("ab\xc3", 3, NULL));
}

BAD_INPUT(tg_text_from_memory, "unit", "a unit that does not exist")
{
    tg_text_options options = tg_text_defaults();
    options.unit = (tg_text_unit)5;
    BI_EXPECT_NULL(f, tg_text_from_memory("abc", 3, &options));
}

BAD_INPUT(tg_text_from_memory, "val_fraction", "NaN")
{
    tg_text_options options = tg_text_defaults();
    options.val_fraction = NAN;
    BI_EXPECT_NULL(f, tg_text_from_memory("abc", 3, &options));
}

BAD_INPUT(tg_text_from_memory, "val_fraction", "negative")
{
    tg_text_options options = tg_text_defaults();
    options.val_fraction = -0.1;
    BI_EXPECT_NULL(f, tg_text_from_memory("abc", 3, &options));
}

BAD_INPUT(tg_text_vocab_size, "text", "NULL") { BI_EXPECT_VALUE(f, tg_text_vocab_size(NULL), -1); }

BAD_INPUT(tg_text_length, "split", "a split that does not exist")
{
    BI_EXPECT_VALUE(f, tg_text_length(f->text, (tg_text_split)2), -1);
}

BAD_INPUT(tg_text_length, "text", "NULL") { BI_EXPECT_VALUE(f, tg_text_length(NULL, TG_TEXT_TRAIN), -1); }

BAD_INPUT(tg_text_ids, "split", "a split that does not exist")
{
    BI_EXPECT_NULL(f, tg_text_ids(f->text, (tg_text_split)-1));
}

BAD_INPUT(tg_text_ids, "text", "NULL") { BI_EXPECT_NULL(f, tg_text_ids(NULL, TG_TEXT_VAL)); }

BAD_INPUT(tg_text_char, "id", "past the vocabulary") { BI_EXPECT_VALUE(f, tg_text_char(f->text, 1000), -1); }

BAD_INPUT(tg_text_char, "id", "negative") { BI_EXPECT_VALUE(f, tg_text_char(f->text, -1), -1); }

BAD_INPUT(tg_text_char, "text", "NULL") { BI_EXPECT_VALUE(f, tg_text_char(NULL, 0), -1); }

BAD_INPUT(tg_text_id, "character", "not in the corpus") { BI_EXPECT_VALUE(f, tg_text_id(f->text, 'Z'), -1); }

BAD_INPUT(tg_text_id, "text", "NULL") { BI_EXPECT_VALUE(f, tg_text_id(NULL, 'a'), -1); }

BAD_INPUT(tg_text_encode, "str", "a character outside the vocabulary")
{
    int32_t ids[8];
    int64_t n;
    BI_EXPECT_STATUS(f, tg_text_encode(f->text, "hZ", 2, ids, 8, &n));
}

BAD_INPUT(tg_text_encode, "capacity", "too small")
{
    int32_t ids[8];
    int64_t n;
    BI_EXPECT_STATUS(f, tg_text_encode(f->text, "hello", 5, ids, 3, &n));
}

BAD_INPUT(tg_text_encode, "ids", "NULL")
{
    int64_t n;
    BI_EXPECT_STATUS(f, tg_text_encode(f->text, "hello", 5, NULL, 8, &n));
}

BAD_INPUT(tg_text_encode, "n_ids", "NULL")
{
    int32_t ids[8];
    BI_EXPECT_STATUS(f, tg_text_encode(f->text, "hello", 5, ids, 8, NULL));
}

BAD_INPUT(tg_text_encode, "str", "NULL")
{
    int32_t ids[8];
    int64_t n;
    BI_EXPECT_STATUS(f, tg_text_encode(f->text, NULL, 5, ids, 8, &n));
}

BAD_INPUT(tg_text_encode, "str", "invalid UTF-8")
{
    int32_t ids[8];
    int64_t n;
    BI_EXPECT_STATUS(f, tg_text_encode(f->text, "h\xff", 2, ids, 8, &n));
}

BAD_INPUT(tg_text_decode, "ids", "an id past the vocabulary")
{
    char out[32];
    size_t n;
    BI_EXPECT_STATUS(f, tg_text_decode(f->text, (int32_t[]){1, 999}, 2, out, sizeof out, &n));
}

BAD_INPUT(tg_text_decode, "capacity", "too small")
{
    char out[2];
    size_t n;
    BI_EXPECT_STATUS(f, tg_text_decode(f->text, (int32_t[]){1, 2, 3}, 3, out, sizeof out, &n));
}

BAD_INPUT(tg_text_decode, "n_ids", "negative")
{
    char out[32];
    size_t n;
    BI_EXPECT_STATUS(f, tg_text_decode(f->text, (int32_t[]){1}, -1, out, sizeof out, &n));
}

BAD_INPUT(tg_text_decode, "ids", "NULL")
{
    char out[32];
    size_t n;
    BI_EXPECT_STATUS(f, tg_text_decode(f->text, NULL, 3, out, sizeof out, &n));
}

BAD_INPUT(tg_text_decode, "text", "NULL")
{
    char out[32];
    size_t n;
    BI_EXPECT_STATUS(f, tg_text_decode(NULL, (int32_t[]){1}, 1, out, sizeof out, &n));
}

BAD_INPUT(tg_text_batch, "seq_len", "longer than the split")
{
    int32_t inputs[256], targets[256];
    BI_EXPECT_STATUS(f, tg_text_batch(f->text, TG_TEXT_VAL, &f->rng, 1, 100, inputs, targets));
}

BAD_INPUT(tg_text_batch, "rng", "NULL")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_batch(f->text, TG_TEXT_TRAIN, NULL, 2, 8, inputs, targets));
}

BAD_INPUT(tg_text_batch, "batch", "0")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_batch(f->text, TG_TEXT_TRAIN, &f->rng, 0, 8, inputs, targets));
}

BAD_INPUT(tg_text_batch, "split", "a split that does not exist")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_batch(f->text, (tg_text_split)3, &f->rng, 2, 8, inputs, targets));
}

BAD_INPUT(tg_text_batch, "inputs", "NULL")
{
    int32_t targets[16];
    BI_EXPECT_STATUS(f, tg_text_batch(f->text, TG_TEXT_TRAIN, &f->rng, 2, 8, NULL, targets));
}

BAD_INPUT(tg_text_batch, "batch", "a size that overflows")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_batch(f->text, TG_TEXT_TRAIN, &f->rng, INT64_MAX / 4, 8, inputs, targets));
}

BAD_INPUT(tg_text_window_count, "seq_len", "0")
{
    BI_EXPECT_VALUE(f, tg_text_window_count(f->text, TG_TEXT_TRAIN, 0), -1);
}

BAD_INPUT(tg_text_window_count, "text", "NULL")
{
    BI_EXPECT_VALUE(f, tg_text_window_count(NULL, TG_TEXT_TRAIN, 8), -1);
}

BAD_INPUT(tg_text_windows, "first", "past the last window")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_windows(f->text, TG_TEXT_TRAIN, 1000, 2, 8, inputs, targets, NULL));
}

BAD_INPUT(tg_text_windows, "first", "negative")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_windows(f->text, TG_TEXT_TRAIN, -1, 2, 8, inputs, targets, NULL));
}

BAD_INPUT(tg_text_windows, "targets", "NULL")
{
    int32_t inputs[16];
    BI_EXPECT_STATUS(f, tg_text_windows(f->text, TG_TEXT_TRAIN, 0, 2, 8, inputs, NULL, NULL));
}

BAD_INPUT(tg_text_windows, "seq_len", "negative")
{
    int32_t inputs[16], targets[16];
    BI_EXPECT_STATUS(f, tg_text_windows(f->text, TG_TEXT_TRAIN, 0, 2, -8, inputs, targets, NULL));
}

/* ---- checkpoints ------------------------------------------------------------------------------------ */

BAD_INPUT(tg_checkpoint_save, "path", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_save(NULL, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_save, "params", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_save(bi_path(f, "a.safetensors"), NULL, NULL, NULL));
}

BAD_INPUT(tg_checkpoint_save, "path", "a directory that does not exist")
{
    f->expect_word = bi_path(f, "no/such/dir/a.safetensors");
    BI_EXPECT_STATUS(f, tg_checkpoint_save(bi_path(f, "no/such/dir/a.safetensors"), f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_save, "path", "a directory")
{
    f->expect_word = f->dir;
    BI_EXPECT_STATUS(f, tg_checkpoint_save(f->dir, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_save, "path", "too long for a temporary name beside it")
{
    char path[4200];
    int n = snprintf(path, sizeof path, "%s/", f->dir);
    memset(path + n, 'p', sizeof path - (size_t)n - 1);
    path[sizeof path - 1] = '\0';
    f->expect_word = f->dir;
    BI_EXPECT_STATUS(f, tg_checkpoint_save(path, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_save, "optim", "an optimizer of another store")
{
    tg_mamba *model = bi_model(f);
    tg_optim_config config = tg_adamw_config(1e-3);
    tg_optim *other = tg_optim_create(model->params, &config);
    cr_assert(other, "%s", tg_last_error());
    BI_EXPECT_STATUS(f, tg_checkpoint_save(f->checkpoint, f->params, other, NULL));
    tg_optim_free(other);
}

BAD_INPUT(tg_checkpoint_save, "config", "text that is not JSON")
{
    tg_checkpoint_info info = {.step = 3, .config = "{not json"};
    BI_EXPECT_STATUS(f, tg_checkpoint_save(f->checkpoint, f->params, f->optim, &info));
}

BAD_INPUT(tg_checkpoint_save, "step", "negative")
{
    tg_checkpoint_info info = {.step = -3};
    BI_EXPECT_STATUS(f, tg_checkpoint_save(f->checkpoint, f->params, f->optim, &info));
}

BAD_INPUT(tg_checkpoint_load, "path", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_load(NULL, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load, "params", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_load(f->checkpoint, NULL, NULL, NULL));
}

BAD_INPUT(tg_checkpoint_load, "path", "a FIFO (must not block)")
{
    const char *path = bi_path(f, "fifo.safetensors");
    cr_assert_eq(mkfifo(path, 0600), 0);
    f->expect_word = path;
    BI_EXPECT_STATUS(f, tg_checkpoint_load(path, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load, "path", "a directory")
{
    f->expect_word = f->dir;
    BI_EXPECT_STATUS(f, tg_checkpoint_load(f->dir, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load, "path", "/dev/zero")
{
    f->expect_word = "/dev/zero";
    BI_EXPECT_STATUS(f, tg_checkpoint_load("/dev/zero", f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load, "path", "a file that does not exist")
{
    f->expect_word = bi_path(f, "missing.safetensors");
    BI_EXPECT_STATUS(f, tg_checkpoint_load(bi_path(f, "missing.safetensors"), f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load, "optim", "an optimizer of another store")
{
    tg_mamba *model = bi_model(f);
    tg_optim_config config = tg_adamw_config(1e-3);
    tg_optim *other = tg_optim_create(model->params, &config);
    cr_assert(other, "%s", tg_last_error());
    BI_EXPECT_STATUS(f, tg_checkpoint_load(f->checkpoint, f->params, other, NULL));
    tg_optim_free(other);
}

BAD_INPUT(tg_checkpoint_load, "params", "a store of another model")
{
    tg_mamba *model = bi_model(f);
    BI_EXPECT_STATUS(f, tg_checkpoint_load(f->checkpoint, model->params, NULL, NULL));
}

BAD_INPUT(tg_checkpoint_load, "optim", "an optimizer of another kind")
{
    tg_optim_config config = tg_sgd_config(0.1, 0.9);
    tg_optim *sgd = tg_optim_create(f->params, &config);
    cr_assert(sgd, "%s", tg_last_error());
    BI_EXPECT_STATUS(f, tg_checkpoint_load(f->checkpoint, f->params, sgd, NULL));
    tg_optim_free(sgd);
}

BAD_INPUT(tg_checkpoint_load_buffer, "bytes", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_load_buffer(NULL, 100, "buffer", f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load_buffer, "bytes", "too few for a header")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_load_buffer("12345", 5, "buffer", f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_load_buffer, "name", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_load_buffer("12345678", 8, NULL, f->params, f->optim, NULL));
}

BAD_INPUT(tg_checkpoint_read_info, "info", "NULL")
{
    BI_EXPECT_STATUS(f, tg_checkpoint_read_info(f->checkpoint, NULL));
}

BAD_INPUT(tg_checkpoint_read_info, "path", "a FIFO (must not block)")
{
    const char *path = bi_path(f, "info.fifo");
    cr_assert_eq(mkfifo(path, 0600), 0);
    tg_checkpoint_info info = {0};
    f->expect_word = path;
    BI_EXPECT_STATUS(f, tg_checkpoint_read_info(path, &info));
}

BAD_INPUT(tg_checkpoint_read_info, "path", "NULL")
{
    tg_checkpoint_info info = {0};
    BI_EXPECT_STATUS(f, tg_checkpoint_read_info(NULL, &info));
}

BAD_INPUT(tg_checkpoint_info_clear, "info", "NULL") { BI_EXPECT_NOTHING(f, tg_checkpoint_info_clear(NULL)); }

/* ---- gradcheck ------------------------------------------------------------------------------------- */

static tg_tensor *sum_of_squares(tg_tape *tape, tg_tensor *const *inputs, int n_inputs, void *user)
{
    (void)n_inputs, (void)user;
    return tg_sum_all(tape, tg_mul(tape, inputs[0], inputs[0]));
}

static tg_tensor *fails(tg_tape *tape, tg_tensor *const *inputs, int n_inputs, void *user)
{
    (void)tape, (void)inputs, (void)n_inputs, (void)user;
    tg_set_error(TG_ERR_INVALID, "fails: on purpose");
    return NULL;
}

static tg_tensor *f64_leaf(bi_fixture *f)
{
    tg_tensor *x = bi_randn(f, TG_F64, 1, SHAPE(3));
    cr_assert_eq(tg_set_requires_grad(x, true), TG_OK);
    return x;
}

BAD_INPUT(tg_gradcheck, "fn", "NULL")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(NULL, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck, "result", "NULL")
{
    tg_tensor *x = f64_leaf(f);
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, NULL, NULL));
}

BAD_INPUT(tg_gradcheck, "inputs", "NULL")
{
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, NULL, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck, "n_inputs", "0")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 0, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck, "inputs[0]", "an f32 input that requires a gradient")
{
    tg_tensor *x = bi_leaf(f, TG_F32, 1, SHAPE(3));
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck, "inputs[0]", "NULL")
{
    tg_tensor *x = NULL;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck, "eps", "zero")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_options options = tg_gradcheck_defaults();
    options.eps = 0.0;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, &options, &result));
}

BAD_INPUT(tg_gradcheck, "atol", "negative")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_options options = tg_gradcheck_defaults();
    options.atol = -1.0;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, &options, &result));
}

BAD_INPUT(tg_gradcheck, "n_directions", "0")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_options options = tg_gradcheck_defaults();
    options.n_directions = 0;
    options.max_elements_per_input = 1;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, &options, &result));
}

/* tapegrad/dist.h: without a launcher the world is this process alone (with or without MPI). */
BAD_INPUT(tg_dist_init, "timeout_s", "zero")
{
    tg_dist_options options = tg_dist_defaults();
    options.timeout_s = 0;
    BI_EXPECT_NULL(f, tg_dist_init(&options));
}

BAD_INPUT(tg_dist_init, "mode", "a value outside tg_dist_mode")
{
    tg_dist_options options = tg_dist_defaults();
    options.mode = (tg_dist_mode)7;
    BI_EXPECT_NULL(f, tg_dist_init(&options));
}

BAD_INPUT(tg_dist_rank, "dist", "NULL") { BI_EXPECT_VALUE(f, tg_dist_rank(NULL), 0); }
BAD_INPUT(tg_dist_world_size, "dist", "NULL") { BI_EXPECT_VALUE(f, tg_dist_world_size(NULL), 1); }
BAD_INPUT(tg_dist_barrier, "dist", "NULL") { BI_EXPECT_STATUS(f, tg_dist_barrier(NULL)); }
BAD_INPUT(tg_dist_sync, "dist", "NULL") { BI_EXPECT_STATUS(f, tg_dist_sync(NULL)); }
BAD_INPUT(tg_dist_check_params, "dist", "NULL") { BI_EXPECT_STATUS(f, tg_dist_check_params(NULL, f->params)); }
BAD_INPUT(tg_dist_broadcast_params, "dist", "NULL") { BI_EXPECT_STATUS(f, tg_dist_broadcast_params(NULL, f->params)); }
BAD_INPUT(tg_dist_allreduce_grads, "dist", "NULL") { BI_EXPECT_STATUS(f, tg_dist_allreduce_grads(NULL, f->params)); }
BAD_INPUT(tg_dist_check_same_values, "dist", "NULL")
{
    BI_EXPECT_STATUS(f, tg_dist_check_same_values(NULL, f->params));
}

BAD_INPUT(tg_dist_allreduce_sum, "dist", "NULL")
{
    double values[2] = {1, 2};
    BI_EXPECT_STATUS(f, tg_dist_allreduce_sum(NULL, values, 2));
}

BAD_INPUT(tg_dist_allreduce_sum, "values", "NULL")
{
    tg_dist *dist = tg_dist_init(NULL);
    cr_assert(dist, "%s", tg_last_error());
    BI_EXPECT_STATUS(f, tg_dist_allreduce_sum(dist, NULL, 2));
    tg_dist_finalize(dist);
}

BAD_INPUT(tg_dist_allreduce_sum, "n", "negative")
{
    tg_dist *dist = tg_dist_init(NULL);
    cr_assert(dist, "%s", tg_last_error());
    double values[2] = {1, 2};
    BI_EXPECT_STATUS(f, tg_dist_allreduce_sum(dist, values, -1));
    tg_dist_finalize(dist);
}

BAD_INPUT(tg_dist_allreduce_grads, "params", "NULL")
{
    tg_dist *dist = tg_dist_init(NULL);
    cr_assert(dist, "%s", tg_last_error());
    BI_EXPECT_STATUS(f, tg_dist_allreduce_grads(dist, NULL));
    tg_dist_finalize(dist);
}

BAD_INPUT(tg_dist_broadcast_params, "params", "NULL")
{
    tg_dist *dist = tg_dist_init(NULL);
    cr_assert(dist, "%s", tg_last_error());
    BI_EXPECT_STATUS(f, tg_dist_broadcast_params(dist, NULL));
    tg_dist_finalize(dist);
}

BAD_INPUT(tg_gradcheck_cuda, "fn", "NULL")
{
    tg_tensor *x = bi_leaf(f, TG_F32, 1, SHAPE(3));
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(NULL, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck_cuda, "result", "NULL")
{
    tg_tensor *x = bi_leaf(f, TG_F32, 1, SHAPE(3));
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(sum_of_squares, &x, 1, NULL, NULL, NULL));
}

BAD_INPUT(tg_gradcheck_cuda, "inputs", "NULL")
{
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(sum_of_squares, NULL, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck_cuda, "n_inputs", "0")
{
    tg_tensor *x = bi_leaf(f, TG_F32, 1, SHAPE(3));
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(sum_of_squares, &x, 0, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck_cuda, "inputs[0]", "NULL")
{
    tg_tensor *x = NULL;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(sum_of_squares, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck_cuda, "inputs[0]", "a tensor on CUDA rather than the CPU")
{
    tg_tensor *x = tt_fake_cuda(f->tape, bi_randn(f, TG_F32, 1, SHAPE(3)));
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(sum_of_squares, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck_cuda, "rtol", "NaN")
{
    tg_tensor *x = bi_leaf(f, TG_F32, 1, SHAPE(3));
    tg_gradcheck_options options = tg_gradcheck_defaults();
    options.rtol = NAN;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck_cuda(sum_of_squares, &x, 1, NULL, &options, &result));
}

BAD_INPUT(tg_gradcheck, "fn", "a function that fails")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(fails, &x, 1, NULL, NULL, &result));
}

BAD_INPUT(tg_gradcheck, "rtol", "NaN")
{
    tg_tensor *x = f64_leaf(f);
    tg_gradcheck_options options = tg_gradcheck_defaults();
    options.rtol = NAN;
    tg_gradcheck_result result;
    BI_EXPECT_STATUS(f, tg_gradcheck(sum_of_squares, &x, 1, NULL, &options, &result));
}
