#!/usr/bin/env bash
# Installs the built library into a scratch prefix, then builds and runs a program
# outside the tree with nothing but `cc prog.c $(pkg-config --define-prefix --cflags --libs tapegrad)`.
set -euo pipefail
build_dir=$1
work_dir=$2
rm -rf "$work_dir"
mkdir -p "$work_dir"
cmake --install "$build_dir" --prefix "$work_dir/prefix" > "$work_dir/install.log"
pc_dir=$(dirname "$(find "$work_dir/prefix" -name tapegrad.pc | head -n 1)")
lib_dir=$(dirname "$(find "$work_dir/prefix" -name 'libtapegrad.so' | head -n 1)")
cat > "$work_dir/prog.c" <<'PROG'
#include <tapegrad.h>
#include <stdio.h>

int main(void)
{
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tg_full(tape, TG_F64, TG_DEVICE_CPU, 1, (int64_t[]){3}, 2.0);
    tg_set_requires_grad(x, true);
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, x, x)); /* Σ x², gradient 2x */
    if (!loss || tg_backward(tape, loss) != TG_OK) {
        fprintf(stderr, "%s\n", tg_last_error());
        return 1;
    }
    int ok = tg_item(loss) == 12.0 && tg_get_flat(x->grad, 2) == 4.0;
    printf("loss %g, grad %g: %s\n", tg_item(loss), tg_get_flat(x->grad, 2), ok ? "ok" : "WRONG");
    tg_tape_free(tape);
    return ok ? 0 : 1;
}
PROG
export PKG_CONFIG_PATH="$pc_dir"
cd "$work_dir"
# Shared library
cc prog.c $(pkg-config --define-prefix --cflags --libs tapegrad) -o prog_shared
LD_LIBRARY_PATH="$lib_dir" ./prog_shared
# Static library
cc prog.c -static-libgcc $(pkg-config --define-prefix --cflags tapegrad) "$lib_dir/libtapegrad.a" $(pkg-config --define-prefix --static --libs-only-l --libs-only-L tapegrad | sed 's/-ltapegrad//') -o prog_static
./prog_static
