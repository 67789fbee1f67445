// SPDX-License-Identifier: GPL-2.0
//
// What Bessemer's BPF programs (offload.bpf.c, testbed.bpf.c) share: fixed-width types, the
// section macro, the XDP context, the helpers both call and the map definition layout that
// Bessemer's own loader (crates/drivers/src/bpf_elf.rs) reads. No kernel or libbpf headers:
// the values are the kernel's stable UAPI, so a build needs clang only.
#ifndef BESSEMER_BPF_H
#define BESSEMER_BPF_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))

// include/uapi/linux/bpf.h
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define XDP_DROP 1
#define XDP_PASS 2

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

// Helpers by number (the kernel's stable helper ids).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)51;

// A map definition in the legacy `maps` section layout (no BTF needed): type, key size,
// value size, entries, flags.
struct map_def {
	__u32 type;
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries;
	__u32 map_flags;
};

#endif
