#!/usr/bin/env bash
# Builds dlm-test/node:local, a stand-in for the official node image on machines that can run
# Docker but cannot pull (like this project's CI): this machine's Node.js and npm, busybox as
# /bin/sh and the usual tools, CA certificates (npm fetches over HTTPS), and a user 1000 named
# node, all fed to `docker import` (the way tooling/test-services/docker/build-images.sh makes
# the service images).
# Needs: docker (a reachable engine), node and npm on PATH, busybox (Debian: busybox-static).
set -euo pipefail

image="${1:-dlm-test/node:local}"
work="$(mktemp -d "${TMPDIR:-/tmp}/dlm-node-base.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"

put() { mkdir -p "$root$(dirname "$2")" && cp -L "$1" "$root$2"; }

node_bin="$(readlink -f "$(command -v node)")"
npm_dir="$(dirname "$(readlink -f "$(command -v npm)")")/.."
npm_dir="$(cd "$npm_dir" && pwd)"
busybox_bin="$(command -v busybox)"

put "$node_bin" /usr/local/bin/node
for lib in $(ldd "$node_bin" | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}' | sort -u); do
  put "$lib" "$lib"
done
# The rest of glibc (librt, libresolv, the NSS modules…): pnpm's own binary and native addons
# need more of it than node does, as they would find in the official image.
for lib in $(dpkg -L libc6 | grep -E '/lib/x86_64-linux-gnu/[^/]+\.so[.0-9]*$'); do
  [ -e "$root$lib" ] || put "$lib" "$lib"
done
mkdir -p "$root/usr/local/lib/node_modules"
cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"

put "$busybox_bin" /bin/busybox
for applet in $("$busybox_bin" --list); do
  [ "$applet" = busybox ] || [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
# npm's and npx's scripts start with #!/usr/bin/env node.
mkdir -p "$root/usr/bin"
ln -s ../../bin/busybox "$root/usr/bin/env"

mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/root" "$root/home/node"
chmod 1777 "$root/tmp"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000:node:/home/node:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nnode:x:1000:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chown 1000:1000 "$root/home/node"

tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["node"]' - "$image" >/dev/null
echo "node-base: $image ($(du -sh "$root" | cut -f1))"
