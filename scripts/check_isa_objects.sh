#!/usr/bin/env bash
# Build-time check (CMake runs it after compiling the per-ISA kernel files): an object compiled with ISA flags
# above the baseline must not run anything before dispatch has chosen its table, and must not define a symbol
# that baseline code could end up calling. So each such object has
#   - no static initializer (.init_array / .ctors / .preinit_array): its table is constant-initialized;
#   - no global or weak definition outside its own namespace cachet::<isa>:: — an inline function or template
#     instantiated there (std::vector, a header helper) is a weak symbol, and the linker may keep that
#     AVX-512-compiled copy for every caller, baseline code included (SIGILL on an AVX2 CPU).
# Usage: check_isa_objects.sh STAMP OBJECT...   (the namespace is the object's file name: avx2_vnni.cc.o)
set -euo pipefail
stamp="$1"; shift
fail=0
for obj in "$@"; do
  ns="$(basename "$obj")"; ns="${ns%%.*}"
  if readelf -SW "$obj" | grep -qE '\.(init_array|preinit_array|ctors)'; then
    echo "check_isa_objects: $obj has a static initializer (code compiled for $ns would run before dispatch):" >&2
    nm -C "$obj" | grep -iE '_GLOBAL__sub_I|__cxx_global_var_init' >&2 || true
    fail=1
  fi
  bad="$(nm -C --defined-only "$obj" | awk '$2 ~ /^[A-Z]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
         grep -v "^cachet::$ns::" || true)"
  if [ -n "$bad" ]; then
    echo "check_isa_objects: $obj defines symbols outside cachet::$ns:: (the linker may give baseline callers these $ns-compiled copies):" >&2
    echo "$bad" | sed 's/^/  /' >&2
    fail=1
  fi
done
[ "$fail" = 0 ] || exit 1
touch "$stamp"
