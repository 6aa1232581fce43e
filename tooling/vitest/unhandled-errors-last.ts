import type { Reporter, SerializedError } from 'vitest/node';

/**
 * Repeats the run's unhandled errors after the summary, a few lines each. The default reporter
 * prints them above the summary, where a CI log cut to its last lines loses them: the run then
 * fails on "1 error" with nothing that says which. Listed after `default`, so it prints last.
 */
export default class UnhandledErrorsLast implements Reporter {
  onTestRunEnd(_modules: unknown, errors: ReadonlyArray<SerializedError>): void {
    if (errors.length === 0) return;
    const lines = [`\n${errors.length} unhandled error(s) in this run, repeated from above:`];
    for (const error of errors) lines.push(...summaryOf(error));
    console.error(lines.join('\n'));
  }
}

const STACK_LINES = 8;

function summaryOf(error: SerializedError): string[] {
  const extra = error as SerializedError & { VITEST_TEST_PATH?: string; VITEST_TEST_NAME?: string };
  const where = [extra.VITEST_TEST_PATH, extra.VITEST_TEST_NAME].filter(Boolean).join(' > ');
  const stack = (error.stack ?? '')
    .split('\n')
    .filter((line) => line.trimStart().startsWith('at '))
    .slice(0, STACK_LINES);
  return [
    `- ${error.name ?? 'Error'}: ${error.message}`,
    ...(where ? [`  in ${where}`] : []),
    ...stack,
  ];
}
