#!/usr/bin/env bash
# The fallback test command: every test file in its own Python process, then one verdict. The test command is plain
# `python -m pytest` (worker processes; one process with `-n 0`): the crash that made this runner necessary (a
# segfault in XLA's CPU compiler after ~200 tests: compiled programs' memory mappings passing vm.max_map_count) is
# prevented by tests/conftest.py, which releases each module's compiled programs. Extra pytest arguments are passed
# to every file, e.g.
#   bash tests/run.sh -m "not slow"
set -u
cd "$(dirname "$0")/.."
failed=()
total=0
for f in tests/test_*.py; do
  total=$((total + 1))
  python -m pytest -q -p no:cacheprovider -n 0 "$@" "$f"
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
