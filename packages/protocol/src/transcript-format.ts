import { type Static, type TProperties, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

/**
 * The golden transcript format (described for people in `transcripts/README.md`). A transcript
 * is a list of steps on named WebSocket connections: send frames, expect frames matching
 * patterns with placeholders, expect closes, sleep, and check timings.
 */

/** A mistake in a transcript itself (as opposed to a server that does not match it). */
export class TranscriptFormatError extends Error {
  override readonly name = 'TranscriptFormatError';
}

/** Any JSON value; in `expect` it may contain placeholders (`{"$capture": ...}`, ...). */
const Json = Type.Unknown();

const Common = {
  /** The connection the step acts on; default `"a"`. */
  conn: Type.Optional(Type.String({ minLength: 1 })),
  /** For people reading the transcript. */
  note: Type.Optional(Type.String()),
};

const Elapsed = Type.Object(
  {
    since: Type.String({ description: 'A mark set by a `mark` step or a send with `mark`.' }),
    min: Type.Optional(Type.Number({ description: 'Inclusive lower bound, ms (1 ms slack).' })),
    max: Type.Optional(Type.Number({ description: 'Inclusive upper bound, ms.' })),
  },
  { additionalProperties: false },
);

function step<P extends TProperties>(properties: P, description: string) {
  return Type.Object({ ...Common, ...properties }, { additionalProperties: false, description });
}

const SendOptions = {
  /** Send the same frame this many times (default 1). */
  times: Type.Optional(Type.Integer({ minimum: 1 })),
  /** Record the time just before sending, for `elapsed` checks. */
  mark: Type.Optional(Type.String()),
};

export const TranscriptStepSchema = Type.Union([
  step(
    {
      connect: Type.Object(
        {
          protocols: Type.Optional(Type.Array(Type.String())),
          path: Type.Optional(Type.String()),
          expectStatus: Type.Optional(Type.Integer()),
          expectProtocol: Type.Optional(Type.Union([Type.String(), Type.Null()])),
          multi: Type.Optional(Type.Boolean()),
        },
        { additionalProperties: false },
      ),
    },
    'Open the connection `conn`, offering `protocols` (default ["dlm.v1.json"]; [] offers none) ' +
      'on `path` (default: the path of the URL under test). With `expectStatus` the upgrade must ' +
      'be refused with that HTTP status. `expectProtocol`: the subprotocol the server must pick ' +
      '(null: none). `multi`: the connection speaks multi-message frames (its hello asks for ' +
      'them): an array frame from the server counts as its messages, each matched on its own; ' +
      'without it an array frame from the server fails the transcript.',
  ),
  step(
    {
      send: Json,
      /** Append spaces (JSON whitespace) to the serialized frame until it is this many bytes. */
      padToBytes: Type.Optional(Type.Integer({ minimum: 1 })),
      ...SendOptions,
    },
    'Send a JSON value as one text frame, serialized compactly, after substituting `$ref`s and ' +
      '`{{run}}`.',
  ),
  step(
    {
      sendText: Type.Union([
        Type.String(),
        Type.Object(
          { repeat: Type.String(), count: Type.Integer({ minimum: 1 }) },
          { additionalProperties: false },
        ),
      ]),
      ...SendOptions,
    },
    'Send a text frame verbatim (or `repeat` repeated `count` times); `{{run}}` is substituted.',
  ),
  step(
    {
      sendBinary: Type.String({ pattern: '^([0-9a-fA-F]{2})*$', description: 'Hex bytes.' }),
      ...SendOptions,
    },
    'Send a binary frame.',
  ),
  step(
    {
      expect: Json,
      /** Expect this many distinct frames matching the pattern (default 1). */
      times: Type.Optional(Type.Integer({ minimum: 1 })),
      /** How long to wait for the frames, ms (default 5000). */
      timeoutMs: Type.Optional(Type.Integer({ minimum: 0 })),
      /** When each matched frame must have arrived, relative to a mark. */
      elapsed: Type.Optional(Elapsed),
    },
    'Consume the earliest received frame(s) that match the pattern, waiting for them.',
  ),
  step(
    {
      expectNone: Json,
      forMs: Type.Integer({ minimum: 0 }),
    },
    'No unconsumed frame matches the pattern now or for `forMs` ms. Consumes nothing.',
  ),
  step(
    {
      expectClose: Type.Object(
        { code: Type.Optional(Type.Integer()) },
        { additionalProperties: false },
      ),
      timeoutMs: Type.Optional(Type.Integer({ minimum: 0 })),
      elapsed: Type.Optional(Elapsed),
    },
    'The server closes the connection (with close code `code`).',
  ),
  step(
    {
      close: Type.Object({ code: Type.Optional(Type.Integer()) }, { additionalProperties: false }),
    },
    'Close the connection from the client (default code 1000) and wait until it is closed.',
  ),
  step({ sleep: Type.Integer({ minimum: 0 }) }, 'Wait this many ms.'),
  step({ mark: Type.String() }, 'Record the current time under a name.'),
]);

export const TranscriptSchema = Type.Object(
  {
    $schema: Type.Optional(Type.String()),
    name: Type.String({ pattern: '^[a-z0-9-]+$' }),
    description: Type.String(),
    /** Methods, notifications, error codes and features the transcript exercises. */
    covers: Type.Array(Type.String(), { minItems: 1 }),
    steps: Type.Array(TranscriptStepSchema, { minItems: 1 }),
  },
  { additionalProperties: false },
);

export type TranscriptStep = Static<typeof TranscriptStepSchema>;
export type Transcript = Static<typeof TranscriptSchema>;

/** The JSON Schema of a transcript file, published as `@dlm/protocol/transcript.schema.json`. */
export function transcriptJsonSchema(): Record<string, unknown> {
  return JSON.parse(
    JSON.stringify({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: 'https://dlm.dev/protocol/v1/transcript.schema.json',
      title: 'dlm golden transcript',
      ...TranscriptSchema,
    }),
  ) as Record<string, unknown>;
}

/** The problems with a transcript's shape (empty when it is well-formed). */
export function transcriptProblems(value: unknown): string[] {
  return [...Value.Errors(TranscriptSchema, value)].map(
    (error) => `${error.path || '/'}: ${error.message}`,
  );
}
