/* optim/schedule.c: learning-rate schedules as a factor on the base rate, by step.
 *
 * The warm-up starts at 1/W rather than 0 so that the first step already moves the
 * parameters, and reaches 1 at step W − 1. The cosine starts at 1 at step W (its first
 * value equals the warm-up's last) and reaches the floor at step T. */
#include "core/internal.h"
#include "tapegrad/optim.h"

#include <math.h>

static bool schedule_valid(const tg_schedule *s)
{
    if (s->kind != TG_SCHEDULE_CONSTANT && s->kind != TG_SCHEDULE_COSINE) return false;
    if (s->warmup_steps < 0) return false;
    if (s->kind == TG_SCHEDULE_CONSTANT) return true;
    return s->total_steps >= s->warmup_steps && s->min_factor >= 0 && s->min_factor <= 1;
}

double tg_schedule_factor(const tg_schedule *s, int64_t step)
{
    if (!s || !schedule_valid(s) || step < 0) return NAN;
    if (step < s->warmup_steps) return (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == TG_SCHEDULE_CONSTANT) return 1.0;
    if (step >= s->total_steps) return s->min_factor;
    double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    return s->min_factor + (1.0 - s->min_factor) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}
