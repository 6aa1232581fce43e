/** Messages between the scale workload and its client processes (`scale-worker.ts`), over IPC. */

export type ToWorker =
  | { type: 'connect'; url: string; sessions: number }
  | { type: 'acquire'; count: number; ttlMs: number; prefix: string };

export type FromWorker =
  | { type: 'connected'; ok: number; failed: number; error?: string }
  | { type: 'acquired'; ok: number; failed: number; error?: string };
