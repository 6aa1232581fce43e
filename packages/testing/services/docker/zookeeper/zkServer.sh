#!/bin/sh
# zkServer.sh of the dlm-test/zookeeper:local image: the official zookeeper image's
# `zkServer.sh start-foreground [CONFIG]` interface, so the testcontainers provider starts
# either image with the same command. Only start-foreground exists here.
set -e
if [ "$1" != start-foreground ]; then
  echo "zkServer.sh: only 'start-foreground [CONFIG]' is supported in this image" >&2
  exit 2
fi
# ZK_SERVER_HEAP (MB) and SERVER_JVMFLAGS as in ZooKeeper's own scripts.
# shellcheck disable=SC2086
exec java "-Xmx${ZK_SERVER_HEAP:-256}m" -XX:-UsePerfData $SERVER_JVMFLAGS \
  -cp '/usr/share/java/*' org.apache.zookeeper.server.quorum.QuorumPeerMain "${2:-/conf/zoo.cfg}"
