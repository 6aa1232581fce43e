/**
 * Multi-message frames (extension, SPEC.md "Several messages per frame"): the messages one side
 * has ready in one turn, packed into as few text frames as fit `maxFrameBytes`. A lone message
 * stays a plain object frame; several become a JSON array. A message larger than the bound
 * still goes, alone. Messages keep their order.
 */
export function packFrames(messages: readonly string[], maxFrameBytes: number): string[] {
  if (messages.length === 1) return [messages[0]!];
  const frames: string[] = [];
  let frame: string[] = [];
  let bytes = 1; // the opening bracket; each message adds its comma or the closing bracket
  for (const message of messages) {
    const size = utf8Length(message) + 1;
    if (frame.length > 0 && bytes + size > maxFrameBytes) {
      frames.push(joined(frame));
      frame = [];
      bytes = 1;
    }
    frame.push(message);
    bytes += size;
  }
  if (frame.length > 0) frames.push(joined(frame));
  return frames;
}

function joined(messages: string[]): string {
  return messages.length === 1 ? messages[0]! : `[${messages.join(',')}]`;
}

/** The UTF-8 length of a string (lone surrogates count as the 3-byte replacement). */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    if (code < 0x80) continue;
    if (code < 0x800) bytes += 1;
    else if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 2; // a pair: 4 bytes for 2 units
        i += 1;
      } else bytes += 2;
    } else bytes += 2;
  }
  return bytes;
}
