#!/usr/bin/env bash
# The test command: every test file in its own Python process, then one verdict.
# Why separate processes: with this session's additions, one full-suite process crashed twice at the same place
# with a segfault inside XLA's CPU compiler (tests/test_select.py, after ~200 other tests had compiled in the same
# process); every file passes on its own. Extra pytest arguments are passed to every file, e.g.
#   bash tests/run.sh -m "not slow"
set -u
cd "$(dirname "$0")/.."
failed=()
total=0
for f in tests/test_*.py; do
  total=$((total + 1))
  python -m pytest -q -p no:cacheprovider "$@" "$f"
  rc=$?
  # Exit 5 (no tests collected) is a failure, unless the caller deselected tests (then a file may have none left).
  if [ "$rc" -ne 0 ] && ! { [ "$rc" -eq 5 ] && [ "$#" -gt 0 ]; }; then
    failed+=("$f (exit $rc)")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "FAILED ${#failed[@]} of $total test files: ${failed[*]}"
  exit 1
fi
echo "all $total test files passed"
