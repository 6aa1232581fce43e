#!/usr/bin/env bash
# Builds small local images of Redis, etcd and ZooKeeper from the Debian-installed binaries,
# for machines that can run Docker but cannot pull images (like this project's CI):
#
#   dlm-test/redis:local      redis-server at /usr/local/bin, /data      (like redis:7)
#   dlm-test/etcd:local       etcd at /usr/local/bin/etcd                (like quay.io/coreos/etcd)
#   dlm-test/zookeeper:local  zkServer.sh start-foreground CONFIG, /data (like zookeeper:3.8)
#
# Each image is a root filesystem holding the binary and exactly the shared libraries `ldd`
# lists, fed to `docker import`. They answer the same commands as the official images, so the
# testcontainers provider (src/containers/) starts either kind the same way.
#
# Needs: docker (a reachable engine), redis-server, etcd, java (17) and Debian's zookeeper jars.
# Usage: build-images.sh [redis] [etcd] [zookeeper]   (default: all three)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/dlm-images.XXXXXX")"
trap 'rm -rf "$work"' EXIT

now_ms() { date +%s%3N; }

# Copies a file (dereferencing symlinks) to the same path, or to $3, under root $1.
put() {
  local root="$1" src="$2" dest="${3:-$2}"
  mkdir -p "$root$(dirname "$dest")"
  cp -L "$src" "$root$dest"
}

# Copies every shared library that `ldd` resolves for the given ELF files into root $1,
# at the same paths (the dynamic loader included). Libraries ldd cannot find are only
# needed by code paths we do not use (e.g. the JDK's X11 bits) and are skipped.
put_libraries() {
  local root="$1"
  shift
  local lib
  for lib in $(ldd "$@" 2>/dev/null | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}' | sort -u); do
    case "$lib" in "$root"/*) continue ;; esac # the jlinked runtime's own libraries
    [ -e "$root$lib" ] || put "$root" "$lib"
  done
}

# A minimal /etc so that libc's user and host lookups behave.
put_etc() {
  local root="$1"
  mkdir -p "$root/etc" "$root/tmp" "$root/data"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
}

# Imports root $2 as image $1 with the given `docker import --change` lines.
import_image() {
  local image="$1" root="$2"
  shift 2
  local changes=()
  local change
  for change in "$@"; do changes+=(--change "$change"); done
  tar -C "$root" -c . | docker import "${changes[@]}" - "$image" >/dev/null
  echo "build-images: $image ($(du -sh "$root" | cut -f1))"
}

path_env='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

build_redis() {
  local root="$work/redis"
  local binary
  binary="$(readlink -f "$(command -v redis-server)")"
  put_etc "$root"
  # redis-server is a multi-call binary (a link to redis-check-rdb): it must be named
  # redis-server to act as the server.
  put "$root" "$binary" /usr/local/bin/redis-server
  put_libraries "$root" "$binary"
  import_image dlm-test/redis:local "$root" "$path_env" 'WORKDIR /data' 'CMD ["redis-server"]'
}

build_etcd() {
  local root="$work/etcd"
  local binary
  binary="$(readlink -f "$(command -v etcd)")"
  put_etc "$root"
  put "$root" "$binary" /usr/local/bin/etcd
  put_libraries "$root" "$binary"
  mkdir -p "$root/var/lib/etcd"
  import_image dlm-test/etcd:local "$root" "$path_env" 'WORKDIR /var/lib/etcd' \
    'CMD ["/usr/local/bin/etcd"]'
}

# The jars zookeeper.jar names in its manifest's Class-Path, transitively (Debian's jars list
# their dependencies there): the paths as named, so the Class-Path entries resolve in the image.
zookeeper_jars() {
  local queue=(/usr/share/java/zookeeper.jar) seen=' ' jar entry
  while [ ${#queue[@]} -gt 0 ]; do
    jar="${queue[0]}"
    queue=("${queue[@]:1}")
    [ -f "$jar" ] || continue
    case "$seen" in *" $jar "*) continue ;; esac
    seen="$seen$jar "
    echo "$jar"
    for entry in $(unzip -p "$jar" META-INF/MANIFEST.MF 2>/dev/null | tr -d '\r' |
      awk '/^Class-Path:/{f=1; sub(/^Class-Path: /, ""); printf "%s", $0; next}
           f && /^ /{sub(/^ /, ""); printf "%s", $0; next} {f=0}'); do
      queue+=("$entry")
    done
  done
}

build_zookeeper() {
  local root="$work/zookeeper"
  local java_home jar
  java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  put_etc "$root"
  mkdir -p "$root/conf" "$root/opt/java"
  # The JRE: with the JDK's jmods, jlink a runtime of just the modules ZooKeeper 3.8 and its
  # jars use (`jdeps --print-module-deps` over them, plus jdk.management for ZooKeeper's OS
  # metrics): about 75 MB instead of 260. Without jmods, copy the whole runtime.
  if [ -x "$java_home/bin/jlink" ] && [ -d "$java_home/jmods" ]; then
    "$java_home/bin/jlink" --module-path "$java_home/jmods" \
      --add-modules java.base,java.desktop,java.logging,java.management,java.management.rmi,java.naming,java.security.jgss,java.security.sasl,java.sql,java.xml,jdk.management,jdk.unsupported \
      --strip-debug --no-header-files --no-man-pages --output "$root/opt/java/openjdk"
  else
    mkdir -p "$root/opt/java/openjdk"
    (cd "$java_home" && tar -ch --exclude=lib/src.zip bin conf lib) |
      tar -C "$root/opt/java/openjdk" -x
  fi
  put_libraries "$root" "$root/opt/java/openjdk/bin/java" \
    $(find "$root/opt/java/openjdk" -name '*.so' -type f)
  if command -v unzip >/dev/null; then
    for jar in $(zookeeper_jars) /usr/share/java/slf4j-simple.jar; do
      if [ -f "$jar" ]; then put "$root" "$jar"; fi
    done
  else
    # Without unzip to read the manifests: every jar (about 50 MB), as the local process uses.
    mkdir -p "$root/usr/share/java"
    cp -L /usr/share/java/*.jar "$root/usr/share/java/"
  fi
  # A shell for the zkServer.sh stand-in.
  put "$root" "$(readlink -f /bin/sh)" /bin/sh
  put_libraries "$root" "$(readlink -f /bin/sh)"
  put "$root" "$here/zookeeper/zkServer.sh" /usr/local/bin/zkServer.sh
  chmod 755 "$root/usr/local/bin/zkServer.sh"
  import_image dlm-test/zookeeper:local "$root" \
    'ENV PATH=/opt/java/openjdk/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    'ENV ZOO_DATA_DIR=/data' 'WORKDIR /data' 'CMD ["zkServer.sh", "start-foreground", "/conf/zoo.cfg"]'
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(redis etcd zookeeper)
for target in "${targets[@]}"; do
  started=$(now_ms)
  case "$target" in
    redis) build_redis ;;
    etcd) build_etcd ;;
    zookeeper) build_zookeeper ;;
    *)
      echo "build-images: unknown image '$target' (redis, etcd, zookeeper)" >&2
      exit 2
      ;;
  esac
  echo "build-images: $target built in $(($(now_ms) - started)) ms"
done
