#!/usr/bin/env bash
# Installs what dsec needs to build, run and test on Debian 12, as root.
# Idempotent: does nothing (and skips `apt-get update`) when all is present.
set -euo pipefail

packages=(
  meson ninja-build pkg-config g++ ccache
  libcaf-dev libboost-dev libboost-system-dev nlohmann-json3-dev libssl-dev
  libseccomp-dev libcap-dev catch2
  erofs-utils busybox-static git debootstrap iproute2 procps curl
  python3 python3-pytest python3-dev pybind11-dev python3-pybind11 btrfs-progs
  crun bubblewrap util-linux
  libfuse3-dev fuse3 # the lazy blob daemon (lazyfs/)
  libbpf-dev bpftool clang llvm liburing-dev libarchive-dev qemu-system-x86 nftables zstd
  e2fsprogs
  libcurl4-openssl-dev docker-registry skopeo apache2-utils # registry pulls and their e2e tests
  openssl python3-jwt python3-cryptography # the e2e registry helper: TLS certs, a Bearer token server
  nginx-light # object storage behind a redirecting registry (test/pylib/blob_storage.py, registry_bench --storage redirect)
  nodejs # the e2b SDK's e2e suite (test/e2e/test_e2b.py)
  dnsmasq-base # the DNS upstream of the egress tests (test/pylib/egress_peer.py)
  zlib1g-dev # gzip upload bodies of E2B's envd 0.6 (api/e2b_upload.cpp)
)
# npm: Debian's package, unless the installed nodejs brings its own (NodeSource's
# does, and Debian's npm would conflict with it).
command -v npm >/dev/null 2>&1 || packages+=(npm)

if [[ $(id -u) -ne 0 ]]; then
  echo "deps.sh: run as root (apt-get, mounts and cgroups need it)" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Packages with a service (docker-registry, nginx-light) must not start it:
  # tests and benches run their own on free ports. policy-rc.d says so to
  # invoke-rc.d during this install only, unless the host has its own.
  own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    own_policy=1
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
  fi
  installed=0
  apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" ||
    installed=$?
  if [[ -n $own_policy ]]; then rm -f /usr/sbin/policy-rc.d; fi
  if ((installed)); then exit "$installed"; fi
fi
