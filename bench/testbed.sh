#!/usr/bin/env bash
# Raw-mode (metadata digest) testbeds, BRIEF §5 / issue 6:
#   bench/testbed.sh up zram [--size 4G] [--mnt DIR]   ext4 on /dev/zram0 (lz4), the fast device
#   bench/testbed.sh up loop [--size 4G] [--mnt DIR]   ext4 on a loop device (direct I/O) over an
#                                                      image file on the virtio disk
#   bench/testbed.sh down [zram|loop]                  tear down (both by default); idempotent
#   bench/testbed.sh status
# `up` prints the mount point as its last stdout line:  MNT=$(bench/testbed.sh up zram)
# `up` on a testbed that is already up prints its mount point again. Needs root.
set -euo pipefail

STATE_DIR=/run/storefn-testbed
DEFAULT_SIZE=4G
# The loop image lives on the virtio disk (not tmpfs) so the loop device measures /dev/vda.
LOOP_IMAGE_DIR=/var/tmp

say() { echo "testbed: $*" >&2; }
die() { say "$*"; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "needs root (losetup, mkfs, mount, zram)"; }

state_file() { echo "$STATE_DIR/$1.env"; }

# Reads KIND's state into DEV, MNT, IMAGE; returns 1 when there is none.
load_state() {
    local f; f=$(state_file "$1")
    [ -f "$f" ] || return 1
    DEV=""; MNT=""; IMAGE=""
    # shellcheck disable=SC1090
    . "$f"
}

save_state() {
    mkdir -p "$STATE_DIR"
    printf 'DEV=%q\nMNT=%q\nIMAGE=%q\n' "$DEV" "$MNT" "$IMAGE" > "$(state_file "$1")"
}

is_mounted() { grep -qs " $(realpath -m "$1") " /proc/mounts; }

up() {
    local kind=$1; shift
    local size=$DEFAULT_SIZE mnt=""
    while [ $# -gt 0 ]; do
        case $1 in
        --size) size=${2:?--size needs a value}; shift 2 ;;
        --mnt) mnt=${2:?--mnt needs a value}; shift 2 ;;
        *) die "unknown option $1" ;;
        esac
    done
    need_root
    if load_state "$kind" && is_mounted "$MNT"; then
        say "$kind testbed already up on $DEV"
        echo "$MNT"
        return
    fi
    [ -n "$mnt" ] || mnt=/mnt/storefn-$kind
    is_mounted "$mnt" && die "$mnt is already a mount point (not ours)"
    DEV=""; MNT=$mnt; IMAGE=""
    case $kind in
    zram)
        [ -e /dev/zram0 ] || die "no /dev/zram0 on this kernel"
        [ "$(cat /sys/block/zram0/disksize)" = 0 ] || die "/dev/zram0 is in use (disksize != 0)"
        echo lz4 > /sys/block/zram0/comp_algorithm 2>/dev/null || say "lz4 unavailable, default algorithm"
        echo "$size" > /sys/block/zram0/disksize
        DEV=/dev/zram0
        save_state zram
        ;;
    loop)
        IMAGE=$LOOP_IMAGE_DIR/storefn-testbed-loop.img
        [ -e "$IMAGE" ] && die "$IMAGE exists: run '$0 down loop' first"
        truncate -s "$size" "$IMAGE"
        save_state loop
        DEV=$(losetup --find --show --direct-io=on "$IMAGE")
        save_state loop
        ;;
    *) die "unknown testbed '$kind' (zram|loop)" ;;
    esac
    mkfs.ext4 -q -F "$DEV"
    mkdir -p "$MNT"
    mount "$DEV" "$MNT"
    say "$kind: ext4 on $DEV ($size) mounted on $MNT"
    echo "$MNT"
}

down_one() {
    local kind=$1
    if ! load_state "$kind"; then
        say "$kind: nothing to tear down"
        return
    fi
    if [ -n "$MNT" ] && is_mounted "$MNT"; then
        umount "$MNT" || { say "umount $MNT busy; lazy unmount"; umount -l "$MNT"; }
    fi
    [ -n "$MNT" ] && rmdir "$MNT" 2>/dev/null || true
    case $kind in
    zram) echo 1 > /sys/block/zram0/reset ;;
    loop)
        if [ -n "$DEV" ] && losetup "$DEV" >/dev/null 2>&1; then losetup -d "$DEV"; fi
        [ -n "$IMAGE" ] && rm -f "$IMAGE"
        ;;
    esac
    rm -f "$(state_file "$kind")"
    say "$kind: torn down"
}

status() {
    local k
    for k in zram loop; do
        if load_state "$k"; then
            echo "$k: $DEV on $MNT $(is_mounted "$MNT" && echo mounted || echo NOT-mounted)"
        else
            echo "$k: down"
        fi
    done
}

case "${1:-}" in
up) [ $# -ge 2 ] || die "usage: $0 up zram|loop [--size 4G] [--mnt DIR]"; up "${@:2}" ;;
down)
    need_root
    if [ $# -ge 2 ]; then down_one "$2"; else down_one zram; down_one loop; fi
    ;;
status) status ;;
*) echo "usage: $0 up zram|loop [--size 4G] [--mnt DIR] | down [zram|loop] | status" >&2; exit 2 ;;
esac
