export {
  findBinary,
  freePort,
  type ManagedProcess,
  type ProcessSpec,
  serviceAvailable,
  startProcess,
  tempDir,
} from './process.js';
export {
  pingRedis,
  type RedisOptions,
  type RedisService,
  redisAvailable,
  redisManaged,
  startRedis,
  startRedisNodes,
} from './redis.js';
