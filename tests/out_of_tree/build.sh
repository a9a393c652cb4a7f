#!/usr/bin/env bash
# Builds the out-of-tree example plugin against an installed mpx, as a user outside this
# repository would: only the installed headers and mpx.pc, found through pkg-config.
#
#   make install PREFIX=/tmp/mpx
#   tests/out_of_tree/build.sh /tmp/mpx /tmp/my-plugins
#   /tmp/mpx/bin/mpx plugins --plugin-dir /tmp/my-plugins
#
# Usage: build.sh PREFIX OUTDIR [SOURCE [NAME]]
#   SOURCE defaults to oot_bf16_kahan.c beside this script, NAME to oot-bf16-kahan;
#   the result is OUTDIR/precision-NAME.so. CC overrides the compiler (default cc).
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 4 ]; then
    echo "usage: $0 PREFIX OUTDIR [SOURCE [NAME]]" >&2
    exit 2
fi
prefix=$1
outdir=$2
here=$(cd "$(dirname "$0")" && pwd)
source=${3:-$here/oot_bf16_kahan.c}
name=${4:-oot-bf16-kahan}

pc="$prefix/lib/pkgconfig/mpx.pc"
[ -f "$pc" ] || { echo "$0: $pc not found: run 'make install PREFIX=$prefix' first" >&2; exit 1; }
[ -f "$source" ] || { echo "$0: $source not found" >&2; exit 1; }
mkdir -p "$outdir"

# mpx.pc gives the include folder, -fPIC -fvisibility=hidden, and -shared with the
# version script that leaves mpx_plugin_entry the only exported symbol.
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs mpx)
# shellcheck disable=SC2086  # flags is a list of words
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror $flags -o "$outdir/precision-$name.so" "$source"
echo "$outdir/precision-$name.so"
