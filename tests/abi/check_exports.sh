#!/usr/bin/env bash
# usage: check_exports.sh LIBRARY INCLUDE_DIR VERSION_SCRIPT EXPECTED_SONAME
#
# The ABI is what the dynamic symbol table says, so three lists must agree: the symbols LIBRARY
# defines, the functions INCLUDE_DIR/gpumem/*.h declares with GPUMEM_API, and the names
# VERSION_SCRIPT exports. Also: every export starts with gpumem_, the SONAME is EXPECTED_SONAME, and
# nothing ties the library to the CUDA driver or runtime at link time (the driver is dlopen'ed, so
# the library loads on machines without one). Exits 0 when all hold, 1 otherwise, 77 (skip) when a
# tool it needs is missing.
set -u -o pipefail
set -f  # `local: *;` must stay a star, not become a file list.

if [ $# -ne 4 ]; then
  echo "usage: $0 LIBRARY INCLUDE_DIR VERSION_SCRIPT EXPECTED_SONAME" >&2
  exit 2
fi
lib=$1 include_dir=$2 map=$3 expected_soname=$4

for tool in nm grep sed sort comm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed"
    exit 77
  fi
done
if command -v readelf >/dev/null 2>&1; then
  dynamic() { readelf -d "$lib" | sed -n "s/.*($1).*\[\(.*\)\]\$/\1/p"; }
elif command -v objdump >/dev/null 2>&1; then
  dynamic() { objdump -p "$lib" | sed -n "s/^[[:space:]]*$1[[:space:]]\{1,\}\([^[:space:]]*\)\$/\1/p"; }
else
  echo "SKIP: neither readelf nor objdump is installed"
  exit 77
fi
for f in "$lib" "$map"; do
  [ -r "$f" ] || { echo "FAIL: cannot read $f"; exit 1; }
done
set +f
shopt -s nullglob
headers=("$include_dir"/gpumem/*.h)
shopt -u nullglob
set -f
[ ${#headers[@]} -gt 0 ] || { echo "FAIL: no headers in $include_dir/gpumem"; exit 1; }

failed=0
fail() { echo "FAIL: $*"; failed=1; }
# Prints a title and the names that follow it on stdin, or nothing if there are none.
report() {
  local title=$1 names
  names=$(sed 's/^/    /')
  if [ -n "$names" ]; then
    fail "$title"
    echo "$names"
  fi
}

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# --- The version script: names under global:, and the version nodes -------------------------------
# Comments go first (/* */ across lines, # to the end of a line); then the punctuation becomes
# separate words for a small state machine.
tokens=$(sed -E ':a;N;$!ba; s#/\*([^*]|\*+[^*/])*\*+/# #g' "$map" | sed -E 's/#.*$//' |
         sed -E 's/global[[:space:]]*:/ @global /g; s/local[[:space:]]*:/ @local /g; s/([{};])/ \1 /g')
: >"$tmp/map"
: >"$tmp/nodes"
in_node=0 section="" prev=""
for t in $tokens; do
  case $t in
    "{")
      in_node=1 section=global
      echo "$prev" >>"$tmp/nodes" ;;
    "}") in_node=0 section="" ;;
    @global) section=global ;;
    @local) section=local ;;
    ";") ;;
    *)
      if [ $in_node -eq 1 ] && [ "$section" = global ]; then
        if [[ $t =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
          echo "$t" >>"$tmp/map"
        else
          fail "$map exports '$t', which is a pattern or not a C name; list each function by name"
        fi
      elif [ $in_node -eq 1 ] && [ "$t" != "*" ]; then
        fail "$map has '$t' under local:, where only '*' belongs"
      fi ;;
  esac
  prev=$t
done
sort -u -o "$tmp/map" "$tmp/map"
sort -u -o "$tmp/nodes" "$tmp/nodes"
[ -s "$tmp/nodes" ] || fail "no version node (NAME { ... };) found in $map"

# --- The headers: functions declared with GPUMEM_API ------------------------------------------------
# Comments go first (a comment may mention GPUMEM_API), then preprocessor lines (with their
# continuations: the #define of GPUMEM_API itself), then one declaration per line.
sed -E ':a;N;$!ba; s#/\*([^*]|\*+[^*/])*\*+/# #g' "${headers[@]}" |
  sed -E 's#//.*$##' |
  sed -E ':a;/\\$/{N;s/\\\n//;ba}' |
  grep -v '^[[:space:]]*#' |
  sed -E ':a;N;$!ba; s/\n/ /g' |
  sed -E 's/;/;\n/g' |
  grep -E '(^|[^A-Za-z0-9_])GPUMEM_API([^A-Za-z0-9_]|$)' >"$tmp/api_decls"
sed -E -n 's/^.*GPUMEM_API[^(]*[^A-Za-z0-9_(]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\(.*$/\1/p' \
  "$tmp/api_decls" | sort -u >"$tmp/headers"
# A GPUMEM_API declaration this script cannot name (a variable, say) must not slip through.
grep -v -E 'GPUMEM_API[^(]*[^A-Za-z0-9_(][A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' "$tmp/api_decls" |
  sed -E 's/^[[:space:]]+//' |
  report "GPUMEM_API declarations in $include_dir/gpumem that are not functions this check understands:"

# --- The library: defined dynamic symbols, without the version node and the @@VERSION suffix -------
if ! nm -D --defined-only "$lib" >"$tmp/nm"; then
  echo "FAIL: nm -D --defined-only $lib failed"
  exit 1
fi
: >"$tmp/exports"
: >"$tmp/unknown_versions"
while read -r first second third; do
  if [ -n "$third" ]; then type=$second name=$third; else type=$first name=$second; fi
  [ -n "$name" ] || continue
  # The version node shows up as an absolute symbol of its own.
  if [ "$type" = A ] && grep -qxF -- "$name" "$tmp/nodes"; then continue; fi
  base=${name%%@*}
  if [ "$base" != "$name" ]; then
    version=${name##*@}
    grep -qxF -- "$version" "$tmp/nodes" || echo "$name" >>"$tmp/unknown_versions"
  fi
  echo "$base" >>"$tmp/exports"
done <"$tmp/nm"
sort -u -o "$tmp/exports" "$tmp/exports"

# --- Compare ---------------------------------------------------------------------------------------
# An empty list means a parser above found nothing; that would make every comparison pass.
for list in exports headers map; do
  grep -qx 'gpumem_version_number' "$tmp/$list" ||
    fail "the $list list lacks gpumem_version_number: this check could not parse it"
done

echo "exported by $lib: $(grep -c '' "$tmp/exports"); declared GPUMEM_API: $(grep -c '' "$tmp/headers");" \
     "listed in $map: $(grep -c '' "$tmp/map")"

grep -v '^gpumem_' "$tmp/exports" | report "exported symbols that do not start with gpumem_:"
grep -v '^gpumem_' "$tmp/headers" | report "GPUMEM_API functions that do not start with gpumem_:"
report "exported symbols whose version is not a node of $map:" <"$tmp/unknown_versions"
comm -23 "$tmp/exports" "$tmp/headers" | report "exported by the library but not declared GPUMEM_API in a header:"
comm -13 "$tmp/exports" "$tmp/headers" | report "declared GPUMEM_API in a header but not exported by the library:"
comm -23 "$tmp/exports" "$tmp/map" | report "exported by the library but not listed in $map:"
comm -13 "$tmp/exports" "$tmp/map" | report "listed in $map but not exported by the library:"
comm -23 "$tmp/headers" "$tmp/map" | report "declared GPUMEM_API in a header but not listed in $map:"
comm -13 "$tmp/headers" "$tmp/map" | report "listed in $map but not declared GPUMEM_API in a header:"

# --- SONAME and link-time dependencies --------------------------------------------------------------
soname=$(dynamic SONAME)
if [ "$soname" != "$expected_soname" ]; then
  fail "SONAME is '${soname}', expected '$expected_soname'"
else
  echo "SONAME: $soname"
fi
needed=$(dynamic NEEDED)
echo "NEEDED:" $needed
echo "$needed" | grep -E '^lib(cuda|cudart|nvidia)' |
  report "NEEDED entries for the CUDA driver or runtime (it must be dlopen'ed at run time):"
# An undefined cu*/cuda* symbol would mean a call that bypasses the dlopen'ed driver table.
nm -D --undefined-only "$lib" | sed -E -n 's/^[[:space:]]*[A-Za-z][[:space:]]+((cu|cuda)[A-Z][A-Za-z0-9_]*).*$/\1/p' |
  report "undefined CUDA symbols (calls that bypass the dlopen'ed driver):"

if [ $failed -ne 0 ]; then
  exit 1
fi
echo "OK: the exports, the GPUMEM_API declarations and $map agree"
