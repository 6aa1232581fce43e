#!/bin/sh
# `pnpm test` after the lint and the build: the test files, with every package's type check
# (sources and tests, `turbo run typecheck --only`) beside them: the tests leave the cores partly
# idle while they wait on services, so the check (~50 s alone) overlaps them instead of going first.
# Its output comes after the tests' report; the command fails if either fails. Arguments go to
# vitest.
log=$(mktemp)
TURBO_TELEMETRY_DISABLED=1 turbo run typecheck --only --output-logs=errors-only >"$log" 2>&1 &
typecheck=$!
vitest run "$@"
tests=$?
wait "$typecheck"
checked=$?
if [ "$checked" -ne 0 ]; then
  cat "$log"
  echo "the type check failed (turbo run typecheck --only, exit $checked)"
fi
rm -f "$log"
[ "$tests" -ne 0 ] && exit "$tests"
exit "$checked"
