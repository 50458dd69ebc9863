#!/usr/bin/env bash
# `gpumem viz -o PAGE` when the page cannot be written whole: a write that fails part way (the file
# size limit, under which write() fails with EFBIG once SIGXFSZ is ignored), and a PAGE that is a
# directory. Each time the tool says why and exits 1, PAGE is as it was before, and nothing is left
# beside it. Then a page written replaces the old one whole, with the permissions fopen would give.
# usage: check_viz_write.sh TOOL TRACE DIR
set -u
tool=$1 trace=$2 dir=$3
status=0
fail() {
  echo "FAILED: $*"
  status=1
}
# Whether the directory holds exactly these names.
holds() {
  local got
  got=$(cd "$dir" && ls -A | tr '\n' ' ')
  [ "$got" = "$* " ] || fail "$dir holds: $got; expected: $*"
}
rm -rf "$dir"
mkdir -p "$dir"
umask 022
printf 'the page before\n' >"$dir/page.html"

out=$( (trap '' XFSZ; ulimit -f 8; exec "$tool" viz "$trace" -o "$dir/page.html") 2>&1)
got=$?
echo "$out"
[ $got -eq 1 ] || fail "exit status $got when the write failed, not 1"
grep -qF "gpumem viz: writing $dir/page.html failed: File too large" <<<"$out" || fail "no reason given"
[ "$(cat "$dir/page.html")" = "the page before" ] || fail "the page before was changed"
holds page.html

mkdir "$dir/sub.html"
out=$("$tool" viz "$trace" -o "$dir/sub.html" 2>&1)
got=$?
echo "$out"
[ $got -eq 1 ] || fail "exit status $got over a directory, not 1"
grep -qF "gpumem viz: writing $dir/sub.html failed: Is a directory" <<<"$out" || fail "no reason given"
holds page.html sub.html

"$tool" viz "$trace" -o "$dir/page.html" || fail "the page was not written"
grep -q '^</html>$' "$dir/page.html" || fail "the page written is not whole"
[ "$(stat -c %a "$dir/page.html")" = 644 ] || fail "the page has mode $(stat -c %a "$dir/page.html"), not 644"
holds page.html sub.html
exit $status
