/* optim/schedule.c: learning-rate schedules as a factor on the base rate, by step.
 *
 * The warm-up starts at 1/W rather than 0 so that the first step already moves the
 * parameters, and reaches 1 at step W − 1. The cosine starts at 1 at step W (its first
 * value equals the warm-up's last) and reaches the floor at step T. */
#include "core/internal.h"
#include "kernels/optim.h"

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
    return tg_schedule_factor_at(s, step); /* the formula the device's steps use too (kernels/optim.h) */
}
