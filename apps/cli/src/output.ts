import { isDlmError } from '@dlm/client';

/** One JSON value per line on stdout (tokens as decimal strings, never numbers). */
export function printJson(value: unknown): void {
  process.stdout.write(
    `${JSON.stringify(value, (_key, item: unknown) => (typeof item === 'bigint' ? item.toString() : item))}\n`,
  );
}

/** Left-aligned columns separated by two spaces; numeric columns are right-aligned. */
export function formatTable(
  header: string[],
  rows: string[][],
  rightAligned: ReadonlySet<number> = new Set(),
): string {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => row[column]?.length ?? 0)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) =>
        rightAligned.has(column) ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!),
      )
      .join('  ')
      .trimEnd();
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}

/** `dlm: message (CODE)` on stderr. */
export function printError(error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  const code = isDlmError(error) ? ` (${error.code})` : '';
  process.stderr.write(`dlm: ${message}${code}\n`);
}
