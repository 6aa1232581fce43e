import type { Transcript } from '@dlm/protocol/transcripts';
import { type RunTranscriptOptions, TranscriptRun } from './run.js';

// The data side (the golden transcripts, their format, reading them) is @dlm/protocol's;
// re-exported so that one import gives a runner everything it needs.
export {
  loadTranscripts,
  type Transcript,
  TranscriptFormatError,
  type TranscriptStep,
  transcriptJsonSchema,
  transcriptProblems,
  transcriptsDir,
} from '@dlm/protocol/transcripts';
export { type Bindings, type MatchResult, matchPattern } from './match.js';
export { type RunTranscriptOptions, TranscriptFailure } from './run.js';

/**
 * Replays a golden transcript against the server at `url` (`ws://host:port/v1/ws`), and
 * rejects with a `TranscriptFailure` saying which step went wrong and what arrived instead.
 * Every connection the transcript opened is closed when it ends, whatever the outcome.
 *
 * @example
 * import { loadTranscripts, runTranscript } from '@dlm/transcripts';
 *
 * for (const transcript of loadTranscripts()) await runTranscript(server.url, transcript);
 */
export function runTranscript(
  url: string,
  transcript: Transcript,
  options: RunTranscriptOptions = {},
): Promise<void> {
  return new TranscriptRun(url, transcript, options).replay();
}
