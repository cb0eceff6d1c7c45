#!/usr/bin/env bash
# storefn's two set-up-from-nothing commands (README):
#   ./run.sh demo   build, create a small database, run every lookup path, print the comparison
#   ./run.sh test   format check, clippy, and every test
# Both install what they need first (Debian 12, as root or with sudo; Rust toolchain present).
set -euo pipefail
cd "$(dirname "$0")"

# Debian packages the build and tests need: clang for -target bpf, libbpf headers for
# <bpf/bpf_helpers.h>, the tools the file-system tests drive (mkfs.xfs, losetup, filefrag), and
# the TrueType font `storefn plot` draws text with (DejaVuSans.ttf; no fontconfig needed), and the
# real engines whose files storage functions read and whose own reads are the baselines: WiredTiger
# 3.2.1 (the `wt` tool and its C API), RocksDB 7.8.3 (`ldb`, `sst_dump` and its C API), and etcd
# 3.4 for the cluster's membership and placement; pkg-config, which the C API's tests build an
# example through (its storefn.pc); protoc, which the etcd client crate's build runs.
APT_PACKAGES=(clang-19 libbpf-dev linux-libc-dev xfsprogs e2fsprogs util-linux fonts-dejavu-core
    wiredtiger libwiredtiger-dev rocksdb-tools librocksdb-dev etcd-server etcd-client pkgconf
    protobuf-compiler)

need_install() {
    local p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || return 0
    done
    return 1
}

install_deps() {
    if need_install; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        echo "run.sh: installing ${APT_PACKAGES[*]}" >&2
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${APT_PACKAGES[@]}" >/dev/null
    fi
    command -v cargo >/dev/null || { echo "run.sh: cargo not found: install Rust (rustup)" >&2; exit 1; }
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
}

case "${1:-}" in
demo)
    install_deps
    cargo build --release -p storefn
    exec ./target/release/storefn demo "${@:2}"
    ;;
test)
    install_deps
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    exec cargo test --workspace
    ;;
*)
    echo "usage: ./run.sh demo|test" >&2
    exit 2
    ;;
esac
