import { readFileSync } from 'node:fs';

/**
 * The `version` of the package.json at `url` (a program's own, found from its
 * `import.meta.url`), or `0.0.0` when it cannot be read: a version string must never stop a
 * program from starting.
 */
export function readPackageVersion(url: URL): string {
  try {
    const pkg = JSON.parse(readFileSync(url, 'utf8')) as { version: string };
    return pkg.version;
  } catch {
    return '0.0.0';
  }
}
