import { UsageError } from '@dlm/flags';

/** A setting's environment variable: `--redis-url` is `DLM_REDIS_URL`. */
export function envNameOf(flag: string): string {
  return `DLM_${flag.toUpperCase().replaceAll('-', '_')}`;
}

/** The parsed flags and the environment (empty variables dropped), read the same way. */
export interface Sources {
  values: Readonly<Record<string, string | boolean | undefined>>;
  env: NodeJS.ProcessEnv;
  /** A string flag's value. */
  flag(name: string): string | undefined;
  /** A string setting: its flag, else its variable (`--redis-url`, `DLM_REDIS_URL`). */
  setting(name: string): string | undefined;
  /** A boolean setting: its flag, or its variable set to `1` or `true`. */
  on(name: string): boolean;
}

export function sources(values: Sources['values'], rawEnv: NodeJS.ProcessEnv): Sources {
  // An empty environment variable counts as unset.
  const env = Object.fromEntries(Object.entries(rawEnv).filter(([, value]) => value !== ''));
  const flag = (name: string) => values[name] as string | undefined;
  return {
    values,
    env,
    flag,
    setting: (name) => flag(name) ?? env[envNameOf(name)],
    on: (name) => {
      const variable = env[envNameOf(name)];
      return values[name] === true || variable === '1' || variable === 'true';
    },
  };
}

/** A comma-separated list of `--<name>` (its flag or variable), at least one item. */
export function listSetting(from: Sources, name: string): string[] {
  const items = (from.setting(name) ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
  if (!items.length) throw new UsageError(`--${name} is required for this backend`);
  return items;
}

/** `host:port,host:port,…` of `--<name>`, each port 1-65535. */
export function hostPortsSetting(from: Sources, name: string): string[] {
  const items = listSetting(from, name);
  for (const item of items) {
    const port = Number(/^[^:\s]+:(\d{1,5})$/.exec(item)?.[1] ?? Number.NaN);
    if (!(port >= 1 && port <= 65_535))
      throw new UsageError(`--${name} takes host:port items (port 1-65535), got ${item}`);
  }
  return items;
}
