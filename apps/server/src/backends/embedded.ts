import { homedir } from 'node:os';
import { join } from 'node:path';
import { UsageError } from '@dlm/flags';
import { defineKind } from '../backend-kind.js';

export interface EmbeddedSettings {
  /** Where the journal lives; null: in memory only. */
  dataDir: string | null;
}

function defaultDataDir(env: NodeJS.ProcessEnv): string {
  const state = env.XDG_STATE_HOME || join(homedir(), '.local', 'state');
  return join(state, 'dlm');
}

export const embedded = defineKind('embedded', {
  flags: { memory: 'boolean', 'data-dir': 'string' },
  help: `  --data-dir DIR           embedded: where the journal lives (DLM_DATA_DIR,
                           default $XDG_STATE_HOME/dlm or ~/.local/state/dlm)
  --memory                 embedded: keep nothing on disk (DLM_MEMORY=1)`,
  parse(from): EmbeddedSettings {
    const memory = from.on('memory');
    const dataDir = from.setting('data-dir');
    if (memory && dataDir && from.flag('data-dir'))
      throw new UsageError('--memory and --data-dir exclude each other');
    return { dataDir: memory ? null : (dataDir ?? defaultDataDir(from.env)) };
  },
  async open(config, { logger, clock }) {
    const { embeddedBackend } = await import('@dlm/adapter-embedded');
    return embeddedBackend(
      Object.assign(
        { logger: (line: string) => logger.warn(line, { component: 'embedded' }) },
        clock ? { clock } : {},
        config.dataDir === null ? {} : { dataDir: config.dataDir },
      ),
    );
  },
  describe: (config) => ({ backend: 'embedded', dataDir: config.dataDir ?? '(memory only)' }),
  args: (config) => [
    '--backend',
    'embedded',
    ...(config.dataDir === null ? ['--memory'] : ['--data-dir', config.dataDir]),
  ],
});
