import { readdirSync, readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { type Transcript, TranscriptFormatError, transcriptProblems } from './transcript-format.js';

// The golden transcripts as data: where they are, their format, and reading them. The runner
// that replays them against a server is `@dlm/transcripts` (packages/testing/transcripts).
export type { Transcript, TranscriptStep } from './transcript-format.js';
export {
  TranscriptFormatError,
  transcriptJsonSchema,
  transcriptProblems,
} from './transcript-format.js';

/** The golden transcripts shipped with this package (`transcripts/*.json`). */
export const transcriptsDir: URL = new URL('../transcripts/', import.meta.url);

/** Reads every `*.json` transcript in `dir` (default: this package's), sorted by file name. */
export function loadTranscripts(dir: URL | string = transcriptsDir): Transcript[] {
  const href = typeof dir === 'string' ? pathToFileURL(dir).href : dir.href;
  const baseUrl = new URL(href.endsWith('/') ? href : `${href}/`);
  return readdirSync(baseUrl)
    .filter((file) => file.endsWith('.json') && !file.endsWith('.schema.json'))
    .sort()
    .map((file) => {
      const value: unknown = JSON.parse(readFileSync(new URL(file, baseUrl), 'utf8'));
      const problems = transcriptProblems(value);
      if (problems.length) {
        throw new TranscriptFormatError(`${file} is not a transcript: ${problems.join('; ')}`);
      }
      return value as Transcript;
    });
}
