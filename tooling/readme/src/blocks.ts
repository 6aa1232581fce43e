import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The code blocks of the repo's Markdown and what each says about itself, in the word after
 * its language on the opening fence (CONTRIBUTING.md, "Code blocks in READMEs"):
 *
 * - `run`: a test runs it (a shell block in the repo root, a JS/TS block as an ES module) and
 *   it must succeed;
 * - `run=serve`: a shell block that starts the server; it must serve on `DLM_PORT`;
 * - `ci`: a shell block that `.ci/run` runs verbatim;
 * - `sketch`: a shape to adapt (it needs your database, your cluster, your certificates);
 *   nothing runs it.
 *
 * Blocks in a language that is data or output (`text`, `json`, …) need no word.
 */

export type Marker = 'run' | 'run=serve' | 'ci' | 'sketch';

export const MARKERS: readonly Marker[] = ['run', 'run=serve', 'ci', 'sketch'];

/**
 * Languages whose blocks show data, output, a diagram or a sample session (`console`: `$ ` lines
 * with what they printed once), never a program to run as it is.
 */
export const DATA_LANGUAGES: ReadonlySet<string> = new Set([
  'text',
  'json',
  'jsonc',
  'promql',
  'console',
]);

export interface CodeBlock {
  /** The file, relative to the repo root. */
  file: string;
  /** The 1-based line of the opening fence. */
  line: number;
  language: string;
  /** The words after the language. */
  words: string[];
  marker: Marker | undefined;
  code: string;
}

/** The fenced blocks of one Markdown text (``` or ~~~ fences, indented or not). */
export function codeBlocks(file: string, markdown: string): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*(.*)$/.exec(lines[i] ?? '');
    if (!open) continue;
    const [, indent = '', fence = '', info = ''] = open;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      const line = lines[j] ?? '';
      if (line.trim().startsWith(fence) && line.trim().replace(/[`~]/g, '') === '') break;
      // An indented fence (in a list item) indents its content too.
      body.push(line.startsWith(indent) ? line.slice(indent.length) : line);
    }
    const [language = '', ...words] = info.trim().split(/\s+/).filter(Boolean);
    const marker = MARKERS.find((candidate) => words.includes(candidate));
    blocks.push({ file, line: i + 1, language, words, marker, code: `${body.join('\n')}\n` });
    i = j;
  }
  return blocks;
}

/** The Markdown files whose blocks are held to the convention: every README, docs/, CONTRIBUTING. */
export function documentedFiles(root: string): string[] {
  const tracked = execFileSync(
    'git',
    ['ls-files', '--cached', '--others', '--exclude-standard', '*.md'],
    {
      cwd: root,
      encoding: 'utf8',
    },
  )
    .split('\n')
    .filter(Boolean);
  return tracked
    .filter(
      (file) =>
        /(^|\/)README\.md$/.test(file) || file.startsWith('docs/') || file === 'CONTRIBUTING.md',
    )
    .sort();
}

export function allBlocks(root: string): CodeBlock[] {
  return documentedFiles(root).flatMap((file) =>
    codeBlocks(file, readFileSync(join(root, file), 'utf8')),
  );
}

/** `file:line (language)`: how a block is named in a test or an error. */
export function blockName(block: CodeBlock): string {
  return `${block.file}:${block.line} (${[block.language, ...block.words].join(' ')})`;
}

export interface Link {
  file: string;
  line: number;
  target: string;
}

/** The relative links (`[text](target)`) of one Markdown text, outside its code blocks. */
export function relativeLinks(file: string, markdown: string): Link[] {
  const links: Link[] = [];
  for (const { text, line } of proseLines(markdown)) {
    // Inline code spans are not links.
    const prose = text.replace(/`[^`]*`/g, '');
    for (const match of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = match[1] ?? '';
      if (/^([a-z][a-z0-9+.-]*:|#)/i.test(target)) continue;
      links.push({ file, line, target });
    }
  }
  return links;
}

/**
 * The anchors GitHub gives a Markdown file's headings: the text in lower case, without
 * punctuation (backticks and link targets dropped, the text inside kept), spaces as hyphens; a
 * repeated one gets `-1`, `-2`, ….
 *
 * @example headingAnchors('## Semaphores and read-write locks') // Set { 'semaphores-and-read-write-locks' }
 */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const { text } of proseLines(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(text)?.[1];
    if (heading === undefined) continue;
    const base = heading
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const repeats = seen.get(base) ?? 0;
    seen.set(base, repeats + 1);
    anchors.add(repeats === 0 ? base : `${base}-${repeats}`);
  }
  return anchors;
}

/** The lines of `markdown` outside fenced code blocks, numbered from 1. */
function* proseLines(markdown: string): Generator<{ text: string; line: number }> {
  let fence: string | undefined;
  for (const [index, text] of markdown.split('\n').entries()) {
    const open = /^\s*(`{3,}|~{3,})/.exec(text);
    if (open) {
      if (fence === undefined) fence = open[1];
      else if (text.trim().replace(/[`~]/g, '') === '' && text.trim().startsWith(fence))
        fence = undefined;
      continue;
    }
    if (fence === undefined) yield { text, line: index + 1 };
  }
}
