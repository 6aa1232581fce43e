import { UsageError } from '@dlm/flags';
import { defineKind, redact, whenReady } from '../backend-kind.js';
import { listSetting } from '../config-sources.js';

/** `--backend postgres`: `postgres://user[:password]@host[:port]/database`. */
export const postgres = defineKind('postgres', {
  flags: { 'postgres-url': 'string' },
  help: '  --postgres-url URL       postgres: e.g. postgres://dlm@127.0.0.1:5432/dlm (DLM_POSTGRES_URL)',
  parse(from) {
    const url = listSetting(from, 'postgres-url')[0]!;
    if (!/^postgres(ql)?:\/\//.test(url))
      throw new UsageError(`--postgres-url must be a postgres:// URL, got ${url}`);
    return { url };
  },
  async open(config, { clock }) {
    const { postgresBackend } = await import('@dlm/adapter-postgres');
    // The schema and the LISTEN connection; until they are there requests wait or fail.
    return whenReady(postgresBackend({ url: config.url, ...(clock ? { clock } : {}) }));
  },
  describe: (config) => ({ backend: 'postgres', postgresUrl: redact(config.url) }),
  args: (config) => ['--backend', 'postgres', '--postgres-url', config.url],
});
