import { useService } from '@dlm/conformance';
import { type RedisOptions, type RedisService, startRedis } from '@dlm/test-services';

/**
 * A Redis server for the enclosing scope's tests (file or `describe`), stopped after them with
 * a 1 s grace for the backends' last commands.
 */
export function useRedis(options: RedisOptions = {}): () => RedisService {
  return useService(
    () => startRedis(options),
    (service) => service.stop(1_000),
  );
}
