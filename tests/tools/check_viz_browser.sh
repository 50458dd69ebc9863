#!/usr/bin/env bash
# Writes a page with `gpumem viz`, opens it in a real headless browser as PAGE#selftest (the page
# then works itself through DOM events: the wheel and a drag over the peak, hovering over the
# largest band there and clicking it, the lanes, the time axis, the other configuration) and reads
# back the DOM the browser dumps, where the page wrote what it then showed, its canvases' pixels
# among it (so that a page that draws nothing fails its expectations). Each EXPECTED must be in
# it (a fixed text, or an extended regular expression after "re:"), and no error. Exit status 77,
# which CTest counts as a skip, when no Chromium is installed (apt-get install chromium).
# usage: check_viz_browser.sh TOOL PAGE VIZ_ARGUMENT... -- EXPECTED...
set -u
tool=$1 page=$2
shift 2
args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  args+=("$1")
  shift
done
shift
browser=""
for name in chromium chromium-browser google-chrome-stable google-chrome; do
  if command -v "$name" >/dev/null; then
    browser=$name
    break
  fi
done
if [ -z "$browser" ]; then
  echo "no Chromium to test the page in (apt-get install chromium, or scripts/install-deps --test): skipped"
  exit 77
fi
"$tool" viz "${args[@]}" -o "$page" || exit 1
url="file://$(realpath "$page")#selftest"
if ! dom=$(timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
             --window-size=1280,1000 --dump-dom "$url" 2>"$page.browser.log"); then
  echo "$browser failed on $url:"
  cat "$page.browser.log"
  exit 1
fi
# The self-test's lines, as text (the dump escapes <, > and & in them).
selftest=$(printf '%s\n' "$dom" | sed -n '/<pre id="selftest"/,/<\/pre>/p' |
           sed -e 's/<[^>]*>//g' -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&quot;/"/g' -e 's/&amp;/\&/g')
printf '%s\n' "$selftest"
status=0
if ! printf '%s\n' "$selftest" | grep -q '^selftest done$'; then
  echo "FAILED: the self-test did not finish"
  status=1
fi
if printf '%s\n' "$selftest" | grep -q 'selftest error'; then
  echo "FAILED: the self-test reports an error"
  status=1
fi
for want in "$@"; do
  if [ "${want#re:}" != "$want" ]; then
    printf '%s\n' "$selftest" | grep -qE -- "${want#re:}" && continue
  else
    printf '%s\n' "$selftest" | grep -qF -- "$want" && continue
  fi
  echo "FAILED: the page did not show: $want"
  status=1
done
exit $status
