import type { IncomingMessage } from 'node:http';

/** Why a body was not read: too many bytes, or the client went away while sending it. */
export type BodyProblem = 'too-large' | 'aborted';

/** Whether the request says its body is JSON (`application/json`, parameters allowed). */
export function isJson(request: IncomingMessage): boolean {
  const type = request.headers['content-type'];
  return type !== undefined && /^application\/json\s*(;|$)/i.test(type);
}

/**
 * The request's body as UTF-8 text, at most `maxBytes` of it. A declared `Content-Length`
 * over the bound is refused before a byte is read; a body that grows past it while arriving
 * stops being read (the caller answers 413 and closes the connection).
 */
export function readBody(
  request: IncomingMessage,
  maxBytes: number,
): Promise<string | BodyProblem> {
  const declared = Number(request.headers['content-length']);
  if (declared > maxBytes) return Promise.resolve('too-large');
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (outcome: string | BodyProblem) => {
      request.off('data', onData);
      request.off('end', onEnd);
      request.off('close', onClose);
      resolve(outcome);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        request.pause();
        done('too-large');
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => done(Buffer.concat(chunks, size).toString('utf8'));
    const onClose = () => done('aborted');
    request.on('data', onData);
    request.on('end', onEnd);
    request.on('close', onClose);
  });
}
