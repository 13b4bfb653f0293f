/* core/error.c: the thread's last error message, and messages that name tensors. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define TG_ERROR_SIZE 1024

static _Thread_local char last_error[TG_ERROR_SIZE];
static _Thread_local tg_status last_status;

const char *tg_last_error(void) { return last_error; }

tg_status tg_last_status(void) { return last_status; }

void tg_clear_error(void)
{
    last_error[0] = '\0';
    last_status = TG_OK;
}

const char *tg_status_name(tg_status status)
{
    switch (status) {
    case TG_OK: return "ok";
    case TG_ERR_INVALID: return "invalid argument";
    case TG_ERR_DTYPE: return "dtype error";
    case TG_ERR_DEVICE: return "device error";
    case TG_ERR_OVERFLOW: return "size overflow";
    case TG_ERR_NOMEM: return "out of memory";
    case TG_ERR_STATE: return "invalid state";
    }
    return "unknown status";
}

tg_status tg_set_error(tg_status status, const char *format, ...)
{
    last_status = status;
    if (!format) {
        snprintf(last_error, sizeof last_error, "tg_set_error: format is NULL (status %s)", tg_status_name(status));
        return status;
    }
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return status;
}

tg_status tg_error_tensors(tg_status status, int n, const char *const *names, const tg_tensor *const *tensors,
                           const char *format, ...)
{
    last_status = status;
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    size_t used = strlen(last_error);
    for (int i = 0; i < n && used + 1 < sizeof last_error; i++) {
        char description[160];
        tg_describe(tensors[i], description, sizeof description);
        snprintf(last_error + used, sizeof last_error - used, "%s%s: %s", i == 0 ? " (" : ", ", names[i], description);
        used = strlen(last_error);
    }
    if (n > 0 && used + 1 < sizeof last_error) snprintf(last_error + used, sizeof last_error - used, ")");
    return status;
}

tg_status tg_error_no_kernel(const char *op, tg_device device)
{
    return tg_set_error(TG_ERR_DEVICE, "%s: no %s kernel in this build", op, tg_device_name(device));
}
