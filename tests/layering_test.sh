#!/usr/bin/env bash
# The layers' arrows over the sources (CMakeLists.txt builds the same rules as
# include views and link checks; this also covers relative includes, headers,
# and code that names a backend without including it):
#  - core (src/ir, trace, transforms, optim, export and their public headers)
#    includes only core headers and names no backend (host::, cuda::, pjrt::,
#    Interpreter);
#  - a backend (src/backend/*) includes no train/, lanes/, nn/, data/ file,
#    none of the tracer's (trace.h, trace/internal.h), no other backend's folder;
#  - nothing above the backends (src/train, lanes, nn, data, tools) includes a
#    backend's private header (src/backend/...);
#  - no source reaches another folder with "../".
# Usage: layering_test.sh SOURCE_DIR. Prints each violation; exit 1 if any.
set -uo pipefail
cd "${1:?source directory}" || exit 2
fail=0
bad() { echo "layering: $*"; fail=1; }

core_dirs=(src/ir src/trace src/transforms src/optim src/export)
core_headers="ir array trace transforms autodiff optim stablehlo files random version"
core_header_files=()
for h in $core_headers; do [[ -f include/capstep/$h.h ]] && core_header_files+=("include/capstep/$h.h"); done
# Public headers that still name a backend, with the reason; empty it when the reason goes.
names_allowed=""   # none: optim.h no longer declares HostAdamW (capstep/host_adamw.h, the host layer)

# "FILE:LINE:TARGET" for every quoted include of the files given.
includes() { grep -HnoE '^\s*#\s*include\s+"[^"]+"' "$@" 2>/dev/null | sed -E 's/#\s*include\s+"([^"]+)"/\1/; s/:\s+/:/'; }
files_in() { find "$@" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) | sort; }

# Core: only core headers, core folders, or a file beside the includer.
core_allowed="^(capstep/($(echo "$core_headers" | tr ' ' '|'))\.h|(ir|trace|transforms|optim|export)/[^/]+|[^/]+)$"
while IFS=: read -r file line target; do
  [[ "$target" =~ $core_allowed ]] || bad "$file:$line: core includes \"$target\" (a layer above core)"
done < <(includes $(files_in "${core_dirs[@]}") "${core_header_files[@]}")

# Core names no backend (comments are not code).
for f in $(files_in "${core_dirs[@]}") "${core_header_files[@]}"; do
  [[ " $names_allowed " == *" $f "* ]] && continue
  sed -E 's://.*$::' "$f" | grep -nE '\b(host|cuda|pjrt)::|namespace +(capstep::)?(host|cuda|pjrt)\b|\bInterpreter\b' |
    while IFS= read -r hit; do echo "layering: $f:${hit%%:*}: core names a backend: ${hit#*:}"; done | grep . && fail=1
done

# Backends: nothing from above, not the tracer, not another backend's folder.
for dir in src/backend/*/; do
  b=$(basename "$dir")
  [[ "$b" == plan ]] && continue   # plan is the backends' shared planning, below them
  while IFS=: read -r file line target; do
    case "$target" in
      train/*|lanes/*|nn/*|data/*|trace/*|capstep/trace.h|capstep/train.h|capstep/train_step.h|capstep/nn.h|capstep/hf.h|capstep/lora.h|capstep/data.h|capstep/safetensors.h|capstep/sft.h|capstep/token_file.h|capstep/checkpoint.h)
        bad "$file:$line: backend $b includes \"$target\" (train, models, data or the tracer)";;
      backend/plan/*|backend/backends.h|backend/$b/*) ;;
      backend/cuda/*) [[ "$b" == cuda_absent ]] || bad "$file:$line: backend $b includes \"$target\" (another backend's folder)";;
      backend/*) bad "$file:$line: backend $b includes \"$target\" (another backend's folder)";;
    esac
  done < <(includes $(files_in "$dir"))
done

# Above the backends: the public API only.
while IFS=: read -r file line target; do
  [[ "$target" == backend/* ]] && bad "$file:$line: includes the backend-private \"$target\" (use the public API: capstep/*.h)"
done < <(includes $(files_in src/train src/lanes src/nn src/data tools))

# No relative escapes.
while IFS=: read -r file line target; do
  [[ "$target" == *../* ]] && bad "$file:$line: includes \"$target\" (a path out of its folder)"
done < <(includes $(files_in src tools include))

[[ $fail == 0 ]] && echo "layering: every arrow points down"
exit $fail
