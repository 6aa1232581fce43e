import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/**
 * The README's `docker build` needs `node:20-bookworm-slim` from a registry; where none can be
 * reached it must give the route that works without one: CI's, in deploy/docker/image-test.sh
 * (a local base from node-base.sh, the build on it). Checked here so that the two cannot part.
 */
const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const imageTest = readFileSync(new URL('../docker/image-test.sh', import.meta.url), 'utf8');

/** The shell blocks of the README's "Container image" section, one string per block. */
function containerBlocks(text: string): string[] {
  const start = text.indexOf('## Container image');
  const section = text.slice(start, text.indexOf('\n## ', start + 1));
  return [...section.matchAll(/```sh[^\n]*\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

/** What a local-base route must do, found in `script`: make the base, build on it. */
function localRoute(script: string) {
  return {
    makesBase: /deploy\/docker\/node-base\.sh\b/.test(script),
    buildsOnIt: /docker build\b[^\n]*--build-arg "?NODE_IMAGE=/.test(script),
    classicBuilder: /DOCKER_BUILDKIT=0 docker build/.test(script),
  };
}

describe("the README's container image instructions", () => {
  it('give the local-base route CI runs (image-test.sh) next to the plain docker build', () => {
    const blocks = containerBlocks(readme);
    expect(blocks.some((block) => /^docker build -t dlm-server \.$/m.test(block))).toBe(true);
    const route = blocks.find((block) => block.includes('node-base.sh'));
    expect(route, 'a block with deploy/docker/node-base.sh').toBeDefined();
    expect(localRoute(route!)).toEqual(localRoute(imageTest));
    expect(localRoute(imageTest)).toEqual({
      makesBase: true,
      buildsOnIt: true,
      classicBuilder: true,
    });
    // The base the README builds is the one it builds on.
    const base = /node-base\.sh (\S+)/.exec(route!)?.[1];
    expect(route).toContain(`NODE_IMAGE=${base}`);
  });

  it('a README without the route is caught', () => {
    const without = readme.replace(/deploy\/docker\/node-base\.sh/g, 'somewhere');
    expect(
      containerBlocks(without).find((block) => block.includes('node-base.sh')),
    ).toBeUndefined();
  });
});
