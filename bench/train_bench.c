/* bench/train_bench.c: the time of a whole Mamba training step, as a training program takes
 * it: the batch copied to the device, forward, cross-entropy, backward, clipping at 1.0,
 * AdamW with a warm-up + cosine schedule, the gradients zeroed, the tape reset.
 *
 *   ./train_bench [--device cpu|cuda|auto] [--sizes LIST] [--precision LIST] [--graph LIST]
 *                 [--activations auto|keep|recompute] [--scan-chunk N] [--steps N] [--warmup N]
 *                 [--max-seconds S] [--profile] [--csv PATH]
 *
 * --sizes takes names or "layers,d_model,seq,batch,vocab[,d_state]" tuples (d_state 16 when
 * left out), separated by ';':
 *   induction       2 layers, d_model 64, L 256, B 8, vocab 16 (the Mamba paper's model)
 *   induction-b32   the same at B 32 (train_induction's default batch)
 *   char-small      4, 256, 256, 32, 64
 *   selective-copy  2, 64, 4096, 64, 16 (the paper's length)
 *   130m            24, 768, 2048, 8, 256 (the shape of Mamba-130M, a byte vocabulary)
 *   demo            2, 32, 32, 32, 16 with d_state 8 (the README's demo model)
 * Default: the first five. --precision takes f32 and bf16 (bf16: parameters stored in bf16 with
 * the optimizer's f32 master copy). --graph takes off and on (on: the step captured once as
 * a CUDA graph after a first step run directly, then replayed; CUDA only). --activations sets
 * what the mixers keep of u and delta for the backward (tg_mamba_activations; default auto:
 * recomputed on CUDA, kept on the CPU), --scan-chunk the steps between the scan states kept
 * for the backward (default 64). The model is the
 * training programs' (expand 2, d_conv 4, tied head); the tokens are random,
 * every position scored. The batch is copied into two device tensors made once.
 *
 * Each step is timed on its own (host clock, the device synchronised after the step), after
 * --warmup untimed steps; a case runs --steps steps or stops after --max-seconds. It prints
 * the median and quartiles, tokens per second and the peak of device memory in use (the
 * caching allocator's count: parameters, gradients, optimizer state and the step's
 * activations). --profile (CUDA builds with CUPTI) runs a few more steps under CUPTI and
 * prints where their GPU time goes: kernels by name, launches, copies and host waits. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <tapegrad.h>

#ifdef TG_BENCH_CUPTI
#include "bench/step_profile.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CASES 16
#define MAX_STEPS 1000
#define BATCHES 4 /* host batches the steps rotate over */

typedef struct {
    char name[112];
    int64_t layers, d_model, seq, batch, vocab, d_state;
} model_size;

/* The first DEFAULT_SIZES are the default list. */
static const model_size known_sizes[] = {
    {"induction", 2, 64, 256, 8, 16, 16},    {"induction-b32", 2, 64, 256, 32, 16, 16},
    {"char-small", 4, 256, 256, 32, 64, 16}, {"selective-copy", 2, 64, 4096, 64, 16, 16},
    {"130m", 24, 768, 2048, 8, 256, 16},     {"demo", 2, 32, 32, 32, 16, 8},
};
#define DEFAULT_SIZES 5

typedef struct {
    tg_device device;
    model_size sizes[MAX_CASES];
    int n_sizes;
    tg_dtype precisions[2];
    int n_precisions;
    bool graphs[2];
    int n_graphs;
    tg_mamba_activations activations;
    int scan_chunk;
    int steps, warmup;
    double max_seconds;
    bool profile;
    const char *csv;
} options;

static double seconds_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int usage(const char *message)
{
    fprintf(stderr,
            "train_bench: %s\nusage: train_bench [--device cpu|cuda|auto] [--sizes NAME|L,D,SEQ,B,V;...] "
            "[--precision f32,bf16] [--graph off,on] [--activations auto|keep|recompute] [--scan-chunk N] "
            "[--steps N] [--warmup N] [--max-seconds S] [--profile] [--csv PATH]\n",
            message);
    return 2;
}

static bool parse_size(const char *text, model_size *size)
{
    for (size_t i = 0; i < sizeof known_sizes / sizeof known_sizes[0]; i++)
        if (!strcmp(text, known_sizes[i].name)) {
            *size = known_sizes[i];
            return true;
        }
    long long v[6] = {0, 0, 0, 0, 0, 16};
    int used = 0, fields = sscanf(text, "%lld,%lld,%lld,%lld,%lld%n,%lld%n", &v[0], &v[1], &v[2], &v[3], &v[4], &used,
                                  &v[5], &used);
    if (fields < 5 || text[used]) return false;
    for (int i = 0; i < 6; i++)
        if (v[i] < 1) return false;
    *size = (model_size){"", v[0], v[1], v[2], v[3], v[4], v[5]};
    snprintf(size->name, sizeof size->name, "%.100s", text);
    return true;
}

static int parse_sizes(char *list, options *opt)
{
    opt->n_sizes = 0;
    for (char *item = strtok(list, ";"); item; item = strtok(NULL, ";")) {
        if (opt->n_sizes == MAX_CASES) return usage("too many sizes");
        if (!parse_size(item, &opt->sizes[opt->n_sizes++])) return usage("a size is a name or L,D,SEQ,B,V[,N]");
    }
    return opt->n_sizes ? 0 : usage("--sizes is empty");
}

static int parse_precisions(char *list, options *opt)
{
    opt->n_precisions = 0;
    for (char *item = strtok(list, ","); item; item = strtok(NULL, ","))
        if (!strcmp(item, "f32") && opt->n_precisions < 2)
            opt->precisions[opt->n_precisions++] = TG_F32;
        else if (!strcmp(item, "bf16") && opt->n_precisions < 2)
            opt->precisions[opt->n_precisions++] = TG_BF16;
        else
            return usage("--precision is f32, bf16 or f32,bf16");
    return 0;
}

static int parse_graphs(char *list, options *opt)
{
    opt->n_graphs = 0;
    for (char *item = strtok(list, ","); item; item = strtok(NULL, ","))
        if ((!strcmp(item, "off") || !strcmp(item, "on")) && opt->n_graphs < 2)
            opt->graphs[opt->n_graphs++] = !strcmp(item, "on");
        else
            return usage("--graph is off, on or off,on");
    return 0;
}

static int parse(int argc, char **argv, options *opt)
{
    *opt = (options){.device = TG_DEVICE_AUTO,
                     .precisions = {TG_F32, TG_BF16},
                     .n_precisions = 2,
                     .graphs = {false, true},
                     .n_graphs = 2,
                     .steps = 30,
                     .warmup = 5,
                     .max_seconds = 20};
    for (int i = 0; i < DEFAULT_SIZES; i++) opt->sizes[opt->n_sizes++] = known_sizes[i];
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "--profile")) {
            opt->profile = true;
            continue;
        }
        if (i + 1 >= argc) return usage("every option but --profile takes a value");
        char *value = argv[++i];
        int code = 0;
        if (!strcmp(flag, "--device")) {
            if (!strcmp(value, "cpu"))
                opt->device = TG_DEVICE_CPU;
            else if (!strcmp(value, "cuda"))
                opt->device = TG_DEVICE_CUDA;
            else if (!strcmp(value, "auto"))
                opt->device = TG_DEVICE_AUTO;
            else
                code = usage("--device is cpu, cuda or auto");
        } else if (!strcmp(flag, "--sizes")) {
            code = parse_sizes(value, opt);
        } else if (!strcmp(flag, "--precision")) {
            code = parse_precisions(value, opt);
        } else if (!strcmp(flag, "--graph")) {
            code = parse_graphs(value, opt);
        } else if (!strcmp(flag, "--activations")) {
            if (!strcmp(value, "auto"))
                opt->activations = TG_ACTIVATIONS_AUTO;
            else if (!strcmp(value, "keep"))
                opt->activations = TG_ACTIVATIONS_KEEP;
            else if (!strcmp(value, "recompute"))
                opt->activations = TG_ACTIVATIONS_RECOMPUTE;
            else
                code = usage("--activations is auto, keep or recompute");
        } else if (!strcmp(flag, "--scan-chunk")) {
            char *end;
            long v = strtol(value, &end, 10);
            if (*end || v < 1 || v > 1 << 20)
                code = usage("--scan-chunk is 1..1048576");
            else
                opt->scan_chunk = (int)v;
        } else if (!strcmp(flag, "--steps") || !strcmp(flag, "--warmup")) {
            char *end;
            long v = strtol(value, &end, 10);
            if (*end || v < (flag[2] == 's' ? 1 : 0) || v > MAX_STEPS)
                code = usage("--steps is 1..1000, --warmup 0..1000");
            else
                *(flag[2] == 's' ? &opt->steps : &opt->warmup) = (int)v;
        } else if (!strcmp(flag, "--max-seconds")) {
            char *end;
            opt->max_seconds = strtod(value, &end);
            if (*end || !(opt->max_seconds > 0)) code = usage("--max-seconds is a number > 0");
        } else if (!strcmp(flag, "--csv")) {
            opt->csv = value;
        } else {
            code = usage("unknown option");
        }
        if (code) return code;
    }
    return 0;
}

/* One case: a model, its optimizer and batches, on the device. */
typedef struct {
    tg_device device;
    model_size size;
    tg_dtype dtype;
    bool use_graph;
    tg_params *params;
    tg_mamba *model;
    tg_optim *optim;
    tg_tape *tape;
    int32_t *ids[BATCHES], *targets[BATCHES];
    tg_tensor *ids_t, *targets_t; /* the step's inputs on the device */
    tg_graph *graph;
} bench_case;

static void close_case(bench_case *c)
{
    tg_graph_free(c->graph);
    tg_tensor_free(c->ids_t);
    tg_tensor_free(c->targets_t);
    for (int k = 0; k < BATCHES; k++) free(c->ids[k]), free(c->targets[k]);
    tg_tape_free(c->tape);
    tg_optim_free(c->optim);
    tg_mamba_free(c->model);
    tg_params_free(c->params);
}

/* Random tokens, and as targets each next token (all positions scored). */
static bool make_batches(bench_case *c, tg_rng *rng)
{
    const int64_t tokens = c->size.batch * c->size.seq;
    for (int k = 0; k < BATCHES; k++) {
        c->ids[k] = malloc((size_t)tokens * sizeof(int32_t));
        c->targets[k] = malloc((size_t)tokens * sizeof(int32_t));
        if (!c->ids[k] || !c->targets[k]) return false;
        for (int64_t i = 0; i < tokens; i++) c->ids[k][i] = (int32_t)tg_rng_below(rng, (uint64_t)c->size.vocab);
        for (int64_t i = 0; i < tokens; i++)
            c->targets[k][i] =
                (i + 1) % c->size.seq ? c->ids[k][i + 1] : (int32_t)tg_rng_below(rng, (uint64_t)c->size.vocab);
    }
    return true;
}

static bool open_case(bench_case *c, tg_device device, const model_size *size, tg_dtype dtype, bool use_graph,
                      const options *opt, int total_steps)
{
    *c = (bench_case){.device = device, .size = *size, .dtype = dtype, .use_graph = use_graph};
    const int64_t shape[2] = {size->batch, size->seq};
    tg_rng rng;
    tg_rng_seed(&rng, 1);
    tg_mamba_config config = {.vocab_size = size->vocab,
                              .d_model = size->d_model,
                              .n_layer = size->layers,
                              .d_state = size->d_state,
                              .dtype = dtype,
                              .activations = opt->activations,
                              .scan_chunk = opt->scan_chunk};
    tg_optim_config oc = tg_adamw_config(1e-3);
    oc.weight_decay = 0.1;
    oc.max_grad_norm = 1.0;
    oc.schedule = (tg_schedule){TG_SCHEDULE_COSINE, .warmup_steps = 2, .total_steps = total_steps, .min_factor = 0.1};
    return (c->params = tg_params_create(device)) && (c->model = tg_mamba_create(&config, c->params, &rng)) &&
           (c->optim = tg_optim_create(c->params, &oc)) && (c->tape = tg_tape_create()) && make_batches(c, &rng) &&
           (c->ids_t = tg_tensor_new(TG_I32, device, 2, shape)) &&
           (c->targets_t = tg_tensor_new(TG_I32, device, 2, shape));
}

/* Queues forward, loss, backward, AdamW and the zeroing of the gradients. */
static tg_status queue_step(bench_case *c)
{
    tg_tensor *loss = tg_mamba_loss(c->tape, c->model, c->ids_t, c->targets_t, TG_IGNORE_INDEX);
    tg_status status = loss ? tg_backward(c->tape, loss) : TG_ERR_INVALID;
    if (status == TG_OK) status = tg_optim_step(c->optim, 1);
    if (status == TG_OK) status = tg_params_zero_grad(c->params);
    return status;
}

/* Step k: the batch in, then the step run directly, or replayed (captured at k = 1). */
static tg_status step(bench_case *c, int k)
{
    tg_status status = tg_copy_from_host(c->ids_t, c->ids[k % BATCHES], TG_I32);
    if (status == TG_OK) status = tg_copy_from_host(c->targets_t, c->targets[k % BATCHES], TG_I32);
    if (status == TG_OK && c->use_graph && !c->graph && k >= 1) {
        if ((status = tg_graph_begin(c->device)) != TG_OK) return status;
        status = queue_step(c);
        c->graph = tg_graph_end();
        tg_tape_reset(c->tape);
        if (status == TG_OK && !c->graph) status = TG_ERR_DEVICE;
    }
    if (status != TG_OK) return status;
    if (c->graph) return tg_graph_replay(c->graph);
    status = queue_step(c);
    tg_tape_reset(c->tape);
    return status;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, int n, double p)
{
    double at = p * (n - 1);
    int i = (int)at;
    return i + 1 < n ? sorted[i] + (at - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

typedef struct {
    double median_ms, q1_ms, q3_ms, tokens_per_s, peak_mib;
    int steps;
} case_result;

static bool run_case(const options *opt, bench_case *c, case_result *r)
{
    static double ms[MAX_STEPS];
    int k = 0;
    for (; k < opt->warmup; k++)
        if (step(c, k) != TG_OK) return false;
    tg_synchronize(c->device);
    tg_memory_reset_peak();
    const double start = seconds_now();
    int n = 0;
    while (n < opt->steps && (n < 3 || seconds_now() - start < opt->max_seconds)) {
        double t0 = seconds_now();
        if (step(c, k++) != TG_OK || tg_synchronize(c->device) != TG_OK) return false;
        ms[n++] = 1e3 * (seconds_now() - t0);
    }
    qsort(ms, (size_t)n, sizeof ms[0], compare);
    tg_memory_stats stats = {0};
    tg_memory_stats_get(c->device, &stats);
    *r = (case_result){quantile(ms, n, 0.5),
                       quantile(ms, n, 0.25),
                       quantile(ms, n, 0.75),
                       0,
                       (double)stats.peak_bytes_in_use / (1024.0 * 1024.0),
                       n};
    r->tokens_per_s = (double)(c->size.batch * c->size.seq) / (r->median_ms / 1e3);
    return true;
}

#ifdef TG_BENCH_CUPTI
static bool profile_case(bench_case *c, int first_step)
{
    const int steps = 5;
    char title[128];
    snprintf(title, sizeof title, "%s %s, graph %s", c->size.name, tg_dtype_name(c->dtype), c->graph ? "on" : "off");
    if (!step_profile_start()) return false;
    for (int k = 0; k < steps; k++)
        if (step(c, first_step + k) != TG_OK) return false;
    step_profile_stop();
    step_profile_report(stdout, title, steps, 25);
    return true;
}
#endif

/* Times one case and prints its row (and its profile); false (with a message) on failure. */
static bool run_one(const options *opt, tg_device device, const model_size *size, tg_dtype dtype, bool use_graph,
                    FILE *csv)
{
    bench_case c;
    case_result r;
    const int total = opt->warmup + opt->steps + 10;
    bool ok = open_case(&c, device, size, dtype, use_graph, opt, total) && run_case(opt, &c, &r);
    if (!ok) {
        fprintf(stderr, "train_bench: %s %s graph %s: %s\n", size->name, tg_dtype_name(dtype), use_graph ? "on" : "off",
                tg_last_error());
    } else {
        const char *graph = c.graph ? "on" : "off";
        printf("%-16s %-5s %-5s %10.3f %10.3f %10.3f %12.0f %10.1f\n", size->name, tg_dtype_name(dtype), graph,
               r.median_ms, r.q1_ms, r.q3_ms, r.tokens_per_s, r.peak_mib);
        fflush(stdout);
        if (csv)
            fprintf(csv, "tapegrad,%s,%lld,%lld,%lld,%lld,%lld,%s,%s,%.4f,%.4f,%.4f,%.0f,%.1f,%d\n", size->name,
                    (long long)size->layers, (long long)size->d_model, (long long)size->seq, (long long)size->batch,
                    (long long)size->vocab, tg_dtype_name(dtype), graph, r.median_ms, r.q1_ms, r.q3_ms, r.tokens_per_s,
                    r.peak_mib, r.steps);
#ifdef TG_BENCH_CUPTI
        if (opt->profile) ok = profile_case(&c, opt->warmup + r.steps);
#endif
    }
    close_case(&c);
    tg_memory_empty_cache();
    return ok;
}

int main(int argc, char **argv)
{
    options opt;
    int code = parse(argc, argv, &opt);
    if (code) return code;
    if (opt.device == TG_DEVICE_CUDA && !tg_device_available(TG_DEVICE_CUDA)) {
        fprintf(stderr, "train_bench: --device cuda, but this build or machine has no usable GPU\n");
        return 1;
    }
    const tg_device device = tg_device_resolve(opt.device);
#ifndef TG_BENCH_CUPTI
    if (opt.profile) {
        fprintf(stderr, "train_bench: --profile needs a CUDA build with CUPTI\n");
        return 2;
    }
#endif
    FILE *csv = opt.csv ? fopen(opt.csv, "w") : NULL;
    if (opt.csv && !csv) {
        perror(opt.csv);
        return 1;
    }
    if (csv)
        fprintf(
            csv,
            "impl,size,layers,d_model,seq,batch,vocab,precision,graph,median_ms,q1_ms,q3_ms,tokens_per_s,peak_mib,steps\n");
    static const char *const activation_names[] = {"auto", "recompute", "keep"};
    printf("train_bench on %s: one training step (batch copy, forward, loss, backward, clip, AdamW), ms; "
           "activations %s, scan chunk %d\n",
           tg_device_name(device), activation_names[opt.activations], opt.scan_chunk ? opt.scan_chunk : 64);
    printf("%-16s %-5s %-5s %10s %10s %10s %12s %10s\n", "size", "dtype", "graph", "median", "q1", "q3", "tokens/s",
           "peak MiB");
    int failures = 0;
    for (int s = 0; s < opt.n_sizes; s++)
        for (int p = 0; p < opt.n_precisions; p++)
            for (int g = 0; g < opt.n_graphs; g++)
                if (!opt.graphs[g] || device == TG_DEVICE_CUDA) /* graphs are CUDA's */
                    failures += !run_one(&opt, device, &opt.sizes[s], opt.precisions[p], opt.graphs[g], csv);
    if (csv) fclose(csv);
    return failures ? 1 : 0;
}
