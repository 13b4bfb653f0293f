/* io/internal.h: what tests may reach of the checkpoint writer. */
#ifndef TAPEGRAD_IO_INTERNAL_H
#define TAPEGRAD_IO_INTERNAL_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When set, the writer calls it after each chunk it writes into the temporary file, with
 * the bytes written so far and the file's full size. Tests use it to stop or kill a save
 * halfway. NULL (the default) in programs. */
extern void (*tg_checkpoint_write_hook)(const char *temp_path, uint64_t written, uint64_t total);

#ifdef __cplusplus
}
#endif
#endif
