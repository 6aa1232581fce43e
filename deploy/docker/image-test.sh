#!/usr/bin/env bash
# Builds the dlm-server image from the repository's Dockerfile and runs it, on a reachable Docker
# engine (CI's Docker stage starts one; see tooling/test-services/docker/ci-stage.sh):
#   1. a local stand-in for the official node image (node-base.sh; nothing can be pulled here),
#   2. `docker build` of the Dockerfile on it (its npm installs over the host's network),
#   3. a container on the embedded backend with its data dir in a volume: it runs as user 1000,
#      reports healthy (its HEALTHCHECK on /readyz), grants a lock to a client on the host;
#      after `docker kill` and a new container on the same volume, the lock is still held by
#      the same token (the journal lives in the volume).
# Prints the image's size. Needs: docker, node, the repository built (pnpm build) for the client.
set -euo pipefail
cd "$(dirname "$0")/../.."

image="${DLM_IMAGE:-dlm-server:ci}"
base="${DLM_NODE_IMAGE:-dlm-test/node:local}"
name="dlm-image-test-$$"
volume="dlm-image-test-data-$$"
port="$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")"

cleanup() {
  docker rm --force "$name" >/dev/null 2>&1 || true
  docker volume rm --force "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT

fail() {
  echo "image-test: $*" >&2
  docker logs "$name" 2>&1 | tail -n 20 >&2 || true
  exit 1
}

if [ -z "${DLM_IMAGE_REUSE:-}" ] || ! docker image inspect "$image" >/dev/null 2>&1; then
  deploy/docker/node-base.sh "$base"
  started=$(date +%s)
  # The classic builder: this machine's docker has no buildx plugin.
  DOCKER_BUILDKIT=0 docker build --quiet --network host --build-arg "NODE_IMAGE=$base" -t "$image" . >/dev/null
  echo "image-test: built $image in $(($(date +%s) - started)) s"
fi
size=$(docker image inspect --format '{{.Size}}' "$image")
echo "image-test: $image is $((size / 1000000)) MB (the base, Node.js with npm: $(($(docker image inspect --format '{{.Size}}' "$base") / 1000000)) MB)"

run_container() {
  # Host networking (no bridge here): the server binds loopback, so it needs no tokens.
  docker run --detach --name "$name" --network host \
    --env DLM_HOST=127.0.0.1 --env "DLM_PORT=$port" \
    --health-interval 1s --health-start-period 1s \
    --volume "$volume:/data" "$image" >/dev/null
  for _ in $(seq 1 60); do
    [ "$(docker inspect --format '{{.State.Health.Status}}' "$name")" = healthy ] && return 0
    [ "$(docker inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
    sleep 0.5
  done
  fail "the container did not report healthy within 30 s"
}

# One step of the client on the host: acquire (prints the token, then exits without closing,
# so the lease stays held) or get (prints the holder's token, or free).
client() {
  node --input-type=module -e "
    import { createClient } from './packages/client/dist/index.js';
    const client = createClient({ url: 'ws://127.0.0.1:$port' });
    const [step] = process.argv.slice(1);
    if (step === 'acquire') {
      const lease = await client.acquire('image/held', { ttlMs: 60_000, autoExtend: false });
      console.log(lease.token.toString());
      // Gone without closing (as a crashed holder would): the server keeps the lease until its
      // TTL, where a closing session would release it.
      process.exit(0);
    } else {
      const state = await client.get('image/held');
      console.log(state.held ? state.token.toString() : 'free');
    }
    await client.close();
    process.exit(0);
  " "$1"
}

run_container
uid=$(docker exec "$name" id -u)
[ "$uid" = 1000 ] || fail "the server runs as uid $uid, not 1000"
token=$(client acquire)
held=$(client get)
[ "$held" = "$token" ] || fail "granted token $token, but get says $held"

docker kill "$name" >/dev/null
docker rm "$name" >/dev/null
run_container
after=$(client get)
[ "$after" = "$token" ] || fail "after a kill -9 and a new container on the volume, the lock is $after, not held by $token"
echo "image-test: healthy as uid 1000; lock granted with token $token, still held by it after kill -9 and a new container on the same volume"
