/* bench/mamba_memory.c: the memory one training step of a Mamba LM takes, next to the
 * bytes of activations its backward cannot do without.
 *
 *   ./mamba_memory [--device cpu|cuda|auto] [--layers N] [--batch B] [--seq L]
 *                  [--d-model D] [--vocab V] [--dtype f32|bf16|f64] [--chunk C] [--seed S]
 *
 * Defaults: auto, 2 layers, B = 8, L = 2048, d_model = 768 (d_inner 1536, d_state 16,
 * dt_rank 48), vocab 256, f32, scan chunk 64. It builds the model, runs one forward
 * (loss) and one backward on random tokens, and prints
 *   - the parameters and their gradients;
 *   - what the step allocated (tg_memory_stats_get, less what was in use before the step):
 *     the bytes in use after the forward and the peak over forward + backward. On CUDA
 *     that is the caching allocator; on the CPU, the tape's chunks plus heap blocks (the
 *     gradients of activations live on the heap and are freed during the backward);
 *   - the activation bytes a backward needs, counted below, and the ratio of the two.
 *
 * What the backward needs, per token and per layer (E = d_inner, N = d_state,
 * R = dt_rank, D = d_model; elements of the model's dtype unless said):
 *   h         D      the layer's input (the residual stream): RMSNorm's backward reads it
 *   norm(h)   D      in_proj's input: its weight gradient is Σ dxz·norm(h)ᵀ
 *   xz        2E     x is the conv's input (its backward recomputes the SiLU from x);
 *                    z is the gate, which the scan's backward reads
 *   u         E      silu(conv(x)): x_proj's input and the scan's input
 *   x_dbl     R + 2N dt_low (dt_proj's input), Bm and Cm (the scan's inputs)
 *   delta     E      the scan's input (dt = softplus(delta + bias) is recomputed)
 *   y         E      the gated scan output: out_proj's input
 *   states    E·N/chunk the scan's state at each chunk start (f32, or f64 for f64 models):
 *                    the backward recomputes the states inside a chunk from them
 * That is 2D + 5E + R + 2N elements and E·N/chunk states per token per layer: for D = 768
 * in f32, 9296·4 + 384·4 = 38,720 bytes, about 634 MB per layer at B·L = 16,384 tokens.
 * Once per step: the last residual h and norm_f(h) (D each; the tied head's weight gradient
 * reads norm_f(h)) and the logits (V; the cross-entropy's backward recomputes the softmax
 * from them). Not needed, though the tape keeps them: each mixer's output before the
 * residual add (D), and A = −exp(A_log) (E·N per layer, independent of the tokens).
 * docs/mamba.md explains the count. */
#include <tapegrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    tg_device device;
    int64_t layers, batch, seq, d_model, vocab, chunk;
    tg_dtype dtype;
    uint64_t seed;
} options;

static double seconds_now(void)
{
    struct timespec now;
    timespec_get(&now, TIME_UTC);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int usage(const char *message)
{
    fprintf(stderr,
            "mamba_memory: %s\nusage: mamba_memory [--device cpu|cuda|auto] [--layers N] [--batch B] "
            "[--seq L] [--d-model D] [--vocab V] [--dtype f32|bf16|f64] [--chunk C] [--seed S]\n",
            message);
    return 2;
}

static int parse(int argc, char **argv, options *opt)
{
    *opt = (options){TG_DEVICE_AUTO, 2, 8, 2048, 768, 256, 64, TG_F32, 0};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value) return usage("every option takes a value");
        i++;
        int64_t *number = strcmp(flag, "--layers") == 0    ? &opt->layers
                          : strcmp(flag, "--batch") == 0   ? &opt->batch
                          : strcmp(flag, "--seq") == 0     ? &opt->seq
                          : strcmp(flag, "--d-model") == 0 ? &opt->d_model
                          : strcmp(flag, "--vocab") == 0   ? &opt->vocab
                          : strcmp(flag, "--chunk") == 0   ? &opt->chunk
                                                           : NULL;
        if (number) {
            char *end;
            long long v = strtoll(value, &end, 10);
            if (*end || v < 1) return usage("sizes must be whole numbers ≥ 1");
            *number = v;
        } else if (strcmp(flag, "--seed") == 0) {
            opt->seed = strtoull(value, NULL, 10);
        } else if (strcmp(flag, "--device") == 0) {
            if (strcmp(value, "cpu") == 0)
                opt->device = TG_DEVICE_CPU;
            else if (strcmp(value, "cuda") == 0)
                opt->device = TG_DEVICE_CUDA;
            else if (strcmp(value, "auto") == 0)
                opt->device = TG_DEVICE_AUTO;
            else
                return usage("--device is cpu, cuda or auto");
        } else if (strcmp(flag, "--dtype") == 0) {
            if (strcmp(value, "f32") == 0)
                opt->dtype = TG_F32;
            else if (strcmp(value, "bf16") == 0)
                opt->dtype = TG_BF16;
            else if (strcmp(value, "f64") == 0)
                opt->dtype = TG_F64;
            else
                return usage("--dtype is f32, bf16 or f64");
        } else {
            return usage("unknown option");
        }
    }
    return 0;
}

/* The activation bytes the backward needs (the count in the comment at the top). */
static double needed_bytes(const tg_mamba_config *c, int64_t tokens)
{
    const double D = (double)c->d_model, E = (double)(c->expand * c->d_model), N = (double)c->d_state;
    const double R = (double)c->dt_rank, size = (double)tg_dtype_size(c->dtype);
    const double state_size = c->dtype == TG_F64 ? 8.0 : 4.0;
    const double per_layer = (2 * D + 5 * E + R + 2 * N) * size + E * N / (double)c->scan_chunk * state_size;
    const double once = (2 * D + (double)c->vocab_size) * size;
    return (double)tokens * ((double)c->n_layer * per_layer + once);
}

static double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/* The bytes tapegrad has in use on the device now. On the host, the tape's chunks are
 * counted by the bytes handed out of them, not by their capacity (kept from step to step). */
static double device_in_use(tg_device device, const tg_tape *tape)
{
    tg_memory_stats stats = {0};
    tg_memory_stats_get(device, &stats);
    return (double)stats.bytes_in_use + (device == TG_DEVICE_CPU ? (double)tg_tape_bytes_in_use(tape) : 0.0);
}

static int fail(const char *what)
{
    fprintf(stderr, "mamba_memory: %s: %s\n", what, tg_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    options opt;
    int status = parse(argc, argv, &opt);
    if (status) return status;
    const tg_device device = tg_device_resolve(opt.device);
    if (opt.device == TG_DEVICE_CUDA && !tg_device_available(TG_DEVICE_CUDA)) {
        fprintf(stderr, "mamba_memory: --device cuda, but this build or machine has no usable GPU\n");
        return 1;
    }
    tg_mamba_config config = {.vocab_size = opt.vocab,
                              .d_model = opt.d_model,
                              .n_layer = opt.layers,
                              .dtype = opt.dtype,
                              .scan_chunk = opt.chunk};
    tg_params *params = tg_params_create(device);
    tg_rng rng;
    tg_rng_seed(&rng, opt.seed);
    tg_mamba *model = params ? tg_mamba_create(&config, params, &rng) : NULL;
    if (!model) return fail("building the model");
    const tg_mamba_config *c = &model->config;

    /* Random tokens and next-token targets. */
    const int64_t tokens = opt.batch * opt.seq, shape[2] = {opt.batch, opt.seq};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)tokens), *targets = malloc(sizeof(int32_t) * (size_t)tokens);
    if (!ids || !targets) return fail("host memory for the tokens");
    for (int64_t i = 0; i < tokens; i++) ids[i] = (int32_t)tg_rng_below(&rng, opt.vocab);
    for (int64_t i = 0; i < tokens; i++)
        targets[i] = (i + 1) % opt.seq ? ids[i + 1] : (int32_t)tg_rng_below(&rng, opt.vocab);

    tg_tape *tape = tg_tape_create();
    if (!tape) return fail("tape");
    /* A first step sizes the tape (its chunks grow by doubling during a first step, and the
     * reset merges them into one of the size the step needed); the second is measured. */
    for (int warm = 0; warm < 2; warm++) {
        tg_tape_reset(tape);
        tg_tensor *wx = tg_from_data(tape, TG_I32, device, 2, shape, ids);
        tg_tensor *wy = tg_from_data(tape, TG_I32, device, 2, shape, targets);
        tg_tensor *wloss = wx && wy ? tg_mamba_loss(tape, model, wx, wy, -1) : NULL;
        if (warm == 1) break;
        if (!wloss || tg_backward(tape, wloss) != TG_OK) return fail("warm-up step");
        tg_params_zero_grad(params);
    }
    tg_tape_reset(tape);
    tg_tensor *x = tg_from_data(tape, TG_I32, device, 2, shape, ids);
    tg_tensor *y = tg_from_data(tape, TG_I32, device, 2, shape, targets);
    if (!x || !y) return fail("copying the tokens");
    tg_synchronize(device);
    const double base = device_in_use(device, tape);
    tg_memory_reset_peak();

    double t0 = seconds_now();
    tg_tensor *loss = tg_mamba_loss(tape, model, x, y, -1);
    if (!loss) return fail("forward");
    tg_synchronize(device);
    double t1 = seconds_now();
    const double after_forward = device_in_use(device, tape) - base;
    if (tg_backward(tape, loss) != TG_OK) return fail("backward");
    tg_synchronize(device);
    double t2 = seconds_now();
    tg_memory_stats stats;
    if (tg_memory_stats_get(device, &stats) != TG_OK) return fail("memory statistics");
    /* On the host: the heap's peak plus the arena's, an upper bound on their joint peak. */
    const double peak = device == TG_DEVICE_CPU
                            ? (double)stats.peak_bytes_in_use + (double)tg_tape_peak_bytes(tape) - base
                            : (double)stats.peak_bytes_in_use - base;

    const double param_bytes = (double)tg_params_numel(params) * (double)tg_dtype_size(c->dtype);
    const double needed = needed_bytes(c, tokens);
    printf("Mamba LM on %s, %s: %lld layers, d_model %lld (d_inner %lld, d_state %lld, dt_rank %lld), vocab %lld, "
           "B %lld x L %lld, scan chunk %lld\n",
           tg_device_name(device), tg_dtype_name(c->dtype), (long long)c->n_layer, (long long)c->d_model,
           (long long)(c->expand * c->d_model), (long long)c->d_state, (long long)c->dt_rank, (long long)c->vocab_size,
           (long long)opt.batch, (long long)opt.seq, (long long)c->scan_chunk);
    printf("loss %.5f (log vocab %.5f); forward %.3f s, backward %.3f s\n", tg_item(loss), log((double)opt.vocab),
           t1 - t0, t2 - t1);
    printf("%-44s %12.1f MiB\n", "parameters + their gradients", mib(2 * param_bytes));
    const double once_per_token = (2.0 * (double)c->d_model + (double)c->vocab_size) * (double)tg_dtype_size(c->dtype);
    const bool cuda = device == TG_DEVICE_CUDA;
    printf("%-44s %12.1f MiB  (%.0f bytes per token per layer)\n", "activations the backward needs", mib(needed),
           (needed / (double)tokens - once_per_token) / (double)c->n_layer);
    printf("%-44s %12.1f MiB  (%.2fx the needed)\n",
           cuda ? "in use after the forward (CUDA)" : "in use after the forward (host)", mib(after_forward),
           after_forward / needed);
    printf("%-44s %12.1f MiB  (%.2fx the needed)\n",
           cuda ? "peak over forward + backward (CUDA)" : "peak over forward + backward (host)", mib(peak),
           peak / needed);

    tg_tape_free(tape);
    free(ids);
    free(targets);
    tg_mamba_free(model);
    tg_params_free(params);
    return 0;
}
