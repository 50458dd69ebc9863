#!/usr/bin/env bash
# gpumem summary of a trace that arrives on a pipe: read once, it prints what it prints for the
# file, however long the text (here over 64 KiB), but for the first line, which names what it read.
# usage: check_summary_pipe.sh GPUMEM TRACE
set -euo pipefail
tool=$1 trace=$2
from_file=$("$tool" summary "$trace" --top 3000)
from_pipe=$(cat "$trace" | "$tool" summary /dev/stdin --top 3000)
if (( ${#from_pipe} <= 65536 )); then
  echo "the summary is ${#from_pipe} bytes, not over 64 KiB: the test proves nothing" >&2
  exit 1
fi
if [[ "${from_pipe#*$'\n'}" != "${from_file#*$'\n'}" ]]; then
  echo "the summary read from a pipe differs from the file's" >&2
  diff <(printf '%s\n' "$from_file") <(printf '%s\n' "$from_pipe") | head -20 >&2
  exit 1
fi
echo "the same ${#from_pipe} bytes from a pipe as from the file"
