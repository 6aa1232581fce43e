#!/usr/bin/env bash
# CI's Docker stage: the conformance suite for the Redis, Redlock, etcd and ZooKeeper adapters
# (and the third-party example) with every service started by the testcontainers provider, the
# dlm-server image built from the Dockerfile and run (deploy/docker/image-test.sh), and the
# load-balancer scenarios of apps/ha with their three dlm servers as containers of that image
# (etcd and ZooKeeper as containers of the local images, HAProxy a local process).
#
# The CI machine has no Docker engine and cannot pull images, so this stage
#   1. installs docker.io if dockerd is missing,
#   2. starts a private dockerd (vfs storage, no iptables, no bridge: containers use the host
#      network and loopback ports) with its own socket, data and exec roots under a temp dir,
#   3. builds dlm-test/{redis,etcd,zookeeper}:local from the Debian-installed binaries,
#   4. runs the tests with DLM_TEST_SERVICES=docker and the local images,
#   5. stops that dockerd (by its pid) and removes its files, also when a step fails.
# It prints how long each step and the whole stage took.
set -euo pipefail
cd "$(dirname "$0")/../../../.."

now_ms() { date +%s%3N; }
stage_started=$(now_ms)
step_started=$stage_started
step() {
  local now
  now=$(now_ms)
  echo "ci-docker: $1 took $(((now - step_started) / 1000)).$(((now - step_started) % 1000 / 100)) s"
  step_started=$now
}

if ! command -v dockerd >/dev/null; then
  echo "ci-docker: installing docker.io"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io
  step "installing docker.io"
fi
# busybox: /bin/sh and the tools of the local Node.js base image (deploy/docker/node-base.sh).
if ! command -v busybox >/dev/null; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends busybox-static
  step "installing busybox-static"
fi

# Short paths: the daemon's unix sockets (its own and containerd's) must fit in 108 bytes.
root="$(mktemp -d /tmp/dlm-dockerd.XXXXXX)"
dockerd_pid=""

cleanup() {
  local status=$?
  set +e
  if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
    # Containers a failed test left behind would keep the daemon's shutdown waiting.
    local left
    left="$(docker ps --all --quiet 2>/dev/null)"
    [ -n "$left" ] && docker rm --force --volumes $left >/dev/null 2>&1
    kill -TERM "$dockerd_pid"
    for _ in $(seq 1 100); do
      kill -0 "$dockerd_pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$dockerd_pid" 2>/dev/null; then
      echo "ci-docker: dockerd did not stop in 20 s: SIGKILL" >&2
      kill -KILL "$dockerd_pid"
    fi
    wait "$dockerd_pid" 2>/dev/null
    echo "ci-docker: stopped dockerd (pid $dockerd_pid)"
  fi
  if [ "$status" -ne 0 ] && [ -f "$root/dockerd.log" ]; then
    echo "ci-docker: failed; the last lines of dockerd's log:" >&2
    tail -n 30 "$root/dockerd.log" >&2
  fi
  # Anything the daemon left mounted under its roots, then the files (vfs keeps full copies).
  grep -o " $root/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$root"
  echo "ci-docker: the Docker stage took $((($(now_ms) - stage_started) / 1000)) s in all"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

dockerd --storage-driver=vfs --iptables=false --bridge=none \
  --data-root "$root/data" --exec-root "$root/exec" --pidfile "$root/dockerd.pid" \
  --host "unix://$root/docker.sock" >"$root/dockerd.log" 2>&1 &
dockerd_pid=$!
export DOCKER_HOST="unix://$root/docker.sock"

for _ in $(seq 1 150); do
  docker info >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || {
    echo "ci-docker: dockerd exited" >&2
    exit 1
  }
  sleep 0.2
done
docker info >/dev/null
step "starting dockerd (pid $dockerd_pid)"

packages/testing/services/docker/build-images.sh
step "building the local images"

export CI=true
export DLM_TEST_SERVICES=docker
export DLM_TEST_REDIS_IMAGE=dlm-test/redis:local
export DLM_TEST_ETCD_IMAGE=dlm-test/etcd:local
export DLM_TEST_ZK_IMAGE=dlm-test/zookeeper:local
# The reaper's image cannot be pulled here; the tests remove their containers, and this
# script removes any they leave.
export TESTCONTAINERS_RYUK_DISABLED=true
# Host networking: the services are on loopback (see src/docker-engine.ts).
export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1

# Every test step runs, so one failure does not hide the others; the stage fails at the end.
failures=()
run_tests() {
  local label="$1"
  shift
  if "$@"; then
    step "$label"
  else
    failures+=("$label")
    step "$label (FAILED)"
  fi
}

projects=()
for adapter in redis redlock etcd zookeeper; do
  if [ -f "packages/adapter-$adapter/test/conformance.test.ts" ]; then
    projects+=(--project "adapter-$adapter")
  else
    echo "ci-docker: packages/adapter-$adapter/test/conformance.test.ts does not exist: skipped" >&2
  fi
done
run_tests "the adapters' conformance suites on containers" \
  npx vitest run "${projects[@]}" test/conformance.test.ts
# The provider's own tests: kill (docker kill), pause (docker pause) and start of containers.
run_tests "test-services' tests on containers" npx vitest run --project services \
  test/redis.test.ts test/etcd.test.ts test/zookeeper.test.ts
# Its two files mostly wait on services and timers: side by side (vitest runs one at a time on 2
# cores; set here, not in its config, which the root run takes as one of its projects).
run_tests "examples/third-party-adapter" bash -c 'cd examples/third-party-adapter && npx vitest run --maxWorkers 2'
# The dlm-server image: built from the Dockerfile on a local Node.js base, run, killed, re-run.
run_tests "the dlm-server image (deploy/docker/image-test.sh)" deploy/docker/image-test.sh
# The seed's diagram with that image: HAProxy on deploy/haproxy/haproxy.cfg in front of three
# containers of it (host network) over a 3-member etcd cluster, then a 3-member ZooKeeper
# ensemble; the fault harness's checker over the clients' history. One file at a time: each
# starts six containers, which vfs storage makes slow to create.
image="${DLM_IMAGE:-dlm-server:ci}"
run_tests "the load-balancer scenarios on containers of $image (apps/ha, etcd and ZooKeeper)" \
  env DLM_HA_SERVER_IMAGE="$image" npx vitest run --project ha --no-file-parallelism \
  test/lb-etcd.test.ts test/lb-zookeeper.test.ts

if [ ${#failures[@]} -gt 0 ]; then
  echo "ci-docker: failed: ${failures[*]}" >&2
  exit 1
fi
