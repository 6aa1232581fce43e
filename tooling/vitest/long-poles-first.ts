import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The test files that take longest, with their seconds in a whole run on the 2-core CI machine
 * (`CI=true npx -y pnpm@12.4.2 test`, four files at a time, read off its per-file lines). They start first, so the
 * run does not end waiting on a long file that started last; the rest follow in vitest's own
 * order. A file missing here only starts later; `test/long-poles.test.ts` checks each exists.
 */
export const LONG_POLES: Readonly<Record<string, number>> = {
  'packages/adapter-redis/test/cluster.test.ts': 154,
  'packages/adapter-redis/test/sentinel.test.ts': 135,
  'packages/adapter-redis/test/conformance.test.ts': 125,
  'packages/adapter-redlock/test/conformance.test.ts': 122,
  'tooling/readme/test/readme-blocks.test.ts': 122,
  'packages/adapter-embedded/test/conformance.test.ts': 111,
  'packages/adapter-etcd/test/conformance.test.ts': 97,
  'packages/adapter-zookeeper/test/conformance.test.ts': 80,
  'apps/server/test/transcripts-backends.test.ts': 71,
  'packages/adapter-postgres/test/conformance.test.ts': 67,
  'apps/server/test/python-transcripts.test.ts': 66,
  'examples/third-party-adapter/test/conformance.test.ts': 64,
  'apps/server/test/python-client.test.ts': 63,
  'apps/server/test/http-conformance.test.ts': 59,
  'apps/cli/test/lock.test.ts': 58,
  'examples/third-party-adapter/test/memory-backend.test.ts': 57,
  'apps/server/test/transcripts.test.ts': 42,
  'apps/faults/test/timed-rules-campaign.test.ts': 40,
  'apps/ha/test/zookeeper.test.ts': 39,
  'apps/faults/test/negative-control.test.ts': 35,
  'apps/ha/test/etcd.test.ts': 31,
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
