/* examples/train_common.c: flags, the training session, the CSV log, the progress line,
 * checkpoints and evaluation helpers of the training programs (see train_common.h). */
#define _POSIX_C_SOURCE 200809L /* isatty, fileno, clock_gettime */

#include "train_common.h"
#include "train_step.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FLAGS 48
#define MAX_EVAL_COLUMNS 8
#define CLIP_NORM 1.0    /* the global gradient norm is clipped to this */
#define COSINE_FLOOR 0.1 /* the cosine ends at this fraction of --lr */

train_options train_defaults(void)
{
    return (train_options){
        .steps = 1000,
        .batch = 16,
        .seq_len = 128,
        .layers = 2,
        .d_model = 64,
        .d_state = 16,
        .warmup = -1, /* resolved by train_parse: 5% of --steps */
        .seed = 1,
        .lr = 1e-3,
        .weight_decay = 0.0,
        .device = TG_DEVICE_AUTO,
        .ckpt_every = 1000,
        .graph = 1,
    };
}

/* ---- flags ------------------------------------------------------------------------------- */

/* The common flags, pointing into options, followed by the program's own. */
static int all_flags(train_program *program, train_flag *flags)
{
    train_options *o = program->options;
    const double big = 1e15;
    train_flag common[] = {
        {"steps", TRAIN_INT, &o->steps, "N", "training steps (optimizer updates)", 1, big, TRAIN_RESTORED},
        {"batch", TRAIN_INT, &o->batch, "N", "sequences per step", 1, 1 << 20, TRAIN_RESTORED},
        {"seq-len", TRAIN_INT, &o->seq_len, "N", "tokens per training sequence", 2, 1 << 24, TRAIN_RESTORED},
        {"layers", TRAIN_INT, &o->layers, "N", "Mamba layers", 1, 1024, TRAIN_FIXED},
        {"d-model", TRAIN_INT, &o->d_model, "N", "model width (d_inner is twice that)", 1, 1 << 16, TRAIN_FIXED},
        {"d-state", TRAIN_INT, &o->d_state, "N", "state size of the selective scan, per channel", 1, 1024, TRAIN_FIXED},
        {"lr", TRAIN_REAL, &o->lr, "X", "peak learning rate of AdamW", 0, 10, TRAIN_RESTORED},
        {"warmup", TRAIN_INT, &o->warmup, "N", "linear warm-up steps, then the --schedule", -1, big, TRAIN_RESTORED,
         "5% of --steps"},
        {"schedule", TRAIN_CHOICE, &o->schedule, "cosine|constant",
         "after the warm-up: a cosine to 10% of --lr at --steps, or --lr throughout", 0, 0, TRAIN_RESTORED},
        {"weight-decay", TRAIN_REAL, &o->weight_decay, "X", "AdamW's decoupled weight decay", 0, 10, TRAIN_RESTORED},
        {"seed", TRAIN_INT, &o->seed, "N", "seeds the parameters, the data and the evaluation", 0, 1e18,
         TRAIN_RESTORED},
        {"precision", TRAIN_CHOICE, &o->precision, "f32|bf16",
         "parameters and activations in f32, or bf16 (f32 master copy, f32 sums)", 0, 0, TRAIN_FIXED},
        {"graph", TRAIN_CHOICE, &o->graph, "off|on", "on a GPU, replay each step as one CUDA graph", 0, 0,
         TRAIN_RUN_ONLY},
        {"tf32", TRAIN_CHOICE, &o->tf32, "off|on", "on a GPU, f32 matrix products in TF32 (faster, less exact)", 0, 0,
         TRAIN_RUN_ONLY},
        {"device", TRAIN_DEVICE, &o->device, "cpu|cuda|auto", "where to train (auto: the GPU when there is one)", 0, 0,
         TRAIN_RUN_ONLY},
        {"ckpt", TRAIN_TEXT, &o->ckpt, "PATH", "save a checkpoint here every --ckpt-every steps and at the end", 0, 0,
         TRAIN_RUN_ONLY, "none"},
        {"ckpt-every", TRAIN_INT, &o->ckpt_every, "N", "steps between checkpoints", 1, big, TRAIN_RUN_ONLY},
        {"resume", TRAIN_TEXT, &o->resume, "PATH",
         "continue the run saved in this checkpoint (its flags are the defaults)", 0, 0, TRAIN_RUN_ONLY, "none"},
        {"stop-at", TRAIN_INT, &o->stop_at, "N",
         "end this run after step N (saving the checkpoint) as if interrupted; 0: run to --steps", 0, big,
         TRAIN_RUN_ONLY},
        {"eval-every", TRAIN_INT, &o->eval_every, "N", "steps between evaluations (and after the last); 0: at the end",
         0, big, TRAIN_RESTORED},
        {"csv", TRAIN_TEXT, &o->csv, "PATH", "write one CSV row per step here", 0, 0, TRAIN_RUN_ONLY, "none"},
        {"log-every", TRAIN_INT, &o->log_every, "N", "steps between the progress lines that stay on screen", 0, big,
         TRAIN_RUN_ONLY, "1/20 of the run"},
    };
    const int n_common = (int)(sizeof common / sizeof common[0]);
    int n = 0;
    for (int i = 0; i < program->n_flags && i < MAX_FLAGS - n_common; i++) flags[n++] = program->flags[i];
    for (int i = 0; i < n_common; i++) flags[n++] = common[i];
    return n;
}

/* The flag's value as text: exact (to be parsed back) for a checkpoint, short for --help. */
static void print_value(const train_flag *f, bool exact, char *buf, size_t size)
{
    switch (f->kind) {
    case TRAIN_INT: snprintf(buf, size, "%lld", (long long)*(int64_t *)f->value); break;
    case TRAIN_REAL: snprintf(buf, size, exact ? "%.17g" : "%g", *(double *)f->value); break;
    case TRAIN_TEXT: snprintf(buf, size, "%s", *(const char **)f->value ? *(const char **)f->value : ""); break;
    case TRAIN_DEVICE: {
        tg_device d = *(tg_device *)f->value;
        snprintf(buf, size, "%s", d == TG_DEVICE_AUTO ? "auto" : d == TG_DEVICE_CUDA ? "cuda" : "cpu");
        break;
    }
    case TRAIN_CHOICE: { /* the index-th word of "a|b|c" */
        const char *word = f->arg;
        for (int64_t i = *(int64_t *)f->value; i > 0 && strchr(word, '|'); i--) word = strchr(word, '|') + 1;
        size_t length = strchr(word, '|') ? (size_t)(strchr(word, '|') - word) : strlen(word);
        snprintf(buf, size, "%.*s", (int)length, word);
        break;
    }
    }
}

/* The expected form of a flag's value, for messages. */
static void describe_form(const train_flag *f, char *buf, size_t size)
{
    switch (f->kind) {
    case TRAIN_INT:
        if (f->max >= 1e15)
            snprintf(buf, size, "a whole number >= %.0f", f->min);
        else
            snprintf(buf, size, "a whole number from %.0f to %.0f", f->min, f->max);
        break;
    case TRAIN_REAL: snprintf(buf, size, "a number from %g to %g", f->min, f->max); break;
    case TRAIN_TEXT: snprintf(buf, size, "a non-empty value"); break;
    case TRAIN_DEVICE: snprintf(buf, size, "cpu, cuda or auto"); break;
    case TRAIN_CHOICE: snprintf(buf, size, "one of %s", f->arg); break;
    }
}

/* Parses text into the flag's value; false (changing nothing) when it is not of the
 * flag's form. */
static bool parse_value(train_flag *f, const char *text)
{
    char *end;
    errno = 0;
    switch (f->kind) {
    case TRAIN_INT: {
        long long v = strtoll(text, &end, 10);
        if (!*text || *end || errno || (double)v < f->min || (double)v > f->max) return false;
        *(int64_t *)f->value = v;
        return true;
    }
    case TRAIN_REAL: {
        double v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v) || v < f->min || v > f->max) return false;
        *(double *)f->value = v;
        return true;
    }
    case TRAIN_TEXT:
        if (!*text) return false;
        *(const char **)f->value = text;
        return true;
    case TRAIN_DEVICE:
        if (!strcmp(text, "cpu"))
            *(tg_device *)f->value = TG_DEVICE_CPU;
        else if (!strcmp(text, "cuda"))
            *(tg_device *)f->value = TG_DEVICE_CUDA;
        else if (!strcmp(text, "auto"))
            *(tg_device *)f->value = TG_DEVICE_AUTO;
        else
            return false;
        return true;
    case TRAIN_CHOICE: {
        size_t length = strlen(text);
        int64_t index = 0;
        for (const char *word = f->arg; word; word = strchr(word, '|') ? strchr(word, '|') + 1 : NULL, index++)
            if (!strncmp(word, text, length) && (word[length] == '|' || word[length] == '\0')) {
                *(int64_t *)f->value = index;
                return true;
            }
        return false;
    }
    }
    return false;
}

int train_usage_error(const train_program *program, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "%s: ", program->name);
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n(%s --help lists the flags)\n", program->name);
    va_end(args);
    return 2;
}

static int bad_value(const train_program *program, const train_flag *f, const char *text)
{
    char form[96];
    describe_form(f, form, sizeof form);
    return train_usage_error(program, "--%s expects %s, got '%s'", f->name, form, text);
}

static void print_usage(const train_program *program, const train_flag *flags, int n)
{
    printf("usage: %s [flags]\n\n%s\n\nflags (default in brackets):\n", program->name, program->summary);
    for (int i = 0; i < n; i++) {
        char left[64], value[64];
        snprintf(left, sizeof left, "--%s %s", flags[i].name, flags[i].arg);
        print_value(&flags[i], false, value, sizeof value);
        const char *shown = flags[i].default_text ? flags[i].default_text : value;
        printf("  %-26s %s [%s]\n", left, flags[i].help, shown);
        if (i + 1 == program->n_flags) printf("\n"); /* the program's own flags, then the common ones */
    }
    printf("  %-26s %s\n\n", "--help", "print this and exit");
    printf("A checkpoint keeps the flags of its run, which --resume brings back unless given again;\n"
           "all but");
    for (int i = 0, shown = 0; i < n; i++)
        if (flags[i].resume == TRAIN_RUN_ONLY) printf("%s --%s", shown++ ? "," : "", flags[i].name);
    printf(".\n");
    if (program->example) printf("\nexample:\n  %s\n", program->example);
}

static train_flag *find_flag(train_flag *flags, int n, const char *name, size_t length)
{
    for (int i = 0; i < n; i++)
        if (strlen(flags[i].name) == length && !strncmp(flags[i].name, name, length)) return &flags[i];
    return NULL;
}

/* Writes the parsed values back into the program's own table (all_flags works on copies). */
static void keep_given(train_program *program, const train_flag *flags)
{
    for (int i = 0; i < program->n_flags; i++) program->flags[i].given = flags[i].given;
}

static int apply_config(train_program *program, train_flag *flags, int n, const char *path);

int train_parse(train_program *program, int argc, char **argv)
{
    train_flag flags[MAX_FLAGS];
    int n = all_flags(program, flags);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_usage(program, flags, n);
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0)
            return train_usage_error(program, "unexpected argument '%s' (flags start with --)", arg);
        const char *name = arg + 2, *eq = strchr(name, '=');
        train_flag *f = find_flag(flags, n, name, eq ? (size_t)(eq - name) : strlen(name));
        if (!f) return train_usage_error(program, "unknown flag '%s'", arg);
        const char *text = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!text) return train_usage_error(program, "--%s needs a value: --%s %s", f->name, f->name, f->arg);
        if (!parse_value(f, text)) return bad_value(program, f, text);
        f->given = true;
    }
    train_options *o = program->options;
    if (o->device == TG_DEVICE_CUDA && !tg_device_available(TG_DEVICE_CUDA))
        return train_usage_error(program, "--device cuda: this build or machine has no usable GPU (try --device auto)");
    keep_given(program, flags);
    if (o->resume) {
        int code = apply_config(program, flags, n, o->resume);
        if (code != TRAIN_GO) return code;
    }
    if (o->warmup < 0) o->warmup = o->steps / 20;
    if (o->log_every == 0) o->log_every = o->steps >= 20 ? o->steps / 20 : 1;
    return TRAIN_GO;
}

/* ---- the checkpoint's config: {"program": ..., "flags": {"steps": "3000", ...}, ...} ---- */

/* Text flags restored from a checkpoint (a path) point here: they live as long as the
 * program, as the command line's own strings do. */
static char *restored_texts[MAX_FLAGS];

/* Sets every saved flag the command line did not give from the checkpoint's config. */
static int apply_config(train_program *program, train_flag *flags, int n, const char *path)
{
    tg_checkpoint_info info = {0};
    if (tg_checkpoint_read_info(path, &info) != TG_OK)
        return train_usage_error(program, "--resume %s: %s", path, tg_last_error());
    cJSON *config = cJSON_Parse(info.config);
    tg_checkpoint_info_clear(&info);
    const cJSON *saved = cJSON_GetObjectItemCaseSensitive(config, "flags");
    const char *owner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(config, "program"));
    int code = TRAIN_GO;
    if (!owner || !cJSON_IsObject(saved))
        code = train_usage_error(program, "--resume %s: not a checkpoint of a tapegrad training program", path);
    else if (strcmp(owner, program->name) != 0)
        code = train_usage_error(program, "--resume %s: a checkpoint of %s, not of %s", path, owner, program->name);
    for (int i = 0; i < n && code == TRAIN_GO; i++) {
        train_flag *f = &flags[i];
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(saved, f->name));
        if (f->resume == TRAIN_RUN_ONLY || !text) continue;
        char given[64];
        print_value(f, true, given, sizeof given);
        if (!f->given) {
            /* The text is owned by the config, which is freed below: keep a copy. */
            if (f->kind == TRAIN_TEXT) {
                free(restored_texts[i]);
                if (!(text = restored_texts[i] = strdup(text))) code = train_usage_error(program, "out of memory");
            }
            if (code == TRAIN_GO && !parse_value(f, text))
                code = train_usage_error(program, "--resume %s: the saved --%s '%s' is not valid here", path, f->name,
                                         text);
        } else if (f->resume == TRAIN_FIXED && strcmp(given, text) != 0) {
            code = train_usage_error(program,
                                     "--%s %s differs from the checkpoint's %s (%s): a resumed run keeps the "
                                     "model and the task it was saved with",
                                     f->name, given, text, path);
        }
    }
    cJSON_Delete(config);
    return code;
}

int train_apply_checkpoint_config(train_program *program, const char *path)
{
    train_flag flags[MAX_FLAGS];
    int n = all_flags(program, flags);
    for (int i = 0; i < program->n_flags; i++) flags[i].given = program->flags[i].given;
    return apply_config(program, flags, n, path);
}

/* The JSON text saved with every checkpoint: the program, its saved flags as typed, and
 * the model's sizes (for people reading the file). */
static char *config_json(const train_program *program, const train_session *s, int64_t vocab_size)
{
    train_flag flags[MAX_FLAGS];
    int n = all_flags((train_program *)program, flags);
    cJSON *root = cJSON_CreateObject(), *saved = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "program", program->name);
    for (int i = 0; i < n; i++) {
        char text[64];
        print_value(&flags[i], true, text, sizeof text);
        if (flags[i].resume != TRAIN_RUN_ONLY && *text)
            cJSON_AddStringToObject(saved, flags[i].name,
                                    flags[i].kind == TRAIN_TEXT ? *(const char **)flags[i].value : text);
    }
    cJSON_AddItemToObject(root, "flags", saved);
    cJSON_AddNumberToObject(root, "vocab_size", (double)vocab_size);
    cJSON_AddNumberToObject(root, "parameters", (double)tg_params_numel(s->params));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* ---- the session's private state ---------------------------------------------------------- */

struct train_state {
    char *config; /* the checkpoint's config text */
    FILE *csv;
    int n_eval; /* evaluation columns */
    double eval[MAX_EVAL_COLUMNS];
    bool eval_recorded; /* for the step s->step, whose row is not written yet */
    train_stepper *stepper;
    int64_t skipped_seen; /* the optimizer's skipped steps the rows have accounted for */
    double last_rows;     /* train_seconds() when rows were last written */
    /* the step whose row is being written */
    double loss, accuracy, lr, step_seconds;
    /* progress */
    bool tty;        /* stderr is a terminal: one line redrawn in place */
    bool line_shown; /* a progress line is on screen, without its newline */
    char line[256];
    double start, last_draw;
    int64_t first_step; /* s->step when this run started (after --resume) */
    int64_t window_steps, window_tokens;
    double window_loss, window_accuracy, window_seconds;
    int64_t saved_step; /* the step of the last checkpoint written (-1: none) */
    bool quiet;         /* a rank other than 0 under mpirun: no progress, CSV or checkpoints */
};

static int64_t end_step(const train_session *s)
{
    const train_options *o = s->options;
    return o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
}

/* "1:02:03" or "2:03" */
static void format_duration(double seconds, char *buf, size_t size)
{
    long t = seconds > 0 && seconds < 1e9 ? (long)(seconds + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, size, "%ld:%02ld", t / 60, t % 60);
}

double train_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void clear_line(const train_session *s)
{
    if (s->state->tty && s->state->line_shown) {
        fputs("\r\033[K", stderr);
        s->state->line_shown = false;
    }
}

void train_note(const train_session *s, const char *format, ...)
{
    if (s->state->quiet) return;
    bool was_shown = s->state->line_shown;
    clear_line(s);
    va_list args;
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    if (was_shown) { /* put the progress line back */
        fputs(s->state->line, stderr);
        s->state->line_shown = true;
    }
    fflush(stderr);
}

/* ---- opening and closing ---------------------------------------------------------------------- */

/* Reads the CSV of the run being resumed into memory, up to (not including) the first row
 * after step `step`: the rows of steps that the resumed run will take again are dropped
 * (a checkpoint may be older than the file). NULL when there is no such file. */
static char *csv_prefix(const char *path, int64_t step)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *text = NULL, line[4096];
    size_t used = 0, capacity = 0;
    bool header = true;
    while (fgets(line, sizeof line, f)) {
        if (!header && strtoll(line, NULL, 10) > step) break;
        size_t length = strlen(line);
        if (used + length + 1 > capacity) {
            char *grown = realloc(text, capacity = 2 * (used + length + 1));
            if (!grown) break;
            text = grown;
        }
        memcpy(text + used, line, length + 1);
        used += length;
        header = false;
    }
    fclose(f);
    return text;
}

static FILE *open_csv(const train_session *s)
{
    const train_options *o = s->options;
    /* A resumed run continues the file of the run it resumes (when there is one). */
    char *kept = o->resume ? csv_prefix(o->csv, s->step) : NULL;
    FILE *csv = fopen(o->csv, "w");
    if (!csv) {
        fprintf(stderr, "%s: --csv %s: %s\n", s->program->name, o->csv, strerror(errno));
        free(kept);
        return NULL;
    }
    if (kept && *kept) {
        fputs(kept, csv);
    } else {
        fputs("step,loss,accuracy,lr,tokens_per_s,elapsed_s", csv);
        for (int i = 0; i < s->state->n_eval; i++) fprintf(csv, ",%s", s->program->eval_columns[i]);
        fputc('\n', csv);
    }
    free(kept);
    return csv;
}

static tg_optim *create_optimizer(const train_session *s)
{
    const train_options *o = s->options;
    tg_optim_config config = tg_adamw_config(o->lr);
    config.weight_decay = o->weight_decay; /* biases, norms, A_log, D and the embedding never decay */
    config.max_grad_norm = CLIP_NORM;
    config.schedule = (tg_schedule){o->schedule == 1 ? TG_SCHEDULE_CONSTANT : TG_SCHEDULE_COSINE,
                                    .warmup_steps = o->warmup, .total_steps = o->steps, .min_factor = COSINE_FLOOR};
    return tg_optim_create(s->params, &config);
}

static tg_status resume(train_session *s)
{
    tg_checkpoint_info info = {0};
    if (tg_checkpoint_load(s->options->resume, s->params, s->optim, &info) != TG_OK) return TG_ERR_INVALID;
    s->step = info.step;
    s->data_rng = info.rng; /* the batches continue where the saved run left them */
    tg_checkpoint_info_clear(&info);
    return TG_OK;
}

static void print_summary(const train_session *s, int64_t vocab_size)
{
    const train_options *o = s->options;
    if (s->state->quiet) return;
    fprintf(stderr, "%s: Mamba LM, %lld layers, d_model %lld, d_state %lld, vocab %lld: %lld parameters, on %s\n",
            s->program->name, (long long)o->layers, (long long)o->d_model, (long long)o->d_state, (long long)vocab_size,
            (long long)tg_params_numel(s->params), tg_device_name(s->device));
    char after_warmup[64] = "then constant";
    if (o->schedule == 0) snprintf(after_warmup, sizeof after_warmup, "cosine to %g", o->lr * COSINE_FLOOR);
    fprintf(stderr,
            "training: %lld steps of %lld x %lld tokens, AdamW lr %g (warm-up %lld steps, %s), clipping at %g, %s%s\n",
            (long long)o->steps, (long long)o->batch, (long long)o->seq_len, o->lr, (long long)o->warmup, after_warmup,
            CLIP_NORM, o->precision == 1 ? "bf16 (f32 master weights)" : "f32",
            s->device == TG_DEVICE_CUDA && o->graph == 1 ? ", each step one CUDA graph" : "");
    if (o->resume) fprintf(stderr, "resumed from %s at step %lld\n", o->resume, (long long)s->step);
    const int world = tg_dist_world_size(s->dist);
    if (world > 1)
        fprintf(stderr, "data parallel: %d ranks, %lld sequences each per step\n", world, (long long)o->batch / world);
}

/* Joins the launcher's ranks (a world of one without a launcher). Ranks other than 0 print
 * nothing but errors: their stdout goes to /dev/null. */
static tg_status join_ranks(train_session *s)
{
    const train_options *o = s->options;
    if (!(s->dist = tg_dist_init(NULL))) return TG_ERR_STATE;
    const int world = tg_dist_world_size(s->dist);
    if (world == 1) return TG_OK;
    if (s->device == TG_DEVICE_CUDA && !tg_dist_nccl_built())
        return tg_set_error(TG_ERR_DEVICE,
                            "--device cuda: ranks on GPUs need NCCL, which this build has not (or --device cpu)");
    if (o->batch % world != 0)
        return tg_set_error(TG_ERR_INVALID, "--batch %lld: it must split evenly over the %d ranks", (long long)o->batch,
                            world);
    s->state->quiet = tg_dist_rank(s->dist) != 0;
    if (s->state->quiet && !freopen("/dev/null", "w", stdout))
        return tg_set_error(TG_ERR_STATE, "rank %d cannot silence its output", tg_dist_rank(s->dist));
    return TG_OK;
}

train_session *train_open(const train_program *program, int64_t vocab_size)
{
    const train_options *o = program->options;
    train_session *s = calloc(1, sizeof *s);
    struct train_state *st = s ? calloc(1, sizeof *st) : NULL;
    if (!st) {
        free(s);
        fprintf(stderr, "%s: out of memory\n", program->name);
        return NULL;
    }
    *s = (train_session){.program = program, .options = o, .state = st, .device = tg_device_resolve(o->device)};
    if (join_ranks(s) != TG_OK) {
        fprintf(stderr, "%s: %s\n", program->name, tg_last_error());
        train_free(s);
        return NULL;
    }
    tg_matmul_set_tf32(o->tf32 == 1);
    while (program->eval_columns && program->eval_columns[st->n_eval] && st->n_eval < MAX_EVAL_COLUMNS) st->n_eval++;
    st->saved_step = -1;

    /* The parameters and the data come from two generators seeded from --seed, so that
     * changing the model's size does not change the batches. */
    tg_rng init;
    tg_rng_seed(&init, (uint64_t)o->seed);
    tg_rng_seed(&s->data_rng, (uint64_t)o->seed ^ 0x9E3779B97F4A7C15ull);
    tg_mamba_config config = {.vocab_size = vocab_size,
                              .d_model = o->d_model,
                              .n_layer = o->layers,
                              .d_state = o->d_state,
                              .dtype = o->precision == 1 ? TG_BF16 : TG_F32};
    size_t tokens = (size_t)(o->batch * o->seq_len);
    if (!(s->params = tg_params_create(s->device)) || !(s->model = tg_mamba_create(&config, s->params, &init)) ||
        tg_dist_check_params(s->dist, s->params) != TG_OK || tg_dist_broadcast_params(s->dist, s->params) != TG_OK ||
        !(s->optim = create_optimizer(s)) || !(s->tape = tg_tape_create()) ||
        !(st->stepper = train_stepper_create(s, o->graph == 1)) || !(s->inputs = malloc(tokens * sizeof *s->inputs)) ||
        !(s->targets = malloc(tokens * sizeof *s->targets)) || (o->resume && resume(s) != TG_OK) ||
        !(st->config = config_json(program, s, vocab_size))) {
        fprintf(stderr, "%s: %s\n", program->name, tg_last_error()[0] ? tg_last_error() : "out of memory");
        train_free(s);
        return NULL;
    }
    if (o->csv && !st->quiet && !(st->csv = open_csv(s))) {
        train_free(s);
        return NULL;
    }
    print_summary(s, vocab_size);
    st->tty = isatty(fileno(stderr));
    st->start = st->last_draw = st->last_rows = train_seconds();
    st->first_step = s->step;
    return s;
}

void train_free(train_session *s)
{
    if (!s) return;
    if (s->state) {
        if (s->state->csv) fclose(s->state->csv);
        train_stepper_free(s->state->stepper);
        cJSON_free(s->state->config);
        free(s->state);
    }
    free(s->inputs);
    free(s->targets);
    tg_tape_free(s->tape);
    tg_optim_free(s->optim);
    tg_mamba_free(s->model);
    tg_params_free(s->params);
    tg_dist_finalize(s->dist);
    free(s);
}

static tg_status save_checkpoint(train_session *s)
{
    if (s->state->quiet) return TG_OK; /* rank 0 saves for all */
    tg_checkpoint_info info = {.step = s->step, .rng = s->data_rng, .config = s->state->config};
    if (tg_checkpoint_save(s->options->ckpt, s->params, s->optim, &info) != TG_OK) return TG_ERR_INVALID;
    s->state->saved_step = s->step;
    train_note(s, "saved %s at step %lld", s->options->ckpt, (long long)s->step);
    return TG_OK;
}

int train_close(train_session *s)
{
    struct train_state *st = s->state;
    if (s->options->ckpt && st->saved_step != s->step && s->step > st->first_step && save_checkpoint(s) != TG_OK)
        return train_fail(s);
    if (st->line_shown) fputc('\n', stderr); /* keep the last progress line on screen */
    if (st->quiet) {
        train_free(s);
        return 0;
    }
    double elapsed = train_seconds() - st->start;
    char duration[32];
    format_duration(elapsed, duration, sizeof duration);
    int64_t steps = s->step - st->first_step;
    fprintf(stderr, "trained %lld steps in %s (%.1f s)", (long long)steps, duration, elapsed);
    if (s->step < s->options->steps)
        fprintf(stderr, "; stopped at step %lld of %lld (continue with --resume)", (long long)s->step,
                (long long)s->options->steps);
    fprintf(stderr, "\n");
    train_free(s);
    return 0;
}

int train_fail(train_session *s)
{
    const char *name = s ? s->program->name : "train";
    if (s) clear_line(s);
    fprintf(stderr, "%s: %s\n", name, tg_last_error());
    train_free(s);
    return 1;
}

/* ---- a training step ------------------------------------------------------------------------ */

bool train_running(const train_session *s) { return s->step < end_step(s); }

int64_t train_argmax(const float *values, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (values[i] > values[best]) best = i;
    return best;
}

/* The rows of the steps run since rows were last written: waits for the device. */
static tg_status write_rows(train_session *s);

tg_status train_step(train_session *s)
{
    struct train_state *st = s->state;
    if (train_stepper_full(st->stepper) && write_rows(s) != TG_OK) return TG_ERR_INVALID;
    if (train_stepper_step(st->stepper, s->step + 1) != TG_OK) return TG_ERR_INVALID;
    s->step++;
    st->eval_recorded = false;
    return TG_OK;
}

bool train_eval_due(const train_session *s)
{
    int64_t every = s->options->eval_every;
    return (every > 0 && s->step % every == 0) || s->step == s->options->steps;
}

void train_record_eval(train_session *s, const double *values)
{
    struct train_state *st = s->state;
    char text[256] = "";
    size_t used = 0;
    for (int i = 0; i < st->n_eval; i++) {
        st->eval[i] = values[i];
        if (!isnan(values[i]) && used < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s %s %.4f", used ? "," : "",
                                     s->program->eval_columns[i], values[i]);
    }
    st->eval_recorded = true;
    train_note(s, "step %lld:%s", (long long)s->step, text);
}

/* ---- after a step: the CSV row, the progress line, the checkpoint ------------------------------ */

static void write_csv_row(train_session *s, int64_t step)
{
    struct train_state *st = s->state;
    const train_options *o = s->options;
    double tokens_per_s = (double)(o->batch * o->seq_len) / st->step_seconds;
    fprintf(st->csv, "%lld,%.9g,%.9g,%.9g,%.1f,%.3f", (long long)step, st->loss, st->accuracy, st->lr, tokens_per_s,
            train_seconds() - st->start);
    bool with_eval = st->eval_recorded && step == s->step;
    for (int i = 0; i < st->n_eval; i++) {
        if (with_eval && !isnan(st->eval[i]))
            fprintf(st->csv, ",%.9g", st->eval[i]);
        else
            fputc(',', st->csv);
    }
    fputc('\n', st->csv);
    fflush(st->csv); /* complete rows only, so the file can be plotted while the run goes on */
}

/* "step 1200/3000  loss 0.4231  acc 87.5%  42.1k tok/s  1:02 elapsed  ETA 1:33", with the
 * loss, the accuracy and the speed averaged over the steps since the last plain line. */
static void format_progress(const train_session *s, int64_t step)
{
    struct train_state *st = s->state;
    double n = (double)st->window_steps, elapsed = train_seconds() - st->start;
    int64_t done = step - st->first_step, left = end_step(s) - step;
    char elapsed_text[32], eta_text[32];
    format_duration(elapsed, elapsed_text, sizeof elapsed_text);
    format_duration(done ? elapsed / (double)done * (double)left : 0, eta_text, sizeof eta_text);
    double rate = st->window_seconds > 0 ? (double)st->window_tokens / st->window_seconds : 0;
    int used = snprintf(st->line, sizeof st->line, "step %lld/%lld  loss %.4f", (long long)step,
                        (long long)s->options->steps, st->window_loss / n);
    if (!isnan(st->window_accuracy))
        used +=
            snprintf(st->line + used, sizeof st->line - (size_t)used, "  acc %.1f%%", 100 * st->window_accuracy / n);
    snprintf(st->line + used, sizeof st->line - (size_t)used, "  %.1fk tok/s  %s elapsed  ETA %s", rate / 1e3,
             elapsed_text, eta_text);
}

static void show_progress(train_session *s, int64_t step)
{
    struct train_state *st = s->state;
    if (st->quiet) return;
    bool last = step == end_step(s), window_full = step % s->options->log_every == 0;
    double now = train_seconds();
    if (st->tty && (now - st->last_draw > 0.1 || last || window_full)) {
        format_progress(s, step);
        fprintf(stderr, "\r%s\033[K", st->line);
        fflush(stderr);
        st->line_shown = true;
        st->last_draw = now;
    }
    if (!st->tty && (window_full || last)) {
        format_progress(s, step);
        fprintf(stderr, "%s\n", st->line);
        fflush(stderr);
    }
    if (window_full) { /* start a new averaging window (a terminal keeps the line it had) */
        if (st->tty) {
            fputc('\n', stderr);
            st->line_shown = false;
        }
        st->window_steps = st->window_tokens = 0;
        st->window_loss = st->window_accuracy = st->window_seconds = 0;
    }
}

/* The row and the progress of one step whose numbers came back. */
static void record_step(train_session *s, const train_step_numbers *n, double seconds)
{
    struct train_state *st = s->state;
    const train_options *o = s->options;
    const tg_optim_config *c = tg_optim_get_config(s->optim);
    st->loss = n->loss;
    st->accuracy = n->accuracy;
    st->lr = c->lr * tg_schedule_factor(&c->schedule, n->step - 1); /* the rate step n used */
    st->step_seconds = seconds;
    st->window_steps++;
    st->window_tokens += o->batch * o->seq_len;
    st->window_loss += st->loss;
    st->window_accuracy += st->accuracy; /* NaN stays NaN: no accuracy to show */
    st->window_seconds += st->step_seconds;
    if (st->csv) write_csv_row(s, n->step);
    show_progress(s, n->step);
}

static tg_status write_rows(train_session *s)
{
    struct train_state *st = s->state;
    train_step_numbers numbers[64];
    int n = train_stepper_pending(st->stepper);
    if (n == 0) return TG_OK;
    if (n > (int)(sizeof numbers / sizeof numbers[0]))
        return tg_set_error(TG_ERR_STATE, "%s: %d steps wait for their numbers", s->program->name, n);
    tg_status status = train_stepper_flush(st->stepper, numbers);
    if (status != TG_OK) return status;
    int64_t skipped = tg_optim_skipped_steps(s->optim);
    if (skipped != st->skipped_seen) /* on the CPU the step itself fails; on a GPU it shows here */
        return tg_set_error(TG_ERR_STATE,
                            "%s: %lld of steps %lld to %lld changed nothing: the gradient norm was not "
                            "finite (the loss of step %lld is %g)",
                            s->program->name, (long long)(skipped - st->skipped_seen), (long long)numbers[0].step,
                            (long long)numbers[n - 1].step, (long long)numbers[n - 1].step, numbers[n - 1].loss);
    double now = train_seconds(), seconds = (now - st->last_rows) / n; /* the steps ran back to back */
    st->last_rows = now;
    for (int i = 0; i < n; i++) record_step(s, &numbers[i], seconds);
    return TG_OK;
}

tg_status train_end_step(train_session *s)
{
    struct train_state *st = s->state;
    const train_options *o = s->options;
    bool last = s->step == end_step(s), save = o->ckpt && (s->step % o->ckpt_every == 0 || last);
    bool window_full = s->step % o->log_every == 0;
    /* the ranks flush together (the flush sums their numbers): never on a clock's say-so */
    bool redraw = st->tty && tg_dist_world_size(s->dist) == 1 && train_seconds() - st->last_draw > 0.25;
    if ((save || last || window_full || redraw || st->eval_recorded || train_stepper_full(st->stepper)) &&
        write_rows(s) != TG_OK)
        return TG_ERR_STATE;
    return save ? save_checkpoint(s) : TG_OK;
}

/* ---- evaluation -------------------------------------------------------------------------------- */

tg_status train_eval_batch(train_session *s, const int32_t *inputs, const int32_t *targets, int64_t rows, int64_t len,
                           train_eval_sums *sums)
{
    const int64_t shape[2] = {rows, len};
    bool was_enabled = tg_tape_set_grad_enabled(s->tape, false); /* nothing is recorded: no backward */
    tg_tensor *ids = tg_from_data(s->tape, TG_I32, s->device, 2, shape, inputs);
    tg_tensor *y = tg_from_data(s->tape, TG_I32, s->device, 2, shape, targets);
    tg_tensor *logits = ids && y ? tg_mamba_forward(s->tape, s->model, ids, NULL, NULL) : NULL;
    tg_tensor *loss = logits ? tg_cross_entropy(s->tape, logits, y, TG_IGNORE_INDEX) : NULL;
    tg_tensor *hits = loss ? tg_count_correct(s->tape, logits, y, TG_IGNORE_INDEX) : NULL;
    double counts[2] = {0, 0}; /* correct, scored */
    tg_status status = hits ? tg_copy_to_host(hits, counts, TG_F64) : TG_ERR_INVALID;
    if (status == TG_OK) {
        sums->loss_sum += tg_item(loss) * counts[1]; /* the loss is the mean over the scored */
        sums->scored += (int64_t)counts[1];
        sums->correct += (int64_t)counts[0];
    }
    tg_tape_reset(s->tape);
    tg_tape_set_grad_enabled(s->tape, was_enabled);
    return status;
}

tg_status train_evaluate_task(train_session *s, train_task_batch_fn make_batch, const void *task, int64_t rows,
                              double *values)
{
    int64_t batch = s->options->batch, len = s->options->seq_len;
    tg_rng rng;
    tg_rng_seed(&rng, (uint64_t)s->options->seed + 0x5eed);
    train_eval_sums sums = {0};
    for (int64_t done = 0; done < rows; done += batch) {
        int64_t n = rows - done < batch ? rows - done : batch;
        if (make_batch(task, &rng, n, len, s->inputs, s->targets) != TG_OK ||
            train_eval_batch(s, s->inputs, s->targets, n, len, &sums) != TG_OK)
            return TG_ERR_INVALID;
    }
    values[0] = sums.loss_sum / (double)sums.scored;
    values[1] = (double)sums.correct / (double)sums.scored;
    return TG_OK;
}

struct train_stream {
    train_session *s;
    int64_t rows;
    bool started;          /* false: the next piece starts from zero states */
    tg_mamba_state *state; /* per layer, tensors the stream owns (they outlive tape resets) */
    tg_mamba_state *final; /* per layer, the forward's final states (on the tape) */
};

train_stream *train_stream_create(train_session *s, int64_t rows)
{
    train_stream *stream = calloc(1, sizeof *stream);
    if (stream) {
        stream->state = calloc((size_t)s->options->layers, sizeof *stream->state);
        stream->final = calloc((size_t)s->options->layers, sizeof *stream->final);
    }
    if (!stream || !stream->state || !stream->final) {
        if (stream) free(stream->state), free(stream->final);
        free(stream);
        tg_set_error(TG_ERR_NOMEM, "train_stream_create: out of memory");
        return NULL;
    }
    stream->s = s;
    stream->rows = rows;
    return stream;
}

/* dst ← src, allocating dst (outside the tape) the first time. */
static tg_status keep_state(tg_tensor **dst, const tg_tensor *src)
{
    if (!src) return TG_OK;
    if (!*dst && !(*dst = tg_tensor_new(src->dtype, src->device, src->ndim, src->shape))) return TG_ERR_NOMEM;
    return tg_copy(*dst, src);
}

tg_status train_stream_feed(train_stream *stream, const int32_t *ids, int64_t len, float *last_logits)
{
    train_session *s = stream->s;
    int64_t layers = s->options->layers;
    tg_mamba_state *final = stream->final;
    const int64_t shape[2] = {stream->rows, len};
    bool was_enabled = tg_tape_set_grad_enabled(s->tape, false);
    tg_tensor *x = tg_from_data(s->tape, TG_I32, s->device, 2, shape, ids);
    tg_tensor *logits =
        x ? tg_mamba_forward(s->tape, s->model, x, stream->started ? stream->state : NULL, final) : NULL;
    tg_status status = logits ? TG_OK : TG_ERR_INVALID;
    /* The final states live on the tape: copy them out before the reset. */
    for (int64_t i = 0; i < layers && status == TG_OK; i++)
        if ((status = keep_state(&stream->state[i].conv, final[i].conv)) == TG_OK)
            status = keep_state(&stream->state[i].ssm, final[i].ssm);
    if (status == TG_OK && last_logits) {
        tg_tensor *last = tg_slice(s->tape, logits, 1, len - 1, len, 1); /* (rows, 1, V), a view */
        status = last ? tg_copy_to_host(last, last_logits, TG_F32) : TG_ERR_INVALID;
    }
    stream->started = status == TG_OK;
    tg_tape_reset(s->tape);
    tg_tape_set_grad_enabled(s->tape, was_enabled);
    return status;
}

void train_stream_free(train_stream *stream)
{
    if (!stream) return;
    for (int64_t i = 0; i < stream->s->options->layers; i++) {
        tg_tensor_free(stream->state[i].conv);
        tg_tensor_free(stream->state[i].ssm);
    }
    free(stream->state);
    free(stream->final);
    free(stream);
}
