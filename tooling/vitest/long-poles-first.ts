import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The test files that take longest, with their seconds in a whole run on the 2-core CI machine
 * (`CI=true npx -y pnpm@12.4.2 test`, six files at a time, read off its per-file lines). They start first, so the
 * run does not end waiting on a long file that started last; the rest follow in vitest's own
 * order. A file missing here only starts later; `test/long-poles.test.ts` checks each exists.
 */
export const LONG_POLES: Readonly<Record<string, number>> = {
  'packages/adapter-redis/test/cluster.test.ts': 177,
  'tooling/readme/test/readme-blocks.test.ts': 157,
  'packages/adapter-redis/test/sentinel.test.ts': 146,
  'packages/adapter-redis/test/conformance.test.ts': 137,
  'packages/adapter-redlock/test/conformance.test.ts': 130,
  'packages/adapter-etcd/test/conformance.test.ts': 124,
  'packages/adapter-embedded/test/conformance.test.ts': 120,
  'packages/adapter-zookeeper/test/conformance.test.ts': 96,
  'apps/server/test/transcripts-backends.test.ts': 93,
  'packages/adapter-postgres/test/conformance.test.ts': 89,
  'apps/faults/test/timed-rules-campaign.test.ts': 86,
  'apps/server/test/python-transcripts.test.ts': 84,
  'apps/server/test/python-client.test.ts': 76,
  'examples/third-party-adapter/test/conformance.test.ts': 71,
  'tooling/release/test/install.test.ts': 63,
  'examples/third-party-adapter/test/memory-backend.test.ts': 62,
  'apps/ha/test/zookeeper.test.ts': 61,
  'apps/cli/test/lock.test.ts': 60,
  'apps/server/test/http-conformance.test.ts': 59,
  'apps/ha/test/etcd.test.ts': 57,
  'apps/server/test/transcripts.test.ts': 55,
  'apps/server/test/process.test.ts': 48,
  'apps/faults/test/negative-control.test.ts': 45,
  'apps/server/test/dashboard.test.ts': 41,
  'apps/cli/test/commands.test.ts': 40,
  'apps/ha/test/lb-zookeeper.test.ts': 36,
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
