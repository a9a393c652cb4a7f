#!/usr/bin/env bash
# The core's layering, checked from its includes (core/README.md, DESIGN "The core in
# layers"). make test runs it before the suites; it exits 1 on any of:
#   - an include that climbs: a file of core/LAYER includes a folder LAYER may not use
#     (the table below: each folder may include only folders below it);
#   - in core/engine, a file that reads the configuration (includes ../config/) other
#     than the session-level files listed in ENGINE_CONFIG: the step and what serves it
#     take resolved settings (engine/settings.h), never configuration keys;
#   - a circle of includes inside a folder: files x.c/x.h form one unit x; x -> y when
#     x.c or x.h includes y.h; no unit may reach itself;
#   - an include the check cannot place (a quoted path not in its own folder, a layer
#     folder, mpx/ or datasets/), or a core/src/ left behind.
# Only quoted includes are read; <...> are system and library headers.
#   bash tests/check-layers.sh [ROOT]     (default: the repository this script is in)
#   bash tests/check-layers.sh --self-test
#        plants one violation of each kind in a copy of core/ and fails unless each is
#        caught by name (make test runs both)
set -euo pipefail
if [ "${1:-}" = "--self-test" ]; then
    self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    root=$(cd "$(dirname "$0")/.." && pwd)
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    plant() { # FILE LINE-TO-ADD EXPECTED-TEXT
        rm -rf "$tmp/core"; cp -r "$root/core" "$tmp/core"
        printf '%s\n' "$2" >> "$tmp/core/$1"
        if out=$(bash "$self" "$tmp" 2>&1); then echo "check-layers self-test: $1 + '$2' passed the check" >&2; exit 1; fi
        case "$out" in *"$3"*) ;; *) echo "check-layers self-test: $1 + '$2': expected '$3' in: $out" >&2; exit 1 ;; esac
    }
    plant record/notes.c '#include "../cli/cli.h"' 'core/record/notes.c:'
    plant engine/shard.c '#include "session.h"' 'a circle of includes'
    plant engine/train_step.c '#include "../config/config.h"' 'only the session-level files read the configuration'
    plant config/config_load.c '#include "../engine/session.h"' 'core/config/ may not include core/engine/'
    plant analysis/diff.c '#include "../../datasets/squad_reader.h"' 'may include datasets/ only for'
    echo "check-layers self-test: 5 planted violations caught (an upward include, a circle, config read below the session, config reaching up, datasets outside the tasks)"
    exit 0
fi
cd "${1:-$(dirname "$0")/..}"

# folder -> the folders it may include (besides itself and the ABI headers mpx/*.h)
declare -A ALLOW=(
    [cli]="analysis sweep tasks engine config record"
    [sweep]="engine config record"
    [analysis]="engine config record"
    [tasks]="engine config record"
    [engine]="config record"
    [config]=""
    [record]=""
)
# datasets/ (the SQuAD library beside the core): its leaf utilities from any folder, the
# rest from the tasks only
DATASETS_ANY="sha256.h splitmix64.h"
DATASETS_FROM="tasks"
# the engine's files that resolve the configuration for the rest of it
# (session.c reads run.seed; settings.c the rest of what the engine uses; precision_keys the
# precision group over a policy; host.c a plugin's own options, asked for by the plugin)
ENGINE_CONFIG="session.c settings.c precision_keys.c precision_keys.h host.c"

if [ -d core/src ]; then echo "check-layers: core/src/ exists; every core file belongs in a layer folder" >&2; exit 1; fi
layers="${!ALLOW[*]}"
for d in core/*/; do
    d=${d#core/}; d=${d%/}
    [ "$d" = include ] && continue
    case " $layers " in *" $d "*) ;; *) echo "check-layers: core/$d/ is not a layer this check knows (add it to ALLOW)" >&2; exit 1 ;; esac
done

files=$(ls core/{cli,analysis,sweep,tasks,engine,config,record}/*.[ch])
# one line per quoted include: FILE LINE PATH
grep -nH '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $files |
    sed -E 's/^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1 \2 \3/' |
awk -v allow_spec="$(for k in "${!ALLOW[@]}"; do printf '%s=%s;' "$k" "${ALLOW[$k]}"; done)" \
    -v ds_any="$DATASETS_ANY" -v ds_from="$DATASETS_FROM" -v engine_cfg="$ENGINE_CONFIG" '
function base(p,   n, a) { n = split(p, a, "/"); return a[n] }
function unit(p,   b) { b = base(p); sub(/\.[ch]$/, "", b); return b }
function bad(msg) { print "check-layers: " msg > "/dev/stderr"; errors++ }
BEGIN {
    n = split(allow_spec, specs, ";")
    for (i = 1; i <= n; i++) {
        if (specs[i] == "") continue
        split(specs[i], kv, "="); m = split(kv[2], tl, " ")
        for (j = 1; j <= m; j++) ok[kv[1], tl[j]] = 1
    }
    split(ds_any, t, " "); for (i in t) dsany[t[i]] = 1
    split(ds_from, t, " "); for (i in t) dsfrom[t[i]] = 1
    split(engine_cfg, t, " "); for (i in t) ecfg[t[i]] = 1
}
{
    file = $1; line = $2; inc = $3
    split(file, fp, "/"); layer = fp[2]
    where = file ":" line ": #include \"" inc "\""
    if (inc ~ /^mpx\//) next
    if (inc !~ /\//) {                     # its own folder
        if (system("test -f core/" layer "/" inc) != 0) bad(where ": no such file in core/" layer "/")
        else { u = unit(file); v = unit(inc); if (u != v) { edge[layer, u, v] = 1; units[layer, u] = 1; units[layer, v] = 1 } }
        next
    }
    if (inc ~ /^\.\.\/\.\.\/datasets\/[^\/]+$/) {
        if (!(base(inc) in dsany) && !(layer in dsfrom))
            bad(where ": core/" layer "/ may include datasets/ only for " ds_any " (the rest is the tasks layer'"'"'s)")
        next
    }
    if (inc ~ /^\.\.\/[a-z]+\/[^\/]+$/) {
        split(inc, ip, "/"); to = ip[2]
        if (!((layer, to) in ok))
            bad(where ": core/" layer "/ may not include core/" to "/ (an include that climbs; core/README.md lists what each folder may include)")
        else if (layer == "engine" && to == "config" && !(base(file) in ecfg))
            bad(where ": in the engine only the session-level files read the configuration (" engine_cfg "); pass resolved settings instead (engine/settings.h)")
        next
    }
    bad(where ": an include this check cannot place (own folder, ../LAYER/, ../../datasets/ or mpx/ only)")
}
END {
    # circles inside a folder: depth-first search from every unit
    for (k in units) { split(k, p, SUBSEP); ul[p[1]] = ul[p[1]] " " p[2] }
    for (L in ul) {
        nu = split(ul[L], us, " ")
        for (i = 1; i <= nu; i++) {
            start = us[i]; delete seen; sp = 0; stack[++sp] = start; path[start] = start
            while (sp > 0) {
                x = stack[sp--]
                for (j = 1; j <= nu; j++) {
                    y = us[j]
                    if (!((L, x, y) in edge)) continue
                    if (y == start) { if (!(reported[L, start])) { bad("core/" L "/: a circle of includes: " path[x] " -> " start); reported[L, start] = 1 } continue }
                    if (!(y in seen)) { seen[y] = 1; path[y] = path[x] " -> " y; stack[++sp] = y }
                }
            }
        }
    }
    if (errors) { print "check-layers: " errors " problem(s); the rule is in core/README.md" > "/dev/stderr"; exit 1 }
    print "check-layers: core/ includes follow the layers (" NR " includes, no circles)"
}'
