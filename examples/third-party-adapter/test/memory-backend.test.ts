import { runConformance } from '@dlm/conformance';
import { describe } from 'vitest';
import { memoryBackend } from '../src/memory-backend.js';
import { MemoryStore } from '../src/memory-store.js';

// A backend of one's own, built by the steps of CONTRIBUTING.md ("Add a backend"): its
// primitives and queue driver in src/, held to the same suite. Every backend of a test shares
// one store, as the dlm servers of a deployment share one service.
describe('a backend of your own, through the conformance suite', () => {
  const store = new MemoryStore();
  runConformance('memory (a third-party backend)', {
    backend: () => memoryBackend(store),
    fairQueue: { entries: async (name) => store.state(name).queue.map((entry) => entry.id) },
  });
});
