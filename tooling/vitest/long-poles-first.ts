import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The test files that take longest, with their seconds in a whole run on the 2-core CI machine
 * (`CI=true npx vitest run --reporter=json`, four files at a time). They start first, so the
 * run does not end waiting on a long file that started last; the rest follow in vitest's own
 * order. A file missing here only starts later; `test/long-poles.test.ts` checks each exists.
 */
export const LONG_POLES: Readonly<Record<string, number>> = {
  'apps/cli/test/lock.test.ts': 200,
  'packages/adapter-redis/test/cluster.test.ts': 140,
  'packages/adapter-redis/test/sentinel.test.ts': 120,
  'apps/cli/test/commands.test.ts': 105,
  'packages/adapter-redlock/test/conformance.test.ts': 100,
  'packages/adapter-etcd/test/conformance.test.ts': 95,
  'packages/adapter-embedded/test/conformance.test.ts': 90,
  'packages/adapter-zookeeper/test/conformance.test.ts': 90,
  'packages/adapter-redis/test/conformance.test.ts': 90,
  'apps/cli/test/shared.test.ts': 64,
  'packages/adapter-postgres/test/conformance.test.ts': 57,
};

/** The files of `LONG_POLES` first (longest first), then the others in the order given. */
export function longPolesFirst<T extends { moduleId: string }>(
  files: readonly T[],
  root: string,
): T[] {
  const seconds = (file: T) => LONG_POLES[relative(root, file.moduleId).replaceAll('\\', '/')] ?? 0;
  return files
    .map((file, index) => ({ file, index, seconds: seconds(file) }))
    .sort((a, b) => b.seconds - a.seconds || a.index - b.index)
    .map(({ file }) => file);
}

/** The root config's sequencer: vitest's own order, then `longPolesFirst`. */
export default class LongPolesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    return longPolesFirst(await super.sort(files), this.ctx.config.root);
  }
}
