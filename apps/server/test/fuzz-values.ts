import fc from 'fast-check';

/** JSON cut short at a random place: what a client that stops mid-write sends. */
export const truncatedJson: fc.Arbitrary<string> = fc
  .tuple(fc.json({ maxDepth: 3 }), fc.nat())
  .map(([json, cut]) => json.slice(0, cut % (json.length + 1)));

/**
 * Values for any field of a request: names and tokens near their bounds, numbers past them,
 * control characters, lone surrogates, and every JSON type where another is expected.
 */
export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom('f/a', 'f/b', 'g/a', '', 'x'.repeat(300), '\u0000', '\ud800', 'é/ü'),
  fc.constantFrom('0', '1', '2', '01', '-1', '9223372036854775807', '9223372036854775808'),
  fc.constantFrom(0, -1, 1, 20, 21, 99, 100, 1_000, 2_000, 2_001, 2 ** 31, 2 ** 53, 1e308, 0.5),
  fc.string({ maxLength: 20 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 4 }), fc.integer(), { maxKeys: 3 }),
);
