/* The training programs (examples/train_*.c) as a user runs them: their exit codes and
 * messages for bad command lines, --help, the CSV log and the checkpoint of a short run,
 * a run stopped and resumed that repeats the uninterrupted run bit for bit, the
 * extrapolation table of train_induction, and text sampled by train_char, each from a tiny
 * run (a one-layer model of width 8, a few steps); and two runs that must learn the paper's
 * tasks at a CPU's size. Every run is seeded from the test's seed. */
#define _POSIX_C_SOURCE 200809L /* fork, execv, mkdtemp */

#include "test_util.h"

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TG_EXAMPLES_DIR
#define TG_EXAMPLES_DIR "" /* a build without the examples: every test skips */
#endif

enum { MAX_ARGS = 64 };

typedef struct {
    int code;        /* exit code */
    char *out, *err; /* everything written to stdout and stderr */
} run_result;

static char dir[] = "/tmp/tg_examples_XXXXXX";

static void setup(void)
{
    if (!*TG_EXAMPLES_DIR) cr_skip_test("the examples are not built (TG_BUILD_EXAMPLES=OFF)");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp failed");
}

static void teardown(void)
{
    char command[256];
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    if (strncmp(dir, "/tmp/tg_examples_", 17) == 0 && strstr(dir, "XXXXXX") == NULL) (void)!system(command);
}

TestSuite(examples, .init = setup, .fini = teardown, .timeout = 600);

/* A path in the test's directory. */
static char *path(const char *name)
{
    static char paths[16][256];
    static int next;
    char *p = paths[next++ % 16];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *file)
{
    FILE *f = fopen(file, "rb");
    cr_assert_not_null(f, "cannot open %s", file);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc((size_t)size + 1, 1);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    return text;
}

/* Runs an example program with the NULL-terminated arguments; stdout and stderr are
 * captured in files. */
static run_result run(const char *program, ...)
{
    char binary[512];
    snprintf(binary, sizeof binary, "%s/%s", TG_EXAMPLES_DIR, program);
    char *argv[MAX_ARGS] = {binary};
    int argc = 1;
    va_list args;
    va_start(args, program);
    for (char *arg; (arg = va_arg(args, char *)) != NULL && argc < MAX_ARGS - 1;) argv[argc++] = arg;
    va_end(args);
    argv[argc] = NULL;

    char out[300], err[300];
    snprintf(out, sizeof out, "%s/stdout.txt", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", dir);
    fflush(NULL);
    pid_t child = fork();
    cr_assert_geq(child, 0, "fork failed");
    if (child == 0) {
        int fd_out = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fd_err = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd_out < 0 || fd_err < 0 || dup2(fd_out, 1) < 0 || dup2(fd_err, 2) < 0) _exit(126);
        execv(binary, argv);
        _exit(127);
    }
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    if (!WIFEXITED(status)) { /* what it printed before it died is all there is to go on */
        char *printed = slurp(out), *errors = slurp(err);
        size_t n = strlen(printed);
        cr_assert_fail("%s died (signal %d)\nthe end of its stdout:\n%s\nits stderr:\n%s", program,
                       WIFSIGNALED(status) ? WTERMSIG(status) : 0, printed + (n > 2000 ? n - 2000 : 0), errors);
    }
    return (run_result){.code = WEXITSTATUS(status), .out = slurp(out), .err = slurp(err)};
}

static void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

static char *text_of(int64_t value)
{
    static char texts[16][32];
    static int next;
    char *t = texts[next++ % 16];
    snprintf(t, 32, "%lld", (long long)value);
    return t;
}

/* The test's seed, as a --seed value. */
static char *seed_text(void) { return text_of((int64_t)(tt_seed() % 1000000007u)); }

/* A tiny model: one layer of width 8 with 4 states, on the CPU. */
#define TINY "--layers", "1", "--d-model", "8", "--d-state", "4", "--device", "cpu"
/* A tiny selective-copying run. */
#define TINY_COPY TINY, "--batch", "3", "--seq-len", "12", "--copy", "3", "--vocab", "6", "--eval-rows", "5"

/* ---- the command line ---------------------------------------------------------------------- */

Test(examples, help_exits_0_and_lists_the_flags)
{
    const char *programs[] = {"train_selective_copy", "train_induction", "train_char"};
    const char *own_flag[] = {"--copy M", "--eval-max-log2 K", "--sample N"};
    for (int i = 0; i < 3; i++) {
        run_result r = run(programs[i], "--help", NULL);
        cr_assert_eq(r.code, 0, "%s --help exited with %d", programs[i], r.code);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: %s", programs[i]);
        cr_assert(strstr(r.out, usage) && strstr(r.out, "--steps N") && strstr(r.out, "--device cpu|cuda|auto") &&
                      strstr(r.out, "--resume PATH") && strstr(r.out, own_flag[i]),
                  "%s --help printed:\n%s", programs[i], r.out);
        run_free(&r);
    }
}

/* The program exits with 2 and says what is wrong with which flag (every word in `words`). */
static void assert_refused(const char *program, const char *const *args, int n_args, const char *const *words)
{
    char *argv[MAX_ARGS] = {0};
    for (int i = 0; i < n_args; i++) argv[i] = (char *)args[i];
    run_result r = run(program, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], NULL);
    char line[256] = "";
    for (int i = 0; i < n_args; i++) strncat(line, args[i], sizeof line - strlen(line) - 2), strcat(line, " ");
    cr_assert_eq(r.code, 2, "%s %s exited with %d (2 expected); stderr:\n%s", program, line, r.code, r.err);
    for (const char *const *w = words; *w; w++)
        cr_assert(strstr(r.err, *w), "%s %s: the message does not say '%s':\n%s", program, line, *w, r.err);
    cr_assert(strstr(r.err, program), "%s %s: the message does not name the program:\n%s", program, line, r.err);
    run_free(&r);
}

Test(examples, bad_flags_exit_2_with_a_message_naming_the_flag)
{
    char negative[32], too_big[32], word[8] = "";
    snprintf(negative, sizeof negative, "-%lld", (long long)tt_randint(1, 1000000));
    snprintf(too_big, sizeof too_big, "%lld.5", (long long)tt_randint(11, 1000000));
    for (int i = 0; i < 5; i++) word[i] = (char)('a' + tt_randint(0, 25));
    struct {
        const char *program, *args[4], *words[4];
    } cases[] = {
        {"train_selective_copy", {"--steps", word}, {"--steps", "whole number", word}},
        {"train_selective_copy", {"--batch", negative}, {"--batch", negative}},
        {"train_selective_copy", {"--lr", too_big}, {"--lr", "a number from 0 to 10"}},
        {"train_selective_copy", {"--device", word}, {"--device", "cpu, cuda or auto"}},
        {"train_selective_copy", {"--steps"}, {"--steps", "needs a value"}},
        {"train_selective_copy", {"--no-such-flag"}, {"unknown flag", "--no-such-flag"}},
        {"train_selective_copy", {word}, {"unexpected argument", word}},
        {"train_selective_copy", {"--seq-len", "7", "--copy", "4"}, {"--seq-len", "too short"}},
        {"train_induction", {"--eval-max-log2", "23"}, {"--eval-max-log2", "from 5 to 22"}},
        {"train_induction", {"--vocab=2"}, {"--vocab", "from 3"}},
        {"train_char", {"--temperature", negative}, {"--temperature"}},
        {"train_char", {"--sample", "10"}, {"--sample", "checkpoint"}},
        {"train_char", {"--data", path("no-such-file.txt")}, {"--data", "no-such-file.txt"}},
        {"train_char", {"--resume", path("no-such-checkpoint")}, {"--resume", "no-such-checkpoint"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = 0;
        while (n < 4 && cases[i].args[n]) n++;
        const char *words[5] = {0};
        for (int w = 0; w < 4 && cases[i].words[w]; w++) words[w] = cases[i].words[w];
        assert_refused(cases[i].program, cases[i].args, n, words);
    }
}

/* ---- a short run: the CSV and the checkpoint --------------------------------------------------- */

/* The CSV's lines (the header first); *n receives their count. */
static char **csv_lines(const char *file, int *n)
{
    char *text = slurp(file);
    char **lines = calloc(1024, sizeof *lines);
    *n = 0;
    for (char *line = strtok(text, "\n"); line && *n < 1024; line = strtok(NULL, "\n")) lines[(*n)++] = strdup(line);
    free(text);
    return lines;
}

static void csv_free(char **lines, int n)
{
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
}

/* Field i (0-based) of a CSV line, in buf. */
static const char *field(const char *line, int i, char *buf, size_t size)
{
    for (; i > 0 && line; i--) line = strchr(line, ',') ? strchr(line, ',') + 1 : NULL;
    cr_assert_not_null(line, "a CSV line has too few fields");
    size_t length = strcspn(line, ",");
    snprintf(buf, size, "%.*s", (int)(length < size ? length : size - 1), line);
    return buf;
}

/* The line without its tokens_per_s and elapsed_s fields (4 and 5): what must repeat. */
static void deterministic_part(const char *line, char *buf, size_t size)
{
    char f[8][64];
    for (int i = 0; i < 8; i++) field(line, i, f[i], sizeof f[i]);
    snprintf(buf, size, "%s,%s,%s,%s,%s,%s", f[0], f[1], f[2], f[3], f[6], f[7]);
}

Test(examples, a_short_run_writes_its_csv_and_checkpoint)
{
    int64_t steps = tt_randint(3, 7), eval_every = tt_randint(1, 3);
    char *csv = path("run.csv"), *ckpt = path("run.safetensors");
    run_result r = run("train_selective_copy", TINY_COPY, "--steps", text_of(steps), "--seed", seed_text(),
                       "--eval-every", text_of(eval_every), "--csv", csv, "--ckpt", ckpt, NULL);
    cr_assert_eq(r.code, 0, "exit code %d; stderr:\n%s", r.code, r.err);
    cr_assert(strstr(r.out, "held-out accuracy"), "stdout:\n%s", r.out);
    run_free(&r);

    int n;
    char **lines = csv_lines(csv, &n);
    cr_assert_str_eq(lines[0], "step,loss,accuracy,lr,tokens_per_s,elapsed_s,eval_loss,eval_accuracy");
    cr_assert_eq(n, steps + 1, "%d CSV lines for %lld steps", n, (long long)steps);
    for (int i = 1; i < n; i++) {
        char f[8][64];
        for (int j = 0; j < 8; j++) field(lines[i], j, f[j], sizeof f[j]);
        cr_assert_eq(atoll(f[0]), i, "row %d is step %s", i, f[0]);
        double loss = atof(f[1]), accuracy = atof(f[2]), lr = atof(f[3]);
        cr_assert(loss > 0 && loss < 20 && accuracy >= 0 && accuracy <= 1 && lr > 0 && lr <= 1e-2, "row %d: %s", i,
                  lines[i]);
        bool evaluated = i % eval_every == 0 || i == steps;
        cr_assert_eq(f[6][0] != '\0', evaluated, "row %d: eval columns %s present: %s", i, evaluated ? "not" : "",
                     lines[i]);
        if (evaluated) cr_assert(atof(f[6]) > 0 && atof(f[7]) >= 0 && atof(f[7]) <= 1, "row %d: %s", i, lines[i]);
    }
    csv_free(lines, n);

    tg_checkpoint_info info = {0};
    cr_assert_eq(tg_checkpoint_read_info(ckpt, &info), TG_OK, "%s", tg_last_error());
    cr_assert_eq(info.step, steps);
    cr_assert(strstr(info.config, "\"program\":\"train_selective_copy\"") && strstr(info.config, "\"copy\":\"3\""),
              "config: %s", info.config);
    tg_checkpoint_info_clear(&info);
}

/* ---- resuming --------------------------------------------------------------------------------------- */

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out, "cannot copy %s to %s", from, to);
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;) cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* The CSVs agree on every line but for the timing fields. */
static void assert_same_rows(const char *resumed, const char *whole, const char *what)
{
    int n_whole, n_resumed;
    char **w = csv_lines(whole, &n_whole), **r = csv_lines(resumed, &n_resumed);
    cr_assert_eq(n_resumed, n_whole, "%s: the resumed CSV has %d lines, the whole run's %d", what, n_resumed, n_whole);
    cr_assert_str_eq(r[0], w[0]);
    for (int i = 1; i < n_whole; i++) {
        char a_row[512], b_row[512];
        deterministic_part(w[i], a_row, sizeof a_row);
        deterministic_part(r[i], b_row, sizeof b_row);
        cr_assert_str_eq(b_row, a_row, "%s, step %d: resumed %s, whole %s", what, i, b_row, a_row);
    }
    csv_free(w, n_whole);
    csv_free(r, n_resumed);
}

Test(examples, a_resumed_run_repeats_the_uninterrupted_one_bit_for_bit)
{
    int64_t steps = tt_randint(5, 9), stop = tt_randint(2, steps - 2);
    const char *seed = seed_text();
    char *whole = path("whole.csv"), *parts = path("parts.csv"), *ckpt = path("parts.safetensors");
    char *early = path("early.safetensors");
    run_result a = run("train_selective_copy", TINY_COPY, "--steps", text_of(steps), "--seed", seed, "--eval-every",
                       "2", "--csv", whole, NULL);
    cr_assert_eq(a.code, 0, "stderr:\n%s", a.err);
    run_result b = run("train_selective_copy", TINY_COPY, "--steps", text_of(steps), "--seed", seed, "--eval-every",
                       "2", "--csv", parts, "--ckpt", ckpt, "--stop-at", text_of(stop), NULL);
    cr_assert_eq(b.code, 0, "stderr:\n%s", b.err);
    copy_file(ckpt, early);
    /* Only the checkpoint and this run's own flags: the rest comes back from the checkpoint. */
    run_result c = run("train_selective_copy", "--device", "cpu", "--resume", ckpt, "--csv", parts, NULL);
    cr_assert_eq(c.code, 0, "stderr:\n%s", c.err);
    cr_assert(strstr(c.err, "resumed from"), "stderr:\n%s", c.err);
    char what[64];
    snprintf(what, sizeof what, "stopped at %lld of %lld", (long long)stop, (long long)steps);
    assert_same_rows(parts, whole, what);

    /* Resuming the same checkpoint again into the finished CSV: the rows after the
     * checkpoint's step are replaced, not repeated. */
    run_result d = run("train_selective_copy", "--device", "cpu", "--resume", early, "--csv", parts, NULL);
    cr_assert_eq(d.code, 0, "stderr:\n%s", d.err);
    assert_same_rows(parts, whole, "resumed twice from one checkpoint");
    run_free(&a), run_free(&b), run_free(&c), run_free(&d);
}

Test(examples, resuming_refuses_another_model_or_program)
{
    char *ckpt = path("small.safetensors");
    run_result r = run("train_selective_copy", TINY_COPY, "--steps", "2", "--ckpt", ckpt, NULL);
    cr_assert_eq(r.code, 0, "stderr:\n%s", r.err);
    run_free(&r);
    const char *wider[] = {"--resume", ckpt, "--d-model", "16"};
    assert_refused("train_selective_copy", wider, 4, (const char *const[]){"--d-model 16", "checkpoint's 8", NULL});
    const char *other[] = {"--resume", ckpt};
    assert_refused("train_induction", other, 2,
                   (const char *const[]){"a checkpoint of train_selective_copy", "not of train_induction", NULL});
}

/* ---- the learning-rate schedule --------------------------------------------------------------------- */

/* The lr column of a run's CSV, rates[1 .. steps]. */
static void csv_rates(const char *csv, int64_t steps, double *rates)
{
    int n;
    char **lines = csv_lines(csv, &n);
    cr_assert_eq(n, steps + 1, "%d CSV lines for %lld steps", n, (long long)steps);
    for (int i = 1; i < n; i++) {
        char f[64];
        field(lines[i], 3, f, sizeof f);
        rates[i] = atof(f);
    }
    csv_free(lines, n);
}

Test(examples, a_constant_schedule_holds_the_rate_after_the_warm_up_and_resumes_so)
{
    enum { MAX_STEPS = 16 };
    const int64_t steps = tt_randint(8, MAX_STEPS), warmup = tt_randint(1, 4), stop = tt_randint(warmup + 1, steps - 2);
    const double lr = 1e-3 * (double)tt_randint(1, 9);
    char lr_text[32], *csv = path("constant.csv"), *cosine_csv = path("cosine.csv"),
                      *ckpt = path("constant.safetensors");
    snprintf(lr_text, sizeof lr_text, "%g", lr);
    run_result a =
        run("train_selective_copy", TINY_COPY, "--steps", text_of(steps), "--warmup", text_of(warmup), "--lr", lr_text,
            "--schedule", "constant", "--stop-at", text_of(stop), "--csv", csv, "--ckpt", ckpt, NULL);
    cr_assert_eq(a.code, 0, "stderr:\n%s", a.err);
    cr_assert(strstr(a.err, "then constant"), "stderr:\n%s", a.err);
    /* The rest of the run: the checkpoint brings the schedule back. */
    run_result b = run("train_selective_copy", "--device", "cpu", "--resume", ckpt, "--csv", csv, NULL);
    cr_assert_eq(b.code, 0, "stderr:\n%s", b.err);
    run_result c = run("train_selective_copy", TINY_COPY, "--steps", text_of(steps), "--warmup", text_of(warmup),
                       "--lr", lr_text, "--csv", cosine_csv, NULL);
    cr_assert_eq(c.code, 0, "stderr:\n%s", c.err);
    run_free(&a), run_free(&b), run_free(&c);

    double constant[MAX_STEPS + 1], cosine[MAX_STEPS + 1];
    csv_rates(csv, steps, constant);
    csv_rates(cosine_csv, steps, cosine);
    /* The CSV prints 9 significant digits: a millionth of lr is far above their rounding and
     * far below the gaps between the schedules. */
    for (int64_t i = 1; i <= steps; i++) {
        const double expected = i <= warmup ? lr * (double)i / (double)warmup : lr;
        cr_assert_float_eq(constant[i], expected, 1e-6 * lr, "step %lld of %lld (warm-up %lld): lr %.9g, not %.9g",
                           (long long)i, (long long)steps, (long long)warmup, constant[i], expected);
        /* The cosine of docs/training.md at schedule index i − 1, from 1 down to 10% at --steps. */
        const double half_turns = (double)(i - 1 - warmup) / (double)(steps - warmup);
        const double cosine_expected =
            i <= warmup ? expected : lr * (0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * half_turns)));
        cr_assert_float_eq(cosine[i], cosine_expected, 1e-6 * lr,
                           "step %lld of %lld (warm-up %lld): cosine lr %.9g, not %.9g", (long long)i, (long long)steps,
                           (long long)warmup, cosine[i], cosine_expected);
    }
}

/* ---- train_induction's table ------------------------------------------------------------------------ */

Test(examples, induction_prints_the_extrapolation_table)
{
    /* Up to 2^11: the longest lengths are fed in pieces of 1024 steps that hand the state on. */
    run_result r = run("train_induction", TINY, "--steps", "2", "--batch", "2", "--seq-len", "64", "--eval-rows", "4",
                       "--eval-max-log2", "11", "--eval-samples", "3", "--seed", seed_text(), NULL);
    cr_assert_eq(r.code, 0, "stderr:\n%s", r.err);
    const char *header = "| Model | Params | 2^6 | 2^7 | 2^8 | 2^9 | 2^10 | 2^11 |";
    cr_assert(strstr(r.out, header) && strstr(r.out, "| Mamba |"), "stdout:\n%s", r.out);
    /* Every cell is a check mark or a percentage that 3 samples can give. */
    const char *cell = strstr(r.out, "| Mamba |") + strlen("| Mamba |");
    cell = strchr(cell, '|') + 1; /* past the parameter count */
    for (int i = 0; i < 6; i++) {
        char text[32];
        cr_assert_eq(sscanf(cell, " %31s |", text), 1, "row: %s", strstr(r.out, "| Mamba |"));
        double v = atof(text);
        cr_assert(!strcmp(text, "\u2713") || fabs(v * 3 / 100 - round(v * 3 / 100)) < 0.01, "cell %d: %s", i, text);
        cell = strchr(cell, '|') + 1;
    }
    cr_assert(strstr(r.out, "sequences scored per length: 3 3 3 3 3 3"), "stdout:\n%s", r.out);
    run_free(&r);
}

/* ---- training quality: the paper's two tasks at a CPU's size ------------------------------------------- */

/* The accuracy (percent) in the line of stdout that starts with `label`, or -1. */
static double percent_after(const char *out, const char *label)
{
    const char *at = strstr(out, label);
    double value;
    return at && sscanf(at + strlen(label), " %lf", &value) == 1 ? value : -1.0;
}

/* Selective Copying at the README demo's size (4 data tokens among 24 of noise), trained a
 * little longer than the demo and with a longer warm-up (500 steps, not 5%): 95% of
 * held-out tokens copied, whatever the seed, and the same figure in the table beside the
 * paper's. With the default 125-step warm-up about one seed in twenty stalls near 35% (the
 * early steps at the full rate); with 500, twelve seeds, that one among them, all reached
 * 99.9-100% by step 1500 and 100% by 2500 (20-35 s on two cores). A regression in training quality fails
 * here. Not in the sanitizer build, where it would take many minutes. */
Test(examples, selective_copying_is_learned_at_cpu_size, .timeout = 300)
{
#ifdef TG_SANITIZED
    cr_skip_test("a training run: release builds only");
#endif
    run_result r = run("train_selective_copy", "--device", "cpu", "--steps", "2500", "--warmup", "500", "--eval-every",
                       "0", "--seed", seed_text(), NULL);
    cr_assert_eq(r.code, 0, "stderr:\n%s", r.err);
    const double accuracy = percent_after(r.out, "held-out accuracy");
    cr_assert_geq(accuracy, 95.0, "held-out accuracy %.2f%% (seed %s)\n%s", accuracy, seed_text(), r.out);
    char row[96]; /* the same result in the table beside the paper's */
    snprintf(row, sizeof row, "| 24 | 4 | %.2f |", accuracy);
    cr_assert(strstr(r.out, "| Mamba (this run) |") && strstr(r.out, row) && strstr(r.out, "| 4096 | 16 | 99.8 |"),
              "no table row ending %s beside the paper's:\n%s", row, r.out);
    run_free(&r);
}

/* Induction Heads trained at 64 tokens with a small model (width 32, 8 states): 95% at the
 * training length and at 2 and 4 times it, whatever the seed (seeds 1-8 reached 100% at all
 * three in 2000 steps at lr 3e-3, 40-70 s on two cores; at lr 5e-3 seed 7 stuck at 60%, and
 * with 1000 steps three of seven seeds stayed below 95%). */
Test(examples, induction_heads_are_learned_at_cpu_size, .timeout = 300)
{
#ifdef TG_SANITIZED
    cr_skip_test("a training run: release builds only");
#endif
    run_result r =
        run("train_induction", "--device", "cpu", "--seq-len", "64", "--d-model", "32", "--d-state", "8", "--steps",
            "2000", "--lr", "0.003", "--eval-every", "0", "--eval-max-log2", "8", "--seed", seed_text(), NULL);
    cr_assert_eq(r.code, 0, "stderr:\n%s", r.err);
    const char *row = strstr(r.out, "| Mamba |");
    cr_assert(row, "stdout:\n%s", r.out);
    const char *cell = strchr(row + strlen("| Mamba |"), '|') + 1; /* past the parameter count */
    for (int k = 6; k <= 8; k++) {
        char text[32];
        cr_assert_eq(sscanf(cell, " %31s |", text), 1, "row: %s", row);
        const double accuracy = strcmp(text, "\u2713") ? atof(text) : 100.0;
        cr_assert_geq(accuracy, 95.0, "accuracy %s%% at length 2^%d (seed %s)\n%s", text, k, seed_text(), r.out);
        cell = strchr(cell, '|') + 1;
    }
    run_free(&r);
}

/* ---- train_char --sample ------------------------------------------------------------------------------ */

Test(examples, char_samples_from_a_checkpoint)
{
    /* A small text of random words over a few letters. */
    const char alphabet[] = "abcdef";
    char *text_path = path("words.txt"), *ckpt = path("char.safetensors");
    FILE *f = fopen(text_path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 400; i++) fputc(i % 7 == 6 ? (i % 49 == 48 ? '\n' : ' ') : alphabet[tt_randint(0, 5)], f);
    fclose(f);
    run_result t = run("train_char", TINY, "--data", text_path, "--steps", "3", "--batch", "2", "--seq-len", "16",
                       "--ckpt", ckpt, "--seed", seed_text(), NULL);
    cr_assert_eq(t.code, 0, "stderr:\n%s", t.err);
    cr_assert(strstr(t.out, "held-out loss"), "stdout:\n%s", t.out);
    run_free(&t);

    int64_t n = tt_randint(20, 60);
    run_result s1 = run("train_char", "--resume", ckpt, "--sample", text_of(n), "--temperature", "0.9", NULL);
    run_result s2 = run("train_char", "--resume", ckpt, "--sample", text_of(n), "--temperature", "0.9", NULL);
    run_result g =
        run("train_char", "--ckpt", ckpt, "--sample", text_of(n), "--temperature", "0", "--prompt", "ab", NULL);
    cr_assert(s1.code == 0 && s2.code == 0 && g.code == 0, "stderr:\n%s\n%s\n%s", s1.err, s2.err, g.err);
    cr_assert_str_eq(s1.out, s2.out, "one seed, two samples");
    /* The sample: a newline it started after is not printed; n characters of the text's alphabet, then a newline. */
    size_t length = strlen(s1.out);
    cr_assert_eq((int64_t)length, n + 1, "sample of %lld characters: '%s'", (long long)n, s1.out);
    cr_assert_eq(strspn(s1.out, "abcdef \n"), length, "a character not in the text: '%s'", s1.out);
    cr_assert(strncmp(g.out, "ab", 2) == 0 && (int64_t)strlen(g.out) == n + 3, "greedy sample: '%s'", g.out);
    run_free(&s1), run_free(&s2), run_free(&g);
}
